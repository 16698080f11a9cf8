//! Response rate limiting end to end (issue 8), with the real binary on loopback: a
//! spoofed-source-style flood from 50 addresses of one /24 (127.1.1.x, loopback aliases) asking
//! the same question is limited — most queries get nothing, every `slip`-th limited one gets a
//! truncated reply — while a client in another /24 keeps getting full answers at its modest
//! rate, an exempt network is never limited, and the limited client's retry over TCP is
//! answered in full. Client-side counts must equal the server's RRL counters.

use crate::common;
use crate::hostile_common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::*;
use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use hostile_common::*;

const RATE: u32 = 10;
const BURST: u32 = 10;
const SLIP: usize = 3;

fn config() -> TempConfig {
    TempConfig::new(
        "rrl",
        &format!(
            "udp_workers = 2\n\n[rrl]\nenabled = true\nresponses_per_second = {RATE}\n\
             burst = {BURST}\nslip = {SLIP}\nexempt = [\"127.3.3.0/24\"]\n"
        ),
    )
}

/// What came back for one query.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// A full answer: records, TC clear.
    Answer,
    /// A slip: TC set, no records, no bigger than the query.
    Truncated,
}

fn classify(query: &[u8], reply: &[u8]) -> Reply {
    let message = Message::from_vec(reply).expect("a well-formed reply");
    if message.metadata.truncation {
        assert!(
            message.answers.is_empty()
                && message.authorities.is_empty()
                && message.additionals.is_empty(),
            "a slipped reply carries no records: {message:?}"
        );
        assert!(
            reply.len() <= query.len(),
            "a slip ({} bytes) is bigger than the query ({} bytes)",
            reply.len(),
            query.len()
        );
        assert_eq!(
            message.queries.len(),
            1,
            "a slip echoes the question (resolvers match on it)"
        );
        Reply::Truncated
    } else {
        assert!(
            !message.answers.is_empty(),
            "an answer with records: {message:?}"
        );
        Reply::Answer
    }
}

/// Everything that arrives on `socket` until it has been quiet for 200 ms.
fn drain(socket: &UdpSocket) -> Vec<Vec<u8>> {
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut replies = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        replies.push(buf[..n].to_vec());
    }
    replies
}

/// Whatever is queued on `socket` now, without waiting.
fn take_queued(socket: &UdpSocket) -> Vec<Vec<u8>> {
    socket.set_nonblocking(true).expect("nonblocking");
    let mut replies = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        replies.push(buf[..n].to_vec());
    }
    socket.set_nonblocking(false).expect("blocking");
    replies
}

