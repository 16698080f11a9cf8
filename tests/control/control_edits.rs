//! CLI edits of the control file (issue 12, items 4 and 8), with the real CLI against the real
//! server on loopback and real files:
//! - two operators' commands run at the same moment both land, every time (the edits hold a
//!   lock across read–edit–write and check the file did not change underneath);
//! - with an explicit `serial` in the control file, every edit (and a rollback) bumps it, the
//!   history records each version, and a restart with a broken file serves the newest one;
//! - an edit by an operator whose umask is 022 leaves the control file and the edit lock
//!   group-writable, so the next operator of group steerdns can edit too (item 13).

use crate::control_common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use control_common::*;

/// Runs `steerdns <args>` against `daemon` in the background.
fn spawn_cli(daemon: &Daemon, args: &[&str]) -> std::thread::JoinHandle<Output> {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .arg("--config")
        .arg(&daemon.config)
        .arg("--admin")
        .arg(daemon.admin.to_string())
        .env("STEERDNS_LOG", "warn")
        .stdin(Stdio::null());
    std::thread::spawn(move || command.output().expect("run steerdns"))
}

const ROUNDS: usize = 8;
const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn concurrent_weight_set_and_drain_both_land_every_time() {
    let setup = Setup::new("edits-concurrent");
    let server = setup.start();
    let original = std::fs::read_to_string(setup.control_path()).expect("control file");
    for round in 0..ROUNDS {
        write_atomically(&setup.control_path(), original.as_bytes());
        let weights = spawn_cli(
            &server,
            &["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"],
        );
        let drain = spawn_cli(&server, &["drain", "eu-west"]);
        let (weights, drain) = (
            weights.join().expect("weight set thread"),
            drain.join().expect("drain thread"),
        );
        ok(&weights, "weight set");
        ok(&drain, "drain");
        let text = std::fs::read_to_string(setup.control_path()).expect("control file");
        let control = steerdns::control::ControlFile::parse(&text, &setup.control_path())
            .expect("the edited control file parses");
        let frontdoor = &control.profiles["critical"].endpoints["frontdoor"];
        let alt = &control.profiles["critical"].endpoints["alt-cdn"];
        assert_eq!(
            (frontdoor.weight, alt.weight),
            (Some(0), Some(100)),
            "round {round}: the weight edit was lost:\n{text}"
        );
        assert!(
            control.regions.get("eu-west").is_some_and(|r| r.drain),
            "round {round}: the drain was lost:\n{text}"
        );
        assert!(
            !setup.path("control.toml.lock").exists()
                || std::fs::metadata(setup.path("control.toml.lock"))
                    .expect("lock file")
                    .len()
                    == 0,
            "the lock file holds no data"
        );
    }
}

/// The serials in `steerdns control history`, oldest first.
fn history_serials(server: &Daemon) -> Vec<u64> {
    let out = ok(&server.cli(&["control", "history"]), "control history");
    out.lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Waits (at most 10 s) until the history lists `serial`: it is written just after serving.
fn wait_for_history(server: &Daemon, serial: u64) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let serials = history_serials(server);
        if serials.contains(&serial) {
            return serials;
        }
        assert!(
            Instant::now() < deadline,
            "serial {serial} never recorded: {serials:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn file_serial(setup: &Setup) -> Option<u64> {
    let text = std::fs::read_to_string(setup.control_path()).expect("control file");
    steerdns::control::edit::explicit_serial(&text).expect("serial parses")
}

#[test]
fn every_edit_of_a_file_with_a_serial_is_a_new_recorded_version() {
    let setup = Setup::new("edits-serial");
    let original = std::fs::read_to_string(setup.control_path()).expect("control file");
    write_atomically(
        &setup.control_path(),
        format!("serial = 5\n{original}").as_bytes(),
    );
    let server = setup.start();
    assert_eq!(server.serial(), 5);
    wait_for_history(&server, 5);

    ok(
        &server.cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]),
        "weight set",
    );
    assert_eq!(file_serial(&setup), Some(6), "weight set keeps the serial");
    server.wait_for_serial_change(5, Duration::from_secs(5));
    assert_eq!(server.serial(), 6);
    ok(&server.cli(&["drain", "eu-west"]), "drain");
    assert_eq!(file_serial(&setup), Some(7));
    server.wait_for_serial_change(6, Duration::from_secs(5));
    assert_eq!(wait_for_history(&server, 7), vec![5, 6, 7]);

    // A rollback restores version 6's knobs as a new version (its text says `serial = 6`).
    ok(&server.cli(&["control", "rollback"]), "rollback");
    assert_eq!(file_serial(&setup), Some(8));
    server.wait_for_serial_change(7, Duration::from_secs(5));
    assert_eq!(wait_for_history(&server, 8), vec![5, 6, 7, 8]);
    let status = server.status();
    assert!(
        status["warnings"]
            .as_array()
            .is_none_or(|w| w.iter().all(|w| !w.to_string().contains("history"))),
        "{status:#}"
    );
    assert!(status["regions"].get("eu-west").is_none(), "{status:#}");

    // A restart with a broken file serves the newest recorded version, not an older one.
    drop(server);
    write_atomically(&setup.control_path(), b"serial = 9\n[profiles.critical\n");
    let restarted = setup.start();
    assert_eq!(restarted.serial(), 8);
    assert!(
        refusal_reasons(&restarted.status())
            .iter()
            .any(|r| r.contains("serving control version 8")),
        "{:#}",
        restarted.status()
    );
}

