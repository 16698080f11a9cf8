//! End-to-end protocol tests (issue 2) with hand-built packets, checked byte by byte where a DNS
//! library would hide the detail: EDNS(0) and its options, truncation, letter case, malformed
//! input, opcodes, CHAOS.

use crate::common;

use std::net::UdpSocket;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};

const A: u16 = 1;
const TXT: u16 = 16;
const SOA: u16 = 6;
const OPT: u16 = 41;
const IN: u16 = 1;
const CH: u16 = 3;
const NSID: u16 = 3;
const ECS: u16 = 8;
const OUR_PAYLOAD: u16 = 1232;

// --- building queries ---

/// Wire form of a presentation name, letter case kept (no escapes needed in these tests).
fn wire(name: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for label in name
        .trim_end_matches('.')
        .split('.')
        .filter(|l| !l.is_empty())
    {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out
}

/// An OPT pseudo-record.
fn opt(payload: u16, version: u8, dnssec_ok: bool, options: &[(u16, &[u8])]) -> Vec<u8> {
    let mut rdata = Vec::new();
    for (code, data) in options {
        rdata.extend_from_slice(&code.to_be_bytes());
        rdata.extend_from_slice(&(data.len() as u16).to_be_bytes());
        rdata.extend_from_slice(data);
    }
    let mut o = vec![0];
    o.extend_from_slice(&OPT.to_be_bytes());
    o.extend_from_slice(&payload.to_be_bytes());
    o.extend_from_slice(&[0, version, if dnssec_ok { 0x80 } else { 0 }, 0]);
    o.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    o.extend_from_slice(&rdata);
    o
}

/// ECS option data: family, source prefix, scope prefix, address octets.
fn ecs(family: u16, source: u8, scope: u8, addr: &[u8]) -> Vec<u8> {
    let mut d = family.to_be_bytes().to_vec();
    d.extend_from_slice(&[source, scope]);
    d.extend_from_slice(addr);
    d
}

fn next_id() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0x3100);
    (NEXT.fetch_add(977, Ordering::Relaxed) & 0xffff) as u16
}

/// A query packet: header with `flags`, one question, an optional OPT in additional.
fn packet(
    id: u16,
    flags: u16,
    name: &str,
    qtype: u16,
    qclass: u16,
    edns: Option<Vec<u8>>,
) -> Vec<u8> {
    let mut p = id.to_be_bytes().to_vec();
    p.extend_from_slice(&flags.to_be_bytes());
    p.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    p.extend_from_slice(&wire(name));
    p.extend_from_slice(&qtype.to_be_bytes());
    p.extend_from_slice(&qclass.to_be_bytes());
    if let Some(o) = edns {
        p.extend_from_slice(&o);
    }
    p
}

fn plain(name: &str, qtype: u16) -> Vec<u8> {
    packet(next_id(), 0, name, qtype, IN, None)
}

fn with_edns(name: &str, qtype: u16, payload: u16) -> Vec<u8> {
    packet(
        next_id(),
        0,
        name,
        qtype,
        IN,
        Some(opt(payload, 0, false, &[])),
    )
}

// --- reading replies ---

#[derive(Debug)]
struct Opt {
    payload: u16,
    ext_rcode: u8,
    version: u8,
    dnssec_ok: bool,
    options: Vec<(u16, Vec<u8>)>,
}

#[derive(Debug)]
struct Reply {
    bytes: Vec<u8>,
    id: u16,
    flags: u16,
    qd: u16,
    an: u16,
    ns: u16,
    ar: u16,
    /// Offset just past the question (12 when there is none).
    question_end: usize,
    /// Types of the records in answer, authority, additional (OPT included).
    sections: [Vec<u16>; 3],
    opt: Option<Opt>,
}

impl Reply {
    fn rcode(&self) -> u16 {
        let ext = self.opt.as_ref().map_or(0, |o| u16::from(o.ext_rcode));
        (ext << 4) | (self.flags & 0xf)
    }
    fn qr(&self) -> bool {
        self.flags & 0x8000 != 0
    }
    fn aa(&self) -> bool {
        self.flags & 0x0400 != 0
    }
    fn tc(&self) -> bool {
        self.flags & 0x0200 != 0
    }
    fn opcode(&self) -> u16 {
        (self.flags >> 11) & 0xf
    }
    fn question(&self) -> &[u8] {
        &self.bytes[12..self.question_end]
    }
}

fn skip_name(b: &[u8], mut pos: usize) -> usize {
    loop {
        let len = b[pos];
        if len == 0 {
            return pos + 1;
        }
        if len & 0xc0 == 0xc0 {
            return pos + 2;
        }
        pos += 1 + len as usize;
    }
}

