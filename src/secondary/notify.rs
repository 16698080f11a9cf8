//! NOTIFY in (RFC 1996): a primary telling a secondary zone that it changed.
//!
//! Owns the table of secondary zones NOTIFY may come for (their primaries' addresses and TSIG
//! key, registered by each zone's task), the answer the listeners send, and the hand-off to the
//! zone's task: a [`Signal`] of atomics the task polls between its timers. The listeners call
//! [`is_notify`] and [`answer`] on the serving path, which therefore only reads the table
//! (lock-free, `arc_swap`), computes a MAC at most and sets atomics: no lock, no I/O. Accepted
//! and refused NOTIFYs are counted per zone and per reason for status and metrics.
//!
//! Refusals are rate-limited per source prefix (/24 for IPv4, /56 for IPv6), as the RRL limits
//! responses: [`REFUSALS_PER_SECOND`] with a burst of [`REFUSAL_BURST`], in a fixed table of
//! token buckets ([`crate::rrl::table`]: one compare-and-swap, no lock, no allocation). A
//! refusal over the rate is still counted but gets no answer (counted in
//! [`refusals_dropped`]), so a flood of bad NOTIFYs costs a parse and a table lookup each and
//! is not reflected. The question is read into a stack buffer and refusals are written
//! straight into the listener's buffer: a refused NOTIFY allocates nothing (an accepted one
//! from a primary may, to sign its answer).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;

use crate::dns::tsig::{self, Key, Signer, Verdict};
use crate::dns::wire::{flag, rcode, HEADER_LEN};
use crate::rrl::table::{hash_value, Rate, Table as Buckets};

/// Refused NOTIFYs answered per second per source prefix, and at once from a full bucket.
pub const REFUSALS_PER_SECOND: u32 = 5;
pub const REFUSAL_BURST: u32 = 20;
/// Buckets of the refusal limiter (prefixes beyond share buckets: stricter, never looser).
const REFUSAL_BUCKETS: usize = 4096;

/// The NOTIFY opcode (RFC 1996 section 3.1).
const OPCODE_NOTIFY: u16 = 4;
const TYPE_SOA: u16 = 6;

/// Why a NOTIFY was refused (a metric label and status text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Refusal {
    /// Not for a secondary zone of this server.
    NotSecondary = 1,
    /// From an address that is none of the zone's primaries.
    NotPrimary = 2,
    /// Unsigned, and the zone has a key.
    Unsigned = 3,
    /// Signed, but the signature, key or time is wrong.
    Tsig = 4,
    /// Not a NOTIFY for one SOA question.
    Malformed = 5,
}

impl Refusal {
    pub const ALL: [Refusal; 5] = [
        Refusal::NotSecondary,
        Refusal::NotPrimary,
        Refusal::Unsigned,
        Refusal::Tsig,
        Refusal::Malformed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NotSecondary => "not_secondary",
            Refusal::NotPrimary => "not_primary",
            Refusal::Unsigned => "unsigned",
            Refusal::Tsig => "tsig",
            Refusal::Malformed => "malformed",
        }
    }

    fn from_u8(code: u8) -> Option<Refusal> {
        Refusal::ALL.into_iter().find(|r| *r as u8 == code)
    }
}

/// What the serving path leaves for a zone's task: a refresh is wanted, and the last NOTIFY
/// accepted and refused (times in seconds since the epoch; 0: none yet).
#[derive(Debug, Default)]
pub struct Signal {
    pending: AtomicBool,
    accepted: AtomicU64,
    refused: AtomicU64,
    last_accepted: AtomicU64,
    /// The serial the last accepted NOTIFY carried, plus 1 << 32 when it carried one.
    last_serial: AtomicU64,
    last_refused: AtomicU64,
    last_reason: AtomicU8,
    /// The last refused sender, as an IPv6 (IPv4-mapped) address in two halves.
    last_from: [AtomicU64; 2],
}

impl Signal {
    /// Whether a NOTIFY came since the last [`Signal::take`] (without clearing it).
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Whether a NOTIFY came, clearing it.
    pub fn take(&self) -> bool {
        self.pending.swap(false, Ordering::AcqRel)
    }

