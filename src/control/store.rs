//! The control store: where the operators' keyed control documents live, each with its own
//! revision, serial and bounded history: [`CONTROL`] (the control document) and, where the
//! store knows a tenants folder, one key per tenant ([`tenant_key`]: `tenants/<name>`, issue
//! 30), each a document of its own.
//!
//! Owns the interface ([`ControlStore`]), the one serial rule ([`next_serial_above`]) and the
//! file implementation ([`FileStore`]: the control file plus its history directory, formats
//! unchanged). The etcd implementation lives in `fleet::control_store` (it needs the fleet's
//! client and key layout, which sit above this module).
//!
//! A trait rather than an enum over both: the etcd side cannot be named from here without a
//! folder cycle (fleet imports control), and callers choose the store once, then hold a
//! `Box<dyn ControlStore>`. The interface is blocking (the CLI and admin paths that use it
//! are); it must not be called from inside an async task.
//!
//! Not here: the safety rules and the taste (the caller's, in `change`), and the file watch
//! (it stays in `reload::watch`, which the server already runs; the etcd watch stays in the
//! node, on the keys [`ControlStore::watch_key`] names).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::edit::{explicit_serial, replace_if_unchanged, set_serial, ControlLock, EditError};
use super::history::{History, HistoryError};
use super::{summarize, ControlFile};

/// The key of the control document.
pub const CONTROL: &str = "control";

/// The prefix of the tenants' keys.
pub const TENANTS_PREFIX: &str = "tenants/";

/// The key of tenant `name`'s document.
pub fn tenant_key(name: &str) -> String {
    format!("{TENANTS_PREFIX}{name}")
}

/// The tenant a key names (`tenants/<name>`, `name` a valid tenant name), if it is one.
pub fn tenant_of_key(key: &str) -> Option<&str> {
    key.strip_prefix(TENANTS_PREFIX)
        .filter(|name| crate::tenant::valid_tenant_name(name))
}

/// The serial for a new version: one above every serial it must outrank (the current
/// document's, the newest in the history, the one a server serves), 1 when there are none.
/// The one rule every writer uses; saturates at `u64::MAX` (set_serial then refuses it).
pub fn next_serial_above(seen: impl IntoIterator<Item = u64>) -> u64 {
    seen.into_iter().max().unwrap_or(0).saturating_add(1)
}

/// A document as the store holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    pub text: String,
    /// The store's revision of the document: what [`ControlStore::compare_and_write`] compares.
    /// 0: the document does not exist.
    pub revision: u64,
    /// The text's own `serial` (0 if it has none).
    pub serial: u64,
}

/// One recorded version of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub serial: u64,
    /// When it was recorded, RFC 3339 UTC.
    pub time: String,
    /// Who or what brought it in (`weight set by ops@host`, `control file`, `rollback to 7`).
    pub source: String,
    /// What it changed, in one line.
    pub summary: String,
    /// The store revision it was written at, if the store keeps one per version (etcd).
    pub revision: Option<u64>,
    /// Written with `--emergency` (a staged rollout skips its bake times).
    pub emergency: bool,
}

/// A history entry that does not decode: where, and why. Listing the rest goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadEntry {
    pub location: String,
    pub problem: String,
}

/// The history of one document, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Versions {
    pub versions: Vec<Version>,
    pub bad: Vec<BadEntry>,
}

/// Who writes a version and why, recorded with it.
#[derive(Debug, Clone, Default)]
pub struct Author {
    pub source: String,
    pub emergency: bool,
    /// A serial the new version must be above besides the store's own (a served one).
    pub floor: u64,
}

