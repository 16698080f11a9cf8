//! Break-glass when etcd is down, with a real etcd and three real nodes: `weight set
//! --direct` reaches every node's admin endpoint (found from the registry the local node kept),
//! each serves the flip as a local override (status, `fleet status`, `CH TXT serial`, metrics
//! say so); when etcd is back the flip is in etcd as one new version and the overrides are
//! gone. A node whose own safety rules refuse the change reports it and keeps serving; a
//! node that is down is reported unreachable. An override older than a version written to
//! etcd meanwhile is neither written over it nor dropped: flagged, until `control override
//! drop`.

use crate::control_common;
use crate::fleet_common;

use std::time::{Duration, Instant};

use control_common::*;
use fleet_common::*;

const LIMIT: Duration = Duration::from_secs(15);
/// Short leases: the registry every node keeps is refreshed every second.
const LEASE_TTL: u64 = 3;

/// Polls `check` on every node until it holds, or fails naming the node and its state.
fn wait_every(fleet: &Fleet, what: &str, check: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + LIMIT;
    for node in fleet.nodes.iter().filter(|n| n.daemon.is_some()) {
        loop {
            let status = node.status();
            if check(&status) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: not {what} within {LIMIT:?}: {:#}",
                node.name,
                status["fleet"]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A fleet whose every node has seen every other one in etcd's registry.
fn fleet_with_registry(label: &str) -> Fleet {
    let fleet = Fleet::start(label, 3, LEASE_TTL);
    fleet.wait_connected(LIMIT);
    let (revision, _) = fleet.control_in_etcd();
    fleet.wait_revision(revision, LIMIT);
    wait_every(&fleet, "knowing the 3 nodes", |s| {
        s["fleet"]["known_nodes"] == 3
    });
    fleet
}

fn history_serials(fleet: &Fleet) -> Vec<u64> {
    let keys = fleet.etcd.etcdctl(&[
        "get",
        &format!("{}/history/", fleet.prefix),
        "--prefix",
        "--keys-only",
    ]);
    keys.lines()
        .filter_map(|k| k.rsplit('/').next()?.parse().ok())
        .collect()
}

#[test]
fn with_etcd_down_a_direct_flip_reaches_every_node_and_lands_in_etcd_once_when_it_is_back() {
    let mut fleet = fleet_with_registry("direct-flip");
    let subnets = distinct_subnets(SUBNETS);
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);
    let before = history_serials(&fleet);

    fleet.etcd.stop();
    wait_every(&fleet, "seeing the etcd link down", |s| {
        s["fleet"]["connected"] == false
    });

    let out = fleet.nodes[0].cli(&[
        "weight",
        "set",
        "critical",
        "frontdoor=0",
        "alt-cdn=100",
        "--direct",
    ]);
    let printed = ok(&out, "weight set --direct");
    for node in &fleet.nodes {
        assert!(
            printed
                .lines()
                .any(|l| l.contains(&format!("{} (", node.name))
                    && l.contains("reached, serves serial")),
            "{} reported as reached:\n{printed}",
            node.name
        );
    }
    // Served by every node when the command returns (it waits for each node's answer).
    let statuses: Vec<serde_json::Value> = fleet.nodes.iter().map(Node::status).collect();
    let serial = statuses[0]["fleet"]["local_override"]["serial"]
        .as_u64()
        .unwrap_or_else(|| panic!("ns1 holds an override: {:#}", statuses[0]["fleet"]));
    for (node, status) in fleet.nodes.iter().zip(&statuses) {
        assert_eq!(status["serial"], serial, "{}: {:#}", node.name, status);
        assert_eq!(
            status["fleet"]["local_override"]["serial"], serial,
            "{}: {:#}",
            node.name, status["fleet"]
        );
        let mut resolver = Resolver::new(node.daemon().dns);
        assert_all_critical(&mut resolver, &subnets, ALT_CDN);
        let chaos = node.daemon().chaos_serial();
        assert!(
            chaos.starts_with(&format!("serial {serial} ")) && chaos.ends_with(" local-override"),
            "{}: {chaos}",
            node.name
        );
        let metrics = scrape_metrics(node.daemon().admin);
        let gauge = metrics
            .samples
            .iter()
            .find(|s| s.metric == "steerdns_fleet_local_override")
            .map(|s| format!("{:?}", s.value));
        assert_eq!(gauge.as_deref(), Some("Gauge(1.0)"), "{}", node.name);
        let shown = stdout(&node.cli(&["status"]));
        assert!(
            shown.contains(&format!("LOCAL OVERRIDE serial {serial}")),
            "{} status:\n{shown}",
            node.name
        );
    }
    let fleet_status = fleet.nodes[1].cli(&["fleet", "status"]);
    let shown = ok(&fleet_status, "fleet status without etcd");
    for node in &fleet.nodes {
        assert!(
            shown.lines().any(|l| l.contains(&node.name)
                && l.contains(&format!("LOCAL OVERRIDE serial {serial}"))),
            "fleet status shows {}'s override:\n{shown}",
            node.name
        );
    }

    // A node restarted during the outage still serves the flip, and still as an override.
    fleet.nodes[1].kill();
    fleet.nodes[1].start();
    let status = fleet.nodes[1].status();
    assert_eq!(status["serial"], serial, "{status:#}");
    assert_eq!(
        status["fleet"]["local_override"]["serial"], serial,
        "restarted: {:#}",
        status["fleet"]
    );
    assert!(fleet.nodes[1]
        .daemon()
        .chaos_serial()
        .ends_with(" local-override"));

    fleet.etcd.restart();
    let key = format!("{}/control", fleet.prefix);
    wait_every(&fleet, "serving the flip from etcd", |s| {
        s["fleet"]["connected"] == true
            && s["fleet"]["local_override"].is_null()
            && s["serial"] == serial
            && s["fleet"]["revision_served"].as_i64().unwrap_or(0) > 0
    });
    let (revision, text) = fleet.control_in_etcd();
    assert!(
        text.contains("frontdoor = { weight = 0 }") && text.contains(&format!("serial = {serial}")),
        "{key} holds the flip:\n{text}"
    );
    let after = history_serials(&fleet);
    let new: Vec<&u64> = after.iter().filter(|s| !before.contains(s)).collect();
    assert_eq!(
        new,
        vec![&serial],
        "one new version: {before:?} -> {after:?}"
    );
    fleet.wait_revision(revision, LIMIT);
    for node in &fleet.nodes {
        let chaos = node.daemon().chaos_serial();
        assert!(!chaos.contains("local-override"), "{}: {chaos}", node.name);
        let mut resolver = Resolver::new(node.daemon().dns);
        assert_all_critical(&mut resolver, &subnets, ALT_CDN);
    }
}

#[test]
fn a_node_refusing_the_override_and_a_node_down_are_reported_and_the_command_fails() {
    let mut fleet = fleet_with_registry("direct-refused");
    // ns3 alone has a rule this change breaks (the CLI, with ns1's config, lets it through).
    fleet.nodes[2].setup.extend_config(
        "\n[[safety.rules]]\nid = \"critical-needs-break-glass\"\ntext = \"critical's weights change only while break-glass is armed\"\nkind = \"gate\"\nknobs = [\"profiles.critical\"]\ngate = \"break-glass\"\n",
    );
    fleet.nodes[1].kill();
    fleet.etcd.stop();
    wait_every(&fleet, "seeing the etcd link down", |s| {
        s["fleet"]["connected"] == false
    });
    let subnets = distinct_subnets(SUBNETS);

    let out = fleet.nodes[0].cli(&[
        "weight",
        "set",
        "critical",
        "frontdoor=0",
        "alt-cdn=100",
        "--direct",
    ]);
    let printed = stdout(&out);
    assert!(
        !out.status.success(),
        "not every node serves it:\n{printed}"
    );
    let line = |name: &str| {
        printed
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} (")))
            .unwrap_or_else(|| panic!("a line for {name}:\n{printed}\n{}", stderr(&out)))
            .to_string()
    };
    assert!(line("ns1").contains("reached, serves serial"), "{printed}");
    assert!(line("ns2").contains("UNREACHABLE"), "{printed}");
    let refused = line("ns3");
    assert!(
        refused.contains("REFUSED") && refused.contains("critical-needs-break-glass"),
        "{printed}"
    );

    let mut resolver = Resolver::new(fleet.nodes[0].daemon().dns);
    assert_all_critical(&mut resolver, &subnets, ALT_CDN);
    let ns3 = &fleet.nodes[2];
    let mut resolver = Resolver::new(ns3.daemon().dns);
    assert_all_critical(&mut resolver, &subnets, FRONTDOOR);
    let status = ns3.status();
    assert!(
        status["fleet"]["local_override"].is_null(),
        "ns3 holds no override: {:#}",
        status["fleet"]
    );
    assert!(!ns3.daemon().chaos_serial().contains("local-override"));
}

#[test]
fn an_override_older_than_a_version_written_to_etcd_meanwhile_is_kept_flagged_and_dropped_on_demand(
) {
    let mut fleet = fleet_with_registry("direct-conflict");
    let subnets = distinct_subnets(SUBNETS);
    fleet.etcd.stop();
    wait_every(&fleet, "seeing the etcd link down", |s| {
        s["fleet"]["connected"] == false
    });
    ok(
        &fleet.nodes[0].cli(&[
            "weight",
            "set",
            "critical",
            "frontdoor=0",
            "alt-cdn=100",
            "--direct",
        ]),
        "weight set --direct",
    );
    // ns3 goes down holding the override; the others write it back when etcd returns, and
    // then someone changes the fleet through etcd while ns3 is away.
    fleet.nodes[2].kill();
    fleet.etcd.restart();
    wait_every(&fleet, "serving the flip from etcd", |s| {
        s["fleet"]["connected"] == true && s["fleet"]["local_override"].is_null()
    });
    ok(
        &fleet.nodes[0].cli(&["weight", "set", "critical", "frontdoor=100", "alt-cdn=0"]),
        "weight set through etcd",
    );
    let (newer, newer_text) = fleet.control_in_etcd();

    fleet.nodes[2].start();
    let ns3 = &fleet.nodes[2];
    let deadline = Instant::now() + LIMIT;
    loop {
        let status = ns3.status();
        if status["fleet"]["local_override"]["conflict"] == newer {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ns3 flags no conflict with revision {newer}: {:#}",
            status["fleet"]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Kept, said, and etcd's newer version not written over.
    let mut resolver = Resolver::new(ns3.daemon().dns);
    assert_all_critical(&mut resolver, &subnets, ALT_CDN);
    let metrics = scrape_metrics(ns3.daemon().admin);
    let conflict = metrics
        .samples
        .iter()
        .find(|s| s.metric == "steerdns_fleet_local_override_conflict")
        .map(|s| format!("{:?}", s.value));
    assert_eq!(conflict.as_deref(), Some("Gauge(1.0)"));
    // `fleet status` reads ns3's registry record, which the node task rewrites after the
    // conflict shows in /v1/status: wait for the record, not for the status alone.
    let deadline = Instant::now() + LIMIT;
    loop {
        let shown = ok(&ns3.cli(&["fleet", "status"]), "fleet status");
        if shown.contains("CONFLICT") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "fleet status shows no CONFLICT: {shown}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(fleet.control_in_etcd(), (newer, newer_text));

    // ns3 came back on a new admin port: ns1's registry learns it within a refresh.
    let admin = ns3.daemon().admin.to_string();
    let ns1 = fleet.nodes[0].daemon().admin;
    let deadline = Instant::now() + LIMIT;
    loop {
        let (_, body) = http(ns1, "GET", "/v1/fleet/direct", None);
        if body.contains(&admin) {
            break;
        }
        assert!(Instant::now() < deadline, "ns1's registry: {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let dropped = ok(
        &fleet.nodes[0].cli(&["control", "override", "drop"]),
        "control override drop",
    );
    assert!(
        dropped
            .lines()
            .any(|l| l.contains("ns3") && l.contains("override dropped")),
        "{dropped}"
    );
    assert!(ns3.status()["fleet"]["local_override"].is_null());
    assert_all_critical(&mut resolver, &subnets, FRONTDOOR);
    fleet.wait_revision(newer, LIMIT);
}
