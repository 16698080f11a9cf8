//! Tenants applied one by one: the folder of tenant documents (`[tenants] dir`) is looked at
//! for files whose bytes changed (the files the watcher names; a full look skips the files
//! not modified since the last full look began); each changed document is checked alone (parsed, compiled
//! against the platform served, its names claimed by no other tenant), then the good ones
//! are tasted by the taster child in one batch — a batch refused is split in halves until
//! the culprits are found, and only they are refused. Each accepted tenant is numbered
//! (per-tenant serial and bounded history in `<dir>/.history/<tenant>/`) and the tenant
//! table is rebuilt by copying only the shards its names fall in, then swapped in. A refused
//! tenant keeps serving its last good version. No zone is read, the platform is not
//! recompiled, and no cost grows with the number of tenants: the registry's own index of
//! served tenants is sharded and shared like the name table, status counts are kept as
//! changes apply, and a tenant's view is derived when asked for.
//!
//! Owns the tenants' part of the control plane's state (served versions, last refusals,
//! counters) and its status; the platform comes in from the reloader on every accepted
//! reload ([`TenantRegistry::platform_changed`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::config::{Config, TasterConfig};
use crate::control::history::{History, HistoryError};
use crate::dns::wire::WireName;
use crate::hash::fnv1a64;
use crate::policy::ProfileConfig;
use crate::rfc3339;
use crate::snapshot::Snapshot;
use crate::taster::child::{TenantBatch, TenantTaste};
use crate::tenant::cache::{self, CacheKey};
use crate::tenant::{
    compile, parse, platform_key, valid_tenant_name, Identity, NameChange, PlatformView,
    ServedTenant, TenantIndex, TenantProblem, TenantState, TenantTable,
};

/// Largest tenant document.
const TENANT_FILE_LIMIT: u64 = 1 << 20;

/// Documents of the folder compiled and tasted together at most.
const TASTE_CHUNK: usize = 5000;

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
    /// Its own monitors (`[monitors]`), their states, its probe budget and whether it is
    /// throttled (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<crate::health::tenants::TenantProbeStatus>,
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
    /// Tenants served from the quarantine cells (absent from servers older than quarantine).
    #[serde(default)]
    pub quarantined: usize,
    /// Tenants whose newest document is refused.
    pub refused: Vec<RefusedTenant>,
    pub refusals_total: u64,
    pub changes_applied: u64,
    /// Taster runs for tenant batches (a split batch counts each half).
    pub tastes: u64,
    pub last_apply_ms: f64,
    /// Times the folder was looked at (tests and operators wait for "looked again").
    pub checks: u64,
    /// Tenants served from the last-known-good cache at start (`None`: it was not used).
    pub cache_loaded: Option<usize>,
    /// Why the cache was not used at start (missing, damaged, another binary or platform).
    pub cache_not_used: Option<String>,
    /// Times the cache was written (`<dir>/.lkg/tenants.bin`).
    pub cache_writes: u64,
    /// Why the last write of the cache failed, if it did.
    pub cache_error: Option<String>,
    /// Tenants with monitors of their own: how many, how many down, whether throttled.
    #[serde(default)]
    pub probes: Vec<crate::health::tenants::TenantProbeSummary>,
}

/// What readers see, replaced whole after every change (the index shares its shards with
/// the registry's, so publishing costs the shards a change touched).
#[derive(Default)]
struct Published {
    status: TenantsStatus,
    served: TenantIndex,
    refused: Arc<BTreeMap<String, Refused>>,
    /// How messages name the folder (`tenants`).
    shown: String,
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
    /// `[tenants] max_monitors`.
    max_monitors: usize,
    /// The tenants' own monitors (the registry's): attached as their versions are served.
    probes: Arc<crate::health::tenants::TenantProbes>,
}

/// A tenant whose newest document is refused (or cannot be read).
#[derive(Clone)]
struct Refused {
    /// FNV hash of the bytes refused (`None`: they could not be read).
    looked_at: Option<u64>,
    refusal: TenantRefusal,
}

impl State {
    /// Counts `tenant` in (`added`) or out of the served tenants by state.
    fn count(&mut self, tenant: &ServedTenant, added: bool) {
        let slot = match tenant.state {
            TenantState::Suspended => &mut self.suspended,
            TenantState::Quarantined => &mut self.quarantined,
            TenantState::Active => return,
        };
        *slot = if added {
            *slot + 1
        } else {
            slot.saturating_sub(1)
        };
    }
}

#[derive(Default)]
struct State {
    platform: Option<Arc<Platform>>,
    /// Served tenants by name: the same values the name table holds.
    served: TenantIndex,
    /// Tenants whose newest document is refused, with what was refused.
    refused: BTreeMap<String, Refused>,
    suspended: usize,
    quarantined: usize,
    refusals_total: u64,
    changes_applied: u64,
    last_apply_ms: f64,
    /// When the last full look at the folder began: a file not modified (nor renamed) since
    /// then is the one already looked at.
    full_look_began: Option<SystemTime>,
    /// Tenants whose file the next full look reads even if untouched (the cache's refused
    /// ones, and own-profile ones that did not compile from it).
    must_read: HashSet<String>,
    /// Counts every change to what is served or refused; the cache holds `saved`.
    generation: u64,
    saved: Option<(u64, Instant)>,
    cache_loaded: Option<usize>,
    cache_not_used: Option<String>,
    cache_writes: u64,
    cache_error: Option<String>,
    /// Every distinct shard of cells accepted, shared by the tenants that have it (a few
    /// thousand for a million tenants; the topology's fingerprint is part of each).
    shards: crate::cells::CellInterner,
}

impl State {
    /// The hash of the bytes last looked at for `name` (accepted or refused); `None`: never
    /// looked at, or unreadable.
    fn looked_at(&self, name: &str) -> Option<u64> {
        let refused = self.refused.get(name).map(|r| r.looked_at);
        looked_at(&self.served, refused, name)
    }

    fn knows(&self, name: &str) -> bool {
        self.refused.contains_key(name) || self.served.get(name).is_some()
    }
}

/// Why the tenants' cache was not used at start, or not written.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("tenants are off")]
    Off,
    #[error("the platform steers no names")]
    NoPlatform,
    #[error("{}: none yet", .0.display())]
    NoneYet(PathBuf),
    #[error("{}: cannot read: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {reason}", .path.display())]
    Refused {
        path: PathBuf,
        reason: cache::CacheRefused,
    },
    #[error("tenants are already served")]
    AlreadyServed,
    #[error("{}: cannot create: {source}", .path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: cannot write: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: crate::files::WriteError,
    },
}

