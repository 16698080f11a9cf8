//! Fleet mode with a real etcd and three real `steerdns serve` nodes on loopback: one control
//! state in etcd, seeded by the first node, watched by all, served through the same reload path
//! as a control-file edit (tasted, swapped in, or refused with the last good one serving), and
//! cached in each node's control file.

mod control_common;
mod fleet_common;

use std::time::Duration;

use control_common::*;
use fleet_common::*;

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn first_node_seeds_the_fleet_and_versions_put_in_etcd_reach_every_node() {
    let fleet = Fleet::start("seed", 3, 10);
    fleet.wait_connected(LIMIT);
    let (revision, text) = fleet.control_in_etcd();
    assert!(
        text.contains("frontdoor = { weight = 100 }"),
        "seeded from the control file:\n{text}"
    );
    let serials = fleet.wait_revision(revision, LIMIT);
    assert!(
        serials.windows(2).all(|w| w[0] == w[1]),
        "same version, same serial: {serials:?}"
    );
    let subnets = distinct_subnets(SUBNETS);
    fleet.wait_all_target(&subnets, FRONTDOOR, LIMIT);

    // A new version written straight into etcd (as etcdctl or automation would).
    let flipped = format!("serial = 500\n{}", critical_control(0, 100, 0));
    fleet
        .etcd
        .etcdctl(&["put", &format!("{}/control", fleet.prefix), &flipped]);
    let (revision, _) = fleet.control_in_etcd();
    let serials = fleet.wait_revision(revision, LIMIT);
    assert_eq!(serials, vec![500, 500, 500]);
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);
    for node in &fleet.nodes {
        let cached = std::fs::read_to_string(node.setup.control_path()).expect("cache");
        assert_eq!(
            cached, flipped,
            "{}'s control file caches the version",
            node.name
        );
        let chaos = node.daemon().chaos_serial();
        assert!(chaos.starts_with("serial 500 "), "{}: {chaos}", node.name);
    }

    // A version that leaves the profile nothing to serve: refused everywhere, the last good
    // version keeps serving, and the cache keeps it too.
    let bad = format!("serial = 501\n{}", critical_control(0, 0, 0));
    fleet
        .etcd
        .etcdctl(&["put", &format!("{}/control", fleet.prefix), &bad]);
    let (bad_revision, _) = fleet.control_in_etcd();
    for node in &fleet.nodes {
        let deadline = std::time::Instant::now() + LIMIT;
        loop {
            let status = node.status();
            if status["fleet"]["refused_revision"].as_i64() == Some(bad_revision) {
                assert_eq!(status["serial"], 500, "{}: {status:#}", node.name);
                assert!(!refusal_reasons(&status).is_empty());
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} did not report refusing revision {bad_revision}: {}",
                node.name,
                status["fleet"]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let cached = std::fs::read_to_string(node.setup.control_path()).expect("cache");
        assert_eq!(cached, flipped, "{} cached a refused version", node.name);
    }
    fleet.wait_all_target(&subnets, ALT_CDN, LIMIT);
}