/// Parses a reply strictly: any inconsistency (counts, lengths, trailing bytes) fails the test.
fn parse_reply(bytes: &[u8]) -> Reply {
    assert!(bytes.len() >= 12, "reply shorter than a header: {bytes:?}");
    let u16_at = |i: usize| u16::from_be_bytes([bytes[i], bytes[i + 1]]);
    let (qd, an, ns, ar) = (u16_at(4), u16_at(6), u16_at(8), u16_at(10));
    let mut pos = 12;
    for _ in 0..qd {
        pos = skip_name(bytes, pos) + 4;
    }
    let question_end = pos;
    let mut sections: [Vec<u16>; 3] = Default::default();
    let mut opt_rr = None;
    for (section, count) in [an, ns, ar].into_iter().enumerate() {
        for _ in 0..count {
            let owner_is_root = bytes[pos] == 0;
            pos = skip_name(bytes, pos);
            let rtype = u16_at(pos);
            let class = u16_at(pos + 2);
            let ttl = [
                bytes[pos + 4],
                bytes[pos + 5],
                bytes[pos + 6],
                bytes[pos + 7],
            ];
            let rdlen = u16_at(pos + 8) as usize;
            let rdata = &bytes[pos + 10..pos + 10 + rdlen];
            pos += 10 + rdlen;
            sections[section].push(rtype);
            if rtype == OPT {
                assert_eq!(section, 2, "OPT outside additional");
                assert!(owner_is_root, "OPT owner must be the root");
                assert!(opt_rr.is_none(), "two OPT records in a reply");
                let mut options = Vec::new();
                let mut o = 0;
                while o < rdata.len() {
                    let code = u16::from_be_bytes([rdata[o], rdata[o + 1]]);
                    let len = u16::from_be_bytes([rdata[o + 2], rdata[o + 3]]) as usize;
                    options.push((code, rdata[o + 4..o + 4 + len].to_vec()));
                    o += 4 + len;
                }
                assert_eq!(o, rdata.len(), "OPT options overrun");
                opt_rr = Some(Opt {
                    payload: class,
                    ext_rcode: ttl[0],
                    version: ttl[1],
                    dnssec_ok: ttl[2] & 0x80 != 0,
                    options,
                });
            }
        }
    }
    assert_eq!(pos, bytes.len(), "trailing bytes after the counted records");
    Reply {
        bytes: bytes.to_vec(),
        id: u16_at(0),
        flags: u16_at(2),
        qd,
        an,
        ns,
        ar,
        question_end,
        sections,
        opt: opt_rr,
    }
}

fn udp(server: &Server, p: &[u8]) -> Reply {
    let raw = server
        .udp_raw(p, TIMEOUT)
        .unwrap_or_else(|| panic!("no UDP reply to {p:?}"));
    let reply = parse_reply(&raw);
    assert_eq!(reply.id, u16::from_be_bytes([p[0], p[1]]), "ID echoed");
    assert!(reply.qr(), "QR set in a reply");
    reply
}

fn tcp(server: &Server, p: &[u8]) -> Reply {
    let mut stream = server.connect_tcp();
    write_frame(&mut stream, p);
    let raw = read_frame(&mut stream).expect("TCP reply");
    let reply = parse_reply(&raw);
    assert_eq!(reply.id, u16::from_be_bytes([p[0], p[1]]), "ID echoed");
    reply
}

/// The bundled zones with built-in defaults (no NSID, no identity): run from `zones/`, where no
/// `steerdns.toml` is.
// --- EDNS(0) ---

#[test]
fn opt_is_echoed_only_when_the_query_had_one() {
    let server = Server::bundled();
    // Precompiled static answer, computed NXDOMAIN, REFUSED, and a referral.
    for (name, qtype) in [
        ("www.example.com", A),
        ("nope.example.com", A),
        ("www.example.org", A),
        ("x.sub.example.com", A),
        ("example.com", SOA),
    ] {
        let r = udp(&server, &plain(name, qtype));
        assert!(
            r.opt.is_none(),
            "{name}: OPT without one in the query: {r:?}"
        );
        assert!(!r.sections[2].contains(&OPT));

        for asked in [512, 1232, 4096] {
            let r = udp(&server, &with_edns(name, qtype, asked));
            let o = r
                .opt
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: no OPT: {r:?}"));
            assert_eq!(
                o.payload, OUR_PAYLOAD,
                "{name}: we advertise our own payload size"
            );
            assert_eq!(o.version, 0);
            assert!(
                o.options.is_empty(),
                "{name}: nothing asked, no options: {o:?}"
            );
            assert_eq!(r.sections[2].last(), Some(&OPT), "{name}");
        }
    }
}

#[test]
fn do_bit_is_echoed() {
    let server = Server::bundled();
    let p = packet(
        next_id(),
        0,
        "www.example.com",
        A,
        IN,
        Some(opt(1232, 0, true, &[])),
    );
    let r = udp(&server, &p);
    assert!(r.opt.as_ref().expect("OPT").dnssec_ok);
    let r = udp(&server, &with_edns("www.example.com", A, 1232));
    assert!(!r.opt.as_ref().expect("OPT").dnssec_ok);
}

#[test]
fn edns_version_1_gets_badvers_with_opt() {
    let server = Server::bundled();
    for name in ["www.example.com", "nope.example.com", "www.example.org"] {
        let p = packet(next_id(), 0, name, A, IN, Some(opt(1232, 1, false, &[])));
        let r = udp(&server, &p);
        let o = r
            .opt
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: BADVERS needs OPT: {r:?}"));
        assert_eq!(r.rcode(), 16, "{name}: BADVERS is extended rcode 16: {r:?}");
        assert_eq!(r.flags & 0xf, 0, "lower four bits of BADVERS are 0");
        assert_eq!(o.ext_rcode, 1);
        assert_eq!(o.version, 0, "we speak version 0");
        assert_eq!((r.an, r.ns), (0, 0), "{name}: no records with BADVERS");
        assert_eq!(r.question(), &p[12..p.len() - 11], "question echoed");
    }
    // hickory agrees on the merged rcode.
    let p = packet(
        next_id(),
        0,
        "www.example.com",
        A,
        IN,
        Some(opt(1232, 1, false, &[])),
    );
    let raw = server.udp_raw(&p, TIMEOUT).expect("reply");
    let m = Message::from_vec(&raw).expect("parse");
    // 16 is both BADVERS and BADSIG; hickory names it BADSIG, the number is what counts.
    assert_eq!(u16::from(m.metadata.response_code), 16);
}

