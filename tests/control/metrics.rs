//! `GET /metrics` end to end, with the real binary on loopback: the exposition is parsed with a
//! Prometheus text-format parser, queries of known kinds are sent (NOERROR, NXDOMAIN, REFUSED,
//! a truncated answer, runts that are dropped, TCP queries on two connections, steered names
//! with ECS), and every counter must move by exactly what was sent. Then a load feed makes
//! eu-west shed (shed fraction, destinations, utilisation, feed age and counts, and anycast
//! answers per destination against what clients were actually answered), a control change and a
//! refused one (serial, reload counts, weights), and the logs: JSON lines with
//! `--log-format json`, the sampled query log, and no per-query line by default.

use crate::control_common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use prometheus_parse::{Scrape, Value};
use steerdns::rfc3339;

use control_common::*;

const WAIT: Duration = Duration::from_secs(10);

/// One parsed scrape.
struct Metrics(Scrape);

impl Metrics {
    fn scrape(admin: SocketAddr) -> Metrics {
        Metrics(scrape_metrics(admin))
    }

    /// The sample of `metric` with exactly these labels.
    fn sample(&self, metric: &str, labels: &[(&str, &str)]) -> Option<&Value> {
        let matching: Vec<&Value> = samples_with(&self.0, metric, labels)
            .into_iter()
            .map(|s| &s.value)
            .collect();
        assert!(matching.len() <= 1, "{metric} {labels:?} appears twice");
        matching.first().copied()
    }

    /// A counter's value (0 when the series is absent); fails if it is not typed a counter.
    fn counter(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        match self.sample(metric, labels) {
            None => 0.0,
            Some(Value::Counter(v)) => *v,
            Some(other) => panic!("{metric} {labels:?} is not a counter: {other:?}"),
        }
    }

    /// A gauge's value; fails if it is not typed a gauge.
    fn gauge(&self, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
        match self.sample(metric, labels)? {
            Value::Gauge(v) => Some(*v),
            other => panic!("{metric} {labels:?} is not a gauge: {other:?}"),
        }
    }

    /// Every series of `metric` as (labels, value), labels sorted.
    fn series(&self, metric: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        self.0
            .samples
            .iter()
            .filter(|s| s.metric == metric)
            .map(|s| {
                let labels = s.labels.iter().map(|(k, v)| (k.clone(), v.clone()));
                let value = match s.value {
                    Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
                    _ => f64::NAN,
                };
                (labels.collect(), value)
            })
            .collect()
    }
}

/// What moved between two scrapes.
struct Delta<'a> {
    before: &'a Metrics,
    after: &'a Metrics,
}

impl Delta<'_> {
    fn counter(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        self.after.counter(metric, labels) - self.before.counter(metric, labels)
    }
}

fn udp_ask(server: SocketAddr, query: &Message) -> Message {
    let bytes = query.to_vec().expect("encode");
    let reply = udp_once(server, &bytes, Duration::from_secs(5)).expect("a UDP answer");
    Message::from_vec(&reply).expect("a well-formed answer")
}

