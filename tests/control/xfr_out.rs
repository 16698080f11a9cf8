//! Zone transfers out (issue 33 items 1-2) against the real Debian servers: Knot (`knotd`) and
//! NSD (`nsd`) as secondaries of steerdns, TSIG-signed: the first AXFR, then a zone change
//! (the file rewritten with a higher serial, SIGHUP) that only the NOTIFY can explain (the
//! secondaries' refresh timer is an hour) picked up by IXFR; a request with the wrong secret
//! refused; BIND's `named-checkzone` on what `dig AXFR` returns; a signed (NSEC3) zone over DoT
//! verified by `ldns-verify-zone`; the static projection of steered names (issue 33 item 3)
//! served by a Knot secondary, a weight change reaching it by NOTIFY and IXFR. A missing tool
//! fails the test.

use crate::control_common;

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use control_common::common::{free_port, kdig, wait_for, Server, TempDir};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

const ZONE: &str = "xo.test";
const KEY: &str = "xfr-key";
const SECRET: &str = "c3RlZXJkbnMtdHJhbnNmZXItdGVzdC1zZWNyZXQtMzI=";
/// A key of the key file that the zone does not list.
const OTHER_KEY: &str = "other-key";
const WRONG: &str = "d3Jvbmctc2VjcmV0LXdyb25nLXNlY3JldC13cm9uZzE=";

