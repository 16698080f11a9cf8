//! Fleet mode with a real etcd and three real `steerdns serve` nodes on loopback: one control
//! state in etcd, seeded by the first node, watched by all, served through the same reload path
//! as a control-file edit (tasted, swapped in, or refused with the last good one serving), and
//! cached in each node's control file.

use crate::control_common;
use crate::fleet_common;

use std::time::Duration;

use control_common::*;
use fleet_common::*;

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn first_node_seeds_the_fleet_and_versions_put_in_etcd_reach_every_node() {
    let fleet = Fleet::start("seed", 3, 10);
    fleet.wait_connected(LIMIT);
    let (revision, text) = fleet.control_in_etcd();
    assert!(
        text.contains("frontdoor = { weight = 100 }"),
        "seeded from the control file:\n{text}"
    );
    let serials = fleet.wait_revision(revision, LIMIT);
    assert!(
        serials.windows(2).all(|w| w[0] == w[1]),
        "same version, same serial: {serials:?}"
    );
    let subnets = distinct_subnets(SUBNETS);
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);

    // A new version written straight into etcd (as etcdctl or automation would).
    let flipped = format!("serial = 500\n{}", critical_control(0, 100, 0));
    fleet
        .etcd
        .etcdctl(&["put", &format!("{}/control", fleet.prefix), &flipped]);
    let (revision, _) = fleet.control_in_etcd();
    let serials = fleet.wait_revision(revision, LIMIT);
    assert_eq!(serials, vec![500, 500, 500]);
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);
    for node in &fleet.nodes {
        let cached = std::fs::read_to_string(node.setup.control_path()).expect("cache");
        assert_eq!(
            cached, flipped,
            "{}'s control file caches the version",
            node.name
        );
        let chaos = node.daemon().chaos_serial();
        assert!(chaos.starts_with("serial 500 "), "{}: {chaos}", node.name);
    }

    // A version that leaves the profile nothing to serve: refused everywhere, the last good
    // version keeps serving, and the cache keeps it too.
    let bad = format!("serial = 501\n{}", critical_control(0, 0, 0));
    fleet
        .etcd
        .etcdctl(&["put", &format!("{}/control", fleet.prefix), &bad]);
    let (bad_revision, _) = fleet.control_in_etcd();
    for node in &fleet.nodes {
        let deadline = std::time::Instant::now() + LIMIT;
        loop {
            let status = node.status();
            if status["fleet"]["refused_revision"].as_i64() == Some(bad_revision) {
                assert_eq!(status["serial"], 500, "{}: {status:#}", node.name);
                assert!(!refusal_reasons(&status).is_empty());
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} did not report refusing revision {bad_revision}: {}",
                node.name,
                status["fleet"]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let cached = std::fs::read_to_string(node.setup.control_path()).expect("cache");
        assert_eq!(cached, flipped, "{} cached a refused version", node.name);
    }
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);
}

/// The value of an unlabelled gauge in a /metrics text.
fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(' ')?;
        rest.trim().parse().ok()
    })
}

/// Runs `steerdns fleet status --json` with `node`'s config.
fn fleet_status(node: &Node) -> serde_json::Value {
    let output = node.cli(&["fleet", "status", "--json"]);
    let text = ok(&output, "fleet status --json");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("fleet status JSON: {e}\n{text}"))
}

