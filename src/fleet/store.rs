//! Reading and writing the fleet's keys (see the layout in [`super`]): the control version and
//! its bounded history, written together by compare-and-swap; the node registry; the last
//! change's convergence. Values are JSON (or the control text itself); anything in etcd that
//! does not parse is reported as a bad value naming its key, never trusted.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp,
};
use serde::{Deserialize, Serialize};

use super::{FleetError, Keys};
use crate::control::edit::set_serial;
use crate::control::store::next_serial_above;
use crate::control::summarize;
use crate::control::ControlFile;
use crate::rfc3339;

/// How many times a write re-reads and re-applies its edit when another write got in first.
pub const MAX_WRITE_ATTEMPTS: u32 = 20;

/// The fleet's current control version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Control {
    pub text: String,
    /// etcd `mod_revision` of `<prefix>/control`.
    pub revision: i64,
    /// The text's `serial` (0 if it has none).
    pub serial: u64,
}

/// One version in `<prefix>/history/`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FleetVersion {
    pub serial: u64,
    /// When it was written (RFC 3339, the writer's clock).
    pub time: String,
    /// What wrote it: `weight set`, `rollback to 7`, `seeded by ns1`, with user and host.
    pub source: String,
    /// What changed, e.g. `critical.frontdoor weight 100->0`.
    pub summary: String,
    pub text: String,
    /// The control revision it was written at (filled in from etcd on reading).
    #[serde(default)]
    pub revision: i64,
    /// Written with `--emergency`: its rollout skips the bake times (never the taster or the
    /// gates).
    #[serde(default)]
    pub emergency: bool,
}

/// A node's registry entry (`<prefix>/nodes/<name>`, on the node's lease).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NodeRecord {
    pub name: String,
    pub nsid: Option<String>,
    pub identity: Option<String>,
    /// DNS listen addresses.
    pub listen: Vec<String>,
    /// Admin endpoint (status, metrics, dashboard).
    pub admin: String,
    /// Control serial served (`dig CH TXT serial.steerdns`).
    pub serial: u64,
    /// Control revision served (0: not yet a version from etcd).
    pub revision: i64,
    pub config_hash: String,
    /// Zone origin -> SOA serial served.
    pub zones: BTreeMap<String, u32>,
    pub last_refusal: Option<NodeRefusal>,
    pub started_at: String,
    pub uptime_secs: u64,
    pub updated_at: String,
    pub version: String,
    /// What the staged rollout judges this node by (nodes with `[fleet.rollout]` only).
    #[serde(default)]
    pub rollout: Option<crate::rollout::NodeReport>,
    /// Its config/zone/GeoIP bundles (nodes with `[fleet.rollout]` only).
    #[serde(default)]
    pub bundle: Option<super::bundles::BundleReport>,
    /// A version sent with `--direct` that the node serves over the fleet's (see
    /// [`super::direct`]): present while it waits to be written back, or in conflict.
    #[serde(default)]
    pub local_override: Option<super::status::OverrideView>,
    /// How far it applied the tenants' keys (nodes with tenants and `[fleet.rollout]`).
    #[serde(default)]
    pub tenants: Option<super::status::TenantReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeRefusal {
    pub at: String,
    /// The control revision refused, if the refusal was of a version from etcd.
    pub revision: Option<i64>,
    pub reasons: Vec<String>,
}

/// `<prefix>/members/<name>`: a node that registered at least once.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub first_seen: String,
    pub last_seen: String,
}

/// `<prefix>/convergence`: how the last change spread, as measured by the command that wrote it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Convergence {
    pub revision: i64,
    pub serial: u64,
    /// Milliseconds from the write to the last live node serving it (or to giving up).
    pub millis: f64,
    /// Live nodes that served it in time, and those that did not.
    pub converged: Vec<String>,
    pub lagging: Vec<String>,
    pub at: String,
}

/// A written control version.
#[derive(Debug, Clone)]
pub struct Written {
    pub revision: i64,
    pub serial: u64,
    pub text: String,
    pub summary: String,
    /// Writes that lost the compare-and-swap to another writer and were redone.
    pub conflicts: u32,
    /// The text was unchanged: nothing was written.
    pub unchanged: bool,
    /// Node reports whose serial was out of range and did not raise this write's serial.
    pub ignored_floors: Vec<String>,
}