pub(crate) fn tool(path: &'static str, package: &str) -> &'static str {
    assert!(
        Path::new(path).exists(),
        "{path} is missing: apt-get install {package} (.ci/run installs it)"
    );
    path
}

fn zone_text(serial: u32, www: &str) -> String {
    format!(
        "$ORIGIN {ZONE}.\n$TTL 60\n\
         @ IN SOA ns1 hostmaster {serial} 3600 600 86400 60\n\
         @ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A {www}\nmail IN MX 10 ns1\n\
         txt IN TXT \"hello transfer\"\n"
    )
}

/// steerdns serving `xo.test` from its own zone directory, transfers on, NOTIFY to `targets`.
struct Primary {
    dir: TempDir,
    server: Server,
}

impl Primary {
    fn start(label: &str, port: u16, notify: &[u16]) -> Primary {
        Primary::start_with(label, port, notify, "", |_| {})
    }

    /// Like [`Primary::start`], with `extra` config and `prepare` run on the config file
    /// before the server starts.
    fn start_with(
        label: &str,
        port: u16,
        notify: &[u16],
        extra: &str,
        prepare: impl FnOnce(&Path),
    ) -> Primary {
        let dir = TempDir::new(label);
        std::fs::create_dir_all(dir.path().join("zones")).expect("zones dir");
        std::fs::write(zone_path(&dir), zone_text(1, "192.0.2.1")).expect("zone");
        let key = dir.path().join("xfr.key");
        std::fs::write(
            &key,
            format!(
                "key \"{KEY}\" {{ algorithm hmac-sha256; secret \"{SECRET}\"; }};\n\
                 key \"{OTHER_KEY}\" {{ algorithm hmac-sha256; secret \"{WRONG}\"; }};\n"
            ),
        )
        .expect("key file");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let targets: Vec<String> = notify
            .iter()
            .map(|p| format!("{{ addr = \"127.0.0.1:{p}\", key = \"{KEY}\" }}"))
            .collect();
        let config = format!(
            "[server]\nzones = {:?}\n[transfer]\nkey_files = [\"xfr.key\"]\n\
             per_client_per_minute = 1000\nnotify_timeout_ms = 200\n\
             [transfer.zone.\"{ZONE}\"]\nkeys = [\"{KEY}\"]\nnotify = [{}]\n{extra}\n",
            dir.path().join("zones"),
            targets.join(", ")
        );
        let path = dir.path().join("steerdns.toml");
        std::fs::write(&path, config).expect("config");
        prepare(&path);
        let listen = format!("127.0.0.1:{port}");
        let server = Server::start(&[
            "--config",
            path.to_str().expect("utf-8"),
            "--listen",
            &listen,
        ]);
        Primary { dir, server }
    }

    /// Rewrites the zone file and reloads (SIGHUP).
    fn change(&self, serial: u32, www: &str) {
        std::fs::write(zone_path(&self.dir), zone_text(serial, www)).expect("rewrite zone");
        control_common::sighup(self.server.pid());
        wait_for(
            "steerdns serving the new serial",
            Duration::from_secs(10),
            || (soa_serial(self.server.addr) == Some(serial)).then_some(()),
        );
    }

    fn metrics(&self) -> String {
        let admin = self.server.admin.expect("admin endpoint");
        control_common::http(admin, "GET", "/metrics", None).1
    }

    fn status(&self) -> serde_json::Value {
        let admin = self.server.admin.expect("admin endpoint");
        let (code, body) = control_common::http(admin, "GET", "/v1/status", None);
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).expect("status JSON")
    }

    /// `steerdns status` against this server.
    fn cli_status(&self) -> String {
        let admin = self.server.admin.expect("admin endpoint");
        let output = Command::new(env!("CARGO_BIN_EXE_steerdns"))
            .arg("status")
            .arg("--config")
            .arg(self.dir.path().join("steerdns.toml"))
            .arg("--admin")
            .arg(admin.to_string())
            .env("STEERDNS_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("run steerdns status");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

fn zone_path(dir: &TempDir) -> PathBuf {
    dir.path().join("zones").join(format!("{ZONE}.zone"))
}

fn soa_serial(server: SocketAddr) -> Option<u32> {
    let (ok, out) = kdig(server, &["+short", "SOA", ZONE]);
    out.split_whitespace().nth(2)?.parse().ok().filter(|_| ok)
}

fn www(server: SocketAddr) -> String {
    kdig(server, &["+short", "A", &format!("www.{ZONE}")])
        .1
        .trim()
        .to_string()
}

/// Waits until `secondary` answers `www` with `addr` (and the SOA with `serial`).
fn wait_secondary(what: &str, secondary: SocketAddr, serial: u32, addr: &str) {
    wait_for(what, Duration::from_secs(15), || {
        (soa_serial(secondary) == Some(serial) && www(secondary) == addr).then_some(())
    });
}

/// The value of a counter line of `metrics` whose labels contain every one of `labels`.
pub(crate) fn counter(metrics: &str, name: &str, labels: &[&str]) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

pub(crate) struct Process {
    child: Child,
    _dir: TempDir,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn knot_secondary(port: u16, primary: SocketAddr) -> Process {
    knot_secondary_of(port, primary, &[ZONE])
}

/// Knot on `port`, a TSIG secondary of `primary` for `zones`, NOTIFY from loopback accepted.
pub(crate) fn knot_secondary_of(port: u16, primary: SocketAddr, zones: &[&str]) -> Process {
    knot_secondary_with(port, primary, zones, "")
}

/// Like [`knot_secondary_of`], with `zone_options` (YAML lines, indented as zone keys) for
/// every zone.
pub(crate) fn knot_secondary_with(
    port: u16,
    primary: SocketAddr,
    zones: &[&str],
    zone_options: &str,
) -> Process {
    let knotd = tool("/usr/sbin/knotd", "knot");
    let dir = TempDir::new("xfrout-knot");
    let d = dir.path().display();
    let conf = format!(
        "server:\n    rundir: \"{d}\"\n    listen: 127.0.0.1@{port}\n\
         database:\n    storage: \"{d}\"\n\
         control:\n    listen: \"{d}/knot.sock\"\n\
         log:\n  - target: stderr\n    any: warning\n\
         key:\n  - id: {KEY}\n    algorithm: hmac-sha256\n    secret: {SECRET}\n\
         remote:\n  - id: primary\n    address: {}@{}\n    key: {KEY}\n\
         acl:\n  - id: notify\n    address: 127.0.0.0/8\n    key: {KEY}\n    action: notify\n\
         zone:\n",
        primary.ip(),
        primary.port()
    ) + &zones
        .iter()
        .map(|zone| {
            format!(
                "  - domain: {zone}.\n    file: \"{d}/{zone}.zone\"\n    master: primary\n\
                 \x20   acl: notify\n    zonefile-sync: -1\n{zone_options}"
            )
        })
        .collect::<String>();
    std::fs::write(dir.path().join("knot.conf"), conf).expect("knot.conf");
    let child = Command::new(knotd)
        .arg("-c")
        .arg(dir.path().join("knot.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start knotd");
    Process { child, _dir: dir }
}

fn nsd_secondary(port: u16, primary: SocketAddr) -> Process {
    let nsd = tool("/usr/sbin/nsd", "nsd");
    let dir = TempDir::new("xfrout-nsd");
    let d = dir.path().display();
    let conf = format!(
        "server:\n    ip-address: 127.0.0.1\n    port: {port}\n    zonesdir: \"{d}\"\n\
         \x20   pidfile: \"{d}/nsd.pid\"\n    xfrdfile: \"{d}/xfrd.state\"\n\
         \x20   zonelistfile: \"{d}/zone.list\"\n    database: \"\"\n    username: \"\"\n\
         \x20   chroot: \"\"\n    logfile: \"{d}/nsd.log\"\n    verbosity: 2\n\
         \x20   server-count: 1\n    xfrd-reload-timeout: 0\n\
         remote-control:\n    control-enable: no\n\
         key:\n    name: \"{KEY}\"\n    algorithm: hmac-sha256\n    secret: \"{SECRET}\"\n\
         zone:\n    name: \"{ZONE}\"\n    zonefile: \"{ZONE}.zone\"\n\
         \x20   allow-notify: 127.0.0.1 {KEY}\n    request-xfr: {}@{} {KEY}\n",
        primary.ip(),
        primary.port()
    );
    std::fs::write(dir.path().join("nsd.conf"), conf).expect("nsd.conf");
    let child = Command::new(nsd)
        .args(["-d", "-c"])
        .arg(dir.path().join("nsd.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start nsd");
    Process { child, _dir: dir }
}

/// AXFR at start, then a change pushed by NOTIFY and pulled by IXFR, against `start` (Knot or
/// NSD as the secondary on `port`).
fn secondary_follows(label: &str, start: fn(u16, SocketAddr) -> Process) {
    let (steer_port, secondary_port) = (free_port(), free_port());
    let primary = Primary::start(label, steer_port, &[secondary_port]);
    let secondary_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, secondary_port));
    let _secondary = start(secondary_port, primary.server.addr);
    wait_secondary(
        &format!("{label} serving serial 1 (AXFR)"),
        secondary_addr,
        1,
        "192.0.2.1",
    );

    primary.change(2, "192.0.2.2");
    wait_secondary(
        &format!("{label} serving serial 2 after the NOTIFY"),
        secondary_addr,
        2,
        "192.0.2.2",
    );
    let target = secondary_addr.to_string();
    let status = wait_for(
        "the NOTIFY of serial 2 acknowledged",
        Duration::from_secs(10),
        || {
            let status = primary.status();
            let acked = &status["transfer"][ZONE]["notify"][&target]["acked_serial"];
            (acked.as_u64() == Some(2)).then_some(status)
        },
    );
    let zone = &status["transfer"][ZONE];
    assert_eq!(zone["serial"].as_u64(), Some(2), "{zone}");
    assert_eq!(zone["journal_depth"].as_u64(), Some(1), "{zone}");
    assert_eq!(
        zone["last_transfer_to"].as_str(),
        Some("127.0.0.1"),
        "{zone}"
    );
    let line = primary.cli_status();
    assert!(
        line.contains(&format!("transfer {ZONE}: serial 2, journal 1 version(s)"))
            && line.contains(&format!("{target} acked 2")),
        "{line}"
    );
    let notified = counter(
        &primary.metrics(),
        "steerdns_notify_total",
        &["result=\"acked\""],
    );
    assert!(notified >= 1);
    let metrics = primary.metrics();
    let ixfr = counter(
        &metrics,
        "steerdns_transfers_out_total",
        &["kind=\"ixfr\"", "result=\"ok\"", "zone=\"xo.test\""],
    );
    assert!(ixfr >= 1, "the change went out by IXFR:\n{metrics}");
}

#[test]
fn knot_as_secondary_axfr_then_notify_and_ixfr() {
    secondary_follows("xfrout-knot-primary", knot_secondary);
}

#[test]
fn nsd_as_secondary_axfr_then_notify_and_ixfr() {
    secondary_follows("xfrout-nsd-primary", nsd_secondary);
}

fn dig_axfr(server: SocketAddr, key: Option<&str>) -> (bool, String) {
    dig_transfer(
        server,
        &["+tcp", ZONE, "AXFR"],
        key.map(|secret| (KEY, secret)),
    )
}

/// `dig` with `args` and, when given, `-y hmac-sha256:<name>:<secret>`.
pub(crate) fn dig_transfer(
    server: SocketAddr,
    args: &[&str],
    key: Option<(&str, &str)>,
) -> (bool, String) {
    let mut command = Command::new("dig");
    command
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string()])
        .args(["+time=3", "+tries=1", "+nocmd", "+nostats"])
        .args(args);
    if let Some((name, secret)) = key {
        command.args(["-y", &format!("hmac-sha256:{name}:{secret}")]);
    }
    let output = command
        .output()
        .expect("dig must be installed (apt-get install bind9-dnsutils)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.success(), text)
}

#[test]
fn the_wrong_secret_is_refused_and_named_checkzone_accepts_the_axfr() {
    let checkzone = tool("/usr/bin/named-checkzone", "bind9-utils");
    let primary = Primary::start("xfrout-refuse", free_port(), &[]);
    let addr = primary.server.addr;

    let (_, refused) = dig_axfr(addr, Some(WRONG));
    assert!(refused.contains("BADSIG"), "{refused}");
    assert!(!refused.contains("192.0.2.1"), "{refused}");

    // A key of the key file that this zone does not list: REFUSED (signed), counted.
    let (_, other) = dig_transfer(addr, &["+tcp", ZONE, "AXFR"], Some((OTHER_KEY, WRONG)));
    assert!(
        other.contains("failed") && !other.contains("192.0.2.1"),
        "{other}"
    );

    // Over UDP: IXFR gets the current SOA alone (RFC 1995 2), AXFR is refused.
    let (ok, udp) = dig_transfer(addr, &["+notcp", ZONE, "IXFR=0"], None);
    let soa_lines = udp.lines().filter(|l| l.contains("\tSOA\t")).count();
    assert!(ok && soa_lines == 1 && !udp.contains("192.0.2.1"), "{udp}");
    let axfr = control_common::common::query(&format!("{ZONE}."), RecordType::AXFR);
    let refused = primary.server.udp(&axfr);
    assert_eq!(refused.metadata.response_code, ResponseCode::Refused);

    let (ok, signed) = dig_axfr(addr, Some(SECRET));
    assert!(
        ok && signed.contains("TSIG") && !signed.contains("failed"),
        "{signed}"
    );
    let soas = signed.lines().filter(|l| l.contains("\tSOA\t")).count();
    assert_eq!(soas, 2, "{signed}");

    let file = primary.dir.path().join("axfr.zone");
    let records: String = signed
        .lines()
        .filter(|l| !l.starts_with(';') && !l.contains("\tTSIG\t") && !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, records).expect("write axfr output");
    let output = Command::new(checkzone)
        .args([ZONE])
        .arg(&file)
        .output()
        .expect("run named-checkzone");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success() && text.contains("OK"), "{text}");

    let metrics = primary.metrics();
    let badsig = counter(
        &metrics,
        "steerdns_transfers_out_total",
        &["result=\"tsig_badsig\""],
    );
    assert!(badsig >= 1, "{metrics}");
    let key = counter(
        &metrics,
        "steerdns_transfers_out_total",
        &["result=\"key\""],
    );
    assert!(key >= 1, "{metrics}");
}

#[test]
fn a_signed_zone_goes_out_over_dot_with_its_signatures_and_ldns_verifies_it() {
    let verify = tool("/usr/bin/ldns-verify-zone", "ldnsutils");
    let scratch = TempDir::new("xfrout-dot-cert");
    let (cert, key) = control_common::common::self_signed_cert(scratch.path(), "dot", 2);
    let dot = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let extra = format!(
        "[dnssec]\nkeys = \"keys\"\nzones = [\"{ZONE}.\"]\ndenial = \"nsec3\"\n\
         [server.tls]\ncert = {:?}\nkey = {:?}\ndot = [\"{dot}\"]\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    let primary = Primary::start_with("xfrout-signed", free_port(), &[], &extra, |config| {
        let output = Command::new(env!("CARGO_BIN_EXE_steerdns"))
            .args(["dnssec", "keygen", &format!("{ZONE}.")])
            .arg("--config")
            .arg(config)
            .env("STEERDNS_LOG", "warn")
            .output()
            .expect("run steerdns dnssec keygen");
        assert!(output.status.success(), "{output:?}");
    });

    // Over DoT (RFC 9103), signed with the key: every record with its RRSIG, the NSEC3 chain.
    let tsig = format!("hmac-sha256:{KEY}:{SECRET}");
    let (ok, text) = kdig(dot, &["+tls", "+nocomments", "-y", &tsig, "AXFR", ZONE]);
    assert!(ok, "{text}");
    let records: String = text
        .lines()
        .filter(|l| !l.starts_with(';') && !l.contains("TSIG") && !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    for rtype in ["RRSIG", "DNSKEY", "NSEC3", "NSEC3PARAM"] {
        assert!(
            records.contains(&format!("\t{rtype}\t")),
            "no {rtype}:\n{text}"
        );
    }
    let file = primary.dir.path().join("signed-axfr.zone");
    std::fs::write(&file, &records).expect("write axfr");
    let output = Command::new(verify)
        .arg(&file)
        .output()
        .expect("run ldns-verify-zone");
    assert!(output.status.success(), "{output:?}\n{records}");

    // The same over plain TCP, from loopback unsigned.
    let (ok, plain) = dig_axfr(primary.server.addr, None);
    assert!(ok && plain.contains("IN\tNSEC3 1 0 0 - "), "{plain}");
}

/// The bundled example (steered names in example.com and edge.example.net) with transfers on,
/// NOTIFY to `notify`, and `gw.example.com` marked `transfer = "omit"`.
fn projection_primary(notify: u16) -> (control_common::Setup, control_common::Daemon) {
    let setup = projection_setup("xfrout-projection", notify);
    let server = setup.start();
    (setup, server)
}

/// The setup of [`projection_primary`], not started.
pub(crate) fn projection_setup(label: &str, notify: u16) -> control_common::Setup {
    let setup = control_common::Setup::new(label);
    let config = std::fs::read_to_string(&setup.config).expect("config");
    let gw = "name = \"gw.example.com.\"\nprofile = \"appgw\"\n";
    assert!(config.contains(gw), "the example steers gw.example.com");
    let omitted = config.replace(gw, &format!("{gw}transfer = \"omit\"\n"));
    std::fs::write(&setup.config, omitted).expect("write config");
    let key = setup.path("xfr.key");
    std::fs::write(
        &key,
        format!("key \"{KEY}\" {{ algorithm hmac-sha256; secret \"{SECRET}\"; }};\n"),
    )
    .expect("key file");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let target = format!("[{{ addr = \"127.0.0.1:{notify}\", key = \"{KEY}\" }}]");
    setup.extend_config(&format!(
        "[transfer]\nkey_files = [\"xfr.key\"]\nper_client_per_minute = 1000\n\
         notify_timeout_ms = 200\n\
         [transfer.zone.\"example.com\"]\nkeys = [\"{KEY}\"]\nnotify = {target}\n\
         [transfer.zone.\"edge.example.net\"]\nkeys = [\"{KEY}\"]\nnotify = {target}\n"
    ));
    setup
}

pub(crate) fn serial_of(server: SocketAddr, zone: &str) -> Option<u32> {
    let (ok, out) = kdig(server, &["+short", "SOA", zone]);
    out.split_whitespace().nth(2)?.parse().ok().filter(|_| ok)
}

pub(crate) fn short(server: SocketAddr, rtype: &str, name: &str) -> String {
    kdig(server, &["+short", rtype, name]).1.trim().to_string()
}

/// The example zone files' serial.
pub(crate) const EXAMPLE_SERIAL: u32 = 2026113001;

#[test]
fn knot_serves_the_projection_of_steered_names_and_follows_a_weight_change() {
    let knot_port = free_port();
    let (setup, primary) = projection_primary(knot_port);
    let knot = SocketAddr::from((Ipv4Addr::LOCALHOST, knot_port));
    // Projected names move the served serial off the file's: file serial + revision 1.
    let first = EXAMPLE_SERIAL + 1;
    assert_eq!(serial_of(primary.dns, "example.com"), Some(first));
    let _secondary =
        knot_secondary_of(knot_port, primary.dns, &["example.com", "edge.example.net"]);
    wait_for("Knot serving both zones", Duration::from_secs(15), || {
        (serial_of(knot, "example.com") == Some(first)
            && serial_of(knot, "edge.example.net") == Some(first))
        .then_some(())
    });

    // The secondary answers every steered name with its always-serve answer...
    assert_eq!(
        short(knot, "CNAME", "critical.example.com"),
        "critical.edge.example.net."
    );
    assert_eq!(
        short(knot, "CNAME", "warm.example.com"),
        "warm.edge.example.net."
    );
    // ...the wildcard anycast name as a wildcard, for any name below it...
    assert_eq!(short(knot, "A", "anything.edge.example.net"), "192.0.2.1");
    assert_eq!(
        short(knot, "AAAA", "contoso.edge.example.net"),
        "2001:db8::1"
    );
    // ...and `transfer = "omit"` leaves gw.example.com out.
    let (_, gw) = kdig(knot, &["A", "gw.example.com"]);
    assert!(gw.contains("NXDOMAIN"), "{gw}");
    assert_eq!(short(primary.dns, "A", "gw.example.com"), "203.0.113.20");

    let status = primary.status();
    let zone = &status["transfer"]["example.com"];
    assert_eq!(zone["projected_names"].as_u64(), Some(2), "{zone}");
    assert_eq!(zone["omitted_names"].as_u64(), Some(1), "{zone}");
    assert_eq!(
        zone["file_serial"].as_u64(),
        Some(u64::from(EXAMPLE_SERIAL)),
        "{zone}"
    );

    // Break glass: critical to the alternate CDN. The projection follows, the serial moves
    // on, and the NOTIFY brings it to Knot by IXFR (its refresh timer is two hours).
    let output = primary.cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]);
    control_common::ok(&output, "weight set");
    let second = first + 1;
    wait_for(
        "steerdns at the new serial",
        Duration::from_secs(10),
        || (serial_of(primary.dns, "example.com") == Some(second)).then_some(()),
    );
    wait_for("Knot at the new serial", Duration::from_secs(15), || {
        (serial_of(knot, "example.com") == Some(second)).then_some(())
    });
    assert_eq!(
        short(knot, "CNAME", "critical.example.com"),
        "critical.cdn.example.org."
    );
    // The other zone's projection did not change: its serial stays.
    assert_eq!(serial_of(primary.dns, "edge.example.net"), Some(first));
    let admin = primary.admin;
    let metrics = control_common::http(admin, "GET", "/metrics", None).1;
    let ixfr = counter(
        &metrics,
        "steerdns_transfers_out_total",
        &["kind=\"ixfr\"", "result=\"ok\"", "zone=\"example.com\""],
    );
    assert!(ixfr >= 1, "the change went out by IXFR:\n{metrics}");
    assert!(
        metrics.contains("steerdns_transfer_projected_names{zone=\"example.com\"} 2"),
        "{metrics}"
    );
    let cli = primary.cli(&["status"]);
    let text = control_common::ok(&cli, "status");
    assert!(
        text.contains(&format!(
            "transfer example.com: serial {second}, journal 1 version(s)"
        )) && text.contains("projected 2 steered name(s), 1 omitted (zone file serial 2026113001)"),
        "{text}"
    );

    // A restart numbers on from the state directory: the serial does not go back below what
    // the secondary holds.
    drop(primary);
    let restarted = setup.start();
    assert_eq!(serial_of(restarted.dns, "example.com"), Some(second));
    assert_eq!(serial_of(restarted.dns, "edge.example.net"), Some(first));
}

