//! The rollout's state and its step function (see the module doc in `mod.rs`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// A control version, as the fleet numbers them (its serial).
pub type Revision = u64;

/// How changes are rolled out: `[fleet.rollout]` in the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Plan {
    /// Node names per wave, canary first: `[["ns1"], ["ns2", "ns3"]]`. Live nodes not listed
    /// form one last wave. Empty (the default): one wave of every node.
    pub waves: Vec<Vec<String>>,
    /// How long (s) a wave must stay healthy before the next one gets the change (and, for
    /// the last wave, before the change becomes the last known good). `--emergency`: 0.
    pub bake_secs: u64,
    /// How long (s) the nodes of a released wave have to serve the change; longer halts.
    pub wave_timeout_secs: u64,
    /// Sanity queries, `"NAME TYPE"`: each must keep answering NOERROR with data on every
    /// node that serves the change (if it did before the change).
    pub probes: Vec<String>,
    /// How much the SERVFAIL share of a node may rise (0.01 = one percentage point) over its
    /// share before the change.
    pub servfail_margin: f64,
    /// Queries a node must have answered since it serves the change before its SERVFAIL
    /// share is judged.
    pub min_queries: u64,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            waves: Vec::new(),
            bake_secs: 30,
            wave_timeout_secs: 60,
            probes: Vec::new(),
            servfail_margin: 0.01,
            min_queries: 200,
        }
    }
}

/// Record types a probe may ask for.
const PROBE_TYPES: &[&str] = &[
    "A", "AAAA", "CNAME", "MX", "NS", "SOA", "TXT", "SRV", "PTR", "CAA", "HTTPS", "SVCB", "DS",
    "DNSKEY",
];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("waves: wave {0} is empty")]
    EmptyWave(usize),
    #[error("waves: {0:?} is not a node name")]
    BadName(String),
    #[error("waves: node {0} is in more than one wave")]
    Twice(String),
    #[error("probes: {0:?}: expected \"NAME TYPE\" with TYPE one of {types}", types = PROBE_TYPES.join(" "))]
    BadProbe(String),
    #[error("servfail_margin: {0} is outside [0, 1]")]
    BadMargin(f64),
    #[error("wave_timeout_secs: must be at least 1")]
    NoTimeout,
}

impl Plan {
    /// Every problem of this plan (empty when it is usable).
    pub fn problems(&self) -> Vec<PlanError> {
        let mut problems = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, wave) in self.waves.iter().enumerate() {
            if wave.is_empty() {
                problems.push(PlanError::EmptyWave(i + 1));
            }
            for node in wave {
                if node.is_empty() || node.chars().any(|c| c.is_whitespace() || c == '/') {
                    problems.push(PlanError::BadName(node.clone()));
                } else if !seen.insert(node.as_str()) {
                    problems.push(PlanError::Twice(node.clone()));
                }
            }
        }
        for probe in &self.probes {
            if parse_probe(probe).is_none() {
                problems.push(PlanError::BadProbe(probe.clone()));
            }
        }
        if !(0.0..=1.0).contains(&self.servfail_margin) {
            problems.push(PlanError::BadMargin(self.servfail_margin));
        }
        if self.wave_timeout_secs == 0 {
            problems.push(PlanError::NoTimeout);
        }
        problems
    }

    /// The waves for the nodes present now: listed waves keep their order with only present
    /// nodes, present nodes nobody listed form a last wave, empty waves are dropped.
    pub fn resolve<'a>(&self, present: impl IntoIterator<Item = &'a str>) -> Vec<Vec<String>> {
        let present: BTreeSet<&str> = present.into_iter().collect();
        let mut listed = BTreeSet::new();
        let mut waves: Vec<Vec<String>> = self
            .waves
            .iter()
            .map(|wave| {
                wave.iter()
                    .filter(|n| present.contains(n.as_str()) && listed.insert(n.as_str()))
                    .cloned()
                    .collect()
            })
            .collect();
        waves.push(
            present
                .iter()
                .filter(|n| !listed.contains(*n))
                .map(|n| n.to_string())
                .collect(),
        );
        waves.retain(|w: &Vec<String>| !w.is_empty());
        waves
    }
}