/// The deploy runbook lets every operator in group steerdns run the break-glass commands
/// (issue 12 item 13): an edit keeps the control file's group-writable mode, and the lock it
/// creates beside it is group-writable whatever the operator's umask.
#[test]
fn an_edit_under_umask_022_leaves_the_control_file_and_its_lock_group_writable() {
    use std::os::unix::fs::PermissionsExt;
    let setup = Setup::new("edits-group");
    let control = setup.control_path();
    std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o660)).expect("chmod");
    let server = setup.start();
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 022 && exec \"$0\" \"$@\"")
        .arg(BIN)
        .args(["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"])
        .arg("--config")
        .arg(&server.config)
        .arg("--admin")
        .arg(server.admin.to_string())
        .env("STEERDNS_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run steerdns under sh");
    ok(&out, "weight set under umask 022");
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&control), 0o660, "the control file");
    assert_eq!(
        mode(&setup.path("control.toml.lock")),
        0o660,
        "the edit lock"
    );
}

/// The CLI with `--admin` at `admin` (and the test's config).
fn cli_at(setup: &Setup, admin: std::net::SocketAddr, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(&setup.config)
        .arg("--admin")
        .arg(admin.to_string())
        .env("STEERDNS_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run steerdns")
}

/// The `control history` line of the override given `reason`.
fn override_line(server: &Daemon, reason: &str) -> String {
    let find = || {
        let history = stdout(&server.cli(&["control", "history"]));
        history
            .lines()
            .find(|l| l.contains(reason))
            .map(str::to_string)
    };
    server.wait_for_status(
        &format!("the override {reason:?} in the history"),
        LIMIT,
        |_| find().is_some(),
    );
    find().unwrap_or_default()
}

#[test]
fn the_cli_hands_its_edits_to_the_running_server_and_makes_them_itself_when_none_answers() {
    let setup = Setup::new("edits-via-server");
    let server = setup.start();
    for region in ["eu-west", "na-west"] {
        ok(&server.cli(&["drain", region]), "drain");
    }
    // Through the server: the server makes the write, so it records the override as made via
    // its admin API (the CLI's own write records just who ran it).
    let reason = "drill through the server";
    let args = [
        "drain",
        "ap-east",
        "--override",
        "max-two-drained",
        "--reason",
        reason,
    ];
    let text = ok(&server.cli(&args), "overridden drain via the server");
    assert!(text.contains("wrote "), "{text}");
    assert!(
        text.contains("serves serial"),
        "reports what is served:\n{text}"
    );
    let line = override_line(&server, reason);
    assert!(line.contains("via admin API"), "{line}");

    // No server at the admin address: the CLI writes the file itself and the server, watching
    // it, serves it.
    let closed = closed_port();
    ok(
        &cli_at(&setup, closed, &["undrain", "ap-east"]),
        "undrain in-process",
    );
    let reason = "drill in-process";
    let args = [
        "drain",
        "ap-east",
        "--override",
        "max-two-drained",
        "--reason",
        reason,
    ];
    let text = ok(
        &cli_at(&setup, closed, &args),
        "overridden drain in-process",
    );
    assert!(text.contains("not reachable"), "{text}");
    let line = override_line(&server, reason);
    assert!(!line.contains("via admin API"), "{line}");
    server.wait_for_status("ap-east drained again", LIMIT, |status| {
        status["regions"]["ap-east"]
            .as_str()
            .is_some_and(|s| s.starts_with("drained"))
    });

    // A refusal made by the server is printed as the CLI prints its own.
    let before = setup.control_bytes();
    let output = server.cli(&["drain", "sa-east"]);
    assert!(!output.status.success(), "a fourth drain must be refused");
    let said = format!("{}{}", stdout(&output), stderr(&output));
    assert!(said.contains("max-two-drained"), "{said}");
    assert!(
        said.contains("regions.sa-east.drain"),
        "names the field:\n{said}"
    );
    assert_eq!(setup.control_bytes(), before, "nothing written");
}

#[test]
fn post_control_edit_needs_the_token_and_names_what_is_wrong_with_a_body() {
    let setup = Setup::new("edits-api");
    let server = setup.start();
    let post = |body: &str, token: Option<&str>| {
        let request = json_request(
            server.admin,
            "POST",
            "/v1/control/edit",
            token,
            body.as_bytes(),
        );
        send_http(server.admin, &request).expect("POST /v1/control/edit")
    };
    let flip = r#"{"edit":{"kind":"set_weights","profile":"critical","weights":[["frontdoor",0],["alt-cdn",100]]}}"#;
    let before = setup.control_bytes();
    assert_eq!(post(flip, None).0, 401, "a write needs the token");
    let (code, body) = post(
        r#"{"edit":{"kind":"set_weight","profile":"critical"}}"#,
        Some(TOKEN),
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("set_weight"),
        "names the unknown kind: {body}"
    );
    let (code, body) = post(
        r#"{"edit":{"kind":"drain","region":"eu-west"}}"#,
        Some(TOKEN),
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("`on`"), "names the missing field: {body}");
    let (code, body) = post(
        r#"{"edit":{"kind":"set_weights","profile":"critical","weights":[["nosuch",1]]}}"#,
        Some(TOKEN),
    );
    assert_eq!(code, 422, "an endpoint the profile does not have: {body}");
    assert!(body.contains("nosuch"), "{body}");
    assert_eq!(setup.control_bytes(), before, "nothing written");

    let serial = server.serial();
    let (code, body) = post(flip, Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    server.wait_for_serial_change(serial, LIMIT);
    let status = server.status();
    assert_eq!(
        status["profiles"]["critical"]["alt-cdn"]["weight"], 100,
        "{status:#}"
    );
}
