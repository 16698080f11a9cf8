//! A restart from the last-known-good zone cache, in its two phases (issue 32 item 3): the
//! cache's precompiled answers serve at once, mapped in place, and are byte for byte what a
//! server that built from the zone files answers; a query they do not cover is held (never
//! NXDOMAIN from a view without zones) until the zones are in, then answered as always.
//!
//! Phase 2 is held open by the test hook `STEERDNS_ZONES_LOAD_HOLD=<file>` (the zones' load
//! waits while the file exists), so that phase 1 is seen for as long as the test needs.

use crate::control_common;

use std::net::SocketAddr;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use control_common::*;
use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;

/// Names added to the example zone: enough for a sample, few enough for a quick build.
const GENERATED: usize = 3_000;
const START_WAIT: Duration = Duration::from_secs(20);
/// Every this many generated names is in the sample.
const SAMPLE_STEP: usize = 150;

/// The example with [`GENERATED`] names added to `example.com`.
fn setup(label: &str) -> Setup {
    let setup = Setup::new(label);
    let zone = setup.path("zones/example.com.zone");
    let mut text = std::fs::read_to_string(&zone).expect("zone file");
    for i in 0..GENERATED {
        text.push_str(&format!(
            "gen-{i} 300 IN A 198.51.{}.{}\n",
            i / 250,
            i % 250
        ));
        if i % 3 == 0 {
            text.push_str(&format!("gen-{i} 300 IN TXT \"name {i}\"\n"));
        }
    }
    std::fs::write(&zone, text).expect("write zone");
    setup
}

/// The sample asked of both servers: generated names (A, AAAA NODATA, TXT, MX NODATA),
/// names that do not exist, and the example's own.
fn sample() -> Vec<Vec<u8>> {
    let mut queries: Vec<(String, RecordType)> = Vec::new();
    for i in (0..GENERATED).step_by(SAMPLE_STEP) {
        for rtype in [
            RecordType::A,
            RecordType::AAAA,
            RecordType::TXT,
            RecordType::MX,
        ] {
            queries.push((format!("gen-{i}.example.com."), rtype));
        }
        queries.push((format!("gen-{i}-absent.example.com."), RecordType::A));
    }
    for (name, rtype) in [
        ("example.com.", RecordType::SOA),
        ("example.com.", RecordType::NS),
        ("example.com.", RecordType::MX),
        ("mail.example.com.", RecordType::AAAA),
        ("alias.example.com.", RecordType::A),
        ("x.wild.example.com.", RecordType::A),
        ("ns1.example.com.", RecordType::TXT),
    ] {
        queries.push((name.to_string(), rtype));
    }
    queries
        .iter()
        .enumerate()
        .map(|(i, (name, rtype))| wire(name, *rtype, i as u16 + 1))
        .collect()
}

fn wire(name: &str, rtype: RecordType, id: u16) -> Vec<u8> {
    let mut query: Message = plain_query(name, rtype);
    query.metadata.id = id;
    query.to_vec().expect("query encodes")
}

/// The raw answer to `packet` (asked again a few times: UDP), `None` if none came.
fn raw_answer(server: SocketAddr, packet: &[u8], attempts: usize) -> Option<Vec<u8>> {
    (0..attempts).find_map(|_| udp_once(server, packet, Duration::from_millis(200)))
}

fn raw_answers(server: SocketAddr, packets: &[Vec<u8>]) -> Vec<Vec<u8>> {
    packets
        .iter()
        .map(|p| raw_answer(server, p, 10).expect("an answer"))
        .collect()
}

fn rcode(response: &[u8]) -> u8 {
    response[3] & 0x0f
}

/// A server started by hand (the harness waits for "ready", which now means fully loaded):
/// its stdout lines, DNS and admin addresses.
struct Started {
    child: std::process::Child,
    lines: Receiver<String>,
    dns: SocketAddr,
    admin: SocketAddr,
}

impl Started {
    /// Starts a server under `env` with `vars` and reads its stdout until `until`.
    fn start(setup: &Setup, vars: &[&str], until: &str) -> Started {
        let mut wrapper = vec!["env"];
        wrapper.extend_from_slice(vars);
        let mut child = serve_command(setup, &wrapper, &[])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start steerdns");
        let lines = lines_of(child.stdout.take().expect("stdout"));
        let mut started = Started {
            child,
            lines,
            dns: "0.0.0.0:0".parse().expect("addr"),
            admin: "0.0.0.0:0".parse().expect("addr"),
        };
        started.read_until(until);
        started
    }

