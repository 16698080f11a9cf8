//! The taster process, with the real binary over real sockets: a change that crashes, hangs or
//! exhausts the memory of the taster child is refused with the child's fate as the reason, the
//! server never stops answering and keeps the old weights; the next good change is served.
//!
//! Faults come from the drill variable `STEERDNS_TASTER_FAULT`, set in the *server's*
//! environment (the taster inherits it): only the taster acts on it.

use crate::control_common;

use std::time::{Duration, Instant};

use control_common::load::control_load;
use control_common::*;

/// Subnets asked to check what is served.
const SUBNETS: usize = 40;
/// The watcher reacts within milliseconds (inotify) or at its 2 s backstop poll.
const REFUSAL_WAIT: Duration = Duration::from_secs(10);
const CONVERGENCE: Duration = Duration::from_secs(5);

/// A server on a private copy, started under `env` with `vars`, with break-glass active
/// (every subnet on alt-cdn): "old weights still served" cannot be confused with the
/// config's own weights (frontdoor).
type Scene = BreakGlass;

impl Scene {
    fn started_with(label: &str, config_extra: &str, vars: &[&str]) -> Scene {
        let setup = Setup::new(label);
        if !config_extra.is_empty() {
            setup.extend_config(config_extra);
        }
        let mut wrapper = vec!["env"];
        wrapper.extend_from_slice(vars);
        let server = Daemon::start_under(&setup, &wrapper);
        BreakGlass::engage(setup, server, SUBNETS, CONVERGENCE)
    }

    /// Writes `text` as the control file under a query load; waits for the refusal and
    /// checks that nothing moved: serial, answers, the server process. Returns the reasons.
    fn refused(&mut self, text: &str) -> (Vec<String>, serde_json::Value) {
        let serial = self.server.serial();
        let refused = self.server.refused();
        let load = control_load(self.server.dns, 2);
        self.setup.write_control_atomically(text);
        let status = self.server.wait_for_refusal(refused, REFUSAL_WAIT);
        let counts = load.stop();
        let reasons = refusal_reasons(&status);
        println!("refused: {reasons:?}; load during the taste: {counts:?}");
        assert_eq!(status["serial"].as_u64(), Some(serial), "serial moved");
        assert!(
            self.server.exited().is_none(),
            "the server died:\n{}",
            self.server.log()
        );
        assert!(
            counts.answered > 0,
            "no answers during the taste: {counts:?}"
        );
        assert_eq!(
            (
                counts.lost,
                counts.servfail,
                counts.other_rcode,
                counts.empty
            ),
            (0, 0, 0, 0),
            "the server stopped answering well while the taster crashed: {counts:?}"
        );
        assert_all_critical(&mut self.resolver, &self.subnets, ALT_CDN);
        (reasons, status)
    }

    fn wait_for_log(&self, fragment: &str) {
        assert!(
            self.server.log_shows(fragment, Duration::from_secs(5)),
            "the log never said {fragment:?}:\n{}",
            self.server.log()
        );
    }
}

/// The control text that sets the config's weights back (frontdoor), marked for the drill.
fn marked(marker: &str) -> String {
    format!("# change {marker}\n{}", critical_control(100, 0, 0))
}

