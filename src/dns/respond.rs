//! From query bytes to response bytes: the whole per-packet path, transport-agnostic.
//!
//! 1. [`parse_query`] validates the header, question and EDNS in place.
//! 2. Static answers are served from the snapshot's precompiled responses: one hash probe, one
//!    copy, a few patched bytes.
//! 3. Anything else (steered names, negative answers, wildcards, referrals, oversize) goes through
//!    [`resolve`] and is written with compression by [`Writer`].
//! 4. Over UDP, the response rate limiter ([`crate::rrl`]) may drop the response or have it
//!    *slipped*: cut to header and question with TC set.
//!
//! Nothing here allocates, locks or does I/O, except the CHAOS trace (operators' debugging aid).

use std::net::IpAddr;

use super::chaos;
use super::wire::{
    class, flag, option, parse_query, parse_query_into, rcode, rtype, Edns, Query, Reject,
    HEADER_LEN, MAX_NAME_LEN,
};
use super::writer::{Overflow, Writer};
use crate::metrics::{querylog, serving};
use crate::rrl::{Class, Subject, Verdict};
use crate::snapshot::steer::{AddressSet, ClientSteering};
use crate::snapshot::{Cached, Snapshot};
use crate::zone::lookup::{resolve, Data, Entry, NoSteering, Owner, Plan, Steering, Synth};

/// UDP payload size assumed for a query without EDNS (RFC 1035 §4.2.1).
pub const CLASSIC_UDP_LIMIT: usize = 512;
/// Largest DNS message (TCP).
pub const MAX_MESSAGE: usize = 65535;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
    /// DNS over TLS (RFC 7858).
    Tls,
    /// DNS over HTTPS (RFC 8484).
    Https,
    /// DNS over QUIC (RFC 9250).
    Quic,
}

/// Who asked, as the socket saw it.
#[derive(Clone, Copy, Debug)]
pub struct Client {
    pub addr: IpAddr,
    pub transport: Transport,
}

impl Client {
    pub fn new(addr: IpAddr, transport: Transport) -> Self {
        // An IPv4 client on a dual-stack socket shows up as ::ffff:a.b.c.d.
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        Client { addr, transport }
    }
}

/// Answers `packet` into `out`; returns the response length, or `None` to stay silent.
/// `out` must hold at least [`MAX_MESSAGE`] bytes for TCP, or the UDP limit for UDP.
/// Every call is counted (see [`crate::metrics`]: relaxed atomic adds, no lock, no allocation).
pub fn respond(
    snapshot: &Snapshot,
    packet: &[u8],
    client: &Client,
    out: &mut [u8],
) -> Option<usize> {
    let mut query = Query::blank();
    match parse_query_into(packet, &mut query) {
        Ok(()) => {}
        Err(Reject::Drop) => {
            serving().record(client.transport, None);
            return None;
        }
        Err(Reject::Error {
            rcode,
            question,
            edns,
        }) => {
            let len = write_error(snapshot, packet, rcode, question, edns.as_ref(), out).ok();
            let len = len.and_then(|n| limit_rate(snapshot, client, rcode, None, out, n));
            let truncated = len.map(|n| is_truncated(&out[..n]));
            serving().record(client.transport, truncated.map(|tc| (rcode, tc)));
            if len.is_some() {
                snapshot.counters.record_response(None, rcode);
            }
            return len;
        }
    }
    // One lookup gives both the fast-path entry (if any) and the zone for the counters.
    let dnssec = query.edns.as_ref().is_some_and(|e| e.dnssec_ok);
    let precompiled = snapshot.fast_path(&query.qname, query.qtype, dnssec);
    let zone = match precompiled {
        Some((zone, _)) => Some(zone),
        None => zone_index(snapshot, &query),
    };
    let cached = precompiled.map(|(_, cached)| cached);
    let len = answer(snapshot, packet, &query, client, cached, out).and_then(|n| {
        let subject = Subject {
            qname: query.qname.as_wire(),
            qtype: query.qtype,
            zone,
        };
        let rcode = response_rcode(&query, &out[..n]);
        limit_rate(snapshot, client, rcode, Some(&subject), out, n)
    });
    count(snapshot, client, &query, zone, len.map(|n| &out[..n]));
    len
}

