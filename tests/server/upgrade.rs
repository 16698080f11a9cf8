//! Zero-downtime upgrade: under a steady loopback query load, a second steerdns starts on the
//! same port (SO_REUSEPORT), the first gets SIGTERM, and not one query may go unanswered.
//!
//! This is the procedure deploy/README.md gives operators ("Upgrading with zero downtime"):
//! start the new process, wait until it is ready, then stop the old one.

use crate::common;

use std::net::SocketAddr;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use common::load::{Load, Pace, Spec, Verdict};
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
/// How long the load may take to show it is being answered.
const FLOWING: Duration = Duration::from_secs(5);

/// The upgrade's load: `example.com SOA` queries at [`RATE`] over [`CLIENTS`] sockets.
fn start_load(server: SocketAddr) -> Load {
    let template = query("example.com.", RecordType::SOA)
        .to_vec()
        .expect("encode query");
    Load::start(
        server,
        Spec {
            sockets: CLIENTS,
            pace: Pace::Rate {
                per_second: RATE,
                window: WINDOW,
            },
            queries: vec![template],
            check: authoritative_soa,
            lost_after: ANSWER_TIMEOUT,
        },
    )
}

/// Every answer is the authoritative SOA.
fn authoritative_soa(reply: &[u8]) -> Verdict {
    match Message::from_vec(reply) {
        Ok(message)
            if message.metadata.response_code == ResponseCode::NoError
                && message.metadata.authoritative
                && message.answers.len() == 1 =>
        {
            Verdict::Good
        }
        _ => Verdict::Bad,
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
    let load = start_load(old.addr);
    load.wait_for_answers(RATE / 4, FLOWING);

    // SIGTERM times, to place any lost query relative to the nearest one.
    let mut sigterms = Vec::new();
    for _ in 0..HANDOVERS {
        let new = Server::start(&args);
        assert_eq!(new.addr, old.addr, "the new process shares the port");
        load.wait_for_answers(RATE / 4, FLOWING);
        let sent = terminate(&old);
        eprintln!(
            "upgrade: old process exited {:?} after SIGTERM",
            sent.elapsed()
        );
        sigterms.push(sent);
        drop(old);
        old = new;
        // The survivor alone answers (the old one is gone).
        load.wait_for_answers(RATE / 4, FLOWING);
    }
    let outcome = load.stop();
    drop(old);

    eprintln!(
        "upgrade: {HANDOVERS} handovers, {} queries sent, {} answered, {} lost",
        outcome.sent, outcome.answered, outcome.lost
    );
    assert_eq!(
        (outcome.bad, outcome.unexpected),
        (0, 0),
        "every answer is the authoritative SOA, to a query in flight: {outcome:?}"
    );
    let lost: Vec<String> = outcome
        .lost_sent_at
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
