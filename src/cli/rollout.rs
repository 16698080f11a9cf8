//! `steerdns rollout status|resume|abort`: the fleet's staged rollout, read from and written to
//! etcd (`<prefix>/rollout/state`, by compare-and-swap), and following a rollout after a fleet
//! edit. The decisions are the pure state machine's (`steerdns::rollout`); the coordinator
//! node drives it, these commands only resume or abort it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use etcd_client::Client;

use steerdns::config::fleet::FleetConfig;
use steerdns::config::Config;
use steerdns::fleet::bundles::BundleRecord;
use steerdns::fleet::rollout::{self as staged, RolloutRecord, Stored};
use steerdns::fleet::store;
use steerdns::fleet::Keys;
use steerdns::rollout::{Phase, Rollout};

use super::fleet::{after_write, connect, failed, fleet_of, runtime, unconfirmed};

/// How many times resume/abort re-read the state when the coordinator wrote it meanwhile.
const ATTEMPTS: u32 = 50;

/// What `rollout status --json` prints.
#[derive(serde::Serialize)]
struct StatusView {
    prefix: String,
    /// The fleet's newest control version.
    control_revision: i64,
    control_serial: u64,
    /// Whether the rollout below is about the newest version (else it waits for the
    /// coordinator to begin).
    begun: bool,
    /// The node driving rollouts now, if any.
    coordinator: Option<String>,
    candidate_serial: u64,
    lkg_serial: u64,
    rollout: Rollout,
    /// `rollout status` as text.
    text: Vec<String>,
    /// The rollout of the nodes' config/zone/GeoIP bundles, if any node stages them.
    bundles: Option<BundleRecord>,
    bundles_text: Vec<String>,
    /// Registry records skipped because they do not decode (key and why).
    bad_records: Vec<store::BadRecord>,
    /// Tenant changes a canary node refused: the nodes of later waves hold them (each such
    /// tenant serves its last good version there; the other tenants' changes go on).
    halted_tenants: Vec<steerdns::fleet::status::HaltedTenant>,
}

/// The tenant documents each canary node reports refusing (see `steerdns::fleet::tenants`).
fn halted_tenants(nodes: &[store::NodeRecord]) -> Vec<steerdns::fleet::status::HaltedTenant> {
    nodes
        .iter()
        .filter_map(|node| Some((node, node.tenants.as_ref()?)))
        .flat_map(|(node, report)| {
            report
                .refused
                .iter()
                .map(|(tenant, at)| steerdns::fleet::status::HaltedTenant {
                    tenant: tenant.clone(),
                    revision: at.revision,
                    node: node.name.clone(),
                    reason: at.reason.clone(),
                })
        })
        .collect()
}

async fn coordinator(client: &mut Client, keys: &Keys) -> Option<String> {
    let response = client.get(keys.coordinator(), None).await.ok()?;
    let kv = response.kvs().first()?;
    let name = kv.value_str().ok()?.to_string();
    Some(if kv.lease() == 0 {
        format!("{name} (key on no lease: written by hand; a node takes it over)")
    } else {
        name
    })
}

/// The rollout state however it stands (missing and unreadable included).
async fn read_stored(
    fleet: &FleetConfig,
    client: &mut Client,
    keys: &Keys,
) -> Result<Stored<RolloutRecord>> {
    staged::get(client, keys)
        .await
        .map_err(|e| failed(fleet, "reading the rollout state", &e))
}

/// The live nodes' registry entries (records that do not decode are skipped and returned).
async fn read_nodes(
    fleet: &FleetConfig,
    client: &mut Client,
    keys: &Keys,
) -> Result<(Vec<store::NodeRecord>, Vec<store::BadRecord>)> {
    let listed = store::nodes(client, keys)
        .await
        .map_err(|e| failed(fleet, "reading the registry", &e))?;
    Ok((listed.records, listed.bad))
}

/// What the nodes' own reports say of a finished rollout: a claim that every node serves a
/// revision is made only from them.
fn served_lines(record: &RolloutRecord, nodes: &[store::NodeRecord]) -> Vec<String> {
    let reports = staged::reports(nodes);
    let rollout = &record.rollout;
    let expected = match rollout.phase {
        Phase::Completed { .. } => rollout.candidate,
        Phase::Halted { .. } | Phase::Aborted { .. } => rollout.lkg,
        Phase::Running => return Vec::new(),
    };
    if reports.is_empty() {
        return vec!["no live node reports what it serves".to_string()];
    }
    let behind = staged::not_serving(&reports, expected);
    if behind.is_empty() {
        return vec![format!(
            "every live node ({}) reports serving revision {expected}",
            reports.len()
        )];
    }
    let names: Vec<String> = behind
        .iter()
        .map(|(name, serving)| {
            let serves = serving.map_or("nothing from the fleet".to_string(), |r| {
                format!("revision {r}")
            });
            format!("{name} (serves {serves})")
        })
        .collect();
    vec![format!(
        "NOT every node serves revision {expected} yet: {}",
        names.join(", ")
    )]
}

