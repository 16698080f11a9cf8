//! What a fleet does with bad, hand-written or stale records in etcd, with a real etcd and real
//! `steerdns serve` nodes on loopback: one unparseable registry record is skipped and named (it
//! never stops a rollout, `--emergency` included); a deleted or unreadable rollout state holds
//! every node at what it serves until the coordinator re-creates it, or `rollout reset`,
//! `resume` or `abort` replaces it; CLI errors say what failed and whether the write landed; a
//! hand-written coordinator key is taken over; a second node with a taken name does not
//! register; an out-of-range serial in a node record and a prober record on no lease are not
//! believed.
//!
//! Every wait polls observable state (status, metrics, etcd), never a fixed sleep.

use crate::control_common;
use crate::fleet_common;

use std::time::Duration;

use control_common::*;
use fleet_common::*;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(30);
/// The drill's marker: the canary's taster aborts on a control text containing it.
const BOOM: &str = "TASTER-BOOM";
const CANARY_FIRST: &str = "[[\"ns1\"], [\"ns2\", \"ns3\"]]";

fn plan(bake_secs: u64) -> String {
    format!(
        "[fleet.rollout]\nwaves = {CANARY_FIRST}\nbake_secs = {bake_secs}\nwave_timeout_secs = 60\n"
    )
}

fn wait_for<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    control_common::wait_for(what, LIMIT, check)
}

fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Three nodes, waves [ns1] then [ns2, ns3], settled on the seeded version; returns it.
fn settled(label: &str, bake_secs: u64, env: &[&str]) -> (Fleet, i64) {
    let fleet = Fleet::start_on(Etcd::start(), label, 3, 3, &plan(bake_secs), env);
    let revision = fleet.wait_settled(LIMIT);
    (fleet, revision)
}

/// The node whose coordinator task drives rollouts.
fn coordinator(fleet: &Fleet) -> &Node {
    wait_for("a coordinator", || {
        fleet
            .nodes
            .iter()
            .find(|n| n.rollout()["coordinator"] == true)
    })
}

/// `key`'s lease in etcd (0: on none), if the key exists.
fn lease_of(fleet: &Fleet, key: &str) -> Option<i64> {
    let json = fleet.etcd.etcdctl(&["get", key, "-w", "json"]);
    let value: Value = serde_json::from_str(&json).expect("etcdctl json");
    let kv = value["kvs"].get(0)?;
    Some(kv["lease"].as_i64().unwrap_or(0))
}

fn rollout_state(fleet: &Fleet) -> Option<Value> {
    let key = format!("{}/rollout/state", fleet.prefix);
    let out = fleet.etcd.etcdctl(&["get", &key, "--print-value-only"]);
    serde_json::from_str(out.trim()).ok()
}

/// Issue #28 item 3: a registry record no node wrote (not JSON, on no lease) is skipped and
/// named in `fleet status`, `rollout status`, the coordinator's `/v1/status` and metrics; an
/// `--emergency` change still reaches every node.
#[test]
fn a_bad_registry_record_never_stops_an_emergency_change() {
    let (fleet, _) = settled("records-bad-node", 60, &[]);
    let bogus = format!("{}/nodes/bogus", fleet.prefix);
    fleet.etcd.etcdctl(&["put", &bogus, "{not json"]);
    let output = fleet.nodes[1].cli(&[
        "weight",
        "set",
        "--emergency",
        "critical",
        "frontdoor=0",
        "alt-cdn=100",
    ]);
    let text = ok(&output, "weight set --emergency");
    let (revision, _) = fleet.control_in_etcd();
    fleet.wait_revision(revision, LIMIT);
    assert!(text.contains("completed"), "{text}");
    fleet.wait_all_target(&distinct_subnets(SUBNETS), ALT_CDN, LIMIT);

    let leader = coordinator(&fleet);
    let status = leader.status();
    let bad = status["fleet"]["bad_records"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        bad.iter().any(|b| b["key"] == bogus.as_str()),
        "{:#}",
        status["fleet"]
    );
    let (code, metrics) = http(leader.daemon().admin, "GET", "/metrics", None);
    assert_eq!(code, 200);
    assert!(
        gauge(&metrics, "steerdns_fleet_bad_records") >= Some(1.0),
        "{metrics}"
    );

    let text = ok(&fleet.nodes[0].cli(&["fleet", "status"]), "fleet status");
    assert!(text.contains(&bogus) && text.contains("skipped"), "{text}");
    let text = ok(
        &fleet.nodes[0].cli(&["rollout", "status"]),
        "rollout status",
    );
    assert!(text.contains(&bogus), "{text}");
    assert!(
        text.contains(&format!(
            "every live node (3) reports serving revision {revision}"
        )),
        "{text}"
    );
}

