//! The fleet traffic shield with a real etcd and three real `steerdns serve` nodes on loopback:
//! one node leads (the holder of `<prefix>/shield/leader`), steps on the fleet-wide demand and
//! the freshest feed, and publishes the state; every node serves the published state, so all
//! three answer every client subnet alike. Then the leader is killed (another takes over from
//! the published state), and etcd is stopped (the survivors keep the last state, then decay to
//! normal answers after `revert_after_secs` without contact). Bad contents put into etcd by
//! hand are refused with the reason in status and never replace what is served.
//!
//! Every wait polls observable state (the leader key, the state revision, the status), never a
//! fixed sleep. Short ticks, lease and revert times keep the file to seconds.

use crate::control_common;
use crate::fleet_common;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use serde_json::Value;

use control_common::*;
use fleet_common::*;

const EDGE: &str = "contoso.edge.example.net.";
const LEASE_TTL: u64 = 2;
const REVERT_SECS: u64 = 4;
/// eu-west client subnets compared across the nodes.
const SUBNETS: usize = 240;
const WAIT: Duration = Duration::from_secs(20);

/// Fast ticks; a feed is stale after 2 s (the feeder keeps it fresh), and a node without
/// etcd decays after [`REVERT_SECS`].
fn shield_section() -> String {
    format!(
        "\n[shield]\ntick_ms = 100\nhold_down_secs = 1\nshort_ttl = 5\n\
         stale_after_secs = 2\nrevert_after_secs = {REVERT_SECS}\n"
    )
}

fn overload_feed() -> String {
    eu_west_feed(
        &steerdns::rfc3339::format_utc_millis(SystemTime::now()),
        990.0,
        "fleet-shield test",
    )
}

/// A monitoring system that keeps pushing a fresh overload feed (`POST /v1/load`) to one
/// node every 200 ms, until dropped.
struct Feeder {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Feeder {
    fn start(addr: SocketAddr) -> Feeder {
        Feeder::start_with(addr, overload_feed)
    }

