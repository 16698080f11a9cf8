//! A fleet's staged rollout in etcd: the [`RolloutRecord`] under `<prefix>/rollout/state` (the
//! pure [`Rollout`] plus the texts of the candidate and of the last known good, so that a node
//! can serve either without another read), reading it, writing it by compare-and-swap, the
//! nodes' reports from the registry, and which version a node may serve ([`RolloutRecord::assignment`]).
//!
//! The decisions are the pure core's (`crate::rollout`); the coordinator (`super::coordinator`)
//! drives it, the CLI resumes and aborts it. Versions are identified by their etcd control
//! revision (the `mod_revision` of `<prefix>/control` when they were written).

use std::collections::BTreeMap;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use super::store::{self, Control, NodeRecord};
use super::{FleetError, Keys};
use crate::rollout::{NodeReport, Phase, Plan, Revision, Rollout};

/// `<prefix>/rollout/state`: the rollout in progress (or the last one) and the texts it serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutRecord {
    pub rollout: Rollout,
    /// The candidate's control text and serial (its revision is `rollout.candidate`).
    pub candidate_text: String,
    pub candidate_serial: u64,
    /// The last known good's control text and serial (its revision is `rollout.lkg`).
    pub lkg_text: String,
    pub lkg_serial: u64,
}

/// A version a node is to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub text: String,
    pub revision: i64,
    pub serial: u64,
    /// The fleet's newest control version is not released to this node yet (it serves the
    /// last known good meanwhile).
    pub held: bool,
}

fn revision_of(control: &Control) -> Revision {
    control.revision.max(0) as Revision
}

impl RolloutRecord {
    /// The fleet's first rollout state: the current control version is the last known good.
    pub fn settled(control: &Control, now_ms: u64) -> RolloutRecord {
        RolloutRecord {
            rollout: Rollout::settled(revision_of(control), now_ms),
            candidate_text: control.text.clone(),
            candidate_serial: control.serial,
            lkg_text: control.text.clone(),
            lkg_serial: control.serial,
        }
    }

    /// A rollout of `control` from this record's last known good.
    pub fn begin(
        &self,
        control: &Control,
        summary: &str,
        emergency: bool,
        plan: &Plan,
        reports: &BTreeMap<String, NodeReport>,
        now_ms: u64,
    ) -> RolloutRecord {
        let (lkg_text, lkg_revision, lkg_serial) = self.last_known_good();
        RolloutRecord {
            rollout: Rollout::begin(
                revision_of(control),
                lkg_revision as Revision,
                summary,
                emergency,
                plan,
                reports,
                now_ms,
            ),
            candidate_text: control.text.clone(),
            candidate_serial: control.serial,
            lkg_text,
            lkg_serial,
        }
    }

    /// The last known good as this record stands: the candidate once it completed.
    pub fn last_known_good(&self) -> (String, i64, u64) {
        match self.rollout.phase {
            Phase::Completed { .. } => (
                self.candidate_text.clone(),
                self.rollout.candidate as i64,
                self.candidate_serial,
            ),
            _ => (
                self.lkg_text.clone(),
                self.rollout.lkg as i64,
                self.lkg_serial,
            ),
        }
    }

    /// Whether this record is about `control` (else a newer version waits for its rollout).
    pub fn is_about(&self, control: &Control) -> bool {
        self.rollout.candidate == revision_of(control)
    }

    /// What `node` may serve while the fleet's newest control version is `control`: the
    /// candidate if the rollout released it to the node's wave, else the last known good. A
    /// version the coordinator has not begun rolling out yet is held back everywhere.
    pub fn assignment(&self, node: &str, control: &Control) -> Assignment {
        if self.is_about(control) && self.rollout.allowed(node) == self.rollout.candidate {
            return Assignment {
                text: self.candidate_text.clone(),
                revision: self.rollout.candidate as i64,
                serial: self.candidate_serial,
                held: false,
            };
        }
        let (text, revision, serial) = if self.is_about(control) {
            (
                self.lkg_text.clone(),
                self.rollout.lkg as i64,
                self.lkg_serial,
            )
        } else {
            self.last_known_good()
        };
        Assignment {
            held: revision != control.revision,
            text,
            revision,
            serial,
        }
    }
}

