//! The zone-difference journal: what changed between two compiled versions of a zone (the
//! records deleted and added, RRSIGs included), and a bounded history of those differences per
//! zone, so an IXFR (RFC 1995) can send the changes since a secondary's serial and a reload can
//! say what it cost (issue 32).
//!
//! Pure: values built from two [`super::model::Zone`]s (with their projected records), no I/O, no clock. Serial order is RFC 1982 serial
//! arithmetic ([`serial_newer`]). A [`Journal`] is a plain value keyed by zone apex; the owner
//! builds the next one and swaps it in.

use std::collections::{BTreeSet, VecDeque};

use rustc_hash::FxHashMap;

use super::model::Node;
use super::transfer::TransferView;
use crate::dns::wire::rtype;

/// One record: its owner (lower-cased wire name) and the bytes after the owner on the wire
/// (type, class, TTL, RDLENGTH, RDATA), as [`super::model::RRset`] encodes them.
pub type Record = (Box<[u8]>, Box<[u8]>);

/// Whether serial `a` is newer than `b` (RFC 1982 section 3.2, SERIAL_BITS = 32). Serials
/// exactly half the space apart are undefined there and are not newer either way.
pub fn serial_newer(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < (1 << 31)
}

/// The difference from one version of a zone to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    pub from_serial: u32,
    pub to_serial: u32,
    /// The SOA records of the two versions (IXFR sends them around each change, RFC 1995 4).
    pub old_soa: Option<Record>,
    pub new_soa: Option<Record>,
    /// Records of the old version not in the new one, SOA excluded, sorted.
    pub deleted: Vec<Record>,
    /// Records of the new version not in the old one, SOA excluded, sorted.
    pub added: Vec<Record>,
}

impl Diff {
    /// The difference from `old` to `new` (same zone), projected records included.
    pub fn between<'a, 'b>(
        old: impl Into<TransferView<'a>>,
        new: impl Into<TransferView<'b>>,
    ) -> Diff {
        let (old, new) = (old.into(), new.into());
        let (old_records, old_soa) = records_of(old);
        let (new_records, new_soa) = records_of(new);
        Diff {
            from_serial: old.zone.serial,
            to_serial: new.zone.serial,
            old_soa,
            new_soa,
            deleted: old_records.difference(&new_records).cloned().collect(),
            added: new_records.difference(&old_records).cloned().collect(),
        }
    }

    /// How many records it changes (deleted plus added, SOA excluded).
    pub fn size(&self) -> usize {
        self.deleted.len() + self.added.len()
    }
}

/// Every record of a zone (RRSIGs, the NSEC3 chain and the projected records included) but
/// the apex SOA, and the apex SOA record.
fn records_of(view: TransferView<'_>) -> (BTreeSet<Record>, Option<Record>) {
    let zone = view.zone;
    let mut records: BTreeSet<Record> = view.projected.iter().cloned().collect();
    let mut soa = None;
    for (owner, node) in &zone.nodes {
        for (rtype, record) in node_records(node, |t| {
            super::transfer::replaced_by_projection(view.projected, owner, t)
        }) {
            let entry = (owner.clone(), Box::<[u8]>::from(record));
            if rtype == rtype::SOA && owner[..] == zone.apex[..] {
                soa = Some(entry);
            } else {
                records.insert(entry);
            }
        }
    }
    if let Some(super::model::Chain::Nsec3(chain)) = zone.denial.as_ref().map(|d| &d.chain) {
        for (owner, set) in chain.records.iter() {
            if super::transfer::replaced_by_projection(view.projected, owner, rtype::NSEC3) {
                continue;
            }
            let sigs = set.rrsig.iter().flat_map(|sig| sig.records());
            for record in set.records().chain(sigs) {
                records.insert((owner.clone(), Box::<[u8]>::from(record)));
            }
        }
    }
    (records, soa)
}

