//! Shared health probing in a fleet: every node publishes what it probes and what it found in
//! one record, `<prefix>/health/probers/<node>` ([`ProberRecord`], on a lease of its own, so a
//! dead prober's results vanish `lease_ttl_secs` after it dies), watches everyone's records,
//! and from them decides — as every other node does, by the same rules ([`crate::health::shared`])
//! — which targets it probes itself and what the fleet serves for each target.
//!
//! - The live probers are the nodes with a valid record; a target's probers are the
//!   `[fleet.health] probers` (default 2) of them chosen by rendezvous hashing, from different
//!   `[fleet] site`s first.
//! - A record is rewritten whenever one of the node's results changes state and at least every
//!   heartbeat (a third of the lease TTL, 0.5..5 s); each result carries how long ago it was
//!   checked, so a reader ages it by its own clock (no clock sync needed) and a result older
//!   than [`shared::stale_after_ms`] does not count.
//! - A record that does not parse, or names another node than its key, or holds a state that
//!   is not up/down/unknown, is refused with the reason (logged, in status); its node does not
//!   count as a prober. Nothing from etcd can crash the task.
//! - Until its first shared view (etcd not reached since the start) a node probes every target
//!   itself and serves what it sees, as a lone node does.
//! - When etcd is unreachable the node keeps serving the last shared view unchanged
//!   (fail-static, `fail_static` in status), keeps probing what it was assigned, and
//!   reconnects with backoff; back, it re-reads every record and decides again.
//!
//! This task never touches the serving path: it hands its decisions to [`Health`], which
//! swaps a new view in when what is served changes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use etcd_client::{Client, EventType, GetOptions, KeyValue, PutOptions, WatchOptions};
use serde::{Deserialize, Serialize};

use super::client::{grant_lease, Lease};
use super::session::{keep_every, Attempt, Link, Reconnect};
use super::{within, FleetError, Keys};
use crate::config::fleet::{node_name_problem, FleetConfig};
use crate::health::shared::{self, Prober, Vote};
use crate::health::{Health, ProberNode, ProberVote, SharedDecision};
use crate::policy::monitor::MonitorSpec;
use crate::rfc3339;

/// Most results one record may hold (a larger one is refused).
pub const MAX_RESULTS: usize = 65_535;

impl Keys {
    /// Where the probers' records live.
    pub fn health_probers_dir(&self) -> String {
        format!("{}/health/probers/", self.prefix())
    }

    /// One node's prober record.
    pub fn health_prober(&self, node: &str) -> String {
        format!("{}/health/probers/{node}", self.prefix())
    }
}

/// `<prefix>/health/probers/<node>`: a node probing for the fleet, and its results.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProberRecord {
    pub node: String,
    #[serde(default)]
    pub site: Option<String>,
    /// Milliseconds between rewrites of this record at most (readers age results by it).
    pub heartbeat_ms: u64,
    /// When it was written (the writer's clock; for people, not for staleness).
    #[serde(default)]
    pub updated_at: String,
    /// One per target the node probes.
    #[serde(default)]
    pub results: Vec<PublishedResult>,
}

/// One target's result in a [`ProberRecord`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PublishedResult {
    pub target: String,
    /// After the prober's rise/fall: "up", "down" or "unknown" (no result yet).
    pub state: String,
    /// Milliseconds from the last check to the writing of the record.
    #[serde(default)]
    pub age_ms: Option<u64>,
    /// The target's check interval (for readers without the target in their config).
    #[serde(default)]
    pub interval_ms: u64,
    #[serde(default)]
    pub checks: u64,
    #[serde(default)]
    pub failures: u64,
    #[serde(default)]
    pub last_error: Option<String>,
    #[serde(default)]
    pub latency_ms: Option<f64>,
}

