//! Tenants applied one by one: the folder of tenant documents (`[tenants] dir`) is looked at
//! for files whose bytes changed; each changed document is checked alone (parsed, compiled
//! against the platform served, its names claimed by no other tenant), then the good ones
//! are tasted by the taster child in one batch — a batch refused is split in halves until
//! the culprits are found, and only they are refused. Each accepted tenant is numbered
//! (per-tenant serial and bounded history in `<dir>/.history/<tenant>/`) and the tenant
//! table is rebuilt by copying only the shards its names fall in, then swapped in. A refused
//! tenant keeps serving its last good version. No zone is read, the platform is not
//! recompiled.
//!
//! Owns the tenants' part of the control plane's state (served versions, last refusals,
//! counters) and its status; the platform comes in from the reloader on every accepted
//! reload ([`TenantRegistry::platform_changed`]).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::config::{Config, TasterConfig};
use crate::control::history::History;
use crate::dns::wire::WireName;
use crate::hash::fnv1a64;
use crate::policy::ProfileConfig;
use crate::rfc3339;
use crate::snapshot::Snapshot;
use crate::taster::child::{TenantBatch, TenantTaste};
use crate::tenant::{
    compile, parse, valid_tenant_name, Identity, NameChange, PlatformView, ServedTenant,
    TenantProblem,
};

/// Largest tenant document.
const TENANT_FILE_LIMIT: u64 = 1 << 20;

/// A tenant's last refusal: when, which file, why (the problems name file, line, field).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct TenantRefusal {
    pub at: String,
    pub file: String,
    pub reasons: Vec<String>,
}

/// One tenant as status shows it (`GET /v1/tenants/{name}`, `steerdns tenant show`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct TenantView {
    pub name: String,
    pub file: String,
    /// `active` or `suspended` (the version served), or `refused` (never served).
    pub state: String,
    /// The served version's serial and fingerprint (`None`: never served).
    pub serial: Option<u64>,
    pub version: Option<String>,
    pub names: Vec<String>,
    pub own_profile: bool,
    pub served_since: Option<String>,
    pub last_refusal: Option<TenantRefusal>,
}

/// A refused tenant in the status summary.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct RefusedTenant {
    pub name: String,
    pub file: String,
    pub reason: String,
    /// Whether an earlier version is still served.
    pub serving_previous: bool,
}

/// The `tenants` block of `/v1/status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct TenantsStatus {
    pub dir: Option<PathBuf>,
    /// Tenant documents known (served or refused).
    pub count: usize,
    /// Tenants served (active or suspended).
    pub served: usize,
    pub suspended: usize,
    /// Tenants whose newest document is refused.
    pub refused: Vec<RefusedTenant>,
    pub refusals_total: u64,
    pub changes_applied: u64,
    /// Taster runs for tenant batches (a split batch counts each half).
    pub tastes: u64,
    pub last_apply_ms: f64,
    /// Times the folder was looked at (tests and operators wait for "looked again").
    pub checks: u64,
}

/// What readers see, replaced whole after every change.
#[derive(Default)]
struct Published {
    status: TenantsStatus,
    tenants: BTreeMap<String, TenantView>,
}

/// How tenant batches are tasted.
struct TasterSetup {
    program: PathBuf,
    settings: TasterConfig,
    args: Vec<OsString>,
}

/// The platform tenants are checked against: the snapshot served and its config's parts.
struct Platform {
    snapshot: Arc<Snapshot>,
    profiles: BTreeMap<String, ProfileConfig>,
    dir: PathBuf,
    history_keep: usize,
    taster: Option<TasterSetup>,
    control: Option<String>,
}

struct Served {
    tenant: Arc<ServedTenant>,
    text: String,
    since: String,
}

#[derive(Default)]
struct Record {
    file: String,
    /// FNV hash of the bytes last looked at (accepted or refused).
    looked_at: Option<u64>,
    served: Option<Served>,
    refusal: Option<TenantRefusal>,
}

