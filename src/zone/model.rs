//! The compiled, immutable form of a zone that the serving path reads.
//!
//! Names are keys in lower-cased uncompressed wire format, so that every ancestor of a query
//! name is a slice of the same buffer (see [`crate::dns::wire::WireName`]). Every ancestor of
//! every owner name exists as a node (an empty non-terminal if it has no data), which is what
//! lets the lookup tell "no such name" from "name without this type" in one hash probe.

use hickory_proto::rr::Name;
use rustc_hash::{FxHashMap, FxHashSet};

use super::group::{ancestors, label_count, push_wire_key, Grouped};
use super::nodes::Nodes;
use crate::dns::wire::rtype;

/// One record to load: what the zone file parser hands over.
pub struct RecordInput<'a> {
    pub name: &'a Name,
    pub rtype: u16,
    pub ttl: u32,
    pub rdata: &'a [u8],
}

/// All records of one type at one name, pre-encoded: for each record, the bytes that follow the
/// owner name on the wire (type, class, TTL, RDLENGTH, RDATA — names uncompressed).
#[derive(Debug, Clone)]
pub struct RRset {
    pub rtype: u16,
    pub ttl: u32,
    pub count: u16,
    pub encoded: Box<[u8]>,
    /// Lower-cased names this set points at (NS, MX, SRV targets) for additional processing,
    /// or the CNAME target.
    pub targets: Box<[Box<[u8]>]>,
    /// The RRSIG records covering this set (encoded like `encoded`), when the zone is signed.
    pub rrsig: Option<Box<RRset>>,
}

impl RRset {
    /// Iterates over the encoded records (each: type..rdata).
    pub fn records(&self) -> impl Iterator<Item = &[u8]> {
        let mut rest: &[u8] = &self.encoded;
        std::iter::from_fn(move || {
            let rdlen = u16::from_be_bytes([*rest.get(8)?, *rest.get(9)?]) as usize;
            let (record, tail) = rest.split_at(10 + rdlen);
            rest = tail;
            Some(record)
        })
    }

    /// RDATA of each record.
    pub fn rdatas(&self) -> impl Iterator<Item = &[u8]> {
        self.records().map(|r| &r[10..])
    }

    pub fn cname_target(&self) -> Option<&[u8]> {
        (self.rtype == rtype::CNAME)
            .then(|| self.targets.first().map(|t| &t[..]))
            .flatten()
    }
}

#[derive(Debug, Default, Clone)]
pub struct Node {
    pub rrsets: Vec<RRset>,
    /// NS records at a name other than the apex: a zone cut.
    pub is_cut: bool,
    /// Below a zone cut: only glue, never answered.
    pub below_cut: bool,
    /// `*.<this name>` exists.
    pub has_wildcard_child: bool,
    /// The steered name bound here (set when the snapshot attaches policies).
    pub steer: Option<SteeredBinding>,
}

/// The binding of a name to a steered name of the policies: its index in their list of
/// steered names (`CompiledPolicies::steered`), in config order. It travels with the query
/// from the node (or the fast-path table) to the steering hook, the pre-computed signatures and
/// the per-name counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct SteeredBinding(u32);

impl SteeredBinding {
    /// The binding of the steered name at `index`.
    #[inline]
    pub const fn new(index: u32) -> Self {
        SteeredBinding(index)
    }

    /// The index of the steered name, into the policies' list (and the lists kept in the same
    /// order: signatures, counters).
    #[inline]
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// As stored in the fast-path table's byte arena.
    #[inline]
    pub const fn to_be_bytes(self) -> [u8; 4] {
        self.0.to_be_bytes()
    }

    /// The inverse of [`Self::to_be_bytes`].
    #[inline]
    pub const fn from_be_bytes(bytes: [u8; 4]) -> Self {
        SteeredBinding(u32::from_be_bytes(bytes))
    }
}

impl Node {
    pub fn rrset(&self, rtype: u16) -> Option<&RRset> {
        self.rrsets.iter().find(|s| s.rtype == rtype)
    }

    pub fn is_empty_non_terminal(&self) -> bool {
        self.rrsets.is_empty() && self.steer.is_none()
    }
}