/// The hash of the bytes last looked at for `name`: the refused ones' if its newest document
/// was refused (`refused`), else the served version's.
fn looked_at(served: &TenantIndex, refused: Option<Option<u64>>, name: &str) -> Option<u64> {
    match refused {
        Some(looked_at) => looked_at,
        None => served.get(name).map(|t| t.fingerprint),
    }
}

/// What the cache of a registry is written from, taken under the lock, written outside it.
struct CacheCopy {
    path: PathBuf,
    key: CacheKey,
    served: TenantIndex,
    refused: Vec<String>,
    until: SystemTime,
    generation: u64,
}

/// Where the tenants' cache lives: beside their history, in the folder (hidden from looks).
fn cache_path(dir: &Path) -> PathBuf {
    dir.join(".lkg").join("tenants.bin")
}

fn cache_key(platform: &Platform) -> Option<CacheKey> {
    let policies = platform.snapshot.policies()?;
    Some(CacheKey {
        binary: concat!("steerdns ", env!("CARGO_PKG_VERSION")).to_string(),
        platform: platform_key(policies),
    })
}

fn nanos(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// How long a changed registry waits before its cache is written again: five seconds, plus
/// one per 50,000 tenants (a write costs every tenant).
fn cache_interval(tenants: usize) -> Duration {
    Duration::from_secs(5 + (tenants / 50_000) as u64)
}

/// A document that changed since it was last looked at.
enum Change {
    Written {
        name: String,
        file: String,
        text: Result<String, Unreadable>,
        /// FNV hash of the text (`None`: it could not be read).
        looked_at: Option<u64>,
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
    /// Which queued put it is (0 for a document of the folder).
    ticket: u64,
}

/// The tenants' registry: owns their state, applies changes, publishes status.
#[derive(Default)]
pub struct TenantRegistry {
    state: Mutex<State>,
    published: ArcSwap<Published>,
    checks: AtomicU64,
    /// Taster runs for tenant batches (a split batch counts each half).
    tastes: AtomicU64,
    /// Puts waiting for the taster, tasted together.
    combiner: Combiner,
    /// The last blame computed, with what it was computed from (see [`TenantRegistry::blame`]).
    blame: Mutex<Option<BlameMemo>>,
    /// The tenants' own monitors and their probing.
    probes: Arc<crate::health::tenants::TenantProbes>,
}

/// A blame and its inputs, by identity: the impaired cells (their `Arc`) and the tenants
/// published (theirs). Status is read far more often than either changes. `Weak`, so that
/// the memo keeps no old generation of tenants alive, yet an address is never reused while
/// the memo names it.
struct BlameMemo {
    impaired: std::sync::Weak<crate::cells::ImpairedCells>,
    published: std::sync::Weak<Published>,
    blame: Arc<crate::cells::blame::Blame>,
}

/// Most suspects blame lists.
pub const BLAME_LIMIT: usize = 10;

/// Which files a look reads.
enum Look<'a> {
    /// Every file of the folder not modified since the last full look began.
    Full,
    /// These tenants' files (the ones the watcher saw change).
    Only(&'a BTreeSet<String>),
}

/// What one batch changes, swapped in at its end: the name table's changes, and the index's.
#[derive(Default)]
struct Swap {
    names: Vec<NameChange>,
    served: Vec<Arc<ServedTenant>>,
    removed: Vec<String>,
}

impl TenantRegistry {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The tenants' own monitors and their probing.
    pub fn probes(&self) -> &Arc<crate::health::tenants::TenantProbes> {
        &self.probes
    }

    /// The `tenants` block of status. Never waits for a change in progress.
    pub fn status(&self) -> TenantsStatus {
        let mut status = self.published.load().status.clone();
        status.checks = self.checks.load(Ordering::Relaxed);
        status.tastes = self.tastes.load(Ordering::Relaxed);
        status.probes = self.probes.summaries();
        status
    }

    /// The tenants whose shards explain the impaired cells of `platform` (see
    /// [`crate::cells::blame`]); `None` when no cell is impaired. Computed off the serving
    /// path, once per change of the impaired cells or of the tenants served (a rendezvous
    /// pass per tenant and impaired layer), and kept for the status reads in between.
    pub fn blame(
        &self,
        platform: &crate::policy::CompiledPolicies,
        impaired: &Arc<crate::cells::ImpairedCells>,
    ) -> Option<Arc<crate::cells::blame::Blame>> {
        let topology = platform.cells()?;
        let published = self.published.load_full();
        let mut memo = self.blame.lock().unwrap_or_else(|p| p.into_inner());
        let same = |m: &&BlameMemo| {
            std::ptr::eq(m.impaired.as_ptr(), Arc::as_ptr(impaired))
                && std::ptr::eq(m.published.as_ptr(), Arc::as_ptr(&published))
        };
        if let Some(m) = memo.as_ref().filter(same) {
            return Some(m.blame.clone());
        }
        // Quarantined tenants are on no platform cell: nothing to blame them for.
        let tenants = published.served.iter().filter_map(|t| {
            let cells = t.cells(platform).filter(|c| !c.is_quarantined())?;
            Some((t.name(), Some(cells.k()), None))
        });
        let blame = Arc::new(crate::cells::blame::blame(
            topology,
            impaired.cells(),
            tenants,
            BLAME_LIMIT,
        ));
        *memo = Some(BlameMemo {
            impaired: Arc::downgrade(impaired),
            published: Arc::downgrade(&published),
            blame: blame.clone(),
        });
        Some(blame)
    }

    /// Every tenant, by name.
    pub fn list(&self) -> Vec<TenantView> {
        let published = self.published.load();
        let mut names: BTreeSet<&str> = published.served.iter().map(|t| t.name()).collect();
        names.extend(published.refused.keys().map(String::as_str));
        let mut probed: BTreeMap<String, _> = self.probes.all().into_iter().collect();
        names
            .into_iter()
            .map(|name| {
                let mut view = published.view(name);
                view.probes = probed.remove(name);
                view
            })
            .collect()
    }

    /// One tenant.
    pub fn get(&self, name: &str) -> Option<TenantView> {
        let published = self.published.load();
        let known = published.served.get(name).is_some() || published.refused.contains_key(name);
        known.then(|| {
            let mut view = published.view(name);
            view.probes = self.probes.status(name);
            view
        })
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
        if state.platform.as_ref().is_some_and(|p| p.dir != dir) {
            state.full_look_began = None; // another folder: every file is new to us
        }
        state.platform = Some(Arc::new(Platform {
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
            max_monitors: config.tenants.max_monitors,
            probes: self.probes.clone(),
        }));
        self.probes.set_budget(config.tenants.probes_per_second);
        recompile_own_profiles(&mut state);
        self.publish(&state);
    }

    /// Looks at the whole folder and applies what changed (a file not modified since the
    /// last full look began is not read again). Returns how many tenant documents changed
    /// (accepted, refused or removed).
    pub fn check(&self) -> usize {
        self.look(Look::Full)
    }

    /// Looks at these tenants' files only (the ones a watcher saw change) and applies what
    /// changed: a change costs the files changed, not the folder.
    pub fn check_names(&self, names: &BTreeSet<String>) -> usize {
        self.look(Look::Only(names))
    }

    /// Reads the folder without the lock (a full look at a million files takes a while; puts
    /// go on meanwhile), then applies under it what still differs from what is served.
    fn look(&self, look: Look<'_>) -> usize {
        let (dir, known) = {
            let state = self.lock();
            let dir = state.platform.as_ref().map(|p| p.dir.clone());
            (dir, Known::of(&state))
        };
        let began = SystemTime::now();
        let (changes, full) = match (&dir, look) {
            (Some(dir), Look::Full) => match look_full(&known, dir) {
                Some(changes) => (changes, true),
                None => (Vec::new(), false),
            },
            (Some(dir), Look::Only(names)) => (look_only(&known, dir, names), false),
            (None, _) => (Vec::new(), false),
        };
        let mut state = self.lock();
        let same_dir = state.platform.as_ref().map(|p| &p.dir) == dir.as_ref();
        let changes = match same_dir {
            true => still_changed(&state, dir.as_deref(), changes),
            false => Vec::new(),
        };
        if full && same_dir {
            state.full_look_began = Some(began);
            state
                .must_read
                .retain(|name| !known.must_read.contains(name));
        }
        let count = changes.len();
        if count > 0 {
            apply(&mut state, &self.tastes, changes);
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
        let started = Instant::now();
        let (mut state, outcome) = match self.prepare(name, text)? {
            // Checked and tasted without the lock; written and served under it.
            Some((state, platform, candidate)) => {
                self.finish(state, &platform, candidate, write, then)
            }
            // What it was checked against changed meanwhile, twice: all of it under the lock
            // (the taster's queue never takes the registry's lock).
            None => {
                let state = self.lock();
                let Some(platform) = state.platform.clone() else {
                    return Err(PutError::Off);
                };
                let served = state.served.get(name).cloned();
                let candidate =
                    self.checked_and_tasted(&platform, served.as_deref(), name, text)?;
                self.finish(state, &platform, candidate, write, then)
            }
        };
        if outcome.is_ok() {
            state.last_apply_ms = started.elapsed().as_secs_f64() * 1000.0;
            self.publish(&state);
        }
        let written = outcome?;
        let shown = state
            .platform
            .as_ref()
            .map_or_else(|| "tenants".to_string(), |p| shown_dir(&p.dir));
        let view = view_of(
            &shown,
            name,
            state.served.get(name).map(|t| &**t),
            state.refused.get(name),
        );
        Ok((written, view))
    }

    /// Checks a put's document against the platform and tastes it with the puts that
    /// arrive meanwhile (one taster run for all of them), without holding the lock; returns
    /// the lock again with the tasted candidate when nothing it was checked against changed
    /// in between, `None` when that happened twice.
    #[allow(clippy::type_complexity)]
    fn prepare<E>(
        &self,
        name: &str,
        text: &str,
    ) -> Result<Option<(MutexGuard<'_, State>, Arc<Platform>, Candidate)>, PutError<E>> {
        for _ in 0..2 {
            let (platform, served) = {
                let state = self.lock();
                let Some(platform) = state.platform.clone() else {
                    return Err(PutError::Off);
                };
                (platform, state.served.get(name).cloned())
            };
            let candidate = self.checked_and_tasted(&platform, served.as_deref(), name, text)?;
            let state = self.lock();
            let same_platform = state
                .platform
                .as_ref()
                .is_some_and(|p| Arc::ptr_eq(p, &platform));
            let same_served = match (state.served.get(name), &served) {
                (Some(now), Some(then)) => Arc::ptr_eq(now, then),
                (None, None) => true,
                _ => false,
            };
            if same_platform && same_served {
                return Ok(Some((state, platform, candidate)));
            }
        }
        Ok(None)
    }

    /// A put's document checked alone against `platform` and tasted (with the puts queued
    /// meanwhile).
    fn checked_and_tasted<E>(
        &self,
        platform: &Arc<Platform>,
        served: Option<&ServedTenant>,
        name: &str,
        text: &str,
    ) -> Result<Candidate, PutError<E>> {
        let file = file_name(platform, name);
        let candidate = check_alone(platform, served, name, &file, Ok(text.to_string()))
            .map_err(PutError::Invalid)?;
        self.combiner
            .taste(platform, &self.tastes, candidate)
            .map_err(PutError::Refused)
    }

    /// A tasted put, under the lock: no name claimed twice, written, served.
    fn finish<'s, W, E>(
        &'s self,
        mut state: MutexGuard<'s, State>,
        platform: &Platform,
        candidate: Candidate,
        write: impl FnOnce() -> Result<W, E>,
        then: Then,
    ) -> (MutexGuard<'s, State>, Result<W, PutError<E>>) {
        let table = platform.snapshot.tenants().load();
        if let Some(reason) = clash(platform, &table, &BatchClaims::default(), &candidate) {
            return (state, Err(PutError::Refused(vec![reason])));
        }
        let written = match write() {
            Ok(written) => written,
            Err(e) => return (state, Err(PutError::Store(e))),
        };
        if then == Then::Serve {
            let mut swap = Swap::default();
            accept(
                &mut state,
                platform,
                candidate,
                "admin API",
                &mut swap,
                Announce::Each,
            );
            commit(&mut state, platform, swap);
        }
        (state, Ok(written))
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
        if state.knows(name) {
            apply(
                &mut state,
                &self.tastes,
                vec![Change::Removed {
                    name: name.to_string(),
                }],
            );
            self.publish(&state);
        }
        Ok(removed)
    }

    /// Serves every tenant of the cache (`<folder>/.lkg/tenants.bin`) at once, without reading
    /// a document: the folder is looked at afterwards ([`TenantRegistry::check`]) and only
    /// files modified since the cache was consistent are read. Returns how many tenants it
    /// served, or why it was not used (then nothing was served from it).
    pub fn load_cache(&self) -> Result<usize, CacheError> {
        let mut state = self.lock();
        let Some(platform) = state.platform.take() else {
            return Err(CacheError::Off);
        };
        let outcome = load_cache_locked(&mut state, &platform);
        state.platform = Some(platform);
        match &outcome {
            Ok(count) => {
                // What was loaded is what the cache holds: nothing to write back.
                state.saved = Some((state.generation, Instant::now()));
                state.cache_loaded = Some(*count);
            }
            Err(reason) => state.cache_not_used = Some(reason.to_string()),
        }
        self.publish(&state);
        outcome
    }

    /// Writes the cache if what is served changed since it was last written and the
    /// interval has passed (or `now` is set). The copy is taken under the lock; the bytes are
    /// built and written outside it, atomically (a crash leaves the old cache or the new).
    /// Returns the tenants written, `None` when there was nothing to write.
    pub fn save_cache(&self, now: bool) -> Result<Option<usize>, CacheError> {
        let copy = {
            let state = self.lock();
            let Some(platform) = &state.platform else {
                return Ok(None);
            };
            let (Some(until), Some(key)) = (state.full_look_began, cache_key(platform)) else {
                return Ok(None); // no full look yet: nothing it could promise
            };
            let due = match state.saved {
                Some((generation, _)) if generation == state.generation => false,
                Some((_, at)) => now || at.elapsed() >= cache_interval(state.served.len()),
                None => true,
            };
            if !due {
                return Ok(None);
            }
            CacheCopy {
                path: cache_path(&platform.dir),
                key,
                served: state.served.clone(),
                refused: state.refused.keys().cloned().collect(),
                until,
                generation: state.generation,
            }
        };
        let written = write_cache(&copy);
        let mut state = self.lock();
        match &written {
            Ok(()) => {
                state.saved = Some((copy.generation, Instant::now()));
                state.cache_writes += 1;
                state.cache_error = None;
            }
            Err(e) => {
                // Tried again at the next interval, not at every look.
                state.saved = Some((state.saved.map_or(0, |s| s.0), Instant::now()));
                state.cache_error = Some(e.to_string());
            }
        }
        self.publish(&state);
        written.map(|()| Some(copy.served.len()))
    }

    /// The tenants' folder, if tenants are on (a fleet node mirrors etcd's tenants into it).
    pub fn folder(&self) -> Option<PathBuf> {
        self.lock().platform.as_ref().map(|p| p.dir.clone())
    }

    /// The document `file` as messages name it (`tenants/<name>.toml`), if tenants are on.
    pub fn file_of(&self, name: &str) -> Option<String> {
        let state = self.lock();
        let platform = state.platform.as_ref()?;
        Some(file_name(platform, name))
    }

    /// Publishes what readers see. Costs the refused tenants and the shards of the index,
    /// never every tenant.
    fn publish(&self, state: &State) {
        let shown = state
            .platform
            .as_ref()
            .map_or_else(|| "tenants".to_string(), |p| shown_dir(&p.dir));
        let refused_list = state
            .refused
            .iter()
            .map(|(name, refused)| RefusedTenant {
                name: name.clone(),
                file: refused.refusal.file.clone(),
                reason: refused.refusal.reasons.join("; "),
                serving_previous: state.served.get(name).is_some(),
            })
            .collect::<Vec<_>>();
        let never_served = refused_list.iter().filter(|r| !r.serving_previous).count();
        let status = TenantsStatus {
            dir: state.platform.as_ref().map(|p| p.dir.clone()),
            count: state.served.len() + never_served,
            served: state.served.len(),
            suspended: state.suspended,
            quarantined: state.quarantined,
            refused: refused_list,
            refusals_total: state.refusals_total,
            changes_applied: state.changes_applied,
            tastes: self.tastes.load(Ordering::Relaxed),
            last_apply_ms: state.last_apply_ms,
            checks: 0,
            cache_loaded: state.cache_loaded,
            cache_not_used: state.cache_not_used.clone(),
            cache_writes: state.cache_writes,
            cache_error: state.cache_error.clone(),
            probes: Vec::new(),
        };
        self.published.store(Arc::new(Published {
            status,
            served: state.served.clone(),
            refused: Arc::new(state.refused.clone()),
            shown,
        }));
    }
}

impl Published {
    fn view(&self, name: &str) -> TenantView {
        view_of(
            &self.shown,
            name,
            self.served.get(name).map(|t| &**t),
            self.refused.get(name),
        )
    }
}

/// Puts waiting for the taster, tasted together: the first to arrive while no taste is
/// running tastes every put queued (one taster run, split only if refused), then the ones
/// queued meanwhile, until none is left; the others wait for their verdict. A thousand
/// concurrent puts cost a few taster runs, not a thousand.
#[derive(Default)]
struct Combiner {
    queue: Mutex<Queue>,
    tasted: std::sync::Condvar,
}

type Verdict = Result<Candidate, Vec<String>>;

#[derive(Default)]
struct Queue {
    pending: Vec<(u64, Arc<Platform>, Candidate)>,
    tasting: bool,
    next_ticket: u64,
    verdicts: std::collections::HashMap<u64, Verdict>,
}

impl Combiner {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn taste(&self, platform: &Arc<Platform>, tastes: &AtomicU64, candidate: Candidate) -> Verdict {
        let mut queue = self.lock();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.pending.push((ticket, platform.clone(), candidate));
        loop {
            if let Some(verdict) = queue.verdicts.remove(&ticket) {
                return verdict;
            }
            if queue.tasting {
                queue = self.tasted.wait(queue).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            queue.tasting = true;
            while !queue.pending.is_empty() {
                let batch = std::mem::take(&mut queue.pending);
                drop(queue);
                let verdicts = taste_batch(batch, tastes);
                queue = self.lock();
                queue.verdicts.extend(verdicts);
                self.tasted.notify_all();
            }
            queue.tasting = false;
            self.tasted.notify_all();
        }
    }
}

/// One batch of queued puts tasted, by platform (almost always one); a taste that panics
/// refuses its batch rather than leaving its waiters waiting.
fn taste_batch(
    batch: Vec<(u64, Arc<Platform>, Candidate)>,
    tastes: &AtomicU64,
) -> Vec<(u64, Verdict)> {
    let mut groups: Vec<(Arc<Platform>, Vec<Candidate>)> = Vec::new();
    for (ticket, platform, candidate) in batch {
        let candidate = Candidate {
            ticket,
            ..candidate
        };
        match groups.iter_mut().find(|(p, _)| Arc::ptr_eq(p, &platform)) {
            Some((_, group)) => group.push(candidate),
            None => groups.push((platform, vec![candidate])),
        }
    }
    let mut verdicts = Vec::new();
    for (platform, group) in groups {
        let tickets: Vec<u64> = group.iter().map(|c| c.ticket).collect();
        let tasted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            taste_split(&platform, tastes, group)
        }));
        match tasted {
            Ok((good, bad)) => {
                verdicts.extend(good.into_iter().map(|c| (c.ticket, Ok(c))));
                verdicts.extend(bad.into_iter().map(|(c, reasons)| (c.ticket, Err(reasons))));
            }
            Err(_) => verdicts.extend(tickets.into_iter().map(|t| {
                (
                    t,
                    Err(vec![
                        "taster: the taste failed inside the server".to_string()
                    ]),
                )
            })),
        }
    }
    verdicts
}