#[test]
fn unknown_edns_options_are_ignored() {
    let server = Server::bundled();
    let options: [(u16, &[u8]); 2] = [(65001, b"hello"), (12, &[0, 0, 0])];
    for (name, qtype) in [("mail.example.com", A), ("foo.wild.example.com", A)] {
        let p = packet(
            next_id(),
            0,
            name,
            qtype,
            IN,
            Some(opt(1232, 0, false, &options)),
        );
        let r = udp(&server, &p);
        assert_eq!(r.rcode(), 0, "{name}: {r:?}");
        assert!(r.aa());
        assert_eq!(r.an, 1, "{name}: the normal answer");
        let o = r.opt.as_ref().expect("OPT");
        assert!(
            o.options.is_empty(),
            "unknown options are not echoed: {o:?}"
        );
        let plain_reply = udp(&server, &with_edns(name, qtype, 1232));
        assert_eq!(
            r.bytes[2..],
            plain_reply.bytes[2..],
            "{name}: same answer as without the unknown options"
        );
    }
}

#[test]
fn nsid_is_returned_when_configured_and_asked() {
    let config = TempConfig::new("protocol", "nsid = \"test-ns\"");
    let server = config.start();
    let nsid_query = |name: &str| {
        packet(
            next_id(),
            0,
            name,
            A,
            IN,
            Some(opt(1232, 0, false, &[(NSID, &[])])),
        )
    };
    for name in ["www.example.com", "nope.example.com", "www.example.org"] {
        let r = udp(&server, &nsid_query(name));
        let o = r.opt.as_ref().expect("OPT");
        assert_eq!(o.options, vec![(NSID, b"test-ns".to_vec())], "{name}");
        // Not asked: not sent.
        let r = udp(&server, &with_edns(name, A, 1232));
        assert!(
            r.opt.as_ref().expect("OPT").options.is_empty(),
            "{name}: NSID unasked"
        );
        // No EDNS at all: no OPT.
        assert!(udp(&server, &plain(name, A)).opt.is_none());
    }
    let r = tcp(&server, &nsid_query("example.com"));
    assert_eq!(
        r.opt.expect("OPT").options,
        vec![(NSID, b"test-ns".to_vec())]
    );

    // A server without an NSID sends none even when asked.
    drop(server);
    let server = Server::bundled();
    let r = udp(&server, &nsid_query("www.example.com"));
    assert!(r.opt.as_ref().expect("OPT").options.is_empty(), "{r:?}");
}

#[test]
fn valid_client_subnet_is_echoed_with_scope_zero() {
    let server = Server::bundled();
    let options = [
        ecs(1, 24, 0, &[198, 51, 100]),
        ecs(1, 21, 0, &[198, 51, 96]),
        ecs(2, 56, 0, &[0x20, 0x01, 0x0d, 0xb8, 0, 1, 2]),
        ecs(1, 0, 0, &[]),
    ];
    for option in &options {
        for name in [
            "www.example.com",
            "nope.example.com",
            "foo.wild.example.com",
        ] {
            let p = packet(
                next_id(),
                0,
                name,
                A,
                IN,
                Some(opt(1232, 0, false, &[(ECS, option)])),
            );
            let r = udp(&server, &p);
            assert_ne!(r.rcode(), 1, "{name}: a valid ECS is not FORMERR");
            let o = r.opt.as_ref().expect("OPT");
            // RFC 7871 §7.2.1: family, source prefix and address echoed; scope 0 because
            // nothing about these answers depends on the client.
            assert_eq!(
                o.options,
                vec![(ECS, option.clone())],
                "{name}: static answers have scope 0"
            );
        }
    }
}

// --- Truncation ---

fn big_txt() -> &'static str {
    "big.example.com"
}

#[test]
fn oversize_udp_answer_is_truncated_to_header_and_question() {
    let server = Server::bundled();
    let p = plain(big_txt(), TXT);
    let r = udp(&server, &p);
    assert!(r.tc(), "{r:?}");
    assert!(r.aa());
    assert_eq!(r.rcode(), 0);
    assert_eq!((r.qd, r.an, r.ns, r.ar), (1, 0, 0, 0), "no partial RRset");
    assert_eq!(r.question(), &p[12..]);
    assert!(r.bytes.len() <= 512);

    for asked in [1232, 4096, 65535] {
        let p = with_edns(big_txt(), TXT, asked);
        let r = udp(&server, &p);
        assert!(r.tc(), "payload {asked}: {r:?}");
        assert_eq!(
            (r.qd, r.an, r.ns, r.ar),
            (1, 0, 0, 1),
            "payload {asked}: only OPT"
        );
        assert_eq!(r.sections[2], vec![OPT]);
        assert_eq!(r.opt.as_ref().expect("OPT").payload, OUR_PAYLOAD);
        assert!(r.bytes.len() <= OUR_PAYLOAD as usize);
    }
}

#[test]
fn oversize_answer_is_complete_over_tcp() {
    let server = Server::bundled();
    for p in [plain(big_txt(), TXT), with_edns(big_txt(), TXT, 1232)] {
        let mut stream = server.connect_tcp();
        write_frame(&mut stream, &p);
        let raw = read_frame(&mut stream).expect("TCP reply");
        let r = parse_reply(&raw);
        assert!(!r.tc(), "{r:?}");
        assert_eq!(r.an, 1);
        assert!(raw.len() > OUR_PAYLOAD as usize);
        let m = Message::from_vec(&raw).expect("parse");
        let strings: Vec<Vec<u8>> = match &m.answers[0].data {
            RData::TXT(t) => t.txt_data.iter().map(|s| s.to_vec()).collect(),
            other => panic!("expected TXT, got {other:?}"),
        };
        assert_eq!(strings.len(), 6);
        for (s, letter) in strings.iter().zip(b"abcdef") {
            assert!(
                !s.is_empty() && s.iter().all(|c| c == letter),
                "string of {}",
                *letter as char
            );
        }
    }
}

