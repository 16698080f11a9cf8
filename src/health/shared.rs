//! Shared probing in a fleet, as [`Health`] sees it: the rules (which nodes probe a target,
//! and what the fleet serves for it) and [`Health`]'s side of the exchange (what the fleet's
//! health task, `crate::fleet::health`, reads from it — the targets, this node's results — and
//! what it hands back: which targets to probe, the fleet's verdicts, the etcd link).
//!
//! The rules use no clocks, no I/O, no etcd: the health task feeds them what etcd holds, and
//! `steerdns fleet status` runs the same functions on the same records, so every node and the
//! CLI agree.
//!
//! - **Who probes** ([`probers_of`]): rendezvous hashing of target × node over the live probers
//!   (every node of the fleet registers as one): the `wanted` highest scores, taking at most one
//!   node per site while other sites are left, then the next highest of any site. A node that
//!   dies moves only the targets it probed; a node that joins takes only the targets it now
//!   scores highest for.
//! - **What is served** ([`tally`]): a target's *reporting* probers are its assigned probers
//!   with a fresh up/down result (not stale, not "unknown"). It is down when a strict majority
//!   of them say down (the quorum is `reporting / 2 + 1`); a tie serves it (one PoP's broken
//!   path never takes a target out by itself when two probers disagree). With no reporting
//!   prober the verdict is "none": the node keeps serving what it served (its last shared
//!   verdict, else the monitor's startup state).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::machine::State;
use super::{
    view_of, Health, LocalResult, ProberNode, SharedDecision, SharedTarget, Sharing, SharingStatus,
};
use crate::hash::{fnv1a64, fnv1a64_more};
use crate::policy::monitor::MonitorSpec;

/// One live prober of the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prober<'a> {
    pub name: &'a str,
    /// Site (PoP) label; `None` counts as a site of its own.
    pub site: Option<&'a str>,
}

/// The nodes that probe `target`, best first: at most `wanted`, from different sites while
/// there are sites not yet used.
pub fn probers_of<'a>(target: &str, probers: &[Prober<'a>], wanted: usize) -> Vec<&'a str> {
    let mut ranked: Vec<(u64, Prober<'a>)> = probers
        .iter()
        .map(|p| (score(target, p.name), *p))
        .collect();
    // Highest score first; the name breaks a (practically impossible) tie deterministically.
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(b.1.name)));
    ranked.dedup_by(|a, b| a.1.name == b.1.name);
    let mut chosen: Vec<Prober<'a>> = Vec::with_capacity(wanted);
    for (_, prober) in &ranked {
        if chosen.len() == wanted {
            break;
        }
        let site_used = prober.site.is_some() && chosen.iter().any(|c| c.site == prober.site);
        if !site_used {
            chosen.push(*prober);
        }
    }
    for (_, prober) in &ranked {
        if chosen.len() == wanted {
            break;
        }
        if !chosen.iter().any(|c| c.name == prober.name) {
            chosen.push(*prober);
        }
    }
    chosen.into_iter().map(|p| p.name).collect()
}

/// The rendezvous score of `node` for `target`: FNV-1a of both, through a 64-bit finalizer so
/// that similar names do not score alike. Stable across versions and machines (it decides who
/// probes what in a mixed fleet).
fn score(target: &str, node: &str) -> u64 {
    // 0xff between the two (a byte UTF-8 text never holds), so ("ab", "c") and ("a", "bc") differ.
    let mut h = fnv1a64_more(
        fnv1a64_more(fnv1a64(target.as_bytes()), &[0xff]),
        node.as_bytes(),
    );
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// What one assigned prober says about a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vote {
    Up,
    Down,
    /// Probing, no result yet.
    Unknown,
    /// Its last result is older than the target's staleness bound.
    Stale,
    /// Its record has no result for the target (just assigned, or a config without it).
    Missing,
}

impl Vote {
    pub fn as_str(self) -> &'static str {
        match self {
            Vote::Up => "up",
            Vote::Down => "down",
            Vote::Unknown => "unknown",
            Vote::Stale => "stale",
            Vote::Missing => "missing",
        }
    }
}

/// The votes on one target, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub up: usize,
    pub down: usize,
    /// Probers with a fresh up/down result.
    pub reporting: usize,
    /// Down votes that take the target down (`reporting / 2 + 1`; 0 when nobody reports).
    pub quorum: usize,
    /// `Some(true)`: served; `Some(false)`: down; `None`: no reporting prober (keep serving
    /// what was served).
    pub verdict: Option<bool>,
}

