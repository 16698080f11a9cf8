//! TCP limits under a slowloris attack (issue 8), with the real binary on loopback. One
//! attacker address opens far more idle connections than its per-client share (the extra ones
//! are closed at once); another sends half frames, which are closed after the frame timeout.
//! Meanwhile UDP queries keep being answered and another client's TCP query is answered
//! promptly; once the attacker lets go, its share is free again. The server's counters must
//! agree.

mod common;
mod hostile_common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use hostile_common::*;

const PER_CLIENT: usize = 8;
const IDLE_ATTEMPTS: usize = 20;
const HALF_FRAMES: usize = 8;

fn config() -> TempConfig {
    TempConfig::new(
        "tcp-limits",
        &format!(
            "udp_workers = 1\n\n[server.tcp]\nmax_connections = 64\n\
             max_connections_per_client = {PER_CLIENT}\nframe_timeout_secs = 1\n\
             idle_timeout_secs = 30\n"
        ),
    )
}

fn framed_query(name: &str) -> (Message, Vec<u8>) {
    let message = query(name, RecordType::A);
    let bytes = message.to_vec().expect("encode");
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&bytes);
    (message, framed)
}

/// A TCP query from `from` on a fresh connection, answered in full within `limit`.
fn tcp_answered(server: &Server, from: std::net::IpAddr, limit: Duration) -> Duration {
    let started = Instant::now();
    let mut stream = tcp_from(from, server.addr);
    stream.set_read_timeout(Some(limit)).expect("timeout");
    let (q, framed) = framed_query("mail.example.com.");
    stream.write_all(&framed).expect("write");
    let reply = read_frame(&mut stream).expect("a TCP answer in time");
    let reply = Message::from_vec(&reply).expect("well-formed");
    assert_eq!(reply.metadata.id, q.metadata.id);
    assert!(!reply.answers.is_empty());
    started.elapsed()
}

/// 50 UDP queries from a bystander, every one answered.
fn udp_keeps_answering(server: &Server) {
    let socket = udp_from(alias(7, 7, 7));
    let packet = query("mail.example.com.", RecordType::A)
        .to_vec()
        .expect("encode");
    let mut buf = [0u8; 4096];
    for i in 0..50 {
        socket.send_to(&packet, server.addr).expect("send");
        let n = socket
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("UDP query {i} unanswered during the attack: {e}"));
        let reply = Message::from_vec(&buf[..n]).expect("well-formed");
        assert!(!reply.answers.is_empty());
    }
}

#[test]
fn slowloris_does_not_starve_udp_or_other_tcp_clients() {
    let config = config();
    let (server, admin) = start_with_admin(&config, &[]);
    let attacker = alias(4, 4, 4);

    // Idle connections from one address: its share stays open, the rest are closed at once.
    let mut idle: Vec<TcpStream> = (0..IDLE_ATTEMPTS)
        .map(|_| tcp_from(attacker, server.addr))
        .collect();
    let refused = || metric(admin, "steerdns_tcp_refused_per_client_total", &[]) as usize;
    let deadline = Instant::now() + TIMEOUT;
    while refused() < IDLE_ATTEMPTS - PER_CLIENT && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    let (closed, open): (Vec<_>, Vec<_>) = idle.iter_mut().map(closed_now).partition(|c| *c);
    assert_eq!(
        (open.len(), closed.len()),
        (PER_CLIENT, IDLE_ATTEMPTS - PER_CLIENT),
        "an address keeps only its share of connections"
    );
    assert_eq!(refused(), IDLE_ATTEMPTS - PER_CLIENT);

    // Half frames from a second address: a length and part of the message, then nothing.
    let (_, framed) = framed_query("www.example.com.");
    let sent_at = Instant::now();
    let mut half: Vec<TcpStream> = (0..HALF_FRAMES)
        .map(|i| {
            let mut stream = tcp_from(alias(4, 4, 5), server.addr);
            // Some stop inside the length, some inside the message.
            let cut = if i % 2 == 0 { 1 } else { framed.len() / 2 };
            stream
                .write_all(&framed[..cut])
                .expect("write a half frame");
            stream
        })
        .collect();

    // Under attack: UDP is answered, and so is another client over TCP, promptly.
    udp_keeps_answering(&server);
    let took = tcp_answered(&server, alias(6, 6, 6), Duration::from_secs(2));
    println!("another client's TCP query during the attack: {took:?}");

    // The half frames are closed once the frame timeout (1 s) has passed, long before the
    // idle timeout (30 s).
    for (i, stream) in half.iter_mut().enumerate() {
        assert!(
            closed_within(stream, Duration::from_secs(5)),
            "half frame {i} still open after {:?}",
            sent_at.elapsed()
        );
    }
    let waited = sent_at.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed before the frame timeout: {waited:?}"
    );
    assert_eq!(
        metric(admin, "steerdns_tcp_frame_timeouts_total", &[]) as usize,
        HALF_FRAMES
    );
    // The idle share is still open (its idle timeout is 30 s)...
    assert!(
        idle.iter_mut()
            .map(closed_now)
            .filter(|closed| !closed)
            .count()
            == PER_CLIENT,
        "the attacker's idle share is untouched by the frame timeout"
    );
    // ...and is freed when the attacker lets go: its next connection is served.
    drop(idle);
    std::thread::sleep(Duration::from_millis(300));
    tcp_answered(&server, attacker, Duration::from_secs(2));
    udp_keeps_answering(&server);
}

#[test]
fn a_query_sent_byte_by_byte_within_the_frame_timeout_is_answered() {
    let config = config();
    let (server, _admin) = start_with_admin(&config, &[]);
    let mut stream = tcp_from(alias(8, 8, 8), server.addr);
    let (q, framed) = framed_query("mail.example.com.");
    // Slow but steady: the whole frame over ~0.5 s, inside the 1 s frame timeout.
    let pause = Duration::from_millis(500) / framed.len() as u32;
    for byte in &framed {
        stream.write_all(&[*byte]).expect("write");
        std::thread::sleep(pause);
    }
    let reply = read_frame(&mut stream).expect("answered");
    let reply = Message::from_vec(&reply).expect("well-formed");
    assert_eq!(reply.metadata.id, q.metadata.id);
    assert!(!reply.answers.is_empty());
}
