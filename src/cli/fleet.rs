//! The operator commands in fleet mode (a config with `[fleet]`): they read and write the
//! fleet's control state in etcd instead of the local control file. Every write is tasted with
//! the server's loader, then written by compare-and-swap on the revision it read (redone on a
//! conflict, so concurrent edits all land); then the command waits until every live node
//! serves it and says how long that took, or which nodes did not.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use etcd_client::Client;

use steerdns::change::ChangeError;
use steerdns::config::fleet::FleetConfig;
use steerdns::config::Config;
use steerdns::fleet::store::{self, Convergence, NodeRecord, WriteError};
use steerdns::fleet::{client, FleetError, Keys};
use steerdns::rfc3339;
use steerdns::snapshot::load::{load_with, ControlSource};

pub(super) fn fleet_of(config: &Config) -> Result<&FleetConfig> {
    config
        .fleet
        .as_ref()
        .context("no [fleet] section in the config")
}

pub(super) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// A connection whose first request is bounded: an unreachable etcd is a clear error.
pub(super) async fn connect(fleet: &FleetConfig) -> Result<(Client, Keys)> {
    let mut client = client::connect(fleet)
        .await
        .map_err(|e| failed(fleet, "connecting to etcd", &e))?;
    let keys = Keys::new(&fleet.prefix);
    let limit = steerdns::fleet::request_timeout(fleet);
    match tokio::time::timeout(limit, client.status()).await {
        Ok(Ok(_)) => Ok((client, keys)),
        Ok(Err(e)) => Err(down(fleet, &e)),
        Err(_) => Err(down(fleet, &format!("no answer within {limit:?}"))),
    }
}

pub(super) fn down(fleet: &FleetConfig, e: &dyn std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot reach etcd at {} ({e}); nothing was changed. The nodes keep serving what they have \
         and pick up changes when etcd is back.",
        fleet.etcd.join(",")
    )
}

/// A step of a fleet command that failed before anything was written: says which step, and
/// what failed — etcd unreachable, a bad value in etcd (naming its key), or etcd's error.
pub(super) fn failed(fleet: &FleetConfig, step: &str, e: &FleetError) -> anyhow::Error {
    match e {
        FleetError::Unreachable { .. } => down(fleet, e),
        FleetError::BadValue { key, message } => anyhow::anyhow!(
            "{step}: etcd key {key} holds a bad value: {message}; nothing was changed"
        ),
        other => anyhow::anyhow!(
            "{step} failed (etcd at {}: {other}); nothing was changed",
            fleet.etcd.join(",")
        ),
    }
}

/// A step that failed after a write landed: the write stands (at `revision`), says so.
pub(super) fn after_write(step: &str, landed: &str, e: &dyn std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!(
        "{landed}; then {step} failed ({e}). The change stands: follow it with `steerdns fleet status` or `steerdns rollout status`"
    )
}

/// A write whose answer from etcd was lost: it may or may not have landed.
pub(super) fn unconfirmed(what: &str, e: &dyn std::fmt::Display, check: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what}: etcd did not confirm the write ({e}); it may or may not have landed: check with `{check}`"
    )
}

/// Tastes `text` as the control file with the loader the server uses.
fn taste(config: &Config, text: &str) -> Result<(), Vec<String>> {
    let path = config.control.file.clone().unwrap_or_default();
    load_with(config, ControlSource::Text { path: &path, text })
        .map(|_| ())
        .map_err(|problems| problems.iter().map(ToString::to_string).collect())
}

