//! Safety rules with the real binary and a real server: the bundled example's
//! `max-two-drained` refuses a third drain (naming the rule, writing nothing, counted by rule
//! in status and /metrics) until `--override max-two-drained --reason TEXT` lets it through and
//! the history records it; every line of the README's break-glass runbook passes the example's
//! rules; gates and wait periods; the admin API's `POST /v1/control` is held to the same rules;
//! `safety check FILE`; and a bad rule in the config names file, line and field.

use crate::control_common;

use std::time::Duration;

use control_common::*;

const LIMIT: Duration = Duration::from_secs(5);

fn said(output: &std::process::Output) -> String {
    format!("{}{}", stdout(output), stderr(output))
}

fn refusals(server: &Daemon, rule: &str) -> f64 {
    let scrape = scrape_metrics(server.admin);
    samples_with(&scrape, "steerdns_safety_refusals_total", &[("rule", rule)])
        .first()
        .map_or(-1.0, |s| match s.value {
            prometheus_parse::Value::Counter(v) => v,
            _ => -1.0,
        })
}

/// Waits until the server's status shows `region` drained (or not).
fn wait_for_drain(server: &Daemon, region: &str, drained: bool) {
    server.wait_for_status(&format!("{region} drained={drained}"), LIMIT, |status| {
        status["regions"][region]
            .as_str()
            .is_some_and(|s| s.starts_with("drained"))
            == drained
    });
}

#[test]
fn a_third_drain_is_refused_by_max_two_drained_until_overridden_and_the_history_says_who() {
    let setup = Setup::new("safety-drain");
    let server = setup.start();
    assert_eq!(refusals(&server, "max-two-drained"), 0.0, "counted from 0");
    for region in ["eu-west", "na-west"] {
        ok(&server.cli(&["drain", region]), "drain");
        wait_for_drain(&server, region, true);
    }
    let before = setup.control_bytes();
    let serial = server.serial();

    let output = server.cli(&["drain", "ap-east"]);
    let text = said(&output);
    println!("{text}");
    assert!(!output.status.success(), "a third drain must be refused");
    assert!(
        text.contains("max-two-drained"),
        "names the rule id:\n{text}"
    );
    assert!(
        text.contains("no more than two regions drained at once"),
        "names the rule text:\n{text}"
    );
    assert!(
        text.contains("control.toml") && text.contains("regions.ap-east.drain"),
        "names file and field:\n{text}"
    );
    assert_eq!(setup.control_bytes(), before, "nothing written");
    assert_eq!(server.serial(), serial);
    assert_eq!(refusals(&server, "max-two-drained"), 1.0, "counted by rule");
    let status = server.status();
    assert_eq!(
        status["safety"]["refusals"]["max-two-drained"], 1,
        "{status:#}"
    );
    assert_eq!(
        status["safety"]["refusals"]["critical-serves"], 0,
        "{status:#}"
    );
    let shown = stdout(&server.cli(&["status"]));
    assert!(
        shown.contains("max-two-drained 1"),
        "status shows it:\n{shown}"
    );

    // --override without --reason is refused too.
    let output = server.cli(&["drain", "ap-east", "--override", "max-two-drained"]);
    assert!(!output.status.success());
    assert!(said(&output).contains("--reason"), "{}", said(&output));
    assert_eq!(setup.control_bytes(), before, "nothing written");

    let output = server.cli(&[
        "drain",
        "ap-east",
        "--override",
        "max-two-drained",
        "--reason",
        "ap-east fibre cut, eu maintenance overlaps",
    ]);
    let text = ok(&output, "overridden drain");
    assert!(text.contains("OVERRIDE recorded"), "{text}");
    wait_for_drain(&server, "ap-east", true);

    // The history records rule, reason and who.
    server.wait_for_status("the override in the history", LIMIT, |_| {
        stdout(&server.cli(&["control", "history"])).contains("OVERRIDE max-two-drained")
    });
    let listed = stdout(&server.cli(&["control", "history"]));
    println!("{listed}");
    let line = listed
        .lines()
        .find(|l| l.contains("OVERRIDE max-two-drained"))
        .unwrap_or_default();
    assert!(line.contains("ap-east drain off->on"), "{line}");
    assert!(line.contains("ap-east fibre cut"), "the reason: {line}");
    let user = std::env::var("USER").unwrap_or_else(|_| "?".into());
    assert!(line.contains(&format!("by {user}@")), "who: {line}");

    // An override covers one change: the next edit records none, and undraining (repairing
    // part of the breach) needs none.
    let text = ok(&server.cli(&["undrain", "ap-east"]), "undrain");
    assert!(!text.contains("OVERRIDE"), "{text}");
    let control = String::from_utf8_lossy(&setup.control_bytes()).into_owned();
    assert!(!control.contains("[[overrides]]"), "{control}");
}

