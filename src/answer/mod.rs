//! From query bytes to response bytes: the whole per-packet path, transport-agnostic.
//!
//! 1. [`respond`] validates the header, question and EDNS in place
//!    ([`crate::dns::wire::parse_query_into`]).
//! 2. One probe of the snapshot's fast-path table ([`FastPathEntry`]) decides the rest:
//!    - a static answer is the precompiled response: one copy, a few patched bytes
//!      (`serve_precompiled`);
//!    - a steered name, or a customer name under a steered wildcard, whose policy answers with
//!      addresses is written directly: locate the client (lazily, only when the policy asks),
//!      decide, copy the pre-encoded records and, with DO, their pre-computed signatures and
//!      the wildcard's denial proof (`serve_steered`);
//!    - anything else (negative answers, CNAME chains, referrals, oversize) goes through the
//!      zone engine ([`crate::zone::lookup::resolve_in`]) and is written with compression by
//!      `crate::snapshot::compose::write_plan`.
//! 3. Over UDP, the response rate limiter ([`crate::rrl`]) may drop the response or have it
//!    *slipped*: cut to header and question with TC set; so may a tenant's budget while the
//!    server is saturated ([`crate::rrl::budget`]).
//!
//! Nothing here allocates, locks or does I/O, except the CHAOS trace ([`chaos`], operators'
//! debugging aid).
//!
//! The top of the query path: called by the transports ([`crate::server`]) and by snapshot
//! probes ([`probe`]); reads the snapshot, writes through [`crate::snapshot::compose`], asks the
//! rate limiter and counts into [`crate::metrics`]. Nothing below it imports it.

pub mod chaos;
pub mod probe;
#[cfg(test)]
mod tests;

use crate::dns::cookie::Verdict as CookieVerdict;
use crate::dns::wire::{
    class, flag, parse_query_into, rcode, rtype, Edns, Query, Reject, Requester, Transport,
    CLASSIC_UDP_LIMIT, HEADER_LEN, MAX_MESSAGE,
};
use crate::metrics::{querylog, serving};

use crate::dns::sent::Sent;
use crate::rrl::{Class, Subject, Verdict};
use crate::shield::live::{DemandSample, Proof};
use crate::snapshot::compose::SignedSet;
use crate::snapshot::compose::{
    opt_len, put_address_record, response_flags, write_error, write_opt_raw, write_plan,
    write_simple,
};
use crate::snapshot::steer::ClientSteering;
use crate::snapshot::{FastPathEntry, Snapshot};
use crate::tenant::ServedTenant;
use crate::zone::lookup::{resolve_in, Addresses, NoSteering, Steering};
use crate::zone::model::{SteeredBinding, Zone};

/// Answers `packet` into `out`; returns the response length, or `None` to stay silent.
/// `out` must hold at least [`MAX_MESSAGE`] bytes for TCP, or the UDP limit for UDP.
/// Every call is counted (see [`crate::metrics`]: relaxed atomic adds, no lock, no allocation).
pub fn respond(
    snapshot: &Snapshot,
    packet: &[u8],
    client: &Requester,
    out: &mut [u8],
) -> Option<usize> {
    respond_summarised(snapshot, packet, client, out).map(|sent| sent.len)
}

