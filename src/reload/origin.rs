//! Where the control text comes from, behind one small trait: the local control file (one
//! node) or a store shared by a fleet of nodes (`crate::fleet`, etcd). The reloader asks its
//! origin for the text on every reload and tells it what became of it; it knows nothing else
//! about where the text lives.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::Config;

/// Where the control text comes from: the local control file (one node, the default:
/// [`FileOrigin`]) or a store shared by a fleet (`crate::fleet`), whose newest version the
/// origin hands to every reload. Whatever the origin, the text takes the one reload path: tasted
/// whole, swapped in or refused with the last known good still serving.
pub trait ControlOrigin: Send + Sync {
    /// The control text to taste now and the path that names it in errors; `None` when the
    /// config names no control file.
    fn current(&self, config: &Config) -> Result<Option<(PathBuf, String)>, String>;
    /// `text` was accepted and is being served (called under the reload lock, after the swap).
    /// Returns a problem worth a warning in status (e.g. the local cache is not writable).
    fn accepted(&self, config: &Config, text: &str) -> Option<String> {
        let _ = (config, text);
        None
    }
    /// `text` was refused (the reasons are in status already).
    fn refused(&self, text: &str) {
        let _ = text;
    }
    /// The node's bundles changed (one tasted, refused or served): a fleet node tells the
    /// fleet (see [`super::bundle`]).
    fn bundles_changed(&self) {}
    /// Whether operators edit the control file directly (so it is watched). In fleet mode the
    /// file is only the node's cache and is not watched.
    fn watches_file(&self) -> bool {
        true
    }
    /// The link to the shared store, for status and metrics (`None`: no fleet).
    fn fleet_status(&self) -> Option<FleetLinkStatus> {
        None
    }
    /// Whether `text` is a fleet node's local override (served although etcd does not hold
    /// it; `CH TXT serial.steerdns` says so).
    fn is_local_override(&self, text: &str) -> bool {
        let _ = text;
        false
    }
}

/// The control file named by the config: read on every reload.
pub struct FileOrigin;

impl ControlOrigin for FileOrigin {
    fn current(&self, config: &Config) -> Result<Option<(PathBuf, String)>, String> {
        super::read_control_text(config)
    }
}

/// The state of a node's link to its fleet's shared store, as status and metrics show it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FleetLinkStatus {
    /// This node's name in the fleet.
    pub node: String,
    /// The fleet's key prefix in etcd.
    pub prefix: String,
    pub endpoints: Vec<String>,
    /// Whether the node is connected to etcd and watching (false: serving what it has).
    pub connected: bool,
    /// When the link last went up or down (RFC 3339), and how long ago in seconds.
    pub since: String,
    pub since_secs: f64,
    /// Why the link is down (or the last error it had).
    pub last_error: Option<String>,
    /// etcd revision of the control version this node serves (0: none from etcd yet).
    pub revision_served: i64,
    /// Newest control revision this node has seen in etcd.
    pub revision_latest: i64,
    /// A revision this node refused (the reasons are in `last_refusal`).
    pub refused_revision: Option<i64>,
    /// Milliseconds from receiving the last change from etcd to serving it.
    pub last_apply_ms: Option<f64>,
    /// Milliseconds from the last change's write until every live node served it, as measured
    /// by the command that wrote it.
    pub last_convergence_ms: Option<f64>,
    /// The fleet's staged rollout as this node sees it (`None`: no `[fleet.rollout]` here).
    pub rollout: Option<RolloutView>,
    /// A version sent with `--direct` that this node serves over the fleet's (until etcd
    /// holds it, or `control override drop`).
    #[serde(default)]
    pub local_override: Option<OverrideView>,
    /// Nodes in the registry this node last saw in etcd (what `--direct` reaches).
    #[serde(default)]
    pub known_nodes: usize,
    /// Records under the fleet's prefix this node's fleet tasks skipped because they do not
    /// decode (or are not what their key says): each key and why. The rest is used.
    #[serde(default)]
    pub bad_records: Vec<BadRecord>,
    /// Why this node's rollout coordinator task last failed (cleared when it runs again).
    #[serde(default)]
    pub coordinator_error: Option<String>,
    /// Why this node's registry entry is not written (another live node registered the same
    /// name), while that lasts.
    #[serde(default)]
    pub registration_refused: Option<String>,
}

/// A record read from the fleet's store and skipped: its key, why, and which task read it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct BadRecord {
    pub key: String,
    pub reason: String,
    /// `coordinator`, `node`, `health`, `shield`, `cli`.
    #[serde(default)]
    pub seen_by: String,
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

/// A fleet node's local override (`crate::fleet::direct`) as status, the node registry and
/// `fleet status` show it (without the texts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideView {
    pub serial: u64,
    /// The newest fleet revision a reached node served when the override was sent.
    pub base_revision: i64,
    pub by: String,
    pub what: String,
    /// When this node began serving it.
    pub at: String,
    /// A newer, different fleet revision in etcd: not written over, waiting for `steerdns
    /// control override drop`.
    pub conflict: Option<i64>,
}

/// A node's view of the fleet's staged rollout, for status, metrics and the dashboard.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RolloutView {
    /// `none` (no rollout state in etcd yet), `running`, `halted`, `completed`, `aborted`;
    /// `missing` (the state was deleted) or `unreadable` (it does not decode): the node holds
    /// at what it serves until the coordinator re-creates it or `steerdns rollout reset`.
    pub phase: String,
    /// The control revision being rolled out, and the last known good.
    pub candidate: i64,
    pub lkg: i64,
    /// Waves released so far, of how many; this node's wave (1 = the canary), if it has one.
    pub released: usize,
    pub waves: usize,
    pub wave: Option<usize>,
    /// The revision this node may serve now.
    pub allowed: i64,
    /// The fleet's newest control version is not released to this node yet.
    pub held: bool,
    /// `--emergency`: no bake time.
    pub emergency: bool,
    /// Why the rollout halted.
    pub halted: Option<String>,
    /// This node drives the fleet's rollouts now (it holds the coordinator key).
    pub coordinator: bool,
}
