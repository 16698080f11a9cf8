//! Helpers for the control-plane tests: a temporary copy of the bundled example (config, zones,
//! geo database, control file, admin token), the real `steerdns serve` started on loopback with
//! both its DNS and admin addresses read from its output, the operator CLI run against it,
//! a small HTTP client for the admin endpoint, and ECS queries for steered names.
//!
//! Every wait is bounded; the server is killed when its handle drops; all traffic is loopback.

#![allow(dead_code)]

pub mod load;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};

pub const BIN: &str = env!("CARGO_BIN_EXE_steerdns");
/// The admin token the copies use: at least 32 characters (shorter ones are refused).
pub const TOKEN: &str = "s3cret-admin-token-for-the-control-tests";

/// The CNAME targets of the `critical` profile's endpoints in the bundled example.
pub const FRONTDOOR: &str = "critical.edge.example.net.";
pub const ALT_CDN: &str = "critical.cdn.example.org.";
/// The bundled example's global anycast address.
pub const GLOBAL_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// A subnet the example database places in GB, i.e. region eu-west.
pub const EU_WEST_SUBNET: &str = "81.2.69.0/24";

pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

// The shared test harness (tests/common, declared once at each test binary's root), for its
// TempDir and Etcd.
pub(crate) use crate::common;
#[allow(unused_imports)]
pub use common::backend::{closed_port, Backend, Reply};
#[allow(unused_imports)]
pub use common::etcd::{Etcd, EtcdCluster};
#[allow(unused_imports)]
pub use common::prometheus::{Exporter, Prometheus};
#[allow(unused_imports)]
pub use common::tls;
pub use common::TempDir;
#[allow(unused_imports)]
pub use common::{
    a_records, ecs_query, exchange_with_retries, free_port, kdig, lines_of, mkfifo,
    self_signed_cert, spki_pin, steerdns_check, trace_text, udp_once, wait_for,
};

/// A private copy of the bundled example: `steerdns.toml` (the repo's text plus an `[admin]`
/// token file), `zones/`, `geoip/example.mmdb`, `control.toml`. The repo's own files are never
/// touched.
pub struct Setup {
    pub dir: TempDir,
    pub config: PathBuf,
}