#[derive(Debug)]
pub struct Zone {
    pub origin: Name,
    pub apex: Box<[u8]>,
    pub apex_labels: usize,
    /// Every name's node: a shared base and the names a difference changed ([`Nodes`]).
    pub nodes: Nodes,
    /// TTL of negative answers: min(SOA TTL, SOA MINIMUM) per RFC 2308.
    pub negative_ttl: u32,
    pub serial: u32,
    /// The authenticated denial chain, when the zone is signed (see `crate::dnssec`).
    pub denial: Option<Denial>,
}

/// A signed zone's authenticated denial, for the lookup's proofs of non-existence.
#[derive(Debug)]
pub struct Denial {
    pub chain: Chain,
    /// Steered owners' NODATA records, by steered owner name.
    pub steered_nodata: FxHashMap<Box<[u8]>, SteeredNodata>,
}

/// A steered owner's NSEC (or NSEC3) without A (index 0) and without AAAA (index 1), signed,
/// for NODATA answers of policy targets with addresses of one family only (the chain's record
/// lists both).
#[derive(Debug)]
pub struct SteeredNodata {
    /// The records' owner: the steered name (NSEC) or its hashed name (NSEC3).
    pub owner: Box<[u8]>,
    pub without: [RRset; 2],
}

/// The denial chain proper.
#[derive(Debug)]
pub enum Chain {
    /// NSEC (RFC 4034): the owners, in canonical order ([`crate::dns::canonical`]); the
    /// signed NSEC RRsets sit in their owners' nodes.
    Nsec(Box<[Box<[u8]>]>),
    /// NSEC3 (RFC 5155): hashed owners, which are no nodes of the zone.
    Nsec3(Nsec3Chain),
}

/// Length of an NSEC3 SHA-1 hash.
pub const NSEC3_HASH_LEN: usize = 20;

/// An NSEC3 chain: every record (hash order), and which zone name each one matches.
#[derive(Debug)]
pub struct Nsec3Chain {
    pub salt: Box<[u8]>,
    pub iterations: u16,
    /// The hashes, sorted (binary-searched on the serving path).
    pub hashes: Box<[[u8; NSEC3_HASH_LEN]]>,
    /// The record at each hash: its owner (`<base32hex hash>.<apex>`, wire) and the signed
    /// NSEC3 RRset.
    pub records: Box<[(Box<[u8]>, RRset)]>,
    /// Names of the zone with an NSEC3 record (unhashed), and its index.
    pub by_name: FxHashMap<Box<[u8]>, u32>,
}

/// The NSEC3 hash (RFC 5155 §5, SHA-1) of a lower-cased wire name: on the stack, no allocation.
pub fn nsec3_hash(name: &[u8], salt: &[u8], iterations: u16) -> [u8; NSEC3_HASH_LEN] {
    use ring::digest::{Context, SHA1_FOR_LEGACY_USE_ONLY};
    let mut ctx = Context::new(&SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(name);
    ctx.update(salt);
    let mut hash = [0u8; NSEC3_HASH_LEN];
    hash.copy_from_slice(ctx.finish().as_ref());
    for _ in 0..iterations {
        let mut ctx = Context::new(&SHA1_FOR_LEGACY_USE_ONLY);
        ctx.update(&hash);
        ctx.update(salt);
        hash.copy_from_slice(ctx.finish().as_ref());
    }
    hash
}

impl Nsec3Chain {
    /// The index of the record matching `name`, if the zone has one for it.
    pub fn matching(&self, name: &[u8]) -> Option<usize> {
        self.by_name.get(name).map(|&i| i as usize)
    }

    /// The index of the record whose interval covers the hash of `name` (a name without a
    /// record of its own): the greatest hash below it, wrapping around to the last.
    pub fn covering(&self, name: &[u8]) -> Option<usize> {
        let hash = nsec3_hash(name, &self.salt, self.iterations);
        let after = self.hashes.partition_point(|h| h[..] < hash[..]);
        let last = self.hashes.len().checked_sub(1)?;
        Some(after.checked_sub(1).unwrap_or(last))
    }

    /// The closest ancestor of `name` (or `name` itself) that has a record, as (its index,
    /// the child of it on the way to `name`: the next closer name). `name` is a lower-cased
    /// wire name inside the zone.
    pub fn closest_encloser<'n>(&self, name: &'n [u8]) -> Option<(usize, Option<&'n [u8]>)> {
        let mut next_closer = None;
        let mut rest = name;
        loop {
            if let Some(i) = self.matching(rest) {
                return Some((i, next_closer));
            }
            let len = usize::from(*rest.first()?);
            if len == 0 {
                return None;
            }
            next_closer = Some(rest);
            rest = rest.get(1 + len..)?;
        }
    }
}

