//! A cell's probe in a fleet (issue 31, item 2): the probe of a cell is a monitor target like
//! an endpoint's, so shared probing covers it. A real etcd, three real nodes (sites ams, ams,
//! fra) with the bundled example's tenants, and a loopback HTTP backend as g4's probe target
//! (fabrikam's shard is g4 and g5). While the backend answers, fabrikam answers with both of its
//! cells on every node; once the test stops it, the fleet's quorum votes g4 down and every node
//! leaves it out of fabrikam's answer (g5 alone), tailspin's (its own profile) unchanged; back
//! when the backend is. And a cell hot by its load is the shield leader's decision, served by
//! every node whatever its own step says.

use crate::control_common;
use crate::fleet_common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use control_common::*;
use fleet_common::*;
use hickory_proto::rr::RecordType;

const G4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 104);
const G5: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 105);
const FABRIKAM: &str = "fabrikam.edge.example.net.";
const TAILSPIN: &str = "tailspin.edge.example.net.";
const WAIT: Duration = Duration::from_secs(30);

/// The node's copy of the example with g4 probed at `url`.
fn probe_g4(setup: &Setup, url: &str) {
    let text = std::fs::read_to_string(&setup.config).expect("config");
    let g4 = r#"{ name = "g4", anycast = ["192.0.2.104", "2001:db8::104"] }"#;
    assert!(
        text.contains(g4),
        "the bundled example's fourth global cell"
    );
    let probed = format!(
        r#"{{ name = "g4", anycast = ["192.0.2.104", "2001:db8::104"], monitor = {{ url = "{url}", interval_ms = 300, timeout_ms = 200, fall = 2, rise = 2 }} }}"#
    );
    std::fs::write(&setup.config, text.replace(g4, &probed)).expect("write config");
}

fn addresses(node: &Node, name: &str) -> Vec<Ipv4Addr> {
    let mut got =
        a_records(&Resolver::new(node.daemon().dns).ask(&plain_query(name, RecordType::A)));
    got.sort();
    got
}