fn node_names(status: &serde_json::Value) -> Vec<String> {
    status["nodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn weight_set_through_any_node_reaches_all_three_and_concurrent_edits_both_land() {
    let fleet = Fleet::start("cli", 3, 10);
    fleet.wait_connected(LIMIT);
    let subnets = distinct_subnets(SUBNETS);
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);

    // Break glass through ns2's config: etcd, then every node.
    let output = fleet.nodes[1].cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]);
    let text = ok(&output, "weight set");
    assert!(
        text.contains("all 3 live nodes serve serial"),
        "weight set waits for every node:\n{text}"
    );
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);
    let (revision, _) = fleet.control_in_etcd();
    let serials = fleet.wait_revision(revision, LIMIT);
    assert!(serials.windows(2).all(|w| w[0] == w[1]), "{serials:?}");

    // Two operators at once, from two nodes' shells: both changes land, none is lost.
    let (a, b) = std::thread::scope(|scope| {
        let a = scope
            .spawn(|| fleet.nodes[0].cli(&["weight", "set", "warm", "frontdoor=40", "alt-cdn=60"]));
        let b = scope.spawn(|| fleet.nodes[2].cli(&["drain", "eu-west"]));
        (
            a.join().expect("first writer"),
            b.join().expect("second writer"),
        )
    });
    ok(&a, "weight set warm");
    ok(&b, "drain eu-west");
    let (revision, text) = fleet.control_in_etcd();
    assert!(text.contains("frontdoor = { weight = 40 }"), "{text}");
    assert!(text.contains("drain = true"), "{text}");
    assert!(
        text.contains("frontdoor = { weight = 0 }"),
        "the break-glass survives:\n{text}"
    );
    fleet.wait_revision(revision, LIMIT);
    for node in &fleet.nodes {
        let status = node.status();
        assert_eq!(
            status["profiles"]["warm"]["frontdoor"]["weight"], 40,
            "{}: {:#}",
            node.name, status["profiles"]
        );
        let eu_west = status["regions"]["eu-west"].as_str().unwrap_or("");
        assert!(eu_west.starts_with("drained"), "{}: {eu_west}", node.name);
    }

    // The fleet's history has every version, with what changed and who wrote it.
    let history = ok(&fleet.nodes[0].cli(&["control", "history"]), "history");
    for needle in [
        "weight set critical",
        "weight set warm",
        "drain eu-west",
        "seeded by node",
    ] {
        assert!(history.contains(needle), "no {needle:?} in:\n{history}");
    }
}

#[test]
fn etcd_down_nodes_keep_serving_and_writes_fail_then_a_rollback_reaches_all_three() {
    let mut fleet = Fleet::start("down", 3, 10);
    fleet.wait_connected(LIMIT);
    let subnets = distinct_subnets(SUBNETS);
    ok(
        &fleet.nodes[0].cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]),
        "weight set",
    );
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);

    fleet.etcd.stop();
    for node in &fleet.nodes {
        let deadline = std::time::Instant::now() + LIMIT;
        while node.status()["fleet"]["connected"] != false {
            assert!(
                std::time::Instant::now() < deadline,
                "{} still reports the etcd link up",
                node.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Fail static: every node keeps answering with what it has, and says the link is down.
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);
    let (code, metrics) = http(fleet.nodes[0].daemon().admin, "GET", "/metrics", None);
    assert_eq!(code, 200);
    assert!(
        gauge(&metrics, "steerdns_fleet_link_up") == Some(0.0),
        "{metrics}"
    );
    let output = fleet.nodes[1].cli(&["weight", "set", "critical", "frontdoor=100", "alt-cdn=0"]);
    assert!(!output.status.success(), "a write without etcd must fail");
    let err = stderr(&output);
    assert!(
        err.contains("cannot reach etcd") && err.contains("nothing was changed"),
        "clear error: {err}"
    );

    // A node restarted while etcd is down serves its cache: the last version it accepted.
    fleet.nodes[2].kill();
    fleet.nodes[2].start();
    let status = fleet.nodes[2].status();
    assert_eq!(status["fleet"]["connected"], false, "{:#}", status["fleet"]);
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);

    // etcd back: every node reconnects by itself, and a rollback reaches all three.
    fleet.etcd.restart();
    fleet.wait_connected(LIMIT * 2);
    let (_, metrics) = http(fleet.nodes[0].daemon().admin, "GET", "/metrics", None);
    assert!(
        gauge(&metrics, "steerdns_fleet_link_up") == Some(1.0),
        "{metrics}"
    );
    let output = fleet.nodes[2].cli(&["control", "rollback"]);
    let text = ok(&output, "control rollback");
    assert!(text.contains("all 3 live nodes serve serial"), "{text}");
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);
}

