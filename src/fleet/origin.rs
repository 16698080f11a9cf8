//! The control origin of a fleet node: the newest version from etcd when there is one, else
//! the local control file — the cache of the last version this node accepted, so that a node
//! restarting while etcd is unreachable serves the newest good state it had.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use crate::config::Config;
use crate::hash::fnv1a64;
use crate::reload::{BadRecord, ControlOrigin, FleetLinkStatus, RolloutView};
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
        !(same_as_served || same_as_refused)
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

    fn fleet_status(&self) -> Option<FleetLinkStatus> {
        Some(self.0.link())
    }
}
