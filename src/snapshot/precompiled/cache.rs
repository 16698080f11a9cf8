//! The precompiled answers as sections of the last-known-good cache (issue 32, item 3; the
//! container is `crate::lkg`). Owns their layout: for each of the two tables (`plain` and
//! `signed`) the arena copied as is, the slots as fixed-size records, the steered wildcards and
//! the signed zones. The index is not stored: it is rebuilt from the slots, hashing each key
//! from the arena as the table does, so the cache does not depend on the hash table's layout.
//!
//! Section layouts (integers little-endian):
//!
//! ```text
//! precompiled.<table>.bytes      the arena
//! precompiled.<table>.slots      12 bytes per slot, in arena order: at u32, response_len u32,
//!                                key_len u16, zone u16
//! precompiled.<table>.wildcards  u32 count, then per wildcard, by parent name: u16 length, the
//!                                parent name (wire format), zone u16, steering binding u32
//! precompiled.<table>.signed     u32 count, then one byte per zone: 1 signed, 0 not
//! ```
//!
//! Everything read back is checked: the slots tile the arena exactly (each entry starts where
//! the one before ends, the last ends with the arena), every zone index is one of the zones,
//! no key comes twice and the counts match. So a section cut short or corrupted anywhere is
//! refused as [`LkgRefused::Malformed`], at the offset in that section, never served.

use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxHashMap;

use super::{key_hash, slot_hash, split_key, Precompiled, Slot, Table, STEERED};
use crate::lkg::LkgRefused;
use crate::zone::model::SteeredBinding;

/// The two tables' names in section names.
const TABLES: [&str; 2] = ["plain", "signed"];

/// Bytes of one slot record.
const SLOT_LEN: usize = 12;

/// The parts of a table, in section-name order.
const PARTS: [&str; 4] = ["bytes", "slots", "wildcards", "signed"];

/// [`Table::wildcards`].
type Wildcards = FxHashMap<Box<[u8]>, (u16, SteeredBinding)>;

fn section_name(table: &str, part: &str) -> String {
    format!("precompiled.{table}.{part}")
}

impl Precompiled {
    /// The sections of the last-known-good cache that hold these answers (see the module
    /// documentation for their layout). The slots are written in arena order, so the same
    /// answers give the same bytes.
    pub fn cache_sections(&self) -> Vec<(String, Vec<u8>)> {
        let mut sections = Vec::with_capacity(TABLES.len() * PARTS.len());
        for (name, table) in TABLES.iter().zip([&*self.table, &*self.signed]) {
            let mut slots: Vec<&Slot> = table.index.iter().collect();
            slots.sort_unstable_by_key(|slot| slot.at);
            let mut records = Vec::with_capacity(slots.len() * SLOT_LEN);
            for slot in slots {
                records.extend_from_slice(&slot.at.to_le_bytes());
                records.extend_from_slice(&slot.response_len.to_le_bytes());
                records.extend_from_slice(&slot.key_len.to_le_bytes());
                records.extend_from_slice(&slot.zone.to_le_bytes());
            }
            let mut wildcards: Vec<_> = table.wildcards.iter().collect();
            wildcards.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let mut wildcard_bytes = count(wildcards.len());
            for (parent, &(zone, binding)) in wildcards {
                // Parent names are wire names: at most 255 bytes.
                let len = u16::try_from(parent.len()).unwrap_or(u16::MAX);
                wildcard_bytes.extend_from_slice(&len.to_le_bytes());
                wildcard_bytes.extend_from_slice(parent);
                wildcard_bytes.extend_from_slice(&zone.to_le_bytes());
                let binding = u32::from_be_bytes(binding.to_be_bytes());
                wildcard_bytes.extend_from_slice(&binding.to_le_bytes());
            }
            let mut signed = count(table.signed_zones.len());
            signed.extend(table.signed_zones.iter().map(|&s| u8::from(s)));
            for (part, bytes) in
                PARTS
                    .iter()
                    .zip([table.bytes.clone(), records, wildcard_bytes, signed])
            {
                sections.push((section_name(name, part), bytes));
            }
        }
        sections
    }