/// Counts the votes of a target's assigned probers.
pub fn tally(votes: &[Vote]) -> Tally {
    let up = votes.iter().filter(|v| **v == Vote::Up).count();
    let down = votes.iter().filter(|v| **v == Vote::Down).count();
    let reporting = up + down;
    let quorum = if reporting == 0 { 0 } else { reporting / 2 + 1 };
    Tally {
        up,
        down,
        reporting,
        quorum,
        verdict: (reporting > 0).then_some(down < quorum),
    }
}

/// How old a prober's result may get (from its check, by the reader's reckoning) before it
/// no longer counts: three check intervals and two of the prober's record rewrites.
pub fn stale_after_ms(interval_ms: u64, heartbeat_ms: u64) -> u64 {
    interval_ms
        .saturating_mul(3)
        .saturating_add(heartbeat_ms.saturating_mul(2))
}

/// What a prober's published state and the age of its last check count as.
pub fn vote_of(state: &str, age_ms: Option<u64>, stale_after_ms: u64) -> Vote {
    match (state, age_ms) {
        (_, Some(age)) if age > stale_after_ms => Vote::Stale,
        ("up", Some(_)) => Vote::Up,
        ("down", Some(_)) => Vote::Down,
        _ => Vote::Unknown,
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes<'a>(names: &[(&'a str, Option<&'a str>)]) -> Vec<Prober<'a>> {
        names
            .iter()
            .map(|(name, site)| Prober { name, site: *site })
            .collect()
    }

    fn targets() -> Vec<String> {
        (0..300)
            .map(|i| format!("http://10.0.{i}.1/health"))
            .collect()
    }

    #[test]
    fn a_dead_node_moves_only_its_own_targets_and_spreads_them() {
        let all = nodes(&[("ns1", None), ("ns2", None), ("ns3", None), ("ns4", None)]);
        let without = nodes(&[("ns1", None), ("ns3", None), ("ns4", None)]);
        let mut count = std::collections::HashMap::new();
        for target in targets() {
            let before = probers_of(&target, &all, 2);
            let after = probers_of(&target, &without, 2);
            assert_eq!(before.len(), 2);
            if !before.contains(&"ns2") {
                assert_eq!(before, after, "{target} moved though ns2 did not probe it");
            } else {
                let kept: Vec<_> = before.iter().filter(|n| **n != "ns2").collect();
                assert!(after.contains(kept[0]), "{target}: {before:?} -> {after:?}");
            }
            for node in before {
                *count.entry(node).or_insert(0) += 1;
            }
        }
        // 600 assignments over 4 nodes: each near 150.
        for (node, n) in count {
            assert!((100..200).contains(&n), "{node} probes {n} of 300 targets");
        }
    }

    #[test]
    fn probers_come_from_different_sites_first() {
        let fleet = nodes(&[
            ("a1", Some("ams")),
            ("a2", Some("ams")),
            ("a3", Some("ams")),
            ("f1", Some("fra")),
        ]);
        for target in targets() {
            let chosen = probers_of(&target, &fleet, 2);
            assert_eq!(chosen.len(), 2);
            assert!(chosen.contains(&"f1"), "{target}: {chosen:?}");
            let three = probers_of(&target, &fleet, 3);
            assert_eq!(
                three.len(),
                3,
                "filled from the same site when none is left"
            );
        }
        assert_eq!(
            probers_of("t", &fleet, 9).len(),
            4,
            "never more than the fleet"
        );
        assert!(probers_of("t", &[], 2).is_empty());
    }

    #[test]
    fn a_strict_majority_of_reporting_probers_takes_a_target_down() {
        use Vote::*;
        let verdict = |votes: &[Vote]| tally(votes).verdict;
        assert_eq!(verdict(&[Down, Down]), Some(false));
        assert_eq!(verdict(&[Down, Up]), Some(true), "a tie serves");
        assert_eq!(
            verdict(&[Down, Stale]),
            Some(false),
            "one fresh prober decides"
        );
        assert_eq!(verdict(&[Down, Down, Up]), Some(false));
        assert_eq!(verdict(&[Down, Up, Unknown]), Some(true));
        assert_eq!(verdict(&[Stale, Missing, Unknown]), None);
        assert_eq!(verdict(&[]), None);
        assert_eq!(tally(&[Down, Down, Up]).quorum, 2);
    }

    #[test]
    fn old_results_are_stale() {
        let bound = stale_after_ms(1000, 500);
        assert_eq!(bound, 4000);
        assert_eq!(vote_of("down", Some(100), bound), Vote::Down);
        assert_eq!(vote_of("up", Some(4001), bound), Vote::Stale);
        assert_eq!(vote_of("unknown", Some(10), bound), Vote::Unknown);
        assert_eq!(vote_of("up", None, bound), Vote::Unknown);
        assert_eq!(vote_of("sideways", Some(1), bound), Vote::Unknown);
    }
}
