//! Process-wide serving counters whose shape never depends on config: queries, responses by
//! transport and rcode, truncations, drops, UDP send errors, TCP connections, and the response
//! rate limiter's verdicts. They live in a
//! `static` (one per process, like the sockets) so they survive every reload as they are.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::cells::{current_slot, SLOTS};
use crate::dns::cookie::Verdict as CookieVerdict;
use crate::dns::wire::rcode;
use crate::dns::wire::Transport;
use crate::rrl::{Class, Verdict};

/// Rate-limiting class label values, indexed by [`Class::index`].
pub const RRL_CLASSES: usize = Class::ALL.len();

/// Transport label values, indexed by [`transport_index`].
pub const TRANSPORTS: [&str; 5] = ["udp", "tcp", "tls", "https", "quic"];
/// The encrypted transports' label values, indexed by [`encrypted_index`].
pub const ENCRYPTED: [&str; 3] = ["tls", "https", "quic"];
/// Rcode label values, indexed by [`rcode_bucket`]; the last collects anything unexpected.
pub const RCODES: [&str; 9] = [
    "NOERROR",
    "FORMERR",
    "SERVFAIL",
    "NXDOMAIN",
    "NOTIMP",
    "REFUSED",
    "BADVERS",
    "BADCOOKIE",
    "other",
];
/// DNS Cookie verdicts, indexed by [`CookieVerdict::index`].
pub const COOKIE_VERDICTS: usize = CookieVerdict::ALL.len();
/// Why anycast answers' demand counted or not (label values, indexed by the shield's
/// `DemandSource::index`).
pub const DEMAND_SOURCE_LABELS: [&str; 5] = [
    "tcp_or_encrypted",
    "cookie",
    "trusted",
    "unproven_not_counted",
    "untrusted_ecs_not_counted",
];
const DEMAND_SOURCES: usize = DEMAND_SOURCE_LABELS.len();

pub fn transport_index(transport: Transport) -> usize {
    match transport {
        Transport::Udp => 0,
        Transport::Tcp => 1,
        Transport::Tls => 2,
        Transport::Https => 3,
        Transport::Quic => 4,
    }
}

/// The [`ENCRYPTED`] index of an encrypted transport (UDP and TCP count as TLS: never used).
pub fn encrypted_index(transport: Transport) -> usize {
    match transport {
        Transport::Https => 1,
        Transport::Quic => 2,
        _ => 0,
    }
}

/// Why a connection was closed or a request turned away, counted per transport by
/// [`ServingCounters::record_connection`] (TCP and the encrypted transports alike; TCP has no
/// handshake and no HTTP requests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionEvent {
    /// Closed at once: the client already held its share of connections.
    RefusedPerClient = 0,
    /// Closed at once: every slot was taken and no holder could be taken back (see
    /// `server::admission`).
    RefusedFull,
    /// The TLS or QUIC handshake failed (not TLS, no shared protocol, bad ALPN, ...).
    HandshakeFailed,
    /// The handshake did not complete within the handshake timeout.
    HandshakeTimeout,
    /// A query was started but not completed within the frame timeout.
    FrameTimeout,
    /// DoH: a request that is not a DNS query (path, method, media type, encoding, size).
    BadRequest,
    /// Closed after the idle time allowed without a query.
    IdleTimeout,
    /// Closed while idle to make room: the slots were filling up.
    Reaped,
    /// Closed mid-query (or stuck answering a client that does not read) to make room: the
    /// worst holder of a full table.
    ReapedStalled,
    /// Closed at `max_connection_lifetime`.
    Lifetime,
}

impl ConnectionEvent {
    /// Every event, in index order.
    pub const ALL: [ConnectionEvent; 10] = [
        ConnectionEvent::RefusedPerClient,
        ConnectionEvent::RefusedFull,
        ConnectionEvent::HandshakeFailed,
        ConnectionEvent::HandshakeTimeout,
        ConnectionEvent::FrameTimeout,
        ConnectionEvent::BadRequest,
        ConnectionEvent::IdleTimeout,
        ConnectionEvent::Reaped,
        ConnectionEvent::ReapedStalled,
        ConnectionEvent::Lifetime,
    ];

