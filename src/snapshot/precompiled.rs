//! Precompiled answers: for every (name, type) whose answer does not depend on the client, the
//! complete response message (id 0, no EDNS) built at load, so the serving path answers with
//! one hash probe and one copy. Steered names get an entry too, naming their steering binding:
//! the same probe then leads straight to the policy, without the general lookup.
//!
//! Keys and responses live back to back in one byte arena and the index holds 12-byte slots
//! into it: a million names cost two big allocations, not four million small ones. The table
//! sits behind an `Arc` so that a reload which changes no zone file shares it. The tables go
//! to and from the last-known-good cache in `cache`: arena and index (an open-addressing
//! table of fixed-size slots) both stored in a layout served in place from the mapped file,
//! so a restart serves them without reading or rebuilding anything ([`Index::Mapped`]).

use std::hash::Hasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::{FxHashMap, FxHasher};

use super::compose::precompile;
use super::ServeOptions;
use crate::dns::wire::{rtype, WireName, MAX_NAME_LEN};
use crate::lkg::Bytes;
use crate::policy::CompiledPolicies;
use crate::zone::lookup::{resolve, NoSteering, ZoneSet};
use crate::zone::model::{Node, SteeredBinding};

/// The answers as sections of the last-known-good cache (`cache_sections`, `from_cache`).
mod cache;

/// Past this many bytes of precompiled answers, the rest are answered by the general path.
const MAX_PRECOMPILED_BYTES: usize = 256 << 20;

#[derive(Default, Clone)]
pub struct Precompiled {
    table: Arc<Table>,
    /// The DO variants of the answers of signed zones: with signatures and proofs.
    signed: Arc<Table>,
    /// By zone index: zones changed by a difference since these answers were built (see
    /// `super::load`): their answers may be stale, so their queries take the general lookup.
    /// `None` (one branch per query) for answers built with their zones.
    stale: Option<Arc<[bool]>>,
}

#[derive(Default)]
struct Table {
    /// For each answer: the name (lower-cased wire format) and the type (2 bytes), then the
    /// response. Owned when built here; a range of the mapped cache file when read from it.
    bytes: Bytes,
    index: Index,
    /// Steered wildcards (`*.<parent>`) the fast path answers for, by parent name: the zone
    /// and the steering binding.
    wildcards: FxHashMap<Box<[u8]>, (u16, SteeredBinding)>,
    /// By zone index: is the zone signed (its DO answers are in the signed table only)?
    signed_zones: Vec<bool>,
}

/// One precompiled answer: where its key and response sit in [`Table::bytes`], and the index
/// of the zone that answers its name (for counters and rate limiting, so the fast path needs
/// no second zone lookup). A steered entry has `response_len` [`STEERED`] and its binding as
/// the 4 bytes after the key.
#[derive(Clone, Copy)]
struct Slot {
    at: u32,
    response_len: u32,
    key_len: u16,
    zone: u16,
}

/// Where the slots are found by key: a hash table built here, or the open-addressing table
/// stored in the mapped cache file, used in place (see `cache` for its layout and checks).
#[derive(Clone)]
enum Index {
    Built(HashTable<Slot>),
    Mapped(cache::MappedIndex),
}

impl Default for Index {
    fn default() -> Index {
        Index::Built(HashTable::new())
    }
}

impl Index {
    fn len(&self) -> usize {
        match self {
            Index::Built(index) => index.len(),
            Index::Mapped(index) => index.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `Slot::response_len` of a steered entry.
const STEERED: u32 = u32::MAX;

/// What the fast-path probe of a (name, type) found: a precompiled response, or the binding of
/// a steered name that the fast path answers by asking its policy (nothing cached).
#[derive(Clone, Copy, Debug)]
pub enum FastPathEntry<'a> {
    /// The complete static response (id 0, no EDNS, lower-cased question).
    Response(&'a [u8]),
    /// An A or AAAA query at a name bound to this steering binding, reached directly (no
    /// wildcard, CNAME or zone cut in between) and whose policy answers with addresses only.
    Steered(SteeredBinding),
    /// The same, for a name that does not exist, answered by the steered wildcard one label
    /// up (bound to this binding): in a signed zone, a DO answer also carries the proof that
    /// the name itself does not exist.
    SteeredWildcard(SteeredBinding),
}

fn key_hash(qname: &[u8], qtype: u16) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write(qname);
    hasher.write_u16(qtype);
    hasher.finish()
}

/// A stored key (name and type).
fn key_in<'b>(bytes: &'b [u8], slot: &Slot) -> &'b [u8] {
    let at = slot.at as usize;
    bytes
        .get(at..at + usize::from(slot.key_len))
        .unwrap_or_default()
}