/// Encodes and writes the cache copy, atomically.
fn write_cache(copy: &CacheCopy) -> Result<(), CacheError> {
    let bytes = cache::encode(
        &copy.key,
        nanos(copy.until),
        copy.served.iter().map(|t| &**t),
        copy.refused.iter().map(String::as_str),
    );
    if let Some(parent) = copy.path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| CacheError::CreateDir {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    crate::files::replace_file(&copy.path, &bytes).map_err(|source| CacheError::Write {
        path: copy.path.clone(),
        source,
    })
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

/// What a put does once the document is written.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    Serve,
    Leave,
}

/// One tenant's view from what is served and what was refused.
fn view_of(
    shown: &str,
    name: &str,
    served: Option<&ServedTenant>,
    refused: Option<&Refused>,
) -> TenantView {
    TenantView {
        name: name.to_string(),
        file: refused.map_or_else(
            || format!("{shown}/{name}.toml"),
            |r| r.refusal.file.clone(),
        ),
        state: served.map_or("refused", |t| t.state.as_str()).to_string(),
        serial: served.map(|t| t.serial),
        version: served.map(ServedTenant::version),
        names: served.map_or_else(Vec::new, ServedTenant::display_names),
        own_profile: served.is_some_and(ServedTenant::has_own_profile),
        served_since: served
            .map(|t| rfc3339::format_utc(UNIX_EPOCH + Duration::from_secs(u64::from(t.since)))),
        last_refusal: refused.map(|r| r.refusal.clone()),
        probes: None,
    }
}

/// How messages name the folder: its last component (`tenants`).
fn shown_dir(dir: &Path) -> String {
    dir.file_name()
        .map_or_else(|| "tenants".into(), |n| n.to_string_lossy().into_owned())
}

/// How messages name a tenant's document (`tenants/<name>.toml`).
fn file_name(platform: &Platform, name: &str) -> String {
    format!("{}/{name}.toml", shown_dir(&platform.dir))
}

/// The tenant a folder entry is the document of: `<name>.toml`, not hidden.
pub(super) fn tenant_of(file_name: &str) -> Option<&str> {
    let name = file_name.strip_suffix(".toml")?;
    (!name.starts_with('.') && !name.is_empty()).then_some(name)
}

/// A tenant document that could not be read: its file as shown, and why.
#[derive(Debug, thiserror::Error)]
#[error("{file}: cannot read: {source}")]
struct Unreadable {
    file: String,
    #[source]
    source: std::io::Error,
}

/// Reads one tenant's document (its text, or why it cannot be read).
fn read_document(shown: &str, path: &Path, name: &str) -> Result<String, Unreadable> {
    crate::files::read_text_limited(path, TENANT_FILE_LIMIT).map_err(|source| Unreadable {
        file: format!("{shown}/{name}.toml"),
        source,
    })
}

/// A look's change for one file present in the folder, if its bytes differ from the ones
/// last looked at.
fn written(known: &Known, shown: &str, path: &Path, name: &str) -> Option<Change> {
    let text = read_document(shown, path, name);
    let hash = text.as_ref().ok().map(|t| fnv1a64(t.as_bytes()));
    if hash.is_some() && hash == known.looked_at(name) {
        return None;
    }
    Some(Change::Written {
        name: name.to_string(),
        file: format!("{shown}/{name}.toml"),
        text,
        looked_at: hash,
    })
}

/// Whether a file was modified (or renamed into place) before `since`, with a second of
/// slack for coarse file system clocks.
fn untouched_since(meta: &std::fs::Metadata, since: SystemTime) -> bool {
    use std::os::unix::fs::MetadataExt;
    let slack = since
        .checked_sub(Duration::from_secs(1))
        .unwrap_or(UNIX_EPOCH);
    let changed = UNIX_EPOCH
        + Duration::new(
            u64::try_from(meta.ctime()).unwrap_or(u64::MAX / 4),
            u32::try_from(meta.ctime_nsec()).unwrap_or(0),
        );
    let modified = meta.modified().unwrap_or(SystemTime::now());
    changed < slack && modified < slack
}

/// What a look compares the folder with: copied under the lock (the index shares its
/// shards), so that the folder is read without it.
struct Known {
    served: TenantIndex,
    refused: std::collections::HashMap<String, Option<u64>>,
    must_read: HashSet<String>,
    since: Option<SystemTime>,
}

impl Known {
    fn of(state: &State) -> Known {
        Known {
            served: state.served.clone(),
            refused: state
                .refused
                .iter()
                .map(|(name, r)| (name.clone(), r.looked_at))
                .collect(),
            must_read: state.must_read.clone(),
            since: state.full_look_began,
        }
    }

    fn looked_at(&self, name: &str) -> Option<u64> {
        looked_at(&self.served, self.refused.get(name).copied(), name)
    }

    fn knows(&self, name: &str) -> bool {
        self.refused.contains_key(name) || self.served.get(name).is_some()
    }
}

/// The changes a look found that still stand once the lock is held again: a document whose
/// bytes were served meanwhile (through the API) is no change, nor is the removal of a file
/// that is back.
fn still_changed(state: &State, dir: Option<&Path>, changes: Vec<Change>) -> Vec<Change> {
    let Some(dir) = dir else {
        return Vec::new();
    };
    changes
        .into_iter()
        .filter(|change| match change {
            Change::Written {
                name, looked_at, ..
            } => looked_at.is_none() || *looked_at != state.looked_at(name),
            Change::Removed { name } => {
                state.knows(name) && !dir.join(format!("{name}.toml")).exists()
            }
        })
        .collect()
}

/// The whole folder: changed documents and removed ones. A folder that cannot be listed
/// changes nothing (its tenants keep serving; the reason is logged): `None`.
fn look_full(known: &Known, dir: &Path) -> Option<Vec<Change>> {
    let shown = shown_dir(dir);
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::error!(
                "tenants: cannot list {}: {e}; every tenant keeps serving",
                dir.display()
            );
            return None;
        }
    };
    let mut present: HashSet<String> = HashSet::new();
    let mut changes = Vec::new();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str().and_then(tenant_of) else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(entry.path()) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        present.insert(name.to_string());
        let unchanged = known
            .since
            .is_some_and(|since| untouched_since(&meta, since));
        if unchanged && known.knows(name) && !known.must_read.contains(name) {
            continue;
        }
        changes.extend(written(known, &shown, &entry.path(), name));
    }
    let removed: BTreeSet<&str> = known
        .served
        .iter()
        .map(|t| t.name())
        .chain(known.refused.keys().map(String::as_str))
        .filter(|name| !present.contains(*name))
        .collect();
    changes.extend(removed.into_iter().map(|name| Change::Removed {
        name: name.to_string(),
    }));
    Some(changes)
}