    /// The events plain TCP has (no handshake, no HTTP).
    pub const TCP: [ConnectionEvent; 7] = [
        ConnectionEvent::RefusedPerClient,
        ConnectionEvent::RefusedFull,
        ConnectionEvent::FrameTimeout,
        ConnectionEvent::IdleTimeout,
        ConnectionEvent::Reaped,
        ConnectionEvent::ReapedStalled,
        ConnectionEvent::Lifetime,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn label(self) -> &'static str {
        match self {
            ConnectionEvent::RefusedPerClient => "refused_per_client",
            ConnectionEvent::RefusedFull => "refused_full",
            ConnectionEvent::HandshakeFailed => "handshake_failed",
            ConnectionEvent::HandshakeTimeout => "handshake_timeout",
            ConnectionEvent::FrameTimeout => "frame_timeout",
            ConnectionEvent::BadRequest => "bad_request",
            ConnectionEvent::IdleTimeout => "idle_timeout",
            ConnectionEvent::Reaped => "closed_idle_to_make_room",
            ConnectionEvent::ReapedStalled => "closed_stalled_to_make_room",
            ConnectionEvent::Lifetime => "closed_at_lifetime",
        }
    }
}

/// Events per [`ConnectionEvent`] index.
pub const CONNECTION_EVENTS: usize = ConnectionEvent::ALL.len();

/// The [`RCODES`] index of a (possibly extended) rcode.
pub fn rcode_bucket(code: u16) -> usize {
    match code {
        rcode::NOERROR => 0,
        rcode::FORMERR => 1,
        rcode::SERVFAIL => 2,
        rcode::NXDOMAIN => 3,
        rcode::NOTIMP => 4,
        rcode::REFUSED => 5,
        rcode::BADVERS => 6,
        rcode::BADCOOKIE => 7,
        _ => RCODES.len() - 1,
    }
}

const fn zeros<const N: usize>() -> [AtomicU64; N] {
    [const { AtomicU64::new(0) }; N]
}

/// One thread slot's counters, aligned so two slots never share a cache line.
#[repr(align(128))]
struct Slot {
    queries: [AtomicU64; TRANSPORTS.len()],
    responses: [[AtomicU64; RCODES.len()]; TRANSPORTS.len()],
    truncated: [AtomicU64; TRANSPORTS.len()],
    dropped: [AtomicU64; TRANSPORTS.len()],
    udp_send_errors: AtomicU64,
    rrl_limited: [AtomicU64; RRL_CLASSES],
    rrl_slipped: AtomicU64,
    rrl_dropped: AtomicU64,
    cookies: [AtomicU64; COOKIE_VERDICTS],
    demand_sources: [AtomicU64; DEMAND_SOURCES],
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            queries: zeros(),
            responses: [const { zeros() }; TRANSPORTS.len()],
            truncated: zeros(),
            dropped: zeros(),
            udp_send_errors: AtomicU64::new(0),
            rrl_limited: zeros(),
            rrl_slipped: AtomicU64::new(0),
            rrl_dropped: AtomicU64::new(0),
            cookies: zeros(),
            demand_sources: zeros(),
        }
    }
}

/// TCP connection counters: bumped per connection, not per query, so one shared line will do.
#[repr(align(128))]
struct Connections {
    open: AtomicI64,
    accepted: AtomicU64,
    /// accept() failed (out of file descriptors, and the like).
    accept_errors: AtomicU64,
    /// Connections closed, by [`ConnectionEvent`].
    events: [AtomicU64; CONNECTION_EVENTS],
}

/// One encrypted transport's connection counters (per connection, not per query).
#[repr(align(128))]
struct EncryptedConnections {
    open: AtomicI64,
    accepted: AtomicU64,
    events: [AtomicU64; CONNECTION_EVENTS],
}

