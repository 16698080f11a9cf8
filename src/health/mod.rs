//! Health probing: owns the monitored targets' states and the tasks that check them, and
//! publishes what they say as a [`HealthView`] that the policy reads per query.
//!
//! - Every distinct target (one [`MonitorSpec`]) has one task that checks it once per interval,
//!   at a random phase (so targets do not probe in lockstep), with at most
//!   [`MAX_CONCURRENT_CHECKS`] checks in flight; however many endpoints or profiles name a
//!   target, it is probed once per interval.
//! - Each result goes through the target's rise/fall [`machine`]; when a target changes state,
//!   a new view is built whole and swapped into the current [`Board`] (one atomic store).
//! - A snapshot gets a board from [`Health::attach`] before it is swapped in: targets that stay
//!   keep their state across reloads, new ones start in their `startup` state, and the tasks of
//!   targets no longer used stop.
//!
//! - In a fleet with shared probing ([`Health::enable_sharing`]), this node probes only the
//!   targets the fleet assigns it ([`Health::set_probing`]) and serves what the fleet's quorum
//!   says ([`Health::apply_shared`], see [`shared`]); the fleet's health task
//!   (`crate::fleet::health`) publishes this node's results and brings the others'.
//!
//! - A cell's probe (`[topology.cells]`, issue 31) is a target like an endpoint's; each view
//!   built also names the cells whose probe is down ([`HealthView::cells`]), so a tenant's
//!   answer leaves them out without looking at slots, and shared probing covers them too.
//!
//! Nothing here runs on the serving path; the serving path only loads the board's view.

pub mod lookup;
pub mod machine;
pub mod probe;
pub mod shared;
pub mod tenants;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::cells::blame::ImpairedCell;
use crate::cells::CellTopology;
use crate::hash::{fnv1a64_more, FNV1A64_OFFSET_BASIS};
use crate::policy::monitor::MonitorSpec;
use crate::policy::{CompiledPolicies, HealthView, SlotHealth};
use machine::Machine;

/// Most checks in flight at once (across all targets).
pub const MAX_CONCURRENT_CHECKS: usize = 32;

/// The `User-Agent` of HTTP checks (a fleet node adds its name: backends see who probes).
pub const DEFAULT_AGENT: &str = "steerdns-health";

/// The health view one snapshot reads, indexed by its policies' monitor slots.
#[derive(Default)]
pub struct Board {
    /// Target of each slot.
    targets: Vec<String>,
    /// The cells with a probe (cell, slot) and their topology: each view built names the
    /// cells whose slot is down ([`HealthView::cells`]).
    cells: Option<CellProbes>,
    view: ArcSwap<HealthView>,
}

/// The cells a board's view reports on: their topology and each probed cell with its slot.
type CellProbes = (Arc<CellTopology>, Vec<(ImpairedCell, u16)>);

impl Board {
    /// The current view (lock-free).
    pub fn view(&self) -> arc_swap::Guard<Arc<HealthView>> {
        self.view.load()
    }

    /// Whether any target is monitored (else the view never needs loading).
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// Whether any cell has a probe (else tenants' anycast answers never load the view).
    pub fn probes_cells(&self) -> bool {
        self.cells.is_some()
    }
}

/// One target's state and what status shows about it.
struct Target {
    spec: MonitorSpec,
    machine: Machine,
    /// Health generation in which it was last up (0: never).
    last_up: u64,
    last_change: Option<SystemTime>,
    last_error: Option<String>,
    last_latency: Option<Duration>,
    last_check: Option<SystemTime>,
    checks: u64,
    failures: u64,
    /// Identifies the task probing it (a replaced target's old task finds a new id and stops).
    task: u64,
    abort: Option<tokio::task::AbortHandle>,
    /// Shared probing: the fleet's verdict (kept while no prober reports), the etcd revision
    /// at which it was last voted down, and what status shows about it.
    shared_up: Option<bool>,
    shared_last_up: u64,
    shared: Option<SharedTarget>,
}

