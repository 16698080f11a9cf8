//! Break-glass without etcd: a control version an operator sends straight to every node's
//! admin endpoint (`steerdns weight set … --direct`), served by each node as a **local
//! override** that wins over the fleet state until etcd has it.
//!
//! Owns what a node keeps for that: the override itself (persisted beside the control file,
//! so a restart during the outage still knows the version it serves is an override), the
//! node registry it last saw in etcd (so the CLI on any node finds every other one), the
//! screening and serving of an override request (safety rules, then the reload path's taster),
//! and the reconciliation when etcd is back.
//!
//! # When etcd returns
//!
//! Every node that holds an override compares it with the fleet's control version:
//! - etcd holds the override's very text: it is resolved (another node wrote it back, or the
//!   operator wrote the same version through etcd) and dropped; the node serves etcd's copy.
//! - etcd holds nothing newer than the version the override replaced (`base_revision`, the
//!   newest revision any node served when the CLI sent it): the node writes the override as a
//!   normal version, by compare-and-swap on the revision it read. The CLI gave every node the
//!   same text with the same serial, so when several nodes race, one write wins, the others'
//!   compare fails, and they find the winner's text: one new version, not three.
//! - etcd holds a newer, different version (written meanwhile by someone who could reach
//!   etcd): the override is **not** written over it and **not** dropped. The node keeps
//!   serving it, marks it `conflict` (status, metrics, `fleet status`, logs), and waits for
//!   `steerdns control override drop`: an operator decides which of the two stands.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use super::origin::FleetOrigin;
pub use super::status::OverrideView;
use super::store::{self, Control};
use super::{FleetError, Keys};
use crate::change::{screen, ChangeError, OverrideRequest};
use crate::config::fleet::FleetConfig;
use crate::config::Config;
use crate::control::{summarize, ControlFile};
use crate::reload::{Reloader, Trigger};
use crate::safety::Violation;

/// A control version this node serves although etcd does not hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalOverride {
    /// The whole control text (with its serial), the same on every node it was sent to.
    pub text: String,
    pub serial: u64,
    /// The newest fleet revision a reached node served when it was sent: a version in etcd
    /// above it was written meanwhile.
    pub base_revision: i64,
    /// Who sent it (`user@host`) and what it does (`weight set critical`).
    pub by: String,
    pub what: String,
    /// When this node began serving it (RFC 3339).
    pub at: String,
    /// The text it replaced here (served again by `control override drop` when etcd has
    /// nothing for this node).
    pub replaced: String,
    /// A newer, different fleet revision found in etcd: not written over, waiting for
    /// `control override drop`.
    #[serde(default)]
    pub conflict: Option<i64>,
    /// The fleet revision found holding this very text: the override is dropped as soon as
    /// the node serves it again as etcd's (so status and `CH TXT` change together).
    #[serde(default)]
    pub resolved: Option<i64>,
}

impl LocalOverride {
    pub fn view(&self) -> OverrideView {
        OverrideView {
            serial: self.serial,
            base_revision: self.base_revision,
            by: self.by.clone(),
            what: self.what.clone(),
            at: self.at.clone(),
            conflict: self.conflict,
        }
    }
}

/// A node of the fleet as the registry named it: where its admin endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
pub struct KnownNode {
    pub name: String,
    pub admin: String,
}

/// Where a node keeps its override and the registry it last saw: beside the control file
/// (its cache of the fleet's version), so they travel with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectPaths {
    pub override_file: PathBuf,
    pub nodes_file: PathBuf,
}

pub fn paths(config: &Config) -> Option<DirectPaths> {
    let control = config.control.file.as_ref()?;
    let with = |suffix: &str| {
        let mut name = control.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    Some(DirectPaths {
        override_file: with(".override.json"),
        nodes_file: with(".fleet-nodes.json"),
    })
}

/// What a fleet version means for the override a node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// etcd holds the override's text: drop the override, serve etcd's copy.
    Resolved,
    /// etcd holds nothing newer than what the override replaced: write it back.
    WriteBack,
    /// etcd holds a newer, different version: keep serving, flag, wait for the operator.
    Conflict,
}

