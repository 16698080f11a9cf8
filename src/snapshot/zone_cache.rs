//! The zones' last-known-good cache: `<state directory>/zones.lkg`, the compiled zones, their
//! precompiled answers and the inputs they were built from, written after a load that built
//! them and read back at the next start instead of parsing, validating and compiling every
//! zone file again (issue 32, item 3). Owns the file's name, its sections and the rules for
//! using it; the container (checksum, binary check) is [`crate::lkg`], the zones' layout
//! [`crate::zone::cache`], the answers' [`super::Precompiled::cache_sections`].
//!
//! A cache is used whole or not at all. It must be intact, written by this very build of the
//! binary (its version, and the executable's size and modification time: two builds of one
//! version may compile differently), from the config file as it is now, and every zone file
//! and include it was built from must still hold the bytes it held (re-read and compared, as
//! a reload does before sharing zones). The caller also checks that the config binds the same
//! steered names. Signed zones are not cached (their signatures have validity windows and the
//! loader renews them), nor are loads that left a zone out, nor a produced catalog zone.
//!
//! With outgoing transfers (`[transfer]`) the zones' SOA serials carry the projection's
//! revision (`super::projection`): the cache keeps the revisions it was numbered with (the
//! `projection` section, the state file's text), and the loader uses it only while the state
//! directory still says the same and the projection of the cached zones numbers to the very
//! serials they hold; else it builds, so a restart never serves a serial behind what it sent.
//!
//! Sections: `sources` (below), `zones` ([`crate::zone::cache`]), `precompiled.*`, and with
//! transfers `projection`.
//!
//! ```text
//! sources: config path (u8 present + path), config digest (u8 present + 16 bytes),
//!          zone directory (path), zone files (u32 count, paths), files read (u32 count,
//!          path + 16-byte digest), steered names (u32 count, u16 length + wire name),
//!          zone warnings (u32 count, u32 length + UTF-8); a path is u32 length + bytes
//! ```

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::load::Sources;
use super::{Compiled, Precompiled};
use crate::config::Config;
use crate::files::Digest;
use crate::le_reader::{LeReader, Malformed};
use crate::lkg::{Cache, Inputs, LkgRefused, Opened};
use crate::zone::model::Zone;

/// The cache's file name in the state directory.
pub const FILE_NAME: &str = "zones.lkg";

/// What a usable cache holds, ready to be served.
pub struct CachedZones {
    pub zones: Vec<Zone>,
    pub precompiled: Precompiled,
    pub sources: Arc<Sources>,
    /// The projection revisions the zones' serials were numbered with (written with
    /// `[transfer]` only).
    pub projection: Option<super::projection::Remembered>,
}

/// Why the cache was not used (the zones are then built from their files, as without one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZoneCacheRefused {
    #[error("no state directory (no config file)")]
    NoStateDir,
    #[error("no cache yet ({})", .0.display())]
    Missing(PathBuf),
    #[error("{}: cannot be read: {error}", path.display())]
    Unreadable { path: PathBuf, error: String },
    #[error("{}: {reason}", path.display())]
    Refused { path: PathBuf, reason: LkgRefused },
    #[error("{}: section {section}: malformed at byte {at}", path.display())]
    Section {
        path: PathBuf,
        section: &'static str,
        at: usize,
    },
    #[error("{}: a zone file or the config changed since it was written", path.display())]
    InputsChanged { path: PathBuf },
    #[error("the identity of the running executable cannot be read")]
    NoBuildIdentity,
}

/// Why no cache was written.
#[derive(Debug, thiserror::Error)]
pub enum ZoneCacheNotWritten {
    #[error("not built from files")]
    NoSources,
    #[error("signed zones, zones left out and a produced catalog zone are not cached")]
    NotCacheable,
    #[error("the identity of the running executable cannot be read")]
    NoBuildIdentity,
    #[error("{}: {error}", path.display())]
    Write {
        path: PathBuf,
        error: crate::files::WriteError,
    },
}