    /// The answers [`Self::cache_sections`] wrote, from a cache's sections (taken, so that the
    /// arenas are moved, not copied). Refused whole if a section is missing or does not parse.
    pub fn from_cache(mut sections: Vec<(String, Vec<u8>)>) -> Result<Precompiled, LkgRefused> {
        let mut take = |table: &str, part: &str| -> Result<Vec<u8>, LkgRefused> {
            let name = section_name(table, part);
            let at = sections
                .iter()
                .position(|(n, _)| *n == name)
                .ok_or(LkgRefused::Malformed { at: 0 })?;
            Ok(sections.swap_remove(at).1)
        };
        let [plain, signed] = TABLES;
        // The plain table's flags name every zone; slots and wildcards must index them.
        let signed_zones = decode_signed_zones(&take(plain, "signed")?)?;
        let zones = signed_zones.len();
        let table = decode_table(
            take(plain, "bytes")?,
            &take(plain, "slots")?,
            &take(plain, "wildcards")?,
            signed_zones,
            zones,
        )?;
        let signed = decode_table(
            take(signed, "bytes")?,
            &take(signed, "slots")?,
            &take(signed, "wildcards")?,
            decode_signed_zones(&take(signed, "signed")?)?,
            zones,
        )?;
        Ok(Precompiled {
            table: Arc::new(table),
            signed: Arc::new(signed),
            stale: None,
        })
    }
}

/// A u32 count, as the wildcards and signed-zones sections start.
fn count(n: usize) -> Vec<u8> {
    // Zones and wildcards are indexed by u16: far below u32::MAX.
    u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes().to_vec()
}

/// A section's leading u32 count and the bytes after it.
fn split_count(bytes: &[u8]) -> Result<(usize, &[u8]), LkgRefused> {
    let (n, rest) = bytes
        .split_first_chunk::<4>()
        .ok_or(LkgRefused::Malformed { at: 0 })?;
    let n = usize::try_from(u32::from_le_bytes(*n)).map_err(|_| LkgRefused::Malformed { at: 0 })?;
    Ok((n, rest))
}

fn decode_signed_zones(bytes: &[u8]) -> Result<Vec<bool>, LkgRefused> {
    let (n, flags) = split_count(bytes)?;
    if flags.len() != n {
        return Err(LkgRefused::Malformed { at: 0 });
    }
    flags
        .iter()
        .enumerate()
        .map(|(at, &b)| match b {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(LkgRefused::Malformed { at: at + 4 }),
        })
        .collect()
}

/// A table from its sections; `zones` is the number of zones (every slot's and wildcard's
/// zone index must be below it).
fn decode_table(
    bytes: Vec<u8>,
    slots: &[u8],
    wildcards: &[u8],
    signed_zones: Vec<bool>,
    zones: usize,
) -> Result<Table, LkgRefused> {
    if !slots.len().is_multiple_of(SLOT_LEN) {
        return Err(LkgRefused::Malformed {
            at: slots.len() - slots.len() % SLOT_LEN,
        });
    }
    let mut index: HashTable<Slot> = HashTable::with_capacity(slots.len() / SLOT_LEN);
    let mut next = 0;
    for (n, record) in slots.chunks_exact(SLOT_LEN).enumerate() {
        let at = n * SLOT_LEN;
        let slot = read_slot(record).ok_or(LkgRefused::Malformed { at })?;
        if slot.at as usize != next {
            return Err(LkgRefused::Malformed { at });
        }
        next = slot_end(&bytes, &slot, zones).ok_or(LkgRefused::Malformed { at })?;

        let (name, qtype) = split_key(super::key_in(&bytes, &slot));
        let hash = key_hash(name, qtype);
        let duplicate = index
            .find(hash, |other| {
                split_key(super::key_in(&bytes, other)) == (name, qtype)
            })
            .is_some();
        if duplicate {
            return Err(LkgRefused::Malformed { at });
        }
        index.insert_unique(hash, slot, |s| slot_hash(&bytes, s));
    }
    if next != bytes.len() {
        return Err(LkgRefused::Malformed { at: slots.len() });
    }
    Ok(Table {
        bytes,
        index,
        wildcards: decode_wildcards(wildcards, zones)?,
        signed_zones,
    })
}

fn read_slot(record: &[u8]) -> Option<Slot> {
    let u32_at = |at: usize| Some(u32::from_le_bytes(record.get(at..at + 4)?.try_into().ok()?));
    let u16_at = |at: usize| Some(u16::from_le_bytes(record.get(at..at + 2)?.try_into().ok()?));
    Some(Slot {
        at: u32_at(0)?,
        response_len: u32_at(4)?,
        key_len: u16_at(8)?,
        zone: u16_at(10)?,
    })
}

