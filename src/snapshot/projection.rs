//! The static projection of steered names into outgoing zone transfers (issue 33 item 3), and
//! the SOA serial a zone is served and transferred at because of it.
//!
//! Owns, per zone: the projected records (each steered name with `transfer = "default"` and an
//! always-serve answer, [`CompiledPolicies::static_answer`], as plain A/AAAA or CNAME records
//! at the name, a wildcard name as wildcard records), how many names were left out, and the
//! projection revision. At a projected name the projection replaces the zone file's own A and
//! AAAA records (a base the policy takes over when serving) in what is transferred. Built
//! when a snapshot is built, off the serving path; the serving path
//! never reads it (a transfer and the journal do, through [`crate::zone::transfer::TransferView`]).
//!
//! The transfer serial. A projection changes with the control knobs (a weight change moves the
//! highest-weight always-serve endpoint) while the zone file, and its serial, stay as they
//! are; secondaries only transfer a zone again when its SOA serial moves forward (RFC 1982).
//! So the serial a zone is served and transferred at is
//!
//! ```text
//! transfer serial = zone file serial + projection revision   (mod 2^32)
//! ```
//!
//! where the revision starts at 0 (1 for a zone that has projected records the first time it
//! is seen: a secondary may hold the same file serial without them) and grows by one each time
//! the projected records differ from those of the version before. Both terms only grow, so
//! the sum moves forward in RFC 1982 order as long as the file serial and the revision move
//! less than 2^31 in all between two transfers; a zone without projected records keeps its
//! file serial. The revision is carried from snapshot to snapshot and kept in the state
//! directory ([`STATE_FILE`]) so a restart does not send the serial back below what the
//! secondaries hold. The zone's apex SOA is rewritten to the transfer serial before it is
//! signed and compiled ([`crate::zone::model::Zone::set_serial`]), so an SOA query, NOTIFY,
//! IXFR and AXFR all say the same serial.
//!
//! Signed zones. A signed zone's projection is signed too, after the zone
//! ([`crate::dnssec::transfer`]): an RRSIG over each projected RRset, and at every steered
//! name the zone's NSEC (or NSEC3) record re-typed to what the transfer carries there (the
//! served one lists every type the policy can answer with), signed. Those records are the
//! zone's [`ZoneProjection::transferred`] records; the serving path keeps its own. The
//! signatures change when the zone is signed again (a new validity window, a key event)
//! while the file serial does not, so a signed zone's digest also covers its signing
//! stamp (window and keys, [`ZoneRecords::signing`]): a re-sign is a new revision, the serial
//! moves forward and the NOTIFY goes out, and secondaries do not keep expiring signatures.

use std::collections::BTreeMap;
use std::path::Path;

use hickory_proto::rr::Name;
use sha2::{Digest, Sha256};

use crate::dns::wire::{class, rtype};
use crate::policy::{CompiledPolicies, Target, TransferProjection};
use crate::zone::journal::Record;
use crate::zone::model::{name_to_wire, Zone};

/// The file in the state directory that keeps each zone's projection revision.
pub const STATE_FILE: &str = "transfer-projection";

/// One zone's projection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneProjection {
    /// The zone (presentation form, lower case, absolute).
    pub zone: String,
    /// Its apex (lower-cased wire name).
    pub apex: Box<[u8]>,
    /// The projected records, sorted (unsigned: what the numbering compares).
    pub records: Vec<Record>,
    /// What a transfer carries beside (or instead of) the zone's own records, sorted: the
    /// projected records and, in a signed zone, their RRSIGs and the re-typed denial records
    /// of the steered names ([`crate::dnssec::transfer`]).
    pub transferred: Vec<Record>,
    /// The signing stamp the digest covers (empty for an unsigned zone).
    pub signing: Box<[u8]>,
    /// Steered names in the zone with a projection.
    pub projected: usize,
    /// Steered names in the zone left out: `transfer = "omit"`, nothing always served, or a
    /// CNAME beside other data.
    pub omitted: usize,
    /// SHA-256 of the records, to tell one projection from the next.
    pub digest: [u8; 32],
    /// The serial of the zone file.
    pub file_serial: u32,
    /// The projection revision (see the module documentation).
    pub revision: u32,
}

impl ZoneProjection {
    /// The serial the zone is served and transferred at.
    pub fn transfer_serial(&self) -> u32 {
        self.file_serial.wrapping_add(self.revision)
    }
}

/// The projections of every zone of a snapshot (zones without steered names included: they
/// project nothing and keep their file serial).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Projections {
    zones: Vec<ZoneProjection>,
    /// The catalog zone's numbering (its records are the member PTRs), when one is produced
    /// ([`super::catalog`]).
    pub catalog: Option<ZoneProjection>,
}

/// What a zone's projection was, to number the next one: its digest and revision.
pub type Remembered = BTreeMap<String, ([u8; 32], u32)>;