/// `"critical.example.com A"` → (name, type), the type upper-cased; `None` if malformed.
pub fn parse_probe(probe: &str) -> Option<(String, String)> {
    let mut parts = probe.split_whitespace();
    let (name, rtype) = (parts.next()?, parts.next()?);
    if parts.next().is_some() || name.len() > 253 {
        return None;
    }
    let rtype = rtype.to_ascii_uppercase();
    PROBE_TYPES
        .contains(&rtype.as_str())
        .then(|| (name.to_string(), rtype))
}

/// One sanity probe's result on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeResult {
    pub probe: String,
    /// NOERROR with at least one answer record.
    pub ok: bool,
    /// What was answered (`NOERROR, 1 answer`, `SERVFAIL`, `NOERROR, no data`, `timeout`).
    pub detail: String,
}

/// What a node says about itself (from the fleet's node registry).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct NodeReport {
    /// Different for every start of the node's process: a change means it restarted.
    pub boot: String,
    /// The version it serves (`None`: nothing from the fleet yet).
    pub serving: Option<Revision>,
    /// The version its taster is loading right now, if any.
    pub tasting: Option<Revision>,
    /// The newest version it refused, and why.
    pub refused: Option<(Revision, String)>,
    /// Queries answered and SERVFAILs sent since the process started.
    pub queries: u64,
    pub servfail: u64,
    /// Probe results and the version they were taken on.
    pub probes: Option<(Revision, Vec<ProbeResult>)>,
}

/// A node's health when its wave was released (still serving the LKG).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Health {
    pub queries: u64,
    pub servfail: u64,
    /// Probes that failed already before the change (those do not halt it).
    pub failing_probes: Vec<String>,
}

/// A node's place in the rollout, as `rollout status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Its wave is not released yet (it serves the LKG).
    Waiting,
    /// Released; loading the change (taster, then swap).
    Tasting,
    /// Serves the change.
    Serving,
    /// Refused the change (its taster crashed or found it invalid).
    Refused,
    /// Gone or restarted during the rollout.
    Crashed,
    /// Served the change, serves the LKG again after a halt.
    RolledBack,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Waiting => "waiting",
            NodeState::Tasting => "tasting",
            NodeState::Serving => "serving",
            NodeState::Refused => "refused",
            NodeState::Crashed => "crashed",
            NodeState::RolledBack => "rolled back",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeProgress {
    /// Index into [`Rollout::waves`].
    pub wave: usize,
    pub state: NodeState,
    /// Why, for refused / crashed / a failed gate.
    pub detail: Option<String>,
    /// Boot id when its wave was released (or the rollout resumed).
    pub boot: Option<String>,
    /// Health when its wave was released.
    pub baseline: Option<Health>,
    /// Counters when it was first seen serving the change.
    pub serving_since: Option<(u64, u64)>,
    /// It served the change at some point.
    pub served_candidate: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    Running,
    /// A gate failed: every node serves the LKG again. `resume` or `abort` (or a new change).
    Halted {
        reason: String,
        at_ms: u64,
    },
    /// Every wave served it and stayed healthy: the change is the new LKG.
    Completed {
        at_ms: u64,
    },
    /// Stopped by an operator: every node serves the LKG.
    Aborted {
        at_ms: u64,
    },
}

