//! The one path every change takes: startup, control-file edits, SIGHUP, `steerdns reload`
//! and rollbacks all go through [`Reloader::reload`] — read everything, validate everything,
//! compile a complete snapshot, and only then swap it in. A refused change leaves the last
//! known good snapshot serving, is logged as one line per problem, counted, and shown in status.
//!
//! Before anything is loaded here, the change goes to the taster (`crate::taster`): a child
//! process loads the same bytes first, and a crash, timeout or out-of-memory there refuses the
//! change without touching this process.
//!
//! Owns the status of the control plane (serial, last refusal, counters) and recording accepted
//! control versions in the history. Never touches the serving path beyond the atomic store.

pub mod bundle;
mod origin;
pub mod quarantine;
pub mod resign;
pub mod served;
pub mod shield;
pub mod tenants;
pub mod watch;

pub use origin::{ControlOrigin, FileOrigin};

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use serde::Serialize;

use crate::config::Config;
use crate::control::history::{next_serial, History};
use crate::control::summarize;
use crate::control::ControlFile;
use crate::hash::fnv1a64;
use crate::rfc3339;
use crate::shield::live::Shield;
use crate::snapshot::load::{
    load_after, load_cold, load_first_answers, ControlSource, Loaded, ZonesFrom,
};
use crate::snapshot::{Compiled, Serving, SharedSnapshot, Snapshot};
use crate::taster::TasterStatus;
use served::ServedInputs;

/// Why the config a [`Source`] names could not be read: the file itself, or a command-line
/// flag that does not fit it.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("--nsid: longer than 255 bytes ({0})")]
    NsidTooLong(usize),
    #[error("--node: the config has no [fleet] section")]
    NodeWithoutFleet,
    #[error("--node: {0}")]
    BadNode(String),
}

/// Where the configuration comes from (the command line, re-read on every reload).
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// Config file; `None` = ./steerdns.toml if it exists (and `zones` is `None`), else
    /// defaults (see [`Source::config_path`]).
    pub config: Option<PathBuf>,
    /// `--zones` override.
    pub zones: Option<PathBuf>,
    /// `--nsid` override (per-node identity where the config file is shared, e.g. a
    /// Kubernetes ConfigMap).
    pub nsid: Option<String>,
    /// `--identity` override (`CH TXT id.server`).
    pub identity: Option<String>,
    /// `--node` override (`[fleet] node`, this node's name in the fleet registry).
    pub node: Option<String>,
    /// The program that tastes changes in a child process (the server's own binary, see
    /// [`crate::taster::this_program`]). `None`: changes are loaded in this process only.
    pub taster: Option<PathBuf>,
    /// Relative paths in the config resolve against this directory instead of the config
    /// file's (set for a staged bundle's copy of the config, see [`bundle`]).
    pub base_dir: Option<PathBuf>,
    /// `[geo] database` override (a staged bundle's copy of the database).
    pub geo_database: Option<PathBuf>,
}

impl Source {
    /// The config file this source reads: `--config`, else `./steerdns.toml` if it exists —
    /// unless `--zones` was given without `--config` (`serve --zones DIR` serves a directory of
    /// zone files with built-in defaults, whatever config happens to lie in the working
    /// directory). `None`: built-in defaults.
    pub fn config_path(&self) -> Option<PathBuf> {
        let default_path = PathBuf::from("steerdns.toml");
        match &self.config {
            Some(path) => Some(path.clone()),
            None if self.zones.is_none() && default_path.exists() => Some(default_path),
            None => None,
        }
    }

    /// One line for the log: which config this source reads.
    pub fn config_description(&self) -> String {
        match (self.config_path(), &self.zones) {
            (Some(path), _) => format!("config {}", path.display()),
            (None, Some(_)) if PathBuf::from("steerdns.toml").exists() => {
                "config: built-in defaults (--zones without --config: ./steerdns.toml not read)"
                    .to_string()
            }
            (None, _) => "config: built-in defaults".to_string(),
        }
    }

    pub fn read_config(&self) -> Result<Config, SourceError> {
        let mut config = match self.config_path() {
            Some(path) => Config::load_relative_to(&path, self.base_dir.as_deref())?,
            None => Config::default(),
        };
        if let Some(zones) = &self.zones {
            config.server.zones = zones.clone();
        }
        if let (Some(database), Some(_)) = (&self.geo_database, &config.geo.database) {
            config.geo.database = Some(database.clone());
        }
        if let Some(nsid) = &self.nsid {
            if nsid.len() > 255 {
                return Err(SourceError::NsidTooLong(nsid.len()));
            }
            config.server.nsid = Some(nsid.clone());
        }
        if let Some(identity) = &self.identity {
            config.server.identity = Some(identity.clone());
        }
        if let Some(node) = &self.node {
            let Some(fleet) = &mut config.fleet else {
                return Err(SourceError::NodeWithoutFleet);
            };
            if let Some(problem) = crate::config::fleet::node_name_problem(node) {
                return Err(SourceError::BadNode(problem));
            }
            fleet.node = Some(node.clone());
        }
        Ok(config)
    }

    /// The arguments that make `steerdns taste` read the config exactly as this source does.
    pub fn taste_args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        let mut push = |flag: &str, value: OsString| {
            args.push(OsString::from(flag));
            args.push(value);
        };
        if let Some(config) = &self.config {
            push("--config", config.clone().into_os_string());
        }
        if let Some(zones) = &self.zones {
            push("--zones", zones.clone().into_os_string());
        }
        if let Some(nsid) = &self.nsid {
            push("--nsid", nsid.into());
        }
        if let Some(identity) = &self.identity {
            push("--identity", identity.into());
        }
        if let Some(base) = &self.base_dir {
            push("--base-dir", base.clone().into_os_string());
        }
        if let Some(database) = &self.geo_database {
            push("--geo-database", database.clone().into_os_string());
        }
        args
    }
}

/// What started a reload (shown in status and history).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    Startup,
    ControlFile,
    Signal,
    Api,
    /// A new version of the fleet's control state (etcd).
    Fleet,
    /// DNSSEC signatures due for renewal, or a key event (see [`resign`]).
    Resign,
    /// The fleet's rollout released a config/zone/GeoIP bundle to this node, or rolled it back
    /// (see [`bundle`]).
    Bundle,
    /// A secondary zone's new copy arrived by zone transfer (see [`crate::secondary`]).
    Secondary,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Startup => "startup",
            Trigger::ControlFile => "control file change",
            Trigger::Signal => "SIGHUP",
            Trigger::Api => "reload command",
            Trigger::Fleet => "fleet control change",
            Trigger::Resign => "DNSSEC re-sign",
            Trigger::Bundle => "fleet bundle rollout",
            Trigger::Secondary => "secondary zone transfer",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Refusal {
    pub at: String,
    pub trigger: &'static str,
    pub reasons: Vec<String>,
}

