//! Shared health probing in a fleet: a real etcd, three real `steerdns serve` nodes (sites ams,
//! ams, fra) and a real loopback HTTP backend that the test serves and counts. The backend is
//! probed by exactly the configured two nodes (one per site), every node answers the same when
//! it goes down and comes back, a killed prober's probing moves to another node, a bad record
//! in etcd is refused with its reason, and a node that loses etcd keeps its last shared view;
//! a node that never reached etcd probes by itself.

use crate::control_common;
use crate::fleet_common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use control_common::*;
use fleet_common::*;
use hickory_proto::rr::RecordType;

const PRIMARY: Ipv4Addr = MONITORED_PRIMARY;
const SECONDARY: Ipv4Addr = MONITORED_SECONDARY;
const NAME: &str = "shared.example.com.";
/// Generous bound for anything the test waits for (a busy machine).
const WAIT: Duration = Duration::from_secs(20);

/// `site` in `[fleet]`, then a failover profile whose primary is monitored at `url`.
fn node_extra(site: &str, url: &str) -> String {
    format!("site = \"{site}\"\n{}", monitored_failover("shared", url))
}

fn answer(node: &Node) -> Vec<Ipv4Addr> {
    a_records(&Resolver::new(node.daemon().dns).ask(&plain_query(NAME, RecordType::A)))
}

fn running(fleet: &Fleet) -> impl Iterator<Item = &Node> {
    fleet.nodes.iter().filter(|n| n.daemon.is_some())
}

