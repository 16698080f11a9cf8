//! The bad-input corpus (`tests/bad_inputs/`, described file by file in its README): every
//! file is one kind of badness an operator, a monitoring system or the network may hand the
//! server. Each must be refused clearly, and a running server must keep serving throughout.
//!
//! - `zones/`: `steerdns check --zones <dir with that one file>` exits 1 and names the file
//!   (with a line where the file's `; expect:` lines say so);
//! - `configs/`: `steerdns check --config <file>` exits 1 with the file's `# expect:` texts;
//! - `control/`: written over a running server's control file: the refusal is counted in
//!   status with the `# expect:` texts, and the last known good answers keep being served;
//! - `feeds/`: `steerdns load push`: refused with the README's reason, the last good feed stays;
//! - `geo/`: as the `[geo] database`: a start serves from the default region and says the
//!   database is degraded; a SIGHUP with it in place is refused and the good one stays;
//! - `packets/`: sent over UDP and TCP: the `# expect:` rcode, or silence, never a crash; a
//!   normal query is answered after each.
//!
//! One test per folder; each runs every file and fails once, naming every file that failed.

use crate::control_common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use serde_json::Value as Json;

use control_common::*;

/// Longest a `steerdns check` may take on one small file.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a refusal may take to show in status.
const REACT: Duration = Duration::from_secs(5);

fn corpus_dir(folder: &str) -> PathBuf {
    repo_path("tests/bad_inputs").join(folder)
}

/// The corpus files of `folder` (everything but README files), sorted.
fn corpus(folder: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(folder))
        .unwrap_or_else(|e| panic!("read tests/bad_inputs/{folder}: {e}"))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && !file_name(p).starts_with("README"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "tests/bad_inputs/{folder} has only {} files",
        files.len()
    );
    files
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The values of `<comment> <key>: value` lines (the file read lossily: binary files may carry
/// a readable first line).
fn directives(bytes: &[u8], comment: &str, key: &str) -> Vec<String> {
    let prefix = format!("{comment} {key}:");
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// Collects per-file failures; fails the test once at the end, naming every failed file.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn check(&mut self, file: &Path, ok: bool, why: impl FnOnce() -> String) {
        if !ok {
            self.0.push(format!("{}: {}", file_name(file), why()));
        }
    }

    fn finish(self, folder: &str, total: usize) {
        assert!(
            self.0.is_empty(),
            "{} of {total} files in tests/bad_inputs/{folder} failed:\n  {}",
            self.0.len(),
            self.0.join("\n  ")
        );
    }
}