    fn accept(&self, serial: Option<u32>, now: u64) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.last_accepted.store(now, Ordering::Relaxed);
        let serial = serial.map_or(0, |s| u64::from(s) | 1 << 32);
        self.last_serial.store(serial, Ordering::Relaxed);
        self.pending.store(true, Ordering::Release);
    }

    fn refuse(&self, reason: Refusal, from: IpAddr, now: u64) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.last_refused.store(now, Ordering::Relaxed);
        self.last_reason.store(reason as u8, Ordering::Relaxed);
        let bits = u128::from(match from {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        });
        self.last_from[0].store((bits >> 64) as u64, Ordering::Relaxed);
        self.last_from[1].store(bits as u64, Ordering::Relaxed);
    }

    /// What status shows of this zone's NOTIFYs.
    pub fn report(&self) -> NotifyReport {
        let at = |secs: u64| {
            (secs != 0).then(|| {
                crate::rfc3339::format_utc(UNIX_EPOCH + std::time::Duration::from_secs(secs))
            })
        };
        let serial = self.last_serial.load(Ordering::Relaxed);
        let last_notify =
            at(self.last_accepted.load(Ordering::Relaxed)).map(|when| match serial >> 32 {
                0 => format!("{when}: no serial given"),
                _ => format!("{when}: serial {}", serial as u32),
            });
        let reason = Refusal::from_u8(self.last_reason.load(Ordering::Relaxed));
        let last_refusal = at(self.last_refused.load(Ordering::Relaxed)).map(|when| {
            let high = u128::from(self.last_from[0].load(Ordering::Relaxed));
            let low = u128::from(self.last_from[1].load(Ordering::Relaxed));
            let from = Ipv6Addr::from(high << 64 | low);
            let from = from.to_ipv4_mapped().map_or(IpAddr::V6(from), IpAddr::V4);
            let why = reason.map_or("refused", Refusal::as_str);
            format!("{when}: from {from}: {why}")
        });
        NotifyReport {
            accepted: self.accepted.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            last_notify,
            last_refusal,
        }
    }
}

/// A zone's NOTIFYs as status shows them.
#[derive(Debug, Clone, Default)]
pub struct NotifyReport {
    pub accepted: u64,
    pub refused: u64,
    pub last_notify: Option<String>,
    pub last_refusal: Option<String>,
}

/// One secondary zone NOTIFY may come for.
struct Entry {
    name: String,
    primaries: Vec<IpAddr>,
    key: Option<Key>,
    signal: Arc<Signal>,
}

/// Secondary zones by their lower-cased wire name.
#[derive(Default)]
struct Table {
    zones: HashMap<Vec<u8>, Arc<Entry>>,
}

fn table() -> &'static ArcSwap<Table> {
    static TABLE: OnceLock<ArcSwap<Table>> = OnceLock::new();
    TABLE.get_or_init(|| ArcSwap::from_pointee(Table::default()))
}

/// NOTIFYs refused for names that are no secondary zone here, or unreadable, by reason.
fn unzoned() -> &'static [AtomicU64; Refusal::ALL.len()] {
    static COUNTS: OnceLock<[AtomicU64; Refusal::ALL.len()]> = OnceLock::new();
    COUNTS.get_or_init(Default::default)
}

/// Makes (or updates) the entry of zone `name` (`origin`: its absolute name) and returns its
/// signal; a zone registered again keeps its signal and counts.
pub fn register(
    name: &str,
    origin: &hickory_proto::rr::Name,
    primaries: &[std::net::SocketAddr],
    key: Option<Key>,
) -> Arc<Signal> {
    let wire = lower_wire(origin);
    let signal = table()
        .load()
        .zones
        .get(&wire)
        .map_or_else(Arc::default, |e| e.signal.clone());
    let entry = Arc::new(Entry {
        name: name.to_string(),
        primaries: primaries.iter().map(|p| p.ip()).collect(),
        key,
        signal: signal.clone(),
    });
    table().rcu(|current| {
        let mut zones = current.zones.clone();
        zones.insert(wire.clone(), entry.clone());
        Table { zones }
    });
    signal
}