/// Why a fleet write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error(transparent)]
    Edit(crate::change::ChangeError),
    #[error("refused, nothing written:\n  {}", .0.join("\n  "))]
    Refused(Vec<String>),
    #[error("the fleet has no control state yet under {0}: start a node (it seeds the fleet from its control file) or run `steerdns fleet init --from FILE`")]
    NotSeeded(String),
    #[error("gave up after {0} attempts: other writers kept changing the control state")]
    Contended(u32),
    /// The write was sent but etcd's answer was lost: it may have landed.
    #[error("etcd did not confirm the write of serial {serial}: {error}")]
    Unconfirmed {
        serial: u64,
        text: String,
        error: FleetError,
    },
}

fn text_of(kv: &KeyValue) -> Result<String, FleetError> {
    kv.value_str()
        .map(str::to_string)
        .map_err(|e| FleetError::BadValue {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            message: format!("not UTF-8: {e}"),
        })
}

fn json_of<T: for<'de> Deserialize<'de>>(kv: &KeyValue) -> Result<T, FleetError> {
    serde_json::from_slice(kv.value()).map_err(|e| FleetError::BadValue {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        message: format!("not the expected JSON: {e}"),
    })
}

/// The serial a control text carries (0 if none or unparsable).
pub fn serial_of(text: &str) -> u64 {
    ControlFile::parse(text, Path::new("control"))
        .ok()
        .and_then(|c| c.serial)
        .unwrap_or(0)
}

/// The control version from a `<prefix>/control` key-value.
pub fn control_of(kv: &KeyValue) -> Result<Control, FleetError> {
    let text = text_of(kv)?;
    Ok(Control {
        serial: serial_of(&text),
        revision: kv.mod_revision(),
        text,
    })
}

/// The fleet's current control version, if it has one.
pub async fn get_control(client: &mut Client, keys: &Keys) -> Result<Option<Control>, FleetError> {
    let response = client.get(keys.control(), None).await?;
    response.kvs().first().map(control_of).transpose()
}

/// The highest serial in the history (0 if empty).
pub async fn newest_history_serial(client: &mut Client, keys: &Keys) -> Result<u64, FleetError> {
    let options = GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_sort(SortTarget::Key, SortOrder::Descend)
        .with_limit(1);
    let response = client.get(keys.history_dir(), Some(options)).await?;
    Ok(response
        .kvs()
        .first()
        .and_then(|kv| kv.key_str().ok())
        .and_then(|k| k.rsplit('/').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0))
}

/// A record under one of the fleet's directories that was skipped because it does not
/// decode: its key and why. Listing the rest goes on; status names the key.
pub use super::status::BadRecord;

/// The records of one directory that decoded, and the keys of those that did not: one bad
/// record never hides the others (a hand-written key under `nodes/` must not stop rollouts).
#[derive(Debug, Clone, PartialEq)]
pub struct Listed<T> {
    pub records: Vec<T>,
    pub bad: Vec<BadRecord>,
}

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Listed {
            records: Vec::new(),
            bad: Vec::new(),
        }
    }
}

impl<T> Listed<T> {
    /// Decodes every key-value with `decode`, skipping (and naming) the ones it refuses.
    pub fn decode(
        kvs: &[KeyValue],
        decode: impl Fn(&KeyValue) -> Result<T, FleetError>,
    ) -> Listed<T> {
        let mut listed = Listed::default();
        for kv in kvs {
            match decode(kv) {
                Ok(record) => listed.records.push(record),
                Err(e) => listed.bad.push(BadRecord {
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    reason: match e {
                        FleetError::BadValue { message, .. } => message,
                        other => other.to_string(),
                    },
                    seen_by: String::new(),
                }),
            }
        }
        listed
    }
}

/// The fleet's versions, oldest first (entries that do not decode are skipped and named).
pub async fn history(client: &mut Client, keys: &Keys) -> Result<Listed<FleetVersion>, FleetError> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Key, SortOrder::Ascend);
    let response = client.get(keys.history_dir(), Some(options)).await?;
    Ok(Listed::decode(response.kvs(), |kv| {
        let mut version: FleetVersion = json_of(kv)?;
        version.revision = kv.mod_revision();
        Ok(version)
    }))
}

/// One version of the history.
pub async fn version(
    client: &mut Client,
    keys: &Keys,
    serial: u64,
) -> Result<Option<FleetVersion>, FleetError> {
    let response = client.get(keys.history(serial), None).await?;
    response
        .kvs()
        .first()
        .map(|kv| {
            let mut version: FleetVersion = json_of(kv)?;
            version.revision = kv.mod_revision();
            Ok(version)
        })
        .transpose()
}

