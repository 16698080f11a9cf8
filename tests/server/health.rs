//! Health checks end to end: the real server probes real HTTP and TCP backends on loopback that
//! the test starts and stops, and its DNS answers follow (failover within fall × interval plus
//! a second, back after rise checks, no flip on one slow reply, all_down rules, startup state
//! after a restart, one probe per interval however many profiles use a target), a DNS check
//! against a loopback DNS responder, HTTPS checks against `openssl s_server` (verify,
//! pin, skip), and name lookups bounded when the system resolver hangs (the server in a mount
//! namespace whose resolv.conf names a loopback resolver that never answers).

use crate::common;
use crate::hostile_common;
use crate::steering_common;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::backend::{closed_port, Backend, DnsBackend, Reply, TlsBackend};
use common::{dig, query, Server};
use hickory_proto::rr::RecordType;
use steering_common::{a_records, Setup};

const PRIMARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 101);
const SECONDARY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 102);
const STATIC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 109);

/// Generous bound for anything the test waits for (a busy machine).
const WAIT: Duration = Duration::from_secs(20);

fn monitor(target: &str, interval_ms: u64, extra: &str) -> String {
    format!(
        "monitor = {{ {target}, interval_ms = {interval_ms}, timeout_ms = 300, fall = 2, rise = 2{extra} }}"
    )
}