impl Setup {
    pub fn new(label: &str) -> Setup {
        let dir = TempDir::new(label);
        let root = dir.path();
        std::fs::create_dir_all(root.join("zones")).expect("mkdir zones");
        std::fs::create_dir_all(root.join("geoip")).expect("mkdir geoip");
        for entry in std::fs::read_dir(repo_path("zones")).expect("read zones/") {
            let entry = entry.expect("zones/ entry");
            std::fs::copy(entry.path(), root.join("zones").join(entry.file_name()))
                .expect("copy zone file");
        }
        std::fs::copy(
            repo_path("geoip/example.mmdb"),
            root.join("geoip/example.mmdb"),
        )
        .expect("copy geo database");
        std::fs::copy(repo_path("control.toml"), root.join("control.toml")).expect("copy control");
        let original = std::fs::read_to_string(repo_path("steerdns.toml")).expect("steerdns.toml");
        // The bundled config names zones/, geoip/ and control.toml relative to itself, so the
        // copy resolves them inside the temp dir.
        for relative in [
            "zones = \"zones\"",
            "database = \"geoip/example.mmdb\"",
            "file = \"control.toml\"",
            "token_file = \"admin.token\"",
        ] {
            assert!(
                original.contains(relative),
                "steerdns.toml should contain `{relative}`"
            );
        }
        // Its [admin] token_file is relative too: the copy reads the test's own token.
        let config = root.join("steerdns.toml");
        std::fs::write(&config, &original).expect("write config");
        write_token(&root.join("admin.token"), TOKEN);
        Setup { dir, config }
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub fn control_path(&self) -> PathBuf {
        self.path("control.toml")
    }

    pub fn history_dir(&self) -> PathBuf {
        self.path("control.toml.history")
    }

    pub fn control_bytes(&self) -> Vec<u8> {
        std::fs::read(self.control_path()).expect("read control file")
    }

    /// Replaces the control file the way editors and config managers should: a temp file in
    /// the same directory, then a rename over the old one.
    pub fn write_control_atomically(&self, text: &str) {
        write_atomically(&self.control_path(), text.as_bytes());
    }

    /// Appends `extra` (TOML sections) to this copy's config file.
    pub fn extend_config(&self, extra: &str) {
        let text = std::fs::read_to_string(&self.config).expect("read config");
        std::fs::write(&self.config, format!("{text}\n{extra}")).expect("write config");
    }

    /// Starts `steerdns serve` on this copy: DNS on 127.0.0.1:0, admin on 127.0.0.1:0.
    pub fn start(&self) -> Daemon {
        Daemon::start(self)
    }

    /// Like [`Setup::start`], with more `serve` arguments (e.g. `--node ns2`).
    pub fn start_with(&self, extra: &[&str]) -> Daemon {
        Daemon::start_full(self, &[], extra)
    }

    /// Like [`Setup::start_with`], run under `wrapper` (e.g. `env VAR=value`).
    pub fn start_under_with(&self, wrapper: &[&str], extra: &[&str]) -> Daemon {
        Daemon::start_full(self, wrapper, extra)
    }
}

/// Appends `extra` to `setup`'s config and runs `steerdns check` on it, which must fail:
/// returns the 1-based line of the config that reads `line_text` and what check printed (for
/// the tests that a config error names file, line and field).
pub fn check_refuses_at(setup: &Setup, extra: &str, line_text: &str) -> (usize, String) {
    setup.extend_config(extra);
    let config = std::fs::read_to_string(&setup.config).expect("config");
    let line = config
        .lines()
        .position(|l| l == line_text)
        .unwrap_or_else(|| panic!("no line `{line_text}` in the config"))
        + 1;
    let (status, text) = steerdns_check(
        setup.dir.path(),
        &["--config".as_ref(), setup.config.as_os_str()],
    );
    println!("{text}");
    assert!(!status.success(), "check accepted the config:\n{text}");
    (line, text)
}

/// The command line of `steerdns serve` on `setup` (run under `wrapper`, if any, with `extra`
/// arguments): DNS and admin on 127.0.0.1:0, logging at info, stdout and stderr piped.
pub fn serve_command(setup: &Setup, wrapper: &[&str], extra: &[&str]) -> Command {
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(BIN);
            command
        }
        None => Command::new(BIN),
    };
    command
        .current_dir(setup.dir.path())
        .arg("serve")
        .arg("--config")
        .arg(&setup.config)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(extra)
        .env("STEERDNS_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Writes a token file the way the runbook says: readable by its owner only (a token every
/// user can read is refused).
pub fn write_token(path: &Path, token: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("{token}\n")).expect("write token");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod token");
}

static TMP_COUNTER: AtomicU32 = AtomicU32::new(0);

