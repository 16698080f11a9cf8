//! The [`Health`] side of shared probing: what the fleet's health task reads from it (the
//! targets, this node's results) and what it hands back (which targets to probe, the fleet's
//! verdicts, the etcd link). See [`super::share`] for the rules.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use super::machine::State;
use super::{
    view_of, Health, LocalResult, ProberNode, SharedDecision, SharedTarget, Sharing, SharingStatus,
};
use crate::policy::monitor::MonitorSpec;

impl Health {
    /// Names this node in its HTTP checks' `User-Agent` (backends see which node probes).
    pub fn set_node(&self, node: &str) {
        self.lock().agent = Arc::from(format!("{} (node {node})", super::DEFAULT_AGENT));
    }

    /// Shared probing from now on. Until the first shared view (etcd not reached yet) this
    /// node probes every target itself and serves what it sees, as a lone node does; from the
    /// first shared view on, it probes only what the fleet assigns it and serves the fleet's
    /// verdicts (a target without one keeps what this node served). Call before
    /// [`Health::start`].
    pub fn enable_sharing(&self, node: &str, site: Option<&str>, probers_per_target: usize) {
        self.set_node(node);
        let mut inner = self.lock();
        inner.sharing = Some(Sharing {
            status: SharingStatus {
                node: node.to_owned(),
                site: site.map(str::to_owned),
                probers_per_target,
                connected: false,
                since: crate::rfc3339::format_utc(SystemTime::now()),
                last_error: Some("not connected yet".into()),
                ..SharingStatus::default()
            },
            probing: HashSet::new(),
            applied: false,
        });
    }

    /// The targets monitored now.
    pub fn specs(&self) -> Vec<MonitorSpec> {
        let inner = self.lock();
        let mut specs: Vec<MonitorSpec> = inner.targets.values().map(|t| t.spec.clone()).collect();
        specs.sort_by(|a, b| a.target.cmp(&b.target));
        specs
    }

    /// This node's results for the targets it probes.
    pub fn local_results(&self) -> Vec<LocalResult> {
        let inner = self.lock();
        let now = SystemTime::now();
        let mut results: Vec<LocalResult> = inner
            .targets
            .values()
            .filter(|t| inner.probes(&t.spec.target))
            .map(|t| LocalResult {
                target: t.spec.target.clone(),
                state: t.machine.state().as_str(),
                age: t
                    .last_check
                    .map(|at| now.duration_since(at).unwrap_or_default()),
                interval_ms: t.spec.interval_ms,
                checks: t.checks,
                failures: t.failures,
                last_error: t.last_error.clone(),
                last_latency: t.last_latency,
            })
            .collect();
        results.sort_by(|a, b| a.target.cmp(&b.target));
        results
    }

    /// Probes exactly `probing` from now on: new ones start (from their startup state), the
    /// others stop, and their rise/fall state is dropped (a result of long ago must not be
    /// published if the target comes back to this node).
    pub fn set_probing(self: &Arc<Self>, probing: HashSet<String>) {
        let mut inner = self.lock();
        let Some(sharing) = inner.sharing.as_mut().filter(|s| s.applied) else {
            return;
        };
        let mut here: Vec<String> = probing.iter().cloned().collect();
        here.sort();
        sharing.status.probing_here = here;
        sharing.probing = probing.clone();
        for target in inner.targets.values_mut() {
            if !probing.contains(&target.spec.target) && target.abort.is_some() {
                target.stop_probing();
                target.machine =
                    super::Machine::new(target.spec.startup, target.spec.fall, target.spec.rise);
                target.last_check = None;
            }
        }
        if let Some(runtime) = self.runtime.get() {
            self.spawn_missing(&mut inner, runtime);
        }
    }

    /// The fleet's say on the targets (by target; a target without one keeps what it has),
    /// at etcd revision `revision`: a target with reporting probers takes their verdict, one
    /// without keeps the last verdict (else its startup state). A new view is swapped in when
    /// what is served changed.
    pub fn apply_shared(
        &self,
        decisions: HashMap<String, SharedDecision>,
        revision: i64,
        probers: Vec<ProberNode>,
        refused: Vec<String>,
    ) {
        let mut inner = self.lock();
        let Some(sharing) = inner.sharing.as_mut() else {
            return;
        };
        let first = !sharing.applied;
        sharing.applied = true;
        sharing.status.revision = revision;
        sharing.status.probers = probers;
        sharing.status.refused = refused;
        let node = sharing.status.node.clone();
        let mut changed = false;
        for (key, target) in inner.targets.iter_mut() {
            let Some(decision) = decisions.get(key) else {
                continue;
            };
            if first && target.shared_up.is_none() && target.machine.state() != State::Unknown {
                // The first shared view: what this node's own checks found is what it served.
                target.shared_up = Some(target.machine.state().serves());
                target.shared_last_up = 0;
            }
            let was = if first {
                target.slot(false).up
            } else {
                target.slot(true).up
            };
            if let Some(up) = decision.tally.verdict {
                if was && !up {
                    target.shared_last_up = u64::try_from(decision.revision).unwrap_or(0);
                }
                target.shared_up = Some(up);
            }
            let now = target.slot(true).up;
            if now != was {
                changed = true;
                target.last_change = Some(SystemTime::now());
                let votes = describe_votes(decision);
                if now {
                    tracing::info!("health: {key} up by the fleet's probers ({votes})");
                } else {
                    tracing::warn!("health: {key} down by the fleet's probers ({votes})");
                }
            }
            let probed_here = decision.probers.iter().any(|p| p.node == node);
            target.shared = Some(SharedTarget {
                decided_by: match (decision.tally.verdict, target.shared_up) {
                    (Some(_), _) => "quorum",
                    (None, Some(_)) => "kept",
                    (None, None) => "startup",
                }
                .to_owned(),
                probers: decision.probers.clone(),
                probed_here,
                local_state: None,
                up_votes: decision.tally.up,
                down_votes: decision.tally.down,
                reporting: decision.tally.reporting,
                quorum: decision.tally.quorum,
            });
        }
        if changed || first {
            inner.generation += 1;
            let board = inner.board.clone();
            board.view.store(Arc::new(view_of(&inner, &board)));
        }
    }

    /// The etcd link of shared probing went up or down (with the reason). Down, the last
    /// shared view stays served as it is (fail-static).
    pub fn set_sharing_link(&self, connected: bool, error: Option<String>) {
        let mut inner = self.lock();
        let Some(sharing) = inner.sharing.as_mut() else {
            return;
        };
        let status = &mut sharing.status;
        if status.connected != connected {
            status.since = crate::rfc3339::format_utc(SystemTime::now());
            if connected {
                tracing::info!("health: sharing probe results through etcd");
            } else if sharing.applied {
                tracing::warn!(
                    "health: etcd link down, serving the last shared health view: {}",
                    error.as_deref().unwrap_or("?")
                );
            }
        }
        status.connected = connected;
        status.fail_static = !connected && sharing.applied;
        if connected || error.is_some() {
            status.last_error = error;
        }
    }
}

fn describe_votes(decision: &SharedDecision) -> String {
    decision
        .probers
        .iter()
        .map(|p| format!("{} {}", p.node, p.vote.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}
