//! The precompiled answers as sections of the last-known-good cache (issue 32, item 3; the
//! container is `crate::lkg`). Owns their layout: for each of the two tables (`plain` and
//! `signed`) the arena copied as is, the index as an open-addressing table of fixed-size slots
//! served in place from the mapped file ([`MappedIndex`]: nothing is rebuilt at a restart), the
//! steered wildcards and the signed zones.
//!
//! Section layouts (integers little-endian):
//!
//! ```text
//! precompiled.<table>.bytes      the arena
//! precompiled.<table>.index      count u64, capacity u64 (0 or a power of two), max probe
//!                                u64, arena length u64; then `capacity` records of 16 bytes:
//!                                tag u32 (the key hash's high 32 bits), at u32,
//!                                response_len u32, key_len u16 (0: an empty record), zone u16.
//!                                A key's record is at (hash mod capacity), or the first free
//!                                one after it (linear probing, wrapping), at most `max probe`
//!                                records further on
//! precompiled.<table>.wildcards  u32 count, then per wildcard, by parent name: u16 length, the
//!                                parent name (wire format), zone u16, steering binding u32
//! precompiled.<table>.signed     u32 count, then one byte per zone: 1 signed, 0 not
//! ```
//!
//! The hash is the table's own (`key_hash`, FxHash): the same only within one build, which
//! the container already demands (a cache is read by the binary that wrote it alone).
//!
//! Checks come in two steps. [`Precompiled::from_cache`] checks what is O(1) or small (the
//! headers, the lengths, the arena's length, the wildcards, the signed zones), enough for
//! every lookup to stay in bounds: a record read from the map is bounds-checked where it is
//! used, and one pointing outside the arena or at no zone is no answer, never a panic. The
//! container's checksum has already vouched for every byte. [`Precompiled::check_cached`]
//! then checks every record (inside the arena, of one of the zones, hashed as its key, found
//! where a lookup finds it, so no key twice, and the entries' lengths adding up to the arena):
//! O(names), run beside the zones' decoding. Anything wrong is refused whole as
//! [`LkgRefused::Malformed`], at the offset in that section.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::{key_hash, key_in, split_key, Index, Precompiled, Slot, Table, STEERED};
use crate::lkg::{Bytes, LkgRefused};
use crate::zone::model::SteeredBinding;

/// The two tables' names in section names.
const TABLES: [&str; 2] = ["plain", "signed"];

/// Bytes of one index record.
const RECORD_LEN: usize = 16;

/// Bytes of the index section's header.
const INDEX_HEADER: usize = 32;

/// The parts of a table, in section-name order.
const PARTS: [&str; 4] = ["bytes", "index", "wildcards", "signed"];

/// [`Table::wildcards`].
type Wildcards = FxHashMap<Box<[u8]>, (u16, SteeredBinding)>;

fn section_name(table: &str, part: &str) -> String {
    format!("precompiled.{table}.{part}")
}

/// The index of a table read from the cache, used in place (see the module documentation).
#[derive(Clone)]
pub(super) struct MappedIndex {
    /// The whole `index` section: header, then the records.
    section: Bytes,
    len: usize,
    /// Capacity - 1 (capacity a power of two); unused when `len` is 0.
    mask: usize,
    max_probe: usize,
}

/// The tag stored with a record: the hash's high half (the low bits pick the record).
fn tag(hash: u64) -> u32 {
    (hash >> 32) as u32
}

fn record(tag: u32, slot: &Slot) -> [u8; RECORD_LEN] {
    let mut out = [0; RECORD_LEN];
    out[0..4].copy_from_slice(&tag.to_le_bytes());
    out[4..8].copy_from_slice(&slot.at.to_le_bytes());
    out[8..12].copy_from_slice(&slot.response_len.to_le_bytes());
    out[12..14].copy_from_slice(&slot.key_len.to_le_bytes());
    out[14..16].copy_from_slice(&slot.zone.to_le_bytes());
    out
}