/// The control plane's state, as `steerdns status` and `/v1/status` show it.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Status {
    pub serial: u64,
    pub config_hash: String,
    pub loaded_at: String,
    pub loaded_by: &'static str,
    pub control_file: Option<PathBuf>,
    pub history_dir: Option<PathBuf>,
    pub reloads_accepted: u64,
    pub reloads_refused: u64,
    pub last_reload_ms: f64,
    pub last_refusal: Option<Refusal>,
    /// Problems that did not stop serving (history not writable, geo database unusable, zone warnings).
    pub warnings: Vec<String>,
    /// The taster: mode, limits, tastes by outcome, the last one.
    pub taster: TasterStatus,
    /// Times the control file was looked at for a change (the watcher's events and its
    /// backstop polls), whatever came of it: tests and operators wait for "looked again".
    pub control_checks: u64,
    /// With `[fleet.rollout]`: the config/zone/GeoIP bundles (served, waiting, refused).
    pub bundle: Option<BundleStatus>,
    /// How this process's first load went.
    pub startup: StartupStatus,
    /// Where the snapshot served took its zones from (built, shared, the zone cache).
    pub zones_from: String,
    /// The snapshot served took its zones from the last-known-good zone cache.
    pub zones_from_cache: bool,
}

/// How the first load of this process went: how long until it served, and whether its inputs
/// were tasted or were exactly what this binary last served ([`served`]).
#[derive(Debug, Clone, Serialize, serde::Deserialize, Default, PartialEq)]
#[serde(default)]
pub struct StartupStatus {
    /// From the reloader's start to the first snapshot served (queries answered from then on):
    /// phase 1's, the zone cache's precompiled answers, on a start from the cache.
    pub first_answer_ms: f64,
    /// From the reloader's start to the first load served whole (zones and all); the same as
    /// `first_answer_ms` without a phase 1.
    pub fully_loaded_ms: f64,
    /// `loaded`, or while phase 1 serves `first answers from the zone cache; zones loading`
    /// (queries the precompiled answers do not cover are held until then).
    pub phase: String,
    /// The first load went through the taster.
    pub tasted: bool,
    /// Why it was or was not tasted.
    pub reason: String,
    /// Where its zones came from: the last-known-good zone cache, or built (and why the cache
    /// was not used).
    pub zones_from: String,
    /// They came from the last-known-good zone cache.
    pub zones_from_cache: bool,
}

impl StartupStatus {
    /// Phase 1 of a start from the zone cache: the zones are not in yet (queries the
    /// precompiled answers do not cover are held).
    pub fn is_loading(&self) -> bool {
        self.phase.starts_with("first answers")
    }
}

/// The bundles of a node that stages them (see [`bundle`]), as status shows them.
#[derive(Debug, Clone, Serialize, serde::Deserialize, Default, PartialEq)]
pub struct BundleStatus {
    /// Where the copies live.
    pub dir: PathBuf,
    /// The bundle served.
    pub serving: String,
    /// The live files' bundle, tasted and waiting for the fleet's rollout to release it (also
    /// after a rollback from it: the live files still hold it).
    pub pending: Option<String>,
    /// The live files' bundle as last captured.
    pub live: Option<String>,
    /// The newest bundle refused (by its taster or on loading), and why.
    pub refused: Option<BundleRefusal>,
    /// The bundle served before this one (kept: the way back after a halt).
    pub previous: Option<String>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, Default, PartialEq)]
pub struct BundleRefusal {
    pub bundle: String,
    pub reasons: Vec<String>,
}

/// The reloader's hold on the bundles.
struct Bundles {
    store: bundle::BundleStore,
    /// The live config's directory: the relative paths of every copy resolve against it.
    base: PathBuf,
    status: BundleStatus,
}

struct State {
    status: Status,
    /// FNV hash of the control text last looked at (accepted or refused), so that a watcher
    /// does not re-taste the same bytes.
    last_control_hash: Option<u64>,
    /// FNV hash of the control text being served (same text on reload: same serial).
    served_control_hash: Option<u64>,
    /// The control text being served (a new bundle is tasted with it).
    served_control: Option<(PathBuf, String)>,
    /// With `[fleet.rollout]`: the bundle served and the others (`None`: the live files).
    bundles: Option<Bundles>,
}

pub struct Reloader {
    source: Source,
    origin: Arc<dyn ControlOrigin>,
    snapshot: SharedSnapshot,
    shield: Arc<Shield>,
    /// Endpoint monitors (their states outlive reloads).
    health: Arc<crate::health::Health>,
    /// Held for a whole reload, history writes (and their fsyncs) included: reloads run one
    /// at a time. Readers never take it; they read [`Reloader::published`].
    state: Mutex<State>,
    /// The snapshot being served and the status that describes it, replaced together (under
    /// `state`) whenever either changes. Status readers (`/v1/status`, `/metrics`, the CLI) load
    /// it without waiting for a reload in progress, which may be stuck for seconds in an fsync
    /// on a busy disk.
    published: ArcSwap<Published>,
    /// [`Status::control_checks`], counted without publishing a new status every poll.
    control_checks: std::sync::atomic::AtomicU64,
    /// The tenants: their documents, served versions and refusals.
    tenants: Arc<tenants::TenantRegistry>,
    /// [`Reloader::load_tenants`] ran (once per process).
    tenants_loaded: std::sync::atomic::AtomicBool,
}

/// What status readers see: one consistent picture.
struct Published {
    snapshot: Arc<Snapshot>,
    status: Status,
}

/// Result of an accepted reload.
#[derive(Debug, Clone, Serialize)]
pub struct Accepted {
    pub serial: u64,
    pub elapsed_ms: f64,
    pub summary: String,
}

/// Reloads asked for by the operator (SIGHUP, `steerdns reload`) since start.
static OPERATOR_RELOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many reloads the operator asked for since start (SIGHUP, `steerdns reload`): parts
/// that read files of their own outside the load (a secondary zone's TSIG key) read them
/// again when it moves.
pub fn operator_reloads() -> u64 {
    OPERATOR_RELOADS.load(std::sync::atomic::Ordering::Relaxed)
}

impl Reloader {
    /// The first load. If the control file is bad, the newest valid version from the history
    /// serves instead (and the refusal is reported); if nothing valid exists, `Err`.
    pub fn start(source: Source) -> Result<(Arc<Reloader>, Vec<String>), Vec<String>> {
        Reloader::start_with(source, Arc::new(FileOrigin))
    }

    /// [`Reloader::start`] with the control text from `origin`.
    ///
    /// With a usable zone cache (and no `[fleet.rollout]`), in two phases: phase 1 serves the
    /// cache's precompiled answers at once ([`load_first_answers`]) and returns; phase 2, on a
    /// thread that holds the reload lock until it is done (so a reload waits for it), makes
    /// the first load as without a cache — the zone files compared with the cache's, a
    /// changed input tasted as usual — and swaps the full snapshot in.
    /// [`Reloader::wait_until_loaded`] waits for it.
    pub fn start_with(
        source: Source,
        origin: Arc<dyn ControlOrigin>,
    ) -> Result<(Arc<Reloader>, Vec<String>), Vec<String>> {
        let started = Instant::now();
        let live = source.read_config().map_err(|e| vec![e.to_string()])?;
        // With `[fleet.rollout]`: serve the bundle served last (a restart mid-rollout must not
        // serve live files the rollout has not released); the live files wait for their wave.
        let (bundles, live_bundle) = open_bundles(&live)?;
        if bundles.is_none() {
            match first_answers(&live, origin.as_ref()) {
                Ok(first) => {
                    return Ok(Reloader::serve_first_answers(
                        source, origin, live, first, started,
                    ))
                }
                Err(why) => tracing::debug!("no first answers before the zones load: {why}"),
            }
        }
        let pinned = bundles
            .as_ref()
            .map(|b| b.store.source(&source, &b.base, &b.status.serving));
        let config = match &pinned {
            Some(pinned) => pinned.read_config().map_err(|e| vec![e.to_string()])?,
            None => live,
        };
        let load_source = pinned.as_ref().unwrap_or(&source);
        let first = first_load(load_source, &config, origin.as_ref())?;
        let mut reloader = Reloader::serving_nothing(source);
        reloader.origin = origin;
        let reloader = Arc::new(reloader);
        let warnings = {
            let mut state = reloader.lock();
            state.bundles = bundles;
            reloader.install_first(&mut state, &config, first, live_bundle, started, None)
        };
        Ok((reloader, warnings))
    }

