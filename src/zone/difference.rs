//! A zone file edit applied as a difference (issue 32 item 4, "a change costs the change", as
//! Knot's `zonefile-load: difference`): the bytes that changed are found by comparing the file
//! served with the new one (no parsing), widened to whole records, parsed alone, checked, and
//! the changed names laid over the served zone's shared names ([`super::nodes::Nodes`]).
//!
//! Owns the rules for when that is sure to build exactly what a full load of the new file
//! would build. Whenever it is not sure — a directive other than `$TTL`, a name added beside a
//! wildcard or a delegation, a name removed, a steered name, records of one name outside the
//! changed lines, anything the validator refuses — it says why ([`Fallback`]) and the caller
//! builds the zone whole, which then accepts or refuses the file with its own reasons. So
//! this path never refuses a file; it only declines to be the one that loads it.
//!
//! Pure: bytes and zones in, a zone out; no I/O.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use hickory_proto::rr::{Name, RecordType};
use rustc_hash::{FxHashMap, FxHashSet};

use super::journal::{serial_newer, Diff, Record};
use super::model::{name_to_wire, Node, RawRecord, Zone};
use super::parse::{parse_zone_text, SourceRecord};
use crate::dns::wire::rtype;

/// More changed bytes than this (old and new window together) are built whole.
pub const MAX_WINDOW_BYTES: usize = 1 << 20;
/// More changed records than this are built whole.
pub const MAX_CHANGED_RECORDS: usize = 1000;
/// Once a zone carries this many changed names over its base, the next change builds it
/// whole (which compacts it).
pub const MAX_OVERLAY_NODES: usize = 10_000;

/// Why a change is loaded by building the zone whole instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fallback {
    #[error("the file is not valid UTF-8 around the change")]
    NotText,
    #[error("the file has a {0} directive")]
    Directive(String),
    #[error("{0} bytes changed (more than {MAX_WINDOW_BYTES})")]
    TooManyBytes(usize),
    #[error("{0} records changed (more than {MAX_CHANGED_RECORDS})")]
    TooManyRecords(usize),
    #[error("the zone already carries {0} changed names (compacted by a full build)")]
    OverlayFull(usize),
    #[error("the changed lines do not parse alone")]
    Unparsable,
    #[error("the changed lines do not read as what is served (no sure record boundary)")]
    NotServedAsRead,
    #[error("{0} has records outside the changed lines")]
    OwnerOutsideWindow(String),
    #[error("{0} loses its last record (a removed name)")]
    NameRemoved(String),
    #[error("{0}: a {1} record changed (delegations, wildcards and DNSSEC are built whole)")]
    Structural(String, String),
    #[error("{0} is a steered name")]
    Steered(String),
    #[error("the validator finds an error in the changed records")]
    Invalid,
    #[error("the records changed but the SOA serial did not move forward")]
    SerialNotForward,
    #[error("the zone is signed")]
    Signed,
    #[error("the changed records do not compile")]
    Model,
}

/// The changed part of a file: the same start in both versions (a record boundary in the
/// common prefix), and ends at the same distance from each file's end (a record boundary in
/// the common suffix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub old: Range<usize>,
    pub new: Range<usize>,
    /// The `$TTL` line in force at the window's start, if any (in the common prefix).
    pub ttl_line: Option<Range<usize>>,
}

/// What applying a difference built.
pub struct Applied {
    /// The new version: the served one's names with the changed ones laid over them.
    pub zone: Zone,
    /// Records removed plus records added.
    pub records_changed: usize,
    /// The difference, for the IXFR journal.
    pub diff: Diff,
}

/// The lexer state that decides whether a byte offset is a record boundary: parentheses,
/// quotes, comments and escapes (`super::parse::lexer`'s rules, only as far as they matter for
/// where a record ends).
#[derive(Debug, Clone, Copy, Default)]
struct Lex {
    depth: u32,
    quoted: bool,
    comment: bool,
    escaped: bool,
}

