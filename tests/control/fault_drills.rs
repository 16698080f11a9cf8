//! Fault drills: things that go wrong in production, done on purpose to the real binary on
//! loopback. In every drill the server keeps serving its last known good state and says why,
//! in `GET /v1/status` and/or `GET /metrics`:
//!
//! - a `steerdns weight set` killed with SIGKILL part-way, and the partial temp file an
//!   interrupted writer leaves: the control file is the old or the new version, never a mix;
//! - power-cut style files: a zero-length and a zero-filled control file, a zone file, the
//!   config file and the load-feed file cut short;
//! - the control history directory unwritable; serials after it recovers; a disk that takes
//!   seconds to flush (strace fault injection);
//! - the geo database missing at start;
//! - every load feed going stale: the shield freezes, then reverts to normal answers;
//! - clock jumps in feeds: far ahead (refused), backwards, far behind (stale), and ahead within
//!   the allowed skew (must still age from when it was received);
//! - a storm of 200 SIGHUPs under query load;
//! - running out of file descriptors on TCP accept;
//! - a zone `$INCLUDE` of a named pipe on SIGHUP (the control plane must stay responsive).
//!
//! Drills that existed before (invalid control TOML, unknown endpoint, all-zero profile, deleted,
//! half-written, unreadable, directory, zone error on SIGHUP, restart from history, garbage geo
//! database on reload) are in `control_faults.rs`. Every wait is bounded; all traffic is loopback.

use crate::control_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hickory_proto::rr::RecordType;
use prometheus_parse::{Scrape, Value};
use serde_json::Value as Json;
use steerdns::control::edit::set_weights;
use steerdns::control::ControlFile;
use steerdns::rfc3339;

use control_common::load::control_load;
use control_common::*;

/// The watcher reacts within milliseconds (inotify) or at its 2 s backstop poll.
const REACT: Duration = Duration::from_secs(5);
/// Enough for two backstop polls of the control file (every 2 s) when no watcher event comes.
const CONTROL_POLLS: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Helpers

/// The value of the one sample of `metric` with exactly `labels`.
fn metric(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples_with(scrape, metric, labels)
        .first()
        .and_then(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => Some(v),
            _ => None,
        })
}

fn refused_reloads_metric(admin: SocketAddr) -> f64 {
    metric(
        &scrape_metrics(admin),
        "steerdns_reloads_total",
        &[("result", "refused")],
    )
    .expect("steerdns_reloads_total{result=\"refused\"}")
}

/// Appends `extra` (TOML sections) to the setup's config.
/// RFC 3339 UTC with milliseconds (second precision would age a feed by up to 1 s at once).
fn rfc3339_ms(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).expect("after 1970");
    let whole = rfc3339::format_utc(UNIX_EPOCH + Duration::from_secs(since.as_secs()));
    format!(
        "{}.{:03}Z",
        whole.trim_end_matches('Z'),
        since.subsec_millis()
    )
}

/// A load feed measured at `time` with eu-west at `eu_west_load` of 1000 and room elsewhere.
fn feed(time: SystemTime, eu_west_load: f64) -> String {
    eu_west_feed(
        &rfc3339_ms(time),
        eu_west_load,
        "tests/control/fault_drills.rs",
    )
}

fn eu_west(status: &Json) -> Json {
    status["shield"]["regions"]
        .as_array()
        .and_then(|regions| regions.iter().find(|r| r["name"] == "eu-west"))
        .cloned()
        .unwrap_or_else(|| panic!("no eu-west in the shield status: {status:#}"))
}

fn alerts(status: &Json) -> String {
    status["shield"]["alerts"].to_string()
}

/// eu-west client subnets (the example database places 81.2.0.0/16 in GB).
fn eu_subnets() -> Vec<String> {
    (0..100).map(|i| format!("81.2.{i}.0/24")).collect()
}

/// How many of `subnets` get something other than the global anycast address for an anycast
/// name, i.e. were shed by the shield.
fn shed_answers(resolver: &mut Resolver, subnets: &[String]) -> usize {
    resolver
        .ask_a_from_each("www.edge.example.net.", subnets)
        .iter()
        .filter(|r| a_records(r) != vec![GLOBAL_V4])
        .count()
}

/// The weights the control text sets for `critical` (frontdoor, alt-cdn), or None if it does
/// not parse.
fn critical_weights(text: &str) -> Option<(u32, u32)> {
    let control = ControlFile::parse(text, Path::new("control.toml")).ok()?;
    let endpoints = &control.profiles.get("critical")?.endpoints;
    let weight = |e: &str| endpoints.get(e).and_then(|k| k.weight);
    Some((weight("frontdoor")?, weight("alt-cdn")?))
}

fn served_critical_weights(status: &Json) -> (Option<u64>, Option<u64>) {
    let weight = |e: &str| status["profiles"]["critical"][e]["weight"].as_u64();
    (weight("frontdoor"), weight("alt-cdn"))
}