/// The hash of a stored key (the same as [`key_hash`] of its name and type).
fn slot_hash(bytes: &[u8], slot: &Slot) -> u64 {
    let (name, qtype) = split_key(key_in(bytes, slot));
    key_hash(name, qtype)
}

impl Table {
    fn entry(&self, slot: &Slot) -> Option<FastPathEntry<'_>> {
        let at = slot.at as usize + usize::from(slot.key_len);
        if slot.response_len == STEERED {
            let binding = self.bytes.get(at..at + 4)?.try_into().ok()?;
            return Some(FastPathEntry::Steered(SteeredBinding::from_be_bytes(
                binding,
            )));
        }
        self.bytes
            .get(at..at.checked_add(slot.response_len as usize)?)
            .map(FastPathEntry::Response)
    }

    /// Appends an entry: its key (name and type), then `payload` (a response, or a steered
    /// entry's binding). False when the table is full (or is one read from the cache).
    fn push(&mut self, key: &[u8], qtype: u16, payload: &[u8], steered: bool, zone: u16) -> bool {
        let Table {
            bytes: Bytes::Owned(bytes),
            index: Index::Built(index),
            ..
        } = self
        else {
            return false;
        };
        let (Ok(at), Ok(payload_len), Ok(key_len)) = (
            u32::try_from(bytes.len()),
            u32::try_from(payload.len()),
            u16::try_from(key.len() + 2),
        ) else {
            return false;
        };
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(&qtype.to_be_bytes());
        bytes.extend_from_slice(payload);
        let slot = Slot {
            at,
            response_len: if steered { STEERED } else { payload_len },
            key_len,
            zone,
        };
        index.insert_unique(key_hash(key, qtype), slot, |s| slot_hash(bytes, s));
        true
    }

    /// The slot of (name, type): one hash, one probe (and a key compare per candidate).
    #[inline]
    fn find(&self, qname: &[u8], qtype: u16) -> Option<Slot> {
        let bytes = self.bytes.as_slice();
        let hash = key_hash(qname, qtype);
        match &self.index {
            Index::Built(index) => index
                .find(hash, |slot| {
                    split_key(key_in(bytes, slot)) == (qname, qtype)
                })
                .copied(),
            Index::Mapped(index) => index.find(bytes, hash, qname, qtype),
        }
    }

    /// Every slot, in arena order.
    fn slots(&self) -> Vec<Slot> {
        let mut slots: Vec<Slot> = match &self.index {
            Index::Built(index) => index.iter().copied().collect(),
            Index::Mapped(index) => index.slots().collect(),
        };
        slots.sort_unstable_by_key(|slot| slot.at);
        slots
    }
}

/// A key's name and type.
fn split_key(key: &[u8]) -> (&[u8], u16) {
    match key.split_last_chunk::<2>() {
        Some((name, qtype)) => (name, u16::from_be_bytes(*qtype)),
        None => (key, 0),
    }
}

impl Precompiled {
    /// These answers, with the zones at `changed` (indices) marked stale too.
    pub(super) fn with_stale(&self, changed: &[usize]) -> Precompiled {
        let zones = self.zone_count();
        let mut stale: Vec<bool> = match &self.stale {
            Some(stale) => stale.to_vec(),
            None => vec![false; zones],
        };
        stale.resize(zones, false);
        for &i in changed {
            if let Some(flag) = stale.get_mut(i) {
                *flag = true;
            }
        }
        Precompiled {
            stale: Some(stale.into()),
            ..self.clone()
        }
    }

    /// Are the answers of zone `zone` stale (changed by a difference since they were built)?
    #[inline]
    fn is_stale(&self, zone: usize) -> bool {
        match &self.stale {
            None => false,
            Some(stale) => stale.get(zone).copied().unwrap_or(true),
        }
    }

    /// How many zones have stale answers.
    pub fn stale_zones(&self) -> usize {
        self.stale
            .as_ref()
            .map_or(0, |s| s.iter().filter(|&&s| s).count())
    }

    /// How many zones the answers were built for (they name their zone by index into them).
    pub fn zone_count(&self) -> usize {
        self.table.signed_zones.len()
    }