/// The rate limiter's say on a response of `len` bytes in `out`: the length to send (the
/// same, or a slip's), or `None` to drop it.
fn limit_rate(
    snapshot: &Snapshot,
    client: &Client,
    rcode: u16,
    subject: Option<&Subject<'_>>,
    out: &mut [u8],
    len: usize,
) -> Option<usize> {
    let Some(rrl) = &snapshot.rrl else {
        return Some(len);
    };
    let class = Class::of(rcode, &out[..len]);
    match rrl.check(client, class, subject) {
        Verdict::Send => Some(len),
        Verdict::Drop => None,
        Verdict::Slip => Some(slip_in_place(out, len)),
    }
}

/// Cuts a response to its header and question with TC set and no records: a rate limiter's
/// slip. The client retries over TCP; the reply is never bigger than the query was.
fn slip_in_place(out: &mut [u8], len: usize) -> usize {
    if len < HEADER_LEN || out.len() < HEADER_LEN {
        return len.min(out.len());
    }
    let end = question_end(&out[..len]);
    let flags = u16::from_be_bytes([out[2], out[3]]) | flag::TC;
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    if end.is_none() {
        out[4..6].fill(0);
    }
    out[6..HEADER_LEN].fill(0);
    end.unwrap_or(HEADER_LEN)
}

/// Where the (single, uncompressed) question of a message ends, if it has one.
fn question_end(message: &[u8]) -> Option<usize> {
    if message.get(4..6)? != [0, 1] {
        return None;
    }
    let mut pos = HEADER_LEN;
    loop {
        let label = usize::from(*message.get(pos)?);
        pos += 1;
        match label {
            0 => break,
            1..=63 => pos += label,
            _ => return None,
        }
    }
    let end = pos + 4;
    (end <= message.len()).then_some(end)
}

/// The response's rcode: BADVERS is the only extended rcode we send, and every query with
/// EDNS version > 0 gets it; otherwise the header says.
fn response_rcode(query: &Query, response: &[u8]) -> u16 {
    if query.edns.as_ref().is_some_and(|e| e.version > 0) {
        rcode::BADVERS
    } else {
        response
            .get(3)
            .map_or(rcode::SERVFAIL, |b| u16::from(b & 0x0F))
    }
}

/// Counts one answered (or silently dropped) query, and logs it if it is sampled.
fn count(
    snapshot: &Snapshot,
    client: &Client,
    query: &Query,
    zone: Option<usize>,
    response: Option<&[u8]>,
) {
    let Some(response) = response else {
        serving().record(client.transport, None);
        return;
    };
    let rcode = response_rcode(query, response);
    serving().record(client.transport, Some((rcode, is_truncated(response))));
    snapshot.counters.record_response(zone, rcode);
    if querylog::sampled(snapshot.options.query_log_sample) {
        querylog::log(client, query, rcode);
    }
}

fn is_truncated(response: &[u8]) -> bool {
    response.get(2).is_some_and(|b| b & 0x02 != 0)
}

/// Index (in the snapshot's zone list) of the zone the query name is in.
fn zone_index(snapshot: &Snapshot, query: &Query) -> Option<usize> {
    snapshot
        .zones
        .find_index(&query.qname)
        .map(|(index, _)| index)
}