/// Sets break-glass (critical → alt-cdn) and waits until every subnet gets it and status
/// shows its serial (what the drills compare against afterwards).
fn break_glass(setup: &Setup, server: &Daemon, resolver: &mut Resolver, subnets: &[String]) {
    let serial = server.serial();
    let written = Instant::now();
    setup.write_control_atomically(&critical_control(0, 100, 0));
    wait_all_target(resolver, subnets, ALT_CDN, written, REACT);
    server.wait_for_serial_change(serial, REACT);
}

/// Waits for one more refusal than `before`, then checks serial and answers did not move and
/// that some reason contains every fragment of `expected`.
fn assert_refused_and_lkg(
    server: &Daemon,
    resolver: &mut Resolver,
    subnets: &[String],
    before: &Json,
    expected: &[&str],
    what: &str,
) -> Json {
    let refused = before["reloads_refused"].as_u64().expect("refused");
    let (status, _) = server.expect_refusal(refused, REACT, expected, what);
    assert_eq!(status["serial"], before["serial"], "{what}: serial moved");
    assert_all_critical(resolver, subnets, ALT_CDN);
    status
}

// ---------------------------------------------------------------------------------------------
// kill -9 during a control write

#[test]
fn kill_9_of_weight_set_leaves_the_old_or_the_new_control_file_never_a_mix() {
    let setup = Setup::new("drill-kill9");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let subnets = distinct_subnets(20);
    let control = setup.control_path();
    let start = server.status();

    // What a writer killed between creating its temp file and renaming it leaves behind: half
    // a file beside the control file. It must never be tasted, let alone served.
    let full = critical_control(0, 100, 0);
    let leftover = setup.path(".control.toml.tmp.999999.0");
    std::fs::write(&leftover, &full[..full.len() / 2]).expect("write partial temp file");
    // Two more checks of the control directory (watcher events or the 2 s backstop poll): at
    // least one began after the temp file was there.
    let status = server.wait_for_control_checks(2, CONTROL_POLLS);
    assert_eq!(status["serial"], start["serial"], "a temp file was tasted");
    assert_eq!(status["reloads_refused"], start["reloads_refused"]);
    assert_all_critical(&mut resolver, &subnets, FRONTDOOR);

    // SIGKILL the CLI at spread-out moments: before it wrote, while it writes. The CLI is the
    // writer here: pointed at a closed admin port it edits the file in-process (the server,
    // when it answers, makes the edit itself with the same lock and rename; a killed client
    // does not cancel a request the server has received, so that path is not this test's).
    let closed_admin = closed_port();
    let (mut kept_old, mut got_new) = (0, 0);
    let kill_after_ms = [0u64, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30, 60, 120];
    for (round, delay) in kill_after_ms.into_iter().enumerate() {
        let old = std::fs::read_to_string(&control).expect("read control");
        let (frontdoor, alt_cdn) = if round % 2 == 0 { (0, 100) } else { (100, 0) };
        let changes = [
            ("frontdoor".to_string(), frontdoor),
            ("alt-cdn".to_string(), alt_cdn),
        ];
        let new = set_weights(&old, "critical", &changes).expect("edit control text");
        let mut cli = Command::new(BIN)
            .args(["weight", "set", "critical"])
            .arg(format!("frontdoor={frontdoor}"))
            .arg(format!("alt-cdn={alt_cdn}"))
            .arg("--config")
            .arg(&setup.config)
            .arg("--admin")
            .arg(closed_admin.to_string())
            .env("STEERDNS_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start steerdns weight set");
        std::thread::sleep(Duration::from_millis(delay));
        let _ = cli.kill(); // SIGKILL
        let _ = cli.wait();

        let now = std::fs::read_to_string(&control).expect("read control after the kill");
        assert!(
            now == old || now == new,
            "round {round}: the control file is neither the old nor the new version:\n{now}"
        );
        if now == new {
            got_new += 1;
        } else {
            kept_old += 1;
        }
        // The server converges on what the file says, weights and answers alike.
        let (frontdoor, alt_cdn) = critical_weights(&now).expect("control file parses");
        let target = if alt_cdn > 0 { ALT_CDN } else { FRONTDOOR };
        let status = wait_for(
            &format!("round {round}: served weights ({frontdoor}, {alt_cdn})"),
            REACT,
            || {
                let status = server.status();
                let served = served_critical_weights(&status);
                (served == (Some(frontdoor.into()), Some(alt_cdn.into()))).then_some(status)
            },
        );
        wait_all_target(&mut resolver, &subnets, target, Instant::now(), REACT);
        assert_eq!(
            status["reloads_refused"], start["reloads_refused"],
            "round {round}: the server saw a torn control file: {status:#}"
        );
    }
    println!("kill -9 rounds: {kept_old} kept the old file, {got_new} got the new one");

    // Leftover temp files from killed writers do not stop the next writer, and a restart
    // serves the control file, not a leftover.
    ok(
        &server.cli(&["weight", "set", "critical", "frontdoor=100", "alt-cdn=0"]),
        "weight set after the kills",
    );
    wait_all_target(&mut resolver, &subnets, FRONTDOOR, Instant::now(), REACT);
    let serial = server.serial();
    server.stop();
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    assert_all_critical(&mut resolver, &subnets, FRONTDOOR);
    let status = server.status();
    assert_eq!(status["serial"].as_u64(), Some(serial), "{status:#}");
    assert_eq!(status["reloads_refused"].as_u64(), Some(0), "{status:#}");
}

