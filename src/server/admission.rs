//! Who may hold one of a connection-oriented listener's slots, and when a held slot is taken
//! back: one mechanism for TCP and the encrypted transports (DoT, DoH, DoQ), so their rules
//! cannot drift apart. Each listener has its own [`Admission`] with its own numbers.
//!
//! - **Per client prefix.** A client is its /24 (IPv4) or /56 (IPv6) by default
//!   (`[server.tcp] client_prefix_v4`/`client_prefix_v6`): one host commonly holds a whole
//!   IPv6 /64 and an attacker a whole IPv4 /24, so counting exact addresses lets a few hosts
//!   fill every slot. A prefix may hold `max_connections_per_client`; further connections
//!   are closed as soon as they are accepted.
//! - **Lifetime.** A connection is closed `max_connection_lifetime` after it was accepted
//!   (wall clock, after the answer in progress), however busy it keeps itself; the client
//!   reconnects and is admitted like anyone else.
//! - **Idle time shrinks as slots fill** (as NSD and Knot do): up to half full, a connection
//!   may stay idle for `idle_timeout`; beyond, for linearly less, down to `busy_idle_timeout`
//!   when full. Every newcomer past half full closes the connections already idle for longer
//!   than that, and a newcomer that finds every slot taken closes the one idle longest, so a
//!   UDP client sent to TCP by TC or by a rate limiter's slip gets a slot unless every slot is
//!   busy with a query at this very moment (and per-prefix caps bound who can do that).
//!
//! Connections' idle marks are atomics in a table fixed at start; closing one is a flag and a
//! wake-up. Nothing here allocates per connection or takes a lock.

use std::future::Future;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::dns::wire::Transport;
use crate::metrics::serving::{serving, EncryptedConnection, EncryptedEvent, TcpConnection};

/// The admission rules of one listener.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections one client prefix may hold.
    pub max_connections_per_client: usize,
    /// Prefix lengths that make a client (IPv4, IPv6).
    pub client_prefix_v4: u8,
    pub client_prefix_v6: u8,
    /// Idle time allowed while at most half the slots are taken.
    pub idle_timeout: Duration,
    /// Idle time allowed when every slot is taken (it shrinks linearly toward this).
    pub busy_idle_timeout: Duration,
    /// Wall-clock lifetime of a connection.
    pub max_connection_lifetime: Duration,
}

/// Why a wait on an idle connection ended without the client sending anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// Silent for longer than the idle time allowed now.
    Idle,
    /// Taken back for a newcomer (slots nearly full and this one idle longest).
    Reaped,
    /// Its lifetime is over.
    Lifetime,
}

/// How often a newcomer waiting for a slot looks again for an idle connection to close.
const RECHECK: Duration = Duration::from_millis(50);

/// One slot's marks, read by the accept loop when it looks for idle connections.
struct Mark {
    taken: AtomicBool,
    /// When the connection last became idle (ms since the admission started, plus 1); 0
    /// while it is busy with a query (or the slot is free).
    idle_since: AtomicU64,
    /// Set (then the waiter woken) when the connection must close at its next idle moment.
    closing: AtomicBool,
    wake: Notify,
}

impl Mark {
    fn new() -> Mark {
        Mark {
            taken: AtomicBool::new(false),
            idle_since: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }
}

/// One listener's slots, per-prefix shares and idle marks.
pub struct Admission {
    transport: Transport,
    limits: AdmissionLimits,
    slots: Arc<Semaphore>,
    prefixes: PrefixConnections,
    marks: Box<[Mark]>,
    open: AtomicUsize,
    started: Instant,
}

impl Admission {
    pub fn new(transport: Transport, limits: AdmissionLimits) -> Arc<Admission> {
        let slots = limits.max_connections.max(1);
        Arc::new(Admission {
            transport,
            slots: Arc::new(Semaphore::new(slots)),
            prefixes: PrefixConnections::new(
                limits.max_connections_per_client,
                limits.client_prefix_v4,
                limits.client_prefix_v6,
            ),
            marks: (0..slots).map(|_| Mark::new()).collect(),
            open: AtomicUsize::new(0),
            started: Instant::now(),
            limits,
        })
    }

