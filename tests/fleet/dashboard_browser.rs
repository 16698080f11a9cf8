//! The live dashboard in a real browser: the real server on loopback, a load feed pushed over
//! `POST /v1/load` that overloads eu-west, then headless Chromium (Debian's `/usr/bin/chromium`,
//! which `.ci/run` installs) loads `http://ADMIN/`, runs the page's script and dumps the DOM it
//! drew; the test checks that eu-west is shown shedding towards its destinations, and saves a
//! screenshot to `<target dir>/test-output/dashboard.png`. A one-node fleet on a real etcd
//! with a monitored backend shows shared probing: the probers, each target's votes and quorum,
//! and, once etcd is gone, the fail-static view and its alert.
//!
//! A missing Chromium fails the test (it does not skip). Every wait is bounded: the browser is
//! killed, with its whole process group, after [`BROWSER_LIMIT`]. All traffic is loopback.

use crate::control_common;
use crate::fleet_common;

use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use control_common::{exchange_http, json_request, Backend, Daemon, Etcd, Setup, TempDir, TOKEN};

const CHROMIUM: &str = "/usr/bin/chromium";
/// Longest one browser run may take before it is killed.
const BROWSER_LIMIT: Duration = Duration::from_secs(30);
/// How long the shield may take to start shedding after the feed (it ticks once a second).
const SHED_LIMIT: Duration = Duration::from_secs(15);
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for the browser's output pipes to close once it is gone.
const PIPE_LIMIT: Duration = Duration::from_secs(5);

/// eu-west at 99% (above the 85% high watermark); its neighbour eu-north and the fallback site
/// fb-eu have room. Time is now, so the feed is fresh.
fn overload_feed() -> String {
    let now = steerdns::rfc3339::format_utc(SystemTime::now());
    format!(
        r#"{{"time": "{now}", "source": "dashboard-browser-test",
            "regions": {{"eu-west": {{"load": 990, "capacity": 1000}},
                         "eu-north": {{"load": 200, "capacity": 600}}}},
            "fallback": {{"fb-eu": {{"load": 100, "capacity": 2000}}}}}}"#
    )
}

/// A response: status code, header lines (lower-cased names), body.
struct Reply {
    code: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with a body (the shared helper sends none); fixed-length replies only.
fn request(addr: SocketAddr, method: &str, path: &str, token: Option<&str>, body: &str) -> Reply {
    let request = json_request(addr, method, path, token, body.as_bytes());
    let reply = exchange_http(addr, &request, HTTP_TIMEOUT)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"));
    let headers: Vec<(String, String)> = reply
        .head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    assert!(
        !headers
            .iter()
            .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked")),
        "{method} {path}: chunked reply, which this test client does not read"
    );
    Reply {
        code: reply.code,
        headers,
        body: reply.body,
    }
}

fn push_overload(daemon: &Daemon) {
    let reply = request(
        daemon.admin,
        "POST",
        "/v1/load",
        Some(TOKEN),
        &overload_feed(),
    );
    assert_eq!(reply.code, 200, "POST /v1/load: {}", reply.body);
}

/// eu-west's entry in `shield.regions` of a status.
fn region<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["shield"]["regions"]
        .as_array()
        .and_then(|regions| regions.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("no region {name} in status: {status:#}"))
}