/// Runs `steerdns <args>` in `dir` with a bounded wait; returns (exit code, stdout + stderr),
/// or an error if it hung or died from a signal.
fn run_bounded(dir: &Path, args: &[&str]) -> Result<(i32, String), String> {
    let out_path = dir.join(".run-output");
    let out = std::fs::File::create(&out_path).map_err(|e| e.to_string())?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .env("STEERDNS_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + CHECK_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "`steerdns {}` still running after {CHECK_TIMEOUT:?} (killed)",
                args.join(" ")
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let output =
        String::from_utf8_lossy(&std::fs::read(&out_path).unwrap_or_default()).into_owned();
    match status.code() {
        Some(code) => Ok((code, output)),
        None => Err(format!("killed by a signal ({status}); output:\n{output}")),
    }
}

/// Exit 1 and every expected fragment in the output (the file name when none are given).
fn check_refusal(
    failures: &mut Failures,
    file: &Path,
    result: Result<(i32, String), String>,
    expected: &[String],
) {
    let (code, output) = match result {
        Ok(done) => done,
        Err(e) => return failures.check(file, false, || e),
    };
    failures.check(file, code == 1, || {
        format!("exit code {code}, expected 1; output:\n{output}")
    });
    let name = file_name(file);
    let wanted: Vec<&str> = if expected.is_empty() {
        vec![name.as_str()]
    } else {
        expected.iter().map(String::as_str).collect()
    };
    let missing: Vec<&&str> = wanted.iter().filter(|w| !output.contains(**w)).collect();
    failures.check(file, missing.is_empty(), || {
        format!("output lacks {missing:?}:\n{output}")
    });
}

/// Runs `check` (by `run`, given the file and its bytes) on every file of the corpus `folder`
/// and checks each is refused (see [`check_refusal`]) with the `expect` directives of its
/// comments (lines starting with `comment`).
fn every_file_refused_by_check(
    folder: &str,
    comment: &str,
    mut run: impl FnMut(&Path, &[u8]) -> Result<(i32, String), String>,
) {
    let files = corpus(folder);
    let mut failures = Failures::default();
    for file in &files {
        let bytes = std::fs::read(file).expect("read corpus file");
        let result = run(file, &bytes);
        check_refusal(
            &mut failures,
            file,
            result,
            &directives(&bytes, comment, "expect"),
        );
    }
    failures.finish(folder, files.len());
}

// ---------------------------------------------------------------------------------------------
// README

/// The README's table rows: file name → the remaining cells.
fn readme_rows() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(repo_path("tests/bad_inputs/README.md")).expect("README");
    let mut rows = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<String> = line
            .trim()
            .trim_matches('|')
            .split(" | ")
            .map(|c| c.trim().to_string())
            .collect();
        if let Some(name) = cells
            .first()
            .and_then(|c| c.strip_prefix('`'))
            .and_then(|c| c.strip_suffix('`'))
        {
            rows.insert(name.to_string(), cells[1..].to_vec());
        }
    }
    rows
}