/// Where a slot read back ends in the arena (its key of a name and a type, then its response
/// or steered binding), if it lies inside it and names one of the zones.
fn slot_end(bytes: &[u8], slot: &Slot, zones: usize) -> Option<usize> {
    let payload = if slot.response_len == STEERED {
        4
    } else {
        slot.response_len as usize
    };
    let end = (slot.at as usize)
        .checked_add(usize::from(slot.key_len))?
        .checked_add(payload)?;
    (slot.key_len >= 3 && end <= bytes.len() && usize::from(slot.zone) < zones).then_some(end)
}

fn decode_wildcards(section: &[u8], zones: usize) -> Result<Wildcards, LkgRefused> {
    let total = section.len();
    let (n, mut bytes) = split_count(section)?;
    let mut wildcards = FxHashMap::default();
    while !bytes.is_empty() {
        let at = total - bytes.len();
        let entry = (|| {
            let (len, rest) = bytes.split_first_chunk::<2>()?;
            let len = usize::from(u16::from_le_bytes(*len));
            let (parent, rest) = rest.split_at_checked(len)?;
            let (zone, rest) = rest.split_first_chunk::<2>()?;
            let (binding, rest) = rest.split_first_chunk::<4>()?;
            let zone = u16::from_le_bytes(*zone);
            let binding = SteeredBinding::new(u32::from_le_bytes(*binding));
            (usize::from(zone) < zones).then_some((parent, zone, binding, rest))
        })();
        let Some((parent, zone, binding, rest)) = entry else {
            return Err(LkgRefused::Malformed { at });
        };
        if wildcards.insert(parent.into(), (zone, binding)).is_some() {
            return Err(LkgRefused::Malformed { at });
        }
        bytes = rest;
    }
    if wildcards.len() != n {
        return Err(LkgRefused::Malformed { at: 0 });
    }
    Ok(wildcards)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::wire::{rtype, WireName};
    use crate::snapshot::{FastPathEntry, ServeOptions};
    use crate::zone::lookup::ZoneSet;

    const ZONE: &str = "$TTL 300\n@ SOA ns1 hostmaster 7 3600 600 86400 300\n@ NS ns1\n\
                        @ MX 10 mail\n@ TXT \"v=spf1 -all\"\nns1 A 192.0.2.1\n\
                        www A 192.0.2.2\nwww AAAA 2001:db8::2\nmail A 192.0.2.3\n\
                        alias CNAME www\nsub NS ns.sub\nns.sub A 192.0.2.9\n";

    /// The answers of the example zone, plus a steered wildcard, a signed zone flag and a
    /// signed-table entry added by hand (the example zone is not signed or steered).
    fn sample() -> Precompiled {
        let zones = ZoneSet::new(vec![crate::zone::model::example_zone(ZONE)]);
        let built = Precompiled::build(&zones, None, &ServeOptions::default());
        assert!(!built.is_empty());
        let mut table = Table {
            bytes: built.table.bytes.clone(),
            index: built.table.index.clone(),
            wildcards: built.table.wildcards.clone(),
            signed_zones: built.table.signed_zones.clone(),
        };
        table
            .wildcards
            .insert(wire("edge.example.com."), (0, SteeredBinding::new(7)));
        let mut signed = Table::default();
        assert!(signed.push(
            &wire("www.example.com."),
            rtype::A,
            b"signed answer",
            false,
            0
        ));
        let binding = SteeredBinding::new(3).to_be_bytes();
        assert!(signed.push(&wire("app.example.com."), rtype::AAAA, &binding, true, 0));
        assert!(table.push(&wire("app.example.com."), rtype::AAAA, &binding, true, 0));
        Precompiled {
            table: Arc::new(table),
            signed: Arc::new(signed),
            stale: None,
        }
    }

    fn wire(name: &str) -> Box<[u8]> {
        crate::zone::model::name_to_wire(&hickory_proto::rr::Name::from_ascii(name).expect("name"))
    }

    /// Every fast-path entry of a sample of keys, as comparable bytes.
    fn answers(precompiled: &Precompiled) -> Vec<Option<(usize, Vec<u8>)>> {
        let names = [
            "example.com.",
            "www.example.com.",
            "mail.example.com.",
            "ns1.example.com.",
            "alias.example.com.",
            "sub.example.com.",
            "app.example.com.",
            "missing.example.com.",
        ];
        let types = [
            rtype::A,
            rtype::AAAA,
            rtype::MX,
            rtype::TXT,
            rtype::NS,
            rtype::SOA,
            rtype::CNAME,
        ];
        let mut out = Vec::new();
        for name in names {
            let wire = wire(name);
            let qname = WireName::from_wire(&wire).expect("wire name");
            for qtype in types {
                for dnssec in [false, true] {
                    out.push(precompiled.get(&qname, qtype, dnssec).map(|(zone, entry)| {
                        let bytes = match entry {
                            FastPathEntry::Response(r) => r.to_vec(),
                            FastPathEntry::Steered(b) => [&b"S"[..], &b.to_be_bytes()].concat(),
                            FastPathEntry::SteeredWildcard(b) => {
                                [&b"W"[..], &b.to_be_bytes()].concat()
                            }
                        };
                        (zone, bytes)
                    }));
                }
            }
        }
        out
    }

    #[test]
    fn precompiled_round_trips_through_the_cache_sections() {
        let original = sample();
        let sections = original.cache_sections();
        assert_eq!(sections.len(), TABLES.len() * PARTS.len());
        let back = Precompiled::from_cache(sections.clone()).expect("sections decode");
        let answers_before = answers(&original);
        assert!(answers_before.iter().filter(|a| a.is_some()).count() > 10);
        assert_eq!(answers(&back), answers_before);
        assert_eq!(back.len(), original.len());
        assert_eq!(back.table.wildcards, original.table.wildcards);
        assert_eq!(back.table.signed_zones, original.table.signed_zones);
        assert_eq!(back.signed.index.len(), original.signed.index.len());
        // The same answers give the same sections.
        assert_eq!(back.cache_sections(), sections);
        // And through the container, as a cache file holds them.
        let inputs = crate::lkg::Inputs::from([(
            "zones/example.com.zone".to_string(),
            crate::lkg::fingerprint(ZONE.as_bytes()),
        )]);
        let cache = crate::lkg::Cache {
            inputs: inputs.clone(),
            sections: sections.clone(),
        };
        let decoded = crate::lkg::decode(&crate::lkg::encode(&cache), &inputs).expect("decodes");
        let back = Precompiled::from_cache(decoded.sections).expect("sections decode");
        assert_eq!(answers(&back), answers_before);
        assert_eq!(
            Precompiled::from_cache(Precompiled::default().cache_sections())
                .map(|p| p.len())
                .ok(),
            Some(0)
        );
    }

    #[test]
    fn precompiled_from_cache_never_panics_on_a_flipped_byte() {
        // The container's checksum keeps corruption out; this is the belt to its braces:
        // whatever a section holds, decoding either refuses it or yields a table whose
        // lookups stay inside the arena.
        let sections = sample().cache_sections();
        for (i, (_, bytes)) in sections.iter().enumerate() {
            for at in 0..bytes.len() {
                let mut flipped = sections.clone();
                flipped[i].1[at] ^= 0xa5;
                if let Ok(back) = Precompiled::from_cache(flipped) {
                    let _ = answers(&back);
                }
            }
        }
    }

    #[test]
    fn precompiled_refuses_sections_cut_short_missing_or_pointing_outside() {
        let sections = sample().cache_sections();
        for (i, (name, bytes)) in sections.iter().enumerate() {
            // Every section cut short anywhere (record boundaries included).
            for len in 0..bytes.len() {
                let mut cut = sections.clone();
                cut[i].1.truncate(len);
                assert!(
                    Precompiled::from_cache(cut).is_err(),
                    "{name} cut to {len} bytes"
                );
            }
            let mut missing = sections.clone();
            missing.remove(i);
            assert!(Precompiled::from_cache(missing).is_err(), "{name} missing");
        }
        // A slot pointing past the arena.
        let mut outside = sections.clone();
        let slots = outside
            .iter_mut()
            .find(|(n, _)| n == "precompiled.plain.slots")
            .expect("slots");
        slots.1[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            Precompiled::from_cache(outside).err(),
            Some(LkgRefused::Malformed { at: 0 })
        );
        // A slot of a zone that is not there.
        let mut zone = sections.clone();
        let slots = zone
            .iter_mut()
            .find(|(n, _)| n == "precompiled.plain.slots")
            .expect("slots");
        slots.1[10..12].copy_from_slice(&9u16.to_le_bytes());
        assert!(Precompiled::from_cache(zone).is_err());
        // The same key twice.
        let mut twice = sections;
        let slots = twice
            .iter_mut()
            .find(|(n, _)| n == "precompiled.plain.slots")
            .expect("slots");
        let first: Vec<u8> = slots.1[..SLOT_LEN].to_vec();
        slots.1.extend_from_slice(&first);
        assert!(Precompiled::from_cache(twice).is_err());
    }
}