/// [`respond`], with the summary of what was sent (that its counting used).
#[inline]
pub(crate) fn respond_summarised(
    snapshot: &Snapshot,
    packet: &[u8],
    client: &Requester,
    out: &mut [u8],
) -> Option<Sent> {
    let mut query = Query::blank();
    match parse_query_into(packet, &mut query) {
        Ok(()) => {}
        Err(Reject::Drop) => {
            count_query(snapshot, client, None, None);
            return None;
        }
        Err(Reject::Error {
            rcode,
            question,
            mut edns,
        }) => {
            let cookie = edns
                .as_mut()
                .and_then(|e| answer_cookie(snapshot, client, e));
            let sent = write_error(
                snapshot.options(),
                packet,
                rcode,
                question,
                edns.as_ref(),
                out,
            )
            .ok();
            let edns = edns.as_ref().filter(|_| cookie.is_some());
            let rated = Rated {
                subject: None,
                cookie,
                edns,
            };
            let sent = sent.and_then(|sent| limit_rate(snapshot, client, &rated, out, sent));
            count_query(snapshot, client, None, sent.as_ref());
            return sent;
        }
    }
    // The COOKIE to answer with replaces the client's in the query's EDNS (RFC 7873 §5.2).
    let cookie = query
        .edns
        .as_mut()
        .and_then(|e| answer_cookie(snapshot, client, e));
    // One lookup gives both the fast-path entry (if any) and the zone: for the general
    // lookup, the rate limiter and the counters.
    let dnssec = query.edns.as_ref().is_some_and(|e| e.dnssec_ok);
    let precompiled = snapshot.fast_path(&query.qname, query.qtype, dnssec);
    let zone = match precompiled {
        Some((zone, _)) => Some(zone),
        None => zone_index(snapshot, &query),
    };
    let entry = precompiled.map(|(_, entry)| entry);
    let mut demand = Demand {
        proof: source_proof(client, cookie),
        sample: None,
    };
    let found = Found { zone, entry };
    let sent = answer(snapshot, packet, &query, client, found, &mut demand, out).and_then(|sent| {
        let subject = Subject {
            qname: query.qname.as_wire(),
            qtype: query.qtype,
            zone,
        };
        let rated = Rated {
            subject: Some(&subject),
            cookie,
            edns: query.edns.as_ref(),
        };
        limit_rate(snapshot, client, &rated, out, sent)
    });
    // The shield counts answers that go out whole: not one the rate limiter dropped or
    // slipped, not one truncated (its client asks again over TCP, and counts then).
    if let (Some(sent), Some(sample), Some(steering)) = (sent, demand.sample, snapshot.steering()) {
        if !sent.truncated {
            steering.demand.record(&sample);
        }
    }
    count(snapshot, client, &query, zone, sent.as_ref());
    sent
}

/// Verifies the query's COOKIE option and puts the one to answer with in its place (the
/// client's cookie and a server cookie of ours, RFC 7873 §5.2.3–5.2.5); returns what the
/// client's server cookie proved. `None` without a COOKIE option, or with cookies off (the
/// option is then ignored like any unknown one). Every verdict gets a normal answer (§5.2.3
/// choice 3, and what §5.2.4 says of a wrong server cookie): an authoritative server's
/// answers are public, and refusing clients that have not learnt our cookie yet would only
/// cost them a round trip. What a valid cookie buys is trust in the source address: demand
/// counted, and no rate limit ([`limit_rate`]). No allocation: one SipHash, one clock read.
fn answer_cookie(
    snapshot: &Snapshot,
    client: &Requester,
    edns: &mut Edns,
) -> Option<CookieVerdict> {
    let cookie = edns.cookie.as_ref()?;
    let Some(setup) = &snapshot.options().cookies else {
        edns.cookie = None;
        return None;
    };
    let (verdict, answer) = setup.secrets.check(cookie, client.addr, unix_seconds());
    edns.cookie = Some(answer);
    serving().record_cookie(verdict);
    Some(verdict)
}

/// Seconds since the epoch, modulo 2^32 (RFC 9018's timestamp; a vDSO clock read).
fn unix_seconds() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// How the query's source address is proven: by the transport (a TCP, TLS or QUIC
/// handshake answered there), or over UDP by a valid server cookie; `None` for plain UDP.
fn source_proof(client: &Requester, cookie: Option<CookieVerdict>) -> Option<Proof> {
    match (client.transport, cookie) {
        (Transport::Udp, Some(CookieVerdict::Valid)) => Some(Proof::Cookie),
        (Transport::Udp, _) => None,
        (Transport::Tcp | Transport::Tls | Transport::Https | Transport::Quic, _) => {
            Some(Proof::Transport)
        }
    }
}

/// The shield's side of one query: how its source is proven (in), and the demand of the
/// anycast answer it got (out), for the caller to count once the answer is sent.
struct Demand {
    proof: Option<Proof>,
    sample: Option<DemandSample>,
}

/// What the rate limiter looks at beside the response: its name (`None`: an error for a
/// query we could not read), and the query's cookie verdict and EDNS (for a BADCOOKIE slip).
struct Rated<'a> {
    subject: Option<&'a Subject<'a>>,
    cookie: Option<CookieVerdict>,
    edns: Option<&'a Edns>,
}