#[test]
fn the_readme_describes_every_corpus_file() {
    let rows = readme_rows();
    let mut missing = Vec::new();
    let mut all = Vec::new();
    for folder in ["zones", "configs", "control", "feeds", "geo", "packets"] {
        for file in corpus(folder) {
            let name = file_name(&file);
            if rows.get(&name).is_none_or(|cells| cells.is_empty()) {
                missing.push(format!("{folder}/{name}"));
            }
            all.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "not described in tests/bad_inputs/README.md: {missing:?}"
    );
    let stale: Vec<&String> = rows.keys().filter(|n| !all.contains(n)).collect();
    assert!(
        stale.is_empty(),
        "the README describes files that do not exist: {stale:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// zones/

#[test]
fn every_bad_zone_file_is_refused_by_check_with_its_file_and_line() {
    every_file_refused_by_check("zones", ";", |file, bytes| {
        let dir = TempDir::new("bad-zone");
        let zones = dir.path().join("zones");
        std::fs::create_dir_all(&zones).expect("mkdir zones");
        std::fs::write(zones.join(file_name(file)), bytes).expect("copy zone");
        for setup in directives(bytes, ";", "setup") {
            if let Some(name) = setup.strip_prefix("fifo ") {
                mkfifo(&zones.join(name.trim()));
            }
        }
        // Run where there is no steerdns.toml: built-in defaults plus --zones.
        run_bounded(dir.path(), &["check", "--zones", "zones"])
    });
}

/// `$INCLUDE` fan-out (issue 12 item 10): six includes per file, five levels deep, is 7776
/// file reads while the depth stays legal. `check` refuses it quickly, once, at the include
/// that crossed the zone's budget of included files, naming that file and line.
#[test]
fn an_include_fan_out_is_refused_by_the_zone_budget() {
    let dir = TempDir::new("fan-out");
    let zones = dir.path().join("zones");
    std::fs::create_dir_all(&zones).expect("mkdir zones");
    for level in 1..=5 {
        let body = if level == 5 {
            "x 60 IN TXT \"leaf\"\n".to_string()
        } else {
            format!("$INCLUDE l{}.inc\n", level + 1).repeat(6)
        };
        std::fs::write(zones.join(format!("l{level}.inc")), body).expect("write include");
    }
    let soa = "@ 60 IN SOA ns1 hostmaster 1 60 60 60 60\n@ 60 IN NS ns1\nns1 60 IN A 192.0.2.1\n";
    std::fs::write(
        zones.join("fan.example.zone"),
        format!("{soa}{}", "$INCLUDE l1.inc\n".repeat(6)),
    )
    .expect("write zone");
    let (code, output) =
        run_bounded(dir.path(), &["check", "--zones", "zones"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code, 1, "{output}");
    let budget = "the zone already read 1024 included files";
    assert_eq!(output.matches(budget).count(), 1, "{output}");
    let line = output
        .lines()
        .find(|l| l.contains(budget))
        .unwrap_or_default();
    assert!(line.contains(".inc:") || line.contains(".zone:"), "{line}");
}

/// Runs `check` on `steerdns.toml` in `dir`; asserts it refuses (exit 1) saying `expected`;
/// returns all it printed.
fn refused_by_check(dir: &Path, expected: &str) -> String {
    let (code, output) =
        run_bounded(dir, &["check", "--config", "steerdns.toml"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(code, 1, "{output}");
    assert!(output.contains(expected), "want {expected:?} in:\n{output}");
    output
}

/// The 1-based line of the `nth` (0-based) line of `text` that equals `wanted` after trimming.
fn line_number(text: &str, wanted: &str, nth: usize) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.trim() == wanted)
        .nth(nth)
        .map(|(i, _)| i + 1)
        .unwrap_or_else(|| panic!("no line {wanted:?} (#{nth}) in:\n{text}"))
}

/// Issue 12 item 12: a refusal points at the file and line where the bad value is written,
/// not at the control file that also mentions the same endpoint; `steerdns check` and a
/// running server's refused reload alike.
#[test]
fn a_refusal_points_at_the_file_and_line_that_holds_the_bad_value() {
    let setup = Setup::new("where-bad");
    let config_text = std::fs::read_to_string(&setup.config).expect("read config");
    let good_config = config_text.clone();
    let good_control = String::from_utf8(setup.control_bytes()).expect("control is UTF-8");
    // 1. `weight = 1001` on critical's first endpoint in the config; control.toml overrides
    //    that endpoint (frontdoor = { weight = 100 }) on its own line 6.
    let header = line_number(&config_text, "[[profiles.critical.endpoints]]", 0);
    let weight_line = header + 3;
    let mut lines: Vec<&str> = config_text.lines().collect();
    assert_eq!(
        lines[weight_line - 1],
        "weight = 100",
        "the example changed"
    );
    lines[weight_line - 1] = "weight = 1001";
    std::fs::write(&setup.config, lines.join("\n")).expect("write config");
    let expected = format!(
        "steerdns.toml:{weight_line}: profiles.critical.endpoints[0].weight: 1001 is above 1000"
    );
    let output = refused_by_check(setup.dir.path(), &expected);
    assert!(!output.contains("control.toml:"), "{output}");

    // 2. The same bad value in the control file: the control file's line.
    std::fs::write(&setup.config, &good_config).expect("restore config");
    let frontdoor = line_number(&good_control, "frontdoor = { weight = 100 }", 0);
    setup.write_control_atomically(&good_control.replacen(
        "frontdoor = { weight = 100 }",
        "frontdoor = { weight = 1001 }",
        1,
    ));
    let expected = format!(
        "control.toml:{frontdoor}: profiles.critical.endpoints.frontdoor.weight: 1001 is above 1000"
    );
    refused_by_check(setup.dir.path(), &expected);

    // 3. A profile the control file leaves with no servable endpoint: the control file, and
    //    where the profile is configured.
    setup.write_control_atomically(&good_control.replacen(
        "frontdoor = { weight = 100 }",
        "frontdoor = { weight = 0 }",
        1,
    ));
    let section = line_number(&good_control, "[profiles.critical.endpoints]", 0);
    let profile = line_number(&good_config, "[profiles.critical]", 0);
    let expected = format!("control.toml:{section}: profiles.critical: no servable endpoint");
    let output = refused_by_check(setup.dir.path(), &expected);
    assert!(
        output.contains(&format!("(the profile: steerdns.toml:{profile})")),
        "{output}"
    );

    // 4. A running server refusing the bad config on SIGHUP says the same, and keeps serving.
    setup.write_control_atomically(&good_control);
    let server = setup.start();
    let before = server.refused();
    std::fs::write(&setup.config, lines.join("\n")).expect("write bad config");
    server.sighup();
    let status = server.wait_for_refusal(before, REACT);
    let reasons = refusal_reasons(&status).join("\n");
    let expected = format!("steerdns.toml:{weight_line}: profiles.critical.endpoints[0].weight");
    assert!(
        reasons.contains(&expected),
        "want {expected:?} in:\n{reasons}"
    );
    assert!(!reasons.contains("control.toml:"), "{reasons}");
}

// ---------------------------------------------------------------------------------------------
// configs/

#[test]
fn every_bad_config_is_refused_by_check_with_its_reason() {
    every_file_refused_by_check("configs", "#", |file, bytes| {
        // Next to the bundled example's zones, geo database and control file, so that only the
        // file's own badness can be refused.
        let setup = Setup::new("bad-config");
        let name = file_name(file);
        std::fs::write(setup.path(&name), bytes).expect("copy config");
        run_bounded(setup.dir.path(), &["check", "--config", &name])
    });
}

// ---------------------------------------------------------------------------------------------
// control/

#[test]
fn every_bad_control_file_is_refused_by_a_running_server_which_keeps_serving() {
    let files = corpus("control");
    let setup = Setup::new("bad-control");
    let mut server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let subnets = distinct_subnets(20);
    let good = critical_control(0, 100, 0);
    setup.write_control_atomically(&good);
    wait_all_target(&mut resolver, &subnets, ALT_CDN, Instant::now(), REACT);
    let serial = server.serial();
    let mut failures = Failures::default();
    for file in &files {
        let bytes = std::fs::read(file).expect("read corpus file");
        let status = server.status();
        let refused = status["reloads_refused"].as_u64().unwrap_or(0);
        write_atomically(&setup.control_path(), &bytes);
        let deadline = Instant::now() + REACT;
        let outcome = loop {
            let status = server.status();
            if status["reloads_refused"].as_u64() > Some(refused) {
                break Ok(status);
            }
            if status["serial"].as_u64() != Some(serial) || Instant::now() > deadline {
                break Err(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        match outcome {
            Ok(status) => {
                let reasons = refusal_reasons(&status).join("\n");
                let expected = directives(&bytes, "#", "expect");
                let wanted: Vec<&str> = if expected.is_empty() {
                    vec!["control.toml"]
                } else {
                    expected.iter().map(String::as_str).collect()
                };
                let missing: Vec<&&str> =
                    wanted.iter().filter(|w| !reasons.contains(**w)).collect();
                failures.check(file, missing.is_empty(), || {
                    format!("refusal lacks {missing:?}:\n{reasons}")
                });
                failures.check(file, status["serial"].as_u64() == Some(serial), || {
                    format!("serial moved: {}", status["serial"])
                });
                let targets = critical_targets(&mut resolver, &subnets);
                failures.check(
                    file,
                    targets.iter().all(|t| t.as_deref() == Some(ALT_CDN)),
                    || {
                        format!(
                            "last known good answers no longer served: {:?}",
                            &targets[..3]
                        )
                    },
                );
            }
            Err(status) => {
                failures.check(file, false, || {
                    format!(
                        "not refused within {REACT:?} (serial {} → {}; profiles {})",
                        serial, status["serial"], status["profiles"]["critical"]
                    )
                });
                // Accepted: put the known good file back for the next one.
                setup.write_control_atomically(&good);
                wait_all_target(&mut resolver, &subnets, ALT_CDN, Instant::now(), REACT);
            }
        }
        assert!(
            server.exited().is_none(),
            "{}: the server died",
            file_name(file)
        );
    }
    failures.finish("control", files.len());
}

// ---------------------------------------------------------------------------------------------
// feeds/

fn shield_region(status: &Json, name: &str) -> Json {
    status["shield"]["regions"]
        .as_array()
        .and_then(|r| r.iter().find(|x| x["name"] == name))
        .cloned()
        .unwrap_or(Json::Null)
}

/// Pushes `body` (through stdin) and returns (success, printed reason).
fn push_stdin(server: &Daemon, setup: &Setup, body: &[u8]) -> (bool, String) {
    let mut child = Command::new(BIN)
        .args(["load", "push", "-", "--config"])
        .arg(&setup.config)
        .arg("--admin")
        .arg(server.admin.to_string())
        .env("STEERDNS_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start load push");
    if let Some(mut stdin) = child.stdin.take() {
        // The CLI stops reading past the size limit; a broken pipe then is expected.
        let _ = stdin.write_all(body);
    }
    let output = child.wait_with_output().expect("load push output");
    (
        output.status.success(),
        format!("{}{}", stdout(&output), stderr(&output)),
    )
}

#[test]
fn every_bad_load_feed_is_refused_with_its_reason_and_the_last_good_feed_stays() {
    let files = corpus("feeds");
    let rows = readme_rows();
    let setup = Setup::new("bad-feeds");
    setup
        .extend_config("[shield]\ntick_ms = 100\nstale_after_secs = 60\nrevert_after_secs = 120\n");
    let mut server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let good = serde_json::json!({
        "time": steerdns::rfc3339::format_utc(SystemTime::now()),
        "regions": {"eu-west": {"load": 500, "capacity": 1000}},
    })
    .to_string();
    let path = setup.path("good.json");
    std::fs::write(&path, &good).expect("write good feed");
    ok(
        &server.cli(&["load", "push", path.to_str().expect("utf-8")]),
        "push of a good feed",
    );

    // The corpus, plus two generated ones too big to keep as files.
    let mut cases: Vec<(String, Vec<u8>, String)> = files
        .iter()
        .map(|f| {
            let name = file_name(f);
            let expected = rows
                .get(&name)
                .and_then(|cells| cells.get(1))
                .map(|c| c.trim_matches('`').to_string())
                .unwrap_or_default();
            (name, std::fs::read(f).expect("read corpus file"), expected)
        })
        .collect();
    let oversize = format!(
        "{{\"time\": \"2026-01-01T00:00:00Z\", \"source\": \"{}\"}}",
        "x".repeat(steerdns::shield::feed::MAX_FEED_BYTES)
    );
    cases.push((
        "(generated: larger than the 1 MiB limit)".into(),
        oversize.into_bytes(),
        "limit".into(),
    ));
    let many: Vec<String> = (0..10_001)
        .map(|i| format!("\"r{i}\": {{\"load\": 1, \"capacity\": 2}}"))
        .collect();
    cases.push((
        "(generated: 10 001 regions)".into(),
        format!(
            "{{\"time\": \"2026-01-01T00:00:00Z\", \"regions\": {{{}}}}}",
            many.join(", ")
        )
        .into_bytes(),
        "10000".into(),
    ));

    let mut failures = Failures::default();
    for (name, body, expected) in &cases {
        let file = Path::new(name);
        failures.check(file, !expected.is_empty(), || {
            "the README gives no expected reason".into()
        });
        let refused_before = server.status()["shield"]["feeds_refused"]
            .as_u64()
            .unwrap_or(0);
        let (accepted, said) = push_stdin(&server, &setup, body);
        failures.check(file, !accepted, || format!("accepted: {said}"));
        failures.check(
            file,
            said.contains("refused") || said.contains("limit"),
            || format!("no refusal printed: {said}"),
        );
        failures.check(file, said.contains(expected.as_str()), || {
            format!("the reason lacks {expected:?}: {said}")
        });
        // A body over the HTTP limit is turned away before it reaches the feed checks (HTTP
        // 413), so only feeds that arrived are counted as refused feeds. The count in status
        // is published by the shield's tick: two more ticks and an uncounted push had its
        // chance to show.
        let counted = !name.starts_with("(generated: larger");
        let ticks_after = server.shield_ticks() + 2;
        let deadline = Instant::now() + REACT;
        let status = loop {
            let status = server.status();
            let ticked = status["shield"]["ticks"].as_u64() >= Some(ticks_after);
            if status["shield"]["feeds_refused"].as_u64() > Some(refused_before)
                || (!counted && ticked)
                || Instant::now() > deadline
            {
                break status;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if counted {
            failures.check(
                file,
                status["shield"]["feeds_refused"].as_u64() == Some(refused_before + 1),
                || {
                    format!(
                        "feeds_refused went from {refused_before} to {}",
                        status["shield"]["feeds_refused"]
                    )
                },
            );
        } else {
            failures.check(
                file,
                status["shield"]["ticks"].as_u64() >= Some(ticks_after)
                    && status["shield"]["feeds_refused"].as_u64() == Some(refused_before),
                || {
                    format!(
                        "two ticks after a body turned away by HTTP: ticks {} (waited for \
                         {ticks_after}), feeds_refused {refused_before} -> {}",
                        status["shield"]["ticks"], status["shield"]["feeds_refused"]
                    )
                },
            );
        }
        failures.check(
            file,
            status["shield"]["feeds_accepted"].as_u64() == Some(1)
                && shield_region(&status, "eu-west")["load"].as_f64() == Some(500.0),
            || format!("the last good feed was replaced: {}", status["shield"]),
        );
        assert!(server.exited().is_none(), "{name}: the server died");
    }
    let response = resolver.ask(&plain_query("www.example.com.", RecordType::A));
    assert_eq!(response.metadata.response_code, ResponseCode::NoError);
    failures.finish("feeds", cases.len());
}

// ---------------------------------------------------------------------------------------------
// geo/

const EU_GATEWAY: std::net::Ipv4Addr = std::net::Ipv4Addr::new(203, 0, 113, 10);
const NA_GATEWAY: std::net::Ipv4Addr = std::net::Ipv4Addr::new(203, 0, 113, 20);

#[test]
fn every_bad_geo_database_degrades_a_start_and_is_refused_on_reload() {
    let files = corpus("geo");
    let mut failures = Failures::default();

    // At start: serve from the default region, and say why.
    for file in &files {
        let setup = Setup::new("bad-geo-start");
        std::fs::copy(file, setup.path("geoip/example.mmdb")).expect("copy database");
        let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| setup.start()));
        let Ok(server) = started else {
            failures.check(file, false, || "the server did not start".into());
            continue;
        };
        let status = server.status();
        let geo = status["geo"].as_str().unwrap_or("").to_string();
        failures.check(
            file,
            geo.starts_with("degraded") && geo.contains("example.mmdb"),
            || format!("status geo is {geo:?}, expected degraded naming the file"),
        );
        failures.check(
            file,
            status["warnings"].to_string().contains("geo database"),
            || format!("no geo warning in status: {}", status["warnings"]),
        );
        let mut resolver = Resolver::new(server.dns);
        let answer = eu_gateway(&mut resolver);
        failures.check(file, answer == vec![NA_GATEWAY], || {
            format!("an EU client got {answer:?}, expected the default region's {NA_GATEWAY}")
        });
    }

    // On reload: refused, the database in service stays.
    let setup = Setup::new("bad-geo-reload");
    let mut server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    assert_eq!(eu_gateway(&mut resolver), vec![EU_GATEWAY]);
    let database = setup.path("geoip/example.mmdb");
    for file in &files {
        let before = server.status();
        let refused = before["reloads_refused"].as_u64().unwrap_or(0);
        let accepted = before["reloads_accepted"].as_u64().unwrap_or(0);
        write_atomically(&database, &std::fs::read(file).expect("read corpus file"));
        server.sighup();
        let deadline = Instant::now() + REACT;
        let status = loop {
            let status = server.status();
            let done = status["reloads_refused"].as_u64() > Some(refused)
                || status["reloads_accepted"].as_u64() > Some(accepted);
            if done || Instant::now() > deadline {
                break status;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let was_refused = status["reloads_refused"].as_u64() > Some(refused);
        let reasons = refusal_reasons(&status).join("; ");
        failures.check(file, was_refused, || {
            format!(
                "SIGHUP not refused (reloads accepted {accepted} → {}, status geo {})",
                status["reloads_accepted"], status["geo"]
            )
        });
        failures.check(
            file,
            !was_refused || reasons.contains("geo database") && reasons.contains("example.mmdb"),
            || format!("the refusal does not name the database: {reasons}"),
        );
        let answer = eu_gateway(&mut resolver);
        failures.check(file, answer == vec![EU_GATEWAY], || {
            format!("after the reload an EU client got {answer:?}")
        });
        if status["geo"] != "ok" || answer != vec![EU_GATEWAY] {
            // The bad file got into service: restore a good one for the next file.
            std::fs::copy(repo_path("geoip/example.mmdb"), &database).expect("restore");
            let accepted = server.accepted();
            server.sighup();
            server.wait_for_accepted(accepted, REACT);
        }
        assert!(
            server.exited().is_none(),
            "{}: the server died",
            file_name(file)
        );
    }
    failures.finish("geo", files.len() * 2);
}

// ---------------------------------------------------------------------------------------------
// packets/

/// What a packet file says should happen.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Silence,
    Rcode(ResponseCode),
    /// Any well-formed response, or silence (seeded random bytes).
    Anything,
}

fn parse_expect(text: &str) -> Expect {
    match text {
        "SILENCE" => Expect::Silence,
        "ANY-ERROR" => Expect::Anything,
        "FORMERR" => Expect::Rcode(ResponseCode::FormErr),
        "NOTIMP" => Expect::Rcode(ResponseCode::NotImp),
        "REFUSED" => Expect::Rcode(ResponseCode::Refused),
        "BADVERS" => Expect::Rcode(ResponseCode::BADVERS),
        other => panic!("unknown expectation {other:?}"),
    }
}

struct PacketCase {
    bytes: Vec<u8>,
    /// TCP bytes sent as they are (no length prefix added), and not sent over UDP.
    raw_tcp: bool,
    udp: Option<Expect>,
    tcp: Option<Expect>,
}

fn packet_case(text: &str) -> PacketCase {
    let raw_tcp = directives(text.as_bytes(), "#", "transport") == ["tcp-raw"];
    let both = directives(text.as_bytes(), "#", "expect")
        .first()
        .map(|e| parse_expect(e));
    let only = |key| {
        directives(text.as_bytes(), "#", key)
            .first()
            .map(|e| parse_expect(e))
    };
    let hex: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split_whitespace())
        .collect();
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex byte"))
        .collect();
    PacketCase {
        bytes,
        raw_tcp,
        udp: if raw_tcp {
            None
        } else {
            only("expect-udp").or(both.clone())
        },
        tcp: only("expect-tcp").or(both),
    }
}

/// Checks one reply (or its absence) against the expectation.
fn judge(request: &[u8], reply: Option<&[u8]>, expect: &Expect) -> Result<(), String> {
    let Some(reply) = reply else {
        return match expect {
            Expect::Silence | Expect::Anything => Ok(()),
            Expect::Rcode(rcode) => Err(format!("no reply, expected {rcode}")),
        };
    };
    let message =
        Message::from_vec(reply).map_err(|e| format!("a malformed reply ({e}): {reply:02x?}"))?;
    if !matches!(
        message.metadata.message_type,
        hickory_proto::op::MessageType::Response
    ) {
        return Err("a reply without QR".into());
    }
    if request.len() >= 2 && message.metadata.id != u16::from_be_bytes([request[0], request[1]]) {
        return Err(format!(
            "reply id {} does not echo the query",
            message.metadata.id
        ));
    }
    let rcode = message.metadata.response_code;
    match expect {
        Expect::Silence => Err(format!("expected silence, got {rcode}")),
        Expect::Anything => Ok(()),
        // By number: hickory names 16 BADSIG (TSIG) although with OPT it is BADVERS.
        Expect::Rcode(want) if u16::from(rcode) == u16::from(*want) => Ok(()),
        Expect::Rcode(want) => Err(format!("got {rcode}, expected {want}")),
    }
}

fn wait_for(expect: &Expect) -> Duration {
    match expect {
        // Silence is only proven by waiting; a short wait keeps the corpus fast.
        Expect::Silence | Expect::Anything => Duration::from_millis(250),
        Expect::Rcode(_) => Duration::from_secs(2),
    }
}

/// Sends `bytes` (framed unless `raw`) on a new TCP connection; returns the first framed reply.
fn over_tcp(server: SocketAddr, bytes: &[u8], raw: bool, wait: Duration) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&server, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(wait)).ok()?;
    let mut frame = Vec::new();
    if !raw {
        frame.extend((bytes.len() as u16).to_be_bytes());
    }
    frame.extend(bytes);
    stream.write_all(&frame).ok()?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u16::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).ok()?;
    Some(body)
}

fn normal_query_answered(server: SocketAddr) -> Result<(), String> {
    let query = plain_query("www.example.com.", RecordType::A)
        .to_vec()
        .expect("encode");
    for (transport, reply) in [
        ("UDP", udp_once(server, &query, Duration::from_secs(2))),
        (
            "TCP",
            over_tcp(server, &query, false, Duration::from_secs(2)),
        ),
    ] {
        let reply = reply.ok_or_else(|| format!("a normal {transport} query went unanswered"))?;
        let message = Message::from_vec(&reply).map_err(|e| e.to_string())?;
        if message.metadata.response_code != ResponseCode::NoError || message.answers.is_empty() {
            return Err(format!("a normal {transport} query got {message:?}"));
        }
    }
    Ok(())
}

#[test]
fn every_bad_packet_gets_an_error_or_silence_and_the_server_keeps_answering() {
    let files = corpus("packets");
    let setup = Setup::new("bad-packets");
    let mut server = setup.start();
    let mut failures = Failures::default();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("packet files are hex text");
        let case = packet_case(&text);
        failures.check(file, case.udp.is_some() || case.tcp.is_some(), || {
            "no `# expect:` line".into()
        });
        if let Some(expect) = &case.udp {
            let reply = udp_once(server.dns, &case.bytes, wait_for(expect));
            let verdict = judge(&case.bytes, reply.as_deref(), expect);
            failures.check(file, verdict.is_ok(), || {
                format!("UDP: {}", verdict.clone().err().unwrap_or_default())
            });
        }
        if let Some(expect) = &case.tcp {
            let reply = over_tcp(server.dns, &case.bytes, case.raw_tcp, wait_for(expect));
            let verdict = judge(&case.bytes, reply.as_deref(), expect);
            failures.check(file, verdict.is_ok(), || {
                format!("TCP: {}", verdict.clone().err().unwrap_or_default())
            });
        }
        if let Some(status) = server.exited() {
            panic!("{}: the server exited ({status})", file_name(file));
        }
        let after = normal_query_answered(server.dns);
        failures.check(file, after.is_ok(), || {
            format!("afterwards: {}", after.clone().err().unwrap_or_default())
        });
    }
    failures.finish("packets", files.len());
}