pub struct ServingCounters {
    slots: [Slot; SLOTS],
    connections: Connections,
    encrypted: [EncryptedConnections; ENCRYPTED.len()],
}

static SERVING: ServingCounters = ServingCounters::new();

/// The process's serving counters.
pub fn serving() -> &'static ServingCounters {
    &SERVING
}

/// Queries held (dropped, the resolver asks again) during phase 1 of a start from the zone
/// cache, while the zones load: ones the precompiled answers do not cover.
static HELD_WHILE_LOADING: AtomicU64 = AtomicU64::new(0);

/// Counts one query held while the zones load.
#[cold]
pub fn record_held_while_loading() {
    bump(&HELD_WHILE_LOADING);
}

/// How many queries were held while the zones loaded, since start.
pub fn held_while_loading() -> u64 {
    HELD_WHILE_LOADING.load(Ordering::Relaxed)
}

fn bump(cell: &AtomicU64) {
    cell.fetch_add(1, Ordering::Relaxed);
}

fn total(cells: impl Iterator<Item = u64>) -> u64 {
    cells.fold(0, u64::wrapping_add)
}

/// Plain-number totals for a scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServingTotals {
    pub queries: [u64; TRANSPORTS.len()],
    pub responses: [[u64; RCODES.len()]; TRANSPORTS.len()],
    pub truncated: [u64; TRANSPORTS.len()],
    pub dropped: [u64; TRANSPORTS.len()],
    pub udp_send_errors: u64,
    pub tcp_open: i64,
    pub tcp_accepted: u64,
    pub tcp_accept_errors: u64,
    /// TCP connections closed, by [`ConnectionEvent::index`].
    pub tcp_events: [u64; CONNECTION_EVENTS],
    /// Per encrypted transport ([`ENCRYPTED`]): open connections, accepted connections, and
    /// each [`ConnectionEvent`]'s count.
    pub encrypted_open: [i64; ENCRYPTED.len()],
    pub encrypted_accepted: [u64; ENCRYPTED.len()],
    pub encrypted_events: [[u64; CONNECTION_EVENTS]; ENCRYPTED.len()],
    /// Responses over their rate, by class ([`Class::index`]).
    pub rrl_limited: [u64; RRL_CLASSES],
    /// Limited responses sent truncated.
    pub rrl_slipped: u64,
    /// Limited responses not sent.
    pub rrl_dropped: u64,
    /// Queries with a COOKIE option, by verdict ([`CookieVerdict::index`]).
    pub cookies: [u64; COOKIE_VERDICTS],
    /// Anycast answers by why their demand counted or not ([`DEMAND_SOURCE_LABELS`]).
    pub demand_sources: [u64; DEMAND_SOURCES],
}

impl ServingCounters {
    pub const fn new() -> ServingCounters {
        ServingCounters {
            slots: [const { Slot::new() }; SLOTS],
            connections: Connections {
                open: AtomicI64::new(0),
                accepted: AtomicU64::new(0),
                accept_errors: AtomicU64::new(0),
                events: zeros(),
            },
            encrypted: [const {
                EncryptedConnections {
                    open: AtomicI64::new(0),
                    accepted: AtomicU64::new(0),
                    events: zeros(),
                }
            }; ENCRYPTED.len()],
        }
    }

    /// A connection of `transport` closed (or a request turned away) for `event`.
    pub fn record_connection(&self, transport: Transport, event: ConnectionEvent) {
        let events = match transport {
            Transport::Udp | Transport::Tcp => &self.connections.events,
            t => &self.encrypted[encrypted_index(t)].events,
        };
        bump(&events[event.index()]);
    }