/// The cache file of `config`.
pub fn path(config: &Config) -> Option<PathBuf> {
    config.state_dir().map(|dir| dir.join(FILE_NAME))
}

/// The cache of `config`, if it may serve in place of building the zones.
pub fn read(
    config: &Config,
    config_digest: Option<&Digest>,
) -> Result<CachedZones, ZoneCacheRefused> {
    let (cache, path) = open(config, config_digest)?;
    from_sections(cache, path, config, config_digest)
}

/// The cache file of `config`, mapped, its container checked.
fn open(
    config: &Config,
    config_digest: Option<&Digest>,
) -> Result<(Opened, PathBuf), ZoneCacheRefused> {
    let path = path(config).ok_or(ZoneCacheRefused::NoStateDir)?;
    // Mapped, not read: the answers are served from the file's pages in place.
    let map = match crate::lkg::Map::open(&path) {
        Ok(map) => Arc::new(map),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ZoneCacheRefused::Missing(path))
        }
        Err(e) => {
            return Err(ZoneCacheRefused::Unreadable {
                path,
                error: e.to_string(),
            })
        }
    };
    let inputs = inputs(config_digest).ok_or(ZoneCacheRefused::NoBuildIdentity)?;
    let cache = crate::lkg::open(map, &inputs).map_err(|reason| ZoneCacheRefused::Refused {
        path: path.clone(),
        reason,
    })?;
    Ok((cache, path))
}

/// What phase 1 of a start from the cache serves: the precompiled answers, in place.
pub struct FirstAnswers {
    pub precompiled: Precompiled,
    pub sources: Arc<Sources>,
}

/// The precompiled answers of `config`'s cache, checked as far as serving them needs (the
/// container: binary, config, checksum; the answers' headers), without the zones and without
/// looking at the zone files: [`read`] does both, for the snapshot that replaces these.
pub fn read_first_answers(
    config: &Config,
    config_digest: Option<&Digest>,
) -> Result<FirstAnswers, ZoneCacheRefused> {
    let (mut cache, path) = open(config, config_digest)?;
    let sources = take_sources(&mut cache, &path)?;
    let _ = cache.take("zones");
    let _ = cache.take("projection");
    let precompiled = Precompiled::from_cache(cache.into_sections())
        .map_err(|reason| precompiled_refused(&path, reason))?;
    Ok(FirstAnswers {
        precompiled,
        sources: Arc::new(sources),
    })
}

/// The cache at `path` refused for its `section`, malformed at byte `at`.
fn malformed(path: &Path, section: &'static str, at: usize) -> ZoneCacheRefused {
    ZoneCacheRefused::Section {
        path: path.to_path_buf(),
        section,
        at,
    }
}

/// The cache's record of the inputs it was built from (its `sources` section).
fn take_sources(cache: &mut Opened, path: &Path) -> Result<Sources, ZoneCacheRefused> {
    decode_sources(&cache.take("sources").unwrap_or_default())
        .map_err(|m| malformed(path, "sources", m.at))
}

/// Why the precompiled answers of the cache at `path` are refused.
fn precompiled_refused(path: &Path, reason: LkgRefused) -> ZoneCacheRefused {
    match reason {
        LkgRefused::Malformed { at } => malformed(path, "precompiled", at),
        reason => ZoneCacheRefused::Refused {
            path: path.to_path_buf(),
            reason,
        },
    }
}