/// Applies `edit` to the fleet's control state (CAS, retried on conflict), then waits for the
/// live nodes to serve it — or, when the fleet stages its rollouts, follows the rollout
/// (`emergency`: without bake times) until it completes or halts.
pub fn edit(
    config: &Config,
    what: &str,
    emergency: bool,
    edit: impl Fn(&str) -> Result<String, ChangeError>,
) -> Result<ExitCode> {
    let fleet = fleet_of(config)?;
    runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        let keep = fleet.history_keep.unwrap_or(config.control.history_keep);
        let source = format!("{what} by {}", store::who());
        let written =
            match store::update(&mut client, &keys, keep, &source, emergency, edit, |text| {
                taste(config, text)
            })
            .await
            {
                Ok(written) => written,
                Err(WriteError::Refused(problems)) => {
                    println!("refused, nothing written ({what}):");
                    for p in &problems {
                        println!("  {p}");
                    }
                    return Ok(ExitCode::FAILURE);
                }
                Err(WriteError::Fleet(e)) => return Err(failed(fleet, what, &e)),
                Err(WriteError::Unconfirmed {
                    serial,
                    text,
                    error,
                }) => return Err(confirm(fleet, what, serial, &text, &error).await),
                Err(e) => bail!("{what}: {e}; nothing was changed"),
            };
        for ignored in &written.ignored_floors {
            println!(
                "warning: {ignored}, above {}: out of range, ignored for the serial",
                store::MAX_SERIAL_FLOOR
            );
        }
        if written.unchanged {
            println!(
                "no change: the fleet already serves this (serial {}, revision {})",
                written.serial, written.revision
            );
            return Ok(ExitCode::SUCCESS);
        }
        let retried = match written.conflicts {
            0 => String::new(),
            n => format!(" (redone after {n} concurrent write(s))"),
        };
        println!(
            "wrote fleet control {} revision {} serial {}: {}{retried}",
            keys.prefix(),
            written.revision,
            written.serial,
            written.summary
        );
        let landed = format!(
            "wrote revision {} (serial {})",
            written.revision, written.serial
        );
        let staged = steerdns::fleet::rollout::get(&mut client, &keys)
            .await
            .map_err(|e| after_write("reading the rollout state", &landed, &e))?;
        match staged {
            steerdns::fleet::rollout::Stored::Missing if !stages(config) => {
                wait_for_nodes(fleet, &mut client, &keys, written.revision, written.serial).await
            }
            _ => super::rollout::follow(fleet, &mut client, &keys, written.revision).await,
        }
    })
}

/// Whether this config stages rollouts (then a missing rollout state means every node holds).
fn stages(config: &Config) -> bool {
    config.fleet.as_ref().is_some_and(|f| f.rollout.is_some())
}

/// After a write etcd did not confirm: reads the control state again and says whether the
/// write landed.
async fn confirm(
    fleet: &FleetConfig,
    what: &str,
    serial: u64,
    text: &str,
    error: &FleetError,
) -> anyhow::Error {
    let reread = async {
        let (mut client, keys) = connect(fleet).await.ok()?;
        store::get_control(&mut client, &keys).await.ok().flatten()
    };
    match reread.await {
        Some(control) if control.text == text => anyhow::anyhow!(
            "{what}: etcd did not confirm the write ({error}), but it landed: revision {} (serial {serial}) is the fleet's control state",
            control.revision
        ),
        Some(control) if control.serial < serial => anyhow::anyhow!(
            "{what}: etcd did not confirm the write ({error}) and it did not land: the fleet is still at revision {} (serial {}); nothing was changed",
            control.revision,
            control.serial
        ),
        _ => unconfirmed(what, error, "steerdns control history"),
    }
}

