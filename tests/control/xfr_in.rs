//! Secondary zones (issue 33 item 4) against a real Knot primary: AXFR in, a change on Knot
//! picked up on the SOA refresh timer, a restart serving the on-disk copy while Knot is down,
//! and a primary answering garbage keeping the last good copy; TSIG (the right key transfers,
//! a wrong one is refused and the copy kept), IXFR from Knot's journal on Knot's NOTIFY, and
//! NOTIFYs from anyone else refused.

// The harness through control_common (which loads tests/common itself) for its admin HTTP client.
use crate::control_common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use control_common::common::{
    a_records, free_port, kdig, query, steerdns_check, wait_for, Server, TempConfig, TempDir,
};
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{Name, RData, Record, RecordType};

const KNOTD: &str = "/usr/sbin/knotd";
const KNOTC: &str = "/usr/sbin/knotc";
const ZONE: &str = "sec.test.";

/// A Knot primary in a scratch directory, killed on drop.
struct Knot {
    child: Child,
    dir: TempDir,
    addr: SocketAddr,
}

/// What a test Knot adds to the plain primary: a TSIG key every transfer must be signed with,
/// a journal of differences (IXFR), a NOTIFY target.
#[derive(Default)]
struct KnotSetup {
    /// The base64 secret of `sec-key` (hmac-sha256).
    key: Option<&'static str>,
    ixfr: bool,
    notify: Option<SocketAddr>,
}

impl Knot {
    fn start(zone_text: &str) -> Knot {
        Knot::start_with(zone_text, &KnotSetup::default())
    }

    fn start_with(zone_text: &str, setup: &KnotSetup) -> Knot {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
        Knot::start_on(zone_text, setup, addr)
    }