/// These tenants' files only.
fn look_only(known: &Known, dir: &Path, names: &BTreeSet<String>) -> Vec<Change> {
    let shown = shown_dir(dir);
    let mut changes = Vec::new();
    for name in names {
        let path = dir.join(format!("{name}.toml"));
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => changes.extend(written(known, &shown, &path, name)),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if known.knows(name) {
                    changes.push(Change::Removed { name: name.clone() });
                }
            }
            Err(e) => changes.push(Change::Written {
                name: name.clone(),
                file: format!("{shown}/{name}.toml"),
                text: Err(Unreadable {
                    file: format!("{shown}/{name}.toml"),
                    source: e,
                }),
                looked_at: None,
            }),
        }
    }
    changes
}

/// [`TenantRegistry::load_cache`] with the lock held and the platform taken out.
fn load_cache_locked(state: &mut State, platform: &Platform) -> Result<usize, CacheError> {
    let started = Instant::now();
    let path = cache_path(&platform.dir);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CacheError::NoneYet(path))
        }
        Err(source) => return Err(CacheError::Read { path, source }),
    };
    let key = cache_key(platform).ok_or(CacheError::NoPlatform)?;
    let read = started.elapsed();
    let cached = match cache::decode(&bytes, &key) {
        Ok(cached) => cached,
        Err(reason) => return Err(CacheError::Refused { path, reason }),
    };
    drop(bytes);
    let decoded = started.elapsed();
    if !state.served.is_empty() || !state.refused.is_empty() {
        return Err(CacheError::AlreadyServed);
    }
    // The cache's table of layer cells becomes the registry's: tenants accepted later share
    // the same copies.
    for layer in cached.layers {
        state.shards.keep(layer);
    }
    let mut swap = Swap::default();
    for tenant in cached.plain {
        let tenant = Arc::new(tenant);
        state.count(&tenant, true);
        swap.names.extend(NameChange::all_of(&tenant));
        swap.served.push(tenant);
    }
    for own in cached.own {
        let file = file_name(platform, &own.name);
        match check_alone(platform, None, &own.name, &file, Ok(own.text)) {
            Ok(candidate) => {
                let tenant = Arc::new(
                    candidate
                        .tenant
                        .served_from(own.since)
                        .sharing_cells(&mut state.shards),
                );
                state.count(&tenant, true);
                swap.names.extend(NameChange::all_of(&tenant));
                swap.served.push(tenant);
            }
            Err(_) => {
                state.must_read.insert(own.name);
            }
        }
    }
    let count = swap.served.len();
    state.must_read.extend(cached.reread);
    state.full_look_began = Some(UNIX_EPOCH + Duration::from_nanos(cached.looked_at_until));
    let compiled = started.elapsed();
    commit(state, platform, swap);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    tracing::info!(
        "tenant cache: {count} tenants served in {:.0} ms (file read {:.0} ms, decoded {:.0} ms, own profiles compiled {:.0} ms, tables built {:.0} ms)",
        ms(started.elapsed()),
        ms(read),
        ms(decoded - read),
        ms(compiled - decoded),
        ms(started.elapsed() - compiled),
    );
    give_back_freed_memory();
    Ok(count)
}

