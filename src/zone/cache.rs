//! The compiled zones as a section of the last-known-good cache (issue 32, item 3; the
//! container, its checksum and its binary check are `crate::lkg`). Owns the layout of one
//! section holding every [`Zone`] of a set, so that a restart rebuilds the model from bytes
//! instead of parsing, validating and grouping the zone files again.
//!
//! Only unsigned zones are written: a signed zone's denial chain and signatures carry
//! validity windows and keys that the loader checks and renews, so a cache of them would
//! need its own rules ([`encode`] answers `None` and the caller builds as before).
//!
//! Layout (integers little-endian):
//!
//! ```text
//! zone count             u32
//! per zone:  origin      u16 length, the name in wire format as written in the file (case kept)
//!            serial, negative TTL                      u32, u32
//!            node count                                u64
//!            per node:   key (u8 length, lower-cased wire name), flags u8
//!                        (1 cut, 2 below a cut, 4 wildcard child, 8 steered),
//!                        the steering binding u32 when flag 8, rrset count u16,
//!                        per rrset: type u16, TTL u32, record count u16,
//!                                   u32 length + the encoded records,
//!                                   target count u16, each u8 length + wire name
//! ```
//!
//! Decoding is pure and total over bytes: every length is checked against what is left, the
//! records of each set must tile its bytes exactly as the model's iterators assume, and the
//! apex must hold an SOA. Anything else is refused with the offset ([`Malformed`]).

use hickory_proto::rr::Name;
use hickory_proto::serialize::binary::{BinDecodable, BinEncodable};
use rustc_hash::FxHashMap;

use super::model::{name_to_wire, Node, RRset, SteeredBinding, Zone};
use crate::dns::wire::rtype;
use crate::le_reader::LeReader;

/// A section that does not parse, at this byte offset into it.
pub use crate::le_reader::Malformed;

const CUT: u8 = 1;
const BELOW_CUT: u8 = 2;
const WILDCARD_CHILD: u8 = 4;
const STEERED: u8 = 8;

/// The section's bytes for `zones`, or `None` when a zone cannot be cached (it is signed, or
/// a name or set is too long for the layout).
pub fn encode(zones: &[Zone]) -> Option<Vec<u8>> {
    if zones.iter().any(|z| z.denial.is_some()) {
        return None;
    }
    let names: usize = zones.iter().map(|z| z.nodes.len()).sum();
    let mut out = Vec::with_capacity(names * 48);
    out.extend_from_slice(&u32::try_from(zones.len()).ok()?.to_le_bytes());
    for zone in zones {
        encode_zone(&mut out, zone)?;
    }
    Some(out)
}

fn encode_zone(out: &mut Vec<u8>, zone: &Zone) -> Option<()> {
    let origin = zone.origin.to_bytes().ok()?;
    out.extend_from_slice(&u16::try_from(origin.len()).ok()?.to_le_bytes());
    out.extend_from_slice(&origin);
    out.extend_from_slice(&zone.serial.to_le_bytes());
    out.extend_from_slice(&zone.negative_ttl.to_le_bytes());
    out.extend_from_slice(&(zone.nodes.len() as u64).to_le_bytes());
    for (key, node) in &zone.nodes {
        encode_node(out, key, node)?;
    }
    Some(())
}

fn encode_node(out: &mut Vec<u8>, key: &[u8], node: &Node) -> Option<()> {
    out.push(u8::try_from(key.len()).ok()?);
    out.extend_from_slice(key);
    let flags = (if node.is_cut { CUT } else { 0 })
        | (if node.below_cut { BELOW_CUT } else { 0 })
        | (if node.has_wildcard_child {
            WILDCARD_CHILD
        } else {
            0
        })
        | (if node.steer.is_some() { STEERED } else { 0 });
    out.push(flags);
    if let Some(binding) = node.steer {
        out.extend_from_slice(&u32::try_from(binding.index()).ok()?.to_le_bytes());
    }
    out.extend_from_slice(&u16::try_from(node.rrsets.len()).ok()?.to_le_bytes());
    for set in &node.rrsets {
        if set.rrsig.is_some() {
            return None;
        }
        out.extend_from_slice(&set.rtype.to_le_bytes());
        out.extend_from_slice(&set.ttl.to_le_bytes());
        out.extend_from_slice(&set.count.to_le_bytes());
        out.extend_from_slice(&u32::try_from(set.encoded.len()).ok()?.to_le_bytes());
        out.extend_from_slice(&set.encoded);
        out.extend_from_slice(&u16::try_from(set.targets.len()).ok()?.to_le_bytes());
        for target in set.targets.iter() {
            out.push(u8::try_from(target.len()).ok()?);
            out.extend_from_slice(target);
        }
    }
    Some(())
}