#[derive(Default)]
struct State {
    platform: Option<Platform>,
    records: BTreeMap<String, Record>,
    refusals_total: u64,
    changes_applied: u64,
    tastes: u64,
    last_apply_ms: f64,
}

/// A document that changed since it was last looked at.
enum Change {
    Written {
        name: String,
        file: String,
        text: Result<String, String>,
    },
    Removed {
        name: String,
    },
}

/// A document that passed the in-process checks, waiting for the taster.
struct Candidate {
    name: String,
    file: String,
    text: String,
    tenant: ServedTenant,
}

/// The tenants' registry: owns their state, applies changes, publishes status.
#[derive(Default)]
pub struct TenantRegistry {
    state: Mutex<State>,
    published: ArcSwap<Published>,
    checks: AtomicU64,
}

impl TenantRegistry {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The `tenants` block of status. Never waits for a change in progress.
    pub fn status(&self) -> TenantsStatus {
        let mut status = self.published.load().status.clone();
        status.checks = self.checks.load(Ordering::Relaxed);
        status
    }

    /// Every tenant, by name.
    pub fn list(&self) -> Vec<TenantView> {
        self.published.load().tenants.values().cloned().collect()
    }

    /// One tenant.
    pub fn get(&self, name: &str) -> Option<TenantView> {
        self.published.load().tenants.get(name).cloned()
    }

    /// The reloader accepted a platform (config, zones, control): tenants are checked
    /// against it from now on. Tenants with a profile of their own are compiled again (their
    /// profile nests the platform's); one that no longer compiles keeps its served version
    /// and is refused. The folder is not looked at here (see [`TenantRegistry::check`]).
    pub fn platform_changed(
        &self,
        config: &Config,
        snapshot: Arc<Snapshot>,
        taster: Option<&Path>,
        args: Vec<OsString>,
        control: Option<String>,
    ) {
        let mut state = self.lock();
        let enabled = !config.tenants.dir.as_os_str().is_empty() && config.has_steering();
        let dir = enabled.then(|| config.tenants.dir.clone());
        let Some(dir) = dir else {
            state.platform = None;
            self.publish(&state);
            return;
        };
        state.platform = Some(Platform {
            snapshot,
            profiles: config.profiles.clone(),
            dir,
            history_keep: config.tenants.history_keep.max(1),
            taster: match taster {
                Some(program) if config.taster.enabled => Some(TasterSetup {
                    program: program.to_path_buf(),
                    settings: config.taster.clone(),
                    args,
                }),
                _ => None,
            },
            control,
        });
        recompile_own_profiles(&mut state);
        self.publish(&state);
    }

    /// Looks at the folder and applies what changed. Returns how many tenant documents
    /// changed (accepted, refused or removed).
    pub fn check(&self) -> usize {
        let mut state = self.lock();
        let changes = match &state.platform {
            Some(platform) => changed(&state.records, scan(&platform.dir)),
            None => Vec::new(),
        };
        let count = changes.len();
        if count > 0 {
            apply(&mut state, changes);
            self.publish(&state);
        }
        // Counted after publishing: a reader that sees N checks sees what the N-th did.
        self.checks.fetch_add(1, Ordering::Relaxed);
        count
    }

    /// A tenant document written through the API: checked alone and tasted first, and only
    /// if it passes `write` (the store's compare-and-swap) is called, and the document is
    /// served at once (the folder's next look sees bytes it has already looked at). Nothing
    /// is written when the document is refused; the tenant's own status is not touched then
    /// (its document did not change).
    pub fn put<W, E>(
        &self,
        name: &str,
        text: &str,
        write: impl FnOnce() -> Result<W, E>,
    ) -> Result<(W, TenantView), PutError<E>> {
        self.put_then(name, text, write, Then::Serve)
    }