/// Waits (bounded) until status shows eu-west shedding; returns that status.
fn wait_for_eu_west_shedding(daemon: &Daemon) -> serde_json::Value {
    let deadline = Instant::now() + SHED_LIMIT;
    loop {
        let status = daemon.status();
        let eu_west = region(&status, "eu-west");
        if eu_west["state"] == "shedding" && eu_west["shed_fraction"].as_f64().unwrap_or(0.0) > 0.0
        {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "eu-west not shedding {SHED_LIMIT:?} after the feed; status: {status:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Where screenshots go: `<target dir>/test-output/` (created).
fn test_output_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target dir")
        .join("test-output");
    std::fs::create_dir_all(&dir).expect("create test-output dir");
    dir
}

/// What one browser run printed.
struct BrowserRun {
    stdout: String,
    stderr: String,
}

/// Runs headless Chromium with `args` after the fixed hardening flags, in a fresh profile dir
/// and its own process group; kills the group if it is not done within [`BROWSER_LIMIT`].
fn chromium(args: &[String]) -> BrowserRun {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: the dashboard test needs Debian's chromium \
         (`apt-get install -y chromium chromium-driver`; .ci/run installs it)"
    );
    let profile = TempDir::new("chromium-profile");
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--no-proxy-server",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        // Keep Chromium's caches and config inside the temp dir, not the user's home.
        .env("HOME", profile.path())
        .env("XDG_CONFIG_HOME", profile.path())
        .env("XDG_CACHE_HOME", profile.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("start {CHROMIUM}: {e}"));
    let group = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    let mut stdout_pipe = child.stdout.take().expect("stdout piped");
    let mut stderr_pipe = child.stderr.take().expect("stderr piped");
    let stdout = read_in_background(move |text| stdout_pipe.read_to_string(text));
    let stderr = read_in_background(move |text| stderr_pipe.read_to_string(text));
    let deadline = Instant::now() + BROWSER_LIMIT;
    let exit = loop {
        if let Some(exit) = child.try_wait().expect("poll chromium") {
            break Some(exit);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The whole group: renderer, GPU and utility processes too. Safe after a normal exit:
    // a group id is not reused while any member lives, and an empty group is just ESRCH.
    // SAFETY: kill(2) only sends a signal, to the process group this test created.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = child.wait();
    // Bounded too: a helper process that escaped the group could hold a pipe open.
    let run = BrowserRun {
        stdout: stdout.recv_timeout(PIPE_LIMIT).unwrap_or_default(),
        stderr: stderr.recv_timeout(PIPE_LIMIT).unwrap_or_default(),
    };
    match exit {
        None => panic!(
            "chromium did not finish within {BROWSER_LIMIT:?}; killed. stderr:\n{}",
            run.stderr
        ),
        Some(exit) => assert!(
            exit.success(),
            "chromium failed ({exit}); stderr:\n{}",
            run.stderr
        ),
    }
    run
}

/// Reads a pipe to its end on a thread; the text arrives on the returned channel.
fn read_in_background(
    read: impl FnOnce(&mut String) -> std::io::Result<usize> + Send + 'static,
) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = read(&mut text);
        let _ = tx.send(text);
    });
    rx
}

/// The serialized element that carries `attribute` (e.g. `data-region="eu-west"`): from its
/// opening tag to the first `</closing>` after it.
fn element<'a>(dom: &'a str, attribute: &str, closing: &str) -> &'a str {
    let at = dom
        .find(attribute)
        .unwrap_or_else(|| panic!("no element with {attribute} in the page:\n{dom}"));
    let start = dom[..at].rfind('<').expect("an opening tag");
    let end = dom[at..]
        .find(closing)
        .map_or(dom.len(), |e| at + e + closing.len());
    &dom[start..end]
}

/// The text of some markup: tags removed, the few entities the serializer writes decoded,
/// whitespace collapsed.
fn text_of(markup: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in markup.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                text.push(' ');
            }
            _ if !in_tag => text.push(c),
            _ => {}
        }
    }
    let text = text
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The value of `name="…"` in an opening tag.
fn attribute<'a>(markup: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("{name}=\"");
    let start = markup.find(&key)? + key.len();
    let end = markup[start..].find('"')?;
    Some(&markup[start..start + end])
}