/// The zones [`encode`] wrote.
pub fn decode(bytes: &[u8]) -> Result<Vec<Zone>, Malformed> {
    let mut reader = LeReader::new(bytes);
    let count = reader.u32()? as usize;
    // Each zone takes at least 18 bytes: a count beyond that is a lie, not an allocation.
    if count > bytes.len() / 18 {
        return Err(Malformed { at: 0 });
    }
    let mut zones = Vec::with_capacity(count);
    for _ in 0..count {
        zones.push(decode_zone(&mut reader)?);
    }
    reader.finish()?;
    Ok(zones)
}

fn decode_zone(reader: &mut LeReader<'_>) -> Result<Zone, Malformed> {
    let at = reader.at();
    let origin_len = usize::from(reader.u16()?);
    let origin = Name::from_bytes(reader.take(origin_len)?).map_err(|_| Malformed { at })?;
    let serial = reader.u32()?;
    let negative_ttl = reader.u32()?;
    let nodes_at = reader.at();
    let count = usize::try_from(reader.u64()?).map_err(|_| Malformed { at: nodes_at })?;
    // A node takes at least 4 bytes (key length, one label byte, flags, set count u16).
    if count > reader.left() / 4 {
        return Err(Malformed { at: nodes_at });
    }
    let mut nodes: FxHashMap<Box<[u8]>, Node> = FxHashMap::default();
    nodes.reserve(count);
    for _ in 0..count {
        let at = reader.at();
        let (key, node) = decode_node(reader)?;
        if nodes.insert(key, node).is_some() {
            return Err(Malformed { at });
        }
    }
    let apex = name_to_wire(&origin);
    let has_soa = nodes
        .get(&apex)
        .is_some_and(|n| n.rrset(rtype::SOA).is_some());
    if !has_soa {
        return Err(Malformed { at });
    }
    Ok(Zone {
        apex_labels: origin.num_labels() as usize,
        origin,
        apex,
        nodes: crate::zone::nodes::Nodes::from(nodes),
        negative_ttl,
        serial,
        denial: None,
    })
}

fn decode_node(reader: &mut LeReader<'_>) -> Result<(Box<[u8]>, Node), Malformed> {
    let key_len = usize::from(reader.u8()?);
    let key: Box<[u8]> = reader.take(key_len)?.into();
    let flags = reader.u8()?;
    if flags & !(CUT | BELOW_CUT | WILDCARD_CHILD | STEERED) != 0 {
        return Err(reader.malformed());
    }
    let steer = if flags & STEERED != 0 {
        Some(SteeredBinding::new(reader.u32()?))
    } else {
        None
    };
    let sets = usize::from(reader.u16()?);
    let mut rrsets = Vec::with_capacity(sets);
    for _ in 0..sets {
        rrsets.push(decode_rrset(reader)?);
    }
    let node = Node {
        rrsets,
        is_cut: flags & CUT != 0,
        below_cut: flags & BELOW_CUT != 0,
        has_wildcard_child: flags & WILDCARD_CHILD != 0,
        steer,
    };
    Ok((key, node))
}

