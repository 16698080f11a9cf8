//! A bounded UDP query load on loopback, for tests that change things while the server serves
//! (reloads, break-glass, the taster, an upgrade). A few sockets, one thread each, send encoded
//! queries in turn with ids not otherwise in flight on that socket; every reply is matched by id,
//! judged by a caller-supplied check and tallied. A query unanswered for `lost_after` counts as
//! lost, and its send time is kept (to place a loss against, say, a SIGTERM).
//!
//! Two paces: a fixed number of queries in flight per socket (as fast as the server answers),
//! or a fixed total rate spread over the sockets (paced against the start time, so a slow
//! moment is made up rather than lost) with a cap on what may be in flight.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How fast a [`Load`] sends.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// Keep this many queries in flight on each socket.
    InFlight(usize),
    /// `per_second` queries over all sockets, at most `window` in flight over all sockets (the
    /// load pauses rather than piles up).
    Rate { per_second: u64, window: usize },
}

/// What a caller's check says about one reply that matched a query in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Good,
    Servfail,
    /// Any other rcode than NOERROR and SERVFAIL.
    OtherRcode,
    /// NOERROR without a single answer record.
    Empty,
    /// Anything else the check does not accept.
    Bad,
}

/// A caller's check of one reply (the raw bytes, at least a 12-byte header).
pub type Check = fn(&[u8]) -> Verdict;

/// What a load to start.
pub struct Spec {
    /// Client sockets (distinct source ports), one thread each.
    pub sockets: usize,
    pub pace: Pace,
    /// Encoded queries to send in turn; the id (first two bytes) is patched per send.
    pub queries: Vec<Vec<u8>>,
    pub check: Check,
    /// A query unanswered this long is lost.
    pub lost_after: Duration,
}

#[derive(Debug, Default, Clone)]
pub struct Counts {
    pub sent: u64,
    /// Replies that matched a query in flight (each query at most once).
    pub answered: u64,
    pub lost: u64,
    /// When each lost query was sent.
    pub lost_sent_at: Vec<Instant>,
    pub servfail: u64,
    pub other_rcode: u64,
    pub empty: u64,
    pub bad: u64,
    /// Replies whose id matched nothing in flight (late or duplicate), or shorter than a header.
    pub unexpected: u64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.sent += o.sent;
        self.answered += o.answered;
        self.lost += o.lost;
        self.lost_sent_at.extend_from_slice(&o.lost_sent_at);
        self.servfail += o.servfail;
        self.other_rcode += o.other_rcode;
        self.empty += o.empty;
        self.bad += o.bad;
        self.unexpected += o.unexpected;
    }

    /// Asserts that load ran and every query was answered once, well: nothing lost, no
    /// SERVFAIL, no other rcode, no empty answer, no unmatched reply. `during` ends the messages.
    pub fn assert_all_answered(&self, during: &str) {
        let counts = self;
        assert!(counts.sent > 0 && counts.answered > 0, "no load ran");
        assert_eq!(counts.lost, 0, "queries lost{during}: {counts:?}");
        assert_eq!(counts.servfail, 0, "SERVFAIL{during}: {counts:?}");
        assert_eq!(counts.other_rcode, 0, "unexpected rcodes: {counts:?}");
        assert_eq!(counts.empty, 0, "empty answers{during}: {counts:?}");
        assert_eq!(counts.unexpected, 0, "unmatched replies: {counts:?}");
    }
}

/// A check by the header alone: NOERROR with answers is good (for loads whose every name has
/// data), then SERVFAIL, other rcodes and empty answers by their kind.
pub fn by_rcode(reply: &[u8]) -> Verdict {
    let rcode = reply[3] & 0x0f;
    let answers = u16::from_be_bytes([reply[6], reply[7]]);
    match rcode {
        0 if answers == 0 => Verdict::Empty,
        0 => Verdict::Good,
        2 => Verdict::Servfail,
        _ => Verdict::OtherRcode,
    }
}

/// A running load: one thread per socket.
pub struct Load {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    threads: Vec<JoinHandle<Counts>>,
}