/// Waits until every node answers fabrikam with `want`.
fn wait_fabrikam(fleet: &Fleet, want: &[Ipv4Addr]) {
    let deadline = Instant::now() + WAIT;
    for node in &fleet.nodes {
        loop {
            let got = addresses(node, FABRIKAM);
            if got == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} answers fabrikam {got:?}, expected {want:?}: {:#}",
                node.name,
                node.status()["health"]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_cells_probe_is_shared_by_the_fleet_and_every_node_leaves_the_cell_out() {
    let mut backend = Backend::start();
    let url = backend.url();
    let mut fleet = Fleet {
        etcd: Etcd::start(),
        prefix: "/steerdns/cellprobe".into(),
        nodes: Vec::new(),
    };
    for (i, site) in ["ams", "ams", "fra"].into_iter().enumerate() {
        let url = url.clone();
        let extra = format!("site = \"{site}\"\n");
        fleet.add_prepared_node("cellprobe", 2, &extra, &[], move |setup| {
            if i == 0 {
                with_example_tenants(setup);
            }
            probe_g4(setup, &url);
        });
    }
    fleet.wait_connected(WAIT);
    wait_fabrikam(&fleet, &[G4, G5]);
    let tailspin: Vec<Vec<Ipv4Addr>> = fleet.nodes.iter().map(|n| addresses(n, TAILSPIN)).collect();

    // Down: the probers vote g4 down, every node leaves it out of fabrikam's answer.
    backend.stop();
    wait_fabrikam(&fleet, &[G5]);
    for (node, before) in fleet.nodes.iter().zip(&tailspin) {
        assert_eq!(
            &addresses(node, TAILSPIN),
            before,
            "{}: tailspin untouched",
            node.name
        );
        let status = node.status();
        let target = &status["health"]["targets"][0];
        assert_eq!(target["shared"]["decided_by"], "quorum", "{target:#}");
        let impaired = &status["cells"]["impaired"];
        assert_eq!(impaired[0]["cell"], "g4", "{}: {impaired:#}", node.name);
        assert_eq!(impaired[0]["reason"], "probe-down", "{impaired:#}");
    }

    // Back: every node serves both cells again.
    let _backend = Backend::start_on(backend.addr);
    wait_fabrikam(&fleet, &[G4, G5]);
}

/// A feed of g4's load only, measured now.
fn g4_feed(load: f64) -> String {
    serde_json::json!({
        "time": steerdns::rfc3339::format_utc(std::time::SystemTime::now()),
        "source": "fleet cell-load test",
        "cells": {"global": {"g4": {"load": load, "capacity": 100}}},
    })
    .to_string()
}

/// Fast ticks, a feed good for a minute, and the cells' watermarks `high`/`low`.
fn shield_with(high: f64, low: f64) -> String {
    format!(
        "\n[shield]\ntick_ms = 100\nhold_down_secs = 1\nhigh_watermark = {high}\n\
         low_watermark = {low}\nstale_after_secs = 60\nrevert_after_secs = 120\n"
    )
}

/// A hot cell is the leader's decision, served by every node: ns2 and ns3 run watermarks
/// under which their own step would keep g4 at 90% (a config change half rolled out), yet
/// they leave it out as the leader ns1 decided, and say whose decision it is; at 50% every
/// node serves g4 again.
#[test]
fn a_hot_cell_is_the_leaders_decision_and_every_node_leaves_it_out() {
    let mut fleet = Fleet {
        etcd: Etcd::start(),
        prefix: "/steerdns/cellhot".into(),
        nodes: Vec::new(),
    };
    fleet.add_prepared_node("cellhot", 2, "", &[], |setup| {
        with_example_tenants(setup);
        setup.extend_config(&shield_with(0.85, 0.70));
    });
    fleet.nodes[0]
        .daemon()
        .wait_for_status("ns1 leads the shield", WAIT, |s| {
            s["shield"]["fleet"]["role"] == "leader"
        });
    for _ in 0..2 {
        fleet.add_prepared_node("cellhot", 2, "", &[], |setup| {
            setup.extend_config(&shield_with(0.99, 0.97));
        });
    }
    fleet.wait_connected(WAIT);
    wait_fabrikam(&fleet, &[G4, G5]);

    // 90%, pushed to a follower: hot by the leader's watermark, not by the followers' own.
    let follower = &fleet.nodes[1];
    let pushed = follower.daemon().push_load(&follower.setup, &g4_feed(90.0));
    assert!(pushed.status.success(), "load push: {pushed:?}");
    wait_fabrikam(&fleet, &[G5]);
    for node in &fleet.nodes {
        let status = node.status();
        let impaired = &status["cells"]["impaired"];
        assert_eq!(impaired[0]["cell"], "g4", "{}: {impaired:#}", node.name);
        assert_eq!(impaired[0]["reason"], "hot", "{}: {impaired:#}", node.name);
        let fleet_status = &status["shield"]["fleet"];
        assert_eq!(
            fleet_status["hot_cells"],
            serde_json::json!(["global.g4"]),
            "{}: {fleet_status:#}",
            node.name
        );
    }
    for node in &fleet.nodes[1..] {
        let status = node.status();
        assert_eq!(
            status["shield"]["fleet"]["role"], "published",
            "{}",
            node.name
        );
        let own = status["shield"]["cells"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["cell"] == "g4").cloned());
        let own = own.unwrap_or_else(|| panic!("{}: g4's load in status", node.name));
        assert_eq!(
            own["hot"], false,
            "{}: its own step keeps g4: {own:#}",
            node.name
        );
        let out = node.cli(&["status"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("fleet cells hot (the leader's decision, served): global.g4"),
            "{}: {text}",
            node.name
        );
    }

    // 50%: below every low watermark, g4 is served by every node again.
    let pushed = follower.daemon().push_load(&follower.setup, &g4_feed(50.0));
    assert!(pushed.status.success(), "load push: {pushed:?}");
    wait_fabrikam(&fleet, &[G4, G5]);
}
