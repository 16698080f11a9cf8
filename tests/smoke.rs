mod common;
use common::*;
use hickory_proto::rr::RecordType;

#[test]
fn serves_soa_over_udp_and_tcp() {
    let server = Server::start(&["--zones", "zones"]);
    let r = server.udp(&query("example.com.", RecordType::SOA));
    assert!(r.metadata.authoritative);
    assert_eq!(r.answers.len(), 1);
    let r = server.tcp(&query("example.com.", RecordType::SOA));
    assert_eq!(r.answers.len(), 1);
}
