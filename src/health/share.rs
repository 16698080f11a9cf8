//! Shared probing in a fleet, the pure part: which nodes probe a target, and what the fleet
//! serves for it. No clocks, no I/O, no etcd: the fleet's health task (`crate::fleet::health`)
//! feeds it what etcd holds and hands the outcome to [`super::Health`], and `steerdns fleet
//! status` runs the same functions on the same records, so every node and the CLI agree.
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

use serde::{Deserialize, Serialize};

use crate::hash::{fnv1a64, fnv1a64_more};

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