/// Applies one batch of changes: checks, tastes, numbers, swaps the table once.
fn apply(state: &mut State, tastes: &AtomicU64, changes: Vec<Change>) {
    let started = Instant::now();
    let Some(platform) = state.platform.take() else {
        return;
    };
    let mut swap = Swap::default();
    let mut written = Vec::new();
    for change in changes {
        match change {
            Change::Removed { name } => {
                remove(state, &name, &mut swap);
                tracing::info!(
                    "tenant {name}: document removed; its names answer as the platform's"
                );
            }
            Change::Written {
                name,
                file,
                text,
                looked_at,
            } => written.push((name, file, text, looked_at)),
        }
    }
    let mut claims = released_by(state, &swap);
    // One line per tenant served for a batch a person made; a count for a folder of them.
    let announce = if written.len() <= ANNOUNCED_ONE_BY_ONE {
        Announce::Each
    } else {
        Announce::Counted
    };
    let changes_before = state.changes_applied;
    // In chunks: a folder of a million documents is never compiled, held and tasted at once
    // (the taster child's memory limit, and ours).
    let mut written = written.into_iter().peekable();
    while written.peek().is_some() {
        let mut candidates = Vec::new();
        for (name, file, text, looked_at) in written.by_ref().take(TASTE_CHUNK) {
            let served = state.served.get(&name).cloned();
            match check_alone(&platform, served.as_deref(), &name, &file, text) {
                Ok(candidate) => candidates.push(candidate),
                Err(problems) => {
                    let reasons = problem_lines(problems);
                    refuse(state, &name, &file, reasons, looked_at);
                }
            }
        }
        let candidates = refuse_double_claims(state, &platform, &mut claims, candidates);
        let (good, bad) = taste_split(&platform, tastes, candidates);
        for (candidate, reasons) in bad {
            let looked_at = Some(candidate.tenant.fingerprint);
            refuse(state, &candidate.name, &candidate.file, reasons, looked_at);
        }
        for candidate in good {
            accept(
                state,
                &platform,
                candidate,
                "tenant file",
                &mut swap,
                announce,
            );
        }
    }
    if announce == Announce::Counted {
        tracing::info!(
            "tenants: {} new or changed tenant files served",
            state.changes_applied - changes_before
        );
    }
    let large = swap.names.len() > 1000;
    commit(state, &platform, swap);
    if large {
        give_back_freed_memory();
    }
    state.last_apply_ms = started.elapsed().as_secs_f64() * 1000.0;
    state.platform = Some(platform);
}