/// The answer proper, uncounted.
fn answer(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    client: &Client,
    precompiled: Option<Cached<'_>>,
    out: &mut [u8],
) -> Option<usize> {
    let limit = response_limit(snapshot, query, client);
    if let Some(edns) = &query.edns {
        if edns.version > 0 {
            return write_simple(snapshot, packet, query, rcode::BADVERS, limit, out).ok();
        }
    }
    match (query.qclass, query.qtype) {
        (_, rtype::OPT) => {
            return write_simple(snapshot, packet, query, rcode::FORMERR, limit, out).ok()
        }
        (_, rtype::AXFR | rtype::IXFR) => {
            return write_simple(snapshot, packet, query, rcode::REFUSED, limit, out).ok()
        }
        (_, rtype::MAILA | rtype::MAILB) => {
            return write_simple(snapshot, packet, query, rcode::NOTIMP, limit, out).ok()
        }
        (class::CH, _) => return chaos::respond(snapshot, packet, query, client, limit, out),
        (class::IN, _) => {}
        _ => return write_simple(snapshot, packet, query, rcode::REFUSED, limit, out).ok(),
    }
    if let Some(Cached::Response(cached)) = precompiled {
        if let Some(len) = serve_precompiled(snapshot, packet, query, cached, limit, out) {
            return Some(len);
        }
    }
    // Located once, for the fast path and, if it hands over, for the general lookup.
    let steering = snapshot.steering_for(
        client,
        query.edns.as_ref().and_then(|e| e.client_subnet.as_ref()),
    );
    let dnssec = query.edns.as_ref().is_some_and(|e| e.dnssec_ok);
    if let (Some(Cached::Steered(binding)), Some(steering)) = (precompiled, &steering) {
        if let Some(len) = serve_steered(snapshot, packet, query, steering, binding, limit, out) {
            return Some(len);
        }
    }
    let steering: &dyn Steering<'_> = match &steering {
        Some(s) => s,
        None => &NoSteering,
    };
    match resolve(&snapshot.zones, &query.qname, query.qtype, steering, dnssec) {
        Some(plan) => write_plan(snapshot, packet, query, &plan, limit, out).ok(),
        None => write_simple(snapshot, packet, query, rcode::REFUSED, limit, out).ok(),
    }
}

/// The largest response this client can take over this transport.
fn response_limit(snapshot: &Snapshot, query: &Query, client: &Client) -> usize {
    match (client.transport, &query.edns) {
        (Transport::Tcp | Transport::Tls | Transport::Https | Transport::Quic, _) => MAX_MESSAGE,
        (Transport::Udp, None) => CLASSIC_UDP_LIMIT,
        (Transport::Udp, Some(edns)) => (edns.udp_payload as usize)
            .clamp(CLASSIC_UDP_LIMIT, snapshot.options.edns_payload as usize),
    }
}

/// Fast path: a precompiled static answer, if there is one and it fits.
fn serve_precompiled(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    cached: &[u8],
    limit: usize,
    out: &mut [u8],
) -> Option<usize> {
    let opt_len = query.edns.as_ref().map_or(0, |e| opt_len(snapshot, e));
    let total = cached.len() + opt_len;
    if total > limit || total > out.len() {
        return None;
    }
    out[..cached.len()].copy_from_slice(cached);
    out[0..2].copy_from_slice(&query.id.to_be_bytes());
    let flags = u16::from_be_bytes([out[2], out[3]]) | (query.flags & (flag::RD | flag::CD));
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    // Echo the client's letter case: the cached copy holds the same name, lower-cased.
    let (start, end) = query.qname_range;
    out[start..end].copy_from_slice(&packet[start..end]);
    let mut len = cached.len();
    if let Some(edns) = &query.edns {
        let arcount = u16::from_be_bytes([out[10], out[11]]) + 1;
        out[10..12].copy_from_slice(&arcount.to_be_bytes());
        len += write_opt_raw(snapshot, edns, 0, 0, &mut out[len..])?;
    }
    Some(len)
}

