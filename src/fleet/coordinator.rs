//! The rollout coordinator: the one node of a fleet that drives staged rollouts. Every node with
//! `[fleet.rollout]` runs this task; the first to create `<prefix>/rollout/coordinator` on its
//! own lease drives, the others try again every second, so when the coordinator dies its lease
//! expires (`lease_ttl_secs`) and another node takes over from the state in etcd — nothing of a
//! rollout lives only in a process.
//!
//! Driving is a loop: read the newest control version, the rollout state and the node
//! registry; begin a rollout when a new version was written (a version with the last known
//! good's content is settled at once: every node serves it already), else step the pure state
//! machine (`crate::rollout`) with the nodes' reports; write the result back by
//! compare-and-swap on the state's revision, so a coordinator that lost its key cannot
//! overwrite its successor's decisions.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::Client;

use super::bundles::BundleRecord;
use super::client::{grant_lease, Lease};
use super::origin::FleetOrigin;
use super::rollout::{self as staged, RolloutRecord};
use super::session::{keep_every, Attempt, Link, Reconnect};
use super::store::{self, Control};
use super::{FleetError, Keys};
use crate::config::fleet::FleetConfig;
use crate::rollout::Plan;

/// How often the coordinator steps a rollout (the halt latency beyond the nodes' reports).
const STEP: Duration = Duration::from_millis(200);
/// How often a node that does not coordinate tries to become the coordinator.
const CAMPAIGN: Duration = Duration::from_secs(1);

struct Ctx {
    config: FleetConfig,
    link: Arc<Link>,
    plan: Plan,
    keys: Keys,
    name: String,
    origin: Arc<FleetOrigin>,
}

/// The coordinator task of node `name`, on the node's `link`.
pub fn task(
    link: Arc<Link>,
    plan: Plan,
    name: String,
    origin: Arc<FleetOrigin>,
) -> impl std::future::Future<Output = ()> {
    let config = link.config().clone();
    let ctx = Ctx {
        keys: Keys::new(&config.prefix),
        config,
        link,
        plan,
        name,
        origin,
    };
    run(ctx)
}

async fn run(ctx: Ctx) {
    let mut reconnect = Reconnect::default();
    let mut own = super::OwnLeases::default();
    let mut last: Option<String> = None;
    loop {
        let mut attempt = reconnect.attempt();
        let part = ctx
            .link
            .session(|client| session(&ctx, client, &mut attempt, &mut own));
        let error = super::ended(part.await).to_string();
        ctx.origin.set_coordinator(false);
        // Loud once per new reason (a failing coordinator stops every rollout, `--emergency`
        // included), quiet while the same reason repeats; status shows it meanwhile.
        if last.as_deref() != Some(error.as_str()) {
            tracing::warn!("fleet: rollout coordinator failed: {error}; retrying");
        } else {
            tracing::debug!("fleet: rollout coordinator: {error}; retrying");
        }
        ctx.origin.set_coordinator_error(Some(error.clone()));
        last = Some(error);
        reconnect.wait(&attempt).await;
    }
}

