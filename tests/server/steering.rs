//! Steering over real sockets against the real binary: where clients are located (ECS, source
//! address, overrides, IPv4-mapped), what each region is answered, the ECS scope sent back,
//! invalid ECS, nested and failover profiles, A/AAAA independence, CNAME chains, the `CH TXT`
//! decision trace, and agreement between the bundled geo database and MaxMind's test database.

use crate::common;
use crate::steering_common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, RecordType};
use steering_common::*;

/// Example networks, one per region: (ECS subnet, region, regional anycast index, the prefix
/// length that locates it: the database network, or the override for na-west).
const REGION_CLIENTS: [(&str, &str, u8, u8); 8] = [
    ("81.2.69.0/24", "eu-west", 4, 24),
    ("89.160.20.112/28", "eu-north", 5, 28),
    ("216.160.83.56/29", "na-east", 1, 29),
    ("202.196.224.0/20", "ap-south", 8, 20),
    ("2001:218::/32", "ap-east", 7, 32),
    ("2a02:e700::/29", "af-south", 6, 29),
    // LACNIC space (177.0.0.0/8, continent SA, no country).
    ("177.20.30.0/24", "sa-east", 3, 8),
    (NA_WEST_OVERRIDE, "na-west", 2, 15),
];

/// The app gateway (`appgw` geo profile) each region is answered with.
fn gateway_of(region: &str) -> Ipv4Addr {
    match region {
        // af-south has no gateway of its own: its first neighbour, eu-west, serves it.
        "eu-west" | "eu-north" | "af-south" => Ipv4Addr::new(203, 0, 113, 10),
        "na-east" | "na-west" | "sa-east" => Ipv4Addr::new(203, 0, 113, 20),
        "ap-east" | "ap-south" => Ipv4Addr::new(203, 0, 113, 30),
        other => panic!("no gateway listed for {other}"),
    }
}

/// The example with every region forced to its regional anycast, and na-west reachable.
fn forced_regional() -> (Setup, Server) {
    let setup = Setup::new(&na_west_override(), &force_all("regional"));
    let server = setup.start(&[]);
    (setup, server)
}

const EDGE: &str = "contoso.edge.example.net.";

#[test]
fn each_region_gets_its_regional_anycast_when_forced() {
    let (_setup, server) = forced_regional();
    let client = Exchanger::new(&server);
    for (subnet, region, n, _) in REGION_CLIENTS {
        let r = client.one(&ecs_query(EDGE, RecordType::A, subnet));
        assert_noerror(&r, subnet);
        assert_eq!(a_records(&r), vec![regional_v4(n)], "{subnet} ({region})");
        let r = client.one(&ecs_query(EDGE, RecordType::AAAA, subnet));
        assert_noerror(&r, subnet);
        assert_eq!(
            aaaa_records(&r),
            vec![regional_v6(n)],
            "{subnet} ({region})"
        );
    }
}

#[test]
fn forced_fallback_answers_the_fallback_site() {
    let setup = Setup::new(&na_west_override(), &force_all("fallback:fb-eu"));
    let server = setup.start(&[]);
    let client = Exchanger::new(&server);
    for (subnet, region, _, _) in REGION_CLIENTS {
        let r = client.one(&ecs_query(EDGE, RecordType::A, subnet));
        assert_eq!(
            a_records(&r),
            vec![Ipv4Addr::new(203, 0, 113, 2)],
            "{subnet} ({region})"
        );
        let r = client.one(&ecs_query(EDGE, RecordType::AAAA, subnet));
        assert_eq!(
            aaaa_records(&r),
            vec!["2001:db8:fb::2".parse::<Ipv6Addr>().expect("v6")],
            "{subnet} ({region})"
        );
    }
}