/// A rollout state as etcd holds it. Missing and unreadable are both *hold*: every node keeps
/// what it serves (never the newest version unstaged) until the coordinator re-creates a
/// missing state ([`recovered`]) or an operator resets an unreadable one.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored<T> {
    Missing,
    /// Does not decode (written by hand, truncated, another version's format): its
    /// `mod_revision` (for the compare-and-swap that replaces it) and why.
    Unreadable {
        revision: i64,
        reason: String,
    },
    /// The state and its `mod_revision`.
    Found(T, i64),
}

impl<T> Stored<T> {
    /// The state, if it decodes.
    pub fn found(self) -> Option<(T, i64)> {
        match self {
            Stored::Found(record, revision) => Some((record, revision)),
            _ => None,
        }
    }

    /// The `mod_revision` a compare-and-swap replacing it expects (0: there is none).
    pub fn revision(&self) -> i64 {
        match self {
            Stored::Missing => 0,
            Stored::Unreadable { revision, .. } | Stored::Found(_, revision) => *revision,
        }
    }
}

/// The rollout state, however it stands.
pub async fn get(client: &mut Client, keys: &Keys) -> Result<Stored<RolloutRecord>, FleetError> {
    get_state(client, &keys.rollout()).await
}

/// A rollout state (control's or bundles') at `key`, however it stands.
pub async fn get_state<T: serde::de::DeserializeOwned>(
    client: &mut Client,
    key: &str,
) -> Result<Stored<T>, FleetError> {
    let response = client.get(key, None).await?;
    let Some(kv) = response.kvs().first() else {
        return Ok(Stored::Missing);
    };
    Ok(match decode(key, kv.value()) {
        Ok(record) => Stored::Found(record, kv.mod_revision()),
        Err(e) => Stored::Unreadable {
            revision: kv.mod_revision(),
            reason: e.to_string(),
        },
    })
}

/// The state to put in place of a missing or unreadable one: settled at the last version
/// every node with `[fleet.rollout]` accepted (the oldest revision their own reports say they
/// serve), never the newest unless every node serves it — so the newest is then rolled out
/// wave by wave again. A fleet where no node serves a fleet version yet (a new fleet) settles
/// at the newest. Returns the record and a line for the log, or why it cannot (the version is
/// no longer in the history: hold).
pub fn recovered(
    control: &Control,
    history: &[store::FleetVersion],
    reports: &BTreeMap<String, NodeReport>,
    now_ms: u64,
) -> Result<(RolloutRecord, String), String> {
    let Some(oldest) = reports.values().filter_map(|r| r.serving).min() else {
        let line = format!(
            "rollout state created: no node serves a fleet version yet; revision {} (serial {}) is the last known good",
            control.revision, control.serial
        );
        return Ok((RolloutRecord::settled(control, now_ms), line));
    };
    let everywhere = if oldest == revision_of(control) {
        control.clone()
    } else {
        let version = history
            .iter()
            .find(|v| v.revision.max(0) as Revision == oldest)
            .ok_or_else(|| {
                format!(
                    "revision {oldest}, the last version every node serves, is no longer in the history; holding (write a version with `weight set` or `control rollback`)"
                )
            })?;
        Control {
            text: version.text.clone(),
            revision: version.revision,
            serial: version.serial,
        }
    };
    let line = format!(
        "rollout state re-created: revision {} (serial {}), the last version every node serves, is the last known good",
        everywhere.revision, everywhere.serial
    );
    Ok((RolloutRecord::settled(&everywhere, now_ms), line))
}

/// Decodes a rollout state (control's or bundles') read or watched at `key`.
pub fn decode<T: serde::de::DeserializeOwned>(key: &str, value: &[u8]) -> Result<T, FleetError> {
    serde_json::from_slice(value).map_err(|e| FleetError::BadValue {
        key: key.to_string(),
        message: format!("not a rollout state: {e}"),
    })
}

