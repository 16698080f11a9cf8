//! Staged rollouts with a real etcd and three real `steerdns serve` nodes on loopback, waves
//! `[ns1]` (the canary) then `[ns2, ns3]`: a change the canary's taster crashes on halts at the
//! canary and never reaches the next wave; a good change reaches the canary, then after the
//! bake time the rest; a change that breaks a sanity probe on the canary is rolled back by
//! itself; `--emergency` skips the bake but nothing else; the coordinator dying mid-rollout
//! hands over to another node and the rollout completes.

mod control_common;
mod fleet_common;

use std::time::{Duration, Instant};

use control_common::*;
use fleet_common::*;

/// How long any wait may take on a busy machine.
const LIMIT: Duration = Duration::from_secs(30);
/// The drill's marker: the tasters of these nodes abort on a control text containing it.
const BOOM: &str = "TASTER-BOOM";

/// `[fleet.rollout]` with the canary wave `[ns1]`, then `[ns2, ns3]`.
fn plan(waves: &str, bake_secs: u64, probes: &[&str]) -> String {
    let probes: Vec<String> = probes.iter().map(|p| format!("{p:?}")).collect();
    format!(
        "[fleet.rollout]\nwaves = {waves}\nbake_secs = {bake_secs}\nwave_timeout_secs = 60\nprobes = [{}]\n",
        probes.join(", ")
    )
}

const CANARY_FIRST: &str = "[[\"ns1\"], [\"ns2\", \"ns3\"]]";

/// `fleet.rollout` of a node's `/v1/status`.
fn rollout_of(node: &Node) -> serde_json::Value {
    node.status()["fleet"]["rollout"].clone()
}

fn served(node: &Node) -> i64 {
    node.status()["fleet"]["revision_served"]
        .as_i64()
        .unwrap_or(0)
}

