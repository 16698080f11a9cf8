//! Who may hold one of a connection-oriented listener's slots, and when a held slot is taken
//! back: one mechanism for TCP and the encrypted transports (DoT, DoH, DoQ), so their rules
//! cannot drift apart. Each listener has its own [`Admission`] with its own numbers.
//!
//! - **Per client prefix.** A client is its /24 (IPv4) or /48 (IPv6) by default
//!   (`[server.tcp] client_prefix_v4`/`client_prefix_v6`): an attacker commonly holds a whole
//!   IPv4 /24 and one IPv6 customer a whole /48, so counting smaller prefixes lets a few hosts
//!   fill every slot. A prefix may hold `max_connections_per_client`; further connections
//!   are closed as soon as they are accepted.
//! - **Lifetime.** A connection is closed `max_connection_lifetime` after it was accepted
//!   (wall clock, after the answer in progress), however busy it keeps itself; the client
//!   reconnects and is admitted like anyone else.
//! - **Idle time shrinks as slots fill** (as NSD and Knot do): up to half full, a connection
//!   may stay idle for `idle_timeout`; beyond, for linearly less, down to `busy_idle_timeout`
//!   when full. Every newcomer past half full closes the connections already idle for longer
//!   than that.
//! - **A full table takes back its worst holder.** Each connection says what it is doing
//!   (idle, reading a query, answering) and since when, and how many queries it completed. A
//!   newcomer that finds every slot taken closes the holder that holds its slot worst: the
//!   longest time without progress (idle, or since the first byte of a query it has not
//!   completed) plus its slot time per completed query (life over queries, so a connection
//!   that completes few queries per second of life ranks high). A client that keeps one query
//!   always in progress, completing one every few seconds, is as reapable as an idle one;
//!   one answering right now is taken only once it has been stuck for the idle time allowed
//!   (a client that does not read). When no holder may be taken, the newcomer is closed.
//!   Either way the accept loop never waits: a UDP client sent to TCP by TC or by a rate
//!   limiter's slip gets a slot unless every slot is busy answering at this very moment.
//!
//! Every close is counted by why ([`ConnectionEvent`]). Connections' marks are atomics in a table fixed
//! at start (the slots, plus room for those told to close that have not let go yet); closing
//! one is a flag and a wake-up. Nothing here allocates per connection or takes a lock.

use std::future::Future;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::dns::wire::Transport;
use crate::metrics::serving::{serving, ConnectionEvent, EncryptedConnection, TcpConnection};

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

/// Why a wait on a connection ended without the client sending anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// Silent for longer than the idle time allowed now.
    Idle,
    /// Taken back for a newcomer (the slots were filling, or full and this the worst holder).
    Reaped,
    /// Its lifetime is over.
    Lifetime,
}

/// What a connection is doing, in the top bits of its mark's activity word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activity {
    /// Waiting for the client's next query (or its handshake).
    Idle = 1,
    /// Reading a query whose first byte has arrived.
    Query = 2,
    /// Answering a complete query (the answer is written while the client reads it).
    Answer = 3,
}

const ACTIVITY_SHIFT: u32 = 62;
const SINCE_MASK: u64 = (1 << ACTIVITY_SHIFT) - 1;

impl Activity {
    /// The activity word: what, and since when (a ms mark of [`Admission::now_mark`]).
    fn word(self, since: u64) -> u64 {
        ((self as u64) << ACTIVITY_SHIFT) | (since & SINCE_MASK)
    }

    fn of(word: u64) -> Option<(Activity, u64)> {
        let activity = match word >> ACTIVITY_SHIFT {
            1 => Activity::Idle,
            2 => Activity::Query,
            3 => Activity::Answer,
            _ => return None,
        };
        Some((activity, word & SINCE_MASK))
    }
}

/// A holder's [`Mark::closing`]: holding its slot, told to close, or gone.
const HOLDING: u8 = 0;
const TOLD: u8 = 1;
const GONE: u8 = 2;

