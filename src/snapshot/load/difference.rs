//! The difference path of a reload (issue 32 item 4): when only zone files changed, and each
//! change is one [`crate::zone::difference`] can apply with certainty, the served snapshot's
//! zones are reused with the changed names laid over them, and its precompiled answers are
//! kept for every zone but the changed ones (whose queries take the general lookup, which
//! reads the new names) until a full build compacts them.
//!
//! Owns the checks that the rest of the inputs are what the served snapshot was built from
//! (the config file, the list of zone files, no DNSSEC, nothing projected into transfers)
//! and the reasons it declines ([`Declined`]); the caller then builds everything whole.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::Config;
use crate::files::Digest;
use crate::zone::difference::{self, Fallback};
use crate::zone::journal::Diff;
use crate::zone::lookup::ZoneSet;
use crate::zone::model::{name_to_wire, Zone};
use crate::zone::parse::{origin_from_file_name, Text, MAX_ZONE_FILE_BYTES};

use super::super::{Compiled, Precompiled};
use super::Sources;

/// Why a reload was not applied as a difference (it is then built whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Declined {
    #[error("the config file changed")]
    Config,
    #[error("the set of zone files changed")]
    ZoneFiles,
    #[error("DNSSEC zones are built whole")]
    Signed,
    #[error("zones projected into transfers (steered names, a catalog) are built whole")]
    Projected,
    #[error("{}: cannot be read", .0.display())]
    Unreadable(PathBuf),
    #[error("{}: not a zone file of its own (an included file or a secondary copy)", .0.display())]
    NotAZoneFile(PathBuf),
    #[error("{}: the bytes served are not kept (the zones came from the zone cache)", .0.display())]
    NoText(PathBuf),
    #[error("{}: {why}", .path.display())]
    Zone { path: PathBuf, why: Fallback },
}

/// The zones after a difference, and what it changed.
pub struct Applied {
    pub zones: ZoneSet,
    pub precompiled: Precompiled,
    pub sources: Arc<Sources>,
    /// The differences, by zone apex, for the IXFR journal.
    pub diffs: Vec<(Box<[u8]>, Diff)>,
    /// Names changed, records removed and records added, over every file.
    pub names_changed: usize,
    pub removed: usize,
    pub added: usize,
    /// The files applied as a difference.
    pub files: Vec<PathBuf>,
}

/// `previous`'s zones with the changes of their files applied, when every change can be
/// applied as a difference; `Ok(None)` when no file changed. `prepared`: the changed files
/// as [`difference_windows`] read them (and the taster tasted them), used as they are instead
/// of being read again.
pub fn apply(
    config: &Config,
    config_digest: Option<&Digest>,
    previous: &Compiled,
    transferring: bool,
    prepared: Option<&Prepared>,
) -> Result<Option<Applied>, Declined> {
    let Some(sources) = previous.sources.as_ref() else {
        return Err(Declined::Config);
    };
    if sources.config_path != config.source_path
        || sources.config.as_ref() != config_digest
        || (config.source_path.is_some() && config_digest.is_none())
        || sources.zones_dir != config.server.zones
    {
        return Err(Declined::Config);
    }
    if previous.dnssec.is_some() || !config.dnssec.zones.is_empty() {
        return Err(Declined::Signed);
    }
    if transferring && previous.projections.catalog.is_some() {
        return Err(Declined::Projected);
    }
    if super::zone_paths(config).as_ref() != Some(&sources.zone_files) {
        return Err(Declined::ZoneFiles);
    }
    let changed = match prepared {
        Some(prepared) => prepared.files.clone(),
        None => changed_files(sources)?,
    };
    if changed.is_empty() {
        return Ok(None);
    }
    let mut zones: Vec<Option<Zone>> = Vec::new();
    zones.resize_with(previous.zones.zones().len(), || None);
    let mut next_sources = Sources::clone(sources);
    let (mut diffs, mut files) = (Vec::new(), Vec::new());
    let (mut names_changed, mut removed, mut added) = (0, 0, 0);
    for (path, bytes, digest) in changed {
        let (index, applied) = apply_file(sources, previous, &path, &bytes)?;
        names_changed += applied.names_changed;
        removed += applied.removed;
        added += applied.added;
        diffs.push((applied.zone.apex.clone(), applied.diff));
        zones[index] = Some(applied.zone);
        next_sources.replace_file(&path, digest, bytes);
        files.push(path);
    }
    let stale: Vec<usize> = zones
        .iter()
        .enumerate()
        .filter_map(|(i, z)| z.as_ref().map(|_| i))
        .collect();
    let mut all = Vec::with_capacity(zones.len());
    for (zone, served) in zones.into_iter().zip(previous.zones.zones()) {
        match zone {
            Some(zone) => all.push(zone),
            None => all.push(served.shallow_clone().ok_or(Declined::Signed)?),
        }
    }
    Ok(Some(Applied {
        zones: ZoneSet::new(all),
        precompiled: previous.precompiled.with_stale(&stale),
        sources: Arc::new(next_sources),
        diffs,
        names_changed,
        removed,
        added,
        files,
    }))
}

/// A changed file: its path, the bytes read now and their digest.
type Changed = (PathBuf, Text, Digest);