#[test]
fn the_page_and_its_assets_are_served_with_a_strict_policy() {
    let setup = Setup::new("dashboard-headers");
    let daemon = setup.start();
    for (path, content_type) in [
        ("/", "text/html"),
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/style.css", "text/css"),
    ] {
        let reply = request(daemon.admin, "GET", path, None, "");
        assert_eq!(reply.code, 200, "GET {path}: {}", reply.body);
        let served_type = reply.header("content-type").unwrap_or("");
        assert!(
            served_type.starts_with(content_type),
            "GET {path}: content-type {served_type:?}, expected {content_type}"
        );
        let policy = reply
            .header("content-security-policy")
            .unwrap_or_else(|| panic!("GET {path}: no Content-Security-Policy"));
        assert!(
            policy.starts_with("default-src 'self'"),
            "GET {path}: {policy}"
        );
        assert!(!policy.contains("unsafe"), "GET {path}: {policy}");
        assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
        assert!(!reply.body.is_empty(), "GET {path}: empty body");
    }
    let page = request(daemon.admin, "GET", "/", None, "").body;
    assert!(page.contains("dashboard/app.js") && page.contains("dashboard/style.css"));
    assert!(
        page.contains("Read-only"),
        "the page should say it is read-only"
    );
    // The page is read-only: the dashboard adds no write route (even with the token, which
    // every write is checked for first), and writes still need the token.
    let reply = request(daemon.admin, "POST", "/", None, "");
    assert_eq!(reply.code, 401, "POST / without token: {}", reply.body);
    let reply = request(daemon.admin, "POST", "/", Some(TOKEN), "");
    assert_eq!(
        reply.code, 405,
        "POST / should not be allowed: {}",
        reply.body
    );
    let reply = request(daemon.admin, "POST", "/v1/load", None, &overload_feed());
    assert_eq!(
        reply.code, 401,
        "POST /v1/load without token: {}",
        reply.body
    );
}

#[test]
fn chromium_shows_eu_west_shedding_to_its_destinations() {
    let setup = Setup::new("dashboard-browser");
    let daemon = setup.start();
    push_overload(&daemon);
    let status = wait_for_eu_west_shedding(&daemon);
    let destinations: Vec<String> = region(&status, "eu-west")["destinations"]
        .as_array()
        .expect("destinations")
        .iter()
        .filter_map(|d| d[0].as_str().map(str::to_string))
        .collect();
    assert!(
        destinations.iter().any(|d| d == "eu-north"),
        "the shield should shed eu-west towards its neighbour eu-north: {status:#}"
    );
    let url = format!("http://{}/", daemon.admin);

    // Fresh numbers for the browser (the feed goes stale after 30 s).
    push_overload(&daemon);
    let run = chromium(&[
        "--virtual-time-budget=5000".into(),
        "--dump-dom".into(),
        url.clone(),
    ]);
    let dom = &run.stdout;
    let body = element(dom, "data-connection=", ">");
    assert_eq!(
        attribute(body, "data-connection"),
        Some("ok"),
        "the page did not read /v1/status; connection line: {}\nchromium stderr:\n{}",
        text_of(element(dom, "id=\"connection\"", "</p>")),
        run.stderr
    );
    // The script logs nothing itself: any console line is a policy violation or an uncaught
    // error.
    let console: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .collect();
    assert!(
        console.is_empty(),
        "the page logged to the console:\n{}",
        console.join("\n")
    );

    let eu_west = element(dom, "data-region=\"eu-west\"", "</tr>");
    let row_text = text_of(eu_west);
    assert_eq!(
        attribute(eu_west, "data-state"),
        Some("shedding"),
        "{row_text}"
    );
    let shed: f64 = attribute(eu_west, "data-shed")
        .and_then(|s| s.parse().ok())
        .expect("data-shed is a number");
    assert!(shed > 0.0 && shed <= 1.0, "eu-west shed {shed}: {row_text}");
    assert!(row_text.contains("shedding"), "{row_text}");
    assert!(
        row_text.contains("99% (990 / 1000)"),
        "eu-west utilisation not shown: {row_text}"
    );
    assert!(
        row_text.contains("eu-west \u{2192} eu-north"),
        "no arrow from eu-west to eu-north: {row_text}"
    );
    for destination in &destinations {
        assert!(
            row_text.contains(destination.as_str()),
            "destination {destination} missing: {row_text}"
        );
    }

    let eu_north = element(dom, "data-region=\"eu-north\"", "</tr>");
    assert_eq!(attribute(eu_north, "data-state"), Some("normal"));
    assert!(
        text_of(eu_north).contains("receiving from eu-west"),
        "{}",
        text_of(eu_north)
    );
    let fb_eu = text_of(element(dom, "data-site=\"fb-eu\"", "</tr>"));
    assert!(fb_eu.contains("5% (100 / 2000)"), "{fb_eu}");

    let serial = status["serial"].as_u64().expect("serial");
    let control = text_of(element(dom, "id=\"control\"", "</dl>"));
    assert!(
        control.contains(&format!("Serial {serial}")),
        "control serial not shown: {control}"
    );
    let profiles = text_of(element(dom, "data-profile=\"critical\"", "</table>"));
    assert!(
        profiles.contains("frontdoor 100 (100%) enabled"),
        "critical profile weights not shown: {profiles}"
    );

    // The picture, for people (and the CI artefacts).
    let screenshot = test_output_dir().join("dashboard.png");
    let _ = std::fs::remove_file(&screenshot);
    push_overload(&daemon);
    chromium(&[
        "--virtual-time-budget=5000".into(),
        "--window-size=1280,900".into(),
        format!("--screenshot={}", screenshot.display()),
        url,
    ]);
    let png = std::fs::read(&screenshot)
        .unwrap_or_else(|e| panic!("no screenshot at {}: {e}", screenshot.display()));
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} is not a plausible PNG ({} bytes)",
        screenshot.display(),
        png.len()
    );
    println!("dashboard screenshot: {}", screenshot.display());
}