impl Denial {
    /// The NSEC chain owner whose NSEC covers or matches `name` (the greatest owner not after
    /// it); `None` for an NSEC3 chain.
    pub fn covering(&self, name: &[u8]) -> Option<&[u8]> {
        let Chain::Nsec(order) = &self.chain else {
            return None;
        };
        let after = order
            .partition_point(|owner| crate::dns::canonical::canonical_cmp(owner, name).is_le());
        // The apex sorts first: every name of the zone has a predecessor.
        order.get(after.checked_sub(1)?).map(|o| &o[..])
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("zone {0} has no SOA record at its apex")]
    NoSoa(String),
    #[error("record {0} is not inside zone {1}")]
    OutOfZone(String, String),
    #[error("steered name {0} cannot be served: {1}")]
    SteeredConflict(String, &'static str),
    #[error("record {name}: RDATA of type {rtype} is malformed")]
    BadRdata { name: String, rtype: u16 },
}

/// Lower-cased uncompressed wire form of a name.
pub fn name_to_wire(name: &Name) -> Box<[u8]> {
    let mut out = Vec::with_capacity(name.len() + 2);
    for label in name.iter() {
        out.push(label.len() as u8);
        out.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    out.push(0);
    out.into_boxed_slice()
}

/// Reads an uncompressed name at the start of `data`; returns it lower-cased and its length.
fn leading_name(data: &[u8]) -> Option<(Box<[u8]>, usize)> {
    let mut pos = 0;
    loop {
        let len = *data.get(pos)? as usize;
        if len > 63 {
            return None;
        }
        pos += 1 + len;
        if len == 0 {
            let lower: Vec<u8> = data[..pos].iter().map(u8::to_ascii_lowercase).collect();
            // Length octets are < 64, so lower-casing leaves them alone.
            return Some((lower.into_boxed_slice(), pos));
        }
        data.get(..pos)?;
    }
}

/// The names an RDATA points at, for CNAME following and additional-section processing.
fn rdata_targets(rt: u16, rdata: &[u8]) -> Option<Option<Box<[u8]>>> {
    let skip = match rt {
        rtype::NS | rtype::CNAME => 0,
        rtype::MX => 2,
        rtype::SRV => 6,
        _ => return Some(None),
    };
    let (name, _) = leading_name(rdata.get(skip..)?)?;
    Some(Some(name))
}

impl Zone {
    /// Compiles records (already validated by `zone::validate`) into a zone.
    pub fn build<'a>(
        origin: &Name,
        records: impl IntoIterator<Item = RecordInput<'a>>,
    ) -> Result<Zone, ModelError> {
        let apex = name_to_wire(origin);
        let apex_labels = origin.num_labels() as usize;
        let records: Vec<RecordInput<'a>> = records.into_iter().collect();
        if let Some(outside) = records.iter().find(|r| !origin.zone_of(r.name)) {
            return Err(ModelError::OutOfZone(
                outside.name.to_string(),
                origin.to_string(),
            ));
        }
        let grouped = Grouped::new(records.len(), |i, out| push_wire_key(out, records[i].name));
        let mut nodes: FxHashMap<Box<[u8]>, Node> = FxHashMap::default();
        nodes.reserve(grouped.len());
        let mut raw: Vec<RawRecord<'a>> = Vec::new();
        let mut seen: Vec<&[u8]> = Vec::new();
        for (owner, members) in grouped.iter() {
            raw.clear();
            raw.extend(members.iter().map(|&i| {
                let r = &records[i as usize];
                (r.rtype, r.ttl, r.rdata)
            }));
            raw.sort_by_key(|r| r.0);
            let node = Node {
                rrsets: build_rrsets(owner, &raw, &mut seen)?,
                ..Node::default()
            };
            nodes.insert(owner.into(), node);
        }
        drop(grouped);
        let soa = nodes
            .get(&apex)
            .and_then(|n| n.rrset(rtype::SOA))
            .and_then(|s| s.rdatas().next().map(<[u8]>::to_vec));
        let Some(soa_rdata) = soa else {
            return Err(ModelError::NoSoa(origin.to_string()));
        };
        let soa_ttl = nodes
            .get(&apex)
            .and_then(|n| n.rrset(rtype::SOA))
            .map_or(0, |s| s.ttl);
        let (serial, minimum) = soa_numbers(&soa_rdata).ok_or(ModelError::BadRdata {
            name: origin.to_string(),
            rtype: rtype::SOA,
        })?;
        let mut zone = Zone {
            origin: origin.clone(),
            apex,
            apex_labels,
            nodes: Nodes::from(nodes),
            negative_ttl: soa_ttl.min(minimum),
            serial,
            denial: None,
        };
        zone.add_empty_non_terminals();
        zone.mark_cuts_and_wildcards();
        Ok(zone)
    }

    /// Adds a node for every ancestor (up to the apex) of every owner name.
    fn add_empty_non_terminals(&mut self) {
        let missing = self.missing_ancestors(self.nodes.keys().map(|k| &k[..]));
        for ancestor in missing {
            self.nodes.insert(ancestor, Node::default());
        }
    }

    /// The ancestors (up to the apex) of `owners` that have no node yet.
    fn missing_ancestors<'k>(&self, owners: impl Iterator<Item = &'k [u8]>) -> Vec<Box<[u8]>> {
        let mut missing: FxHashSet<&[u8]> = FxHashSet::default();
        // Sibling names share their ancestors: once one is known to exist, so are (or were
        // collected) all of its own ancestors.
        let mut known: &[u8] = &[];
        for owner in owners {
            let depth = label_count(owner).saturating_sub(self.apex_labels);
            for ancestor in ancestors(owner).skip(1).take(depth) {
                if ancestor == known {
                    break;
                }
                if self.nodes.contains_key(ancestor) {
                    known = ancestor;
                } else {
                    missing.insert(ancestor);
                }
            }
        }
        missing.into_iter().map(Box::from).collect()
    }