/// Deletes the oldest versions beyond `keep` (best effort: a failure leaves a longer history).
pub async fn prune_history(
    client: &mut Client,
    keys: &Keys,
    keep: usize,
) -> Result<(), FleetError> {
    let options = GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_sort(SortTarget::Key, SortOrder::Descend);
    let response = client.get(keys.history_dir(), Some(options)).await?;
    let doomed: Vec<TxnOp> = response
        .kvs()
        .iter()
        .skip(keep.max(1))
        .map(|kv| TxnOp::delete(kv.key().to_vec(), None))
        .collect();
    for chunk in doomed.chunks(64) {
        client.txn(Txn::new().and_then(chunk.to_vec())).await?;
    }
    Ok(())
}

/// A `<prefix>/history/` entry.
pub fn version_json(
    serial: u64,
    source: &str,
    summary: &str,
    text: &str,
    emergency: bool,
) -> Result<String, FleetError> {
    serde_json::to_string(&FleetVersion {
        serial,
        time: rfc3339::format_utc(SystemTime::now()),
        source: source.to_string(),
        summary: summary.to_string(),
        text: text.to_string(),
        revision: 0,
        emergency,
    })
    .map_err(|e| FleetError::Other(format!("encoding a history entry: {e}")))
}

/// Writes `text` as the fleet's control state only if there is none yet (create-if-absent, so
/// two nodes starting together cannot both seed). Returns `Ok(written)` or `Err(existing)`.
///
/// The text gets a serial above `floor` (the seeding node's serial) and the history's newest.
pub async fn seed(
    client: &mut Client,
    keys: &Keys,
    text: &str,
    source: &str,
    floor: u64,
) -> Result<Result<Control, Control>, FleetError> {
    let floor = floor.max(newest_history_serial(client, keys).await?);
    let mut serial = serial_of(text);
    let mut text = text.to_string();
    if serial <= floor {
        serial = next_serial_above([floor]);
        text = set_serial(&text, serial).map_err(|e| FleetError::Other(e.to_string()))?;
    }
    let summary = summarize(
        &ControlFile::default(),
        &ControlFile::parse(&text, Path::new("control")).unwrap_or_default(),
    );
    let txn = Txn::new()
        .when([Compare::create_revision(
            keys.control(),
            CompareOp::Equal,
            0,
        )])
        .and_then([
            TxnOp::put(keys.control(), text.clone(), None),
            TxnOp::put(
                keys.history(serial),
                version_json(serial, source, &summary, &text, false)?,
                None,
            ),
        ])
        .or_else([TxnOp::get(keys.control(), None)]);
    let response = client.txn(txn).await?;
    if response.succeeded() {
        let revision = response.header().map_or(0, |h| h.revision());
        return Ok(Ok(Control {
            text,
            revision,
            serial,
        }));
    }
    match get_control(client, keys).await? {
        Some(existing) => Ok(Err(existing)),
        None => Err(FleetError::Other(
            "the control key vanished while seeding; try again".into(),
        )),
    }
}

/// Applies `edit` to the fleet's current control text and writes the result with a
/// compare-and-swap on the revision it read, after `taste` accepted it; on a conflict (another
/// writer got in first) re-reads and re-applies the edit, so concurrent edits all land. The
/// written text carries `serial` one above the newest in etcd. `emergency` is recorded in
/// the history entry (the staged rollout then skips its bake times).
pub async fn update(
    client: &mut Client,
    keys: &Keys,
    keep: usize,
    source: &str,
    emergency: bool,
    edit: impl Fn(&str) -> Result<String, crate::change::ChangeError>,
    taste: impl Fn(&str) -> Result<(), Vec<String>>,
) -> Result<Written, WriteError> {
    for attempt in 0..MAX_WRITE_ATTEMPTS {
        // Every earlier attempt lost the compare-and-swap.
        let conflicts = attempt;
        if attempt > 0 {
            // Spread retries of writers that collided, so they do not collide again.
            let jitter = (std::process::id() as u64 * 7919 + attempt as u64 * 104_729) % 40;
            tokio::time::sleep(Duration::from_millis(5 + jitter)).await;
        }
        let current = get_control(client, keys)
            .await?
            .ok_or_else(|| WriteError::NotSeeded(keys.prefix().to_string()))?;
        let edited = edit(&current.text).map_err(WriteError::Edit)?;
        if edited == current.text {
            return Ok(Written {
                revision: current.revision,
                serial: current.serial,
                summary: "no change".into(),
                text: current.text,
                conflicts,
                unchanged: true,
                ignored_floors: Vec::new(),
            });
        }
        // Above every serial in etcd and every serial a live node serves (a node whose local
        // history ran ahead numbers a version above it), so that after this write every node
        // serves, and `CH TXT serial.steerdns` shows, this very serial.
        let (floor, ignored_floors) = nodes_floor(client, keys).await;
        for ignored in &ignored_floors {
            tracing::warn!("fleet write: {ignored}, above {MAX_SERIAL_FLOOR}; ignored");
        }
        let serial = next_serial_above([
            current.serial,
            newest_history_serial(client, keys).await?,
            floor,
        ]);
        let text = set_serial(&edited, serial).map_err(|e| WriteError::Edit(e.into()))?;
        taste(&text).map_err(WriteError::Refused)?;
        let path = Path::new("control");
        let summary = match (
            ControlFile::parse(&current.text, path),
            ControlFile::parse(&text, path),
        ) {
            (Ok(before), Ok(after)) => summarize(&before, &after),
            _ => "control replaced".to_string(),
        };
        let version = version_json(serial, source, &summary, &text, emergency)?;
        let landed =
            match write_version(client, keys, current.revision, &text, serial, version).await {
                Ok(landed) => landed,
                Err(error) => {
                    return Err(WriteError::Unconfirmed {
                        serial,
                        text,
                        error,
                    })
                }
            };
        if let Some(revision) = landed {
            if let Err(e) = prune_history(client, keys, keep).await {
                tracing::warn!("fleet history not pruned: {e}");
            }
            return Ok(Written {
                revision,
                serial,
                text,
                summary,
                conflicts,
                unchanged: false,
                ignored_floors,
            });
        }
    }
    Err(WriteError::Contended(MAX_WRITE_ATTEMPTS))
}