/// The files whose bytes changed since `sources` were read: each with its new bytes and
/// digest. A file whose served bytes are kept is compared with them (cheaper than a digest).
fn changed_files(sources: &Sources) -> Result<Vec<Changed>, Declined> {
    let mut changed = Vec::new();
    for (path, digest) in &sources.files {
        let bytes = crate::files::read_limited(path, MAX_ZONE_FILE_BYTES)
            .map_err(|_| Declined::Unreadable(path.clone()))?;
        let kept = sources.texts.iter().find(|(p, _)| p == path);
        if kept.is_some_and(|(_, text)| **text == bytes) {
            continue;
        }
        let now = crate::files::digest(&bytes);
        if now != *digest {
            changed.push((path.clone(), Arc::new(bytes), now));
        }
    }
    Ok(changed)
}

/// Applies the change of one zone file: its zone's index and the new version.
fn apply_file(
    sources: &Sources,
    previous: &Compiled,
    path: &PathBuf,
    bytes: &[u8],
) -> Result<(usize, difference::Applied), Declined> {
    let not_a_zone = || Declined::NotAZoneFile(path.clone());
    let in_dir = path.parent() == Some(sources.zones_dir.as_path());
    let origin = origin_from_file_name(path)
        .filter(|_| in_dir && sources.zone_files.contains(path))
        .ok_or_else(not_a_zone)?;
    let old = sources
        .texts
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, text)| text.clone())
        .ok_or_else(|| Declined::NoText(path.clone()))?;
    let apex = name_to_wire(&origin);
    let index = previous
        .zones
        .zones()
        .iter()
        .position(|z| z.apex == apex)
        .ok_or_else(not_a_zone)?;
    let served = &previous.zones.zones()[index];
    let zone_error = |why| Declined::Zone {
        path: path.clone(),
        why,
    };
    let windows = difference::find_windows(&old, bytes, &origin.to_string()).map_err(zone_error)?;
    let (mut old_records, mut new_records) = (Vec::new(), Vec::new());
    for window in &windows {
        let ttl = window.ttl_line.as_ref();
        old_records.extend(
            difference::parse_window(&old, &window.old, ttl, path, &origin).map_err(zone_error)?,
        );
        new_records.extend(
            difference::parse_window(bytes, &window.new, ttl, path, &origin).map_err(zone_error)?,
        );
    }
    let applied = difference::apply(served, &old_records, &new_records).map_err(zone_error)?;
    Ok((index, applied))
}

/// What [`difference_windows`] read and found: the changed files (read once, the same bytes
/// then tasted and applied) and their changed lines.
pub struct Prepared {
    files: Vec<Changed>,
    pub windows: Vec<TasteWindow>,
}

impl Prepared {
    /// Each changed file and the digest of the bytes read.
    pub fn digests(&self) -> impl Iterator<Item = (&PathBuf, &Digest)> {
        self.files.iter().map(|(path, _, digest)| (path, digest))
    }
}

/// A changed zone file's new lines, for the taster child to parse before the server does:
/// the file (for its origin and messages), the `$TTL` line in force and the lines.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TasteWindow {
    pub path: PathBuf,
    pub ttl_line: Option<String>,
    pub text: String,
}

/// The zone files changed since `previous` was built, read once, and their changed lines,
/// when every change looks like one the difference path applies (the bytes compared, nothing
/// parsed); `None` when the reload is one for a full build (or no zone file changed).
pub fn difference_windows(config: &Config, previous: &Compiled) -> Option<Prepared> {
    let sources = previous.sources.as_ref()?;
    let digest = super::config_digest(config);
    let same_config = sources.config_path == config.source_path
        && sources.config.as_ref() == digest.as_ref()
        && sources.zones_dir == config.server.zones;
    if !same_config || previous.dnssec.is_some() || !config.dnssec.zones.is_empty() {
        return None;
    }
    if super::zone_paths(config).as_ref() != Some(&sources.zone_files) {
        return None;
    }
    let files = changed_files(sources).ok()?;
    let mut windows = Vec::new();
    for (path, bytes, _) in &files {
        let (_, old) = sources.texts.iter().find(|(p, _)| p == path)?;
        let origin = origin_from_file_name(path)?.to_string();
        for window in difference::find_windows(old, bytes, &origin).ok()? {
            let text = |range: std::ops::Range<usize>| {
                std::str::from_utf8(bytes.get(range)?)
                    .ok()
                    .map(str::to_string)
            };
            let ttl_line = match window.ttl_line.clone() {
                Some(range) => Some(text(range)?),
                None => None,
            };
            windows.push(TasteWindow {
                path: path.clone(),
                ttl_line,
                text: text(window.new.clone())?,
            });
        }
    }
    (!files.is_empty()).then_some(Prepared { files, windows })
}

impl TasteWindow {
    /// The taster child's part: parses the lines as the server will (a crash, a hang or a
    /// blow-up there refuses the change). Lines that do not parse alone are no refusal: the
    /// server's difference path then declines them and the change is tasted whole.
    pub fn taste(&self) {
        let Some(origin) = origin_from_file_name(&self.path) else {
            return;
        };
        let parsed =
            difference::parse_text(self.ttl_line.as_deref(), &self.text, &self.path, &origin);
        tracing::debug!(
            "{}: the changed lines parse alone: {}",
            self.path.display(),
            parsed.is_ok()
        );
    }
}
