//! Tenants' own monitors (`[monitors]` in a tenant's document, issue 31): owns their states,
//! the tasks that check them and each tenant's probe budget, and publishes what they say into
//! the tenant's [`OwnMonitors`] view, which the tenant's answers read.
//!
//! Isolation is by construction, not by tuning:
//! - every tenant with monitors has a scheduler task of its own, with its own queue of due
//!   checks, its own budget (`[tenants] probes_per_second`: checks started per second) and its
//!   own [`MAX_IN_FLIGHT`] slots for checks in flight; nothing is shared with another tenant's
//!   scheduler nor with the platform's probing ([`super::Health`]'s permits), so a tenant whose
//!   10,000 checks time out delays only its own;
//! - a tenant whose monitors ask for more checks than its budget has them spread out: a due
//!   check waits for the budget's next start, so each interval stretches (counted as deferred,
//!   and the tenant is shown throttled in status and metrics);
//! - a tenant's monitors must name addresses (the document's checks), so its checks never wait
//!   for the system resolver's few lookups, which the platform's probes use.
//!
//! Attached by the tenant registry when a tenant's version with monitors is served (states are
//! kept across versions for targets whose settings did not change), detached when it goes.
//! Nothing here runs on the serving path, which only loads the tenant's view.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use super::machine::Machine;
use crate::policy::monitor::MonitorSpec;
use crate::policy::{HealthView, OwnMonitors, SlotHealth};

/// Most checks of one tenant in flight at once.
pub const MAX_IN_FLIGHT: usize = 16;

/// A tenant deferred a check this recently is shown throttled.
const THROTTLED_FOR: Duration = Duration::from_secs(10);

/// Every tenant's monitors and probing.
pub struct TenantProbes {
    tenants: Mutex<HashMap<String, Entry>>,
    runtime: OnceLock<tokio::runtime::Handle>,
    /// The budget, in thousandths of a check per second (read by every scheduler at each
    /// start, so a platform change applies at once).
    rate_millis: Arc<AtomicU64>,
    next_task: AtomicU64,
    started: Instant,
}

impl Default for TenantProbes {
    fn default() -> Self {
        TenantProbes {
            tenants: Mutex::new(HashMap::new()),
            runtime: OnceLock::new(),
            rate_millis: Arc::new(AtomicU64::new(rate_to_millis(
                crate::tenant::document::DEFAULT_PROBES_PER_SECOND,
            ))),
            next_task: AtomicU64::new(1),
            started: Instant::now(),
        }
    }
}

fn rate_to_millis(rate: f64) -> u64 {
    (rate * 1000.0).round().max(1.0) as u64
}

struct Entry {
    probed: Arc<Probed>,
    abort: Option<tokio::task::AbortHandle>,
}

/// One tenant's probing, shared by its scheduler and its checks.
struct Probed {
    inner: Mutex<ProbedInner>,
    /// Checks started later than due (budget or slots): their intervals stretched.
    deferred: AtomicU64,
    /// Milliseconds after [`TenantProbes::started`] of the last deferral (0: never).
    last_deferred_ms: AtomicU64,
    in_flight: AtomicU64,
}

struct ProbedInner {
    board: Arc<OwnMonitors>,
    /// By slot − base.
    targets: Vec<TargetState>,
    /// Bumped at every change of state.
    generation: u64,
    /// The scheduler task whose checks are recorded (an old task's are not).
    task: u64,
}

struct TargetState {
    machine: Machine,
    last_up: u64,
    last_change: Option<SystemTime>,
    last_check: Option<SystemTime>,
    last_error: Option<String>,
    last_latency: Option<Duration>,
    checks: u64,
    failures: u64,
}

impl TargetState {
    fn new(spec: &MonitorSpec) -> TargetState {
        TargetState {
            machine: Machine::new(spec.startup, spec.fall, spec.rise),
            last_up: 0,
            last_change: None,
            last_check: None,
            last_error: None,
            last_latency: None,
            checks: 0,
            failures: 0,
        }
    }
}