/// What a compare-and-write wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub revision: u64,
    /// The written text's serial (0: it carries none; the server numbers it on accepting).
    pub serial: u64,
    /// The text as written (with its serial).
    pub text: String,
    pub summary: String,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{location}: no document {key:?} in this store")]
    UnknownKey { location: String, key: String },
    #[error("{location}: {key} changed since it was read (revision {expected}, now {found}); nothing written")]
    Conflict {
        location: String,
        key: String,
        expected: u64,
        found: u64,
    },
    #[error("{location}: {key} has no version yet")]
    Missing { location: String, key: String },
    #[error("{location}: {source}")]
    Edit {
        location: String,
        #[source]
        source: EditError,
    },
    #[error(transparent)]
    History(#[from] HistoryError),
    #[error("{location}: cannot read: {message}")]
    Read { location: String, message: String },
    /// The backend (etcd) failed at `step`; `source` is its own error (a `FleetError` for
    /// etcd, which callers may look at to say more).
    #[error("{step}: {source}")]
    Backend {
        step: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The write was sent but its answer was lost: it may have landed.
    #[error("{location}: the write of serial {serial} was not confirmed: {message}")]
    Unconfirmed {
        location: String,
        serial: u64,
        message: String,
    },
}

/// A store of keyed control documents. See the module comment for what each side keeps.
pub trait ControlStore {
    /// Where the store is, for messages: the control file's path, or `etcd <prefix>`.
    fn location(&self) -> String;
    /// Refuses a key the store does not hold (only [`CONTROL`] so far).
    fn check_key(&self, key: &str) -> Result<(), StoreError> {
        if key == CONTROL {
            return Ok(());
        }
        Err(StoreError::UnknownKey {
            location: self.location(),
            key: key.to_owned(),
        })
    }
    /// The refusal of a write that expected revision `expected` of `key` and found `found`.
    fn conflict(&self, key: &str, expected: u64, found: u64) -> StoreError {
        StoreError::Conflict {
            location: self.location(),
            key: key.to_owned(),
            expected,
            found,
        }
    }
    /// The document as it is now; `None` if it does not exist.
    fn current(&self, key: &str) -> Result<Option<Current>, StoreError>;
    /// Its recorded versions, oldest first (at most the store's bound).
    fn versions(&self, key: &str) -> Result<Versions, StoreError>;
    /// One recorded version and its text.
    fn get(&self, key: &str, serial: u64) -> Result<Option<(Version, String)>, StoreError>;
    /// Writes `text` only if the document is still at `expected` (0: absent), giving it the
    /// next serial ([`next_serial_above`] the current, the history and `author.floor`).
    /// Nothing is written on a conflict.
    fn compare_and_write(
        &self,
        key: &str,
        expected: u64,
        text: &str,
        author: &Author,
    ) -> Result<Written, StoreError>;
    /// Records that `text` was accepted (loaded and served) as `serial`, so it is in the
    /// history; returns the version as recorded (an identical newest text is not recorded
    /// twice). Stores that record a version when it is written (etcd) only look it up.
    fn record_accepted(
        &self,
        key: &str,
        serial: u64,
        text: &str,
        source: &str,
    ) -> Result<Version, StoreError>;
    /// What a watcher of this document watches (a path or an etcd key).
    fn watch_key(&self, key: &str) -> Result<String, StoreError>;
    /// Removes the document only if it is still at `expected`; its history stays. Stores
    /// that cannot remove a key refuse it (the control document is never removed).
    fn compare_and_delete(&self, key: &str, expected: u64) -> Result<(), StoreError> {
        let _ = expected;
        Err(StoreError::UnknownKey {
            location: self.location(),
            key: key.to_owned(),
        })
    }
}

/// The local store: the control file and its history directory, exactly as the server reads
/// and writes them, and (with [`FileStore::with_tenants`]) the tenants' folder: tenant `name`
/// is `<dir>/<name>.toml`, its history `<dir>/.history/<name>/` (what the reloader records).
#[derive(Debug, Clone)]
pub struct FileStore {
    file: PathBuf,
    history: History,
    tenants: Option<TenantFiles>,
}

/// The tenants' folder and how many versions each tenant's history keeps.
#[derive(Debug, Clone)]
struct TenantFiles {
    dir: PathBuf,
    keep: usize,
}

/// One tenant's file and history.
struct TenantFile {
    file: PathBuf,
    history: History,
    /// The lock every tenant write takes (one for the folder: `<dir>/.tenants.lock`).
    lock: PathBuf,
}

/// How long a write waits for another one holding the control file's lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);

impl FileStore {
    pub fn new(file: PathBuf, history: History) -> FileStore {
        FileStore {
            file,
            history,
            tenants: None,
        }
    }

    /// This store with the tenants' folder `dir` (each tenant's history bounded to `keep`).
    pub fn with_tenants(mut self, dir: PathBuf, keep: usize) -> FileStore {
        self.tenants = Some(TenantFiles {
            dir,
            keep: keep.max(1),
        });
        self
    }

    /// The file and history of the tenant `key` names (`None`: the key is not a tenant's).
    fn tenant(&self, key: &str) -> Result<Option<TenantFile>, StoreError> {
        let Some(name) = tenant_of_key(key) else {
            return Ok(None);
        };
        let Some(tenants) = &self.tenants else {
            return Err(StoreError::UnknownKey {
                location: self.location(),
                key: key.to_owned(),
            });
        };
        let history = History::open(&tenants.dir.join(".history").join(name), tenants.keep)?;
        Ok(Some(TenantFile {
            file: tenants.dir.join(format!("{name}.toml")),
            history,
            lock: tenants.dir.join(".tenants"),
        }))
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    fn read(&self) -> Result<Option<String>, StoreError> {
        read_file(&self.file)
    }

    fn edit_error(&self, source: EditError) -> StoreError {
        StoreError::Edit {
            location: self.location(),
            source,
        }
    }
}

fn read_file(file: &Path) -> Result<Option<String>, StoreError> {
    match crate::files::read_text_limited(file, crate::files::SMALL_FILE_LIMIT) {
        Ok(text) => Ok(Some(text)),
        Err(_) if !file.exists() => Ok(None),
        Err(e) => Err(StoreError::Read {
            location: file.display().to_string(),
            message: e.to_string(),
        }),
    }
}

/// The file's revision: its content hash (a file has no counter; any change changes it).
/// Never 0, which means "absent".
pub fn file_revision(text: &str) -> u64 {
    crate::hash::fnv1a64(text.as_bytes()).max(1)
}

/// The one-line summary of `before` → `after`, or what to say when either does not parse.
pub fn summary_of(before: Option<&str>, after: &str) -> String {
    let path = Path::new(CONTROL);
    match (
        before.map(|b| ControlFile::parse(b, path)),
        ControlFile::parse(after, path),
    ) {
        (Some(Ok(before)), Ok(after)) => summarize(&before, &after),
        (None, Ok(after)) => summarize(&ControlFile::default(), &after),
        _ => "control replaced".to_string(),
    }
}

fn meta_to_version(meta: super::history::VersionMeta) -> Version {
    Version {
        serial: meta.serial,
        time: meta.time,
        source: meta.source,
        summary: meta.summary,
        revision: None,
        emergency: false,
    }
}

impl ControlStore for FileStore {
    fn location(&self) -> String {
        self.file.display().to_string()
    }

    fn check_key(&self, key: &str) -> Result<(), StoreError> {
        if key == CONTROL || (self.tenants.is_some() && tenant_of_key(key).is_some()) {
            return Ok(());
        }
        Err(StoreError::UnknownKey {
            location: self.location(),
            key: key.to_owned(),
        })
    }

    fn current(&self, key: &str) -> Result<Option<Current>, StoreError> {
        self.check_key(key)?;
        if let Some(tenant) = self.tenant(key)? {
            return tenant.current();
        }
        let Some(text) = self.read()? else {
            return Ok(None);
        };
        Ok(Some(Current {
            revision: file_revision(&text),
            serial: explicit_serial(&text).ok().flatten().unwrap_or(0),
            text,
        }))
    }

    fn versions(&self, key: &str) -> Result<Versions, StoreError> {
        self.check_key(key)?;
        let tenant = self.tenant(key)?;
        let history = tenant.as_ref().map_or(&self.history, |t| &t.history);
        let (versions, skipped) = history.scan()?;
        Ok(Versions {
            versions: versions.into_iter().map(meta_to_version).collect(),
            bad: skipped
                .into_iter()
                .map(|s| BadEntry {
                    location: s.path.display().to_string(),
                    problem: s.problem,
                })
                .collect(),
        })
    }

    fn get(&self, key: &str, serial: u64) -> Result<Option<(Version, String)>, StoreError> {
        self.check_key(key)?;
        let tenant = self.tenant(key)?;
        let history = tenant.as_ref().map_or(&self.history, |t| &t.history);
        Ok(history
            .get(serial)?
            .map(|(meta, text)| (meta_to_version(meta), text)))
    }

    /// Keeps the file's rule: only a text that carries (or replaces) an explicit `serial` gets
    /// a new one written into it; without one the server numbers the version on accepting.
    fn compare_and_write(
        &self,
        key: &str,
        expected: u64,
        text: &str,
        author: &Author,
    ) -> Result<Written, StoreError> {
        self.check_key(key)?;
        if let Some(tenant) = self.tenant(key)? {
            return tenant.compare_and_write(key, expected, text);
        }
        let _lock = ControlLock::acquire(&self.file, LOCK_WAIT).map_err(|e| self.edit_error(e))?;
        let old = self.read()?;
        let found = old.as_deref().map_or(0, file_revision);
        if found != expected {
            return Err(self.conflict(key, expected, found));
        }
        let before = old
            .as_deref()
            .and_then(|t| explicit_serial(t).ok().flatten());
        let own = explicit_serial(text).map_err(|e| self.edit_error(e))?;
        let (text, serial) = if before.is_none() && own.is_none() {
            (text.to_owned(), 0)
        } else {
            let newest = self.history.list()?.last().map_or(0, |m| m.serial);
            let serial =
                next_serial_above([before.unwrap_or(0), own.unwrap_or(0), newest, author.floor]);
            let text = set_serial(text, serial).map_err(|e| self.edit_error(e))?;
            (text, serial)
        };
        replace_if_unchanged(&self.file, old.as_deref(), &text).map_err(|e| self.edit_error(e))?;
        Ok(Written {
            revision: file_revision(&text),
            serial,
            summary: summary_of(old.as_deref(), &text),
            text,
        })
    }

    fn record_accepted(
        &self,
        key: &str,
        serial: u64,
        text: &str,
        source: &str,
    ) -> Result<Version, StoreError> {
        self.check_key(key)?;
        if let Some(tenant) = self.tenant(key)? {
            let summary = tenant_summary(tenant.history.newest()?.map(|(_, t)| t).as_deref());
            let meta = tenant
                .history
                .record(text, serial, source, &summary, SystemTime::now())?;
            return Ok(meta_to_version(meta));
        }
        let before = self.history.newest()?.map(|(_, t)| t);
        let summary = summary_of(before.as_deref(), text);
        let meta = self
            .history
            .record(text, serial, source, &summary, SystemTime::now())?;
        Ok(meta_to_version(meta))
    }

    fn watch_key(&self, key: &str) -> Result<String, StoreError> {
        self.check_key(key)?;
        if let Some(tenant) = self.tenant(key)? {
            return Ok(tenant.file.display().to_string());
        }
        Ok(self.location())
    }

    fn compare_and_delete(&self, key: &str, expected: u64) -> Result<(), StoreError> {
        self.check_key(key)?;
        match self.tenant(key)? {
            Some(tenant) => tenant.compare_and_delete(key, expected),
            None => Err(StoreError::UnknownKey {
                location: self.location(),
                key: key.to_owned(),
            }),
        }
    }
}

/// A tenant's history summary line: new, or a new version.
fn tenant_summary(before: Option<&str>) -> String {
    match before {
        None => "first version".to_string(),
        Some(_) => "document replaced".to_string(),
    }
}

impl TenantFile {
    fn location(&self) -> String {
        self.file.display().to_string()
    }

    fn conflict(&self, key: &str, expected: u64, found: u64) -> StoreError {
        StoreError::Conflict {
            location: self.location(),
            key: key.to_owned(),
            expected,
            found,
        }
    }

    fn edit_error(&self, source: EditError) -> StoreError {
        StoreError::Edit {
            location: self.location(),
            source,
        }
    }

    /// The folder's write lock (the folder is made first if it is missing).
    fn lock(&self) -> Result<ControlLock, StoreError> {
        if let Some(dir) = self.file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Read {
                location: dir.display().to_string(),
                message: format!("cannot create the tenants folder: {e}"),
            })?;
        }
        ControlLock::acquire(&self.lock, LOCK_WAIT).map_err(|e| self.edit_error(e))
    }

    /// The serial is the newest recorded one when that is this text (the version served).
    fn current(&self) -> Result<Option<Current>, StoreError> {
        let Some(text) = read_file(&self.file)? else {
            return Ok(None);
        };
        let serial = match self.history.newest()? {
            Some((meta, recorded)) if recorded == text => meta.serial,
            _ => 0,
        };
        Ok(Some(Current {
            revision: file_revision(&text),
            serial,
            text,
        }))
    }

    /// Replaces the file (a temp file and a rename) if it is still at `expected`; the text is
    /// written as given: the reloader numbers a tenant's version when it accepts it.
    fn compare_and_write(
        &self,
        key: &str,
        expected: u64,
        text: &str,
    ) -> Result<Written, StoreError> {
        let _lock = self.lock()?;
        let old = read_file(&self.file)?;
        let found = old.as_deref().map_or(0, file_revision);
        if found != expected {
            return Err(self.conflict(key, expected, found));
        }
        replace_if_unchanged(&self.file, old.as_deref(), text).map_err(|e| self.edit_error(e))?;
        Ok(Written {
            revision: file_revision(text),
            serial: 0,
            text: text.to_owned(),
            summary: tenant_summary(old.as_deref()),
        })
    }

    fn compare_and_delete(&self, key: &str, expected: u64) -> Result<(), StoreError> {
        let _lock = self.lock()?;
        let old = read_file(&self.file)?;
        let found = old.as_deref().map_or(0, file_revision);
        if old.is_none() {
            return Err(StoreError::Missing {
                location: self.location(),
                key: key.to_owned(),
            });
        }
        if found != expected {
            return Err(self.conflict(key, expected, found));
        }
        std::fs::remove_file(&self.file).map_err(|e| StoreError::Read {
            location: self.location(),
            message: format!("cannot remove: {e}"),
        })
    }
}