/// Fast path for a steered name whose policy answers with addresses: the header, the client's
/// question, one record per address (owned by a pointer to the question) and OPT, written
/// directly — the same bytes [`write_plan`] would write for that plan. `None` (nothing counted)
/// hands the query to the general path: a CNAME or NODATA decision, or too big to fit.
fn serve_steered(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    steering: &ClientSteering<'_>,
    binding: u32,
    limit: usize,
    out: &mut [u8],
) -> Option<usize> {
    let dnssec = query.edns.as_ref().is_some_and(|e| e.dnssec_ok);
    let steered = steering.addresses(binding, query.qtype, dnssec)?;
    let (count, record_len) = match steered.addresses {
        AddressSet::V4(addrs) => (addrs.len(), 2 + 10 + 4),
        AddressSet::V6(addrs) => (addrs.len(), 2 + 10 + 16),
    };
    // With DO, the answer's signatures follow (each owned by a pointer to the question).
    let (sig_count, sig_len) = steered.sig.map_or((0, 0), |sig| {
        (
            usize::from(sig.count),
            sig.encoded.len() + 2 * usize::from(sig.count),
        )
    });
    let count = count + sig_count;
    let question = query.question_bytes(packet);
    let opt_len = query.edns.as_ref().map_or(0, |e| opt_len(snapshot, e));
    let body = HEADER_LEN + question.len() + (count - sig_count) * record_len + sig_len;
    if body + opt_len > limit || body + opt_len > out.len() {
        return None;
    }
    let count = u16::try_from(count).ok()?;
    let header = &mut out[..HEADER_LEN];
    header[0..2].copy_from_slice(&query.id.to_be_bytes());
    let flags = response_flags(query.flags, true, rcode::NOERROR);
    header[2..4].copy_from_slice(&flags.to_be_bytes());
    header[4..6].copy_from_slice(&1u16.to_be_bytes());
    header[6..8].copy_from_slice(&count.to_be_bytes());
    header[8..12].fill(0);
    let mut pos = HEADER_LEN + question.len();
    out[HEADER_LEN..pos].copy_from_slice(question);
    let ttl = steered.decision.ttl;
    match steered.addresses {
        AddressSet::V4(addrs) => {
            for addr in addrs {
                pos = put_address_record(out, pos, rtype::A, ttl, &addr.octets());
            }
        }
        AddressSet::V6(addrs) => {
            for addr in addrs {
                pos = put_address_record(out, pos, rtype::AAAA, ttl, &addr.octets());
            }
        }
    }
    if let Some(sig) = steered.sig {
        for record in sig.records() {
            let rdata = record.get(10..).unwrap_or_default();
            pos = put_address_record(out, pos, rtype::RRSIG, ttl, rdata);
        }
    }
    if let Some(edns) = &query.edns {
        out[10..12].copy_from_slice(&1u16.to_be_bytes());
        pos += write_opt_raw(
            snapshot,
            edns,
            rcode::NOERROR,
            steered.decision.scope,
            &mut out[pos..],
        )?;
    }
    steering.answered(binding, &steered);
    Some(pos)
}

/// One record (A, AAAA, RRSIG) owned by the question name (a pointer to offset 12); returns
/// the end.
fn put_address_record(out: &mut [u8], pos: usize, rt: u16, ttl: u32, rdata: &[u8]) -> usize {
    let record = &mut out[pos..pos + 12 + rdata.len()];
    record[0..2].copy_from_slice(&(0xC000u16 | HEADER_LEN as u16).to_be_bytes());
    record[2..4].copy_from_slice(&rt.to_be_bytes());
    record[4..6].copy_from_slice(&class::IN.to_be_bytes());
    record[6..10].copy_from_slice(&ttl.to_be_bytes());
    record[10..12].copy_from_slice(&(rdata.len() as u16).to_be_bytes());
    record[12..].copy_from_slice(rdata);
    pos + record.len()
}

/// Header flags of a response to `query`.
fn response_flags(query_flags: u16, authoritative: bool, rcode: u16) -> u16 {
    let mut flags = flag::QR | (query_flags & (flag::RD | flag::CD | 0x7800));
    if authoritative {
        flags |= flag::AA;
    }
    flags | (rcode & 0xF)
}

/// An error or empty answer: header, question, OPT.
pub(crate) fn write_simple(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    rcode: u16,
    limit: usize,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    let mut w = Writer::new(&mut out[..limit.min(MAX_MESSAGE)])?;
    w.set_u16(0, query.id);
    w.set_u16(2, response_flags(query.flags, false, rcode));
    w.put_question(query.question_bytes(packet))?;
    w.set_u16(4, 1);
    if let Some(edns) = &query.edns {
        put_opt(&mut w, snapshot, edns, rcode, 0)?;
        w.set_u16(10, 1);
    }
    Ok(w.len())
}