/// Waits until every live node serves `revision`, prints the convergence time (or the nodes
/// that did not follow) and records it in etcd for the nodes' metrics.
async fn wait_for_nodes(
    fleet: &FleetConfig,
    client: &mut Client,
    keys: &Keys,
    revision: i64,
    serial: u64,
) -> Result<ExitCode> {
    let started = Instant::now();
    let limit = Duration::from_secs(fleet.converge_timeout_secs);
    let mut nodes = Vec::new();
    let mut bad = Vec::new();
    loop {
        if let Ok(now) = store::nodes(client, keys).await {
            nodes = now.records;
            bad = now.bad;
        }
        let waiting = nodes
            .iter()
            .filter(|n| n.revision < revision && refused(n, revision).is_none())
            .count();
        if waiting == 0 || started.elapsed() >= limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let millis = started.elapsed().as_secs_f64() * 1000.0;
    let converged: Vec<String> = nodes
        .iter()
        .filter(|n| n.revision >= revision)
        .map(|n| n.name.clone())
        .collect();
    let lagging: Vec<String> = nodes
        .iter()
        .filter(|n| n.revision < revision)
        .map(|n| n.name.clone())
        .collect();
    let record = Convergence {
        revision,
        serial,
        millis,
        converged: converged.clone(),
        lagging: lagging.clone(),
        at: rfc3339::format_utc(SystemTime::now()),
    };
    let _ = store::put_json(client, keys.convergence(), &record, None).await;
    print_bad(&bad);
    if nodes.is_empty() {
        println!("no live nodes registered under {}", keys.prefix());
        return Ok(ExitCode::SUCCESS);
    }
    if lagging.is_empty() {
        println!(
            "all {} live nodes serve serial {serial} (revision {revision}): converged in {millis:.0} ms [{}]",
            nodes.len(),
            converged.join(" ")
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "warning: {} of {} live nodes do not serve revision {revision} after {millis:.0} ms (the change is written; they keep serving their last good version):",
        lagging.len(),
        nodes.len()
    );
    for node in nodes.iter().filter(|n| n.revision < revision) {
        match refused(node, revision) {
            Some(reasons) => println!("  {} refused it: {}", node.name, reasons.join("; ")),
            None => println!(
                "  {} still serves serial {} (revision {})",
                node.name, node.serial, node.revision
            ),
        }
    }
    Ok(ExitCode::FAILURE)
}

/// What `steerdns status` adds to a node's fleet line: records skipped, a failing
/// coordinator, a refused registration.
pub(super) fn print_link_problems(link: &steerdns::fleet::status::FleetLinkStatus) {
    for bad in &link.bad_records {
        println!("  fleet record SKIPPED ({}): {bad}", bad.seen_by);
    }
    if let Some(error) = &link.coordinator_error {
        println!("  fleet rollout coordinator FAILING: {error}");
    }
    if let Some(reason) = &link.registration_refused {
        println!("  fleet registration REFUSED: {reason}");
    }
    for t in &link.halted_tenants {
        println!(
            "  tenant {} HALTED at revision {}: refused on canary {}: {}",
            t.tenant, t.revision, t.node, t.reason
        );
    }
}

/// Records skipped because they do not decode, each with its key.
pub(super) fn print_bad(bad: &[store::BadRecord]) {
    for record in bad {
        println!("  SKIPPED {record}");
    }
}

fn refused(node: &NodeRecord, revision: i64) -> Option<Vec<String>> {
    node.last_refusal
        .as_ref()
        .filter(|r| r.revision == Some(revision))
        .map(|r| r.reasons.clone())
}

pub fn rollback(
    config: &Config,
    version: Option<u64>,
    emergency: bool,
    overrides: &super::safety::OverrideArgs,
) -> Result<ExitCode> {
    let fleet = fleet_of(config)?;
    let text = runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        let current = store::get_control(&mut client, &keys)
            .await
            .map_err(|e| failed(fleet, "reading the control state", &e))?
            .with_context(|| format!("the fleet has no control state under {}", keys.prefix()))?;
        let versions = store::history(&mut client, &keys)
            .await
            .map_err(|e| failed(fleet, "reading the history", &e))?
            .records;
        let chosen = match version {
            Some(serial) => versions.into_iter().find(|v| v.serial == serial).with_context(
                || format!("version {serial} is not in the fleet history (see `steerdns control history`)"),
            )?,
            None => versions
                .into_iter()
                .rev()
                .find(|v| v.serial < current.serial && v.text != current.text)
                .context("no previous fleet version to roll back to (see `steerdns control history`)")?,
        };
        Ok::<_, anyhow::Error>((chosen.serial, chosen.text))
    })?;
    let (serial, text) = text;
    super::safety::fleet_edit(
        config,
        &format!("rollback to {serial}"),
        emergency,
        overrides,
        move |_| Ok(text.clone()),
    )
}

/// `steerdns fleet init --from FILE`: seeds an empty fleet (create-if-absent).
pub fn init(config: &Config, from: &std::path::Path) -> Result<ExitCode> {
    let fleet = fleet_of(config)?;
    let text = steerdns::files::read_text_limited(from, steerdns::files::SMALL_FILE_LIMIT)
        .with_context(|| format!("reading {}", from.display()))?;
    if let Err(problems) = taste(config, &text) {
        println!("refused, nothing written ({}):", from.display());
        for p in &problems {
            println!("  {p}");
        }
        return Ok(ExitCode::FAILURE);
    }
    runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        let source = format!("fleet init from {} by {}", from.display(), store::who());
        match store::seed(&mut client, &keys, &text, &source, 0)
            .await
            .map_err(|e| unconfirmed("fleet init", &e, "steerdns control history"))?
        {
            Ok(control) => {
                println!(
                    "seeded {} from {}: serial {}, revision {}",
                    keys.prefix(),
                    from.display(),
                    control.serial,
                    control.revision
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(existing) => bail!(
                "{} already holds control state (serial {}, revision {}); nothing written. \
                 Change it with `weight set`, `drain` or `control rollback`.",
                keys.prefix(),
                existing.serial,
                existing.revision
            ),
        }
    })
}