    fn now_mark(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// Admits a connection from `addr`: `None` (counted, to be closed at once) when its prefix
    /// already holds its share. Otherwise waits for a slot, first taking back the one idle
    /// longest when none is free.
    pub async fn admit(self: &Arc<Self>, addr: IpAddr) -> Option<Admitted> {
        let Some(share) = self.prefixes.open(addr) else {
            record(self.transport, Event::RefusedPerClient);
            return None;
        };
        let permit = match self.slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            // Every slot taken: take back the connection idle longest, and again while none
            // has let go (those busy now may be idle a moment later).
            Err(_) => loop {
                self.reap(Duration::ZERO, 1);
                let freed = self.slots.clone().acquire_owned();
                if let Ok(permit) = tokio::time::timeout(RECHECK, freed).await {
                    break permit.ok()?;
                }
            },
        };
        let index = self.claim()?;
        let open = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        let admitted = Admitted {
            admission: self.clone(),
            index,
            opened: Instant::now(),
            _count: OpenCount::new(self.transport),
            _share: share,
            _permit: permit,
        };
        if open > self.limits.max_connections / 2 {
            self.reap(self.idle_allowed(), usize::MAX);
        }
        Some(admitted)
    }

    /// A free mark for a connection that holds a permit (there is always one).
    fn claim(&self) -> Option<usize> {
        let index = self.marks.iter().position(|m| {
            m.taken
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        let mark = &self.marks[index];
        mark.closing.store(false, Ordering::Relaxed);
        // A new connection is idle until its first query starts.
        mark.idle_since.store(self.now_mark(), Ordering::Relaxed);
        Some(index)
    }

    /// The idle time allowed now: `idle_timeout` up to half full, then linearly less, down to
    /// `busy_idle_timeout` when every slot is taken.
    pub fn idle_allowed(&self) -> Duration {
        let max = self.limits.max_connections.max(1);
        let open = self.open.load(Ordering::Relaxed).min(max);
        let half = max / 2;
        let (idle, busy) = (self.limits.idle_timeout, self.limits.busy_idle_timeout);
        if open <= half || idle <= busy {
            return idle;
        }
        let free = (max - open) as f64 / (max - half) as f64;
        busy + (idle - busy).mul_f64(free)
    }

    /// Closes (at most `count` of) the connections idle for longer than `longer_than`, those
    /// idle longest first.
    fn reap(&self, longer_than: Duration, count: usize) {
        let now = self.now_mark();
        let limit = longer_than.as_millis() as u64;
        let idle_for = |m: &Mark| {
            let since = m.idle_since.load(Ordering::Relaxed);
            let open = m.taken.load(Ordering::Relaxed) && !m.closing.load(Ordering::Relaxed);
            (open && since != 0)
                .then(|| now.saturating_sub(since))
                .filter(|&ms| ms >= limit)
        };
        if count == 1 {
            let longest = self
                .marks
                .iter()
                .filter_map(|m| idle_for(m).map(|ms| (ms, m)))
                .max_by_key(|(ms, _)| *ms);
            if let Some((_, mark)) = longest {
                close(mark);
            }
            return;
        }
        for mark in self.marks.iter() {
            if idle_for(mark).is_some_and(|ms| ms > limit) {
                close(mark);
            }
        }
    }
}

fn close(mark: &Mark) {
    mark.closing.store(true, Ordering::Release);
    mark.wake.notify_waiters();
}

/// A connection's place: its slot, its prefix's share, its idle mark, and the open-connection
/// gauge. All released when dropped.
pub struct Admitted {
    admission: Arc<Admission>,
    index: usize,
    opened: Instant,
    _count: OpenCount,
    _share: PrefixConnection,
    _permit: OwnedSemaphorePermit,
}

impl Admitted {
    fn mark(&self) -> &Mark {
        &self.admission.marks[self.index]
    }

    /// Whether the connection has lived its lifetime (counted once, when this says so).
    pub fn lifetime_over(&self) -> bool {
        let over = self.opened.elapsed() >= self.admission.limits.max_connection_lifetime;
        if over {
            record(self.admission.transport, Event::Lifetime);
        }
        over
    }

    /// The idle time allowed now (also the bound on a write to a client that stopped reading).
    pub fn idle_allowed(&self) -> Duration {
        self.admission.idle_allowed()
    }

    /// Waits for the client's next request (`next`) while the connection is idle: the result,
    /// or why the wait ended first (the idle time allowed now, taken back for a newcomer, the
    /// lifetime). The connection counts as busy again once this returns.
    pub async fn idle<F: Future>(&self, next: F) -> Result<F::Output, Closed> {
        let mark = self.mark();
        mark.idle_since
            .store(self.admission.now_mark(), Ordering::Relaxed);
        let lifetime_left = self
            .admission
            .limits
            .max_connection_lifetime
            .saturating_sub(self.opened.elapsed());
        let allowed = self.idle_allowed();
        let outcome = self
            .unless_reaped(tokio::time::timeout(allowed.min(lifetime_left), next))
            .await;
        mark.idle_since.store(0, Ordering::Relaxed);
        match outcome {
            Some(Ok(result)) => Ok(result),
            Some(Err(_)) if allowed <= lifetime_left => Err(Closed::Idle),
            Some(Err(_)) => {
                record(self.admission.transport, Event::Lifetime);
                Err(Closed::Lifetime)
            }
            None => Err(Closed::Reaped),
        }
    }

    /// Runs `work` (a handshake: the connection stays marked idle meanwhile) unless the
    /// connection is taken back for a newcomer first (`None`, counted).
    pub async fn unless_reaped<F: Future>(&self, work: F) -> Option<F::Output> {
        let mark = self.mark();
        let woken = mark.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if !mark.closing.load(Ordering::Acquire) {
            tokio::select! {
                done = work => return Some(done),
                _ = &mut woken => {}
            }
        }
        record(self.admission.transport, Event::Reaped);
        None
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mark = self.mark();
        mark.idle_since.store(0, Ordering::Relaxed);
        self.admission.open.fetch_sub(1, Ordering::Relaxed);
        mark.taken.store(false, Ordering::Release);
    }
}

/// The open-connections gauge of the connection's transport.
enum OpenCount {
    Tcp(#[allow(dead_code)] TcpConnection<'static>),
    Encrypted(#[allow(dead_code)] EncryptedConnection<'static>),
}

impl OpenCount {
    fn new(transport: Transport) -> OpenCount {
        match transport {
            Transport::Tcp | Transport::Udp => OpenCount::Tcp(serving().tcp_connection()),
            t => OpenCount::Encrypted(serving().encrypted_connection(t)),
        }
    }
}

/// The admission events the metrics count, per transport.
#[derive(Debug, Clone, Copy)]
enum Event {
    RefusedPerClient,
    Reaped,
    Lifetime,
}

fn record(transport: Transport, event: Event) {
    let s = serving();
    match (transport, event) {
        (Transport::Tcp | Transport::Udp, Event::RefusedPerClient) => {
            s.record_tcp_refused_per_client()
        }
        (Transport::Tcp | Transport::Udp, Event::Reaped) => s.record_tcp_reaped(),
        (Transport::Tcp | Transport::Udp, Event::Lifetime) => s.record_tcp_lifetime(),
        (t, Event::RefusedPerClient) => s.record_encrypted(t, EncryptedEvent::RefusedPerClient),
        (t, Event::Reaped) => s.record_encrypted(t, EncryptedEvent::Reaped),
        (t, Event::Lifetime) => s.record_encrypted(t, EncryptedEvent::Lifetime),
    }
}

/// The prefix a connection from `addr` counts against.
pub fn client_prefix(addr: IpAddr, v4_len: u8, v6_len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let keep = u32::MAX
                .checked_shl(32 - u32::from(v4_len.min(32)))
                .unwrap_or(0);
            IpAddr::V4((u32::from(v4) & keep).into())
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => client_prefix(IpAddr::V4(v4), v4_len, v6_len),
            None => {
                let keep = u128::MAX
                    .checked_shl(128 - u32::from(v6_len.min(128)))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(v6) & keep).into())
            }
        },
    }
}

/// Slots in the per-prefix connection table. Prefixes are hashed into it; two that share a
/// slot share a cap (rare with this many slots, and never more permissive than the cap).
const PREFIX_SLOTS: usize = 1 << 14;

/// Open connections per client prefix, in a fixed table of atomic counters.
struct PrefixConnections {
    counts: Arc<[AtomicU32]>,
    cap: u32,
    v4_len: u8,
    v6_len: u8,
    hasher: std::collections::hash_map::RandomState,
}

impl PrefixConnections {
    fn new(cap: usize, v4_len: u8, v6_len: u8) -> PrefixConnections {
        PrefixConnections {
            counts: (0..PREFIX_SLOTS).map(|_| AtomicU32::new(0)).collect(),
            cap: u32::try_from(cap).unwrap_or(u32::MAX),
            v4_len,
            v6_len,
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    /// Counts a connection from `addr`'s prefix, or `None` if it already has `cap` open.
    fn open(&self, addr: IpAddr) -> Option<PrefixConnection> {
        let prefix = client_prefix(addr, self.v4_len, self.v6_len);
        let slot = (self.hasher.hash_one(prefix) as usize) % self.counts.len();
        let count = self.counts.get(slot)?;
        if count.fetch_add(1, Ordering::Relaxed) >= self.cap {
            count.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(PrefixConnection {
            counts: self.counts.clone(),
            slot,
        })
    }
}

/// One open connection of a prefix, uncounted on drop.
struct PrefixConnection {
    counts: Arc<[AtomicU32]>,
    slot: usize,
}

impl Drop for PrefixConnection {
    fn drop(&mut self) {
        if let Some(count) = self.counts.get(self.slot) {
            count.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, per_client: usize) -> AdmissionLimits {
        AdmissionLimits {
            max_connections: max,
            max_connections_per_client: per_client,
            client_prefix_v4: 24,
            client_prefix_v6: 56,
            idle_timeout: Duration::from_secs(10),
            busy_idle_timeout: Duration::from_millis(200),
            max_connection_lifetime: Duration::from_secs(120),
        }
    }

    #[test]
    fn clients_are_prefixes() {
        let p = |a: &str| client_prefix(a.parse().unwrap(), 24, 56);
        assert_eq!(p("192.0.2.7"), p("192.0.2.200"));
        assert_ne!(p("192.0.2.7"), p("192.0.3.7"));
        assert_eq!(p("2001:db8:1:2:aaaa::1"), p("2001:db8:1:2f:bbbb::2"));
        assert_ne!(p("2001:db8:1:200::1"), p("2001:db8:1:300::1"));
        assert_eq!(p("::ffff:192.0.2.9"), p("192.0.2.1"));
        let host: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(client_prefix(host, 32, 128), host);
        assert_eq!(client_prefix(host, 0, 0), IpAddr::from([0, 0, 0, 0]));
    }

    #[test]
    fn each_prefix_gets_its_share_and_gets_it_back() {
        let table = PrefixConnections::new(2, 24, 56);
        let a: IpAddr = [192, 0, 2, 1].into();
        let first = table.open(a);
        let second = table.open([192, 0, 2, 99].into());
        assert!(first.is_some() && second.is_some());
        assert!(table.open(a).is_none(), "a third connection from one /24");
        // Other prefixes have their own share (unless one happens to hash into a's slot).
        let others = (3..=6u8)
            .filter(|n| table.open([192, 0, *n, 1].into()).is_some())
            .count();
        assert!(others >= 3, "{others} of 4 other prefixes could connect");
        drop(first);
        assert!(
            table.open(a).is_some(),
            "a closed connection frees its place"
        );
    }

    #[test]
    fn idle_time_shrinks_past_half_full() {
        let admission = Admission::new(Transport::Tcp, limits(10, 10));
        let at = |open: usize| {
            admission.open.store(open, Ordering::Relaxed);
            admission.idle_allowed()
        };
        assert_eq!(at(0), Duration::from_secs(10));
        assert_eq!(at(5), Duration::from_secs(10));
        assert!(at(8) < Duration::from_secs(5) && at(8) > Duration::from_secs(3));
        assert_eq!(at(10), Duration::from_millis(200));
        assert_eq!(at(12), Duration::from_millis(200));
    }

    #[tokio::test]
    async fn a_newcomer_to_full_slots_takes_back_the_longest_idle() {
        // Idle time 10 s even when full: only the newcomer's need closes anything here.
        let mut limits = limits(2, 2);
        limits.busy_idle_timeout = limits.idle_timeout;
        let admission = Admission::new(Transport::Tcp, limits);
        let old = admission.admit([192, 0, 2, 1].into()).await;
        let young = admission.admit([198, 51, 100, 1].into()).await;
        let (Some(old), Some(young)) = (old, young) else {
            panic!("two slots, two prefixes");
        };
        let newcomer = admission.admit([203, 0, 113, 1].into());
        tokio::pin!(newcomer);
        let closed = {
            let waiting_old = old.idle(std::future::pending::<()>());
            let waiting_young = young.idle(std::future::pending::<()>());
            tokio::pin!(waiting_old, waiting_young);
            // Idle from now on: the old one first, the young one 20 ms later.
            let tick = Duration::from_millis(1);
            assert!(tokio::time::timeout(tick, &mut waiting_old).await.is_err());
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(tokio::time::timeout(tick, &mut waiting_young)
                .await
                .is_err());
            // The old connection is told to close; once it has, the newcomer has its slot.
            tokio::select! {
                biased;
                closed = &mut waiting_old => closed,
                _ = &mut waiting_young => panic!("the younger idle connection was closed"),
                _ = &mut newcomer => panic!("admitted before a slot was free"),
            }
        };
        assert_eq!(closed, Err(Closed::Reaped));
        drop(old);
        let admitted = tokio::time::timeout(Duration::from_secs(1), newcomer).await;
        assert!(
            matches!(admitted, Ok(Some(_))),
            "the newcomer got the freed slot"
        );
    }
}