#[test]
fn small_answers_are_never_truncated() {
    let server = Server::bundled();
    for (name, qtype) in [
        ("www.example.com", A),
        ("example.com", 2),
        ("example.com", 15),
        ("x.sub.example.com", A),
        ("nope.example.com", A),
        ("alias.example.com", A),
    ] {
        for p in [
            plain(name, qtype),
            with_edns(name, qtype, 512),
            with_edns(name, qtype, 1232),
        ] {
            let r = udp(&server, &p);
            assert!(!r.tc(), "{name}/{qtype}: {r:?}");
            assert!(r.an + r.ns > 0, "{name}/{qtype}: has records");
        }
    }
}

// --- Letter case ---

#[test]
fn question_case_is_echoed_byte_for_byte() {
    let server = Server::bundled();
    for (name, qtype, rcode) in [
        ("WwW.ExAmPlE.cOm", A, 0),      // precompiled static answer
        ("mAiL.eXaMpLe.CoM", A, 0),     // precompiled static answer
        ("FoO.WiLd.ExAmPlE.cOm", A, 0), // wildcard
        ("NoPe.ExAmPlE.CoM", A, 3),     // NXDOMAIN
        ("X.SuB.eXaMpLe.CoM", A, 0),    // referral
        ("WwW.ExAmPlE.OrG", A, 5),      // REFUSED
    ] {
        for p in [plain(name, qtype), with_edns(name, qtype, 1232)] {
            let r = udp(&server, &p);
            assert_eq!(r.rcode(), rcode, "{name}");
            let question_len = wire(name).len() + 4;
            assert_eq!(
                r.question(),
                &p[12..12 + question_len],
                "{name}: question bytes"
            );
            // And hickory sees the same name, with its case.
            let m = Message::from_vec(&r.bytes).expect("parse");
            let asked = Name::from_ascii(format!("{name}.")).expect("name");
            assert!(m.queries[0].name().eq_case(&asked), "{name}");
            if rcode == 0 && name != "X.SuB.eXaMpLe.CoM" {
                assert!(
                    m.answers[0].name.eq_case(&asked),
                    "{name}: answer owner keeps the case"
                );
            }
        }
    }
}

// --- Malformed input, opcodes ---

/// Sends every packet from one socket, then a valid probe (resent each second, in case the
/// burst overflowed a socket buffer); returns the other replies that arrive until a short quiet
/// period after the probe's answer. Fails if the probe is never answered.
fn send_all_then_probe(server: &Server, packets: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    for p in packets {
        socket.send_to(p, server.addr).expect("send");
    }
    let probe = plain("mail.example.com", A);
    let is_probe_reply = |r: &[u8]| {
        r.len() > probe.len() && r[..2] == probe[..2] && r[12..probe.len()] == probe[12..]
    };
    let mut replies = Vec::new();
    let mut probe_seen = false;
    let deadline = Instant::now() + TIMEOUT;
    let mut buf = vec![0u8; 65535];
    while !probe_seen && Instant::now() < deadline {
        socket.send_to(&probe, server.addr).expect("send probe");
        let resend_at = Instant::now() + Duration::from_secs(1);
        loop {
            let wait = resend_at
                .min(deadline)
                .saturating_duration_since(Instant::now());
            if wait.is_zero() {
                break;
            }
            socket.set_read_timeout(Some(wait)).expect("timeout");
            let Ok((n, _)) = socket.recv_from(&mut buf) else {
                break;
            };
            if is_probe_reply(&buf[..n]) {
                let r = parse_reply(&buf[..n]);
                assert_eq!(r.rcode(), 0);
                assert_eq!(r.an, 1, "probe answered normally");
                probe_seen = true;
                break;
            }
            replies.push(buf[..n].to_vec());
        }
    }
    assert!(probe_seen, "the server stopped answering");
    // Stragglers: replies to the burst that a second worker sent after the probe's.
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    while let Ok((n, _)) = socket.recv_from(&mut buf) {
        if !is_probe_reply(&buf[..n]) {
            replies.push(buf[..n].to_vec());
        }
    }
    replies
}

#[test]
fn runts_and_responses_get_no_reply() {
    let server = Server::bundled();
    let mut packets: Vec<Vec<u8>> = (0..12).map(|n| vec![0x42; n]).collect();
    let mut response = plain("www.example.com", A);
    response[2] |= 0x80; // QR
    packets.push(response);
    let replies = send_all_then_probe(&server, &packets);
    assert!(
        replies.is_empty(),
        "replied to a runt or a response: {replies:?}"
    );
    assert_every_worker_answers(&server);
}

/// A reproducible byte stream (xorshift), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Every UDP worker still answers: SO_REUSEPORT spreads source ports over the workers, so a
/// worker thread that died would leave some of many fresh sockets unanswered.
fn assert_every_worker_answers(server: &Server) {
    for _ in 0..24 {
        let r = udp(server, &plain("mail.example.com", A));
        assert_eq!((r.rcode(), r.an), (0, 1));
    }
}