impl Target {
    fn new(spec: &MonitorSpec) -> Target {
        Target {
            spec: spec.clone(),
            machine: Machine::new(spec.startup, spec.fall, spec.rise),
            last_up: 0,
            last_change: None,
            last_error: None,
            last_latency: None,
            last_check: None,
            checks: 0,
            failures: 0,
            task: 0,
            abort: None,
            shared_up: None,
            shared_last_up: 0,
            shared: None,
        }
    }

    fn stop_probing(&mut self) {
        if let Some(abort) = self.abort.take() {
            abort.abort();
        }
        self.task = 0;
    }

    /// Whether its endpoints are served, and since when they were last up (view generations
    /// or, shared, etcd revisions).
    fn slot(&self, sharing: bool) -> SlotHealth {
        if sharing {
            SlotHealth {
                up: self
                    .shared_up
                    .unwrap_or(self.spec.startup != crate::policy::monitor::Startup::Down),
                last_up: self.shared_last_up,
            }
        } else {
            SlotHealth {
                up: self.machine.state().serves(),
                last_up: self.last_up,
            }
        }
    }

    /// The state served, as status says it.
    fn served_state(&self, sharing: bool) -> &'static str {
        match (sharing, self.shared_up) {
            (false, _) => self.machine.state().as_str(),
            (true, Some(true)) => "up",
            (true, Some(false)) => "down",
            (true, None) => self.spec.startup.as_str(),
        }
    }
}

/// Shared probing in a fleet: who this node is, what it probes, and the etcd link.
struct Sharing {
    status: SharingStatus,
    probing: HashSet<String>,
    /// Whether a shared view was ever applied (so a lost link serves it, fail-static).
    applied: bool,
}

struct Inner {
    targets: HashMap<String, Target>,
    board: Arc<Board>,
    /// Bumped at every state change.
    generation: u64,
    next_task: u64,
    sharing: Option<Sharing>,
    /// What HTTP checks send as `User-Agent`.
    agent: Arc<str>,
}

impl Inner {
    /// Whether this node probes `target`: every target alone or until the fleet's first
    /// shared view, then only those the fleet assigns it.
    fn probes(&self, target: &str) -> bool {
        self.sharing
            .as_ref()
            .is_none_or(|s| !s.applied || s.probing.contains(target))
    }

    /// Whether what is served comes from the fleet's shared view (else from this node's own
    /// checks: no sharing, or no shared view yet).
    fn serves_shared(&self) -> bool {
        self.sharing.as_ref().is_some_and(|s| s.applied)
    }
}

/// The health service: targets, their states and tasks, and the board being served.
pub struct Health {
    inner: Mutex<Inner>,
    runtime: OnceLock<tokio::runtime::Handle>,
    permits: Arc<tokio::sync::Semaphore>,
    started: Instant,
    /// Woken when what this node publishes to the fleet changed: a local result changed
    /// state, or a reload changed the targets (shared probing only).
    pub changed: tokio::sync::Notify,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            inner: Mutex::new(Inner {
                targets: HashMap::new(),
                board: Arc::new(Board::default()),
                generation: 1,
                next_task: 1,
                sharing: None,
                agent: Arc::from(DEFAULT_AGENT),
            }),
            runtime: OnceLock::new(),
            permits: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_CHECKS)),
            started: Instant::now(),
            changed: tokio::sync::Notify::new(),
        }
    }
}

/// A target as status shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TargetStatus {
    pub target: String,
    /// "unknown" (no result yet, served as up), "up" or "down".
    pub state: String,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub fall: u32,
    pub rise: u32,
    pub startup: String,
    /// Consecutive results against the current state (towards fall or rise).
    pub streak: u32,
    pub last_change: Option<String>,
    pub last_check: Option<String>,
    pub last_error: Option<String>,
    pub last_latency_ms: Option<f64>,
    pub checks: u64,
    pub failures: u64,
    /// Shared probing: who probes it and what they say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<SharedTarget>,
}