#[test]
fn chromium_shows_the_encrypted_transports_and_an_expiring_certificate() {
    let setup = Setup::new("dashboard-encrypted");
    // 20 days: inside the 30-day expiry warning.
    let (cert, key) = control_common::self_signed_cert(setup.dir.path(), "server", 20);
    setup.extend_config(&format!(
        "[server.tls]\ncert = {:?}\nkey = {:?}\ndot = [\"127.0.0.1:0\"]\ndoh = [\"127.0.0.1:0\"]\n",
        cert.display().to_string(),
        key.display().to_string()
    ));
    let daemon = setup.start();
    let dot = daemon.listener("dot");
    let doh = daemon.listener("doh");
    for _ in 0..2 {
        let (ok, out) = control_common::kdig(dot, &["+tls", "example.com", "SOA"]);
        assert!(ok, "kdig +tls: {out}");
    }

    let run = chromium(&[
        "--virtual-time-budget=5000".into(),
        "--dump-dom".into(),
        format!("http://{}/", daemon.admin),
    ]);
    let dom = &run.stdout;
    assert_eq!(
        attribute(element(dom, "data-connection=", ">"), "data-connection"),
        Some("ok"),
        "the page did not read /v1/status; chromium stderr:\n{}",
        run.stderr
    );
    // Transport, listener, queries, connections, turned away.
    let tls = text_of(element(dom, "data-transport=\"tls\"", "</tr>"));
    assert_eq!(
        tls,
        format!("tls {dot} 2 0 open, 2 accepted none"),
        "DoT row"
    );
    let https = text_of(element(dom, "data-transport=\"https\"", "</tr>"));
    assert_eq!(
        https,
        format!("https {doh} 0 0 open, 0 accepted none"),
        "DoH row"
    );
    let quic = text_of(element(dom, "data-transport=\"quic\"", "</tr>"));
    assert!(quic.contains("not listening"), "DoQ row: {quic}");
    let certificate = element(dom, "class=\"certificate\"", "</p>");
    let days: i64 = attribute(certificate, "data-days-left")
        .and_then(|d| d.parse().ok())
        .expect("data-days-left is a number");
    assert!((19..=20).contains(&days), "{}", text_of(certificate));
    assert!(
        text_of(certificate).contains("the certificate expires in"),
        "the expiry warning is not shown: {}",
        text_of(certificate)
    );
    let alerts = text_of(element(dom, "id=\"alerts\"", "</ul>"));
    assert!(
        alerts.contains("server.pem: the certificate expires in"),
        "the expiry is not among the alerts: {alerts}"
    );
}

