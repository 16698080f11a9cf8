//! Tenant-first shedding (issue 31, item 3), with the real binary over real sockets: twelve
//! tenants on the bundled example; a load feed pushed with `steerdns load push` says eu-west is
//! hot (990 of 1000) and that tenant t0003's clients there bring 600 of it. The shield sheds
//! that tenant alone: its answers for eu-west clients (ECS) leave eu-west's global cells for its
//! cells in eu-north or fb-eu, while every other tenant's answers from eu-west are the addresses
//! they were, the region's own shed stays 0, and the victim's answers from elsewhere are
//! unchanged. Status, metrics and the `CH TXT` trace say why. A calm feed then releases it:
//! every answer as before.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::Ipv4Addr;
use std::time::Duration;

use hickory_proto::op::Message;
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{DNSClass, RData, RecordType};

use crate::control_common::*;
use crate::tenants::{metric, owned, setup_with, tenant_name, wait_tenants};

const TENANTS: usize = 12;
const SURGING: &str = "t0003";
/// The most any wait on the server may take.
const WAIT: Duration = Duration::from_secs(20);

/// The bundled example's cells of eu-north and fb-eu, where eu-west's clients are shed to.
fn neighbour_cells() -> BTreeSet<Ipv4Addr> {
    let eu_north = (151..=153).map(|n| Ipv4Addr::new(198, 51, 100, n));
    let fb_eu = (121..=123).map(|n| Ipv4Addr::new(203, 0, 113, n));
    eu_north.chain(fb_eu).collect()
}

/// Quick ticks and a feed that stays fresh for a minute; `tenant_share` left at its default.
fn shield_config() -> &'static str {
    "\n[shield]\ntick_ms = 100\nhold_down_secs = 1\nshort_ttl = 5\nstale_after_secs = 60\n\
     revert_after_secs = 120\n"
}

/// Every region of the bundled example (eu-west at `eu_west`), and the tenants' figures from
/// eu-west's clients.
fn feed(eu_west: f64, tenants: &[(&str, f64)]) -> String {
    let mut feed = every_region_feed(eu_west, "tenant-first test");
    let figures: serde_json::Map<String, serde_json::Value> = tenants
        .iter()
        .map(|(tenant, load)| (tenant.to_string(), serde_json::json!({ "eu-west": load })))
        .collect();
    feed["tenants"] = serde_json::Value::Object(figures);
    feed.to_string()
}

fn push(server: &Daemon, setup: &Setup, body: &str) {
    ok(&server.push_load(setup, body), "load push");
}

fn ecs_scope(response: &Message) -> Option<u8> {
    match response.edns.as_ref()?.option(EdnsCode::Subnet)? {
        EdnsOption::Subnet(cs) => Some(cs.scope_prefix()),
        _ => None,
    }
}

/// Every tenant's A addresses for a client of eu-west (ECS), and their ECS scopes.
fn from_eu_west(resolver: &mut Resolver) -> BTreeMap<String, (BTreeSet<Ipv4Addr>, Option<u8>)> {
    (0..TENANTS)
        .map(|i| {
            let name = tenant_name(i);
            let response = resolver.ask(&ecs_query(&owned(&name), RecordType::A, EU_WEST_SUBNET));
            let addresses = a_records(&response).into_iter().collect();
            (name, (addresses, ecs_scope(&response)))
        })
        .collect()
}

/// Every tenant's A addresses for a client of the default region (no ECS: loopback is
/// na-east's).
fn from_elsewhere(resolver: &mut Resolver) -> BTreeMap<String, BTreeSet<Ipv4Addr>> {
    (0..TENANTS)
        .map(|i| {
            let name = tenant_name(i);
            let response = resolver.ask(&plain_query(&owned(&name), RecordType::A));
            (name, a_records(&response).into_iter().collect())
        })
        .collect()
}