impl Lex {
    fn step(&mut self, byte: u8) {
        if self.comment {
            self.comment = byte != b'\n';
            return;
        }
        if self.escaped {
            self.escaped = false;
            return;
        }
        match byte {
            b'\\' => self.escaped = true,
            b'"' => self.quoted = !self.quoted,
            _ if self.quoted => {}
            b';' => self.comment = true,
            b'(' => self.depth += 1,
            b')' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
    }

    fn run(mut self, bytes: &[u8]) -> Lex {
        for &b in bytes {
            self.step(b);
        }
        self
    }

    /// Between records (at a line start: after its newline).
    fn between_records(&self) -> bool {
        self.depth == 0 && !self.quoted && !self.comment && !self.escaped
    }
}

/// A line that starts a record with its own owner (not a continuation, a comment, a blank
/// line or a directive).
fn starts_owner(bytes: &[u8], at: usize) -> bool {
    bytes
        .get(at)
        .is_some_and(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b';' | b'$' | b'(' | b')'))
}

fn line_start(bytes: &[u8], at: usize) -> usize {
    memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |nl| nl + 1)
}

/// The last byte before `end` that can change the lexer state on its own line and after.
fn last_special(bytes: &[u8], end: usize) -> Option<usize> {
    let head = &bytes[..end];
    let a = memchr::memrchr3(b'(', b')', b'"', head);
    let b = memchr::memrchr2(b';', b'\\', head);
    a.max(b)
}

/// The last line start at or before `limit` that begins a record with its own owner. Lexes
/// only up to the last special byte before `limit` (the SOA's parentheses at the top, say):
/// after it, every line start is a record boundary if the lexer is between records there.
fn record_start_before(bytes: &[u8], limit: usize) -> Option<usize> {
    let limit = line_start(bytes, limit);
    let plain_from = match last_special(bytes, limit) {
        None => 0,
        Some(special) => {
            let line_end = memchr::memchr(b'\n', &bytes[special..limit]).map(|i| special + i)?;
            if !Lex::default().run(&bytes[..=line_end]).between_records() {
                return None;
            }
            line_end + 1
        }
    };
    let mut at = limit;
    loop {
        if at < plain_from {
            return None;
        }
        if starts_owner(bytes, at) {
            return Some(at);
        }
        if at == 0 {
            return None;
        }
        at = line_start(bytes, at - 1);
    }
}

/// Where the changed part of `old` → `new` lies, widened to whole records; `Ok(None)` when the
/// files are the same.
pub fn find_window(old: &[u8], new: &[u8]) -> Result<Option<Window>, Fallback> {
    let prefix = common_prefix(old, new);
    if prefix == old.len() && prefix == new.len() {
        return Ok(None);
    }
    let most = old.len().min(new.len()) - prefix;
    let suffix = common_suffix(&old[old.len() - most..], &new[new.len() - most..]);
    check_directives(new)?;
    check_directives(old)?;
    let mut start = record_start_before(new, prefix).ok_or(Fallback::NotServedAsRead)?;
    // The first differing line may start a record in one version only (an owner written
    // where the other inherits it): start a record earlier, common to both.
    while !starts_owner(old, start) {
        let before = start.checked_sub(1).ok_or(Fallback::NotServedAsRead)?;
        start = record_start_before(new, before).ok_or(Fallback::NotServedAsRead)?;
    }
    let (old_end, new_end) = (old.len() - suffix, new.len() - suffix);
    // Both versions lexed from the window start to the end of their change, then on together
    // through the common suffix to the first line that starts a record in both.
    let mut old_lex = Lex::default().run(&old[start..old_end]);
    let mut new_lex = Lex::default().run(&new[start..new_end]);
    let tail = &new[new_end..];
    let mut taken = tail.len();
    for (i, &b) in tail.iter().enumerate() {
        let at_line_start = i == 0 && new.get(new_end.wrapping_sub(1)) == Some(&b'\n')
            || i > 0 && tail[i - 1] == b'\n';
        if at_line_start
            && old_lex.between_records()
            && new_lex.between_records()
            && starts_owner(tail, i)
        {
            taken = i;
            break;
        }
        old_lex.step(b);
        new_lex.step(b);
    }
    if taken == tail.len() && !(old_lex.between_records() && new_lex.between_records()) {
        return Err(Fallback::NotServedAsRead);
    }
    let window = Window {
        old: start..old_end + taken,
        new: start..new_end + taken,
        ttl_line: ttl_line_before(new, start),
    };
    let bytes = window.old.len() + window.new.len();
    if bytes > MAX_WINDOW_BYTES {
        return Err(Fallback::TooManyBytes(bytes));
    }
    Ok(Some(window))
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const CHUNK: usize = 4096;
    let same_chunks = a
        .chunks(CHUNK)
        .zip(b.chunks(CHUNK))
        .take_while(|(x, y)| x == y)
        .count();
    let at = same_chunks * CHUNK;
    let rest = a
        .get(at..)
        .unwrap_or_default()
        .iter()
        .zip(b.get(at..).unwrap_or_default())
        .take_while(|(x, y)| x == y)
        .count();
    (at + rest).min(a.len()).min(b.len())
}