/// Polls `what` on the fleet until it returns `Some`, failing after [`LIMIT`] with `context`.
fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {LIMIT:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts the fleet and waits until the coordinator settled the seeded version (every node
/// sees a completed rollout of the control revision in etcd); returns that revision.
fn settled_fleet(label: &str, rollout: &str, env: &[&str]) -> (Fleet, i64) {
    let fleet = Fleet::start_with(label, 3, 3, rollout, env);
    fleet.wait_connected(LIMIT);
    let (revision, _) = fleet.control_in_etcd();
    wait_for("every node sees the seeded version settled", || {
        fleet
            .nodes
            .iter()
            .all(|n| {
                let r = rollout_of(n);
                r["phase"] == "completed" && r["candidate"] == revision && served(n) == revision
            })
            .then_some(())
    });
    (fleet, revision)
}

/// `steerdns rollout status --json` through `node`'s config.
fn rollout_json(node: &Node) -> serde_json::Value {
    let output = node.cli(&["rollout", "status", "--json"]);
    let text = ok(&output, "rollout status --json");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("rollout status JSON: {e}\n{text}"))
}

/// The state of `name` in a `rollout status --json`.
fn node_state(status: &serde_json::Value, name: &str) -> String {
    status["rollout"]["nodes"][name]["state"]
        .as_str()
        .unwrap_or("?")
        .to_string()
}

/// Test (2) of the issue, the GameDay drill: a change whose text the canary's taster crashes on
/// is halted within 5 s; ns2 and ns3 never taste or serve it; the canary keeps serving the
/// last known good; `rollout status` says why. Then `rollout abort` puts the fleet's control
/// state back to the last known good, and the next good change rolls out from there.
#[test]
fn a_change_the_canarys_taster_crashes_on_halts_at_the_canary() {
    let drill = format!("STEERDNS_TASTER_FAULT=abort:{BOOM}");
    let (fleet, lkg) = settled_fleet("drill", &plan(CANARY_FIRST, 1, &[]), &[&drill]);
    let subnets = distinct_subnets(SUBNETS);
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);
    let serials: Vec<u64> = fleet.nodes.iter().map(|n| n.daemon().serial()).collect();
    let refused: Vec<u64> = fleet.nodes.iter().map(|n| n.daemon().refused()).collect();

    let bad = format!("serial = 900\n# {BOOM}\n{}", critical_control(0, 100, 0));
    let submitted = Instant::now();
    fleet
        .etcd
        .etcdctl(&["put", &format!("{}/control", fleet.prefix), &bad]);
    let (bad_revision, _) = fleet.control_in_etcd();
    let halted = wait_for("the canary's crash halts the rollout", || {
        for node in &fleet.nodes[1..] {
            let status = node.status();
            assert_ne!(
                status["fleet"]["revision_served"], bad_revision,
                "{} serves the change the canary crashed on",
                node.name
            );
            assert_eq!(status["taster"]["crashed"], 0, "{} tasted it", node.name);
        }
        let rollout = rollout_of(&fleet.nodes[0]);
        (rollout["phase"] == "halted" && rollout["candidate"] == bad_revision)
            .then(|| submitted.elapsed())
    });
    println!("drill: submit -> halt {halted:?}");
    assert!(
        halted < Duration::from_secs(5),
        "halted {halted:?} after the submit"
    );

    // Nothing moved: every node serves the last known good with its old serial and answers,
    // and only the canary's taster crashed.
    for (i, node) in fleet.nodes.iter().enumerate() {
        let status = node.status();
        assert_eq!(status["fleet"]["revision_served"], lkg, "{}", node.name);
        assert_eq!(status["serial"], serials[i], "{}", node.name);
        let expected_refusals = refused[i] + u64::from(i == 0);
        assert_eq!(
            status["reloads_refused"], expected_refusals,
            "{}",
            node.name
        );
    }
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);
    // Status, metrics and the CLI show the halt on every node.
    let view = rollout_of(&fleet.nodes[1]);
    assert_eq!(view["held"], true, "{view:#}");
    assert!(
        view["halted"]
            .as_str()
            .is_some_and(|r| r.contains("taster killed by signal 6")),
        "{view:#}"
    );
    let (code, metrics) = http(fleet.nodes[0].daemon().admin, "GET", "/metrics", None);
    assert_eq!(code, 200);
    assert!(
        metrics.contains("steerdns_fleet_rollout_phase{phase=\"halted\"} 1"),
        "{metrics}"
    );
    let text = ok(&fleet.nodes[0].cli(&["status"]), "status");
    assert!(
        text.contains(&format!(
            "rollout of revision {bad_revision} from {lkg}: halted"
        )),
        "{text}"
    );
    let output = fleet.nodes[0].cli(&["fleet", "status", "--json"]);
    let fleet_status: serde_json::Value =
        serde_json::from_str(&ok(&output, "fleet status --json")).expect("JSON");
    assert_eq!(
        fleet_status["lagging"],
        serde_json::json!([]),
        "held at the last known good is not lagging: {fleet_status:#}"
    );
    let status = rollout_json(&fleet.nodes[2]);
    assert_eq!(node_state(&status, "ns1"), "refused", "{status:#}");
    for name in ["ns2", "ns3"] {
        assert_eq!(node_state(&status, name), "waiting", "{status:#}");
    }
    let text = ok(
        &fleet.nodes[2].cli(&["rollout", "status"]),
        "rollout status",
    );
    assert!(text.contains("HALTED"), "{text}");
    assert!(
        text.contains("ns1 refused") && text.contains("taster killed by signal 6"),
        "rollout status says why:\n{text}"
    );

    // Abort: the fleet's control state is the last known good again (a new version), and the
    // next edit starts from it.
    let aborted = ok(&fleet.nodes[1].cli(&["rollout", "abort"]), "rollout abort");
    assert!(aborted.contains("aborted the rollout"), "{aborted}");
    let (revision, text) = fleet.control_in_etcd();
    assert!(
        !text.contains(BOOM),
        "abort left the bad change in etcd:\n{text}"
    );
    assert!(text.contains("frontdoor = { weight = 100 }"), "{text}");
    fleet.wait_revision(revision, LIMIT);
    let output = fleet.nodes[0].cli(&["weight", "set", "--emergency", "warm", "frontdoor=50"]);
    let text = ok(&output, "weight set after the abort");
    assert!(text.contains("completed"), "{text}");
    let (_, text) = fleet.control_in_etcd();
    assert!(
        !text.contains(BOOM) && text.contains("frontdoor = { weight = 50 }"),
        "{text}"
    );
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);
}