/// FORMERR / NOTIMP for a query we could not fully read.
fn write_error(
    snapshot: &Snapshot,
    packet: &[u8],
    rcode: u16,
    question: Option<(usize, usize)>,
    edns: Option<&Edns>,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    let room = CLASSIC_UDP_LIMIT.min(out.len());
    let mut w = Writer::new(&mut out[..room])?;
    let id = u16::from_be_bytes([packet[0], packet[1]]);
    let query_flags = u16::from_be_bytes([packet[2], packet[3]]);
    w.set_u16(0, id);
    w.set_u16(2, response_flags(query_flags, false, rcode));
    if let Some((start, end)) = question {
        if let Some(q) = packet.get(start..end + 4) {
            w.put_question(q)?;
            w.set_u16(4, 1);
        }
    }
    if let Some(edns) = edns {
        // Do not echo a client subnet we refused; keep the rest of OPT.
        let plain = Edns {
            client_subnet: None,
            ..*edns
        };
        put_opt(&mut w, snapshot, &plain, rcode, 0)?;
        w.set_u16(10, 1);
    }
    Ok(w.len())
}

/// Writes a resolved plan; on overflow falls back to a truncated (TC) response.
pub(crate) fn write_plan(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    plan: &Plan<'_>,
    limit: usize,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    let opt_space = query.edns.as_ref().map_or(0, |e| opt_len(snapshot, e));
    let room = limit.saturating_sub(opt_space);
    let mut w = Writer::new(out)?;
    w.set_u16(0, query.id);
    w.set_u16(
        2,
        response_flags(query.flags, plan.authoritative, plan.rcode),
    );
    w.put_question(query.question_bytes(packet))?;
    w.set_u16(4, 1);
    let mut counts = [0u16; 3];
    let fits = (|| -> Result<bool, Overflow> {
        for entry in &plan.answer {
            counts[0] += put_entry(&mut w, entry, plan.dnssec)?;
        }
        for entry in &plan.authority {
            counts[1] += put_entry(&mut w, entry, plan.dnssec)?;
        }
        if w.len() > room {
            return Ok(false);
        }
        for entry in &plan.additional {
            let before = w.len();
            let added = put_entry(&mut w, entry, plan.dnssec)?;
            if w.len() > room {
                // Additional data is optional, except glue a referral cannot work without.
                w.truncate(before);
                return Ok(!plan.referral);
            }
            counts[2] += added;
        }
        Ok(true)
    })()
    .unwrap_or(false);
    if !fits {
        return write_truncated(snapshot, packet, query, plan, limit, out);
    }
    w.set_u16(6, counts[0]);
    w.set_u16(8, counts[1]);
    w.set_u16(10, counts[2]);
    if let Some(edns) = &query.edns {
        put_opt(&mut w, snapshot, edns, plan.rcode, plan.scope)?;
        w.set_u16(10, counts[2] + 1);
    }
    Ok(w.len())
}

/// RFC 2181 §9: header + question (+ OPT) with TC set, never a partial RRset.
fn write_truncated(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    plan: &Plan<'_>,
    limit: usize,
    out: &mut [u8],
) -> Result<usize, Overflow> {
    let mut w = Writer::new(&mut out[..limit.min(MAX_MESSAGE)])?;
    w.set_u16(0, query.id);
    w.set_u16(
        2,
        response_flags(query.flags, plan.authoritative, plan.rcode) | flag::TC,
    );
    w.put_question(query.question_bytes(packet))?;
    w.set_u16(4, 1);
    if let Some(edns) = &query.edns {
        put_opt(&mut w, snapshot, edns, plan.rcode, plan.scope)?;
        w.set_u16(10, 1);
    }
    Ok(w.len())
}

