//! The record of the inputs this server last served, kept in its state directory
//! (`<state dir>/served.json`) so that a restart on the very same inputs need not have them
//! tasted again: the taster is for new input (issue 32 item 3), and input that this binary
//! already loaded and served is not new. A restart after any change — the binary, the config
//! file, a zone or included file, the zone directory's listing, a DNSSEC key, the geo database
//! or the control text — finds the record stale and tastes as before.
//!
//! The record holds digests, not data: checking it re-reads the files (tens of milliseconds for
//! a million names) but parses nothing. A record that cannot be read or parsed is no record.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::files::{digest, read_limited, Digest};
use crate::snapshot::load::{config_digest, zone_paths, Sources};
use crate::zone::parse::MAX_ZONE_FILE_BYTES;

/// The record's file in the state directory.
pub const RECORD_FILE: &str = "served.json";

/// Raised when the record's layout changes: an older record is then simply stale.
const FORMAT: u32 = 1;

/// Why the record of what was served could not be written (the next start tastes again).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{}: cannot create: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode the record: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(transparent)]
    Write(#[from] crate::files::WriteError),
}

/// What one load read, as digests (see the module comment).
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServedInputs {
    format: u32,
    binary: Binary,
    config_path: Option<PathBuf>,
    config: Option<Digest>,
    zones_dir: PathBuf,
    zone_files: Vec<PathBuf>,
    files: Vec<(PathBuf, Digest)>,
    keys: Vec<(PathBuf, Digest)>,
    geo: Option<Stamp>,
    control: Option<Digest>,
}

/// What a load read of the config's own files: the config file's digest, the zone files in
/// load order, and every file read with what it held.
struct Read {
    config: Option<Digest>,
    zone_files: Vec<PathBuf>,
    files: Vec<(PathBuf, Digest)>,
}

/// The running executable: the version it says and the file it was started from (length and
/// modification time), so that an upgraded or rebuilt binary tastes again.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Binary {
    version: String,
    exe: Option<Stamp>,
}

/// A file's length and modification time (seconds and nanoseconds since the epoch).
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stamp {
    len: u64,
    modified: Option<(u64, u32)>,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let meta = std::fs::metadata(path).ok()?;
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| (d.as_secs(), d.subsec_nanos()));
        Some(Stamp {
            len: meta.len(),
            modified,
        })
    }
}

impl Binary {
    fn running() -> Binary {
        Binary {
            version: env!("CARGO_PKG_VERSION").to_string(),
            exe: std::env::current_exe().ok().and_then(|p| Stamp::of(&p)),
        }
    }
}

impl ServedInputs {
    /// The record of a load that read `sources` with `config` and `control`.
    pub fn of(config: &Config, sources: &Sources, control: Option<&str>) -> ServedInputs {
        let read = Read {
            config: sources.config_digest().copied(),
            zone_files: sources.zone_files().to_vec(),
            files: sources.files().to_vec(),
        };
        ServedInputs::from_read(config, read, control)
    }

    /// Would a load of `config` and `control` now read exactly what this record says? Reads
    /// every recorded file again; any doubt (an unreadable file) answers no.
    pub fn still_current(&self, config: &Config, control: Option<&str>) -> bool {
        let files = self.files.iter().map(|(path, _)| {
            let bytes = read_limited(path, MAX_ZONE_FILE_BYTES).ok()?;
            Some((path.clone(), digest(&bytes)))
        });
        let Some(files) = files.collect::<Option<Vec<_>>>() else {
            return false;
        };
        let read = Read {
            config: config_digest(config),
            zone_files: zone_paths(config).unwrap_or_default(),
            files,
        };
        // A config file that could not be read has no digest: never "the same".
        (config.source_path.is_none() || read.config.is_some())
            && ServedInputs::from_read(config, read, control) == *self
    }

    /// The record of what a load read (or would read now) from the config's files, with the
    /// rest (binary, keys, geo database, control text) taken as they are now.
    fn from_read(config: &Config, read: Read, control: Option<&str>) -> ServedInputs {
        ServedInputs {
            format: FORMAT,
            binary: Binary::running(),
            config_path: config.source_path.clone(),
            config: read.config,
            zones_dir: config.server.zones.clone(),
            zone_files: read.zone_files,
            files: read.files,
            keys: key_files(config),
            geo: geo_stamp(config),
            control: control.map(|text| digest(text.as_bytes())),
        }
    }