/// How many bytes `a` and `b` (of the same length) end with in common.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    const CHUNK: usize = 4096;
    let same_chunks = a
        .rchunks(CHUNK)
        .zip(b.rchunks(CHUNK))
        .take_while(|(x, y)| x == y)
        .count();
    let at = (same_chunks * CHUNK).min(a.len());
    let rest = a[..a.len() - at]
        .iter()
        .rev()
        .zip(b[..b.len() - at].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    at + rest
}

/// Every `$` at a line start must be `$TTL`: `$ORIGIN` and `$INCLUDE` change how the lines
/// after them read, which the window parse does not follow.
fn check_directives(bytes: &[u8]) -> Result<(), Fallback> {
    for at in memchr::memchr_iter(b'$', bytes) {
        if at > 0 && bytes[at - 1] != b'\n' {
            continue;
        }
        let word: Vec<u8> = bytes[at..]
            .iter()
            .take_while(|b| !b.is_ascii_whitespace())
            .take(16)
            .copied()
            .collect();
        if !word.eq_ignore_ascii_case(b"$TTL") {
            return Err(Fallback::Directive(
                String::from_utf8_lossy(&word).into_owned(),
            ));
        }
    }
    Ok(())
}

/// The last `$TTL` line before `start`.
fn ttl_line_before(bytes: &[u8], start: usize) -> Option<Range<usize>> {
    let head = &bytes[..start];
    let at = memchr::memmem::rfind_iter(head, b"$").find(|&at| at == 0 || head[at - 1] == b'\n')?;
    let end = memchr::memchr(b'\n', &head[at..]).map_or(head.len(), |i| at + i);
    Some(at..end)
}

/// The records of one version's window, parsed as the full file would read them there.
pub fn parse_window(
    bytes: &[u8],
    window: &Range<usize>,
    ttl_line: Option<&Range<usize>>,
    path: &Path,
    origin: &Name,
) -> Result<Vec<SourceRecord>, Fallback> {
    let mut text = String::new();
    if let Some(line) = ttl_line {
        text.push_str(std::str::from_utf8(&bytes[line.clone()]).map_err(|_| Fallback::NotText)?);
        text.push('\n');
    }
    text.push_str(std::str::from_utf8(&bytes[window.clone()]).map_err(|_| Fallback::NotText)?);
    parse_zone_text(&text, path, origin)
        .map(|parsed| parsed.records)
        .map_err(|_| Fallback::Unparsable)
}

/// One record compared across versions: owner (wire), type, TTL, RDATA.
type Key = (Box<[u8]>, u16, u32, Vec<u8>);

fn key_of(record: &SourceRecord) -> Key {
    (
        name_to_wire(&record.name),
        u16::from(record.rtype),
        record.ttl,
        record.rdata.clone(),
    )
}

