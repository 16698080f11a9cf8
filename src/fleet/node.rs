//! A fleet node's link to etcd, for the life of the process: read (or seed) the control state,
//! register the node on a lease, watch for new versions and hand each to the reloader; when
//! etcd goes away, keep serving, say so, and start over (with backoff) until it is back.
//!
//! With `[fleet.rollout]`, the node also watches the rollout state and serves only what the
//! rollout released to its wave (else the last known good), and its registry entry carries
//! what the rollout's gates judge it by: boot id, revision served, refusal, query and SERVFAIL
//! counters, and the answers to the sanity probes.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use etcd_client::{Client, EventType, WatchOptions};

use super::bundles::{BundleRecord, BundleReport};
use super::client::{grant_lease, Lease};
use super::origin::{FleetOrigin, Remote};
use super::rollout::{self as staged, Assignment, RolloutRecord};
use super::session::{keep_every, Attempt, Link, Reconnect};
use super::status::{HaltedTenant, RolloutView, TenantRefusedAt, TenantReport};
use super::store::{self, Member, NodeRecord, NodeRefusal};
use super::{tenants, FleetError, Keys};
use crate::config::fleet::FleetConfig;
use crate::reload::{Reloader, Trigger};
use crate::rfc3339;
use crate::rollout::{parse_probe, NodeReport, Phase, ProbeResult};

/// Who this node is, as its registry entry says.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub name: String,
    pub nsid: Option<String>,
    pub identity: Option<String>,
    pub listen: Vec<SocketAddr>,
    /// Admin endpoint (`None`: `--admin-listen off`).
    pub admin: Option<SocketAddr>,
}

/// The registry entry is rewritten at least this often (uptime), besides every change.
const REFRESH: Duration = Duration::from_secs(30);

/// How often a node of a later wave looks whether the canary applied the tenant changes it
/// holds (only while it holds some).
const HELD_RETRY: Duration = Duration::from_millis(100);

struct Ctx {
    config: FleetConfig,
    link: Arc<Link>,
    keys: Keys,
    reloader: Arc<Reloader>,
    origin: Arc<FleetOrigin>,
    info: NodeInfo,
    started: SystemTime,
    started_at: String,
    /// Different for every start of this process (a restart shows in the rollout's gates).
    boot: String,
}

/// The node's etcd task (registry and control watch), on the node's `link`; runs until the
/// daemon stops it.
pub fn task(
    link: Arc<Link>,
    reloader: Arc<Reloader>,
    origin: Arc<FleetOrigin>,
    info: NodeInfo,
) -> impl std::future::Future<Output = ()> {
    let config = link.config().clone();
    let ctx = Ctx {
        keys: Keys::new(&config.prefix),
        config,
        link,
        reloader,
        origin,
        info,
        started: SystemTime::now(),
        started_at: rfc3339::format_utc(SystemTime::now()),
        boot: boot_id(),
    };
    run(ctx)
}