const CATALOG: &str = "catalog.invalid";

/// Knot on `port` consuming the catalog zone of `primary` (`catalog-role: interpret`): every
/// member becomes a secondary of `primary` through the `member` template.
fn knot_catalog_consumer(port: u16, primary: SocketAddr) -> Process {
    let knotd = tool("/usr/sbin/knotd", "knot");
    let dir = TempDir::new("xfrout-knot-catalog");
    let d = dir.path().display();
    let conf = format!(
        "server:\n    rundir: \"{d}\"\n    listen: 127.0.0.1@{port}\n\
         database:\n    storage: \"{d}\"\n\
         control:\n    listen: \"{d}/knot.sock\"\n\
         log:\n  - target: stderr\n    any: warning\n\
         key:\n  - id: {KEY}\n    algorithm: hmac-sha256\n    secret: {SECRET}\n\
         remote:\n  - id: primary\n    address: {}@{}\n    key: {KEY}\n\
         acl:\n  - id: notify\n    address: 127.0.0.0/8\n    key: {KEY}\n    action: notify\n\
         template:\n  - id: member\n    master: primary\n    acl: notify\n\
         \x20   file: \"{d}/%s.zone\"\n    zonefile-sync: -1\n\
         zone:\n  - domain: {CATALOG}.\n    file: \"{d}/{CATALOG}.zone\"\n    master: primary\n\
         \x20   acl: notify\n    zonefile-sync: -1\n    catalog-role: interpret\n\
         \x20   catalog-template: member\n",
        primary.ip(),
        primary.port()
    );
    std::fs::write(dir.path().join("knot.conf"), conf).expect("knot.conf");
    let child = Command::new(knotd)
        .arg("-c")
        .arg(dir.path().join("knot.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start knotd");
    Process { child, _dir: dir }
}

#[test]
fn knot_consumes_the_catalog_and_provisions_each_member_zone() {
    let knot_port = free_port();
    let catalog_notify = format!(
        "[transfer.zone.\"{CATALOG}\"]\nkeys = [\"{KEY}\"]\n\
         notify = [{{ addr = \"127.0.0.1:{knot_port}\", key = \"{KEY}\" }}]\n"
    );
    let primary = Primary::start_with(
        "xfrout-catalog",
        free_port(),
        &[knot_port],
        &catalog_notify,
        |config| {
            let text = std::fs::read_to_string(config).expect("config");
            let text = text.replacen(
                "[transfer]\n",
                &format!("[transfer]\ncatalog = \"{CATALOG}\"\n"),
                1,
            );
            std::fs::write(config, text).expect("config");
        },
    );
    let addr = primary.server.addr;
    // The catalog: version "2", one PTR per zone under zones., numbered from 1.
    assert_eq!(serial_of(addr, CATALOG), Some(1));
    let (ok, axfr) = dig_axfr_of(addr, CATALOG);
    assert!(ok, "{axfr}");
    // dig's columns, one space apart.
    let lines: Vec<String> = axfr
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let version = format!("version.{CATALOG}. 0 IN TXT \"2\"");
    assert!(lines.contains(&version), "{axfr}");
    let members: Vec<&String> = lines.iter().filter(|l| l.contains(" PTR ")).collect();
    assert_eq!(members.len(), 1, "{axfr}");
    assert!(
        members[0].contains(&format!(".zones.{CATALOG}. 0 IN PTR {ZONE}.")),
        "{axfr}"
    );
    assert!(
        lines.contains(&format!("{CATALOG}. 0 IN NS invalid.")),
        "{axfr}"
    );

    let knot = SocketAddr::from((Ipv4Addr::LOCALHOST, knot_port));
    let _consumer = knot_catalog_consumer(knot_port, addr);
    wait_secondary(
        "Knot provisioning xo.test from the catalog",
        knot,
        1,
        "192.0.2.1",
    );

    // A zone added on the primary: the catalog's serial moves on, the NOTIFY brings it to
    // Knot, which provisions the new member and transfers it.
    let second = "second.test";
    std::fs::write(
        primary
            .dir
            .path()
            .join("zones")
            .join(format!("{second}.zone")),
        format!(
            "$ORIGIN {second}.\n$TTL 60\n@ IN SOA ns1 hostmaster 5 3600 600 86400 60\n\
             @ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A 192.0.2.77\n"
        ),
    )
    .expect("second zone");
    control_common::sighup(primary.server.pid());
    wait_for("the catalog at serial 2", Duration::from_secs(10), || {
        (serial_of(addr, CATALOG) == Some(2)).then_some(())
    });
    wait_for(
        "Knot serving the new member",
        Duration::from_secs(20),
        || {
            (serial_of(knot, second) == Some(5)
                && short(knot, "A", &format!("www.{second}")) == "192.0.2.77")
                .then_some(())
        },
    );
    let status = primary.status();
    let catalog = &status["transfer"][CATALOG];
    assert_eq!(catalog["catalog_members"].as_u64(), Some(2), "{catalog}");
    assert!(
        primary
            .cli_status()
            .contains(&format!("transfer {CATALOG}: serial 2")),
        "{}",
        primary.cli_status()
    );
}

pub(crate) fn dig_axfr_of(server: SocketAddr, zone: &str) -> (bool, String) {
    dig_transfer(server, &["+tcp", zone, "AXFR"], Some((KEY, SECRET)))
}

/// Writes the primary's key file: `KEY` with `secret`, at `mode`.
fn write_primary_key(primary: &Primary, secret: &str, mode: u32) {
    let key = primary.dir.path().join("xfr.key");
    let text = format!("key \"{KEY}\" {{ algorithm hmac-sha256; secret \"{secret}\"; }};\n");
    let temporary = primary.dir.path().join("xfr.key.new");
    std::fs::write(&temporary, text).expect("key file");
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode)).expect("chmod");
    std::fs::rename(&temporary, key).expect("rename key file");
}