#[test]
fn drained_region_goes_to_its_first_usable_neighbour() {
    let eu_west = "81.2.69.0/24";
    let na_east = "216.160.83.56/29";

    // eu-west's neighbours are eu-north, then na-east.
    let setup = Setup::new("", "[regions.eu-west]\ndrain = true\n");
    let server = setup.start(&[]);
    let client = Exchanger::new(&server);
    let r = client.one(&ecs_query(EDGE, RecordType::A, eu_west));
    assert_eq!(a_records(&r), vec![regional_v4(5)], "eu-west → eu-north");
    let r = client.one(&ecs_query(EDGE, RecordType::AAAA, eu_west));
    assert_eq!(aaaa_records(&r), vec![regional_v6(5)], "eu-west → eu-north");
    let r = client.one(&ecs_query(EDGE, RecordType::A, na_east));
    assert_eq!(
        a_records(&r),
        vec![GLOBAL_V4],
        "undrained regions stay global"
    );
    drop(server);

    // With eu-north drained too, eu-west's clients skip it.
    setup.write_control("[regions.eu-west]\ndrain = true\n[regions.eu-north]\ndrain = true\n");
    let server = setup.start(&[]);
    let client = Exchanger::new(&server);
    let r = client.one(&ecs_query(EDGE, RecordType::A, eu_west));
    assert_eq!(a_records(&r), vec![regional_v4(1)], "eu-west → na-east");
    let r = client.one(&ecs_query(EDGE, RecordType::A, "89.160.20.112/28"));
    // eu-north's neighbours: eu-west (drained), then na-east.
    assert_eq!(a_records(&r), vec![regional_v4(1)], "eu-north → na-east");
}

#[test]
fn ecs_scope_is_the_prefix_that_located_the_client() {
    let (_setup, server) = forced_regional();
    let client = Exchanger::new(&server);
    for (subnet, region, _, located_by) in REGION_CLIENTS {
        let r = client.one(&ecs_query(EDGE, RecordType::A, subnet));
        let (source, scope, addr) = ecs_of(&r).unwrap_or_else(|| panic!("no ECS for {subnet}"));
        let (sent_addr, sent_prefix) = steering_common::subnet(subnet);
        assert_eq!((source, addr), (sent_prefix, sent_addr), "echo of {subnet}");
        assert_eq!(scope, located_by, "{subnet} ({region})");
    }
    // A static name does not depend on the client, wherever it is.
    for (subnet, _, _, _) in REGION_CLIENTS {
        let r = client.one(&ecs_query("ns1.edge.example.net.", RecordType::A, subnet));
        assert_eq!(a_records(&r), vec![Ipv4Addr::new(192, 0, 2, 53)]);
        assert_eq!(scope(&r), 0, "static answer for {subnet}");
    }
}

#[test]
fn ecs_scope_is_zero_or_hash_prefix_when_location_does_not_decide() {
    let server = example_server();
    let client = Exchanger::new(&server);
    for (subnet, _, _, _) in REGION_CLIENTS {
        // No region forced, drained or shed: everyone gets the global anycast.
        let r = client.one(&ecs_query(EDGE, RecordType::A, subnet));
        assert_eq!(a_records(&r), vec![GLOBAL_V4], "{subnet}");
        assert_eq!(scope(&r), 0, "anycast with nothing forced, {subnet}");
        // One servable endpoint (frontdoor): no hash, no location.
        let r = client.one(&ecs_query("critical.example.com.", RecordType::A, subnet));
        assert_eq!(
            scope(&r),
            0,
            "critical with one servable endpoint, {subnet}"
        );
        // 90/10 split: a subnet hash chose, so the scope widens to the hashed prefix.
        let r = client.one(&ecs_query("warm.example.com.", RecordType::A, subnet));
        let hashed = if subnet.contains(':') { 56 } else { 24 };
        assert_eq!(scope(&r), hashed, "warm (subnet hash), {subnet}");
        // Geo profile: the locating prefix.
        let r = client.one(&ecs_query("gw.example.com.", RecordType::A, subnet));
        assert!(scope(&r) > 0, "gw depends on location, {subnet}");
    }
    // A subnet shorter than the hash prefix still gets the hash prefix as scope.
    let r = client.one(&ecs_query(
        "warm.example.com.",
        RecordType::A,
        "81.2.0.0/16",
    ));
    assert_eq!(scope(&r), 24);
    let r = client.one(&ecs_query(
        "ns1.edge.example.net.",
        RecordType::AAAA,
        "2001:218::/32",
    ));
    assert_eq!(scope(&r), 0, "static AAAA");
}

