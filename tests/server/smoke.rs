use crate::common;
use common::*;
use hickory_proto::rr::RecordType;

#[test]
fn serves_soa_over_udp_and_tcp() {
    let server = Server::start(&["--zones", "zones"]);
    let r = server.udp(&query("example.com.", RecordType::SOA));
    assert!(r.metadata.authoritative);
    assert_eq!(r.answers.len(), 1);
    let r = server.tcp(&query("example.com.", RecordType::SOA));
    assert_eq!(r.answers.len(), 1);
}

/// `serve --zones DIR` serves a directory of zone files with no config at all (issue 12 item
/// 11): a `steerdns.toml` lying in the working directory (here a broken one) is not read, the
/// server says so, and `--admin-listen off` lets two such servers run side by side.
#[test]
fn zones_without_a_config_ignore_the_local_config_and_run_without_admin() {
    let dir = TempDir::new("zones-only");
    std::fs::create_dir_all(dir.path().join("zones")).expect("mkdir zones");
    std::fs::copy(
        repo_path("zones/example.com.zone"),
        dir.path().join("zones/example.com.zone"),
    )
    .expect("copy zone");
    std::fs::write(
        dir.path().join("steerdns.toml"),
        "[server]\nlisten = \"not an address\"\n",
    )
    .expect("write a broken steerdns.toml");
    let args = ["--zones", "zones", "--admin-listen", "off"];
    let first = Server::start_in(dir.path(), &args);
    let second = Server::start_in(dir.path(), &args);
    for server in [&first, &second] {
        let r = server.udp(&query("example.com.", RecordType::SOA));
        assert!(r.metadata.authoritative);
        assert_eq!(r.answers.len(), 1);
        for said in [
            "config: built-in defaults (--zones without --config: ./steerdns.toml not read)",
            "admin endpoint off (--admin-listen off)",
        ] {
            assert!(
                server.startup.iter().any(|l| l == said),
                "{said:?} not in {:#?}",
                server.startup
            );
        }
    }
    // With --config the file is read (and this one is refused).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .current_dir(dir.path())
        .args(["check", "--config", "steerdns.toml", "--zones", "zones"])
        .output()
        .expect("run check");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("steerdns.toml"));
}

/// The daemon as a library object (issue 29 item 1): loaded, bound on port 0, started
/// in-process; it answers over UDP at the address it reports, and `stop` joins every task and
/// thread its supervisor started, none of them having ended before it.
#[test]
fn daemon_in_process_answers_and_stops_every_part() {
    use steerdns::daemon::{AdminSetting, Daemon, Settings};
    let loopback = |port| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let settings = Settings {
        source: steerdns::reload::Source {
            zones: Some(repo_path("zones")),
            ..Default::default()
        },
        listen: vec![loopback(0)],
        admin: AdminSetting::At(loopback(0)),
    };
    let loaded = Daemon::load(settings).expect("the bundled zones load");
    let bound = loaded.bind().expect("port 0 binds");
    let daemon = Daemon::start(loaded, bound).expect("the daemon starts");
    let dns = daemon.dns[0];
    assert_ne!(dns.port(), 0, "the bound port is reported");
    assert!(daemon.admin.is_some_and(|a| a.port() != 0));
    let packet = query("example.com.", RecordType::SOA)
        .to_vec()
        .expect("encode");
    let raw =
        udp_once(dns, &packet, std::time::Duration::from_secs(5)).expect("an answer over UDP");
    let answer = hickory_proto::op::Message::from_vec(&raw).expect("well-formed answer");
    assert!(answer.metadata.authoritative);
    assert_eq!(answer.answers.len(), 1);
    let names = daemon.supervisor().names();
    for part in [
        "tcp 127.0.0.1",
        "admin",
        "shield",
        "dnssec-resign",
        "udp 127.0.0.1",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(part)),
            "{part} supervised: {names:?}"
        );
    }
    let status = daemon.stop();
    assert!(status.started() >= 4, "started {}", status.started());
    assert_eq!(status.running(), 0, "every task and thread has ended");
    assert_eq!(
        status.unexpected_exits(),
        0,
        "{:?}",
        status.last_unexpected()
    );
}