/// Test (3): a good change reaches the canary first, and ns2 and ns3 only after the canary
/// stayed healthy for `bake_secs`.
#[test]
fn a_good_change_reaches_the_canary_then_after_the_bake_the_rest() {
    const BAKE: u64 = 2;
    let (fleet, lkg) = settled_fleet("good", &plan(CANARY_FIRST, BAKE, &[]), &[]);
    let subnets = distinct_subnets(SUBNETS);
    let written = Instant::now();
    let output = std::thread::scope(|scope| {
        let cli = scope.spawn(|| {
            fleet.nodes[1].cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"])
        });
        // Who serves the change first, and when.
        let mut first: Vec<Option<Duration>> = vec![None; 3];
        wait_for("every node serves the change", || {
            for (i, node) in fleet.nodes.iter().enumerate() {
                if first[i].is_none() && served(node) > lkg {
                    first[i] = Some(written.elapsed());
                    if i == 0 {
                        for other in &fleet.nodes[1..] {
                            assert_eq!(served(other), lkg, "{} before the bake", other.name);
                        }
                    }
                }
            }
            first.iter().all(Option::is_some).then_some(())
        });
        println!("good change: first served at {first:?} after the write");
        let canary = first[0].unwrap_or_default();
        for (i, at) in first.iter().enumerate().skip(1) {
            let at = at.unwrap_or_default();
            assert!(at > canary, "ns{} before the canary", i + 1);
            assert!(
                at >= Duration::from_secs(BAKE),
                "ns{} served it {at:?} after the write, within the bake time",
                i + 1
            );
        }
        cli.join().expect("weight set")
    });
    let text = ok(&output, "weight set");
    assert!(text.contains("completed"), "{text}");
    println!(
        "good change: full rollout {:?} after the write",
        written.elapsed()
    );
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);
    let status = rollout_json(&fleet.nodes[0]);
    let rollout = &status["rollout"];
    assert_eq!(rollout["phase"]["phase"], "completed", "{status:#}");
    let wave_two_after = rollout["released_at_ms"].as_u64().unwrap_or(0)
        - rollout["started_at_ms"].as_u64().unwrap_or(u64::MAX);
    assert!(wave_two_after >= BAKE * 1000, "{status:#}");
}

/// Test (4): a change the taster accepts but that makes a sanity probe answer worse on the
/// canary (`critical.example.com AAAA`: the regional gateways have IPv4 addresses only) is
/// rolled back there by itself; ns2 and ns3 never serve it.
#[test]
fn a_change_that_fails_a_sanity_probe_on_the_canary_is_rolled_back() {
    let probes = ["critical.example.com AAAA", "gw.example.com A"];
    let (fleet, lkg) = settled_fleet("probe", &plan(CANARY_FIRST, 1, &probes), &[]);
    let subnets = distinct_subnets(SUBNETS);
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);
    let accepted: Vec<u64> = fleet.nodes.iter().map(|n| n.daemon().accepted()).collect();
    let output = fleet.nodes[2].cli(&["weight", "set", "critical", "frontdoor=0", "appgw=100"]);
    assert!(!output.status.success(), "{}", stdout(&output));
    let text = stdout(&output);
    assert!(
        text.contains("HALTED")
            && text.contains("probe critical.example.com AAAA: NOERROR, no data"),
        "{text}"
    );
    let status = wait_for("the canary is rolled back", || {
        let status = rollout_json(&fleet.nodes[0]);
        (node_state(&status, "ns1") == "rolled_back").then_some(status)
    });
    for name in ["ns2", "ns3"] {
        assert_eq!(node_state(&status, name), "waiting", "{status:#}");
    }
    assert_eq!(served(&fleet.nodes[0]), lkg);
    // The canary served the change and then the last known good again; the others never
    // loaded anything.
    assert_eq!(fleet.nodes[0].daemon().accepted(), accepted[0] + 2);
    for (i, node) in fleet.nodes.iter().enumerate().skip(1) {
        assert_eq!(node.daemon().accepted(), accepted[i], "{}", node.name);
        assert_eq!(served(node), lkg, "{}", node.name);
    }
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);
}

/// Test (5): `--emergency` reaches every node without waiting for the bake time (here a
/// minute), through the same waves and gates.
#[test]
fn an_emergency_change_skips_the_bake_time() {
    const BAKE: u64 = 60;
    let (fleet, _) = settled_fleet("emergency", &plan(CANARY_FIRST, BAKE, &[]), &[]);
    let subnets = distinct_subnets(SUBNETS);
    let written = Instant::now();
    let output = fleet.nodes[1].cli(&[
        "weight",
        "set",
        "--emergency",
        "critical",
        "frontdoor=0",
        "alt-cdn=100",
    ]);
    let text = ok(&output, "weight set --emergency");
    assert!(text.contains("completed"), "{text}");
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);
    let elapsed = written.elapsed();
    println!("emergency change: every node serves it {elapsed:?} after the write");
    assert!(elapsed < Duration::from_secs(BAKE));
    let status = rollout_json(&fleet.nodes[0]);
    assert_eq!(status["rollout"]["emergency"], true, "{status:#}");
    assert_eq!(status["rollout"]["waves"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        status["rollout"]["phase"]["phase"], "completed",
        "{status:#}"
    );
}