    /// Like [`TenantRegistry::put`], but the document is only checked, tasted and written,
    /// not served here: in a fleet that stages tenant changes, it reaches this node (and every
    /// other) through the canary first (`crate::fleet::tenants`).
    pub fn put_staged<W, E>(
        &self,
        name: &str,
        text: &str,
        write: impl FnOnce() -> Result<W, E>,
    ) -> Result<(W, TenantView), PutError<E>> {
        self.put_then(name, text, write, Then::Leave)
    }

    fn put_then<W, E>(
        &self,
        name: &str,
        text: &str,
        write: impl FnOnce() -> Result<W, E>,
        then: Then,
    ) -> Result<(W, TenantView), PutError<E>> {
        let mut state = self.lock();
        let started = Instant::now();
        let Some(platform) = state.platform.take() else {
            return Err(PutError::Off);
        };
        let outcome = put_locked(&mut state, &platform, name, text, write, then);
        state.platform = Some(platform);
        if outcome.is_ok() {
            state.last_apply_ms = started.elapsed().as_secs_f64() * 1000.0;
            self.publish(&state);
        }
        let written = outcome?;
        let view = state
            .records
            .get(name)
            .map(|record| view(name, record))
            .unwrap_or_default();
        Ok((written, view))
    }

    /// A tenant document removed through the API: `remove` (the store's compare-and-delete)
    /// is called, then the tenant's names are answered by the platform at once.
    pub fn delete<W, E>(
        &self,
        name: &str,
        remove: impl FnOnce() -> Result<W, E>,
    ) -> Result<W, PutError<E>> {
        let mut state = self.lock();
        if state.platform.is_none() {
            return Err(PutError::Off);
        }
        let removed = remove().map_err(PutError::Store)?;
        if state.records.contains_key(name) {
            apply(
                &mut state,
                vec![Change::Removed {
                    name: name.to_string(),
                }],
            );
            self.publish(&state);
        }
        Ok(removed)
    }

    /// The tenants' folder, if tenants are on (a fleet node mirrors etcd's tenants into it).
    pub fn folder(&self) -> Option<PathBuf> {
        self.lock().platform.as_ref().map(|p| p.dir.clone())
    }

    /// The document `file` as messages name it (`tenants/<name>.toml`), if tenants are on.
    pub fn file_of(&self, name: &str) -> Option<String> {
        let state = self.lock();
        let platform = state.platform.as_ref()?;
        Some(format!("{}/{name}.toml", shown_dir(&platform.dir)))
    }

    fn publish(&self, state: &State) {
        let tenants: BTreeMap<String, TenantView> = state
            .records
            .iter()
            .map(|(name, record)| (name.clone(), view(name, record)))
            .collect();
        let served = tenants.values().filter(|t| t.serial.is_some()).count();
        let suspended = tenants.values().filter(|t| t.state == "suspended").count();
        let refused = state
            .records
            .iter()
            .filter_map(|(name, record)| {
                let refusal = record.refusal.as_ref()?;
                Some(RefusedTenant {
                    name: name.clone(),
                    file: record.file.clone(),
                    reason: refusal.reasons.join("; "),
                    serving_previous: record.served.is_some(),
                })
            })
            .collect();
        let status = TenantsStatus {
            dir: state.platform.as_ref().map(|p| p.dir.clone()),
            count: tenants.len(),
            served,
            suspended,
            refused,
            refusals_total: state.refusals_total,
            changes_applied: state.changes_applied,
            tastes: state.tastes,
            last_apply_ms: state.last_apply_ms,
            checks: 0,
        };
        self.published
            .store(Arc::new(Published { status, tenants }));
    }
}

/// Why an API write of a tenant was not served.
#[derive(Debug, thiserror::Error)]
pub enum PutError<E> {
    #[error("tenants are off (no [tenants] folder, or the platform steers no names)")]
    Off,
    /// The document is refused by the checks alone (schema, platform); each problem names
    /// the file, line and field. Nothing was written.
    #[error("refused: {}", problem_lines(.0.clone()).join("; "))]
    Invalid(Vec<TenantProblem>),
    /// The document is refused by a name claimed twice or by the taster. Nothing was written.
    #[error("refused: {}", .0.join("; "))]
    Refused(Vec<String>),
    /// The store refused the write (a conflict, a file error). Nothing was served.
    #[error(transparent)]
    Store(E),
}

