//! Staged rollouts with a real etcd and three real `steerdns serve` nodes on loopback, waves
//! `[ns1]` (the canary) then `[ns2, ns3]`: a change the canary's taster crashes on halts at the
//! canary and never reaches the next wave; a good change reaches the canary, then after the
//! bake time the rest; a change that breaks a sanity probe on the canary is rolled back by
//! itself; `--emergency` skips the bake but nothing else; the coordinator dying mid-rollout
//! hands over to another node and the rollout completes.
//!
//! The same for the nodes' config/zone/GeoIP bundles (files on each node, staged by the same
//! coordinator): a zone change reaches the canary first and the rest after the bake; one the
//! canary's taster crashes on halts there; one that breaks a probe on the canary is rolled back.

use crate::control_common;
use crate::fleet_common;

use std::time::{Duration, Instant};

use control_common::*;
use fleet_common::*;
use hickory_proto::rr::{RData, RecordType};

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

/// Polls `check` on the fleet until it returns `Some`, failing after [`LIMIT`] naming `what`.
fn wait_for<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    control_common::wait_for(what, LIMIT, check)
}

/// Starts `steerdns weight set critical frontdoor=0 alt-cdn=100` against `node`'s config,
/// without waiting for it (the rollout it starts takes a while).
fn spawn_alt_cdn_weight_set(node: &Node) -> std::process::Child {
    std::process::Command::new(BIN)
        .args([
            "weight",
            "set",
            "critical",
            "frontdoor=0",
            "alt-cdn=100",
            "--config",
        ])
        .arg(&node.setup.config)
        .env("STEERDNS_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("weight set")
}

/// How long after `since` each node first served the change (`serves` holds), waiting (see
/// [`wait_for`]) until every node does; when the canary (the first node) serves it, `unchanged`
/// checks each other node still serves the old.
fn canary_then_the_rest(
    fleet: &Fleet,
    since: Instant,
    what: &str,
    serves: impl Fn(&Node) -> bool,
    unchanged: impl Fn(&Node),
) -> Vec<Option<Duration>> {
    let mut first: Vec<Option<Duration>> = vec![None; 3];
    wait_for(what, || {
        for (i, node) in fleet.nodes.iter().enumerate() {
            if first[i].is_none() && serves(node) {
                first[i] = Some(since.elapsed());
                if i == 0 {
                    for other in &fleet.nodes[1..] {
                        unchanged(other);
                    }
                }
            }
        }
        first.iter().all(Option::is_some).then_some(())
    });
    first
}

/// Asserts every node after the canary served the change later than it, and not within
/// `bake_secs` of the change.
fn assert_after_the_canary_and_the_bake(first: &[Option<Duration>], bake_secs: u64) {
    let canary = first[0].unwrap_or_default();
    for (i, at) in first.iter().enumerate().skip(1) {
        let at = at.unwrap_or_default();
        assert!(at > canary, "ns{} before the canary", i + 1);
        assert!(
            at >= Duration::from_secs(bake_secs),
            "ns{} served it {at:?} after the change, within the bake time",
            i + 1
        );
    }
}

/// Starts the fleet and waits until the coordinator settled the seeded version (every node
/// sees a completed rollout of the control revision in etcd); returns that revision.
fn settled_fleet(label: &str, rollout: &str, env: &[&str]) -> (Fleet, i64) {
    settle(Fleet::start_on(Etcd::start(), label, 3, 3, rollout, env))
}

/// Waits until the coordinator settled the seeded version on every node of `fleet`.
fn settle(fleet: Fleet) -> (Fleet, i64) {
    let revision = fleet.wait_settled(LIMIT);
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
        let rollout = fleet.nodes[0].rollout();
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
    let view = fleet.nodes[1].rollout();
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
        let first = canary_then_the_rest(
            &fleet,
            written,
            "every node serves the change",
            |node| node.revision_served() > lkg,
            |other| {
                assert_eq!(
                    other.revision_served(),
                    lkg,
                    "{} before the bake",
                    other.name
                )
            },
        );
        println!("good change: first served at {first:?} after the write");
        assert_after_the_canary_and_the_bake(&first, BAKE);
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
    assert_eq!(fleet.nodes[0].revision_served(), lkg);
    // The canary served the change and then the last known good again; the others never
    // loaded anything.
    assert_eq!(fleet.nodes[0].daemon().accepted(), accepted[0] + 2);
    for (i, node) in fleet.nodes.iter().enumerate().skip(1) {
        assert_eq!(node.daemon().accepted(), accepted[i], "{}", node.name);
        assert_eq!(node.revision_served(), lkg, "{}", node.name);
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
    let cli = spawn_alt_cdn_weight_set(&fleet.nodes[2]);
    wait_for("the first wave serves it", || {
        (fleet.nodes[1].revision_served() > lkg).then_some(())
    });
    fleet.nodes[0].kill();
    let successor = wait_for("another node takes over", || {
        Some(coordinator_key(&fleet)).filter(|h| !h.is_empty() && h != "ns1")
    });
    println!("coordinator ns1 killed; {successor} took over");
    fleet.nodes[0].start();
    let revision = fleet.nodes[1].revision_served();
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
    let cli = spawn_alt_cdn_weight_set(&fleet.nodes[1]);
    let candidate = wait_for("the canary serves the change", || {
        Some(fleet.nodes[0].revision_served()).filter(|r| *r > lkg)
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
        (fleet.nodes[0].revision_served() == lkg).then_some(())
    });
    for node in &fleet.nodes[1..] {
        assert_eq!(node.revision_served(), lkg, "{}", node.name);
    }
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);
    let mut cli = cli;
    let _ = cli.wait();
}

/// The SOA serial `node` answers for example.com (over DNS).
fn zone_serial(node: &Node) -> u32 {
    let query = plain_query("example.com.", RecordType::SOA);
    let response = Resolver::new(node.daemon().dns).ask(&query);
    match response.answers.first().map(|r| &r.data) {
        Some(RData::SOA(soa)) => soa.serial,
        other => panic!("{}: no SOA for example.com: {other:?}", node.name),
    }
}

/// The bundled zone's serial, and the deployment's edit of it on every node: a new serial,
/// `edit` applied to the rest of the text; then SIGHUP (what a config manager does).
const ZONE_SERIAL: u32 = 2026113001;

fn deploy_zone(fleet: &Fleet, serial: u32, edit: impl Fn(&str) -> String) {
    for node in &fleet.nodes {
        let path = node.setup.path("zones/example.com.zone");
        let text = std::fs::read_to_string(&path).expect("zone file");
        let text = edit(&text.replace(&ZONE_SERIAL.to_string(), &serial.to_string()));
        write_atomically(&path, text.as_bytes());
        node.daemon().sighup();
    }
}

/// The bundle rollout in `rollout status --json`, once its phase is `phase`.
fn bundles_in_phase(fleet: &Fleet, phase: &str) -> serde_json::Value {
    wait_for(&format!("the bundle rollout is {phase}"), || {
        let status = rollout_json(&fleet.nodes[0]);
        let bundles = &status["bundles"]["rollout"];
        (bundles["candidate"].as_u64() >= Some(1) && bundles["phase"]["phase"] == phase)
            .then(|| status["bundles"].clone())
    })
}

/// A zone change (new serial) on every node reaches the canary first and ns2 and ns3 only
/// after the canary stayed healthy for `bake_secs`; the control state is not touched.
#[test]
fn a_zone_change_reaches_the_canary_then_after_the_bake_the_rest() {
    const BAKE: u64 = 2;
    const NEW: u32 = ZONE_SERIAL + 1;
    let (fleet, lkg) = settled_fleet("zones", &plan(CANARY_FIRST, BAKE, &[]), &[]);
    let deployed = Instant::now();
    deploy_zone(&fleet, NEW, str::to_string);
    let first = canary_then_the_rest(
        &fleet,
        deployed,
        "every node serves the new zone serial",
        |node| zone_serial(node) == NEW,
        |other| assert_eq!(zone_serial(other), ZONE_SERIAL, "{} first", other.name),
    );
    println!("zone change: first served at {first:?} after the deployment");
    assert_after_the_canary_and_the_bake(&first, BAKE);
    let bundles = bundles_in_phase(&fleet, "completed");
    let rollout = &bundles["rollout"];
    let wave_two_after = rollout["released_at_ms"].as_u64().unwrap_or(0)
        - rollout["started_at_ms"].as_u64().unwrap_or(u64::MAX);
    assert!(wave_two_after >= BAKE * 1000, "{bundles:#}");
    for node in &fleet.nodes {
        let status = node.status();
        assert_eq!(status["fleet"]["revision_served"], lkg, "{}", node.name);
        assert_eq!(
            status["bundle"]["pending"],
            serde_json::Value::Null,
            "{status:#}"
        );
        assert_eq!(
            status["bundle"]["serving"], bundles["nodes"][&node.name]["candidate"],
            "{}",
            node.name
        );
    }
}

/// The drill for files: a zone change that the canary's taster crashes on (its marker is in
/// the zone file) halts at the canary within 5 s; ns2 and ns3, whose tasters accept it, never
/// serve it; `rollout status` says why.
#[test]
fn a_zone_change_the_canarys_taster_crashes_on_halts_at_the_canary() {
    let drill = format!("STEERDNS_TASTER_FAULT=abort:{BOOM}");
    let rollout = plan(CANARY_FIRST, 1, &[]);
    let mut fleet = Fleet::start_on(Etcd::start(), "zonedrill", 1, 3, &rollout, &[&drill]);
    for _ in 0..2 {
        fleet.add_node("zonedrill", 3, &rollout, &[]);
    }
    let (fleet, _) = settle(fleet);
    const NEW: u32 = ZONE_SERIAL + 5;
    let submitted = Instant::now();
    deploy_zone(&fleet, NEW, |text| format!("{text}; {BOOM}\n"));
    let halted = wait_for("the canary's crash halts the bundle rollout", || {
        for node in &fleet.nodes {
            assert_eq!(zone_serial(node), ZONE_SERIAL, "{} serves it", node.name);
        }
        // (If ns2's files were reported before the canary's, the first generation halts as
        // soon as the canary's arrive, and the next one halts on the canary's crash.)
        let status = rollout_json(&fleet.nodes[1]);
        let phase = &status["bundles"]["rollout"]["phase"];
        let reason = phase["reason"].as_str().unwrap_or("");
        (phase["phase"] == "halted" && reason.contains("taster killed by signal 6"))
            .then(|| submitted.elapsed())
    });
    println!("zone drill: deployment -> halt {halted:?}");
    assert!(halted < Duration::from_secs(5), "halted {halted:?} after");
    let status = rollout_json(&fleet.nodes[2]);
    let bundles = &status["bundles"]["rollout"];
    let reason = bundles["phase"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("taster killed by signal 6"), "{status:#}");
    assert_eq!(bundles["nodes"]["ns1"]["state"], "refused", "{status:#}");
    for name in ["ns2", "ns3"] {
        assert_eq!(bundles["nodes"][name]["state"], "waiting", "{status:#}");
    }
    // ns2 and ns3 taste their files (fine there; perhaps only after the halt, on a busy
    // machine) and hold them; nothing serves them.
    for node in &fleet.nodes[1..] {
        wait_for(&format!("{} holds its tasted files", node.name), || {
            assert_eq!(zone_serial(node), ZONE_SERIAL, "{}", node.name);
            node.status()["bundle"]["pending"].is_string().then_some(())
        });
    }
    let canary = fleet.nodes[0].status();
    assert_eq!(canary["taster"]["crashed"], 1, "{canary:#}");
    let text = ok(
        &fleet.nodes[1].cli(&["rollout", "status"]),
        "rollout status",
    );
    assert!(
        text.contains("bundle rollout of generation") && text.contains("HALTED"),
        "{text}"
    );
}

/// A zone change that passes the taster but breaks a sanity probe on the canary (it drops
/// `mail.example.com A`) is rolled back there to the previous bundle by itself; ns2 and ns3
/// never serve it.
#[test]
fn a_zone_change_that_fails_a_sanity_probe_on_the_canary_is_rolled_back() {
    const NEW: u32 = ZONE_SERIAL + 9;
    let probes = ["mail.example.com A"];
    let (fleet, _) = settled_fleet("zoneprobe", &plan(CANARY_FIRST, 1, &probes), &[]);
    let served_before = fleet.nodes[0].status()["bundle"]["serving"].clone();
    deploy_zone(&fleet, NEW, |text| {
        text.replace("mail         A     192.0.2.25\n", "")
    });
    let bundles = wait_for("the canary is rolled back", || {
        for node in &fleet.nodes[1..] {
            assert_eq!(zone_serial(node), ZONE_SERIAL, "{} serves it", node.name);
        }
        let status = rollout_json(&fleet.nodes[0]);
        let bundles = status["bundles"].clone();
        (bundles["rollout"]["nodes"]["ns1"]["state"] == "rolled_back").then_some(bundles)
    });
    let reason = bundles["rollout"]["phase"]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("probe mail.example.com A"), "{bundles:#}");
    assert_eq!(zone_serial(&fleet.nodes[0]), ZONE_SERIAL);
    let canary = fleet.nodes[0].status();
    assert_eq!(canary["bundle"]["serving"], served_before, "{canary:#}");
    let query = plain_query("mail.example.com.", RecordType::A);
    let answer = Resolver::new(fleet.nodes[0].daemon().dns).ask(&query);
    assert_eq!(answer.answers.len(), 1, "{answer:?}");
    for name in ["ns2", "ns3"] {
        assert_eq!(
            bundles["rollout"]["nodes"][name]["state"], "waiting",
            "{bundles:#}"
        );
    }
}