#[test]
fn source_address_locates_clients_without_ecs() {
    // 127.0.0.1 is in no database network: the default region, na-east.
    let (_setup, server) = forced_regional();
    let client = Exchanger::new(&server);
    let na_east = vec![regional_v4(1)];
    assert_eq!(a_records(&client.one(&query(EDGE, RecordType::A))), na_east);
    assert_eq!(
        a_records(&client.one(&edns_query(EDGE, RecordType::A))),
        na_east
    );
    let r = client.one(&ecs_query(EDGE, RecordType::A, "0.0.0.0/0"));
    assert_noerror(&r, "ECS /0");
    assert_eq!(a_records(&r), na_east, "ECS /0: the source address decides");
    drop(server);

    // An override for the source network beats the database (and the default).
    let extra = format!(
        "{}{}",
        na_west_override(),
        geo_override("127.0.0.0/8", "eu-west")
    );
    let setup = Setup::new(&extra, &force_all("regional"));
    let server = setup.start(&[]);
    let client = Exchanger::new(&server);
    let eu_west = vec![regional_v4(4)];
    assert_eq!(a_records(&client.one(&query(EDGE, RecordType::A))), eu_west);
    let r = client.one(&ecs_query(EDGE, RecordType::A, "0.0.0.0/0"));
    assert_eq!(a_records(&r), eu_west, "ECS /0 falls back to the source");
    let r = client.one(&ecs_query(EDGE, RecordType::A, "::/0"));
    assert_eq!(
        a_records(&r),
        eu_west,
        "IPv6 ECS /0 falls back to the source"
    );
    // A real ECS subnet wins over the source address.
    let r = client.one(&ecs_query(EDGE, RecordType::A, "216.160.83.56/29"));
    assert_eq!(a_records(&r), vec![regional_v4(1)], "ECS decides");
    let trace = chaos_trace(&client, "www.edge.example.net.");
    assert!(trace.contains("via source address"), "{trace}");
    assert!(trace.contains("region eu-west (override)"), "{trace}");
}

#[test]
fn unlocated_addresses_go_to_the_default_region() {
    let (_setup, server) = forced_regional();
    let client = Exchanger::new(&server);
    // 10/8: no database data; 214.1.1.0/24: a record without country or continent;
    // 2001:db8::/32: no data in the IPv6 tree.
    for subnet in ["10.1.1.0/24", "214.1.1.0/24", "2001:db8:1234::/48"] {
        let r = client.one(&ecs_query(EDGE, RecordType::A, subnet));
        assert_eq!(a_records(&r), vec![regional_v4(1)], "{subnet} → na-east");
        let r = client.one(&ecs_query("gw.example.com.", RecordType::A, subnet));
        assert_eq!(a_records(&r), vec![gateway_of("na-east")], "{subnet}");
    }
    // The scope still says how far the answer holds: the record's own network for
    // 214.1.1.0/24, the empty database node around 10/8 (never wider than what is empty).
    let r = client.one(&ecs_query(EDGE, RecordType::A, "214.1.1.0/24"));
    assert_eq!(scope(&r), 24);
    let r = client.one(&ecs_query(EDGE, RecordType::A, "10.1.1.0/24"));
    let s = scope(&r);
    assert!(s > 0 && s <= 8, "scope {s} for 10.1.1.0/24");
}

#[test]
fn v4_mapped_ecs_over_ipv6_is_located_as_ipv4() {
    let setup = Setup::new(&na_west_override(), &force_all("regional"));
    let server = setup.start(&["--listen", "[::1]:0"]);
    assert!(server.addr.is_ipv6(), "listening on {}", server.addr);
    let client = Exchanger::new(&server);
    let mapped = "::ffff:81.2.69.0/120";
    let r = client.one(&ecs_query(EDGE, RecordType::A, mapped));
    assert_noerror(&r, mapped);
    assert_eq!(a_records(&r), vec![regional_v4(4)], "eu-west");
    let r = client.one(&ecs_query("gw.example.com.", RecordType::A, mapped));
    assert_eq!(a_records(&r), vec![gateway_of("eu-west")]);
    let (source, _, addr) = ecs_of(&r).expect("ECS echoed");
    let (sent_addr, sent_prefix) = steering_common::subnet(mapped);
    assert_eq!(
        (source, addr),
        (sent_prefix, sent_addr),
        "ECS echoed as sent"
    );
    // Without ECS the IPv6 source (::1, unknown) decides: the default region.
    let r = client.one(&query(EDGE, RecordType::A));
    assert_eq!(a_records(&r), vec![regional_v4(1)], "::1 → na-east");
}

