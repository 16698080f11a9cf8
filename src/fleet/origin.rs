//! The control origin of a fleet node: the newest version from etcd when there is one, else
//! the local control file — the cache of the last version this node accepted, so that a node
//! restarting while etcd is unreachable serves the newest good state it had. A local override
//! sent with `--direct` (see [`super::direct`]) wins over both until etcd holds it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use super::direct::{self, DirectPaths, KnownNode, LocalOverride, Verdict};
use super::status::{BadRecord, FleetLinkStatus, RolloutView};
use crate::config::Config;
use crate::hash::fnv1a64;
use crate::reload::ControlOrigin;
use crate::rfc3339;

/// A version received from etcd.
#[derive(Debug, Clone)]
pub struct Remote {
    pub text: String,
    pub revision: i64,
    pub received: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    link: FleetLinkStatus,
    link_changed: Option<SystemTime>,
    /// Newest version from etcd (what reloads taste).
    latest: Option<Remote>,
    /// The version handed to the reload in progress: (hash of its text, revision, received).
    tasting: Option<(u64, i64, Instant)>,
    /// Hash of the control text being served, and of the last one refused.
    served_hash: Option<u64>,
    /// The control text being served (tasted again instead of a refused version from etcd,
    /// so that a SIGHUP for new zones is not refused for the fleet's bad version).
    served_text: Option<String>,
    refused_hash: Option<u64>,
    /// The fleet's rollout as the node task last saw it, and whether this node's coordinator
    /// task holds the coordinator key.
    rollout: Option<RolloutView>,
    coordinator: bool,
    /// Records skipped by each of this node's fleet tasks (by task name).
    bad_records: std::collections::BTreeMap<&'static str, Vec<BadRecord>>,
    coordinator_error: Option<String>,
    registration_refused: Option<String>,
    /// Break-glass state (see [`super::direct`]).
    direct: DirectState,
}

#[derive(Debug, Default)]
struct DirectState {
    local_override: Option<LocalOverride>,
    known: Vec<KnownNode>,
    paths: Option<DirectPaths>,
}

/// Shared by the node's etcd task (which offers new versions and reports the link) and the
/// reloader (which asks for the text to taste and reports what became of it).
#[derive(Debug)]
pub struct FleetOrigin {
    inner: Mutex<Inner>,
    /// Wakes the registry writer when what the node serves changed.
    pub changed: tokio::sync::Notify,
}