/// Judges fleet version (`text`, `revision`) against `held`.
pub fn judge(held: &LocalOverride, text: &str, revision: i64) -> Verdict {
    if text == held.text || held.resolved.is_some() {
        Verdict::Resolved
    } else if revision <= held.base_revision && held.conflict.is_none() {
        Verdict::WriteBack
    } else {
        Verdict::Conflict
    }
}

/// Reads a JSON file written by [`save_json`]; a missing or unreadable one is `None` (said
/// in the log: the node then serves without it).
pub fn load_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let text = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT).ok()?;
    match serde_json::from_str(&text) {
        Ok(value) => Some(value),
        Err(e) => {
            tracing::error!("{}: not the expected JSON, ignored: {e}", path.display());
            None
        }
    }
}

/// Replaces `path` with `value` as JSON (atomically), or removes it for `None`.
pub fn save_json<T: Serialize>(path: &Path, value: Option<&T>) {
    let outcome = match value {
        Some(value) => serde_json::to_vec_pretty(value)
            .map_err(|e| e.to_string())
            .and_then(|bytes| crate::files::replace_file(path, &bytes).map_err(|e| e.to_string())),
        None => match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
            _ => Ok(()),
        },
    };
    if let Err(e) = outcome {
        tracing::error!("{}: not written: {e}", path.display());
    }
}

/// At connection and after every change this node serves: if it holds an override that etcd
/// has nothing newer than, writes it as the fleet's next version (compare-and-swap on the
/// revision read; losing to another node's identical write is fine).
pub async fn reconcile(
    config: &FleetConfig,
    client: &mut Client,
    keys: &Keys,
    origin: &FleetOrigin,
    node: &str,
) -> Result<(), FleetError> {
    let Some(held) = origin.local_override() else {
        return Ok(());
    };
    let Some(control) = super::within(config, "reading the control state", async {
        store::get_control(client, keys).await
    })
    .await?
    else {
        return Ok(());
    };
    // Judged here without dropping a resolved override: that happens when the node serves
    // etcd's copy (offered by the watch, or released by a staged rollout).
    match judge(&held, &control.text, control.revision) {
        Verdict::WriteBack => {}
        Verdict::Conflict => {
            origin.mark_conflict(control.revision);
            return Ok(());
        }
        Verdict::Resolved => return Ok(()),
    }
    let newest = store::newest_history_serial(client, keys).await?;
    if held.serial <= newest {
        // A version numbered at or above the override's is recorded although the control
        // key is older: never write over it unasked.
        origin.mark_conflict(control.revision);
        return Ok(());
    }
    write_back(config, client, keys, node, &held, &control).await
}

async fn write_back(
    config: &FleetConfig,
    client: &mut Client,
    keys: &Keys,
    node: &str,
    held: &LocalOverride,
    control: &Control,
) -> Result<(), FleetError> {
    let path = Path::new("control");
    let summary = match (
        ControlFile::parse(&control.text, path),
        ControlFile::parse(&held.text, path),
    ) {
        (Ok(before), Ok(after)) => summarize(&before, &after),
        _ => "control replaced".to_string(),
    };
    let source = format!(
        "{} by {} --direct (written back by node {node})",
        held.what, held.by
    );
    let txn = Txn::new()
        .when([Compare::mod_revision(
            keys.control(),
            CompareOp::Equal,
            control.revision,
        )])
        .and_then([
            TxnOp::put(keys.control(), held.text.clone(), None),
            TxnOp::put(
                keys.history(held.serial),
                store::version_json(held.serial, &source, &summary, &held.text, false)?,
                None,
            ),
        ]);
    let response = super::within(config, "writing the local override back", async {
        client.txn(txn).await
    })
    .await?;
    if !response.succeeded() {
        // Another writer (most likely another node with the same override) got in first:
        // the watch brings its version, judged like any other.
        return Ok(());
    }
    let revision = response.header().map_or(0, |h| h.revision());
    tracing::info!(
        "fleet: local override serial {} written back to etcd as revision {revision}",
        held.serial
    );
    let keep = config.history_keep.unwrap_or(20);
    if let Err(e) = store::prune_history(client, keys, keep).await {
        tracing::warn!("fleet history not pruned: {e}");
    }
    // The watch brings this very version: judged resolved, served again as etcd's.
    Ok(())
}

