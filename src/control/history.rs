//! The history of accepted control versions: a directory next to the control file holding the
//! last `keep` versions, each with its time, serial, source and a one-line summary of what it
//! changed. It survives restarts, so the server can fall back to the newest valid version when
//! the current file is bad, and operators can see (and roll back to) what was served.
//!
//! Owns the directory's layout, reading and writing it. It does not decide whether a version is
//! valid against the config (the caller loads the text through the snapshot for that), and it
//! never writes the control file itself.
//!
//! Layout: each version is `<serial, 10 digits>.toml` (the exact control text) plus
//! `<serial>.json` (its metadata). The text is written first, the metadata second, both through
//! a temporary file and a rename, so readers see a version only once both are complete. Both
//! are flushed to disk in the background (`crate::files::flush_in_background`): a reload must
//! not wait for a slow disk before it serves an operator's change. After a machine crash a
//! version whose flush did not finish may be torn: a version whose metadata is missing,
//! unreadable, or does not match its text (length and hash) is skipped.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::files::{flush_in_background, replace_file_unflushed, WriteError};

/// One accepted control version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionMeta {
    /// The version's serial (the file's own, or one steerdns assigned).
    pub serial: u64,
    /// When it was accepted, RFC 3339 UTC with second precision.
    pub time: String,
    /// What brought it in, e.g. "control file", "startup", "rollback".
    pub source: String,
    /// What it changed, from [`super::summarize`].
    pub summary: String,
}

/// A history entry that was left out of a listing, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedEntry {
    /// The entry's metadata file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: String,
}

/// The metadata file's content. Unknown fields are tolerated (unlike in operator-written
/// config) so that a history written by a newer steerdns stays readable after a downgrade.
#[derive(Debug, Serialize, Deserialize)]
struct StoredMeta {
    serial: u64,
    time: String,
    source: String,
    summary: String,
    /// Length and FNV-1a hash of the text file, to notice a truncated or altered text.
    text_bytes: u64,
    text_fnv1a64: String,
}

/// Why the history could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{dir}: the control history must keep at least one version")]
    ZeroKeep { dir: PathBuf },
    #[error("{path}: cannot create the control history directory: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: cannot read the control history: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: cannot remove an old control history entry: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: damaged control history entry: {problem}")]
    Corrupt { path: PathBuf, problem: String },
    #[error("control history: {0}")]
    Write(#[from] WriteError),
    #[error(
        "serial {serial} is below the newest recorded serial {newest} (in {dir}); \
         serials must increase"
    )]
    SerialNotIncreasing {
        dir: PathBuf,
        serial: u64,
        newest: u64,
    },
    #[error(
        "serial {serial} is already recorded with different text ({path}); \
         give the new version a higher serial"
    )]
    SerialReused { path: PathBuf, serial: u64 },
}

/// The accepted-versions directory.
#[derive(Debug, Clone)]
pub struct History {
    dir: PathBuf,
    keep: usize,
}

impl History {
    /// Opens (creating if missing) the history directory, keeping at most `keep` versions.
    pub fn open(dir: &Path, keep: usize) -> Result<History, HistoryError> {
        if keep == 0 {
            return Err(HistoryError::ZeroKeep {
                dir: dir.to_path_buf(),
            });
        }
        if fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
            return Err(HistoryError::CreateDir {
                path: dir.to_path_buf(),
                source: std::io::Error::other("it exists and is not a directory"),
            });
        }
        fs::create_dir_all(dir).map_err(|source| HistoryError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(History {
            dir: dir.to_path_buf(),
            keep,
        })
    }