/// Sends `queries` pipelined on one TCP connection and reads every answer; closes it.
fn tcp_ask_all(server: SocketAddr, queries: &[Message]) -> Vec<Message> {
    let mut stream = TcpStream::connect_timeout(&server, Duration::from_secs(5)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    for q in queries {
        write_frame(&mut stream, &q.to_vec().expect("encode"));
    }
    queries
        .iter()
        .map(|_| Message::from_vec(&read_frame(&mut stream).expect("tcp answer")).expect("parse"))
        .collect()
}

fn write_frame(stream: &mut TcpStream, bytes: &[u8]) {
    use std::io::Write;
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(bytes);
    stream.write_all(&framed).expect("write");
}

fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).ok()?;
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    stream.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// Scrapes until `done` holds (at most [`WAIT`]); returns that scrape.
fn scrape_until(admin: SocketAddr, what: &str, done: impl Fn(&Metrics) -> bool) -> Metrics {
    let deadline = Instant::now() + WAIT;
    loop {
        let metrics = Metrics::scrape(admin);
        if done(&metrics) {
            return metrics;
        }
        assert!(Instant::now() < deadline, "waited {WAIT:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_kind_of_query_moves_its_counters_by_exactly_what_was_sent() {
    let setup = Setup::new("metrics-queries");
    let server = setup.start();
    let dns = server.dns;
    let before = Metrics::scrape(server.admin);
    let tcp_before = before.counter("steerdns_tcp_connections_total", &[]);

    // UDP: 3 NOERROR (a precompiled static answer), 2 NXDOMAIN, 2 REFUSED (not our zone), one
    // answer too large for 512 bytes (TC), 2 runts that are dropped without an answer.
    for _ in 0..3 {
        let r = udp_ask(dns, &plain_query("example.com.", RecordType::SOA));
        assert_eq!(r.metadata.response_code, ResponseCode::NoError);
    }
    for _ in 0..2 {
        let r = udp_ask(dns, &plain_query("nope.example.com.", RecordType::A));
        assert_eq!(r.metadata.response_code, ResponseCode::NXDomain);
    }
    for _ in 0..2 {
        let r = udp_ask(dns, &plain_query("example.org.", RecordType::A));
        assert_eq!(r.metadata.response_code, ResponseCode::Refused);
    }
    let big = udp_ask(dns, &plain_query("big.example.com.", RecordType::TXT));
    assert!(
        big.metadata.truncation,
        "big.example.com TXT should not fit 512 bytes"
    );
    for runt in [&[0u8; 5][..], &[1u8; 11][..]] {
        assert!(udp_once(dns, runt, Duration::from_millis(300)).is_none());
    }
    // TCP: 2 queries on one connection, 1 on another (the big answer fits over TCP).
    let first = tcp_ask_all(
        dns,
        &[
            plain_query("example.com.", RecordType::SOA),
            plain_query("nope.example.com.", RecordType::A),
        ],
    );
    assert_eq!(first[1].metadata.response_code, ResponseCode::NXDomain);
    let second = tcp_ask_all(dns, &[plain_query("big.example.com.", RecordType::TXT)]);
    assert!(!second[0].metadata.truncation);
    // Steered: 4 eu-west clients (ECS) ask critical.example.com (profile critical, weight 100
    // on frontdoor); its CNAME target is in our platform zone, where the anycast policy of
    // *.edge.example.net answers too. 3 na-east clients ask an edge name directly.
    let eu_west = ["81.2.69.0/24"; 4];
    for subnet in eu_west {
        let r = udp_ask(
            dns,
            &ecs_query("critical.example.com.", RecordType::A, subnet),
        );
        assert_eq!(first_cname(&r).as_deref(), Some(FRONTDOOR));
    }
    let na_east = "8.8.8.0/24";
    for _ in 0..3 {
        let r = udp_ask(
            dns,
            &ecs_query("www.edge.example.net.", RecordType::A, na_east),
        );
        assert_eq!(a_records(&r), vec![GLOBAL_V4]);
    }

    // Counters are bumped before the answer is sent, but the scrape reads another thread's
    // atomics: allow it a moment to see the drops and the closed connections.
    let after = scrape_until(server.admin, "the drops and closed connections", |m| {
        m.counter("steerdns_dropped_queries_total", &[("transport", "udp")])
            >= before.counter("steerdns_dropped_queries_total", &[("transport", "udp")]) + 2.0
            && m.gauge("steerdns_tcp_connections_open", &[]) == Some(0.0)
    });
    let d = Delta {
        before: &before,
        after: &after,
    };
    let udp = [("transport", "udp")];
    let tcp = [("transport", "tcp")];
    let resp = |t: &'static str, rcode: &'static str| {
        d.counter(
            "steerdns_responses_total",
            &[("transport", t), ("rcode", rcode)],
        )
    };
    // 3 + 2 + 2 + 1 + 2 runts + 4 + 3 steered.
    assert_eq!(d.counter("steerdns_queries_total", &udp), 17.0);
    assert_eq!(resp("udp", "NOERROR"), 3.0 + 1.0 + 4.0 + 3.0);
    assert_eq!(resp("udp", "NXDOMAIN"), 2.0);
    assert_eq!(resp("udp", "REFUSED"), 2.0);
    assert_eq!(resp("udp", "FORMERR"), 0.0);
    assert_eq!(d.counter("steerdns_truncated_responses_total", &udp), 1.0);
    assert_eq!(d.counter("steerdns_dropped_queries_total", &udp), 2.0);
    assert_eq!(d.counter("steerdns_queries_total", &tcp), 3.0);
    assert_eq!(resp("tcp", "NOERROR"), 2.0);
    assert_eq!(resp("tcp", "NXDOMAIN"), 1.0);
    assert_eq!(d.counter("steerdns_truncated_responses_total", &tcp), 0.0);
    assert_eq!(
        after.counter("steerdns_tcp_connections_total", &[]) - tcp_before,
        2.0
    );
    // By zone: the customer zone, the platform zone, and "other" for example.org.
    let zone = |z: &'static str, rcode: &'static str| {
        d.counter(
            "steerdns_zone_responses_total",
            &[("zone", z), ("rcode", rcode)],
        )
    };
    assert_eq!(zone("example.com.", "NOERROR"), 3.0 + 1.0 + 4.0 + 1.0 + 1.0);
    assert_eq!(zone("example.com.", "NXDOMAIN"), 3.0);
    assert_eq!(zone("edge.example.net.", "NOERROR"), 3.0);
    assert_eq!(zone("other", "REFUSED"), 2.0);
    // Runts have no question: not counted by zone.
    let by_zone: f64 = after
        .series("steerdns_zone_responses_total")
        .iter()
        .map(|(_, v)| v)
        .sum::<f64>()
        - before
            .series("steerdns_zone_responses_total")
            .iter()
            .map(|(_, v)| v)
            .sum::<f64>();
    assert_eq!(by_zone, 17.0 - 2.0 + 3.0);
    // Steered answers: by name and policy, by profile endpoint and region, by anycast
    // destination and region.
    let steered = |name: &'static str, policy: &'static str| {
        d.counter(
            "steerdns_steered_answers_total",
            &[("name", name), ("policy", policy)],
        )
    };
    assert_eq!(steered("critical.example.com.", "critical"), 4.0);
    assert_eq!(steered("*.edge.example.net.", "anycast"), 4.0 + 3.0);
    assert_eq!(steered("warm.example.com.", "warm"), 0.0);
    let profile = |p: &'static str, e: &'static str, r: &'static str| {
        d.counter(
            "steerdns_profile_answers_total",
            &[("profile", p), ("endpoint", e), ("region", r)],
        )
    };
    assert_eq!(profile("critical", "frontdoor", "eu-west"), 4.0);
    assert_eq!(profile("critical", "alt-cdn", "eu-west"), 0.0);
    let anycast = |r: &'static str, to: &'static str| {
        d.counter(
            "steerdns_anycast_answers_total",
            &[("region", r), ("destination", to)],
        )
    };
    assert_eq!(anycast("eu-west", "global"), 4.0);
    assert_eq!(anycast("na-east", "global"), 3.0);
    // No per-query log line at the default level.
    let log = server.log();
    assert!(
        !log.contains("nope.example.com"),
        "a query was logged at the default level:\n{log}"
    );
}

/// IPv4 anycast address of each destination of the bundled example, by metric label.
fn destination_of(addr: Ipv4Addr) -> &'static str {
    match addr.octets() {
        [192, 0, 2, 1] => "global",
        [198, 51, 100, 1] => "na-east",
        [198, 51, 100, 5] => "eu-north",
        [203, 0, 113, 1] => "fb-na",
        [203, 0, 113, 2] => "fb-eu",
        _ => panic!("unexpected anycast answer {addr}"),
    }
}