    /// The fast-path entry for a name that does not exist but is covered by a steered
    /// wildcard one label up (`contoso.edge.example.net` under `*.edge.example.net`: the
    /// customer hostnames of an edge platform), with the index of its zone. `zones` must be
    /// the snapshot's, for the check that the name does not exist.
    pub fn wildcard(
        &self,
        zones: &ZoneSet,
        qname: &WireName,
        qtype: u16,
    ) -> Option<(usize, FastPathEntry<'_>)> {
        let table = &*self.table;
        if table.wildcards.is_empty()
            || !matches!(qtype, rtype::A | rtype::AAAA)
            || qname.label_count() == 0
        {
            return None;
        }
        let &(zone, binding) = table.wildcards.get(qname.suffix(1))?;
        let zone = usize::from(zone);
        if self.is_stale(zone) {
            return None;
        }
        // An existing name (or empty non-terminal) is answered by its own node, never by the
        // wildcard (RFC 4592 §2.2.1).
        if zones.zones().get(zone)?.node(qname.as_wire()).is_some() {
            return None;
        }
        Some((zone, FastPathEntry::SteeredWildcard(binding)))
    }

    /// The fast-path entry for (name, type), with the index of its zone; with `dnssec` (the
    /// query set DO), a signed zone's entry with signatures and proofs.
    pub fn get(
        &self,
        qname: &WireName,
        qtype: u16,
        dnssec: bool,
    ) -> Option<(usize, FastPathEntry<'_>)> {
        if dnssec && !self.signed.index.is_empty() {
            if let Some(slot) = self.signed.find(qname.as_wire(), qtype) {
                let zone = usize::from(slot.zone);
                if zone >= self.zone_count() || self.is_stale(zone) {
                    return None;
                }
                return Some((zone, self.signed.entry(&slot)?));
            }
        }
        let table = &*self.table;
        if table.index.is_empty() {
            return None;
        }
        let slot = table.find(qname.as_wire(), qtype)?;
        let zone = usize::from(slot.zone);
        // A zone index outside the zones (only a damaged cache could hold one) is no answer.
        let signed = table.signed_zones.get(zone)?;
        if (dnssec && *signed) || self.is_stale(zone) {
            return None;
        }
        Some((zone, table.entry(&slot)?))
    }

    pub fn len(&self) -> usize {
        self.table.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.index.is_empty()
    }