/// Test (1) of the issue: a change the taster aborts on is refused with the crash as the
/// reason; the server keeps answering, with the old weights; status, log and metrics say so.
#[test]
fn a_change_the_taster_crashes_on_is_refused_and_the_old_weights_stay() {
    let mut scene = Scene::started_with(
        "taster-abort",
        "",
        &["STEERDNS_TASTER_FAULT=abort:TASTER-BOOM"],
    );
    let (reasons, status) = scene.refused(&marked("TASTER-BOOM"));
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("taster killed by signal 6 (SIGABRT)")),
        "{reasons:?}"
    );
    let taster = &status["taster"];
    assert_eq!(taster["mode"], "child process", "{taster:#}");
    assert_eq!(taster["crashed"], 1, "{taster:#}");
    assert!(
        taster["last_result"]
            .as_str()
            .is_some_and(|r| r.contains("signal 6")),
        "{taster:#}"
    );
    scene.wait_for_log("taster killed by signal 6");
    let (code, metrics) = http(scene.server.admin, "GET", "/metrics", None);
    assert_eq!(code, 200);
    assert!(
        metrics.contains("steerdns_taster_runs_total{result=\"crashed\"} 1"),
        "{metrics}"
    );
    let cli = scene.server.cli(&["status"]);
    let text = ok(&cli, "steerdns status");
    assert!(text.contains("taster killed by signal 6"), "{text}");
    assert!(text.contains("1 crashed"), "{text}");

    // The same weights without the marker: tasted, accepted, served.
    // A good change is served again: the refusal is not sticky.
    scene.release(CONVERGENCE);
    let taster = &scene.server.status()["taster"];
    assert!(taster["ok"].as_u64().unwrap_or(0) >= 2, "{taster:#}");
}

/// A taster that never finishes is killed at the wall-clock limit; the reason says so.
#[test]
fn a_change_the_taster_hangs_on_is_refused_at_the_time_limit() {
    let mut scene = Scene::started_with(
        "taster-spin",
        "[taster]\ntimeout_ms = 1000\n",
        &["STEERDNS_TASTER_FAULT=spin:TASTER-SPIN"],
    );
    let started = Instant::now();
    let (reasons, status) = scene.refused(&marked("TASTER-SPIN"));
    println!("refused after {:?}", started.elapsed());
    assert!(
        reasons.iter().any(|r| r.starts_with("taster exceeded 1 s")),
        "{reasons:?}"
    );
    assert_eq!(status["taster"]["timed_out"], 1);
    // A good change is served again: the refusal is not sticky.
    scene.release(CONVERGENCE);
}

/// A taster that runs out of memory (RLIMIT_AS) dies; the reason names the memory limit.
#[test]
fn a_change_that_exhausts_the_tasters_memory_is_refused() {
    let mut scene = Scene::started_with(
        "taster-oom",
        "[taster]\nmemory_mb = 256\n",
        &["STEERDNS_TASTER_FAULT=oom:TASTER-HOG"],
    );
    let (reasons, _) = scene.refused(&marked("TASTER-HOG"));
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("taster killed by signal")
                && r.contains("memory allocation of")
                && r.contains("memory_mb = 256")),
        "{reasons:?}"
    );
    // A good change is served again: the refusal is not sticky.
    scene.release(CONVERGENCE);
}

/// An invalid change is still refused with the loader's own lines (found by the taster).
#[test]
fn an_invalid_change_is_refused_with_the_loaders_reasons() {
    let mut scene = Scene::started_with("taster-invalid", "", &[]);
    let (reasons, status) = scene.refused(&critical_control(0, 0, 0));
    assert!(
        reasons.iter().any(|r| r.contains("control.toml")),
        "{reasons:?}"
    );
    assert_eq!(status["taster"]["problems"], 1, "{:#}", status["taster"]);
    // A good change is served again: the refusal is not sticky.
    scene.release(CONVERGENCE);
}

/// With `[taster] enabled = false` the drill variable does nothing: the serving process never
/// acts on it, and the marked change is served.
#[test]
fn the_serving_process_never_acts_on_the_drill_variable() {
    let mut scene = Scene::started_with(
        "taster-off",
        "[taster]\nenabled = false\n",
        &["STEERDNS_TASTER_FAULT=abort:TASTER-BOOM"],
    );
    let written = Instant::now();
    scene.setup.write_control_atomically(&marked("TASTER-BOOM"));
    wait_all_target(
        &mut scene.resolver,
        &scene.subnets,
        FRONTDOOR,
        written,
        CONVERGENCE,
    );
    let status = scene.server.status();
    assert_eq!(status["taster"]["mode"], "off", "{:#}", status["taster"]);
    assert_eq!(status["reloads_refused"], 0);
}

