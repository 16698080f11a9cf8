//! Fleet mode: every nameserver of a fleet serves one control state, kept in **etcd** (v3 API).
//!
//! Owns the etcd side of the control plane: connecting (endpoints, TLS, user/password), the key
//! layout under the fleet's prefix, compare-and-swap writes of new control versions with their
//! bounded history, the node's watch (with reconnect) that feeds each new version to the
//! reloader, and the node registry (one key per live node, on a lease). It never touches the
//! serving path: a version from etcd takes the same reload path as a control-file edit (tasted
//! whole, swapped in, or refused with the last known good still serving), through
//! [`origin::FleetOrigin`], this mode's [`crate::reload::ControlOrigin`].
//!
//! A node's fleet parts (registry and control watch, rollout coordinator, shield, shared
//! health probing) are tasks of the daemon's supervisor and talk to etcd over one client, the
//! node's [`session::Link`] (one TCP connection, one HTTP/2 channel); each part keeps its own
//! lease, because a lease is that part's proof of life (see [`session`]).
//!
//! # Key layout (all under `[fleet] prefix`, e.g. `/steerdns/prod`)
//!
//! | key | value | written by |
//! | --- | --- | --- |
//! | `<prefix>/control` | the control file's TOML text; its etcd `mod_revision` is the fleet's **control revision** | CLI (CAS on the revision it read), first node (create-if-absent) |
//! | `<prefix>/convergence` | JSON [`store::Convergence`]: how long the last change took to reach every live node | the CLI that wrote the change |
//! | `<prefix>/history/<serial, 20 digits>` | JSON [`store::FleetVersion`]: text, serial, time, source, summary; written in the same transaction as `control`, so its `mod_revision` is that version's control revision; the oldest beyond `history_keep` are deleted | CLI, seeding |
//! | `<prefix>/nodes/<name>` | JSON [`store::NodeRecord`]: what the node serves; attached to the node's lease, so it vanishes `lease_ttl_secs` after the node dies. One live lease per name ([`put_claimed`]): a second process with the name does not register; a restart takes its entry back (the lease is remembered in `<control file>.lease`). Readers skip a record that does not decode, names another node or is on no lease ([`store::Listed`]) | each node |
//! | `<prefix>/rollout/state` | JSON [`rollout::RolloutRecord`]: the staged rollout of the newest version (waves, gates, phase) with the candidate's and the last known good's texts; what each node may serve. Missing or unreadable: every node holds at what it serves; the coordinator re-creates a missing one settled on the last version every node serves ([`rollout::recovered`]) | the coordinator (CAS), `rollout resume/abort/reset` |
//! | `<prefix>/rollout/bundle` | JSON [`bundles::BundleRecord`]: the staged rollout of the nodes' config/zone/GeoIP bundles — a generation number per rollout, and per node the ids of its last known good bundle and of its candidate | the coordinator (CAS), `rollout resume/abort --bundles` |
//! | `<prefix>/rollout/coordinator` | the name of the node driving rollouts; attached to its lease, so another node takes over when it dies; the holder is its lease, not the name (a key on no lease is taken over) | the coordinator ([`claim`]) |
//! | `<prefix>/health/probers/<name>` | JSON [`health::ProberRecord`]: the node's site and its results for the health targets it probes (state after rise/fall, age of the last check); on a lease of the node's health task, so a dead prober's results vanish `lease_ttl_secs` after it dies | each node (shared probing, `[fleet.health]`) |
//! | `<prefix>/members/<name>` | JSON [`store::Member`]: every node that ever registered (no lease), so that `fleet status` can name the missing ones | each node; `fleet forget` deletes |
//! | `<prefix>/shield/leader` | the name of the traffic shield's leader; attached to its lease, so another node takes over when it dies; the holder is its lease, not the name (a key on no lease is taken over) | the shield task ([`claim`]) |
//! | `<prefix>/shield/state` | JSON [`crate::shield::wire::PublishedState`]: the shield state every node serves (fractions, destinations, moves in flight, hold-down timers, smoothed demand); its `mod_revision` is the **state revision** (`dig CH TXT` shows it) | the leader (compare-and-swap on the leader key's lease), when its view changes and at least every second |
//! | `<prefix>/shield/load` | JSON [`crate::shield::wire::LoadRecord`]: the fleet's freshest load feed (pushed, from a load file or from Prometheus) and who received it; no lease | the node that received it |
//! | `<prefix>/shield/nodes/<name>` | JSON [`crate::shield::wire::NodeReport`]: the node's demand (TTL-weighted answers per second by client region and destination), the state revision it serves, how, and its feed's age; on its lease | each node, every shield tick |
//!
//! Serials: a fleet write sets `serial = N` in the text (one above the newest in etcd), so every
//! node serves, and `dig CH TXT serial.steerdns` shows, the same serial for the same version.
//!
//! The traffic shield's fleet mode lives in [`shield`] (the etcd side: one transaction per
//! tick) and `crate::shield::live` (every check and decision); the leader alone runs the
//! step, every node serves the published state, a node without etcd serves the last one it
//! had and decays to normal answers after `[shield] revert_after_secs`.
//!
//! # Config, zones and GeoIP: bundles
//!
//! Control versions travel through etcd; the config file, zone files and GeoIP database travel
//! with the deployment (files on every node), so with `[fleet.rollout]` they are staged
//! differently but by the same coordinator and state machine ([`bundles`]):
//! - On SIGHUP, `steerdns reload` or a restart, a node *captures* its live files into its
//!   bundle store (`[fleet] bundle_dir`, `crate::reload::bundle`): a copy named by the hash of
//!   its bytes. It tastes the copy (taster child, then an in-process load, with the control
//!   text it serves) and reports it in its registry entry as *pending* (or *refused*, with the
//!   reason) — but keeps serving the copy it served, never the live files.
//! - The coordinator begins a bundle **generation** when a node reports a bundle it neither
//!   serves nor had in the last generation, releases it wave by wave (canary first, bake, the
//!   same gates), and records per node which of its own bundles is the candidate (captured
//!   when its wave is released) and which the last known good. Nodes of one wave may hold
//!   different bundles (their configs differ, their files arrived at different times): each is
//!   judged on its own. Files that reach a node after its wave was released halt the
//!   generation, and the next one begins with them — so nothing gets past a canary that had
//!   not yet tasted its own copy of the change.
//! - A halt sends every node that serves its candidate back to its last known good bundle
//!   (the store keeps the bundle served, the one before it and the one waiting); the bad
//!   files stay on disk, still pending, and begin nothing until they change again (or
//!   `rollout resume --bundles`).
//! - A restart serves the bundle the store's `serving` marker names (a restart mid-rollout
//!   never serves unreleased files); if the node's wave was released, the restart gate halts.
//! - A node without `[fleet.rollout]`, or not in a fleet, loads its live files on reload as a
//!   single node does (tasted, then swapped); one that joined after a generation began serves
//!   what it has until the next one.
//!
//! # Without etcd
//!
//! When etcd is unreachable a node keeps serving what it has (its local control file is the
//! cache of the last version it accepted, so a restart serves it too), status and metrics say
//! the link is down and since when, and the node reconnects, re-reads and re-registers by itself.

