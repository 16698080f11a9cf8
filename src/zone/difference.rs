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
    #[error("the changed lines do not read as what is served")]
    NotServedAsRead,
    #[error("no sure record boundary around the change")]
    NoBoundary,
    #[error("more than {MAX_REGIONS} separate changes")]
    TooManyRegions,
    #[error("no $TTL before the change (a record without a TTL would take the one before it)")]
    NoTtl,
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
    /// Records removed and added (the SOA's included).
    pub removed: usize,
    pub added: usize,
    /// Names whose records changed (the apex's SOA included).
    pub names_changed: usize,
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

/// The last line start at or before `limit` that begins a record with its own owner.
fn record_start_before(bytes: &[u8], limit: usize) -> Option<usize> {
    let limit = line_start(bytes, limit);
    plain_record_start(bytes, limit).or_else(|| lexed_record_start(bytes, limit))
}

/// [`record_start_before`] lexing only up to the last special byte before `limit` (the SOA's
/// parentheses at the top, say): after it, every line start is a record boundary if the
/// lexer is between records there. `None`: not found that way.
fn plain_record_start(bytes: &[u8], limit: usize) -> Option<usize> {
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
        at = line_start(bytes, at.checked_sub(1)?);
    }
}

/// [`record_start_before`] lexing every byte before `limit`.
fn lexed_record_start(bytes: &[u8], limit: usize) -> Option<usize> {
    let (mut lex, mut found, mut line_begins) = (Lex::default(), None, true);
    for (at, &byte) in bytes.iter().enumerate().take(limit + 1) {
        if line_begins && lex.between_records() && starts_owner(bytes, at) {
            found = Some(at);
        }
        lex.step(byte);
        line_begins = byte == b'\n';
    }
    found
}

/// At most this many separate changes in one file (more are built whole).
const MAX_REGIONS: usize = 64;
/// How far past a difference the two versions are searched for agreeing again, and by how
/// many bytes they may be shifted against each other then.
const RESYNC_SPAN: usize = 4096;
const RESYNC_SHIFT: usize = 64;
/// How many bytes must agree for the versions to count as agreeing again.
const ANCHOR: usize = 32;

/// One changed stretch: these bytes of the old version became those of the new one; the
/// bytes between two stretches are the same in both.
type Region = (Range<usize>, Range<usize>);

/// The changed stretches of `old` → `new`, in order (the SOA serial at the top and a record
/// further down are two). Any split is a correct edit script: the bytes between stretches
/// are equal, and the windows built on them are checked for record boundaries in both.
fn change_regions(old: &[u8], new: &[u8]) -> Option<Vec<Region>> {
    let (mut o, mut n, mut regions) = (0, 0, Vec::new());
    loop {
        let same = common_prefix(&old[o..], &new[n..]);
        (o, n) = (o + same, n + same);
        if o == old.len() && n == new.len() {
            return Some(regions);
        }
        if regions.len() == MAX_REGIONS {
            return None;
        }
        match resync(old, new, o, n) {
            Some((old_len, new_len)) => {
                regions.push((o..o + old_len, n..n + new_len));
                (o, n) = (o + old_len, n + new_len);
            }
            None => {
                let most = (old.len() - o).min(new.len() - n);
                let tail = common_suffix(&old[old.len() - most..], &new[new.len() - most..]);
                regions.push((o..old.len() - tail, n..new.len() - tail));
                return Some(regions);
            }
        }
    }
}

/// The shortest change at (`o`, `n`) after which the versions agree again for [`ANCHOR`]
/// bytes: its length in the old and in the new version.
fn resync(old: &[u8], new: &[u8], o: usize, n: usize) -> Option<(usize, usize)> {
    let agree = |a: usize, b: usize| match (old.get(a..a + ANCHOR), new.get(b..b + ANCHOR)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    };
    for k in 0..RESYNC_SPAN {
        for shift in 0..RESYNC_SHIFT {
            if k + shift == 0 {
                continue;
            }
            if agree(o + k, n + k + shift) {
                return Some((k, k + shift));
            }
            if agree(o + k + shift, n + k) {
                return Some((k + shift, k));
            }
        }
    }
    None
}

