//! End-to-end tests of the answer engine (issue 2) over real UDP sockets: AA, REFUSED, zone
//! selection, negative answers, CNAMEs, wildcards, delegations, ANY, additional-section
//! processing, and `steerdns check` on good and broken zones.

use crate::common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{Name, RData, Record, RecordType};

/// A scratch directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "steerdns-answers-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    /// Copies every bundled zone file into this directory.
    fn with_bundled_zones(self) -> TempDir {
        for entry in std::fs::read_dir(repo_path("zones")).expect("zones dir") {
            let path = entry.expect("zone entry").path();
            if path.extension().is_some_and(|e| e == "zone") {
                let target = self.0.join(path.file_name().expect("file name"));
                std::fs::copy(&path, target).expect("copy zone");
            }
        }
        self
    }

    fn write(&self, file: &str, text: &str) {
        std::fs::write(self.0.join(file), text).expect("write file");
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The bundled zones with built-in defaults: run from `zones/`, where no `steerdns.toml` is, so
/// that policies configured for the example deployment cannot change these answers.
fn name(text: &str) -> Name {
    Name::from_ascii(text).expect("name")
}

fn ask(server: &Server, qname: &str, qtype: RecordType) -> Message {
    let q = query(qname, qtype);
    let r = server.udp(&q);
    assert_eq!(
        r.metadata.id, q.metadata.id,
        "id echoed for {qname} {qtype}"
    );
    assert_eq!(r.queries.len(), 1, "question echoed for {qname} {qtype}");
    assert_eq!(r.queries[0].name(), &name(qname));
    assert_eq!(r.queries[0].query_type(), qtype);
    r
}

fn types(records: &[Record]) -> Vec<RecordType> {
    records.iter().map(Record::record_type).collect()
}

fn v4(records: &[Record]) -> Vec<Ipv4Addr> {
    records
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

fn v6(records: &[Record]) -> Vec<Ipv6Addr> {
    records
        .iter()
        .filter_map(|r| match &r.data {
            RData::AAAA(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

fn cname_target(record: &Record) -> Name {
    match &record.data {
        RData::CNAME(c) => c.0.clone(),
        other => panic!("expected a CNAME, got {other:?}"),
    }
}

fn soa(record: &Record) -> &SOA {
    match &record.data {
        RData::SOA(s) => s,
        other => panic!("expected an SOA, got {other:?}"),
    }
}

fn txt_strings(record: &Record) -> Vec<Vec<u8>> {
    match &record.data {
        RData::TXT(t) => t.txt_data.iter().map(|s| s.to_vec()).collect(),
        other => panic!("expected a TXT, got {other:?}"),
    }
}

/// The negative-caching TTL RFC 2308 §3 asks for: min(SOA TTL, SOA MINIMUM), read off the wire.
fn negative_ttl(server: &Server, apex: &str) -> u32 {
    let r = ask(server, apex, RecordType::SOA);
    assert_eq!(r.answers.len(), 1, "one SOA at {apex}");
    let record = &r.answers[0];
    record.ttl.min(soa(record).minimum)
}

/// A negative answer: `rcode`, AA, empty answer (unless `answers` > 0 for a CNAME prefix),
/// exactly the zone's SOA in authority with the negative TTL, nothing in additional.
fn assert_negative(r: &Message, rcode: ResponseCode, apex: &str, ttl: u32, answers: usize) {
    assert_eq!(r.metadata.response_code, rcode, "{r:?}");
    assert!(
        r.metadata.authoritative,
        "negative answers are authoritative: {r:?}"
    );
    assert!(!r.metadata.truncation);
    assert_eq!(r.answers.len(), answers, "{r:?}");
    assert_eq!(types(&r.authorities), vec![RecordType::SOA], "{r:?}");
    assert_eq!(r.authorities[0].name, name(apex));
    assert_eq!(r.authorities[0].ttl, ttl, "negative TTL for {apex}");
    assert!(r.additionals.is_empty(), "{r:?}");
}

fn assert_nodata(server: &Server, qname: &str, qtype: RecordType, apex: &str, ttl: u32) {
    let r = ask(server, qname, qtype);
    assert_negative(&r, ResponseCode::NoError, apex, ttl, 0);
}

// --- AA, REFUSED, zone selection ---

#[test]
fn authoritative_answers_set_aa() {
    let server = Server::bundled();
    let r = ask(&server, "mail.example.com.", RecordType::A);
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert!(r.metadata.authoritative);
    assert!(r.metadata.message_type == hickory_proto::op::MessageType::Response);
    assert_eq!(v4(&r.answers), vec![Ipv4Addr::new(192, 0, 2, 25)]);
    assert_eq!(r.answers[0].name, name("mail.example.com."));
    assert_eq!(r.answers[0].ttl, 3600, "$TTL 3600 of example.com");

    let r = ask(&server, "ns1.edge.example.net.", RecordType::AAAA);
    assert!(r.metadata.authoritative);
    assert_eq!(
        v6(&r.answers),
        vec!["2001:db8::53".parse::<Ipv6Addr>().unwrap()]
    );
    assert_eq!(r.answers[0].ttl, 300, "$TTL 300 of edge.example.net");

    let r = ask(&server, "example.com.", RecordType::SOA);
    assert!(r.metadata.authoritative);
    assert_eq!(soa(&r.answers[0]).serial, 2026113001);
}

#[test]
fn names_outside_every_zone_are_refused_without_aa() {
    let server = Server::bundled();
    for qname in [
        "www.example.org.",
        "example.net.",
        "com.",
        ".",
        "notexample.com.",
        "xexample.com.",
    ] {
        let r = ask(&server, qname, RecordType::A);
        assert_eq!(r.metadata.response_code, ResponseCode::Refused, "{qname}");
        assert!(
            !r.metadata.authoritative,
            "{qname}: REFUSED must not claim authority"
        );
        assert!(r.answers.is_empty() && r.authorities.is_empty() && r.additionals.is_empty());
    }
}

const CHILD_ZONE: &str = "\
$ORIGIN internal.example.com.
$TTL 600
@    1800 IN SOA ns1.internal.example.com. hostmaster.example.com. 7 7200 900 1209600 120
@    NS  ns1
ns1  A   192.0.2.80
app  A   10.0.0.5
";

#[test]
fn longest_matching_zone_answers() {
    // Without the child zone the parent owns the name, and it does not exist there.
    let server = Server::bundled();
    let parent_ttl = negative_ttl(&server, "example.com.");
    let r = ask(&server, "app.internal.example.com.", RecordType::A);
    assert_negative(&r, ResponseCode::NXDomain, "example.com.", parent_ttl, 0);
    drop(server);

    let dir = TempDir::new("child").with_bundled_zones();
    dir.write("internal.example.com.zone", CHILD_ZONE);
    let server = Server::start_in(dir.path(), &["--zones", "."]);

    let r = ask(&server, "internal.example.com.", RecordType::SOA);
    assert!(r.metadata.authoritative);
    assert_eq!(r.answers.len(), 1);
    assert_eq!(r.answers[0].name, name("internal.example.com."));
    assert_eq!(
        soa(&r.answers[0]).serial,
        7,
        "the child's SOA, not the parent's"
    );
    assert_eq!(r.answers[0].ttl, 1800);

    let r = ask(&server, "app.internal.example.com.", RecordType::A);
    assert!(r.metadata.authoritative);
    assert_eq!(v4(&r.answers), vec![Ipv4Addr::new(10, 0, 0, 5)]);

    let r = ask(&server, "nope.internal.example.com.", RecordType::A);
    assert_negative(&r, ResponseCode::NXDomain, "internal.example.com.", 120, 0);

    // The parent still answers for its own names.
    let r = ask(&server, "mail.example.com.", RecordType::A);
    assert_eq!(v4(&r.answers), vec![Ipv4Addr::new(192, 0, 2, 25)]);
    let r = ask(&server, "nope.example.com.", RecordType::A);
    assert_negative(&r, ResponseCode::NXDomain, "example.com.", parent_ttl, 0);
}

// --- NXDOMAIN and NODATA ---

#[test]
fn nxdomain_carries_soa_with_negative_ttl() {
    let server = Server::bundled();
    let ttl = negative_ttl(&server, "example.com.");
    assert_eq!(ttl, 300, "example.com: SOA TTL 3600, MINIMUM 300");
    let r = ask(&server, "nope.example.com.", RecordType::A);
    assert_negative(&r, ResponseCode::NXDomain, "example.com.", ttl, 0);
    let soa_rr = soa(&r.authorities[0]);
    assert_eq!(soa_rr.mname, name("ns1.example.com."));
    assert_eq!(soa_rr.serial, 2026113001);

    let r = ask(&server, "deep.below.nope.example.com.", RecordType::MX);
    assert_negative(&r, ResponseCode::NXDomain, "example.com.", ttl, 0);

    let edge_ttl = negative_ttl(&server, "edge.example.net.");
    assert_eq!(edge_ttl, 60, "edge.example.net: SOA TTL 3600, MINIMUM 60");
    // ns1 exists and has no wildcard child, so x.ns1 does not exist.
    let r = ask(&server, "x.ns1.edge.example.net.", RecordType::A);
    assert_negative(&r, ResponseCode::NXDomain, "edge.example.net.", edge_ttl, 0);
}

#[test]
fn nodata_carries_soa_with_negative_ttl() {
    let server = Server::bundled();
    let ttl = negative_ttl(&server, "example.com.");
    let edge_ttl = negative_ttl(&server, "edge.example.net.");
    for (name, rtype, zone, ttl) in [
        ("mail.example.com.", RecordType::TXT, "example.com.", ttl),
        ("example.com.", RecordType::AAAA, "example.com.", ttl),
        ("ns1.example.com.", RecordType::AAAA, "example.com.", ttl),
        (
            "ns1.edge.example.net.",
            RecordType::MX,
            "edge.example.net.",
            edge_ttl,
        ),
        // The wildcard exists but has no MX: NODATA, not NXDOMAIN.
        (
            "anything.edge.example.net.",
            RecordType::MX,
            "edge.example.net.",
            edge_ttl,
        ),
    ] {
        assert_nodata(&server, name, rtype, zone, ttl);
    }
}

// --- CNAME ---

#[test]
fn cname_is_returned_for_any_qtype() {
    let server = Server::bundled();
    for qtype in [
        RecordType::A,
        RecordType::AAAA,
        RecordType::MX,
        RecordType::TXT,
    ] {
        let r = ask(&server, "www.example.com.", qtype);
        assert_eq!(r.metadata.response_code, ResponseCode::NoError, "{qtype}");
        assert!(r.metadata.authoritative, "{qtype}");
        let first = r
            .answers
            .first()
            .unwrap_or_else(|| panic!("{qtype}: no answer"));
        assert_eq!(first.name, name("www.example.com."));
        assert_eq!(
            cname_target(first),
            name("contoso.edge.example.net."),
            "{qtype}"
        );
    }
}

#[test]
fn cname_chain_is_followed_inside_our_zones() {
    let server = Server::bundled();
    let r = ask(&server, "www.example.com.", RecordType::A);
    assert_eq!(types(&r.answers), vec![RecordType::CNAME, RecordType::A]);
    assert_eq!(r.answers[1].name, name("contoso.edge.example.net."));
    assert_eq!(v4(&r.answers), vec![Ipv4Addr::new(192, 0, 2, 1)]);

    let r = ask(&server, "www.example.com.", RecordType::AAAA);
    assert_eq!(types(&r.answers), vec![RecordType::CNAME, RecordType::AAAA]);
    assert_eq!(
        v6(&r.answers),
        vec!["2001:db8::1".parse::<Ipv6Addr>().unwrap()]
    );

    // TXT at the target comes from the platform zone's wildcard.
    let r = ask(&server, "www.example.com.", RecordType::TXT);
    assert_eq!(types(&r.answers), vec![RecordType::CNAME, RecordType::TXT]);
    assert_eq!(txt_strings(&r.answers[1]), vec![b"front door".to_vec()]);

    // No MX at the target: the CNAME, then NODATA from the target's zone.
    let r = ask(&server, "www.example.com.", RecordType::MX);
    let edge_ttl = negative_ttl(&server, "edge.example.net.");
    assert_negative(&r, ResponseCode::NoError, "edge.example.net.", edge_ttl, 1);

    let r = ask(&server, "alias.example.com.", RecordType::A);
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert!(r.metadata.authoritative);
    assert_eq!(
        types(&r.answers),
        vec![RecordType::CNAME, RecordType::CNAME, RecordType::A]
    );
    assert_eq!(r.answers[0].name, name("alias.example.com."));
    assert_eq!(cname_target(&r.answers[0]), name("www.example.com."));
    assert_eq!(r.answers[1].name, name("www.example.com."));
    assert_eq!(
        cname_target(&r.answers[1]),
        name("contoso.edge.example.net.")
    );
    assert_eq!(r.answers[2].name, name("contoso.edge.example.net."));
    assert_eq!(v4(&r.answers), vec![Ipv4Addr::new(192, 0, 2, 1)]);
}

#[test]
fn cname_loop_terminates_without_repeats() {
    let server = Server::bundled();
    for (start, other) in [
        ("loop1.example.com.", "loop2.example.com."),
        ("loop2.example.com.", "loop1.example.com."),
    ] {
        let r = ask(&server, start, RecordType::A);
        assert!(r.metadata.authoritative, "{start}");
        assert!(!r.metadata.truncation);
        assert!(
            matches!(
                r.metadata.response_code,
                ResponseCode::NoError | ResponseCode::ServFail
            ),
            "{start}: {:?}",
            r.metadata.response_code
        );
        let owners: Vec<Name> = r.answers.iter().map(|a| a.name.clone()).collect();
        assert_eq!(
            owners,
            vec![name(start), name(other)],
            "{start}: each CNAME once"
        );
        assert_eq!(cname_target(&r.answers[0]), name(other));
        assert_eq!(cname_target(&r.answers[1]), name(start));
    }
}

#[test]
fn dangling_cname_is_nxdomain_with_soa() {
    let server = Server::bundled();
    let ttl = negative_ttl(&server, "example.com.");
    let r = ask(&server, "dangling.example.com.", RecordType::A);
    // RFC 6604: the rcode describes the last name in the chain.
    assert_negative(&r, ResponseCode::NXDomain, "example.com.", ttl, 1);
    assert_eq!(r.answers[0].name, name("dangling.example.com."));
    assert_eq!(cname_target(&r.answers[0]), name("missing.example.com."));
}

#[test]
fn out_of_zone_cname_target_is_not_chased() {
    let server = Server::bundled();
    let r = ask(&server, "external.example.com.", RecordType::A);
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert!(r.metadata.authoritative);
    assert_eq!(types(&r.answers), vec![RecordType::CNAME]);
    assert_eq!(cname_target(&r.answers[0]), name("www.example.org."));
    assert!(r.authorities.is_empty(), "{r:?}");
    assert!(r.additionals.is_empty(), "{r:?}");
}

#[test]
fn qtype_cname_returns_only_the_cname() {
    let server = Server::bundled();
    for qname in [
        "www.example.com.",
        "alias.example.com.",
        "dangling.example.com.",
    ] {
        let r = ask(&server, qname, RecordType::CNAME);
        assert_eq!(r.metadata.response_code, ResponseCode::NoError, "{qname}");
        assert!(r.metadata.authoritative);
        assert_eq!(types(&r.answers), vec![RecordType::CNAME], "{qname}");
        assert_eq!(r.answers[0].name, name(qname));
        assert!(r.authorities.is_empty(), "{qname}: {r:?}");
    }
}

// --- Wildcards ---

#[test]
fn wildcard_synthesises_records_owned_by_the_query_name() {
    let server = Server::bundled();
    for qname in ["foo.wild.example.com.", "x.y.wild.example.com."] {
        let r = ask(&server, qname, RecordType::A);
        assert_eq!(r.metadata.response_code, ResponseCode::NoError, "{qname}");
        assert!(r.metadata.authoritative);
        assert_eq!(
            v4(&r.answers),
            vec![Ipv4Addr::new(192, 0, 2, 100)],
            "{qname}"
        );
        assert_eq!(
            r.answers[0].name,
            name(qname),
            "owner is the query name, not *.wild"
        );
        assert!(r.authorities.is_empty());
    }
    let r = ask(&server, "foo.wild.example.com.", RecordType::TXT);
    assert_eq!(txt_strings(&r.answers[0]), vec![b"wildcard".to_vec()]);
    assert_eq!(r.answers[0].name, name("foo.wild.example.com."));
}

#[test]
fn wildcard_does_not_cover_existing_names_or_other_types() {
    let server = Server::bundled();
    let ttl = negative_ttl(&server, "example.com.");
    // exists.wild has a TXT of its own, so the wildcard never applies to it.
    assert_nodata(
        &server,
        "exists.wild.example.com.",
        RecordType::A,
        "example.com.",
        ttl,
    );
    let r = ask(&server, "exists.wild.example.com.", RecordType::TXT);
    assert_eq!(r.answers.len(), 1);
    assert_eq!(txt_strings(&r.answers[0]), vec![b"exists".to_vec()]);
    // Below an existing name the wildcard (a sibling of it) does not apply either.
    let r = ask(&server, "x.exists.wild.example.com.", RecordType::A);
    assert_negative(&r, ResponseCode::NXDomain, "example.com.", ttl, 0);
    // The wildcard has no AAAA.
    assert_nodata(
        &server,
        "foo.wild.example.com.",
        RecordType::AAAA,
        "example.com.",
        ttl,
    );
    // wild itself is an empty non-terminal, and the wildcard does not cover its parent.
    assert_nodata(
        &server,
        "wild.example.com.",
        RecordType::A,
        "example.com.",
        ttl,
    );
}

#[test]
fn empty_non_terminals_are_nodata_not_nxdomain() {
    let server = Server::bundled();
    let ttl = negative_ttl(&server, "example.com.");
    for qname in ["b.ent.example.com.", "ent.example.com."] {
        for qtype in [RecordType::A, RecordType::TXT] {
            assert_nodata(&server, qname, qtype, "example.com.", ttl);
        }
    }
    let r = ask(&server, "a.b.ent.example.com.", RecordType::A);
    assert!(r.metadata.authoritative);
    assert_eq!(v4(&r.answers), vec![Ipv4Addr::new(192, 0, 2, 101)]);
    let r = ask(&server, "c.b.ent.example.com.", RecordType::A);
    assert_negative(&r, ResponseCode::NXDomain, "example.com.", ttl, 0);
}

// --- Delegations ---

fn assert_referral(r: &Message, what: &str) {
    assert_eq!(
        r.metadata.response_code,
        ResponseCode::NoError,
        "{what}: {r:?}"
    );
    assert!(
        !r.metadata.authoritative,
        "{what}: a referral is not authoritative"
    );
    assert!(r.answers.is_empty(), "{what}: {r:?}");
    let mut ns: Vec<Name> = r
        .authorities
        .iter()
        .map(|rr| {
            assert_eq!(rr.name, name("sub.example.com."), "{what}");
            match &rr.data {
                RData::NS(n) => n.0.clone(),
                other => panic!("{what}: expected NS in authority, got {other:?}"),
            }
        })
        .collect();
    ns.sort();
    let mut expected = vec![name("ns1.sub.example.com."), name("ns.example.net.")];
    expected.sort();
    assert_eq!(ns, expected, "{what}");
    assert!(
        r.additionals
            .iter()
            .all(|a| a.name == name("ns1.sub.example.com.")),
        "{what}: glue only for the in-bailiwick server: {r:?}"
    );
    assert_eq!(
        v4(&r.additionals),
        vec![Ipv4Addr::new(192, 0, 2, 200)],
        "{what}"
    );
    assert_eq!(
        v6(&r.additionals),
        vec!["2001:db8::200".parse::<Ipv6Addr>().unwrap()],
        "{what}"
    );
    assert_eq!(r.additionals.len(), 2, "{what}");
}

#[test]
fn delegation_gives_a_referral_with_glue() {
    let server = Server::bundled();
    assert_referral(
        &ask(&server, "x.sub.example.com.", RecordType::A),
        "x.sub A",
    );
    assert_referral(&ask(&server, "sub.example.com.", RecordType::A), "sub A");
    assert_referral(&ask(&server, "sub.example.com.", RecordType::NS), "sub NS");
    assert_referral(
        &ask(&server, "deep.x.sub.example.com.", RecordType::MX),
        "deep MX",
    );
    // Glue is not authoritative data: a question for it is referred too.
    assert_referral(
        &ask(&server, "ns1.sub.example.com.", RecordType::A),
        "glue A",
    );
}

#[test]
fn ds_at_the_cut_is_answered_by_the_parent() {
    let server = Server::bundled();
    let r = ask(&server, "sub.example.com.", RecordType::DS);
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert!(
        r.metadata.authoritative,
        "the parent is authoritative for DS: {r:?}"
    );
    assert_eq!(types(&r.answers), vec![RecordType::DS]);
    assert_eq!(r.answers[0].name, name("sub.example.com."));
    assert!(
        r.authorities
            .iter()
            .all(|a| a.record_type() != RecordType::NS),
        "{r:?}"
    );
}

// --- ANY, additional-section processing ---

#[test]
fn any_is_minimal() {
    let server = Server::bundled();
    for qname in ["example.com.", "mail.example.com.", "ns1.edge.example.net."] {
        let r = ask(&server, qname, RecordType::ANY);
        assert_eq!(r.metadata.response_code, ResponseCode::NoError, "{qname}");
        assert!(r.metadata.authoritative);
        assert!(!r.answers.is_empty(), "{qname}: ANY answers something");
        let first = r.answers[0].record_type();
        assert!(
            r.answers
                .iter()
                .all(|a| a.record_type() == first && a.name == name(qname)),
            "{qname}: RFC 8482 wants a single RRset, got {:?}",
            types(&r.answers)
        );
    }
    let r = ask(&server, "nope.example.com.", RecordType::ANY);
    let ttl = negative_ttl(&server, "example.com.");
    assert_negative(&r, ResponseCode::NXDomain, "example.com.", ttl, 0);
}

#[test]
fn mx_answer_carries_the_exchange_addresses() {
    let server = Server::bundled();
    let r = ask(&server, "example.com.", RecordType::MX);
    assert!(r.metadata.authoritative);
    assert_eq!(r.answers.len(), 1);
    match &r.answers[0].data {
        RData::MX(mx) => {
            assert_eq!(mx.preference, 10);
            assert_eq!(mx.exchange, name("mail.example.com."));
        }
        other => panic!("expected MX, got {other:?}"),
    }
    assert!(
        r.additionals
            .iter()
            .all(|a| a.name == name("mail.example.com.")),
        "{r:?}"
    );
    assert_eq!(v4(&r.additionals), vec![Ipv4Addr::new(192, 0, 2, 25)]);
    assert_eq!(
        v6(&r.additionals),
        vec!["2001:db8::25".parse::<Ipv6Addr>().unwrap()]
    );
}

#[test]
fn srv_answer_carries_the_target_address() {
    let server = Server::bundled();
    let r = ask(&server, "_sip._udp.example.com.", RecordType::SRV);
    assert!(r.metadata.authoritative);
    assert_eq!(r.answers.len(), 1);
    match &r.answers[0].data {
        RData::SRV(srv) => {
            assert_eq!((srv.priority, srv.weight, srv.port), (10, 60, 5060));
            assert_eq!(srv.target, name("sip.example.com."));
        }
        other => panic!("expected SRV, got {other:?}"),
    }
    assert_eq!(v4(&r.additionals), vec![Ipv4Addr::new(192, 0, 2, 60)]);
    assert!(r
        .additionals
        .iter()
        .all(|a| a.name == name("sip.example.com.")));
}

#[test]
fn ns_answer_carries_the_server_addresses() {
    let server = Server::bundled();
    let r = ask(&server, "example.com.", RecordType::NS);
    assert!(r.metadata.authoritative);
    assert_eq!(r.answers.len(), 2);
    let mut a = v4(&r.additionals);
    a.sort();
    assert_eq!(
        a,
        vec![Ipv4Addr::new(192, 0, 2, 10), Ipv4Addr::new(192, 0, 2, 11)]
    );
    assert_eq!(
        v6(&r.additionals),
        vec!["2001:db8::11".parse::<Ipv6Addr>().unwrap()]
    );
}

// --- steerdns check ---

/// Runs `steerdns check` with `args` in `dir`; returns whether it passed and all it printed.
fn run_check(dir: &Path, args: &[&str]) -> (bool, String) {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    let (status, text) = steerdns_check(dir, &args);
    assert!(
        status.code() == Some(0) || status.code() == Some(1),
        "check exits 0 or 1, got {status:?}: {text}"
    );
    (status.success(), text)
}

#[test]
fn check_accepts_the_bundled_zones() {
    let (ok, text) = run_check(&repo_path("zones"), &["--zones", "."]);
    assert!(ok, "{text}");
    assert!(text.contains("ok: 2 zones"), "{text}");
    // The bundled example as the README runs it: ./steerdns.toml and what it points at.
    let (ok, text) = run_check(&repo_path(""), &[]);
    assert!(ok, "{text}");
}

#[test]
fn check_names_file_and_line_of_a_cname_beside_other_data() {
    let dir = TempDir::new("cname-clash");
    let zone = "\
$ORIGIN broken.test.
$TTL 300
@    IN SOA ns1.broken.test. hostmaster.broken.test. 1 7200 900 1209600 300
@    NS  ns1
ns1  A   192.0.2.1
www  A   192.0.2.2
www  CNAME elsewhere.example.
";
    dir.write("broken.test.zone", zone);
    let (ok, text) = run_check(dir.path(), &["--zones", "."]);
    assert!(!ok, "a CNAME beside an A must be refused: {text}");
    let clash_line = zone
        .lines()
        .position(|l| l.contains("CNAME"))
        .expect("line")
        + 1;
    let a_line = zone
        .lines()
        .position(|l| l.starts_with("www  A"))
        .expect("line")
        + 1;
    let named = [clash_line, a_line]
        .iter()
        .any(|n| text.contains(&format!("broken.test.zone:{n}:")));
    assert!(
        named,
        "expected broken.test.zone:{clash_line}: (or :{a_line}:) in {text}"
    );
}

#[test]
fn check_names_file_and_line_of_a_syntax_error() {
    let dir = TempDir::new("syntax").with_bundled_zones();
    let zone = "\
$ORIGIN broken.test.
$TTL 300
@    IN SOA ns1.broken.test. hostmaster.broken.test. 1 7200 900 1209600 300
@    NS  ns1
ns1  A   192.0.2.1
bad  A   192.0.2.999
ok   A   192.0.2.3
";
    dir.write("broken.test.zone", zone);
    let (ok, text) = run_check(dir.path(), &["--zones", "."]);
    assert!(!ok, "an invalid address must be refused: {text}");
    let line = zone
        .lines()
        .position(|l| l.starts_with("bad"))
        .expect("line")
        + 1;
    assert!(
        text.contains(&format!("broken.test.zone:{line}:")),
        "expected line {line} in {text}"
    );
    // The good zones beside it do not make it pass, and are not blamed.
    assert!(!text.contains("example.com.zone:"), "{text}");
}

// --- Message size limits with a zone built for them ---

/// A zone whose answers straddle the 512-byte and 1232-byte limits.
fn sizes_zone() -> String {
    let mut z = String::from(
        "$ORIGIN sizes.test.\n$TTL 300\n\
         @ SOA ns1 hostmaster 1 7200 900 1209600 300\n\
         @ NS ns1\n\
         ns1 A 192.0.2.1\n",
    );
    // About 650 bytes of TXT: over 512, under 1232.
    z.push_str(&format!(
        "medium TXT \"{}\" \"{}\" \"{}\"\n",
        "x".repeat(250),
        "y".repeat(250),
        "z".repeat(100)
    ));
    // Three MX targets with twenty addresses each: the answer is small, its additional data is not.
    for (pref, target) in [(10, "m1"), (20, "m2"), (30, "m3")] {
        z.push_str(&format!("mx MX {pref} {target}\n"));
        for i in 1..=20 {
            z.push_str(&format!("{target} AAAA 2001:db8:{pref}::{i:x}\n"));
        }
    }
    // A delegation to twelve in-bailiwick servers: their glue needs more than 512 bytes.
    for i in 1..=12 {
        z.push_str(&format!("deleg NS ns{i}.deleg\n"));
        z.push_str(&format!("ns{i}.deleg A 192.0.2.{}\n", 100 + i));
        z.push_str(&format!("ns{i}.deleg AAAA 2001:db8:d::{i:x}\n"));
    }
    z
}

fn sizes_server(dir: &TempDir) -> Server {
    dir.write("sizes.test.zone", &sizes_zone());
    Server::start_in(dir.path(), &["--zones", "."])
}

#[test]
fn answer_between_512_and_1232_bytes_needs_edns() {
    let dir = TempDir::new("sizes-medium");
    let server = sizes_server(&dir);
    let r = server.udp(&query("medium.sizes.test.", RecordType::TXT));
    assert!(r.metadata.truncation, "over 512 bytes without EDNS: {r:?}");
    assert!(r.answers.is_empty() && r.authorities.is_empty() && r.additionals.is_empty());
    for payload in [0, 100, 511, 512] {
        let r = server.udp(&query_edns("medium.sizes.test.", RecordType::TXT, payload));
        assert!(
            r.metadata.truncation,
            "EDNS payload {payload} counts as 512: {r:?}"
        );
        assert!(r.answers.is_empty());
    }
    let r = server.udp(&query_edns("medium.sizes.test.", RecordType::TXT, 1232));
    assert!(!r.metadata.truncation, "{r:?}");
    assert_eq!(txt_strings(&r.answers[0]).len(), 3);
    let r = server.tcp(&query("medium.sizes.test.", RecordType::TXT));
    assert!(!r.metadata.truncation);
    assert_eq!(r.answers.len(), 1);
}

#[test]
fn additional_data_that_does_not_fit_is_left_out_without_tc() {
    let dir = TempDir::new("sizes-mx");
    let server = sizes_server(&dir);
    for r in [
        server.udp(&query("mx.sizes.test.", RecordType::MX)),
        server.udp(&query_edns("mx.sizes.test.", RecordType::MX, 1232)),
    ] {
        assert!(
            !r.metadata.truncation,
            "additional data is optional (RFC 2181 §9): {r:?}"
        );
        assert_eq!(types(&r.answers), vec![RecordType::MX; 3]);
        // Whatever additional data came is whole RRsets: 20 AAAA per target present.
        let mut per_owner: Vec<(Name, usize)> = Vec::new();
        for a in r.additionals.iter() {
            assert_eq!(a.record_type(), RecordType::AAAA);
            match per_owner.iter_mut().find(|(n, _)| *n == a.name) {
                Some((_, count)) => *count += 1,
                None => per_owner.push((a.name.clone(), 1)),
            }
        }
        assert!(
            per_owner.iter().all(|(_, c)| *c == 20),
            "partial RRset: {per_owner:?}"
        );
    }
    // With room for one target's addresses, they are sent.
    let r = server.udp(&query_edns("mx.sizes.test.", RecordType::MX, 1232));
    assert!(r.additionals.len() >= 20, "{r:?}");
    // Over TCP everything fits.
    let r = server.tcp(&query("mx.sizes.test.", RecordType::MX));
    assert_eq!(r.additionals.len(), 60);
}

#[test]
fn referral_whose_glue_does_not_fit_is_truncated() {
    let dir = TempDir::new("sizes-deleg");
    let server = sizes_server(&dir);
    let r = server.udp(&query("host.deleg.sizes.test.", RecordType::A));
    assert!(
        r.metadata.truncation,
        "glue is not optional (RFC 9471): {r:?}"
    );
    assert!(r.answers.is_empty() && r.authorities.is_empty() && r.additionals.is_empty());
    for r in [
        server.udp(&query_edns("host.deleg.sizes.test.", RecordType::A, 1232)),
        server.tcp(&query("host.deleg.sizes.test.", RecordType::A)),
    ] {
        assert!(!r.metadata.truncation, "{r:?}");
        assert!(!r.metadata.authoritative);
        assert_eq!(types(&r.authorities), vec![RecordType::NS; 12]);
        assert_eq!(v4(&r.additionals).len(), 12);
        assert_eq!(v6(&r.additionals).len(), 12);
    }
}