/// Writes `text` as the control version (and its history entry `version`, same transaction)
/// only if the control key is still at `expected` (its `mod_revision`; 0: absent). Returns the
/// new revision, or `None` when another writer got in first (nothing written). An error means
/// the answer was lost: the write may have landed.
pub async fn write_version(
    client: &mut Client,
    keys: &Keys,
    expected: i64,
    text: &str,
    serial: u64,
    version: String,
) -> Result<Option<i64>, FleetError> {
    let compare = if expected == 0 {
        Compare::create_revision(keys.control(), CompareOp::Equal, 0)
    } else {
        Compare::mod_revision(keys.control(), CompareOp::Equal, expected)
    };
    let txn = Txn::new().when([compare]).and_then([
        TxnOp::put(keys.control(), text.to_string(), None),
        TxnOp::put(keys.history(serial), version, None),
    ]);
    let response = client.txn(txn).await?;
    Ok(response
        .succeeded()
        .then(|| response.header().map_or(0, |h| h.revision())))
}

/// The largest serial a node's report may raise the next write's serial to. Above it a
/// report is nonsense (a hand-written or broken record: `i64::MAX` would make every later
/// write fail, serials being TOML integers), and is ignored.
pub const MAX_SERIAL_FLOOR: u64 = (i64::MAX / 2) as u64;

/// The highest believable serial a live node serves (0 if none or unreadable), and the
/// reports ignored as out of range (`node: serial N`).
async fn nodes_floor(client: &mut Client, keys: &Keys) -> (u64, Vec<String>) {
    let Ok(nodes) = nodes(client, keys).await else {
        return (0, Vec::new());
    };
    serial_floor(&nodes.records)
}

/// `nodes_floor` of these records.
pub fn serial_floor(nodes: &[NodeRecord]) -> (u64, Vec<String>) {
    let (believed, ignored): (Vec<&NodeRecord>, Vec<&NodeRecord>) =
        nodes.iter().partition(|n| n.serial <= MAX_SERIAL_FLOOR);
    let floor = believed.iter().map(|n| n.serial).max().unwrap_or(0);
    let ignored = ignored
        .iter()
        .map(|n| format!("node {} reports serial {}", n.name, n.serial))
        .collect();
    (floor, ignored)
}

/// Live nodes (those whose lease holds), by name. A record that does not decode, names
/// another node than its key, or is not on a lease (written by hand: it would never expire)
/// is skipped and named in [`Listed::bad`].
pub async fn nodes(client: &mut Client, keys: &Keys) -> Result<Listed<NodeRecord>, FleetError> {
    let response = client
        .get(keys.nodes_dir(), Some(GetOptions::new().with_prefix()))
        .await?;
    let dir = keys.nodes_dir();
    Ok(Listed::decode(response.kvs(), |kv| node_of(&dir, kv)))
}

/// A registry entry, checked against its key and lease.
fn node_of(dir: &str, kv: &KeyValue) -> Result<NodeRecord, FleetError> {
    let key = String::from_utf8_lossy(kv.key()).into_owned();
    let bad = |message: String| FleetError::BadValue {
        key: key.clone(),
        message,
    };
    let record: NodeRecord = json_of(kv)?;
    let name = key.strip_prefix(dir).unwrap_or(&key);
    if record.name != name {
        return Err(bad(format!("names node {:?}, not {name:?}", record.name)));
    }
    if kv.lease() == 0 {
        return Err(bad(
            "not on a lease (a node registers on its lease; written by hand?)".into(),
        ));
    }
    Ok(record)
}