    /// A feeder pushing a fresh `feed()` every 200 ms.
    fn start_with(addr: SocketAddr, feed: fn() -> String) -> Feeder {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                let body = feed();
                let request = format!(
                    "POST /v1/load HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
                     Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                // Refused while the node restarts or is killed: the next push tries again.
                let _ = send_http(addr, request.as_bytes());
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        Feeder {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The leader key's value, if any (etcdctl).
fn leader_key(fleet: &Fleet) -> Option<String> {
    let out = fleet.etcd.etcdctl(&[
        "get",
        &format!("{}/shield/leader", fleet.prefix),
        "--print-value-only",
    ]);
    let name = out.trim();
    (!name.is_empty()).then(|| name.to_string())
}

/// A lease of `ttl` seconds granted by etcdctl (nobody keeps it alive); its id in hex.
/// A fleet of `nodes` nodes with the shield of [`shield_section`], each connected to etcd.
fn shield_fleet_of(label: &str, nodes: usize) -> Fleet {
    let fleet = Fleet::start_on(
        Etcd::start(),
        label,
        nodes,
        LEASE_TTL,
        &shield_section(),
        &[],
    );
    fleet.wait_connected(WAIT);
    fleet
}

/// Waits until every node serves a shield state published through etcd; their statuses.
fn wait_published(fleet: &Fleet) -> Vec<Value> {
    wait_all(fleet, "serving a published state", |s| {
        shield_fleet(s)["revision"].is_i64()
    })
}

/// Puts `name` in the shield's leader key on a live lease of `ttl` seconds that no node holds.
fn put_leader_on_lease(fleet: &Fleet, name: &str, ttl: u64) {
    let lease = grant_lease(fleet, ttl);
    let key = format!("{}/shield/leader", fleet.prefix);
    fleet
        .etcd
        .etcdctl(&["put", &format!("--lease={lease}"), &key, name]);
}

fn grant_lease(fleet: &Fleet, ttl: u64) -> String {
    let out = fleet.etcd.etcdctl(&["lease", "grant", &ttl.to_string()]);
    out.split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("lease grant: {out}"))
        .to_string()
}

fn running(fleet: &Fleet) -> Vec<&Node> {
    fleet.nodes.iter().filter(|n| n.daemon.is_some()).collect()
}

fn shield_fleet(status: &Value) -> &Value {
    &status["shield"]["fleet"]
}

fn eu_west(status: &Value) -> &Value {
    status["shield"]["regions"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "eu-west"))
        .unwrap_or(&Value::Null)
}

fn eu_west_fraction(status: &Value) -> f64 {
    eu_west(status)["shed_fraction"].as_f64().unwrap_or(0.0)
}

/// Polls every running node's status until `ready` holds for all of them; returns them.
fn wait_all(fleet: &Fleet, what: &str, ready: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let statuses: Vec<Value> = running(fleet).iter().map(|n| n.status()).collect();
        if statuses.iter().all(&ready) {
            return statuses;
        }
        assert!(
            Instant::now() < deadline,
            "not {what} within {WAIT:?}: {:#?}",
            statuses
                .iter()
                .map(|s| (&s["shield"]["fleet"], eu_west(s)))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The revision each running node serves.
fn revisions(fleet: &Fleet) -> Vec<Option<i64>> {
    running(fleet)
        .iter()
        .map(|n| shield_fleet(&n.status())["revision"].as_i64())
        .collect()
}

/// Every running node's A answers for `subnets` (ECS queries), per node.
fn answers_per_node(fleet: &Fleet, subnets: &[String]) -> Vec<Vec<Vec<Ipv4Addr>>> {
    let queries: Vec<Message> = subnets
        .iter()
        .map(|s| ecs_query(EDGE, RecordType::A, s))
        .collect();
    running(fleet)
        .iter()
        .map(|node| {
            let mut resolver = Resolver::new(node.daemon().dns);
            resolver.ask_all(&queries).iter().map(a_records).collect()
        })
        .collect()
}

/// Every running node's A answers for `subnets`, asked while all served one state revision
/// (read before and after the batch; retried until they agree). Returns the revision and,
/// per node, the answers.
fn answers_at_one_revision(fleet: &Fleet, subnets: &[String]) -> (i64, Vec<Vec<Vec<Ipv4Addr>>>) {
    let deadline = Instant::now() + WAIT;
    loop {
        let before = revisions(fleet);
        let answers = answers_per_node(fleet, subnets);
        let after = revisions(fleet);
        let one: BTreeSet<Option<i64>> = before.iter().chain(&after).copied().collect();
        if let (1, Some(Some(revision))) = (one.len(), one.first()) {
            return (*revision, answers);
        }
        assert!(
            Instant::now() < deadline,
            "the nodes never served one state revision for a whole batch: {before:?} {after:?}"
        );
    }
}

/// Asserts every running node answers every subnet alike, and that part of them is shed
/// (not the global anycast); returns how many subnets were shed.
fn assert_all_agree(fleet: &Fleet, subnets: &[String]) -> usize {
    let (revision, answers) = answers_at_one_revision(fleet, subnets);
    for (i, subnet) in subnets.iter().enumerate() {
        let first = &answers[0][i];
        for (n, node) in answers.iter().enumerate().skip(1) {
            assert_eq!(
                &node[i], first,
                "{subnet}: node #{n} answers {:?}, node #0 {first:?} (revision {revision})",
                node[i]
            );
        }
    }
    let shed = answers[0]
        .iter()
        .filter(|a| a.as_slice() != [GLOBAL_V4])
        .count();
    assert!(shed > 0, "no subnet shed at revision {revision}");
    assert!(
        shed < subnets.len(),
        "every subnet shed at revision {revision}"
    );
    // The decision trace names the revision that decided it.
    let mut resolver = Resolver::new(running(fleet)[0].daemon().dns);
    let trace = trace_text(&resolver.ask(&trace_query(EDGE, &subnets[0])));
    assert!(
        trace.contains("shield state revision "),
        "no revision in the trace: {trace}"
    );
    shed
}

#[test]
fn one_leader_decides_for_the_fleet_survives_its_death_and_etcd_loss() {
    let mut fleet = shield_fleet_of("shield", 3);
    let statuses = wait_all(&fleet, "agreeing on a leader", |s| {
        shield_fleet(s)["leader"].is_string()
    });
    let leader = leader_key(&fleet).expect("a leader key");
    for status in &statuses {
        assert_eq!(shield_fleet(status)["leader"], leader.as_str());
    }
    let leader_index = fleet
        .nodes
        .iter()
        .position(|n| n.name == leader)
        .expect("the leader is one of the nodes");
    let listed = fleet.nodes[0].cli(&["fleet", "status", "--json"]);
    let listed: Value = serde_json::from_str(&ok(&listed, "fleet status --json")).expect("JSON");
    assert_eq!(listed["leader"], leader.as_str(), "{listed:#}");

    // A feed pushed to one node that does not lead (the CLI, then a feeder keeping it fresh).
    let pushed_to = (leader_index + 1) % 3;
    let target = &fleet.nodes[pushed_to];
    ok(
        &target.daemon().push_load(&target.setup, &overload_feed()),
        "load push",
    );
    let feeder = Feeder::start(target.daemon().admin);
    wait_all(&fleet, "shedding eu-west", |s| {
        eu_west_fraction(s) > 0.0 && shield_fleet(s)["revision"].is_i64()
    });
    let subnets = eu_west_subnets(SUBNETS);
    let shed = assert_all_agree(&fleet, &subnets);
    println!("all three agree on {SUBNETS} eu-west subnets, {shed} shed");
    let listed = fleet.nodes[0].cli(&["fleet", "status", "--json"]);
    let listed: Value = serde_json::from_str(&ok(&listed, "fleet status --json")).expect("JSON");
    for node in listed["nodes"].as_array().expect("nodes") {
        assert!(node["shield"]["revision"].is_i64(), "{node:#}");
        assert!(node["shield"]["feed_age_secs"].is_f64(), "{node:#}");
    }
    let (code, metrics) = http(
        fleet.nodes[leader_index].daemon().admin,
        "GET",
        "/metrics",
        Some(TOKEN),
    );
    assert_eq!(code, 200);
    assert!(
        metrics.contains("\nsteerdns_shield_fleet_leader 1.0\n"),
        "the leader's /metrics says it leads:\n{metrics}"
    );

    // The leader dies: another node takes the key once its lease expires, and carries on from
    // the published state (eu-west never stops shedding on the survivors).
    if pushed_to == leader_index {
        unreachable!("the feed goes to a node that does not lead");
    }
    let killed_at = Instant::now();
    fleet.nodes[leader_index].kill();
    let deadline = killed_at + WAIT;
    let successor = loop {
        let statuses: Vec<Value> = running(&fleet).iter().map(|n| n.status()).collect();
        for status in &statuses {
            assert!(
                eu_west_fraction(status) > 0.0,
                "a survivor stopped shedding during the takeover: {:#}",
                status["shield"]
            );
        }
        match leader_key(&fleet) {
            Some(name) if name != leader => break name,
            _ => {}
        }
        assert!(Instant::now() < deadline, "no new leader within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = killed_at.elapsed();
    println!("{successor} took over {took:?} after {leader} was killed");
    assert!(
        took <= Duration::from_secs(LEASE_TTL) + Duration::from_millis(1500),
        "takeover took {took:?} (lease TTL {LEASE_TTL} s)"
    );
    let before = revisions(&fleet).into_iter().flatten().max().unwrap_or(0);
    wait_all(&fleet, "serving the successor's state", |s| {
        shield_fleet(s)["published_by"] == successor.as_str()
            && shield_fleet(s)["revision"].as_i64() > Some(before)
    });
    assert_all_agree(&fleet, &subnets);

    // etcd goes away: each node keeps serving the last state it had (fail-static), unchanged.
    fleet.etcd.stop();
    let statuses = wait_all(&fleet, "fail-static", |s| {
        shield_fleet(s)["role"] == "fail-static"
    });
    let held: Vec<Option<i64>> = statuses
        .iter()
        .map(|s| shield_fleet(s)["revision"].as_i64())
        .collect();
    assert!(held.iter().all(Option::is_some), "{held:?}");
    let frozen = answers_per_node(&fleet, &subnets);
    let later = answers_per_node(&fleet, &subnets);
    let statuses: Vec<Value> = running(&fleet).iter().map(|n| n.status()).collect();
    let mut checked = 0;
    for (i, (status, revision)) in statuses.iter().zip(&held).enumerate() {
        // (A node that has meanwhile reached revert_after_secs decays: checked below.)
        if shield_fleet(status)["role"] == "fail-static" {
            assert_eq!(
                shield_fleet(status)["revision"].as_i64(),
                *revision,
                "{status:#}"
            );
            assert_eq!(
                later[i], frozen[i],
                "a fail-static node changed its answers"
            );
            checked += 1;
        }
    }
    assert!(
        checked > 0,
        "no node stayed fail-static for two batches of queries"
    );
    let statuses = wait_all(&fleet, "reverting", |s| {
        shield_fleet(s)["role"] == "reverting"
    });
    for status in &statuses {
        let contact = shield_fleet(status)["contact_age_secs"]
            .as_f64()
            .unwrap_or(0.0);
        assert!(
            contact >= REVERT_SECS as f64,
            "decaying after {contact} s without etcd (revert_after_secs = {REVERT_SECS})"
        );
    }
    wait_all(&fleet, "back to normal answers", |s| {
        eu_west_fraction(s) == 0.0
    });
    for node in running(&fleet) {
        let mut resolver = Resolver::new(node.daemon().dns);
        wait_all_target_a(&mut resolver, &subnets);
    }
    drop(feeder);
}

/// Every subnet answered with the global anycast (the decay may take a few ticks to reach the
/// serving path after the status says so).
fn wait_all_target_a(resolver: &mut Resolver, subnets: &[String]) {
    let deadline = Instant::now() + WAIT;
    loop {
        let answers: Vec<Vec<Ipv4Addr>> = resolver
            .ask_a_from_each(EDGE, subnets)
            .iter()
            .map(a_records)
            .collect();
        if answers.iter().all(|a| a.as_slice() == [GLOBAL_V4]) {
            return;
        }
        assert!(Instant::now() < deadline, "not back to global anycast");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn bad_contents_in_etcd_are_refused_and_never_served() {
    let fleet = shield_fleet_of("shield-bad", 2);
    let prefix = fleet.prefix.clone();
    let feeder = Feeder::start(fleet.nodes[0].daemon().admin);
    let statuses = wait_all(&fleet, "shedding eu-west", |s| {
        eu_west_fraction(s) > 0.0 && shield_fleet(s)["revision"].is_i64()
    });
    let leader = leader_key(&fleet).expect("a leader");
    let leader_node = fleet
        .nodes
        .iter()
        .find(|n| n.name == leader)
        .expect("leader node");
    drop(statuses);

    // A report no node wrote: refused by the leader, its demand left out.
    fleet.etcd.etcdctl(&[
        "put",
        &format!("{prefix}/shield/nodes/ns9"),
        "{\"node\": \"ns9\", \"demand\": {\"mars-1\": {\"kept\": 1e300}}}",
    ]);
    leader_node
        .daemon()
        .wait_for_status("the bogus report refused", WAIT, |s| {
            shield_fleet(s)["last_refusal"]
                .as_str()
                .is_some_and(|r| r.contains("report of node ns9"))
        });

    // A hijacked leader key (on a live lease no node holds) and a published state naming an
    // unknown region: the leader stops publishing, every node refuses the state and keeps
    // serving the last good one. (A key on no lease is taken over at once: see
    // `a_hand_written_leader_key_is_taken_over`.)
    let served = revisions(&fleet);
    put_leader_on_lease(&fleet, "intruder", 60);
    let bogus = r#"{"leader":"intruder","at_ms":0,"feed":null,"demand_from":[],"state":{"regions":{"mars-1":{"fraction":1.0,"shares":{},"last_direction":0,"last_move_at":0,"natural":0,"trend":0,"predicted_utilisation":0,"hot":false,"hot_since":null,"note":"normal"}},"moves":[],"sites":{},"last_tick_ms":null,"demand":{},"demand_age_ms":0}}"#;
    fleet
        .etcd
        .etcdctl(&["put", &format!("{prefix}/shield/state"), bogus]);
    let statuses = wait_all(&fleet, "refusing the bogus state", |s| {
        shield_fleet(s)["last_refusal"]
            .as_str()
            .is_some_and(|r| r.contains("mars-1"))
    });
    for (status, before) in statuses.iter().zip(&served) {
        assert!(
            shield_fleet(status)["revision"].as_i64() >= *before,
            "{status:#}"
        );
        assert!(eu_west_fraction(status) > 0.0, "{:#}", status["shield"]);
        assert_ne!(shield_fleet(status)["role"], "leader");
    }
    // Garbage in the shared load record: refused as a feed, the last good feed stays.
    drop(feeder);
    fleet
        .etcd
        .etcdctl(&["put", &format!("{prefix}/shield/load"), "{not json"]);
    wait_all(&fleet, "refusing the garbage load record", |s| {
        s["shield"]["last_feed_refusal"]
            .as_str()
            .is_some_and(|r| r.contains("load record"))
    });
    // The key handed back: a node claims it and publishes again.
    fleet
        .etcd
        .etcdctl(&["del", &format!("{prefix}/shield/leader")]);
    let newest = served.into_iter().flatten().max().unwrap_or(0);
    wait_all(&fleet, "serving a new published state", |s| {
        shield_fleet(s)["leader"]
            .as_str()
            .is_some_and(|l| l != "intruder")
            && shield_fleet(s)["revision"].as_i64() > Some(newest)
    });
}

/// Issue #28 item 6: a leader key written by hand (on no lease: nobody keeps it alive, it would
/// never expire) is taken over by a node, which publishes again.
#[test]
fn a_hand_written_leader_key_is_taken_over() {
    let fleet = shield_fleet_of("shield-handwritten", 2);
    let statuses = wait_published(&fleet);
    let before = statuses
        .iter()
        .filter_map(|s| shield_fleet(s)["revision"].as_i64())
        .max()
        .unwrap_or(0);
    let key = format!("{}/shield/leader", fleet.prefix);
    fleet.etcd.etcdctl(&["put", &key, "ghost"]);
    let statuses = wait_all(&fleet, "a node leading again and publishing", |s| {
        shield_fleet(s)["leader"]
            .as_str()
            .is_some_and(|l| l.starts_with("ns"))
            && shield_fleet(s)["revision"].as_i64() > Some(before)
    });
    assert!(
        statuses.iter().any(|s| shield_fleet(s)["role"] == "leader"),
        "{statuses:#?}"
    );
    assert!(leader_key(&fleet).is_some_and(|l| l.starts_with("ns")));
}

/// Issue #28 item 6: a leader that holds its key on a live lease but stops publishing (here a
/// key put on a lease by hand) leaves the published state ageing: every node alerts, and after
/// `revert_after_secs` decays to normal answers exactly as without etcd.
#[test]
fn a_leader_that_stops_publishing_is_alerted_on_then_decays() {
    let fleet = shield_fleet_of("shield-stale", 2);
    wait_published(&fleet);
    put_leader_on_lease(&fleet, "ghost", 120);
    let statuses = wait_all(&fleet, "alerting on the ageing state", |s| {
        shield_fleet(s)["stale"] == true
    });
    for status in &statuses {
        let alerts = status["shield"]["alerts"].to_string();
        assert!(
            alerts.contains("has not renewed the published state"),
            "{alerts}"
        );
        assert_ne!(shield_fleet(status)["role"], "leader");
    }
    wait_all(&fleet, "decaying as without etcd", |s| {
        shield_fleet(s)["role"] == "reverting"
    });
    let (code, metrics) = http(fleet.nodes[0].daemon().admin, "GET", "/metrics", None);
    assert_eq!(code, 200);
    assert!(
        metrics.contains("steerdns_shield_fleet_state_stale 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("steerdns_shield_fleet_fail_static 2"),
        "{metrics}"
    );
}

/// Issue #28 item 7: a published state whose timers run ahead of a node's clock by more than a
/// hold-down (a leader with a fast clock would freeze every hold-down after a failover) is
/// refused with the field; before, anything up to two days ahead was accepted.
#[test]
fn a_published_state_with_timers_beyond_the_hold_down_is_refused() {
    let fleet = shield_fleet_of("shield-clock", 2);
    wait_published(&fleet);
    // Nobody else publishes meanwhile: the leader key on a live lease no node holds.
    put_leader_on_lease(&fleet, "fast-clock", 60);
    let now_ms = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let ahead = now_ms + 3_600_000;
    let state = format!(
        r#"{{"leader":"fast-clock","at_ms":{now_ms},"feed":null,"demand_from":[],"state":{{"regions":{{"eu-west":{{"fraction":0.5,"shares":{{}},"last_direction":1,"last_move_at":{ahead},"natural":0,"trend":0,"predicted_utilisation":0,"hot":false,"hot_since":null,"note":"normal"}}}},"moves":[],"sites":{{}},"last_tick_ms":null,"demand":{{}},"demand_age_ms":0}}}}"#
    );
    fleet
        .etcd
        .etcdctl(&["put", &format!("{}/shield/state", fleet.prefix), &state]);
    wait_all(&fleet, "refusing the state from a fast clock", |s| {
        shield_fleet(s)["last_refusal"]
            .as_str()
            .is_some_and(|r| r.contains("state.regions.eu-west.last_move_at"))
    });
}

/// eu-west hot (990 of 1000), fabrikam's clients there bringing 600 of it, tailspin's 20.
fn tenant_surge_feed() -> String {
    let mut feed = every_region_feed(990.0, "fleet tenant-first test");
    feed["tenants"] = serde_json::json!({
        "fabrikam": { "eu-west": 600.0 },
        "tailspin": { "eu-west": 20.0 },
    });
    feed.to_string()
}

/// `name`'s A addresses at `node` for a client of eu-west (ECS).
fn from_eu_west(node: &Node, name: &str) -> BTreeSet<Ipv4Addr> {
    let response =
        Resolver::new(node.daemon().dns).ask(&ecs_query(name, RecordType::A, EU_WEST_SUBNET));
    a_records(&response).into_iter().collect()
}

/// The bundled example's cells of eu-north and fb-eu, where eu-west's clients are shed to.
fn neighbour_cells() -> BTreeSet<Ipv4Addr> {
    let eu_north = (151..=153).map(|n| Ipv4Addr::new(198, 51, 100, n));
    let fb_eu = (121..=123).map(|n| Ipv4Addr::new(203, 0, 113, n));
    eu_north.chain(fb_eu).collect()
}

/// Tenant-first shedding in a fleet (issue 31 item 3): the leader decides a tenant's own shed
/// from a feed pushed to another node, publishes it with the regions' state, and every node
/// serves it: the surging tenant's eu-west clients get its neighbour cells from all three,
/// the other tenant's answers and the region's shed stay as they were.
#[test]
fn a_tenant_shed_decided_by_the_leader_is_served_by_every_node() {
    const FABRIKAM: &str = "fabrikam.edge.example.net.";
    const TAILSPIN: &str = "tailspin.edge.example.net.";
    let mut fleet = Fleet {
        etcd: Etcd::start(),
        prefix: "/steerdns/tenant-shed".into(),
        nodes: Vec::new(),
    };
    fleet.add_prepared_node(
        "tenant-shed",
        LEASE_TTL,
        &shield_section(),
        &[],
        with_example_tenants,
    );
    fleet.add_node("tenant-shed", LEASE_TTL, &shield_section(), &[]);
    fleet.add_node("tenant-shed", LEASE_TTL, &shield_section(), &[]);
    fleet.wait_connected(WAIT);
    wait_all(
        &fleet,
        "serving both tenants and agreeing on a leader",
        |s| s["tenants"]["served"].as_u64() == Some(2) && shield_fleet(s)["leader"].is_string(),
    );
    let before: Vec<_> = fleet
        .nodes
        .iter()
        .map(|n| (from_eu_west(n, FABRIKAM), from_eu_west(n, TAILSPIN)))
        .collect();
    assert!(
        before.iter().all(|b| b == &before[0] && b.0.len() == 2),
        "{before:?}"
    );

    let leader = leader_key(&fleet).expect("a leader key");
    let pushed_to = fleet
        .nodes
        .iter()
        .position(|n| n.name != leader)
        .expect("a node that does not lead");
    let _feeder = Feeder::start_with(fleet.nodes[pushed_to].daemon().admin, tenant_surge_feed);
    let statuses = wait_all(&fleet, "serving fabrikam's own shed", |s| {
        shield_fleet(s)["revision"].is_i64()
            && s["shield"]["tenants"].as_array().is_some_and(|t| {
                t.iter()
                    .any(|t| t["tenant"] == "fabrikam" && t["shed_fraction"] == 1.0)
            })
    });
    for status in &statuses {
        assert_eq!(eu_west_fraction(status), 0.0, "the region is not shed");
        let tenants = status["shield"]["tenants"].as_array().expect("tenants");
        assert!(
            tenants.iter().all(|t| t["tenant"] != "tailspin"),
            "tailspin is under its share: {tenants:?}"
        );
    }
    for (node, (fabrikam, tailspin)) in fleet.nodes.iter().zip(&before) {
        let moved = from_eu_west(node, FABRIKAM);
        assert_eq!(moved.len(), 2, "{}: k = 2 cells: {moved:?}", node.name);
        assert!(
            moved.is_subset(&neighbour_cells()),
            "{}: {moved:?}",
            node.name
        );
        assert!(moved.is_disjoint(fabrikam), "{}: fabrikam moved", node.name);
        assert_eq!(
            &from_eu_west(node, TAILSPIN),
            tailspin,
            "{}: tailspin's answer unchanged",
            node.name
        );
    }
    println!(
        "fabrikam's own shed (leader {leader}, feed at {}) served by all 3 nodes",
        fleet.nodes[pushed_to].name
    );
}