/// The sh block of the README's "Break-glass runbook": every `steerdns` line passes the
/// bundled example's safety rules (and the server serves it).
#[test]
fn every_readme_breakglass_line_passes_the_example_rules() {
    let readme = std::fs::read_to_string(repo_path("README.md")).expect("README.md");
    let section = readme
        .split("## Break-glass runbook")
        .nth(1)
        .expect("a Break-glass runbook section");
    let block = section
        .split("```sh")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("its sh block");
    let lines: Vec<Vec<String>> = block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| l.starts_with("steerdns "))
        .map(|l| l.split_whitespace().skip(1).map(String::from).collect())
        .collect();
    assert!(lines.len() >= 7, "the runbook's lines: {lines:?}");
    let setup = Setup::new("safety-readme");
    let server = setup.start();
    for args in &lines {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = server.cli(&args);
        let text = said(&output);
        println!("$ steerdns {}\n{text}", args.join(" "));
        assert!(output.status.success(), "steerdns {args:?} failed:\n{text}");
        assert!(
            !text.contains("refused by safety rules"),
            "steerdns {args:?}:\n{text}"
        );
    }
    let status = server.status();
    assert_eq!(status["safety"]["refusals"]["critical-serves"], 0);
    assert_eq!(status["safety"]["refusals"]["max-two-drained"], 0);
}

#[test]
fn critical_serves_refuses_an_all_zero_flip_and_safety_check_evaluates_a_candidate() {
    let setup = Setup::new("safety-check");
    let server = setup.start();
    let candidate = setup.path("candidate.toml");
    std::fs::write(&candidate, critical_control(0, 0, 0)).expect("write candidate");
    let output = server.cli(&["safety", "check", candidate.to_str().expect("utf-8 path")]);
    let text = said(&output);
    println!("{text}");
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("critical-serves"), "{text}");
    assert!(
        text.contains("critical always has an endpoint with weight > 0"),
        "{text}"
    );
    assert!(text.contains("candidate.toml:"), "names the file: {text}");

    std::fs::write(&candidate, critical_control(0, 100, 0)).expect("write candidate");
    let output = server.cli(&["safety", "check", candidate.to_str().expect("utf-8 path")]);
    let text = ok(&output, "a good candidate");
    assert!(text.contains("passes the 2 safety rule(s)"), "{text}");
    assert!(text.contains("loads with the config"), "{text}");
    // safety check writes nothing and counts nothing.
    assert_eq!(refusals(&server, "critical-serves"), 0.0);
}