/// Issue #28 item 4: the rollout state deleted while the canary refuses the newest version:
/// no node serves that version; the coordinator re-creates the state from the last version
/// every node serves (not the newest), and rolls the newest out again — halting at the
/// canary once more. `rollout status` claims only what every node's report shows.
#[test]
fn a_deleted_rollout_state_holds_and_is_recreated_from_what_every_node_serves() {
    let drill = format!("STEERDNS_TASTER_FAULT=abort:{BOOM}");
    let (fleet, lkg) = settled("records-deleted", 1, &[&drill]);
    let bad = format!("serial = 900\n# {BOOM}\n{}", critical_control(0, 100, 0));
    fleet
        .etcd
        .etcdctl(&["put", &format!("{}/control", fleet.prefix), &bad]);
    let (bad_revision, _) = fleet.control_in_etcd();
    wait_for("the canary's refusal halts the rollout", || {
        let r = fleet.nodes[0].rollout();
        (r["phase"] == "halted" && r["candidate"] == bad_revision).then_some(())
    });

    fleet
        .etcd
        .etcdctl(&["del", &format!("{}/rollout/state", fleet.prefix)]);
    let recreated = wait_for("the coordinator re-creates the state", || {
        rollout_state(&fleet)
    });
    assert_eq!(recreated["rollout"]["lkg"], lkg, "{recreated:#}");
    let since = recreated["rollout"]["started_at_ms"].as_u64().unwrap_or(0);
    wait_for("the newest version halts at the canary again", || {
        let state = rollout_state(&fleet)?;
        let rollout = &state["rollout"];
        (rollout["phase"]["phase"] == "halted"
            && rollout["candidate"] == bad_revision
            && rollout["started_at_ms"].as_u64() >= Some(since))
        .then_some(())
    });
    for node in &fleet.nodes {
        assert_eq!(
            node.revision_served(),
            lkg,
            "{} left the last known good",
            node.name
        );
    }
    let text = ok(
        &fleet.nodes[1].cli(&["rollout", "status"]),
        "rollout status",
    );
    assert!(text.contains("HALTED"), "{text}");
}