/// Every node that ever registered, by name.
pub async fn members(client: &mut Client, keys: &Keys) -> Result<Listed<Member>, FleetError> {
    let response = client
        .get(keys.members_dir(), Some(GetOptions::new().with_prefix()))
        .await?;
    Ok(Listed::decode(response.kvs(), json_of))
}

/// The fleet shield as etcd holds it (for `fleet status`).
#[derive(Debug, Clone, Default)]
pub struct ShieldKeys {
    /// Who holds the leader key, and on which lease (0: none — written by hand; a node takes
    /// such a key over).
    pub leader: Option<String>,
    pub leader_lease: i64,
    /// When the published state was computed (the leader's clock), if it decodes.
    pub state_at_ms: Option<u64>,
    /// The published state's revision.
    pub revision: Option<i64>,
    /// Every live node's report, by node name (unreadable ones left out, and named in `bad`).
    pub reports: BTreeMap<String, crate::shield::wire::NodeReport>,
    pub bad: Vec<BadRecord>,
}

pub async fn shield(client: &mut Client, keys: &Keys) -> Result<ShieldKeys, FleetError> {
    let leader = client.get(keys.shield_leader(), None).await?;
    let state = client.get(keys.shield_state(), None).await?;
    let options = GetOptions::new().with_prefix();
    let reports = client.get(keys.shield_nodes_dir(), Some(options)).await?;
    Ok(ShieldKeys {
        leader: leader
            .kvs()
            .first()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
        revision: state.kvs().first().map(|kv| kv.mod_revision()),
        leader_lease: leader.kvs().first().map_or(0, |kv| kv.lease()),
        state_at_ms: state.kvs().first().and_then(|kv| {
            crate::shield::wire::decode::<crate::shield::wire::PublishedState>(kv.value())
                .ok()
                .map(|p| p.at_ms)
        }),
        reports: BTreeMap::new(),
        bad: Vec::new(),
    }
    .with_reports(reports.kvs()))
}

impl ShieldKeys {
    fn with_reports(mut self, kvs: &[KeyValue]) -> ShieldKeys {
        let listed = Listed::decode(kvs, |kv| {
            crate::shield::wire::decode::<crate::shield::wire::NodeReport>(kv.value()).map_err(
                |e| FleetError::BadValue {
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    message: format!("not a shield report: {e}"),
                },
            )
        });
        self.reports = listed
            .records
            .into_iter()
            .map(|report| (report.node.clone(), report))
            .collect();
        self.bad = listed.bad;
        self
    }
}

/// The last change's convergence, if recorded.
pub async fn convergence(
    client: &mut Client,
    keys: &Keys,
) -> Result<Option<Convergence>, FleetError> {
    let response = client.get(keys.convergence(), None).await?;
    response.kvs().first().map(json_of).transpose()
}

pub async fn put_json<T: Serialize>(
    client: &mut Client,
    key: String,
    value: &T,
    lease: Option<i64>,
) -> Result<(), FleetError> {
    let json = serde_json::to_string(value)
        .map_err(|e| FleetError::Other(format!("encoding {key}: {e}")))?;
    let options = lease.map(|id| etcd_client::PutOptions::new().with_lease(id));
    client.put(key, json, options).await?;
    Ok(())
}

/// `user@host` of whoever runs this command, for history entries.
pub fn who() -> String {
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "?".to_string());
    format!("{user}@{}", super::host_name())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, serial: u64) -> NodeRecord {
        NodeRecord {
            name: name.to_string(),
            serial,
            ..NodeRecord::default()
        }
    }

    #[test]
    fn an_out_of_range_node_serial_is_ignored_and_named() {
        let nodes = [
            node("ns1", 12),
            node("huge", i64::MAX as u64),
            node("ns2", 9),
        ];
        let (floor, ignored) = serial_floor(&nodes);
        assert_eq!(floor, 12);
        assert_eq!(
            ignored,
            vec![format!("node huge reports serial {}", i64::MAX)]
        );
        // The largest believed floor still leaves room for the next write's serial.
        let (floor, ignored) = serial_floor(&[node("ns1", MAX_SERIAL_FLOOR)]);
        assert!(ignored.is_empty());
        assert!(set_serial("serial = 1\n", floor + 1).is_ok());
    }
}