pub fn status(config: &Config, json: bool) -> Result<ExitCode> {
    let fleet = fleet_of(config)?;
    let view = runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        let stored = read_stored(fleet, &mut client, &keys).await?;
        let control = store::get_control(&mut client, &keys)
            .await
            .map_err(|e| failed(fleet, "reading the control state", &e))?;
        let (control_revision, control_serial) = control.map_or((0, 0), |c| (c.revision, c.serial));
        let (nodes, bad_records) = read_nodes(fleet, &mut client, &keys).await?;
        let record = match stored {
            Stored::Found(record, _) => record,
            Stored::Missing => bail!(
                "no rollout state under {}: every node with [fleet.rollout] holds at what it serves until the coordinator (a live node with [fleet.rollout]) creates it; `steerdns rollout reset` creates it now",
                keys.prefix()
            ),
            Stored::Unreadable { reason, .. } => bail!(
                "the rollout state under {} is unreadable ({reason}): every node holds at what it serves; `steerdns rollout reset` replaces it with one settled on the last version every node serves",
                keys.prefix()
            ),
        };
        let coordinator = coordinator(&mut client, &keys).await;
        let halted_tenants = halted_tenants(&nodes);
        let mut text = record.rollout.describe(staged::now_ms());
        text.extend(served_lines(&record, &nodes));
        let bundles = staged::get_state::<BundleRecord>(&mut client, &keys.bundle_rollout())
            .await
            .map_err(|e| failed(fleet, "reading the bundle rollout", &e))?;
        let bundles_text = match &bundles {
            Stored::Found(b, _) => b.describe(staged::now_ms()),
            Stored::Missing => Vec::new(),
            Stored::Unreadable { reason, .. } => vec![format!(
                "bundle rollout state UNREADABLE ({reason}): every node holds at the bundle it serves"
            )],
        };
        Ok::<_, anyhow::Error>(StatusView {
            prefix: keys.prefix().to_string(),
            control_revision,
            control_serial,
            begun: record.rollout.candidate == control_revision.max(0) as u64,
            coordinator,
            candidate_serial: record.candidate_serial,
            lkg_serial: record.lkg_serial,
            rollout: record.rollout,
            text,
            bundles: bundles.found().map(|(record, _)| record),
            bundles_text,
            bad_records,
            halted_tenants,
        })
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("fleet {}:", view.prefix);
    for line in &view.text {
        println!("{line}");
    }
    if !view.begun {
        println!(
            "newest control revision {} (serial {}) is not rolled out yet: every node serves the last known good until the coordinator begins it",
            view.control_revision, view.control_serial
        );
    }
    for line in &view.bundles_text {
        println!("{line}");
    }
    for t in &view.halted_tenants {
        println!(
            "tenant {} HALTED at revision {}: refused on canary {}: {} (it serves its last good version; other tenants go on)",
            t.tenant, t.revision, t.node, t.reason
        );
    }
    match &view.coordinator {
        Some(name) => println!("coordinator: {name}"),
        None => println!(
            "coordinator: none (no live node with [fleet.rollout]; nothing moves until one starts)"
        ),
    }
    if !view.bad_records.is_empty() {
        println!("registry records skipped (they do not decode):");
        super::fleet::print_bad(&view.bad_records);
    }
    Ok(ExitCode::SUCCESS)
}

/// A state settled on the last version every node serves, to replace a missing or
/// unreadable one (see [`staged::recovered`]).
async fn recovered(
    fleet: &FleetConfig,
    client: &mut Client,
    keys: &Keys,
) -> Result<(RolloutRecord, String)> {
    let control = store::get_control(client, keys)
        .await
        .map_err(|e| failed(fleet, "reading the control state", &e))?
        .with_context(|| format!("the fleet has no control state under {}", keys.prefix()))?;
    let history = store::history(client, keys)
        .await
        .map_err(|e| failed(fleet, "reading the history", &e))?;
    let (nodes, bad) = read_nodes(fleet, client, keys).await?;
    super::fleet::print_bad(&bad);
    staged::recovered(
        &control,
        &history.records,
        &staged::reports(&nodes),
        staged::now_ms(),
    )
    .map_err(|reason| anyhow::anyhow!("{reason}; nothing was changed"))
}