    /// Phase 1 (see [`Reloader::start_with`]): `first` served, phase 2 started.
    fn serve_first_answers(
        source: Source,
        origin: Arc<dyn ControlOrigin>,
        config: Config,
        first: Loaded,
        started: Instant,
    ) -> (Arc<Reloader>, Vec<String>) {
        let mut reloader = Reloader::serving_nothing(source);
        reloader.origin = origin;
        let reloader = Arc::new(reloader);
        let warnings = first.warnings.clone();
        let first_answer_ms;
        {
            let mut state = reloader.lock();
            let previous = reloader.snapshot.load_full();
            let health = reloader.health.attach(first.compiled.policies());
            let snapshot = Snapshot::new(
                first.compiled,
                Serving {
                    shield: reloader.shield.clone(),
                    health,
                    previous: Some(&previous),
                    serial: 0,
                    config_hash: 0,
                    local_override: false,
                    tenants: previous.tenants().clone(),
                },
            );
            reloader.snapshot.store(Arc::new(snapshot));
            first_answer_ms = ms(started.elapsed());
            let status = &mut state.status;
            status.loaded_by = Trigger::Startup.as_str();
            status.loaded_at = rfc3339::format_utc(SystemTime::now());
            status.zones_from = PHASE_FIRST_ANSWERS.to_string();
            status.startup = StartupStatus {
                first_answer_ms,
                phase: PHASE_FIRST_ANSWERS.to_string(),
                reason: "the zone cache's precompiled answers; the first load follows".to_string(),
                ..StartupStatus::default()
            };
            reloader.publish(&state);
        }
        tracing::info!(
            "startup: first answers from the zone cache after {first_answer_ms:.1} ms; loading the zones"
        );
        let (locked, wait) = std::sync::mpsc::sync_channel(1);
        let phase2 = reloader.clone();
        let spawned = std::thread::Builder::new()
            .name("zones-load".to_string())
            .spawn(move || {
                let mut state = phase2.lock();
                let _ = locked.send(());
                phase2.finish_start(&mut state, &config, started, first_answer_ms);
            });
        match spawned {
            Ok(_) => {
                // Phase 2 holds the lock before this returns: nothing reloads before it.
                let _ = wait.recv();
            }
            Err(e) => tracing::error!("cannot start loading the zones ({e})"),
        }
        (reloader, warnings)
    }

    /// Phase 2 (see [`Reloader::start_with`]), under the reload lock.
    fn finish_start(
        &self,
        state: &mut State,
        config: &Config,
        started: Instant,
        first_answer_ms: f64,
    ) {
        hold_for_test();
        match first_load(&self.source, config, self.origin.as_ref()) {
            Ok(first) => {
                let warnings =
                    self.install_first(state, config, first, None, started, Some(first_answer_ms));
                for warning in warnings {
                    tracing::warn!("{warning}");
                }
            }
            Err(reasons) => {
                for reason in &reasons {
                    tracing::error!("startup: the zones cannot be loaded: {reason}");
                }
                state.status.reloads_refused += 1;
                state.status.last_refusal = Some(Refusal {
                    at: rfc3339::format_utc(SystemTime::now()),
                    trigger: Trigger::Startup.as_str(),
                    reasons,
                });
                state.status.startup.phase =
                    "first answers from the zone cache; the zones were refused (see last_refusal)"
                        .to_string();
                self.publish(state);
            }
        }
    }

    /// Loads the tenants for the first snapshot served whole, just before it is swapped in:
    /// from their cache when there is a good one (the folder is then looked at in the
    /// background for what changed while the server was down), else from the folder. Once:
    /// later calls do nothing.
    fn load_tenants(&self) {
        if self
            .tenants_loaded
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let started = Instant::now();
        match self.tenants.load_cache() {
            Ok(count) => tracing::info!(
                "tenants: {count} served from the cache ({:.0} ms); looking at the folder for changes",
                ms(started.elapsed())
            ),
            Err(reason) => {
                tracing::info!("tenants: cache not used ({reason}); reading the folder");
                self.tenants.check();
            }
        }
    }

    /// Waits until the first load is served whole (phase 2 of a start from the zone cache,
    /// if there was one: it holds the reload lock until then).
    pub fn wait_until_loaded(&self) {
        drop(self.lock());
    }

    /// Serves the first load `first` (phase 2 of a start from the zone cache: its phase 1
    /// answered after `first_answer_ms`).
    fn install_first(
        &self,
        state: &mut State,
        config: &Config,
        first: FirstLoad,
        live_bundle: Option<bundle::BundleId>,
        started: Instant,
        first_answer_ms: Option<f64>,
    ) -> Vec<String> {
        let FirstLoad {
            loaded,
            text,
            refusal,
            control,
            taster,
            mut startup,
        } = first;
        let mut warnings = loaded.warnings.clone();
        state.status.taster = taster;
        if let Some(reasons) = refusal {
            state.status.reloads_refused += 1;
            state.status.last_refusal = Some(Refusal {
                at: rfc3339::format_utc(SystemTime::now()),
                trigger: Trigger::Startup.as_str(),
                reasons,
            });
            if let Ok(Some(bad)) = control {
                state.last_control_hash = Some(fnv1a64(bad.1.as_bytes()));
            }
        }
        self.accept(state, config, loaded, text, Trigger::Startup, started);
        startup.fully_loaded_ms = ms(started.elapsed());
        startup.first_answer_ms = first_answer_ms.unwrap_or(startup.fully_loaded_ms);
        startup.phase = PHASE_LOADED.to_string();
        startup.zones_from = state.status.zones_from.clone();
        startup.zones_from_cache = state.status.zones_from_cache;
        state.status.startup = startup;
        self.publish(state);
        warnings.extend(self.start_bundles(state, live_bundle));
        warnings
    }