/// The scope is a prefix length of the option's own family: an IPv4-mapped subnet located by
/// its /24 holds for ::ffff:81.2.69.0/120, not for ::/24.
#[test]
fn v4_mapped_ecs_scope_is_in_the_option_family() {
    let setup = Setup::new(&na_west_override(), &force_all("regional"));
    let server = setup.start(&["--listen", "[::1]:0"]);
    let client = Exchanger::new(&server);
    let r = client.one(&ecs_query(EDGE, RecordType::A, "::ffff:81.2.69.0/120"));
    assert_eq!(scope(&r), 96 + 24, "located by 81.2.69.0/24");
    let r = client.one(&ecs_query(
        "warm.example.com.",
        RecordType::A,
        "::ffff:81.2.69.0/120",
    ));
    let s = scope(&r);
    assert!(
        s >= 96 + 24,
        "a subnet hash over the IPv4 /24 holds for the mapped /120 only, got {s}"
    );
}

/// A query for `name` A with an OPT record carrying one raw ECS option body.
fn raw_ecs_query(id: u16, name: &str, ecs_body: &[u8]) -> Vec<u8> {
    let mut p = id.to_be_bytes().to_vec();
    p.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 1]);
    for label in name.trim_end_matches('.').split('.') {
        p.push(label.len() as u8);
        p.extend_from_slice(label.as_bytes());
    }
    p.push(0);
    p.extend_from_slice(&1u16.to_be_bytes()); // A
    p.extend_from_slice(&1u16.to_be_bytes()); // IN
    p.push(0); // root owner
    p.extend_from_slice(&41u16.to_be_bytes()); // OPT
    p.extend_from_slice(&1232u16.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]);
    p.extend_from_slice(&((4 + ecs_body.len()) as u16).to_be_bytes());
    p.extend_from_slice(&8u16.to_be_bytes()); // CLIENT-SUBNET
    p.extend_from_slice(&(ecs_body.len() as u16).to_be_bytes());
    p.extend_from_slice(ecs_body);
    p
}

#[test]
fn invalid_ecs_is_formerr() {
    let server = example_server();
    let client = Exchanger::new(&server);
    // The well-formed baseline, built the same way.
    let good = raw_ecs_query(0x1001, "gw.example.com.", &[0, 1, 24, 0, 81, 2, 69]);
    let r = Message::from_vec(&client.raw(&good)).expect("parse");
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert_eq!(scope(&r), 24);

    let cases: [(&str, &[u8]); 8] = [
        ("/24 with four address octets", &[0, 1, 24, 0, 81, 2, 69, 0]),
        ("/24 with two address octets", &[0, 1, 24, 0, 81, 2]),
        ("scope prefix set in a query", &[0, 1, 24, 16, 81, 2, 69]),
        (
            "IPv4 prefix longer than 32",
            &[0, 1, 33, 0, 81, 2, 69, 0, 0],
        ),
        (
            "IPv6 prefix longer than 128",
            &[
                0, 2, 129, 0, 32, 1, 2, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ],
        ),
        ("unknown family", &[0, 3, 8, 0, 81]),
        ("bits set beyond the prefix", &[0, 1, 20, 0, 81, 2, 69]),
        ("option shorter than its header", &[0, 1, 24]),
    ];
    for (i, (what, body)) in cases.iter().enumerate() {
        let id = 0x2000 + i as u16;
        let raw = client.raw(&raw_ecs_query(id, "gw.example.com.", body));
        let r = Message::from_vec(&raw).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(r.metadata.id, id, "{what}");
        assert_eq!(r.metadata.response_code, ResponseCode::FormErr, "{what}");
        assert!(r.answers.is_empty(), "{what}");
    }
}