/// Issue #28 items 4 and 5: an unreadable rollout state holds every node (status says so),
/// a `weight set` meanwhile says its write landed (never "nothing was changed"), and `rollout
/// reset` settles on the last version every node serves, after which the newest rolls out;
/// `resume` and `abort` work on a state they cannot parse.
#[test]
fn an_unreadable_rollout_state_holds_until_reset_resume_or_abort() {
    let (fleet, lkg) = settled("records-unreadable", 1, &[]);
    let state_key = format!("{}/rollout/state", fleet.prefix);
    fleet.etcd.etcdctl(&["put", &state_key, "{\"rollout\": 7"]);
    for node in &fleet.nodes {
        node.daemon()
            .wait_for_status("the node holds on the unreadable state", LIMIT, |s| {
                s["fleet"]["rollout"]["phase"] == "unreadable"
            });
    }
    let status = coordinator(&fleet).status();
    assert!(
        status["fleet"]["bad_records"]
            .as_array()
            .is_some_and(|b| b.iter().any(|b| b["key"] == state_key.as_str())),
        "{:#}",
        status["fleet"]
    );

    let output = fleet.nodes[0].cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]);
    let (newest, _) = fleet.control_in_etcd();
    assert!(newest > lkg);
    let (out, err) = (stdout(&output), stderr(&output));
    assert!(
        out.contains(&format!("revision {newest}")) && !err.contains("nothing was changed"),
        "stdout: {out}\nstderr: {err}"
    );
    assert!(out.contains("unreadable"), "{out}");
    for node in &fleet.nodes {
        assert_eq!(
            node.revision_served(),
            lkg,
            "{} served an unstaged version",
            node.name
        );
    }
    let output = fleet.nodes[0].cli(&["rollout", "status"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("rollout reset"),
        "{}",
        stderr(&output)
    );

    let text = ok(&fleet.nodes[0].cli(&["rollout", "reset"]), "rollout reset");
    assert!(text.contains(&format!("revision {lkg}")), "{text}");
    fleet.wait_revision(newest, LIMIT);
    let status = serde_json::from_str::<Value>(&ok(
        &fleet.nodes[0].cli(&["rollout", "status", "--json"]),
        "rollout status --json",
    ))
    .expect("json");
    assert_eq!(status["rollout"]["lkg"], lkg, "{status:#}");

    // resume on a state it cannot parse: reset, then the newest rolls out from the canary.
    fleet.etcd.etcdctl(&["put", &state_key, "garbage"]);
    wait_for("the canary holds on the garbage", || {
        (fleet.nodes[0].rollout()["phase"] == "unreadable").then_some(())
    });
    let text = ok(
        &fleet.nodes[0].cli(&["rollout", "resume"]),
        "rollout resume",
    );
    assert!(text.contains("reset it"), "{text}");
    wait_for("the state readable again", || {
        (fleet.nodes[0].rollout()["phase"] == "completed").then_some(())
    });

    // abort on a state it cannot parse: back to the last version every node serves.
    fleet.etcd.etcdctl(&["put", &state_key, "garbage"]);
    wait_for("the canary holds on the garbage", || {
        (fleet.nodes[0].rollout()["phase"] == "unreadable").then_some(())
    });
    let text = ok(&fleet.nodes[0].cli(&["rollout", "abort"]), "rollout abort");
    assert!(text.contains("aborted"), "{text}");
    let (written_back, _) = fleet.control_in_etcd();
    assert!(written_back > newest);
    fleet.wait_revision(written_back, LIMIT);
    fleet.wait_all_target(&distinct_subnets(SUBNETS), ALT_CDN, LIMIT);
}

/// Issue #28 item 5: a bad value in etcd is reported as one, naming its key, and the rest of
/// the list is used — never "cannot reach etcd".
#[test]
fn a_bad_history_entry_is_named_not_reported_as_etcd_down() {
    let fleet = Fleet::start("records-history", 1, 3);
    fleet.wait_connected(LIMIT);
    // Below every real serial: the seeded entry stays.
    let key = format!("{}/history/00000000000000000000", fleet.prefix);
    fleet.etcd.etcdctl(&["put", &key, "{truncated"]);
    let output = fleet.nodes[0].cli(&["control", "history"]);
    let text = ok(&output, "control history");
    assert!(text.contains(&key) && text.contains("SKIPPED"), "{text}");
    assert!(!stderr(&output).contains("cannot reach etcd"));
}

/// Issue #28 item 6: a hand-written coordinator key (no lease) is taken over by a node.
#[test]
fn a_hand_written_coordinator_key_is_taken_over() {
    let (fleet, _) = settled("records-coordinator", 1, &[]);
    let key = format!("{}/rollout/coordinator", fleet.prefix);
    fleet.etcd.etcdctl(&["put", &key, "ghost"]);
    wait_for("a node holds the coordinator key on its lease", || {
        (lease_of(&fleet, &key).unwrap_or(0) != 0).then_some(())
    });
    let holder = fleet.etcd.etcdctl(&["get", &key, "--print-value-only"]);
    assert!(holder.trim().starts_with("ns"), "{holder}");
    let text = ok(
        &fleet.nodes[2].cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]),
        "weight set",
    );
    assert!(text.contains("completed"), "{text}");
}