/// One rollout: the change, the waves, how far it got. The whole state (kept in etcd).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    /// The version being rolled out.
    pub candidate: Revision,
    /// The last known good version: what every node serves outside the released waves, and
    /// everywhere after a halt.
    pub lkg: Revision,
    /// What the change does (from the history's summary).
    pub summary: String,
    /// `--emergency`: no bake time; tasting and gates as ever.
    pub emergency: bool,
    pub waves: Vec<Vec<String>>,
    /// Nodes listed in the plan but absent when the rollout began.
    pub absent: Vec<String>,
    /// `waves[..released]` may serve the candidate.
    pub released: usize,
    pub released_at_ms: u64,
    /// Since when every released node passed every gate (for the bake time).
    pub healthy_since_ms: Option<u64>,
    pub bake_ms: u64,
    pub wave_timeout_ms: u64,
    pub servfail_margin: f64,
    pub min_queries: u64,
    pub probes: Vec<String>,
    pub started_at_ms: u64,
    pub phase: Phase,
    pub nodes: BTreeMap<String, NodeProgress>,
}

impl Rollout {
    /// Starts rolling `candidate` out over the nodes present in `reports`, from `lkg`; the
    /// first wave (the canary) is released at once.
    pub fn begin(
        candidate: Revision,
        lkg: Revision,
        summary: &str,
        emergency: bool,
        plan: &Plan,
        reports: &BTreeMap<String, NodeReport>,
        now_ms: u64,
    ) -> Rollout {
        let waves = plan.resolve(reports.keys().map(String::as_str));
        let absent = plan
            .waves
            .iter()
            .flatten()
            .filter(|n| !reports.contains_key(*n))
            .cloned()
            .collect();
        let nodes = waves
            .iter()
            .enumerate()
            .flat_map(|(i, wave)| {
                wave.iter().map(move |node| {
                    let progress = NodeProgress {
                        wave: i,
                        state: NodeState::Waiting,
                        detail: None,
                        boot: None,
                        baseline: None,
                        serving_since: None,
                        served_candidate: false,
                    };
                    (node.clone(), progress)
                })
            })
            .collect();
        let mut rollout = Rollout {
            candidate,
            lkg,
            summary: summary.to_string(),
            emergency,
            waves,
            absent,
            released: 0,
            released_at_ms: now_ms,
            healthy_since_ms: None,
            bake_ms: if emergency {
                0
            } else {
                plan.bake_secs.saturating_mul(1000)
            },
            wave_timeout_ms: plan.wave_timeout_secs.saturating_mul(1000),
            servfail_margin: plan.servfail_margin,
            min_queries: plan.min_queries,
            probes: plan.probes.clone(),
            started_at_ms: now_ms,
            phase: Phase::Running,
            nodes,
        };
        if rollout.waves.is_empty() {
            // No node at all: nothing can serve it badly; it is the new LKG.
            rollout.phase = Phase::Completed { at_ms: now_ms };
        } else {
            rollout.release_next(reports, now_ms);
        }
        rollout
    }

    /// A finished state for a version every node may serve at once (the first version of a
    /// fleet, or the LKG written back by `abort`).
    pub fn settled(revision: Revision, now_ms: u64) -> Rollout {
        Rollout {
            candidate: revision,
            lkg: revision,
            summary: String::new(),
            emergency: false,
            waves: Vec::new(),
            absent: Vec::new(),
            released: 0,
            released_at_ms: now_ms,
            healthy_since_ms: None,
            bake_ms: 0,
            wave_timeout_ms: 0,
            servfail_margin: 0.0,
            min_queries: 0,
            probes: Vec::new(),
            started_at_ms: now_ms,
            phase: Phase::Completed { at_ms: now_ms },
            nodes: BTreeMap::new(),
        }
    }

    /// The version `node` may serve now.
    pub fn allowed(&self, node: &str) -> Revision {
        match &self.phase {
            Phase::Completed { .. } => self.candidate,
            Phase::Halted { .. } | Phase::Aborted { .. } => self.lkg,
            Phase::Running => match self.nodes.get(node) {
                Some(progress) if progress.wave < self.released => self.candidate,
                _ => self.lkg,
            },
        }
    }

    /// The last known good once this rollout is over as it stands: the candidate if it
    /// completed, else the LKG it started from.
    pub fn lkg_now(&self) -> Revision {
        match self.phase {
            Phase::Completed { .. } => self.candidate,
            _ => self.lkg,
        }
    }