/// Where the changes of `old` → `new` lie, each widened to whole records (changes whose
/// records touch share a window); empty when the files are the same. `origin` is the
/// zone's, absolute (`example.com.`).
pub fn find_windows(old: &[u8], new: &[u8], origin: &str) -> Result<Vec<Window>, Fallback> {
    let regions = change_regions(old, new).ok_or(Fallback::TooManyRegions)?;
    if regions.is_empty() {
        return Ok(Vec::new());
    }
    check_directives(new, origin)?;
    check_directives(old, origin)?;
    let mut windows: Vec<Window> = Vec::new();
    let mut next = 0;
    while next < regions.len() {
        let (old_region, new_region) = &regions[next];
        let mut start = record_start_before(new, new_region.start).ok_or(Fallback::NoBoundary)?;
        // The first differing line may start a record in one version only (an owner written
        // where the other inherits it): start a record earlier, common to both. Reaching
        // back into the window before joins it.
        let overlaps =
            |windows: &[Window], at: usize| windows.last().is_some_and(|w| at < w.new.end);
        let old_at = |at: usize| (at + old_region.start).checked_sub(new_region.start);
        while !overlaps(&windows, start) {
            let old_start = old_at(start).ok_or(Fallback::NoBoundary)?;
            if starts_owner(old, old_start) {
                break;
            }
            let before = start.checked_sub(1).ok_or(Fallback::NoBoundary)?;
            start = record_start_before(new, before).ok_or(Fallback::NoBoundary)?;
        }
        let (old_start, new_start) = match windows.last() {
            Some(w) if overlaps(&windows, start) => (w.old.start, w.new.start),
            _ => (old_at(start).ok_or(Fallback::NoBoundary)?, start),
        };
        if overlaps(&windows, start) {
            windows.pop();
        }
        let (old_end, new_end, after) = window_end(old, new, &regions, next, old_start, new_start)?;
        windows.push(Window {
            old: old_start..old_end,
            new: new_start..new_end,
            ttl_line: ttl_line_before(new, new_start),
        });
        next = after;
    }
    check_windows(old, new, &windows)?;
    Ok(windows)
}

/// The end of the window starting at (`old_start`, `new_start`) and holding region `first`:
/// both versions lexed from the start through the region, then on together through the
/// equal bytes after it to the first line that starts a record in both (taking in the next
/// region when they reach it first). Returns the ends and the index of the next region.
fn window_end(
    old: &[u8],
    new: &[u8],
    regions: &[Region],
    first: usize,
    old_start: usize,
    new_start: usize,
) -> Result<(usize, usize, usize), Fallback> {
    let (old_region, new_region) = &regions[first];
    let mut old_lex = Lex::default().run(&old[old_start..old_region.end]);
    let mut new_lex = Lex::default().run(&new[new_start..new_region.end]);
    let mut at = first;
    loop {
        let (old_region, new_region) = &regions[at];
        let equal_end = regions.get(at + 1).map_or(new.len(), |(_, n)| n.start);
        let shift = |p: usize| p + old_region.end - new_region.end;
        for p in new_region.end..equal_end {
            let line_begins = p > 0 && new[p - 1] == b'\n' && old[shift(p) - 1] == b'\n';
            if line_begins
                && old_lex.between_records()
                && new_lex.between_records()
                && starts_owner(new, p)
            {
                return Ok((shift(p), p, at + 1));
            }
            old_lex.step(new[p]);
            new_lex.step(new[p]);
        }
        match regions.get(at + 1) {
            None if old_lex.between_records() && new_lex.between_records() => {
                return Ok((old.len(), new.len(), at + 1))
            }
            None => return Err(Fallback::NoBoundary),
            Some((next_old, next_new)) => {
                old_lex = old_lex.run(&old[next_old.clone()]);
                new_lex = new_lex.run(&new[next_new.clone()]);
                at += 1;
            }
        }
    }
}

