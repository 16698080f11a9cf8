//! Practice drills with the real binary and a real server: `drill list`; the bundled drill run
//! now (change, checks over DNS with ECS, revert) prints its measured times in ms and records
//! them in the drill log, status and /metrics; a failed check reverts at once and raises an
//! alert, and a second drill is blocked while one runs; the server's schedule runs a drill by
//! itself, and never while an alert stands. In fleet mode (real etcd, two real nodes) the
//! drill writes through the fleet's edit path, every node serves the change and the revert,
//! and the times are to served on every node; a drill is refused while a rollout is running.

use crate::control_common;
use crate::fleet_common;

use std::time::Duration;

use control_common::*;
use fleet_common::*;

const LIMIT: Duration = Duration::from_secs(20);

fn said(output: &std::process::Output) -> String {
    format!("{}{}", stdout(output), stderr(output))
}

/// The number before " ms" after `label` in `text`.
fn millis_after(text: &str, label: &str) -> f64 {
    let rest = text
        .split(label)
        .nth(1)
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
    let number: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    assert!(
        rest.trim_start()[number.len()..].starts_with(" ms"),
        "{label}: {rest}"
    );
    number.parse().unwrap_or_else(|_| panic!("{label}: {rest}"))
}

fn gauge(server: &Daemon, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let scrape = scrape_metrics(server.admin);
    samples_with(&scrape, metric, labels)
        .first()
        .map(|s| match s.value {
            prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Counter(v) => v,
            _ => f64::NAN,
        })
}

fn drill_run(server: &Daemon, name: &str) -> std::process::Output {
    server.cli(&["drill", "run", name, "--dns", &server.dns.to_string()])
}

fn last_run(status: &serde_json::Value, drill: &str) -> serde_json::Value {
    status["drills"]["drills"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["name"] == drill)
        .map(|d| d["last"].clone())
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn the_bundled_drill_runs_and_its_measured_times_show_in_output_log_status_and_metrics() {
    let setup = Setup::new("drill-bundled");
    let server = setup.start();
    let listed = ok(&server.cli(&["drill", "list"]), "drill list");
    let first = listed.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("critical-alt-cdn "),
        "name first:\n{listed}"
    );

    let output = drill_run(&server, "critical-alt-cdn");
    let text = ok(&output, "drill run");
    println!("{text}");
    assert!(text.contains("PASSED"), "{text}");
    let change = millis_after(&text, "change to served");
    let revert = millis_after(&text, "revert to served");
    assert!(change > 0.0 && revert > 0.0, "{text}");

    let status = server.status();
    let last = last_run(&status, "critical-alt-cdn");
    assert_eq!(last["result"], "passed", "{last:#}");
    assert!(last["change_to_served_ms"].as_f64().is_some(), "{last:#}");
    assert!(last["revert_to_served_ms"].as_f64().is_some(), "{last:#}");
    assert!(last["checks"].as_u64().is_some_and(|c| c > 0), "{last:#}");
    assert!(status["drills"]["alerts"]
        .as_array()
        .is_some_and(|a| a.is_empty()));
    let log = std::fs::read_to_string(setup.path("control.toml.drills.log")).expect("drill log");
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("\"result\":\"passed\""), "{log}");
    assert!(log.contains("change_to_served_ms"), "{log}");
    let shown = stdout(&server.cli(&["status"]));
    assert!(
        shown.contains("drill critical-alt-cdn: last run"),
        "{shown}"
    );
    assert!(shown.contains(" ms, revert to served "), "{shown}");

    let labels = [("drill", "critical-alt-cdn")];
    let metric = gauge(&server, "steerdns_drill_change_to_served_ms", &labels);
    assert!(metric.is_some_and(|v| v > 0.0), "{metric:?}");
    assert_eq!(gauge(&server, "steerdns_drill_alert", &labels), Some(0.0));
    // A single node: no fleet nodes to count.
    assert_eq!(
        gauge(&server, "steerdns_drill_nodes_served", &labels),
        Some(0.0)
    );
    assert_eq!(
        gauge(
            &server,
            "steerdns_drill_runs_total",
            &[("drill", "critical-alt-cdn"), ("result", "passed")]
        ),
        Some(1.0)
    );
    // Reverted: the weights serve as before the drill.
    assert_eq!(status["profiles"]["critical"]["frontdoor"]["weight"], 100);
    assert_eq!(status["profiles"]["critical"]["alt-cdn"]["weight"], 0);
}