/// Writes a rollout state by compare-and-swap; an unconfirmed write is said to be one.
async fn put_state(
    client: &mut Client,
    keys: &Keys,
    record: &RolloutRecord,
    expected: i64,
) -> Result<bool> {
    staged::put(client, keys, record, expected)
        .await
        .map_err(|e| unconfirmed("writing the rollout state", &e, "steerdns rollout status"))
}

/// `steerdns rollout reset`: replaces a missing or unreadable rollout state (compare-and-swap
/// on the one read) with one settled on the last version every node serves.
pub fn reset(config: &Config) -> Result<ExitCode> {
    let fleet = fleet_of(config)?;
    runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        for _ in 0..ATTEMPTS {
            let stored = read_stored(fleet, &mut client, &keys).await?;
            if let Stored::Found(record, _) = &stored {
                bail!(
                    "the rollout state of revision {} is readable: nothing to reset (use `rollout resume` or `rollout abort`); nothing was changed",
                    record.rollout.candidate
                );
            }
            let (record, line) = recovered(fleet, &mut client, &keys).await?;
            if put_state(&mut client, &keys, &record, stored.revision()).await? {
                println!("reset the rollout state: {line}");
                println!(
                    "the coordinator rolls the newest version out from it again, wave by wave (`steerdns rollout status`)"
                );
                return Ok(ExitCode::SUCCESS);
            }
        }
        bail!("the rollout state kept changing; try again (nothing was changed)")
    })
}

pub fn resume(config: &Config, bundles: bool) -> Result<ExitCode> {
    let fleet = fleet_of(config)?;
    if bundles {
        return change_bundles(fleet, "resumed", |record, nodes| {
            let reports = record.reports(nodes);
            record.rollout.resume(&reports, staged::now_ms())
        });
    }
    runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        for _ in 0..ATTEMPTS {
            let stored = read_stored(fleet, &mut client, &keys).await?;
            let expected = stored.revision();
            let Some((mut record, revision)) = stored.found() else {
                // Unparseable or missing: resuming is resetting it; the coordinator then rolls
                // the newest version out again from the canary.
                let (record, line) = recovered(fleet, &mut client, &keys).await?;
                if put_state(&mut client, &keys, &record, expected).await? {
                    println!("the rollout state could not be read; reset it: {line}");
                    let newest = store::get_control(&mut client, &keys)
                        .await
                        .map_err(|e| {
                            after_write("reading the control state", "reset the rollout state", &e)
                        })?
                        .map_or(0, |c| c.revision);
                    return follow(fleet, &mut client, &keys, newest).await;
                }
                continue;
            };
            let (nodes, _) = read_nodes(fleet, &mut client, &keys).await?;
            let reports = staged::reports(&nodes);
            if let Err(e) = record.rollout.resume(&reports, staged::now_ms()) {
                bail!("{e}; nothing was changed");
            }
            if put_state(&mut client, &keys, &record, revision).await? {
                println!(
                    "resumed the rollout of revision {}: wave {} of {} gets it again and is judged afresh",
                    record.rollout.candidate,
                    record.rollout.released,
                    record.rollout.waves.len()
                );
                return follow(fleet, &mut client, &keys, record.rollout.candidate as i64).await;
            }
        }
        bail!("the rollout state kept changing; try again (nothing was changed)")
    })
}

pub fn abort(config: &Config, bundles: bool) -> Result<ExitCode> {
    let fleet = fleet_of(config)?;
    if bundles {
        return change_bundles(fleet, "aborted", |record, _| {
            record.rollout.abort(staged::now_ms())
        });
    }
    runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        let source = format!("rollout abort by {}", store::who());
        for _ in 0..ATTEMPTS {
            let stored = read_stored(fleet, &mut client, &keys).await?;
            let revision = stored.revision();
            let record = match stored {
                Stored::Found(mut record, _) => {
                    if let Err(e) = record.rollout.abort(staged::now_ms()) {
                        bail!("{e}; nothing was changed");
                    }
                    record
                }
                // Unparseable or missing: abort to the last version every node serves.
                _ => recovered(fleet, &mut client, &keys).await?.0,
            };
            let written = staged::write_back(&mut client, &keys, &record, revision, &source)
                .await
                .map_err(|e| unconfirmed("aborting the rollout", &e, "steerdns rollout status"))?;
            if let Some(control) = written {
                println!(
                    "aborted the rollout of revision {}: every node is sent back to revision {}'s content; \
                     the fleet's control state is back to it as revision {} (serial {})",
                    record.rollout.candidate, record.rollout.lkg, control.revision, control.serial
                );
                return Ok(ExitCode::SUCCESS);
            }
        }
        bail!("the control state or the rollout kept changing; try again (nothing was changed)")
    })
}

