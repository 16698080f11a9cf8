//! RRSIGs: the validity window, the canonical form of an RRset (RFC 4034 §6) and signing it.

use std::borrow::Cow;

use super::keys::{Key, KeyError};
use crate::dns::canonical::label_count;
use crate::dns::wire::{class, rtype};
use crate::zone::model::RRset;

/// Signatures' inception and expiration, aligned to the refresh period so that every node
/// that signs within the same period uses the same ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Start of the refresh period this window belongs to (Unix seconds).
    pub start: u64,
    pub inception: u32,
    pub expiration: u32,
    /// When the next window starts: sign again by then.
    pub refresh_at: u64,
}

/// Inception is back-dated by this much, for validators whose clocks run slow.
pub const INCEPTION_SKEW: u64 = 3600;

impl Window {
    /// The window for time `now`: the period `[start, start + refresh)` containing `now`;
    /// signatures incepted an hour before it and expiring `validity` after its start.
    pub fn at(now: u64, validity: u64, refresh: u64) -> Window {
        let refresh = refresh.max(1);
        let start = now - now % refresh;
        Window {
            start,
            // RRSIG times are 32-bit serial numbers (RFC 4034 §3.1.5).
            inception: start.saturating_sub(INCEPTION_SKEW) as u32,
            expiration: (start + validity) as u32,
            refresh_at: start + refresh,
        }
    }
}

/// RDATA in canonical form: the embedded names of the types RFC 4034 §6.2 lists (as updated
/// by RFC 6840 §5.1) lower-cased.
pub fn canonical_rdata(rt: u16, rdata: &[u8]) -> Cow<'_, [u8]> {
    // (offset of the first name, how many names follow one another from there)
    let names = match rt {
        rtype::NS | rtype::CNAME | 12 /* PTR */ | 39 /* DNAME */ | 3 | 4 | 7 | 8 | 9 => (0, 1),
        rtype::SOA | 14 /* MINFO */ | 17 /* RP */ => (0, 2),
        rtype::MX | 18 /* AFSDB */ | 21 /* RT */ | 36 /* KX */ => (2, 1),
        rtype::SRV => (6, 1),
        _ => return Cow::Borrowed(rdata),
    };
    let mut out = rdata.to_vec();
    let mut pos = names.0;
    for _ in 0..names.1 {
        loop {
            let Some(&len) = out.get(pos) else {
                return Cow::Owned(out);
            };
            if len == 0 || len > 63 {
                pos += 1;
                break;
            }
            let end = (pos + 1 + usize::from(len)).min(out.len());
            out[pos + 1..end].make_ascii_lowercase();
            pos = end;
        }
    }
    Cow::Owned(out)
}

/// The RRSIG labels field of an owner name: its labels, not counting a leading `*`.
pub fn rrsig_labels(owner: &[u8]) -> u8 {
    let labels = label_count(owner);
    let wildcard = owner.starts_with(b"\x01*");
    (labels - usize::from(wildcard)) as u8
}

/// Signs one RRset (`rdatas` in any order, duplicates allowed) with `key`; returns the
/// RRSIG RDATA. `owner` and `signer` are uncompressed wire names.
pub fn sign_rrset(
    key: &Key,
    signer: &[u8],
    owner: &[u8],
    rt: u16,
    ttl: u32,
    rdatas: &[&[u8]],
    window: &Window,
) -> Result<Vec<u8>, KeyError> {
    let mut rrsig = Vec::with_capacity(18 + signer.len() + 64);
    rrsig.extend_from_slice(&rt.to_be_bytes());
    rrsig.push(key.algorithm.number());
    rrsig.push(rrsig_labels(owner));
    rrsig.extend_from_slice(&ttl.to_be_bytes());
    rrsig.extend_from_slice(&window.expiration.to_be_bytes());
    rrsig.extend_from_slice(&window.inception.to_be_bytes());
    rrsig.extend_from_slice(&key.tag.to_be_bytes());
    rrsig.extend_from_slice(&signer.to_ascii_lowercase());
    let mut canonical: Vec<Cow<'_, [u8]>> = rdatas.iter().map(|r| canonical_rdata(rt, r)).collect();
    canonical.sort();
    canonical.dedup();
    let owner = owner.to_ascii_lowercase();
    let mut data = rrsig.clone();
    for rdata in &canonical {
        data.extend_from_slice(&owner);
        data.extend_from_slice(&rt.to_be_bytes());
        data.extend_from_slice(&class::IN.to_be_bytes());
        data.extend_from_slice(&ttl.to_be_bytes());
        data.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        data.extend_from_slice(rdata);
    }
    rrsig.extend_from_slice(&key.sign(&data)?);
    Ok(rrsig)
}