fn assert_sane_replies(replies: &[Vec<u8>], sent: &[Vec<u8>]) {
    for raw in replies {
        let r = parse_reply(raw);
        assert!(r.qr(), "reply without QR: {raw:?}");
        assert!(
            sent.iter().any(|p| p.len() >= 2 && p[..2] == raw[..2]),
            "reply with an ID nobody sent: {raw:?}"
        );
        assert!(r.qd <= 1);
    }
}

#[test]
fn random_garbage_never_crashes_the_server() {
    let server = Server::bundled();
    let mut rng = Rng(0x5eed_dead_beef_1234);
    let packets: Vec<Vec<u8>> = (0..600)
        .map(|_| {
            let len = rng.below(300);
            (0..len).map(|_| rng.next() as u8).collect()
        })
        .collect();
    for chunk in packets.chunks(50) {
        let replies = send_all_then_probe(&server, chunk);
        assert_sane_replies(&replies, chunk);
    }
    assert_every_worker_answers(&server);
}

#[test]
fn mutated_queries_never_crash_the_server() {
    let server = Server::bundled();
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let option = ecs(1, 24, 0, &[198, 51, 100]);
    let seeds = [
        packet(
            0x1111,
            0,
            "www.example.com",
            A,
            IN,
            Some(opt(1232, 0, false, &[(ECS, &option), (NSID, &[])])),
        ),
        packet(0x2222, 0, "foo.wild.example.com", TXT, IN, None),
        packet(
            0x3333,
            0,
            "x.sub.example.com",
            A,
            IN,
            Some(opt(4096, 0, true, &[])),
        ),
    ];
    let packets: Vec<Vec<u8>> = (0..600)
        .map(|i| {
            let mut p = seeds[i % seeds.len()].clone();
            for _ in 0..1 + rng.below(4) {
                if p.is_empty() {
                    break;
                }
                match rng.below(3) {
                    0 => {
                        let at = rng.below(p.len());
                        p[at] ^= 1 << rng.below(8);
                    }
                    1 => {
                        let at = rng.below(p.len());
                        p[at] = rng.next() as u8;
                    }
                    _ => p.truncate(rng.below(p.len() + 1)),
                }
            }
            if p.len() > 2 {
                p[2] &= 0x7f; // keep QR clear so that most get through the first check
            }
            p
        })
        .collect();
    for chunk in packets.chunks(50) {
        let replies = send_all_then_probe(&server, chunk);
        assert_sane_replies(&replies, chunk);
    }
    assert_every_worker_answers(&server);
}

fn assert_error(server: &Server, p: &[u8], rcode: u16, what: &str) -> Reply {
    let r = udp(server, p);
    assert_eq!(r.rcode(), rcode, "{what}: {r:?}");
    assert!(!r.aa(), "{what}: an error is not authoritative");
    assert_eq!((r.an, r.ns), (0, 0), "{what}");
    r
}

#[test]
fn other_opcodes_get_notimp() {
    let server = Server::bundled();
    for (opcode, label) in [
        (1u16, "IQUERY"),
        (2, "STATUS"),
        (4, "NOTIFY"),
        (5, "UPDATE"),
    ] {
        let p = packet(next_id(), opcode << 11, "example.com", SOA, IN, None);
        let r = assert_error(&server, &p, 4, label);
        assert_eq!(r.opcode(), opcode, "{label}: opcode echoed");
    }
}

#[test]
fn question_count_other_than_one_is_formerr() {
    let server = Server::bundled();
    let mut none = plain("www.example.com", A);
    none[5] = 0;
    none.truncate(12);
    assert_error(&server, &none, 1, "QDCOUNT=0");

    let mut two = plain("www.example.com", A);
    two[5] = 2;
    two.extend_from_slice(&wire("mail.example.com"));
    two.extend_from_slice(&[0, 1, 0, 1]);
    assert_error(&server, &two, 1, "QDCOUNT=2");
}

#[test]
fn malformed_questions_are_formerr() {
    let server = Server::bundled();
    let header = |p: &mut Vec<u8>| {
        let mut h = next_id().to_be_bytes().to_vec();
        h.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        p.splice(0..0, h);
    };
    // A 64-octet label.
    let mut long = vec![64];
    long.extend(std::iter::repeat_n(b'a', 64));
    long.extend_from_slice(&[0, 0, 1, 0, 1]);
    // A name longer than 255 octets (five 63-octet labels).
    let mut huge = Vec::new();
    for _ in 0..5 {
        huge.push(63);
        huge.extend(std::iter::repeat_n(b'b', 63));
    }
    huge.extend_from_slice(&[0, 0, 1, 0, 1]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        // A compression pointer to the header as the question name.
        ("pointer", vec![0xc0, 0x0c, 0, 1, 0, 1]),
        // A valid label, then a pointer.
        (
            "label+pointer",
            [b"\x03www".as_slice(), &[0xc0, 0x0c, 0, 1, 0, 1]].concat(),
        ),
        // Name cut in the middle of a label.
        ("cut label", b"\x03www\x07exa".to_vec()),
        // Name complete, type and class missing or short.
        ("no type", wire("www.example.com")),
        (
            "half type",
            [wire("www.example.com"), vec![0, 1, 0]].concat(),
        ),
        ("label > 63", long),
        // Reserved label types 0x40 and 0x80.
        ("label type 0x40", vec![0x41, b'a', 0, 0, 1, 0, 1]),
        ("label type 0x80", vec![0x81, b'a', 0, 0, 1, 0, 1]),
        ("name > 255", huge),
    ];
    for (what, mut p) in cases {
        header(&mut p);
        assert_error(&server, &p, 1, what);
    }
    assert_every_worker_answers(&server);
}

