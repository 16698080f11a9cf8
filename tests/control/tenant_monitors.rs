//! Tenants' own monitors and per-tenant probe budgets (issue 31, item 5), with the real binary
//! over real sockets on loopback:
//!
//! - a tenant's profile endpoint named by its own `[monitors]` entry (a TCP listener the test
//!   owns) is left out of that tenant's answers once the test closes the listener, and with
//!   every endpoint down the answer is never empty (serve-all, as a platform profile's);
//!   `tenant show`'s JSON, `/v1/status` and `/metrics` say which monitor is down;
//! - isolation: tenant A with 2,000 monitors whose target (a UDP socket that reads and never
//!   answers) times out on every check, tenant B with its own two: B's answer still moves
//!   within a bound derived from B's interval once its target stops, and A is shown throttled
//!   with checks deferred;
//! - a document with more monitors than `[tenants] max_monitors` is refused, naming the field.
//!
//! Every wait is for something the server shows (an answer, a status field), never a sleep.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::control_common::*;
use crate::tenants::{answer, chaos_trace, metric, owned, setup_with, wait_tenants};

const WAIT: Duration = Duration::from_secs(20);

/// A loopback TCP listener that accepts (and drops) connections until closed.
struct Listener {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Listener {
    fn open() -> Listener {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the probe target");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => drop(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Listener {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// Closes the listener: connections are refused from now on.
    fn close(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A weighted profile of two endpoints, each named by its own TCP monitor on `a` / `b`.
fn two_monitored(name: &str, a: SocketAddr, b: SocketAddr, interval_ms: u64) -> String {
    let timeout_ms = interval_ms / 2;
    format!(
        r#"names = ["{owned}"]

[monitors.a]
tcp = "{a}"
interval_ms = {interval_ms}
timeout_ms = {timeout_ms}
fall = 1
rise = 1

[monitors.b]
tcp = "{b}"
interval_ms = {interval_ms}
timeout_ms = {timeout_ms}
fall = 1
rise = 1

[profile]
type = "weighted"
ttl = 30

[[profile.endpoints]]
name = "a"
addresses = ["198.51.100.1"]
weight = 100
monitor = "a"

[[profile.endpoints]]
name = "b"
addresses = ["198.51.100.2"]
weight = 100
monitor = "b"
"#,
        owned = owned(name)
    )
}

const A_ADDR: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const B_ADDR: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);

fn tenant_json(server: &Daemon, name: &str) -> serde_json::Value {
    let (code, body) = http(server.admin, "GET", &format!("/v1/tenants/{name}"), None);
    assert_eq!(code, 200, "GET /v1/tenants/{name}: {body}");
    serde_json::from_str(&body).expect("/v1/tenants/NAME is JSON")
}

/// The state of `tenant`'s monitor `monitor` (`unknown`, `up`, `down`).
fn monitor_state(server: &Daemon, tenant: &str, monitor: &str) -> Option<String> {
    let view = tenant_json(server, tenant);
    view["probes"]["monitors"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == monitor)?["state"]
        .as_str()
        .map(str::to_owned)
}

fn wait_monitor(server: &Daemon, tenant: &str, monitor: &str, state: &str) {
    let deadline = Instant::now() + WAIT;
    while monitor_state(server, tenant, monitor).as_deref() != Some(state) {
        assert!(
            Instant::now() < deadline,
            "{tenant}'s monitor {monitor} not {state} within {WAIT:?}: {:#}\nlog:\n{}",
            tenant_json(server, tenant),
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The one address `name` answers with (from the test's own address: one weighted choice).
fn address(resolver: &mut Resolver, name: &str) -> Ipv4Addr {
    let (_, addresses) = answer(resolver, &owned(name));
    assert_eq!(addresses.len(), 1, "{name}: {addresses:?}");
    addresses[0]
}

/// Waits until `name` answers with something other than `was`; returns how long it took.
fn wait_answer_moves(
    resolver: &mut Resolver,
    server: &Daemon,
    name: &str,
    was: Ipv4Addr,
) -> Duration {
    let started = Instant::now();
    loop {
        let now = address(resolver, name);
        if now != was {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < WAIT,
            "{name} still answers {was} after {WAIT:?}: {:#}",
            tenant_json(server, name)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The test's two listeners, by the address of the endpoint each one's monitor checks.
fn split(a: Listener, b: Listener, answered: Ipv4Addr) -> (Listener, Listener) {
    if answered == A_ADDR {
        (a, b)
    } else {
        (b, a)
    }
}

#[test]
fn a_tenants_endpoint_whose_monitor_goes_down_leaves_its_answers_never_all_down_empty() {
    let setup = setup_with("tenant-monitor-down", 0, |_| 0);
    let (a, b) = (Listener::open(), Listener::open());
    let dir = setup.path("tenants");
    std::fs::write(
        dir.join("watched.toml"),
        two_monitored("watched", a.addr, b.addr, 100),
    )
    .expect("write tenant");
    let server = setup.start();
    wait_tenants(&server, "the tenant served", |t| {
        t["served"].as_u64() == Some(1)
    });
    wait_monitor(&server, "watched", "a", "up");
    wait_monitor(&server, "watched", "b", "up");
    let mut resolver = Resolver::new(server.dns);
    let first = address(&mut resolver, "watched");
    assert!([A_ADDR, B_ADDR].contains(&first), "{first}");
    let (first_target, other_target) = split(a, b, first);
    let (first_monitor, other_monitor) = if first == A_ADDR {
        ("a", "b")
    } else {
        ("b", "a")
    };

    first_target.close();
    wait_answer_moves(&mut resolver, &server, "watched", first);
    assert_ne!(
        address(&mut resolver, "watched"),
        first,
        "it stays out while down"
    );
    wait_monitor(&server, "watched", first_monitor, "down");
    let trace = chaos_trace(&mut resolver, &owned("watched"));
    assert!(
        trace.contains(&format!("skipped for health: {first_monitor} down")),
        "{trace}"
    );
    let view = tenant_json(&server, "watched");
    let monitors = view["probes"]["monitors"].as_array().expect("monitors");
    assert_eq!(monitors.len(), 2, "{view:#}");
    let down = monitors
        .iter()
        .find(|m| m["name"] == first_monitor)
        .expect("the monitor");
    assert!(
        down["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{view:#}"
    );
    let summary = server.status()["tenants"]["probes"].clone();
    assert_eq!(summary[0]["tenant"], "watched", "{summary:#}");
    assert_eq!(summary[0]["down"], 1, "{summary:#}");
    assert_eq!(
        metric(
            &server,
            "steerdns_tenant_monitors_down",
            &[("tenant", "watched")]
        ),
        1.0
    );

    // Every endpoint down: never an empty answer (serve-all, as a platform profile).
    other_target.close();
    wait_monitor(&server, "watched", other_monitor, "down");
    let (_, addresses) = answer(&mut resolver, &owned("watched"));
    assert_eq!(
        addresses,
        vec![first],
        "all down answers as if every one were up"
    );
    server.stop();
}

/// 2,000 monitors, each a DNS question to `silent` (which never answers): every check times out.
fn noisy(silent: SocketAddr, answered: SocketAddr) -> String {
    let mut text = format!("names = [\"{}\"]\n\n", owned("noisy"));
    text.push_str(&format!(
        "[monitors.web]\ntcp = \"{answered}\"\ninterval_ms = 1000\ntimeout_ms = 500\n\n"
    ));
    for i in 0..1999 {
        text.push_str(&format!(
            "[monitors.m{i}]\ndns = \"{silent}\"\ndns_name = \"m{i}.example.\"\n\
             interval_ms = 1000\ntimeout_ms = 500\nfall = 1\n\n"
        ));
    }
    text.push_str(
        "[profile]\ntype = \"weighted\"\nttl = 30\n\n[[profile.endpoints]]\nname = \"web\"\n\
         addresses = [\"198.51.100.9\"]\nweight = 100\nmonitor = \"web\"\n",
    );
    text
}

#[test]
fn a_tenant_with_two_thousand_timing_out_monitors_never_delays_another_tenants() {
    const QUIET_INTERVAL_MS: u64 = 200;
    let setup = setup_with("tenant-monitor-isolation", 0, |_| 0);
    setup.extend_config("[tenants]\nmax_monitors = 2000\nprobes_per_second = 20\n");
    let silent = UdpSocket::bind("127.0.0.1:0").expect("bind the silent DNS target");
    let web = Listener::open();
    let (a, b) = (Listener::open(), Listener::open());
    let dir = setup.path("tenants");
    let silent_addr = silent.local_addr().expect("addr");
    std::fs::write(dir.join("noisy.toml"), noisy(silent_addr, web.addr)).expect("write noisy");
    std::fs::write(
        dir.join("quiet.toml"),
        two_monitored("quiet", a.addr, b.addr, QUIET_INTERVAL_MS),
    )
    .expect("write quiet");
    let server = setup.start();
    wait_tenants(&server, "both tenants served", |t| {
        t["served"].as_u64() == Some(2)
    });
    wait_monitor(&server, "quiet", "a", "up");
    wait_monitor(&server, "quiet", "b", "up");
    // The noisy tenant's checks are under way (and timing out) before the quiet one's target
    // stops: some of its monitors are down, and its checks are being deferred.
    let deadline = Instant::now() + WAIT;
    loop {
        let noisy = tenant_json(&server, "noisy");
        let probes = &noisy["probes"];
        let down = probes["monitors"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["state"] == "down").count());
        if down > 0 && probes["deferred_total"].as_u64().unwrap_or(0) > 0 {
            assert_eq!(probes["throttled"], true, "{probes:#}");
            assert_eq!(probes["monitors"].as_array().map(Vec::len), Some(2000));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the noisy tenant's checks: {:#}",
            probes
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut resolver = Resolver::new(server.dns);
    let first = address(&mut resolver, "quiet");
    let (first_target, _other) = split(a, b, first);
    first_target.close();
    let took = wait_answer_moves(&mut resolver, &server, "quiet", first);
    eprintln!("the quiet tenant's answer moved {took:?} after its target stopped");
    // fall = 1: the next check after the close takes it down. A generous bound from its own
    // interval (a check at most one interval away, its timeout, the view swap), ten times.
    let bound = Duration::from_millis(10 * (QUIET_INTERVAL_MS + QUIET_INTERVAL_MS / 2));
    assert!(
        took < bound,
        "the quiet tenant's answer moved {took:?} after its target stopped (bound {bound:?})"
    );
    let quiet = tenant_json(&server, "quiet");
    assert_eq!(quiet["probes"]["throttled"], false, "{quiet:#}");
    assert_eq!(quiet["probes"]["deferred_total"], 0, "{quiet:#}");
    // The noisy tenant is shown throttled everywhere.
    let summary = server.status()["tenants"]["probes"].clone();
    let noisy = summary
        .as_array()
        .and_then(|s| s.iter().find(|p| p["tenant"] == "noisy"))
        .unwrap_or_else(|| panic!("no noisy tenant in {summary:#}"));
    assert_eq!(noisy["throttled"], true, "{summary:#}");
    assert_eq!(
        metric(
            &server,
            "steerdns_tenant_probes_throttled",
            &[("tenant", "noisy")]
        ),
        1.0
    );
    assert_eq!(
        metric(
            &server,
            "steerdns_tenant_probes_throttled",
            &[("tenant", "quiet")]
        ),
        0.0
    );
    assert!(
        metric(
            &server,
            "steerdns_tenant_probes_deferred_total",
            &[("tenant", "noisy")]
        ) > 0.0
    );
    let show = ok(
        &server.cli(&["tenant", "show", "noisy"]),
        "tenant show noisy",
    );
    assert!(show.contains("THROTTLED"), "{show}");
    drop(silent);
    web.close();
    server.stop();
}

#[test]
fn a_document_over_max_monitors_is_refused_naming_the_field() {
    let setup = setup_with("tenant-monitor-limit", 0, |_| 0);
    setup.extend_config("[tenants]\nmax_monitors = 2\n");
    let server = setup.start();
    let mut text = format!("names = [\"{}\"]\n", owned("greedy"));
    for i in 0..3 {
        text.push_str(&format!("[monitors.m{i}]\ntcp = \"127.0.0.1:{}\"\n", 9 + i));
    }
    text.push_str(
        "[profile]\ntype = \"weighted\"\nttl = 30\n[[profile.endpoints]]\nname = \"web\"\n\
         addresses = [\"198.51.100.9\"]\nweight = 100\nmonitor = \"m0\"\n",
    );
    let (code, body) = request(
        &server,
        "PUT",
        "/v1/tenants/greedy",
        Some("application/toml"),
        None,
        &text,
    );
    assert_eq!(code, 422, "{body}");
    let reply: serde_json::Value = serde_json::from_str(&body).expect("JSON error body");
    assert_eq!(reply["written"], false, "{reply:#}");
    let problem = &reply["problems"][0];
    assert_eq!(problem["field"], "monitors", "{reply:#}");
    assert_eq!(problem["line"], 2, "{reply:#}");
    assert!(
        problem["problem"]
            .as_str()
            .is_some_and(|p| p.contains("at most 2")),
        "{reply:#}"
    );
    // Host names are refused too: a tenant's checks never wait for the shared resolver.
    let text = text
        .replace("[monitors.m2]\ntcp = \"127.0.0.1:11\"\n", "")
        .replace("tcp = \"127.0.0.1:10\"", "tcp = \"backend.example.org:10\"");
    let (code, body) = request(
        &server,
        "PUT",
        "/v1/tenants/greedy",
        Some("application/toml"),
        None,
        &text,
    );
    assert_eq!(code, 422, "{body}");
    assert!(
        body.contains("monitors.m1") && body.contains("host name"),
        "{body}"
    );
    server.stop();
}
