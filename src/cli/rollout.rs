//! `steerdns rollout status|resume|abort`: the fleet's staged rollout, read from and written to
//! etcd (`<prefix>/rollout/state`, by compare-and-swap), and following a rollout after a fleet
//! edit. The decisions are the pure state machine's (`steerdns::rollout`); the coordinator
//! node drives it, these commands only resume or abort it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use etcd_client::Client;

use steerdns::config::fleet::FleetConfig;
use steerdns::config::Config;
use steerdns::fleet::bundles::BundleRecord;
use steerdns::fleet::rollout::{self as staged, RolloutRecord};
use steerdns::fleet::store;
use steerdns::fleet::Keys;
use steerdns::rollout::{Phase, Rollout};

use super::fleet::{connect, down, fleet_of, runtime};

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
}

async fn coordinator(client: &mut Client, keys: &Keys) -> Option<String> {
    let response = client.get(keys.coordinator(), None).await.ok()?;
    let kv = response.kvs().first()?;
    kv.value_str().ok().map(str::to_string)
}

async fn read_state(
    fleet: &FleetConfig,
    client: &mut Client,
    keys: &Keys,
) -> Result<(RolloutRecord, i64)> {
    match staged::get(client, keys)
        .await
        .map_err(|e| down(fleet, &e))?
    {
        Some(found) => Ok(found),
        None => bail!(
            "no rollout state under {}: staged rollouts need [fleet.rollout] in the nodes' config \
             (a node with it creates the state)",
            keys.prefix()
        ),
    }
}

pub fn status(config: &Config, json: bool) -> Result<ExitCode> {
    let fleet = fleet_of(config)?;
    let view = runtime()?.block_on(async {
        let (mut client, keys) = connect(fleet).await?;
        let (record, _) = read_state(fleet, &mut client, &keys).await?;
        let control = store::get_control(&mut client, &keys)
            .await
            .map_err(|e| down(fleet, &e))?;
        let (control_revision, control_serial) = control.map_or((0, 0), |c| (c.revision, c.serial));
        let coordinator = coordinator(&mut client, &keys).await;
        let text = record.rollout.describe(staged::now_ms());
        let bundles = staged::get_state::<BundleRecord>(&mut client, &keys.bundle_rollout())
            .await
            .map_err(|e| down(fleet, &e))?
            .map(|(record, _)| record);
        let bundles_text = bundles
            .as_ref()
            .map_or_else(Vec::new, |b| b.describe(staged::now_ms()));
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
            bundles,
            bundles_text,
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
    match &view.coordinator {
        Some(name) => println!("coordinator: {name}"),
        None => println!(
            "coordinator: none (no live node with [fleet.rollout]; nothing moves until one starts)"
        ),
    }
    Ok(ExitCode::SUCCESS)
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
            let (mut record, revision) = read_state(fleet, &mut client, &keys).await?;
            let nodes = store::nodes(&mut client, &keys)
                .await
                .map_err(|e| down(fleet, &e))?;
            let reports = staged::reports(&nodes);
            if let Err(e) = record.rollout.resume(&reports, staged::now_ms()) {
                bail!("{e}");
            }
            if staged::put(&mut client, &keys, &record, revision)
                .await
                .map_err(|e| down(fleet, &e))?
            {
                println!(
                    "resumed the rollout of revision {}: wave {} of {} gets it again and is judged afresh",
                    record.rollout.candidate,
                    record.rollout.released,
                    record.rollout.waves.len()
                );
                return follow(fleet, &mut client, &keys, record.rollout.candidate as i64).await;
            }
        }
        bail!("the rollout state kept changing; try again")
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
            let (mut record, revision) = read_state(fleet, &mut client, &keys).await?;
            if let Err(e) = record.rollout.abort(staged::now_ms()) {
                bail!("{e}");
            }
            let written = staged::write_back(&mut client, &keys, &record, revision, &source)
                .await
                .map_err(|e| down(fleet, &e))?;
            if let Some(control) = written {
                println!(
                    "aborted the rollout of revision {}: every node serves revision {}'s content; \
                     the fleet's control state is back to it as revision {} (serial {})",
                    record.rollout.candidate, record.rollout.lkg, control.revision, control.serial
                );
                return Ok(ExitCode::SUCCESS);
            }
        }
        bail!("the control state or the rollout kept changing; try again")
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
                .map_err(|e| down(fleet, &e))?;
            let Some((mut record, revision)) = found else {
                bail!("no bundle rollout under {}", keys.prefix());
            };
            let nodes = store::nodes(&mut client, &keys)
                .await
                .map_err(|e| down(fleet, &e))?;
            if let Err(e) = change(&mut record, &nodes) {
                bail!("bundles: {e}");
            }
            if staged::put_state(&mut client, &key, &record, revision)
                .await
                .map_err(|e| down(fleet, &e))?
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
        bail!("the bundle rollout kept changing; try again")
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
        let state = staged::get(client, keys).await.ok().flatten();
        let elapsed = started.elapsed();
        let ms = elapsed.as_secs_f64() * 1000.0;
        if let Some((record, _)) = state {
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