impl FleetOrigin {
    pub fn new(node: &str, prefix: &str, endpoints: &[String]) -> Arc<FleetOrigin> {
        Arc::new(FleetOrigin {
            inner: Mutex::new(Inner {
                link: FleetLinkStatus {
                    node: node.to_string(),
                    prefix: prefix.to_string(),
                    endpoints: endpoints.to_vec(),
                    connected: false,
                    since: rfc3339::format_utc(SystemTime::now()),
                    last_error: Some("not connected yet".into()),
                    ..FleetLinkStatus::default()
                },
                link_changed: Some(SystemTime::now()),
                ..Inner::default()
            }),
            changed: tokio::sync::Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A version from etcd. Returns whether a reload should taste it: not when it is the text
    /// already served (e.g. after a reconnect) or the one already refused.
    pub fn offer(&self, remote: Remote) -> bool {
        let mut inner = self.lock();
        let hash = fnv1a64(remote.text.as_bytes());
        inner.link.revision_latest = inner.link.revision_latest.max(remote.revision);
        let held = judge_locked(&mut inner, &remote.text, remote.revision);
        let same_as_served = inner.served_hash == Some(hash);
        let same_as_refused = inner.refused_hash == Some(hash);
        if same_as_served {
            inner.link.revision_served = remote.revision;
            inner.link.refused_revision = None;
        }
        if same_as_refused {
            inner.link.refused_revision = Some(remote.revision);
        }
        inner.latest = Some(remote);
        // A held override wins: there is nothing to taste until it is resolved or dropped.
        // Once resolved, the same text is served again, no longer as an override.
        let overridden = matches!(held, Some(Verdict::WriteBack | Verdict::Conflict));
        let resolved = held == Some(Verdict::Resolved);
        resolved || !(same_as_served || same_as_refused || overridden)
    }

    /// Flags the override held as in conflict with fleet revision `revision`.
    pub fn mark_conflict(&self, revision: i64) {
        let mut inner = self.lock();
        flag_conflict(&mut inner, revision);
    }

    /// Where the override and the registry are kept; restores what a previous run left.
    pub fn restore_direct(&self, paths: DirectPaths) {
        let mut inner = self.lock();
        inner.direct.local_override = direct::load_json(&paths.override_file);
        inner.direct.known = direct::load_json(&paths.nodes_file).unwrap_or_default();
        if let Some(held) = &inner.direct.local_override {
            tracing::warn!(
                "fleet: restored the LOCAL OVERRIDE serial {} ({} by {}) from {}",
                held.serial,
                held.what,
                held.by,
                paths.override_file.display()
            );
        }
        inner.direct.paths = Some(paths);
    }

    pub fn local_override(&self) -> Option<LocalOverride> {
        self.lock().direct.local_override.clone()
    }

    /// Holds (or, with `None`, forgets) a local override, on disk too.
    pub fn set_override(&self, held: Option<LocalOverride>) {
        let mut inner = self.lock();
        set_override_locked(&mut inner, held);
    }

    /// Forgets `held` and serves the fleet's version again: the newest from etcd, else the
    /// one the override replaced.
    pub fn drop_override(&self, held: &LocalOverride) {
        let mut inner = self.lock();
        set_override_locked(&mut inner, None);
        if inner.latest.is_none() {
            inner.latest = Some(Remote {
                text: held.replaced.clone(),
                revision: held.base_revision,
                received: Instant::now(),
            });
        }
    }

    /// The node registry as last seen in etcd.
    pub fn known(&self) -> Vec<KnownNode> {
        self.lock().direct.known.clone()
    }

    pub fn set_known(&self, known: Vec<KnownNode>) {
        let mut inner = self.lock();
        if inner.direct.known == known {
            return;
        }
        if let Some(paths) = &inner.direct.paths {
            direct::save_json(&paths.nodes_file, Some(&known));
        }
        inner.direct.known = known;
    }

    /// The control text served now (after the first accepted reload).
    pub fn served_text(&self) -> Option<String> {
        self.lock().served_text.clone()
    }

    /// The link went up (connected and watching) or down (with the reason).
    pub fn set_link(&self, connected: bool, error: Option<String>) {
        let mut inner = self.lock();
        if inner.link.connected != connected {
            inner.link_changed = Some(SystemTime::now());
            inner.link.since = rfc3339::format_utc(SystemTime::now());
            if connected {
                tracing::info!("fleet: connected to etcd");
            } else {
                tracing::warn!(
                    "fleet: etcd link down, serving what this node has: {}",
                    error.as_deref().unwrap_or("?")
                );
            }
        }
        inner.link.connected = connected;
        if error.is_some() || connected {
            inner.link.last_error = error;
        }
    }

    /// What this node applied of the fleet's tenants (see [`super::tenants`]).
    pub fn set_tenant_report(&self, report: super::status::TenantReport) {
        self.lock().link.tenants = report;
        self.changed.notify_one();
    }

    /// The tenant changes this node holds back (a canary refused them).
    pub fn set_halted_tenants(&self, halted: Vec<super::status::HaltedTenant>) {
        self.lock().link.halted_tenants = halted;
    }

    /// How many etcd clients the node's link has made so far.
    pub fn set_etcd_connections(&self, made: u64) {
        self.lock().link.etcd_connections = made;
    }

    pub fn set_convergence(&self, millis: f64) {
        self.lock().link.last_convergence_ms = Some(millis);
    }

    /// The revision served, and the refused one if any.
    pub fn served(&self) -> (i64, Option<i64>) {
        let inner = self.lock();
        (inner.link.revision_served, inner.link.refused_revision)
    }

    /// The revision a reload is tasting right now, if any.
    pub fn tasting(&self) -> Option<i64> {
        self.lock().tasting.map(|(_, revision, _)| revision)
    }

    /// The rollout as the node task sees it (status, metrics).
    pub fn set_rollout(&self, view: Option<RolloutView>) {
        self.lock().rollout = view;
    }

    /// This node's coordinator task holds (or lost) the coordinator key.
    pub fn set_coordinator(&self, coordinator: bool) {
        let mut inner = self.lock();
        if inner.coordinator != coordinator {
            if coordinator {
                tracing::info!("fleet: this node now coordinates the fleet's rollouts");
            } else {
                tracing::info!("fleet: this node no longer coordinates rollouts");
            }
        }
        inner.coordinator = coordinator;
    }

    /// The records task `seen_by` skipped in its last reading. Returns the ones new since
    /// its previous reading (worth a warning; a record still bad is not logged again).
    pub fn set_bad_records(&self, seen_by: &'static str, bad: Vec<BadRecord>) -> Vec<BadRecord> {
        let bad: Vec<BadRecord> = bad
            .into_iter()
            .map(|b| BadRecord {
                seen_by: seen_by.to_string(),
                ..b
            })
            .collect();
        let mut inner = self.lock();
        let before = inner.bad_records.get(seen_by).cloned().unwrap_or_default();
        let new = bad
            .iter()
            .filter(|b| !before.contains(b))
            .cloned()
            .collect();
        if bad.is_empty() {
            inner.bad_records.remove(seen_by);
        } else {
            inner.bad_records.insert(seen_by, bad);
        }
        new
    }

    /// Why the coordinator task failed (`None`: it runs).
    pub fn set_coordinator_error(&self, error: Option<String>) {
        self.lock().coordinator_error = error;
    }

    /// Why this node's registry entry is not written (`None`: it is).
    pub fn set_registration_refused(&self, reason: Option<String>) {
        self.lock().registration_refused = reason;
    }

    /// The text this node last accepted, if any version from etcd was.
    pub fn latest(&self) -> Option<Remote> {
        self.lock().latest.clone()
    }

    pub fn link(&self) -> FleetLinkStatus {
        let inner = self.lock();
        let mut link = inner.link.clone();
        link.local_override = inner
            .direct
            .local_override
            .as_ref()
            .map(LocalOverride::view);
        link.known_nodes = inner.direct.known.len();
        link.rollout = inner.rollout.clone().map(|view| RolloutView {
            coordinator: inner.coordinator,
            ..view
        });
        link.bad_records = inner.bad_records.values().flatten().cloned().collect();
        link.coordinator_error = inner.coordinator_error.clone();
        link.registration_refused = inner.registration_refused.clone();
        link.since_secs = inner
            .link_changed
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        link
    }
}

/// The `ControlOrigin` handed to the reloader. (A newtype so the reloader owns an `Arc` of it
/// while the etcd task keeps its own.)
pub struct Origin(pub Arc<FleetOrigin>);

impl ControlOrigin for Origin {
    fn current(&self, config: &Config) -> Result<Option<(PathBuf, String)>, String> {
        let Some(path) = config.control.file.clone() else {
            return Ok(None);
        };
        let mut inner = self.0.lock();
        if let Some(held) = inner
            .direct
            .local_override
            .as_ref()
            .filter(|h| h.resolved.is_none())
        {
            let text = held.text.clone();
            inner.tasting = None;
            return Ok(Some((path, text)));
        }
        let refused = |r: &Remote| inner.refused_hash == Some(fnv1a64(r.text.as_bytes()));
        if let (Some(remote), Some(served)) = (&inner.latest, &inner.served_text) {
            if refused(remote) {
                let text = served.clone();
                inner.tasting = None;
                return Ok(Some((path, text)));
            }
        }
        if let Some(remote) = &inner.latest {
            let text = remote.text.clone();
            inner.tasting = Some((fnv1a64(text.as_bytes()), remote.revision, remote.received));
            return Ok(Some((path, text)));
        }
        inner.tasting = None;
        drop(inner);
        match crate::files::read_text_limited(&path, crate::files::SMALL_FILE_LIMIT) {
            Ok(text) => Ok(Some((path, text))),
            Err(e) => Err(format!(
                "{}: cannot read the fleet control cache: {e}",
                path.display()
            )),
        }
    }

    fn accepted(&self, config: &Config, text: &str) -> Option<String> {
        // The cache first (the last accepted version, for a restart without etcd), so that
        // once status says a revision is served, the cache holds it too.
        let problem = config.control.file.as_ref().and_then(|path| {
            let cached = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT).ok();
            if cached.as_deref() == Some(text) {
                return None;
            }
            crate::files::replace_file(path, text.as_bytes())
                .err()
                .map(|e| format!("fleet control cache not updated: {e}"))
        });
        let hash = fnv1a64(text.as_bytes());
        {
            let mut inner = self.0.lock();
            inner.served_hash = Some(hash);
            inner.served_text = Some(text.to_string());
            // A resolved override ends once its text serves as etcd's (this snapshot).
            let resolved = inner
                .direct
                .local_override
                .as_ref()
                .is_some_and(|held| held.resolved.is_some() && held.text == text);
            if resolved {
                set_override_locked(&mut inner, None);
            }
            if let Some((tasted, revision, received)) = inner.tasting.take() {
                if tasted == hash {
                    inner.link.revision_served = revision;
                    inner.link.refused_revision = None;
                    inner.link.last_apply_ms = Some(received.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
        self.0.changed.notify_one();
        problem
    }

    fn refused(&self, text: &str) {
        let hash = fnv1a64(text.as_bytes());
        {
            let mut inner = self.0.lock();
            if let Some((tasted, revision, _)) = inner.tasting.take() {
                if tasted == hash {
                    inner.refused_hash = Some(hash);
                    inner.link.refused_revision = Some(revision);
                }
            }
        }
        self.0.changed.notify_one();
    }

    fn bundles_changed(&self) {
        self.0.changed.notify_one();
    }

    fn watches_file(&self) -> bool {
        false
    }

    fn is_local_override(&self, text: &str) -> bool {
        self.0
            .lock()
            .direct
            .local_override
            .as_ref()
            .is_some_and(|held| held.text == text && held.resolved.is_none())
    }
}

fn set_override_locked(inner: &mut Inner, held: Option<LocalOverride>) {
    if let Some(paths) = &inner.direct.paths {
        direct::save_json(&paths.override_file, held.as_ref());
    }
    inner.direct.local_override = held;
}

fn flag_conflict(inner: &mut Inner, revision: i64) {
    let Some(held) = &inner.direct.local_override else {
        return;
    };
    if held.conflict.is_some() {
        return;
    }
    tracing::error!(
        "fleet: etcd holds revision {revision}, newer than and different from the LOCAL OVERRIDE serial {} this node serves: not written over, still serving the override; `steerdns control override drop` to serve etcd's version",
        held.serial
    );
    let flagged = LocalOverride {
        conflict: Some(revision),
        ..held.clone()
    };
    set_override_locked(inner, Some(flagged));
}

/// Judges fleet version (`text`, `revision`) against the override held, if any: marks a
/// resolved one (dropped once its text serves as etcd's), flags a conflict (see
/// [`super::direct`]).
fn judge_locked(inner: &mut Inner, text: &str, revision: i64) -> Option<Verdict> {
    let held = inner.direct.local_override.as_ref()?;
    let verdict = direct::judge(held, text, revision);
    match verdict {
        Verdict::Resolved if held.resolved.is_none() => {
            tracing::info!(
                "fleet: etcd holds the local override serial {} (revision {revision}); served as etcd's version from now on",
                held.serial
            );
            let resolved = LocalOverride {
                resolved: Some(revision),
                ..held.clone()
            };
            set_override_locked(inner, Some(resolved));
        }
        Verdict::Resolved => {}
        Verdict::Conflict => flag_conflict(inner, revision),
        Verdict::WriteBack => {}
    }
    Some(verdict)
}