/// Applies the records of the old window → those of the new window to `served` (the zone
/// the old file built), or says why a full build must do it.
pub fn apply(
    served: &Zone,
    old: &[SourceRecord],
    new: &[SourceRecord],
) -> Result<Applied, Fallback> {
    if served.denial.is_some() {
        return Err(Fallback::Signed);
    }
    let (old_keys, new_keys): (Vec<Key>, Vec<Key>) = (
        old.iter().map(key_of).collect(),
        new.iter().map(key_of).collect(),
    );
    let (old_set, new_set): (FxHashSet<&Key>, FxHashSet<&Key>) =
        (old_keys.iter().collect(), new_keys.iter().collect());
    let removed = old_set.difference(&new_set).count();
    let added = new_set.difference(&old_set).count();
    if removed + added > MAX_CHANGED_RECORDS {
        return Err(Fallback::TooManyRecords(removed + added));
    }
    let overlay = served.nodes.overlay_len();
    if overlay >= MAX_OVERLAY_NODES {
        return Err(Fallback::OverlayFull(overlay));
    }
    let owners = owners_changed(&old_set, &new_set);
    for (owner, _) in &owners {
        check_old_records(served, owner, &old_keys)?;
    }
    validate_changed(served, new)?;
    let mut changed: Vec<(Box<[u8]>, Node)> = Vec::new();
    for (owner, name) in &owners {
        changed.push((owner.clone(), new_node(served, owner, name, &new_keys)?));
    }
    let ancestors = missing_ancestors(served, &changed);
    changed.extend(ancestors);
    let diff_records = journal_records(served, &changed);
    let zone = served
        .with_nodes(served.nodes.with_changes(changed))
        .ok_or(Fallback::Model)?;
    if removed + added > 0 && !serial_newer(zone.serial, served.serial) {
        return Err(Fallback::SerialNotForward);
    }
    let diff = Diff {
        from_serial: served.serial,
        to_serial: zone.serial,
        old_soa: soa_record(served),
        new_soa: soa_record(&zone),
        deleted: diff_records.0,
        added: diff_records.1,
    };
    Ok(Applied {
        zone,
        records_changed: removed + added,
        diff,
    })
}

/// The owners whose records differ, with a display name each (in first-seen order).
fn owners_changed(old: &FxHashSet<&Key>, new: &FxHashSet<&Key>) -> Vec<(Box<[u8]>, String)> {
    let mut seen: FxHashSet<&[u8]> = FxHashSet::default();
    let mut owners: Vec<(Box<[u8]>, String)> = Vec::new();
    for key in old.difference(new).chain(new.difference(old)) {
        if seen.insert(&key.0) {
            owners.push((key.0.clone(), crate::dns::wire::display_wire_name(&key.0)));
        }
    }
    owners.sort();
    owners
}

/// Every record the served zone holds at `owner` must be one of the old window's (and each of
/// those must be served): then the window holds the owner whole, and the state it was parsed
/// with was the file's.
fn check_old_records(served: &Zone, owner: &[u8], old: &[Key]) -> Result<(), Fallback> {
    let shown = || crate::dns::wire::display_wire_name(owner);
    let node = served.nodes.get(owner);
    if node.is_some_and(|n| n.steer.is_some()) {
        return Err(Fallback::Steered(shown()));
    }
    let mut in_window: Vec<(u16, &[u8])> = old
        .iter()
        .filter(|k| *k.0 == *owner)
        .map(|k| (k.1, &k.3[..]))
        .collect();
    in_window.sort_unstable();
    in_window.dedup();
    let served_count: usize = node.map_or(0, |n| n.rrsets.iter().map(|s| s.rdatas().count()).sum());
    if served_count != in_window.len() {
        return Err(Fallback::OwnerOutsideWindow(shown()));
    }
    for (rt, rdata) in in_window {
        let found = node
            .and_then(|n| n.rrset(rt))
            .is_some_and(|set| set.rdatas().any(|r| r == rdata));
        if !found {
            return Err(Fallback::NotServedAsRead);
        }
    }
    Ok(())
}

/// The validator's errors on the new window's records (with the served SOA when the window
/// has none, so that the SOA checks see one): any error is a full build's to report.
fn validate_changed(served: &Zone, new: &[SourceRecord]) -> Result<(), Fallback> {
    let mut records = new.to_vec();
    let has_soa = new.iter().any(|r| r.rtype == RecordType::SOA);
    if let (false, Some(soa)) = (has_soa, served.soa()) {
        let file = Arc::new(std::path::PathBuf::from("served"));
        records.extend(soa.rdatas().map(|rdata| SourceRecord {
            name: served.origin.clone(),
            rtype: RecordType::SOA,
            ttl: soa.ttl,
            rdata: rdata.to_vec(),
            file: file.clone(),
            line: 0,
        }));
    }
    let zone = super::parse::ParsedZone {
        origin: served.origin.clone(),
        path: std::path::PathBuf::from("window"),
        records,
        sources: Vec::new(),
        text: None,
    };
    if super::validate::validate(&zone)
        .iter()
        .any(|p| p.is_error())
    {
        return Err(Fallback::Invalid);
    }
    Ok(())
}

