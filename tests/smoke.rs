mod common;
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