/// One connection's marks, read by the accept loop when it looks for a holder to close.
struct Mark {
    taken: AtomicBool,
    /// [`Activity::word`]; 0 while the mark is free.
    activity: AtomicU64,
    /// When the connection was admitted (a ms mark).
    opened: AtomicU64,
    /// Queries it completed.
    completed: AtomicU64,
    /// [`HOLDING`], [`TOLD`] (then the waiter woken) or [`GONE`].
    closing: AtomicU8,
    wake: Notify,
}

impl Mark {
    fn new() -> Mark {
        Mark {
            taken: AtomicBool::new(false),
            activity: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            closing: AtomicU8::new(GONE),
            wake: Notify::new(),
        }
    }
}

/// How a connection holds its slot, as the accept loop judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Holding {
    activity: Activity,
    /// Since its last progress: idle since, or since the first byte of the query it is
    /// reading, or since that query completed.
    stalled_ms: u64,
    life_ms: u64,
    completed: u64,
}

impl Holding {
    /// How badly it holds its slot: the time without progress plus the slot time per
    /// completed query (low for a client completing queries at a normal rate).
    fn badness(&self) -> u64 {
        let per_query = self.life_ms / self.completed.saturating_add(1);
        self.stalled_ms.saturating_add(per_query)
    }

    /// Whether a newcomer to full slots may take its slot: idle or mid-query, always; while
    /// answering only once stuck for `allowed_ms` (a client that does not read its answers).
    fn yields(&self, allowed_ms: u64) -> bool {
        self.activity != Activity::Answer || self.stalled_ms >= allowed_ms
    }

    /// Why it is closed when taken back.
    fn event(&self) -> ConnectionEvent {
        match self.activity {
            Activity::Idle => ConnectionEvent::Reaped,
            Activity::Query | Activity::Answer => ConnectionEvent::ReapedStalled,
        }
    }
}

/// Marks beyond the slots, for connections told to close that have not let go yet (they go
/// at their next await point).
fn spare_marks(slots: usize) -> usize {
    (slots / 4).max(16)
}

/// One listener's slots, per-prefix shares and marks.
pub struct Admission {
    transport: Transport,
    limits: AdmissionLimits,
    prefixes: PrefixConnections,
    marks: Box<[Mark]>,
    /// Connections holding a slot: admitted and not told to close.
    holders: AtomicUsize,
    started: Instant,
}

impl Admission {
    pub fn new(transport: Transport, limits: AdmissionLimits) -> Arc<Admission> {
        let slots = limits.max_connections.max(1);
        Arc::new(Admission {
            transport,
            prefixes: PrefixConnections::new(
                limits.max_connections_per_client,
                limits.client_prefix_v4,
                limits.client_prefix_v6,
            ),
            marks: (0..slots + spare_marks(slots))
                .map(|_| Mark::new())
                .collect(),
            holders: AtomicUsize::new(0),
            started: Instant::now(),
            limits,
        })
    }

