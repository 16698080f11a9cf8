//! Fault injection on the control plane, with the real binary over real sockets. Each bad
//! change must leave the last known good answers serving and say why it was refused: the
//! status counts the refusal and names the file and the problem, and the log says so too.
//! Then a good change must be accepted again (the refusal is not sticky).
//!
//! Every fault starts from an active break-glass (critical → alt-cdn), which differs from the
//! config's own weights (critical → frontdoor): "old answers still served" then cannot be
//! confused with "fell back to the config".

use crate::control_common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;

use control_common::*;

/// Subnets asked to check what is served.
const SUBNETS: usize = 50;
/// The watcher reacts within milliseconds (inotify) or at its 2 s backstop poll.
const REFUSAL_WAIT: Duration = Duration::from_secs(5);
const CONVERGENCE: Duration = Duration::from_secs(1);

/// A server on a private copy with break-glass already active (every subnet on alt-cdn).
type Scene = BreakGlass;

impl Scene {
    fn new(label: &str) -> Scene {
        Scene::new_under(label, &[])
    }

    /// Like [`Scene::new`], with the server started under `wrapper` (a command and its
    /// arguments that run the rest of the command line).
    fn new_under(label: &str, wrapper: &[&str]) -> Scene {
        let setup = Setup::new(label);
        let server = setup.start_under_with(wrapper, &[]);
        BreakGlass::engage(setup, server, SUBNETS, CONVERGENCE)
    }

    fn assert_still_alt_cdn(&mut self, what: &str) {
        let targets = critical_targets(&mut self.resolver, &self.subnets);
        assert!(
            targets.iter().all(|t| t.as_deref() == Some(ALT_CDN)),
            "{what}: the last known good answers (alt-cdn) are no longer served: {:?}",
            &targets[..5]
        );
    }

    /// Applies `fault`, waits for the refusal, checks that the old answers and serial stay,
    /// that every `expected` fragment appears in one refusal reason, and that the log has it.
    fn refuse(&mut self, what: &str, fault: impl FnOnce(&Setup), expected: &[&str]) -> Vec<String> {
        let status = self.server.status();
        let serial = status["serial"].as_u64().expect("serial");
        let refused = status["reloads_refused"].as_u64().expect("refused");
        fault(&self.setup);
        let (status, reasons) = self
            .server
            .expect_refusal(refused, REFUSAL_WAIT, expected, what);
        assert_eq!(
            status["serial"].as_u64(),
            Some(serial),
            "{what}: serial moved"
        );
        assert!(
            self.server
                .chaos_serial()
                .starts_with(&format!("serial {serial} ")),
            "{what}: CH TXT serial moved"
        );
        self.assert_still_alt_cdn(what);
        assert!(
            self.server.log_shows("refused", Duration::from_secs(2)),
            "{what}: the refusal was not logged:\n{}",
            self.server.log()
        );
        reasons
    }

    /// A good control file again: accepted, answers follow.
    fn recover(&mut self) {
        let serial = self.server.serial();
        self.release(REFUSAL_WAIT);
        assert_ne!(self.server.serial(), serial, "recovery is a new version");
    }
}

#[test]
fn invalid_toml_in_the_control_file_is_refused() {
    let mut scene = Scene::new("fault-toml");
    scene.refuse(
        "invalid TOML",
        |s| {
            s.write_control_atomically(
                "[profiles.critical.endpoints\nfrontdoor = { weight = 100 }\n",
            )
        },
        &["control.toml:1:"],
    );
    scene.recover();
}

#[test]
fn an_unknown_endpoint_in_the_control_file_is_refused() {
    let mut scene = Scene::new("fault-endpoint");
    scene.refuse(
        "unknown endpoint",
        |s| {
            let text = format!("{}nosuch = {{ weight = 5 }}\n", critical_control(100, 0, 0));
            s.write_control_atomically(&text)
        },
        &["control.toml", "nosuch"],
    );
    scene.recover();
}

#[test]
fn an_all_zero_profile_in_the_control_file_is_refused() {
    let mut scene = Scene::new("fault-zero");
    scene.refuse(
        "all-zero profile",
        |s| s.write_control_atomically(&critical_control(0, 0, 0)),
        &["control.toml", "profiles.critical", "no servable endpoint"],
    );
    scene.recover();
}

#[test]
fn a_deleted_control_file_is_refused() {
    let mut scene = Scene::new("fault-deleted");
    scene.refuse(
        "control file deleted",
        |s| std::fs::remove_file(s.control_path()).expect("delete control file"),
        &["control.toml", "cannot read"],
    );
    // Still serving the old answers after the watcher looked again (its backstop poll must
    // not change that): two more checks, so one began after the refusal was seen.
    let checks = scene.server.status()["control_checks"]
        .as_u64()
        .expect("control_checks in the status");
    scene
        .server
        .wait_for_status("the watcher's next poll", REFUSAL_WAIT, |s| {
            s["control_checks"].as_u64() >= Some(checks + 2)
        });
    scene.assert_still_alt_cdn("control file deleted, after a poll interval");
    scene.recover();
}