pub mod bundles;
pub mod client;
pub mod control_store;
pub mod coordinator;
pub mod direct;
pub mod health;
pub mod node;
pub mod origin;
pub mod rollout;
pub mod session;
pub mod shield;
pub mod status;
pub mod store;
pub mod tenants;

use crate::config::fleet::FleetConfig;
pub use session::request_timeout;

/// Errors talking to etcd or reading what is there.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("etcd at {endpoints}: {message}")]
    Unreachable { endpoints: String, message: String },
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("etcd key {key}: {message}")]
    BadValue { key: String, message: String },
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("{0}")]
    Other(String),
}

/// The keys of one fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.trim_end_matches('/').to_string(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn control(&self) -> String {
        format!("{}/control", self.prefix)
    }

    pub fn convergence(&self) -> String {
        format!("{}/convergence", self.prefix)
    }

    /// The end (exclusive) of the range a node watches: `control` and `convergence`, nothing
    /// else (`control` < `control/…` < `convergence` in byte order; no other key lives there).
    pub fn watch_range_end(&self) -> String {
        format!("{}/convergence\0", self.prefix)
    }

    /// The rollout state (see [`rollout::RolloutRecord`]).
    pub fn rollout(&self) -> String {
        format!("{}/rollout/state", self.prefix)
    }

    /// The bundle rollout state (see [`bundles::BundleRecord`]).
    pub fn bundle_rollout(&self) -> String {
        format!("{}/rollout/bundle", self.prefix)
    }

    /// The range a node watches for rollout states: `rollout/bundle` up to and including
    /// `rollout/state` (the coordinator key between them is ignored).
    pub fn rollout_watch_range(&self) -> (String, String) {
        (
            self.bundle_rollout(),
            format!("{}/rollout/state\0", self.prefix),
        )
    }

    /// Who drives rollouts (on the coordinator's lease).
    pub fn coordinator(&self) -> String {
        format!("{}/rollout/coordinator", self.prefix)
    }

    /// The shield leader's name (on its lease).
    pub fn shield_leader(&self) -> String {
        format!("{}/shield/leader", self.prefix)
    }

    /// The shield state the leader published (its `mod_revision` is the state revision).
    pub fn shield_state(&self) -> String {
        format!("{}/shield/state", self.prefix)
    }

    /// The fleet's freshest load feed.
    pub fn shield_load(&self) -> String {
        format!("{}/shield/load", self.prefix)
    }

    pub fn shield_nodes_dir(&self) -> String {
        format!("{}/shield/nodes/", self.prefix)
    }

    /// One node's shield report (demand, revision served; on its lease).
    pub fn shield_node(&self, name: &str) -> String {
        format!("{}/shield/nodes/{name}", self.prefix)
    }

    pub fn history_dir(&self) -> String {
        format!("{}/history/", self.prefix)
    }

    pub fn history(&self, serial: u64) -> String {
        format!("{}/history/{serial:020}", self.prefix)
    }

    pub fn nodes_dir(&self) -> String {
        format!("{}/nodes/", self.prefix)
    }

    pub fn node(&self, name: &str) -> String {
        format!("{}/nodes/{name}", self.prefix)
    }

    pub fn members_dir(&self) -> String {
        format!("{}/members/", self.prefix)
    }

    pub fn member(&self, name: &str) -> String {
        format!("{}/members/{name}", self.prefix)
    }
}