/// The contract every [`ControlStore`] keeps, run against the file store here and against a
/// real etcd in `tests/fleet/control_store.rs`. `text(n)` must give distinct valid control texts
/// with an explicit serial; `keep` is the store's history bound (at least 2).
pub mod contract {
    use super::*;

    fn fail(what: &str) -> String {
        format!("store contract: {what}")
    }

    /// Writes, conflicts, serials and the history bound; `Err` names the broken promise.
    pub fn check(
        store: &dyn ControlStore,
        keep: usize,
        text: impl Fn(u64) -> String,
    ) -> Result<(), String> {
        let err = |e: StoreError| fail(&e.to_string());
        let start = store.current(CONTROL).map_err(err)?;
        let expected = start.as_ref().map_or(0, |c| c.revision);
        let floor = start.as_ref().map_or(0, |c| c.serial);
        let author = Author {
            source: "contract".into(),
            ..Author::default()
        };
        let first = store
            .compare_and_write(CONTROL, expected, &text(1), &author)
            .map_err(err)?;
        store
            .record_accepted(CONTROL, first.serial, &first.text, "contract")
            .map_err(err)?;
        if first.serial <= floor {
            return Err(fail(&format!(
                "serial {} not above the current {floor}",
                first.serial
            )));
        }
        let now = store
            .current(CONTROL)
            .map_err(err)?
            .ok_or_else(|| fail("written document missing"))?;
        if (now.revision, now.serial, now.text.as_str())
            != (first.revision, first.serial, first.text.as_str())
        {
            return Err(fail("current() is not what was written"));
        }
        // A writer that read before `first` loses, and writes nothing.
        match store.compare_and_write(CONTROL, expected, &text(2), &author) {
            Err(StoreError::Conflict { .. }) => {}
            other => {
                return Err(fail(&format!(
                    "a stale revision was not refused: {other:?}"
                )))
            }
        }
        let still = store.current(CONTROL).map_err(err)?;
        if still.as_ref().map(|c| &c.text) != Some(&first.text) {
            return Err(fail("a refused write changed the document"));
        }
        // A floor (a served serial) is outranked too.
        let floored = Author {
            floor: first.serial + 100,
            ..author.clone()
        };
        let second = store
            .compare_and_write(CONTROL, first.revision, &text(2), &floored)
            .map_err(err)?;
        if second.serial != first.serial + 101 {
            return Err(fail(&format!(
                "serial {} is not one above the floor {}",
                second.serial,
                first.serial + 100
            )));
        }
        store
            .record_accepted(CONTROL, second.serial, &second.text, "contract")
            .map_err(err)?;
        let (version, got) = store
            .get(CONTROL, second.serial)
            .map_err(err)?
            .ok_or_else(|| fail("get() of the written version found nothing"))?;
        if got != second.text || version.serial != second.serial {
            return Err(fail("get() is not what was written"));
        }
        // The history keeps at most `keep` versions, the newest.
        let mut last = second;
        for n in 3..(keep as u64 + 5) {
            last = store
                .compare_and_write(CONTROL, last.revision, &text(n), &author)
                .map_err(err)?;
            store
                .record_accepted(CONTROL, last.serial, &last.text, "contract")
                .map_err(err)?;
        }
        let listed = store.versions(CONTROL).map_err(err)?.versions;
        if listed.len() != keep {
            return Err(fail(&format!(
                "{} versions kept, bound {keep}",
                listed.len()
            )));
        }
        if listed.last().map(|v| v.serial) != Some(last.serial)
            || !listed.windows(2).all(|w| w[0].serial < w[1].serial)
        {
            return Err(fail("versions() not oldest first ending at the newest"));
        }
        if store.current("no/such/key").is_ok() {
            return Err(fail("an unknown key was answered"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("steerdns-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn store(dir: &Path, keep: usize) -> FileStore {
        let file = dir.join("control.toml");
        FileStore::new(
            file.clone(),
            History::open(&History::default_dir(&file), keep).unwrap(),
        )
    }

    fn text(n: u64) -> String {
        format!("serial = 1\n\n[regions.r{n}]\ndrain = true\n")
    }

    #[test]
    fn the_file_store_keeps_the_contract() {
        let dir = temp_dir("contract");
        contract::check(&store(&dir, 3), 3, text).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_stale_revision_is_refused_and_nothing_is_written() {
        let dir = temp_dir("conflict");
        let s = store(&dir, 5);
        let w = s
            .compare_and_write(CONTROL, 0, "serial = 4\n", &Author::default())
            .unwrap();
        assert_eq!(w.serial, 5);
        // Someone edits the file by hand.
        std::fs::write(s.file(), "serial = 9\n").unwrap();
        let err = s
            .compare_and_write(CONTROL, w.revision, "serial = 4\n", &Author::default())
            .unwrap_err();
        assert!(matches!(err, StoreError::Conflict { .. }), "{err}");
        assert!(err.to_string().contains("control.toml"), "{err}");
        assert_eq!(std::fs::read_to_string(s.file()).unwrap(), "serial = 9\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_serial_is_one_above_file_history_and_floor_and_absent_stays_absent() {
        let dir = temp_dir("serial");
        let s = store(&dir, 5);
        s.record_accepted(CONTROL, 40, "serial = 40\n", "test")
            .unwrap();
        let w = s
            .compare_and_write(CONTROL, 0, "serial = 2\n", &Author::default())
            .unwrap();
        assert_eq!(w.serial, 41, "above the history");
        let floor = Author {
            floor: 70,
            ..Author::default()
        };
        let w = s
            .compare_and_write(CONTROL, w.revision, "serial = 2\n", &floor)
            .unwrap();
        assert_eq!((w.serial, w.text.as_str()), (71, "serial = 71\n"));
        // Replacing a serial-less file with a serial-less text leaves the numbering to the
        // server (the file's rule, unchanged).
        std::fs::write(s.file(), "[regions.a]\n").unwrap();
        let rev = s.current(CONTROL).unwrap().unwrap().revision;
        let w = s
            .compare_and_write(CONTROL, rev, "[regions.b]\n", &Author::default())
            .unwrap();
        assert_eq!((w.serial, w.text.as_str()), (0, "[regions.b]\n"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_history_is_bounded_and_keeps_its_layout() {
        let dir = temp_dir("bound");
        let s = store(&dir, 2);
        for n in 1..=4 {
            s.record_accepted(CONTROL, n, &format!("serial = {n}\n"), "test")
                .unwrap();
        }
        let serials: Vec<u64> = s
            .versions(CONTROL)
            .unwrap()
            .versions
            .iter()
            .map(|v| v.serial)
            .collect();
        assert_eq!(serials, [3, 4]);
        assert!(dir.join("control.toml.history/0000000004.toml").exists());
        assert!(matches!(
            s.versions("tenants/x"),
            Err(StoreError::UnknownKey { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn next_serial_is_one_above_the_largest() {
        assert_eq!(next_serial_above([]), 1);
        assert_eq!(next_serial_above([3, 9, 4]), 10);
        assert_eq!(next_serial_above([u64::MAX]), u64::MAX);
    }
}