/// One tenant's monitor as status shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TenantMonitorStatus {
    /// Its name in the document (`[monitors.NAME]`).
    pub name: String,
    pub target: String,
    /// "unknown" (no result yet, served as up), "up" or "down".
    pub state: String,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub last_check: Option<String>,
    pub last_error: Option<String>,
    pub last_latency_ms: Option<f64>,
    pub checks: u64,
    pub failures: u64,
}

/// One tenant's probing as status shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TenantProbeStatus {
    /// Its budget: checks started per second at most (`[tenants] probes_per_second`).
    pub budget_per_second: f64,
    /// What its monitors ask for: the sum of 1 / interval.
    pub demand_per_second: f64,
    /// Its checks are being spread out: it asks for more than its budget, or a check started
    /// late in the last 10 s.
    pub throttled: bool,
    /// Checks started later than due, since it was attached.
    pub deferred_total: u64,
    pub in_flight: u64,
    pub monitors: Vec<TenantMonitorStatus>,
}

/// One tenant's probing in the status summary (`/v1/status` `tenants.probes`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TenantProbeSummary {
    pub tenant: String,
    /// Its monitors (targets probed), and how many are down.
    pub monitors: usize,
    pub down: usize,
    pub throttled: bool,
    pub deferred_total: u64,
    pub demand_per_second: f64,
    pub budget_per_second: f64,
}