/// SIGHUP, and the status once the reload it started is counted (accepted or refused).
fn sighup_and_wait(primary: &Primary) -> serde_json::Value {
    let count = |s: &serde_json::Value| {
        s["reloads_accepted"].as_u64().unwrap_or(0) + s["reloads_refused"].as_u64().unwrap_or(0)
    };
    let before = count(&primary.status());
    control_common::sighup(primary.server.pid());
    wait_for("the reload counted", Duration::from_secs(15), || {
        let status = primary.status();
        (count(&status) > before).then_some(status)
    })
}

#[test]
fn a_changed_key_file_is_read_again_on_sighup_and_a_bad_one_keeps_the_old_key() {
    let primary = Primary::start("xfrout-rekey", free_port(), &[]);
    let addr = primary.server.addr;
    let signed_ok = |secret: &str| {
        let (ok, text) = dig_axfr(addr, Some(secret));
        ok && text.contains("192.0.2.1") && !text.contains("failed")
    };
    assert!(signed_ok(SECRET));

    // A new secret in the key file: after SIGHUP it is the one that works.
    write_primary_key(&primary, WRONG, 0o600);
    let status = sighup_and_wait(&primary);
    assert!(status["last_refusal"].is_null(), "{status}");
    assert!(signed_ok(WRONG), "the new secret transfers");
    let (_, old) = dig_axfr(addr, Some(SECRET));
    assert!(
        old.contains("BADSIG") && !old.contains("192.0.2.1"),
        "{old}"
    );

    // A key file others may read: the reload is refused and says why; the key read before
    // keeps working, and the server keeps serving.
    write_primary_key(&primary, SECRET, 0o644);
    let status = sighup_and_wait(&primary);
    let reasons = control_common::refusal_reasons(&status);
    assert!(
        reasons.iter().any(|r| r.contains("transfer.key_files")),
        "{status}"
    );
    assert!(signed_ok(WRONG), "the key read before is kept");
    assert_eq!(soa_serial(addr), Some(1));
}