    pub fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// One decision from the nodes' reports at `now_ms`; returns what happened (for the log),
    /// empty if nothing but node states changed.
    pub fn step(&mut self, reports: &BTreeMap<String, NodeReport>, now_ms: u64) -> Vec<String> {
        match self.phase {
            Phase::Running => self.step_running(reports, now_ms),
            Phase::Halted { .. } | Phase::Aborted { .. } => {
                self.mark_rolled_back(reports);
                Vec::new()
            }
            Phase::Completed { .. } => Vec::new(),
        }
    }

    /// Continues a halted rollout from the wave it halted in: the nodes of the released waves
    /// are judged afresh (a restarted node's new boot id is accepted).
    pub fn resume(
        &mut self,
        reports: &BTreeMap<String, NodeReport>,
        now_ms: u64,
    ) -> Result<(), String> {
        if !matches!(self.phase, Phase::Halted { .. }) {
            return Err(format!("the rollout of {} is not halted", self.candidate));
        }
        self.phase = Phase::Running;
        self.released_at_ms = now_ms;
        self.healthy_since_ms = None;
        let released = self.released;
        for (name, progress) in &mut self.nodes {
            if progress.wave >= released {
                continue;
            }
            let report = reports.get(name);
            progress.boot = report.map(|r| r.boot.clone());
            progress.baseline = report.map(|r| baseline(r, &self.probes, self.candidate));
            progress.serving_since = None;
            progress.state = NodeState::Tasting;
            progress.detail = None;
        }
        Ok(())
    }

    /// Stops a running or halted rollout; every node serves the LKG.
    pub fn abort(&mut self, now_ms: u64) -> Result<(), String> {
        match self.phase {
            Phase::Running | Phase::Halted { .. } => {
                self.phase = Phase::Aborted { at_ms: now_ms };
                Ok(())
            }
            Phase::Completed { .. } => Err(format!(
                "the rollout of {} completed: it is the last known good (roll back instead)",
                self.candidate
            )),
            Phase::Aborted { .. } => Err(format!(
                "the rollout of {} is aborted already",
                self.candidate
            )),
        }
    }