/// `steerdns fleet forget NAME`: a node retired on purpose is no longer reported missing.
pub fn forget(config: &Config, name: &str) -> Result<ExitCode> {
    let fleet = fleet_of(config)?;
    runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        let response = client
            .delete(keys.member(name), None)
            .await
            .map_err(|e| unconfirmed(&format!("forgetting {name}"), &e, "steerdns fleet status"))?;
        if response.deleted() == 0 {
            bail!("no member {name:?} under {}", keys.prefix());
        }
        println!("forgot {name}: no longer reported missing");
        Ok(ExitCode::SUCCESS)
    })
}

/// What `fleet status --json` prints.
#[derive(serde::Serialize)]
struct FleetStatusView {
    prefix: String,
    endpoints: Vec<String>,
    control_revision: i64,
    control_serial: u64,
    /// Live nodes, each with whether it serves the current revision.
    nodes: Vec<NodeView>,
    /// Members without a live registry entry (dead, stopped or partitioned from etcd).
    missing: Vec<String>,
    /// Live nodes not on the current revision (nor held back at the last known good by a
    /// staged rollout).
    lagging: Vec<String>,
    last_convergence: Option<Convergence>,
    /// The staged rollout (`rollout status` has the details), if the fleet stages changes.
    rollout: Option<String>,
    /// The traffic shield's leader (holder of `<prefix>/shield/leader`), if any.
    leader: Option<String>,
    /// Whether the leader key is on a lease (false: written by hand; a node takes it over).
    leader_on_lease: bool,
    /// The revision of the shield state the leader last published, and how old it is (by the
    /// leader's clock: a leader that stopped publishing shows here).
    shield_revision: Option<i64>,
    shield_state_age_secs: Option<f64>,
    /// Records under the prefix that do not decode (skipped; the rest is used), by key.
    bad_records: Vec<store::BadRecord>,
    /// Shared health probing: who probes what and what the fleet serves (absent when no
    /// node publishes probe results).
    health: Option<FleetHealthView>,
}

/// Shared probing as the records in etcd say (the nodes decide the same from them).
#[derive(serde::Serialize)]
struct FleetHealthView {
    probers_per_target: usize,
    probers: Vec<steerdns::health::ProberNode>,
    refused: Vec<String>,
    targets: Vec<FleetHealthTarget>,
}

#[derive(serde::Serialize)]
struct FleetHealthTarget {
    target: String,
    /// "up", "down", or "none" (no prober reports a fresh result).
    verdict: &'static str,
    probers: Vec<steerdns::health::ProberVote>,
    tally: steerdns::health::shared::Tally,
}

fn health_view(
    fleet: &steerdns::config::fleet::FleetConfig,
    peers: &std::collections::BTreeMap<String, steerdns::fleet::health::Peer>,
) -> Option<FleetHealthView> {
    use steerdns::fleet::health::{evaluate, published_targets};
    if peers.is_empty() {
        return None;
    }
    let wanted = fleet.health.probers;
    let evaluation = evaluate(
        &published_targets(peers),
        peers,
        None,
        wanted,
        std::time::Instant::now(),
    );
    let mut targets: Vec<FleetHealthTarget> = evaluation
        .decisions
        .into_iter()
        .map(|(target, decision)| FleetHealthTarget {
            target,
            verdict: match decision.tally.verdict {
                Some(true) => "up",
                Some(false) => "down",
                None => "none",
            },
            probers: decision.probers,
            tally: decision.tally,
        })
        .collect();
    targets.sort_by(|a, b| a.target.cmp(&b.target));
    Some(FleetHealthView {
        probers_per_target: wanted,
        probers: evaluation.probers,
        refused: evaluation.refused,
        targets,
    })
}