    fn mark_cuts_and_wildcards(&mut self) {
        let mut any_cut = false;
        let mut wildcard_parents: Vec<Box<[u8]>> = Vec::new();
        for (key, node) in self.nodes.iter_mut() {
            node.is_cut = key[..] != self.apex[..] && node.rrset(rtype::NS).is_some();
            any_cut |= node.is_cut;
            if let Some(parent) = key.strip_prefix(b"\x01*") {
                wildcard_parents.push(parent.into());
            }
        }
        for parent in wildcard_parents {
            if let Some(node) = self.nodes.get_mut(&parent) {
                node.has_wildcard_child = true;
            }
        }
        if !any_cut {
            for node in self.nodes.values_mut() {
                node.below_cut = false;
            }
            return;
        }
        // Computed first, then stored in the same iteration order (the map is not modified
        // in between).
        let below: Vec<bool> = self.nodes.keys().map(|k| self.has_cut_above(k)).collect();
        for (node, below) in self.nodes.values_mut().zip(below) {
            node.below_cut = below;
        }
    }

    /// Is there a zone cut strictly between the apex and `key`?
    pub(crate) fn has_cut_above(&self, key: &[u8]) -> bool {
        let depth = label_count(key).saturating_sub(self.apex_labels);
        ancestors(key)
            .skip(1)
            .take(depth.saturating_sub(1))
            .any(|ancestor| self.nodes.get(ancestor).is_some_and(|n| n.is_cut))
    }

    pub fn node(&self, name: &[u8]) -> Option<&Node> {
        self.nodes.get(name)
    }

    pub fn apex_node(&self) -> Option<&Node> {
        self.nodes.get(&self.apex)
    }