    /// The record in `dir`; `None` when there is none or it cannot be read or parsed (a
    /// damaged record only costs a taste).
    pub fn read(dir: &Path) -> Option<ServedInputs> {
        let path = dir.join(RECORD_FILE);
        let bytes = read_limited(&path, crate::files::SMALL_FILE_LIMIT).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(record) => Some(record),
            Err(e) => {
                tracing::warn!("{}: not a record of served inputs ({e})", path.display());
                None
            }
        }
    }

    /// Writes the record into `dir` (created if missing), replacing the file atomically for
    /// readers but without waiting for the disk: a slow flush must never delay serving, and a
    /// record lost to a crash only costs a taste at the next start.
    pub fn write(&self, dir: &Path) -> Result<(), RecordError> {
        let path = dir.join(RECORD_FILE);
        std::fs::create_dir_all(dir).map_err(|source| RecordError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let text = serde_json::to_vec_pretty(self)?;
        crate::files::replace_file_unflushed(&path, &text)?;
        Ok(())
    }
}

/// Every DNSSEC key file (`*.toml` in the configured key directories) and what it holds.
fn key_files(config: &Config) -> Vec<(PathBuf, Digest)> {
    let dnssec = &config.dnssec;
    let zone_dirs = dnssec.zone.values().filter_map(|z| z.keys.as_ref());
    let mut dirs: Vec<&PathBuf> = std::iter::once(&dnssec.keys).chain(zone_dirs).collect();
    dirs.sort();
    dirs.dedup();
    let mut files = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        paths.sort();
        for path in paths {
            let held = read_limited(&path, crate::files::SMALL_FILE_LIMIT).map(|b| digest(&b));
            // An unreadable key file gets an impossible digest: the record never matches it.
            files.push((path, held.unwrap_or(digest(b"unreadable\0"))));
        }
    }
    files
}

fn geo_stamp(config: &Config) -> Option<Stamp> {
    let database = config.geo.database.as_ref()?;
    Stamp::of(&config.base_dir.join(database))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("steerdns-served-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn served(dir: &Path) -> (Config, ServedInputs) {
        let zones = dir.join("zones");
        std::fs::create_dir_all(&zones).unwrap();
        std::fs::write(
            zones.join("example.com.zone"),
            "$ORIGIN example.com.\n@ 300 IN SOA ns h 1 3600 600 86400 300\n@ IN NS ns\nns IN A 192.0.2.1\n",
        )
        .unwrap();
        let path = dir.join("steerdns.toml");
        std::fs::write(&path, "[server]\nlisten = [\"127.0.0.1:0\"]\n").unwrap();
        let config = Config::load(&path).unwrap();
        let loaded = crate::snapshot::load::load_after(
            &config,
            crate::snapshot::load::ControlSource::FromConfig,
            None,
        )
        .unwrap();
        let sources = loaded.compiled.sources().unwrap().clone();
        let record = ServedInputs::of(&config, &sources, Some("control"));
        (config, record)
    }

    #[test]
    fn a_record_is_current_until_an_input_changes_and_survives_a_round_trip() {
        let dir = temp_dir("current");
        let (config, record) = served(&dir);
        assert!(record.still_current(&config, Some("control")));
        assert!(!record.still_current(&config, Some("other control")));

        let state = config.state_dir().unwrap();
        assert_eq!(state, dir.join("steerdns.toml.state"));
        record.write(&state).unwrap();
        let read = ServedInputs::read(&state).unwrap();
        assert_eq!(read, record);

        // A zone file rewritten with other bytes, then a new zone file, each make it stale.
        let zone = dir.join("zones/example.com.zone");
        let text = std::fs::read_to_string(&zone).unwrap();
        std::fs::write(&zone, text.replace("192.0.2.1", "192.0.2.2")).unwrap();
        assert!(!record.still_current(&config, Some("control")));
        std::fs::write(&zone, &text).unwrap();
        assert!(record.still_current(&config, Some("control")));
        std::fs::write(dir.join("zones/example.net.zone"), &text).unwrap();
        assert!(!record.still_current(&config, Some("control")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_record_is_no_record() {
        let dir = temp_dir("damaged");
        std::fs::write(dir.join(RECORD_FILE), "{ not json").unwrap();
        assert!(ServedInputs::read(&dir).is_none());
        std::fs::write(dir.join(RECORD_FILE), "{\"format\": 1, \"extra\": true}").unwrap();
        assert!(ServedInputs::read(&dir).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