pub fn write_atomically(path: &Path, bytes: &[u8]) {
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = path.parent().expect("file in a directory");
    let tmp = dir.join(format!(".test-write-{}-{n}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).expect("write temp file");
    std::fs::rename(&tmp, path).expect("rename over the target");
}

/// Control-file text setting the `critical` endpoints' weights (the rest from the config).
pub fn critical_control(frontdoor: u32, alt_cdn: u32, appgw: u32) -> String {
    format!(
        "# written by the control tests\n\
         [profiles.critical.endpoints]\n\
         frontdoor = {{ weight = {frontdoor} }}\n\
         alt-cdn = {{ weight = {alt_cdn} }}\n\
         appgw = {{ weight = {appgw} }}\n"
    )
}

/// The running server: its process, DNS and admin addresses, and everything it printed.
pub struct Daemon {
    child: Child,
    pub dns: SocketAddr,
    pub admin: SocketAddr,
    pub config: PathBuf,
    /// What the server printed on stdout up to "ready" (zones, listeners, ...).
    pub startup: Vec<String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

const START_TIMEOUT: Duration = Duration::from_secs(10);

impl Daemon {
    pub fn start(setup: &Setup) -> Daemon {
        Daemon::start_under(setup, &[])
    }

    /// Starts the server as the last argument of `wrapper` (e.g. strace with fault injection),
    /// or directly when `wrapper` is empty. Dropping the daemon kills the wrapper's children
    /// (the server) before the wrapper itself.
    pub fn start_under(setup: &Setup, wrapper: &[&str]) -> Daemon {
        Daemon::start_full(setup, wrapper, &[])
    }

    fn start_full(setup: &Setup, wrapper: &[&str], extra: &[&str]) -> Daemon {
        let mut child = serve_command(setup, wrapper, extra)
            .spawn()
            .expect("start steerdns");
        let stdout = child.stdout.take().expect("stdout");
        let stderr_pipe = child.stderr.take().expect("stderr");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        {
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
                    if let Ok(mut lines) = stderr.lock() {
                        lines.push(line);
                    }
                }
            });
        }
        let rx = lines_of(stdout);
        let (mut dns, mut admin) = (None, None);
        let mut startup = Vec::new();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                kill_children(child.id());
                let _ = child.kill();
                let _ = child.wait();
                let err = stderr.lock().map(|l| l.join("\n")).unwrap_or_default();
                panic!("steerdns did not become ready; stderr:\n{err}");
            };
            if let Some(rest) = line.strip_prefix("listening on ") {
                let addr = rest.split_whitespace().next().expect("address");
                dns.get_or_insert(addr.parse::<SocketAddr>().expect("dns address"));
            }
            if let Some(rest) = line.strip_prefix("admin on http://") {
                admin = Some(rest.trim().parse::<SocketAddr>().expect("admin address"));
            }
            if line.starts_with("ready") {
                break;
            }
            startup.push(line);
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        Daemon {
            child,
            dns: dns.expect("a DNS listen address"),
            admin: admin.expect("an admin address"),
            config: setup.config.clone(),
            startup,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        self.stderr.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// Whether the server's log holds `needle` within `limit`: its stderr is read by another
    /// thread, so a line the server has written may not be in [`Daemon::log`] yet.
    pub fn log_shows(&self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.log().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server and waits for it.
    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The exit status if the server has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn sighup(&self) {
        sighup(self.pid());
    }

    /// The address the server printed as "`label` on ADDR" at startup (e.g. "dot").
    pub fn listener(&self, label: &str) -> SocketAddr {
        let prefix = format!("{label} on ");
        self.startup
            .iter()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|addr| addr.trim().parse().ok())
            .unwrap_or_else(|| panic!("no '{prefix}ADDR' line in {:?}", self.startup))
    }

    /// Waits (at most `limit`) until the status shows more accepted reloads than `before`.
    pub fn wait_for_accepted(&self, before: u64, limit: Duration) -> serde_json::Value {
        self.wait_for_more("reloads_accepted", before, limit, "accepted reload")
    }

    /// Waits (at most `limit`) until the status count `field` is above `before`; returns the
    /// status. Fails saying "no `missing` within …".
    fn wait_for_more(
        &self,
        field: &str,
        before: u64,
        limit: Duration,
        missing: &str,
    ) -> serde_json::Value {
        let deadline = Instant::now() + limit;
        loop {
            let status = self.status();
            if status[field].as_u64().unwrap_or(0) > before {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no {missing} within {limit:?}; status: {status:#}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `steerdns load push FILE` against this server, the feed `body` written to a file in
    /// `setup`'s directory first.
    pub fn push_load(&self, setup: &Setup, body: &str) -> Output {
        let path = setup.path("pushed-feed.json");
        std::fs::write(&path, body).expect("write feed to push");
        self.cli(&["load", "push", &path.display().to_string()])
    }

    /// `GET /v1/status`, parsed.
    /// Polls the status until `ready` holds (at most `limit`); returns that status. A timeout
    /// fails with the shield's status and the server's log.
    pub fn wait_for_status(
        &self,
        what: &str,
        limit: Duration,
        ready: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + limit;
        loop {
            let status = self.status();
            if ready(&status) {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {limit:?}; shield status: {:#}\nserver log:\n{}",
                status["shield"],
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The shield ticks run so far (`shield.ticks` in the status).
    pub fn shield_ticks(&self) -> u64 {
        let status = self.status();
        status["shield"]["ticks"]
            .as_u64()
            .unwrap_or_else(|| panic!("no shield.ticks in the status: {status:#}"))
    }

    /// Waits until the shield has run `more` ticks after this call (at most `limit`);
    /// returns the status then. What "N ticks later" means, without guessing at a sleep.
    pub fn wait_for_shield_ticks(&self, more: u64, limit: Duration) -> serde_json::Value {
        let target = self.shield_ticks() + more;
        self.wait_for_status(&format!("{more} more shield ticks"), limit, |s| {
            s["shield"]["ticks"].as_u64() >= Some(target)
        })
    }

    /// Waits until the control file has been checked `more` times after this call (watcher
    /// events and the backstop poll, `control_checks` in the status); returns the status then.
    /// Two checks after a write means one began after it: "the server has looked".
    pub fn wait_for_control_checks(&self, more: u64, limit: Duration) -> serde_json::Value {
        let checks = |s: &serde_json::Value| {
            s["control_checks"]
                .as_u64()
                .unwrap_or_else(|| panic!("no control_checks in the status: {s:#}"))
        };
        let target = checks(&self.status()) + more;
        self.wait_for_status(&format!("{more} more control file checks"), limit, |s| {
            checks(s) >= target
        })
    }

    pub fn status(&self) -> serde_json::Value {
        let (code, body) = http(self.admin, "GET", "/v1/status", None);
        assert_eq!(code, 200, "GET /v1/status: {body}");
        serde_json::from_str(&body).expect("status is JSON")
    }

    /// `GET /v1/status`, or None if the admin endpoint does not answer.
    pub fn try_status(&self) -> Option<serde_json::Value> {
        let (code, body) = try_http(self.admin, "GET", "/v1/status", None).ok()?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }

    pub fn serial(&self) -> u64 {
        self.status()["serial"].as_u64().expect("serial")
    }

    pub fn refused(&self) -> u64 {
        self.status()["reloads_refused"]
            .as_u64()
            .expect("reloads_refused")
    }

    pub fn accepted(&self) -> u64 {
        self.status()["reloads_accepted"]
            .as_u64()
            .expect("reloads_accepted")
    }

    /// The reasons of the last refusal, one string per problem (empty if none).
    pub fn refusal_reasons(&self) -> Vec<String> {
        refusal_reasons(&self.status())
    }

    /// Runs an operator command against this server: `steerdns <args> --config F --admin A`.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .arg("--admin")
            .arg(self.admin.to_string())
            .env("STEERDNS_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("run steerdns")
    }

    /// Waits (at most `limit`) until the status shows more refusals than `before`; returns it.
    pub fn wait_for_refusal(&self, before: u64, limit: Duration) -> serde_json::Value {
        self.wait_for_more("reloads_refused", before, limit, "refusal reported")
    }

    /// Waits (at most `limit`) until the status serial differs from `old`; returns the new one.
    pub fn wait_for_serial_change(&self, old: u64, limit: Duration) -> u64 {
        let deadline = Instant::now() + limit;
        loop {
            let serial = self.serial();
            if serial != old {
                return serial;
            }
            assert!(
                Instant::now() < deadline,
                "serial still {old} after {limit:?}; status: {:#}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for a refusal after `refused_before` (see [`Daemon::wait_for_refusal`]), prints its
    /// reasons and asserts that one of them holds every `expected` fragment; returns the status
    /// and the reasons.
    pub fn expect_refusal(
        &self,
        refused_before: u64,
        limit: Duration,
        expected: &[&str],
        what: &str,
    ) -> (serde_json::Value, Vec<String>) {
        let status = self.wait_for_refusal(refused_before, limit);
        let reasons = refusal_reasons(&status);
        println!("{what}: refused: {reasons:?}");
        assert!(
            reasons
                .iter()
                .any(|r| expected.iter().all(|e| r.contains(e))),
            "{what}: expected a reason containing {expected:?}, got {reasons:?}"
        );
        (status, reasons)
    }

    /// `CH TXT serial.steerdns`: the text answer.
    pub fn chaos_serial(&self) -> String {
        let mut message = plain_query("serial.steerdns.", RecordType::TXT);
        message.queries[0].set_query_class(DNSClass::CH);
        let response = Resolver::new(self.dns).ask(&message);
        response
            .answers
            .iter()
            .find_map(|r| match &r.data {
                RData::TXT(txt) => Some(txt.to_string()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no TXT in the CH serial answer: {response:?}"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        kill_children(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Kills a wrapper's children (the server under strace): a killed tracer would leave its
/// tracee running.
fn kill_children(pid: u32) {
    for child in child_pids(pid) {
        if let Ok(pid) = libc::pid_t::try_from(child) {
            // SAFETY: kill(2) only sends a signal, to a process this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The direct children of process `pid` (from /proc; empty if it has none or is gone).
fn child_pids(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Sends SIGHUP to `pid` (directly, so that it arrives as soon as possible).
pub fn sighup(pid: u32) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: kill(2) only sends a signal; `pid` is a child process this test started.
    let result = unsafe { libc::kill(pid, libc::SIGHUP) };
    assert_eq!(result, 0, "kill -HUP {pid} failed");
}

pub fn refusal_reasons(status: &serde_json::Value) -> Vec<String> {
    status["last_refusal"]["reasons"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts the command succeeded and returns its stdout.
pub fn ok(output: &Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        stdout(output),
        stderr(output)
    );
    stdout(output)
}

const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// One HTTP/1.1 request to the admin endpoint; returns (status code, body).
pub fn http(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    try_http(addr, method, path, token).unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"))
}

/// Like [`http`], with failures as values (for a server that may have died).
pub fn try_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n"
    );
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    head.push_str("\r\n");
    send_http(addr, head.as_bytes())
}

/// Sends `request` (head and whatever body, as given) and reads the reply until the server
/// closes the connection or [`HTTP_TIMEOUT`] passes without a byte; returns (code, body), the
/// body de-chunked.
pub fn send_http(addr: SocketAddr, request: &[u8]) -> Result<(u16, String), String> {
    let reply = exchange_http(addr, request, HTTP_TIMEOUT)?;
    let chunked = reply
        .head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(&reply.body)
    } else {
        reply.body
    };
    Ok((reply.code, body))
}

/// The body of a `Transfer-Encoding: chunked` reply, its chunks joined (stops at the last
/// chunk or at the first malformed size). Raw exchanges only: steerdns's own client is hyper's.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// One HTTP/1.1 request with a JSON `body`, as bytes to send.
pub fn json_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> Vec<u8> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    request
}

/// An HTTP reply as read: the status code, the head (status line and headers) and the body as
/// sent (not de-chunked).
pub struct RawReply {
    pub code: u16,
    pub head: String,
    pub body: String,
}

/// Sends `request` and reads the reply (at most 4 MiB) until the server closes the connection
/// or `wait` passes without a byte.
pub fn exchange_http(addr: SocketAddr, request: &[u8], wait: Duration) -> Result<RawReply, String> {
    let mut stream = TcpStream::connect_timeout(&addr, wait).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(wait))
        .map_err(|e| e.to_string())?;
    stream.write_all(request).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream
        .take(1 << 22)
        .read_to_end(&mut raw)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP head in {text:?}"))?;
    let code = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP status in {head:?}"))?;
    Ok(RawReply {
        code,
        head: head.to_string(),
        body: body.to_string(),
    })
}

/// One `GET /metrics` from the admin endpoint at `admin`, parsed.
pub fn scrape_metrics(admin: SocketAddr) -> prometheus_parse::Scrape {
    let (code, body) = http(admin, "GET", "/metrics", None);
    assert_eq!(code, 200, "GET /metrics: {body}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("the exposition parses")
}

/// The samples of `metric` in `scrape` with exactly `labels`.
pub fn samples_with<'a>(
    scrape: &'a prometheus_parse::Scrape,
    metric: &str,
    labels: &[(&str, &str)],
) -> Vec<&'a prometheus_parse::Sample> {
    scrape
        .samples
        .iter()
        .filter(|s| {
            s.metric == metric
                && s.labels.len() == labels.len()
                && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        })
        .collect()
}

/// A query with RD clear and no EDNS.
pub fn plain_query(name: &str, rtype: RecordType) -> Message {
    let mut message = Message::query();
    message.metadata.recursion_desired = false;
    let mut q = Query::query(Name::from_ascii(name).expect("name"), rtype);
    q.set_query_class(DNSClass::IN);
    message.add_query(q);
    message
}

/// The addresses gw.example.com (geo profile appgw) gives an eu-west client: the EU gateway
/// with a working geo database, the NA one (default region na-east) without.
pub fn eu_gateway(resolver: &mut Resolver) -> Vec<Ipv4Addr> {
    a_records(&resolver.ask(&ecs_query("gw.example.com.", RecordType::A, EU_WEST_SUBNET)))
}

/// `n` distinct /24 client subnets spread over the IPv4 space (none in 127/8 or 0/8).
pub fn distinct_subnets(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let a = 1 + (i * 37) % 126;
            let b = (i * 101) % 256;
            let c = i % 256;
            format!("{a}.{b}.{c}.0/24")
        })
        .collect()
}

/// `n` distinct /24s in RIPE /8s the example database places in Europe (continent EU, no
/// country: region eu-west), located by their /8. 2/8, 81/8 and 89/8 are left out: they hold
/// the database's GB and SE networks, which make it locate their neighbours by longer prefixes.
pub fn eu_west_subnets(n: usize) -> Vec<String> {
    const RIPE: [u8; 20] = [
        5, 31, 37, 46, 62, 77, 78, 79, 80, 82, 83, 84, 85, 86, 87, 88, 90, 91, 92, 93,
    ];
    (0..n)
        .map(|i| {
            let a = RIPE[i % RIPE.len()];
            let b = (i / RIPE.len()) % 256;
            let c = (i * 37 + 11) % 256;
            format!("{a}.{b}.{c}.0/24")
        })
        .collect()
}

/// A `CH TXT` decision-trace query for `name` as asked from `subnet`.
pub fn trace_query(name: &str, subnet: &str) -> Message {
    let mut message = ecs_query(name, RecordType::TXT, subnet);
    message.queries[0].set_query_class(DNSClass::CH);
    message
}

pub fn first_cname(response: &Message) -> Option<String> {
    response.answers.iter().find_map(|r| match &r.data {
        RData::CNAME(c) => Some(c.0.to_ascii()),
        _ => None,
    })
}

/// A UDP client on loopback that matches replies by id and retries lost datagrams.
pub struct Resolver {
    socket: UdpSocket,
    server: SocketAddr,
    next_id: u16,
}

const ATTEMPTS: usize = 3;
const ATTEMPT_WAIT: Duration = Duration::from_millis(1000);
/// Queries in flight at once in [`Resolver::ask_all`].
const WINDOW: usize = 50;

impl Resolver {
    pub fn new(server: SocketAddr) -> Resolver {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind client socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("read timeout");
        Resolver {
            socket,
            server,
            next_id: 1,
        }
    }

    /// The answer to an `A` query for `name` from each subnet (ECS), in order.
    pub fn ask_a_from_each(&mut self, name: &str, subnets: &[String]) -> Vec<Message> {
        let queries: Vec<Message> = subnets
            .iter()
            .map(|s| ecs_query(name, RecordType::A, s))
            .collect();
        self.ask_all(&queries)
    }

    pub fn ask(&mut self, query: &Message) -> Message {
        self.ask_all(std::slice::from_ref(query))
            .pop()
            .expect("one answer")
    }

    /// Answers to every query, in order; at most [`WINDOW`] in flight; a query unanswered
    /// after [`ATTEMPTS`] sends fails the test.
    pub fn ask_all(&mut self, queries: &[Message]) -> Vec<Message> {
        let mut answers: Vec<Option<Message>> = Vec::with_capacity(queries.len());
        for chunk in queries.chunks(WINDOW) {
            let mut by_id = HashMap::new();
            let mut packets = Vec::new();
            for (i, q) in chunk.iter().enumerate() {
                let id = self.next_id;
                self.next_id = self.next_id.wrapping_add(1);
                let mut q = q.clone();
                q.metadata.id = id;
                by_id.insert(id, i);
                packets.push(q.to_vec().expect("encode query"));
            }
            answers.extend(exchange_with_retries(
                &self.socket,
                self.server,
                &packets,
                ATTEMPTS,
                ATTEMPT_WAIT,
                |message| by_id.get(&message.metadata.id).copied(),
            ));
        }
        answers
            .into_iter()
            .enumerate()
            .map(|(i, a)| a.unwrap_or_else(|| panic!("no answer to {:?}", queries[i])))
            .collect()
    }
}

/// The first CNAME target of `critical.example.com` for each subnet (None: no CNAME).
pub fn critical_targets(resolver: &mut Resolver, subnets: &[String]) -> Vec<Option<String>> {
    resolver
        .ask_a_from_each("critical.example.com.", subnets)
        .iter()
        .map(first_cname)
        .collect()
}

/// Asserts every subnet is answered `target` for `critical.example.com` now.
pub fn assert_all_critical(resolver: &mut Resolver, subnets: &[String], target: &str) {
    assert_all_target(&critical_targets(resolver, subnets), subnets, target);
}

/// Asserts every subnet gets `target`, naming the ones that do not.
pub fn assert_all_target(targets: &[Option<String>], subnets: &[String], target: &str) {
    let wrong: Vec<String> = targets
        .iter()
        .zip(subnets)
        .filter(|(t, _)| t.as_deref() != Some(target))
        .map(|(t, s)| format!("{s} -> {t:?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} subnets did not get {target}: {:?}",
        wrong.len(),
        subnets.len(),
        &wrong[..wrong.len().min(10)]
    );
}

/// Polls until every subnet gets `target`, at most `limit`; returns how long it took from
/// `since`.
pub fn wait_all_target(
    resolver: &mut Resolver,
    subnets: &[String],
    target: &str,
    since: Instant,
    limit: Duration,
) -> Duration {
    loop {
        let targets = critical_targets(resolver, subnets);
        if targets.iter().all(|t| t.as_deref() == Some(target)) {
            return since.elapsed();
        }
        if since.elapsed() > limit {
            assert_all_target(&targets, subnets, target);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// True when this process runs as root (permission bits do not stop root from reading).
pub fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// A load feed measured at `time` (RFC 3339) from `source`: eu-west at `eu_west_load` of 1000,
/// eu-north, na-east and the fallback site fb-eu with room to spare.
pub fn eu_west_feed(time: &str, eu_west_load: f64, source: &str) -> String {
    serde_json::json!({
        "time": time,
        "source": source,
        "regions": {
            "eu-west": {"load": eu_west_load, "capacity": 1000},
            "eu-north": {"load": 120, "capacity": 600},
            "na-east": {"load": 100, "capacity": 1000},
        },
        "fallback": {"fb-eu": {"load": 200, "capacity": 2000}},
    })
    .to_string()
}

/// A load feed for every region and fallback site of the bundled example, measured now, from
/// `source`: eu-west at `eu_west_load` of 1000, eu-north 200/600, fb-eu 100/2000, every other
/// region and site at about half its capacity.
pub fn every_region_feed(eu_west_load: f64, source: &str) -> serde_json::Value {
    serde_json::json!({
        "time": steerdns::rfc3339::format_utc(std::time::SystemTime::now()),
        "source": source,
        "regions": {
            "na-east": {"load": 500, "capacity": 1000},
            "na-west": {"load": 400, "capacity": 800},
            "sa-east": {"load": 150, "capacity": 300},
            "eu-west": {"load": eu_west_load, "capacity": 1000},
            "eu-north": {"load": 200, "capacity": 600},
            "af-south": {"load": 100, "capacity": 200},
            "ap-east": {"load": 450, "capacity": 900},
            "ap-south": {"load": 250, "capacity": 500},
        },
        "fallback": {
            "fb-na": {"load": 1000, "capacity": 2000},
            "fb-eu": {"load": 100, "capacity": 2000},
            "fb-ap": {"load": 1000, "capacity": 2000},
        }
    })
}

/// A server on a private copy with break-glass active: every subnet asked answered alt-cdn,
/// which differs from the config's own weights (frontdoor), so that "the old answers are still
/// served" cannot be confused with "fell back to the config".
pub struct BreakGlass {
    pub setup: Setup,
    pub server: Daemon,
    pub resolver: Resolver,
    pub subnets: Vec<String>,
}

impl BreakGlass {
    /// Writes the break-glass control file (critical → alt-cdn) for `server` running on `setup`
    /// and waits (at most `within`) until `subnets` distinct subnets are all answered alt-cdn.
    pub fn engage(setup: Setup, server: Daemon, subnets: usize, within: Duration) -> BreakGlass {
        let mut resolver = Resolver::new(server.dns);
        let subnets = distinct_subnets(subnets);
        let written = Instant::now();
        setup.write_control_atomically(&critical_control(0, 100, 0));
        wait_all_target(&mut resolver, &subnets, ALT_CDN, written, within);
        BreakGlass {
            setup,
            server,
            resolver,
            subnets,
        }
    }

    /// Writes the config's own weights (critical → frontdoor) as the control file and waits (at
    /// most `within`) until every subnet is answered frontdoor.
    pub fn release(&mut self, within: Duration) {
        let written = Instant::now();
        self.setup
            .write_control_atomically(&critical_control(100, 0, 0));
        wait_all_target(
            &mut self.resolver,
            &self.subnets,
            FRONTDOOR,
            written,
            within,
        );
    }
}

/// One admin request with a body, a content type and an optional `If-Match`; (code, body).
pub fn request(
    server: &Daemon,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    if_match: Option<&str>,
    body: &str,
) -> (u16, String) {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n",
        server.admin,
        body.len()
    );
    if let Some(content_type) = content_type {
        head.push_str(&format!("Content-Type: {content_type}\r\n"));
    }
    if let Some(tag) = if_match {
        head.push_str(&format!("If-Match: {tag}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    send_http(server.admin, &bytes).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}