/// Writes one plan entry, and with `dnssec` its signatures; returns how many records it wrote.
fn put_entry(w: &mut Writer<'_>, entry: &Entry<'_>, dnssec: bool) -> Result<u16, Overflow> {
    let put_owner = |w: &mut Writer<'_>| match entry.owner {
        Owner::Question => w.put_question_pointer(),
        Owner::Name(name) => w.put_name(name),
    };
    let data = put_data(w, entry, &put_owner)?;
    let Some(sig) = entry.sig.filter(|_| dnssec) else {
        return Ok(data);
    };
    for record in sig.records() {
        put_owner(w)?;
        w.put(&record[..4])?; // type, class
        w.put_u32(entry.ttl)?;
        w.put(&record[8..])?; // rdlength, rdata (the signer name is never compressed)
    }
    Ok(data + sig.count)
}

/// Writes an entry's own records.
fn put_data(
    w: &mut Writer<'_>,
    entry: &Entry<'_>,
    put_owner: &dyn Fn(&mut Writer<'_>) -> Result<(), Overflow>,
) -> Result<u16, Overflow> {
    match entry.data {
        Data::Static(set) => {
            for record in set.records() {
                put_owner(w)?;
                w.put(&record[..4])?; // type, class
                w.put_u32(entry.ttl)?;
                w.put(&record[8..])?; // rdlength, rdata
            }
            Ok(set.count)
        }
        Data::Synth(Synth::V4(addrs)) => put_addresses(
            w,
            put_owner,
            rtype::A,
            entry.ttl,
            addrs.iter().map(|a| a.octets()),
        ),
        Data::Synth(Synth::V6(addrs)) => put_addresses(
            w,
            put_owner,
            rtype::AAAA,
            entry.ttl,
            addrs.iter().map(|a| a.octets()),
        ),
        Data::Synth(Synth::Cname(target)) => {
            put_owner(w)?;
            put_rr_head(w, rtype::CNAME, entry.ttl, 0)?;
            let rdata_start = w.len();
            w.put_name(target)?;
            let rdlen = (w.len() - rdata_start) as u16;
            w.set_u16(rdata_start - 2, rdlen);
            Ok(1)
        }
    }
}

/// One A or AAAA record per address, each owned by the entry's owner.
fn put_addresses<const N: usize>(
    w: &mut Writer<'_>,
    put_owner: &dyn Fn(&mut Writer<'_>) -> Result<(), Overflow>,
    rt: u16,
    ttl: u32,
    addrs: impl ExactSizeIterator<Item = [u8; N]>,
) -> Result<u16, Overflow> {
    let count = addrs.len() as u16;
    for octets in addrs {
        put_owner(w)?;
        put_rr_head(w, rt, ttl, N as u16)?;
        w.put(&octets)?;
    }
    Ok(count)
}

fn put_rr_head(w: &mut Writer<'_>, rt: u16, ttl: u32, rdlen: u16) -> Result<(), Overflow> {
    w.put_u16(rt)?;
    w.put_u16(class::IN)?;
    w.put_u32(ttl)?;
    w.put_u16(rdlen)
}

/// Size of the OPT record we will send in answer to `edns`.
fn opt_len(snapshot: &Snapshot, edns: &Edns) -> usize {
    let mut len = 11;
    if let Some(ecs) = &edns.client_subnet {
        len += 8 + (ecs.source_prefix as usize).div_ceil(8);
    }
    if edns.nsid_requested {
        if let Some(nsid) = &snapshot.options.nsid {
            len += 4 + nsid.len();
        }
    }
    len
}

pub(crate) fn put_opt(
    w: &mut Writer<'_>,
    snapshot: &Snapshot,
    edns: &Edns,
    rcode: u16,
    scope: u8,
) -> Result<(), Overflow> {
    let out = w.reserve(opt_len(snapshot, edns))?;
    write_opt_raw(snapshot, edns, rcode, scope, out).ok_or(Overflow)?;
    Ok(())
}

/// Encodes our OPT record: payload size, extended rcode, DO echoed, ECS echoed with `scope`,
/// NSID when asked and configured. Returns `None` if `out` is too small.
fn write_opt_raw(
    snapshot: &Snapshot,
    edns: &Edns,
    rcode: u16,
    scope: u8,
    out: &mut [u8],
) -> Option<usize> {
    let len = opt_len(snapshot, edns);
    let out = out.get_mut(..len)?;
    out[0] = 0; // root owner
    out[1..3].copy_from_slice(&rtype::OPT.to_be_bytes());
    out[3..5].copy_from_slice(&snapshot.options.edns_payload.to_be_bytes());
    out[5] = (rcode >> 4) as u8; // extended rcode: upper 8 bits
    out[6] = 0; // version
    out[7] = if edns.dnssec_ok { 0x80 } else { 0 };
    out[8] = 0;
    out[9..11].copy_from_slice(&((len - 11) as u16).to_be_bytes());
    let mut pos = 11;
    if let Some(ecs) = &edns.client_subnet {
        let addr_len = (ecs.source_prefix as usize).div_ceil(8);
        out[pos..pos + 2].copy_from_slice(&option::CLIENT_SUBNET.to_be_bytes());
        out[pos + 2..pos + 4].copy_from_slice(&((4 + addr_len) as u16).to_be_bytes());
        out[pos + 4..pos + 6].copy_from_slice(&ecs.family().to_be_bytes());
        out[pos + 6] = ecs.source_prefix;
        out[pos + 7] = scope_in_family(ecs, scope);
        let octets = match ecs.addr {
            IpAddr::V4(a) => a.to_ipv6_compatible().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        let octets = match ecs.addr {
            IpAddr::V4(_) => &octets[12..],
            IpAddr::V6(_) => &octets[..],
        };
        out[pos + 8..pos + 8 + addr_len].copy_from_slice(&octets[..addr_len]);
        pos += 8 + addr_len;
    }
    if edns.nsid_requested {
        if let Some(nsid) = &snapshot.options.nsid {
            out[pos..pos + 2].copy_from_slice(&option::NSID.to_be_bytes());
            out[pos + 2..pos + 4].copy_from_slice(&(nsid.len() as u16).to_be_bytes());
            out[pos + 4..pos + 4 + nsid.len()].copy_from_slice(nsid);
        }
    }
    Some(len)
}

/// Steering located an IPv4-mapped IPv6 subnet as IPv4; the scope must be said in the
/// option's own family (RFC 7871 §6), or resolvers would cache the answer for `::/scope`.
///
/// A client that sent source prefix 0 asked us not to tailor the answer to its subnet (RFC 7871
/// §7.1.2): whatever decided it (the resolver's own address), the scope we return is 0. And a
/// scope never exceeds the option family's address length.
fn scope_in_family(ecs: &super::wire::ClientSubnet, scope: u8) -> u8 {
    if ecs.source_prefix == 0 {
        return 0;
    }
    match ecs.addr {
        IpAddr::V6(v6) if scope > 0 && scope <= 32 && v6.to_ipv4_mapped().is_some() => scope + 96,
        IpAddr::V4(_) => scope.min(32),
        IpAddr::V6(_) => scope.min(128),
    }
}

/// Precompiles the full response (id 0, no EDNS) for a static answer; used at snapshot build.
/// `scratch` is a reusable buffer (grown to [`MAX_MESSAGE`] once) that holds the response, so
/// precompiling a million answers allocates nothing per answer.
pub fn precompile<'s>(
    snapshot: &Snapshot,
    question: &[u8],
    plan: &Plan<'_>,
    scratch: &'s mut Vec<u8>,
) -> Option<&'s [u8]> {
    let mut packet = [0u8; HEADER_LEN + MAX_NAME_LEN + 4];
    let packet_len = HEADER_LEN + question.len();
    packet[5] = 1;
    packet
        .get_mut(HEADER_LEN..packet_len)?
        .copy_from_slice(question);
    let packet = &packet[..packet_len];
    let query = parse_query(packet).ok()?;
    if scratch.len() < MAX_MESSAGE {
        scratch.resize(MAX_MESSAGE, 0);
    }
    let len = write_plan(snapshot, packet, &query, plan, MAX_MESSAGE, scratch).ok()?;
    scratch.get(..len)
}