/// A target under shared probing, as status shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SharedTarget {
    /// `"quorum"` (what its reporting probers say), `"kept"` (none reports a fresh result:
    /// the last verdict is served), `"startup"` (no result yet: the startup state is served)
    /// or `"local"` (no shared view yet: this node's own checks are served).
    pub decided_by: String,
    /// Its assigned probers, best first, and what each says.
    pub probers: Vec<ProberVote>,
    /// Whether this node is one of them.
    pub probed_here: bool,
    /// This node's own rise/fall state for it, when it probes it.
    pub local_state: Option<String>,
    pub up_votes: usize,
    pub down_votes: usize,
    pub reporting: usize,
    /// Down votes that take it down (a strict majority of the reporting probers).
    pub quorum: usize,
}

/// One assigned prober's say on a target.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProberVote {
    pub node: String,
    pub site: Option<String>,
    pub vote: shared::Vote,
    /// Milliseconds since its last check, by this node's reckoning.
    pub age_ms: Option<u64>,
    pub last_error: Option<String>,
}

/// One node probing for the fleet.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProberNode {
    pub node: String,
    pub site: Option<String>,
    /// Targets it publishes results for.
    pub targets: usize,
}

/// Shared probing as status shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SharingStatus {
    pub node: String,
    pub site: Option<String>,
    /// Probers wanted per target (`[fleet.health] probers`).
    pub probers_per_target: usize,
    /// Whether the link to etcd is up (results published and read).
    pub connected: bool,
    /// Since when `connected` holds.
    pub since: String,
    pub last_error: Option<String>,
    /// etcd is unreachable and the last shared view is served unchanged.
    pub fail_static: bool,
    /// The live probers (every node of the fleet with shared probing).
    pub probers: Vec<ProberNode>,
    /// etcd records refused, with the reason (their nodes do not count as probers).
    pub refused: Vec<String>,
    /// etcd revision of the view last applied.
    pub revision: i64,
    /// Targets this node probes.
    pub probing_here: Vec<String>,
}

/// This node's result for a target it probes, to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalResult {
    pub target: String,
    /// "unknown" (no result yet), "up" or "down": after rise/fall.
    pub state: &'static str,
    /// Since its last check.
    pub age: Option<Duration>,
    pub interval_ms: u64,
    pub checks: u64,
    pub failures: u64,
    pub last_error: Option<String>,
    pub last_latency: Option<Duration>,
}

/// The fleet's say on one target, from [`shared::tally`] of its probers' votes.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedDecision {
    pub probers: Vec<ProberVote>,
    pub tally: shared::Tally,
    /// etcd revision of the newest record voting down (0: none): where a target voted down
    /// was last up, the same on every node (serve-last-healthy compares these).
    pub revision: i64,
}

impl Health {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The board for a snapshot with these policies, made current: the targets it monitors
    /// keep their state (or start in their startup state), the others stop being probed.
    pub fn attach(self: &Arc<Self>, policies: Option<&CompiledPolicies>) -> Arc<Board> {
        let specs = policies.map_or(&[][..], |p| p.monitors());
        let mut inner = self.lock();
        let mut keep: HashMap<String, Target> = HashMap::new();
        for spec in specs {
            let existing = inner.targets.remove(&spec.target);
            let target = match existing {
                Some(t) if t.spec == *spec => t,
                other => {
                    if let Some(mut old) = other {
                        old.stop_probing();
                    }
                    Target::new(spec)
                }
            };
            keep.insert(spec.target.clone(), target);
        }
        for (_, mut gone) in inner.targets.drain() {
            gone.stop_probing();
        }
        inner.targets = keep;
        let cells = policies.and_then(|p| {
            let probes = p.cell_monitors();
            let topology = p.cells.clone()?;
            (!probes.is_empty()).then(|| (topology, probes.to_vec()))
        });
        let board = Arc::new(Board {
            targets: specs.iter().map(|s| s.target.clone()).collect(),
            cells,
            view: ArcSwap::from_pointee(HealthView::default()),
        });
        board.view.store(Arc::new(view_of(&inner, &board)));
        inner.board = board.clone();
        if let Some(runtime) = self.runtime.get() {
            self.spawn_missing(&mut inner, runtime);
        }
        if inner.sharing.is_some() {
            // The fleet task assigns the new targets (and publishes without the old ones).
            self.changed.notify_one();
        }
        board
    }

