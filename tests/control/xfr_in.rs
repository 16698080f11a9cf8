//! Secondary zones (issue 33 item 4) against a real Knot primary: AXFR in, a change on Knot
//! picked up on the SOA refresh timer, a restart serving the on-disk copy while Knot is down,
//! and a primary answering garbage keeping the last good copy.

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
    a_records, free_port, kdig, query, wait_for, Server, TempConfig, TempDir,
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

impl Knot {
    fn start(zone_text: &str) -> Knot {
        for tool in [KNOTD, KNOTC] {
            assert!(
                Path::new(tool).exists(),
                "{tool} is missing: apt-get install knot (.ci/run installs it)"
            );
        }
        let dir = TempDir::new("xfrin-knot");
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
        let d = dir.path().display();
        let conf = format!(
            "server:\n    rundir: \"{d}\"\n    listen: {}@{}\n\
             database:\n    storage: \"{d}\"\n\
             control:\n    listen: \"{d}/knot.sock\"\n\
             log:\n  - target: stderr\n    any: warning\n\
             acl:\n  - id: xfr\n    address: 127.0.0.0/8\n    action: transfer\n\
             zone:\n  - domain: {ZONE}\n    file: \"{d}/sec.test.zone\"\n    acl: xfr\n    journal-content: none\n",
            addr.ip(),
            addr.port()
        );
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
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address");
        let axfrs = Arc::new(AtomicUsize::new(0));
        let counter = axfrs.clone();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let Some(request) = read_frame(&mut stream) else {
                    continue;
                };
                let Ok(request) = Message::from_vec(&request) else {
                    continue;
                };
                let is_axfr =
                    request.queries.first().map(|q| q.query_type()) == Some(RecordType::AXFR);
                let reply = if is_axfr {
                    vec![0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0xff, 0xff, 0x00, 0x01]
                } else {
                    soa_reply(&request)
                };
                let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
                framed.extend_from_slice(&reply);
                let _ = stream.write_all(&framed);
                if is_axfr {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        GarbagePrimary { addr, axfrs }
    }
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
         \x20   catalog-role: member\n    catalog-zone: {catalog}.\n",
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
    drop(knot);
}
