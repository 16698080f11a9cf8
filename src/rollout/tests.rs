//! The rollout state machine, driven by hand-made reports and clock values.

use std::collections::BTreeMap;

use super::machine::parse_probe;
use super::*;

const LKG: Revision = 6;
const NEW: Revision = 7;
const SEC: u64 = 1000;

fn plan() -> Plan {
    Plan {
        waves: vec![vec!["ns1".into()], vec!["ns2".into(), "ns3".into()]],
        bake_secs: 10,
        wave_timeout_secs: 30,
        probes: vec!["critical.example.com A".into()],
        servfail_margin: 0.01,
        min_queries: 100,
    }
}

fn ok_probe(revision: Revision) -> Option<(Revision, Vec<ProbeResult>)> {
    Some((
        revision,
        vec![ProbeResult {
            probe: "critical.example.com A".into(),
            ok: true,
            detail: "NOERROR, 1 answer".into(),
        }],
    ))
}

fn bad_probe(revision: Revision) -> Option<(Revision, Vec<ProbeResult>)> {
    Some((
        revision,
        vec![ProbeResult {
            probe: "critical.example.com A".into(),
            ok: false,
            detail: "NOERROR, no data".into(),
        }],
    ))
}

/// A node serving `revision`, healthy, probes fine.
fn serving(revision: Revision) -> NodeReport {
    NodeReport {
        boot: "boot-1".into(),
        serving: Some(revision),
        tasting: None,
        refused: None,
        queries: 1000,
        servfail: 0,
        probes: ok_probe(revision),
    }
}

/// The fleet: every node on `revision`.
fn fleet(revision: Revision) -> BTreeMap<String, NodeReport> {
    ["ns1", "ns2", "ns3"]
        .iter()
        .map(|n| (n.to_string(), serving(revision)))
        .collect()
}

fn begin(emergency: bool) -> (Rollout, BTreeMap<String, NodeReport>) {
    let reports = fleet(LKG);
    let rollout = Rollout::begin(
        NEW,
        LKG,
        "critical: frontdoor 100 -> 0",
        emergency,
        &plan(),
        &reports,
        0,
    );
    (rollout, reports)
}

fn allowed(rollout: &Rollout) -> Vec<Revision> {
    ["ns1", "ns2", "ns3"]
        .iter()
        .map(|n| rollout.allowed(n))
        .collect()
}

fn state(rollout: &Rollout, node: &str) -> NodeState {
    rollout.nodes[node].state
}

fn halted_reason(rollout: &Rollout) -> &str {
    match &rollout.phase {
        Phase::Halted { reason, .. } => reason,
        other => panic!("not halted: {other:?}"),
    }
}

#[test]
fn plan_problems_are_all_reported() {
    assert!(plan().problems().is_empty());
    assert!(Plan::default().problems().is_empty());
    let bad = Plan {
        waves: vec![vec!["ns1".into()], vec![], vec!["ns1".into(), "a b".into()]],
        probes: vec!["critical.example.com".into(), "x.example. BOGUS".into()],
        servfail_margin: 2.0,
        wave_timeout_secs: 0,
        ..Plan::default()
    };
    let problems: Vec<String> = bad.problems().iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 7, "{problems:#?}");
    assert!(problems.iter().any(|p| p.contains("wave 2 is empty")));
    assert!(problems
        .iter()
        .any(|p| p.contains("ns1 is in more than one wave")));
    assert!(problems.iter().any(|p| p.contains("\"a b\"")));
    assert_eq!(
        parse_probe("critical.example.com aaaa"),
        Some(("critical.example.com".into(), "AAAA".into()))
    );
}

#[test]
fn waves_resolve_against_the_nodes_present() {
    let plan = Plan {
        waves: vec![vec!["ns1".into()], vec!["ns2".into(), "ns9".into()]],
        ..Plan::default()
    };
    assert_eq!(
        plan.resolve(["ns4", "ns3", "ns2", "ns1"]),
        vec![vec!["ns1"], vec!["ns2"], vec!["ns3", "ns4"]]
    );
    // Canary absent: its wave is dropped, the next is first.
    assert_eq!(plan.resolve(["ns2", "ns3"]), vec![vec!["ns2"], vec!["ns3"]]);
    // No waves configured: one wave of everyone.
    assert_eq!(
        Plan::default().resolve(["b", "a"]),
        vec![vec!["a".to_string(), "b".to_string()]]
    );
    let reports: BTreeMap<String, NodeReport> =
        [("ns1".to_string(), serving(LKG))].into_iter().collect();
    let rollout = Rollout::begin(NEW, LKG, "", false, &plan, &reports, 0);
    assert_eq!(rollout.absent, ["ns2", "ns9"]);
}