/// A query whose question name is these raw labels followed by the root.
fn raw_name_query(labels: &[Vec<u8>]) -> Vec<u8> {
    let mut p = next_id().to_be_bytes().to_vec();
    p.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in labels {
        p.push(label.len() as u8);
        p.extend_from_slice(label);
    }
    p.extend_from_slice(&[0, 0, 1, 0, 1]);
    p
}

#[test]
fn longest_legal_names_are_answered() {
    let server = Server::bundled();
    let suffix = [b"example".to_vec(), b"com".to_vec()];
    // 50 + 3 * 64 + 13 = 255 octets: legal, and not in the zone.
    let mut labels = vec![
        vec![b'q'; 49],
        vec![b'r'; 63],
        vec![b's'; 63],
        vec![b't'; 63],
    ];
    labels.extend(suffix.iter().cloned());
    let r = udp(&server, &raw_name_query(&labels));
    assert_eq!(r.rcode(), 3, "a 255-octet name is legal: {r:?}");
    assert!(r.aa());
    assert_eq!(r.question(), &raw_name_query(&labels)[12..]);
    // One octet more is not.
    labels[0].push(b'q');
    assert_error(&server, &raw_name_query(&labels), 1, "256-octet name");
    // The most labels a name can have: 121 one-octet labels + example.com = 255 octets.
    let mut many = vec![b"a".to_vec(); 121];
    many.extend(suffix.iter().cloned());
    let r = udp(&server, &raw_name_query(&many));
    assert_eq!(r.rcode(), 3, "{r:?}");
    // 127 labels outside our zones: REFUSED, not a crash.
    let r = udp(&server, &raw_name_query(&vec![b"a".to_vec(); 127]));
    assert_eq!(r.rcode(), 5, "{r:?}");
    assert_every_worker_answers(&server);
}

#[test]
fn broken_edns_is_formerr() {
    let server = Server::bundled();
    let bad_ecs: Vec<(&str, Vec<u8>)> = vec![
        ("address too short", ecs(1, 24, 0, &[198, 51])),
        ("address too long", ecs(1, 24, 0, &[198, 51, 100, 7])),
        ("scope set", ecs(1, 24, 16, &[198, 51, 100])),
        ("prefix beyond family", ecs(1, 33, 0, &[1, 2, 3, 4, 5])),
        ("bits beyond prefix", ecs(1, 20, 0, &[198, 51, 100])),
        ("unknown family", ecs(7, 8, 0, &[1])),
        ("truncated", vec![0, 1]),
    ];
    for (what, option) in bad_ecs {
        let p = packet(
            next_id(),
            0,
            "www.example.com",
            A,
            IN,
            Some(opt(1232, 0, false, &[(ECS, &option)])),
        );
        assert_error(&server, &p, 1, what);
    }
    // Two OPT records.
    let mut two = packet(
        next_id(),
        0,
        "www.example.com",
        A,
        IN,
        Some(opt(1232, 0, false, &[])),
    );
    two.extend_from_slice(&opt(1232, 0, false, &[]));
    two[11] = 2;
    assert_error(&server, &two, 1, "two OPT");
    // An OPT whose options overrun its RDATA.
    let mut overrun = opt(1232, 0, false, &[(65001, b"abcd")]);
    let n = overrun.len();
    overrun[n - 5] = 40; // option length 40, only 4 bytes follow
    let p = packet(next_id(), 0, "www.example.com", A, IN, Some(overrun));
    assert_error(&server, &p, 1, "option overrun");
    // Additional count says one record, none present.
    let mut missing = plain("www.example.com", A);
    missing[11] = 1;
    assert_error(&server, &missing, 1, "missing additional record");
    assert_every_worker_answers(&server);
}

/// RFC 6891 §6.1.1: a query with OPT gets OPT back, FORMERR included; RFC 7871 §7.1: the
/// malformed ECS itself is not echoed.
#[test]
fn formerr_for_a_bad_client_subnet_keeps_opt() {
    let server = Server::bundled();
    for (what, option) in [
        ("address too short", ecs(1, 24, 0, &[198, 51])),
        ("scope set", ecs(1, 24, 16, &[198, 51, 100])),
    ] {
        let p = packet(
            next_id(),
            0,
            "www.example.com",
            A,
            IN,
            Some(opt(1232, 0, false, &[(ECS, &option)])),
        );
        let r = assert_error(&server, &p, 1, what);
        let o = r
            .opt
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: FORMERR without OPT: {r:?}"));
        assert!(
            o.options.iter().all(|(code, _)| *code != ECS),
            "{what}: bad ECS echoed"
        );
        assert_eq!(o.payload, OUR_PAYLOAD);
    }
}

#[test]
fn rd_and_id_are_echoed_ra_is_clear() {
    let server = Server::bundled();
    for id in [0u16, 1, 0x8000, 0xffff] {
        let p = packet(id, 0x0100, "www.example.com", A, IN, None);
        let r = udp(&server, &p);
        assert_eq!(r.flags & 0x0100, 0x0100, "RD echoed");
        assert_eq!(r.flags & 0x0080, 0, "we do not recurse");
        let p = packet(id, 0, "nope.example.com", A, IN, None);
        let r = udp(&server, &p);
        assert_eq!(r.flags & 0x0100, 0);
    }
}

// --- CHAOS and other classes ---

fn chaos(name: &str, qtype: RecordType) -> Message {
    let mut m = query(name, qtype);
    m.queries[0].set_query_class(DNSClass::CH);
    m
}