/// Forgets zone `origin` (a catalog member that left): its NOTIFYs are refused again.
pub fn unregister(origin: &hickory_proto::rr::Name) {
    let wire = lower_wire(origin);
    table().rcu(|current| {
        let mut zones = current.zones.clone();
        zones.remove(&wire);
        Table { zones }
    });
}

/// Each registered zone's name and NOTIFY report.
pub fn reports() -> Vec<(String, NotifyReport)> {
    let table = table().load();
    let mut reports: Vec<(String, NotifyReport)> = table
        .zones
        .values()
        .map(|e| (e.name.clone(), e.signal.report()))
        .collect();
    reports.sort_by(|a, b| a.0.cmp(&b.0));
    reports
}

/// NOTIFYs refused for no zone of ours (or unreadable), by reason; those for a zone are in
/// its [`NotifyReport`].
pub fn unzoned_refusals() -> Vec<(&'static str, u64)> {
    Refusal::ALL
        .iter()
        .zip(unzoned())
        .map(|(r, n)| (r.as_str(), n.load(Ordering::Relaxed)))
        .collect()
}

fn lower_wire(name: &hickory_proto::rr::Name) -> Vec<u8> {
    let mut wire = Vec::with_capacity(name.len() + 1);
    for label in name.iter() {
        wire.push(label.len() as u8);
        wire.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    wire.push(0);
    wire
}

/// Whether `packet` is a NOTIFY request (opcode 4, QR clear) for [`answer`] rather than the
/// query path: only while this server has secondary zones. A server without any takes no
/// NOTIFY at all, and the query path answers NOTIMP as for any opcode it does not implement.
pub fn is_notify(packet: &[u8]) -> bool {
    let opcode_notify = packet.get(2..4).is_some_and(|f| {
        let flags = u16::from_be_bytes([f[0], f[1]]);
        flags & flag::QR == 0 && (flags >> 11) & 0xf == OPCODE_NOTIFY
    });
    opcode_notify && !table().load().zones.is_empty()
}

/// The question of a NOTIFY: its lower-cased wire name (in a stack buffer: no allocation),
/// where the question ends, and the serial of the SOA in the answer section if there is one.
struct Question {
    wire: [u8; 255],
    wire_len: usize,
    end: usize,
    serial: Option<u32>,
}

impl Question {
    fn wire(&self) -> &[u8] {
        &self.wire[..self.wire_len]
    }
}

fn read_question(packet: &[u8]) -> Option<Question> {
    let count = |i: usize| {
        packet
            .get(i..i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    if count(4)? != 1 {
        return None;
    }
    let mut wire = [0u8; 255];
    let mut wire_len = 0;
    let mut pos = HEADER_LEN;
    loop {
        let len = usize::from(*packet.get(pos)?);
        if len >= 64 || wire_len + len + 1 > 255 {
            return None;
        }
        wire[wire_len] = len as u8;
        let label = packet.get(pos + 1..pos + 1 + len)?;
        let target = &mut wire[wire_len + 1..wire_len + 1 + len];
        target.copy_from_slice(label);
        target.make_ascii_lowercase();
        wire_len += 1 + len;
        pos += 1 + len;
        if len == 0 {
            break;
        }
    }
    let (qtype, qclass) = (count(pos)?, count(pos + 2)?);
    if qtype != TYPE_SOA || qclass != 1 {
        return None;
    }
    let end = pos + 4;
    let serial = if count(6)? > 0 {
        answer_serial(packet, end)
    } else {
        None
    };
    Some(Question {
        wire,
        wire_len,
        end,
        serial,
    })
}

/// The serial of a SOA answer record at `pos` (owner compressed or not; RFC 1996 3.7).
fn answer_serial(packet: &[u8], mut pos: usize) -> Option<u32> {
    pos = skip_name(packet, pos)?;
    let field = |p: usize| {
        packet
            .get(p..p + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    if field(pos)? != TYPE_SOA {
        return None;
    }
    let mut rdata = skip_name(packet, pos + 10)?;
    rdata = skip_name(packet, rdata)?;
    let serial = packet.get(rdata..rdata + 4)?;
    Some(u32::from_be_bytes([
        serial[0], serial[1], serial[2], serial[3],
    ]))
}

fn skip_name(packet: &[u8], mut pos: usize) -> Option<usize> {
    loop {
        let len = *packet.get(pos)?;
        match len {
            0 => return Some(pos + 1),
            l if l & 0xC0 == 0xC0 => return Some(pos + 2),
            l if l < 64 => pos += 1 + usize::from(l),
            _ => return None,
        }
    }
}

/// Answers a NOTIFY from `from` into `out`: NOERROR (AA, the question echoed, signed when the
/// request was) and the zone's task told, or REFUSED (NOTAUTH for a bad signature) and
/// counted. `None`: not even a question to echo, or a refusal over its source's rate (dropped,
/// counted).
pub fn answer(packet: &[u8], from: IpAddr, out: &mut [u8]) -> Option<usize> {
    // A dual-stack socket shows an IPv4 primary as ::ffff:a.b.c.d.
    let from = from.to_canonical();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let Some(question) = read_question(packet) else {
        count_unzoned(Refusal::Malformed);
        return None;
    };
    let echo = packet.get(HEADER_LEN..question.end)?;
    let table = table().load();
    let Some(entry) = table.zones.get(question.wire()) else {
        count_unzoned(Refusal::NotSecondary);
        return refuse_into(out, packet, echo, rcode::REFUSED, from);
    };
    if !entry.primaries.contains(&from) {
        entry.signal.refuse(Refusal::NotPrimary, from, now);
        return refuse_into(out, packet, echo, rcode::REFUSED, from);
    }
    let request = Request {
        packet,
        echo,
        question: &question,
        from,
        now,
    };
    match &entry.key {
        Some(key) => signed_reply(entry, key, &request, out),
        None => unkeyed_reply(entry, &request, out),
    }
}

/// A NOTIFY being answered: its bytes, its question section (echoed), what the question
/// says, its sender and the time.
struct Request<'a> {
    packet: &'a [u8],
    echo: &'a [u8],
    question: &'a Question,
    from: IpAddr,
    now: u64,
}

/// The refusal limiter's buckets (one table per process, as the listeners are).
fn refusal_buckets() -> &'static Buckets {
    static BUCKETS: OnceLock<Buckets> = OnceLock::new();
    BUCKETS.get_or_init(|| Buckets::new(REFUSAL_BUCKETS))
}

static REFUSALS_DROPPED: AtomicU64 = AtomicU64::new(0);

/// Refused NOTIFYs left unanswered because their source prefix was over its rate.
pub fn refusals_dropped() -> u64 {
    REFUSALS_DROPPED.load(Ordering::Relaxed)
}

/// Whether a refusal to `from` may be answered now (a token of its prefix's bucket taken);
/// counts the ones that may not.
fn refusal_allowed(from: IpAddr) -> bool {
    let prefix: u128 = match from {
        IpAddr::V4(v4) => u128::from(u32::from(v4) & 0xffff_ff00),
        IpAddr::V6(v6) => u128::from(v6) & !((1u128 << 72) - 1),
    };
    let buckets = refusal_buckets();
    let slot = buckets.slot(|h| hash_value(h, (from.is_ipv4(), prefix)));
    let rate = Rate {
        per_second: REFUSALS_PER_SECOND,
        burst: REFUSAL_BURST,
    };
    let allowed = buckets.take(slot, crate::rrl::clock::now_ms(), rate);
    if !allowed {
        REFUSALS_DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    allowed
}

/// A refusal (`code`) written into `out` when its source is within its rate; `None` (no
/// answer) otherwise.
fn refuse_into(
    out: &mut [u8],
    packet: &[u8],
    echo: &[u8],
    code: u16,
    from: IpAddr,
) -> Option<usize> {
    if !refusal_allowed(from) {
        return None;
    }
    reply_into(out, packet, echo, code)
}

/// The answer for a zone without a key: it takes no signed NOTIFY either, since nothing could
/// check the signature.
fn unkeyed_reply(entry: &Entry, r: &Request<'_>, out: &mut [u8]) -> Option<usize> {
    if !matches!(tsig::find(r.packet), Ok(None)) {
        entry.signal.refuse(Refusal::Tsig, r.from, r.now);
        return refuse_into(out, r.packet, r.echo, rcode::REFUSED, r.from);
    }
    entry.signal.accept(r.question.serial, r.now);
    reply_into(out, r.packet, r.echo, rcode::NOERROR)
}

/// The answer for a zone with `key`: accepted only when signed with it (and the answer signed
/// in turn), NOTAUTH with the TSIG error for a bad signature (RFC 8945 5.2).
fn signed_reply(entry: &Entry, key: &Key, r: &Request<'_>, out: &mut [u8]) -> Option<usize> {
    let keys = std::slice::from_ref(key);
    let (packet, echo, from, now) = (r.packet, r.echo, r.from, r.now);
    match tsig::verify_request(packet, keys, now) {
        Ok(Verdict::Signed { request_mac, .. }) => {
            entry.signal.accept(r.question.serial, now);
            let mut message = reply(packet, echo, rcode::NOERROR);
            Signer::for_answer_of(key, &request_mac).sign(&mut message, now);
            copy_out(message, out)
        }
        Ok(Verdict::Refused(refusal)) => {
            entry.signal.refuse(Refusal::Tsig, from, now);
            if !refusal_allowed(from) {
                return None;
            }
            let mut message = reply(packet, echo, tsig::NOTAUTH);
            tsig::error_answer(&mut message, &refusal, keys, now);
            copy_out(message, out)
        }
        Ok(Verdict::Unsigned) => {
            entry.signal.refuse(Refusal::Unsigned, from, now);
            refuse_into(out, packet, echo, rcode::REFUSED, from)
        }
        Err(tsig::Malformed) => {
            entry.signal.refuse(Refusal::Malformed, from, now);
            refuse_into(out, packet, echo, rcode::FORMERR, from)
        }
    }
}

fn count_unzoned(reason: Refusal) {
    if let Some(n) = unzoned().get(reason as usize - 1) {
        n.fetch_add(1, Ordering::Relaxed);
    }
}

/// A NOTIFY response: the request's ID and opcode, QR, `code`, the question echoed; AA when
/// accepted (RFC 1996 4.7), an error not being authoritative.
fn reply(packet: &[u8], question: &[u8], code: u16) -> Vec<u8> {
    let mut message = vec![0; HEADER_LEN + question.len()];
    let len = reply_into(&mut message, packet, question, code).unwrap_or(0);
    message.truncate(len);
    message.reserve(128);
    message
}

/// [`reply`] written into `out` (no allocation); its length, `None` when it does not fit.
fn reply_into(out: &mut [u8], packet: &[u8], question: &[u8], code: u16) -> Option<usize> {
    let len = HEADER_LEN + question.len();
    let target = out.get_mut(..len)?;
    target[..2].copy_from_slice(packet.get(..2)?);
    let aa = if code == rcode::NOERROR { flag::AA } else { 0 };
    let flags = flag::QR | aa | OPCODE_NOTIFY << 11 | (code & 0xf);
    target[2..4].copy_from_slice(&flags.to_be_bytes());
    target[4..HEADER_LEN].copy_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    target[HEADER_LEN..].copy_from_slice(question);
    Some(len)
}

fn copy_out(message: Vec<u8>, out: &mut [u8]) -> Option<usize> {
    let target = out.get_mut(..message.len())?;
    target.copy_from_slice(&message);
    Some(message.len())
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;
    use crate::dns::tsig::Algorithm;

    fn notify(zone: &str) -> Vec<u8> {
        let mut message = Message::new(4242, MessageType::Query, OpCode::Notify);
        message.add_query(Query::query(
            Name::from_ascii(zone).expect("name"),
            RecordType::SOA,
        ));
        message.to_vec().expect("encode")
    }

    fn answered(packet: &[u8], from: &str) -> Message {
        let mut out = vec![0u8; 1024];
        let len = answer(packet, from.parse().expect("ip"), &mut out).expect("answered");
        Message::from_vec(&out[..len]).expect("valid answer")
    }

    #[test]
    fn a_notify_from_a_primary_is_acknowledged_and_signals_the_task() {
        let origin = Name::from_ascii("n1.test.").expect("name");
        let primary = "127.0.0.1:5300".parse().expect("addr");
        let signal = register("n1.test", &origin, &[primary], None);
        let request = notify("N1.test.");
        assert!(is_notify(&request));
        let reply = answered(&request, "127.0.0.1");
        assert_eq!(reply.metadata.id, 4242);
        assert_eq!(reply.metadata.op_code, OpCode::Notify);
        assert!(reply.metadata.authoritative);
        assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        assert_eq!(reply.queries.len(), 1);
        assert!(signal.take());
        assert!(!signal.take());

        let other = answered(&request, "127.0.0.2");
        assert_eq!(other.metadata.response_code, ResponseCode::Refused);
        assert!(!signal.pending());
        let report = signal.report();
        assert_eq!((report.accepted, report.refused), (1, 1));
        let refusal = report.last_refusal.expect("a refusal");
        assert!(
            refusal.ends_with("from 127.0.0.2: not_primary"),
            "{refusal}"
        );

        let elsewhere = answered(&notify("unknown.test."), "127.0.0.1");
        assert_eq!(elsewhere.metadata.response_code, ResponseCode::Refused);
        unregister(&origin);
    }

    #[test]
    fn refusals_are_limited_per_source_prefix_and_a_primary_is_not() {
        let origin = Name::from_ascii("n3.test.").expect("name");
        let primary = "192.0.2.53:53".parse().expect("addr");
        let signal = register("n3.test", &origin, &[primary], None);
        let request = notify("n3.test.");
        let mut out = vec![0u8; 1024];
        let dropped_before = refusals_dropped();
        let flood: usize = (0..200u8)
            .filter(|i| {
                let from = IpAddr::from([198, 51, 100, *i]);
                answer(&request, from, &mut out).is_some()
            })
            .count();
        // The burst, and what refilled while the loop ran (5 a second).
        assert!(
            (REFUSAL_BURST as usize..REFUSAL_BURST as usize + 5).contains(&flood),
            "{flood} refusals answered"
        );
        assert!(refusals_dropped() - dropped_before >= 200 - flood as u64);
        assert_eq!(signal.report().refused, 200, "every refusal is counted");
        // Another prefix has its own bucket, and the primary is never limited.
        assert!(answer(&request, "203.0.113.9".parse().expect("ip"), &mut out).is_some());
        for _ in 0..50 {
            let reply = answered(&request, "192.0.2.53");
            assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        }
        unregister(&origin);
    }

    #[test]
    fn a_zone_with_a_key_takes_only_notifies_signed_with_it() {
        let origin = Name::from_ascii("n2.test.").expect("name");
        let primary = "127.0.0.1:5300".parse().expect("addr");
        let key = Key::new("n2-key", Algorithm::HmacSha256, b"0123456789abcdef0123").expect("k");
        let signal = register("n2.test", &origin, &[primary], Some(key.clone()));
        let unsigned = answered(&notify("n2.test."), "127.0.0.1");
        assert_eq!(unsigned.metadata.response_code, ResponseCode::Refused);

        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let wrong = Key::new("n2-key", Algorithm::HmacSha256, b"another-secret-01234").expect("k");
        let mut forged = notify("n2.test.");
        tsig::sign_request(&mut forged, &wrong, now);
        let mut out = vec![0u8; 1024];
        let len = answer(&forged, "127.0.0.1".parse().expect("ip"), &mut out).expect("answer");
        assert_eq!(out[3] & 0xf, tsig::NOTAUTH as u8);
        assert!(!signal.pending());

        let mut signed = notify("n2.test.");
        let mac = tsig::sign_request(&mut signed, &key, now);
        let len2 = answer(&signed, "127.0.0.1".parse().expect("ip"), &mut out).expect("answer");
        Signer::for_answer_of(&key, &mac)
            .verify(&out[..len2], now)
            .expect("the acknowledgement is signed");
        assert!(signal.take());
        assert!(len > 0);
        unregister(&origin);
    }
}