/// The rate limiter's say on the response `sent` in `out`: what to send (the same, or a
/// slip), or `None` to drop it. A query with a valid server cookie is never
/// limited: its source is proven, so it is nobody's reflected victim. A slip for a query that
/// sent a cookie but not a valid server cookie is a BADCOOKIE answer carrying ours (RFC 7873
/// §5.2.3 choice 2): the client retries over UDP with it, and is then not limited.
fn limit_rate(
    snapshot: &Snapshot,
    client: &Requester,
    rated: &Rated<'_>,
    out: &mut [u8],
    sent: Sent,
) -> Option<Sent> {
    let Some(rrl) = snapshot.rrl() else {
        return Some(sent);
    };
    if rated.cookie == Some(CookieVerdict::Valid) {
        return Some(sent);
    }
    let class = Class::of(&sent);
    let Some(verdict) = rrl.check(client, class, rated.subject) else {
        return Some(sent);
    };
    serving().record_rrl(class, verdict);
    match (verdict, rated.edns.filter(|e| e.cookie.is_some())) {
        (Verdict::Send, _) => Some(sent),
        (Verdict::Drop, _) => None,
        (Verdict::Slip, Some(edns)) => Some(badcookie_in_place(snapshot, edns, out, sent)),
        (Verdict::Slip, None) => Some(slip_in_place(out, sent)),
    }
}

/// A rate limiter's slip for a client that sent a cookie: header and question, rcode
/// BADCOOKIE, and our OPT with the cookie to retry with (no TC: the retry stays on UDP).
fn badcookie_in_place(snapshot: &Snapshot, edns: &Edns, out: &mut [u8], sent: Sent) -> Sent {
    let end = slip_in_place(out, sent).len;
    let flags = u16::from_be_bytes([out[2], out[3]]) & !(flag::TC | 0x000F);
    let flags = flags | (rcode::BADCOOKIE & 0xF);
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    let opt = write_opt_raw(
        snapshot.options(),
        edns,
        rcode::BADCOOKIE,
        0,
        &mut out[end..],
    );
    match opt {
        Some(n) => {
            out[10..12].copy_from_slice(&1u16.to_be_bytes());
            Sent::bad_cookie(end + n, false)
        }
        // No room for OPT (never with a query's buffer): the plain slip.
        None => {
            out[2..4].copy_from_slice(&(flags | flag::TC).to_be_bytes());
            Sent::bad_cookie(end, true)
        }
    }
}

/// Cuts a response to its header and question with TC set and no records: a rate limiter's
/// slip. The client retries over TCP; the reply is never bigger than the query was.
fn slip_in_place(out: &mut [u8], sent: Sent) -> Sent {
    let len = sent.len;
    if len < HEADER_LEN || out.len() < HEADER_LEN {
        return sent.slipped(len.min(out.len()));
    }
    let end = question_end(&out[..len]);
    let flags = u16::from_be_bytes([out[2], out[3]]) | flag::TC;
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    if end.is_none() {
        out[4..6].fill(0);
    }
    out[6..HEADER_LEN].fill(0);
    sent.slipped(end.unwrap_or(HEADER_LEN))
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

/// Counts one answered (or silently dropped) query, and logs it if it is sampled.
fn count(
    snapshot: &Snapshot,
    client: &Requester,
    query: &Query,
    zone: Option<usize>,
    sent: Option<&Sent>,
) {
    count_query(snapshot, client, zone, sent);
    if sent.is_some() && querylog::sampled(snapshot.options().query_log_sample) {
        querylog::log(client, query, sent.map_or(0, |sent| sent.rcode));
    }
}

/// Counts one query, by transport, answered (with its rcode and whether it was truncated) or
/// not, and, when answered, by zone (`None`: no zone of ours, or no question). Always
/// inlined: out of line it cost a call on every answer (callgrind).
#[inline(always)]
fn count_query(snapshot: &Snapshot, client: &Requester, zone: Option<usize>, sent: Option<&Sent>) {
    let answered = sent.map(|sent| (sent.rcode, sent.truncated));
    serving().record(client.transport, answered);
    if let Some((rcode, _)) = answered {
        snapshot.counters().record_response(zone, rcode);
    }
}

/// Index (in the snapshot's zone list) of the zone the query name is in.
fn zone_index(snapshot: &Snapshot, query: &Query) -> Option<usize> {
    snapshot
        .zones()
        .find_index(&query.qname)
        .map(|(index, _)| index)
}

/// What the one probe of the query name found: its zone (index in the snapshot's zones;
/// `None`: not ours) and its fast-path entry.
#[derive(Clone, Copy)]
struct Found<'a> {
    zone: Option<usize>,
    entry: Option<FastPathEntry<'a>>,
}