    /// A reloader serving the empty snapshot, before its first load.
    fn serving_nothing(source: Source) -> Reloader {
        let empty = Arc::new(Snapshot::empty());
        Reloader {
            source,
            origin: Arc::new(FileOrigin),
            snapshot: Arc::new(ArcSwap::new(empty.clone())),
            published: ArcSwap::from_pointee(Published {
                snapshot: empty,
                status: Status::default(),
            }),
            shield: Arc::new(Shield::default()),
            health: Arc::new(crate::health::Health::default()),
            control_checks: std::sync::atomic::AtomicU64::new(0),
            tenants: Arc::default(),
            tenants_loaded: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State {
                status: Status::default(),
                last_control_hash: None,
                served_control_hash: None,
                served_control: None,
                bundles: None,
            }),
        }
    }

    pub fn snapshot(&self) -> &SharedSnapshot {
        &self.snapshot
    }

    /// Where the configuration comes from (command line and config file).
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Where the control text comes from.
    pub fn origin(&self) -> &Arc<dyn ControlOrigin> {
        &self.origin
    }

    pub fn shield(&self) -> &Arc<Shield> {
        &self.shield
    }

    /// The endpoint monitors.
    pub fn health(&self) -> &Arc<crate::health::Health> {
        &self.health
    }

    /// The tenants (documents, served versions, refusals).
    pub fn tenants(&self) -> &Arc<tenants::TenantRegistry> {
        &self.tenants
    }

    /// The control plane's status. Never waits for a reload in progress.
    pub fn status(&self) -> Status {
        self.with_checks(self.published.load().status.clone())
    }

    fn with_checks(&self, mut status: Status) -> Status {
        status.control_checks = self
            .control_checks
            .load(std::sync::atomic::Ordering::Relaxed);
        status
    }

    /// The snapshot being served and the status that describes it, read together (a reload
    /// publishes the two as one), without waiting for a reload in progress.
    pub fn snapshot_and_status(&self) -> (Arc<Snapshot>, Status) {
        let published = self.published.load();
        (
            published.snapshot.clone(),
            self.with_checks(published.status.clone()),
        )
    }

    /// Makes the served snapshot and `state`'s status visible to status readers. Called with
    /// the state lock held, after every change to either.
    fn publish(&self, state: &State) {
        self.published.store(Arc::new(Published {
            snapshot: self.snapshot.load_full(),
            status: state.status.clone(),
        }));
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State half-updated in a way that matters
        // more than stopping reloads altogether would.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Tastes the current files and swaps them in if everything is good. A node that stages
    /// bundles (`[fleet.rollout]`) captures and tastes its live files on SIGHUP and `reload`,
    /// but keeps serving its bundle until the fleet's rollout releases the new one
    /// ([`Reloader::serve_bundle`]); a bundle refused is this reload's refusal.
    pub fn reload(&self, trigger: Trigger) -> Result<Accepted, Vec<String>> {
        let mut state = self.lock();
        if matches!(trigger, Trigger::Signal | Trigger::Api) {
            // Secondary zones' key files are read by their own threads, not by the load:
            // they look at this count.
            OPERATOR_RELOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let staged = match trigger {
            Trigger::Signal | Trigger::Api => self.stage_live(&mut state),
            _ => None,
        };
        let mut accepted = self.reload_locked(&mut state, trigger)?;
        match staged {
            Some(Ok(id)) => {
                accepted.summary = format!(
                    "{}; the live files (bundle {id}) wait for the fleet's rollout",
                    accepted.summary
                );
                Ok(accepted)
            }
            Some(Err(reasons)) => Err(reasons),
            None => Ok(accepted),
        }
    }

    /// Serves bundle `id` from the store (the fleet's rollout released it to this node, or
    /// rolls this node back to it): tasted and loaded as any change, the bundle served stays
    /// if it is refused.
    pub fn serve_bundle(&self, id: &str) -> Result<Accepted, Vec<String>> {
        let mut state = self.lock();
        let serial = state.status.serial;
        let Some(bundles) = state.bundles.as_mut() else {
            return Err(vec!["this node does not stage bundles".into()]);
        };
        if bundles.status.serving == id {
            return Ok(Accepted {
                serial,
                elapsed_ms: 0.0,
                summary: format!("bundle {id} is served already"),
            });
        }
        if !bundles.store.has(id) {
            let reason = format!(
                "bundle {id} is not in {} (never captured here, or deleted)",
                bundles.store.dir().display()
            );
            self.bundle_refused(&mut state, id, vec![reason.clone()]);
            return Err(vec![reason]);
        }
        let old = std::mem::replace(&mut bundles.status.serving, id.to_string());
        match self.reload_locked(&mut state, Trigger::Bundle) {
            Ok(accepted) => {
                if let Some(bundles) = state.bundles.as_mut() {
                    let status = &mut bundles.status;
                    if status.pending.as_deref() == Some(id) {
                        status.pending = None;
                    }
                    // Back from the live files' bundle (a rollback): it waits again.
                    if status.live.as_deref() == Some(old.as_str()) {
                        status.pending = Some(old.clone());
                    }
                    status.previous = Some(old);
                    if status.refused.as_ref().is_some_and(|r| r.bundle == id) {
                        status.refused = None;
                    }
                    let keep: Vec<&str> = status.pending.iter().map(String::as_str).collect();
                    if let Err(e) = bundles
                        .store
                        .set_serving(id, status.previous.as_deref(), &keep)
                    {
                        tracing::error!("bundle {id} served but not recorded: {e}");
                    }
                }
                self.publish_bundles(&mut state);
                Ok(accepted)
            }
            Err(reasons) => {
                if let Some(bundles) = state.bundles.as_mut() {
                    bundles.status.serving = old;
                }
                self.bundle_refused(&mut state, id, reasons.clone());
                Err(reasons)
            }
        }
    }

    /// Reloads only if the control file's bytes differ from the last ones looked at (for
    /// watchers, which may fire several times per write).
    pub fn reload_if_control_changed(&self) -> Option<Result<Accepted, Vec<String>>> {
        let mut state = self.lock();
        // The control file of the config last accepted (a reload re-reads the config and
        // updates it): no need to parse the whole config for every check.
        let path = state.status.control_file.clone()?;
        // Counted once the file is known; published after the check below, so a reader that
        // sees N checks sees what the N-th one did.
        let _counted = CountOnDrop(&self.control_checks);
        let hash = crate::files::read_limited(&path, crate::files::SMALL_FILE_LIMIT)
            .ok()
            .map(|bytes| fnv1a64(&bytes));
        if hash.is_some() && hash == state.last_control_hash {
            return None;
        }
        if hash.is_none() && state.last_control_hash == Some(MISSING_FILE_HASH) {
            return None;
        }
        // Looked at, whatever comes of it: a reload that fails before reading the control
        // (an unreadable config) is not retried every poll, only when the bytes change again.
        state.last_control_hash = Some(hash.unwrap_or(MISSING_FILE_HASH));
        Some(self.reload_locked(&mut state, Trigger::ControlFile))
    }

    /// The source of what is served: the live files, or the copy of the bundle served.
    fn serving_source(&self, state: &State) -> std::borrow::Cow<'_, Source> {
        match &state.bundles {
            Some(b) => {
                std::borrow::Cow::Owned(b.store.source(&self.source, &b.base, &b.status.serving))
            }
            None => std::borrow::Cow::Borrowed(&self.source),
        }
    }

    fn reload_locked(&self, state: &mut State, trigger: Trigger) -> Result<Accepted, Vec<String>> {
        let started = Instant::now();
        let mut tasted = None;
        let source = self.serving_source(state).into_owned();
        let result = source
            .read_config()
            .map_err(|e| vec![e.to_string()])
            .and_then(|config| {
                let control = self.origin.current(&config);
                state.last_control_hash = Some(match &control {
                    Ok(Some((_, text))) => fnv1a64(text.as_bytes()),
                    _ => MISSING_FILE_HASH,
                });
                if let Ok(Some((_, text))) = &control {
                    tasted = Some(text.clone());
                }
                let control = control.map_err(|e| vec![e])?;
                let loaded =
                    self.taste_and_load(&source, &config, control.as_ref(), &mut state.status)?;
                Ok((config, loaded, control))
            });
        match result {
            Ok((config, loaded, control)) => {
                Ok(self.accept(state, &config, loaded, control, trigger, started))
            }
            Err(reasons) => {
                for reason in &reasons {
                    tracing::error!(
                        "{} refused, still serving serial {}: {reason}",
                        trigger.as_str(),
                        state.status.serial
                    );
                }
                state.status.reloads_refused += 1;
                state.status.last_refusal = Some(Refusal {
                    at: rfc3339::format_utc(SystemTime::now()),
                    trigger: trigger.as_str(),
                    reasons: reasons.clone(),
                });
                self.publish(state);
                // The origin is told after the refusal is published: whoever sees the fleet
                // link name the revision refused must find the reasons in the status too.
                // A bundle refused is no verdict on the control text it was tasted with.
                if let (Some(text), false) = (&tasted, trigger == Trigger::Bundle) {
                    self.origin.refused(text);
                }
                Err(reasons)
            }
        }
    }

    /// Tastes and loads what `source` reads, sharing the served snapshot's zones where they
    /// are the same, and keeps a good geo database in service.
    fn taste_and_load(
        &self,
        source: &Source,
        config: &Config,
        control: Option<&(PathBuf, String)>,
        status: &mut Status,
    ) -> Result<Loaded, Vec<String>> {
        let previous = self.snapshot.load_full();
        let loaded = taste_then_load(source, config, control, Some(&previous), &mut status.taster)?;
        self.keep_good_geo_database(&loaded)?;
        Ok(loaded)
    }

    /// A geo database that fails to load degrades a *first* start to the default region (serve
    /// rather than not at all), but on a reload it must not replace a database in service:
    /// one bad file would silently move whole continents. Refuse instead.
    fn keep_good_geo_database(&self, loaded: &Loaded) -> Result<(), Vec<String>> {
        let previous = self.snapshot.load();
        let in_service = previous
            .steering()
            .is_some_and(|s| s.locator.table().is_some() && s.locator.degraded().is_none());
        let new_reason = loaded
            .compiled
            .steering()
            .and_then(|s| s.locator.degraded().map(str::to_string));
        match (in_service, new_reason) {
            (true, Some(reason)) => Err(vec![format!(
                "geo database unusable ({reason}); keeping the database in service"
            )]),
            _ => Ok(()),
        }
    }

    /// Numbers, records and swaps in a loaded snapshot.
    fn accept(
        &self,
        state: &mut State,
        config: &Config,
        loaded: Loaded,
        control: Option<(PathBuf, String)>,
        trigger: Trigger,
        started: Instant,
    ) -> Accepted {
        let Loaded {
            compiled,
            mut warnings,
            zones_from,
            ..
        } = loaded;
        let previous = self.snapshot.load();
        let summary = summarize(previous.control(), compiled.control());
        let mut history_dir = None;
        let unchanged = control
            .as_ref()
            .is_some_and(|(_, text)| state.served_control_hash == Some(fnv1a64(text.as_bytes())));
        // A new version is numbered above both the history and what is served now (serving
        // may have gone on while the history could not be written).
        let next = compiled
            .control()
            .serial
            .unwrap_or(previous.serial() + 1)
            .max(previous.serial() + 1);
        // Number the version by reading the history only: writing it (a file, its fsync, a
        // rename, pruning) happens after the swap, so a slow disk never delays serving.
        let unrecorded = |serial: u64, e: String| {
            format!(
                "control serial {serial} is served but not recorded in the history ({e}): a \
                 restart with a broken control file cannot fall back to it, and `steerdns \
                 control rollback` does not list it"
            )
        };
        let (serial, to_record) = match (&control, open_history(config)) {
            (Some(_), _) if unchanged && previous.serial() > 0 => (previous.serial(), None),
            (Some((_, text)), Ok(history)) => {
                history_dir = Some(history.dir().to_path_buf());
                match number_version(&history, text, compiled.control(), previous.serial()) {
                    Ok((serial, true)) => (serial, Some(history)),
                    Ok((serial, false)) => (serial, None),
                    Err(e) => {
                        warnings.push(unrecorded(next, e.to_string()));
                        (next, None)
                    }
                }
            }
            (Some(_), Err(e)) => {
                warnings.push(unrecorded(next, e.to_string()));
                (next, None)
            }
            (None, _) => (0, None),
        };
        let config_hash = config_hash(config, control.as_ref().map(|c| c.1.as_str()), &compiled);
        let served = compiled
            .sources()
            .map(|s| ServedInputs::of(config, s, control.as_ref().map(|c| c.1.as_str())));
        let health = self.health.attach(compiled.policies());
        let snapshot = Snapshot::new(
            compiled,
            Serving {
                shield: self.shield.clone(),
                health,
                previous: Some(&previous),
                serial,
                config_hash,
                local_override: control
                    .as_ref()
                    .is_some_and(|(_, text)| self.origin.is_local_override(text)),
                tenants: previous.tenants().clone(),
            },
        );
        let config_hash = format!("{config_hash:016x}");
        let snapshot = Arc::new(snapshot);
        let elapsed = started.elapsed();
        let status = &mut state.status;
        status.serial = serial;
        status.config_hash = config_hash;
        status.loaded_at = rfc3339::format_utc(SystemTime::now());
        status.loaded_by = trigger.as_str();
        status.control_file = config.control.file.clone();
        status.history_dir = history_dir;
        status.reloads_accepted += 1;
        status.last_reload_ms = ms(elapsed);
        status.warnings = warnings;
        status.bundle = state.bundles.as_ref().map(|b| b.status.clone());
        status.zones_from = zones_from.describe();
        // Every load says where its zones came from: a reload that was not applied as a
        // difference says why (the operator's answer to "why did this reload take seconds").
        tracing::info!("{}: zones {}", trigger.as_str(), status.zones_from);
        status.zones_from_cache = zones_from == ZonesFrom::Cache;
        if let Some((_, text)) = &control {
            state.last_control_hash = Some(fnv1a64(text.as_bytes()));
            state.served_control_hash = Some(fnv1a64(text.as_bytes()));
        }
        state.served_control = control.clone();
        // Served and shown as one step: status is ready before the swap and published right
        // after it, so whoever sees an answer from this version sees its serial in status too.
        let platform_changed = |snapshot: Arc<Snapshot>| {
            self.tenants.platform_changed(
                config,
                snapshot,
                self.source.taster.as_deref(),
                self.source.taste_args(),
                control.as_ref().map(|(_, text)| text.clone()),
            )
        };
        // The first whole snapshot serves with its tenants in: a tenant answers by its
        // document from its first answer. The tenant table is shared with what serves now
        // (nothing yet, or phase 1 of a start from the zone cache, which holds every name
        // under a platform wildcard), so the tenants go in first and the swap shows them
        // with everything else. (Loading them after the swap let a restart answer tenants'
        // names as the platform's wildcard — other cells, quarantine ignored — for the
        // seconds the tenant cache took.)
        let first_whole = !self
            .tenants_loaded
            .load(std::sync::atomic::Ordering::Acquire);
        if first_whole {
            platform_changed(snapshot.clone());
            self.load_tenants();
        }
        self.snapshot.store(snapshot.clone());
        self.publish(state);
        if !first_whole {
            platform_changed(snapshot);
        }
        record_served(config, served.as_ref());
        record_projection(config, &previous, &self.snapshot.load());
        // After a difference the cache is left as it was: it names the old file's digest, so
        // the next start refuses it and builds (writing it would store stale answers).
        if matches!(zones_from, ZonesFrom::Built { .. }) {
            write_zone_cache(config, self.snapshot.load_full());
        }
        // Served; now recorded. A failure is said in status for as long as this version
        // serves (the next accepted reload replaces the warnings).
        if let (Some(history), Some((_, text))) = (&to_record, &control) {
            let now = SystemTime::now();
            if let Err(e) = history.record(text, serial, trigger.as_str(), &summary, now) {
                let warning = unrecorded(serial, format!("control history: {e}"));
                tracing::error!("{warning}");
                state.status.warnings.push(warning);
                self.publish(state);
            }
        }
        // After publishing: what the origin tells others (a fleet's registry) matches status.
        if let Some((_, text)) = &control {
            if let Some(problem) = self.origin.accepted(config, text) {
                state.status.warnings.push(problem);
                self.publish(state);
            }
        }
        tracing::info!(
            "{}: serving serial {serial} ({summary}) after {:.1} ms",
            trigger.as_str(),
            ms(elapsed)
        );
        Accepted {
            serial,
            elapsed_ms: ms(elapsed),
            summary,
        }
    }
}