/// A control-only change is tasted without the zones (the server shares them); a zone edit
/// makes the taster load everything again.
#[test]
fn the_taster_loads_the_zones_only_when_they_change() {
    let mut scene = Scene::started_with("taster-scope", "", &[]);
    let taster = &scene.server.status()["taster"];
    assert_eq!(
        taster["last_result"], "ok: loaded all but the zones (shared)",
        "{taster:#}"
    );
    // A zone edit the server applies as a difference (issue 32 item 4): the taster parses
    // the changed lines (and loads all but the zones).
    let zone = scene.setup.path("zones/example.com.zone");
    let text = std::fs::read_to_string(&zone).expect("zone file");
    let bumped = text.replacen("2026113001", "2026113002", 1);
    assert_ne!(
        text, bumped,
        "the zone's serial is not where this test expects it"
    );
    let reload = |scene: &mut Scene, text: &str| {
        write_atomically(&zone, text.as_bytes());
        let serial = scene.server.accepted();
        scene.server.sighup();
        let deadline = Instant::now() + REFUSAL_WAIT;
        while scene.server.accepted() == serial {
            assert!(Instant::now() < deadline, "the reload was not accepted");
            std::thread::sleep(Duration::from_millis(20));
        }
        scene.server.status()["taster"].clone()
    };
    let taster = reload(&mut scene, &bumped);
    assert_eq!(
        taster["last_result"],
        "ok: loaded all but the zones, and parsed the changed lines of the zone files",
        "{taster:#}"
    );
    // A zone edit it builds whole (an $ORIGIN of another name): loaded in full.
    let elsewhere = format!(
        "{}$ORIGIN sub.example.com.\nnewname 300 IN A 192.0.2.77\n",
        bumped.replacen("2026113002", "2026113003", 1)
    );
    let taster = reload(&mut scene, &elsewhere);
    assert_eq!(taster["last_result"], "ok: loaded everything", "{taster:#}");
    // A good change is served again: the refusal is not sticky.
    scene.release(CONVERGENCE);
}

#[test]
fn a_restart_on_the_inputs_last_served_is_not_tasted_again() {
    let setup = Setup::new("taster-restart");
    let first = setup.start();
    let status = first.status();
    assert_eq!(status["startup"]["tasted"], true, "{:#}", status["startup"]);
    assert!(
        status["taster"]["ok"].as_u64().unwrap_or(0) >= 1,
        "{:#}",
        status["taster"]
    );
    first.stop();
    assert!(
        setup.path("steerdns.toml.state/served.json").is_file(),
        "no record of the inputs served"
    );

    // The same binary on the same inputs: served without a taste.
    let second = setup.start();
    let status = second.status();
    let startup = &status["startup"];
    assert_eq!(startup["tasted"], false, "{startup:#}");
    let reason = startup["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not tasted again"), "{reason}");
    assert_eq!(status["taster"]["ok"], 0, "{:#}", status["taster"]);
    assert!(
        startup["first_answer_ms"].as_f64().unwrap_or(0.0) > 0.0,
        "{startup:#}"
    );
    let metrics = scrape_metrics(second.admin);
    let tasted = samples_with(&metrics, "steerdns_startup_tasted", &[]);
    let values: Vec<_> = tasted.iter().map(|s| s.value.clone()).collect();
    assert_eq!(
        values,
        vec![prometheus_parse::Value::Gauge(0.0)],
        "steerdns_startup_tasted"
    );
    second.stop();

    // One zone file changed while the server was down: tasted again.
    let zone = setup.path("zones/example.com.zone");
    let mut text = std::fs::read_to_string(&zone).expect("zone file");
    text.push_str("restart-check 300 IN A 192.0.2.99\n");
    std::fs::write(&zone, text).expect("write zone");
    let third = setup.start();
    let status = third.status();
    let startup = &status["startup"];
    assert_eq!(startup["tasted"], true, "{startup:#}");
    let reason = startup["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("changed"), "{reason}");
    assert!(
        status["taster"]["ok"].as_u64().unwrap_or(0) >= 1,
        "{:#}",
        status["taster"]
    );
    third.stop();
}

