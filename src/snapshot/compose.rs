//! Writing responses as bytes: a lookup plan (with compression, falling back to TC when it
//! does not fit), an error or empty answer, and our OPT record (payload size, DO, ECS scope,
//! NSID). Used by the precompiled table when a snapshot is built and by the answer path
//! ([`crate::answer`]) per query; reads only the snapshot's protocol options.

use std::net::IpAddr;

use super::ServeOptions;
use crate::dns::sent::Sent;
use crate::dns::wire::{
    class, flag, option, parse_query, rtype, ClientSubnet, Edns, Query, WireName,
    CLASSIC_UDP_LIMIT, HEADER_LEN, MAX_MESSAGE, MAX_NAME_LEN,
};
use crate::dns::writer::{Overflow, Writer};
use crate::zone::lookup::{Addresses, Data, Entry, Owner, Plan, SteeredData};
use crate::zone::model::RRset;

/// Header flags of a response to `query`.
pub(crate) fn response_flags(query_flags: u16, authoritative: bool, rcode: u16) -> u16 {
    let mut flags = flag::QR | (query_flags & (flag::RD | flag::CD | 0x7800));
    if authoritative {
        flags |= flag::AA;
    }
    flags | (rcode & 0xF)
}

/// One record (A, AAAA, RRSIG) owned by the question name (a pointer to offset 12); returns
/// the end.
pub(crate) fn put_address_record(
    out: &mut [u8],
    pos: usize,
    rt: u16,
    ttl: u32,
    rdata: &[u8],
) -> usize {
    let record = &mut out[pos..pos + 12 + rdata.len()];
    record[0..2].copy_from_slice(&(0xC000u16 | HEADER_LEN as u16).to_be_bytes());
    record[2..4].copy_from_slice(&rt.to_be_bytes());
    record[4..6].copy_from_slice(&class::IN.to_be_bytes());
    record[6..10].copy_from_slice(&ttl.to_be_bytes());
    record[10..12].copy_from_slice(&(rdata.len() as u16).to_be_bytes());
    record[12..].copy_from_slice(rdata);
    pos + record.len()
}

/// A signed RRset (its records, then its RRSIGs) written straight after records owned by the
/// question — the fast path's proof in a wildcard answer — with the bytes [`Writer`] would
/// write: the owner's labels up to the longest suffix it shares with the question name, then
/// a pointer there; every later record points back at that first owner. Valid only where no
/// name but the question's precedes it (RRSIG signer names are never compression targets).
pub(crate) struct SignedSet<'a> {
    owner: &'a [u8],
    /// How many bytes of `owner` are written out: all of it (root included) when it shares no
    /// suffix with the question name.
    literal: usize,
    /// Where the rest of the owner sits in the question, as a compression pointer.
    pointer: Option<u16>,
    set: &'a RRset,
}

impl<'a> SignedSet<'a> {
    /// `set` owned by `owner` (lower-cased wire), after the question `qname`.
    pub(crate) fn owned_after_question(qname: &WireName, owner: &'a [u8], set: &'a RRset) -> Self {
        let mut literal = 0;
        while let Some(&len) = owner.get(literal).filter(|&&len| len != 0) {
            let suffix = &owner[literal..];
            if (0..qname.label_count()).any(|skip| qname.suffix(skip) == suffix) {
                let at = HEADER_LEN + qname.wire_len() - suffix.len();
                return SignedSet {
                    owner,
                    literal,
                    pointer: Some(0xC000 | at as u16),
                    set,
                };
            }
            literal += 1 + usize::from(len);
        }
        SignedSet {
            owner,
            literal: owner.len(),
            pointer: None,
            set,
        }
    }