/// Bounds one etcd request by the `[fleet]` timeout: a partitioned etcd must not hang a task.
pub async fn within<T, E: Into<FleetError>>(
    config: &FleetConfig,
    what: &str,
    future: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, FleetError> {
    let limit = request_timeout(config);
    match tokio::time::timeout(limit, future).await {
        Ok(result) => result.map_err(Into::into),
        Err(_) => Err(FleetError::Other(format!(
            "{what}: no answer from etcd within {limit:?}"
        ))),
    }
}

/// What [`put_claimed`] found at a key claimed on a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Written on this lease (the key was free, or on this lease already).
    Held,
    /// Written on this lease over a key on no lease (written by hand: nobody keeps it alive,
    /// it would never expire) or on an earlier lease of this process; what it held.
    TakenOver(String),
    /// Another live lease holds it: its value and lease.
    Refused { value: String, lease: i64 },
}

/// Puts `value` at `key` on `lease` unless another live lease holds the key. A key on no
/// lease (written by hand), or on one of `own` (this process's earlier leases, still alive
/// after a reconnect), is taken over. etcd deletes a key when its lease expires, so a key on
/// a lease is held by a live lease: whoever holds one leads (or owns a node name) until its
/// lease expires, and two processes with the same node name cannot both hold it.
pub async fn put_claimed(
    config: &FleetConfig,
    client: &mut etcd_client::Client,
    key: &str,
    value: &str,
    lease: i64,
    own: &[i64],
) -> Result<Claim, FleetError> {
    use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
    let put = || TxnOp::put(key, value, Some(PutOptions::new().with_lease(lease)));
    for _ in 0..3 {
        let txn = Txn::new()
            .when([Compare::lease(key, CompareOp::Equal, lease)])
            .and_then([put()])
            .or_else([TxnOp::get(key, None)]);
        let response = within(config, "claiming a key", client.txn(txn)).await?;
        if response.succeeded() {
            return Ok(Claim::Held);
        }
        let found = response.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().cloned(),
            _ => None,
        });
        let (expected, by_hand) = match &found {
            None => (Compare::create_revision(key, CompareOp::Equal, 0), None),
            Some(kv) if own.contains(&kv.lease()) => (
                Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision()),
                None,
            ),
            Some(kv) if kv.lease() == 0 => (
                Compare::mod_revision(key, CompareOp::Equal, kv.mod_revision()),
                Some(String::from_utf8_lossy(kv.value()).into_owned()),
            ),
            Some(kv) => {
                return Ok(Claim::Refused {
                    value: String::from_utf8_lossy(kv.value()).into_owned(),
                    lease: kv.lease(),
                })
            }
        };
        let txn = Txn::new().when([expected]).and_then([put()]);
        if within(config, "claiming a key", client.txn(txn))
            .await?
            .succeeded()
        {
            return Ok(by_hand.map_or(Claim::Held, Claim::TakenOver));
        }
        // Someone else moved the key meanwhile: look again.
    }
    Err(FleetError::Other(format!(
        "{key}: kept changing while claiming it"
    )))
}

