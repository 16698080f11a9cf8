//! Zero-downtime upgrade: under a steady loopback query load, a second steerdns starts on the
//! same port (SO_REUSEPORT), the first gets SIGTERM, and not one query may go unanswered.
//!
//! This is the procedure deploy/README.md gives operators ("Upgrading with zero downtime"):
//! start the new process, wait until it is ready, then stop the old one.

mod common;

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{free_port, query, Server};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;

/// Client sockets: distinct source ports, so the kernel spreads them over the server sockets
/// of both processes.
const CLIENTS: usize = 16;
/// Total queries per second over all clients. High enough that a query lands in the short
/// moment when an old process stops reading but has not left the group: a server that simply
/// closed its sockets lost queries in 8 of 10 runs at this rate (1 in 10 at 3,000).
const RATE: u64 = 20_000;
/// How long a query may stay unanswered before it counts as lost.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// Most queries in flight at once (the load pauses rather than pile up).
const WINDOW: usize = 2000;

/// Queries in flight: (client, id) → when sent.
type InFlight = Arc<Mutex<HashMap<(usize, u16), Instant>>>;

struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
    bad_answers: Arc<AtomicU64>,
    in_flight: InFlight,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts sending `example.com SOA` queries with unique IDs at [`RATE`] to `server`.
    fn start(server: SocketAddr) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let answered = Arc::new(AtomicU64::new(0));
        let bad_answers = Arc::new(AtomicU64::new(0));
        let in_flight: InFlight = Arc::default();
        let template = query("example.com.", RecordType::SOA)
            .to_vec()
            .expect("encode query");
        let mut sockets = Vec::new();
        let mut threads = Vec::new();
        for client in 0..CLIENTS {
            let socket = UdpSocket::bind("127.0.0.1:0").expect("bind client");
            socket
                .set_read_timeout(Some(Duration::from_millis(50)))
                .expect("timeout");
            let receiver = socket.try_clone().expect("clone socket");
            sockets.push(socket);
            let (stop, answered, bad, in_flight) = (
                stop.clone(),
                answered.clone(),
                bad_answers.clone(),
                in_flight.clone(),
            );
            threads.push(std::thread::spawn(move || {
                receive(client, &receiver, &stop, &answered, &bad, &in_flight)
            }));
        }
        let sender = {
            let (stop, sent, in_flight) = (stop.clone(), sent.clone(), in_flight.clone());
            std::thread::spawn(move || send(server, &sockets, &template, &stop, &sent, &in_flight))
        };
        threads.push(sender);
        Load {
            stop,
            sent,
            answered,
            bad_answers,
            in_flight,
            threads,
        }
    }

    fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Stops sending, waits [`ANSWER_TIMEOUT`] for the last answers, and returns the send times
    /// of the queries never answered.
    fn finish(self) -> Outcome {
        self.stop.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        while Instant::now() < deadline && !self.in_flight.lock().expect("lock").is_empty() {
            std::thread::sleep(Duration::from_millis(20));
        }
        for t in self.threads {
            t.join().expect("load thread");
        }
        let lost: Vec<Instant> = self
            .in_flight
            .lock()
            .expect("lock")
            .values()
            .copied()
            .collect();
        Outcome {
            sent: self.sent.load(Ordering::Relaxed),
            answered: self.answered.load(Ordering::Relaxed),
            bad_answers: self.bad_answers.load(Ordering::Relaxed),
            lost,
        }
    }
}

struct Outcome {
    sent: u64,
    answered: u64,
    bad_answers: u64,
    lost: Vec<Instant>,
}

fn send(
    server: SocketAddr,
    sockets: &[UdpSocket],
    template: &[u8],
    stop: &AtomicBool,
    sent: &AtomicU64,
    in_flight: &InFlight,
) {
    let interval = Duration::from_nanos(1_000_000_000 / RATE);
    let started = Instant::now();
    let mut packet = template.to_vec();
    let mut next_id = vec![0u16; sockets.len()];
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        // Paced against the start time, so a slow moment is made up rather than lost.
        let due = started + interval * n as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        if in_flight.lock().expect("lock").len() >= WINDOW {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let client = (n as usize) % sockets.len();
        let id = next_id[client];
        next_id[client] = id.wrapping_add(1);
        packet[..2].copy_from_slice(&id.to_be_bytes());
        in_flight
            .lock()
            .expect("lock")
            .insert((client, id), Instant::now());
        // A failed send (e.g. a port-unreachable reported back) stays in flight: lost.
        let _ = sockets[client].send_to(&packet, server);
        sent.fetch_add(1, Ordering::Relaxed);
        n += 1;
    }
}