/// Refreshes the registry this node keeps on disk: the live nodes' admin endpoints, plus
/// those it knew that are still members (a node partitioned from etcd is still a node).
pub async fn refresh_known(
    config: &FleetConfig,
    client: &mut Client,
    keys: &Keys,
    origin: &FleetOrigin,
) -> Result<(), FleetError> {
    let (live, members) = super::within(config, "reading the node registry", async {
        let live = store::nodes(client, keys).await?.records;
        let members = store::members(client, keys).await?.records;
        Ok::<_, FleetError>((live, members))
    })
    .await?;
    let mut known: Vec<KnownNode> = live
        .iter()
        .filter(|n| n.admin != "off")
        .map(|n| KnownNode {
            name: n.name.clone(),
            admin: n.admin.clone(),
        })
        .collect();
    for old in origin.known() {
        let member = members.iter().any(|m| m.name == old.name);
        if member && !known.iter().any(|k| k.name == old.name) {
            known.push(old);
        }
    }
    known.sort();
    origin.set_known(known);
    Ok(())
}

/// The body of `POST /v1/fleet/override`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectRequest {
    /// The whole control text, with the serial the CLI chose (the same for every node).
    pub text: String,
    pub base_revision: i64,
    pub by: String,
    pub what: String,
    #[serde(default)]
    pub overrides: Vec<OverrideRequest>,
}

/// Why a node did not serve an override.
#[derive(Debug, thiserror::Error)]
pub enum DirectRefusal {
    #[error("refused by safety rules: {}", .0.iter().filter(|v| !v.overridden).map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Safety(Vec<Violation>),
    #[error("refused by the taster: {}", .0.join("; "))]
    Invalid(Vec<String>),
    #[error("{0}")]
    Bad(String),
}

/// What `GET /v1/fleet/direct` returns: what the CLI needs to build and send an override.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeDirectView {
    pub node: String,
    pub serial: u64,
    /// The fleet revision served (the override's base when one is served).
    pub revision: i64,
    pub connected: bool,
    /// The control text served.
    pub text: String,
    pub local_override: Option<OverrideView>,
    /// The registry this node last saw in etcd.
    pub known: Vec<KnownNode>,
}

pub fn view(reloader: &Reloader, origin: &FleetOrigin) -> NodeDirectView {
    let link = origin.link();
    NodeDirectView {
        node: link.node.clone(),
        serial: reloader.status().serial,
        revision: link.revision_served,
        connected: link.connected,
        text: origin.served_text().unwrap_or_default(),
        local_override: origin.local_override().map(|o| o.view()),
        known: origin.known(),
    }
}