// ---------------------------------------------------------------------------------------------
// Power-cut style truncated files

#[test]
fn a_power_cut_control_file_zero_length_or_zero_filled_is_refused() {
    let setup = Setup::new("drill-powercut-control");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let subnets = distinct_subnets(20);
    break_glass(&setup, &server, &mut resolver, &subnets);
    let metric_before = refused_reloads_metric(server.admin);

    // Truncated, then the power went before the new bytes were written.
    let before = server.status();
    std::fs::File::create(setup.control_path()).expect("truncate control file");
    assert_refused_and_lkg(
        &server,
        &mut resolver,
        &subnets,
        &before,
        &["control.toml", "empty"],
        "zero-length control file",
    );
    // Metadata (the size) reached the disk, the data blocks did not: all NUL bytes.
    let before = server.status();
    let size = critical_control(0, 100, 0).len();
    std::fs::write(setup.control_path(), vec![0u8; size]).expect("write zeros");
    assert_refused_and_lkg(
        &server,
        &mut resolver,
        &subnets,
        &before,
        &["control.toml"],
        "zero-filled control file",
    );
    assert_eq!(
        refused_reloads_metric(server.admin),
        metric_before + 2.0,
        "steerdns_reloads_total{{result=\"refused\"}} counts both"
    );
}

#[test]
fn a_zone_file_cut_short_by_a_power_cut_is_refused_on_sighup() {
    let setup = Setup::new("drill-powercut-zone");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let subnets = distinct_subnets(20);
    break_glass(&setup, &server, &mut resolver, &subnets);
    let zone = setup.path("zones/example.com.zone");
    let text = std::fs::read_to_string(&zone).expect("read zone");
    // Cut in the middle of mail's address: "mail A 192.0".
    let cut = text.find("192.0.2.25").expect("mail at 192.0.2.25") + "192.0".len();
    let line = text[..cut].lines().count();
    let before = server.status();
    std::fs::write(&zone, &text.as_bytes()[..cut]).expect("truncate zone");
    server.sighup();
    let status = assert_refused_and_lkg(
        &server,
        &mut resolver,
        &subnets,
        &before,
        &[&format!("example.com.zone:{line}:")],
        "zone file cut short",
    );
    assert_eq!(status["last_refusal"]["trigger"], "SIGHUP");
    // Everything of the zone still answers, including what came after the cut.
    for (name, rtype) in [
        ("mail.example.com.", RecordType::A),
        ("sip.example.com.", RecordType::A),
        ("exists.wild.example.com.", RecordType::TXT),
        ("a.b.ent.example.com.", RecordType::A),
    ] {
        let response = resolver.ask(&plain_query(name, rtype));
        assert!(
            !response.answers.is_empty(),
            "{name} {rtype} is no longer answered after a refused reload: {response:?}"
        );
    }
}

#[test]
fn a_config_file_cut_short_by_a_power_cut_is_refused_on_sighup() {
    let setup = Setup::new("drill-powercut-config");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let subnets = distinct_subnets(20);
    break_glass(&setup, &server, &mut resolver, &subnets);
    let text = std::fs::read_to_string(&setup.config).expect("read config");
    // Cut inside a quoted string, as a write interrupted mid-block would.
    let cut = text
        .find("cname = \"critical.cdn")
        .expect("alt-cdn's cname")
        + "cname = \"crit".len();
    let line = text[..cut].lines().count();
    let before = server.status();
    let metric_before = refused_reloads_metric(server.admin);
    std::fs::write(&setup.config, &text.as_bytes()[..cut]).expect("truncate config");
    server.sighup();
    assert_refused_and_lkg(
        &server,
        &mut resolver,
        &subnets,
        &before,
        &[&format!("steerdns.toml:{line}:")],
        "config file cut short",
    );
    assert_eq!(refused_reloads_metric(server.admin), metric_before + 1.0);
    assert!(
        server.chaos_serial().starts_with(&format!(
            "serial {} ",
            before["serial"].as_u64().unwrap_or(0)
        )),
        "CH TXT serial moved"
    );
    // The admin endpoint and the token (read from the config) keep working.
    let (code, body) = http(server.admin, "POST", "/v1/reload", Some(TOKEN));
    assert_eq!(code, 409, "a reload of the cut config is refused: {body}");
}