#[test]
fn nested_appgw_profile_answers_the_regions_gateway() {
    let control = "[profiles.critical.endpoints]\n\
                   frontdoor = { weight = 0 }\n\
                   alt-cdn = { weight = 0 }\n\
                   appgw = { weight = 100 }\n";
    let setup = Setup::new(&na_west_override(), control);
    let server = setup.start(&[]);
    let client = Exchanger::new(&server);
    for (subnet, region, _, located_by) in REGION_CLIENTS {
        let r = client.one(&ecs_query("critical.example.com.", RecordType::A, subnet));
        assert_noerror(&r, subnet);
        assert!(cnames(&r).is_empty(), "no CNAME via appgw: {r:?}");
        assert_eq!(
            a_records(&r),
            vec![gateway_of(region)],
            "{subnet} ({region})"
        );
        assert_eq!(r.answers[0].name.to_ascii(), "critical.example.com.");
        assert_eq!(r.answers[0].ttl, 60);
        assert_eq!(scope(&r), located_by, "geo decided: {subnet}");
    }
}

#[test]
fn geo_profile_answers_per_region() {
    let setup = Setup::new(&na_west_override(), "");
    let server = setup.start(&[]);
    let client = Exchanger::new(&server);
    for (subnet, region, _, located_by) in REGION_CLIENTS {
        let r = client.one(&ecs_query("gw.example.com.", RecordType::A, subnet));
        assert_noerror(&r, subnet);
        assert_eq!(
            a_records(&r),
            vec![gateway_of(region)],
            "{subnet} ({region})"
        );
        assert_eq!(scope(&r), located_by, "{subnet}");
    }
}

const FAILOVER_PROFILE: &str = r#"
[profiles.fo]
type = "failover"
ttl = 30

[[profiles.fo.endpoints]]
name = "primary"
addresses = ["192.0.2.201", "2001:db8::201"]

[[profiles.fo.endpoints]]
name = "secondary"
addresses = ["192.0.2.202", "2001:db8::202"]

[[steered]]
name = "fo.example.com."
profile = "fo"
"#;

#[test]
fn failover_moves_to_the_next_enabled_endpoint() {
    let fo = "fo.example.com.";
    let setup = Setup::new(FAILOVER_PROFILE, "");
    let server = setup.start(&[]);
    let client = Exchanger::new(&server);
    let r = client.one(&ecs_query(fo, RecordType::A, "81.2.69.0/24"));
    assert_eq!(a_records(&r), vec![Ipv4Addr::new(192, 0, 2, 201)]);
    assert_eq!(r.answers[0].ttl, 30);
    assert_eq!(scope(&r), 0, "failover does not depend on the client");
    let r = client.one(&ecs_query(fo, RecordType::AAAA, "2001:218::/32"));
    assert_eq!(
        aaaa_records(&r),
        vec!["2001:db8::201".parse::<Ipv6Addr>().expect("v6")]
    );
    drop(server);

    setup.write_control("[profiles.fo.endpoints]\nprimary = { enabled = false }\n");
    let server = setup.start(&[]);
    let client = Exchanger::new(&server);
    for subnet in ["81.2.69.0/24", "2001:218::/32", "10.0.0.0/8"] {
        let r = client.one(&ecs_query(fo, RecordType::A, subnet));
        assert_eq!(
            a_records(&r),
            vec![Ipv4Addr::new(192, 0, 2, 202)],
            "{subnet}"
        );
        let r = client.one(&ecs_query(fo, RecordType::AAAA, subnet));
        assert_eq!(
            aaaa_records(&r),
            vec!["2001:db8::202".parse::<Ipv6Addr>().expect("v6")],
            "{subnet}"
        );
    }
    let r = client.one(&query(fo, RecordType::A));
    assert_eq!(a_records(&r), vec![Ipv4Addr::new(192, 0, 2, 202)], "no ECS");
}