fn decode_rrset(reader: &mut LeReader<'_>) -> Result<RRset, Malformed> {
    let rtype = reader.u16()?;
    let ttl = reader.u32()?;
    let count = reader.u16()?;
    let len = reader.u32()? as usize;
    let at = reader.at();
    let encoded = reader.take(len)?;
    if records_in(encoded) != Some(usize::from(count)) {
        return Err(Malformed { at });
    }
    let targets = usize::from(reader.u16()?);
    let mut target_names = Vec::with_capacity(targets.min(reader.left()));
    for _ in 0..targets {
        let len = usize::from(reader.u8()?);
        target_names.push(Box::<[u8]>::from(reader.take(len)?));
    }
    Ok(RRset {
        rtype,
        ttl,
        count,
        encoded: encoded.into(),
        targets: target_names.into_boxed_slice(),
        rrsig: None,
    })
}

/// How many records (type, class, TTL, RDLENGTH, RDATA each) tile `encoded` exactly; `None`
/// when the last one is cut short.
fn records_in(mut encoded: &[u8]) -> Option<usize> {
    let mut count = 0;
    while !encoded.is_empty() {
        let rdlen = usize::from(u16::from_be_bytes([*encoded.get(8)?, *encoded.get(9)?]));
        encoded = encoded.get(10 + rdlen..)?;
        count += 1;
    }
    Some(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::parse::parse_zone_text;

    const ZONE: &str = "\
$TTL 300
@ IN SOA ns1 hostmaster 7 3600 600 86400 60
@ IN NS ns1
ns1 IN A 192.0.2.1
www IN CNAME web.example.test.
web IN A 192.0.2.2
web IN A 192.0.2.3
a.b.c IN TXT \"deep\"
* IN MX 10 mail
sub IN NS ns.sub
ns.sub IN A 192.0.2.9
";

    fn zone() -> Zone {
        let origin = Name::from_ascii("Example.TEST.").expect("a name");
        let path = std::path::Path::new("example.test.zone");
        let Ok(parsed) = parse_zone_text(ZONE, path, &origin) else {
            panic!("the test zone parses");
        };
        let records = parsed
            .records
            .iter()
            .map(|r| crate::zone::model::RecordInput {
                name: &r.name,
                rtype: u16::from(r.rtype),
                ttl: r.ttl,
                rdata: &r.rdata,
            });
        let mut zone = Zone::build(&parsed.origin, records).expect("builds");
        if let Some(node) = zone.nodes.get_mut(&b"\x03web\x07example\x04test\x00"[..]) {
            node.steer = Some(SteeredBinding::new(3));
        }
        zone
    }

    /// Every field of two zones, nodes compared by key.
    fn assert_same(a: &Zone, b: &Zone) {
        assert_eq!(a.origin.to_string(), b.origin.to_string());
        assert_eq!(
            (a.apex.clone(), a.apex_labels),
            (b.apex.clone(), b.apex_labels)
        );
        assert_eq!((a.serial, a.negative_ttl), (b.serial, b.negative_ttl));
        assert_eq!(a.nodes.len(), b.nodes.len());
        for (key, node) in &a.nodes {
            let other = b.nodes.get(key).expect("the same names");
            assert_eq!(format!("{node:?}"), format!("{other:?}"), "node {key:?}");
        }
    }

    #[test]
    fn zones_round_trip_with_case_cuts_wildcards_and_bindings() {
        let original = zone();
        let bytes = encode(std::slice::from_ref(&original)).expect("unsigned zones encode");
        let back = decode(&bytes).expect("decodes");
        assert_eq!(back.len(), 1);
        assert_same(&original, &back[0]);
        assert_eq!(back[0].origin.to_string(), "Example.TEST.");
        let sub = &back[0].nodes[&b"\x02ns\x03sub\x07example\x04test\x00"[..]];
        assert!(sub.below_cut);
        assert!(back[0].nodes[&back[0].apex].has_wildcard_child);
        let again = decode(&encode(&back).expect("encodes again")).expect("decodes again");
        assert_same(&original, &again[0]);
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_refused_or_decodes_without_panicking() {
        let bytes = encode(&[zone()]).expect("encodes");
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "cut at {len} decoded");
        }
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x5a;
            // The checksum of the container catches damage; here only: no panic, and a
            // decoded result is a zone with an SOA.
            if let Ok(zones) = decode(&damaged) {
                assert!(zones.iter().all(|z| z.soa().is_some()));
            }
        }
    }
}