#[test]
fn a_killed_node_disappears_from_fleet_status_within_its_lease_ttl() {
    const TTL: u64 = 2;
    let mut fleet = Fleet::start("lease", 3, TTL);
    fleet.wait_connected(LIMIT);
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let status = fleet_status(&fleet.nodes[0]);
        if node_names(&status).len() == 3 {
            assert_eq!(status["missing"], serde_json::json!([]));
            assert!(status["nodes"][0]["current"].as_bool().unwrap_or(false));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status:#}");
        std::thread::sleep(Duration::from_millis(20));
    }
    fleet.nodes[1].kill();
    let killed = std::time::Instant::now();
    loop {
        let status = fleet_status(&fleet.nodes[0]);
        if !node_names(&status).contains(&"ns2".to_string()) {
            assert_eq!(status["missing"], serde_json::json!(["ns2"]), "{status:#}");
            break;
        }
        // The lease's TTL, plus etcd's expiry check and this poll.
        assert!(
            killed.elapsed() < Duration::from_secs(TTL + 3),
            "ns2 still listed {:?} after it was killed: {status:#}",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = ok(&fleet.nodes[0].cli(&["fleet", "status"]), "fleet status");
    assert!(text.contains("ns2") && text.contains("MISSING"), "{text}");
    // Retired on purpose: no longer reported missing.
    ok(
        &fleet.nodes[0].cli(&["fleet", "forget", "ns2"]),
        "fleet forget",
    );
    let status = fleet_status(&fleet.nodes[0]);
    assert_eq!(status["missing"], serde_json::json!([]), "{status:#}");
    assert_eq!(node_names(&status), vec!["ns1", "ns3"]);
}

#[test]
fn fleet_init_seeds_an_empty_prefix_once_and_refuses_a_bad_file() {
    let etcd = Etcd::start();
    let setup = Setup::new("init");
    setup.extend_config(&fleet_section(&etcd.endpoint(), "/steerdns/init", 10));
    let node = Node {
        name: "ns1".into(),
        setup,
        daemon: None,
        env: Vec::new(),
    };
    let bad = node.setup.path("bad-control.toml");
    std::fs::write(&bad, critical_control(0, 0, 0)).expect("write bad control");
    let output = node.cli(&["fleet", "init", "--from", bad.to_str().expect("utf-8")]);
    assert!(!output.status.success());
    assert!(
        stdout(&output).contains("refused, nothing written"),
        "{}",
        stdout(&output)
    );

    let good = node.setup.control_path();
    let text = ok(
        &node.cli(&["fleet", "init", "--from", good.to_str().expect("utf-8")]),
        "fleet init",
    );
    assert!(text.contains("seeded /steerdns/init"), "{text}");
    let output = node.cli(&["fleet", "init", "--from", good.to_str().expect("utf-8")]);
    assert!(!output.status.success(), "a second init must not overwrite");
    assert!(
        stderr(&output).contains("already holds control state"),
        "{}",
        stderr(&output)
    );

    let status = ok(&node.cli(&["fleet", "status", "--json"]), "fleet status");
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    assert_eq!(status["control_serial"], 1, "{status:#}");
    assert_eq!(status["nodes"], serde_json::json!([]));
}

#[test]
fn a_fleet_on_an_etcd_with_tls_client_certificates_and_users_serves_and_writes() {
    let mut etcd = Etcd::start_secure();
    etcd.enable_auth("steerdns", "fleet-password-1", "/steerdns/secure");
    let pki = etcd.pki().expect("a TLS etcd").clone();
    let good = etcd.write_file("password", "fleet-password-1\n");
    let bad = etcd.write_file("wrong-password", "not-the-password\n");
    let tls = format!(
        "ca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\nuser = \"steerdns\"\n",
        pki.ca, pki.client_cert, pki.client_key
    );
    let mut fleet = Fleet::start_on(
        etcd,
        "secure",
        2,
        10,
        &format!("{tls}password_file = {good:?}\n"),
        &[],
    );
    fleet.wait_connected(LIMIT);
    let subnets = distinct_subnets(SUBNETS);
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);
    let (revision, _) = fleet.control_in_etcd();
    assert!(revision > 0, "the first node seeded the fleet over TLS");

    let text = ok(
        &fleet.nodes[1].cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]),
        "weight set over TLS with a password",
    );
    assert!(text.contains("all 2 live nodes serve serial"), "{text}");
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);

    // A node with the wrong password is refused by etcd: it says so, and serves what it has.
    let intruder = fleet.add_node(
        "secure",
        10,
        &format!("{tls}password_file = {bad:?}\n"),
        &[],
    );
    let status = intruder.status();
    assert_eq!(status["fleet"]["connected"], false, "{:#}", status["fleet"]);
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let fleet_status = intruder.status()["fleet"].clone();
        let error = fleet_status["last_error"]
            .as_str()
            .unwrap_or("")
            .to_lowercase();
        if error.contains("authentication") || error.contains("password") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no authentication error in {fleet_status:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = intruder.cli(&["weight", "set", "critical", "frontdoor=100", "alt-cdn=0"]);
    assert!(
        !output.status.success(),
        "a write with a wrong password must fail"
    );
    let (_, control) = fleet.control_in_etcd();
    assert!(control.contains("frontdoor = { weight = 0 }"), "{control}");
}