/// `CH TXT <name>` for a client of eu-west.
fn trace_from_eu_west(resolver: &mut Resolver, name: &str) -> String {
    let mut query: Message = ecs_query(name, RecordType::TXT, EU_WEST_SUBNET);
    query.queries[0].set_query_class(DNSClass::CH);
    let response = resolver.ask(&query);
    response
        .answers
        .iter()
        .find_map(|r| match &r.data {
            RData::TXT(txt) => Some(txt.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no TXT in the CH answer for {name}: {response:?}"))
}

/// The status entry of `tenant`'s own shed, if it has one.
fn tenant_shed(status: &serde_json::Value, tenant: &str) -> Option<serde_json::Value> {
    status["shield"]["tenants"]
        .as_array()?
        .iter()
        .find(|t| t["tenant"] == tenant)
        .cloned()
}

fn eu_west_fraction(status: &serde_json::Value) -> f64 {
    status["shield"]["regions"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "eu-west"))
        .and_then(|r| r["shed_fraction"].as_f64())
        .unwrap_or_else(|| panic!("no eu-west in {:#}", status["shield"]))
}

#[test]
fn a_surging_tenant_alone_leaves_its_hot_region_and_comes_back_when_calm() {
    let setup = setup_with("tenant-first", TENANTS, |i| 200 + i as u32);
    let mut config = std::fs::OpenOptions::new()
        .append(true)
        .open(&setup.config)
        .expect("open config copy");
    config
        .write_all(shield_config().as_bytes())
        .expect("append [shield]");
    let server = setup.start();
    wait_tenants(&server, "every tenant served", |t| {
        t["served"].as_u64() == Some(TENANTS as u64)
    });
    let mut resolver = Resolver::new(server.dns);
    let before = from_eu_west(&mut resolver);
    let elsewhere = from_elsewhere(&mut resolver);
    assert!(before.values().all(|(a, _)| a.len() == 2), "{before:?}");

    // The surge: eu-west hot, t0003 bringing 600 of its 990; t0004 a quiet 50.
    push(
        &server,
        &setup,
        &feed(990.0, &[(SURGING, 600.0), ("t0004", 50.0)]),
    );
    let status = server.wait_for_status("t0003 shed on its own", WAIT, |s| {
        tenant_shed(s, SURGING).is_some_and(|t| t["shed_fraction"].as_f64() == Some(1.0))
    });
    let shed = tenant_shed(&status, SURGING).expect("t0003's shed");
    assert_eq!(shed["region"], "eu-west", "{shed:#}");
    assert!(shed["share"].as_f64().is_some_and(|s| s > 0.3), "{shed:#}");
    assert!(tenant_shed(&status, "t0004").is_none(), "under its share");
    assert_eq!(eu_west_fraction(&status), 0.0, "the region is not shed");

    let during = from_eu_west(&mut resolver);
    let (victim, scope) = &during[SURGING];
    assert_eq!(victim.len(), 2, "k = 2 of its cells there: {victim:?}");
    assert!(victim.is_subset(&neighbour_cells()), "{victim:?}");
    assert!(victim.is_disjoint(&before[SURGING].0), "its answer moved");
    assert_eq!(*scope, Some(24), "the client's location decided its answer");
    for (tenant, (addresses, _)) in &during {
        if tenant != SURGING {
            assert_eq!(addresses, &before[tenant].0, "{tenant}: answer unchanged");
        }
    }
    let changed = during
        .iter()
        .filter(|(t, (a, _))| a != &before[t.as_str()].0)
        .count();
    assert_eq!(changed, 1, "only the surging tenant's answers changed");
    assert_eq!(
        from_elsewhere(&mut resolver),
        elsewhere,
        "clients of other regions keep every answer, the surging tenant's too"
    );
    let trace = trace_from_eu_west(&mut resolver, &owned(SURGING));
    assert!(
        trace.contains("tenant-first: tenant t0003 shed on its own"),
        "{trace}"
    );
    assert!(
        !trace_from_eu_west(&mut resolver, &owned("t0004")).contains("tenant-first"),
        "the other tenants' traces do not say so"
    );
    assert_eq!(
        metric(
            &server,
            "steerdns_shield_tenant_shed_fraction",
            &[("tenant", SURGING), ("region", "eu-west")]
        ),
        1.0
    );
    assert_eq!(
        eu_west_fraction(&server.wait_for_shield_ticks(5, WAIT)),
        0.0,
        "still not the region, five ticks on"
    );

    // Calm: t0003 back to 50, eu-west at 440. After the hold-down it is given back step by
    // step, and every answer is what it was.
    push(
        &server,
        &setup,
        &feed(440.0, &[(SURGING, 50.0), ("t0004", 50.0)]),
    );
    server.wait_for_status("t0003 released", WAIT, |s| {
        tenant_shed(s, SURGING).is_none()
    });
    let after: BTreeMap<String, BTreeSet<Ipv4Addr>> = from_eu_west(&mut resolver)
        .into_iter()
        .map(|(t, (a, _))| (t, a))
        .collect();
    let originally: BTreeMap<String, BTreeSet<Ipv4Addr>> =
        before.into_iter().map(|(t, (a, _))| (t, a)).collect();
    assert_eq!(after, originally, "every answer from eu-west as before");
    let changes = server.status()["shield"]["recent_changes"].clone();
    let tenant_changes = changes
        .as_array()
        .map_or(0, |c| c.iter().filter(|c| c["tenant"] == SURGING).count());
    assert!(tenant_changes >= 2, "up and back down, logged: {changes:#}");
}