/// Gives the memory freed after a large batch back to the system: reading and tasting a
/// folder of a million documents leaves most of the heap free but in the middle, where the
/// allocator would keep it.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free pages of the allocator's own heap.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Swaps in what a batch changed: the name table (one atomic store), then the index.
fn commit(state: &mut State, platform: &Platform, swap: Swap) {
    let Swap {
        names,
        served,
        removed,
    } = swap;
    // Monitors first: a version served reads its states from its first answer on.
    for tenant in &served {
        match tenant.own_monitors() {
            Some(monitors) => platform.probes.attach(tenant.name(), monitors),
            None => platform.probes.detach(tenant.name()),
        }
    }
    for name in &removed {
        platform.probes.detach(name);
    }
    let tenants = platform.snapshot.tenants();
    let build_table = |names: Vec<NameChange>| {
        (!names.is_empty()).then(|| tenants.load_full().with_changes(names))
    };
    let index_changes = !served.is_empty() || !removed.is_empty();
    let build_index =
        |index: &TenantIndex| index_changes.then(|| index.with_changes(served, removed));
    // The two tables are independent: a cold start's million builds them side by side (a
    // single change is not worth a thread).
    let (table, index) = if names.len() >= BUILD_APART_FROM {
        std::thread::scope(|scope| {
            let table = scope.spawn(|| build_table(names));
            let index = build_index(&state.served);
            let table = table
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (table, index)
        })
    } else {
        (build_table(names), build_index(&state.served))
    };
    if let Some(table) = table {
        tenants.store(Arc::new(table));
    }
    if let Some(index) = index {
        state.served = index;
        state.generation += 1;
    }
}