/// An RRset of `rt` records built from RDATAs (duplicates dropped), like the zone builder's.
pub fn rrset(rt: u16, ttl: u32, rdatas: &[&[u8]]) -> RRset {
    let mut encoded = Vec::new();
    let mut seen: Vec<&[u8]> = Vec::new();
    for &rdata in rdatas {
        if seen.contains(&rdata) {
            continue;
        }
        seen.push(rdata);
        encoded.extend_from_slice(&rt.to_be_bytes());
        encoded.extend_from_slice(&class::IN.to_be_bytes());
        encoded.extend_from_slice(&ttl.to_be_bytes());
        encoded.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        encoded.extend_from_slice(rdata);
    }
    RRset {
        rtype: rt,
        ttl,
        count: seen.len() as u16,
        encoded: encoded.into_boxed_slice(),
        targets: Box::new([]),
        rrsig: None,
    }
}

/// Signs `set` (owned by `owner`) with every key in `keys`; the RRSIG RRset (`None` when no
/// key signs it).
pub fn sign_set(
    keys: &[&Key],
    signer: &[u8],
    owner: &[u8],
    set: &RRset,
    window: &Window,
) -> Result<Option<RRset>, KeyError> {
    if keys.is_empty() {
        return Ok(None);
    }
    let rdatas: Vec<&[u8]> = set.rdatas().collect();
    let mut sigs = Vec::with_capacity(keys.len());
    for key in keys {
        sigs.push(sign_rrset(
            key, signer, owner, set.rtype, set.ttl, &rdatas, window,
        )?);
    }
    let sigs: Vec<&[u8]> = sigs.iter().map(Vec::as_slice).collect();
    Ok(Some(rrset(rtype::RRSIG, set.ttl, &sigs)))
}

/// The NSEC type bitmap (RFC 4034 §4.1.2) of a sorted, deduplicated list of types.
pub fn type_bitmap(types: &[u16]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut window: Option<(u8, [u8; 32], usize)> = None;
    let flush = |out: &mut Vec<u8>, w: &(u8, [u8; 32], usize)| {
        out.push(w.0);
        out.push(w.2 as u8);
        out.extend_from_slice(&w.1[..w.2]);
    };
    for &t in types {
        let (block, bit) = ((t >> 8) as u8, (t & 0xFF) as usize);
        if window.as_ref().is_some_and(|w| w.0 != block) {
            if let Some(w) = window.take() {
                flush(&mut out, &w);
            }
        }
        let w = window.get_or_insert((block, [0u8; 32], 0));
        w.1[bit / 8] |= 0x80 >> (bit % 8);
        w.2 = w.2.max(bit / 8 + 1);
    }
    if let Some(w) = window {
        flush(&mut out, &w);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_matches_rfc4034_example() {
        // RFC 4034 §4.3: A MX RRSIG NSEC TYPE1234.
        let bitmap = type_bitmap(&[1, 15, 46, 47, 1234]);
        let mut expected: Vec<u8> =
            vec![0x00, 0x06, 0x40, 0x01, 0x00, 0x00, 0x00, 0x03, 0x04, 0x1b];
        expected.extend([0u8; 26]);
        expected.push(0x20);
        assert_eq!(bitmap, expected);
    }

    #[test]
    fn windows_align_across_nodes_and_leave_validity() {
        let a = Window::at(1_000_000_123, 14 * 86400, 86400);
        let b = Window::at(1_000_050_000, 14 * 86400, 86400);
        assert_eq!(a, b, "same period, same window");
        assert!(u64::from(a.expiration) >= 1_000_050_000 + 13 * 86400);
        assert!(u64::from(a.inception) < 1_000_000_123);
    }

    #[test]
    fn canonical_rdata_lower_cases_names_only() {
        let mx = b"\x00\x0a\x04MAIL\x07Example\x00";
        assert_eq!(
            &canonical_rdata(rtype::MX, mx)[..],
            b"\x00\x0a\x04mail\x07example\x00"
        );
        let txt = b"\x03ABC";
        assert_eq!(&canonical_rdata(rtype::TXT, txt)[..], txt);
        assert_eq!(rrsig_labels(b"\x01*\x04edge\x07example\x03net\x00"), 3);
    }
}