/// Adds one to a counter when dropped (at the end of a check, whichever way it returns).
struct CountOnDrop<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for CountOnDrop<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Reloader {
    /// After the first load of a node that stages bundles: records the bundle served (for
    /// the next start), and tastes the live files' bundle if it is another one. Returns
    /// warnings for the log.
    fn start_bundles(&self, state: &mut State, live: Option<bundle::BundleId>) -> Vec<String> {
        let Some(bundles) = &state.bundles else {
            return Vec::new();
        };
        let status = &bundles.status;
        let pending: Vec<&str> = live.iter().map(String::as_str).collect();
        let mut warnings = Vec::new();
        if let Err(e) =
            bundles
                .store
                .set_serving(&status.serving, status.previous.as_deref(), &pending)
        {
            warnings.push(format!(
                "bundle {} served but not recorded: {e}",
                status.serving
            ));
        }
        match live {
            Some(id) if id != status.serving => {
                if let Err(reasons) = self.taste_bundle(state, id.clone()) {
                    warnings.push(format!(
                        "the live files (bundle {id}) were refused: {}",
                        reasons.join("; ")
                    ));
                }
            }
            _ => {}
        }
        warnings
    }

    /// Captures the live files; tastes them if they are a bundle not seen yet. `None`: the
    /// node does not stage bundles, or the live files are the bundle served.
    fn stage_live(&self, state: &mut State) -> Option<Result<bundle::BundleId, Vec<String>>> {
        let bundles = state.bundles.as_mut()?;
        let captured = match self.source.read_config() {
            Ok(live) => bundles.store.capture(&live).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let id = match captured {
            Ok(id) => id,
            Err(e) => return Some(Err(vec![format!("the live files cannot be staged: {e}")])),
        };
        let status = &mut bundles.status;
        let was_live = status.live.replace(id.clone());
        if id == status.serving {
            // The live files are the bundle served again (a revert): nothing waits, and an
            // earlier refusal is history.
            let changed = status.pending.take().is_some() || status.refused.take().is_some();
            if changed || was_live.as_deref() != Some(id.as_str()) {
                self.publish_bundles(state);
            }
            return None;
        }
        if status.pending.as_deref() == Some(id.as_str()) {
            return Some(Ok(id));
        }
        if let Some(refused) = status.refused.as_ref().filter(|r| r.bundle == id) {
            return Some(Err(refused.reasons.clone()));
        }
        Some(self.taste_bundle(state, id.clone()).map(|()| id))
    }

    /// Tastes and loads bundle `id` with the control text served, without serving it: it
    /// becomes the pending bundle, or the refused one.
    fn taste_bundle(&self, state: &mut State, id: bundle::BundleId) -> Result<(), Vec<String>> {
        let Some(bundles) = &state.bundles else {
            return Err(vec!["this node does not stage bundles".into()]);
        };
        let source = bundles.store.source(&self.source, &bundles.base, &id);
        let control = state.served_control.clone();
        let result = source
            .read_config()
            .map_err(|e| vec![e.to_string()])
            .and_then(|config| {
                self.taste_and_load(&source, &config, control.as_ref(), &mut state.status)
                    .map(drop)
            });
        match &result {
            Ok(()) => {
                tracing::info!(
                    "the live files (bundle {id}) tasted OK; served once the fleet's rollout \
                     releases them to this node"
                );
                if let Some(bundles) = state.bundles.as_mut() {
                    bundles.status.pending = Some(id);
                }
                self.publish_bundles(state);
            }
            Err(reasons) => self.bundle_refused(state, &id, reasons.clone()),
        }
        result
    }

    /// Bundle `id` was refused: said in status (bundle and last refusal) and the log.
    fn bundle_refused(&self, state: &mut State, id: &str, reasons: Vec<String>) {
        for reason in &reasons {
            tracing::error!(
                "bundle {id} refused, still serving serial {}: {reason}",
                state.status.serial
            );
        }
        if let Some(bundles) = state.bundles.as_mut() {
            let status = &mut bundles.status;
            if status.pending.as_deref() == Some(id) {
                status.pending = None;
            }
            status.refused = Some(BundleRefusal {
                bundle: id.to_string(),
                reasons: reasons.clone(),
            });
        }
        state.status.reloads_refused += 1;
        state.status.last_refusal = Some(Refusal {
            at: rfc3339::format_utc(SystemTime::now()),
            trigger: Trigger::Bundle.as_str(),
            reasons,
        });
        self.publish_bundles(state);
    }

    fn publish_bundles(&self, state: &mut State) {
        state.status.bundle = state.bundles.as_ref().map(|b| b.status.clone());
        self.publish(state);
        self.origin.bundles_changed();
    }
}

/// The bundles of a node with `[fleet.rollout]`, from the config of its live files, and the
/// live files' bundle: the bundle to serve is the one served last (the store's marker), else
/// the live files'. `None` without `[fleet.rollout]`.
fn open_bundles(live: &Config) -> Result<(Option<Bundles>, Option<bundle::BundleId>), Vec<String>> {
    let Some(store) = bundle::BundleStore::for_config(live) else {
        return Ok((None, None));
    };
    let captured = store.capture(live);
    let (serving, previous) = match (store.serving(), &captured) {
        (Some(marked), _) => marked,
        (None, Ok(id)) => (id.clone(), None),
        (None, Err(e)) => return Err(vec![format!("the live files cannot be staged: {e}")]),
    };
    if let Err(e) = &captured {
        tracing::error!("the live files cannot be staged ({e}); serving bundle {serving}");
    }
    let status = BundleStatus {
        dir: store.dir().to_path_buf(),
        serving,
        previous,
        live: captured.as_ref().ok().cloned(),
        ..BundleStatus::default()
    };
    let bundles = Bundles {
        store,
        base: live.base_dir.clone(),
        status,
    };
    Ok((Some(bundles), captured.ok()))
}

/// Stands for "the control file could not be read" in `last_control_hash`.
const MISSING_FILE_HASH: u64 = 0;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn control_path(config: &Config) -> PathBuf {
    config.control.file.clone().unwrap_or_default()
}

/// The control file's text, read once (so what is validated is exactly what is recorded).
fn read_control_text(config: &Config) -> Result<Option<(PathBuf, String)>, String> {
    let Some(path) = &config.control.file else {
        return Ok(None);
    };
    match crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT) {
        Ok(text) => Ok(Some((path.clone(), text))),
        Err(e) => Err(format!("{}: cannot read: {e}", path.display())),
    }
}