    fn sigs(&self) -> Option<&'a RRset> {
        self.set.rrsig.as_deref()
    }

    /// Its records and signatures.
    pub(crate) fn count(&self) -> u16 {
        self.set.count + self.sigs().map_or(0, |s| s.count)
    }

    /// Its length on the wire.
    pub(crate) fn len(&self) -> usize {
        let first_owner = self.literal + self.pointer.map_or(0, |_| 2);
        let later_owners = 2 * usize::from(self.count().saturating_sub(1));
        let records = self.set.encoded.len() + self.sigs().map_or(0, |s| s.encoded.len());
        first_owner + later_owners + records
    }

    /// Writes it at `pos` in `out` (which must hold [`Self::len`] bytes there); returns the
    /// end, or `None` when `pos` is beyond a compression pointer's reach.
    pub(crate) fn put(&self, out: &mut [u8], mut pos: usize) -> Option<usize> {
        let back = match self.pointer {
            Some(pointer) if self.literal == 0 => pointer,
            _ => 0xC000 | u16::try_from(pos).ok().filter(|&p| p <= 0x3FFF)?,
        };
        let sigs = self.sigs().into_iter().flat_map(RRset::records);
        for (i, record) in self.set.records().chain(sigs).enumerate() {
            if i > 0 {
                out[pos..pos + 2].copy_from_slice(&back.to_be_bytes());
                pos += 2;
            } else {
                out[pos..pos + self.literal].copy_from_slice(&self.owner[..self.literal]);
                pos += self.literal;
                if let Some(pointer) = self.pointer {
                    out[pos..pos + 2].copy_from_slice(&pointer.to_be_bytes());
                    pos += 2;
                }
            }
            // Type and class, the set's TTL (as the general writer does), length and RDATA.
            out[pos..pos + 4].copy_from_slice(&record[..4]);
            out[pos + 4..pos + 8].copy_from_slice(&self.set.ttl.to_be_bytes());
            out[pos + 8..pos + record.len()].copy_from_slice(&record[8..]);
            pos += record.len();
        }
        Some(pos)
    }
}

/// An error or empty answer: header, question, OPT.
pub(crate) fn write_simple(
    options: &ServeOptions,
    packet: &[u8],
    query: &Query,
    rcode: u16,
    limit: usize,
    out: &mut [u8],
) -> Result<Sent, Overflow> {
    let mut w = Writer::new(&mut out[..limit.min(MAX_MESSAGE)])?;
    w.set_u16(0, query.id);
    w.set_u16(2, response_flags(query.flags, false, rcode));
    w.put_question(query.question_bytes(packet))?;
    w.set_u16(4, 1);
    if let Some(edns) = &query.edns {
        put_opt(&mut w, options, edns, rcode, 0)?;
        w.set_u16(10, 1);
    }
    Ok(Sent::empty(w.len(), rcode))
}

/// FORMERR / NOTIMP for a query we could not fully read.
pub(crate) fn write_error(
    options: &ServeOptions,
    packet: &[u8],
    rcode: u16,
    question: Option<(usize, usize)>,
    edns: Option<&Edns>,
    out: &mut [u8],
) -> Result<Sent, Overflow> {
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
        put_opt(&mut w, options, &plain, rcode, 0)?;
        w.set_u16(10, 1);
    }
    Ok(Sent::empty(w.len(), rcode))
}

/// Writes a resolved plan; on overflow falls back to a truncated (TC) response.
pub(crate) fn write_plan(
    options: &ServeOptions,
    packet: &[u8],
    query: &Query,
    plan: &Plan<'_>,
    limit: usize,
    out: &mut [u8],
) -> Result<Sent, Overflow> {
    let opt_space = query.edns.as_ref().map_or(0, |e| opt_len(options, e));
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
        return write_truncated(options, packet, query, plan, limit, out);
    }
    w.set_u16(6, counts[0]);
    w.set_u16(8, counts[1]);
    w.set_u16(10, counts[2]);
    if let Some(edns) = &query.edns {
        put_opt(&mut w, options, edns, plan.rcode, plan.scope)?;
        w.set_u16(10, counts[2] + 1);
    }
    Ok(Sent {
        len: w.len(),
        rcode: plan.rcode,
        truncated: false,
        answers: counts[0] > 0,
        referral: !plan.authoritative && counts[1] > 0,
    })
}