/// The answer proper, uncounted (but for the steering decisions it took); a steered anycast
/// answer's demand is left in `demand`, for the caller to count once the answer is sent.
fn answer(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    client: &Requester,
    found: Found<'_>,
    demand: &mut Demand,
    out: &mut [u8],
) -> Option<Sent> {
    let limit = response_limit(snapshot, query, client);
    if let Some(edns) = &query.edns {
        if edns.version > 0 {
            return write_simple(
                snapshot.options(),
                packet,
                query,
                rcode::BADVERS,
                limit,
                out,
            )
            .ok();
        }
    }
    match (query.qclass, query.qtype) {
        (_, rtype::OPT) => {
            return write_simple(
                snapshot.options(),
                packet,
                query,
                rcode::FORMERR,
                limit,
                out,
            )
            .ok()
        }
        (_, rtype::IXFR) if client.transport == Transport::Udp && snapshot.transfer().is_some() => {
            return ixfr_over_udp(snapshot, packet, query, limit, out);
        }
        (_, rtype::AXFR | rtype::IXFR) => {
            return write_simple(
                snapshot.options(),
                packet,
                query,
                rcode::REFUSED,
                limit,
                out,
            )
            .ok()
        }
        (_, rtype::MAILA | rtype::MAILB) => {
            return write_simple(snapshot.options(), packet, query, rcode::NOTIMP, limit, out).ok()
        }
        (class::CH, _) => return chaos::respond(snapshot, packet, query, client, limit, out),
        (class::IN, _) => {}
        _ => {
            return write_simple(
                snapshot.options(),
                packet,
                query,
                rcode::REFUSED,
                limit,
                out,
            )
            .ok()
        }
    }
    // A secondary zone past its SOA expire time: its data is no longer authoritative.
    if found.zone.is_some_and(|z| snapshot.zone_expired(z)) {
        return write_simple(
            snapshot.options(),
            packet,
            query,
            rcode::SERVFAIL,
            limit,
            out,
        )
        .ok();
    }
    if let Some(FastPathEntry::Response(cached)) = found.entry {
        if let Some(sent) = serve_precompiled(snapshot, packet, query, cached, limit, out) {
            return Some(sent);
        }
    }
    if snapshot.is_loading() {
        return answer_while_loading(snapshot, packet, query, client, found, demand, limit, out);
    }
    // A name that may be a tenant's (no static answer of its own): one probe of the tenant
    // table. A suspended tenant's names are REFUSED.
    let tenants = match found.entry {
        None | Some(FastPathEntry::SteeredWildcard(_)) => snapshot.tenants().load_if_any(),
        Some(_) => None,
    };
    let tenant = tenants
        .as_deref()
        .and_then(|table| table.get(query.qname.as_wire()));
    if tenant.is_some_and(ServedTenant::is_suspended) {
        return write_simple(
            snapshot.options(),
            packet,
            query,
            rcode::REFUSED,
            limit,
            out,
        )
        .ok();
    }
    // While the server is saturated, a tenant's names get at most its budget of UDP
    // responses (`crate::rrl::budget`): a flood against one tenant is shed before others'.
    let budget = match (tenant, snapshot.budgets()) {
        (Some(tenant), Some(budgets)) => budgets.check(tenant.name(), client),
        _ => None,
    };
    if budget == Some(Verdict::Drop) {
        return None;
    }
    // One steering context for the fast path and, if it hands over, the general lookup.
    let mut steering = snapshot.steering_for(
        client,
        query.edns.as_ref().and_then(|e| e.client_subnet.as_ref()),
        demand.proof,
    );
    if let (Some(steering), Some(tenant)) = (steering.as_mut(), tenant) {
        steering.set_tenant(tenant);
    }
    let sent = answer_steerable(
        snapshot,
        packet,
        query,
        found,
        steering.as_mut(),
        limit,
        out,
    );
    demand.sample = steering.as_ref().and_then(ClientSteering::demand);
    match budget {
        Some(Verdict::Slip) => sent.map(|sent| slip_in_place(out, sent)),
        _ => sent,
    }
}

/// Phase 1 of a start from the zone cache (the zones not in yet): a steered name's fast path
/// answers (its policy needs no zone), everything else is held — dropped, so that the
/// resolver asks again, and counted — rather than answered NXDOMAIN, REFUSED or SERVFAIL from
/// a view without zones.
#[cold]
#[allow(clippy::too_many_arguments)]
fn answer_while_loading(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    client: &Requester,
    found: Found<'_>,
    demand: &mut Demand,
    limit: usize,
    out: &mut [u8],
) -> Option<Sent> {
    if let Some(FastPathEntry::Steered(_)) = found.entry {
        let mut steering = snapshot.steering_for(
            client,
            query.edns.as_ref().and_then(|e| e.client_subnet.as_ref()),
            demand.proof,
        );
        let entry = steered_entry(snapshot, query, found);
        if let (Some(entry), Some(steering)) = (entry, steering.as_mut()) {
            if let Some(sent) = serve_steered(snapshot, packet, query, steering, &entry, limit, out)
            {
                demand.sample = steering.demand();
                return Some(sent);
            }
        }
    }
    crate::metrics::serving::record_held_while_loading();
    None
}