/// The windows together are small, hold no directive, and follow a `$TTL` (without one, a
/// record without a TTL takes the one before it, which may lie in a window).
fn check_windows(old: &[u8], new: &[u8], windows: &[Window]) -> Result<(), Fallback> {
    let bytes: usize = windows.iter().map(|w| w.old.len() + w.new.len()).sum();
    if bytes > MAX_WINDOW_BYTES {
        return Err(Fallback::TooManyBytes(bytes));
    }
    for w in windows {
        let directive = |bytes: &[u8]| {
            bytes.first() == Some(&b'$') || memchr::memmem::find(bytes, b"\n$").is_some()
        };
        if directive(&old[w.old.clone()]) || directive(&new[w.new.clone()]) {
            return Err(Fallback::Directive(
                "a directive among the changed lines".into(),
            ));
        }
        if w.ttl_line.is_none() {
            return Err(Fallback::NoTtl);
        }
    }
    Ok(())
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

/// Every `$` at a line start must be `$TTL`, or `$ORIGIN` naming the zone's own origin (as
/// many files begin): another `$ORIGIN` or an `$INCLUDE` changes how the lines after it read,
/// which the window parse does not follow.
fn check_directives(bytes: &[u8], origin: &str) -> Result<(), Fallback> {
    for at in memchr::memchr_iter(b'$', bytes) {
        if at > 0 && bytes[at - 1] != b'\n' {
            continue;
        }
        let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i);
        let line = bytes[at..end]
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default();
        let mut words = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|w| !w.is_empty());
        let word = words.next().unwrap_or_default();
        let argument: &[u8] = words.next().unwrap_or_default();
        let own_origin = word.eq_ignore_ascii_case(b"$ORIGIN")
            && argument.eq_ignore_ascii_case(origin.as_bytes())
            && words.next().is_none();
        if !word.eq_ignore_ascii_case(b"$TTL") && !own_origin {
            let shown: String = String::from_utf8_lossy(word).chars().take(16).collect();
            return Err(Fallback::Directive(shown));
        }
    }
    Ok(())
}

/// The last `$TTL` line before `start`.
fn ttl_line_before(bytes: &[u8], start: usize) -> Option<Range<usize>> {
    let head = &bytes[..start];
    let at = memchr::memmem::rfind_iter(head, b"$")
        .filter(|&at| at == 0 || head[at - 1] == b'\n')
        .find(|&at| {
            head[at..]
                .get(..4)
                .is_some_and(|w| w.eq_ignore_ascii_case(b"$TTL"))
        })?;
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
    let text = |range: &Range<usize>| {
        bytes
            .get(range.clone())
            .and_then(|b| std::str::from_utf8(b).ok())
            .ok_or(Fallback::NotText)
    };
    let ttl = ttl_line.map(text).transpose()?;
    parse_text(ttl, text(window)?, path, origin)
}

/// [`parse_window`] of lines already cut out: `ttl_line` (the `$TTL` in force) then `text`.
pub fn parse_text(
    ttl_line: Option<&str>,
    text: &str,
    path: &Path,
    origin: &Name,
) -> Result<Vec<SourceRecord>, Fallback> {
    let mut whole = String::with_capacity(text.len() + 32);
    if let Some(line) = ttl_line {
        whole.push_str(line);
        whole.push('\n');
    }
    whole.push_str(text);
    parse_zone_text(&whole, path, origin)
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

/// Applies the records of the old windows → those of the new windows to `served` (the zone
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
    let owners = owners_changed(&old_set, &new_set, old.iter().chain(new));
    let mut changed: Vec<(Box<[u8]>, Node)> = Vec::new();
    let mut records: Vec<SourceRecord> = Vec::new();
    for owner in &owners {
        let touched = touched_types(&owner.wire, &old_keys, &new_keys);
        check_old_records(served, owner, &old_keys, &touched)?;
        let node = new_node(served, owner, &new_keys, &touched)?;
        records.extend(node_records(owner, &node, new));
        changed.push((owner.wire.clone(), node));
    }
    validate_changed(served, records)?;
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
        removed,
        added,
        names_changed: owners.len(),
        diff,
    })
}

/// A name whose records differ between the windows.
struct Owner {
    wire: Box<[u8]>,
    name: Name,
}

impl Owner {
    fn shown(&self) -> String {
        self.name.to_string()
    }
}

/// The owners whose records differ (sorted by wire name), each with its name as written
/// in `records` (the windows').
fn owners_changed<'r>(
    old: &FxHashSet<&Key>,
    new: &FxHashSet<&Key>,
    records: impl Iterator<Item = &'r SourceRecord>,
) -> Vec<Owner> {
    let names: FxHashMap<Box<[u8]>, &Name> =
        records.map(|r| (name_to_wire(&r.name), &r.name)).collect();
    let mut seen: FxHashSet<&[u8]> = FxHashSet::default();
    let mut owners: Vec<Owner> = Vec::new();
    for key in old.difference(new).chain(new.difference(old)) {
        let Some(&name) = names.get(&key.0) else {
            continue;
        };
        if seen.insert(&key.0) {
            owners.push(Owner {
                wire: key.0.clone(),
                name: name.clone(),
            });
        }
    }
    owners.sort_by(|a, b| a.wire.cmp(&b.wire));
    owners
}

/// The types of `owner` with records in either window: the sets rebuilt from the new one.
fn touched_types(owner: &[u8], old: &[Key], new: &[Key]) -> Vec<u16> {
    let mut types: Vec<u16> = old
        .iter()
        .chain(new)
        .filter(|k| *k.0 == *owner)
        .map(|k| k.1)
        .collect();
    types.sort_unstable();
    types.dedup();
    types
}