#[test]
fn chromium_shows_shared_probing_and_the_fail_static_view() {
    let backend = Backend::start();
    let mut etcd = Etcd::start();
    let setup = Setup::new("dashboard-sharing");
    setup.extend_config(&fleet_common::fleet_section(
        &etcd.endpoint(),
        "/steerdns/dash",
        2,
    ));
    setup.extend_config(&format!(
        "site = \"ams\"\n{}",
        fleet_common::monitored_failover("shared", &backend.url())
    ));
    let daemon = setup.start_with(&["--node", "ns1"]);
    daemon.wait_for_status("the fleet's quorum says up", SHED_LIMIT, |s| {
        s["health"]["targets"][0]["shared"]["decided_by"] == "quorum"
            && s["health"]["targets"][0]["state"] == "up"
    });
    etcd.stop();
    daemon.wait_for_status("fail-static after etcd stopped", SHED_LIMIT, |s| {
        s["health"]["sharing"]["fail_static"] == true
    });
    let run = chromium(&[
        "--virtual-time-budget=5000".into(),
        "--dump-dom".into(),
        format!("http://{}/", daemon.admin),
    ]);
    let dom = &run.stdout;
    let sharing = text_of(element(dom, "class=\"sharing\"", "</p>"));
    assert!(
        sharing.contains("2 prober(s) per target")
            && sharing.contains("serving the last shared view (fail-static)")
            && sharing.contains("Probers: ns1 (ams)"),
        "{sharing}"
    );
    let target = text_of(element(
        dom,
        &format!("data-target=\"{}\"", backend.url()),
        "</tr>",
    ));
    assert!(
        target.contains("ns1 up; 0/1 down, down at 1 (quorum)"),
        "{target}"
    );
    let alerts = text_of(element(dom, "id=\"alerts\"", "</ul>"));
    assert!(
        alerts.contains("health sharing: etcd unreachable"),
        "{alerts}"
    );
}

/// Issue 30: the dashboard shows the tenant count and each refused tenant (also as an alert).
#[test]
fn chromium_shows_the_tenants_and_a_refused_one() {
    let setup = Setup::new("dashboard-tenants");
    let dir = setup.path("tenants");
    std::fs::create_dir_all(&dir).expect("mkdir tenants");
    for name in ["dash1", "dash2"] {
        std::fs::write(
            dir.join(format!("{name}.toml")),
            format!("names = [\"{name}.edge.example.net.\"]\nttl = 90\n"),
        )
        .expect("write tenant");
    }
    std::fs::write(
        dir.join("dashbad.toml"),
        "names = [\"dashbad.edge.example.net.\"]\nttl = 4294967295\n",
    )
    .expect("write tenant");
    let daemon = setup.start();
    let run = chromium(&[
        "--virtual-time-budget=5000".into(),
        "--dump-dom".into(),
        format!("http://{}/", daemon.admin),
    ]);
    let dom = &run.stdout;
    assert_eq!(
        attribute(element(dom, "data-connection=", ">"), "data-connection"),
        Some("ok"),
        "the page did not read /v1/status; chromium stderr:\n{}",
        run.stderr
    );
    let control = text_of(element(dom, "id=\"control\"", "</dl>"));
    assert!(
        control.contains("3 documents, 2 served (0 suspended), 1 refused"),
        "{control}"
    );
    let alerts = text_of(element(dom, "id=\"alerts\"", "</ul>"));
    assert!(
        alerts.contains("tenant dashbad refused (never served): tenants/dashbad.toml:2: ttl:"),
        "{alerts}"
    );
}