#[test]
fn a_failed_check_reverts_at_once_raises_an_alert_and_a_second_drill_is_blocked_meanwhile() {
    let setup = Setup::new("drill-fail");
    setup.extend_config(
        r#"
[[drills]]
name = "half-to-alt"
action = "shift"
profile = "critical"
from = "frontdoor"
to = "alt-cdn"
share = 50
duration_secs = 60
query = "critical.example.com."
subnets = ["1.2.3.0/24", "5.6.7.0/24", "9.9.9.0/24", "20.1.2.0/24", "41.0.0.0/24", "64.4.4.0/24", "100.20.30.0/24", "151.101.1.0/24", "199.232.0.0/24", "223.5.5.0/24"]
"#,
    );
    let server = setup.start();
    std::thread::scope(|scope| {
        let drill = scope.spawn(|| drill_run(&server, "half-to-alt"));
        server.wait_for_status("the drill's change served", LIMIT, |s| {
            s["profiles"]["critical"]["alt-cdn"]["weight"] == 50
        });
        // Another drill meanwhile: blocked, nothing changed.
        let output = drill_run(&server, "critical-alt-cdn");
        let text = said(&output);
        assert!(!output.status.success(), "{text}");
        assert!(text.contains("BLOCKED"), "{text}");
        assert!(text.contains("another drill is in progress"), "{text}");

        // Someone flips critical by hand while the drill holds: the next check fails.
        setup.write_control_atomically(&critical_control(0, 50, 100));
        let output = drill.join().expect("drill thread");
        let text = said(&output);
        println!("{text}");
        assert!(!output.status.success(), "{text}");
        assert!(text.contains("FAILED"), "{text}");
        assert!(text.contains("expected"), "names the failed check:\n{text}");
    });
    let status = server.status();
    let last = last_run(&status, "half-to-alt");
    assert_eq!(last["result"], "failed", "{last:#}");
    let alerts = status["drills"]["alerts"].to_string();
    assert!(alerts.contains("drill half-to-alt failed"), "{alerts}");
    assert_eq!(
        gauge(&server, "steerdns_drill_alert", &[("drill", "half-to-alt")]),
        Some(1.0)
    );
    // Reverted: the drill's knobs are back (alt-cdn 0, frontdoor as before the drill); the
    // hand edit's appgw stays.
    let control = String::from_utf8_lossy(&setup.control_bytes()).into_owned();
    assert!(control.contains("alt-cdn = { weight = 0 }"), "{control}");
    assert!(
        control.contains("frontdoor = { weight = 100 }"),
        "{control}"
    );
    assert!(control.contains("appgw = { weight = 100 }"), "{control}");
    // A failed drill blocks the others (an alert stands) until it passes again.
    let output = drill_run(&server, "critical-alt-cdn");
    assert!(
        said(&output).contains("alert standing: drill half-to-alt failed"),
        "{}",
        said(&output)
    );
}

const SCHEDULED: &str = r#"
[[drills]]
name = "often"
action = "drain"
region = "eu-west"
duration_secs = 1
every_secs = 2
check_interval_ms = 200
query = "www.edge.example.net."
subnets = ["5.1.37.0/24", "31.2.74.0/24", "37.3.111.0/24", "46.4.148.0/24"]
"#;

