//! End-to-end tests of DNS over TCP (RFC 7766, issue 2): pipelining, many queries per
//! connection, the idle timeout, the connection cap, the per-connection query cap, zone
//! transfers refused.

use crate::common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

/// The bundled zones, and `tcp` lines under `[server.tcp]`.
fn tcp_config(tcp: &str) -> TempConfig {
    TempConfig::new("tcp", &format!("\n[server.tcp]\n{tcp}"))
}

/// The bundled zones with built-in defaults, run from `zones/` (no `steerdns.toml` there).
fn framed(message: &Message) -> Vec<u8> {
    let bytes = message.to_vec().expect("encode");
    let mut out = (bytes.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&bytes);
    out
}

fn read_message(stream: &mut TcpStream) -> Option<Message> {
    read_frame(stream).map(|raw| Message::from_vec(&raw).expect("well-formed answer"))
}

/// True when the server has closed the connection: a read returns EOF (or a reset) in time.
fn closed_by_server(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).expect("timeout");
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
        ),
    }
}

fn first_v4(m: &Message) -> Option<Ipv4Addr> {
    m.answers.iter().find_map(|r| match &r.data {
        RData::A(a) => Some(a.0),
        _ => None,
    })
}

/// Queries with distinct names and known answers, to check each reply belongs to its query.
fn mixed_queries(n: usize) -> Vec<Message> {
    let names = [
        ("mail.example.com.", RecordType::A),
        ("nope.example.com.", RecordType::A),
        ("www.example.com.", RecordType::A),
        ("foo.wild.example.com.", RecordType::A),
        ("example.com.", RecordType::SOA),
        ("x.sub.example.com.", RecordType::A),
        ("big.example.com.", RecordType::TXT),
    ];
    (0..n)
        .map(|i| {
            let (name, qtype) = names[i % names.len()];
            query(name, qtype)
        })
        .collect()
}

fn assert_answers(question: &Message, answer: &Message) {
    assert_eq!(
        answer.metadata.id, question.metadata.id,
        "answers come in order"
    );
    assert_eq!(answer.queries, question.queries);
    assert!(!answer.metadata.truncation, "no TC over TCP");
    let q = &question.queries[0];
    let name = q.name().to_ascii();
    match name.as_str() {
        "mail.example.com." => assert_eq!(first_v4(answer), Some(Ipv4Addr::new(192, 0, 2, 25))),
        "nope.example.com." => assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain),
        "www.example.com." => assert_eq!(answer.answers.len(), 2),
        "foo.wild.example.com." => {
            assert_eq!(first_v4(answer), Some(Ipv4Addr::new(192, 0, 2, 100)))
        }
        "example.com." => assert_eq!(answer.answers[0].record_type(), RecordType::SOA),
        "x.sub.example.com." => assert!(!answer.metadata.authoritative),
        "big.example.com." => assert_eq!(answer.answers.len(), 1),
        other => panic!("unexpected name {other}"),
    }
}

#[test]
fn pipelined_queries_are_answered_in_order() {
    let server = Server::bundled();
    let mut stream = server.connect_tcp();
    let queries = mixed_queries(21);
    let burst: Vec<u8> = queries.iter().flat_map(framed).collect();
    stream.write_all(&burst).expect("write burst");
    for q in &queries {
        let answer = read_message(&mut stream).expect("a pipelined answer");
        assert_answers(q, &answer);
    }
}

#[test]
fn many_sequential_queries_share_one_connection() {
    let server = Server::bundled();
    let mut stream = server.connect_tcp();
    for q in mixed_queries(300) {
        stream.write_all(&framed(&q)).expect("write");
        let answer = read_message(&mut stream).expect("answer on the same connection");
        assert_answers(&q, &answer);
    }
}