/// RFC 2181 §9: header + question (+ OPT) with TC set, never a partial RRset.
fn write_truncated(
    options: &ServeOptions,
    packet: &[u8],
    query: &Query,
    plan: &Plan<'_>,
    limit: usize,
    out: &mut [u8],
) -> Result<Sent, Overflow> {
    let mut w = Writer::new(&mut out[..limit.min(MAX_MESSAGE)])?;
    w.set_u16(0, query.id);
    w.set_u16(
        2,
        response_flags(query.flags, plan.authoritative, plan.rcode) | flag::TC,
    );
    w.put_question(query.question_bytes(packet))?;
    w.set_u16(4, 1);
    if let Some(edns) = &query.edns {
        put_opt(&mut w, options, edns, plan.rcode, plan.scope)?;
        w.set_u16(10, 1);
    }
    Ok(Sent {
        truncated: true,
        ..Sent::empty(w.len(), plan.rcode)
    })
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
        Data::Steered(SteeredData::Addresses(Addresses::V4(addrs, left_out))) => put_addresses(
            w,
            put_owner,
            rtype::A,
            entry.ttl,
            left_out.kept(addrs.len()) as u16,
            left_out.keep(addrs).map(|a| a.octets()),
        ),
        Data::Steered(SteeredData::Addresses(Addresses::V6(addrs, left_out))) => put_addresses(
            w,
            put_owner,
            rtype::AAAA,
            entry.ttl,
            left_out.kept(addrs.len()) as u16,
            left_out.keep(addrs).map(|a| a.octets()),
        ),
        Data::Steered(SteeredData::Cname(target)) => {
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

/// One A or AAAA record per address (`count` of them), each owned by the entry's owner.
fn put_addresses<const N: usize>(
    w: &mut Writer<'_>,
    put_owner: &dyn Fn(&mut Writer<'_>) -> Result<(), Overflow>,
    rt: u16,
    ttl: u32,
    count: u16,
    addrs: impl Iterator<Item = [u8; N]>,
) -> Result<u16, Overflow> {
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
pub(crate) fn opt_len(options: &ServeOptions, edns: &Edns) -> usize {
    let mut len = 11;
    if let Some(ecs) = &edns.client_subnet {
        len += 8 + (ecs.source_prefix as usize).div_ceil(8);
    }
    if edns.nsid_requested {
        if let Some(nsid) = &options.nsid {
            len += 4 + nsid.len();
        }
    }
    if let Some(cookie) = &edns.cookie {
        len += 4 + cookie.len();
    }
    len
}

pub(crate) fn put_opt(
    w: &mut Writer<'_>,
    options: &ServeOptions,
    edns: &Edns,
    rcode: u16,
    scope: u8,
) -> Result<(), Overflow> {
    let out = w.reserve(opt_len(options, edns))?;
    write_opt_raw(options, edns, rcode, scope, out).ok_or(Overflow)?;
    Ok(())
}

/// Encodes our OPT record: payload size, extended rcode, DO echoed, ECS echoed with `scope`,
/// NSID when asked and configured, and the COOKIE `edns` holds. Returns `None` if `out` is too small.
pub(crate) fn write_opt_raw(
    options: &ServeOptions,
    edns: &Edns,
    rcode: u16,
    scope: u8,
    out: &mut [u8],
) -> Option<usize> {
    let len = opt_len(options, edns);
    let out = out.get_mut(..len)?;
    out[0] = 0; // root owner
    out[1..3].copy_from_slice(&rtype::OPT.to_be_bytes());
    out[3..5].copy_from_slice(&options.edns_payload.to_be_bytes());
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
        if let Some(nsid) = &options.nsid {
            out[pos..pos + 2].copy_from_slice(&option::NSID.to_be_bytes());
            out[pos + 2..pos + 4].copy_from_slice(&(nsid.len() as u16).to_be_bytes());
            out[pos + 4..pos + 4 + nsid.len()].copy_from_slice(nsid);
            pos += 4 + nsid.len();
        }
    }
    // The answer path put the cookie to send back here (never the client's server cookie
    // unchecked: see `crate::answer`).
    if let Some(cookie) = &edns.cookie {
        out[pos..pos + 2].copy_from_slice(&option::COOKIE.to_be_bytes());
        out[pos + 2..pos + 4].copy_from_slice(&(cookie.len() as u16).to_be_bytes());
        cookie.write(&mut out[pos + 4..pos + 4 + cookie.len()]);
    }
    Some(len)
}

/// Steering located an IPv4-mapped IPv6 subnet as IPv4; the scope must be said in the
/// option's own family (RFC 7871 §6), or resolvers would cache the answer for `::/scope`.
///
/// A client that sent source prefix 0 asked us not to tailor the answer to its subnet (RFC 7871
/// §7.1.2): whatever decided it (the resolver's own address), the scope we return is 0. And a
/// scope never exceeds the option family's address length.
fn scope_in_family(ecs: &ClientSubnet, scope: u8) -> u8 {
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
pub(crate) fn precompile<'s>(
    options: &ServeOptions,
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
    let len = write_plan(options, packet, &query, plan, MAX_MESSAGE, scratch)
        .ok()?
        .len;
    scratch.get(..len)
}