async fn run(ctx: Ctx) {
    let mut reconnect = Reconnect::default();
    let mut own = super::OwnLeases::default();
    loop {
        let mut attempt = reconnect.attempt();
        let part = ctx
            .link
            .session(|client| session(&ctx, client, &mut attempt, &mut own));
        let error = super::ended(part.await);
        ctx.origin.set_link(false, Some(error.to_string()));
        ctx.origin.set_etcd_connections(ctx.link.connections_made());
        tracing::debug!("fleet: {error}; retrying");
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
/// This node's part in the fleet's tenants: the watch of their keys, the folder it mirrors
/// them into, and, with staging, what it holds back or halted (see [`super::tenants`]).
struct TenantLink {
    watch: etcd_client::WatchStream,
    dir: std::path::PathBuf,
    role: TenantRole,
    report: TenantReport,
    held: BTreeMap<String, tenants::Held>,
    halted: BTreeMap<String, HaltedTenant>,
}

/// How a node takes tenant changes: at once (no `[fleet.rollout]` waves), at once and
/// reporting them (a canary node), or after the canary nodes (the names) applied them.
enum TenantRole {
    Direct,
    Canary,
    Follower(Vec<String>),
}

fn tenant_role(ctx: &Ctx) -> TenantRole {
    let first = ctx.config.rollout.as_ref().and_then(|p| p.waves.first());
    match first {
        None => TenantRole::Direct,
        Some(wave) if wave.contains(&ctx.info.name) => TenantRole::Canary,
        Some(wave) => TenantRole::Follower(wave.clone()),
    }
}

/// Syncs the node's tenants folder with etcd (seeding etcd from it in a new fleet), has the
/// registry serve what changed, and watches the tenants' keys from the revision read on.
async fn sync_tenants(
    ctx: &Ctx,
    client: &mut Client,
    dir: &std::path::Path,
) -> Result<TenantLink, FleetError> {
    let keys = &ctx.keys;
    let mut listed = timed(ctx, "reading the tenants", tenants::list(client, keys)).await?;
    if listed.documents.is_empty() {
        let folder = tenants::folder_documents(dir);
        if !folder.is_empty() {
            let seeded = timed(
                ctx,
                "seeding the tenants",
                tenants::seed(client, keys, &folder),
            )
            .await?;
            if seeded {
                tracing::info!(
                    "fleet: seeded etcd with this node's {} tenant(s)",
                    folder.len()
                );
            }
            listed = timed(ctx, "reading the tenants", tenants::list(client, keys)).await?;
        }
    }
    let bad: Vec<store::BadRecord> = listed
        .bad
        .iter()
        .map(|(key, reason)| store::BadRecord {
            key: key.clone(),
            reason: reason.clone(),
            seen_by: String::new(),
        })
        .collect();
    for record in ctx.origin.set_bad_records("tenants", bad) {
        tracing::warn!("fleet: {}: {}; skipped", record.key, record.reason);
    }
    let changes = tenants::differences(dir, &listed.documents);
    let refused = apply_changes(ctx, dir, changes).await;
    let mut link = TenantLink {
        watch: watch_tenants(ctx, client, listed.revision).await?,
        dir: dir.to_path_buf(),
        role: tenant_role(ctx),
        report: TenantReport::default(),
        held: BTreeMap::new(),
        halted: BTreeMap::new(),
    };
    let revisions = &listed.revisions;
    record_applied(ctx, &mut link, listed.revision, refused, |name| {
        revisions.get(name).copied().unwrap_or(0)
    });
    Ok(link)
}

async fn watch_tenants(
    ctx: &Ctx,
    client: &mut Client,
    revision: i64,
) -> Result<etcd_client::WatchStream, FleetError> {
    let keys = &ctx.keys;
    let options = WatchOptions::new()
        .with_range(tenants::prefix_end(&keys.tenants()))
        .with_start_revision(revision + 1);
    timed(
        ctx,
        "watching the tenants",
        client.watch(keys.tenants(), Some(options)),
    )
    .await
}

/// Writes `changes` into the folder and has the registry serve them, off the runtime;
/// the tenants refused, with the reason.
async fn apply_changes(
    ctx: &Ctx,
    dir: &std::path::Path,
    changes: Vec<(String, Option<String>)>,
) -> Vec<(String, String)> {
    if changes.is_empty() {
        return Vec::new();
    }
    let registry = ctx.reloader.tenants().clone();
    let folder = dir.to_path_buf();
    let done =
        tokio::task::spawn_blocking(move || tenants::apply_in_folder(&registry, &folder, &changes))
            .await;
    done.unwrap_or_else(|e| {
        tracing::error!("fleet: applying tenant changes failed: {e}");
        Vec::new()
    })
}

/// A canary's report after applying every tenant change through `through`: the refused
/// ones (at `revision_of` their document) are added, the others' old refusals dropped.
fn record_applied(
    ctx: &Ctx,
    link: &mut TenantLink,
    through: i64,
    refused: Vec<(String, String)>,
    revision_of: impl Fn(&str) -> i64,
) {
    for (name, reason) in &refused {
        tracing::warn!("fleet: tenant {name} refused here: {reason}");
    }
    if !matches!(link.role, TenantRole::Canary) {
        return;
    }
    for (name, reason) in refused {
        let revision = revision_of(&name);
        link.report
            .refused
            .insert(name, TenantRefusedAt { revision, reason });
    }
    link.report.through = link.report.through.max(through);
    ctx.origin.set_tenant_report(link.report.clone());
}

/// The next message of the tenants' watch; never, without tenants.
async fn next_tenant_event(
    link: &mut Option<TenantLink>,
) -> Result<Option<etcd_client::WatchResponse>, etcd_client::Error> {
    match link {
        Some(link) => link.watch.message().await,
        None => std::future::pending().await,
    }
}

/// One message of the tenants' watch: applied at once (direct, canary) or held until the
/// canary has (follower).
async fn on_tenant_events(
    ctx: &Ctx,
    client: &mut Client,
    link: &mut TenantLink,
    response: &etcd_client::WatchResponse,
) {
    let mut changes = Vec::new();
    let mut revisions = BTreeMap::new();
    for event in response.events() {
        let Some(kv) = event.kv() else { continue };
        let Some(name) = tenants::tenant_of(&ctx.keys, kv.key()) else {
            continue;
        };
        let text = match event.event_type() {
            EventType::Delete => None,
            EventType::Put => match tenants::document(kv.value()) {
                Ok(text) => Some(text),
                Err(why) => {
                    tracing::warn!("fleet: tenant {name}: {why}; still serving what this node has");
                    continue;
                }
            },
        };
        revisions.insert(name.clone(), kv.mod_revision());
        link.report.refused.remove(&name);
        changes.push((name, text));
    }
    let through = response.header().map_or(0, |h| h.revision());
    if let TenantRole::Follower(_) = link.role {
        for (name, text) in changes {
            let revision = revisions.get(&name).copied().unwrap_or(through);
            link.halted.remove(&name);
            link.held.insert(name, tenants::Held { revision, text });
        }
        release_held(ctx, client, link).await;
        return;
    }
    let refused = apply_changes(ctx, &link.dir, changes).await;
    record_applied(ctx, link, through, refused, |name| {
        revisions.get(name).copied().unwrap_or(through)
    });
}

/// A follower applies the held tenant changes the canary nodes have applied, and halts the
/// ones a canary refused.
async fn release_held(ctx: &Ctx, client: &mut Client, link: &mut TenantLink) {
    let TenantRole::Follower(canary) = &link.role else {
        return;
    };
    if link.held.is_empty() {
        return;
    }
    let records = match store::nodes(client, &ctx.keys).await {
        Ok(listed) => listed.records,
        Err(e) => {
            tracing::warn!("fleet: tenants held (cannot read the canary's records: {e})");
            return;
        }
    };
    let reports: Vec<(String, Option<TenantReport>)> = canary
        .iter()
        .map(|name| {
            let record = records.iter().find(|r| &r.name == name);
            (name.clone(), record.and_then(|r| r.tenants.clone()))
        })
        .collect();
    let (apply, halted) = tenants::release(&mut link.held, &reports);
    for tenant in halted {
        tracing::warn!(
            "fleet: tenant {} halted at revision {}: refused on canary {}: {}",
            tenant.tenant,
            tenant.revision,
            tenant.node,
            tenant.reason
        );
        link.halted.insert(tenant.tenant.clone(), tenant);
    }
    for (name, _) in apply.iter() {
        link.halted.remove(name);
    }
    ctx.origin
        .set_halted_tenants(link.halted.values().cloned().collect());
    let refused = apply_changes(ctx, &link.dir, apply).await;
    for (name, reason) in refused {
        tracing::warn!("fleet: tenant {name} refused here: {reason}");
    }
}

async fn session(
    ctx: &Ctx,
    mut client: Client,
    attempt: &mut Attempt,
    own: &mut super::OwnLeases,
) -> Result<Infallible, FleetError> {
    let keys = &ctx.keys;
    let response = timed(
        ctx,
        "reading the control state",
        client.get(keys.control(), None),
    )
    .await?;
    let header = response.header().map_or(0, |h| h.revision());
    let control = match response.kvs().first() {
        Some(kv) => store::control_of(kv)?,
        None => seed(ctx, &mut client).await?,
    };
    let watch_from = header.max(control.revision) + 1;
    let mut rollout =
        match timed(ctx, "reading the rollout", staged::get(&mut client, keys)).await? {
            staged::Stored::Found(record, _) => Seen::Record(Box::new(record)),
            staged::Stored::Missing => Seen::Never,
            staged::Stored::Unreadable { reason, .. } => Seen::Unreadable(reason),
        };
    apply(ctx, &control, &rollout).await;
    if ctx.config.rollout.is_some() {
        let key = keys.bundle_rollout();
        match timed(
            ctx,
            "reading the bundle rollout",
            staged::get_state::<BundleRecord>(&mut client, &key),
        )
        .await?
        {
            staged::Stored::Found(record, _) => apply_bundle(ctx, &record).await,
            staged::Stored::Missing => {}
            staged::Stored::Unreadable { reason, .. } => {
                tracing::error!("fleet: {reason}; holding at the bundle this node serves")
            }
        }
    }
    let mut control = control;
    if let Ok(Some(convergence)) = store::convergence(&mut client, keys).await {
        ctx.origin.set_convergence(convergence.millis);
    }

    let Lease {
        id: lease,
        mut keeper,
        mut keepalives,
    } = grant_lease(&ctx.config, &mut client, "a lease").await?;
    let mut earlier = own.clone();
    own.add(lease);
    // The lease of this node's previous process (a restart): its registry entry is this
    // node's own, not another node's with the same name.
    if let Some(previous) = remembered_lease(ctx) {
        earlier.add(previous);
    }
    remember_lease(ctx, lease);
    let registry = Registry {
        lease,
        earlier: earlier.all(),
    };
    register_member(ctx, &mut client).await?;
    let mut last_record = put_record(ctx, &mut client, &registry, None).await?;
    let mut last_put = Instant::now();
    keep_known(ctx, &mut client).await;
    super::direct::reconcile(&ctx.config, &mut client, keys, &ctx.origin, &ctx.info.name).await?;

    let options = WatchOptions::new()
        .with_range(keys.watch_range_end())
        .with_start_revision(watch_from);
    let mut watch = timed(ctx, "watching", client.watch(keys.control(), Some(options))).await?;
    let (rollout_from, rollout_to) = keys.rollout_watch_range();
    let options = WatchOptions::new()
        .with_range(rollout_to)
        .with_start_revision(watch_from);
    let mut rollout_watch = timed(
        ctx,
        "watching the rollout",
        client.watch(rollout_from, Some(options)),
    )
    .await?;
    let mut tenant_link = match ctx.reloader.tenants().folder() {
        Some(dir) => Some(sync_tenants(ctx, &mut client, &dir).await?),
        None => None,
    };
    let mut held_retry = tokio::time::interval(HELD_RETRY);
    held_retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ctx.origin.set_link(true, None);
    ctx.origin.set_etcd_connections(ctx.link.connections_made());
    attempt.connected();

    let period = keep_every(&ctx.config);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = watch.message() => {
                let Some(response) = message? else {
                    return Err(FleetError::Other("etcd closed the watch".into()));
                };
                if response.canceled() {
                    return Err(FleetError::Other(format!(
                        "etcd cancelled the watch: {}",
                        response.cancel_reason()
                    )));
                }
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let key = kv.key_str().unwrap_or("");
                    match (event.event_type(), key == keys.control()) {
                        (EventType::Put, true) => match store::control_of(kv) {
                            Ok(newest) => {
                                control = newest;
                                apply(ctx, &control, &rollout).await;
                            }
                            Err(e) => tracing::error!("fleet: {e}; still serving what this node has"),
                        },
                        (EventType::Delete, true) => tracing::error!(
                            "fleet: {} was deleted; still serving what this node has",
                            keys.control()
                        ),
                        (EventType::Put, false) => {
                            match serde_json::from_slice::<store::Convergence>(kv.value()) {
                                Ok(c) => ctx.origin.set_convergence(c.millis),
                                Err(e) => tracing::warn!("fleet: {key}: {e}"),
                            }
                        }
                        (EventType::Delete, false) => {}
                    }
                }
            }
            message = rollout_watch.message() => {
                let Some(response) = message? else {
                    return Err(FleetError::Other("etcd closed the rollout watch".into()));
                };
                if response.canceled() {
                    return Err(FleetError::Other(format!(
                        "etcd cancelled the rollout watch: {}",
                        response.cancel_reason()
                    )));
                }
                let mut bundle = None;
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let key = kv.key_str().unwrap_or("");
                    match (event.event_type(), key) {
                        (EventType::Put, k) if k == keys.rollout() => match staged::decode(k, kv.value()) {
                            Ok(record) => rollout = Seen::Record(Box::new(record)),
                            Err(e) => {
                                tracing::error!("fleet: {e}; holding at what this node serves");
                                rollout = Seen::Unreadable(e.to_string());
                            }
                        },
                        (EventType::Delete, k) if k == keys.rollout() => {
                            tracing::error!(
                                "fleet: {k} was deleted; holding at what this node serves until the coordinator re-creates it"
                            );
                            rollout = Seen::Deleted;
                        }
                        (EventType::Put, k) if k == keys.bundle_rollout() => {
                            match staged::decode::<BundleRecord>(k, kv.value()) {
                                Ok(record) => bundle = Some(record),
                                Err(e) => tracing::error!("fleet: {e}; holding at the bundle this node serves"),
                            }
                        }
                        _ => {}
                    }
                }
                apply(ctx, &control, &rollout).await;
                if let (Some(record), Some(_)) = (&bundle, &ctx.config.rollout) {
                    apply_bundle(ctx, record).await;
                }
            }
            message = next_tenant_event(&mut tenant_link) => {
                let Some(response) = message? else {
                    return Err(FleetError::Other("etcd closed the tenants' watch".into()));
                };
                if response.canceled() {
                    return Err(FleetError::Other(format!(
                        "etcd cancelled the tenants' watch: {}",
                        response.cancel_reason()
                    )));
                }
                if let Some(link) = tenant_link.as_mut() {
                    on_tenant_events(ctx, &mut client, link, &response).await;
                }
            }
            _ = held_retry.tick(), if tenant_link.as_ref().is_some_and(|l| !l.held.is_empty()) => {
                if let Some(link) = tenant_link.as_mut() {
                    release_held(ctx, &mut client, link).await;
                }
            }
            _ = tick.tick() => {
                timed(ctx, "keeping the lease", keeper.keep_alive()).await?;
                let answer = timed(ctx, "keeping the lease", keepalives.message()).await?;
                match answer {
                    Some(a) if a.ttl() > 0 => {}
                    _ => return Err(FleetError::Other("the node's lease expired".into())),
                }
                // A rollout judges the query and SERVFAIL counters: keep them fresh.
                // A refused registration is tried again every tick (the other holder's lease
                // may have ended).
                let refused = ctx.origin.link().registration_refused.is_some();
                if last_put.elapsed() >= REFRESH || ctx.config.rollout.is_some() || refused {
                    last_record = put_record(ctx, &mut client, &registry, None).await?;
                    last_put = Instant::now();
                }
                keep_known(ctx, &mut client).await;
            }
            _ = ctx.origin.changed.notified() => {
                last_record = put_record(ctx, &mut client, &registry, Some(&last_record)).await?;
                last_put = Instant::now();
                // A local override served while etcd is up goes to etcd at once.
                super::direct::reconcile(&ctx.config, &mut client, keys, &ctx.origin, &ctx.info.name).await?;
            }
        }
    }
}