/// [`TenantRegistry::put`] with the lock held and the platform taken out.
/// What a put does once the document is written.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    Serve,
    Leave,
}

fn put_locked<W, E>(
    state: &mut State,
    platform: &Platform,
    name: &str,
    text: &str,
    write: impl FnOnce() -> Result<W, E>,
    then: Then,
) -> Result<W, PutError<E>> {
    let file = format!("{}/{name}.toml", shown_dir(&platform.dir));
    let empty = Record::default();
    let record = state.records.get(name).unwrap_or(&empty);
    let candidate = check_alone(platform, record, name, &file, Ok(text.to_string()))
        .map_err(PutError::Invalid)?;
    if let Some(reason) = clash(&claims(state), &candidate) {
        return Err(PutError::Refused(vec![reason]));
    }
    let (mut good, bad) = taste_split(platform, &mut state.tastes, vec![candidate]);
    if let Some((_, reasons)) = bad.into_iter().next() {
        return Err(PutError::Refused(reasons));
    }
    let Some(candidate) = good.pop() else {
        return Err(PutError::Refused(vec![format!("{file}: not tasted")]));
    };
    let written = write().map_err(PutError::Store)?;
    if then == Then::Leave {
        return Ok(written);
    }
    let record = state.records.entry(name.to_string()).or_default();
    record.file = file;
    record.looked_at = Some(fnv1a64(text.as_bytes()));
    let changes = accept(state, platform, candidate, "admin API");
    let tenants = platform.snapshot.tenants();
    tenants.store(Arc::new(tenants.load().with_changes(changes)));
    Ok(written)
}

fn view(name: &str, record: &Record) -> TenantView {
    let served = record.served.as_ref();
    TenantView {
        name: name.to_string(),
        file: record.file.clone(),
        state: served
            .map_or("refused", |s| s.tenant.state.as_str())
            .to_string(),
        serial: served.map(|s| s.tenant.serial),
        version: served.map(|s| s.tenant.version.clone()),
        names: served.map_or_else(Vec::new, |s| s.tenant.display_names.clone()),
        own_profile: served.is_some_and(|s| s.tenant.has_own_profile()),
        served_since: served.map(|s| s.since.clone()),
        last_refusal: record.refusal.clone(),
    }
}

/// How messages name the folder: its last component (`tenants`).
fn shown_dir(dir: &Path) -> String {
    dir.file_name()
        .map_or_else(|| "tenants".into(), |n| n.to_string_lossy().into_owned())
}

/// Every `<name>.toml` in `dir` (hidden files and other extensions ignored), with its text.
fn scan(dir: &Path) -> BTreeMap<String, (String, Result<String, String>)> {
    let shown = shown_dir(dir);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            let file_name = path.file_name()?.to_str()?.to_string();
            let name = file_name.strip_suffix(".toml")?.to_string();
            if name.starts_with('.') || !path.is_file() {
                return None;
            }
            let text = crate::files::read_text_limited(&path, TENANT_FILE_LIMIT)
                .map_err(|e| format!("{shown}/{file_name}: cannot read: {e}"));
            Some((name, (format!("{shown}/{file_name}"), text)))
        })
        .collect()
}

/// The documents whose bytes differ from the ones last looked at, and the removed ones.
fn changed(
    records: &BTreeMap<String, Record>,
    files: BTreeMap<String, (String, Result<String, String>)>,
) -> Vec<Change> {
    let removed = records
        .keys()
        .filter(|name| !files.contains_key(*name))
        .map(|name| Change::Removed { name: name.clone() });
    let mut changes: Vec<Change> = removed.collect();
    for (name, (file, text)) in files {
        let hash = text.as_ref().ok().map(|t| fnv1a64(t.as_bytes()));
        let known = records.get(&name).and_then(|r| r.looked_at);
        if hash.is_none() || hash != known {
            changes.push(Change::Written { name, file, text });
        }
    }
    changes
}