fn from_sections(
    mut cache: Opened,
    path: PathBuf,
    config: &Config,
    config_digest: Option<&Digest>,
) -> Result<CachedZones, ZoneCacheRefused> {
    let section = |section: &'static str, at: usize| malformed(&path, section, at);
    let sources = take_sources(&mut cache, &path)?;
    if !sources.unchanged(config, config_digest) {
        return Err(ZoneCacheRefused::InputsChanged { path });
    }
    let zones_bytes = cache.take("zones").unwrap_or_default();
    let projection = cache
        .take("projection")
        .map(|bytes| {
            String::from_utf8(bytes.to_vec())
                .map_err(|e| section("projection", e.utf8_error().valid_up_to()))
        })
        .transpose()?
        .map(|text| super::projection::parse_state(&text));
    let refused = |reason| precompiled_refused(&path, reason);
    let precompiled = Precompiled::from_cache(cache.into_sections()).map_err(refused)?;
    // Every record of the answers on one core while the other decodes the zones.
    let (checked, zones) = std::thread::scope(|scope| {
        let checked = scope.spawn(|| precompiled.check_cached());
        let zones = crate::zone::cache::decode(&zones_bytes);
        (checked.join(), zones)
    });
    checked
        .unwrap_or(Err(LkgRefused::Malformed { at: 0 }))
        .map_err(refused)?;
    let zones = zones.map_err(|m| section("zones", m.at))?;
    // The answers name their zone by index: they must have been built for these zones.
    if precompiled.zone_count() != zones.len() {
        return Err(section("precompiled", 0));
    }
    Ok(CachedZones {
        zones,
        precompiled,
        sources: Arc::new(sources),
        projection,
    })
}

/// Writes to `path` (see [`path`]) the cache of what `compiled` serves (its zones were just built from their files).
/// Returns the file's size. Slow for big zones (it encodes every name): call it off the
/// serving path and off the reload's critical path.
pub fn write(path: &Path, compiled: &Compiled) -> Result<u64, ZoneCacheNotWritten> {
    let sources = compiled.sources().ok_or(ZoneCacheNotWritten::NoSources)?;
    if compiled.dnssec().is_some()
        || !compiled.dnssec_not_served.is_empty()
        || compiled.projections.catalog.is_some()
    {
        return Err(ZoneCacheNotWritten::NotCacheable);
    }
    let zones = crate::zone::cache::encode(compiled.zones().zones())
        .ok_or(ZoneCacheNotWritten::NotCacheable)?;
    let mut sections = vec![
        ("sources".to_string(), encode_sources(sources)),
        ("zones".to_string(), zones),
    ];
    sections.extend(compiled.precompiled().cache_sections());
    if compiled.transfer.is_some() {
        let state = super::projection::state_text(&compiled.projections);
        sections.push(("projection".to_string(), state.into_bytes()));
    }
    let inputs = inputs(sources.config_digest()).ok_or(ZoneCacheNotWritten::NoBuildIdentity)?;
    let cache = Cache { inputs, sections };
    let bytes = crate::lkg::encode(&cache);
    if let Some(dir) = path.parent() {
        // The state directory may not exist yet (nothing else wrote to it).
        let _ = std::fs::create_dir_all(dir);
    }
    crate::files::replace_file(path, &bytes).map_err(|error| ZoneCacheNotWritten::Write {
        path: path.to_path_buf(),
        error,
    })?;
    Ok(bytes.len() as u64)
}

/// What the container checks before any section is read: this build of the binary and the
/// config file's digest (the zone files are checked with the `sources` section).
fn inputs(config_digest: Option<&Digest>) -> Option<Inputs> {
    let config = config_digest.map_or([0; 16], |d| d.to_le_bytes());
    Some(Inputs::from([
        ("build".to_string(), build_identity()?),
        ("config".to_string(), crate::lkg::fingerprint(&config)),
    ]))
}

/// The running executable, told apart from every other build: its path, size and
/// modification time (the version string alone is the same for every build of a release).
fn build_identity() -> Option<crate::lkg::Fingerprint> {
    let exe = std::env::current_exe().ok()?;
    let metadata = std::fs::metadata(&exe).ok()?;
    let modified = metadata
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    let identity = format!(
        "{}\0{}\0{}",
        exe.display(),
        metadata.len(),
        modified.as_nanos()
    );
    Some(crate::lkg::fingerprint(identity.as_bytes()))
}