/// Parses and checks a prober record read from `key` on `lease` (0: none). A record on no
/// lease does not count: a prober publishes on its lease, so its results vanish when it dies;
/// one written by hand would count as a live prober forever.
pub fn decode(keys: &Keys, key: &str, value: &[u8], lease: i64) -> Result<ProberRecord, String> {
    let name = key
        .strip_prefix(&keys.health_probers_dir())
        .ok_or_else(|| format!("{key}: not a prober key"))?;
    let record: ProberRecord =
        serde_json::from_slice(value).map_err(|e| format!("{key}: not a prober record: {e}"))?;
    if record.node != name {
        return Err(format!("{key}: names node {:?}, not {name:?}", record.node));
    }
    if let Some(problem) = node_name_problem(name) {
        return Err(format!("{key}: node {problem}"));
    }
    if let Some(problem) = record.site.as_deref().and_then(node_name_problem) {
        return Err(format!("{key}: site {problem}"));
    }
    if !(1..=600_000).contains(&record.heartbeat_ms) {
        return Err(format!(
            "{key}: heartbeat_ms {} is outside 1..=600000",
            record.heartbeat_ms
        ));
    }
    if record.results.len() > MAX_RESULTS {
        return Err(format!(
            "{key}: {} results, at most {MAX_RESULTS}",
            record.results.len()
        ));
    }
    let mut seen = HashSet::new();
    for result in &record.results {
        if !matches!(result.state.as_str(), "up" | "down" | "unknown") {
            return Err(format!(
                "{key}: {}: state {:?} is not up, down or unknown",
                result.target, result.state
            ));
        }
        if !seen.insert(result.target.as_str()) {
            return Err(format!("{key}: {} appears twice", result.target));
        }
    }
    // Checked last: a record that does not even parse says so first.
    if lease == 0 {
        return Err(format!(
            "{key}: not on a lease (a prober publishes on its lease; written by hand?)"
        ));
    }
    Ok(record)
}

/// A record as read from etcd: the record (or why it was refused), when this process read
/// it, and its etcd revision.
#[derive(Debug, Clone)]
pub struct Peer {
    pub record: Result<ProberRecord, String>,
    pub received: Instant,
    pub revision: i64,
}

/// Everything decided from the records.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// The targets `me` probes.
    pub probing: HashSet<String>,
    pub decisions: HashMap<String, SharedDecision>,
    pub probers: Vec<ProberNode>,
    pub refused: Vec<String>,
}

/// A target to decide on: its name and check interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitored {
    pub target: String,
    pub interval_ms: u64,
}

impl From<&MonitorSpec> for Monitored {
    fn from(spec: &MonitorSpec) -> Monitored {
        Monitored {
            target: spec.target.clone(),
            interval_ms: spec.interval_ms,
        }
    }
}

/// Every target the valid records publish results for (what `fleet status` decides on).
pub fn published_targets(peers: &BTreeMap<String, Peer>) -> Vec<Monitored> {
    let mut targets: BTreeMap<&str, u64> = BTreeMap::new();
    for record in peers.values().filter_map(|p| p.record.as_ref().ok()) {
        for result in &record.results {
            let interval = targets.entry(&result.target).or_insert(0);
            *interval = (*interval).max(result.interval_ms);
        }
    }
    targets
        .into_iter()
        .map(|(target, interval_ms)| Monitored {
            target: target.to_owned(),
            interval_ms,
        })
        .collect()
}

/// Decides who probes each of `targets` and what the fleet serves for it, from the records
/// in `peers` (by node name) as of `now`; `me` counts as a live prober even before its own
/// record comes back from etcd.
pub fn evaluate(
    specs: &[Monitored],
    peers: &BTreeMap<String, Peer>,
    me: Option<Prober<'_>>,
    wanted: usize,
    now: Instant,
) -> Evaluation {
    let valid: BTreeMap<&str, (&ProberRecord, &Peer)> = peers
        .iter()
        .filter_map(|(name, peer)| Some((name.as_str(), (peer.record.as_ref().ok()?, peer))))
        .collect();
    let mut probers: Vec<Prober<'_>> = valid
        .iter()
        .map(|(name, (record, _))| Prober {
            name,
            site: record.site.as_deref(),
        })
        .collect();
    if let Some(me) = me {
        if !valid.contains_key(me.name) {
            probers.push(me);
        }
    }
    let mut evaluation = Evaluation {
        refused: peers
            .values()
            .filter_map(|p| p.record.as_ref().err().cloned())
            .collect(),
        probers: probers
            .iter()
            .map(|p| ProberNode {
                node: p.name.to_owned(),
                site: p.site.map(str::to_owned),
                targets: valid.get(p.name).map_or(0, |(r, _)| r.results.len()),
            })
            .collect(),
        ..Evaluation::default()
    };
    for spec in specs {
        let chosen = shared::probers_of(&spec.target, &probers, wanted);
        if me.is_some_and(|me| chosen.contains(&me.name)) {
            evaluation.probing.insert(spec.target.clone());
        }
        let mut revision = 0;
        let votes: Vec<ProberVote> = chosen
            .iter()
            .map(|name| {
                let site = probers
                    .iter()
                    .find(|p| p.name == *name)
                    .and_then(|p| p.site.map(str::to_owned));
                let Some((record, peer)) = valid.get(name) else {
                    return missing(name, site);
                };
                let Some(result) = record.results.iter().find(|r| r.target == spec.target) else {
                    return missing(name, site);
                };
                let waited =
                    u64::try_from(now.saturating_duration_since(peer.received).as_millis())
                        .unwrap_or(u64::MAX);
                let age_ms = result.age_ms.map(|a| a.saturating_add(waited));
                let bound = shared::stale_after_ms(spec.interval_ms, record.heartbeat_ms);
                let vote = shared::vote_of(&result.state, age_ms, bound);
                if vote == Vote::Down {
                    revision = revision.max(peer.revision);
                }
                ProberVote {
                    node: (*name).to_owned(),
                    site,
                    vote,
                    age_ms,
                    last_error: result.last_error.clone(),
                }
            })
            .collect();
        let tally = shared::tally(&votes.iter().map(|v| v.vote).collect::<Vec<_>>());
        evaluation.decisions.insert(
            spec.target.clone(),
            SharedDecision {
                probers: votes,
                tally,
                revision,
            },
        );
    }
    evaluation
}