/// A steered name the fast path can answer: its binding and, for a DO answer through a
/// signed zone's wildcard, that zone, whose proof that the name itself does not exist goes
/// into the answer.
struct SteeredEntry<'s> {
    binding: SteeredBinding,
    proving_zone: Option<&'s Zone>,
}

/// The fast path's steered entry for this query, if it has one (`None`: the general path
/// answers).
fn steered_entry<'s>(
    snapshot: &'s Snapshot,
    query: &Query,
    found: Found<'_>,
) -> Option<SteeredEntry<'s>> {
    let (binding, wildcard) = match found.entry? {
        FastPathEntry::Response(_) => return None,
        FastPathEntry::Steered(binding) => (binding, false),
        FastPathEntry::SteeredWildcard(binding) => (binding, true),
    };
    let dnssec = query.edns.as_ref().is_some_and(|e| e.dnssec_ok);
    let proving_zone = found
        .zone
        .filter(|_| wildcard && dnssec)
        .and_then(|zone| snapshot.zones().zones().get(zone))
        .filter(|zone| zone.denial.is_some());
    Some(SteeredEntry {
        binding,
        proving_zone,
    })
}

/// The answers that may be steered (`steering`, when names are): the steered fast path, else
/// the general lookup in the zone found.
#[inline]
fn answer_steerable<'s>(
    snapshot: &'s Snapshot,
    packet: &[u8],
    query: &Query,
    found: Found<'_>,
    mut steering: Option<&mut ClientSteering<'s>>,
    limit: usize,
    out: &mut [u8],
) -> Option<Sent> {
    let dnssec = query.edns.as_ref().is_some_and(|e| e.dnssec_ok);
    let entry = steered_entry(snapshot, query, found);
    if let (Some(entry), Some(steering)) = (entry, steering.as_mut()) {
        if let Some(sent) = serve_steered(snapshot, packet, query, steering, &entry, limit, out) {
            return Some(sent);
        }
    }
    let steering: &mut dyn Steering<'s> = match steering {
        Some(s) => s,
        None => &mut NoSteering,
    };
    let plan = found.zone.and_then(|zone| {
        resolve_in(
            snapshot.zones(),
            zone,
            &query.qname,
            query.qtype,
            steering,
            dnssec,
        )
    });
    match plan {
        Some(plan) => write_plan(snapshot.options(), packet, query, &plan, limit, out).ok(),
        None => write_simple(
            snapshot.options(),
            packet,
            query,
            rcode::REFUSED,
            limit,
            out,
        )
        .ok(),
    }
}

/// The largest response this client can take over this transport.
fn response_limit(snapshot: &Snapshot, query: &Query, client: &Requester) -> usize {
    match (client.transport, &query.edns) {
        (Transport::Tcp | Transport::Tls | Transport::Https | Transport::Quic, _) => MAX_MESSAGE,
        (Transport::Udp, None) => CLASSIC_UDP_LIMIT,
        (Transport::Udp, Some(edns)) => (edns.udp_payload as usize)
            .clamp(CLASSIC_UDP_LIMIT, snapshot.options().edns_payload as usize),
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
) -> Option<Sent> {
    let opt_len = query
        .edns
        .as_ref()
        .map_or(0, |e| opt_len(snapshot.options(), e));
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
        len += write_opt_raw(snapshot.options(), edns, 0, 0, &mut out[len..])?;
    }
    Some(Sent::of_precompiled(cached, len))
}