#[test]
fn a_and_aaaa_are_steered_independently() {
    let server = example_server();
    let client = Exchanger::new(&server);
    let eu = "81.2.69.0/24";
    let r = client.one(&ecs_query("gw.example.com.", RecordType::A, eu));
    assert_eq!(a_records(&r), vec![gateway_of("eu-west")]);
    // The gateways are IPv4-only: AAAA is NODATA, not an error and not an A record.
    let r = client.one(&ecs_query("gw.example.com.", RecordType::AAAA, eu));
    assert_noerror(&r, "gw AAAA");
    assert!(r.metadata.authoritative, "{r:?}");
    assert!(r.answers.is_empty(), "NODATA: {r:?}");
    let soa: Vec<_> = r
        .authorities
        .iter()
        .filter(|rec| rec.record_type() == RecordType::SOA)
        .collect();
    assert_eq!(soa.len(), 1, "SOA in authority: {r:?}");
    assert_eq!(soa[0].name.to_ascii(), "example.com.");

    let r = client.one(&ecs_query(EDGE, RecordType::AAAA, eu));
    assert_eq!(aaaa_records(&r), vec![GLOBAL_V6]);
    assert!(a_records(&r).is_empty());
    let r = client.one(&ecs_query(EDGE, RecordType::A, eu));
    assert_eq!(a_records(&r), vec![GLOBAL_V4]);
    assert!(aaaa_records(&r).is_empty());
}

#[test]
fn cname_chains_run_through_steering() {
    let server = example_server();
    let client = Exchanger::new(&server);
    let r = client.one(&query("www.example.com.", RecordType::A));
    assert_eq!(answer_types(&r), vec![RecordType::CNAME, RecordType::A]);
    assert_eq!(cnames(&r), vec![("www.example.com.".into(), EDGE.into())]);
    assert_eq!(r.answers[1].name.to_ascii(), EDGE);
    assert_eq!(a_records(&r), vec![GLOBAL_V4]);

    let r = client.one(&ecs_query(
        "critical.example.com.",
        RecordType::A,
        "81.2.69.0/24",
    ));
    assert_eq!(answer_types(&r), vec![RecordType::CNAME, RecordType::A]);
    assert_eq!(
        cnames(&r),
        vec![(
            "critical.example.com.".into(),
            "critical.edge.example.net.".into()
        )]
    );
    assert_eq!(r.answers[1].name.to_ascii(), "critical.edge.example.net.");
    assert_eq!(a_records(&r), vec![GLOBAL_V4]);
    let r = client.one(&query("critical.example.com.", RecordType::AAAA));
    assert_eq!(answer_types(&r), vec![RecordType::CNAME, RecordType::AAAA]);
    assert_eq!(aaaa_records(&r), vec![GLOBAL_V6]);
    drop(server);

    // The steered target at the end of a static CNAME is steered for the ECS client.
    let (_setup, server) = forced_regional();
    let client = Exchanger::new(&server);
    let r = client.one(&ecs_query(
        "www.example.com.",
        RecordType::A,
        "81.2.69.0/24",
    ));
    assert_eq!(cnames(&r), vec![("www.example.com.".into(), EDGE.into())]);
    assert_eq!(a_records(&r), vec![regional_v4(4)]);
    assert_eq!(scope(&r), 24);
    let r = client.one(&ecs_query(
        "critical.example.com.",
        RecordType::AAAA,
        "2001:218::/32",
    ));
    assert_eq!(
        first_cname(&r).as_deref(),
        Some("critical.edge.example.net.")
    );
    assert_eq!(aaaa_records(&r), vec![regional_v6(7)]);
    assert_eq!(scope(&r), 32);
}

/// `dig CH TXT <name>` as our own query: the joined text of the TXT answer.
fn chaos_trace(client: &Exchanger, qname: &str) -> String {
    chaos_trace_with(client, qname, None)
}

fn chaos_trace_with(client: &Exchanger, qname: &str, ecs: Option<&str>) -> String {
    let mut message = match ecs {
        Some(subnet) => ecs_query(qname, RecordType::TXT, subnet),
        None => query(qname, RecordType::TXT),
    };
    message.queries = vec![{
        let mut q = Query::query(name(qname), RecordType::TXT);
        q.set_query_class(DNSClass::CH);
        q
    }];
    let r = client.one(&message);
    assert_noerror(&r, "CH TXT trace");
    trace_text(&r)
}