/// A client at a modest pace (well under the rate): every query must get a full answer.
fn modest_client(server: std::net::SocketAddr, packet: Vec<u8>) -> usize {
    let socket = udp_from(alias(2, 2, 2));
    let mut answered = 0;
    for _ in 0..8 {
        socket.send_to(&packet, server).expect("send");
        let mut buf = [0u8; 4096];
        let n = socket
            .recv(&mut buf)
            .expect("the modest client is answered");
        assert_eq!(classify(&packet, &buf[..n]), Reply::Answer);
        answered += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    answered
}

#[test]
fn a_spoofed_flood_is_limited_while_other_clients_are_answered() {
    let config = config();
    let (server, admin) = start_with_admin(&config, &[]);
    let packet = query("mail.example.com.", RecordType::A)
        .to_vec()
        .expect("encode");

    // The flood: 50 sources in 127.1.1.0/24, 20 rounds 50 ms apart (1000 queries in ~1 s),
    // while a client in 127.2.2.0/24 asks the same question 8 times at 10/s.
    let flooders: Vec<UdpSocket> = (1..=50).map(|h| udp_from(alias(1, 1, h))).collect();
    let modest = {
        let packet = packet.clone();
        let addr = server.addr;
        std::thread::spawn(move || modest_client(addr, packet))
    };
    let started = Instant::now();
    let rounds = 20;
    for round in 0..rounds {
        if round > 0 {
            std::thread::sleep(Duration::from_millis(50));
        }
        for socket in &flooders {
            socket.send_to(&packet, server.addr).expect("send");
        }
    }
    let flood_secs = started.elapsed().as_secs_f64();
    let sent = rounds * flooders.len();

    let modest_answered = modest.join().expect("modest client");
    // Every query decided (a reply counted, or a drop), then every reply counted collected:
    // the server counts a batch's replies just before it sends them.
    let udp = |name: &str| metric(admin, name, &[("transport", "udp")]) as usize;
    let replied = wait_for("every flood query answered or dropped", TIMEOUT, || {
        let replies = udp("steerdns_responses_total") - modest_answered;
        let dropped = metric(admin, "steerdns_rrl_dropped_total", &[]) as usize;
        (replies + dropped >= sent).then_some(replies)
    });
    let (mut answers, mut slips) = (0usize, 0usize);
    wait_for("every reply counted reaches its flooder", TIMEOUT, || {
        for socket in &flooders {
            for reply in take_queued(socket) {
                match classify(&packet, &reply) {
                    Reply::Answer => answers += 1,
                    Reply::Truncated => slips += 1,
                }
            }
        }
        (answers + slips >= replied).then_some(())
    });
    let silent = sent - answers - slips;
    let limited = slips + silent;
    println!(
        "flood: {sent} queries in {flood_secs:.2} s: {answers} answered, {slips} truncated, \
         {silent} unanswered"
    );
    assert_eq!(modest_answered, 8);

    // One bucket for the whole /24: the burst, then the rate (plus a little for the server
    // answering the last queries a moment after they were sent).
    let allowed = f64::from(BURST) + f64::from(RATE) * (flood_secs + 0.3);
    assert!(
        answers >= BURST as usize && answers as f64 <= allowed,
        "{answers} full answers; the bucket allows {BURST} + {RATE}/s over {flood_secs:.2} s"
    );
    assert!(
        silent > sent / 2,
        "most of the flood gets nothing: {silent}"
    );
    // Every SLIP-th limited reply is truncated (counted per UDP worker: 2 workers).
    let expected = limited / SLIP;
    assert!(
        slips + 2 >= expected && slips <= expected + 1,
        "{slips} slips for {limited} limited responses with slip = {SLIP}"
    );

    // The server counted exactly what the clients saw.
    let counter = |name: &str, labels: &[(&str, &str)]| metric(admin, name, labels) as usize;
    assert_eq!(
        counter("steerdns_rrl_limited_total", &[("class", "answer")]),
        limited
    );
    assert_eq!(counter("steerdns_rrl_limited_total", &[]), limited);
    assert_eq!(counter("steerdns_rrl_slipped_total", &[]), slips);
    assert_eq!(counter("steerdns_rrl_dropped_total", &[]), silent);
    assert_eq!(
        counter("steerdns_dropped_queries_total", &[("transport", "udp")]),
        silent
    );

    // A limited client retries over TCP (as a slip tells it to): a full answer.
    let mut stream = tcp_from(alias(1, 1, 1), server.addr);
    write_frame(&mut stream, &packet);
    let reply = read_frame(&mut stream).expect("a TCP answer");
    let message = Message::from_vec(&reply).expect("well-formed");
    assert!(!message.metadata.truncation && !message.answers.is_empty());
    // ...and TCP is never counted as limited.
    assert_eq!(counter("steerdns_rrl_limited_total", &[]), limited);
}

#[test]
fn an_exempt_network_is_never_limited() {
    let config = config();
    let (server, admin) = start_with_admin(&config, &[]);
    let packet = query("mail.example.com.", RecordType::A)
        .to_vec()
        .expect("encode");
    // 100 queries, ten times the burst, in bursts of ten: all answered in full.
    for (exempt, host) in [(true, alias(3, 3, 3)), (false, alias(4, 4, 4))] {
        let socket = udp_from(host);
        let mut answers = 0;
        for _ in 0..10 {
            for _ in 0..10 {
                socket.send_to(&packet, server.addr).expect("send");
            }
            answers += drain(&socket)
                .iter()
                .filter(|r| classify(&packet, r) == Reply::Answer)
                .count();
        }
        if exempt {
            assert_eq!(answers, 100, "{host} is exempt");
        } else {
            // Ten rounds of 200 ms quiet each refill about 2 tokens: far fewer than 100.
            assert!(answers < 50, "{host} is not exempt: {answers} answered");
        }
    }
    let limited = metric(admin, "steerdns_rrl_limited_total", &[]);
    assert!(limited > 0.0, "only the non-exempt client was limited");
}

/// `packet` (no additional records) with an OPT record carrying a COOKIE option.
fn with_cookie(packet: &[u8], cookie: &[u8]) -> Vec<u8> {
    let mut p = packet.to_vec();
    p[10..12].copy_from_slice(&1u16.to_be_bytes());
    p.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    p.extend_from_slice(&(4 + cookie.len() as u16).to_be_bytes());
    p.extend_from_slice(&10u16.to_be_bytes());
    p.extend_from_slice(&(cookie.len() as u16).to_be_bytes());
    p.extend_from_slice(cookie);
    p
}

/// A reply's rcode (with OPT's extended bits), TC flag, and COOKIE option data (our OPT is
/// the last record, the cookie its last option).
fn rcode_tc_cookie(reply: &[u8]) -> (u16, bool, Option<Vec<u8>>) {
    let message = Message::from_vec(reply).expect("a well-formed reply");
    let low = u16::from(reply[3] & 0x0F);
    let edns = message.edns.as_ref();
    let high = edns.map_or(0, |e| u16::from(e.rcode_high()));
    let cookie = edns.and_then(|_| {
        let data = reply.get(reply.len().checked_sub(24)?..)?;
        let head = reply.get(reply.len() - 28..reply.len() - 24)?;
        (head == [0, 10, 0, 24]).then(|| data.to_vec())
    });
    ((high << 4) | low, message.metadata.truncation, cookie)
}

/// A client that sent a cookie is slipped with BADCOOKIE and our cookie, not TC (RFC 7873
/// §5.2.3: it retries over UDP with the cookie), and with a valid server cookie its source is
/// proven, so it is never limited.
#[test]
fn a_cookie_client_is_slipped_badcookie_and_a_valid_cookie_is_never_limited() {
    let config = config();
    let (server, admin) = start_with_admin(&config, &[]);
    let plain = query("mail.example.com.", RecordType::A)
        .to_vec()
        .expect("encode");
    let packet = with_cookie(&plain, b"client-7");
    let socket = udp_from(alias(5, 5, 5));
    let mut replies = Vec::new();
    for _ in 0..10 {
        for _ in 0..10 {
            socket.send_to(&packet, server.addr).expect("send");
        }
        replies.extend(drain(&socket));
    }
    let kinds: Vec<_> = replies.iter().map(|r| rcode_tc_cookie(r)).collect();
    let badcookie: Vec<_> = kinds.iter().filter(|(rcode, _, _)| *rcode == 23).collect();
    assert!(
        !badcookie.is_empty(),
        "limited replies are BADCOOKIE: {kinds:?}"
    );
    assert!(kinds.iter().all(|(_, tc, _)| !tc), "no TC slip: {kinds:?}");
    assert!(
        replies.len() < 100,
        "the flood was limited: {} replies",
        replies.len()
    );
    let cookie = badcookie[0]
        .2
        .clone()
        .expect("BADCOOKIE carries our cookie");
    assert_eq!(&cookie[..8], b"client-7");

    // Sent back: every query answered in full, however fast.
    let proven = with_cookie(&plain, &cookie);
    let mut answers = 0;
    for _ in 0..10 {
        for _ in 0..10 {
            socket.send_to(&proven, server.addr).expect("send");
        }
        answers += drain(&socket)
            .iter()
            .filter(|r| rcode_tc_cookie(r).0 == 0 && classify(&proven, r) == Reply::Answer)
            .count();
    }
    assert_eq!(answers, 100, "a valid cookie is never limited");
    let sent = metric(
        admin,
        "steerdns_responses_total",
        &[("transport", "udp"), ("rcode", "BADCOOKIE")],
    );
    assert_eq!(
        sent,
        badcookie.len() as f64,
        "BADCOOKIE responses are counted as such"
    );
}