#[test]
fn the_schedule_runs_a_drill_by_itself_and_never_while_an_alert_stands() {
    let setup = Setup::new("drill-schedule");
    setup.extend_config(SCHEDULED);
    let server = setup.start();
    let status = server.wait_for_status("a scheduled run", LIMIT, |s| {
        last_run(s, "often")["trigger"] == "schedule"
    });
    let last = last_run(&status, "often");
    assert_eq!(last["result"], "passed", "{last:#}");
    assert!(last["change_to_served_ms"].as_f64().is_some(), "{last:#}");
    server.stop();

    // A load source that never sends: its alert stands, so the schedule does not drill.
    let setup = Setup::new("drill-schedule-alert");
    setup.extend_config(&format!("[shield]\nload_file = \"load.json\"\n{SCHEDULED}"));
    let server = setup.start();
    let status = server.wait_for_status("a blocked scheduled run", LIMIT, |s| {
        !last_run(s, "often").is_null()
    });
    let last = last_run(&status, "often");
    assert_eq!(last["result"], "blocked", "{last:#}");
    assert!(
        last["reason"]
            .as_str()
            .is_some_and(|r| r.contains("alert standing: shield: no load feed received yet")),
        "{last:#}"
    );
    assert!(
        status["regions"]["eu-west"].is_null(),
        "never drained: {:#}",
        status["regions"]
    );
}

#[test]
fn a_bad_drill_names_the_file_line_and_field() {
    let setup = Setup::new("drill-config");
    let (line, text) = check_refuses_at(
        &setup,
        "[[drills]]\nname = \"bad\"\naction = \"fallback\"\nregion = \"eu-west\"\nsite = \"fb-mars\"\nduration_secs = 5\nquery = \"www.edge.example.net.\"\nsubnets = [\"5.1.37.0/24\"]\n",
        "site = \"fb-mars\"",
    );
    assert!(
        text.contains(&format!(
            "steerdns.toml:{line}: drills[1].site: \"fb-mars\" is not a fallback site"
        )),
        "{text}"
    );
}

/// The weight `node` serves for `critical`'s `endpoint`.
fn critical_weight(node: &Node, endpoint: &str) -> i64 {
    node.status()["profiles"]["critical"][endpoint]["weight"]
        .as_i64()
        .unwrap_or(-1)
}

#[test]
fn in_a_fleet_the_bundled_drill_writes_through_etcd_and_is_served_and_reverted_on_every_node() {
    let fleet = Fleet::start("drill-fleet", 2, 3);
    let (seeded, _) = fleet.control_in_etcd();
    fleet.wait_revision(seeded, LIMIT);
    let (ns1, ns2) = (&fleet.nodes[0], &fleet.nodes[1]);
    let output = std::thread::scope(|scope| {
        let drill = scope.spawn(|| drill_run(ns1.daemon(), "critical-alt-cdn"));
        // While the drill holds (5 s), both nodes serve its change, from etcd.
        for node in [ns1, ns2] {
            wait_for("the drill's change served", LIMIT, || {
                (critical_weight(node, "alt-cdn") > 0).then_some(())
            });
        }
        let (during, text) = fleet.control_in_etcd();
        assert!(text.contains("alt-cdn = { weight = "), "{text}");
        assert!(during > seeded);
        drill.join().expect("drill thread")
    });
    let text = ok(&output, "drill run");
    println!("{text}");
    assert!(text.contains("PASSED"), "{text}");
    assert!(text.contains("on every node (2: ns1 ns2)"), "{text}");
    let change = millis_after(&text, "change to served");
    let revert = millis_after(&text, "revert to served");
    assert!(change > 0.0 && revert > 0.0, "{text}");

    // The revert is the fleet's control state, and every node serves it.
    let (reverted, control) = fleet.control_in_etcd();
    assert!(control.contains("alt-cdn = { weight = 0 }"), "{control}");
    for node in [ns1, ns2] {
        assert!(node.revision_served() >= reverted, "{}", node.name);
        assert_eq!(critical_weight(node, "alt-cdn"), 0, "{}", node.name);
        assert_eq!(critical_weight(node, "frontdoor"), 100, "{}", node.name);
    }
    // Both writes are versions in the fleet's history, like an operator's.
    let history = ok(&ns1.cli(&["control", "history"]), "control history");
    assert!(history.contains("drill critical-alt-cdn by"), "{history}");
    assert!(
        history.contains("revert of drill critical-alt-cdn by"),
        "{history}"
    );

    let log = std::fs::read_to_string(ns1.setup.path("control.toml.drills.log")).expect("log");
    assert_eq!(log.lines().count(), 1, "{log}");
    let run: serde_json::Value = serde_json::from_str(log.trim()).expect("log line");
    assert_eq!(run["result"], "passed", "{run:#}");
    assert_eq!(run["nodes"], serde_json::json!(["ns1", "ns2"]), "{run:#}");
    assert!(run["change_to_served_ms"].as_f64().is_some_and(|v| v > 0.0));
    assert!(run["revert_to_served_ms"].as_f64().is_some_and(|v| v > 0.0));
    let last = last_run(&ns1.status(), "critical-alt-cdn");
    assert_eq!(last["result"], "passed", "{last:#}");
    assert_eq!(last["nodes"], run["nodes"], "{last:#}");
    let shown = stdout(&ns1.cli(&["status"]));
    assert!(shown.contains(" ms on every node (ns1 ns2)"), "{shown}");
    let labels = [("drill", "critical-alt-cdn")];
    let served_by = gauge(ns1.daemon(), "steerdns_drill_nodes_served", &labels);
    assert_eq!(served_by, Some(2.0));
}