    /// Starts probing (the targets attached so far and every one attached later).
    pub fn start(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        let runtime = self.runtime.get_or_init(|| runtime.clone());
        let mut inner = self.lock();
        self.spawn_missing(&mut inner, runtime);
    }

    fn spawn_missing(self: &Arc<Self>, inner: &mut Inner, runtime: &tokio::runtime::Handle) {
        let mut next_task = inner.next_task;
        let probing: Option<HashSet<String>> = inner
            .sharing
            .as_ref()
            .filter(|s| s.applied)
            .map(|s| s.probing.clone());
        let agent = inner.agent.clone();
        for target in inner.targets.values_mut().filter(|t| t.abort.is_none()) {
            if probing
                .as_ref()
                .is_some_and(|p| !p.contains(&target.spec.target))
            {
                continue;
            }
            next_task += 1;
            target.task = next_task;
            let task = run_target(
                self.clone(),
                target.spec.clone(),
                next_task,
                phase(&target.spec, self.started.elapsed()),
                agent.clone(),
            );
            target.abort = Some(runtime.spawn(task).abort_handle());
        }
        inner.next_task = next_task;
    }

    /// Records one check result; publishes a new view if the target changed state.
    fn record(&self, key: &str, task: u64, result: Result<(), String>, latency: Duration) -> bool {
        let mut inner = self.lock();
        let generation = inner.generation;
        let Some(target) = inner.targets.get_mut(key).filter(|t| t.task == task) else {
            return false;
        };
        let now = SystemTime::now();
        target.checks += 1;
        target.last_check = Some(now);
        target.last_latency = Some(latency);
        let ok = result.is_ok();
        if let Err(e) = result {
            target.failures += 1;
            target.last_error = Some(e);
        }
        let was = target.machine.state();
        let Some(state) = target.machine.observe(ok) else {
            return true;
        };
        target.last_change = Some(now);
        if was.serves() && !state.serves() {
            target.last_up = generation;
        }
        let level = if state.serves() {
            tracing::Level::INFO
        } else {
            tracing::Level::WARN
        };
        let reason = target.last_error.clone().unwrap_or_default();
        if level == tracing::Level::WARN {
            tracing::warn!(
                "health: {key} {} -> {} ({reason})",
                was.as_str(),
                state.as_str()
            );
        } else {
            tracing::info!("health: {key} {} -> {}", was.as_str(), state.as_str());
        }
        if inner.sharing.is_some() {
            // Publish: once the fleet has a shared view, its quorum decides what is served.
            self.changed.notify_one();
        }
        if !inner.serves_shared() && state.serves() != was.serves() {
            inner.generation += 1;
            let board = inner.board.clone();
            board.view.store(Arc::new(view_of(&inner, &board)));
        }
        true
    }

    /// Every target, by target name.
    pub fn status(&self) -> Vec<TargetStatus> {
        let inner = self.lock();
        let sharing = inner.sharing.is_some();
        let shared_view = inner.serves_shared();
        let mut out: Vec<TargetStatus> = inner
            .targets
            .values()
            .map(|t| TargetStatus {
                target: t.spec.target.clone(),
                state: t.served_state(shared_view).to_owned(),
                interval_ms: t.spec.interval_ms,
                timeout_ms: t.spec.timeout_ms,
                fall: t.spec.fall,
                rise: t.spec.rise,
                startup: t.spec.startup.as_str().to_owned(),
                streak: t.machine.streak(),
                last_change: t.last_change.map(crate::rfc3339::format_utc),
                last_check: t.last_check.map(crate::rfc3339::format_utc),
                last_error: t.last_error.clone(),
                last_latency_ms: t.last_latency.map(|d| d.as_secs_f64() * 1000.0),
                checks: t.checks,
                failures: t.failures,
                shared: sharing.then(|| {
                    let mut shared = t.shared.clone().unwrap_or_default();
                    // Now, not as of the last shared view (which a lost link freezes).
                    shared.local_state = (t.task != 0).then(|| t.machine.state().as_str().into());
                    if !shared_view {
                        shared.decided_by = "local".into();
                    }
                    shared
                }),
            })
            .collect();
        out.sort_by(|a, b| a.target.cmp(&b.target));
        out
    }
}