/// The coordinator is any node: killing it mid-rollout hands the rollout to another node
/// (once its lease expires), which carries it on from etcd to completion.
#[test]
fn the_rollout_survives_its_coordinator_dying() {
    const BAKE: u64 = 5;
    let coordinator_key = |fleet: &Fleet| {
        fleet
            .etcd
            .etcdctl(&[
                "get",
                &format!("{}/rollout/coordinator", fleet.prefix),
                "--print-value-only",
            ])
            .trim()
            .to_string()
    };
    // ns1 is in the last wave (not listed); make it the coordinator.
    let (mut fleet, lkg) =
        settled_fleet("takeover", &plan("[[\"ns2\"], [\"ns3\"]]", BAKE, &[]), &[]);
    loop {
        let holder = wait_for("a coordinator", || {
            Some(coordinator_key(&fleet)).filter(|h| !h.is_empty())
        });
        if holder == "ns1" {
            break;
        }
        let i = fleet
            .nodes
            .iter()
            .position(|n| n.name == holder)
            .expect("a node");
        fleet.nodes[i].kill();
        wait_for("the key moves", || {
            (coordinator_key(&fleet) != holder).then_some(())
        });
        fleet.nodes[i].start();
    }
    let subnets = distinct_subnets(SUBNETS);
    let cli = {
        let node = &fleet.nodes[2];
        let config = node.setup.config.clone();
        std::process::Command::new(BIN)
            .args([
                "weight",
                "set",
                "critical",
                "frontdoor=0",
                "alt-cdn=100",
                "--config",
            ])
            .arg(config)
            .env("STEERDNS_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("weight set")
    };
    wait_for("the first wave serves it", || {
        (served(&fleet.nodes[1]) > lkg).then_some(())
    });
    fleet.nodes[0].kill();
    let successor = wait_for("another node takes over", || {
        Some(coordinator_key(&fleet)).filter(|h| !h.is_empty() && h != "ns1")
    });
    println!("coordinator ns1 killed; {successor} took over");
    fleet.nodes[0].start();
    let revision = served(&fleet.nodes[1]);
    wait_for("the rollout completes on every node", || {
        let status = rollout_json(&fleet.nodes[1]);
        (status["rollout"]["phase"]["phase"] == "completed"
            && status["rollout"]["candidate"] == revision)
            .then_some(())
    });
    fleet.wait_revision(revision, LIMIT);
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);
    let mut cli = cli;
    let _ = cli.wait();
}

/// The crash gate: a canary that restarts while its wave bakes halts the rollout; after the
/// restart it serves the last known good again (from etcd, not the cached change), and the
/// next wave never gets the change.
#[test]
fn a_canary_restarting_during_the_bake_halts_the_rollout() {
    const BAKE: u64 = 60;
    let (mut fleet, lkg) = settled_fleet("restart", &plan(CANARY_FIRST, BAKE, &[]), &[]);
    let subnets = distinct_subnets(SUBNETS);
    let cli = {
        let config = fleet.nodes[1].setup.config.clone();
        std::process::Command::new(BIN)
            .args([
                "weight",
                "set",
                "critical",
                "frontdoor=0",
                "alt-cdn=100",
                "--config",
            ])
            .arg(config)
            .env("STEERDNS_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("weight set")
    };
    let candidate = wait_for("the canary serves the change", || {
        Some(served(&fleet.nodes[0])).filter(|r| *r > lkg)
    });
    fleet.nodes[0].kill();
    fleet.nodes[0].start();
    let status = wait_for("the restart halts the rollout", || {
        let status = rollout_json(&fleet.nodes[2]);
        (status["rollout"]["phase"]["phase"] == "halted").then_some(status)
    });
    let reason = status["rollout"]["phase"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("ns1 restarted during the rollout") || reason.contains("ns1 is gone"),
        "{status:#}"
    );
    assert_eq!(status["rollout"]["candidate"], candidate, "{status:#}");
    assert_eq!(node_state(&status, "ns1"), "crashed", "{status:#}");
    wait_for("the restarted canary serves the last known good", || {
        (served(&fleet.nodes[0]) == lkg).then_some(())
    });
    for node in &fleet.nodes[1..] {
        assert_eq!(served(node), lkg, "{}", node.name);
    }
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);
    let mut cli = cli;
    let _ = cli.wait();
}