/// Test (3) of the issue, as a state machine: canary, bake, then the rest, bake, done.
#[test]
fn a_good_change_goes_wave_by_wave_with_bake_times() {
    let (mut rollout, mut reports) = begin(false);
    assert_eq!(
        allowed(&rollout),
        [NEW, LKG, LKG],
        "only the canary is released"
    );
    assert_eq!(state(&rollout, "ns1"), NodeState::Tasting);
    assert_eq!(state(&rollout, "ns2"), NodeState::Waiting);

    // The canary is still loading: nothing happens.
    reports.get_mut("ns1").unwrap().tasting = Some(NEW);
    assert!(rollout.step(&reports, SEC).is_empty());
    assert_eq!(rollout.healthy_since_ms, None);

    // It serves the change at 2 s: healthy from then on; the bake runs 10 s.
    reports.insert("ns1".into(), serving(NEW));
    assert!(rollout.step(&reports, 2 * SEC).is_empty());
    assert_eq!(rollout.healthy_since_ms, Some(2 * SEC));
    assert_eq!(state(&rollout, "ns1"), NodeState::Serving);
    assert!(rollout.step(&reports, 11 * SEC).is_empty());
    assert_eq!(
        allowed(&rollout),
        [NEW, LKG, LKG],
        "released before the bake ended"
    );

    let events = rollout.step(&reports, 12 * SEC);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        events[0].contains("released wave 2 (ns2, ns3)"),
        "{events:?}"
    );
    assert_eq!(allowed(&rollout), [NEW, NEW, NEW]);

    reports.insert("ns2".into(), serving(NEW));
    assert!(rollout.step(&reports, 13 * SEC).is_empty());
    reports.insert("ns3".into(), serving(NEW));
    assert!(rollout.step(&reports, 14 * SEC).is_empty());
    assert!(
        rollout.step(&reports, 23 * SEC).is_empty(),
        "the last wave bakes too"
    );
    let events = rollout.step(&reports, 24 * SEC);
    assert!(events[0].contains("completed"), "{events:?}");
    assert_eq!(rollout.phase, Phase::Completed { at_ms: 24 * SEC });
    assert_eq!(rollout.lkg_now(), NEW);
    assert_eq!(allowed(&rollout), [NEW, NEW, NEW]);
    // A node that joins later gets the completed change.
    assert_eq!(rollout.allowed("ns4"), NEW);
}

/// Test (2) of the issue: the canary's taster crashes on the change; the rollout halts at
/// once and nobody else is ever released.
#[test]
fn a_refusal_on_the_canary_halts_before_the_next_wave() {
    let (mut rollout, mut reports) = begin(false);
    reports.get_mut("ns1").unwrap().refused =
        Some((NEW, "taster killed by signal 6 (SIGABRT)".into()));
    let events = rollout.step(&reports, SEC);
    assert!(events[0].contains("halted in wave 1"), "{events:?}");
    assert_eq!(
        halted_reason(&rollout),
        "ns1 refused 7: taster killed by signal 6 (SIGABRT)"
    );
    assert_eq!(allowed(&rollout), [LKG, LKG, LKG]);
    assert_eq!(state(&rollout, "ns1"), NodeState::Refused);
    assert_eq!(state(&rollout, "ns2"), NodeState::Waiting);
    // However long it stays halted, nothing is released.
    for t in 2..100 {
        rollout.step(&reports, t * SEC);
    }
    assert_eq!(allowed(&rollout), [LKG, LKG, LKG]);
    // An older refusal (of another version) is no reason to halt.
    let (mut rollout, mut reports) = begin(false);
    reports.get_mut("ns1").unwrap().refused = Some((5, "old".into()));
    assert!(rollout.step(&reports, SEC).is_empty());
    assert!(rollout.is_running());
}

/// Test (4) of the issue: tasted fine, but a sanity probe fails on the canary: halted, and
/// the canary, which served it, is rolled back.
#[test]
fn a_failing_probe_on_the_canary_rolls_it_back() {
    let (mut rollout, mut reports) = begin(false);
    let mut canary = serving(NEW);
    canary.probes = bad_probe(NEW);
    reports.insert("ns1".into(), canary);
    rollout.step(&reports, SEC);
    assert_eq!(
        halted_reason(&rollout),
        "ns1: probe critical.example.com A: NOERROR, no data"
    );
    assert_eq!(allowed(&rollout), [LKG, LKG, LKG]);
    assert_eq!(state(&rollout, "ns1"), NodeState::Serving);
    // The canary follows: it serves the LKG again.
    reports.insert("ns1".into(), serving(LKG));
    rollout.step(&reports, 2 * SEC);
    assert_eq!(state(&rollout, "ns1"), NodeState::RolledBack);
    assert_eq!(state(&rollout, "ns2"), NodeState::Waiting);
}