    /// `rollout status` as lines of text: the change, the phase, each wave and node.
    pub fn describe(&self, now_ms: u64) -> Vec<String> {
        let ago = |at: u64| format!("{:.1} s ago", now_ms.saturating_sub(at) as f64 / 1000.0);
        let mut lines = Vec::new();
        let emergency = if self.emergency {
            " [emergency: no bake]"
        } else {
            ""
        };
        let summary = if self.summary.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.summary)
        };
        lines.push(format!(
            "rollout of revision {}{summary}{emergency}, started {}",
            self.candidate,
            ago(self.started_at_ms)
        ));
        lines.push(match &self.phase {
            Phase::Running => {
                let baked = match self.healthy_since_ms {
                    Some(since) => format!(
                        "healthy for {:.1} of {} s",
                        now_ms.saturating_sub(since) as f64 / 1000.0,
                        self.bake_ms / 1000
                    ),
                    None => "waiting for every node to serve it".to_string(),
                };
                format!(
                    "running: wave {} of {} released {}; {baked}",
                    self.released,
                    self.waves.len(),
                    ago(self.released_at_ms)
                )
            }
            Phase::Halted { reason, at_ms } => {
                format!(
                    "HALTED {}: {reason}; every node is sent back to {}",
                    ago(*at_ms),
                    self.lkg
                )
            }
            Phase::Completed { at_ms } => format!(
                "completed {} after {:.1} s: it is the last known good",
                ago(*at_ms),
                at_ms.saturating_sub(self.started_at_ms) as f64 / 1000.0
            ),
            Phase::Aborted { at_ms } => {
                format!(
                    "aborted {}: every node is sent back to {}",
                    ago(*at_ms),
                    self.lkg
                )
            }
        });
        lines.push(format!("last known good: revision {}", self.lkg_now()));
        for (i, wave) in self.waves.iter().enumerate() {
            let nodes: Vec<String> = wave
                .iter()
                .map(|name| match self.nodes.get(name) {
                    Some(p) => match &p.detail {
                        Some(detail) => format!("{name} {} ({detail})", p.state.as_str()),
                        None => format!("{name} {}", p.state.as_str()),
                    },
                    None => format!("{name} ?"),
                })
                .collect();
            let released = if i < self.released {
                ""
            } else {
                " (not released)"
            };
            lines.push(format!("  wave {}{released}: {}", i + 1, nodes.join(", ")));
        }
        if !self.absent.is_empty() {
            lines.push(format!(
                "  absent when it began: {}",
                self.absent.join(", ")
            ));
        }
        lines
    }

    fn release_next(&mut self, reports: &BTreeMap<String, NodeReport>, now_ms: u64) {
        let wave = self.released;
        for (name, progress) in &mut self.nodes {
            if progress.wave != wave {
                continue;
            }
            let report = reports.get(name);
            progress.boot = report.map(|r| r.boot.clone());
            progress.baseline = report.map(|r| baseline(r, &self.probes, self.candidate));
            progress.state = NodeState::Tasting;
        }
        self.released += 1;
        self.released_at_ms = now_ms;
        self.healthy_since_ms = None;
    }

    fn step_running(&mut self, reports: &BTreeMap<String, NodeReport>, now_ms: u64) -> Vec<String> {
        let mut failures = Vec::new();
        let mut pending = Vec::new();
        let candidate = self.candidate;
        let (margin, min_queries) = (self.servfail_margin, self.min_queries);
        let probes_configured = !self.probes.is_empty();
        for (name, progress) in &mut self.nodes {
            if progress.wave >= self.released {
                continue;
            }
            let Some(report) = reports.get(name) else {
                progress.state = NodeState::Crashed;
                progress.detail = Some("gone from the fleet (crashed or stopped)".into());
                failures.push(format!(
                    "{name} is gone from the fleet (crashed or stopped?)"
                ));
                continue;
            };
            if progress
                .boot
                .as_deref()
                .is_some_and(|boot| boot != report.boot)
            {
                progress.state = NodeState::Crashed;
                progress.detail = Some("restarted during the rollout".into());
                failures.push(format!("{name} restarted during the rollout"));
                continue;
            }
            if let Some((revision, reason)) = &report.refused {
                if *revision == candidate {
                    progress.state = NodeState::Refused;
                    progress.detail = Some(reason.clone());
                    failures.push(format!("{name} refused {candidate}: {reason}"));
                    continue;
                }
            }
            if report.serving != Some(candidate) {
                if progress.served_candidate {
                    let serving = report.serving.map_or("nothing".into(), |r| r.to_string());
                    progress.state = NodeState::Crashed;
                    progress.detail = Some(format!("no longer serves it (serves {serving})"));
                    failures.push(format!(
                        "{name} no longer serves {candidate} (serves {serving})"
                    ));
                } else {
                    progress.state = NodeState::Tasting;
                    pending.push(format!("{name} (tasting)"));
                }
                continue;
            }
            progress.state = NodeState::Serving;
            progress.served_candidate = true;
            progress.detail = None;
            let since = *progress
                .serving_since
                .get_or_insert((report.queries, report.servfail));
            if let Some(failure) = servfail_worse(
                progress.baseline.as_ref(),
                since,
                report,
                margin,
                min_queries,
            ) {
                progress.detail = Some(failure.clone());
                failures.push(format!("{name}: {failure}"));
                continue;
            }
            match &report.probes {
                Some((revision, results)) if *revision == candidate => {
                    let before = progress
                        .baseline
                        .as_ref()
                        .map(|b| b.failing_probes.as_slice())
                        .unwrap_or(&[]);
                    let worse: Vec<String> = results
                        .iter()
                        .filter(|r| !r.ok && !before.contains(&r.probe))
                        .map(|r| format!("probe {}: {}", r.probe, r.detail))
                        .collect();
                    if !worse.is_empty() {
                        let text = worse.join("; ");
                        progress.detail = Some(text.clone());
                        failures.push(format!("{name}: {text}"));
                    }
                }
                _ if probes_configured => pending.push(format!("{name} (probing)")),
                _ => {}
            }
        }
        if !failures.is_empty() {
            let reason = failures.join("; ");
            self.phase = Phase::Halted {
                reason: reason.clone(),
                at_ms: now_ms,
            };
            self.healthy_since_ms = None;
            self.mark_rolled_back(reports);
            return vec![format!(
                "rollout of {candidate} halted in wave {}: {reason}; every node back to {}",
                self.released, self.lkg
            )];
        }
        if !pending.is_empty() {
            self.healthy_since_ms = None;
            if now_ms.saturating_sub(self.released_at_ms) > self.wave_timeout_ms {
                let reason = format!(
                    "wave {} did not serve {candidate} within {} s: {}",
                    self.released,
                    self.wave_timeout_ms / 1000,
                    pending.join(", ")
                );
                self.phase = Phase::Halted {
                    reason: reason.clone(),
                    at_ms: now_ms,
                };
                self.mark_rolled_back(reports);
                return vec![format!("rollout of {candidate} halted: {reason}")];
            }
            return Vec::new();
        }
        let healthy_since = *self.healthy_since_ms.get_or_insert(now_ms);
        if now_ms.saturating_sub(healthy_since) < self.bake_ms {
            return Vec::new();
        }
        if self.released < self.waves.len() {
            self.release_next(reports, now_ms);
            vec![format!(
                "rollout of {candidate}: wave {} healthy, released wave {} ({})",
                self.released - 1,
                self.released,
                self.waves[self.released - 1].join(", ")
            )]
        } else {
            self.phase = Phase::Completed { at_ms: now_ms };
            vec![format!(
                "rollout of {candidate} completed: every wave serves it; it is the last known good"
            )]
        }
    }

    /// After a halt: nodes that served the candidate and serve the LKG again are rolled back.
    fn mark_rolled_back(&mut self, reports: &BTreeMap<String, NodeReport>) {
        for (name, progress) in &mut self.nodes {
            let back = reports
                .get(name)
                .is_some_and(|r| r.serving == Some(self.lkg));
            match progress.state {
                NodeState::Serving | NodeState::Tasting if back && progress.served_candidate => {
                    progress.state = NodeState::RolledBack;
                }
                NodeState::Tasting if back => progress.state = NodeState::Waiting,
                _ => {}
            }
        }
    }
}