/// Issue 31, item 5: the dashboard shows a tenant's own monitors, how many are down, and that
/// it is throttled (its monitors ask for more checks than its budget).
#[test]
fn chromium_shows_a_tenants_monitors_down_and_throttled() {
    let setup = Setup::new("dashboard-tenant-monitors");
    let dir = setup.path("tenants");
    std::fs::create_dir_all(&dir).expect("mkdir tenants");
    // 30 monitors every 200 ms (150 checks/s, over the default budget of 20/s), on a port
    // nothing listens on: all go down.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let mut text = String::from("names = [\"dashmon.edge.example.net.\"]\n");
    for i in 0..30 {
        text.push_str(&format!(
            "[monitors.m{i}]\ndns = \"127.0.0.1:{port}\"\ndns_name = \"m{i}.example.\"\n\
             interval_ms = 200\ntimeout_ms = 100\nfall = 1\n"
        ));
    }
    text.push_str(
        "[profile]\ntype = \"weighted\"\nttl = 30\n[[profile.endpoints]]\nname = \"web\"\n\
         addresses = [\"198.51.100.9\"]\nweight = 100\nmonitor = \"m0\"\n",
    );
    std::fs::write(dir.join("dashmon.toml"), text).expect("write tenant");
    let daemon = setup.start();
    daemon.wait_for_status("the tenant's monitors down", Duration::from_secs(20), |s| {
        s["tenants"]["probes"][0]["down"].as_u64() == Some(30)
    });
    let run = chromium(&[
        "--virtual-time-budget=5000".into(),
        "--dump-dom".into(),
        format!("http://{}/", daemon.admin),
    ]);
    let dom = &run.stdout;
    let control = text_of(element(dom, "id=\"control\"", "</dl>"));
    assert!(
        control.contains("dashmon: 30 monitor(s), 30 down, THROTTLED (150.0/s asked of 20.0/s"),
        "{control}\nchromium stderr:\n{}",
        run.stderr
    );
}

#[test]
fn chromium_shows_the_secondary_zones_in_the_transfer_panel() {
    // A steerdns primary for sec.test (transfers from loopback need no key).
    let primary_setup = Setup::new("dashboard-xfr-primary");
    std::fs::write(
        primary_setup.path("zones/sec.test.zone"),
        "$ORIGIN sec.test.\n$TTL 60\n@ IN SOA ns1 hostmaster 7 3600 600 86400 60\n\
         @ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A 192.0.2.7\n",
    )
    .expect("zone file");
    primary_setup.extend_config("[transfer]\n");
    let primary = primary_setup.start();
    // A secondary of it, and one whose primary does not answer.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_addr = silent.local_addr().expect("addr");
    drop(silent);
    let setup = Setup::new("dashboard-xfr-secondary");
    setup.extend_config(&format!(
        "[[secondary.zone]]\nname = \"sec.test\"\nprimaries = [\"{}\"]\ntimeout_secs = 2\n\
         [[secondary.zone]]\nname = \"gone.test\"\nprimaries = [\"{silent_addr}\"]\n\
         timeout_secs = 1\n",
        primary.dns
    ));
    let daemon = setup.start();
    daemon.wait_for_status(
        "sec.test transferred and gone.test refused",
        SHED_LIMIT,
        |s| {
            s["secondary"]["sec.test"]["serial"].as_u64() == Some(7)
                && s["secondary"]["gone.test"]["last_refusal"].is_string()
        },
    );

    let run = chromium(&[
        "--virtual-time-budget=5000".into(),
        "--dump-dom".into(),
        format!("http://{}/", daemon.admin),
    ]);
    let dom = &run.stdout;
    assert_eq!(
        attribute(element(dom, "data-connection=", ">"), "data-connection"),
        Some("ok"),
        "the page did not read /v1/status; chromium stderr:\n{}",
        run.stderr
    );
    let sec = text_of(element(dom, "data-secondary=\"sec.test\"", "</tr>"));
    assert!(
        sec.starts_with("sec.test 7 axfr serial 7 at ")
            && sec.contains(" expires ")
            && sec.ends_with(" none"),
        "sec.test row: {sec}"
    );
    let gone = text_of(element(dom, "data-secondary=\"gone.test\"", "</tr>"));
    assert!(
        gone.starts_with("gone.test none none yet no copy yet; next try "),
        "gone.test row: {gone}"
    );
    assert!(
        gone.contains(&silent_addr.to_string()),
        "the refusal names the primary: {gone}"
    );
}