fn encode_sources(sources: &Sources) -> Vec<u8> {
    let mut out = Vec::new();
    let parts = sources;
    put_optional_path(&mut out, parts.config_path.as_deref());
    match parts.config {
        Some(digest) => {
            out.push(1);
            out.extend_from_slice(&digest.to_le_bytes());
        }
        None => out.push(0),
    }
    put_path(&mut out, &parts.zones_dir);
    put_count(&mut out, parts.zone_files.len());
    for file in &parts.zone_files {
        put_path(&mut out, file);
    }
    put_count(&mut out, parts.files.len());
    for (file, digest) in &parts.files {
        put_path(&mut out, file);
        out.extend_from_slice(&digest.to_le_bytes());
    }
    put_count(&mut out, parts.steered.len());
    for name in &parts.steered {
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name);
    }
    put_count(&mut out, parts.zone_warnings.len());
    for warning in parts.zone_warnings.iter() {
        put_count(&mut out, warning.len());
        out.extend_from_slice(warning.as_bytes());
    }
    out
}

fn put_count(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_path(out: &mut Vec<u8>, path: &Path) {
    let bytes = path.as_os_str().as_bytes();
    put_count(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn put_optional_path(out: &mut Vec<u8>, path: Option<&Path>) {
    match path {
        Some(path) => {
            out.push(1);
            put_path(out, path);
        }
        None => out.push(0),
    }
}

/// The sources [`encode_sources`] wrote.
fn decode_sources(bytes: &[u8]) -> Result<Sources, Malformed> {
    let mut r = LeReader::new(bytes);
    let config_path = if flag(&mut r)? {
        Some(path_of(&mut r)?)
    } else {
        None
    };
    let config = if flag(&mut r)? {
        Some(digest(&mut r)?)
    } else {
        None
    };
    let zones_dir = path_of(&mut r)?;
    let zone_files = (0..count(&mut r)?)
        .map(|_| path_of(&mut r))
        .collect::<Result<_, _>>()?;
    let files = (0..count(&mut r)?)
        .map(|_| Ok((path_of(&mut r)?, digest(&mut r)?)))
        .collect::<Result<_, Malformed>>()?;
    let steered = (0..count(&mut r)?)
        .map(|_| {
            let len = r.u16()?;
            Ok(Box::from(r.take(usize::from(len))?))
        })
        .collect::<Result<_, Malformed>>()?;
    let zone_warnings = (0..count(&mut r)?)
        .map(|_| {
            let at = r.malformed();
            let len = count(&mut r)?;
            String::from_utf8(r.take(len)?.to_vec()).map_err(|_| at)
        })
        .collect::<Result<Vec<String>, Malformed>>()?;
    r.finish()?;
    Ok(Sources {
        config_path,
        config,
        zones_dir,
        zone_files,
        files,
        steered,
        zone_warnings: zone_warnings.into(),
        texts: Vec::new(),
    })
}

fn flag(r: &mut LeReader<'_>) -> Result<bool, Malformed> {
    let at = r.malformed();
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(at),
    }
}

/// A u32 count or length, which must fit in what is left (each item takes a byte at least),
/// so that a bad count cannot make a loop run long.
fn count(r: &mut LeReader<'_>) -> Result<usize, Malformed> {
    let at = r.malformed();
    let n = r.u32()? as usize;
    if n > r.left() {
        return Err(at);
    }
    Ok(n)
}

fn path_of(r: &mut LeReader<'_>) -> Result<PathBuf, Malformed> {
    let len = count(r)?;
    Ok(PathBuf::from(OsStr::from_bytes(r.take(len)?)))
}

fn digest(r: &mut LeReader<'_>) -> Result<Digest, Malformed> {
    r.array().map(Digest::from_le_bytes)
}
