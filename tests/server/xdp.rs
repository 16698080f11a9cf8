//! The AF_XDP path, end to end: two network namespaces joined by a veth pair (made by the test,
//! removed after), steerdns in one with `[server.xdp]` on its end of the pair, dig in the other.
//! Static, ECS-steered and truncated (→ TCP through the kernel) answers over IPv4 and IPv6, and
//! the per-queue counters in status prove the UDP answers came from the XDP path.
//!
//! Needs root (CAP_NET_ADMIN, CAP_BPF), `ip` (iproute2) and `dig`; `.ci/run` runs as root.
//! Where the kernel refuses namespaces or XDP (an unprivileged run), the namespace tests fail
//! saying so: a run that could not test the XDP path must not look like one that did. The
//! fallback test runs everywhere.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::{lines_of, repo_path, TempDir, TIMEOUT};

const SERVER_V4: &str = "198.18.0.1";
const SERVER_V6: &str = "fd00:5d::1";

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("`ip` must be installed (apt-get install iproute2); .ci/run installs it");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces, `server` and `client`, joined by a veth pair; deleted on drop (which
/// deletes the pair too).
struct Pair {
    server: String,
    client: String,
    server_if: String,
}

impl Pair {
    /// Fails the test, saying why, when the kernel refuses to make namespaces (not privileged).
    fn new() -> Pair {
        Pair::make().unwrap_or_else(|e| {
            panic!(
                "the kernel refuses network namespaces here ({e}): the XDP tests need root \
                 (CAP_NET_ADMIN, CAP_BPF), as under .ci/run"
            )
        })
    }

    fn make() -> Result<Pair, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{n}", std::process::id() % 100_000);
        let pair = Pair {
            server: format!("sdns-xs-{tag}"),
            client: format!("sdns-xc-{tag}"),
            server_if: format!("xs{tag}"),
        };
        ip(&["netns", "add", &pair.server])?;
        if let Err(e) = ip(&["netns", "add", &pair.client]) {
            panic!("the first namespace was made, the second not: {e}");
        }
        let client_if = format!("xc{tag}");
        let setup = [
            vec![
                "link",
                "add",
                &pair.server_if,
                "type",
                "veth",
                "peer",
                "name",
                &client_if,
            ],
            vec!["link", "set", &pair.server_if, "netns", &pair.server],
            vec!["link", "set", &client_if, "netns", &pair.client],
            vec![
                "-n",
                &pair.server,
                "addr",
                "add",
                "198.18.0.1/30",
                "dev",
                &pair.server_if,
            ],
            vec![
                "-n",
                &pair.client,
                "addr",
                "add",
                "198.18.0.2/30",
                "dev",
                &client_if,
            ],
            vec![
                "-n",
                &pair.server,
                "addr",
                "add",
                "fd00:5d::1/64",
                "dev",
                &pair.server_if,
                "nodad",
            ],
            vec![
                "-n",
                &pair.client,
                "addr",
                "add",
                "fd00:5d::2/64",
                "dev",
                &client_if,
                "nodad",
            ],
            vec!["-n", &pair.server, "link", "set", "lo", "up"],
            vec!["-n", &pair.client, "link", "set", "lo", "up"],
            vec!["-n", &pair.server, "link", "set", &pair.server_if, "up"],
            vec!["-n", &pair.client, "link", "set", &client_if, "up"],
        ];
        for args in setup {
            if let Err(e) = ip(&args) {
                panic!("setting up the veth pair: {e}");
            }
        }
        Ok(pair)
    }

    fn dig(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.client, "dig", "+time=3", "+tries=1"])
            .args(args)
            .output()
            .expect("ip netns exec dig");
        assert!(out.status.success(), "dig {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.server]);
        let _ = ip(&["netns", "del", &self.client]);
    }
}

/// The bundled example's config (steering, geo, profiles) with absolute paths, in a scratch
/// directory, plus `[server.xdp]` on `interface`.
fn example_config(dir: &Path, interface: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(repo_path("steerdns.toml")).expect("bundled config");
    let abs = |p: &str| repo_path(p).to_str().expect("utf-8 path").to_string();
    let text = text
        .replace("zones = \"zones\"", &format!("zones = {:?}", abs("zones")))
        .replace(
            "database = \"geoip/example.mmdb\"",
            &format!("database = {:?}", abs("geoip/example.mmdb")),
        );
    std::fs::copy(repo_path("control.toml"), dir.join("control.toml")).expect("control file");
    let path = dir.join("steerdns.toml");
    let text = format!("{text}\n[server.xdp]\ninterface = {interface:?}\n");
    std::fs::write(&path, text).expect("write config");
    path
}