/// Takes the leased key `key` for node `name` (see [`put_claimed`]); returns whether this
/// lease holds it now. Taking over a hand-written key is logged.
pub async fn claim(
    config: &FleetConfig,
    client: &mut etcd_client::Client,
    key: &str,
    name: &str,
    lease: i64,
    own: &[i64],
) -> Result<bool, FleetError> {
    match put_claimed(config, client, key, name, lease, own).await? {
        Claim::Held => Ok(true),
        Claim::TakenOver(from) => {
            tracing::warn!(
                "fleet: {key} held {from:?} on no lease (written by hand?); {name} took it over"
            );
            Ok(true)
        }
        Claim::Refused { .. } => Ok(false),
    }
}

/// Whether `lease` still holds `key` (someone may have deleted or overwritten it).
pub async fn holds(
    config: &FleetConfig,
    client: &mut etcd_client::Client,
    key: &str,
    lease: i64,
) -> Result<bool, FleetError> {
    let response = within(config, "checking a claim", client.get(key, None)).await?;
    Ok(response.kvs().first().is_some_and(|kv| kv.lease() == lease))
}

/// The leases a task held in its earlier sessions (still alive for up to `lease_ttl_secs`
/// after a reconnect), so that it takes its own claims back at once. Bounded.
#[derive(Debug, Default, Clone)]
pub struct OwnLeases(Vec<i64>);

impl OwnLeases {
    pub fn add(&mut self, lease: i64) {
        if !self.0.contains(&lease) {
            self.0.push(lease);
        }
        if self.0.len() > 8 {
            self.0.remove(0);
        }
    }

    pub fn all(&self) -> &[i64] {
        &self.0
    }
}

/// This node's name: `[fleet] node` (or `--node`), else the NSID, else the host name.
pub fn node_name(config: &crate::config::Config) -> String {
    if let Some(name) = config.fleet.as_ref().and_then(|f| f.node.clone()) {
        return name;
    }
    if let Some(nsid) = &config.server.nsid {
        if crate::config::fleet::node_name_problem(nsid).is_none() {
            return nsid.clone();
        }
    }
    host_name()
}

pub(crate) fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into the buffer we own.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    let cleaned: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(63)
        .collect();
    if cleaned.is_empty() {
        "node".to_string()
    } else {
        cleaned
    }
}

/// Why a session that ends only by failing ended (its `Ok` cannot exist): the node task, the
/// rollout coordinator, the shield leader and shared probing each loop on one.
pub fn ended(session: Result<std::convert::Infallible, FleetError>) -> FleetError {
    match session {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watched_range_holds_control_and_convergence_only() {
        let keys = Keys::new("/steerdns/prod/");
        let (start, end) = (keys.control(), keys.watch_range_end());
        assert_eq!(start, "/steerdns/prod/control");
        for inside in [keys.control(), keys.convergence()] {
            assert!(inside >= start && inside < end, "{inside}");
        }
        for outside in [
            keys.history(7),
            keys.node("ns1"),
            keys.member("ns1"),
            keys.rollout(),
            keys.coordinator(),
            "/steerdns/prod-eu/control".to_string(),
            "/steerdns/prod/coz".to_string(),
        ] {
            assert!(!(outside >= start && outside < end), "{outside}");
        }
        assert_eq!(
            keys.history(42),
            "/steerdns/prod/history/00000000000000000042"
        );
    }
}