#[test]
fn a_control_file_truncated_mid_write_is_refused() {
    let mut scene = Scene::new("fault-truncated");
    let full = critical_control(100, 0, 0);
    let half = &full[..full.len() / 2];
    scene.refuse(
        "truncated control file",
        // In place, as a careless writer would: truncate, then half the bytes.
        |s| std::fs::write(s.control_path(), half).expect("write half"),
        &["control.toml"],
    );
    scene.recover();
}

#[test]
fn a_control_file_replaced_by_a_directory_is_refused() {
    // Works as root too (permission bits do not stop root; a directory cannot be read by anyone).
    let mut scene = Scene::new("fault-directory");
    scene.refuse(
        "control file replaced by a directory",
        |s| {
            let path = s.control_path();
            std::fs::remove_file(&path).expect("remove control file");
            std::fs::create_dir(&path).expect("directory in its place");
        },
        &["control.toml", "cannot read"],
    );
    std::fs::remove_dir(scene.setup.control_path()).expect("remove the directory");
    scene.recover();
}

#[test]
fn an_unreadable_control_file_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let mut scene = Scene::new_under("fault-permission", without_dac_override());
    scene.refuse(
        "control file mode 000",
        |s| {
            std::fs::set_permissions(s.control_path(), std::fs::Permissions::from_mode(0o000))
                .expect("chmod 000")
        },
        &["control.toml", "ermission denied"],
    );
    std::fs::set_permissions(
        scene.setup.control_path(),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod 644");
    scene.recover();
}

/// What makes a server obey file modes: as root (CI runs as root), a server without
/// CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (setpriv drops them from the bounding and the
/// inheritable sets, so the server's exec does not get them back); as anyone else, nothing.
fn without_dac_override() -> &'static [&'static str] {
    if running_as_root() {
        &[
            "setpriv",
            "--inh-caps=-dac_override,-dac_read_search",
            "--bounding-set=-dac_override,-dac_read_search",
        ]
    } else {
        &[]
    }
}