    /// A connection of an encrypted transport was accepted (its handshake is next); the guard
    /// counts it closed when dropped.
    pub fn encrypted_connection(&self, transport: Transport) -> EncryptedConnection<'_> {
        let c = &self.encrypted[encrypted_index(transport)];
        c.accepted.fetch_add(1, Ordering::Relaxed);
        c.open.fetch_add(1, Ordering::Relaxed);
        EncryptedConnection { counters: c }
    }

    fn slot(&self) -> &Slot {
        &self.slots[current_slot() % SLOTS]
    }

    /// A query arrived and was answered (`Some((rcode, truncated))`) or not (`None`).
    #[inline]
    pub fn record(&self, transport: Transport, answered: Option<(u16, bool)>) {
        let slot = self.slot();
        let t = transport_index(transport);
        bump(&slot.queries[t]);
        match answered {
            Some((code, truncated)) => {
                bump(&slot.responses[t][rcode_bucket(code)]);
                if truncated {
                    bump(&slot.truncated[t]);
                }
            }
            None => bump(&slot.dropped[t]),
        }
    }

    /// The kernel refused to send a UDP response.
    pub fn record_udp_send_error(&self) {
        bump(&self.slot().udp_send_errors);
    }

    /// The rate limiter's verdict on one response (only limited ones are counted).
    #[inline]
    pub fn record_rrl(&self, class: Class, verdict: Verdict) {
        let slot = self.slot();
        match verdict {
            Verdict::Send => return,
            Verdict::Slip => bump(&slot.rrl_slipped),
            Verdict::Drop => bump(&slot.rrl_dropped),
        }
        bump(&slot.rrl_limited[class.index() % RRL_CLASSES]);
    }

    /// A query's COOKIE option and what its server cookie proved.
    #[inline]
    pub fn record_cookie(&self, verdict: CookieVerdict) {
        bump(&self.slot().cookies[verdict.index() % COOKIE_VERDICTS]);
    }

    /// An anycast answer's demand, counted or not, and why (a [`DEMAND_SOURCE_LABELS`] index).
    #[inline]
    pub fn record_demand_source(&self, index: usize) {
        bump(&self.slot().demand_sources[index % DEMAND_SOURCES]);
    }

    /// accept() failed; returns how many times in all (for rate-limited logging).
    pub fn record_tcp_accept_error(&self) -> u64 {
        self.connections
            .accept_errors
            .fetch_add(1, Ordering::Relaxed)
            + 1
    }

    /// A TCP connection was accepted; the guard counts it closed when dropped.
    pub fn tcp_connection(&self) -> TcpConnection<'_> {
        self.connections.accepted.fetch_add(1, Ordering::Relaxed);
        self.connections.open.fetch_add(1, Ordering::Relaxed);
        TcpConnection { counters: self }
    }

    /// DNS connections open now, TCP and encrypted (a few loads: asked at every accept).
    pub fn connections_open(&self) -> i64 {
        let encrypted: i64 = self
            .encrypted
            .iter()
            .map(|c| c.open.load(Ordering::Relaxed))
            .sum();
        self.connections.open.load(Ordering::Relaxed) + encrypted
    }

    pub fn totals(&self) -> ServingTotals {
        let sum = |f: &dyn Fn(&Slot) -> &AtomicU64| {
            total(self.slots.iter().map(|s| f(s).load(Ordering::Relaxed)))
        };
        let mut totals = ServingTotals {
            udp_send_errors: sum(&|s| &s.udp_send_errors),
            tcp_open: self.connections.open.load(Ordering::Relaxed),
            tcp_accepted: self.connections.accepted.load(Ordering::Relaxed),
            tcp_accept_errors: self.connections.accept_errors.load(Ordering::Relaxed),
            rrl_slipped: sum(&|s| &s.rrl_slipped),
            rrl_dropped: sum(&|s| &s.rrl_dropped),
            ..ServingTotals::default()
        };
        for (e, cell) in self.connections.events.iter().enumerate() {
            totals.tcp_events[e] = cell.load(Ordering::Relaxed);
        }
        for (t, c) in self.encrypted.iter().enumerate() {
            totals.encrypted_open[t] = c.open.load(Ordering::Relaxed);
            totals.encrypted_accepted[t] = c.accepted.load(Ordering::Relaxed);
            for (e, cell) in c.events.iter().enumerate() {
                totals.encrypted_events[t][e] = cell.load(Ordering::Relaxed);
            }
        }
        for c in 0..RRL_CLASSES {
            totals.rrl_limited[c] = sum(&|s| &s.rrl_limited[c]);
        }
        for v in 0..COOKIE_VERDICTS {
            totals.cookies[v] = sum(&|s| &s.cookies[v]);
        }
        for d in 0..DEMAND_SOURCES {
            totals.demand_sources[d] = sum(&|s| &s.demand_sources[d]);
        }
        for t in 0..TRANSPORTS.len() {
            totals.queries[t] = sum(&|s| &s.queries[t]);
            totals.truncated[t] = sum(&|s| &s.truncated[t]);
            totals.dropped[t] = sum(&|s| &s.dropped[t]);
            for r in 0..RCODES.len() {
                totals.responses[t][r] = sum(&|s| &s.responses[t][r]);
            }
        }
        totals
    }
}