fn feed(eu_west_load: f64) -> String {
    eu_west_feed(
        &rfc3339::format_utc(SystemTime::now()),
        eu_west_load,
        "tests/control/metrics.rs",
    )
}

#[test]
fn a_shedding_region_shows_its_fraction_destinations_and_utilisation() {
    let setup = Setup::new("metrics-shield");
    setup
        .extend_config("[shield]\ntick_ms = 100\nstale_after_secs = 60\nrevert_after_secs = 120\n");
    let server = setup.start();
    let before = Metrics::scrape(server.admin);
    assert_eq!(before.gauge("steerdns_load_feed_age_seconds", &[]), None);
    assert_eq!(
        before.gauge("steerdns_shield_shed_fraction", &[("region", "eu-west")]),
        Some(0.0)
    );

    ok(&server.push_load(&setup, &feed(990.0)), "load push");
    let refused = server.push_load(&setup, "{\"time\": \"yesterday\"}");
    assert!(!refused.status.success(), "a bad feed must be refused");
    let shedding = scrape_until(server.admin, "eu-west to shed", |m| {
        m.gauge("steerdns_shield_shed_fraction", &[("region", "eu-west")])
            .is_some_and(|f| f > 0.0)
    });
    let d = Delta {
        before: &before,
        after: &shedding,
    };
    assert_eq!(
        d.counter("steerdns_load_feeds_total", &[("result", "accepted")]),
        1.0
    );
    assert_eq!(
        d.counter("steerdns_load_feeds_total", &[("result", "refused")]),
        1.0
    );
    let age = shedding
        .gauge("steerdns_load_feed_age_seconds", &[])
        .expect("feed age after a feed");
    assert!((0.0..60.0).contains(&age), "feed age {age}");
    let util = |ring: &str, name: &str| {
        shedding.gauge("steerdns_utilisation", &[("ring", ring), ("name", name)])
    };
    assert_eq!(util("region", "eu-west"), Some(0.99));
    assert_eq!(util("region", "eu-north"), Some(0.2));
    assert_eq!(util("fallback", "fb-eu"), Some(0.1));
    assert_eq!(
        util("region", "ap-east"),
        None,
        "no reading, no utilisation"
    );
    assert_eq!(
        shedding.gauge("steerdns_load", &[("ring", "region"), ("name", "eu-west")]),
        Some(990.0)
    );
    assert_eq!(
        shedding.gauge("steerdns_shield_hot", &[("region", "eu-west")]),
        Some(1.0)
    );
    assert_eq!(
        shedding.gauge("steerdns_shield_hot", &[("region", "na-east")]),
        Some(0.0)
    );
    // Destinations: each share of eu-west's clients, summing to its shed fraction; none for a
    // region that is not shedding.
    let fraction = shedding
        .gauge("steerdns_shield_shed_fraction", &[("region", "eu-west")])
        .unwrap_or(0.0);
    let destinations: Vec<(String, f64)> = shedding
        .series("steerdns_shield_destination_fraction")
        .into_iter()
        .map(|(labels, v)| {
            (
                format!("{}->{}", labels["region"], labels["destination"]),
                v,
            )
        })
        .collect();
    assert!(!destinations.is_empty(), "no shed destination shown");
    assert!(
        destinations.iter().all(|(k, _)| k.starts_with("eu-west->")),
        "{destinations:?}"
    );
    let total: f64 = destinations.iter().map(|(_, v)| v).sum();
    assert!(
        (total - fraction).abs() < 1e-9,
        "{destinations:?} vs {fraction}"
    );

    // Anycast answers per destination match what eu-west clients were actually answered.
    let asked = Metrics::scrape(server.admin);
    let mut answered: BTreeMap<&str, f64> = BTreeMap::new();
    let mut resolver = Resolver::new(server.dns);
    let subnets: Vec<String> = (0..200).map(|i| format!("81.2.{i}.0/24")).collect();
    for response in resolver.ask_a_from_each("www.edge.example.net.", &subnets) {
        for addr in a_records(&response) {
            *answered.entry(destination_of(addr)).or_insert(0.0) += 1.0;
        }
    }
    assert!(
        answered.keys().any(|d| *d != "global"),
        "no eu-west client was shed: {answered:?}"
    );
    let after = Metrics::scrape(server.admin);
    let d = Delta {
        before: &asked,
        after: &after,
    };
    for (destination, n) in &answered {
        let moved = d.counter(
            "steerdns_anycast_answers_total",
            &[("region", "eu-west"), ("destination", destination)],
        );
        assert_eq!(
            moved, *n,
            "eu-west -> {destination}: answered {n}, counted {moved}"
        );
    }
    let counted: f64 = after
        .series("steerdns_anycast_answers_total")
        .iter()
        .filter(|(l, _)| l["region"] == "eu-west")
        .map(|(_, v)| v)
        .sum::<f64>()
        - asked
            .series("steerdns_anycast_answers_total")
            .iter()
            .filter(|(l, _)| l["region"] == "eu-west")
            .map(|(_, v)| v)
            .sum::<f64>();
    assert_eq!(
        counted,
        subnets.len() as f64,
        "retries or extra answers counted"
    );
}