/// A node's health at release: counters and the probes that fail already (on the LKG).
fn baseline(report: &NodeReport, probes: &[String], candidate: Revision) -> Health {
    let failing_probes = match &report.probes {
        Some((revision, results)) if *revision != candidate => results
            .iter()
            .filter(|r| !r.ok && probes.contains(&r.probe))
            .map(|r| r.probe.clone())
            .collect(),
        _ => Vec::new(),
    };
    Health {
        queries: report.queries,
        servfail: report.servfail,
        failing_probes,
    }
}

/// `Some(reason)` when the SERVFAIL share since the node serves the change exceeds its share
/// before the change by more than `margin` (after at least `min_queries` queries).
fn servfail_worse(
    baseline: Option<&Health>,
    since: (u64, u64),
    report: &NodeReport,
    margin: f64,
    min_queries: u64,
) -> Option<String> {
    let queries = report.queries.checked_sub(since.0)?;
    let servfail = report.servfail.checked_sub(since.1)?;
    if queries < min_queries.max(1) {
        return None;
    }
    let share = servfail as f64 / queries as f64;
    let before = baseline
        .filter(|b| b.queries > 0)
        .map_or(0.0, |b| b.servfail as f64 / b.queries as f64);
    (share > before + margin).then(|| {
        format!(
            "SERVFAIL share {:.1}% over {queries} queries, was {:.1}%",
            share * 100.0,
            before * 100.0
        )
    })
}