/// Every record the served zone holds at `owner` of a touched type must be one of the old
/// window's (and each of those must be served): then the window holds those sets whole, and
/// the state it was parsed with was the file's.
fn check_old_records(
    served: &Zone,
    owner: &Owner,
    old: &[Key],
    touched: &[u16],
) -> Result<(), Fallback> {
    let node = served.nodes.get(&owner.wire);
    if node.is_some_and(|n| n.steer.is_some()) {
        return Err(Fallback::Steered(owner.shown()));
    }
    let mut in_window: Vec<(u16, &[u8])> = old
        .iter()
        .filter(|k| *k.0 == *owner.wire)
        .map(|k| (k.1, &k.3[..]))
        .collect();
    in_window.sort_unstable();
    in_window.dedup();
    let served_count: usize = node.map_or(0, |n| {
        n.rrsets
            .iter()
            .filter(|s| touched.contains(&s.rtype))
            .map(|s| s.rdatas().count())
            .sum()
    });
    if served_count != in_window.len() {
        return Err(Fallback::OwnerOutsideWindow(owner.shown()));
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

/// The changed names' records, as a full load would validate them: the new window's, and
/// the untouched sets' (as served). With the served SOA when the window has none, so that
/// the SOA checks see one.
fn node_records(owner: &Owner, node: &Node, new: &[SourceRecord]) -> Vec<SourceRecord> {
    let file = Arc::new(std::path::PathBuf::from("served"));
    let from_window = new
        .iter()
        .filter(|r| name_to_wire(&r.name) == owner.wire)
        .cloned();
    let touched: Vec<u16> = new
        .iter()
        .filter(|r| name_to_wire(&r.name) == owner.wire)
        .map(|r| u16::from(r.rtype))
        .collect();
    let kept = node
        .rrsets
        .iter()
        .filter(|s| !touched.contains(&s.rtype))
        .flat_map(|s| s.rdatas().map(move |rdata| (s.rtype, s.ttl, rdata)))
        .map(|(rt, ttl, rdata)| SourceRecord {
            name: owner.name.clone(),
            rtype: RecordType::from(rt),
            ttl,
            rdata: rdata.to_vec(),
            file: file.clone(),
            line: 0,
        });
    from_window.chain(kept).collect()
}

/// The validator's errors on the changed names' records (with the served SOA when the
/// apex did not change): any error is a full build's to report.
fn validate_changed(served: &Zone, mut records: Vec<SourceRecord>) -> Result<(), Fallback> {
    let has_soa = records.iter().any(|r| r.rtype == RecordType::SOA);
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

/// The node `owner` gets: its untouched sets as served, the touched ones built from the new
/// window's records exactly as a full build builds them (records of one type in file
/// order), sets in type order, with the served node's flags (no cut moves).
fn new_node(served: &Zone, owner: &Owner, new: &[Key], touched: &[u16]) -> Result<Node, Fallback> {
    let at_apex = *owner.wire == *served.apex;
    let old = served.nodes.get(&owner.wire);
    if let Some(&rt) = touched.iter().find(|&&rt| structural(rt, at_apex)) {
        return Err(Fallback::Structural(owner.shown(), type_name(rt)));
    }
    if old.is_none() && owner.wire.starts_with(b"\x01*") {
        return Err(Fallback::Structural(owner.shown(), "wildcard".into()));
    }
    let mut records: Vec<RawRecord<'_>> = new
        .iter()
        .filter(|k| *k.0 == *owner.wire)
        .map(|k| (k.1, k.2, &k.3[..]))
        .collect();
    records.sort_by_key(|r| r.0);
    let mut node = Node::from_records(&owner.wire, &records).map_err(|_| Fallback::Model)?;
    let kept = old
        .into_iter()
        .flat_map(|n| n.rrsets.iter())
        .filter(|s| !touched.contains(&s.rtype));
    node.rrsets.extend(kept.cloned());
    node.rrsets.sort_by_key(|s| s.rtype);
    if node.rrsets.is_empty() {
        return Err(Fallback::NameRemoved(owner.shown()));
    }
    match old {
        Some(old) => {
            node.is_cut = old.is_cut;
            node.below_cut = old.below_cut;
            node.has_wildcard_child = old.has_wildcard_child;
        }
        None => node.below_cut = served.has_cut_above(&owner.wire),
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