/// Applies one batch of changes: checks, tastes, numbers, swaps the table once.
fn apply(state: &mut State, changes: Vec<Change>) {
    let started = Instant::now();
    let Some(platform) = state.platform.take() else {
        return;
    };
    let mut table_changes = Vec::new();
    let mut candidates = Vec::new();
    for change in changes {
        match change {
            Change::Removed { name } => {
                if let Some(served) = state.records.remove(&name).and_then(|r| r.served) {
                    let names = served.tenant.names.iter().cloned();
                    table_changes.extend(names.map(NameChange::Remove));
                }
                tracing::info!(
                    "tenant {name}: document removed; its names answer as the platform's"
                );
            }
            Change::Written { name, file, text } => {
                let record = state.records.entry(name.clone()).or_default();
                record.file = file.clone();
                record.looked_at = text.as_ref().ok().map(|t| fnv1a64(t.as_bytes()));
                match check_alone(&platform, record, &name, &file, text) {
                    Ok(candidate) => candidates.push(candidate),
                    Err(problems) => refuse(state, &name, &file, problem_lines(problems)),
                }
            }
        }
    }
    let candidates = refuse_double_claims(state, candidates);
    let (good, bad) = taste_split(&platform, &mut state.tastes, candidates);
    for (candidate, reasons) in bad {
        refuse(state, &candidate.name, &candidate.file, reasons);
    }
    for candidate in good {
        table_changes.extend(accept(state, &platform, candidate, "tenant file"));
    }
    if !table_changes.is_empty() {
        let tenants = platform.snapshot.tenants();
        let table = tenants.load().with_changes(table_changes);
        tenants.store(Arc::new(table));
    }
    state.last_apply_ms = started.elapsed().as_secs_f64() * 1000.0;
    state.platform = Some(platform);
}

/// The in-process checks of one document: its name, its text, against the platform. Every
/// problem names the file and field (line 0: the document as a whole).
fn check_alone(
    platform: &Platform,
    record: &Record,
    name: &str,
    file: &str,
    text: Result<String, String>,
) -> Result<Candidate, Vec<TenantProblem>> {
    let whole = |field: &str, problem: String| {
        vec![TenantProblem {
            file: file.to_string(),
            line: 0,
            field: field.to_string(),
            problem,
        }]
    };
    let text = text.map_err(|e| whole("document", e))?;
    if !valid_tenant_name(name) {
        return Err(whole(
            "file name",
            format!("{name:?} is not a tenant name (1 to 63 lower-case letters, digits or '-', the file is <tenant>.toml)"),
        ));
    }
    let parsed = parse(file, &text)?;
    let serial = next_serial(platform, record, name, &text);
    let identity = Identity {
        name,
        serial,
        version: format!("{:08x}", fnv1a64(text.as_bytes()) as u32),
    };
    let snapshot = &platform.snapshot;
    let Some(policies) = snapshot.policies() else {
        return Err(whole(
            "names",
            "the platform steers no names: a tenant's names need a platform wildcard".into(),
        ));
    };
    let exists = |wire: &[u8]| name_exists(snapshot, wire);
    let view = PlatformView {
        policies,
        profiles: &platform.profiles,
        exists: &exists,
    };
    let tenant = compile(&parsed, identity, &view)?;
    Ok(Candidate {
        name: name.to_string(),
        file: file.to_string(),
        text,
        tenant,
    })
}

fn problem_lines(problems: Vec<TenantProblem>) -> Vec<String> {
    problems.iter().map(ToString::to_string).collect()
}

/// Whether a name is a node of a served zone.
fn name_exists(snapshot: &Snapshot, wire: &[u8]) -> bool {
    let Some(name) = WireName::from_wire(wire) else {
        return false;
    };
    let zones = snapshot.zones();
    zones
        .find_index(&name)
        .and_then(|(zone, _)| zones.zones().get(zone))
        .is_some_and(|zone| zone.node(wire).is_some())
}