#[test]
fn in_a_fleet_a_drill_is_refused_while_a_rollout_is_in_progress() {
    let rollout = "[fleet.rollout]\nwaves = [[\"ns1\"], [\"ns2\"]]\nbake_secs = 60\nwave_timeout_secs = 120\n";
    let fleet = Fleet::start_on(Etcd::start(), "drill-rollout", 2, 3, rollout, &[]);
    fleet.wait_settled(LIMIT);
    let ns1 = &fleet.nodes[0];
    // An operator's change: its rollout bakes on the canary for a minute.
    let mut change = std::process::Command::new(BIN)
        .args(["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"])
        .arg("--config")
        .arg(&ns1.setup.config)
        .env("STEERDNS_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("weight set");
    let candidate = wait_for("the rollout running", LIMIT, || {
        let r = ns1.rollout();
        (r["phase"] == "running").then(|| r["candidate"].as_i64().unwrap_or(0))
    });
    let before = fleet.control_in_etcd();
    let output = drill_run(ns1.daemon(), "critical-alt-cdn");
    let _ = change.kill();
    let _ = change.wait();
    let text = said(&output);
    println!("{text}");
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("BLOCKED"), "{text}");
    assert!(
        text.contains(&format!(
            "a rollout is in progress: the rollout of control revision {candidate} is running"
        )),
        "names the rollout:\n{text}"
    );
    assert_eq!(fleet.control_in_etcd(), before, "nothing written");
}

#[test]
fn in_a_fleet_the_safety_rules_refuse_a_drill_as_they_refuse_an_operator() {
    let drill = "\n[[drills]]\nname = \"drain-eu-west\"\naction = \"drain\"\nregion = \"eu-west\"\nduration_secs = 1\nquery = \"www.edge.example.net.\"\nsubnets = [\"5.1.37.0/24\", \"31.2.74.0/24\"]\n";
    let fleet = Fleet::start_on(Etcd::start(), "drill-safety", 2, 3, drill, &[]);
    fleet.wait_connected(LIMIT);
    let ns1 = &fleet.nodes[0];
    for region in ["na-west", "ap-east"] {
        ok(&ns1.cli(&["drain", region]), "drain");
    }
    let (revision, _) = fleet.control_in_etcd();
    fleet.wait_revision(revision, LIMIT);
    let before = fleet.control_in_etcd();
    let output = drill_run(ns1.daemon(), "drain-eu-west");
    let text = said(&output);
    println!("{text}");
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("FAILED"), "{text}");
    assert!(text.contains("max-two-drained"), "names the rule:\n{text}");
    assert!(text.contains("the drill's change was refused"), "{text}");
    assert_eq!(fleet.control_in_etcd(), before, "nothing written to etcd");
    let last = last_run(&ns1.status(), "drain-eu-west");
    assert_eq!(last["result"], "failed", "{last:#}");
    let reason = last["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("max-two-drained"), "{last:#}");
}