/// Every answer to `queries`, with the ids left out: what a client sees.
fn answers_to(server: std::net::SocketAddr, queries: &[hickory_proto::op::Message]) -> Vec<String> {
    let mut resolver = Resolver::new(server);
    resolver
        .ask_all(queries)
        .iter()
        .map(|m| {
            format!(
                "{:?} {:?} {:?} {:?}",
                m.metadata.response_code, m.answers, m.authorities, m.additionals
            )
        })
        .collect()
}

#[test]
fn a_restart_serves_the_zones_from_the_last_known_good_cache_and_answers_alike() {
    use hickory_proto::rr::RecordType;
    let setup = Setup::new("zone-cache");
    let cache = setup.path("steerdns.toml.state/zones.lkg");
    let queries: Vec<_> = [
        ("example.com.", RecordType::SOA),
        ("example.com.", RecordType::NS),
        ("example.com.", RecordType::MX),
        ("mail.example.com.", RecordType::AAAA),
        ("alias.example.com.", RecordType::A),
        ("x.wild.example.com.", RecordType::TXT),
        ("exists.wild.example.com.", RecordType::TXT),
        ("nothing-here.example.com.", RecordType::A),
        ("ns1.example.com.", RecordType::TXT),
        ("contoso.edge.example.net.", RecordType::A),
    ]
    .iter()
    .map(|(name, rtype)| plain_query(name, *rtype))
    .collect();

    let first = setup.start();
    let startup = first.status()["startup"].clone();
    let zones_from = startup["zones_from"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(zones_from.contains("no cache yet"), "{startup:#}");
    let built = answers_to(first.dns, &queries);
    // Written in the background after the first load: wait for the file (renamed in whole).
    let deadline = Instant::now() + REFUSAL_WAIT;
    while !cache.is_file() {
        assert!(Instant::now() < deadline, "no zone cache written");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.stop();

    // Same inputs: the zones come from the cache, and every answer is the same.
    let second = setup.start();
    let status = second.status();
    assert_eq!(
        status["startup"]["zones_from"], "from the last-known-good zone cache",
        "{:#}",
        status["startup"]
    );
    assert_eq!(answers_to(second.dns, &queries), built);
    let metrics = scrape_metrics(second.admin);
    let from_cache = samples_with(&metrics, "steerdns_startup_zones_from_cache", &[]);
    let values: Vec<_> = from_cache.iter().map(|s| s.value.clone()).collect();
    assert_eq!(values, vec![prometheus_parse::Value::Gauge(1.0)]);
    second.stop();

    // A damaged cache is refused whole, with the reason, and the zones are built.
    let mut bytes = std::fs::read(&cache).expect("cache file");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&cache, &bytes).expect("write damaged cache");
    let third = setup.start();
    let startup = third.status()["startup"].clone();
    let zones_from = startup["zones_from"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(zones_from.contains("checksum mismatch"), "{startup:#}");
    assert_eq!(answers_to(third.dns, &queries), built);
    third.stop();

    // A zone file changed while the server was down: built again, with the change.
    let zone = setup.path("zones/example.com.zone");
    let mut text = std::fs::read_to_string(&zone).expect("zone file");
    text.push_str("nothing-here 300 IN A 192.0.2.98\n");
    std::fs::write(&zone, text).expect("write zone");
    let fourth = setup.start();
    let startup = fourth.status()["startup"].clone();
    let zones_from = startup["zones_from"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        zones_from.contains("changed since it was written"),
        "{startup:#}"
    );
    let now = answers_to(fourth.dns, &queries);
    assert_ne!(now[7], built[7], "the added name is served");
    assert_eq!(now[..7], built[..7]);
    fourth.stop();
}