/// Fast path for a steered name whose policy answers with addresses: the header, the client's
/// question, one record per address (owned by a pointer to the question), with DO their
/// signatures and a wildcard answer's proof, and OPT, written directly — the same bytes
/// [`write_plan`] would write for that plan. `None` hands the query
/// to the general path (a CNAME or NODATA decision, or too big to fit), which answers with the
/// same decision, counted once (see [`ClientSteering::addresses`]).
fn serve_steered(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    steering: &mut ClientSteering<'_>,
    entry: &SteeredEntry<'_>,
    limit: usize,
    out: &mut [u8],
) -> Option<Sent> {
    let dnssec = query.edns.as_ref().is_some_and(|e| e.dnssec_ok);
    let binding = entry.binding;
    let steered = steering.addresses(binding, query.qtype, dnssec)?;
    let count = steered.addresses.count();
    let record_len = match steered.addresses {
        Addresses::V4(..) => 2 + 10 + 4,
        Addresses::V6(..) => 2 + 10 + 16,
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
    let opt_len = query
        .edns
        .as_ref()
        .map_or(0, |e| opt_len(snapshot.options(), e));
    // The proof is looked up only once the decision is one this path writes: the NSEC
    // covering the name (a binary search) or the NSEC3 covering its hash (one SHA-1). The
    // name is one label below the wildcard's parent, so it is its own next closer name.
    let proof = match entry.proving_zone {
        Some(zone) => {
            let name = query.qname.as_wire();
            let (owner, set) = zone.wildcard_proof(name, name)?;
            Some(SignedSet::owned_after_question(&query.qname, owner, set))
        }
        None => None,
    };
    let body = HEADER_LEN
        + question.len()
        + (count - sig_count) * record_len
        + sig_len
        + proof.as_ref().map_or(0, SignedSet::len);
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
    let authority = proof.as_ref().map_or(0, SignedSet::count);
    header[8..10].copy_from_slice(&authority.to_be_bytes());
    header[10..12].fill(0);
    let mut pos = HEADER_LEN + question.len();
    out[HEADER_LEN..pos].copy_from_slice(question);
    let ttl = steered.ttl;
    match steered.addresses {
        Addresses::V4(addrs, left_out) => {
            for addr in left_out.keep(addrs) {
                pos = put_address_record(out, pos, rtype::A, ttl, &addr.octets());
            }
        }
        Addresses::V6(addrs, left_out) => {
            for addr in left_out.keep(addrs) {
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
    if let Some(proof) = &proof {
        pos = proof.put(out, pos)?;
    }
    if let Some(edns) = &query.edns {
        out[10..12].copy_from_slice(&1u16.to_be_bytes());
        pos += write_opt_raw(
            snapshot.options(),
            edns,
            rcode::NOERROR,
            steered.scope,
            &mut out[pos..],
        )?;
    }
    Some(Sent {
        answers: true,
        ..Sent::empty(pos, rcode::NOERROR)
    })
}

/// An IXFR over UDP while transfers are on (RFC 1995 section 2): the zone's current SOA
/// alone, which tells the client to transfer over TCP (where the ACL and TSIG are checked);
/// the SOA is public. REFUSED for a name that is no zone apex.
fn ixfr_over_udp(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    limit: usize,
    out: &mut [u8],
) -> Option<Sent> {
    let apex_soa = match snapshot.zones().find(&query.qname) {
        Some((zone, 0)) => zone
            .soa()
            .and_then(|s| s.records().next())
            .map(|r| (zone, r)),
        _ => None,
    };
    let Some((zone, soa)) = apex_soa else {
        return write_simple(
            snapshot.options(),
            packet,
            query,
            rcode::REFUSED,
            limit,
            out,
        )
        .ok();
    };
    let question = query.question_bytes(packet);
    let opt_len = if query.edns.is_some() { 11 } else { 0 };
    let len = HEADER_LEN + question.len() + zone.apex.len() + soa.len() + opt_len;
    if len > limit.min(out.len()) {
        return write_simple(
            snapshot.options(),
            packet,
            query,
            rcode::REFUSED,
            limit,
            out,
        )
        .ok();
    }
    let out = &mut out[..len];
    let flags = flag::QR | flag::AA | (query.flags & (0x7800 | flag::RD));
    out[..2].copy_from_slice(&query.id.to_be_bytes());
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    out[4..12].copy_from_slice(&[0, 1, 0, 1, 0, 0, 0, u8::from(opt_len > 0)]);
    let mut pos = HEADER_LEN;
    for part in [question, &zone.apex[..], soa] {
        out[pos..pos + part.len()].copy_from_slice(part);
        pos += part.len();
    }
    if opt_len > 0 {
        out[pos] = 0;
        out[pos + 1..pos + 3].copy_from_slice(&rtype::OPT.to_be_bytes());
        out[pos + 3..pos + 5].copy_from_slice(&snapshot.options().edns_payload.to_be_bytes());
        out[pos + 5..pos + 11].fill(0);
        pos += 11;
    }
    Some(Sent {
        answers: true,
        ..Sent::empty(pos, rcode::NOERROR)
    })
}