/// The taster first (when enabled and there is a program to run), then the load in this
/// process, which must have read what the taster read. Counts the taste in `taster`.
fn taste_then_load(
    source: &Source,
    config: &Config,
    control: Option<&(PathBuf, String)>,
    previous: Option<&Snapshot>,
    taster: &mut TasterStatus,
) -> Result<Loaded, Vec<String>> {
    use crate::taster::{steering_fingerprint, Scope};
    taster.configure(&config.taster, source.taster.as_deref());
    let text = control.map(|(_, text)| text.as_str());
    let program = match &source.taster {
        Some(program) if config.taster.enabled => program,
        _ => return load_control(config, control, previous),
    };
    // Same config and zone files as the snapshot served: the server will share its zones
    // if the change binds the same steered names, and then the taster need not build them.
    let shared =
        previous.and_then(|p| crate::snapshot::load::shareable_sources(config, p.compiled()));
    // Else, zone file edits the server can apply as a difference: the taster tastes that.
    let mut declined = None;
    if let (None, Some(previous)) = (&shared, previous) {
        match taste_difference(source, config, control, previous, program, taster)? {
            Ok(loaded) => return Ok(loaded),
            Err(why) => declined = why,
        }
    }
    let mut run = |scope| {
        let started = Instant::now();
        let result =
            crate::taster::taste(program, &config.taster, &source.taste_args(), text, scope);
        taster.count(&result, started.elapsed());
        result.map_err(|refused| refused.reasons())
    };
    let mut tasted = None;
    if let Some(sources) = shared {
        let steering = run(Scope::Steering)?;
        let expected =
            steering_fingerprint(sources.config_digest(), sources.steered(), config, text);
        if steering.fingerprint == expected {
            tasted = Some((steering, Some(sources)));
        }
        // Else the change binds other steered names: the zones are rebuilt; taste them too.
    }
    let (tasted, shared) = match tasted {
        Some(tasted) => tasted,
        None => (run(Scope::Full)?, None),
    };
    let mut loaded = load_control(config, control, previous)?;
    if let (
        Some(why),
        ZonesFrom::Built {
            difference_declined: declined @ None,
            ..
        },
    ) = (declined, &mut loaded.zones_from)
    {
        *declined = Some(why);
    }
    let same = match (&shared, loaded.compiled.sources()) {
        (Some(shared), Some(used)) => Arc::ptr_eq(shared, used),
        (Some(_), None) => false,
        (None, _) => {
            crate::taster::fingerprint(config, &loaded.compiled, text) == tasted.fingerprint
        }
    };
    if !same {
        return Err(vec![
            "config, zone or geo database files changed while the taster was loading them: \
             not serving what was not tasted (reload again)"
                .to_string(),
        ]);
    }
    Ok(loaded)
}