#[test]
fn control_changes_show_in_serial_reload_and_weight_metrics() {
    let setup = Setup::new("metrics-control");
    let server = setup.start();
    let before = Metrics::scrape(server.admin);
    let serial = server.serial();
    assert_eq!(
        before.gauge("steerdns_control_serial", &[]),
        Some(serial as f64)
    );
    let weight = |m: &Metrics, e: &str| {
        m.gauge(
            "steerdns_endpoint_weight",
            &[("profile", "critical"), ("endpoint", e)],
        )
    };
    assert_eq!(weight(&before, "frontdoor"), Some(100.0));
    assert_eq!(weight(&before, "alt-cdn"), Some(0.0));

    setup.write_control_atomically(&critical_control(0, 100, 0));
    let new_serial = server.wait_for_serial_change(serial, WAIT);
    let changed = Metrics::scrape(server.admin);
    let d = Delta {
        before: &before,
        after: &changed,
    };
    assert_eq!(
        changed.gauge("steerdns_control_serial", &[]),
        Some(new_serial as f64)
    );
    assert_eq!(
        d.counter("steerdns_reloads_total", &[("result", "accepted")]),
        1.0
    );
    assert_eq!(
        d.counter("steerdns_reloads_total", &[("result", "refused")]),
        0.0
    );
    assert_eq!(weight(&changed, "frontdoor"), Some(0.0));
    assert_eq!(weight(&changed, "alt-cdn"), Some(100.0));
    let status = server.status();
    let reported = changed
        .gauge("steerdns_last_reload_duration_seconds", &[])
        .expect("reload duration");
    let ms = status["last_reload_ms"].as_f64().expect("last_reload_ms");
    assert!(
        (reported - ms / 1000.0).abs() < 1e-9,
        "{reported} s vs {ms} ms"
    );
    assert!(reported > 0.0);

    // A change that does not validate: refused, counted, the serial stays.
    let refused_before = server.refused();
    setup.write_control_atomically("[profiles.critical.endpoints]\nnosuch = { weight = 5 }\n");
    server.wait_for_refusal(refused_before, WAIT);
    let refused = Metrics::scrape(server.admin);
    let d = Delta {
        before: &changed,
        after: &refused,
    };
    assert_eq!(
        d.counter("steerdns_reloads_total", &[("result", "refused")]),
        1.0
    );
    assert_eq!(
        d.counter("steerdns_reloads_total", &[("result", "accepted")]),
        0.0
    );
    assert_eq!(
        refused.gauge("steerdns_control_serial", &[]),
        Some(new_serial as f64)
    );
}