#[test]
fn a_probe_that_failed_before_the_change_does_not_halt_it() {
    let mut reports = fleet(LKG);
    for report in reports.values_mut() {
        report.probes = bad_probe(LKG);
    }
    let mut rollout = Rollout::begin(NEW, LKG, "", false, &plan(), &reports, 0);
    let mut canary = serving(NEW);
    canary.probes = bad_probe(NEW);
    reports.insert("ns1".into(), canary);
    rollout.step(&reports, SEC);
    assert!(rollout.is_running(), "{:?}", rollout.phase);
    assert_eq!(rollout.healthy_since_ms, Some(SEC));
}

#[test]
fn probes_must_be_reported_for_the_change_before_a_wave_counts_as_healthy() {
    let (mut rollout, mut reports) = begin(false);
    let mut canary = serving(NEW);
    canary.probes = ok_probe(LKG);
    reports.insert("ns1".into(), canary);
    rollout.step(&reports, SEC);
    assert!(rollout.is_running());
    assert_eq!(
        rollout.healthy_since_ms, None,
        "healthy without probe results"
    );
    // ... and never coming is a timeout.
    rollout.step(&reports, 31 * SEC + 1);
    assert!(
        halted_reason(&rollout).contains("ns1 (probing)"),
        "{:?}",
        rollout.phase
    );
}

#[test]
fn a_worse_servfail_share_halts_but_only_with_enough_queries() {
    let (mut rollout, mut reports) = begin(false);
    // Before: 0 SERVFAIL in 1000. Since the change: 50 queries, 5 SERVFAIL: too few to judge.
    reports.insert("ns1".into(), serving(NEW));
    rollout.step(&reports, SEC);
    let canary = reports.get_mut("ns1").unwrap();
    canary.queries += 50;
    canary.servfail += 5;
    rollout.step(&reports, 2 * SEC);
    assert!(rollout.is_running());
    // 200 queries, 5 SERVFAIL: 2.5% > 0% + 1%.
    let canary = reports.get_mut("ns1").unwrap();
    canary.queries += 150;
    rollout.step(&reports, 3 * SEC);
    assert_eq!(
        halted_reason(&rollout),
        "ns1: SERVFAIL share 2.5% over 200 queries, was 0.0%"
    );
    // Within the margin: 1 SERVFAIL in 200 (0.5%) is fine.
    let (mut rollout, mut reports) = begin(false);
    reports.insert("ns1".into(), serving(NEW));
    rollout.step(&reports, SEC);
    let canary = reports.get_mut("ns1").unwrap();
    canary.queries += 200;
    canary.servfail += 1;
    rollout.step(&reports, 2 * SEC);
    assert!(rollout.is_running());
}

#[test]
fn an_earlier_wave_that_crashes_later_halts_everything() {
    let (mut rollout, mut reports) = begin(false);
    reports.insert("ns1".into(), serving(NEW));
    rollout.step(&reports, SEC);
    rollout.step(&reports, 11 * SEC);
    assert_eq!(allowed(&rollout), [NEW, NEW, NEW]);
    reports.insert("ns2".into(), serving(NEW));
    rollout.step(&reports, 12 * SEC);
    // The canary restarts (new boot id) while wave 2 bakes.
    reports.get_mut("ns1").unwrap().boot = "boot-2".into();
    rollout.step(&reports, 13 * SEC);
    assert_eq!(halted_reason(&rollout), "ns1 restarted during the rollout");
    assert_eq!(allowed(&rollout), [LKG, LKG, LKG]);
    assert_eq!(state(&rollout, "ns1"), NodeState::Crashed);
    reports.insert("ns2".into(), serving(LKG));
    rollout.step(&reports, 14 * SEC);
    assert_eq!(state(&rollout, "ns2"), NodeState::RolledBack);
    assert_eq!(state(&rollout, "ns3"), NodeState::Waiting);
}

#[test]
fn a_released_node_that_vanishes_halts() {
    let (mut rollout, mut reports) = begin(false);
    reports.remove("ns1");
    rollout.step(&reports, SEC);
    assert!(halted_reason(&rollout).contains("ns1 is gone"));
    // A node of an unreleased wave vanishing is not a reason.
    let (mut rollout, mut reports) = begin(false);
    reports.remove("ns3");
    rollout.step(&reports, SEC);
    assert!(rollout.is_running());
}

#[test]
fn a_wave_that_never_serves_times_out() {
    let (mut rollout, reports) = begin(false);
    rollout.step(&reports, 30 * SEC);
    assert!(rollout.is_running());
    rollout.step(&reports, 30 * SEC + 1);
    assert_eq!(
        halted_reason(&rollout),
        "wave 1 did not serve 7 within 30 s: ns1 (tasting)"
    );
}