/// One etcd request, bounded by the `[fleet]` timeout.
async fn timed<T, E: Into<FleetError>>(
    ctx: &Ctx,
    what: &str,
    future: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, FleetError> {
    super::within(&ctx.config, what, future).await
}

/// One connection's life; ends only with why it ended.
async fn session(
    ctx: &Ctx,
    mut client: Client,
    attempt: &mut Attempt,
    own: &mut super::OwnLeases,
) -> Result<Infallible, FleetError> {
    let Lease {
        id: lease,
        mut keeper,
        mut keepalives,
    } = grant_lease(&ctx.config, &mut client, "a lease").await?;
    attempt.connected();
    let earlier = own.clone();
    own.add(lease);
    let keep_every = keep_every(&ctx.config);
    let mut kept = Instant::now();
    let mut leader = false;
    let mut campaigned: Option<Instant> = None;
    let mut tick = tokio::time::interval(STEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if kept.elapsed() >= keep_every {
            timed(ctx, "keeping the lease", keeper.keep_alive()).await?;
            match timed(ctx, "keeping the lease", keepalives.message()).await? {
                Some(answer) if answer.ttl() > 0 => kept = Instant::now(),
                _ => return Err(FleetError::Other("the coordinator's lease expired".into())),
            }
        }
        // Campaign while not leading; while leading, check now and then that the key is
        // still on this lease (deleted or overwritten by hand: campaign again).
        if campaigned.is_none_or(|at| at.elapsed() >= CAMPAIGN) {
            campaigned = Some(Instant::now());
            leader = if leader {
                super::holds(&ctx.config, &mut client, &ctx.keys.coordinator(), lease).await?
            } else {
                false
            };
            if !leader {
                leader = campaign(ctx, &mut client, lease, earlier.all()).await?;
            }
            ctx.origin.set_coordinator(leader);
        }
        if !leader {
            continue;
        }
        step(ctx, &mut client).await?;
        ctx.origin.set_coordinator_error(None);
    }
}

/// Takes the coordinator key if nobody holds it on a live lease (or this process held it
/// before a reconnect).
async fn campaign(
    ctx: &Ctx,
    client: &mut Client,
    lease: i64,
    own: &[i64],
) -> Result<bool, FleetError> {
    super::claim(
        &ctx.config,
        client,
        &ctx.keys.coordinator(),
        &ctx.name,
        lease,
        own,
    )
    .await
}

/// One decision for each rollout — the control state's and the bundles' — from one reading of
/// the registry.
/// A record that does not decode is skipped, named in status and logged once (it never stops
/// a rollout: an emergency change must still reach every node).
async fn step(ctx: &Ctx, client: &mut Client) -> Result<(), FleetError> {
    let listed = timed(ctx, "reading the registry", store::nodes(client, &ctx.keys)).await?;
    for bad in ctx.origin.set_bad_records("coordinator", listed.bad) {
        tracing::warn!("fleet: rollout coordinator skips {bad}");
    }
    let nodes = listed.records;
    step_control(ctx, client, &nodes).await?;
    step_bundles(ctx, client, &nodes).await
}

/// Begins (the first time: settles) or steps the bundle rollout, and writes it back if
/// anything changed.
async fn step_bundles(
    ctx: &Ctx,
    client: &mut Client,
    nodes: &[store::NodeRecord],
) -> Result<(), FleetError> {
    let key = ctx.keys.bundle_rollout();
    let state = timed(
        ctx,
        "reading the bundle rollout",
        staged::get_state::<BundleRecord>(client, &key),
    )
    .await?;
    let now = staged::now_ms();
    if !matches!(state, staged::Stored::Unreadable { .. }) {
        ctx.origin
            .set_bad_records("coordinator (bundle rollout)", Vec::new());
    }
    let (next, expected, log) = match state {
        staged::Stored::Missing => {
            let first = BundleRecord::settled(nodes, now);
            let line = "bundle rollout state created: every node's bundle is its last known good";
            (first, 0, vec![line.to_string()])
        }
        staged::Stored::Unreadable { reason, .. } => {
            hold_unreadable(ctx, "bundle", &reason);
            return Ok(());
        }
        staged::Stored::Found(record, revision) => match record.next(nodes, &ctx.plan, now) {
            Some((next, log)) => (next, revision, log),
            None => return Ok(()),
        },
    };
    let written = timed(
        ctx,
        "writing the bundle rollout",
        staged::put_state(client, &key, &next, expected),
    )
    .await?;
    if written {
        log_lines(&log);
    }
    Ok(())
}

/// An unreadable rollout state is not overwritten by the coordinator (it may be an operator's
/// hand edit gone wrong): every node holds, status says so, `steerdns rollout reset` replaces it.
fn hold_unreadable(ctx: &Ctx, which: &'static str, reason: &str) {
    let bad = store::BadRecord {
        key: if which == "bundle" {
            ctx.keys.bundle_rollout()
        } else {
            ctx.keys.rollout()
        },
        reason: format!(
            "{reason}; every node holds at what it serves until `steerdns rollout reset`"
        ),
        seen_by: String::new(),
    };
    let seen_by = if which == "bundle" {
        "coordinator (bundle rollout)"
    } else {
        "coordinator (rollout)"
    };
    for bad in ctx.origin.set_bad_records(seen_by, vec![bad]) {
        tracing::error!("fleet: {bad}");
    }
}

fn log_lines(lines: &[String]) {
    for line in lines {
        if line.contains("halted") {
            tracing::error!("fleet: {line}");
        } else {
            tracing::info!("fleet: {line}");
        }
    }
}

/// Begins, settles or steps the control rollout, and writes it back if anything changed.
async fn step_control(
    ctx: &Ctx,
    client: &mut Client,
    nodes: &[store::NodeRecord],
) -> Result<(), FleetError> {
    let keys = &ctx.keys;
    let Some(control) = timed(
        ctx,
        "reading the control state",
        store::get_control(client, keys),
    )
    .await?
    else {
        return Ok(());
    };
    let state = timed(ctx, "reading the rollout", staged::get(client, keys)).await?;
    let reports = staged::reports(nodes);
    let now = staged::now_ms();
    if !matches!(state, staged::Stored::Unreadable { .. }) {
        ctx.origin
            .set_bad_records("coordinator (rollout)", Vec::new());
    }
    let (next, expected, log) = match state {
        staged::Stored::Missing => {
            let history = timed(ctx, "reading the history", store::history(client, keys)).await?;
            match staged::recovered(&control, &history.records, &reports, now) {
                Ok((record, line)) => (record, 0, vec![line]),
                Err(reason) => {
                    hold_unreadable(ctx, "control", &format!("missing: {reason}"));
                    return Ok(());
                }
            }
        }
        staged::Stored::Unreadable { reason, .. } => {
            hold_unreadable(ctx, "control", &reason);
            return Ok(());
        }
        staged::Stored::Found(record, revision) if !record.is_about(&control) => {
            let (lkg_text, lkg_revision, _) = record.last_known_good();
            if staged::same_content(&control.text, &lkg_text) {
                let mut settled = RolloutRecord::settled(&control, now);
                settled.rollout.summary = format!("the content of revision {lkg_revision}");
                let line = format!(
                    "revision {} holds the last known good's content (revision {lkg_revision}): every node may serve it",
                    control.revision
                );
                (settled, revision, vec![line])
            } else {
                let (summary, emergency) = written(ctx, client, &control).await;
                let begun = record.begin(&control, &summary, emergency, &ctx.plan, &reports, now);
                let waves: Vec<String> = begun
                    .rollout
                    .waves
                    .iter()
                    .map(|wave| format!("[{}]", wave.join(", ")))
                    .collect();
                let line = format!(
                    "rollout of revision {} (serial {}, {summary}){} begun from revision {}: waves {}",
                    control.revision,
                    control.serial,
                    if emergency { ", emergency: no bake" } else { "" },
                    begun.rollout.lkg,
                    waves.join(" ")
                );
                (begun, revision, vec![line])
            }
        }
        staged::Stored::Found(record, revision) => {
            let mut next = record.clone();
            let log = next.rollout.step(&reports, now);
            if next == record {
                return Ok(());
            }
            (next, revision, log)
        }
    };
    if timed(
        ctx,
        "writing the rollout",
        staged::put(client, keys, &next, expected),
    )
    .await?
    {
        log_lines(&log);
    }
    Ok(())
}

/// The summary and `--emergency` flag the writer of `control` recorded in the history.
async fn written(ctx: &Ctx, client: &mut Client, control: &Control) -> (String, bool) {
    let found = timed(
        ctx,
        "reading the history",
        store::version(client, &ctx.keys, control.serial),
    )
    .await;
    match found {
        Ok(Some(version)) if version.revision == control.revision => {
            (version.summary, version.emergency)
        }
        _ => ("written to etcd directly".to_string(), false),
    }
}