/// Keeps the registry `--direct` reaches during an outage (a failure only delays it).
async fn keep_known(ctx: &Ctx, client: &mut Client) {
    if let Err(e) = super::direct::refresh_known(&ctx.config, client, &ctx.keys, &ctx.origin).await
    {
        tracing::warn!("fleet: node registry not refreshed for --direct: {e}");
    }
}

/// The rollout state as this node last read or watched it.
enum Seen {
    /// None in etcd when the node connected (a new fleet: the coordinator creates it).
    Never,
    /// Deleted while the node watched.
    Deleted,
    /// Does not decode: why.
    Unreadable(String),
    Record(Box<RolloutRecord>),
}

/// Serves what the rollout allows this node (with `[fleet.rollout]`), else the newest version.
/// Without a readable rollout state the node *holds*: it keeps what it serves (never the
/// newest version unstaged) until the coordinator re-creates the state or an operator resets it.
async fn apply(ctx: &Ctx, control: &store::Control, rollout: &Seen) {
    let newest = || Assignment {
        text: control.text.clone(),
        revision: control.revision,
        serial: control.serial,
        held: false,
    };
    let hold = |phase: &str, reason: Option<String>| {
        let (served, _) = ctx.origin.served();
        ctx.origin.set_rollout(Some(RolloutView {
            phase: phase.into(),
            candidate: control.revision,
            lkg: served,
            allowed: served,
            held: served != control.revision,
            halted: reason,
            ..RolloutView::default()
        }));
    };
    let target = match (&ctx.config.rollout, rollout) {
        (None, _) => newest(),
        (Some(_), Seen::Never) => return hold("none", None),
        (Some(_), Seen::Deleted) => return hold("missing", None),
        (Some(_), Seen::Unreadable(reason)) => {
            ctx.origin.set_bad_records(
                "node",
                vec![store::BadRecord {
                    key: ctx.keys.rollout(),
                    reason: reason.clone(),
                    seen_by: String::new(),
                }],
            );
            return hold("unreadable", Some(reason.clone()));
        }
        (Some(_), Seen::Record(record)) => {
            ctx.origin.set_bad_records("node", Vec::new());
            let target = record.assignment(&ctx.info.name, control);
            ctx.origin
                .set_rollout(Some(view(record, &ctx.info.name, &target)));
            if target.held {
                tracing::debug!(
                    "fleet: revision {} not released to this node; serving revision {}",
                    control.revision,
                    target.revision
                );
            }
            target
        }
    };
    offer(ctx, target.text, target.revision).await;
}