/// Issue #28 item 6: a second node started with a name a live node holds does not register
/// (it would take part in rollouts as that node) and says so in status and metrics.
#[test]
fn a_duplicate_node_name_is_refused_at_registration() {
    let mut fleet = Fleet::start("records-duplicate", 1, 3);
    fleet.wait_connected(LIMIT);
    let setup = Setup::new("records-duplicate-twin");
    setup.extend_config(&fleet_section(&fleet.etcd.endpoint(), &fleet.prefix, 3));
    let mut twin = Node {
        name: "ns1".into(),
        setup,
        daemon: None,
        env: Vec::new(),
    };
    twin.start();
    let status = twin
        .daemon()
        .wait_for_status("the twin's registration refused", LIMIT, |s| {
            s["fleet"]["registration_refused"].is_string()
        });
    let reason = status["fleet"]["registration_refused"]
        .as_str()
        .unwrap_or("");
    assert!(
        reason.contains("another live node registered as \"ns1\""),
        "{reason}"
    );
    let (code, metrics) = http(twin.daemon().admin, "GET", "/metrics", None);
    assert_eq!(code, 200);
    assert_eq!(
        gauge(&metrics, "steerdns_fleet_registration_refused"),
        Some(1.0)
    );
    // The first ns1 still owns its entry.
    let first = fleet.nodes[0].status();
    assert!(
        first["fleet"]["registration_refused"].is_null(),
        "{:#}",
        first["fleet"]
    );
    let text = ok(
        &fleet.nodes[0].cli(&["fleet", "status", "--json"]),
        "fleet status",
    );
    let view: Value = serde_json::from_str(&text).expect("json");
    let admin = fleet.nodes[0].daemon().admin.to_string();
    assert_eq!(view["nodes"][0]["admin"], admin.as_str(), "{view:#}");
    fleet.nodes.push(twin);
}

/// Issue #28 item 7: a node record whose serial is i64::MAX does not make every write fail
/// (the floor is ignored, and the command says so); a prober record on no lease does not
/// count as a live prober.
#[test]
fn out_of_range_serials_and_unleased_probers_are_not_believed() {
    let fleet = Fleet::start("records-values", 1, 3);
    fleet.wait_connected(LIMIT);
    let grant = fleet.etcd.etcdctl(&["lease", "grant", "60"]);
    let lease = grant
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_string();
    let record = format!(
        "{{\"name\":\"huge\",\"nsid\":null,\"identity\":null,\"listen\":[],\"admin\":\"off\",\"serial\":{},\"revision\":0,\"config_hash\":\"\",\"zones\":{{}},\"last_refusal\":null,\"started_at\":\"\",\"uptime_secs\":0,\"updated_at\":\"\",\"version\":\"\"}}",
        i64::MAX
    );
    let key = format!("{}/nodes/huge", fleet.prefix);
    fleet
        .etcd
        .etcdctl(&["put", &format!("--lease={lease}"), &key, &record]);
    // The write lands (the made-up node never serves it, so the command waits for it and
    // then says so: its exit status is not the point here).
    let output = fleet.nodes[0].cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]);
    let text = stdout(&output);
    assert!(
        text.contains("wrote fleet control"),
        "{text}\n{}",
        stderr(&output)
    );
    assert!(
        text.contains(&format!("node huge reports serial {}", i64::MAX))
            && text.contains("ignored"),
        "{text}"
    );

    let prober = format!("{}/health/probers/ghost", fleet.prefix);
    fleet.etcd.etcdctl(&[
        "put",
        &prober,
        "{\"node\":\"ghost\",\"site\":null,\"heartbeat_ms\":1000,\"updated_at\":\"\",\"results\":[]}",
    ]);
    let text = ok(
        &fleet.nodes[0].cli(&["fleet", "status", "--json"]),
        "fleet status",
    );
    let view: Value = serde_json::from_str(&text).expect("json");
    let health = &view["health"];
    assert!(
        health["probers"]
            .as_array()
            .is_some_and(|p| !p.iter().any(|p| p["node"] == "ghost")),
        "{health:#}"
    );
    assert!(
        health["refused"].as_array().is_some_and(|r| r
            .iter()
            .any(|r| r.as_str().is_some_and(|r| r.contains("not on a lease")))),
        "{health:#}"
    );
}