/// A failover profile `name` (primary, secondary) steering `name.example.com.`.
fn failover(name: &str, primary: &str, secondary: &str, all_down: &str) -> String {
    format!(
        "
[profiles.{name}]
type = \"failover\"
ttl = 5
all_down = \"{all_down}\"
[[profiles.{name}.endpoints]]
name = \"primary\"
addresses = [\"{PRIMARY}\"]
{primary}
[[profiles.{name}.endpoints]]
name = \"secondary\"
addresses = [\"{SECONDARY}\"]
{secondary}

[[steered]]
name = \"{name}.example.com.\"
profile = \"{name}\"
"
    )
}

fn answer(server: &Server, name: &str) -> Vec<Ipv4Addr> {
    a_records(&server.udp(&query(name, RecordType::A)))
}

/// Polls until `name` answers `want`; returns how long it took.
fn wait_answer(server: &Server, name: &str, want: Ipv4Addr) -> Duration {
    let started = Instant::now();
    loop {
        let got = answer(server, name);
        if got == [want] {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < WAIT,
            "{name} still answers {got:?}, expected {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn trace(server: &Server, name: &str) -> String {
    // TXT strings are at most 255 bytes: a long trace comes in several.
    dig(server, &["+short", "CH", "TXT", name]).replace("\" \"", "")
}

#[test]
fn failover_moves_within_fall_times_interval_and_comes_back_after_rise_checks() {
    let interval = 500;
    let mut primary = Backend::start();
    let secondary = Backend::start();
    let config = failover(
        "hc",
        &monitor(&format!("url = \"{}\"", primary.url()), interval, ""),
        &monitor(&format!("url = \"{}\"", secondary.url()), interval, ""),
        "serve-all",
    );
    let setup = Setup::new(&config, "");
    let server = setup.start(&[]);
    wait_answer(&server, "hc.example.com.", PRIMARY);
    assert!(primary.wait_hits(2, WAIT), "the primary is probed");

    primary.stop();
    let took = wait_answer(&server, "hc.example.com.", SECONDARY);
    let bound = Duration::from_millis(2 * interval) + Duration::from_secs(1);
    assert!(
        took <= bound,
        "failover took {took:?}, more than fall x interval + 1 s = {bound:?}"
    );
    let why = trace(&server, "hc.example.com.");
    assert!(why.contains("skipped for health: primary down"), "{why}");
    assert_status_says_primary_down(&setup, &server, &primary.url());

    let back = Backend::start_on(primary.addr);
    wait_answer(&server, "hc.example.com.", PRIMARY);
    assert!(
        back.hits() >= 2,
        "back after {} check(s), rise is 2",
        back.hits()
    );
    let why = trace(&server, "hc.example.com.");
    assert!(!why.contains("skipped for health"), "{why}");
}

/// `steerdns status` (JSON and text, from `/v1/status`) shows the down target and the
/// skipped endpoint.
fn assert_status_says_primary_down(setup: &Setup, server: &Server, url: &str) {
    let status = |json: bool| cli_status(setup, server, json);
    let status_json: serde_json::Value = serde_json::from_str(&status(true)).expect("status JSON");
    let health = &status_json["health"];
    let target = health["targets"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["target"] == url))
        .unwrap_or_else(|| panic!("no target {url} in {health}"));
    assert_eq!(target["state"], "down", "{target}");
    assert!(
        target["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("Connection refused")),
        "{target}"
    );
    assert!(target["last_change"].is_string(), "{target}");
    assert!(target["last_latency_ms"].is_number(), "{target}");
    let endpoint = health["endpoints"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["endpoint"] == "primary"))
        .unwrap_or_else(|| panic!("no endpoint primary in {health}"));
    assert_eq!(endpoint["served"], false, "{endpoint}");
    let text = status(false);
    assert!(text.contains(&format!("health {url}: down")), "{text}");
    assert!(
        text.contains("endpoint hc/primary: SKIPPED (down"),
        "{text}"
    );
}

/// `steerdns status [--json]` against the server's admin endpoint.
fn cli_status(setup: &Setup, server: &Server, json: bool) -> String {
    let admin = server.admin.expect("the admin endpoint is on").to_string();
    let config = setup.config.display().to_string();
    let mut args = vec!["status", "--config", &config, "--admin", &admin];
    if json {
        args.push("--json");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(&args)
        .output()
        .expect("run steerdns status");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn one_slow_reply_does_not_flip_the_answer() {
    let interval = 400;
    let primary = Backend::start();
    let secondary = Backend::start();
    let config = failover(
        "slow",
        &monitor(&format!("url = \"{}\"", primary.url()), interval, ""),
        &monitor(&format!("url = \"{}\"", secondary.url()), interval, ""),
        "serve-all",
    );
    let setup = Setup::new(&config, "");
    let server = setup.start(&[]);
    assert!(primary.wait_hits(1, WAIT));
    wait_answer(&server, "slow.example.com.", PRIMARY);
    let before = primary.hits();
    primary.set(Reply::SlowOnce);
    // The slow reply (a timeout, one failure), then healthy replies: never fall = 2 in a row.
    let enough = before + 5;
    while primary.hits() < enough {
        assert_eq!(
            answer(&server, "slow.example.com."),
            [PRIMARY],
            "flipped after {} probe(s) since the slow one",
            primary.hits() - before
        );
        assert!(primary.wait_hits(primary.hits(), WAIT));
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn all_down_rules_and_two_profiles_on_one_target_probe_it_once_per_interval() {
    let interval = 400u64;
    let mut primary = Backend::start();
    let mut secondary = Backend::start();
    let p = monitor(&format!("url = \"{}\"", primary.url()), interval, "");
    let s = monitor(&format!("url = \"{}\"", secondary.url()), interval, "");
    let mut config = failover("last", &p, &s, "serve-last-healthy");
    config.push_str(&format!(
        "
[profiles.fb]
type = \"weighted\"
ttl = 5
all_down = \"fallback:static\"
[[profiles.fb.endpoints]]
name = \"primary\"
addresses = [\"{PRIMARY}\"]
weight = 1
{p}
[[profiles.fb.endpoints]]
name = \"secondary\"
addresses = [\"{SECONDARY}\"]
weight = 1
{s}
[[profiles.fb.endpoints]]
name = \"static\"
addresses = [\"{STATIC}\"]
weight = 0

[[steered]]
name = \"fb.example.com.\"
profile = \"fb\"
"
    ));
    let setup = Setup::new(&config, "");
    let server = setup.start(&[]);
    wait_answer(&server, "last.example.com.", PRIMARY);
    assert_ne!(answer(&server, "fb.example.com."), [STATIC]);

    // Two profiles name the primary: it still gets one probe per interval.
    assert!(primary.wait_hits(2, WAIT));
    let first = primary.hits();
    assert!(primary.wait_hits(first + 10, WAIT));
    let times = primary.hit_times();
    let span = times[first + 9] - times[first - 1];
    assert!(
        span >= Duration::from_millis(interval * 8),
        "10 probes in {span:?}: more than one probe per {interval} ms interval"
    );

    primary.stop();
    wait_answer(&server, "last.example.com.", SECONDARY);
    secondary.stop();
    // Every endpoint down: the secondary was up last; the weighted profile falls back.
    wait_answer(&server, "fb.example.com.", STATIC);
    assert_eq!(answer(&server, "last.example.com."), [SECONDARY]);
    let why = trace(&server, "last.example.com.");
    assert!(
        why.contains("every endpoint down: all_down serve-last-healthy"),
        "{why}"
    );
    assert!(
        why.contains("skipped for health: primary, secondary down"),
        "{why}"
    );
}

#[test]
fn a_restart_with_the_primary_down_follows_the_startup_state() {
    let down: SocketAddr = closed_port();
    let up: SocketAddr = closed_port();
    let mut config = failover(
        "cold",
        &monitor(&format!("tcp = \"{down}\""), 2000, ", startup = \"down\""),
        "",
        "serve-all",
    );
    config.push_str(&failover(
        "hot",
        &monitor(&format!("tcp = \"{up}\""), 2000, ", startup = \"up\""),
        "",
        "serve-all",
    ));
    let setup = Setup::new(&config, "");
    for _ in 0..2 {
        let server = setup.start(&[]);
        // Right after the start, before two checks can have failed.
        assert_eq!(answer(&server, "cold.example.com."), [SECONDARY]);
        assert_eq!(answer(&server, "hot.example.com."), [PRIMARY]);
        wait_answer(&server, "hot.example.com.", SECONDARY);
        assert_eq!(answer(&server, "cold.example.com."), [SECONDARY]);
    }
}

/// The target's entry in the server's status.
fn target_status(setup: &Setup, server: &Server, target: &str) -> serde_json::Value {
    let status: serde_json::Value =
        serde_json::from_str(&cli_status(setup, server, true)).expect("status JSON");
    status["health"]["targets"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["target"] == target).cloned())
        .unwrap_or_else(|| panic!("no target {target} in {:#}", status["health"]))
}

#[test]
fn dns_checks_follow_the_rcode_and_silence_of_a_real_dns_server() {
    let dns = DnsBackend::start();
    let config = failover(
        "dnsmon",
        &monitor(
            &format!(
                "dns = \"{}\", dns_name = \"example.com.\", dns_type = \"SOA\"",
                dns.addr
            ),
            500,
            "",
        ),
        "",
        "serve-all",
    );
    let setup = Setup::new(&config, "");
    let server = setup.start(&[]);
    let target = format!("dns:{} example.com. SOA", dns.addr);
    wait_answer(&server, "dnsmon.example.com.", PRIMARY);
    let deadline = Instant::now() + WAIT;
    while target_status(&setup, &server, &target)["state"] != "up" {
        assert!(
            Instant::now() < deadline,
            "{}",
            target_status(&setup, &server, &target)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(dns.queries() >= 1);

    dns.set_rcode(2);
    wait_answer(&server, "dnsmon.example.com.", SECONDARY);
    let status = target_status(&setup, &server, &target);
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("rcode 2")),
        "{status}"
    );
    dns.set_rcode(0);
    wait_answer(&server, "dnsmon.example.com.", PRIMARY);
    dns.set_silent();
    wait_answer(&server, "dnsmon.example.com.", SECONDARY);
    let status = target_status(&setup, &server, &target);
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("no answer within 300 ms")),
        "{status}"
    );
}

#[test]
fn https_checks_verify_pin_or_skip_the_certificate() {
    let tls = TlsBackend::start();
    let wrong_pin = format!("sha256:{}", "0".repeat(64));
    let pin = tls.pin();
    let cases = [
        ("skip", "skip", ", expect_body = \"s_server\"", PRIMARY),
        ("pin", pin.as_str(), "", PRIMARY),
        ("wrongpin", wrong_pin.as_str(), "", SECONDARY),
        ("verify", "verify", "", SECONDARY),
    ];
    let mut config = String::new();
    for (name, mode, extra, _) in &cases {
        let target = format!("url = \"{}\", tls = \"{mode}\"", tls.url(name));
        config.push_str(&failover(
            name,
            &monitor(&target, 500, extra),
            "",
            "serve-all",
        ));
    }
    let setup = Setup::new(&config, "");
    let server = setup.start(&[]);
    for (name, _, _, want) in &cases {
        let target = tls.url(name);
        let deadline = Instant::now() + WAIT;
        let wanted_state = if *want == PRIMARY { "up" } else { "down" };
        while target_status(&setup, &server, &target)["state"] != wanted_state {
            assert!(
                Instant::now() < deadline,
                "{}",
                target_status(&setup, &server, &target)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        wait_answer(&server, &format!("{name}.example.com."), *want);
    }
    let error = |name: &str| {
        target_status(&setup, &server, &tls.url(name))["last_error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        error("wrongpin").contains("is not the pinned one"),
        "{}",
        error("wrongpin")
    );
    // Self-signed (and a CA certificate): not trusted by the system bundle.
    assert!(
        error("verify").contains("invalid peer certificate"),
        "{}",
        error("verify")
    );
    assert_eq!(error("skip"), "", "the skip check passed every time");
}

/// The server's threads now (`Threads:` in /proc/PID/status).
fn threads(server: &Server) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid()))
        .expect("the server's /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads: line")
}

/// Starts the server with `config` in a mount namespace of its own, where /etc/resolv.conf is
/// `resolv_conf` (needs root, as the XDP tests do: without it the start fails, never passes).
fn start_with_resolv_conf(config: &std::path::Path, resolv_conf: &std::path::Path) -> Server {
    use std::ffi::CString;
    use std::os::unix::process::CommandExt;
    let source = CString::new(resolv_conf.to_str().expect("utf-8 path")).expect("no NUL");
    let config = config.to_str().expect("utf-8 path");
    let args = ["--config", config, "--admin-listen", "127.0.0.1:0"];
    Server::start_configured(&common::repo_path(""), &args, move |command| {
        // SAFETY: between fork and exec only unshare and mount run (system calls, no
        // allocation), on C strings made before the fork.
        unsafe {
            command.pre_exec(move || {
                let fail = || Err(std::io::Error::last_os_error());
                if libc::unshare(libc::CLONE_NEWNS) != 0 {
                    return fail();
                }
                // Private first, so the bind mount below stays in this namespace.
                let flags = libc::MS_REC | libc::MS_PRIVATE;
                let none = std::ptr::null();
                if libc::mount(none, c"/".as_ptr(), none, flags, std::ptr::null()) != 0 {
                    return fail();
                }
                let target = c"/etc/resolv.conf".as_ptr();
                if libc::mount(
                    source.as_ptr(),
                    target,
                    none,
                    libc::MS_BIND,
                    std::ptr::null(),
                ) != 0
                {
                    return fail();
                }
                Ok(())
            });
        }
    })
}

#[test]
fn a_hanging_resolver_holds_at_most_four_lookup_threads() {
    // The only resolver is a loopback socket that never answers, with glibc's longest
    // timeout: every lookup hangs for 30 s, far longer than this test.
    let silent = std::net::UdpSocket::bind("127.53.28.12:53").expect("bind 127.53.28.12:53");
    let dir = common::TempDir::new("hanging-resolver");
    let resolv_conf = dir.path().join("resolv.conf");
    std::fs::write(
        &resolv_conf,
        "nameserver 127.53.28.12\noptions timeout:30 attempts:1\n",
    )
    .expect("write resolv.conf");
    // Six monitored names checked every 400 ms (each check given up after 300 ms).
    const TARGETS: usize = 6;
    let mut endpoints =
        String::from("[profiles.hang]\ntype = \"failover\"\nttl = 5\nall_down = \"serve-all\"\n");
    for n in 0..TARGETS {
        let target = format!("url = \"http://hang-{n}.example.invalid/\"");
        endpoints.push_str(&format!(
            "[[profiles.hang.endpoints]]\nname = \"e{n}\"\naddresses = [\"192.0.2.{}\"]\n{}\n",
            n + 1,
            monitor(&target, 400, "")
        ));
    }
    endpoints.push_str("[[steered]]\nname = \"hang.example.com.\"\nprofile = \"hang\"\n");
    let setup = Setup::new(&endpoints, "");
    let server = start_with_resolv_conf(&setup.config, &resolv_conf);
    let admin = server.admin.expect("admin address");
    let before = threads(&server);
    // Every target checked at least 8 times: without a bound, 48 lookups would hang now,
    // each on a thread of its own.
    let targets = common::wait_for("8 checks of every target", WAIT, || {
        let (code, text) = hostile_common::http(admin, "GET", "/v1/status", Vec::new());
        assert_eq!(code, 200, "{text}");
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let status: serde_json::Value = serde_json::from_str(body).expect("status JSON");
        let targets = status["health"]["targets"].as_array()?.clone();
        (targets.len() == TARGETS && targets.iter().all(|t| t["checks"].as_u64() >= Some(8)))
            .then_some(targets)
    });
    let after = threads(&server);
    assert!(
        after <= before + 4,
        "{} more threads after {} checks (at most 4 lookups may hang at once)",
        after.saturating_sub(before),
        targets
            .iter()
            .filter_map(|t| t["checks"].as_u64())
            .sum::<u64>()
    );
    // The targets beyond the four whose lookups hang are told why at once.
    let busy = targets
        .iter()
        .filter(|t| {
            t["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("name lookups already in flight"))
        })
        .count();
    assert!(busy >= TARGETS - 4, "{targets:#?}");
    let hanging = hostile_common::metric(admin, "steerdns_health_lookups_in_flight", &[]);
    assert_eq!(hanging, 4.0, "lookups in flight");
    drop(silent);
}