impl TenantProbes {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.tenants.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Each tenant's budget, in checks started per second (the platform's `[tenants]
    /// probes_per_second`).
    pub fn set_budget(&self, probes_per_second: f64) {
        self.rate_millis
            .store(rate_to_millis(probes_per_second), Ordering::Relaxed);
    }

    fn budget(&self) -> f64 {
        self.rate_millis.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// Starts probing (the tenants attached so far and every one attached later).
    pub fn start(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        let runtime = self.runtime.get_or_init(|| runtime.clone());
        let mut tenants = self.lock();
        for entry in tenants.values_mut().filter(|e| e.abort.is_none()) {
            entry.abort = Some(self.spawn(&entry.probed, runtime));
        }
    }

    /// `tenant`'s version with these monitors is served (or about to be): they are probed
    /// from now on and their states published into `monitors`. Targets whose settings did
    /// not change keep their state; with the same monitors as before, probing goes on as it
    /// was.
    pub fn attach(self: &Arc<Self>, tenant: &str, monitors: &Arc<OwnMonitors>) {
        let mut tenants = self.lock();
        if let Some(entry) = tenants.get(tenant) {
            let mut inner = lock_inner(&entry.probed);
            if Arc::ptr_eq(&inner.board, monitors) {
                return;
            }
            if inner.board.same_specs(monitors) {
                inner.board = monitors.clone();
                monitors.publish(view_of(&inner));
                return;
            }
        }
        let old = tenants.remove(tenant);
        let mut targets: Vec<TargetState> = monitors
            .specs
            .iter()
            .map(|(_, spec)| TargetState::new(spec))
            .collect();
        let mut generation = 1;
        if let Some(mut old) = old {
            if let Some(abort) = old.abort.take() {
                abort.abort();
            }
            let mut inner = lock_inner(&old.probed);
            generation = inner.generation + 1;
            let was = std::mem::take(&mut inner.targets);
            let old_specs = inner.board.specs.clone();
            let mut was: HashMap<String, (MonitorSpec, TargetState)> = old_specs
                .into_iter()
                .zip(was)
                .map(|((_, spec), state)| (spec.target.clone(), (spec, state)))
                .collect();
            for ((_, spec), target) in monitors.specs.iter().zip(targets.iter_mut()) {
                if let Some((old_spec, state)) = was.remove(&spec.target) {
                    if old_spec == *spec {
                        *target = state;
                    }
                }
            }
        }
        let task = self.next_task.fetch_add(1, Ordering::Relaxed);
        let inner = ProbedInner {
            board: monitors.clone(),
            targets,
            generation,
            task,
        };
        monitors.publish(view_of(&inner));
        let probed = Arc::new(Probed {
            inner: Mutex::new(inner),
            deferred: AtomicU64::new(0),
            last_deferred_ms: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
        });
        let abort = self.runtime.get().map(|rt| self.spawn(&probed, rt));
        tenants.insert(tenant.to_string(), Entry { probed, abort });
    }

    /// `tenant` is gone, or its version served has no monitors: its probing stops.
    pub fn detach(&self, tenant: &str) {
        if let Some(mut entry) = self.lock().remove(tenant) {
            if let Some(abort) = entry.abort.take() {
                abort.abort();
            }
            lock_inner(&entry.probed).task = 0;
        }
    }

    /// Whether `tenant`'s monitors are probed.
    pub fn probes(&self, tenant: &str) -> bool {
        self.lock().contains_key(tenant)
    }

    fn spawn(
        self: &Arc<Self>,
        probed: &Arc<Probed>,
        runtime: &tokio::runtime::Handle,
    ) -> tokio::task::AbortHandle {
        let (specs, task) = {
            let inner = lock_inner(probed);
            let specs: Vec<MonitorSpec> =
                inner.board.specs.iter().map(|(_, s)| s.clone()).collect();
            (specs, inner.task)
        };
        let schedule = Schedule {
            probed: probed.clone(),
            specs,
            task,
            rate_millis: self.rate_millis.clone(),
            started: self.started,
        };
        runtime.spawn(schedule.run()).abort_handle()
    }

    /// `tenant`'s monitors and probing (`None`: it has none).
    pub fn status(&self, tenant: &str) -> Option<TenantProbeStatus> {
        let probed = self.lock().get(tenant)?.probed.clone();
        Some(self.status_of(&probed))
    }

    /// Every tenant with monitors and its status, by name.
    pub fn all(&self) -> Vec<(String, TenantProbeStatus)> {
        let probed: Vec<(String, Arc<Probed>)> = self
            .lock()
            .iter()
            .map(|(name, e)| (name.clone(), e.probed.clone()))
            .collect();
        let mut all: Vec<_> = probed
            .into_iter()
            .map(|(name, p)| (name, self.status_of(&p)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Every tenant with monitors in a line each, by name (without building each monitor's
    /// status: `/v1/status` and the metrics read this).
    pub fn summaries(&self) -> Vec<TenantProbeSummary> {
        let probed: Vec<(String, Arc<Probed>)> = self
            .lock()
            .iter()
            .map(|(name, e)| (name.clone(), e.probed.clone()))
            .collect();
        let budget = self.budget();
        let mut all: Vec<TenantProbeSummary> = probed
            .into_iter()
            .map(|(tenant, probed)| {
                let (demand, monitors, down) = {
                    let inner = lock_inner(&probed);
                    let down = inner
                        .targets
                        .iter()
                        .filter(|t| !t.machine.state().serves())
                        .count();
                    (demand_of(&inner), inner.targets.len(), down)
                };
                TenantProbeSummary {
                    tenant,
                    monitors,
                    down,
                    throttled: demand > budget || self.deferred_recently(&probed),
                    deferred_total: probed.deferred.load(Ordering::Relaxed),
                    demand_per_second: demand,
                    budget_per_second: budget,
                }
            })
            .collect();
        all.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        all
    }

    /// Whether a check of `probed` started late in the last [`THROTTLED_FOR`].
    fn deferred_recently(&self, probed: &Probed) -> bool {
        let last = probed.last_deferred_ms.load(Ordering::Relaxed);
        let now_ms = self.started.elapsed().as_millis() as u64;
        last != 0 && now_ms.saturating_sub(last) < THROTTLED_FOR.as_millis() as u64
    }

    fn status_of(&self, probed: &Probed) -> TenantProbeStatus {
        let inner = lock_inner(probed);
        let budget = self.budget();
        let demand = demand_of(&inner);
        let recently = self.deferred_recently(probed);
        let monitors = inner
            .board
            .specs
            .iter()
            .zip(&inner.targets)
            .map(|((name, spec), t)| TenantMonitorStatus {
                name: name.clone(),
                target: spec.target.clone(),
                state: t.machine.state().as_str().to_owned(),
                interval_ms: spec.interval_ms,
                timeout_ms: spec.timeout_ms,
                last_check: t.last_check.map(crate::rfc3339::format_utc),
                last_error: t.last_error.clone(),
                last_latency_ms: t.last_latency.map(|d| d.as_secs_f64() * 1000.0),
                checks: t.checks,
                failures: t.failures,
            })
            .collect();
        TenantProbeStatus {
            budget_per_second: budget,
            demand_per_second: demand,
            throttled: demand > budget || recently,
            deferred_total: probed.deferred.load(Ordering::Relaxed),
            in_flight: probed.in_flight.load(Ordering::Relaxed),
            monitors,
        }
    }
}

/// What a tenant's monitors ask for: checks per second, the sum of 1 / interval.
fn demand_of(inner: &ProbedInner) -> f64 {
    inner
        .board
        .specs
        .iter()
        .map(|(_, s)| 1000.0 / s.interval_ms.max(1) as f64)
        .sum()
}

fn lock_inner(probed: &Probed) -> MutexGuard<'_, ProbedInner> {
    probed.inner.lock().unwrap_or_else(|p| p.into_inner())
}

/// The view of a tenant's slots from its targets' states.
fn view_of(inner: &ProbedInner) -> HealthView {
    HealthView::new(
        inner
            .targets
            .iter()
            .map(|t| SlotHealth {
                up: t.machine.state().serves(),
                last_up: t.last_up,
            })
            .collect(),
    )
}

/// One tenant's scheduler: its queue of due checks, started within its budget and slots.
struct Schedule {
    probed: Arc<Probed>,
    specs: Vec<MonitorSpec>,
    task: u64,
    rate_millis: Arc<AtomicU64>,
    started: Instant,
}

/// A tenant's probe budget: a token bucket of `rate` checks per second holding at most one
/// second's worth (at least one), so a tenant under its budget never waits for it.
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: f64) -> Bucket {
        Bucket {
            tokens: rate.max(1.0),
            at: Instant::now(),
        }
    }

    /// Takes one token at `now`: `None` when there was one, else how long until there is
    /// (the token is then taken already).
    fn take(&mut self, now: Instant, rate: f64) -> Option<Duration> {
        let rate = rate.max(0.001);
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate.max(1.0));
        self.at = now;
        self.tokens -= 1.0;
        (self.tokens < 0.0).then(|| Duration::from_secs_f64(-self.tokens / rate))
    }
}