/// Test (5) of the issue: `--emergency` skips the bake times, not the gates.
#[test]
fn emergency_skips_bake_but_not_the_gates() {
    let (mut rollout, mut reports) = begin(true);
    reports.insert("ns1".into(), serving(NEW));
    let events = rollout.step(&reports, 100);
    assert!(events[0].contains("released wave 2"), "{events:?}");
    reports.insert("ns2".into(), serving(NEW));
    reports.insert("ns3".into(), serving(NEW));
    let events = rollout.step(&reports, 200);
    assert!(events[0].contains("completed"), "{events:?}");
    // A refusal still halts an emergency change.
    let (mut rollout, mut reports) = begin(true);
    reports.get_mut("ns1").unwrap().refused = Some((NEW, "taster exceeded 2 s".into()));
    rollout.step(&reports, 100);
    assert!(halted_reason(&rollout).contains("taster exceeded 2 s"));
    assert_eq!(allowed(&rollout), [LKG, LKG, LKG]);
}

#[test]
fn resume_continues_after_a_transient_failure_and_abort_returns_to_the_lkg() {
    let (mut rollout, mut reports) = begin(false);
    reports.insert("ns1".into(), serving(NEW));
    reports.get_mut("ns1").unwrap().boot = "boot-2".into();
    rollout.step(&reports, SEC);
    assert!(halted_reason(&rollout).contains("restarted"));
    assert!(rollout.abort(2 * SEC).is_ok());
    assert_eq!(allowed(&rollout), [LKG, LKG, LKG]);
    assert!(
        rollout.resume(&reports, 3 * SEC).is_err(),
        "an aborted rollout resumes"
    );
    assert!(rollout.abort(3 * SEC).is_err());

    let (mut rollout, mut reports) = begin(false);
    reports.insert("ns1".into(), serving(NEW));
    reports.get_mut("ns1").unwrap().boot = "boot-2".into();
    rollout.step(&reports, SEC);
    assert!(!rollout.is_running());
    assert!(rollout.resume(&reports, 2 * SEC).is_ok());
    assert_eq!(allowed(&rollout), [NEW, LKG, LKG]);
    rollout.step(&reports, 3 * SEC);
    assert!(rollout.is_running(), "{:?}", rollout.phase);
    rollout.step(&reports, 13 * SEC);
    assert_eq!(allowed(&rollout), [NEW, NEW, NEW]);
    assert!(
        rollout.resume(&reports, 14 * SEC).is_err(),
        "a running rollout resumes"
    );
}

#[test]
fn a_completed_rollout_cannot_be_aborted() {
    let mut rollout = Rollout::settled(NEW, 0);
    assert_eq!(allowed(&rollout), [NEW, NEW, NEW]);
    assert_eq!(rollout.lkg_now(), NEW);
    let err = rollout.abort(SEC).unwrap_err();
    assert!(err.contains("roll back instead"), "{err}");
}

#[test]
fn no_nodes_at_all_completes_at_once() {
    let rollout = Rollout::begin(NEW, LKG, "", false, &plan(), &BTreeMap::new(), 0);
    assert_eq!(rollout.phase, Phase::Completed { at_ms: 0 });
}

#[test]
fn the_state_survives_a_round_trip_through_json() {
    let (mut rollout, mut reports) = begin(false);
    reports.insert("ns1".into(), serving(NEW));
    rollout.step(&reports, SEC);
    let text = serde_json::to_string(&rollout).expect("json");
    let back: Rollout = serde_json::from_str(&text).expect("parse");
    assert_eq!(back, rollout);
    // A coordinator that picks it up continues where the last one stopped.
    let mut picked_up = back;
    picked_up.step(&reports, 11 * SEC);
    assert_eq!(allowed(&picked_up), [NEW, NEW, NEW]);
}

#[test]
fn status_text_names_the_change_the_phase_and_every_node() {
    let (mut rollout, mut reports) = begin(false);
    reports.get_mut("ns1").unwrap().refused =
        Some((NEW, "taster killed by signal 6 (SIGABRT)".into()));
    rollout.step(&reports, 1500);
    let text = rollout.describe(3000).join("\n");
    assert!(
        text.contains("rollout of revision 7 (critical: frontdoor 100 -> 0)"),
        "{text}"
    );
    assert!(
        text.contains("HALTED 1.5 s ago: ns1 refused 7: taster killed by signal 6"),
        "{text}"
    );
    assert!(
        text.contains("wave 1: ns1 refused (taster killed by signal 6 (SIGABRT))"),
        "{text}"
    );
    assert!(
        text.contains("wave 2 (not released): ns2 waiting, ns3 waiting"),
        "{text}"
    );
    assert!(text.contains("last known good: revision 6"), "{text}");
}