/// steerdns started with `prefix` (e.g. `ip netns exec NS`) in front; stdout read until ready.
struct Steerdns {
    child: Child,
    admin: String,
    /// The first `listening on` address.
    listen: Option<std::net::SocketAddr>,
    xdp_line: String,
    namespace: Option<String>,
}

impl Steerdns {
    fn start(namespace: Option<&str>, config: &Path, listen: &[&str]) -> Steerdns {
        let bin = env!("CARGO_BIN_EXE_steerdns");
        let mut command = match namespace {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, bin]);
                c
            }
            None => Command::new(bin),
        };
        command
            .arg("serve")
            .arg("--config")
            .arg(config)
            .args(["--admin-listen", "127.0.0.1:0"])
            .env("STEERDNS_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for addr in listen {
            command.args(["--listen", addr]);
        }
        let mut child = command.spawn().expect("start steerdns");
        let rx = lines_of(child.stdout.take().expect("stdout"));
        let (mut admin, mut xdp_line, mut listen) = (None, String::new(), None);
        loop {
            let Ok(line) = rx.recv_timeout(TIMEOUT * 2) else {
                let _ = child.kill();
                panic!("steerdns did not become ready");
            };
            if let Some(rest) = line.strip_prefix("admin on http://") {
                admin = Some(rest.trim().to_string());
            }
            if let Some(rest) = line.strip_prefix("listening on ") {
                let addr = rest.split_whitespace().next().and_then(|a| a.parse().ok());
                listen = listen.or(addr);
            }
            if line.starts_with("xdp ") {
                xdp_line = line.clone();
            }
            if line == "ready" {
                break;
            }
        }
        Steerdns {
            child,
            admin: admin.expect("admin address"),
            listen,
            xdp_line,
            namespace: namespace.map(str::to_string),
        }
    }

    fn status(&self) -> serde_json::Value {
        let bin = env!("CARGO_BIN_EXE_steerdns");
        let mut command = match &self.namespace {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, bin]);
                c
            }
            None => Command::new(bin),
        };
        let out = command
            .args(["status", "--json", "--admin", &self.admin])
            .output()
            .expect("steerdns status");
        assert!(out.status.success(), "status: {out:?}");
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }

    /// (rx, tx) summed over the XDP queues.
    fn xdp_counts(&self) -> (u64, u64) {
        let status = self.status();
        let queues = status["xdp"]["queues"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let sum = |key: &str| queues.iter().map(|q| q[key].as_u64().unwrap_or(0)).sum();
        (sum("rx"), sum("tx"))
    }
}

impl Drop for Steerdns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// steerdns with XDP attached on the server end of `pair`; fails the test, saying why, where
/// the kernel refuses XDP.
fn xdp_server(pair: &Pair, dir: &TempDir) -> Steerdns {
    let config = example_config(dir.path(), &pair.server_if);
    let listen = [format!("{SERVER_V4}:53"), format!("[{SERVER_V6}]:53")];
    let listen: Vec<&str> = listen.iter().map(String::as_str).collect();
    let server = Steerdns::start(Some(&pair.server), &config, &listen);
    let refused = server.xdp_line.contains("not serving")
        && (server.xdp_line.contains("Operation not permitted")
            || server.xdp_line.contains("Permission denied"));
    assert!(
        !refused,
        "the kernel refuses XDP here: the XDP tests need root (CAP_NET_ADMIN, CAP_BPF), as \
         under .ci/run: {:?}",
        server.xdp_line
    );
    assert!(
        server.xdp_line.starts_with("xdp on "),
        "XDP must attach on a veth in a namespace we made: {:?}",
        server.xdp_line
    );
    server
}

fn answers(dig_output: &str) -> Vec<String> {
    dig_output
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().last().unwrap_or("").to_string())
        .collect()
}

