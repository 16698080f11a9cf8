//! The control tests' query load (the shared [`super::common::load`]): a few sockets, each
//! keeping [`IN_FLIGHT_PER_SOCKET`] queries in flight, every reply matched by id and tallied by
//! rcode. A query unanswered for [`QUERY_TIMEOUT`] counts as lost.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::rr::RecordType;

#[allow(unused_imports)]
pub use super::common::load::{by_rcode, Counts, Load, Pace, Spec};
use super::{distinct_subnets, ecs_query, EU_WEST_SUBNET};

/// Queries in flight per socket.
pub const IN_FLIGHT_PER_SOCKET: usize = 25;
/// A query unanswered this long is lost.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// Encoded queries to cycle through: steered names with many ECS subnets (weighted answers
/// change with the reloads) and static zone data. The id (first two bytes) is patched per send.
pub fn query_templates() -> Vec<Vec<u8>> {
    let mut templates = Vec::new();
    for subnet in distinct_subnets(200) {
        for name in ["warm.example.com.", "critical.example.com."] {
            let query = ecs_query(name, RecordType::A, &subnet);
            templates.push(query.to_vec().expect("encode"));
        }
    }
    for (name, rtype) in [
        ("contoso.edge.example.net.", RecordType::A),
        ("contoso.edge.example.net.", RecordType::AAAA),
        ("mail.example.com.", RecordType::A),
        ("www.example.com.", RecordType::A),
    ] {
        let query = ecs_query(name, rtype, EU_WEST_SUBNET);
        templates.push(query.to_vec().expect("encode"));
    }
    templates
}

/// The control tests' load: `sockets` sockets of [`IN_FLIGHT_PER_SOCKET`] queries in flight
/// against `server`, cycling through [`query_templates`], judged by rcode.
pub fn control_load(server: SocketAddr, sockets: usize) -> Load {
    Load::start(
        server,
        Spec {
            sockets,
            pace: Pace::InFlight(IN_FLIGHT_PER_SOCKET),
            queries: query_templates(),
            check: by_rcode,
            lost_after: QUERY_TIMEOUT,
        },
    )
}