#[test]
fn a_garbage_geo_database_on_sighup_is_refused_and_the_database_in_service_is_kept() {
    // A geo database that cannot be read degrades only a first start (serve with the default
    // region rather than not at all). On a reload it must not replace a database in service:
    // the reload is refused, the reason names the file, and EU clients stay in EU.
    let mut scene = Scene::new("fault-geo");
    let eu = std::net::Ipv4Addr::new(203, 0, 113, 10);
    assert_eq!(eu_gateway(&mut scene.resolver), vec![eu]);
    let status = scene.server.status();
    assert_eq!(status["geo"], "ok");
    let serial = status["serial"].as_u64().expect("serial");
    let refused = status["reloads_refused"].as_u64().expect("refused");

    let database = scene.setup.path("geoip/example.mmdb");
    let good = std::fs::read(&database).expect("read database");
    write_atomically(&database, &b"this is not a MaxMind database\n".repeat(100));
    scene.server.sighup();
    let deadline = Instant::now() + REFUSAL_WAIT;
    let status = loop {
        let status = scene.server.status();
        if status["reloads_refused"].as_u64() > Some(refused) {
            break status;
        }
        assert!(Instant::now() < deadline, "SIGHUP not handled: {status:#}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status["serial"].as_u64(), Some(serial));
    assert_eq!(
        status["geo"], "ok",
        "the database in service was replaced: {status:#}"
    );
    let reasons = status["last_refusal"]["reasons"].to_string();
    assert!(
        reasons.contains("geo database") && reasons.contains("example.mmdb"),
        "the refusal should name the database: {reasons}"
    );
    scene.assert_still_alt_cdn("geo database garbage");
    assert_eq!(eu_gateway(&mut scene.resolver), vec![eu]);

    // A good file again: the next reload is accepted.
    write_atomically(&database, &good);
    let accepted = scene.server.status()["reloads_accepted"].as_u64();
    scene.server.sighup();
    let deadline = Instant::now() + REFUSAL_WAIT;
    while scene.server.status()["reloads_accepted"].as_u64() <= accepted {
        assert!(Instant::now() < deadline, "good geo database not reloaded");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(eu_gateway(&mut scene.resolver), vec![eu]);
}

#[test]
fn a_sighup_right_after_ready_reloads_instead_of_killing_the_server() {
    // "ready" is the promise that the server is fully up, signal handling included. Several
    // rounds, because the window (if any) between "ready" and the handler is short.
    let setup = Setup::new("fault-early-hup");
    for round in 0..8 {
        let mut server = setup.start();
        server.sighup();
        let deadline = Instant::now() + REFUSAL_WAIT;
        loop {
            let status = server.try_status();
            if let Some(status) = server.exited() {
                panic!("round {round}: SIGHUP right after \"ready\" killed the server ({status})");
            }
            if status.is_some_and(|s| s["loaded_by"] == "SIGHUP") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: SIGHUP not handled"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The addresses of mail.example.com.
fn mail(resolver: &mut Resolver) -> Vec<std::net::Ipv4Addr> {
    a_records(&resolver.ask(&plain_query("mail.example.com.", RecordType::A)))
}

#[test]
fn a_zone_error_on_sighup_is_refused_and_the_old_zone_keeps_serving() {
    let mut scene = Scene::new("fault-zone");
    let old = std::net::Ipv4Addr::new(192, 0, 2, 25);
    let new = std::net::Ipv4Addr::new(192, 0, 2, 26);
    assert_eq!(mail(&mut scene.resolver), vec![old]);
    let zone = scene.setup.path("zones/example.com.zone");
    let original = std::fs::read_to_string(&zone).expect("read zone");
    let changed = original.replacen("192.0.2.25", "192.0.2.26", 1);
    assert_ne!(changed, original, "zone file has mail at 192.0.2.25");
    let bad_line = changed.lines().count() + 1;
    let broken = format!("{changed}broken       A     999.0.2.1\n");

    let pid = scene.server.pid();
    scene.refuse(
        "zone error",
        |_| {
            write_atomically(&zone, broken.as_bytes());
            sighup(pid);
        },
        &[&format!("example.com.zone:{bad_line}")],
    );
    assert_eq!(
        mail(&mut scene.resolver),
        vec![old],
        "the good part of a refused zone change must not be served either"
    );
    assert_eq!(scene.server.status()["last_refusal"]["trigger"], "SIGHUP");

    // Fixed: accepted, and the change that came with it is served.
    let accepted = scene.server.accepted();
    write_atomically(&zone, changed.as_bytes());
    scene.server.sighup();
    let deadline = Instant::now() + REFUSAL_WAIT;
    while scene.server.accepted() == accepted {
        assert!(Instant::now() < deadline, "fixed zone not accepted");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mail(&mut scene.resolver), vec![new]);
    scene.assert_still_alt_cdn("after the zone fix");
}

#[test]
fn a_restart_with_a_bad_control_file_serves_the_newest_valid_history_version() {
    let scene = Scene::new("fault-restart");
    let Scene {
        setup,
        server,
        subnets,
        ..
    } = scene;
    let good_serial = server.serial();
    server.stop();
    let bad = "[profiles.critical.endpoints]\nfrontdoor = { weight = \n";
    std::fs::write(setup.control_path(), bad).expect("write bad control");

    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    assert_all_critical(&mut resolver, &subnets, ALT_CDN);
    let status = server.status();
    assert_eq!(status["serial"].as_u64(), Some(good_serial), "{status:#}");
    assert!(status["reloads_refused"].as_u64() >= Some(1), "{status:#}");
    assert_eq!(status["last_refusal"]["trigger"], "startup");
    let reasons = refusal_reasons(&status);
    assert!(
        reasons.iter().any(|r| r.contains("control.toml:")),
        "the refusal names the file: {reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains(&format!("version {good_serial}")) && r.contains("history")),
        "the refusal says which history version serves: {reasons:?}"
    );
    assert_eq!(
        std::fs::read_to_string(setup.control_path()).expect("read control"),
        bad,
        "the operator's (bad) file is left for them to fix"
    );

    // The watcher does not re-taste the same bad bytes, and a fix is accepted.
    let written = Instant::now();
    setup.write_control_atomically(&critical_control(100, 0, 0));
    wait_all_target(&mut resolver, &subnets, FRONTDOOR, written, CONVERGENCE);
}

#[test]
fn a_first_start_with_a_bad_control_file_and_no_history_refuses_to_start() {
    let setup = Setup::new("fault-nohistory");
    std::fs::write(setup.control_path(), "[profiles.critical.endpoints\n").expect("write");
    let mut child = Command::new(BIN)
        .current_dir(setup.dir.path())
        .arg("serve")
        .arg("--config")
        .arg(&setup.config)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .env("STEERDNS_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start steerdns");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("steerdns started with a bad control file and no history to fall back on");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut err = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        use std::io::Read;
        let _ = pipe.read_to_string(&mut err);
    }
    assert!(
        err.contains("control.toml:1"),
        "stderr names the file:\n{err}"
    );
}

#[test]
fn post_reload_requires_the_token() {
    let setup = Setup::new("api-token");
    let server = setup.start();
    let accepted = server.accepted();

    let (code, body) = http(server.admin, "POST", "/v1/reload", None);
    assert_eq!(code, 401, "no token: {body}");
    let (code, body) = http(server.admin, "POST", "/v1/reload", Some("wrong-token"));
    assert_eq!(code, 401, "wrong token: {body}");
    let (code, body) = http(
        server.admin,
        "POST",
        "/v1/reload",
        Some(&format!("{TOKEN}x")),
    );
    assert_eq!(code, 401, "token with a suffix: {body}");
    assert_eq!(
        server.accepted(),
        accepted,
        "an unauthorized request reloaded"
    );

    let (code, body) = http(server.admin, "POST", "/v1/reload", Some(TOKEN));
    assert_eq!(code, 200, "right token: {body}");
    assert!(body.contains("accepted"), "{body}");
    assert_eq!(server.accepted(), accepted + 1);
    assert_eq!(server.status()["loaded_by"], "reload command");

    // The CLI reads the token from the config's token file.
    let text = ok(&server.cli(&["reload"]), "steerdns reload");
    assert!(text.contains("accepted"), "{text}");
    assert_eq!(server.accepted(), accepted + 2);

    // A reload that does not validate: 409 with the reasons, nothing swapped.
    let zone = setup.path("zones/example.com.zone");
    let original = std::fs::read_to_string(&zone).expect("read zone");
    write_atomically(&zone, format!("{original}broken A 999.0.2.1\n").as_bytes());
    let serial = server.serial();
    let (code, body) = http(server.admin, "POST", "/v1/reload", Some(TOKEN));
    assert_eq!(code, 409, "refused reload: {body}");
    assert!(body.contains("example.com.zone:"), "{body}");
    assert_eq!(server.serial(), serial);
    assert_eq!(server.status()["last_refusal"]["trigger"], "reload command");
    let output = server.cli(&["reload"]);
    assert!(!output.status.success(), "steerdns reload of a bad zone");
}

#[test]
fn post_reload_is_forbidden_without_a_configured_token() {
    let setup = Setup::new("api-notoken");
    // No `token_file` at all (a missing file would be created with a random token).
    let config = std::fs::read_to_string(&setup.config).expect("read config");
    let config = config.replace("token_file = \"admin.token\"", "");
    std::fs::write(&setup.config, config).expect("write config");
    let server = setup.start();
    let accepted = server.accepted();
    for token in [None, Some(TOKEN), Some("")] {
        let (code, body) = http(server.admin, "POST", "/v1/reload", token);
        assert_eq!(code, 403, "token {token:?}: {body}");
    }
    assert_eq!(server.accepted(), accepted);
    // Reads stay open.
    assert_eq!(
        http(server.admin, "GET", "/v1/status", None).0,
        200,
        "GET /v1/status without a token"
    );
}

/// Issue 12 item 8: a version the history cannot record (here its directory became a file) is
/// still served — the change is good — but status says, for as long as it serves, that it is
/// not recorded and what that costs; once the history works again the next change is recorded
/// and the warning is gone.
#[test]
fn a_served_version_the_history_could_not_record_is_said_in_status() {
    let setup = Setup::new("fault-unrecorded");
    let server = setup.start();
    let history = setup.history_dir();
    let serial = server.serial();
    std::fs::rename(&history, setup.path("history.moved")).expect("move the history away");
    std::fs::write(&history, "not a directory\n").expect("a file where the history was");
    setup.write_control_atomically(&critical_control(0, 100, 0));
    let served = server.wait_for_serial_change(serial, REFUSAL_WAIT);
    let status = server.status();
    let warnings = status["warnings"].to_string();
    assert!(
        warnings.contains(&format!(
            "control serial {served} is served but not recorded in the history"
        )),
        "{status:#}"
    );
    assert!(warnings.contains("cannot fall back to it"), "{warnings}");

    std::fs::remove_file(&history).expect("remove the file");
    std::fs::rename(setup.path("history.moved"), &history).expect("restore the history");
    setup.write_control_atomically(&critical_control(100, 0, 0));
    let next = server.wait_for_serial_change(served, REFUSAL_WAIT);
    assert!(next > served);
    let deadline = Instant::now() + REFUSAL_WAIT;
    loop {
        // The history is written just after serving: allow it time, never the serving.
        let listed = ok(&server.cli(&["control", "history"]), "control history");
        if listed.contains(&next.to_string()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "serial {next} not recorded:\n{listed}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !server.status()["warnings"]
            .to_string()
            .contains("not recorded"),
        "{:#}",
        server.status()
    );
}