/// A record's tag and slot (`None` for an empty record).
#[inline]
fn read_record(record: &[u8; RECORD_LEN]) -> Option<(u32, Slot)> {
    let u32_at = |at: usize| {
        u32::from_le_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
    };
    let key_len = u16::from_le_bytes([record[12], record[13]]);
    if key_len == 0 {
        return None;
    }
    let slot = Slot {
        at: u32_at(4),
        response_len: u32_at(8),
        key_len,
        zone: u16::from_le_bytes([record[14], record[15]]),
    };
    Some((u32_at(0), slot))
}

impl MappedIndex {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The record at position `i` (`None` past the section: a damaged header, never a panic).
    #[inline]
    fn record(&self, i: usize) -> Option<&[u8; RECORD_LEN]> {
        let at = INDEX_HEADER + i * RECORD_LEN;
        self.section.get(at..at + RECORD_LEN)?.try_into().ok()
    }

    /// The position and slot of (name, type): linear probing from the hash's home record.
    #[inline]
    fn position(&self, arena: &[u8], hash: u64, qname: &[u8], qtype: u16) -> Option<(usize, Slot)> {
        if self.len == 0 {
            return None;
        }
        let tag = tag(hash);
        let mut i = hash as usize & self.mask;
        for _ in 0..=self.max_probe {
            let (found, slot) = read_record(self.record(i)?)?;
            if found == tag && split_key(key_in(arena, &slot)) == (qname, qtype) {
                return Some((i, slot));
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    #[inline]
    pub(super) fn find(&self, arena: &[u8], hash: u64, qname: &[u8], qtype: u16) -> Option<Slot> {
        self.position(arena, hash, qname, qtype)
            .map(|(_, slot)| slot)
    }

    /// Every record's slot, in record order.
    pub(super) fn slots(&self) -> impl Iterator<Item = Slot> + '_ {
        let capacity = if self.len == 0 { 0 } else { self.mask + 1 };
        (0..capacity).filter_map(|i| read_record(self.record(i)?).map(|(_, slot)| slot))
    }
}

/// The index section for `slots` (in arena order: the same answers give the same bytes).
fn encode_index(arena: &[u8], slots: &[Slot]) -> Vec<u8> {
    let capacity = if slots.is_empty() {
        0
    } else {
        // At most half full: a lookup reads one record, rarely two.
        (slots.len() * 2).next_power_of_two()
    };
    let mask = capacity.wrapping_sub(1);
    let mut records = vec![0u8; capacity * RECORD_LEN];
    let mut max_probe = 0;
    for slot in slots {
        let (name, qtype) = split_key(key_in(arena, slot));
        let hash = key_hash(name, qtype);
        let mut i = hash as usize & mask;
        let mut probe = 0;
        // Half full at most: a free record is always found.
        while records[i * RECORD_LEN + 12..i * RECORD_LEN + 14] != [0, 0] {
            i = (i + 1) & mask;
            probe += 1;
        }
        records[i * RECORD_LEN..(i + 1) * RECORD_LEN].copy_from_slice(&record(tag(hash), slot));
        max_probe = max_probe.max(probe);
    }
    let mut out = Vec::with_capacity(INDEX_HEADER + records.len());
    for n in [slots.len(), capacity, max_probe, arena.len()] {
        out.extend_from_slice(&(n as u64).to_le_bytes());
    }
    out.extend_from_slice(&records);
    out
}

/// The index section's header, checked against the section's and the arena's lengths.
fn decode_index(section: Bytes, arena_len: usize) -> Result<MappedIndex, LkgRefused> {
    let field = |n: usize| -> Result<usize, LkgRefused> {
        let bytes = section
            .get(n * 8..n * 8 + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .ok_or(LkgRefused::Malformed { at: n * 8 })?;
        usize::try_from(u64::from_le_bytes(bytes)).map_err(|_| LkgRefused::Malformed { at: n * 8 })
    };
    let (len, capacity, max_probe, arena) = (field(0)?, field(1)?, field(2)?, field(3)?);
    let records = capacity
        .checked_mul(RECORD_LEN)
        .and_then(|r| r.checked_add(INDEX_HEADER));
    if (capacity != 0 && !capacity.is_power_of_two()) || len > capacity / 2 {
        return Err(LkgRefused::Malformed { at: 8 });
    }
    if max_probe >= capacity.max(1) {
        return Err(LkgRefused::Malformed { at: 16 });
    }
    if arena != arena_len {
        return Err(LkgRefused::Malformed { at: 24 });
    }
    if records != Some(section.len()) {
        return Err(LkgRefused::Malformed { at: section.len() });
    }
    Ok(MappedIndex {
        section,
        len,
        mask: capacity.wrapping_sub(1),
        max_probe,
    })
}

impl Precompiled {
    /// The sections of the last-known-good cache that hold these answers (see the module
    /// documentation for their layout). The slots are written in arena order, so the same
    /// answers give the same bytes.
    pub fn cache_sections(&self) -> Vec<(String, Vec<u8>)> {
        let mut sections = Vec::with_capacity(TABLES.len() * PARTS.len());
        for (name, table) in TABLES.iter().zip([&*self.table, &*self.signed]) {
            let slots = table.slots();
            let index = encode_index(&table.bytes, &slots);
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
                    .zip([table.bytes.to_vec(), index, wildcard_bytes, signed])
            {
                sections.push((section_name(name, part), bytes));
            }
        }
        sections
    }

    /// The answers [`Self::cache_sections`] wrote, from a cache's sections (taken, so that
    /// mapped arenas stay in place). Refused whole if a section is missing or its header,
    /// lengths, wildcards or zone flags do not parse; [`Self::check_cached`] checks the rest.
    pub fn from_cache(mut sections: Vec<(String, Bytes)>) -> Result<Precompiled, LkgRefused> {
        let mut take = |table: &str, part: &str| -> Result<Bytes, LkgRefused> {
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
            take(plain, "index")?,
            &take(plain, "wildcards")?,
            signed_zones,
            zones,
        )?;
        let signed = decode_table(
            take(signed, "bytes")?,
            take(signed, "index")?,
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

    /// Every record of answers read from the cache (see the module documentation): O(names),
    /// for a caller to run beside other work and to refuse the cache whole on `Err`.
    pub fn check_cached(&self) -> Result<(), LkgRefused> {
        let zones = self.zone_count();
        for table in [&*self.table, &*self.signed] {
            if let Index::Mapped(index) = &table.index {
                check_index(index, &table.bytes, zones)?;
            }
        }
        Ok(())
    }
}

/// See [`Precompiled::check_cached`]; offsets are into the index section.
fn check_index(index: &MappedIndex, arena: &[u8], zones: usize) -> Result<(), LkgRefused> {
    let capacity = if index.len == 0 { 0 } else { index.mask + 1 };
    let mut found = 0usize;
    let mut covered = 0usize;
    for i in 0..capacity {
        let at = INDEX_HEADER + i * RECORD_LEN;
        let malformed = LkgRefused::Malformed { at };
        let Some((stored_tag, slot)) = read_record(index.record(i).ok_or(malformed.clone())?)
        else {
            continue;
        };
        let end = slot_end(arena, &slot, zones).ok_or(malformed.clone())?;
        let (name, qtype) = split_key(key_in(arena, &slot));
        let hash = key_hash(name, qtype);
        // Hashed as its key, and the record a lookup of that key reaches (so no key twice).
        if stored_tag != tag(hash)
            || index.position(arena, hash, name, qtype).map(|(p, _)| p) != Some(i)
        {
            return Err(malformed);
        }
        found += 1;
        covered = covered
            .checked_add(end - slot.at as usize)
            .ok_or(malformed)?;
    }
    if found != index.len || covered != arena.len() {
        return Err(LkgRefused::Malformed { at: 0 });
    }
    Ok(())
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

/// A table from its sections; `zones` is the number of zones (every wildcard's zone index
/// must be below it; the slots' are checked by [`Precompiled::check_cached`] and at lookup).
fn decode_table(
    bytes: Bytes,
    index: Bytes,
    wildcards: &[u8],
    signed_zones: Vec<bool>,
    zones: usize,
) -> Result<Table, LkgRefused> {
    let index = decode_index(index, bytes.len())?;
    Ok(Table {
        bytes,
        index: Index::Mapped(index),
        wildcards: decode_wildcards(wildcards, zones)?,
        signed_zones,
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

    /// Sections as a cache holds them (owned here; mapped in a server).
    fn held(sections: &[(String, Vec<u8>)]) -> Vec<(String, Bytes)> {
        sections
            .iter()
            .map(|(name, bytes)| (name.clone(), Bytes::from(bytes.clone())))
            .collect()
    }

    /// Both steps of reading answers back: [`Precompiled::from_cache`], then every record.
    fn read_back(sections: &[(String, Vec<u8>)]) -> Result<Precompiled, LkgRefused> {
        let back = Precompiled::from_cache(held(sections))?;
        back.check_cached()?;
        Ok(back)
    }

    /// Answers served from damaged sections: some missing, every other one as it was.
    fn fewer_and_none_wrong(
        original: &[Option<(usize, Vec<u8>)>],
        served: &[Option<(usize, Vec<u8>)>],
    ) -> bool {
        let count = |a: &[Option<(usize, Vec<u8>)>]| a.iter().filter(|a| a.is_some()).count();
        count(served) < count(original)
            && served
                .iter()
                .zip(original)
                .all(|(s, o)| s.is_none() || s == o)
    }

    /// The position of the first used record in an index section.
    fn first_record(index: &[u8]) -> usize {
        (0..)
            .map(|i| INDEX_HEADER + i * RECORD_LEN)
            .find(|&at| index[at + 12..at + 14] != [0, 0])
            .expect("a used record")
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
        let back = read_back(&sections).expect("sections decode");
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
        let back = read_back(&decoded.sections).expect("sections decode");
        assert_eq!(answers(&back), answers_before);
        assert_eq!(
            read_back(&Precompiled::default().cache_sections())
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
                // Served before every record is checked (a restart's first answers): the
                // lookups must stay inside the arena either way.
                if let Ok(back) = Precompiled::from_cache(held(&flipped)) {
                    let _ = answers(&back);
                    let _ = back.check_cached();
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
                // Cut anywhere, the lengths no longer add up: refused before any lookup.
                assert!(
                    Precompiled::from_cache(held(&cut)).is_err(),
                    "{name} cut to {len} bytes"
                );
            }
            let mut missing = sections.clone();
            missing.remove(i);
            assert!(read_back(&missing).is_err(), "{name} missing");
        }
        let index_of = |sections: &mut Vec<(String, Vec<u8>)>| -> usize {
            sections
                .iter()
                .position(|(n, _)| n == "precompiled.plain.index")
                .expect("index")
        };
        let original = answers(&Precompiled::from_cache(held(&sections)).expect("decodes"));
        // A record pointing past the arena: refused by the check, no answer before it.
        let mut outside = sections.clone();
        let i = index_of(&mut outside);
        let at = first_record(&outside[i].1);
        outside[i].1[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            read_back(&outside).err(),
            Some(LkgRefused::Malformed { at })
        );
        let served = answers(&Precompiled::from_cache(held(&outside)).expect("header holds"));
        assert!(fewer_and_none_wrong(&original, &served));
        // A record of a zone that is not there: refused, and no answer before the check.
        let mut zone = sections.clone();
        let i = index_of(&mut zone);
        let at = first_record(&zone[i].1);
        zone[i].1[at + 14..at + 16].copy_from_slice(&9u16.to_le_bytes());
        assert!(read_back(&zone).is_err());
        let served = answers(&Precompiled::from_cache(held(&zone)).expect("header holds"));
        assert!(fewer_and_none_wrong(&original, &served));
        // The same key twice (a used record copied into a free one).
        let mut twice = sections.clone();
        let i = index_of(&mut twice);
        let at = first_record(&twice[i].1);
        let record: Vec<u8> = twice[i].1[at..at + RECORD_LEN].to_vec();
        let free = (0..)
            .map(|n| INDEX_HEADER + n * RECORD_LEN)
            .find(|&at| twice[i].1[at + 12..at + 14] == [0, 0])
            .expect("a free record");
        twice[i].1[free..free + RECORD_LEN].copy_from_slice(&record);
        twice[i].1[0..8].copy_from_slice(&(sample().len() as u64 + 1).to_le_bytes());
        assert!(read_back(&twice).is_err());
        // A record whose tag is not its key's hash.
        let mut tagged = sections;
        let i = index_of(&mut tagged);
        let at = first_record(&tagged[i].1);
        tagged[i].1[at] ^= 1;
        assert!(read_back(&tagged).is_err());
    }
}