    /// A Knot listening on `addr` (a primary coming back where the secondary looks for it).
    fn start_on(zone_text: &str, setup: &KnotSetup, addr: SocketAddr) -> Knot {
        for tool in [KNOTD, KNOTC] {
            assert!(
                Path::new(tool).exists(),
                "{tool} is missing: apt-get install knot (.ci/run installs it)"
            );
        }
        let dir = TempDir::new("xfrin-knot");
        let conf = knot_conf(dir.path(), addr, setup);
        std::fs::write(dir.path().join("knot.conf"), conf).expect("write knot.conf");
        std::fs::write(dir.path().join("sec.test.zone"), zone_text).expect("write zone");
        let child = Command::new(KNOTD)
            .arg("-c")
            .arg(dir.path().join("knot.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start knotd");
        let knot = Knot { child, dir, addr };
        knot.wait_serial(1);
        knot
    }

    fn wait_serial(&self, serial: u32) {
        wait_for("knot serving the zone", Duration::from_secs(10), || {
            let (ok, out) = kdig(self.addr, &["+short", "SOA", ZONE]);
            (ok && out.split_whitespace().nth(2) == Some(&serial.to_string())).then_some(())
        });
    }

    /// Rewrites the zone file and has Knot load it.
    fn change(&self, zone_text: &str, serial: u32) {
        std::fs::write(self.dir.path().join("sec.test.zone"), zone_text).expect("rewrite zone");
        let status = Command::new(KNOTC)
            .arg("-s")
            .arg(self.dir.path().join("knot.sock"))
            .args(["zone-reload", ZONE])
            .status()
            .expect("run knotc");
        assert!(status.success(), "knotc zone-reload failed");
        self.wait_serial(serial);
    }
}

/// Knot's configuration (3.2 syntax) for the zone, with what `setup` asks.
fn knot_conf(dir: &Path, addr: SocketAddr, setup: &KnotSetup) -> String {
    let d = dir.display();
    let mut conf = format!(
        "server:\n    rundir: \"{d}\"\n    listen: {}@{}\n\
         database:\n    storage: \"{d}\"\n\
         control:\n    listen: \"{d}/knot.sock\"\n\
         log:\n  - target: stderr\n    any: warning\n",
        addr.ip(),
        addr.port()
    );
    let key_line = match setup.key {
        Some(secret) => {
            conf += &format!(
                "key:\n  - id: sec-key\n    algorithm: hmac-sha256\n    secret: {secret}\n"
            );
            "    key: sec-key\n"
        }
        None => "",
    };
    if let Some(target) = setup.notify {
        conf += &format!(
            "remote:\n  - id: steerdns\n    address: {}@{}\n{key_line}",
            target.ip(),
            target.port()
        );
    }
    conf += &format!(
        "acl:\n  - id: xfr\n    address: 127.0.0.0/8\n{key_line}    action: transfer\n\
         zone:\n  - domain: {ZONE}\n    file: \"{d}/sec.test.zone\"\n    acl: xfr\n"
    );
    conf += if setup.ixfr {
        "    journal-content: changes\n    zonefile-load: difference\n"
    } else {
        "    journal-content: none\n"
    };
    if setup.notify.is_some() {
        conf += "    notify: steerdns\n";
    }
    conf
}

impl Drop for Knot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn zone_text(serial: u32, www: &str) -> String {
    format!(
        "$ORIGIN {ZONE}\n$TTL 60\n\
         @ IN SOA ns1 hostmaster {serial} 1 1 600 60\n\
         @ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A {www}\n"
    )
}

fn secondary_config(primary: SocketAddr) -> String {
    format!(
        "[[secondary.zone]]\nname = \"sec.test\"\nprimaries = [\"{primary}\"]\ntimeout_secs = 2\n"
    )
}

fn www(server: &Server) -> Vec<Ipv4Addr> {
    a_records(&server.udp(&query("www.sec.test.", RecordType::A)))
}

fn wait_www(server: &Server, addr: Ipv4Addr) {
    wait_for(
        &format!("steerdns answering www.sec.test {addr}"),
        Duration::from_secs(20),
        || (www(server) == vec![addr]).then_some(()),
    );
}

fn copy_path(config: &TempConfig) -> PathBuf {
    config.dir().join("secondary").join("sec.test.zone")
}

#[test]
fn axfr_from_knot_then_refresh_then_restart_from_disk_then_garbage_keeps_the_copy() {
    let knot = Knot::start(&zone_text(1, "192.0.2.1"));
    let config = TempConfig::new("xfrin", &secondary_config(knot.addr));
    let server = config.start();
    wait_www(&server, Ipv4Addr::new(192, 0, 2, 1));
    assert!(
        copy_path(&config).is_file(),
        "the transferred zone is kept on disk"
    );

    knot.change(&zone_text(2, "192.0.2.2"), 2);
    wait_www(&server, Ipv4Addr::new(192, 0, 2, 2));
    // Knot keeps no journal here: it answers our IXFR with the whole zone, taken as an AXFR.
    let status = secondary_status(&server);
    assert_eq!(status["last_transfer_kind"], "axfr", "{status}");
    assert!(
        status["last_result"]
            .as_str()
            .is_some_and(|r| r.contains("whole zone")),
        "{status}"
    );
    drop(server);
    drop(knot);

    // Knot is gone: the restarted server serves the copy from disk as soon as it is ready.
    let server = config.start();
    assert_eq!(www(&server), vec![Ipv4Addr::new(192, 0, 2, 2)]);
    drop(server);

    // A primary with a newer serial whose AXFR is garbage: the last good copy keeps serving.
    let garbage = GarbagePrimary::start();
    std::fs::write(
        config.dir().join("steerdns.toml"),
        std::fs::read_to_string(config.dir().join("steerdns.toml"))
            .expect("read config")
            .replace(&knot_addr_text(&config), &garbage.addr.to_string()),
    )
    .expect("rewrite config");
    let before = std::fs::read(copy_path(&config)).expect("read copy");
    let server = config.start();
    wait_for("two garbage AXFRs tried", Duration::from_secs(20), || {
        (garbage.axfrs.load(Ordering::SeqCst) >= 2).then_some(())
    });
    assert_eq!(www(&server), vec![Ipv4Addr::new(192, 0, 2, 2)]);
    assert_eq!(
        std::fs::read(copy_path(&config)).expect("read copy"),
        before
    );
}

/// The primary address written in the config (the Knot that is gone).
fn knot_addr_text(config: &TempConfig) -> String {
    let text = std::fs::read_to_string(config.dir().join("steerdns.toml")).expect("read config");
    let start = text.find("primaries = [\"").expect("primaries") + "primaries = [\"".len();
    let end = start + text[start..].find('"').expect("closing quote");
    text[start..end].to_string()
}

/// Answers SOA queries with serial 99 and AXFR with bytes that are no DNS message.
struct GarbagePrimary {
    addr: SocketAddr,
    axfrs: Arc<AtomicUsize>,
}

impl GarbagePrimary {
    fn start() -> GarbagePrimary {
        let axfrs = Arc::new(AtomicUsize::new(0));
        let counter = axfrs.clone();
        let addr = fake_primary(move |request| {
            let request = Message::from_vec(request).ok()?;
            let is_axfr = request.queries.first().map(|q| q.query_type()) == Some(RecordType::AXFR);
            if !is_axfr {
                return Some(soa_reply(&request));
            }
            counter.fetch_add(1, Ordering::SeqCst);
            Some(vec![
                0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0xff, 0xff, 0x00, 0x01,
            ])
        });
        GarbagePrimary { addr, axfrs }
    }
}

/// A primary on a loopback TCP port that answers each request (one framed message a
/// connection) with what `answer` makes of its bytes (`None`: no answer).
fn fake_primary(answer: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let Some(reply) = read_frame(&mut stream).and_then(|request| answer(&request)) else {
                continue;
            };
            let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(&reply);
            let _ = stream.write_all(&framed);
        }
    });
    addr
}