#[test]
fn a_load_feed_file_cut_short_is_refused_and_the_last_good_feed_stays() {
    let setup = Setup::new("drill-powercut-feed");
    setup.extend_config("[shield]\ntick_ms = 100\nstale_after_secs = 60\nrevert_after_secs = 120\nload_file = \"load.json\"\n",
    );
    let load_file = setup.path("load.json");
    let good = feed(SystemTime::now(), 990.0);
    write_atomically(&load_file, good.as_bytes());
    let server = setup.start();
    let status = wait_for("the load file's feed accepted", REACT, || {
        let status = server.status();
        (status["shield"]["feeds_accepted"].as_u64() == Some(1)).then_some(status)
    });
    assert_eq!(status["shield"]["feed_origin"], "file", "{status:#}");
    assert_eq!(eu_west(&status)["load"].as_f64(), Some(990.0));

    // Rewritten in place and cut at half (a power cut, or a writer that died mid-way).
    std::fs::write(&load_file, &good.as_bytes()[..good.len() / 2]).expect("truncate feed");
    let status = wait_for("the cut feed refused", REACT, || {
        let status = server.status();
        (status["shield"]["feeds_refused"].as_u64() == Some(1)).then_some(status)
    });
    let refusal = status["shield"]["last_feed_refusal"].to_string();
    assert!(
        refusal.contains("(file)") && refusal.contains("does not parse"),
        "the refusal says where the feed came from and why: {refusal}"
    );
    assert_eq!(status["shield"]["feeds_accepted"].as_u64(), Some(1));
    assert_eq!(
        eu_west(&status)["load"].as_f64(),
        Some(990.0),
        "the last good feed must stay in use: {status:#}"
    );
    let metrics = scrape_metrics(server.admin);
    assert_eq!(
        metric(
            &metrics,
            "steerdns_load_feeds_total",
            &[("result", "refused")]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &metrics,
            "steerdns_load",
            &[("ring", "region"), ("name", "eu-west")]
        ),
        Some(990.0)
    );
    // The same cut bytes are refused once, not every tick: each tick polls the load file.
    let status = server.wait_for_shield_ticks(5, REACT);
    assert_eq!(
        status["shield"]["feeds_refused"].as_u64(),
        Some(1),
        "an unchanged bad file is refused again and again"
    );
}

// ---------------------------------------------------------------------------------------------
// Control history unwritable

/// Moves the history directory aside and puts a regular file in its place (as root, chmod does
/// not stop writes; a file where a directory should be stops everyone). Returns where it went.
fn block_history(setup: &Setup) -> std::path::PathBuf {
    let history = setup.history_dir();
    let aside = setup.path("history-aside");
    std::fs::rename(&history, &aside).expect("move the history aside");
    std::fs::write(&history, "not a directory\n").expect("file in place of the history");
    aside
}

fn wait_served(server: &Daemon, frontdoor: u32, alt_cdn: u32) -> Json {
    wait_for(
        &format!("weights ({frontdoor}, {alt_cdn}) served"),
        REACT,
        || {
            let status = server.status();
            (served_critical_weights(&status) == (Some(frontdoor.into()), Some(alt_cdn.into())))
                .then_some(status)
        },
    )
}

#[test]
fn an_unwritable_control_history_still_accepts_changes_and_warns() {
    let setup = Setup::new("drill-history");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let subnets = distinct_subnets(20);
    let first = server.status();
    assert_eq!(first["warnings"], serde_json::json!([]), "{first:#}");
    block_history(&setup);

    setup.write_control_atomically(&critical_control(0, 100, 0));
    let status = wait_served(&server, 0, 100);
    wait_all_target(&mut resolver, &subnets, ALT_CDN, Instant::now(), REACT);
    assert_eq!(status["reloads_refused"].as_u64(), Some(0), "{status:#}");
    assert!(
        status["serial"].as_u64() > first["serial"].as_u64(),
        "a new serial for the change: {status:#}"
    );
    let warnings = status["warnings"].to_string();
    assert!(
        warnings.contains("control history") && warnings.contains("control.toml.history"),
        "status should say the history could not be written: {warnings}"
    );
    // The CLI path works too (it does not need the history to write the control file).
    ok(
        &server.cli(&["weight", "set", "critical", "frontdoor=100", "alt-cdn=0"]),
        "weight set with the history unwritable",
    );
    wait_served(&server, 100, 0);
    wait_all_target(&mut resolver, &subnets, FRONTDOOR, Instant::now(), REACT);
}

/// Every fsync and fdatasync of the server takes this long (strace fault injection).
const SLOW_FLUSH: Duration = Duration::from_secs(5);

/// A disk where every flush takes seconds (a busy shared disk, a dying one) must not hold back
/// an operator's change: the history is written before the swap (so the CLI sees the version
/// at once) and flushed to disk in the background, after it. (It used to flush four times
/// under the reloader's lock before serving: 20 s here.)
#[test]
fn a_disk_that_takes_seconds_to_flush_does_not_delay_a_control_change() {
    let setup = Setup::new("drill-slow-flush");
    let delay = format!(
        "inject=fsync,fdatasync:delay_enter={}",
        SLOW_FLUSH.as_micros()
    );
    let strace = [
        "strace",
        "-f",
        "-qq",
        "--seccomp-bpf",
        "-e",
        "trace=fsync,fdatasync",
        "-e",
        delay.as_str(),
        "-o",
        "/dev/null",
        "--",
    ];
    // strace is a test dependency (.ci/run installs it): without it this drill must fail.
    let server = Daemon::start_under(&setup, &strace);
    let mut resolver = Resolver::new(server.dns);
    let subnets = distinct_subnets(20);
    let before = server.serial();

    let written = Instant::now();
    setup.write_control_atomically(&critical_control(0, 100, 0));
    let status = wait_for(
        "the change served within one injected flush delay",
        SLOW_FLUSH - Duration::from_secs(1),
        || {
            let status = server.status();
            (served_critical_weights(&status) == (Some(0), Some(100))).then_some(status)
        },
    );
    wait_all_target(&mut resolver, &subnets, ALT_CDN, written, SLOW_FLUSH);
    let serial = status["serial"].as_u64().unwrap_or(0);
    assert!(serial > before, "a new serial: {status:#}");
    assert_eq!(status["warnings"], serde_json::json!([]), "{status:#}");
    // The version is in the history as soon as it is served (a rollback right after the
    // change must see it), though its flush to disk is still under way.
    let history = server.cli(&["control", "history"]);
    let listing = stdout(&history);
    assert!(
        listing.contains(&serial.to_string()),
        "control history lists serial {serial}:\n{listing}"
    );
}