    fn now_mark(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    fn slots(&self) -> usize {
        self.limits.max_connections.max(1)
    }

    /// Admits a connection from `addr`, or `None` (counted; the caller closes it at once) when
    /// its prefix already holds its share, or every slot is taken and no holder may be taken
    /// back. With every slot taken it first closes the worst holder. Never waits.
    pub fn admit(self: &Arc<Self>, addr: IpAddr) -> Option<Admitted> {
        let Some(share) = self.prefixes.open(addr) else {
            record(self.transport, ConnectionEvent::RefusedPerClient);
            return None;
        };
        let full = self.holders.load(Ordering::Relaxed) >= self.slots();
        if full && !self.close_worst() {
            record(self.transport, ConnectionEvent::RefusedFull);
            return None;
        }
        let Some(index) = self.claim() else {
            // Every spare mark is held by a connection told to close that has not gone yet.
            record(self.transport, ConnectionEvent::RefusedFull);
            return None;
        };
        let holders = self.holders.fetch_add(1, Ordering::Relaxed) + 1;
        let admitted = Admitted {
            admission: self.clone(),
            index,
            opened: Instant::now(),
            _count: OpenCount::new(self.transport),
            _share: share,
        };
        if holders > self.slots() / 2 {
            self.close_idle(self.idle_allowed());
        }
        Some(admitted)
    }

    /// A free mark for a newcomer, set up as idle from now.
    fn claim(&self) -> Option<usize> {
        let index = self.marks.iter().position(|m| {
            m.taken
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        })?;
        let mark = &self.marks[index];
        let now = self.now_mark();
        mark.opened.store(now, Ordering::Relaxed);
        mark.completed.store(0, Ordering::Relaxed);
        // A new connection is idle until its first query starts.
        mark.activity
            .store(Activity::Idle.word(now), Ordering::Relaxed);
        mark.closing.store(HOLDING, Ordering::Release);
        Some(index)
    }

    /// The idle time allowed now: `idle_timeout` up to half full, then linearly less, down to
    /// `busy_idle_timeout` when every slot is taken.
    pub fn idle_allowed(&self) -> Duration {
        let max = self.slots();
        let open = self.holders.load(Ordering::Relaxed).min(max);
        let half = max / 2;
        let (idle, busy) = (self.limits.idle_timeout, self.limits.busy_idle_timeout);
        if open <= half || idle <= busy {
            return idle;
        }
        let free = (max - open) as f64 / (max - half) as f64;
        busy + (idle - busy).mul_f64(free)
    }

    /// How the connection of `mark` holds its slot now; `None` for a free mark or one told
    /// to close.
    fn holding(mark: &Mark, now: u64) -> Option<Holding> {
        if !mark.taken.load(Ordering::Acquire) || mark.closing.load(Ordering::Acquire) != HOLDING {
            return None;
        }
        let (activity, since) = Activity::of(mark.activity.load(Ordering::Relaxed))?;
        Some(Holding {
            activity,
            stalled_ms: now.saturating_sub(since),
            life_ms: now.saturating_sub(mark.opened.load(Ordering::Relaxed)),
            completed: mark.completed.load(Ordering::Relaxed),
        })
    }

    /// Closes the worst holder that may be taken back for a newcomer; `false` if none may.
    fn close_worst(&self) -> bool {
        let now = self.now_mark();
        let allowed = self.idle_allowed().as_millis() as u64;
        let worst = self
            .marks
            .iter()
            .filter_map(|m| Some((Self::holding(m, now)?, m)))
            .filter(|(holding, _)| holding.yields(allowed))
            .max_by_key(|(holding, _)| holding.badness());
        worst.is_some_and(|(holding, mark)| self.close(mark, holding.event()))
    }

    /// Closes every connection idle for longer than `longer_than`.
    fn close_idle(&self, longer_than: Duration) {
        let now = self.now_mark();
        let limit = longer_than.as_millis() as u64;
        for mark in self.marks.iter() {
            let idle_too_long = Self::holding(mark, now)
                .is_some_and(|h| h.activity == Activity::Idle && h.stalled_ms > limit);
            if idle_too_long {
                self.close(mark, ConnectionEvent::Reaped);
            }
        }
    }

    /// Tells the connection of `mark` to close (counted as `why`); `false` if it was already
    /// told or has gone.
    fn close(&self, mark: &Mark, why: ConnectionEvent) -> bool {
        let told = mark
            .closing
            .compare_exchange(HOLDING, TOLD, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok();
        if told {
            self.holders.fetch_sub(1, Ordering::Relaxed);
            record(self.transport, why);
            mark.wake.notify_waiters();
        }
        told
    }
}

/// A connection's place: its mark, its prefix's share, and the open-connection gauge. All
/// released when dropped.
pub struct Admitted {
    admission: Arc<Admission>,
    index: usize,
    opened: Instant,
    _count: OpenCount,
    _share: PrefixConnection,
}

impl Admitted {
    fn mark(&self) -> &Mark {
        &self.admission.marks[self.index]
    }

    fn mark_activity(&self, activity: Activity) {
        let now = self.admission.now_mark();
        self.mark()
            .activity
            .store(activity.word(now), Ordering::Relaxed);
    }

    /// Whether the connection has lived its lifetime (counted once, when this says so).
    pub fn lifetime_over(&self) -> bool {
        let over = self.opened.elapsed() >= self.admission.limits.max_connection_lifetime;
        if over {
            record(self.admission.transport, ConnectionEvent::Lifetime);
        }
        over
    }

    /// The idle time allowed now (also the bound on a write to a client that stopped reading).
    pub fn idle_allowed(&self) -> Duration {
        self.admission.idle_allowed()
    }

    /// Waits for the client's next request (`next`) while the connection is idle: the result,
    /// or why the wait ended first (the idle time allowed now, taken back for a newcomer, the
    /// lifetime). Once this returns the connection counts as reading a query, from now.
    pub async fn idle<F: Future>(&self, next: F) -> Result<F::Output, Closed> {
        self.mark_activity(Activity::Idle);
        let lifetime_left = self
            .admission
            .limits
            .max_connection_lifetime
            .saturating_sub(self.opened.elapsed());
        let allowed = self.idle_allowed();
        let outcome = self
            .unless_reaped(tokio::time::timeout(allowed.min(lifetime_left), next))
            .await;
        self.mark_activity(Activity::Query);
        match outcome {
            Some(Ok(result)) => Ok(result),
            Some(Err(_)) if allowed <= lifetime_left => {
                record(self.admission.transport, ConnectionEvent::IdleTimeout);
                Err(Closed::Idle)
            }
            Some(Err(_)) => {
                record(self.admission.transport, ConnectionEvent::Lifetime);
                Err(Closed::Lifetime)
            }
            None => Err(Closed::Reaped),
        }
    }

    /// A query is complete (read in full, or accepted as a request): counted, and the
    /// connection counts as answering, from now.
    pub fn query_complete(&self) {
        self.mark().completed.fetch_add(1, Ordering::Relaxed);
        self.mark_activity(Activity::Answer);
    }

    /// Runs `work` (a handshake, reading a query, writing answers) unless the connection is
    /// taken back for a newcomer first (`None`; the accept loop counted why).
    pub async fn unless_reaped<F: Future>(&self, work: F) -> Option<F::Output> {
        let mark = self.mark();
        let woken = mark.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if mark.closing.load(Ordering::Acquire) == HOLDING {
            tokio::select! {
                done = work => return Some(done),
                _ = &mut woken => {}
            }
        }
        None
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let admission = &self.admission;
        let mark = self.mark();
        if mark.closing.swap(GONE, Ordering::AcqRel) == HOLDING {
            admission.holders.fetch_sub(1, Ordering::Relaxed);
        }
        mark.activity.store(0, Ordering::Relaxed);
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

fn record(transport: Transport, event: ConnectionEvent) {
    serving().record_connection(transport, event);
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
            client_prefix_v6: 48,
            idle_timeout: Duration::from_secs(10),
            busy_idle_timeout: Duration::from_millis(200),
            max_connection_lifetime: Duration::from_secs(120),
        }
    }

    #[test]
    fn clients_are_prefixes() {
        let p = |a: &str| client_prefix(a.parse().unwrap(), 24, 48);
        assert_eq!(p("192.0.2.7"), p("192.0.2.200"));
        assert_ne!(p("192.0.2.7"), p("192.0.3.7"));
        // One /48 customer is one client, whichever of its 256 /56s (or 65536 /64s) it uses.
        assert_eq!(p("2001:db8:1:2:aaaa::1"), p("2001:db8:1:ff2f:bbbb::2"));
        assert_ne!(p("2001:db8:1::1"), p("2001:db8:2::1"));
        assert_eq!(p("::ffff:192.0.2.9"), p("192.0.2.1"));
        let host: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(client_prefix(host, 32, 128), host);
        assert_eq!(client_prefix(host, 0, 0), IpAddr::from([0, 0, 0, 0]));
    }

    #[test]
    fn each_prefix_gets_its_share_and_gets_it_back() {
        let table = PrefixConnections::new(2, 24, 48);
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
            admission.holders.store(open, Ordering::Relaxed);
            admission.idle_allowed()
        };
        assert_eq!(at(0), Duration::from_secs(10));
        assert_eq!(at(5), Duration::from_secs(10));
        assert!(at(8) < Duration::from_secs(5) && at(8) > Duration::from_secs(3));
        assert_eq!(at(10), Duration::from_millis(200));
        assert_eq!(at(12), Duration::from_millis(200));
    }

    fn holding(activity: Activity, stalled_ms: u64, life_ms: u64, completed: u64) -> Holding {
        Holding {
            activity,
            stalled_ms,
            life_ms,
            completed,
        }
    }

    #[test]
    fn the_worst_holder_completes_least_for_its_time() {
        // A client that keeps a query in progress and completes one every 2.5 s holds its
        // slot worse than a resolver completing 100 a second, or a newcomer in its handshake.
        let busy_holder = holding(Activity::Query, 2_000, 60_000, 24);
        let resolver = holding(Activity::Query, 1, 60_000, 6_000);
        let newcomer = holding(Activity::Idle, 20, 20, 0);
        assert!(busy_holder.badness() > resolver.badness());
        assert!(busy_holder.badness() > newcomer.badness());
        // Idle or mid-query: taken back for a newcomer; answering: only once stuck.
        assert!(busy_holder.yields(200) && newcomer.yields(200));
        assert!(!holding(Activity::Answer, 5, 60_000, 10).yields(200));
        assert!(holding(Activity::Answer, 300, 60_000, 10).yields(200));
        assert_eq!(busy_holder.event(), ConnectionEvent::ReapedStalled);
        assert_eq!(newcomer.event(), ConnectionEvent::Reaped);
    }

    /// Waits on `admitted`'s idle mark until it is told to close.
    async fn closed_while_idle(admitted: &Admitted) -> Result<(), Closed> {
        admitted.idle(std::future::pending::<()>()).await
    }

    #[tokio::test]
    async fn a_newcomer_to_full_slots_takes_back_the_worst_holder_without_waiting() {
        // Idle time 10 s even when full: only the newcomers' need closes anything here.
        let mut limits = limits(2, 2);
        limits.busy_idle_timeout = limits.idle_timeout;
        let admission = Admission::new(Transport::Tcp, limits);
        let (Some(busy), Some(quick)) = (
            admission.admit([192, 0, 2, 1].into()),
            admission.admit([198, 51, 100, 1].into()),
        ) else {
            panic!("two slots, two prefixes");
        };
        // One has been mid-query for 30 ms; the other completed a query just now and is
        // answering it.
        busy.idle(std::future::ready(()))
            .await
            .expect("a query starts");
        tokio::time::sleep(Duration::from_millis(30)).await;
        quick.query_complete();
        // The newcomer is admitted at once, and the holder mid-query is told to close.
        let newcomer = admission.admit([203, 0, 113, 1].into());
        assert!(newcomer.is_some(), "admitted without waiting");
        let woken = tokio::time::timeout(Duration::from_secs(1), closed_while_idle(&busy));
        assert_eq!(woken.await, Ok(Err(Closed::Reaped)));
        assert_eq!(admission.holders.load(Ordering::Relaxed), 2);
        // Full again, and the holders now are one answering and one newcomer idle a moment:
        // the idle one goes (answering ones stay until they are stuck).
        let third = admission.admit([192, 0, 3, 1].into());
        assert!(third.is_some());
        let newcomer = newcomer.unwrap();
        let woken = tokio::time::timeout(Duration::from_secs(1), closed_while_idle(&newcomer));
        assert_eq!(woken.await, Ok(Err(Closed::Reaped)));
        // Full with one answering and one idle (third): a fourth takes the idle one; a fifth
        // finds only the one answering, not stuck: refused, without waiting.
        let fourth = admission.admit([192, 0, 4, 1].into());
        assert!(fourth.is_some());
        let fourth = fourth.unwrap();
        fourth
            .idle(std::future::ready(()))
            .await
            .expect("a query starts");
        fourth.query_complete();
        assert!(admission.admit([192, 0, 5, 1].into()).is_none());
        drop((busy, quick, third, fourth));
        assert_eq!(admission.holders.load(Ordering::Relaxed), 0);
    }
}