/// The TXT text dig prints for a CH TXT query, with its character strings joined.
fn dig_trace(server: &Server, qname: &str, subnet: &str) -> String {
    let out = dig(
        server,
        &["CH", "TXT", qname, &format!("+subnet={subnet}"), "+short"],
    );
    let line = out.trim();
    assert!(
        line.starts_with('"') && line.ends_with('"'),
        "dig printed:\n{out}"
    );
    line[1..line.len() - 1].replace("\" \"", "")
}

#[test]
fn chaos_trace_explains_the_decision() {
    let server = example_server();
    let trace = dig_trace(&server, "critical.example.com", "81.2.69.0/24");
    for part in [
        "via ecs 81.2.69.0/24",
        "region eu-west (database)",
        "country GB",
        "name critical.example.com.",
        "profile critical[weighted]",
        "endpoint frontdoor",
        "answer CNAME critical.edge.example.net.",
        "ttl 60",
    ] {
        assert!(trace.contains(part), "{part:?} missing from {trace:?}");
    }
    let trace = dig_trace(&server, "contoso.edge.example.net", "216.160.83.56/29");
    for part in [
        "via ecs 216.160.83.56/29",
        "region na-east",
        "anycast",
        "answer 192.0.2.1 2001:db8::1",
        "scope 0",
    ] {
        assert!(trace.contains(part), "{part:?} missing from {trace:?}");
    }
    // The same through our own query, for a weighted choice by hash.
    let client = Exchanger::new(&server);
    let trace = chaos_trace_with(&client, "warm.example.com.", Some("202.196.224.0/20"));
    assert!(trace.contains("region ap-south"), "{trace}");
    assert!(trace.contains("subnet hash"), "{trace}");
    assert!(trace.contains("scope 24"), "{trace}");
    let answer = client.one(&ecs_query(
        "warm.example.com.",
        RecordType::A,
        "202.196.224.0/20",
    ));
    let target = first_cname(&answer).expect("warm answers a CNAME");
    assert!(
        trace.contains(&format!("answer CNAME {target}")),
        "trace and answer agree: {trace} vs {target}"
    );
}

/// Demo lines that locate to the same country in both databases. Not 81.2.69.0/24: MaxMind's
/// test database has no data for 81.2.69.0/25 (only smaller GB networks further up), so
/// 81.2.69.0 lands in the default region there; 81.2.69.160/27 is GB in both.
const DEMO_LINES: [(&str, &str); 6] = [
    ("81.2.69.160/27", "eu-west"),
    ("216.160.83.56/29", "na-east"),
    ("89.160.20.112/28", "eu-north"),
    ("202.196.224.0/20", "ap-south"),
    ("2001:218::/32", "ap-east"),
    ("2a02:e700::/29", "af-south"),
];

#[test]
fn demo_lines_agree_with_maxmind_test_database() {
    let bundled = Setup::new("", &force_all("regional"));
    let maxmind = Setup::with_database(
        &repo_path("tests/fixtures/geoip/GeoIP2-Country-Test.mmdb"),
        "",
        &force_all("regional"),
    );
    let bundled_server = bundled.start(&[]);
    let maxmind_server = maxmind.start(&[]);
    let ours = Exchanger::new(&bundled_server);
    let theirs = Exchanger::new(&maxmind_server);
    for (subnet, region) in DEMO_LINES {
        let n = REGIONS
            .iter()
            .find(|(r, _)| *r == region)
            .map(|(_, n)| *n)
            .expect("region");
        for (qname, expected) in [
            ("gw.example.com.", IpAddr::V4(gateway_of(region))),
            (EDGE, IpAddr::V4(regional_v4(n))),
        ] {
            let q = ecs_query(qname, RecordType::A, subnet);
            let a = a_records(&ours.one(&q));
            let b = a_records(&theirs.one(&q));
            assert_eq!(a, b, "{qname} for {subnet}: bundled vs MaxMind");
            assert_eq!(
                a.iter().map(|v4| IpAddr::V4(*v4)).collect::<Vec<_>>(),
                vec![expected],
                "{qname} for {subnet} ({region})"
            );
        }
    }
}