#[test]
fn serials_keep_growing_after_the_control_history_recovers() {
    // The serial names a control version everywhere (status, CH TXT serial, metrics, fleet
    // convergence checks). Versions accepted while the history could not be written must not
    // have their serials handed out again once it can.
    let setup = Setup::new("drill-history-serial");
    let server = setup.start();
    let aside = block_history(&setup);
    let mut seen = vec![server.serial()];
    for (frontdoor, alt_cdn) in [(0, 100), (50, 50)] {
        setup.write_control_atomically(&critical_control(frontdoor, alt_cdn, 0));
        seen.push(
            wait_served(&server, frontdoor, alt_cdn)["serial"]
                .as_u64()
                .unwrap_or(0),
        );
    }
    // The disk is back: the history directory is where it was.
    std::fs::remove_file(setup.history_dir()).expect("remove the blocking file");
    std::fs::rename(&aside, setup.history_dir()).expect("put the history back");
    setup.write_control_atomically(&critical_control(100, 0, 0));
    let status = wait_served(&server, 100, 0);
    seen.push(status["serial"].as_u64().unwrap_or(0));
    assert!(
        status["warnings"].as_array().is_some_and(Vec::is_empty),
        "the history warning should clear once it is writable: {status:#}"
    );
    assert!(
        seen.windows(2).all(|w| w[1] > w[0]),
        "serials of successive control versions must grow, got {seen:?} (the last one reuses \
         a serial already served for different content)"
    );
}

// ---------------------------------------------------------------------------------------------
// Geo database missing at start