/// Waits until every running node answers `want`.
fn wait_answer(fleet: &Fleet, want: Ipv4Addr) {
    let deadline = Instant::now() + WAIT;
    for node in running(fleet) {
        loop {
            let got = answer(node);
            if got == [want] {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} answers {got:?}, expected {want}: {:#}",
                node.name,
                node.status()["health"]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The monitored target as `node`'s status shows it.
fn target_status(node: &Node) -> serde_json::Value {
    let status = node.status();
    status["health"]["targets"][0].clone()
}

fn probers(target: &serde_json::Value) -> Vec<String> {
    target["shared"]["probers"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|p| p["node"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until every running node names the same two probers of the target, both voting up
/// and `wanted` by the test; returns them.
fn wait_probers_agree(
    fleet: &Fleet,
    what: &str,
    wanted: impl Fn(&BTreeSet<String>) -> bool,
) -> BTreeSet<String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let views: Vec<(String, serde_json::Value)> = running(fleet)
            .map(|n| (n.name.clone(), target_status(n)))
            .collect();
        let sets: Vec<BTreeSet<String>> = views
            .iter()
            .map(|(_, t)| probers(t).into_iter().collect())
            .collect();
        let all_up = views
            .iter()
            .all(|(_, t)| t["shared"]["up_votes"] == 2 && t["shared"]["decided_by"] == "quorum");
        let agreed = sets.len() > 1 && sets.windows(2).all(|w| w[0] == w[1]) && sets[0].len() == 2;
        if all_up && agreed && wanted(&sets[0]) {
            return sets[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "the nodes do not agree on two probers ({what}) voting up: {views:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The nodes that sent the backend's requests from `from` on (by their User-Agent).
fn agents_since(backend: &Backend, from: usize) -> BTreeSet<String> {
    backend.hit_list()[from..]
        .iter()
        .map(|h| {
            h.agent
                .strip_prefix("steerdns-health (node ")
                .and_then(|a| a.strip_suffix(')'))
                .unwrap_or(&h.agent)
                .to_string()
        })
        .collect()
}

#[test]
fn a_fleet_of_three_probes_each_target_from_two_sites_and_answers_as_one() {
    let mut backend = Backend::start();
    let url = backend.url();
    let mut fleet = Fleet {
        etcd: Etcd::start(),
        prefix: "/steerdns/hshare".into(),
        nodes: Vec::new(),
    };
    for site in ["ams", "ams", "fra"] {
        fleet.add_node("hshare", 2, &node_extra(site, &url), &[]);
    }
    fleet.wait_connected(WAIT);

    // Two probers, one per site (ns3 is fra's only node), the same on every node.
    // (Until every node has seen ns3's record, ns1 and ns2 may be all they know.)
    let chosen = wait_probers_agree(&fleet, "one from each site", |s| s.contains("ns3"));
    // A node that just lost the target may have had one check on the wire when it stopped:
    // count from the hits after the next two.
    let mark = backend.hits() + 2;
    assert!(backend.wait_hits(mark + 12, WAIT), "the backend is probed");
    assert_eq!(
        agents_since(&backend, mark),
        chosen,
        "only the two assigned nodes probe the backend"
    );
    for node in &fleet.nodes {
        let sharing = &node.status()["health"]["sharing"];
        assert_eq!(sharing["probers_per_target"], 2, "{sharing}");
        assert_eq!(sharing["probers"].as_array().map(Vec::len), Some(3));
        let here = sharing["probing_here"].as_array().map_or(0, Vec::len);
        assert_eq!(
            here == 1,
            chosen.contains(&node.name),
            "{}: {sharing}",
            node.name
        );
    }
    wait_answer(&fleet, PRIMARY);
    let (code, metrics) = http(fleet.nodes[0].daemon().admin, "GET", "/metrics", None);
    assert_eq!(code, 200, "{metrics}");
    for line in [
        "steerdns_health_sharing_connected 1.0".to_string(),
        "steerdns_health_sharing_probers 3.0".to_string(),
        format!("steerdns_health_prober_vote{{target=\"{url}\",node=\"ns3\",vote=\"up\"}} 1.0"),
        format!("steerdns_health_reporting_probers{{target=\"{url}\"}} 2.0"),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in\n{metrics}"
        );
    }

    // Down: both probers vote down; all three nodes move to the secondary.
    backend.stop();
    wait_answer(&fleet, SECONDARY);
    for node in &fleet.nodes {
        let target = target_status(node);
        assert_eq!(target["state"], "down", "{}: {target:#}", node.name);
        assert_eq!(target["shared"]["down_votes"], 2, "{target:#}");
        assert_eq!(target["shared"]["quorum"], 2, "{target:#}");
    }
    let text = ok(&fleet.nodes[0].cli(&["status"]), "status");
    assert!(
        text.contains("health shared by the fleet: 2 prober(s) per target, connected")
            && text.contains("decided by quorum: ")
            && text.contains("2 down of 2 reporting, down at 2"),
        "{text}"
    );
    // Back: every node returns to the primary.
    let backend = Backend::start_on(backend.addr);
    wait_answer(&fleet, PRIMARY);

    // Kill the ams prober: the other ams node takes over its probing.
    let gone = chosen
        .iter()
        .find(|n| *n != "ns3")
        .cloned()
        .unwrap_or_default();
    let heir = if gone == "ns1" { "ns2" } else { "ns1" };
    if let Some(node) = fleet.nodes.iter_mut().find(|n| n.name == gone) {
        node.kill();
    }
    let expected: BTreeSet<String> = [heir.to_string(), "ns3".to_string()].into();
    // Its record expires with its lease (2 s); then every node picks the heir.
    wait_probers_agree(&fleet, "the heir and ns3", |s| *s == expected);
    let mark = backend.hits() + 2;
    assert!(backend.wait_hits(mark + 8, WAIT));
    assert_eq!(
        agents_since(&backend, mark),
        expected,
        "{gone} stopped, {heir} took over"
    );
    wait_answer(&fleet, PRIMARY);

    // `fleet status` shows who probes what and the quorum view.
    let output = fleet.nodes[2].cli(&["fleet", "status"]);
    let text = ok(&output, "fleet status");
    assert!(
        text.contains(&format!("health {url}: up")) && text.contains(&format!("{heir} up")),
        "{text}"
    );

    // A bad record in etcd is refused with its reason; nothing else changes.
    let bogus = format!("{}/health/probers/bogus", fleet.prefix);
    fleet.etcd.etcdctl(&["put", &bogus, "{not json"]);
    for node in running(&fleet) {
        node.daemon()
            .wait_for_status("the bogus record refused", WAIT, |s| {
                s["health"]["sharing"]["refused"]
                    .as_array()
                    .is_some_and(|r| {
                        r.iter().any(|r| {
                            r.as_str()
                                .is_some_and(|r| r.contains("bogus: not a prober record"))
                        })
                    })
            });
    }
    wait_probers_agree(&fleet, "the heir and ns3", |s| *s == expected);

    // etcd gone: every node keeps its last shared view (fail-static) and says so, even when
    // its own prober sees the backend down.
    fleet.etcd.stop();
    let mut backend = backend;
    backend.stop();
    for node in running(&fleet) {
        let prober = node.name == "ns3";
        node.daemon()
            .wait_for_status("fail-static after etcd stopped", WAIT, |s| {
                let sharing = &s["health"]["sharing"];
                let local = &s["health"]["targets"][0]["shared"]["local_state"];
                sharing["connected"] == false
                    && sharing["fail_static"] == true
                    && (!prober || local == "down")
            });
    }
    wait_answer(&fleet, PRIMARY);
}

#[test]
fn a_node_that_never_reached_etcd_probes_every_target_itself() {
    let mut backend = Backend::start();
    let setup = Setup::new("hshare-alone");
    let nowhere = format!("http://{}", closed_port());
    setup.extend_config(&fleet_section(&nowhere, "/steerdns/alone", 2));
    setup.extend_config(&node_extra("ams", &backend.url()));
    let daemon = setup.start_with(&["--node", "ns1"]);
    let status = daemon.wait_for_status("its own check up", WAIT, |s| {
        s["health"]["targets"][0]["shared"]["decided_by"] == "local"
            && s["health"]["targets"][0]["state"] == "up"
    });
    assert_eq!(
        status["health"]["sharing"]["connected"], false,
        "{status:#}"
    );
    assert_eq!(
        status["health"]["sharing"]["fail_static"], false,
        "{status:#}"
    );
    assert!(backend.wait_hits(2, WAIT));
    backend.stop();
    daemon.wait_for_status("its own check down", WAIT, |s| {
        s["health"]["targets"][0]["state"] == "down"
    });
    let answer = a_records(&Resolver::new(daemon.dns).ask(&plain_query(NAME, RecordType::A)));
    assert_eq!(answer, [SECONDARY]);
}
