//! Signing what an outgoing transfer carries beyond the signed zone: the static projection of
//! its steered names (issue 33 item 3, `crate::snapshot::projection`).
//!
//! Owns, for one signed zone: an RRSIG over each projected RRset, and at each steered name the
//! zone's denial record (NSEC, or NSEC3 at the hashed owner) re-typed to the types the
//! transfer carries there, signed. The served denial record of a steered name lists every
//! type its policy can answer with (the live answer changes); a transferred zone is a static
//! zone, so its bitmap must list what is in it, or a validating secondary and
//! `ldns-verify-zone` reject it. The chain's order and its next pointers are the zone's: only
//! the bitmaps change, so the transferred chain stays whole.
//!
//! Pure and off the serving path (the snapshot builder calls it after signing the zone); the
//! serving path keeps the zone's own records and pre-signed answers.

use std::collections::BTreeMap;

use super::keys::{Key, KeyError};
use super::sign::{rrset, sign_set, type_bitmap, Window};
use crate::dns::wire::rtype;
use crate::zone::journal::Record;
use crate::zone::model::{Chain, Node, RRset, Zone};

/// The records a transfer of `zone` (signed, with its denial chain) carries beside its own:
/// the `projected` records (sorted by owner), their RRSIGs and the re-typed denial records of
/// its steered names with theirs, sorted. `keys` are its active zone-signing keys.
pub fn sign_projection(
    zone: &Zone,
    projected: &[Record],
    keys: &[&Key],
    window: &Window,
) -> Result<Vec<Record>, KeyError> {
    let mut out: Vec<Record> = projected.to_vec();
    let sets = projected_sets(projected);
    for ((owner, rt), (ttl, rdatas)) in &sets {
        let rdatas: Vec<&[u8]> = rdatas.iter().map(|r| &r[..]).collect();
        let set = rrset(*rt, *ttl, &rdatas);
        push_signatures(&mut out, owner, &set, keys, &zone.apex, window)?;
    }
    for (owner, node) in &zone.nodes {
        if node.steer.is_none() || node.is_cut || node.below_cut {
            continue;
        }
        let carried: Vec<u16> = sets
            .keys()
            .filter(|(o, _)| o[..] == owner[..])
            .map(|(_, t)| *t)
            .collect();
        if let Some((denial_owner, set)) = retyped_denial(zone, owner, node, &carried) {
            out.extend(set.records().map(|r| (denial_owner.clone(), Box::from(r))));
            push_signatures(&mut out, &denial_owner, &set, keys, &zone.apex, window)?;
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The projected records grouped into RRsets: (owner, type) to (TTL, RDATAs).
type Sets = BTreeMap<(Box<[u8]>, u16), (u32, Vec<Box<[u8]>>)>;

fn projected_sets(projected: &[Record]) -> Sets {
    let mut sets = Sets::new();
    for (owner, record) in projected {
        let (Some(rt), Some(ttl), Some(rdata)) =
            (record.get(..2), record.get(4..8), record.get(10..))
        else {
            continue;
        };
        let rt = u16::from_be_bytes([rt[0], rt[1]]);
        let ttl = u32::from_be_bytes([ttl[0], ttl[1], ttl[2], ttl[3]]);
        let entry = sets.entry((owner.clone(), rt)).or_insert((ttl, Vec::new()));
        entry.1.push(Box::from(rdata));
    }
    sets
}

/// Appends the RRSIG records over `set` (at `owner`) by `keys`.
fn push_signatures(
    out: &mut Vec<Record>,
    owner: &[u8],
    set: &RRset,
    keys: &[&Key],
    apex: &[u8],
    window: &Window,
) -> Result<(), KeyError> {
    if let Some(sigs) = sign_set(keys, apex, owner, set, window)? {
        out.extend(sigs.records().map(|r| (Box::from(owner), Box::from(r))));
    }
    Ok(())
}

/// The types a transfer carries at a steered `node`: its own sets (less A and AAAA when the
/// projection carries records there, which replace them) and the `carried` projected types.
/// Without the denial types themselves; sorted.
fn transferred_types(node: &Node, carried: &[u16]) -> Vec<u16> {
    let mut types: Vec<u16> = node
        .rrsets
        .iter()
        .map(|s| s.rtype)
        .filter(|&t| !matches!(t, rtype::NSEC | rtype::NSEC3 | rtype::RRSIG))
        .filter(|&t| carried.is_empty() || !matches!(t, rtype::A | rtype::AAAA))
        .chain(carried.iter().copied())
        .collect();
    types.sort_unstable();
    types.dedup();
    types
}

/// The denial record at steered `owner` with the bitmap of what the transfer carries there,
/// with its owner (the hashed one for NSEC3); `None` when the zone's own already says so (or
/// the zone has none there).
fn retyped_denial(
    zone: &Zone,
    owner: &[u8],
    node: &Node,
    carried: &[u16],
) -> Option<(Box<[u8]>, RRset)> {
    let mut types = transferred_types(node, carried);
    if !types.is_empty() {
        types.push(rtype::RRSIG);
    }
    let (denial_owner, served, head_len) = match &zone.denial.as_ref()?.chain {
        Chain::Nsec(_) => {
            types.extend([rtype::RRSIG, rtype::NSEC]);
            let set = node.rrset(rtype::NSEC)?;
            let rdata = set.rdatas().next()?;
            (Box::from(owner), set, wire_name_len(rdata)?)
        }
        Chain::Nsec3(chain) => {
            let (hashed, set) = chain.records.get(*chain.by_name.get(owner)? as usize)?;
            let rdata = set.rdatas().next()?;
            (hashed.clone(), set, nsec3_head_len(rdata)?)
        }
    };
    types.sort_unstable();
    types.dedup();
    let old = served.rdatas().next()?;
    let mut rdata = old.get(..head_len)?.to_vec();
    rdata.extend_from_slice(&type_bitmap(&types));
    if rdata[..] == old[..] {
        return None;
    }
    Some((denial_owner, rrset(served.rtype, served.ttl, &[&rdata])))
}

/// The length of the uncompressed wire name at the start of `bytes`.
fn wire_name_len(bytes: &[u8]) -> Option<usize> {
    let mut pos = 0;
    loop {
        let len = usize::from(*bytes.get(pos)?);
        pos += 1 + len;
        if len == 0 {
            return Some(pos);
        }
        if len > 63 {
            return None;
        }
    }
}

/// The length of NSEC3 RDATA before its type bitmap (RFC 5155 §3.2): algorithm, flags,
/// iterations, salt, next hashed owner.
fn nsec3_head_len(rdata: &[u8]) -> Option<usize> {
    let salt = usize::from(*rdata.get(4)?);
    let hash = usize::from(*rdata.get(5 + salt)?);
    let len = 6 + salt + hash;
    (rdata.len() >= len).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::wire::class;

    /// One record's bytes after its owner (type, class, TTL, RDLENGTH, RDATA).
    fn record(rt: u16, ttl: u32, rdata: &[u8]) -> Box<[u8]> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&rt.to_be_bytes());
        bytes.extend_from_slice(&class::IN.to_be_bytes());
        bytes.extend_from_slice(&ttl.to_be_bytes());
        bytes.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        bytes.extend_from_slice(rdata);
        bytes.into_boxed_slice()
    }

    #[test]
    fn the_heads_of_denial_records_are_found() {
        assert_eq!(wire_name_len(b"\x03www\x07example\x00\x00\x06"), Some(13));
        assert_eq!(wire_name_len(b"\x03ww"), None);
        // SHA-1, no flags, 0 iterations, no salt, a 20-byte hash, then a bitmap.
        let mut nsec3 = vec![1, 0, 0, 0, 0, 20];
        nsec3.extend([7u8; 20]);
        nsec3.extend([0, 1, 0x40]);
        assert_eq!(nsec3_head_len(&nsec3), Some(26));
        assert_eq!(nsec3_head_len(&nsec3[..10]), None);
        let grouped = projected_sets(&[
            (
                Box::from(&b"\x01w\x00"[..]),
                record(rtype::A, 60, &[192, 0, 2, 1]),
            ),
            (
                Box::from(&b"\x01w\x00"[..]),
                record(rtype::A, 60, &[192, 0, 2, 2]),
            ),
        ]);
        assert_eq!(grouped.len(), 1);
        assert_eq!(grouped.values().next().map(|(_, r)| r.len()), Some(2));
    }
}