#[test]
fn a_missing_geo_database_at_start_serves_everyone_from_the_default_region_and_says_so() {
    let setup = Setup::new("drill-geo-missing");
    let database = setup.path("geoip/example.mmdb");
    let good = std::fs::read(&database).expect("read database");
    std::fs::remove_file(&database).expect("remove database");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let status = server.status();
    let geo = status["geo"].as_str().unwrap_or_default().to_string();
    assert!(
        geo.starts_with("degraded") && geo.contains("example.mmdb"),
        "status geo should say degraded and name the file: {status:#}"
    );
    assert!(
        status["warnings"].to_string().contains("default region"),
        "status warnings should say every client maps to the default region: {status:#}"
    );
    // Default region na-east: the NA gateway for an EU client, and NA-counted answers.
    let na_gateway = std::net::Ipv4Addr::new(203, 0, 113, 20);
    assert_eq!(eu_gateway(&mut resolver), vec![na_gateway]);
    let before = scrape_metrics(server.admin);
    let answer = resolver.ask(&ecs_query(
        "www.edge.example.net.",
        RecordType::A,
        EU_WEST_SUBNET,
    ));
    assert_eq!(a_records(&answer), vec![GLOBAL_V4]);
    let after = scrape_metrics(server.admin);
    let counted = |m: &Scrape, region: &str| {
        metric(
            m,
            "steerdns_anycast_answers_total",
            &[("region", region), ("destination", "global")],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(
        counted(&after, "na-east") - counted(&before, "na-east"),
        1.0,
        "the EU client was counted in the default region"
    );

    // The database arrives: a SIGHUP takes it into service.
    write_atomically(&database, &good);
    server.sighup();
    wait_for("geo ok after SIGHUP", REACT, || {
        (server.status()["geo"] == "ok").then_some(())
    });
    assert_eq!(
        eu_gateway(&mut resolver),
        vec![std::net::Ipv4Addr::new(203, 0, 113, 10)]
    );
}

// ---------------------------------------------------------------------------------------------
// All feeds stale

#[test]
fn when_every_feed_goes_stale_the_shield_freezes_then_reverts_to_normal_answers() {
    let setup = Setup::new("drill-stale");
    setup.extend_config("[shield]\ntick_ms = 100\nstale_after_secs = 2\nrevert_after_secs = 6\n");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let subnets = eu_subnets();
    ok(
        &server.push_load(&setup, &feed(SystemTime::now(), 990.0)),
        "load push",
    );
    wait_for("eu-west to shed a fifth of its clients", REACT, || {
        let status = server.status();
        (eu_west(&status)["shed_fraction"].as_f64() > Some(0.2)).then_some(())
    });
    assert!(
        shed_answers(&mut resolver, &subnets) > 0,
        "no eu-west client shed"
    );

    // No more feeds. After stale_after_secs: frozen, and said so.
    let status = wait_for("eu-west frozen", REACT, || {
        let status = server.status();
        (eu_west(&status)["state"] == "stale (frozen)").then_some(status)
    });
    let frozen = eu_west(&status)["shed_fraction"]
        .as_f64()
        .expect("shed fraction");
    assert!(frozen > 0.0, "{status:#}");
    assert!(
        alerts(&status).contains("stale"),
        "status alerts should mention the stale feed: {status:#}"
    );
    let metrics = scrape_metrics(server.admin);
    assert!(metric(&metrics, "steerdns_shield_alerts", &[]) >= Some(1.0));
    assert!(metric(&metrics, "steerdns_load_feed_age_seconds", &[]) >= Some(2.0));
    // Frozen means frozen through later ticks too.
    let status = server.wait_for_shield_ticks(4, REACT);
    assert_eq!(eu_west(&status)["state"], "stale (frozen)", "{status:#}");
    assert_eq!(
        eu_west(&status)["shed_fraction"].as_f64(),
        Some(frozen),
        "a frozen decision moved"
    );
    assert!(
        shed_answers(&mut resolver, &subnets) > 0,
        "frozen decisions are still served"
    );

    // After revert_after_secs: back to normal answers, step by step.
    let status = wait_for("eu-west back to normal", Duration::from_secs(10), || {
        let status = server.status();
        let region = eu_west(&status);
        (region["state"] == "normal" && region["shed_fraction"].as_f64() == Some(0.0))
            .then_some(status)
    });
    assert!(alerts(&status).contains("stale"), "{status:#}");
    assert_eq!(
        shed_answers(&mut resolver, &subnets),
        0,
        "every eu-west client gets the global address again"
    );
}

// ---------------------------------------------------------------------------------------------
// Clock jumps

/// eu-west acts on a fresh feed: shedding, not frozen or reverting.
fn assert_fresh(status: &Json) {
    let region = eu_west(status);
    let state = region["state"].as_str().unwrap_or("");
    assert!(
        !state.starts_with("stale") && region["shed_fraction"].as_f64() > Some(0.0),
        "eu-west should act on a fresh feed: {region:#}"
    );
}

#[test]
fn feed_clock_jumps_ahead_are_refused_and_backwards_or_far_behind_are_seen_as_such() {
    let setup = Setup::new("drill-clock");
    setup
        .extend_config("[shield]\ntick_ms = 100\nstale_after_secs = 10\nrevert_after_secs = 600\n");
    let server = setup.start();
    let first = SystemTime::now();
    ok(&server.push_load(&setup, &feed(first, 990.0)), "load push");
    wait_for("eu-west to shed", REACT, || {
        (eu_west(&server.status())["shed_fraction"].as_f64() > Some(0.0)).then_some(())
    });

    // An hour ahead of our clock: refused, said why, and the feed in use stays.
    let output = server.push_load(
        &setup,
        &feed(SystemTime::now() + Duration::from_secs(3600), 100.0),
    );
    assert!(
        !output.status.success(),
        "a feed an hour ahead was accepted"
    );
    assert!(
        stdout(&output).contains("ahead of this server's clock"),
        "{}",
        stdout(&output)
    );
    let status = wait_for("the refusal in status", REACT, || {
        let status = server.status();
        (status["shield"]["feeds_refused"].as_u64() == Some(1)).then_some(status)
    });
    assert!(
        status["shield"]["last_feed_refusal"]
            .to_string()
            .contains("ahead"),
        "{status:#}"
    );
    assert_eq!(eu_west(&status)["load"].as_f64(), Some(990.0));
    assert_fresh(&status);

    // Time goes backwards between two pushes (1.5 s before the first): taken (last writer
    // wins), its age shown as it is, never negative, and still fresh.
    ok(
        &server.push_load(&setup, &feed(first - Duration::from_millis(1500), 900.0)),
        "load push of an earlier time",
    );
    let status = wait_for("the earlier feed in use", REACT, || {
        let status = server.status();
        (eu_west(&status)["load"].as_f64() == Some(900.0)).then_some(status)
    });
    let age = status["shield"]["feed_age_secs"]
        .as_f64()
        .expect("feed age");
    assert!(age >= 1.5, "feed age {age} s for a feed 1.5 s older");
    assert_fresh(&status);
    let scraped = metric(
        &scrape_metrics(server.admin),
        "steerdns_load_feed_age_seconds",
        &[],
    );
    assert!(scraped >= Some(1.5), "metric feed age {scraped:?}");

    // A day behind: it is stale from the start; the shield does not act on it and says so.
    ok(
        &server.push_load(
            &setup,
            &feed(SystemTime::now() - Duration::from_secs(86_400), 990.0),
        ),
        "load push of a day-old feed",
    );
    let status = wait_for("the day-old feed seen as stale", REACT, || {
        let status = server.status();
        (status["shield"]["feed_age_secs"].as_f64() >= Some(86_400.0)).then_some(status)
    });
    let state = eu_west(&status)["state"].as_str().unwrap_or("").to_string();
    assert!(
        state.starts_with("stale"),
        "eu-west state {state}: {status:#}"
    );
    assert!(alerts(&status).contains("stale"), "{status:#}");
    let scraped = metric(
        &scrape_metrics(server.admin),
        "steerdns_load_feed_age_seconds",
        &[],
    );
    assert!(scraped >= Some(86_400.0), "metric feed age {scraped:?}");
}

#[test]
fn a_feed_stamped_ahead_within_the_allowed_skew_still_goes_stale_after_it_was_received() {
    // A sender whose clock runs 2 minutes fast (within the 5 minutes allowed) must not make its
    // data count as fresh for 2 minutes longer: once stale_after_secs have passed since it
    // arrived, nothing newer has been heard.
    let setup = Setup::new("drill-clock-ahead");
    setup.extend_config("[shield]\ntick_ms = 100\nstale_after_secs = 2\nrevert_after_secs = 600\n");
    let server = setup.start();
    let pushed = Instant::now();
    ok(
        &server.push_load(
            &setup,
            &feed(SystemTime::now() + Duration::from_secs(120), 990.0),
        ),
        "load push of a feed 2 minutes ahead",
    );
    wait_for("the feed in use", REACT, || {
        (eu_west(&server.status())["load"].as_f64() == Some(990.0)).then_some(())
    });
    let deadline = pushed + Duration::from_secs(6);
    let mut last = server.status();
    while Instant::now() < deadline {
        last = server.status();
        if eu_west(&last)["state"] == "stale (frozen)" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        eu_west(&last)["state"],
        "stale (frozen)",
        "{:.1} s after a feed stamped 2 minutes ahead arrived (stale_after_secs = 2), it is \
         still treated as fresh; feed_age_secs = {}",
        pushed.elapsed().as_secs_f64(),
        last["shield"]["feed_age_secs"]
    );
    assert!(alerts(&last).contains("stale"), "{last:#}");
}

// ---------------------------------------------------------------------------------------------
// SIGHUP storm under load

#[test]
fn a_storm_of_200_sighups_under_load_loses_nothing_and_never_servfails() {
    let setup = Setup::new("drill-hup-storm");
    let server = setup.start();
    let before = server.status();
    let accepted = before["reloads_accepted"].as_u64().expect("accepted");
    let load = control_load(server.dns, 2);
    load.wait_for_answers(100, REACT);
    // A millisecond apart, so that signals keep arriving while reloads run (back to back,
    // the kernel merges them all into one pending SIGHUP).
    let storm = Instant::now();
    for _ in 0..200 {
        sighup(server.pid());
        std::thread::sleep(Duration::from_millis(1));
    }
    let storm = storm.elapsed();
    let status = wait_for("the storm's reloads", REACT, || {
        let status = server.status();
        (status["loaded_by"] == "SIGHUP"
            && status["reloads_accepted"].as_u64() > Some(accepted + 1))
        .then_some(status)
    });
    // Keep the load going a little after the last reload.
    load.wait_for_answers(100, REACT);
    let counts = load.stop();
    let status_after = server.status();
    println!(
        "SIGHUP storm: 200 signals in {storm:.1?} -> {} reloads; load {counts:?}",
        status_after["reloads_accepted"].as_u64().unwrap_or(0) - accepted
    );
    counts.assert_all_answered("");
    assert_eq!(status["reloads_refused"].as_u64(), Some(0), "{status:#}");
    assert_eq!(
        status["serial"], before["serial"],
        "nothing changed, same serial"
    );
    let reloads = metric(
        &scrape_metrics(server.admin),
        "steerdns_reloads_total",
        &[("result", "accepted")],
    );
    assert!(
        reloads > Some(accepted as f64),
        "metric reloads {reloads:?}"
    );
    assert!(server.chaos_serial().starts_with("serial "));
}

// ---------------------------------------------------------------------------------------------
// Out of file descriptors on TCP accept

/// Utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    // Fields after the command name (which is in parentheses and may hold spaces).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    // SAFETY: sysconf only reads a system constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks / per_second
}

fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| entries.count() as u64)
        .expect("list /proc/PID/fd")
}