    /// Reads stdout up to a line starting with `prefix` (noting the addresses on the way).
    fn read_until(&mut self, prefix: &str) {
        let deadline = Instant::now() + START_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no line `{prefix}` from the server"));
            if let Some(rest) = line.strip_prefix("listening on ") {
                let addr = rest.split_whitespace().next().expect("address");
                self.dns = addr.parse().expect("dns address");
            }
            if let Some(rest) = line.strip_prefix("admin on http://") {
                self.admin = rest.trim().parse().expect("admin address");
            }
            if line.starts_with(prefix) {
                return;
            }
        }
    }

    fn status(&self) -> serde_json::Value {
        let (code, body) = http(self.admin, "GET", "/v1/status", None);
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).expect("status JSON")
    }

    /// `steerdns_startup_loading`'s samples.
    fn loading(&self) -> Vec<prometheus_parse::Value> {
        let metrics = scrape_metrics(self.admin);
        samples_with(&metrics, "steerdns_startup_loading", &[])
            .iter()
            .map(|s| s.value.clone())
            .collect()
    }

    fn held(&self) -> Vec<prometheus_parse::Value> {
        let metrics = scrape_metrics(self.admin);
        samples_with(&metrics, "steerdns_queries_held_while_loading_total", &[])
            .iter()
            .map(|s| s.value.clone())
            .collect()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts and stops a server once, so that it writes the zone cache; returns its answers to
/// `queries` (built from the zone files).
fn build_and_cache(setup: &Setup, queries: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let cache = setup.path("steerdns.toml.state/zones.lkg");
    let first = setup.start();
    let zones_from = first.status()["startup"]["zones_from"].clone();
    assert!(
        zones_from
            .as_str()
            .unwrap_or_default()
            .contains("no cache yet"),
        "{zones_from}"
    );
    let built = raw_answers(first.dns, queries);
    wait_for("the zone cache written", Duration::from_secs(20), || {
        cache.is_file().then_some(())
    });
    first.stop();
    built
}

#[test]
fn a_restart_from_the_zone_cache_answers_a_sample_byte_for_byte_as_a_build_does() {
    let setup = setup("cache-bytes");
    let queries = sample();
    let built = build_and_cache(&setup, &queries);
    assert!(
        built.iter().any(|r| rcode(r) == 3),
        "the sample has NXDOMAINs"
    );

    // Phase 1 alone (the zones held back): every answer it gives is the build's, byte for
    // byte; the rest are held.
    let hold = setup.path("hold");
    std::fs::write(&hold, b"").expect("hold file");
    let hold_var = format!("STEERDNS_ZONES_LOAD_HOLD={}", hold.display());
    let mut phase1 = Started::start(&setup, &[&hold_var], "first answers from the zone cache");
    let mut answered = 0;
    for (query, built) in queries.iter().zip(&built) {
        if let Some(answer) = raw_answer(phase1.dns, query, 1) {
            assert_eq!(&answer, built, "phase 1 answered otherwise than the build");
            answered += 1;
        }
    }
    // At least every generated name's A and AAAA (NODATA) answers are precompiled.
    let names = GENERATED.div_ceil(SAMPLE_STEP);
    assert!(answered >= 2 * names, "{answered} of {}", queries.len());
    assert!(answered < queries.len(), "NXDOMAIN and others held");
    std::fs::remove_file(&hold).expect("release the hold");
    phase1.read_until("ready");
    // Fully loaded: every answer is the build's.
    assert_eq!(raw_answers(phase1.dns, &queries), built);
    let startup = phase1.status()["startup"].clone();
    assert_eq!(startup["phase"], "loaded", "{startup:#}");
    assert_eq!(
        startup["zones_from"], "from the last-known-good zone cache",
        "{startup:#}"
    );
    let first = startup["first_answer_ms"].as_f64().unwrap_or(0.0);
    let full = startup["fully_loaded_ms"].as_f64().unwrap_or(0.0);
    assert!(first > 0.0 && full >= first, "{startup:#}");
}

#[test]
fn a_query_outside_the_precompiled_answers_is_held_until_the_zones_are_in() {
    let setup = setup("cache-hold");
    let absent = wire("absent-name.example.com.", RecordType::A, 7);
    let present = wire("gen-5.example.com.", RecordType::A, 8);
    let built = build_and_cache(&setup, &[absent.clone(), present.clone()]);
    assert_eq!(rcode(&built[0]), 3, "NXDOMAIN when built");

    let hold = setup.path("hold");
    std::fs::write(&hold, b"").expect("hold file");
    let hold_var = format!("STEERDNS_ZONES_LOAD_HOLD={}", hold.display());
    let mut server = Started::start(&setup, &[&hold_var], "first answers from the zone cache");
    let status = server.status();
    assert_eq!(
        status["startup"]["phase"], "first answers from the zone cache; zones loading",
        "{:#}",
        status["startup"]
    );
    let loading = server.loading();
    assert_eq!(loading, vec![prometheus_parse::Value::Gauge(1.0)]);
    // The precompiled answer serves; the name that does not exist gets no answer at all (not
    // NXDOMAIN from a view without zones), and is counted as held.
    assert_eq!(
        raw_answer(server.dns, &present, 10).as_ref(),
        Some(&built[1])
    );
    assert_eq!(raw_answer(server.dns, &absent, 3), None);
    assert_eq!(
        server.held(),
        vec![prometheus_parse::Value::Counter(3.0)],
        "three tries held"
    );

    // The zones in: the same query is answered NXDOMAIN, as by the build.
    std::fs::remove_file(&hold).expect("release the hold");
    server.read_until("ready");
    assert_eq!(
        raw_answer(server.dns, &absent, 10).as_ref(),
        Some(&built[0])
    );
    let loading = server.loading();
    assert_eq!(loading, vec![prometheus_parse::Value::Gauge(0.0)]);
    assert_eq!(server.held(), vec![prometheus_parse::Value::Counter(3.0)]);
}

/// The A records of a raw answer, sorted (empty for no answer).
fn a_set(response: Option<&Vec<u8>>) -> Vec<std::net::Ipv4Addr> {
    let Some(message) = response.and_then(|r| Message::from_vec(r).ok()) else {
        return Vec::new();
    };
    let mut got = a_records(&message);
    got.sort();
    got
}

/// A restart from the zone cache with tenants: a tenant's name is held in phase 1 and, from
/// the first answer on, answered by its document (its shard of cells), never by the
/// platform's wildcard while the tenants load — they are in before the first whole snapshot
/// serves. 5,000 tenants make their load take long enough to be seen if it came after.
#[test]
fn a_restart_from_the_zone_cache_answers_tenants_by_their_documents_from_the_first_answer() {
    const TENANTS: usize = 5_000;
    let setup = crate::tenants::setup_with("cache-tenants", TENANTS, |_| 120);
    let name = crate::tenants::owned(&crate::tenants::tenant_name(0));
    let query = wire(&name, RecordType::A, 9);
    let wildcard = wire("contoso.edge.example.net.", RecordType::A, 10);
    let first = setup.start();
    crate::tenants::wait_tenants(&first, "every tenant served and cached", |t| {
        t["served"].as_u64() == Some(TENANTS as u64) && t["cache_writes"].as_u64() >= Some(1)
    });
    let cache = setup.path("steerdns.toml.state/zones.lkg");
    wait_for("the zone cache written", Duration::from_secs(20), || {
        cache.is_file().then_some(())
    });
    let own = a_set(raw_answer(first.dns, &query, 10).as_ref());
    let platform = a_set(raw_answer(first.dns, &wildcard, 10).as_ref());
    assert!(!own.is_empty(), "the tenant answers");
    assert_ne!(own, platform, "its cells are not the wildcard's addresses");
    first.stop();

    let hold = setup.path("hold");
    std::fs::write(&hold, b"").expect("hold file");
    let hold_var = format!("STEERDNS_ZONES_LOAD_HOLD={}", hold.display());
    let server = Started::start(&setup, &[&hold_var], "first answers from the zone cache");
    assert_eq!(raw_answer(server.dns, &query, 3), None, "held in phase 1");

    // Released: every answer from now on is the tenant's own, through "ready" and after.
    std::fs::remove_file(&hold).expect("release the hold");
    let deadline = Instant::now() + START_WAIT;
    let (mut ready, mut answers) = (false, 0);
    while !ready || answers < 200 {
        assert!(Instant::now() < deadline, "ready and 200 answers");
        while let Ok(line) = server.lines.try_recv() {
            ready |= line.starts_with("ready");
        }
        // A short wait: a held query must not hide the moment the tenants' names answer.
        let got = udp_once(server.dns, &query, Duration::from_millis(5));
        if got.is_some() {
            answers += 1;
            assert_eq!(
                a_set(got.as_ref()),
                own,
                "answer {answers}: the tenant's cells"
            );
        }
    }
}