#[test]
fn queries_split_across_writes_are_reassembled() {
    let server = Server::bundled();
    let mut stream = server.connect_tcp();
    let q = query("mail.example.com.", RecordType::A);
    let bytes = framed(&q);
    // Length prefix split, then the message in small pieces.
    for piece in bytes.chunks(3) {
        stream.write_all(piece).expect("write piece");
        stream.flush().expect("flush");
        std::thread::sleep(Duration::from_millis(5));
    }
    let answer = read_message(&mut stream).expect("answer");
    assert_answers(&q, &answer);
    // Two queries where the second starts in the first one's write.
    let (a, b) = (
        query("www.example.com.", RecordType::A),
        query("example.com.", RecordType::SOA),
    );
    let joined = [framed(&a), framed(&b)].concat();
    let cut = framed(&a).len() + 1;
    stream.write_all(&joined[..cut]).expect("write");
    std::thread::sleep(Duration::from_millis(20));
    stream.write_all(&joined[cut..]).expect("write");
    assert_answers(&a, &read_message(&mut stream).expect("answer a"));
    assert_answers(&b, &read_message(&mut stream).expect("answer b"));
}

#[test]
fn idle_connections_are_closed_after_the_timeout() {
    let config = tcp_config("idle_timeout_secs = 1");
    let server = config.start();

    let started = Instant::now();
    let mut silent = server.connect_tcp();
    assert!(
        closed_by_server(&mut silent, TIMEOUT),
        "a silent connection is closed"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed too early: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(3),
        "closed too late: {waited:?}"
    );

    // A connection that asked something and then went quiet is closed too.
    let mut used = server.connect_tcp();
    let q = query("mail.example.com.", RecordType::A);
    used.write_all(&framed(&q)).expect("write");
    assert_answers(&q, &read_message(&mut used).expect("answer"));
    let answered = Instant::now();
    assert!(
        closed_by_server(&mut used, TIMEOUT),
        "an idle connection is closed"
    );
    let waited = answered.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
}

/// Every slot held by a connection mid-query: a newcomer is not kept waiting (issue 28). It
/// is served at once, and one holder -- the worst: mid-query longest for the queries it
/// completed -- is closed for it; the other goes on being served. (The attack that made this
/// matter, busy holders of every slot, is in `tests/server/tcp_limits.rs`.)
#[test]
fn a_newcomer_to_full_slots_is_served_and_one_holder_mid_query_is_closed_for_it() {
    let config = tcp_config("max_connections = 2\nframe_timeout_secs = 5");
    let server = config.start();
    let q = query("mail.example.com.", RecordType::A);

    // Two connections, each proven accepted by a round trip, then busy: each has sent the
    // first byte of its next query (and may take the frame timeout to send the rest).
    let mut first = server.connect_tcp();
    let mut second = server.connect_tcp();
    let next = framed(&q);
    for stream in [&mut first, &mut second] {
        stream.write_all(&framed(&q)).expect("write");
        assert_answers(&q, &read_message(stream).expect("answer"));
        stream.write_all(&next[..1]).expect("write a first byte");
    }

    // A third connection is served although both slots are taken.
    let mut third = server.connect_tcp();
    let q3 = query("www.example.com.", RecordType::A);
    third.write_all(&framed(&q3)).expect("write");
    let answer = read_message(&mut third).expect("served with every slot taken");
    assert_answers(&q3, &answer);

    // Of the two holders, one was closed for it and the other is still served: the rest of
    // its query is answered.
    let answered: Vec<bool> = [&mut first, &mut second]
        .into_iter()
        .map(|stream| {
            let _ = stream.write_all(&next[1..]);
            read_message(stream).is_some_and(|reply| {
                assert_answers(&q, &reply);
                true
            })
        })
        .collect();
    assert_eq!(
        answered.iter().filter(|a| **a).count(),
        1,
        "one holder closed, one served: {answered:?}"
    );
}