fn missing(name: &str, site: Option<String>) -> ProberVote {
    ProberVote {
        node: name.to_owned(),
        site,
        vote: Vote::Missing,
        age_ms: None,
        last_error: None,
    }
}

struct Ctx {
    config: FleetConfig,
    keys: Keys,
    health: Arc<Health>,
    node: String,
    heartbeat: Duration,
    link: Arc<Link>,
}

/// The node's shared-probing task, on the node's `link` (after [`Health::enable_sharing`]).
pub fn task(
    link: Arc<Link>,
    health: Arc<Health>,
    node: String,
) -> impl std::future::Future<Output = ()> {
    let config = link.config().clone();
    let heartbeat = keep_every(&config);
    let ctx = Ctx {
        keys: Keys::new(&config.prefix),
        config,
        health,
        node,
        heartbeat,
        link,
    };
    run(ctx)
}

async fn run(ctx: Ctx) {
    let mut reconnect = Reconnect::default();
    loop {
        let mut attempt = reconnect.attempt();
        let part = ctx
            .link
            .session(|client| session(&ctx, client, &mut attempt));
        let error = super::ended(part.await);
        ctx.health
            .set_sharing_link(false, Some(format!("health sharing: {error}")));
        reconnect.wait(&attempt).await;
    }
}

async fn session(
    ctx: &Ctx,
    mut client: Client,
    attempt: &mut Attempt,
) -> Result<Infallible, FleetError> {
    let config = &ctx.config;
    let Lease {
        id: lease,
        mut keeper,
        mut keepalives,
    } = grant_lease(config, &mut client, "the health lease").await?;
    publish(ctx, &mut client, lease).await?;
    let dir = ctx.keys.health_probers_dir();
    let response = within(
        config,
        "reading the probers",
        client.get(dir.clone(), Some(GetOptions::new().with_prefix())),
    )
    .await?;
    let mut revision = response.header().map_or(0, |h| h.revision());
    let mut peers = BTreeMap::new();
    for kv in response.kvs() {
        put_peer(ctx, &mut peers, kv);
    }
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(revision + 1);
    let mut watch = within(
        config,
        "watching the probers",
        client.watch(dir, Some(options)),
    )
    .await?;
    ctx.health.set_sharing_link(true, None);
    attempt.connected();
    decide(ctx, &peers, revision);

    let mut tick = tokio::time::interval(ctx.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = watch.message() => {
                let Some(response) = message? else {
                    return Err(FleetError::Other("etcd closed the probers watch".into()));
                };
                if response.canceled() {
                    return Err(FleetError::Other(format!(
                        "etcd cancelled the probers watch: {}",
                        response.cancel_reason()
                    )));
                }
                revision = response.header().map_or(revision, |h| h.revision());
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    match event.event_type() {
                        EventType::Put => put_peer(ctx, &mut peers, kv),
                        EventType::Delete => {
                            let name = kv
                                .key_str()
                                .unwrap_or("")
                                .trim_start_matches(&ctx.keys.health_probers_dir())
                                .to_owned();
                            if peers.remove(&name).is_some() {
                                tracing::info!("health: prober {name} left (its lease expired or it was deleted)");
                            }
                        }
                    }
                }
                decide(ctx, &peers, revision);
            }
            _ = tick.tick() => {
                within(config, "keeping the health lease", keeper.keep_alive()).await?;
                let answer = within(config, "keeping the health lease", keepalives.message()).await?;
                match answer {
                    Some(a) if a.ttl() > 0 => {}
                    _ => return Err(FleetError::Other("the health lease expired".into())),
                }
                publish(ctx, &mut client, lease).await?;
                // Results age without any event: judge staleness again.
                decide(ctx, &peers, revision);
            }
            _ = ctx.health.changed.notified() => {
                // Targets may have changed (a reload): assign before publishing.
                decide(ctx, &peers, revision);
                publish(ctx, &mut client, lease).await?;
            }
        }
    }
}