fn print_health(health: &FleetHealthView) {
    let probers: Vec<String> = health
        .probers
        .iter()
        .map(|p| {
            format!(
                "{} ({}{} target(s))",
                p.node,
                p.site
                    .as_deref()
                    .map_or(String::new(), |s| format!("site {s}, ")),
                p.targets
            )
        })
        .collect();
    println!(
        "health: {} prober(s) per target; probers: {}",
        health.probers_per_target,
        probers.join(", ")
    );
    for refused in &health.refused {
        println!("  REFUSED {refused}");
    }
    for t in &health.targets {
        let votes: Vec<String> = t
            .probers
            .iter()
            .map(|p| format!("{} {}", p.node, p.vote.as_str()))
            .collect();
        println!(
            "  health {}: {} ({}; {} reporting, down at {})",
            t.target,
            t.verdict,
            votes.join(", "),
            t.tally.reporting,
            t.tally.quorum
        );
    }
}

#[derive(serde::Serialize)]
struct NodeView {
    #[serde(flatten)]
    record: NodeRecord,
    current: bool,
    /// Serves the last known good because the rollout has not released the newest version to
    /// its wave.
    held: bool,
    /// What the node's shield report says: the state revision it serves and how, and the age
    /// of its inputs.
    shield: Option<ShieldNodeView>,
}

#[derive(serde::Serialize)]
struct ShieldNodeView {
    /// The published shield state revision it serves (`None`: none, or decaying alone).
    revision: Option<i64>,
    /// `leader`, `published`, `fail-static`, `reverting` or `waiting`.
    role: String,
    feed_age_secs: Option<f64>,
    /// How old the report itself is.
    report_age_secs: f64,
}

fn shield_view(report: &steerdns::shield::wire::NodeReport) -> ShieldNodeView {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    ShieldNodeView {
        revision: report.serving,
        role: report.role.clone(),
        feed_age_secs: report.feed_age_ms.map(|ms| ms as f64 / 1000.0),
        report_age_secs: now_ms.saturating_sub(report.at_ms) as f64 / 1000.0,
    }
}