    /// For a signed zone, the signed record (owner and RRset) proving that no closer match
    /// than a wildcard exists for `name`, which does not exist and is answered by the
    /// wildcard at its closest encloser: the NSEC covering `name` (RFC 4035 §3.1.3.3), or the
    /// NSEC3 covering `next_closer`, the closest encloser's child on the way to `name` (RFC
    /// 5155 §7.2.6). Both are lower-cased wire names; `None` for an unsigned zone.
    pub fn wildcard_proof(&self, name: &[u8], next_closer: &[u8]) -> Option<(&[u8], &RRset)> {
        let denial = self.denial.as_ref()?;
        match &denial.chain {
            Chain::Nsec3(chain) => {
                let (owner, set) = chain.records.get(chain.covering(next_closer)?)?;
                Some((owner, set))
            }
            Chain::Nsec(_) => {
                let (owner, node) = self.nodes.get_key_value(denial.covering(name)?)?;
                Some((owner, node.rrset(rtype::NSEC)?))
            }
        }
    }

    pub fn soa(&self) -> Option<&RRset> {
        self.apex_node().and_then(|n| n.rrset(rtype::SOA))
    }

    /// Rewrites the apex SOA's serial, and [`Zone::serial`], to `serial`: the zone is then
    /// served and transferred at that serial (a zone whose projected steered names changed
    /// while its file did not, see `snapshot::projection`). Call it before the zone is
    /// signed. `false` (nothing changed) when the SOA cannot be read.
    pub fn set_serial(&mut self, serial: u32) -> bool {
        let apex = self.apex.clone();
        let Some(set) = self
            .nodes
            .get_mut(&apex)
            .and_then(|node| node.rrsets.iter_mut().find(|s| s.rtype == rtype::SOA))
        else {
            return false;
        };
        // One SOA record: type, class, TTL, RDLENGTH (10 bytes), then MNAME, RNAME, SERIAL.
        let Some(at) =
            skip_wire_name(&set.encoded, 10).and_then(|p| skip_wire_name(&set.encoded, p))
        else {
            return false;
        };
        let Some(bytes) = set.encoded.get_mut(at..at + 4) else {
            return false;
        };
        bytes.copy_from_slice(&serial.to_be_bytes());
        self.serial = serial;
        true
    }

    /// Attaches steered-name bindings (name, binding index), creating nodes where needed.
    /// A steered name may not sit at or below a zone cut, nor beside a static CNAME.
    pub fn bind_steered(&mut self, bindings: &[(&Name, SteeredBinding)]) -> Result<(), ModelError> {
        let mut keys: Vec<Box<[u8]>> = Vec::with_capacity(bindings.len());
        for (name, binding) in bindings {
            if !self.origin.zone_of(name) {
                return Err(ModelError::OutOfZone(
                    name.to_string(),
                    self.origin.to_string(),
                ));
            }
            let key = name_to_wire(name);
            let node = self.nodes.entry(key.clone()).or_default();
            if node.rrset(rtype::CNAME).is_some() {
                return Err(ModelError::SteeredConflict(
                    name.to_string(),
                    "it has a static CNAME",
                ));
            }
            node.steer = Some(*binding);
            keys.push(key);
        }
        // Only the steered names and the empty non-terminals added for them are new; none has
        // NS records, so the cuts stay where they are and the other nodes' flags stand.
        let added = self.missing_ancestors(keys.iter().map(|k| &k[..]));
        for ancestor in &added {
            self.nodes.insert(ancestor.clone(), Node::default());
        }
        for key in keys.iter().chain(&added) {
            let is_cut = key[..] != self.apex[..]
                && self
                    .nodes
                    .get(key)
                    .is_some_and(|n| n.rrset(rtype::NS).is_some());
            let below_cut = self.has_cut_above(key);
            if let Some(node) = self.nodes.get_mut(key) {
                node.is_cut = is_cut;
                node.below_cut = below_cut;
            }
            if let Some(parent) = key.strip_prefix(b"\x01*") {
                if let Some(node) = self.nodes.get_mut(parent) {
                    node.has_wildcard_child = true;
                }
            }
        }
        for (name, _) in bindings {
            let key = name_to_wire(name);
            if self
                .nodes
                .get(&key)
                .is_some_and(|n| n.is_cut || n.below_cut)
            {
                return Err(ModelError::SteeredConflict(
                    name.to_string(),
                    "it is at or below a delegation",
                ));
            }
        }
        Ok(())
    }
}