/// Serves the bundle the bundle rollout allows this node, if it serves another one (and has
/// not refused that one already).
async fn apply_bundle(ctx: &Ctx, record: &BundleRecord) {
    let Some(allowed) = record.allowed(&ctx.info.name).map(str::to_string) else {
        return;
    };
    let bundles = ctx.reloader.status().bundle;
    let Some(bundles) = bundles else { return };
    let refused = bundles
        .refused
        .as_ref()
        .is_some_and(|r| r.bundle == allowed);
    if bundles.serving == allowed || refused {
        return;
    }
    let reloader = ctx.reloader.clone();
    let id = allowed.clone();
    match tokio::task::spawn_blocking(move || reloader.serve_bundle(&id)).await {
        Ok(Ok(accepted)) => tracing::info!(
            "fleet: serving bundle {allowed} (bundle generation {}): serial {}",
            record.rollout.candidate,
            accepted.serial
        ),
        Ok(Err(reasons)) => tracing::error!(
            "fleet: bundle {allowed} refused, still serving bundle {}: {}",
            bundles.serving,
            reasons.join("; ")
        ),
        Err(e) => tracing::error!("fleet: reload task failed: {e}"),
    }
}

/// The rollout as status shows it on this node.
fn view(record: &RolloutRecord, node: &str, target: &Assignment) -> RolloutView {
    let rollout = &record.rollout;
    let (phase, halted) = match &rollout.phase {
        Phase::Running => ("running", None),
        Phase::Halted { reason, .. } => ("halted", Some(reason.clone())),
        Phase::Completed { .. } => ("completed", None),
        Phase::Aborted { .. } => ("aborted", None),
    };
    RolloutView {
        phase: phase.into(),
        candidate: rollout.candidate as i64,
        lkg: rollout.lkg as i64,
        released: rollout.released,
        waves: rollout.waves.len(),
        wave: rollout.nodes.get(node).map(|p| p.wave + 1),
        allowed: target.revision,
        held: target.held,
        emergency: rollout.emergency,
        halted,
        coordinator: false,
    }
}