impl Default for ServingCounters {
    fn default() -> Self {
        ServingCounters::new()
    }
}

/// An open TCP connection, counted closed on drop (also when its task ends in an error).
pub struct TcpConnection<'a> {
    counters: &'a ServingCounters,
}

/// An open connection of an encrypted transport, counted closed on drop.
pub struct EncryptedConnection<'a> {
    counters: &'a EncryptedConnections,
}

impl Drop for EncryptedConnection<'_> {
    fn drop(&mut self) {
        self.counters.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for TcpConnection<'_> {
    fn drop(&mut self) {
        self.counters
            .connections
            .open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_by_transport_rcode_truncation_and_drop() {
        let counters = ServingCounters::new();
        counters.record(Transport::Udp, Some((rcode::NOERROR, false)));
        counters.record(Transport::Udp, Some((rcode::NOERROR, true)));
        counters.record(Transport::Udp, None);
        counters.record(Transport::Tcp, Some((rcode::BADVERS, false)));
        counters.record(Transport::Tcp, Some((99, false)));
        counters.record_udp_send_error();
        let t = counters.totals();
        assert_eq!(t.queries, [3, 2, 0, 0, 0]);
        assert_eq!(t.responses[0][rcode_bucket(rcode::NOERROR)], 2);
        assert_eq!(t.responses[1][rcode_bucket(rcode::BADVERS)], 1);
        assert_eq!(t.responses[1][RCODES.len() - 1], 1);
        assert_eq!(t.truncated, [1, 0, 0, 0, 0]);
        assert_eq!(t.dropped, [1, 0, 0, 0, 0]);
        assert_eq!(t.udp_send_errors, 1);
    }

    #[test]
    fn rate_limiter_verdicts_are_counted_by_class() {
        let counters = ServingCounters::new();
        counters.record_rrl(Class::Answer, Verdict::Send);
        counters.record_rrl(Class::Answer, Verdict::Drop);
        counters.record_rrl(Class::Answer, Verdict::Slip);
        counters.record_rrl(Class::Error, Verdict::Drop);
        let t = counters.totals();
        assert_eq!(t.rrl_limited[Class::Answer.index()], 2);
        assert_eq!(t.rrl_limited[Class::Error.index()], 1);
        assert_eq!(t.rrl_limited.iter().sum::<u64>(), 3);
        assert_eq!((t.rrl_slipped, t.rrl_dropped), (1, 2));
    }

    #[test]
    fn tcp_connections_open_and_close() {
        let counters = ServingCounters::new();
        let a = counters.tcp_connection();
        let b = counters.tcp_connection();
        assert_eq!(counters.totals().tcp_open, 2);
        assert_eq!(counters.connections_open(), 2);
        drop(a);
        drop(b);
        let t = counters.totals();
        assert_eq!((t.tcp_open, t.tcp_accepted), (0, 2));
    }
}