fn encode<T: Serialize>(record: &T) -> Result<String, FleetError> {
    serde_json::to_string(record)
        .map_err(|e| FleetError::Other(format!("encoding the rollout state: {e}")))
}

/// Writes `record` if the state is still at `expected` (`0`: if there is none yet). Returns
/// whether it was written (false: someone else wrote first; read again).
pub async fn put(
    client: &mut Client,
    keys: &Keys,
    record: &RolloutRecord,
    expected: i64,
) -> Result<bool, FleetError> {
    put_state(client, &keys.rollout(), record, expected).await
}

/// [`put`] for a rollout state (control's or bundles') at `key`.
pub async fn put_state<T: Serialize>(
    client: &mut Client,
    key: &str,
    record: &T,
    expected: i64,
) -> Result<bool, FleetError> {
    let compare = if expected == 0 {
        Compare::create_revision(key, CompareOp::Equal, 0)
    } else {
        Compare::mod_revision(key, CompareOp::Equal, expected)
    };
    let txn = Txn::new()
        .when([compare])
        .and_then([TxnOp::put(key, encode(record)?, None)]);
    Ok(client.txn(txn).await?.succeeded())
}

/// Puts the fleet's control state back to the last known good of an aborted rollout: the
/// aborted `record` and the last known good's text as a new control version (serial above
/// every other), in one transaction that holds only if neither key moved since they were read
/// (`None` then: read again). The coordinator settles that version at once: its content is
/// what every node serves (see [`same_content`]).
pub async fn write_back(
    client: &mut Client,
    keys: &Keys,
    record: &RolloutRecord,
    state_revision: i64,
    source: &str,
) -> Result<Option<Control>, FleetError> {
    let Some(current) = store::get_control(client, keys).await? else {
        return Err(FleetError::Other("the fleet has no control state".into()));
    };
    let (lkg_text, lkg_revision, _) = record.last_known_good();
    let serial = crate::control::store::next_serial_above([
        current.serial,
        store::newest_history_serial(client, keys).await?,
        record.candidate_serial,
    ]);
    let text = crate::control::edit::set_serial(&lkg_text, serial)
        .map_err(|e| FleetError::Other(e.to_string()))?;
    let summary = format!(
        "rollout of revision {} aborted: back to revision {lkg_revision}",
        record.rollout.candidate
    );
    let history = store::version_json(serial, source, &summary, &text, false)?;
    let txn = Txn::new()
        .when([
            Compare::mod_revision(keys.control(), CompareOp::Equal, current.revision),
            Compare::mod_revision(keys.rollout(), CompareOp::Equal, state_revision),
        ])
        .and_then([
            TxnOp::put(keys.control(), text.clone(), None),
            TxnOp::put(keys.history(serial), history, None),
            TxnOp::put(keys.rollout(), encode(record)?, None),
        ]);
    let response = client.txn(txn).await?;
    if !response.succeeded() {
        return Ok(None);
    }
    Ok(Some(Control {
        text,
        revision: response.header().map_or(0, |h| h.revision()),
        serial,
    }))
}

/// Whether two control texts differ in their serial at most (a version written back, or a
/// rollback to what every node serves, needs no staged rollout).
pub fn same_content(a: &str, b: &str) -> bool {
    let strip = |text: &str| crate::control::edit::set_serial(text, 1).ok();
    a == b || (strip(a).is_some() && strip(a) == strip(b))
}

/// Which live nodes' own reports do not show them serving `revision` (name and what they
/// serve): status claims convergence only when this is empty.
pub fn not_serving(
    reports: &BTreeMap<String, NodeReport>,
    revision: Revision,
) -> Vec<(String, Option<Revision>)> {
    reports
        .iter()
        .filter(|(_, r)| r.serving != Some(revision))
        .map(|(name, r)| (name.clone(), r.serving))
        .collect()
}

/// The reports of the nodes that take part in rollouts (those with `[fleet.rollout]`), by name.
pub fn reports(nodes: &[NodeRecord]) -> BTreeMap<String, NodeReport> {
    nodes
        .iter()
        .filter_map(|n| n.rollout.clone().map(|r| (n.name.clone(), r)))
        .collect()
}