#[test]
fn json_logs_carry_the_sampled_query_log() {
    let setup = Setup::new("metrics-logs");
    let text = std::fs::read_to_string(&setup.config).expect("config");
    assert!(text.contains("[server]\n"));
    // One UDP worker, so that one countdown decides for every query sent.
    let text = text.replacen(
        "[server]\n",
        "[server]\nudp_workers = 1\nquery_log_sample = 3\n",
        1,
    );
    std::fs::write(&setup.config, text).expect("write config");
    let mut child = serve_command(&setup, &[], &["--log-format", "json"])
        .spawn()
        .expect("start steerdns");
    let stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let rx = lines_of(child.stderr.take().expect("stderr"));
    let mut dns = None;
    for line in stdout.lines().map_while(Result::ok) {
        if let Some(rest) = line.strip_prefix("listening on ") {
            let addr = rest.split_whitespace().next().expect("address");
            dns.get_or_insert(addr.parse::<SocketAddr>().expect("dns address"));
        }
        if line.starts_with("ready") {
            break;
        }
    }
    let dns = dns.expect("a DNS address");
    let names = [
        "a.example.com.",
        "b.example.com.",
        "c.example.com.",
        "d.example.com.",
        "e.example.com.",
        "f.example.com.",
        "g.example.com.",
    ];
    for name in names {
        udp_ask(dns, &plain_query(name, RecordType::AAAA));
    }
    // One in three, the first included: a, d, g.
    let deadline = Instant::now() + WAIT;
    let mut lines = Vec::new();
    let mut logged = Vec::new();
    while logged.len() < 3 && Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        let event: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(event["level"].is_string(), "{line}");
        if event["target"] == "steerdns::query" {
            assert_eq!(event["level"], "INFO", "{line}");
            assert_eq!(event["client"], "127.0.0.1", "{line}");
            assert_eq!(event["transport"], "udp", "{line}");
            assert_eq!(event["qtype"], "AAAA", "{line}");
            assert_eq!(event["rcode"], "NXDOMAIN", "{line}");
            logged.push(event["name"].as_str().unwrap_or_default().to_string());
        }
        lines.push(line);
    }
    // Nothing more comes for the queries that were not sampled.
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(300)) {
        assert!(
            !line.contains("steerdns::query"),
            "an extra query line: {line}"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        logged,
        ["a.example.com.", "d.example.com.", "g.example.com."],
        "log lines:\n{}",
        lines.join("\n")
    );
}