impl Projections {
    /// The projection of the zone with this apex.
    pub fn zone(&self, apex: &[u8]) -> Option<&ZoneProjection> {
        self.zones.iter().find(|z| &z.apex[..] == apex)
    }

    /// What a transfer of the zone with this apex carries beside its own records (none when
    /// it has no projection): [`ZoneProjection::transferred`].
    pub fn records(&self, apex: &[u8]) -> &[Record] {
        self.zone(apex).map_or(&[], |z| &z.transferred[..])
    }

    /// The projections, to sign those of signed zones ([`crate::dnssec::transfer`]).
    pub fn zones_mut(&mut self) -> &mut [ZoneProjection] {
        &mut self.zones
    }

    pub fn zones(&self) -> &[ZoneProjection] {
        &self.zones
    }

    pub fn is_empty(&self) -> bool {
        self.zones.is_empty() && self.catalog.is_none()
    }

    /// Each zone's digest and revision, to number the projections of the next load.
    pub fn remembered(&self) -> Remembered {
        self.all()
            .map(|z| (z.zone.clone(), (z.digest, z.revision)))
            .collect()
    }

    /// The zones' projections and the catalog's numbering.
    fn all(&self) -> impl Iterator<Item = &ZoneProjection> {
        self.zones.iter().chain(&self.catalog)
    }

    /// Whether `records` (one per zone, in the order of `self`'s zones, as [`project`] builds
    /// them for the same zones) are what these projections hold.
    /// The catalog zone, produced here, is not among them and is passed over in `others`.
    pub fn same_records(&self, others: &[ZoneRecords]) -> bool {
        let not_catalog = |o: &&ZoneRecords| self.catalog.as_ref().is_none_or(|c| c.apex != o.apex);
        let others: Vec<&ZoneRecords> = others.iter().filter(not_catalog).collect();
        self.zones.len() == others.len()
            && self
                .zones
                .iter()
                .zip(others)
                .all(|(z, o)| z.apex == o.apex && z.records == o.records && z.signing == o.signing)
    }
}

/// One zone's projected records before they are numbered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneRecords {
    pub zone: String,
    pub apex: Box<[u8]>,
    pub records: Vec<Record>,
    /// A signed zone's signing stamp (its signature window and keys, see the module
    /// documentation); empty for an unsigned zone.
    pub signing: Box<[u8]>,
    pub projected: usize,
    pub omitted: usize,
}

/// The projected records of every zone of `zones` (in their order) under `policies`;
/// `signing` gives a signed zone's signing stamp (`None`: unsigned).
pub fn project(
    policies: Option<&CompiledPolicies>,
    zones: &[Zone],
    signing: &dyn Fn(&Name) -> Option<Box<[u8]>>,
) -> Vec<ZoneRecords> {
    let mut out: Vec<ZoneRecords> = zones
        .iter()
        .map(|z| ZoneRecords {
            zone: z.origin.to_string().to_ascii_lowercase(),
            apex: z.apex.clone(),
            records: Vec::new(),
            signing: signing(&z.origin).unwrap_or_default(),
            projected: 0,
            omitted: 0,
        })
        .collect();
    let Some(policies) = policies else {
        return out;
    };
    for steered in policies.steered() {
        let Some(at) = owning_zone(zones, &steered.name) else {
            continue;
        };
        let zone = &zones[at];
        let records = (steered.transfer == TransferProjection::Default)
            .then(|| policies.static_answer(steered.root))
            .flatten()
            .and_then(|answer| {
                let owner = name_to_wire(&steered.name);
                records_for(zone, &owner, answer.target, answer.ttl)
            });
        let entry = &mut out[at];
        match records {
            Some(records) => {
                entry.records.extend(records);
                entry.projected += 1;
            }
            None => entry.omitted += 1,
        }
    }
    for entry in &mut out {
        entry.records.sort();
        entry.records.dedup();
    }
    out
}

/// The zone a steered name is bound into: the one with the longest origin above it.
fn owning_zone(zones: &[Zone], name: &Name) -> Option<usize> {
    zones
        .iter()
        .enumerate()
        .filter(|(_, z)| z.origin.zone_of(name))
        .max_by_key(|(_, z)| z.apex_labels)
        .map(|(i, _)| i)
}