/// Records a put of a prober key (refused with the reason when it is bad).
fn put_peer(ctx: &Ctx, peers: &mut BTreeMap<String, Peer>, kv: &KeyValue) {
    let key = String::from_utf8_lossy(kv.key()).into_owned();
    let name = key
        .strip_prefix(&ctx.keys.health_probers_dir())
        .unwrap_or(&key)
        .to_owned();
    let record = decode(&ctx.keys, &key, kv.value(), kv.lease());
    if let Err(reason) = &record {
        let known = peers
            .get(&name)
            .is_some_and(|p| p.record.as_ref().err() == Some(reason));
        if !known {
            tracing::error!("health: refused {reason}; {name} does not count as a prober");
        }
    } else if !peers.contains_key(&name) {
        tracing::info!("health: prober {name} joined");
    }
    peers.insert(
        name,
        Peer {
            record,
            received: Instant::now(),
            revision: kv.mod_revision(),
        },
    );
}

fn decide(ctx: &Ctx, peers: &BTreeMap<String, Peer>, revision: i64) {
    let site = ctx.config.site.as_deref();
    let me = Prober {
        name: &ctx.node,
        site,
    };
    let specs: Vec<Monitored> = ctx.health.specs().iter().map(Monitored::from).collect();
    let evaluation = evaluate(
        &specs,
        peers,
        Some(me),
        ctx.config.health.probers,
        Instant::now(),
    );
    // The verdicts first: the first shared view takes over from this node's own checks
    // before it stops the ones the fleet assigns elsewhere.
    ctx.health.apply_shared(
        evaluation.decisions,
        revision,
        evaluation.probers,
        evaluation.refused,
    );
    ctx.health.set_probing(evaluation.probing);
}

/// Writes this node's record (on the health lease).
async fn publish(ctx: &Ctx, client: &mut Client, lease: i64) -> Result<(), FleetError> {
    let record = ProberRecord {
        node: ctx.node.clone(),
        site: ctx.config.site.clone(),
        heartbeat_ms: u64::try_from(ctx.heartbeat.as_millis()).unwrap_or(5000),
        updated_at: rfc3339::format_utc(SystemTime::now()),
        results: ctx
            .health
            .local_results()
            .into_iter()
            .map(|r| PublishedResult {
                target: r.target,
                state: r.state.to_owned(),
                age_ms: r
                    .age
                    .map(|a| u64::try_from(a.as_millis()).unwrap_or(u64::MAX)),
                interval_ms: r.interval_ms,
                checks: r.checks,
                failures: r.failures,
                last_error: r.last_error,
                latency_ms: r.last_latency.map(|l| l.as_secs_f64() * 1000.0),
            })
            .collect(),
    };
    let key = ctx.keys.health_prober(&ctx.node);
    let json = serde_json::to_string(&record)
        .map_err(|e| FleetError::Other(format!("encoding {key}: {e}")))?;
    within(
        &ctx.config,
        "publishing health results",
        client.put(key, json, Some(PutOptions::new().with_lease(lease))),
    )
    .await?;
    Ok(())
}