#[test]
fn udp_queries_are_answered_from_the_xdp_path_over_v4_and_v6() {
    let pair = Pair::new();
    let dir = TempDir::new("xdp");
    let server = xdp_server(&pair, &dir);
    let (rx0, tx0) = server.xdp_counts();
    let mut udp_queries = 0;
    for at in [format!("@{SERVER_V4}"), format!("@{SERVER_V6}")] {
        // Static, precompiled.
        let out = pair.dig(&[&at, "example.com", "SOA", "+norec"]);
        assert!(
            out.contains("status: NOERROR") && out.contains("flags: qr aa"),
            "{out}"
        );
        assert!(out.contains("2026113001"), "{out}");
        // ECS-steered: GB → eu-west gateway, US → na-east gateway, with the database scope.
        let out = pair.dig(&[&at, "gw.example.com", "A", "+subnet=81.2.69.160/27"]);
        assert_eq!(answers(&out), ["203.0.113.10"], "{out}");
        assert!(out.contains("CLIENT-SUBNET: 81.2.69.160/27/24"), "{out}");
        let out = pair.dig(&[&at, "gw.example.com", "A", "+subnet=216.160.83.56/29"]);
        assert_eq!(answers(&out), ["203.0.113.20"], "{out}");
        // Negative answer.
        let out = pair.dig(&[&at, "nope.example.com", "A"]);
        assert!(out.contains("status: NXDOMAIN"), "{out}");
        // Too big for UDP: TC from the XDP path, then the whole answer over TCP via the kernel.
        let out = pair.dig(&[&at, "big.example.com", "TXT"]);
        assert!(out.contains("Truncated, retrying in TCP mode"), "{out}");
        assert!(
            out.contains("(TCP)") && out.contains("status: NOERROR"),
            "{out}"
        );
        assert!(!answers(&out).is_empty(), "{out}");
        udp_queries += 5;
    }
    let (rx, tx) = server.xdp_counts();
    assert!(
        rx - rx0 >= udp_queries && tx - tx0 >= udp_queries,
        "every UDP query went through the XDP queues: rx {rx0}->{rx}, tx {tx0}->{tx}"
    );
    let status = server.status();
    assert_eq!(status["xdp"]["ports"], serde_json::json!([53]));
    assert!(status["xdp"]["error"].is_null(), "{status}");
    // One query at a time: every reply goes out in a kick of its own (a kick is deferred only
    // while more queries wait), and no kick is made with nothing to send.
    let kicks: u64 = status["xdp"]["queues"]
        .as_array()
        .map(|queues| queues.iter().filter_map(|q| q["tx_kicks"].as_u64()).sum())
        .unwrap_or(0);
    assert!(
        (udp_queries..=tx).contains(&kicks),
        "TX kicks {kicks} for {udp_queries} sequential queries and {tx} replies"
    );
}

#[test]
fn other_traffic_still_reaches_the_kernel() {
    let pair = Pair::new();
    let dir = TempDir::new("xdp-pass");
    let server = xdp_server(&pair, &dir);
    // TCP queries (and ARP/ND before them) pass through the XDP program to the kernel.
    let out = pair.dig(&[&format!("@{SERVER_V4}"), "example.com", "SOA", "+tcp"]);
    assert!(
        out.contains("status: NOERROR") && out.contains("(TCP)"),
        "{out}"
    );
    let out = pair.dig(&[&format!("@{SERVER_V6}"), "example.com", "SOA", "+tcp"]);
    assert!(out.contains("status: NOERROR"), "{out}");
    // The TCP answers did not come through the XDP queues.
    let (rx, _) = server.xdp_counts();
    assert_eq!(rx, 0, "TCP is the kernel's, not XDP's");
}

#[test]
fn without_xdp_the_server_says_why_and_serves_on_sockets() {
    // No namespace and no privilege needed: an interface that does not exist.
    let dir = TempDir::new("xdp-fallback");
    let config = example_config(dir.path(), "nosuch0");
    let server = Steerdns::start(None, &config, &["127.0.0.1:0"]);
    assert!(
        server
            .xdp_line
            .starts_with("xdp not serving: interface nosuch0"),
        "{:?}",
        server.xdp_line
    );
    let status = server.status();
    let error = status["xdp"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("nosuch0"), "status says why: {status}");
    assert!(status["xdp"]["attach"].is_null());
    // UDP is served on the socket.
    let addr = server.listen.expect("listen address");
    let out = Command::new("dig")
        .args([&format!("@{}", addr.ip()), "-p", &addr.port().to_string()])
        .args(["+time=3", "+tries=1", "example.com", "SOA"])
        .output()
        .expect("dig must be installed (bind9-dnsutils)");
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.contains("status: NOERROR") && out.contains("(UDP)"),
        "{out}"
    );
    // Metrics say it too.
    let deadline = Instant::now() + Duration::from_secs(5);
    let body = loop {
        if let Ok(b) = http_get(&server.admin, "/metrics") {
            break b;
        }
        assert!(Instant::now() < deadline, "metrics endpoint");
    };
    assert!(body.contains("steerdns_xdp_attached 0"), "{body}");
}

fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(TIMEOUT))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}