/// The serial of `text` for tenant `name`: the newest recorded one's if it is the same
/// text (a restart), else one above both it and the version served.
fn next_serial(platform: &Platform, record: &Record, name: &str, text: &str) -> u64 {
    let served = record.served.as_ref().map_or(0, |s| s.tenant.serial);
    if record.served.as_ref().is_some_and(|s| s.text == text) {
        return served;
    }
    let newest = history(platform, name)
        .ok()
        .and_then(|h| h.newest().ok().flatten());
    match newest {
        Some((meta, recorded)) if recorded == text && meta.serial >= served => meta.serial,
        Some((meta, _)) => meta.serial.max(served) + 1,
        None => served + 1,
    }
}

fn history(platform: &Platform, name: &str) -> Result<History, String> {
    let dir = platform.dir.join(".history").join(name);
    History::open(&dir, platform.history_keep).map_err(|e| e.to_string())
}

/// Who claims each name now: the served tenants (name, file).
fn claims(state: &State) -> BTreeMap<Box<[u8]>, (String, String)> {
    let mut claims = BTreeMap::new();
    for (name, record) in &state.records {
        for wire in record.served.iter().flat_map(|s| s.tenant.names.iter()) {
            claims.insert(wire.clone(), (name.clone(), record.file.clone()));
        }
    }
    claims
}

/// Why `candidate` may not claim its names: one is another tenant's (naming both files).
fn clash(claims: &BTreeMap<Box<[u8]>, (String, String)>, candidate: &Candidate) -> Option<String> {
    let (shown, owner, owner_file) = candidate
        .tenant
        .names
        .iter()
        .zip(&candidate.tenant.display_names)
        .find_map(|(wire, shown)| {
            let (owner, file) = claims.get(wire)?;
            (*owner != candidate.name).then_some((shown, owner, file))
        })?;
    Some(format!(
        "{}: names: {shown:?} is already claimed by tenant {owner} ({owner_file}); two tenants can never claim one name",
        candidate.file
    ))
}

/// Refuses a candidate claiming a name another tenant owns (served, or accepted earlier in
/// this batch), naming both files.
fn refuse_double_claims(state: &mut State, candidates: Vec<Candidate>) -> Vec<Candidate> {
    let mut claims = claims(state);
    let mut kept = Vec::new();
    for candidate in candidates {
        match clash(&claims, &candidate) {
            Some(reason) => refuse(state, &candidate.name, &candidate.file, vec![reason]),
            None => {
                for wire in &candidate.tenant.names {
                    claims.insert(
                        wire.clone(),
                        (candidate.name.clone(), candidate.file.clone()),
                    );
                }
                kept.push(candidate);
            }
        }
    }
    kept
}

type Refusals = Vec<(Candidate, Vec<String>)>;

/// Tastes `candidates` in one batch; a refused batch is split in halves until each culprit
/// is alone. Without a taster, every candidate passes.
fn taste_split(
    platform: &Platform,
    tastes: &mut u64,
    candidates: Vec<Candidate>,
) -> (Vec<Candidate>, Refusals) {
    let Some(setup) = &platform.taster else {
        return (candidates, Vec::new());
    };
    if candidates.is_empty() {
        return (candidates, Vec::new());
    }
    let batch = TenantBatch {
        control: platform.control.clone(),
        tenants: candidates
            .iter()
            .map(|c| TenantTaste {
                name: c.name.clone(),
                file: c.file.clone(),
                text: c.text.clone(),
            })
            .collect(),
    };
    *tastes += 1;
    let verdict =
        crate::taster::taste_tenants(&setup.program, &setup.settings, &setup.args, &batch);
    let refused = match verdict {
        Ok(_) => return (candidates, Vec::new()),
        Err(refused) => refused,
    };
    if candidates.len() == 1 {
        let reasons: Vec<String> = refused
            .reasons()
            .into_iter()
            .map(|r| format!("taster: {r}"))
            .collect();
        return (
            Vec::new(),
            candidates
                .into_iter()
                .map(|c| (c, reasons.clone()))
                .collect(),
        );
    }
    let mut first = candidates;
    let second = first.split_off(first.len() / 2);
    let (mut good, mut bad) = taste_split(platform, tastes, first);
    let (good_second, bad_second) = taste_split(platform, tastes, second);
    good.extend(good_second);
    bad.extend(bad_second);
    (good, bad)
}

