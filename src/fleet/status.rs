//! What a fleet node reports about its link to the fleet, for status, metrics, the dashboard
//! and `steerdns fleet status`: the link to etcd ([`FleetLinkStatus`]), the staged rollout as
//! this node sees it, a local override, and records skipped because they do not decode. Plain
//! data: [`super::origin::FleetOrigin`] keeps it, the admin API shows it.

use serde::{Deserialize, Serialize};

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
    /// etcd clients this node has made: one, shared by all its fleet tasks, plus one more
    /// after each session that ended on it (`crate::fleet::session::Link`).
    #[serde(default)]
    pub etcd_connections: u64,
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
    /// Tenants in a fleet with `[fleet.rollout]`: what this node applied and refused, and the
    /// tenant changes it holds back because a canary node refused them
    /// (`crate::fleet::tenants`).
    #[serde(default)]
    pub tenants: TenantReport,
    #[serde(default)]
    pub halted_tenants: Vec<HaltedTenant>,
}

/// How far a node has applied the fleet's tenant keys (in its registry record, for the
/// nodes of later waves to follow the canary).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct TenantReport {
    /// Every tenant change up to this etcd revision is applied (served or refused).
    pub through: i64,
    /// Tenants whose document at that etcd revision this node refused, with the reason.
    pub refused: std::collections::BTreeMap<String, TenantRefusedAt>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TenantRefusedAt {
    pub revision: i64,
    pub reason: String,
}

/// A tenant change this node does not apply: a canary node refused it. The tenant keeps
/// serving its last good version here; every other tenant's changes go on.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HaltedTenant {
    pub tenant: String,
    pub revision: i64,
    pub node: String,
    pub reason: String,
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

/// A fleet node's local override ([`super::direct`]) as status, the node registry and
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