/// A boot id: the process id and the start time in nanoseconds.
fn boot_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos:x}", std::process::id())
}

/// What the rollout's gates judge this node by.
/// From the snapshot served and the status that describes it (read together, so that the
/// probes were answered by the bundle the status names).
fn report(
    (snapshot, status): (&crate::snapshot::Snapshot, &crate::reload::Status),
    origin: &FleetOrigin,
    boot: &str,
    probes: &[String],
) -> NodeReport {
    let (revision, refused) = origin.served();
    let totals = crate::metrics::serving::serving().totals();
    let servfail_index = crate::metrics::serving::rcode_bucket(crate::dns::wire::rcode::SERVFAIL);
    let results = probes
        .iter()
        .map(|text| {
            let (ok, detail) = match parse_probe(text) {
                Some((name, rtype)) => {
                    let answer = crate::answer::probe::probe(snapshot, &name, &rtype);
                    (answer.ok, answer.detail)
                }
                None => (false, "not a probe (\"NAME TYPE\")".to_string()),
            };
            ProbeResult {
                probe: text.clone(),
                ok,
                detail,
            }
        })
        .collect();
    let revision = u64::try_from(revision).unwrap_or(0);
    NodeReport {
        boot: boot.to_string(),
        serving: (revision > 0).then_some(revision),
        tasting: origin.tasting().and_then(|r| u64::try_from(r).ok()),
        refused: refused.and_then(|r| {
            let reasons = status
                .last_refusal
                .as_ref()
                .map_or(String::new(), |f| f.reasons.join("; "));
            u64::try_from(r).ok().map(|r| (r, reasons))
        }),
        queries: totals.queries.iter().fold(0, |a, b| a.wrapping_add(*b)),
        servfail: totals
            .responses
            .iter()
            .fold(0, |a, r| a.wrapping_add(r[servfail_index])),
        probes: (!probes.is_empty()).then_some((revision, results)),
    }
}