#[test]
fn connection_is_closed_after_max_queries() {
    let config = tcp_config("max_queries_per_connection = 3");
    let server = config.start();

    let mut sequential = server.connect_tcp();
    for q in mixed_queries(3) {
        sequential.write_all(&framed(&q)).expect("write");
        assert_answers(&q, &read_message(&mut sequential).expect("answer"));
    }
    assert!(
        closed_by_server(&mut sequential, TIMEOUT),
        "closed after the third answer"
    );

    // Pipelined: five sent, three answered, then the close.
    let mut pipelined = server.connect_tcp();
    let queries = mixed_queries(5);
    let burst: Vec<u8> = queries.iter().flat_map(framed).collect();
    pipelined.write_all(&burst).expect("write");
    for q in &queries[..3] {
        assert_answers(q, &read_message(&mut pipelined).expect("answer"));
    }
    assert!(
        read_frame(&mut pipelined).is_none(),
        "a fourth answer was sent"
    );
}

#[test]
fn zone_transfers_are_refused() {
    let server = Server::bundled();
    for qtype in [RecordType::AXFR, RecordType::IXFR] {
        let q = query("example.com.", qtype);
        let r = server.tcp(&q);
        assert_eq!(r.metadata.id, q.metadata.id);
        assert_eq!(
            r.metadata.response_code,
            ResponseCode::Refused,
            "{qtype} over TCP"
        );
        assert!(!r.metadata.authoritative);
        assert!(r.answers.is_empty() && r.authorities.is_empty());
        assert_eq!(
            r.queries[0].name(),
            &Name::from_ascii("example.com.").expect("name")
        );
        let r = server.udp(&q);
        assert_eq!(
            r.metadata.response_code,
            ResponseCode::Refused,
            "{qtype} over UDP"
        );
    }
}

#[test]
fn garbage_frames_do_not_break_the_server() {
    let server = Server::bundled();
    let q = query("mail.example.com.", RecordType::A);
    // An empty frame, a runt, a response (QR set), random bytes: none is answered with data,
    // and the connection (or a new one) keeps serving.
    let mut response = q.to_vec().expect("encode");
    response[2] |= 0x80;
    let frames: Vec<Vec<u8>> = vec![
        vec![],
        vec![1, 2, 3],
        response,
        (0..200u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect(),
    ];
    for frame in frames {
        let mut stream = server.connect_tcp();
        write_frame(&mut stream, &frame);
        write_frame(&mut stream, &q.to_vec().expect("encode"));
        stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        // Whatever came back for the bad frame must be a well-formed reply with QR set.
        let mut found = false;
        for _ in 0..2 {
            let Some(raw) = read_frame(&mut stream) else {
                break;
            };
            let m = Message::from_vec(&raw).expect("well-formed reply");
            assert_eq!(
                m.metadata.message_type,
                hickory_proto::op::MessageType::Response
            );
            if m.metadata.id == q.metadata.id && m.answers.len() == 1 {
                found = true;
                break;
            }
        }
        if !found {
            // The server may drop a connection that sent garbage; a new one must work.
            let r = server.tcp(&q);
            assert_eq!(first_v4(&r), Some(Ipv4Addr::new(192, 0, 2, 25)));
        }
    }
    let r = server.tcp(&q);
    assert_eq!(first_v4(&r), Some(Ipv4Addr::new(192, 0, 2, 25)));
}

#[test]
fn a_half_sent_frame_does_not_block_other_connections() {
    let config = tcp_config("idle_timeout_secs = 5");
    let server = config.start();
    let mut stalled = server.connect_tcp();
    // Promise 100 bytes, send 3.
    stalled.write_all(&[0, 100, 1, 2, 3]).expect("write");
    let q = query("mail.example.com.", RecordType::A);
    let started = Instant::now();
    let r = server.tcp(&q);
    assert_eq!(first_v4(&r), Some(Ipv4Addr::new(192, 0, 2, 25)));
    assert!(started.elapsed() < Duration::from_secs(1));
    let r = server.udp(&q);
    assert_eq!(first_v4(&r), Some(Ipv4Addr::new(192, 0, 2, 25)));
}