/// Established TCP connections from process `pid` to `port` on loopback: the process's socket
/// inodes (/proc/PID/fd) matched against /proc/net/tcp{,6} entries in state 01 (ESTABLISHED)
/// whose remote port is `port`.
fn established_to(pid: u32, port: u16) -> usize {
    let inodes: std::collections::BTreeSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the node's /proc fd table")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let remote = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .map(|line| {
                    line.split_whitespace()
                        .map(String::from)
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        })
        .filter(|cols| cols.len() > 9 && cols[2].ends_with(&remote) && cols[3] == "01")
        .filter(|cols| inodes.contains(&cols[9]))
        .count()
}

#[test]
fn a_node_talks_to_etcd_over_one_connection_for_all_its_fleet_parts() {
    // A node running every fleet part: registry and control watch, rollout coordinator,
    // shield leader election, shared health probing. Each part once made its own etcd client.
    let mut backend = Backend::start();
    let rollout = "[fleet.rollout]\nwaves = [[\"ns1\"]]\nbake_secs = 1\nwave_timeout_secs = 60\nprobes = []\n";
    let extra = format!("{rollout}{}", monitored_failover("linked", &backend.url()));
    let fleet = Fleet::start_on(Etcd::start(), "onelink", 1, 10, &extra, &[]);
    fleet.wait_connected(LIMIT);
    let node = &fleet.nodes[0];
    let leader = format!("{}/shield/leader", fleet.prefix);
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let status = node.status();
        let coordinating = status["fleet"]["rollout"]["coordinator"] == true;
        let leading = fleet
            .etcd
            .etcdctl(&["get", &leader, "--print-value-only"])
            .trim()
            == "ns1";
        let probing = status["health"]["targets"][0]["shared"]["probers"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["node"] == "ns1"));
        if coordinating && leading && probing {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not every fleet part runs (coordinator {coordinating}, shield leader {leading}, prober {probing}): {:#}",
            status["fleet"]
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = node.daemon().pid();
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let connections = established_to(pid, fleet.etcd.client_port);
        if connections == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{connections} TCP connections from the node to etcd, want one shared by its parts"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = node.status();
    let made = status["fleet"]["etcd_connections"].as_u64().unwrap_or(0);
    assert!(
        made >= 1,
        "status counts the etcd clients made: {:#}",
        status["fleet"]
    );
    let (_, metrics) = http(node.daemon().admin, "GET", "/metrics", None);
    assert_eq!(
        gauge(&metrics, "steerdns_fleet_etcd_connections_total"),
        Some(made as f64),
        "the metric and the status agree"
    );
    // The shared link still carries writes and watches: a weight set reaches the node.
    let text = ok(
        &node.cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]),
        "weight set",
    );
    assert!(text.contains("live node"), "{text}");
    fleet.wait_all_target(&distinct_subnets(SUBNETS), ALT_CDN, LIMIT);
    backend.stop();
}