fn soa_reply(request: &Message) -> Vec<u8> {
    let mut reply = Message::new(
        request.metadata.id,
        MessageType::Response,
        request.metadata.op_code,
    );
    reply.metadata.response_code = ResponseCode::NoError;
    reply.metadata.authoritative = true;
    let origin = Name::from_ascii(ZONE).expect("name");
    reply.add_query(hickory_proto::op::Query::query(
        origin.clone(),
        RecordType::SOA,
    ));
    let soa = SOA::new(
        Name::from_ascii("ns1.sec.test.").expect("name"),
        Name::from_ascii("hostmaster.sec.test.").expect("name"),
        99,
        1,
        1,
        600,
        60,
    );
    reply.add_answer(Record::from_rdata(origin, 60, RData::SOA(soa)));
    reply.to_vec().expect("encode SOA reply")
}

fn read_frame(stream: &mut std::net::TcpStream) -> Option<Vec<u8>> {
    let mut length = [0u8; 2];
    stream.read_exact(&mut length).ok()?;
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut body).ok()?;
    Some(body)
}

/// A Knot primary generating a catalog zone (`catalog-role: generate`) with one member zone.
fn knot_catalog_producer(catalog: &str, member: &str) -> Knot {
    assert!(
        Path::new(KNOTD).exists(),
        "{KNOTD} is missing: apt-get install knot (.ci/run installs it)"
    );
    let dir = TempDir::new("xfrin-knot-catalog");
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let d = dir.path().display();
    let conf = format!(
        "server:\n    rundir: \"{d}\"\n    listen: {}@{}\n\
         database:\n    storage: \"{d}\"\n\
         control:\n    listen: \"{d}/knot.sock\"\n\
         log:\n  - target: stderr\n    any: warning\n\
         acl:\n  - id: xfr\n    address: 127.0.0.0/8\n    action: transfer\n\
         zone:\n  - domain: {catalog}.\n    catalog-role: generate\n    acl: xfr\n\
         \x20 - domain: {member}.\n    file: \"{d}/{member}.zone\"\n    acl: xfr\n\
         \x20   catalog-role: member\n    catalog-zone: {catalog}.\n    catalog-group: edge\n",
        addr.ip(),
        addr.port()
    );
    std::fs::write(dir.path().join("knot.conf"), conf).expect("write knot.conf");
    std::fs::write(
        dir.path().join(format!("{member}.zone")),
        format!(
            "$ORIGIN {member}.\n$TTL 60\n@ IN SOA ns1 hostmaster 3 60 60 600 60\n\
             @ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A 192.0.2.99\n"
        ),
    )
    .expect("write member zone");
    let child = Command::new(KNOTD)
        .arg("-c")
        .arg(dir.path().join("knot.conf"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start knotd");
    let knot = Knot { child, dir, addr };
    // Knot answers a catalog's SOA over TCP only (UDP: REFUSED), as secondaries ask it.
    wait_for("knot serving its catalog", Duration::from_secs(10), || {
        let (ok, out) = kdig(addr, &["+tcp", "+short", "SOA", catalog]);
        (ok && !out.trim().is_empty()).then_some(())
    });
    knot
}

#[test]
fn a_catalog_from_knot_provisions_its_member_zones() {
    let knot = knot_catalog_producer("cat.test", "member.test");
    let knot_addr = knot.addr;
    let config = TempConfig::new(
        "xfrin-catalog",
        &format!(
            "[[secondary.catalog]]\nname = \"cat.test\"\nprimaries = [\"{knot_addr}\"]\n\
             timeout_secs = 2\n"
        ),
    );
    let server = config.start();
    wait_for(
        "steerdns serving the catalog's member",
        Duration::from_secs(20),
        || {
            let answer = a_records(&server.udp(&query("www.member.test.", RecordType::A)));
            (answer == vec![Ipv4Addr::new(192, 0, 2, 99)]).then_some(())
        },
    );
    assert!(
        config
            .dir()
            .join("secondary")
            .join("member.test.zone")
            .is_file(),
        "the member's copy is kept on disk"
    );
    let admin = server.admin.expect("admin endpoint");
    let (_, body) = control_common::http(admin, "GET", "/v1/status", None);
    let status: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
    assert_eq!(
        status["secondary"]["member.test"]["serial"].as_u64(),
        Some(3),
        "{body}"
    );
    // Knot's `catalog-group` (RFC 9432 4.4.2) is read with the member.
    assert_eq!(
        status["secondary"]["member.test"]["catalog_groups"],
        serde_json::json!(["edge"]),
        "{body}"
    );
    drop(knot);
}

const SECRET: &str = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ=";
const WRONG_SECRET: &str = "d3JvbmchLXdyb25nIS13cm9uZyEtd3JvbmchLTEyMzQ=";

/// `sec-key` with `secret` in the key-file format, mode 0600, at `dir/sec.key`.
fn write_key(dir: &Path, secret: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("sec.key");
    std::fs::write(
        &path,
        format!("key \"sec-key\" {{\n\talgorithm hmac-sha256;\n\tsecret \"{secret}\";\n}};\n"),
    )
    .expect("write key file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod key");
    path
}

fn keyed_config(primary: SocketAddr) -> String {
    format!("{}key_file = \"sec.key\"\n", secondary_config(primary))
}

/// `zone_text` with SOA refresh and retry of an hour: only a NOTIFY explains a quick refresh.
fn slow_zone_text(serial: u32, www: &str) -> String {
    zone_text(serial, www).replace(
        &format!("{serial} 1 1 600 60"),
        &format!("{serial} 3600 3600 86400 60"),
    )
}

fn secondary_status(server: &Server) -> serde_json::Value {
    let admin = server.admin.expect("admin endpoint");
    let (_, body) = control_common::http(admin, "GET", "/v1/status", None);
    let status: serde_json::Value = serde_json::from_str(&body).expect("status JSON");
    status["secondary"]["sec.test"].clone()
}

fn wait_status(
    server: &Server,
    what: &str,
    holds: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    wait_for(what, Duration::from_secs(20), || {
        let status = secondary_status(server);
        holds(&status).then_some(status)
    })
}

#[test]
fn tsig_transfers_with_the_right_key_and_a_wrong_key_is_refused_keeping_the_copy() {
    let setup = KnotSetup {
        key: Some(SECRET),
        ..KnotSetup::default()
    };
    let knot = Knot::start_with(&zone_text(1, "192.0.2.1"), &setup);
    let config = TempConfig::new("xfrin-tsig", &keyed_config(knot.addr));
    write_key(config.dir(), SECRET);
    let server = config.start();
    wait_www(&server, Ipv4Addr::new(192, 0, 2, 1));
    let status = secondary_status(&server);
    assert_eq!(status["serial"].as_u64(), Some(1), "{status}");
    assert_eq!(status["last_transfer_kind"], "axfr", "{status}");
    drop(server);

    // Knot has a new version, but our key is wrong now: refused, the copy keeps serving.
    write_key(config.dir(), WRONG_SECRET);
    let server = config.start();
    knot.change(&zone_text(2, "192.0.2.2"), 2);
    let status = wait_status(&server, "a TSIG refusal in status", |s| {
        s["last_refusal"]
            .as_str()
            .is_some_and(|r| r.contains("TSIG"))
    });
    let refusal = status["last_refusal"].as_str().unwrap_or_default();
    assert!(refusal.contains("BADSIG"), "{status}");
    assert_eq!(status["serial"].as_u64(), Some(1), "{status}");
    assert_eq!(www(&server), vec![Ipv4Addr::new(192, 0, 2, 1)]);
    drop(server);

    // A key file others may read is refused too, with the reason in status.
    let key = write_key(config.dir(), SECRET);
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    // `steerdns check` says so too (a warning: the server keeps serving the copy).
    let (code, out) = steerdns_check(
        config.dir(),
        &[
            std::ffi::OsStr::new("--config"),
            std::ffi::OsStr::new("steerdns.toml"),
        ],
    );
    assert!(code.success(), "{out}");
    assert!(
        out.contains("warning: secondary zone sec.test") && out.contains("chmod 600"),
        "{out}"
    );
    let server = config.start();
    let status = wait_status(&server, "the key file's refusal in status", |s| {
        s["last_refusal"]
            .as_str()
            .is_some_and(|r| r.contains("chmod 600"))
    });
    assert_eq!(status["serial"].as_u64(), Some(1), "{status}");
    assert_eq!(www(&server), vec![Ipv4Addr::new(192, 0, 2, 1)]);
}

/// A NOTIFY for sec.test from `from` (a loopback address other than Knot's), answered by
/// `server` over UDP.
fn notify_from(from: &str, server: SocketAddr) -> Message {
    let socket = std::net::UdpSocket::bind((from, 0)).expect("bind a loopback socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut message = Message::new(777, MessageType::Query, hickory_proto::op::OpCode::Notify);
    message.add_query(hickory_proto::op::Query::query(
        Name::from_ascii(ZONE).expect("name"),
        RecordType::SOA,
    ));
    let bytes = message.to_vec().expect("encode NOTIFY");
    socket.send_to(&bytes, server).expect("send NOTIFY");
    let mut buf = [0u8; 1024];
    let (len, _) = socket.recv_from(&mut buf).expect("an answer to the NOTIFY");
    Message::from_vec(&buf[..len]).expect("a DNS answer")
}

#[test]
fn knot_notify_brings_an_ixfr_and_notifies_from_others_are_refused() {
    let port = free_port();
    let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let setup = KnotSetup {
        key: Some(SECRET),
        ixfr: true,
        notify: Some(listen),
    };
    let knot = Knot::start_with(&slow_zone_text(1, "192.0.2.1"), &setup);
    let config = TempConfig::new("xfrin-notify", &keyed_config(knot.addr));
    write_key(config.dir(), SECRET);
    let server = config.start_with(&["--listen", &listen.to_string()]);
    wait_www(&server, Ipv4Addr::new(192, 0, 2, 1));

    // The SOA says refresh in an hour: only Knot's NOTIFY explains serial 2 arriving now.
    knot.change(&slow_zone_text(2, "192.0.2.2"), 2);
    let status = wait_status(&server, "serial 2 in status", |s| {
        s["serial"].as_u64() == Some(2)
    });
    assert_eq!(www(&server), vec![Ipv4Addr::new(192, 0, 2, 2)]);
    assert_eq!(status["last_transfer_kind"], "ixfr", "{status}");
    assert_eq!(status["last_transfer_serial"].as_u64(), Some(2), "{status}");
    assert!(status["notifies_accepted"].as_u64() >= Some(1), "{status}");
    assert!(
        status["last_notify"]
            .as_str()
            .is_some_and(|n| n.contains("serial 2")),
        "{status}"
    );

    // Anyone else's NOTIFY is refused and counted; so is an unsigned one from Knot's address.
    let stranger = notify_from("127.0.0.2", server.addr);
    assert_eq!(stranger.metadata.response_code, ResponseCode::Refused);
    assert_eq!(stranger.metadata.id, 777);
    let unsigned = notify_from("127.0.0.1", server.addr);
    assert_eq!(unsigned.metadata.response_code, ResponseCode::Refused);
    let status = wait_status(&server, "two refused NOTIFYs", |s| {
        s["notifies_refused"].as_u64() >= Some(2)
    });
    let refusal = status["last_notify_refusal"].as_str().unwrap_or_default();
    assert!(refusal.contains("from 127.0.0.1: unsigned"), "{status}");
    assert_eq!(status["serial"].as_u64(), Some(2), "{status}");

    let admin = server.admin.expect("admin endpoint");
    let metrics = control_common::scrape_metrics(admin);
    let refused = control_common::samples_with(
        &metrics,
        "steerdns_secondary_notifies_total",
        &[("zone", "sec.test"), ("result", "refused")],
    );
    assert!(
        matches!(refused.first().map(|s| &s.value), Some(prometheus_parse::Value::Counter(n)) if *n >= 2.0),
        "the refused NOTIFY metric: {refused:?}"
    );

    let cli = Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(["status", "--admin", &admin.to_string(), "--config"])
        .arg(config.dir().join("steerdns.toml"))
        .env("STEERDNS_LOG", "warn")
        .output()
        .expect("run steerdns status");
    let text = String::from_utf8_lossy(&cli.stdout);
    assert!(
        text.contains("secondary sec.test: serial 2; last in ixfr serial 2"),
        "{text}"
    );
    assert!(text.contains("last NOTIFY refused"), "{text}");
}

/// A primary that answers every SOA query with serial 99, unsigned (`key` = None) or signed
/// with `key` — which is not the key the request was signed with.
fn forging_primary(key: Option<steerdns::dns::tsig::Key>) -> SocketAddr {
    fake_primary(move |request| {
        let parsed = Message::from_vec(request).ok()?;
        let mut reply = soa_reply(&parsed);
        let mac = steerdns::dns::tsig::find(request)
            .ok()
            .flatten()
            .map(|record| record.mac);
        if let (Some(key), Some(mac)) = (&key, mac) {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_secs();
            steerdns::dns::tsig::Signer::for_answer_of(key, &mac).sign(&mut reply, now);
        }
        Some(reply)
    })
}

#[test]
fn an_answer_unsigned_or_with_a_bad_mac_is_refused() {
    use steerdns::dns::tsig::{Algorithm, Key};
    let forged = Key::new(
        "sec-key",
        Algorithm::HmacSha256,
        b"wrong!-wrong!-wrong!-wrong!-1234",
    );
    let cases = [
        (None, "the answer is not signed"),
        (forged, "the answer's TSIG signature is wrong"),
    ];
    for (key, reason) in cases {
        let primary = forging_primary(key);
        let config = TempConfig::new("xfrin-forged", &keyed_config(primary));
        write_key(config.dir(), SECRET);
        let server = config.start();
        let status = wait_status(&server, reason, |s| {
            s["last_refusal"]
                .as_str()
                .is_some_and(|r| r.contains(reason))
        });
        assert!(status["serial"].is_null(), "nothing served: {status}");
        assert_eq!(status["transfers_ok"].as_u64(), Some(0), "{status}");
    }
}

/// A primary at serial 5 whose IXFR deletes a record the secondary does not hold; its AXFR is
/// the good zone. Counts the IXFRs it answered.
fn stale_diff_primary() -> (SocketAddr, Arc<AtomicUsize>) {
    let ixfrs = Arc::new(AtomicUsize::new(0));
    let counter = ixfrs.clone();
    let addr = fake_primary(move |request| {
        let request = Message::from_vec(request).ok()?;
        let qtype = request.queries.first().map(|q| q.query_type());
        let records = match qtype {
            Some(RecordType::IXFR) => {
                counter.fetch_add(1, Ordering::SeqCst);
                let gone = a_record("gone.sec.test.", Ipv4Addr::new(192, 0, 2, 9));
                vec![
                    soa_record(5),
                    soa_record(1),
                    gone,
                    soa_record(5),
                    soa_record(5),
                ]
            }
            Some(RecordType::AXFR) => vec![
                soa_record(5),
                Record::from_rdata(
                    Name::from_ascii(ZONE).expect("name"),
                    60,
                    RData::NS(hickory_proto::rr::rdata::NS(
                        Name::from_ascii("ns1.sec.test.").expect("name"),
                    )),
                ),
                a_record("ns1.sec.test.", Ipv4Addr::new(192, 0, 2, 53)),
                a_record("www.sec.test.", Ipv4Addr::new(192, 0, 2, 5)),
                soa_record(5),
            ],
            _ => vec![soa_record(5)],
        };
        let mut reply = Message::new(
            request.metadata.id,
            MessageType::Response,
            request.metadata.op_code,
        );
        reply.metadata.authoritative = true;
        reply.add_queries(request.queries.clone());
        reply.add_answers(records);
        Some(reply.to_vec().expect("encode"))
    });
    (addr, ixfrs)
}

fn soa_record(serial: u32) -> Record {
    let soa = SOA::new(
        Name::from_ascii("ns1.sec.test.").expect("name"),
        Name::from_ascii("hostmaster.sec.test.").expect("name"),
        serial,
        1,
        1,
        600,
        60,
    );
    Record::from_rdata(Name::from_ascii(ZONE).expect("name"), 60, RData::SOA(soa))
}

fn a_record(owner: &str, addr: Ipv4Addr) -> Record {
    Record::from_rdata(
        Name::from_ascii(owner).expect("name"),
        60,
        RData::A(hickory_proto::rr::rdata::A(addr)),
    )
}

#[test]
fn an_ixfr_that_does_not_apply_falls_back_to_axfr() {
    let (primary, ixfrs) = stale_diff_primary();
    let config = TempConfig::new("xfrin-stale-diff", &secondary_config(primary));
    // The copy held: serial 1, as a first transfer would have left it.
    std::fs::create_dir_all(config.dir().join("secondary")).expect("mkdir");
    let held = zone_text(1, "192.0.2.1").replace("hostmaster", "hostmaster.sec.test.");
    std::fs::write(copy_path(&config), held).expect("write the copy");
    let server = config.start();
    wait_www(&server, Ipv4Addr::new(192, 0, 2, 5));
    assert!(ixfrs.load(Ordering::SeqCst) >= 1, "IXFR was asked first");
    let status = secondary_status(&server);
    assert_eq!(status["last_transfer_kind"], "axfr", "{status}");
    assert_eq!(status["serial"].as_u64(), Some(5), "{status}");
    let result = status["last_result"].as_str().unwrap_or_default();
    assert!(result.contains("does not apply"), "{status}");
    assert!(result.contains("gone.sec.test"), "{status}");
}

/// A zone past its SOA expire time (RFC 1035 §4.3.5, RFC 1996): once no primary answered for
/// `expire` seconds the zone is answered SERVFAIL (its data is no longer authoritative) and
/// status says so; a restart while expired keeps SERVFAIL; the primary back on its address
/// brings the zone back without a restart.
#[test]
fn a_zone_past_its_expire_time_is_answered_servfail_until_its_primary_is_back() {
    let short = |serial: u32| {
        format!(
            "$ORIGIN {ZONE}\n$TTL 60\n@ IN SOA ns1 hostmaster {serial} 1 1 3 60\n\
             @ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A 192.0.2.1\n"
        )
    };
    let knot = Knot::start(&short(1));
    let primary = knot.addr;
    let config = TempConfig::new("xfrin-expire", &secondary_config(primary));
    let server = config.start();
    wait_www(&server, Ipv4Addr::new(192, 0, 2, 1));
    let marker = config.dir().join("secondary").join("sec.test.zone.expired");
    assert!(!marker.exists(), "not expired while Knot answers");
    drop(knot);

    let rcode = |server: &Server| {
        server
            .udp(&query("www.sec.test.", RecordType::A))
            .metadata
            .response_code
    };
    wait_for(
        "the zone answered SERVFAIL",
        Duration::from_secs(20),
        || (rcode(&server) == ResponseCode::ServFail).then_some(()),
    );
    let status = secondary_status(&server);
    assert_eq!(status["expired"], true, "{status}");
    assert!(marker.is_file(), "the expired marker is written");
    drop(server);

    // Restarted while the primary is still gone: SERVFAIL from the first answer on.
    let server = config.start();
    assert_eq!(rcode(&server), ResponseCode::ServFail);
    wait_status(&server, "expired in status after the restart", |s| {
        s["expired"] == true
    });

    // The primary is back where the secondary looks for it (the same serial: contact alone
    // renews the copy): served again, no restart.
    let _knot = Knot::start_on(&short(1), &KnotSetup::default(), primary);
    wait_for("the zone served again", Duration::from_secs(20), || {
        (rcode(&server) == ResponseCode::NoError && !www(&server).is_empty()).then_some(())
    });
    assert_eq!(www(&server), vec![Ipv4Addr::new(192, 0, 2, 1)]);
    assert!(!marker.exists(), "the marker is removed");
    assert_eq!(secondary_status(&server)["expired"], false);
}

#[test]
fn a_secondary_zones_key_file_is_read_again_on_sighup_and_a_bad_one_keeps_the_old_key() {
    use std::os::unix::fs::PermissionsExt;
    let setup = KnotSetup {
        key: Some(SECRET),
        ..KnotSetup::default()
    };
    let knot = Knot::start_with(&zone_text(1, "192.0.2.1"), &setup);
    let config = TempConfig::new("xfrin-rekey", &keyed_config(knot.addr));
    let key = write_key(config.dir(), SECRET);
    let server = config.start();
    wait_www(&server, Ipv4Addr::new(192, 0, 2, 1));

    // A key file others may read, then SIGHUP: reported, and the key read before is kept
    // (the next version still comes in, signed with it).
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    control_common::sighup(server.pid());
    let status = wait_status(&server, "the bad key file reported", |s| {
        s["key_problem"]
            .as_str()
            .is_some_and(|p| p.contains("chmod 600") && p.contains("kept"))
    });
    assert_eq!(status["serial"].as_u64(), Some(1), "{status}");
    knot.change(&zone_text(2, "192.0.2.2"), 2);
    wait_www(&server, Ipv4Addr::new(192, 0, 2, 2));

    // A new (here: wrong) secret, then SIGHUP: read again and used without a restart, so
    // Knot refuses it and the copy keeps serving.
    write_key(config.dir(), WRONG_SECRET);
    control_common::sighup(server.pid());
    wait_status(&server, "the new key read", |s| s["key_problem"].is_null());
    knot.change(&zone_text(3, "192.0.2.3"), 3);
    let status = wait_status(&server, "Knot refusing the new key", |s| {
        s["last_refusal"]
            .as_str()
            .is_some_and(|r| r.contains("BADSIG"))
    });
    assert_eq!(status["serial"].as_u64(), Some(2), "{status}");
    assert_eq!(www(&server), vec![Ipv4Addr::new(192, 0, 2, 2)]);

    // The right secret back, SIGHUP: the transfer goes through.
    write_key(config.dir(), SECRET);
    control_common::sighup(server.pid());
    wait_www(&server, Ipv4Addr::new(192, 0, 2, 3));
}

#[test]
fn a_flood_of_refused_notifies_is_rate_limited_per_source_and_counted() {
    let knot = Knot::start(&zone_text(1, "192.0.2.1"));
    let config = TempConfig::new("xfrin-notify-flood", &secondary_config(knot.addr));
    let server = config.start();
    wait_www(&server, Ipv4Addr::new(192, 0, 2, 1));

    // 300 NOTIFYs from a stranger (127.0.1.9: not the primary, and another /24 than the
    // sources below), sent as fast as possible.
    let socket = std::net::UdpSocket::bind(("127.0.1.9", 0)).expect("bind a loopback socket");
    let mut message = Message::new(555, MessageType::Query, hickory_proto::op::OpCode::Notify);
    message.add_query(hickory_proto::op::Query::query(
        Name::from_ascii(ZONE).expect("name"),
        RecordType::SOA,
    ));
    let packet = message.to_vec().expect("encode");
    const SENT: u64 = 300;
    for _ in 0..SENT {
        socket.send_to(&packet, server.addr).expect("send");
    }
    // Every one is counted as refused; what the limiter kept back is counted too.
    let admin = server.admin.expect("admin endpoint");
    let limited = wait_for("the flood counted", Duration::from_secs(10), || {
        let status = secondary_status(&server);
        let metrics = control_common::scrape_metrics(admin);
        let limited =
            control_common::samples_with(&metrics, "steerdns_notify_refusals_limited_total", &[]);
        let limited = match limited.first().map(|s| &s.value) {
            Some(prometheus_parse::Value::Counter(n)) => *n as u64,
            _ => 0,
        };
        (status["notifies_refused"].as_u64() == Some(SENT)).then_some(limited)
    });
    // The answers that went out: the burst (20) and what refilled meanwhile (5 a second).
    socket
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let mut buf = [0u8; 512];
    let mut answered = 0u64;
    while socket.recv_from(&mut buf).is_ok() {
        answered += 1;
    }
    assert!((20..40).contains(&answered), "{answered} refusals answered");
    assert_eq!(
        answered + limited,
        SENT,
        "{answered} answered, {limited} limited"
    );

    // Queries are answered as ever, and another source's refusal still gets its answer.
    assert_eq!(www(&server), vec![Ipv4Addr::new(192, 0, 2, 1)]);
    let other = notify_from("127.0.0.2", server.addr);
    assert_eq!(other.metadata.response_code, ResponseCode::Refused);
}

#[test]
fn a_catalog_groups_settings_apply_to_its_members() {
    let knot = knot_catalog_producer("cat.test", "member.test");
    let knot_addr = knot.addr;
    // The catalog is pulled unsigned; its group `edge` (Knot's `catalog-group`) signs with a
    // key Knot does not know, so the member's transfers are refused: the group's settings,
    // not the catalog's, are the member's.
    let config = TempConfig::new(
        "xfrin-catalog-group",
        &format!(
            "[[secondary.catalog]]\nname = \"cat.test\"\nprimaries = [\"{knot_addr}\"]\n\
             timeout_secs = 2\n[secondary.catalog.group.\"edge\"]\nkey_file = \"sec.key\"\n"
        ),
    );
    write_key(config.dir(), SECRET);
    let server = config.start();
    let admin = server.admin.expect("admin endpoint");
    let member = wait_for(
        "the member refused by Knot",
        Duration::from_secs(20),
        || {
            let (_, body) = control_common::http(admin, "GET", "/v1/status", None);
            let status: serde_json::Value = serde_json::from_str(&body).ok()?;
            let member = status["secondary"]["member.test"].clone();
            member["last_refusal"]
                .as_str()
                .is_some_and(|r| r.contains("BADKEY") || r.contains("NOTAUTH"))
                .then_some(member)
        },
    );
    assert_eq!(
        member["catalog_groups"],
        serde_json::json!(["edge"]),
        "{member}"
    );
    assert!(member["serial"].is_null(), "{member}");
    let answer = server.udp(&query("www.member.test.", RecordType::A));
    assert_ne!(answer.metadata.response_code, ResponseCode::NoError);
    drop(knot);
}