/// Resumes or aborts the bundle rollout (by compare-and-swap; `change` is the machine's).
/// Bundles are files on the nodes: an abort sends every node back to its last known good
/// bundle and leaves the files alone (the next new files begin the next generation).
fn change_bundles(
    fleet: &FleetConfig,
    done: &str,
    change: impl Fn(&mut BundleRecord, &[store::NodeRecord]) -> Result<(), String>,
) -> Result<ExitCode> {
    runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        let key = keys.bundle_rollout();
        for _ in 0..ATTEMPTS {
            let found = staged::get_state::<BundleRecord>(&mut client, &key)
                .await
                .map_err(|e| failed(fleet, "reading the bundle rollout", &e))?;
            let (mut record, revision) = match found {
                Stored::Found(record, revision) => (record, revision),
                Stored::Missing => bail!("no bundle rollout under {}", keys.prefix()),
                Stored::Unreadable { reason, .. } => bail!(
                    "the bundle rollout state is unreadable ({reason}); nothing was changed. Delete {key}: the coordinator re-creates it with every node's bundle as its last known good"
                ),
            };
            let (nodes, _) = read_nodes(fleet, &mut client, &keys).await?;
            if let Err(e) = change(&mut record, &nodes) {
                bail!("bundles: {e}; nothing was changed");
            }
            if staged::put_state(&mut client, &key, &record, revision)
                .await
                .map_err(|e| unconfirmed("writing the bundle rollout", &e, "steerdns rollout status"))?
            {
                println!(
                    "{done} the bundle rollout of generation {}",
                    record.rollout.candidate
                );
                for line in record.describe(staged::now_ms()) {
                    println!("{line}");
                }
                return Ok(ExitCode::SUCCESS);
            }
        }
        bail!("the bundle rollout kept changing; try again (nothing was changed)")
    })
}

/// Follows the rollout of `revision` until it completes, halts or is superseded, or until
/// `[fleet] converge_timeout_secs` passed (then it goes on without this command).
pub async fn follow(
    fleet: &FleetConfig,
    client: &mut Client,
    keys: &Keys,
    revision: i64,
) -> Result<ExitCode> {
    let started = Instant::now();
    let limit = Duration::from_secs(fleet.converge_timeout_secs);
    let target = revision.max(0) as u64;
    loop {
        let state = staged::get(client, keys).await.ok();
        let elapsed = started.elapsed();
        let ms = elapsed.as_secs_f64() * 1000.0;
        if let Some(Stored::Missing | Stored::Unreadable { .. }) = &state {
            if elapsed >= limit {
                println!(
                    "the rollout state is missing or unreadable after {ms:.0} ms: every node holds at what it serves (`steerdns rollout status`, `steerdns rollout reset`)"
                );
                return Ok(ExitCode::FAILURE);
            }
        }
        if let Some(Stored::Found(record, _)) = state {
            let rollout = &record.rollout;
            if rollout.candidate > target {
                println!(
                    "revision {revision} was superseded by revision {} before its rollout finished",
                    rollout.candidate
                );
                return Ok(ExitCode::SUCCESS);
            }
            let about = rollout.candidate == target;
            let done = about && !rollout.is_running();
            if done || elapsed >= limit {
                for line in rollout.describe(staged::now_ms()) {
                    println!("{line}");
                }
                // What the nodes themselves report, not only what the state says.
                if let Ok(listed) = store::nodes(client, keys).await {
                    for line in served_lines(&record, &listed.records) {
                        println!("{line}");
                    }
                }
                return Ok(match (&rollout.phase, about) {
                    (Phase::Completed { .. }, true) => {
                        println!(
                            "rollout of revision {revision} completed {ms:.0} ms after the write"
                        );
                        ExitCode::SUCCESS
                    }
                    (Phase::Halted { .. } | Phase::Aborted { .. }, true) => ExitCode::FAILURE,
                    _ => {
                        println!(
                            "still rolling out after {ms:.0} ms; it goes on without this command (`steerdns rollout status`)"
                        );
                        ExitCode::SUCCESS
                    }
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