#[test]
fn a_gate_must_be_armed_first_and_a_wait_period_holds_off_a_second_change() {
    let setup = Setup::new("safety-gate");
    setup.extend_config(
        r#"
[[safety.rules]]
id = "warm-needs-break-glass"
text = "warm's split changes only while break-glass is armed"
kind = "gate"
knobs = ["profiles.warm"]
gate = "break-glass"

[[safety.rules]]
id = "shield-calm"
text = "the drains change at most once an hour"
kind = "max-drained"
max = 8
wait_secs = 3600
"#,
    );
    let server = setup.start();
    let output = server.cli(&["weight", "set", "warm", "frontdoor=50", "alt-cdn=50"]);
    let text = said(&output);
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("warm-needs-break-glass"), "{text}");
    assert!(
        text.contains("gates.break-glass is not \"armed\""),
        "{text}"
    );

    ok(&server.cli(&["gate", "set", "break-glass", "armed"]), "arm");
    ok(
        &server.cli(&["weight", "set", "warm", "frontdoor=50", "alt-cdn=50"]),
        "armed: the gated change goes through",
    );
    ok(&server.cli(&["gate", "clear", "break-glass"]), "disarm");

    // One drain; a second within the hour is refused, measured from the history's time.
    ok(&server.cli(&["drain", "eu-west"]), "first drain");
    let before = server.serial();
    // The history records the version just after serving it: wait for it.
    server.wait_for_status("the drain in the history", LIMIT, |_| {
        stdout(&server.cli(&["control", "history"])).contains("eu-west drain off->on")
    });
    let output = server.cli(&["undrain", "eu-west"]);
    let text = said(&output);
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("shield-calm"), "{text}");
    assert!(text.contains("wait 3600 s between changes"), "{text}");
    assert_eq!(server.serial(), before);
    ok(
        &server.cli(&[
            "undrain",
            "eu-west",
            "--override",
            "shield-calm",
            "--reason",
            "the drain was a mistake",
        ]),
        "overridden",
    );
}

#[test]
fn the_admin_api_write_is_held_to_the_same_rules_and_records_its_overrides() {
    let setup = Setup::new("safety-api");
    let server = setup.start();
    let three = "[regions.eu-west]\ndrain = true\n[regions.na-west]\ndrain = true\n\
                 [regions.ap-east]\ndrain = true\n";
    let text = format!("{}{three}", critical_control(100, 0, 0));
    let post = |body: serde_json::Value, token: Option<&str>| {
        let body = body.to_string();
        let request = json_request(server.admin, "POST", "/v1/control", token, body.as_bytes());
        send_http(server.admin, &request).expect("POST /v1/control")
    };
    let before = setup.control_bytes();
    let (code, _) = post(serde_json::json!({ "text": text }), None);
    assert_eq!(code, 401, "a write needs the token");
    let (code, body) = post(serde_json::json!({ "text": text }), Some(TOKEN));
    println!("{body}");
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("max-two-drained"), "{body}");
    assert!(body.contains("\"written\":false"), "{body}");
    assert_eq!(setup.control_bytes(), before, "nothing written");
    assert_eq!(refusals(&server, "max-two-drained"), 1.0);

    let serial = server.serial();
    let (code, body) = post(
        serde_json::json!({
            "text": text,
            "by": "oncall-bob",
            "overrides": [{ "rule": "max-two-drained", "reason": "region exit drill" }],
        }),
        Some(TOKEN),
    );
    println!("{body}");
    assert_eq!(code, 200, "{body}");
    server.wait_for_serial_change(serial, LIMIT);
    wait_for_drain(&server, "ap-east", true);
    server.wait_for_status("the API's override in the history", LIMIT, |_| {
        let history = stdout(&server.cli(&["control", "history"]));
        history.contains("OVERRIDE max-two-drained by oncall-bob via admin API: region exit drill")
    });
    let scrape = scrape_metrics(server.admin);
    let overrides = samples_with(
        &scrape,
        "steerdns_safety_overrides_total",
        &[("rule", "max-two-drained")],
    );
    assert!(
        matches!(overrides.first().map(|s| &s.value), Some(prometheus_parse::Value::Counter(v)) if *v == 1.0),
        "{overrides:?}"
    );
}

#[test]
fn a_bad_rule_names_the_file_line_and_field() {
    let setup = Setup::new("safety-config");
    let (line, text) = check_refuses_at(
        &setup,
        "[[safety.rules]]\nid = \"lonely\"\ntext = \"t\"\nkind = \"min-serving\"\nprofile = \"nosuch\"\nmin = 1\n",
        "profile = \"nosuch\"",
    );
    assert!(
        text.contains(&format!(
            "steerdns.toml:{line}: safety.rules[2].profile: \"nosuch\" is not a configured profile"
        )),
        "{text}"
    );
}