impl Schedule {
    fn rate(&self) -> f64 {
        self.rate_millis.load(Ordering::Relaxed).max(1) as f64 / 1000.0
    }

    async fn run(self) {
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
        let now = Instant::now();
        let mut due: BinaryHeap<Reverse<(Instant, usize)>> = self
            .specs
            .iter()
            .enumerate()
            .map(|(i, spec)| Reverse((now + super::phase(spec, self.started.elapsed()), i)))
            .collect();
        let mut budget = Bucket::new(self.rate());
        while let Some(Reverse((at, i))) = due.pop() {
            let Some(spec) = self.specs.get(i) else {
                continue;
            };
            tokio::time::sleep_until(at.into()).await;
            let mut deferred = false;
            if let Some(wait) = budget.take(Instant::now(), self.rate()) {
                // Over budget: this check (and so its interval) waits for the next token.
                deferred = true;
                tokio::time::sleep(wait).await;
            }
            let permit = match slots.clone().try_acquire_owned() {
                Ok(permit) => permit,
                Err(_) => {
                    deferred = true;
                    let Ok(permit) = slots.clone().acquire_owned().await else {
                        return;
                    };
                    permit
                }
            };
            let now = Instant::now();
            if deferred {
                self.probed.deferred.fetch_add(1, Ordering::Relaxed);
                let ms = (self.started.elapsed().as_millis() as u64).max(1);
                self.probed.last_deferred_ms.store(ms, Ordering::Relaxed);
            }
            due.push(Reverse((now + Duration::from_millis(spec.interval_ms), i)));
            let probed = self.probed.clone();
            let spec = spec.clone();
            let task = self.task;
            probed.in_flight.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let timeout = Duration::from_millis(spec.timeout_ms);
                let started = Instant::now();
                let check = super::probe::check(&spec.check, super::DEFAULT_AGENT);
                let result = match tokio::time::timeout(timeout, check).await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no answer within {} ms", spec.timeout_ms)),
                };
                drop(permit);
                probed.in_flight.fetch_sub(1, Ordering::Relaxed);
                record(&probed, task, i, result, started.elapsed());
            });
        }
    }
}