/// (type, TTL, RDATA) of one record while grouping by owner.
pub(crate) type RawRecord<'a> = (u16, u32, &'a [u8]);

impl Zone {
    /// This zone with `nodes` in place of its own and the apex SOA's numbers read again: a
    /// version built by a difference (`super::difference`), sharing the unchanged names.
    /// `None` for a signed zone (its denial chain would have to change too) or when the new
    /// apex has no readable SOA.
    pub(crate) fn with_nodes(&self, nodes: Nodes) -> Option<Zone> {
        if self.denial.is_some() {
            return None;
        }
        let soa = nodes.get(&self.apex)?.rrset(rtype::SOA)?;
        let (serial, minimum) = soa_numbers(soa.rdatas().next()?)?;
        Some(Zone {
            origin: self.origin.clone(),
            apex: self.apex.clone(),
            apex_labels: self.apex_labels,
            negative_ttl: soa.ttl.min(minimum),
            serial,
            nodes,
            denial: None,
        })
    }

    /// The same zone, sharing its names (`None` for a signed zone).
    pub(crate) fn shallow_clone(&self) -> Option<Zone> {
        self.with_nodes(self.nodes.clone())
    }
}

impl Node {
    /// A node of `records` (sorted by type, file order within a type), built exactly as
    /// [`Zone::build`] builds it; the flags are the caller's to set.
    pub(crate) fn from_records(
        owner: &[u8],
        records: &[RawRecord<'_>],
    ) -> Result<Node, ModelError> {
        let mut seen = Vec::new();
        Ok(Node {
            rrsets: build_rrsets(owner, records, &mut seen)?,
            ..Node::default()
        })
    }
}

/// The RRsets of one owner from its records sorted by type; `seen` is scratch space.
fn build_rrsets<'r>(
    owner: &[u8],
    records: &[RawRecord<'r>],
    seen: &mut Vec<&'r [u8]>,
) -> Result<Vec<RRset>, ModelError> {
    let mut sets: Vec<RRset> = Vec::with_capacity(1);
    for group in records.chunk_by(|a, b| a.0 == b.0) {
        let rt = group[0].0;
        // RFC 2181 §5.2: one TTL per RRset; the smallest is the safe choice.
        let ttl = group.iter().map(|r| r.1).min().unwrap_or(0);
        let size: usize = group.iter().map(|r| 10 + r.2.len()).sum();
        let mut encoded = Vec::with_capacity(size);
        let mut targets = Vec::new();
        seen.clear();
        for &(_, _, rdata) in group {
            if seen.contains(&rdata) {
                continue; // exact duplicates are merged (the validator warns)
            }
            seen.push(rdata);
            let bad = || ModelError::BadRdata {
                name: crate::dns::wire::display_wire_name(owner),
                rtype: rt,
            };
            let rdlen = u16::try_from(rdata.len()).map_err(|_| bad())?;
            encoded.extend_from_slice(&rt.to_be_bytes());
            encoded.extend_from_slice(&crate::dns::wire::class::IN.to_be_bytes());
            encoded.extend_from_slice(&ttl.to_be_bytes());
            encoded.extend_from_slice(&rdlen.to_be_bytes());
            encoded.extend_from_slice(rdata);
            if let Some(target) = rdata_targets(rt, rdata).ok_or_else(bad)? {
                targets.push(target);
            }
        }
        sets.push(RRset {
            rtype: rt,
            ttl,
            count: seen.len() as u16,
            encoded: encoded.into_boxed_slice(),
            targets: targets.into_boxed_slice(),
            rrsig: None,
        });
    }
    Ok(sets)
}

/// SERIAL and MINIMUM out of SOA RDATA (two names, then five 32-bit numbers).
fn soa_numbers(rdata: &[u8]) -> Option<(u32, u32)> {
    let (_, mname_len) = leading_name(rdata)?;
    let (_, rname_len) = leading_name(rdata.get(mname_len..)?)?;
    let numbers = rdata.get(mname_len + rname_len..mname_len + rname_len + 20)?;
    let word =
        |i: usize| u32::from_be_bytes([numbers[i], numbers[i + 1], numbers[i + 2], numbers[i + 3]]);
    Some((word(0), word(16)))
}

/// The offset just past the uncompressed wire name at `pos` of `bytes`.
fn skip_wire_name(bytes: &[u8], mut pos: usize) -> Option<usize> {
    loop {
        let len = usize::from(*bytes.get(pos)?);
        pos += 1 + len;
        if len == 0 {
            return Some(pos);
        }
    }
}

/// Tests' zone: example.com. built from zone-file text (unsigned).
#[cfg(test)]
pub(crate) fn example_zone(text: &str) -> Zone {
    let origin = Name::from_ascii("example.com.").expect("test origin");
    let parsed = crate::zone::parse::parse_zone_text(
        text,
        std::path::Path::new("example.com.zone"),
        &origin,
    )
    .expect("test zone parses");
    let records = parsed.records.iter().map(|r| RecordInput {
        name: &r.name,
        rtype: u16::from(r.rtype),
        ttl: r.ttl,
        rdata: &r.rdata,
    });
    Zone::build(&origin, records).expect("test zone builds")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> Name {
        Name::from_ascii(text).expect("test name")
    }

    fn zone(text: &str) -> Zone {
        example_zone(text)
    }

    fn node<'z>(zone: &'z Zone, text: &str) -> Option<&'z Node> {
        zone.node(&name_to_wire(&name(text)))
    }

    const TEXT: &str = "$TTL 60\n@ IN SOA ns1 h 1 2 3 4 5\n@ IN NS ns1\nns1 IN A 192.0.2.1\n\
        sub IN NS ns.sub\nns.sub IN A 192.0.2.2\na.b.c IN A 192.0.2.3\n*.wild IN A 192.0.2.4\n";

    #[test]
    fn build_adds_empty_non_terminals_and_marks_cuts_and_wildcards() {
        let zone = zone(TEXT);
        for ent in ["b.c.example.com.", "c.example.com."] {
            let n = node(&zone, ent).expect("empty non-terminal");
            assert!(
                n.is_empty_non_terminal() && !n.is_cut && !n.below_cut,
                "{ent}"
            );
        }
        let sub = node(&zone, "sub.example.com.").expect("sub");
        assert!(sub.is_cut && !sub.below_cut);
        let glue = node(&zone, "ns.sub.example.com.").expect("glue");
        assert!(glue.below_cut && !glue.is_cut);
        assert!(
            node(&zone, "wild.example.com.")
                .expect("wild")
                .has_wildcard_child
        );
        assert!(!node(&zone, "example.com.").expect("apex").is_cut);
    }

    #[test]
    fn binding_steered_names_adds_their_ancestors_and_refuses_delegated_ones() {
        let mut zone = zone(TEXT);
        let (deep, star) = (name("x.new.c.example.com."), name("*.steered.example.com."));
        zone.bind_steered(&[
            (&deep, SteeredBinding::new(0)),
            (&star, SteeredBinding::new(1)),
        ])
        .expect("binds");
        assert_eq!(
            node(&zone, "x.new.c.example.com.").and_then(|n| n.steer),
            Some(SteeredBinding::new(0))
        );
        let ent = node(&zone, "new.c.example.com.").expect("new empty non-terminal");
        assert!(ent.is_empty_non_terminal() && !ent.below_cut && !ent.is_cut);
        assert!(
            node(&zone, "steered.example.com.")
                .expect("parent")
                .has_wildcard_child
        );
        assert!(node(&zone, "sub.example.com.").expect("cut").is_cut);
        assert!(node(&zone, "ns.sub.example.com.").expect("glue").below_cut);
        let (at_cut, below_cut) = (name("sub.example.com."), name("y.z.sub.example.com."));
        for steered in [&at_cut, &below_cut] {
            let mut zone = self::zone(TEXT);
            let refused = zone.bind_steered(&[(steered, SteeredBinding::new(0))]);
            assert!(
                matches!(refused, Err(ModelError::SteeredConflict(_, reason)) if reason.contains("delegation")),
                "{steered}: {refused:?}"
            );
        }
    }
}