/// Every prober record under the fleet's prefix (for `steerdns fleet status`).
pub async fn read_all(
    client: &mut Client,
    keys: &Keys,
) -> Result<BTreeMap<String, Peer>, FleetError> {
    let response = client
        .get(
            keys.health_probers_dir(),
            Some(GetOptions::new().with_prefix()),
        )
        .await?;
    let now = Instant::now();
    Ok(response
        .kvs()
        .iter()
        .map(|kv| {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let name = key
                .strip_prefix(&keys.health_probers_dir())
                .unwrap_or(&key)
                .to_owned();
            let peer = Peer {
                record: decode(keys, &key, kv.value(), kv.lease()),
                received: now,
                revision: kv.mod_revision(),
            };
            (name, peer)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(target: &str) -> Monitored {
        Monitored {
            target: target.into(),
            interval_ms: 1000,
        }
    }

    fn record(node: &str, results: &[(&str, &str, u64)]) -> Vec<u8> {
        serde_json::to_vec(&ProberRecord {
            node: node.into(),
            site: None,
            heartbeat_ms: 500,
            updated_at: String::new(),
            results: results
                .iter()
                .map(|(target, state, age)| PublishedResult {
                    target: (*target).into(),
                    state: (*state).into(),
                    age_ms: Some(*age),
                    interval_ms: 1000,
                    checks: 1,
                    failures: 0,
                    last_error: None,
                    latency_ms: None,
                })
                .collect(),
        })
        .unwrap_or_default()
    }

    #[test]
    fn bad_records_are_refused_with_the_reason() {
        let keys = Keys::new("/p");
        let key = keys.health_prober("ns1");
        assert!(decode(&keys, &key, &record("ns1", &[("t", "up", 1)]), 7).is_ok());
        let unleased = decode(&keys, &key, &record("ns1", &[("t", "up", 1)]), 0).unwrap_err();
        assert!(unleased.contains("not on a lease"), "{unleased}");
        let cases: [(&[u8], &str); 5] = [
            (b"{not json", "not a prober record"),
            (&record("ns2", &[]), "names node \"ns2\""),
            (&record("ns1", &[("t", "sideways", 1)]), "is not up, down"),
            (&record("ns1", &[("t", "up", 1), ("t", "up", 1)]), "twice"),
            (b"{\"node\":\"ns1\",\"heartbeat_ms\":0}", "heartbeat_ms 0"),
        ];
        for (value, reason) in cases {
            let err = decode(&keys, &key, value, 7).unwrap_err();
            assert!(err.contains(reason) && err.starts_with(&key), "{err}");
        }
    }

    #[test]
    fn every_reader_decides_the_same_from_the_same_records() {
        let keys = Keys::new("/p");
        let now = Instant::now();
        let specs: Vec<Monitored> = (0..20)
            .map(|i| spec(&format!("tcp:10.0.0.{i}:80")))
            .collect();
        let names = ["ns1", "ns2", "ns3"];
        // First: who probes what (each node publishes nothing yet).
        let mut peers = BTreeMap::new();
        for name in names {
            let key = keys.health_prober(name);
            peers.insert(
                name.to_string(),
                Peer {
                    record: decode(&keys, &key, &record(name, &[]), 7),
                    received: now,
                    revision: 1,
                },
            );
        }
        let views: Vec<Evaluation> = names
            .iter()
            .map(|n| {
                evaluate(
                    &specs,
                    &peers,
                    Some(Prober {
                        name: n,
                        site: None,
                    }),
                    2,
                    now,
                )
            })
            .collect();
        for spec in &specs {
            let probing: Vec<&str> = names
                .iter()
                .zip(&views)
                .filter(|(_, v)| v.probing.contains(&spec.target))
                .map(|(n, _)| *n)
                .collect();
            assert_eq!(probing.len(), 2, "{}: {probing:?}", spec.target);
            let assigned: Vec<&str> = views[0].decisions[&spec.target]
                .probers
                .iter()
                .map(|p| p.node.as_str())
                .collect();
            assert_eq!(assigned.len(), 2);
            assert!(probing.iter().all(|p| assigned.contains(p)));
            assert_eq!(views[0].decisions[&spec.target].tally.verdict, None);
        }
        // Then every prober says down for everything it probes: every reader takes all down;
        // results older than the staleness bound do not count.
        for (name, view) in names.iter().zip(&views) {
            let mine: Vec<(&str, &str, u64)> = view
                .probing
                .iter()
                .map(|t| (t.as_str(), "down", 10))
                .collect();
            let key = keys.health_prober(name);
            peers.insert(
                name.to_string(),
                Peer {
                    record: decode(&keys, &key, &record(name, &mine), 7),
                    received: now,
                    revision: 7,
                },
            );
        }
        for reader in names {
            let view = evaluate(
                &specs,
                &peers,
                Some(Prober {
                    name: reader,
                    site: None,
                }),
                2,
                now,
            );
            for decision in view.decisions.values() {
                assert_eq!(decision.tally.verdict, Some(false));
                assert_eq!(decision.revision, 7);
            }
            let later = now + Duration::from_secs(10);
            let stale = evaluate(&specs, &peers, None, 2, later);
            assert!(stale.decisions.values().all(|d| d.tally.verdict.is_none()));
        }
        // A bad record takes its node out of the probers; the reason is kept.
        if let Some(peer) = peers.get_mut("ns3") {
            peer.record = Err("bad".into());
        }
        let view = evaluate(&specs, &peers, None, 2, now);
        assert_eq!(view.refused, vec!["bad".to_string()]);
        assert_eq!(view.probers.len(), 2);
    }
}