/// The records projecting `target` at `owner`; `None` for a CNAME where the zone has other
/// data at the name than the A/AAAA the projection replaces (a CNAME must stand alone, RFC
/// 1034 3.6.2), or nothing to answer.
fn records_for(zone: &Zone, owner: &[u8], target: Target<'_>, ttl: u32) -> Option<Vec<Record>> {
    let record = |rtype: u16, rdata: &[u8]| -> Option<Record> {
        let mut bytes = Vec::with_capacity(10 + rdata.len());
        bytes.extend_from_slice(&rtype.to_be_bytes());
        bytes.extend_from_slice(&class::IN.to_be_bytes());
        bytes.extend_from_slice(&ttl.to_be_bytes());
        bytes.extend_from_slice(&u16::try_from(rdata.len()).ok()?.to_be_bytes());
        bytes.extend_from_slice(rdata);
        Some((Box::from(owner), bytes.into_boxed_slice()))
    };
    let records: Option<Vec<Record>> = match target {
        Target::Addresses { v4, v6 } => v4
            .iter()
            .map(|a| record(rtype::A, &a.octets()))
            .chain(v6.iter().map(|a| record(rtype::AAAA, &a.octets())))
            .collect(),
        Target::Cname { wire, .. } => {
            let has_data = zone.nodes.get(owner).is_some_and(|n| {
                n.rrsets
                    .iter()
                    .any(|set| !matches!(set.rtype, rtype::A | rtype::AAAA))
            });
            if has_data {
                return None;
            }
            record(rtype::CNAME, wire).map(|r| vec![r])
        }
    };
    records.filter(|r| !r.is_empty())
}

/// Numbers `records` after `remembered` (the projections of the version before, or of the
/// state file at start) for zones whose file serials are `file_serials` (same order).
pub fn number(
    records: Vec<ZoneRecords>,
    file_serials: &[u32],
    remembered: &Remembered,
) -> Projections {
    let zones = records
        .into_iter()
        .zip(file_serials)
        .map(|(r, &file_serial)| {
            let digest = digest_of(&r.records, &r.signing);
            let revision = match remembered.get(&r.zone) {
                Some((before, revision)) if *before == digest => *revision,
                Some((_, revision)) => revision.wrapping_add(1),
                None => u32::from(!r.records.is_empty()),
            };
            ZoneProjection {
                zone: r.zone,
                apex: r.apex,
                transferred: r.records.clone(),
                records: r.records,
                signing: r.signing,
                projected: r.projected,
                omitted: r.omitted,
                digest,
                file_serial,
                revision,
            }
        })
        .collect();
    Projections {
        zones,
        catalog: None,
    }
}

fn digest_of(records: &[Record], signing: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    if !signing.is_empty() {
        hash.update(b"signed");
        hash.update(signing);
    }
    for (owner, record) in records {
        for part in [owner, record] {
            hash.update((part.len() as u32).to_be_bytes());
            hash.update(part);
        }
    }
    hash.finalize().into()
}

/// Rewrites the SOA serial of every zone whose projection moves it off its file serial.
pub fn apply_serials(zones: &mut [Zone], projections: &Projections) {
    for zone in zones {
        if let Some(p) = projections.zone(&zone.apex) {
            if p.transfer_serial() != zone.serial {
                zone.set_serial(p.transfer_serial());
            }
        }
    }
}

/// The revisions kept in `dir` (empty when there is no file or it cannot be read: every zone
/// is then numbered as seen for the first time).
pub fn read_state(dir: &Path) -> Remembered {
    let Ok(text) = crate::files::read_text_limited(&dir.join(STATE_FILE), 1 << 20) else {
        return Remembered::new();
    };
    parse_state(&text)
}

/// The revisions and digests of a state text ([`state_text`]); lines that do not parse are
/// left out (they number as new, which only moves a serial forward).
pub fn parse_state(text: &str) -> Remembered {
    text.lines().filter_map(parse_state_line).collect()
}

/// `<zone> <revision> <digest hex>`.
fn parse_state_line(line: &str) -> Option<(String, ([u8; 32], u32))> {
    let mut words = line.split_whitespace();
    let zone = words.next()?.to_string();
    let revision = words.next()?.parse().ok()?;
    let hex = words.next()?;
    let mut digest = [0u8; 32];
    if hex.len() != 64 {
        return None;
    }
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some((zone, (digest, revision)))
}

/// Keeps the revisions of `projections` in `dir` (written to a temporary file, then renamed).
pub fn write_state(dir: &Path, projections: &Projections) -> std::io::Result<()> {
    let text = state_text(projections);
    std::fs::create_dir_all(dir)?;
    let temporary = dir.join(format!("{STATE_FILE}.tmp"));
    std::fs::write(&temporary, text)?;
    std::fs::rename(temporary, dir.join(STATE_FILE))
}

/// What [`write_state`] writes: one `<zone> <revision> <digest hex>` line per zone. The zone
/// cache keeps the same text, to be used only while the state directory still says it.
pub fn state_text(projections: &Projections) -> String {
    let mut text = String::new();
    for z in projections.all() {
        let hex: String = z.digest.iter().map(|b| format!("{b:02x}")).collect();
        text.push_str(&format!("{} {} {hex}\n", z.zone, z.revision));
    }
    text
}

#[cfg(test)]
mod tests;