/// Knot on `port` consuming the catalog of `primary` with two templates: `member`, and
/// `edge` for members of that catalog group (RFC 9432 4.4.2), which writes its zone files at
/// once to `edge-<zone>.zone` in the directory returned.
fn knot_group_consumer(port: u16, primary: SocketAddr) -> (Process, PathBuf) {
    let knotd = tool("/usr/sbin/knotd", "knot");
    let dir = TempDir::new("xfrout-knot-group");
    let d = dir.path().display();
    let conf = format!(
        "server:\n    rundir: \"{d}\"\n    listen: 127.0.0.1@{port}\n\
         database:\n    storage: \"{d}\"\n\
         control:\n    listen: \"{d}/knot.sock\"\n\
         log:\n  - target: stderr\n    any: warning\n\
         key:\n  - id: {KEY}\n    algorithm: hmac-sha256\n    secret: {SECRET}\n\
         remote:\n  - id: primary\n    address: {}@{}\n    key: {KEY}\n\
         acl:\n  - id: notify\n    address: 127.0.0.0/8\n    key: {KEY}\n    action: notify\n\
         template:\n  - id: member\n    master: primary\n    acl: notify\n\
         \x20   file: \"{d}/%s.zone\"\n    zonefile-sync: -1\n\
         \x20 - id: edge\n    master: primary\n    acl: notify\n\
         \x20   file: \"{d}/edge-%s.zone\"\n    zonefile-sync: 0\n\
         zone:\n  - domain: {CATALOG}.\n    file: \"{d}/{CATALOG}.zone\"\n    master: primary\n\
         \x20   acl: notify\n    zonefile-sync: -1\n    catalog-role: interpret\n\
         \x20   catalog-template: [ member, edge ]\n",
        primary.ip(),
        primary.port()
    );
    std::fs::write(dir.path().join("knot.conf"), conf).expect("knot.conf");
    let child = Command::new(knotd)
        .arg("-c")
        .arg(dir.path().join("knot.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start knotd");
    let path = dir.path().to_path_buf();
    (Process { child, _dir: dir }, path)
}

#[test]
fn knot_provisions_a_member_with_the_template_of_its_catalog_group() {
    let knot_port = free_port();
    let catalog_notify = format!(
        "[transfer.zone.\"{CATALOG}\"]\nkeys = [\"{KEY}\"]\n\
         notify = [{{ addr = \"127.0.0.1:{knot_port}\", key = \"{KEY}\" }}]\n"
    );
    let primary = Primary::start_with(
        "xfrout-catalog-group",
        free_port(),
        &[knot_port],
        &catalog_notify,
        |config| {
            let text = std::fs::read_to_string(config).expect("config");
            let text = text
                .replacen(
                    "[transfer]\n",
                    &format!("[transfer]\ncatalog = \"{CATALOG}\"\n"),
                    1,
                )
                .replacen(
                    &format!("[transfer.zone.\"{ZONE}\"]\n"),
                    &format!(
                        "[transfer.zone.\"{ZONE}\"]\ncatalog_group = \"edge\"\n\
                         catalog_coo = \"next.invalid\"\n"
                    ),
                    1,
                );
            std::fs::write(config, text).expect("config");
        },
    );
    let addr = primary.server.addr;
    let (ok, axfr) = dig_axfr_of(addr, CATALOG);
    assert!(ok, "{axfr}");
    let lines: Vec<String> = axfr
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert!(
        lines.iter().any(|l| l.starts_with("group.")
            && l.ends_with(&format!(".zones.{CATALOG}. 0 IN TXT \"edge\""))),
        "{axfr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("coo.") && l.ends_with(" PTR next.invalid.")),
        "{axfr}"
    );

    // Knot takes the member's group as the template to provision it with: the `edge`
    // template writes its zone file at once, where only that template would.
    let knot = SocketAddr::from((Ipv4Addr::LOCALHOST, knot_port));
    let (_consumer, dir) = knot_group_consumer(knot_port, addr);
    wait_secondary("Knot provisioning xo.test", knot, 1, "192.0.2.1");
    wait_for(
        "the edge template's zone file",
        Duration::from_secs(15),
        || {
            dir.join(format!("edge-{ZONE}.zone"))
                .is_file()
                .then_some(())
        },
    );
    assert!(!dir.join(format!("{ZONE}.zone")).exists());
}

/// The AXFR of `zone` from `server` with the test key, as dig prints it (serials included),
/// without its TSIG.
fn axfr_text(server: SocketAddr, zone: &str) -> String {
    let (ok, text) = dig_transfer(server, &["+tcp", zone, "AXFR"], Some((KEY, SECRET)));
    assert!(ok && text.contains("SOA"), "AXFR of {zone}: {text}");
    // The TSIG record (its MAC covers the message id) differs from one transfer to the next.
    text.lines()
        .filter(|line| !line.contains("\tTSIG\t"))
        .map(|line| format!("{line}\n"))
        .collect()
}

fn zones_from(server: &control_common::Daemon) -> String {
    let status = server.status();
    status["startup"]["zones_from"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_restart_with_transfers_serves_the_zone_cache_at_the_serials_it_sent() {
    let setup = projection_setup("xfrout-cache", free_port());
    let cache = setup.path("steerdns.toml.state/zones.lkg");
    let state = setup.path("steerdns.toml.state/transfer-projection");
    let first = setup.start();
    let served = EXAMPLE_SERIAL + 1;
    assert_eq!(serial_of(first.dns, "example.com"), Some(served));
    assert!(
        zones_from(&first).contains("no cache yet"),
        "{}",
        zones_from(&first)
    );
    let before = axfr_text(first.dns, "example.com");
    let edge_before = axfr_text(first.dns, "edge.example.net");
    wait_for("the zone cache", Duration::from_secs(10), || {
        (cache.is_file() && state.is_file()).then_some(())
    });
    drop(first);

    // Same inputs, same projection: the zones come from the cache, at the serials sent.
    let second = setup.start();
    assert_eq!(zones_from(&second), "from the last-known-good zone cache");
    assert_eq!(serial_of(second.dns, "example.com"), Some(served));
    assert_eq!(axfr_text(second.dns, "example.com"), before);
    assert_eq!(axfr_text(second.dns, "edge.example.net"), edge_before);
    drop(second);

    // The state directory numbers on past what the cache was numbered with (a later version
    // was recorded and its cache never written): built, at the recorded revision.
    let recorded = std::fs::read_to_string(&state).expect("projection state");
    let moved: String = recorded
        .lines()
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["example.com.", revision, digest] => {
                    let revision: u32 = revision.parse().expect("revision");
                    format!("example.com. {} {digest}\n", revision + 4)
                }
                _ => format!("{line}\n"),
            }
        })
        .collect();
    assert_ne!(moved, recorded, "the state names example.com.: {recorded}");
    std::fs::write(&state, moved).expect("write state");
    let third = setup.start();
    let why = zones_from(&third);
    assert!(why.contains("transfer projection moved"), "{why}");
    assert_eq!(serial_of(third.dns, "example.com"), Some(served + 4));
    assert_eq!(serial_of(third.dns, "edge.example.net"), Some(served));
    drop(third);

    // A weight changed while the server was down moves the projection: built, serial + 1.
    let control = setup.path("control.toml");
    let text = std::fs::read_to_string(&control).expect("control file");
    let flipped = text.replace(
        "frontdoor = { weight = 100 }\nalt-cdn = { weight = 0 }",
        "frontdoor = { weight = 0 }\nalt-cdn = { weight = 100 }",
    );
    assert_ne!(flipped, text, "the example's critical weights");
    // Wait for the third run's cache (built again) so the fourth has one to refuse.
    wait_for("the rebuilt zone cache", Duration::from_secs(10), || {
        let cached = std::fs::read(&cache).ok()?;
        let numbered = std::fs::read_to_string(&state).ok()?;
        let revision = numbered
            .lines()
            .find(|l| l.starts_with("example.com. "))?
            .split_whitespace()
            .nth(1)?
            .to_string();
        let marker = format!("example.com. {revision} ");
        cached
            .windows(marker.len())
            .any(|w| w == marker.as_bytes())
            .then_some(())
    });
    std::fs::write(&control, flipped).expect("write control");
    let fourth = setup.start();
    let why = zones_from(&fourth);
    assert!(why.contains("transfer projection moved"), "{why}");
    assert_eq!(serial_of(fourth.dns, "example.com"), Some(served + 5));
    assert_eq!(
        short(fourth.dns, "CNAME", "critical.example.com"),
        "critical.cdn.example.org."
    );
    let after = axfr_text(fourth.dns, "example.com");
    assert!(after.contains("critical.cdn.example.org."), "{after}");
}