/// Seeds an empty fleet from the control text this node serves (create-if-absent: when two
/// nodes start together, one seeds and the other reads what it wrote).
async fn seed(ctx: &Ctx, client: &mut Client) -> Result<store::Control, FleetError> {
    let config = ctx
        .reloader
        .source()
        .read_config()
        .map_err(|e| FleetError::Other(e.to_string()))?;
    let path = config
        .control
        .file
        .ok_or_else(|| FleetError::Other("no control file to seed the fleet from".into()))?;
    let text =
        crate::files::read_text_limited(&path, crate::files::SMALL_FILE_LIMIT).map_err(|e| {
            FleetError::File {
                path: path.display().to_string(),
                message: format!("cannot read: {e}"),
            }
        })?;
    let source = format!("seeded by node {}", ctx.info.name);
    let floor = ctx.reloader.status().serial;
    match store::seed(client, &ctx.keys, &text, &source, floor).await? {
        Ok(control) => {
            tracing::info!(
                "fleet: {} was empty; seeded it from {} (serial {}, revision {})",
                ctx.keys.prefix(),
                path.display(),
                control.serial,
                control.revision
            );
            Ok(control)
        }
        Err(existing) => Ok(existing),
    }
}

/// Hands a version from etcd to the reloader (the one reload path) unless it is already served
/// or already refused.
async fn offer(ctx: &Ctx, text: String, revision: i64) {
    let remote = Remote {
        text,
        revision,
        received: Instant::now(),
    };
    if !ctx.origin.offer(remote) {
        ctx.origin.changed.notify_one();
        return;
    }
    let reloader = ctx.reloader.clone();
    match tokio::task::spawn_blocking(move || reloader.reload(Trigger::Fleet)).await {
        Ok(Ok(accepted)) => tracing::info!(
            "fleet: serving revision {revision} as serial {} ({})",
            accepted.serial,
            accepted.summary
        ),
        Ok(Err(reasons)) => tracing::error!(
            "fleet: revision {revision} refused, still serving the last good version: {}",
            reasons.join("; ")
        ),
        Err(e) => tracing::error!("fleet: reload task failed: {e}"),
    }
}