/// From this many names a batch builds the name table and the index on two threads.
const BUILD_APART_FROM: usize = 50_000;

/// A tenant whose document is gone: its names leave the table, its refusal is forgotten.
fn remove(state: &mut State, name: &str, swap: &mut Swap) {
    state.refused.remove(name);
    let Some(old) = state.served.get(name).cloned() else {
        return;
    };
    swap.names
        .extend(old.names().map(|(_, wire)| NameChange::Remove(wire.into())));
    state.count(&old, false);
    swap.removed.push(name.to_string());
}

/// The in-process checks of one document: its name, its text, against the platform. Every
/// problem names the file and field (line 0: the document as a whole).
fn check_alone(
    platform: &Platform,
    served: Option<&ServedTenant>,
    name: &str,
    file: &str,
    text: Result<String, Unreadable>,
) -> Result<Candidate, Vec<TenantProblem>> {
    let whole = |field: &str, problem: String| {
        vec![TenantProblem {
            file: file.to_string(),
            line: 0,
            field: field.to_string(),
            problem,
        }]
    };
    let text = text.map_err(|e| whole("document", e.to_string()))?;
    if !valid_tenant_name(name) {
        return Err(whole(
            "file name",
            format!("{name:?} is not a tenant name (1 to 63 lower-case letters, digits or '-', the file is <tenant>.toml)"),
        ));
    }
    let parsed = parse(file, &text)?;
    let fingerprint = fnv1a64(text.as_bytes());
    let serial = next_serial(platform, served, name, &text, fingerprint);
    let identity = Identity {
        name,
        serial,
        fingerprint,
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
        max_monitors: platform.max_monitors,
    };
    let tenant = compile(&parsed, identity, &view)?;
    Ok(Candidate {
        name: name.to_string(),
        file: file.to_string(),
        text,
        tenant,
        ticket: 0,
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

/// The serial of `text` for tenant `name`: the served one's if it is the same text, the
/// newest recorded one's if that is the same text (a restart), else one above both.
fn next_serial(
    platform: &Platform,
    served: Option<&ServedTenant>,
    name: &str,
    text: &str,
    fingerprint: u64,
) -> u64 {
    let serving = served.map_or(0, |t| t.serial);
    if served.is_some_and(|t| t.fingerprint == fingerprint) {
        return serving;
    }
    let newest = history(platform, name)
        .ok()
        .and_then(|h| h.newest().ok().flatten());
    match newest {
        Some((meta, recorded)) if recorded == text && meta.serial >= serving => meta.serial,
        Some((meta, _)) => meta.serial.max(serving) + 1,
        None => serving + 1,
    }
}

fn history(platform: &Platform, name: &str) -> Result<History, HistoryError> {
    let dir = platform.dir.join(".history").join(name);
    History::open(&dir, platform.history_keep)
}

/// Names claimed earlier in this batch: name → (tenant, file).
type Claims = BTreeMap<Box<[u8]>, (String, String)>;

/// What a batch has done to the claims so far: names claimed by its earlier candidates, and
/// names released by the tenants it removes.
#[derive(Default)]
struct BatchClaims {
    claimed: Claims,
    released: HashSet<Box<[u8]>>,
}

/// Why `candidate` may not claim its names: one is another tenant's (served and not
/// released in this batch, or claimed earlier in it), naming both files.
fn clash(
    platform: &Platform,
    table: &TenantTable,
    batch: &BatchClaims,
    candidate: &Candidate,
) -> Option<String> {
    let shown = candidate.tenant.display_names();
    let (shown, owner, owner_file) =
        candidate
            .tenant
            .names()
            .zip(&shown)
            .find_map(|((_, wire), shown)| {
                let (owner, file) = match batch.claimed.get(wire) {
                    Some((owner, file)) => (owner.clone(), file.clone()),
                    None if batch.released.contains(wire) => return None,
                    None => {
                        let owner = table.get(wire)?;
                        (owner.name().to_string(), file_name(platform, owner.name()))
                    }
                };
                (owner != candidate.name).then_some((shown, owner, file))
            })?;
    Some(format!(
        "{}: names: {shown:?} is already claimed by tenant {owner} ({owner_file}); two tenants can never claim one name",
        candidate.file
    ))
}

/// The names the tenants a batch removes give back: claimable again, by whoever comes first.
fn released_by(state: &State, swap: &Swap) -> BatchClaims {
    let mut batch = BatchClaims::default();
    for name in &swap.removed {
        for (_, wire) in state.served.get(name).iter().flat_map(|t| t.names()) {
            batch.released.insert(wire.into());
        }
    }
    batch
}

/// Refuses a candidate claiming a name another tenant owns (served, or accepted earlier in
/// this batch), naming both files. A tenant removed in this batch claims nothing.
fn refuse_double_claims(
    state: &mut State,
    platform: &Platform,
    batch: &mut BatchClaims,
    candidates: Vec<Candidate>,
) -> Vec<Candidate> {
    let table = platform.snapshot.tenants().load();
    let mut kept = Vec::new();
    for candidate in candidates {
        match clash(platform, &table, batch, &candidate) {
            Some(reason) => {
                let looked_at = Some(candidate.tenant.fingerprint);
                refuse(
                    state,
                    &candidate.name,
                    &candidate.file,
                    vec![reason],
                    looked_at,
                );
            }
            None => {
                for (_, wire) in candidate.tenant.names() {
                    let claim = (candidate.name.clone(), candidate.file.clone());
                    batch.claimed.insert(wire.into(), claim);
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
    tastes: &AtomicU64,
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
    tastes.fetch_add(1, Ordering::Relaxed);
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

fn refuse(state: &mut State, name: &str, file: &str, reasons: Vec<String>, looked_at: Option<u64>) {
    for reason in &reasons {
        tracing::error!(
            "tenant {name} refused, still serving its last good version (if any): {reason}"
        );
    }
    state.refusals_total += 1;
    state.generation += 1;
    let refusal = TenantRefusal {
        at: rfc3339::format_utc(SystemTime::now()),
        file: file.to_string(),
        reasons,
    };
    state
        .refused
        .insert(name.to_string(), Refused { looked_at, refusal });
}

fn unix_seconds(at: SystemTime) -> u32 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX))
}

/// Batches of tenant files up to this many log each tenant served; larger ones (a folder
/// read at start) a count: a million lines in the log tell an operator nothing and cost the
/// start seconds.
const ANNOUNCED_ONE_BY_ONE: usize = 100;

/// How [`accept`] tells the log about a tenant served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Announce {
    /// A line per tenant whose version changed.
    Each,
    /// Nothing: the caller logs how many.
    Counted,
}

/// Serves a tasted candidate: records it in its history and adds its changes to `swap`.
fn accept(
    state: &mut State,
    platform: &Platform,
    candidate: Candidate,
    source: &str,
    swap: &mut Swap,
    announce: Announce,
) {
    let Candidate {
        name,
        file,
        text,
        tenant,
        ..
    } = candidate;
    let now = SystemTime::now();
    let serial = tenant.serial;
    match history(platform, &name).and_then(|h| h.record(&text, serial, source, &file, now)) {
        Ok(_) => {}
        Err(e) => tracing::warn!("tenant {name} serial {serial} served but not recorded: {e}"),
    }
    let old = state.served.get(&name).cloned();
    let changed = old
        .as_ref()
        .is_none_or(|o| o.fingerprint != tenant.fingerprint);
    let since = match &old {
        Some(old) if !changed => old.since,
        _ => unix_seconds(now),
    };
    let tenant = Arc::new(tenant.served_from(since).sharing_cells(&mut state.shards));
    if let Some(old) = &old {
        let gone = old
            .names()
            .filter(|(_, wire)| !tenant.names().any(|(_, n)| n == *wire));
        swap.names
            .extend(gone.map(|(_, wire)| NameChange::Remove(wire.into())));
        state.count(old, false);
    }
    state.count(&tenant, true);
    swap.names.extend(NameChange::all_of(&tenant));
    state.refused.remove(&name);
    if changed {
        state.changes_applied += 1;
        if announce == Announce::Each {
            tracing::info!("tenant {name}: serving serial {serial} ({file})");
        }
    }
    swap.served.push(tenant);
}

/// After a platform change: tenants with their own profile compiled again against it (they
/// nest the platform's profiles), and plain tenants whose cells were assigned for other cells
/// than the platform's given theirs again (a pure function of the tenant and the topology: no
/// document read). A plain tenant's compiled form otherwise depends on the platform's
/// wildcards only, so a control change costs no tenant anything.
fn recompile_own_profiles(state: &mut State) {
    let Some(platform) = state.platform.take() else {
        return;
    };
    let topology = platform
        .snapshot
        .steering()
        .and_then(|s| s.policies.cells());
    let mut own: Vec<Arc<ServedTenant>> = Vec::new();
    let mut moved: Vec<Arc<ServedTenant>> = Vec::new();
    for tenant in state.served.iter() {
        if tenant.own_profile_text().is_some() {
            own.push(tenant.clone());
        } else if tenant.cells_are_for_another_topology(topology) {
            moved.push(tenant.clone());
        }
    }
    let mut swap = Swap::default();
    let mut refusals = Vec::new();
    for served in moved {
        match served.with_cells_of(topology, &mut state.shards) {
            Some(tenant) => {
                let tenant = Arc::new(tenant);
                swap.names.extend(NameChange::all_of(&tenant));
                swap.served.push(tenant);
            }
            None => {
                let file = file_name(&platform, served.name());
                let reason = "against the platform now served: state: quarantined, but the \
                              platform has no quarantine cells ([topology.cells] quarantine)";
                refusals.push((served, file, vec![reason.to_string()]));
            }
        }
    }
    for served in own {
        let Some(text) = served.own_profile_text() else {
            continue;
        };
        let file = file_name(&platform, served.name());
        let outcome = check_alone(
            &platform,
            Some(&served),
            served.name(),
            &file,
            Ok(text.into()),
        );
        match outcome {
            Ok(candidate) if candidate.tenant.serial == served.serial => {
                let tenant = Arc::new(candidate.tenant.served_from(served.since));
                swap.names.extend(NameChange::all_of(&tenant));
                swap.served.push(tenant);
            }
            Ok(_) => {}
            Err(problems) => refusals.push((served, file, problem_lines(problems))),
        }
    }
    for (served, file, reasons) in refusals {
        let reasons = reasons
            .into_iter()
            .map(|r| match r.starts_with("against the platform") {
                true => r,
                false => format!("against the platform now served: {r}"),
            })
            .collect();
        refuse(
            state,
            served.name(),
            &file,
            reasons,
            Some(served.fingerprint),
        );
    }
    commit(state, &platform, swap);
    state.platform = Some(platform);
}