/// One monitored endpoint as status shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EndpointHealth {
    pub profile: String,
    pub endpoint: String,
    pub target: String,
    /// The target's state ("unknown", "up", "down").
    pub state: String,
    /// The control file's `force_up`: served as up whatever the state.
    pub forced_up: bool,
    /// Whether health lets it be served (forced up, or not down).
    pub served: bool,
}

/// Status of the monitors: every target and every monitored endpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HealthReport {
    pub targets: Vec<TargetStatus>,
    pub endpoints: Vec<EndpointHealth>,
    /// Shared probing in a fleet (absent: this node probes every target itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<SharingStatus>,
    /// Name lookups of probe targets in flight now, at most [`lookup::MAX_LOOKUPS`] (all of
    /// them for long: the system resolver hangs).
    #[serde(default)]
    pub lookups_in_flight: usize,
}

impl Health {
    /// Targets and the endpoints of `policies` that use them (`None` when nothing is monitored).
    pub fn report(&self, policies: Option<&CompiledPolicies>) -> Option<HealthReport> {
        let policies = policies?;
        if policies.monitors().is_empty() {
            return None;
        }
        let targets = self.status();
        let endpoints = policies
            .monitored_endpoints()
            .into_iter()
            .filter_map(|(profile, endpoint, slot, forced_up)| {
                let spec = policies.monitors().get(usize::from(slot))?;
                let state = targets
                    .iter()
                    .find(|t| t.target == spec.target)
                    .map_or_else(|| spec.startup.as_str().to_owned(), |t| t.state.clone());
                Some(EndpointHealth {
                    profile: profile.to_owned(),
                    endpoint: endpoint.to_owned(),
                    target: spec.target.clone(),
                    served: forced_up || state != "down",
                    state,
                    forced_up,
                })
            })
            .collect();
        let sharing = self.lock().sharing.as_ref().map(|s| s.status.clone());
        Some(HealthReport {
            targets,
            endpoints,
            sharing,
            lookups_in_flight: lookup::Lookups::system().in_flight(),
        })
    }
}

/// The view of `board`'s slots from the targets' states.
fn view_of(inner: &Inner, board: &Board) -> HealthView {
    let sharing = inner.serves_shared();
    let view = HealthView::new(
        board
            .targets
            .iter()
            .map(|key| {
                inner
                    .targets
                    .get(key)
                    .map_or_else(SlotHealth::default, |t| t.slot(sharing))
            })
            .collect(),
    );
    match &board.cells {
        Some((topology, probes)) => view.with_cells(topology, probes),
        None => view,
    }
}

/// When a target's first check runs: soon (at most a quarter interval, at most 500 ms, after
/// it is attached) and spread over targets by a hash of the target and the time.
fn phase(spec: &MonitorSpec, now: Duration) -> Duration {
    let spread = (spec.interval_ms / 4).min(500);
    if spread == 0 {
        return Duration::ZERO;
    }
    let h = fnv1a64_more(
        FNV1A64_OFFSET_BASIS ^ now.as_nanos() as u64,
        spec.target.as_bytes(),
    );
    Duration::from_millis(h % spread)
}

/// Checks one target once per interval until aborted (or replaced).
async fn run_target(
    health: Arc<Health>,
    spec: MonitorSpec,
    task: u64,
    phase: Duration,
    agent: Arc<str>,
) {
    let interval = Duration::from_millis(spec.interval_ms);
    let timeout = Duration::from_millis(spec.timeout_ms);
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + phase, interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Ok(permit) = health.permits.clone().acquire_owned().await else {
            return;
        };
        let started = Instant::now();
        let result = match tokio::time::timeout(timeout, probe::check(&spec.check, &agent)).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", spec.timeout_ms)),
        };
        drop(permit);
        if !health.record(&spec.target, task, result, started.elapsed()) {
            return;
        }
    }
}