/// Zone file edits that look like a difference (the bytes compared, see
/// [`crate::snapshot::load::difference_windows`]): tasted as one (the steering and the
/// changed lines, in the child), then applied. `Ok(Err(why))`: not applied as a difference
/// (`why`: the reason, when it got as far as trying); the caller tastes and loads it whole.
fn taste_difference(
    source: &Source,
    config: &Config,
    control: Option<&(PathBuf, String)>,
    previous: &Snapshot,
    program: &Path,
    taster: &mut TasterStatus,
) -> Result<Result<Loaded, Option<String>>, Vec<String>> {
    use crate::snapshot::load::{load_difference, DifferenceLoad};
    let Some(prepared) = crate::snapshot::load::difference_windows(config, previous.compiled())
    else {
        return Ok(Err(None));
    };
    let text = control.map(|(_, text)| text.as_str());
    let started = Instant::now();
    let result = crate::taster::taste_difference(
        program,
        &config.taster,
        &source.taste_args(),
        text,
        &prepared.windows,
    );
    taster.count(&result, started.elapsed());
    let tasted = result.map_err(|refused| refused.reasons())?;
    let Some(sources) = previous.compiled().sources() else {
        return Ok(Err(None));
    };
    let expected = crate::taster::steering_fingerprint(
        sources.config_digest(),
        sources.steered(),
        config,
        text,
    );
    if tasted.fingerprint != expected {
        return Ok(Err(Some(
            "the change binds other steered names".to_string(),
        )));
    }
    let control_source = match control {
        Some((path, text)) => ControlSource::Text { path, text },
        None => ControlSource::FromConfig,
    };
    // The load applies the very bytes whose changed lines the child parsed (read once).
    match load_difference(config, control_source, previous.compiled(), &prepared)? {
        DifferenceLoad::Loaded(loaded) => Ok(Ok(*loaded)),
        DifferenceLoad::Declined(why) => Ok(Err(Some(why))),
    }
}

/// `Ok(why)` when the inputs of `config` and `control` are exactly what this binary last
/// served (the record in the state directory says so): they need not be tasted again.
/// `Err(why)` otherwise.
fn served_before(config: &Config, control: Option<&str>) -> Result<String, String> {
    if !config.taster.enabled {
        return Err("the taster is off ([taster] enabled = false)".to_string());
    }
    let Some(dir) = config.state_dir() else {
        return Err("new input (no state directory: no config file)".to_string());
    };
    match ServedInputs::read(&dir) {
        Some(record) if record.still_current(config, control) => Ok(format!(
            "not tasted again: the inputs are what this binary last served ({})",
            dir.join(served::RECORD_FILE).display()
        )),
        Some(_) => Err("inputs changed since they were last served: tasted".to_string()),
        None => Err("no record of inputs served before: tasted".to_string()),
    }
}

/// Records what was just served in the state directory, for the next start. A failure costs
/// only a taste at that start, so it is logged, not raised.
fn record_served(config: &Config, served: Option<&ServedInputs>) {
    let (Some(dir), Some(served)) = (config.state_dir(), served) else {
        return;
    };
    if let Err(e) = served.write(&dir) {
        tracing::warn!("cannot record the inputs served ({e}): the next start tastes them again");
    }
}

/// Keeps the projection revisions of `served` in the state directory when they differ from
/// those of `previous`, so that a restart numbers the transfer serials on from them
/// (`snapshot::projection`). A failure is logged: the next start may then serve a serial
/// below what secondaries hold until the zone file serial moves on.
fn record_projection(config: &Config, previous: &Snapshot, served: &Snapshot) {
    let projections = served.compiled().projections();
    let (Some(dir), false) = (config.state_dir(), projections.is_empty()) else {
        return;
    };
    if previous.compiled().projections().remembered() == projections.remembered() {
        return;
    }
    if let Err(e) = crate::snapshot::projection::write_state(&dir, projections) {
        tracing::warn!("cannot record the transfer projection revisions ({e})");
    }
}

/// [`StartupStatus::phase`] while phase 1 of a start from the zone cache serves.
const PHASE_FIRST_ANSWERS: &str = "first answers from the zone cache; zones loading";
/// [`StartupStatus::phase`] once the first load serves whole.
const PHASE_LOADED: &str = "loaded";

/// A first load, ready to be served ([`first_load`]).
struct FirstLoad {
    loaded: Loaded,
    /// The control text served (the history's, when the file's was refused).
    text: Option<(PathBuf, String)>,
    /// Why the control file was refused and what serves instead.
    refusal: Option<Vec<String>>,
    /// The control text as the origin gave it.
    control: Result<Option<(PathBuf, String)>, Vec<String>>,
    taster: TasterStatus,
    startup: StartupStatus,
}