/// Milliseconds since the Unix epoch (the rollout's clock: the coordinator's and the CLI's).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn control(revision: i64, serial: u64) -> Control {
        Control {
            text: format!("serial = {serial}\n"),
            revision,
            serial,
        }
    }

    fn version(revision: i64, serial: u64) -> store::FleetVersion {
        store::FleetVersion {
            serial,
            time: String::new(),
            source: String::new(),
            summary: String::new(),
            text: format!("serial = {serial}\n"),
            revision,
            emergency: false,
        }
    }

    fn serving(revisions: &[Option<u64>]) -> BTreeMap<String, NodeReport> {
        revisions
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let report = NodeReport {
                    serving: *r,
                    ..NodeReport::default()
                };
                (format!("ns{}", i + 1), report)
            })
            .collect()
    }

    #[test]
    fn a_recovered_state_settles_on_what_every_node_serves_never_the_newest() {
        let newest = control(9, 3);
        let history = [version(5, 1), version(7, 2), version(9, 3)];
        // The canary refused 9, another lags at 5: the last version every node serves is 5.
        let (record, line) = recovered(&newest, &history, &serving(&[Some(7), Some(5), None]), 0)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((record.rollout.lkg, record.lkg_serial), (5, 1));
        assert!(!record.is_about(&newest), "{line}");
        assert_eq!(record.assignment("ns1", &newest).revision, 5);
        // Every node serves the newest: settled there.
        let (record, _) = recovered(&newest, &history, &serving(&[Some(9), Some(9)]), 0)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(record.is_about(&newest));
        // A new fleet (nobody serves a fleet version yet) settles at the newest.
        let (record, _) =
            recovered(&newest, &history, &serving(&[None]), 0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(record.rollout.lkg, 9);
        // The version is no longer in the history: hold, with the reason.
        let error = recovered(&newest, &history[1..], &serving(&[Some(5)]), 0)
            .err()
            .unwrap_or_else(|| panic!("recovered without the version"));
        assert!(error.contains("revision 5"), "{error}");
    }

    #[test]
    fn same_content_ignores_the_serial_only() {
        let lkg = "serial = 4\n[profiles.critical.endpoints]\nfrontdoor = { weight = 100 }\n";
        let back = "serial = 9\n[profiles.critical.endpoints]\nfrontdoor = { weight = 100 }\n";
        let other = "serial = 9\n[profiles.critical.endpoints]\nfrontdoor = { weight = 0 }\n";
        assert!(same_content(lkg, back));
        assert!(!same_content(lkg, other));
        assert!(!same_content(lkg, &format!("{lkg}# MARK\n")));
    }

    #[test]
    fn assignments_follow_the_waves_and_hold_unbegun_versions() {
        let plan = Plan {
            waves: vec![vec!["ns1".into()], vec!["ns2".into()]],
            ..Plan::default()
        };
        let reports: BTreeMap<String, NodeReport> = ["ns1", "ns2"]
            .iter()
            .map(|n| (n.to_string(), NodeReport::default()))
            .collect();
        let first = RolloutRecord::settled(&control(5, 1), 0);
        let next = control(9, 2);
        // Written, not begun yet: everyone holds at the last known good.
        let held = first.assignment("ns1", &next);
        assert_eq!((held.revision, held.serial, held.held), (5, 1, true));
        let record = first.begin(&next, "x", false, &plan, &reports, 0);
        let canary = record.assignment("ns1", &next);
        assert_eq!((canary.revision, canary.held), (9, false));
        assert_eq!(canary.text, next.text);
        let waiting = record.assignment("ns2", &next);
        assert_eq!((waiting.revision, waiting.held), (5, true));
        // Completed: the candidate is the last known good for the next change.
        let mut done = record.clone();
        done.rollout.phase = Phase::Completed { at_ms: 1 };
        let after = done.begin(&control(12, 3), "y", false, &plan, &reports, 2);
        assert_eq!((after.rollout.lkg, after.lkg_serial), (9, 2));
        assert_eq!(after.lkg_text, next.text);
    }
}