#[test]
fn supervised_threads_and_tasks_show_in_status_metrics_and_the_cli() {
    let setup = Setup::new("metrics-supervisor");
    let server = setup.start();
    // Read status between two scrapes that agree, so the three describe the same moment.
    let (status, scrape) = consistent_reading(|| {
        let first = Metrics::scrape(server.admin);
        let status = server.status();
        let second = Metrics::scrape(server.admin);
        let running = |m: &Metrics| m.gauge("steerdns_supervised_parts_running", &[]);
        (running(&first) == running(&second)).then_some((status, second))
    });
    let parts = &status["supervisor"];
    let running = parts["running"].as_u64().expect("supervisor.running");
    let started = parts["started"].as_u64().expect("supervisor.started");
    // At least the TCP listener, the admin endpoint and the control file's watch.
    assert!(running >= 3, "{parts}");
    assert!(started >= running, "{parts}");
    assert_eq!(parts["unexpected_exits"].as_u64(), Some(0), "{parts}");
    assert!(parts["last_unexpected"].is_null(), "{parts}");
    assert_eq!(
        scrape.gauge("steerdns_supervised_parts_running", &[]),
        Some(running as f64)
    );
    assert_eq!(
        scrape.counter("steerdns_supervised_parts_started_total", &[]),
        started as f64
    );
    assert_eq!(
        scrape.counter("steerdns_supervised_parts_unexpected_exits_total", &[]),
        0.0
    );
    let out = server.cli(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "supervised threads and tasks: {running} running of {started} started; none ended unexpectedly"
        )),
        "{text}"
    );
}

/// Retries `probe` until it gives a value (within [`WAIT`]).
fn consistent_reading<T>(mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "no consistent reading within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