/// Phase 1 of a start from the zone cache, with the control text from `origin`.
fn first_answers(config: &Config, origin: &dyn ControlOrigin) -> Result<Loaded, String> {
    let control = origin.current(config)?;
    let source = match &control {
        Some((path, text)) => ControlSource::Text { path, text },
        None => ControlSource::FromConfig,
    };
    load_first_answers(config, source)
}

/// The first load: tasted unless the inputs are what this binary last served; if the control
/// file is bad, the newest valid version from the history (the refusal reported); `Err` if
/// nothing valid exists.
fn first_load(
    load_source: &Source,
    config: &Config,
    origin: &dyn ControlOrigin,
) -> Result<FirstLoad, Vec<String>> {
    let history = open_history(config);
    let control = origin.current(config).map_err(|e| vec![e]);
    let mut taster = TasterStatus::default();
    let mut startup = StartupStatus::default();
    let first = control.clone().and_then(|text| {
        let control_text = text.as_ref().map(|(_, t)| t.as_str());
        let as_served = served_before(config, control_text);
        startup.tasted =
            as_served.is_err() && config.taster.enabled && load_source.taster.is_some();
        startup.reason = match &as_served {
            Ok(why) | Err(why) => why.clone(),
        };
        let loaded = match as_served {
            Ok(_) => load_control(config, text.as_ref(), None),
            Err(_) => taste_then_load(load_source, config, text.as_ref(), None, &mut taster),
        };
        loaded.map(|l| (l, text))
    });
    let (loaded, text, refusal) = match first {
        Ok((loaded, text)) => (loaded, text, None),
        Err(reasons) => {
            let fallback = history
                .as_ref()
                .ok()
                .and_then(|h| newest_valid_version(h, load_source, config, &mut taster));
            match fallback {
                Some((loaded, text, serial)) => {
                    let mut reasons = reasons;
                    reasons.push(format!(
                        "serving control version {serial} from the history instead"
                    ));
                    (loaded, Some((control_path(config), text)), Some(reasons))
                }
                None => return Err(reasons),
            }
        }
    };
    Ok(FirstLoad {
        loaded,
        text,
        refusal,
        control,
        taster,
        startup,
    })
}

/// The test-only hold on phase 2 of a start from the zone cache: while the file named by
/// [`HOLD_ENV`] exists, the zones' load waits (polled; at most a minute), so that a test can
/// see phase 1 serve. Unset in production: one environment lookup per start.
fn hold_for_test() {
    let Some(path) = std::env::var_os(HOLD_ENV) else {
        return;
    };
    let path = PathBuf::from(path);
    let deadline = Instant::now() + Duration::from_secs(60);
    while path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The environment variable of [`hold_for_test`].
pub const HOLD_ENV: &str = "STEERDNS_ZONES_LOAD_HOLD";

/// Loads with `control`; `previous` (the snapshot being served) lends its zones when no zone
/// or config file changed. Without one (the first load), the zone cache of the state
/// directory may ([`crate::snapshot::zone_cache`]).
fn load_control(
    config: &Config,
    control: Option<&(PathBuf, String)>,
    previous: Option<&Snapshot>,
) -> Result<Loaded, Vec<String>> {
    let source = match control {
        Some((path, text)) => ControlSource::Text { path, text },
        None => ControlSource::FromConfig,
    };
    match previous {
        Some(previous) => load_after(config, source, Some(previous.compiled())),
        None => load_cold(config, source),
    }
}

/// Writes the zone cache of `snapshot` (whose zones were just built from their files) in the
/// background: encoding a million names takes a while, and a reload must not wait for it. One
/// write at a time; a failure costs only the next start's speed, so it is logged.
fn write_zone_cache(config: &Config, snapshot: Arc<Snapshot>) {
    static WRITING: Mutex<()> = Mutex::new(());
    let Some(path) = crate::snapshot::zone_cache::path(config) else {
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("zone-cache".to_string())
        .spawn(move || {
            let _one_at_a_time = WRITING.lock().unwrap_or_else(|e| e.into_inner());
            let started = Instant::now();
            match crate::snapshot::zone_cache::write(&path, snapshot.compiled()) {
                Ok(bytes) => tracing::info!(
                    "zone cache written ({bytes} bytes in {:.0} ms)",
                    ms(started.elapsed())
                ),
                Err(e) => tracing::info!("zone cache not written: {e}"),
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("zone cache not written: cannot start its thread: {e}");
    }
}

fn open_history(config: &Config) -> Result<History, crate::change::ChangeError> {
    crate::change::history(config)
}

/// The serial for `text`: the newest recorded one's if it is the same text (and not older than
/// what is served), else a new one above both; `true` when it still has to be recorded. Reads
/// the history only.
fn number_version(
    history: &History,
    text: &str,
    control: &ControlFile,
    served: u64,
) -> Result<(u64, bool), crate::control::history::HistoryError> {
    let newest = history.newest()?;
    if let Some((meta, newest_text)) = &newest {
        if newest_text == text && meta.serial >= served {
            return Ok((meta.serial, false));
        }
    }
    let floor = newest
        .as_ref()
        .map_or(served, |(m, _)| m.serial.max(served));
    Ok((
        next_serial((floor > 0).then_some(floor), control.serial),
        true,
    ))
}

/// Newest history version that the taster and this process load cleanly with the current
/// config and zones.
fn newest_valid_version(
    history: &History,
    source: &Source,
    config: &Config,
    taster: &mut TasterStatus,
) -> Option<(Loaded, String, u64)> {
    let versions = history.list().ok()?;
    let path = control_path(config);
    versions.iter().rev().find_map(|meta| {
        let (_, text) = history.get(meta.serial).ok()??;
        let candidate = (path.clone(), text);
        let loaded = taste_then_load(source, config, Some(&candidate), None, taster).ok()?;
        Some((loaded, candidate.1, meta.serial))
    })
}

/// A short fingerprint of what is being served: config, control text, zone serials.
fn config_hash(config: &Config, control: Option<&str>, compiled: &Compiled) -> u64 {
    let mut bytes = Vec::new();
    if let Some(path) = &config.source_path {
        bytes.extend(
            crate::files::read_limited(path, crate::files::SMALL_FILE_LIMIT).unwrap_or_default(),
        );
    }
    bytes.extend(control.unwrap_or("").as_bytes());
    for zone in compiled.zones().zones() {
        bytes.extend(&zone.apex[..]);
        bytes.extend(zone.serial.to_be_bytes());
    }
    fnv1a64(&bytes)
}

/// Convenience for callers that only have a path.
pub fn source_for(config: Option<&Path>, zones: Option<&Path>) -> Source {
    Source {
        config: config.map(Path::to_path_buf),
        zones: zones.map(Path::to_path_buf),
        ..Source::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reload holds the state lock across the history's fsyncs, which take seconds on a busy
    /// disk; `/v1/status` and `/metrics` must answer meanwhile.
    #[test]
    fn status_readers_do_not_wait_for_a_reload_in_progress() {
        let reloader = Reloader::serving_nothing(Source::default());
        let reload_in_progress = reloader.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let (snapshot, status) = reloader.snapshot_and_status();
                let _ = tx.send((snapshot.serial(), status.serial, reloader.status().serial));
            });
            let read = rx.recv_timeout(Duration::from_secs(5));
            drop(reload_in_progress);
            assert_eq!(read, Ok((0, 0, 0)), "status waited for the reload's lock");
        });
    }
}