#[test]
fn version_bind_answers_in_chaos() {
    let server = Server::bundled();
    let q = chaos("version.bind.", RecordType::TXT);
    let r = server.udp(&q);
    assert_eq!(r.metadata.id, q.metadata.id);
    assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    assert_eq!(r.answers.len(), 1);
    assert_eq!(r.answers[0].dns_class, DNSClass::CH);
    let text: Vec<u8> = match &r.answers[0].data {
        RData::TXT(t) => t.txt_data.concat(),
        other => panic!("expected TXT, got {other:?}"),
    };
    let text = String::from_utf8_lossy(&text).into_owned();
    assert!(text.starts_with("steerdns "), "{text}");
    assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
}

#[test]
fn unknown_chaos_names_are_refused() {
    let server = Server::bundled();
    for (name, qtype) in [
        ("nothing.bind.", RecordType::TXT),
        ("www.example.com.", RecordType::TXT),
        ("version.bind.", RecordType::A),
        // No identity configured by default.
        ("id.server.", RecordType::TXT),
        ("hostname.bind.", RecordType::TXT),
    ] {
        let r = server.udp(&chaos(name, qtype));
        assert_eq!(
            r.metadata.response_code,
            ResponseCode::Refused,
            "{name} {qtype}"
        );
        assert!(r.answers.is_empty());
        assert!(!r.metadata.authoritative);
    }
}

#[test]
fn identity_answers_when_configured() {
    let config = TempConfig::new("protocol", "identity = \"node-7.test\"\nversion = \"\"");
    let server = config.start();
    for name in ["id.server.", "hostname.bind."] {
        let r = server.udp(&chaos(name, RecordType::TXT));
        assert_eq!(r.metadata.response_code, ResponseCode::NoError, "{name}");
        let text: Vec<u8> = match &r.answers[0].data {
            RData::TXT(t) => t.txt_data.concat(),
            other => panic!("expected TXT, got {other:?}"),
        };
        assert_eq!(text, b"node-7.test");
    }
    // version = "" turns version.bind off.
    let r = server.udp(&chaos("version.bind.", RecordType::TXT));
    assert_eq!(r.metadata.response_code, ResponseCode::Refused);
}

#[test]
fn other_classes_are_refused() {
    let server = Server::bundled();
    for class in [4u16, 254, 255] {
        let p = packet(next_id(), 0, "www.example.com", A, class, None);
        let r = udp(&server, &p);
        assert_eq!(r.rcode(), 5, "class {class}");
        assert!(!r.aa());
        assert_eq!(r.an, 0);
    }
    // CH gets an answer only for CHAOS names: version.bind over the raw path too.
    let r = udp(
        &server,
        &packet(next_id(), 0, "VeRsIoN.BiNd", TXT, CH, None),
    );
    assert_eq!(r.rcode(), 0);
    assert_eq!(r.an, 1);
}

// --- DNS Cookies (RFC 7873, RFC 9018 server cookies) ---

const COOKIE: u16 = 10;
/// The server secret of the cookie tests, as a fleet would share it (`[server.cookies]`).
const COOKIE_SECRET: [u8; 16] = *b"steerdns-cookie!";

/// A server with [`COOKIE_SECRET`] in its secret file (0600).
fn cookie_server() -> (TempConfig, Server) {
    use std::os::unix::fs::PermissionsExt;
    let config = TempConfig::new(
        "cookies",
        "[server.cookies]\nsecret_file = \"cookie.secret\"",
    );
    let path = config.dir().join("cookie.secret");
    let hex: String = COOKIE_SECRET.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, format!("{hex}\n")).expect("write cookie secret");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let server = config.start();
    (config, server)
}

fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as u32
}

/// RFC 9018 §4.4, computed here from the RFC's text rather than with the server's code: the
/// server cookie for `client_cookie` from 127.0.0.1 stamped `at`, made with `secret`.
fn rfc9018_server_cookie(secret: &[u8; 16], client_cookie: &[u8; 8], at: u32) -> Vec<u8> {
    use std::hash::Hasher;
    let mut server = vec![1, 0, 0, 0];
    server.extend_from_slice(&at.to_be_bytes());
    let mut hasher = siphasher::sip::SipHasher24::new_with_key(secret);
    hasher.write(client_cookie);
    hasher.write(&server);
    hasher.write(&[127, 0, 0, 1]);
    server.extend_from_slice(&hasher.finish().to_le_bytes());
    server
}

/// The COOKIE option of a reply: (client cookie, server cookie).
fn reply_cookie(reply: &Reply) -> (Vec<u8>, Vec<u8>) {
    let options = &reply.opt.as_ref().expect("OPT").options;
    let cookies: Vec<_> = options.iter().filter(|(code, _)| *code == COOKIE).collect();
    assert_eq!(cookies.len(), 1, "one COOKIE option: {options:?}");
    let data = &cookies[0].1;
    assert_eq!(data.len(), 24, "client cookie and a 16-byte server cookie");
    (data[..8].to_vec(), data[8..].to_vec())
}

fn cookie_query(name: &str, cookie: &[u8]) -> Vec<u8> {
    packet(
        next_id(),
        0,
        name,
        A,
        IN,
        Some(opt(1232, 0, false, &[(COOKIE, cookie)])),
    )
}

/// The stamp of a server cookie (RFC 9018: bytes 4..8).
fn stamp(server_cookie: &[u8]) -> u32 {
    u32::from_be_bytes(server_cookie[4..8].try_into().expect("4 bytes"))
}