    /// The default directory for a control file: `control.toml` → `control.toml.history`
    /// beside it.
    pub fn default_dir(control_file: &Path) -> PathBuf {
        let mut name = control_file
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_else(|| "control".into());
        name.push(".history");
        control_file.with_file_name(name)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many versions are kept.
    pub fn keep(&self) -> usize {
        self.keep
    }

    /// The valid versions, oldest first. Damaged entries are skipped (with a warning in the
    /// log); use [`History::scan`] to see them.
    pub fn list(&self) -> Result<Vec<VersionMeta>, HistoryError> {
        let (versions, skipped) = self.scan()?;
        for entry in &skipped {
            tracing::warn!(
                "{}: skipping control history entry: {}",
                entry.path.display(),
                entry.problem
            );
        }
        Ok(versions)
    }

    /// The valid versions (oldest first) and the damaged entries that were left out.
    pub fn scan(&self) -> Result<(Vec<VersionMeta>, Vec<SkippedEntry>), HistoryError> {
        let mut versions = Vec::new();
        let mut skipped = Vec::new();
        for serial in self.recorded_serials()? {
            match self.load(serial) {
                Ok(Some((meta, _))) => versions.push(meta),
                // Vanished since the directory was read (pruned meanwhile).
                Ok(None) => {}
                Err(HistoryError::Corrupt { path, problem }) => {
                    skipped.push(SkippedEntry { path, problem })
                }
                Err(other) => return Err(other),
            }
        }
        Ok((versions, skipped))
    }

    /// The newest valid version and its text, if any.
    pub fn newest(&self) -> Result<Option<(VersionMeta, String)>, HistoryError> {
        self.newest_matching(|_, _| true)
    }

    /// The newest valid version for which `accept(meta, text)` holds, e.g. "loads cleanly with
    /// the current config" when the control file itself is bad at startup.
    pub fn newest_matching(
        &self,
        mut accept: impl FnMut(&VersionMeta, &str) -> bool,
    ) -> Result<Option<(VersionMeta, String)>, HistoryError> {
        for serial in self.recorded_serials()?.into_iter().rev() {
            match self.load(serial) {
                Ok(Some((meta, text))) if accept(&meta, &text) => return Ok(Some((meta, text))),
                Ok(_) => {}
                Err(HistoryError::Corrupt { path, problem }) => {
                    tracing::warn!(
                        "{}: skipping control history entry: {problem}",
                        path.display()
                    );
                }
                Err(other) => return Err(other),
            }
        }
        Ok(None)
    }

    /// One version by serial: `None` if it was never recorded (or has been pruned), an error if
    /// it is there but damaged.
    pub fn get(&self, serial: u64) -> Result<Option<(VersionMeta, String)>, HistoryError> {
        self.load(serial)
    }

    /// Records an accepted version, first removing the oldest beyond `keep - 1`.
    ///
    /// If `text` is byte-identical to the newest version, nothing is written and that version
    /// is returned (a restart or a touched file is not a new version), so callers should use
    /// the returned serial. Otherwise `serial` must be above the newest recorded serial: an
    /// equal serial with different text is [`HistoryError::SerialReused`], a lower one
    /// [`HistoryError::SerialNotIncreasing`] (a rollback gets a new serial, see
    /// [`next_serial`]). Failing to prune is only logged: the version itself was recorded.
    pub fn record(
        &self,
        text: &str,
        serial: u64,
        source: &str,
        summary: &str,
        now: SystemTime,
    ) -> Result<VersionMeta, HistoryError> {
        if let Some((meta, newest_text)) = self.newest()? {
            if newest_text == text {
                return Ok(meta);
            }
            if serial == meta.serial {
                return Err(HistoryError::SerialReused {
                    path: self.text_path(serial),
                    serial,
                });
            }
            if serial < meta.serial {
                return Err(HistoryError::SerialNotIncreasing {
                    dir: self.dir.clone(),
                    serial,
                    newest: meta.serial,
                });
            }
        }
        let meta = VersionMeta {
            serial,
            time: crate::rfc3339::format_utc(now),
            source: source.to_owned(),
            summary: summary.to_owned(),
        };
        let stored = StoredMeta {
            serial,
            time: meta.time.clone(),
            source: meta.source.clone(),
            summary: meta.summary.clone(),
            text_bytes: text.len() as u64,
            text_fnv1a64: format!("{:016x}", crate::hash::fnv1a64(text.as_bytes())),
        };
        // Serializing a struct of strings and integers cannot fail; mapped anyway, not unwrapped.
        let json = serde_json::to_vec_pretty(&stored).map_err(|e| HistoryError::Corrupt {
            path: self.meta_path(serial),
            problem: e.to_string(),
        })?;
        // Room first, so the directory never holds more than `keep` versions, not even for the
        // moment between writing this one and pruning (readers such as backups and tests list
        // it at any time).
        self.prune(self.keep - 1, serial);
        // Text first: a process dying between the two writes leaves an unlisted text, never a
        // listed version without its text.
        let text_written = replace_file_unflushed(&self.text_path(serial), text.as_bytes())?;
        let meta_written = replace_file_unflushed(&self.meta_path(serial), &json)?;
        flush_in_background(text_written.into_iter().chain(meta_written));
        Ok(meta)
    }

    /// Removes the oldest versions beyond `room` and texts left without metadata by a crash,
    /// older than `recording`.
    fn prune(&self, room: usize, recording: u64) {
        let result = (|| -> Result<(), HistoryError> {
            let listed = self.recorded_serials()?;
            let excess = listed.len().saturating_sub(room);
            for &serial in &listed[..excess] {
                // Metadata first, so an interrupted prune never leaves a listed version
                // without its text.
                remove_if_present(&self.meta_path(serial))?;
                remove_if_present(&self.text_path(serial))?;
            }
            for serial in self.serials_with_extension("toml")? {
                if serial < recording && listed.binary_search(&serial).is_err() {
                    remove_if_present(&self.text_path(serial))?;
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            tracing::warn!("control history: cannot remove old versions: {e}");
        }
    }

    /// Serials that have a metadata file, ascending.
    fn recorded_serials(&self) -> Result<Vec<u64>, HistoryError> {
        self.serials_with_extension("json")
    }

    fn serials_with_extension(&self, extension: &str) -> Result<Vec<u64>, HistoryError> {
        let read_error = |source| HistoryError::Read {
            path: self.dir.clone(),
            source,
        };
        let mut serials = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(read_error)? {
            let name = entry.map_err(read_error)?.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(stem) = name
                .strip_suffix(extension)
                .and_then(|s| s.strip_suffix('.'))
            else {
                continue;
            };
            // Only our own names: digits only (temporary files start with '.').
            if !stem.is_empty() && stem.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(serial) = stem.parse::<u64>() {
                    serials.push(serial);
                }
            }
        }
        serials.sort_unstable();
        serials.dedup();
        Ok(serials)
    }

    /// Reads and checks one version.
    fn load(&self, serial: u64) -> Result<Option<(VersionMeta, String)>, HistoryError> {
        let meta_path = self.meta_path(serial);
        let Some(json) = read_if_present(&meta_path)? else {
            return Ok(None);
        };
        let corrupt = |problem: String| HistoryError::Corrupt {
            path: meta_path.clone(),
            problem,
        };
        let stored: StoredMeta = serde_json::from_slice(&json)
            .map_err(|e| corrupt(format!("unreadable metadata: {e}")))?;
        if stored.serial != serial {
            return Err(corrupt(format!(
                "metadata says serial {}, the file name says {serial}",
                stored.serial
            )));
        }
        let text_path = self.text_path(serial);
        let Some(bytes) = read_if_present(&text_path)? else {
            return Err(corrupt(format!("{} is missing", text_path.display())));
        };
        let hash = format!("{:016x}", crate::hash::fnv1a64(&bytes));
        if bytes.len() as u64 != stored.text_bytes || hash != stored.text_fnv1a64 {
            return Err(corrupt(format!(
                "{} does not match its metadata ({} bytes, expected {})",
                text_path.display(),
                bytes.len(),
                stored.text_bytes
            )));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| corrupt(format!("{} is not UTF-8", text_path.display())))?;
        let meta = VersionMeta {
            serial,
            time: stored.time,
            source: stored.source,
            summary: stored.summary,
        };
        Ok(Some((meta, text)))
    }

    fn text_path(&self, serial: u64) -> PathBuf {
        self.dir.join(format!("{serial:010}.toml"))
    }

    fn meta_path(&self, serial: u64) -> PathBuf {
        self.dir.join(format!("{serial:010}.json"))
    }
}

fn read_if_present(path: &Path) -> Result<Option<Vec<u8>>, HistoryError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(HistoryError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn remove_if_present(path: &Path) -> Result<(), HistoryError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(HistoryError::Remove {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The serial for a newly accepted version: the file's own if it has one, else one above the
/// newest recorded, starting at 1.
pub fn next_serial(newest: Option<u64>, explicit: Option<u64>) -> u64 {
    explicit.unwrap_or_else(|| super::store::next_serial_above(newest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("steerdns-history-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn file_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn default_dir_sits_beside_the_file() {
        assert_eq!(
            History::default_dir(Path::new("/etc/steerdns/control.toml")),
            PathBuf::from("/etc/steerdns/control.toml.history")
        );
        assert_eq!(
            History::default_dir(Path::new("control.toml")),
            PathBuf::from("control.toml.history")
        );
    }

    #[test]
    fn records_lists_and_reads_back() {
        let dir = temp_dir("basic");
        let h = History::open(&dir, 10).unwrap();
        assert!(h.list().unwrap().is_empty());
        assert!(h.newest().unwrap().is_none());
        let m1 = h
            .record("a = 1\n", 1, "startup", "s1", at(1_700_000_000))
            .unwrap();
        assert_eq!(m1.time, "2023-11-14T22:13:20Z");
        h.record("a = 2\n", 5, "control file", "s2", at(1_700_000_060))
            .unwrap();
        let list = h.list().unwrap();
        assert_eq!(list.iter().map(|m| m.serial).collect::<Vec<_>>(), [1, 5]);
        assert_eq!(list[1].source, "control file");
        assert_eq!(list[1].summary, "s2");
        let (meta, text) = h.newest().unwrap().unwrap();
        assert_eq!((meta.serial, text.as_str()), (5, "a = 2\n"));
        let (meta, text) = h.get(1).unwrap().unwrap();
        assert_eq!((meta, text.as_str()), (m1, "a = 1\n"));
        assert!(h.get(2).unwrap().is_none());
        assert_eq!(
            file_names(&dir),
            [
                "0000000001.json",
                "0000000001.toml",
                "0000000005.json",
                "0000000005.toml"
            ]
        );
        // Survives reopening (a restart).
        let again = History::open(&dir, 10).unwrap();
        assert_eq!(again.newest().unwrap().unwrap().0.serial, 5);
        let older = again.newest_matching(|_, text| text == "a = 1\n").unwrap();
        assert_eq!(older.unwrap().0.serial, 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn identical_text_is_not_a_new_version_and_serials_must_increase() {
        let dir = temp_dir("serials");
        let h = History::open(&dir, 10).unwrap();
        h.record("a = 1\n", 3, "startup", "", at(0)).unwrap();
        let same = h.record("a = 1\n", 4, "startup", "", at(9)).unwrap();
        assert_eq!(
            (same.serial, same.time.as_str()),
            (3, "1970-01-01T00:00:00Z")
        );
        assert_eq!(h.list().unwrap().len(), 1);
        let err = h
            .record("a = 2\n", 3, "control file", "", at(9))
            .unwrap_err();
        assert!(
            matches!(err, HistoryError::SerialReused { serial: 3, .. }),
            "{err}"
        );
        let err = h
            .record("a = 2\n", 2, "control file", "", at(9))
            .unwrap_err();
        assert!(
            matches!(
                err,
                HistoryError::SerialNotIncreasing {
                    serial: 2,
                    newest: 3,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(h.list().unwrap().len(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn prunes_oldest_beyond_keep() {
        let dir = temp_dir("prune");
        let h = History::open(&dir, 3).unwrap();
        for serial in 1..=5 {
            h.record(
                &format!("v = {serial}\n"),
                serial,
                "control file",
                "",
                at(serial),
            )
            .unwrap();
        }
        let serials: Vec<u64> = h.list().unwrap().iter().map(|m| m.serial).collect();
        assert_eq!(serials, [3, 4, 5]);
        assert_eq!(file_names(&dir).len(), 6);
        assert!(h.get(1).unwrap().is_none());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn damaged_entries_are_skipped() {
        let dir = temp_dir("corrupt");
        let h = History::open(&dir, 10).unwrap();
        for serial in 1..=5 {
            h.record(
                &format!("v = {serial}\n"),
                serial,
                "control file",
                "",
                at(serial),
            )
            .unwrap();
        }
        // 5: text truncated; 4: metadata garbage; 3: text gone; 2: metadata of another serial.
        fs::write(dir.join("0000000005.toml"), "v =").unwrap();
        fs::write(dir.join("0000000004.json"), "{\"serial\": 4, ").unwrap();
        fs::remove_file(dir.join("0000000003.toml")).unwrap();
        fs::copy(dir.join("0000000001.json"), dir.join("0000000002.json")).unwrap();
        // Junk that is not ours and a text without metadata (crash between the writes).
        fs::write(dir.join("notes.txt"), "hello").unwrap();
        fs::write(dir.join(".0000000009.toml.tmp.1.0"), "half").unwrap();
        fs::write(dir.join("0000000009.toml"), "v = 9\n").unwrap();

        let (versions, skipped) = h.scan().unwrap();
        assert_eq!(versions.iter().map(|m| m.serial).collect::<Vec<_>>(), [1]);
        let mut bad: Vec<String> = skipped
            .iter()
            .map(|s| s.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        bad.sort();
        assert_eq!(
            bad,
            [
                "0000000002.json",
                "0000000003.json",
                "0000000004.json",
                "0000000005.json"
            ]
        );
        assert_eq!(h.newest().unwrap().unwrap().1, "v = 1\n");
        assert!(matches!(h.get(5), Err(HistoryError::Corrupt { .. })));
        assert!(h.get(9).unwrap().is_none());

        // Recording still works (serials are checked against the newest valid version).
        h.record("v = 10\n", 10, "control file", "", at(10))
            .unwrap();
        assert_eq!(h.newest().unwrap().unwrap().0.serial, 10);
        // The orphaned text 9 (older than 10, no metadata) was cleaned up.
        assert!(!dir.join("0000000009.toml").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unwritable_places_are_errors_naming_the_path() {
        let base = temp_dir("unwritable");
        fs::create_dir_all(&base).unwrap();
        let file = base.join("plain-file");
        fs::write(&file, "x").unwrap();
        let err = History::open(&file.join("history"), 5).unwrap_err();
        assert!(matches!(err, HistoryError::CreateDir { .. }), "{err}");
        assert!(err.to_string().contains("plain-file/history"), "{err}");

        // The directory disappears (replaced by a file) after opening.
        let dir = base.join("h");
        let h = History::open(&dir, 5).unwrap();
        fs::remove_dir(&dir).unwrap();
        fs::write(&dir, "not a dir").unwrap();
        let err = h.record("a = 1\n", 1, "startup", "", at(0)).unwrap_err();
        assert!(err.to_string().contains(&*dir.to_string_lossy()), "{err}");

        assert!(matches!(
            History::open(&base.join("k"), 0),
            Err(HistoryError::ZeroKeep { .. })
        ));
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn next_serial_prefers_the_file_then_counts_up() {
        assert_eq!(next_serial(None, None), 1);
        assert_eq!(next_serial(Some(41), None), 42);
        assert_eq!(next_serial(Some(41), Some(7)), 7);
        assert_eq!(next_serial(None, Some(2024010101)), 2024010101);
        assert_eq!(next_serial(Some(u64::MAX), None), u64::MAX);
    }
}