/// Screens `request` with this node's safety rules, then serves it as the local override
/// through the reload path (the taster first); nothing changes on a refusal.
pub fn serve(
    reloader: &Reloader,
    origin: &FleetOrigin,
    request: DirectRequest,
) -> Result<u64, DirectRefusal> {
    let config = reloader
        .source()
        .read_config()
        .map_err(|e| DirectRefusal::Bad(e.to_string()))?;
    crate::safety::tally::configure(&config.safety);
    let served = reloader.status().serial;
    let serial = store::serial_of(&request.text);
    if serial <= served {
        return Err(DirectRefusal::Bad(format!(
            "serial {serial} is not above the serial this node serves ({served})"
        )));
    }
    let before = origin.served_text().unwrap_or_default();
    let recent = crate::change::history(&config)
        .map(|h| crate::safety::recent_from_history(&h, crate::safety::RECENT_VERSIONS))
        .unwrap_or_default();
    // Screened, not rewritten: the text must stay the one every node got (the CLI recorded
    // the overrides in it), so that etcd ends up with one version.
    match screen(
        &config,
        &before,
        &request.text,
        &recent,
        &request.overrides,
        &request.by,
    ) {
        Ok(_) => {}
        Err(ChangeError::Refused(violations)) => {
            crate::safety::tally::count_refusal(
                violations
                    .iter()
                    .filter(|v| !v.overridden)
                    .map(|v| v.rule.as_str()),
            );
            return Err(DirectRefusal::Safety(violations));
        }
        Err(e) => return Err(DirectRefusal::Bad(e.to_string())),
    }
    let previous = origin.local_override();
    let held = LocalOverride {
        serial,
        base_revision: request.base_revision,
        by: request.by,
        what: request.what,
        at: crate::rfc3339::format_utc(SystemTime::now()),
        replaced: previous.as_ref().map_or(before, |p| p.replaced.clone()),
        conflict: None,
        resolved: None,
        text: request.text,
    };
    origin.set_override(Some(held));
    match reloader.reload(Trigger::Fleet) {
        Ok(accepted) => {
            tracing::warn!(
                "fleet: serving a LOCAL OVERRIDE (serial {}) sent with --direct; etcd gets it when it is back",
                accepted.serial
            );
            Ok(accepted.serial)
        }
        Err(reasons) => {
            origin.set_override(previous);
            Err(DirectRefusal::Invalid(reasons))
        }
    }
}

/// `control override drop`: forgets the override and serves the fleet's version again (the
/// newest from etcd, else the one the override replaced). Returns the serial now served, or
/// `None` when there was no override.
pub fn drop_override(reloader: &Reloader, origin: &FleetOrigin) -> Result<Option<u64>, String> {
    let Some(held) = origin.local_override() else {
        return Ok(None);
    };
    origin.drop_override(&held);
    match reloader.reload(Trigger::Fleet) {
        Ok(accepted) => {
            tracing::warn!(
                "fleet: local override serial {} dropped; serving serial {}",
                held.serial,
                accepted.serial
            );
            Ok(Some(accepted.serial))
        }
        Err(reasons) => Err(reasons.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(base: i64) -> LocalOverride {
        LocalOverride {
            text: "serial = 9\n".into(),
            serial: 9,
            base_revision: base,
            by: "op@host".into(),
            what: "weight set critical".into(),
            at: "2026-01-01T00:00:00Z".into(),
            replaced: "serial = 8\n".into(),
            conflict: None,
            resolved: None,
        }
    }

    #[test]
    fn etcd_holding_the_override_resolves_it_whatever_the_revision() {
        assert_eq!(judge(&held(10), "serial = 9\n", 11), Verdict::Resolved);
        assert_eq!(judge(&held(10), "serial = 9\n", 3), Verdict::Resolved);
    }

    #[test]
    fn nothing_newer_in_etcd_is_written_back_a_newer_version_is_a_conflict() {
        assert_eq!(judge(&held(10), "serial = 8\n", 10), Verdict::WriteBack);
        assert_eq!(judge(&held(10), "serial = 7\n", 9), Verdict::WriteBack);
        assert_eq!(judge(&held(10), "serial = 12\n", 11), Verdict::Conflict);
        let flagged = LocalOverride {
            conflict: Some(11),
            ..held(10)
        };
        // Once flagged, never written back by itself (the operator decides).
        assert_eq!(judge(&flagged, "serial = 8\n", 10), Verdict::Conflict);
    }

    #[test]
    fn files_sit_beside_the_control_file() {
        let mut config = Config::default();
        config.control.file = Some(PathBuf::from("/etc/steerdns/control.toml"));
        let p = paths(&config).expect("paths");
        assert_eq!(
            p.override_file,
            PathBuf::from("/etc/steerdns/control.toml.override.json")
        );
        assert_eq!(
            p.nodes_file,
            PathBuf::from("/etc/steerdns/control.toml.fleet-nodes.json")
        );
    }
}