impl Load {
    pub fn start(server: SocketAddr, spec: Spec) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let queries = Arc::new(spec.queries);
        let sockets = spec.sockets.max(1);
        let pace = match spec.pace {
            Pace::InFlight(n) => SocketPace::InFlight(n),
            Pace::Rate { per_second, window } => SocketPace::Rate {
                interval: Duration::from_nanos(1_000_000_000 * sockets as u64 / per_second),
                window: window.div_ceil(sockets),
            },
        };
        let threads = (0..sockets)
            .map(|_| {
                let socket = Socket {
                    server,
                    queries: queries.clone(),
                    check: spec.check,
                    lost_after: spec.lost_after,
                    pace,
                    stop: stop.clone(),
                    answered: answered.clone(),
                };
                std::thread::spawn(move || socket.run())
            })
            .collect();
        Load {
            stop,
            answered,
            threads,
        }
    }

    /// Replies matched so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Waits (bounded by `limit`) until `more` queries more have been answered, proving the
    /// load is flowing.
    pub fn wait_for_answers(&self, more: u64, limit: Duration) {
        let target = self.answered() + more;
        super::wait_for("the query load is answered", limit, || {
            (self.answered() >= target).then_some(())
        });
    }

    /// Stops sending, waits for what is in flight (each query at most `lost_after` after it was
    /// sent), sums the counts.
    pub fn stop(mut self) -> Counts {
        self.stop.store(true, Ordering::Relaxed);
        let mut counts = Counts::default();
        for thread in std::mem::take(&mut self.threads) {
            counts.add(&thread.join().expect("load thread"));
        }
        counts
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // A failing test must not leave load threads running.
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy)]
enum SocketPace {
    InFlight(usize),
    /// One query every `interval`, at most `window` in flight.
    Rate {
        interval: Duration,
        window: usize,
    },
}

/// How long one receive may block when nothing is due sooner.
const RECV_WAIT: Duration = Duration::from_millis(20);

/// One socket's share of a [`Load`].
struct Socket {
    server: SocketAddr,
    queries: Arc<Vec<Vec<u8>>>,
    check: Check,
    lost_after: Duration,
    pace: SocketPace,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
}

impl Socket {
    /// Sends at its pace until stopped, then waits out what is still in flight.
    fn run(self) -> Counts {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind load socket");
        socket
            .set_read_timeout(Some(RECV_WAIT))
            .expect("read timeout");
        let mut counts = Counts::default();
        let mut in_flight: HashMap<u16, Instant> = HashMap::new();
        let mut next_id: u16 = 0;
        let mut buf = vec![0u8; 4096];
        let started = Instant::now();
        loop {
            let stopping = self.stop.load(Ordering::Relaxed);
            if stopping && in_flight.is_empty() {
                return counts;
            }
            while !stopping && self.may_send(in_flight.len(), counts.sent, started) {
                while in_flight.contains_key(&next_id) {
                    next_id = next_id.wrapping_add(1);
                }
                let mut packet = self.queries[counts.sent as usize % self.queries.len()].clone();
                packet[..2].copy_from_slice(&next_id.to_be_bytes());
                in_flight.insert(next_id, Instant::now());
                // A failed send (e.g. a port-unreachable reported back) stays in flight: lost.
                let _ = socket.send_to(&packet, self.server);
                counts.sent += 1;
                next_id = next_id.wrapping_add(1);
            }
            if let SocketPace::Rate { interval, .. } = self.pace {
                // Wake for the next send that is due.
                let due = started + interval * counts.sent as u32;
                let wait = due.saturating_duration_since(Instant::now());
                let wait = wait.clamp(Duration::from_micros(50), RECV_WAIT);
                socket.set_read_timeout(Some(wait)).expect("read timeout");
            }
            if let Ok((n, _)) = socket.recv_from(&mut buf) {
                self.tally(&buf[..n], &mut in_flight, &mut counts);
            }
            in_flight.retain(|_, sent| {
                let keep = sent.elapsed() < self.lost_after;
                if !keep {
                    counts.lost += 1;
                    counts.lost_sent_at.push(*sent);
                }
                keep
            });
        }
    }

    /// Whether one more query may go now.
    fn may_send(&self, in_flight: usize, sent: u64, started: Instant) -> bool {
        match self.pace {
            SocketPace::InFlight(n) => in_flight < n,
            SocketPace::Rate { interval, window } => {
                in_flight < window && started + interval * sent as u32 <= Instant::now()
            }
        }
    }

    /// Matches one reply by id and counts it by the caller's check.
    fn tally(&self, reply: &[u8], in_flight: &mut HashMap<u16, Instant>, counts: &mut Counts) {
        if reply.len() < 12 {
            counts.unexpected += 1;
            return;
        }
        let id = u16::from_be_bytes([reply[0], reply[1]]);
        if in_flight.remove(&id).is_none() {
            counts.unexpected += 1;
            return;
        }
        counts.answered += 1;
        self.answered.fetch_add(1, Ordering::Relaxed);
        match (self.check)(reply) {
            Verdict::Good => {}
            Verdict::Servfail => counts.servfail += 1,
            Verdict::OtherRcode => counts.other_rcode += 1,
            Verdict::Empty => counts.empty += 1,
            Verdict::Bad => counts.bad += 1,
        }
    }
}
