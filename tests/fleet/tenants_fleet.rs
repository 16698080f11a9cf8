//! Tenants in a fleet (issue 30): one etcd key per tenant document, each node's tenants folder
//! its cache of them. The first node seeds etcd from its folder; a tenant written through any
//! node's API (compare-and-swap on that tenant's key) is served by every node; a stale
//! `If-Match` is refused; a delete reaches every node; a node restarted while etcd is down
//! serves every tenant from its folder.

use crate::control_common;
use crate::fleet_common;

use std::time::{Duration, Instant};

use control_common::*;
use fleet_common::*;
use hickory_proto::rr::{RData, RecordType};

const LIMIT: Duration = Duration::from_secs(20);

/// The TTL of `name`'s A answer at `node` (`None`: no A record).
fn a_ttl(node: &Node, name: &str) -> Option<u32> {
    let response = Resolver::new(node.daemon().dns).ask(&plain_query(name, RecordType::A));
    response
        .answers
        .iter()
        .find(|r| matches!(r.data, RData::A(_)))
        .map(|r| r.ttl)
}

/// Waits until every running node answers `name` with TTL `want`; the time it took.
fn wait_ttl_everywhere(fleet: &Fleet, name: &str, want: Option<u32>) -> Duration {
    let started = Instant::now();
    for node in fleet.nodes.iter().filter(|n| n.daemon.is_some()) {
        loop {
            let got = a_ttl(node, name);
            if got == want {
                break;
            }
            assert!(
                started.elapsed() < LIMIT,
                "{} answers {name} with TTL {got:?}, want {want:?}: {:#}",
                node.name,
                node.status()["tenants"]
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    started.elapsed()
}

fn put(node: &Node, name: &str, text: &str, if_match: Option<&str>) -> (u16, String) {
    request(
        node.daemon(),
        "PUT",
        &format!("/v1/tenants/{name}"),
        Some("application/toml"),
        if_match,
        text,
    )
}

fn tenant_keys(fleet: &Fleet) -> Vec<String> {
    let prefix = format!("{}/tenants/", fleet.prefix);
    fleet
        .etcd
        .etcdctl(&["get", &prefix, "--prefix", "--keys-only"])
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn a_tenant_written_through_one_node_is_served_by_all_three_and_survives_etcd_down() {
    // ns1 starts with the example's tenants in its folder; ns2 and ns3 with none.
    let mut fleet = Fleet {
        etcd: Etcd::start(),
        prefix: "/steerdns/tenants".into(),
        nodes: Vec::new(),
    };
    fleet.add_prepared_node("tenants", 10, "", &[], with_example_tenants);
    fleet.add_node("tenants", 10, "", &[]);
    fleet.add_node("tenants", 10, "", &[]);
    fleet.wait_connected(LIMIT);

    // ns1 seeded etcd from the example's folder; nobody seeded twice.
    let keys = tenant_keys(&fleet);
    let want: Vec<String> = ["fabrikam", "tailspin"]
        .iter()
        .map(|t| format!("{}/tenants/{t}", fleet.prefix))
        .collect();
    assert_eq!(keys, want, "the example's tenants are in etcd");
    wait_ttl_everywhere(&fleet, "fabrikam.edge.example.net.", Some(120));

    // A new tenant through ns2's API: CAS on its key, served by every node.
    let name = "northwind";
    let owned = "northwind.edge.example.net.";
    let text = format!("names = [\"{owned}\"]\nttl = 77\n");
    let (code, body) = put(&fleet.nodes[1], name, &text, Some("\"0\""));
    assert_eq!(code, 201, "{body}");
    let reply: serde_json::Value = serde_json::from_str(&body).expect("PUT reply is JSON");
    let revision = reply["revision"].as_u64().expect("revision");
    let took = wait_ttl_everywhere(&fleet, owned, Some(77));
    println!("a tenant PUT through ns2 was answered by all 3 nodes {took:?} after the reply");
    let stored = fleet.etcd.etcdctl(&[
        "get",
        &format!("{}/tenants/{name}", fleet.prefix),
        "--print-value-only",
    ]);
    assert_eq!(
        stored.trim_end(),
        text.trim_end(),
        "etcd holds the document"
    );
    for node in &fleet.nodes {
        let cached = std::fs::read_to_string(node.setup.path(&format!("tenants/{name}.toml")))
            .unwrap_or_else(|e| panic!("{}'s folder caches {name}: {e}", node.name));
        assert_eq!(cached, text, "{}'s cache", node.name);
    }

    // A stale If-Match through another node: refused, nothing changes.
    let stale = format!("\"{}\"", revision.saturating_sub(1));
    let (code, body) = put(
        &fleet.nodes[2],
        name,
        &format!("names = [\"{owned}\"]\nttl = 5\n"),
        Some(&stale),
    );
    assert_eq!(code, 412, "{body}");
    // The current revision through ns3: lands, and every node serves it.
    let (code, body) = put(
        &fleet.nodes[2],
        name,
        &format!("names = [\"{owned}\"]\nttl = 78\n"),
        Some(&format!("\"{revision}\"")),
    );
    assert_eq!(code, 200, "{body}");
    wait_ttl_everywhere(&fleet, owned, Some(78));

    // A bad document is refused with its field by the node asked, and written nowhere.
    let (code, body) = put(
        &fleet.nodes[0],
        name,
        "names = [\"x.example.org.\"]\n",
        None,
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("names"), "{body}");
    wait_ttl_everywhere(&fleet, owned, Some(78));

    // A second tenant, then removed through ns1: gone from every node.
    let (code, body) = put(
        &fleet.nodes[0],
        "contoso2",
        "names = [\"contoso2.edge.example.net.\"]\nttl = 61\n",
        None,
    );
    assert_eq!(code, 201, "{body}");
    wait_ttl_everywhere(&fleet, "contoso2.edge.example.net.", Some(61));
    let (code, body) = request(
        fleet.nodes[0].daemon(),
        "DELETE",
        "/v1/tenants/contoso2",
        None,
        None,
        "",
    );
    assert_eq!(code, 200, "{body}");
    let platform_ttl = a_ttl(&fleet.nodes[0], "unclaimed-name.edge.example.net.");
    assert_ne!(platform_ttl, Some(61));
    wait_ttl_everywhere(&fleet, "contoso2.edge.example.net.", platform_ttl);
    for node in &fleet.nodes {
        assert!(
            !node.setup.path("tenants/contoso2.toml").exists(),
            "{} still caches a deleted tenant",
            node.name
        );
    }

    // etcd down: ns3 restarted serves every tenant from its folder.
    fleet.etcd.stop();
    fleet.nodes[2].kill();
    fleet.nodes[2].start();
    let restarted = &fleet.nodes[2];
    assert_eq!(restarted.status()["fleet"]["connected"], false);
    assert_eq!(a_ttl(restarted, owned), Some(78), "served from the cache");
    assert_eq!(a_ttl(restarted, "fabrikam.edge.example.net."), Some(120));
}

/// Status `fleet.halted_tenants` of `node`, as (tenant, canary) pairs.
fn halted(node: &Node) -> Vec<(String, String)> {
    node.status()["fleet"]["halted_tenants"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|t| {
                    let field = |k: &str| t[k].as_str().unwrap_or_default().to_string();
                    (field("tenant"), field("node"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_tenant_refused_on_the_canary_halts_only_that_tenant_while_another_reaches_every_node() {
    // Waves: ns1 (the canary, whose taster crashes on the drill's marker), then ns2 and ns3.
    let plan = "[fleet.rollout]\nwaves = [[\"ns1\"], [\"ns2\", \"ns3\"]]\nbake_secs = 1\nwave_timeout_secs = 60\nprobes = []\n";
    let mut fleet = Fleet {
        etcd: Etcd::start(),
        prefix: "/steerdns/staged-tenants".into(),
        nodes: Vec::new(),
    };
    fleet.add_node(
        "staged-tenants",
        10,
        plan,
        &["STEERDNS_TASTER_FAULT=abort:TENANT-BOOM"],
    );
    fleet.add_node("staged-tenants", 10, plan, &[]);
    fleet.add_node("staged-tenants", 10, plan, &[]);
    fleet.wait_connected(LIMIT);

    // A good tenant first, through ns3 (a later wave): accepted (202, staged), served by the
    // canary, then by every node.
    let good = "names = [\"goodco.edge.example.net.\"]\nttl = 71\n";
    let (code, body) = put(&fleet.nodes[2], "goodco", good, None);
    assert_eq!(code, 202, "{body}");
    assert!(body.contains("\"staged\":true"), "{body}");
    wait_ttl_everywhere(&fleet, "goodco.edge.example.net.", Some(71));

    // A document only the canary's taster crashes on, through ns2: ns2's own taste passes it
    // and etcd takes it; ns1 refuses it; ns2 and ns3 halt that tenant and keep its last good
    // version (TTL 71).
    let boom = "names = [\"goodco.edge.example.net.\"]\nttl = 72\n# TENANT-BOOM\n";
    let (code, body) = put(&fleet.nodes[1], "goodco", boom, None);
    assert_eq!(code, 202, "{body}");
    // Meanwhile another tenant's change reaches every node.
    let other = "names = [\"otherco.edge.example.net.\"]\nttl = 73\n";
    let (code, body) = put(&fleet.nodes[1], "otherco", other, None);
    assert_eq!(code, 202, "{body}");
    wait_ttl_everywhere(&fleet, "otherco.edge.example.net.", Some(73));
    let deadline = Instant::now() + LIMIT;
    for node in &fleet.nodes[1..] {
        loop {
            let list = halted(node);
            if list == [("goodco".to_string(), "ns1".to_string())] {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} does not list goodco as halted by ns1: {list:?} {:#}",
                node.name,
                node.status()["fleet"]
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for node in &fleet.nodes {
        assert_eq!(
            a_ttl(node, "goodco.edge.example.net."),
            Some(71),
            "{} serves goodco's last good version",
            node.name
        );
    }
    let status = ok(
        &fleet.nodes[0].cli(&["rollout", "status"]),
        "rollout status",
    );
    assert!(
        status.contains("tenant goodco HALTED") && status.contains("refused on canary ns1"),
        "{status}"
    );

    // A fixed document replaces the halted one and reaches every node.
    let fixed = "names = [\"goodco.edge.example.net.\"]\nttl = 74\n";
    let (code, body) = put(&fleet.nodes[1], "goodco", fixed, None);
    assert_eq!(code, 202, "{body}");
    wait_ttl_everywhere(&fleet, "goodco.edge.example.net.", Some(74));
    for node in &fleet.nodes[1..] {
        assert!(halted(node).is_empty(), "{}: {:?}", node.name, halted(node));
    }
}

/// `name`'s A addresses at `node` for a client of eu-west, and the ECS scope.
fn eu_west_answer(node: &Node, name: &str) -> (Vec<std::net::Ipv4Addr>, Option<u8>) {
    use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
    let response =
        Resolver::new(node.daemon().dns).ask(&ecs_query(name, RecordType::A, EU_WEST_SUBNET));
    let scope = match response
        .edns
        .as_ref()
        .and_then(|e| e.option(EdnsCode::Subnet))
    {
        Some(EdnsOption::Subnet(cs)) => Some(cs.scope_prefix()),
        _ => None,
    };
    let mut addresses = a_records(&response);
    addresses.sort();
    (addresses, scope)
}

/// Waits until every node answers `name` for a client of eu-west as `ready` says; returns
/// each node's answer.
fn wait_answers_everywhere(
    fleet: &Fleet,
    name: &str,
    what: &str,
    ready: impl Fn(&[std::net::Ipv4Addr], Option<u8>) -> bool,
) -> Vec<(Vec<std::net::Ipv4Addr>, Option<u8>)> {
    let started = Instant::now();
    fleet
        .nodes
        .iter()
        .map(|node| loop {
            let (addresses, scope) = eu_west_answer(node, name);
            if ready(&addresses, scope) {
                break (addresses, scope);
            }
            assert!(
                started.elapsed() < LIMIT,
                "{}: {name} {what}: still {addresses:?} scope {scope:?}",
                node.name
            );
            std::thread::sleep(Duration::from_millis(10));
        })
        .collect()
}

/// Issue 31 item 6: quarantine and release round trip in a 3-node fleet, with correct ECS
/// scopes — through one node's API, every node moves that tenant (and only it) onto the
/// quarantine cells; with its region drained the scope is the client's prefix everywhere;
/// released through another node's CLI, every node serves its own shard again.
#[test]
fn quarantine_and_release_round_trip_across_three_nodes_with_correct_scopes() {
    let mut fleet = Fleet {
        etcd: Etcd::start(),
        prefix: "/steerdns/quarantine".into(),
        nodes: Vec::new(),
    };
    fleet.add_prepared_node("quarantine", 10, "", &[], |setup| {
        let dir = setup.path("tenants");
        std::fs::create_dir_all(&dir).expect("mkdir tenants");
        for tenant in ["fabrikam", "northwind"] {
            let file = format!("{tenant}.toml");
            std::fs::copy(repo_path(&format!("tenants/{file}")), dir.join(&file))
                .expect("copy the example's tenant");
        }
    });
    fleet.add_node("quarantine", 10, "", &[]);
    fleet.add_node("quarantine", 10, "", &[]);
    fleet.wait_connected(LIMIT);
    let quarantine: Vec<std::net::Ipv4Addr> = (111..=113)
        .map(|n| std::net::Ipv4Addr::new(192, 0, 2, n))
        .collect();
    let in_quarantine =
        |a: &[std::net::Ipv4Addr]| a.len() == 2 && a.iter().all(|x| quarantine.contains(x));
    let fabrikam = "fabrikam.edge.example.net.";
    let northwind = "northwind.edge.example.net.";
    let before = wait_answers_everywhere(&fleet, fabrikam, "its own pair", |a, _| a.len() == 2);
    assert!(
        before.windows(2).all(|w| w[0] == w[1]),
        "one shard everywhere: {before:?}"
    );
    assert!(
        !in_quarantine(&before[0].0) && before[0].1 == Some(0),
        "{before:?}"
    );
    let northwind_before =
        wait_answers_everywhere(&fleet, northwind, "its pair", |a, _| a.len() == 2);

    let (code, body) = request(
        fleet.nodes[1].daemon(),
        "POST",
        "/v1/tenants/fabrikam/quarantine",
        None,
        None,
        "",
    );
    assert!(code == 200 || code == 202, "{code}: {body}");
    let took = Instant::now();
    let quarantined = wait_answers_everywhere(&fleet, fabrikam, "quarantined", |a, s| {
        in_quarantine(a) && s == Some(0)
    });
    println!(
        "quarantine through ns2 answered by all 3 nodes {:?} after the reply",
        took.elapsed()
    );
    assert!(
        quarantined.windows(2).all(|w| w[0] == w[1]),
        "{quarantined:?}"
    );
    let stored = fleet.etcd.etcdctl(&[
        "get",
        &format!("{}/tenants/fabrikam", fleet.prefix),
        "--print-value-only",
    ]);
    assert!(
        stored.contains("state = \"quarantined\""),
        "etcd holds it: {stored}"
    );
    for node in &fleet.nodes {
        assert_eq!(
            eu_west_answer(node, northwind),
            northwind_before[0],
            "{}",
            node.name
        );
        assert_eq!(node.status()["tenants"]["quarantined"], 1, "{}", node.name);
    }

    // eu-west drained (the fleet's control state): the client's prefix decides everywhere,
    // and fabrikam still answers from its quarantine cells only.
    ok(&fleet.nodes[0].cli(&["drain", "eu-west"]), "drain eu-west");
    let drained = wait_answers_everywhere(&fleet, fabrikam, "scope 24 once drained", |a, s| {
        in_quarantine(a) && s == Some(24)
    });
    assert_eq!(drained[0].0, quarantined[0].0, "the same quarantine cells");
    let moved = wait_answers_everywhere(&fleet, northwind, "sent on", |a, s| {
        s == Some(24) && a.iter().all(|x| !quarantine.contains(x))
    });
    assert!(moved.iter().all(|(a, _)| !a.is_empty()));
    ok(
        &fleet.nodes[0].cli(&["undrain", "eu-west"]),
        "undrain eu-west",
    );

    ok(
        &fleet.nodes[2].cli(&["tenant", "release", "fabrikam"]),
        "release through ns3",
    );
    let released = wait_answers_everywhere(&fleet, fabrikam, "released", |a, s| {
        a == before[0].0.as_slice() && s == Some(0)
    });
    assert_eq!(released, before);
    for node in &fleet.nodes {
        assert_eq!(node.status()["tenants"]["quarantined"], 0, "{}", node.name);
    }
}