    /// The answers of `zones` that need no client to compute, and the bindings of the steered
    /// names `policies` answers with addresses only, written with `options`.
    pub(super) fn build(
        zones: &ZoneSet,
        policies: Option<&CompiledPolicies>,
        options: &ServeOptions,
    ) -> Precompiled {
        let inputs = Inputs {
            zones,
            policies,
            options,
        };
        let zones = zones.zones();
        let nodes: usize = zones.iter().map(|z| z.nodes.len()).sum();
        // Most names answer A and AAAA (one of them NODATA) and little else.
        let signed_zones: Vec<bool> = zones.iter().map(|z| z.denial.is_some()).collect();
        let mut table = Table {
            bytes: Bytes::Owned(Vec::new()),
            index: Index::Built(HashTable::with_capacity(nodes.saturating_mul(2))),
            wildcards: FxHashMap::default(),
            signed_zones: signed_zones.clone(),
        };
        let mut signed = Table::default();
        let mut scratch = Vec::new();
        let mut question = Vec::with_capacity(MAX_NAME_LEN + 4);
        let mut types: Vec<u16> = Vec::new();
        // Zones with another served zone above their apex: their names (and a parent's
        // delegation names) can be nodes of two zones.
        let nested: Vec<bool> = zones
            .iter()
            .map(|z| {
                zones.iter().any(|other| {
                    other.apex != z.apex
                        && (z.origin.zone_of(&other.origin) || other.origin.zone_of(&z.origin))
                })
            })
            .collect();
        'zones: for (zi, zone) in zones.iter().enumerate() {
            let nested = nested.get(zi).copied().unwrap_or(true);
            for (key, node) in &zone.nodes {
                if node.below_cut {
                    continue;
                }
                if let Some(parent) = key.strip_prefix(b"\x01*") {
                    if let Some(entry) = steered_wildcard(&inputs, zi, parent, node) {
                        table.wildcards.insert(parent.into(), entry);
                    }
                    continue;
                }
                let Some(name) = WireName::from_wire(key) else {
                    continue;
                };
                let Some(zone_index) = inputs
                    .zones
                    .find_index(&name)
                    .and_then(|(z, _)| u16::try_from(z).ok())
                else {
                    continue;
                };
                types.clear();
                types.extend(node.rrsets.iter().map(|s| s.rtype));
                types.extend([rtype::A, rtype::AAAA]);
                types.sort_unstable();
                types.dedup();
                for &qtype in &types {
                    if table.bytes.len() + signed.bytes.len() > MAX_PRECOMPILED_BYTES {
                        break 'zones;
                    }
                    // The same name can be a node of two nested zones (a delegation and the
                    // child's apex); its answer is the same either way (the zone that answers
                    // is the longest match), so the first one stays.
                    if nested && table.find(key, qtype).is_some() {
                        continue;
                    }
                    let is_signed = signed_zones
                        .get(usize::from(zone_index))
                        .copied()
                        .unwrap_or(false);
                    if let Some(binding) = steered_binding(&inputs, node, qtype) {
                        // Only where this zone is the one that answers the name.
                        let binding = binding.to_be_bytes();
                        if usize::from(zone_index) == zi
                            && (!table.push(key, qtype, &binding, true, zone_index)
                                || (is_signed
                                    && !signed.push(key, qtype, &binding, true, zone_index)))
                        {
                            break 'zones;
                        }
                        continue;
                    }
                    question.clear();
                    question.extend_from_slice(key);
                    question.extend_from_slice(&qtype.to_be_bytes());
                    question.extend_from_slice(&1u16.to_be_bytes());
                    if is_signed {
                        // The DO variant first: without it, the plain one must not answer DO
                        // queries either (see `get`), so neither is stored.
                        let Some(plan) = resolve(inputs.zones, &name, qtype, &mut NoSteering, true)
                        else {
                            continue;
                        };
                        if !plan.client_independent {
                            continue;
                        }
                        let Some(response) =
                            precompile(inputs.options, &question, &plan, &mut scratch)
                        else {
                            continue;
                        };
                        if !signed.push(key, qtype, response, false, zone_index) {
                            break 'zones;
                        }
                    }
                    let Some(plan) = resolve(inputs.zones, &name, qtype, &mut NoSteering, false)
                    else {
                        continue;
                    };
                    if !plan.client_independent {
                        continue;
                    }
                    let Some(response) = precompile(inputs.options, &question, &plan, &mut scratch)
                    else {
                        continue;
                    };
                    if !table.push(key, qtype, response, false, zone_index) {
                        break 'zones;
                    }
                }
            }
        }
        for table in [&mut table, &mut signed] {
            if let Table {
                bytes: Bytes::Owned(bytes),
                index: Index::Built(index),
                ..
            } = table
            {
                bytes.shrink_to_fit();
                index.shrink_to_fit(|s| slot_hash(bytes, s));
            }
        }
        Precompiled {
            table: Arc::new(table),
            signed: Arc::new(signed),
            stale: None,
        }
    }
}

/// What the precompiled answers are built from.
struct Inputs<'a> {
    zones: &'a ZoneSet,
    policies: Option<&'a CompiledPolicies>,
    options: &'a ServeOptions,
}

/// The steering binding that answers `qtype` at `node` on the fast path: A and AAAA at a
/// steered name that is not a delegation (whose answer would be a referral) and whose policy
/// answers with addresses only (a CNAME chain needs the general lookup; trying the fast path
/// first would evaluate the policy twice).
fn steered_binding(inputs: &Inputs<'_>, node: &Node, qtype: u16) -> Option<SteeredBinding> {
    if node.is_cut || !matches!(qtype, rtype::A | rtype::AAAA) {
        return None;
    }
    let binding = node.steer?;
    let policies = inputs.policies?;
    let steered = policies.steered().get(binding.index())?;
    (!policies.may_answer_cname(steered.root)).then_some(binding)
}

/// The fast-path entry for the wildcard `*.<parent>` of zone `zone`: when it is steered with
/// addresses only, `parent` is this zone's, and no served zone's apex lies below `parent` (a
/// name one label below `parent` would then be answered by that zone).
fn steered_wildcard(
    inputs: &Inputs<'_>,
    zone: usize,
    parent: &[u8],
    node: &Node,
) -> Option<(u16, SteeredBinding)> {
    let binding = steered_binding(inputs, node, rtype::A)?;
    let parent_name = WireName::from_wire(parent)?;
    let (answering, _) = inputs.zones.find_index(&parent_name)?;
    let below = inputs.zones.zones().iter().any(|z| {
        WireName::from_wire(&z.apex)
            .is_some_and(|apex| (1..=apex.label_count()).any(|skip| apex.suffix(skip) == parent))
    });
    if answering != zone || below {
        return None;
    }
    Some((u16::try_from(zone).ok()?, binding))
}