/// Records one check of target `i`; publishes the tenant's view if it changed state.
fn record(probed: &Probed, task: u64, i: usize, result: Result<(), String>, latency: Duration) {
    let mut inner = lock_inner(probed);
    if inner.task != task {
        return;
    }
    let generation = inner.generation;
    let Some(target) = inner.targets.get_mut(i) else {
        return;
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
        return;
    };
    target.last_change = Some(now);
    if was.serves() && !state.serves() {
        target.last_up = generation;
    }
    if state.serves() != was.serves() {
        inner.generation += 1;
        let view = view_of(&inner);
        inner.board.publish(view);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::monitor::{Check, Startup};

    fn spec(port: u16, interval_ms: u64) -> MonitorSpec {
        MonitorSpec {
            target: format!("tcp:127.0.0.1:{port}"),
            check: Check::Tcp {
                host: "127.0.0.1".into(),
                port,
            },
            interval_ms,
            timeout_ms: interval_ms / 2,
            fall: 1,
            rise: 1,
            startup: Startup::Up,
        }
    }

    #[test]
    fn a_new_version_with_the_same_monitors_keeps_their_state() {
        let probes = Arc::new(TenantProbes::default());
        let first = Arc::new(OwnMonitors::new(0, vec![("a".into(), spec(1, 1000))]));
        probes.attach("t", &first);
        if let Some(entry) = probes.lock().get("t") {
            let mut inner = lock_inner(&entry.probed);
            let task = inner.task;
            drop(inner);
            record(
                &entry.probed,
                task,
                0,
                Err("refused".into()),
                Duration::ZERO,
            );
            inner = lock_inner(&entry.probed);
            assert_eq!(inner.targets[0].machine.state().as_str(), "down");
        }
        assert!(!first.view().up(0));
        let second = Arc::new(OwnMonitors::new(0, vec![("b".into(), spec(1, 1000))]));
        assert!(second.view().up(0), "startup up");
        probes.attach("t", &second);
        assert!(!second.view().up(0), "the state carried over");
        let third = Arc::new(OwnMonitors::new(
            0,
            vec![("b".into(), spec(1, 1000)), ("c".into(), spec(2, 1000))],
        ));
        probes.attach("t", &third);
        assert!(!third.view().up(0) && third.view().up(1));
        probes.detach("t");
        assert!(!probes.probes("t"));
    }

    #[test]
    fn the_budget_lets_a_second_through_at_once_then_spaces_checks() {
        let start = Instant::now();
        let mut bucket = Bucket::new(4.0);
        for _ in 0..4 {
            assert_eq!(bucket.take(start, 4.0), None);
        }
        assert_eq!(bucket.take(start, 4.0), Some(Duration::from_millis(250)));
        assert_eq!(
            bucket.take(start, 4.0),
            Some(Duration::from_millis(500)),
            "the next one waits behind it"
        );
        let later = start + Duration::from_secs(10);
        assert_eq!(
            bucket.take(later, 4.0),
            None,
            "refilled, at most a second's worth"
        );
    }

    #[test]
    fn demand_over_budget_is_throttled() {
        let probes = Arc::new(TenantProbes::default());
        probes.set_budget(5.0);
        let many: Vec<_> = (0..20)
            .map(|i| (format!("m{i}"), spec(1000 + i, 1000)))
            .collect();
        probes.attach("big", &Arc::new(OwnMonitors::new(0, many)));
        probes.attach(
            "small",
            &Arc::new(OwnMonitors::new(0, vec![("a".into(), spec(1, 1000))])),
        );
        let big = probes
            .status("big")
            .map(|s| (s.throttled, s.demand_per_second));
        assert_eq!(big, Some((true, 20.0)));
        assert_eq!(probes.status("small").map(|s| s.throttled), Some(false));
    }
}