/// Lowers the soft RLIMIT_NOFILE of `pid` (the hard limit stays).
fn limit_fds(pid: u32, soft: u64) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits");
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit with a null new limit only reads the current one into `old`.
    let read = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
    assert_eq!(read, 0, "prlimit read: {}", std::io::Error::last_os_error());
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    // SAFETY: sets the soft file limit of a child process this test started.
    let set = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()) };
    assert_eq!(set, 0, "prlimit set: {}", std::io::Error::last_os_error());
}

/// Opens a TCP connection, sends one query and returns the connection if it was answered
/// within `wait` (the connection stays open, holding a descriptor in the server).
fn tcp_query(server: SocketAddr, wait: Duration) -> (TcpStream, bool) {
    let mut stream =
        TcpStream::connect_timeout(&server, Duration::from_secs(2)).expect("tcp connect");
    stream.set_read_timeout(Some(wait)).expect("read timeout");
    let query = plain_query("www.example.com.", RecordType::A)
        .to_vec()
        .expect("encode");
    let mut frame = (query.len() as u16).to_be_bytes().to_vec();
    frame.extend(&query);
    stream.write_all(&frame).expect("send tcp query");
    let mut len = [0u8; 2];
    let answered = stream.read_exact(&mut len).is_ok() && {
        let mut body = vec![0u8; u16::from_be_bytes(len) as usize];
        stream.read_exact(&mut body).is_ok()
    };
    (stream, answered)
}