async fn register_member(ctx: &Ctx, client: &mut Client) -> Result<(), FleetError> {
    let key = ctx.keys.member(&ctx.info.name);
    let response = timed(
        ctx,
        "reading the member list",
        client.get(key.clone(), None),
    )
    .await?;
    let now = rfc3339::format_utc(SystemTime::now());
    let first_seen = response
        .kvs()
        .first()
        .and_then(|kv| serde_json::from_slice::<Member>(kv.value()).ok())
        .map_or(now.clone(), |m| m.first_seen);
    let member = Member {
        name: ctx.info.name.clone(),
        first_seen,
        last_seen: now,
    };
    store::put_json(client, key, &member, None).await
}

/// What this node serves now, as its registry entry.
/// With `rollout` (boot id, probes), the entry carries the rollout's report.
pub fn record(
    reloader: &Reloader,
    origin: &FleetOrigin,
    info: &NodeInfo,
    started: SystemTime,
    started_at: &str,
    rollout: Option<(&str, &[String])>,
) -> NodeRecord {
    let (snapshot, status) = reloader.snapshot_and_status();
    let (revision, refused) = origin.served();
    let zones: BTreeMap<String, u32> = snapshot
        .zones()
        .zones()
        .iter()
        .map(|z| (z.origin.to_string(), z.serial))
        .collect();
    NodeRecord {
        name: info.name.clone(),
        nsid: info.nsid.clone(),
        identity: info.identity.clone(),
        listen: info.listen.iter().map(ToString::to_string).collect(),
        admin: info.admin.map_or("off".to_string(), |a| a.to_string()),
        serial: status.serial,
        revision,
        config_hash: status.config_hash.clone(),
        zones,
        last_refusal: status.last_refusal.as_ref().map(|r| NodeRefusal {
            at: r.at.clone(),
            revision: refused,
            reasons: r.reasons.clone(),
        }),
        started_at: started_at.to_string(),
        uptime_secs: SystemTime::now()
            .duration_since(started)
            .map_or(0, |d| d.as_secs()),
        updated_at: rfc3339::format_utc(SystemTime::now()),
        version: env!("CARGO_PKG_VERSION").to_string(),
        bundle: rollout.and(status.bundle.as_ref()).map(|b| BundleReport {
            serving: b.serving.clone(),
            pending: b.pending.clone(),
            refused: b
                .refused
                .as_ref()
                .map(|r| (r.bundle.clone(), r.reasons.join("; "))),
        }),
        rollout: rollout.map(|(boot, probes)| report((&snapshot, &status), origin, boot, probes)),
        tenants: rollout.map(|_| origin.link().tenants),
        local_override: origin.local_override().map(|o| o.view()),
    }
}