/// Types whose change moves zone cuts, wildcard flags or DNSSEC data: built whole.
fn structural(rt: u16, at_apex: bool) -> bool {
    /// RFC 6672: a DNAME redirects everything below its owner.
    const DNAME: u16 = 39;
    match rt {
        rtype::NS | rtype::SOA => !at_apex,
        DNAME | rtype::DS | rtype::RRSIG | rtype::NSEC | rtype::NSEC3 | rtype::DNSKEY => true,
        rtype::NSEC3PARAM | rtype::CDS | rtype::CDNSKEY => true,
        _ => false,
    }
}

/// The node `owner` gets: built from the new window's records exactly as a full build would
/// (records of one type in file order), with the served node's flags (no cut moves).
fn new_node(served: &Zone, owner: &[u8], name: &str, new: &[Key]) -> Result<Node, Fallback> {
    let at_apex = *owner == *served.apex;
    let old = served.nodes.get(owner);
    let mut records: Vec<RawRecord<'_>> = new
        .iter()
        .filter(|k| *k.0 == *owner)
        .map(|k| (k.1, k.2, &k.3[..]))
        .collect();
    if records.is_empty() {
        return Err(Fallback::NameRemoved(name.to_string()));
    }
    let old_types = old
        .into_iter()
        .flat_map(|n| n.rrsets.iter().map(|s| s.rtype));
    if let Some(rt) = records
        .iter()
        .map(|r| r.0)
        .chain(old_types)
        .find(|&rt| structural(rt, at_apex))
    {
        return Err(Fallback::Structural(name.to_string(), type_name(rt)));
    }
    if old.is_none() && owner.starts_with(b"\x01*") {
        return Err(Fallback::Structural(name.to_string(), "wildcard".into()));
    }
    records.sort_by_key(|r| r.0);
    let mut node = Node::from_records(owner, &records).map_err(|_| Fallback::Model)?;
    match old {
        Some(old) => {
            node.is_cut = old.is_cut;
            node.below_cut = old.below_cut;
            node.has_wildcard_child = old.has_wildcard_child;
        }
        None => node.below_cut = served.has_cut_above(owner),
    }
    Ok(node)
}

fn type_name(rt: u16) -> String {
    super::parse::type_text(RecordType::from(rt))
}

/// Empty non-terminals for the ancestors of new names that have no node yet.
fn missing_ancestors(served: &Zone, changed: &[(Box<[u8]>, Node)]) -> Vec<(Box<[u8]>, Node)> {
    let mut missing: FxHashMap<Box<[u8]>, Node> = FxHashMap::default();
    let owners: FxHashSet<&[u8]> = changed.iter().map(|(o, _)| &o[..]).collect();
    for (owner, _) in changed {
        let depth = super::group::label_count(owner).saturating_sub(served.apex_labels);
        for ancestor in super::group::ancestors(owner).skip(1).take(depth) {
            if served.nodes.contains_key(ancestor) || owners.contains(ancestor) {
                break;
            }
            let node = Node {
                below_cut: served.has_cut_above(ancestor),
                ..Node::default()
            };
            missing.entry(ancestor.into()).or_insert(node);
        }
    }
    missing.into_iter().collect()
}

/// The records deleted and added (SOA excluded, sorted), as the journal keeps them.
fn journal_records(served: &Zone, changed: &[(Box<[u8]>, Node)]) -> (Vec<Record>, Vec<Record>) {
    let records_of = |owner: &[u8], node: Option<&Node>| -> Vec<Record> {
        node.into_iter()
            .flat_map(|n| n.rrsets.iter())
            .filter(|set| !(set.rtype == rtype::SOA && *owner == *served.apex))
            .flat_map(|set| set.records())
            .map(|r| (Box::from(owner), Box::from(r)))
            .collect()
    };
    let (mut deleted, mut added) = (Vec::new(), Vec::new());
    for (owner, node) in changed {
        let before = records_of(owner, served.nodes.get(owner));
        let after = records_of(owner, Some(node));
        deleted.extend(before.iter().filter(|r| !after.contains(r)).cloned());
        added.extend(after.iter().filter(|r| !before.contains(r)).cloned());
    }
    deleted.sort();
    added.sort();
    (deleted, added)
}

fn soa_record(zone: &Zone) -> Option<Record> {
    let record = zone.soa()?.records().next()?;
    Some((zone.apex.clone(), Box::from(record)))
}

#[cfg(test)]
mod tests;