#[test]
fn out_of_file_descriptors_on_tcp_accept_keeps_udp_answering_and_tcp_recovers() {
    let setup = Setup::new("drill-emfile");
    let mut server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let pid = server.pid();
    // Room for a handful of connections, then accept fails with EMFILE.
    let limit = open_fds(pid) + 4;
    limit_fds(pid, limit);

    let mut held = Vec::new();
    let mut exhausted = false;
    for _ in 0..40 {
        let (stream, answered) = tcp_query(server.dns, Duration::from_millis(1000));
        held.push(stream);
        if !answered {
            exhausted = true;
            break;
        }
    }
    assert!(
        exhausted,
        "40 TCP connections were all answered under a descriptor limit of {limit}"
    );
    let answered = held.len() - 1;

    // Out of descriptors: UDP answers, the process stays up and does not spin.
    let cpu_before = cpu_seconds(pid);
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(2) {
        let response = resolver.ask(&plain_query("mail.example.com.", RecordType::A));
        assert!(!response.answers.is_empty(), "UDP stopped answering");
        std::thread::sleep(Duration::from_millis(200));
    }
    let cpu = cpu_seconds(pid) - cpu_before;
    println!(
        "EMFILE: {answered} TCP connections answered under limit {limit}; server CPU {cpu:.3} s \
         over {:.1?} while accept fails",
        window.elapsed()
    );
    assert!(
        cpu < 0.3,
        "the server burns {cpu:.2} s of CPU in 2 s while accept fails (a busy loop)"
    );
    assert!(
        server.exited().is_none(),
        "the server died out of descriptors"
    );
    assert!(
        server.log().contains("os error 24"),
        "the accept failure (EMFILE) should be logged:\n{}",
        server.log()
    );

    // Connections close: descriptors come back, TCP (and the admin endpoint) recover.
    drop(held);
    wait_for("a TCP answer after the connections closed", REACT, || {
        let (_, answered) = tcp_query(server.dns, Duration::from_millis(500));
        answered.then_some(())
    });
    let metrics = scrape_metrics(server.admin);
    let accepted = metric(&metrics, "steerdns_tcp_connections_total", &[]).unwrap_or(0.0);
    assert!(
        accepted > answered as f64,
        "steerdns_tcp_connections_total {accepted} after {answered} + recovery connections"
    );
    assert!(server.exited().is_none());
}

// ---------------------------------------------------------------------------------------------
// A zone $INCLUDE of a named pipe on SIGHUP

#[test]
fn a_zone_including_a_named_pipe_is_refused_and_the_control_plane_stays_responsive() {
    // `$INCLUDE` of something that is not a regular file (a FIFO nobody writes, /dev/zero, a
    // socket) must be refused, not read: a reload that blocks forever would hold the control
    // plane (status, control-file changes, further SIGHUPs) until a restart.
    let setup = Setup::new("drill-fifo");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let subnets = distinct_subnets(10);
    let zone = setup.path("zones/example.com.zone");
    let text = std::fs::read_to_string(&zone).expect("read zone");
    mkfifo(&setup.path("zones/extra.pipe"));
    let line = text.lines().count() + 1;
    let before = server.status();
    std::fs::write(&zone, format!("{text}$INCLUDE extra.pipe\n")).expect("write zone");
    server.sighup();

    let deadline = Instant::now() + REACT;
    let refused = before["reloads_refused"].as_u64().unwrap_or(0);
    let status = loop {
        match try_http(server.admin, "GET", "/v1/status", None) {
            Ok((200, body)) => {
                let status: Json = serde_json::from_str(&body).expect("status JSON");
                if status["reloads_refused"].as_u64() > Some(refused) {
                    break status;
                }
            }
            Ok((code, body)) => panic!("GET /v1/status: {code} {body}"),
            Err(e) => panic!(
                "GET /v1/status did not answer after a SIGHUP with a zone that includes a named \
                 pipe ({e}): the reload blocks reading the pipe and holds the control plane"
            ),
        }
        assert!(
            Instant::now() < deadline,
            "the reload was neither refused nor accepted"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let reasons = refusal_reasons(&status).join("; ");
    assert!(
        reasons.contains(&format!("example.com.zone:{line}:")) && reasons.contains("extra.pipe"),
        "the refusal names the line and the file: {reasons}"
    );
    assert_eq!(status["serial"], before["serial"]);
    assert_all_critical(&mut resolver, &subnets, FRONTDOOR);
}