pub fn status(config: &Config, json: bool) -> Result<ExitCode> {
    let fleet = fleet_of(config)?;
    let view = runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        let fail = |what: &'static str| move |e: FleetError| failed(fleet, what, &e);
        let control = store::get_control(&mut client, &keys)
            .await
            .map_err(fail("reading the control state"))?;
        let listed = store::nodes(&mut client, &keys)
            .await
            .map_err(fail("reading the registry"))?;
        let members = store::members(&mut client, &keys)
            .await
            .map_err(fail("reading the members"))?;
        let convergence = store::convergence(&mut client, &keys)
            .await
            .map_err(fail("reading the convergence"))?;
        let shield = store::shield(&mut client, &keys)
            .await
            .map_err(fail("reading the shield keys"))?;
        let probers = steerdns::fleet::health::read_all(&mut client, &keys)
            .await
            .map_err(fail("reading the probers"))?;
        let stored = steerdns::fleet::rollout::get(&mut client, &keys)
            .await
            .map_err(fail("reading the rollout state"))?;
        let mut bad: Vec<store::BadRecord> = listed.bad.clone();
        bad.extend(members.bad.iter().cloned());
        bad.extend(shield.bad.iter().cloned());
        bad.extend(probers.values().filter_map(|p| {
            let reason = p.record.as_ref().err()?;
            Some(store::BadRecord {
                key: reason.split(": ").next().unwrap_or("").to_string(),
                reason: reason.clone(),
                seen_by: String::new(),
            })
        }));
        let nodes = listed.records;
        let members = members.records;
        let (rollout_problem, staged) = match stored {
            steerdns::fleet::rollout::Stored::Found(record, _) => (None, Some(record)),
            steerdns::fleet::rollout::Stored::Missing => (
                stages(config).then(|| {
                    "rollout state missing: every node holds at what it serves until the coordinator re-creates it".to_string()
                }),
                None,
            ),
            steerdns::fleet::rollout::Stored::Unreadable { reason, .. } => (
                Some(format!(
                    "rollout state UNREADABLE ({reason}): every node holds at what it serves; `steerdns rollout reset` replaces it"
                )),
                None,
            ),
        };
        // A node the rollout holds at the last known good is where it should be.
        let held = |node: &NodeRecord| match (&staged, &control) {
            (Some(record), Some(control)) if node.rollout.is_some() => {
                let target = record.assignment(&node.name, control);
                target.held && node.revision == target.revision
            }
            _ => false,
        };
        let rollout = match &staged {
            Some(record) => {
                let lines = record.rollout.describe(steerdns::fleet::rollout::now_ms());
                Some(lines.get(..2).unwrap_or(&lines).join("; "))
            }
            None => rollout_problem,
        };
        let (revision, serial) = control.as_ref().map_or((0, 0), |c| (c.revision, c.serial));
        let missing = members
            .iter()
            .filter(|m| !nodes.iter().any(|n| n.name == m.name))
            .map(|m| m.name.clone())
            .collect();
        let lagging = nodes
            .iter()
            .filter(|n| n.revision < revision && !held(n))
            .map(|n| n.name.clone())
            .collect();
        Ok::<_, anyhow::Error>(FleetStatusView {
            prefix: keys.prefix().to_string(),
            endpoints: fleet.etcd.clone(),
            control_revision: revision,
            control_serial: serial,
            nodes: nodes
                .into_iter()
                .map(|record| NodeView {
                    current: record.revision >= revision,
                    held: held(&record),
                    shield: shield.reports.get(&record.name).map(shield_view),
                    record,
                })
                .collect(),
            missing,
            lagging,
            last_convergence: convergence,
            rollout,
            leader: shield.leader,
            leader_on_lease: shield.leader_lease != 0,
            shield_revision: shield.revision,
            shield_state_age_secs: shield.state_at_ms.map(|at| {
                steerdns::fleet::rollout::now_ms().saturating_sub(at) as f64 / 1000.0
            }),
            health: health_view(fleet, &probers),
            bad_records: bad,
        })
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "fleet {} (etcd {}): control serial {} revision {}",
        view.prefix,
        view.endpoints.join(","),
        view.control_serial,
        view.control_revision
    );
    println!(
        "{} live node(s), {} lagging, {} missing",
        view.nodes.len(),
        view.lagging.len(),
        view.missing.len()
    );
    for node in &view.nodes {
        let r = &node.record;
        let state = match (node.current, node.held) {
            (true, _) => "current",
            (false, true) => "held",
            (false, false) => "LAGGING",
        };
        println!(
            "  {:<12} {:<8} serial {:<6} rev {:<6} nsid {:<10} dns {} admin {} up {}s",
            r.name,
            state,
            r.serial,
            r.revision,
            r.nsid.as_deref().unwrap_or("-"),
            r.listen.join(","),
            r.admin,
            r.uptime_secs
        );
        if let Some(o) = &r.local_override {
            println!("    {}", super::override_line(o));
        }
        if let Some(refusal) = r.last_refusal.as_ref().filter(|f| f.revision.is_some()) {
            println!("    refused {}: {}", refusal.at, refusal.reasons.join("; "));
        }
        if let Some(shield) = &node.shield {
            println!(
                "    shield: {} revision {} feed age {} (report {:.1}s old)",
                shield.role,
                shield.revision.map_or("-".to_string(), |r| r.to_string()),
                shield
                    .feed_age_secs
                    .map_or("-".to_string(), |a| format!("{a:.1}s")),
                shield.report_age_secs
            );
        }
    }
    for name in &view.missing {
        println!("  {name:<12} MISSING (no live registry entry; `steerdns fleet forget {name}` if retired)");
    }
    if let Some(rollout) = &view.rollout {
        println!("{rollout} (`steerdns rollout status`)");
    }
    match (&view.leader, view.shield_revision) {
        (Some(leader), revision) => println!(
            "shield leader: {leader}{}; published state revision {}{}",
            if view.leader_on_lease {
                ""
            } else {
                " (key on no lease: written by hand; a node takes it over)"
            },
            revision.map_or("-".to_string(), |r| r.to_string()),
            view.shield_state_age_secs
                .map_or(String::new(), |age| format!(", {age:.1} s old"))
        ),
        (None, _) => println!("shield leader: none"),
    }
    if !view.bad_records.is_empty() {
        println!(
            "{} record(s) skipped (do not decode; the rest is used):",
            view.bad_records.len()
        );
        print_bad(&view.bad_records);
    }
    if let Some(c) = &view.last_convergence {
        println!(
            "last change: serial {} (revision {}) reached {} node(s) in {:.0} ms{}",
            c.serial,
            c.revision,
            c.converged.len(),
            c.millis,
            if c.lagging.is_empty() {
                String::new()
            } else {
                format!("; not: {}", c.lagging.join(" "))
            }
        );
    }
    if let Some(health) = &view.health {
        print_health(health);
    }
    Ok(ExitCode::SUCCESS)
}