#[test]
fn dig_cookie_gets_an_rfc_9018_server_cookie_that_verifies_and_is_echoed() {
    let (_config, server) = cookie_server();
    let client = [0x24, 0x64, 0xc4, 0xab, 0xcf, 0x10, 0xc9, 0x57];
    let client_hex = "2464c4abcf10c957";
    let before = unix_now();
    let first = dig(
        &server,
        &[&format!("+cookie={client_hex}"), "www.example.com", "A"],
    );
    let after = unix_now();
    let line = first
        .lines()
        .find(|l| l.starts_with("; COOKIE: "))
        .unwrap_or_else(|| panic!("no COOKIE in the reply:\n{first}"));
    assert!(
        line.ends_with("(good)"),
        "dig checks our echo of its cookie: {line}"
    );
    let cookie = line["; COOKIE: ".len()..]
        .split_whitespace()
        .next()
        .expect("hex");
    assert_eq!(cookie.len(), 48, "{line}");
    assert_eq!(&cookie[..16], client_hex);
    let server_cookie: Vec<u8> = (16..48)
        .step_by(2)
        .map(|i| u8::from_str_radix(&cookie[i..i + 2], 16).expect("hex"))
        .collect();
    let at = stamp(&server_cookie);
    assert!((before..=after).contains(&at), "stamped now: {at}");
    assert_eq!(
        server_cookie,
        rfc9018_server_cookie(&COOKIE_SECRET, &client, at),
        "version 1, reserved 0, timestamp, SipHash-2-4 over cookie | header | 127.0.0.1"
    );
    // Sent back, it is ours and young: echoed as it is.
    let again = dig(
        &server,
        &[&format!("+cookie={cookie}"), "www.example.com", "A"],
    );
    assert!(again.contains("status: NOERROR"), "{again}");
    assert!(
        again.contains(&format!("; COOKIE: {cookie} (good)")),
        "{again}"
    );
}

#[test]
fn server_cookies_are_checked_for_secret_address_and_window_and_malformed_ones_are_formerr() {
    let (_config, server) = cookie_server();
    let client = *b"client-1";
    let now = unix_now();
    let with_server = |server_cookie: &[u8]| [&client[..], server_cookie].concat();

    // Issued by another node with the same secret ten minutes ago: valid, echoed unchanged.
    let fleet_made = rfc9018_server_cookie(&COOKIE_SECRET, &client, now - 600);
    let r = udp(
        &server,
        &cookie_query("mail.example.com", &with_server(&fleet_made)),
    );
    assert_eq!((r.rcode(), r.an), (0, 1), "{r:?}");
    assert_eq!(reply_cookie(&r), (client.to_vec(), fleet_made.clone()));

    // Not ours (another secret), expired, too far ahead, or half an hour old: a normal answer
    // with a fresh cookie stamped now (RFC 7873 §5.2.4, RFC 9018 §4.3).
    let cases = [
        (
            "another secret",
            rfc9018_server_cookie(b"another secret!!", &client, now),
        ),
        (
            "older than an hour",
            rfc9018_server_cookie(&COOKIE_SECRET, &client, now - 3700),
        ),
        (
            "ten minutes ahead",
            rfc9018_server_cookie(&COOKIE_SECRET, &client, now + 600),
        ),
        (
            "31 minutes old: renewed",
            rfc9018_server_cookie(&COOKIE_SECRET, &client, now - 1860),
        ),
        ("8-byte server cookie", vec![7; 8]),
        ("32-byte server cookie", vec![7; 32]),
    ];
    for (what, server_cookie) in cases {
        let r = udp(
            &server,
            &cookie_query("mail.example.com", &with_server(&server_cookie)),
        );
        assert_eq!(
            (r.rcode(), r.an),
            (0, 1),
            "{what}: answered normally: {r:?}"
        );
        let (echoed, fresh) = reply_cookie(&r);
        assert_eq!(echoed, client, "{what}");
        let at = stamp(&fresh);
        assert!(
            at >= now && at <= unix_now(),
            "{what}: a fresh cookie, stamped {at}"
        );
        assert_eq!(
            fresh,
            rfc9018_server_cookie(&COOKIE_SECRET, &client, at),
            "{what}"
        );
    }

    // Over TCP too, and on answers that are not NOERROR.
    let r = tcp(&server, &cookie_query("nope.example.com", &client));
    assert_eq!(r.rcode(), 3, "NXDOMAIN");
    assert_eq!(reply_cookie(&r).0, client);

    // Malformed COOKIE options are FORMERR (RFC 7873 §5.2.2), with our OPT and no cookie.
    for len in [0, 7, 9, 15, 41] {
        let r = udp(&server, &cookie_query("mail.example.com", &vec![5; len]));
        assert_eq!(r.rcode(), 1, "{len}-byte COOKIE: {r:?}");
        let o = r.opt.as_ref().expect("OPT kept on FORMERR");
        assert!(
            o.options.iter().all(|(code, _)| *code != COOKIE),
            "{len}: {o:?}"
        );
    }

    // No COOKIE option: no cookie in the answer.
    let r = udp(&server, &with_edns("www.example.com", A, 1232));
    assert!(r.opt.expect("OPT").options.is_empty());
}

#[test]
fn cookies_off_ignore_the_option() {
    let config = TempConfig::new("cookies-off", "[server.cookies]\nenabled = false");
    let server = config.start();
    let r = udp(&server, &cookie_query("mail.example.com", b"client-1"));
    assert_eq!((r.rcode(), r.an), (0, 1));
    assert!(r.opt.expect("OPT").options.is_empty());
}