/// Where a node remembers the lease it registers on, for its next start: next to its
/// control cache (`<control file>.lease`).
fn lease_file(ctx: &Ctx) -> Option<std::path::PathBuf> {
    let config = ctx.reloader.source().read_config().ok()?;
    let file = config.control.file?;
    let mut name = file.file_name()?.to_os_string();
    name.push(".lease");
    Some(file.with_file_name(name))
}

fn remembered_lease(ctx: &Ctx) -> Option<i64> {
    let path = lease_file(ctx)?;
    let text = crate::files::read_text_limited(&path, 64).ok()?;
    i64::from_str_radix(text.trim(), 16).ok()
}

/// Best effort: without it, a restart waits for its previous process's lease to end before
/// it registers again (as a second node with the same name must).
fn remember_lease(ctx: &Ctx, lease: i64) {
    let Some(path) = lease_file(ctx) else { return };
    if let Err(e) = crate::files::replace_file(&path, format!("{lease:x}\n").as_bytes()) {
        tracing::warn!(
            "fleet: {}: cannot remember the registry lease: {e}",
            path.display()
        );
    }
}

/// The lease this session registers on, and this process's earlier ones.
struct Registry<'a> {
    lease: i64,
    earlier: &'a [i64],
}

/// Writes the registry entry (on the lease) unless it equals `previous` but for the clock.
/// Another live node registered under the same name keeps it: this node then writes no entry
/// (it would take part in rollouts and shield decisions as that node) and says so in status
/// and the log, trying again on every refresh.
async fn put_record(
    ctx: &Ctx,
    client: &mut Client,
    registry: &Registry<'_>,
    previous: Option<&NodeRecord>,
) -> Result<NodeRecord, FleetError> {
    let record = record(
        &ctx.reloader,
        &ctx.origin,
        &ctx.info,
        ctx.started,
        &ctx.started_at,
        ctx.config
            .rollout
            .as_ref()
            .map(|plan| (ctx.boot.as_str(), plan.probes.as_slice())),
    );
    if let Some(previous) = previous {
        let same = NodeRecord {
            uptime_secs: previous.uptime_secs,
            updated_at: previous.updated_at.clone(),
            ..record.clone()
        };
        if &same == previous {
            return Ok(record);
        }
    }
    let key = ctx.keys.node(&ctx.info.name);
    let json = serde_json::to_string(&record)
        .map_err(|e| FleetError::Other(format!("encoding {key}: {e}")))?;
    let claim = super::put_claimed(
        &ctx.config,
        client,
        &key,
        &json,
        registry.lease,
        registry.earlier,
    )
    .await?;
    let refused = match claim {
        super::Claim::Refused { value, lease } => {
            let theirs = serde_json::from_slice::<NodeRecord>(value.as_bytes()).ok();
            Some(format!(
                "another live node registered as {:?} (lease {lease:x}{}); this node does not register until that lease ends: give each node its own name ([fleet] node or --node)",
                ctx.info.name,
                theirs.map_or(String::new(), |r| format!(
                    ", DNS {}, started {}",
                    r.listen.join(","),
                    r.started_at
                ))
            ))
        }
        super::Claim::TakenOver(_) => {
            tracing::warn!("fleet: {key} was on no lease (written by hand?); replaced it");
            None
        }
        super::Claim::Held => None,
    };
    if let Some(reason) = &refused {
        if ctx.origin.link().registration_refused.as_ref() != Some(reason) {
            tracing::error!("fleet: {reason}");
        }
        ctx.origin.set_registration_refused(refused);
        // Compared against again next time: written nothing.
        return Ok(NodeRecord::default());
    }
    ctx.origin.set_registration_refused(None);
    Ok(record)
}