/// The records of a node's sets (but those `replaced` says a projection replaces) and of the
/// RRSIGs over them, with the set's type (RRSIGs carry the type they cover, so an SOA's RRSIG
/// stays in the diff).
fn node_records(node: &Node, replaced: impl Fn(u16) -> bool) -> impl Iterator<Item = (u16, &[u8])> {
    node.rrsets
        .iter()
        .filter(move |set| !replaced(set.rtype))
        .flat_map(|set| {
            let signatures = set.rrsig.iter().flat_map(|sig| sig.records());
            set.records()
                .map(move |r| (set.rtype, r))
                .chain(signatures.map(|r| (rtype::RRSIG, r)))
        })
}

/// How many versions a journal keeps per zone when the config does not say.
pub const DEFAULT_DEPTH: usize = 20;

/// The differences of one zone, oldest first, each following on from the one before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    diffs: VecDeque<Diff>,
}

impl History {
    /// The history with `diff` added and the oldest dropped beyond `depth`. A diff that does
    /// not follow on from the newest (a serial that went backwards, or a gap) starts over.
    pub fn with(&self, diff: Diff, depth: usize) -> History {
        let mut diffs = self.diffs.clone();
        if diffs
            .back()
            .is_some_and(|last| last.to_serial != diff.from_serial)
            || !serial_newer(diff.to_serial, diff.from_serial)
        {
            diffs.clear();
        }
        if serial_newer(diff.to_serial, diff.from_serial) {
            diffs.push_back(diff);
        }
        while diffs.len() > depth {
            diffs.pop_front();
        }
        History { diffs }
    }

    /// The differences that take a secondary at `serial` to the newest version, oldest first;
    /// empty when it is up to date, `None` when the history does not reach back to `serial`
    /// (the answer is then a whole zone, AXFR style).
    pub fn since(&self, serial: u32) -> Option<Vec<&Diff>> {
        if self.diffs.back().map(|d| d.to_serial) == Some(serial) {
            return Some(Vec::new());
        }
        let start = self.diffs.iter().position(|d| d.from_serial == serial)?;
        Some(self.diffs.iter().skip(start).collect())
    }

    /// How many differences are kept.
    pub fn depth(&self) -> usize {
        self.diffs.len()
    }

    /// The serial the oldest difference starts from.
    pub fn oldest_serial(&self) -> Option<u32> {
        self.diffs.front().map(|d| d.from_serial)
    }
}

/// The histories of every zone, keyed by apex (lower-cased wire name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Journal {
    pub depth: usize,
    zones: FxHashMap<Box<[u8]>, History>,
}

impl Journal {
    pub fn new(depth: usize) -> Journal {
        Journal {
            depth,
            zones: FxHashMap::default(),
        }
    }

    /// The journal after a zone was reloaded from `old` to `new`: the difference recorded
    /// when the serial changed, the zone left alone when it did not.
    pub fn after_reload<'a, 'b>(
        &self,
        old: impl Into<TransferView<'a>>,
        new: impl Into<TransferView<'b>>,
    ) -> Journal {
        let (old, new) = (old.into(), new.into());
        let (old_zone, new_zone) = (old.zone, new.zone);
        let mut next = self.clone();
        if old_zone.serial != new_zone.serial {
            let history = self.zones.get(&new_zone.apex).cloned().unwrap_or_default();
            let updated = history.with(Diff::between(old, new), self.depth);
            next.zones.insert(new_zone.apex.clone(), updated);
        }
        next
    }

    /// The journal without the history of the zone with this apex (its next IXFR from an
    /// older serial is answered AXFR style).
    /// The journal with `diff` (a difference applied as such, see `super::difference`)
    /// recorded for the zone with this apex.
    pub fn with_difference(&self, apex: &[u8], diff: Diff) -> Journal {
        let mut next = self.clone();
        let history = self.zones.get(apex).cloned().unwrap_or_default();
        next.zones
            .insert(Box::from(apex), history.with(diff, self.depth));
        next
    }

    pub fn forget(&self, apex: &[u8]) -> Journal {
        let mut next = self.clone();
        next.zones.remove(apex);
        next
    }

    /// The history of the zone with this apex.
    pub fn zone(&self, apex: &[u8]) -> Option<&History> {
        self.zones.get(apex)
    }
}

#[cfg(test)]
mod tests;