fn receive(
    client: usize,
    socket: &UdpSocket,
    stop: &AtomicBool,
    answered: &AtomicU64,
    bad: &AtomicU64,
    in_flight: &InFlight,
) {
    let mut buf = [0u8; 4096];
    // Keep reading until stopped and nothing of ours is in flight, at most the timeout longer.
    let mut stopped_at = None;
    loop {
        if stop.load(Ordering::Relaxed) {
            let since = *stopped_at.get_or_insert_with(Instant::now);
            let mine_left = in_flight
                .lock()
                .expect("lock")
                .keys()
                .any(|(c, _)| *c == client);
            if !mine_left || since.elapsed() > ANSWER_TIMEOUT {
                return;
            }
        }
        let Ok((n, _)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let Ok(message) = Message::from_vec(&buf[..n]) else {
            bad.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let id = message.metadata.id;
        let good = message.metadata.response_code == ResponseCode::NoError
            && message.metadata.authoritative
            && message.answers.len() == 1;
        if !good {
            bad.fetch_add(1, Ordering::Relaxed);
        }
        if in_flight
            .lock()
            .expect("lock")
            .remove(&(client, id))
            .is_some()
        {
            answered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Waits (bounded) until `answered` has grown by `more`, proving the load is flowing.
fn wait_for_answers(load: &Load, more: u64) {
    let target = load.answered() + more;
    let deadline = Instant::now() + Duration::from_secs(5);
    while load.answered() < target {
        assert!(
            Instant::now() < deadline,
            "the query load is not being answered"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends SIGTERM and waits (bounded) until the process has exited: its stdout closes.
fn terminate(server: &Server) -> Instant {
    let pid = server.pid() as libc::pid_t;
    // SAFETY: kill(2) with a pid we spawned and still hold (not yet reaped), a valid signal.
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0, "SIGTERM to the old server");
    let sent = Instant::now();
    let deadline = sent + Duration::from_secs(10);
    loop {
        match server.stdout_lines.recv_timeout(Duration::from_millis(100)) {
            Err(RecvTimeoutError::Disconnected) => return sent,
            Ok(_) | Err(RecvTimeoutError::Timeout) => {
                assert!(
                    Instant::now() < deadline,
                    "old server did not exit after SIGTERM"
                );
            }
        }
    }
}

/// Upgrades in a row: each hands the port over once more, so a loss that happens only in a
/// short window at the old process's exit has several chances to show.
const HANDOVERS: usize = 3;

#[test]
fn upgrade_with_a_second_process_on_the_same_port_loses_no_query() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    // Each process has one UDP socket per core (udp_workers = 0), all in one SO_REUSEPORT group.
    let args = ["--listen", listen.as_str()];
    let mut old = Server::start(&args);
    let load = Load::start(old.addr);
    wait_for_answers(&load, RATE / 4);

    // SIGTERM times, to place any lost query relative to the nearest one.
    let mut sigterms = Vec::new();
    for _ in 0..HANDOVERS {
        let new = Server::start(&args);
        assert_eq!(new.addr, old.addr, "the new process shares the port");
        wait_for_answers(&load, RATE / 4);
        let sent = terminate(&old);
        eprintln!(
            "upgrade: old process exited {:?} after SIGTERM",
            sent.elapsed()
        );
        sigterms.push(sent);
        drop(old);
        old = new;
        // The survivor alone answers (the old one is gone).
        wait_for_answers(&load, RATE / 4);
    }
    let outcome = load.finish();
    drop(old);

    eprintln!(
        "upgrade: {HANDOVERS} handovers, {} queries sent, {} answered, {} lost",
        outcome.sent,
        outcome.answered,
        outcome.lost.len()
    );
    assert_eq!(
        outcome.bad_answers, 0,
        "every answer is the authoritative SOA"
    );
    let lost: Vec<String> = outcome
        .lost
        .iter()
        .map(|t| offset_from_nearest(*t, &sigterms))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} queries lost over {HANDOVERS} handovers; sent at (handover, offset from its \
         SIGTERM): {}",
        lost.len(),
        outcome.sent,
        lost.join(" ")
    );
    assert_eq!(
        outcome.answered, outcome.sent,
        "every query answered exactly once"
    );
}

/// "#k+123us": the handover whose SIGTERM is nearest to `t`, and the signed offset from it.
fn offset_from_nearest(t: Instant, sigterms: &[Instant]) -> String {
    let signed = |s: &Instant| -> i128 {
        if t >= *s {
            t.duration_since(*s).as_micros() as i128
        } else {
            -(s.duration_since(t).as_micros() as i128)
        }
    };
    sigterms
        .iter()
        .enumerate()
        .map(|(k, s)| (k, signed(s)))
        .min_by_key(|(_, us)| us.abs())
        .map(|(k, us)| format!("#{}{us:+}us", k + 1))
        .unwrap_or_default()
}