fn refuse(state: &mut State, name: &str, file: &str, reasons: Vec<String>) {
    for reason in &reasons {
        tracing::error!(
            "tenant {name} refused, still serving its last good version (if any): {reason}"
        );
    }
    state.refusals_total += 1;
    let record = state.records.entry(name.to_string()).or_default();
    record.file = file.to_string();
    record.refusal = Some(TenantRefusal {
        at: rfc3339::format_utc(SystemTime::now()),
        file: file.to_string(),
        reasons,
    });
}

/// Serves a tasted candidate: records it in its history and returns its table changes.
fn accept(
    state: &mut State,
    platform: &Platform,
    candidate: Candidate,
    source: &str,
) -> Vec<NameChange> {
    let Candidate {
        name,
        file,
        text,
        tenant,
    } = candidate;
    let now = SystemTime::now();
    let serial = tenant.serial;
    match history(platform, &name).and_then(|h| {
        h.record(&text, serial, source, &file, now)
            .map_err(|e| e.to_string())
    }) {
        Ok(_) => {}
        Err(e) => tracing::warn!("tenant {name} serial {serial} served but not recorded: {e}"),
    }
    let tenant = Arc::new(tenant);
    let record = state.records.entry(name.clone()).or_default();
    let old_names: BTreeSet<Box<[u8]>> = record
        .served
        .iter()
        .flat_map(|s| s.tenant.names.iter().cloned())
        .collect();
    let mut changes: Vec<NameChange> = old_names
        .into_iter()
        .filter(|n| !tenant.names.contains(n))
        .map(NameChange::Remove)
        .collect();
    changes.extend(
        tenant
            .names
            .iter()
            .map(|n| NameChange::Set(n.clone(), tenant.clone())),
    );
    let changed = record.served.as_ref().is_none_or(|s| s.text != text);
    record.served = Some(Served {
        tenant,
        text,
        since: rfc3339::format_utc(now),
    });
    record.refusal = None;
    if changed {
        state.changes_applied += 1;
        tracing::info!("tenant {name}: serving serial {serial} ({file})");
    }
    changes
}

/// After a platform change: tenants with their own profile compiled again against it.
fn recompile_own_profiles(state: &mut State) {
    let Some(platform) = state.platform.take() else {
        return;
    };
    let mut changes = Vec::new();
    let mut refusals = Vec::new();
    for (name, record) in &mut state.records {
        let Some(served) = &record.served else {
            continue;
        };
        if !served.tenant.has_own_profile() {
            continue;
        }
        let text = served.text.clone();
        let serial = served.tenant.serial;
        let file = record.file.clone();
        match check_alone(&platform, record, name, &file, Ok(text.clone())) {
            Ok(candidate) if candidate.tenant.serial == serial => {
                let tenant = Arc::new(candidate.tenant);
                changes.extend(
                    tenant
                        .names
                        .iter()
                        .map(|n| NameChange::Set(n.clone(), tenant.clone())),
                );
                if let Some(served) = &mut record.served {
                    served.tenant = tenant;
                }
            }
            Ok(_) => {}
            Err(problems) => refusals.push((name.clone(), file, problem_lines(problems))),
        }
    }
    for (name, file, reasons) in refusals {
        let reasons = reasons
            .into_iter()
            .map(|r| format!("against the platform now served: {r}"))
            .collect();
        refuse(state, &name, &file, reasons);
    }
    if !changes.is_empty() {
        let tenants = platform.snapshot.tenants();
        tenants.store(Arc::new(tenants.load().with_changes(changes)));
    }
    state.platform = Some(platform);
}
