//! Quarantine (issue 31, item 3), with the real binary over real sockets: twelve tenants on
//! the bundled example; `steerdns tenant quarantine t0003` moves that tenant — and only it —
//! onto the quarantine cells (`q1`..`q3`), from every client location, with the ECS scope the
//! answer would have without quarantine (0 while nothing depends on the client; the client's
//! prefix once its region is drained); it is a recorded tenant change (history, status,
//! metrics), blame leaves it out, and `tenant release` puts the document and every answer
//! back. The API endpoints need the token and name unknown tenants.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use hickory_proto::op::Message;
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::RecordType;

use crate::control_common::*;
use crate::tenants::{metric, owned, setup_with, wait_tenants};

const TENANTS: usize = 12;
const VICTIM: &str = "t0003";

fn quarantine_cells() -> BTreeSet<Ipv4Addr> {
    (111..=113).map(|n| Ipv4Addr::new(192, 0, 2, n)).collect()
}

/// Every tenant's TTL and A addresses.
fn answers(resolver: &mut Resolver) -> BTreeMap<String, (u32, BTreeSet<Ipv4Addr>)> {
    crate::tenants::answers_of(resolver, TENANTS)
}

fn ecs_scope(response: &Message) -> Option<u8> {
    match response.edns.as_ref()?.option(EdnsCode::Subnet)? {
        EdnsOption::Subnet(cs) => Some(cs.scope_prefix()),
        _ => None,
    }
}

/// The A addresses and ECS scope of `name` asked for a client of eu-west.
fn from_eu_west(resolver: &mut Resolver, name: &str) -> (BTreeSet<Ipv4Addr>, Option<u8>) {
    let r = resolver.ask(&ecs_query(name, RecordType::A, EU_WEST_SUBNET));
    (a_records(&r).into_iter().collect(), ecs_scope(&r))
}

fn change(server: &Daemon, args: &[&str]) -> String {
    let before = server.status()["tenants"]["changes_applied"].clone();
    let text = ok(&server.cli(args), &args.join(" "));
    // The CLI returns once the server serves it; the count says so too.
    assert_ne!(
        server.status()["tenants"]["changes_applied"],
        before,
        "{text}"
    );
    text
}

#[test]
fn a_quarantined_tenant_alone_moves_to_the_quarantine_cells_and_back() {
    let setup = setup_with("quarantine", TENANTS, |i| 200 + i as u32);
    let server = setup.start();
    wait_tenants(&server, "every tenant served", |t| {
        t["served"].as_u64() == Some(TENANTS as u64)
    });
    let file = setup.path(&format!("tenants/{VICTIM}.toml"));
    let original = std::fs::read_to_string(&file).expect("victim's document");
    let mut resolver = Resolver::new(server.dns);
    let before = answers(&mut resolver);
    let (victim_eu, scope) = from_eu_west(&mut resolver, &owned(VICTIM));
    assert_eq!(scope, Some(0), "nothing depends on the client yet");
    assert!(before
        .values()
        .all(|(_, a)| a.len() == 2 && a.is_disjoint(&quarantine_cells())));

    let text = change(&server, &["tenant", "quarantine", VICTIM]);
    assert!(
        text.contains(&format!("tenant {VICTIM}: quarantined")),
        "{text}"
    );
    let quarantined = answers(&mut resolver);
    for (tenant, (ttl, addresses)) in &quarantined {
        assert_eq!(ttl, &before[tenant].0, "{tenant}: TTL unchanged");
        if tenant == VICTIM {
            assert_eq!(addresses.len(), 2, "k = 2 of the quarantine cells");
            assert!(addresses.is_subset(&quarantine_cells()), "{addresses:?}");
        } else {
            assert_eq!(addresses, &before[tenant].1, "{tenant}: untouched");
        }
    }
    let victim_cells = quarantined[VICTIM].1.clone();
    assert_eq!(
        from_eu_west(&mut resolver, &owned(VICTIM)),
        (victim_cells.clone(), Some(0)),
        "from eu-west too, same scope as before the quarantine"
    );
    assert!(std::fs::read_to_string(&file).is_ok_and(|t| t.contains("state = \"quarantined\"")));
    let status = server.status();
    assert_eq!(
        status["tenants"]["quarantined"], 1,
        "{:#}",
        status["tenants"]
    );
    let (code, body) = http(server.admin, "GET", &format!("/v1/tenants/{VICTIM}"), None);
    assert_eq!(code, 200);
    let view: serde_json::Value = serde_json::from_str(&body).expect("tenant JSON");
    assert_eq!(view["state"], "quarantined", "{view:#}");
    assert_eq!(
        metric(&server, "steerdns_tenants", &[("state", "quarantined")]),
        1.0
    );
    let history = ok(
        &server.cli(&["tenant", "history", VICTIM]),
        "tenant history",
    );
    assert!(
        history.lines().count() >= 2,
        "two versions recorded:\n{history}"
    );

    // Its region drained: the client's location decides, for the victim as for the others;
    // the victim still answers from quarantine cells only.
    ok(&server.cli(&["drain", "eu-west"]), "drain eu-west");
    let (got, scope) = from_eu_west(&mut resolver, &owned(VICTIM));
    assert_eq!(
        got, victim_cells,
        "quarantine cells wherever its clients go"
    );
    assert_eq!(scope, Some(24), "the client's prefix decided");
    let (other, scope) = from_eu_west(&mut resolver, &owned("t0004"));
    assert!(other.is_disjoint(&quarantine_cells()), "{other:?}");
    assert_eq!(scope, Some(24));
    ok(&server.cli(&["undrain", "eu-west"]), "undrain eu-west");

    // Blame looks at the eleven healthy tenants only.
    ok(
        &server.cli(&["cell", "drain", "global", "g1"]),
        "cell drain",
    );
    let blame = server.status()["cells"]["blame"].clone();
    assert_eq!(blame["tenants"], TENANTS - 1, "{blame:#}");
    ok(
        &server.cli(&["cell", "undrain", "global", "g1"]),
        "cell undrain",
    );

    // The API: the token is required, an unknown tenant is named.
    let path = format!("/v1/tenants/{VICTIM}/release");
    let (code, _) = http(server.admin, "POST", &path, None);
    assert_eq!(code, 401, "a write needs the token");
    let (code, body) = http(
        server.admin,
        "POST",
        "/v1/tenants/nobody/quarantine",
        Some(TOKEN),
    );
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("nobody"), "{body}");

    change(&server, &["tenant", "release", VICTIM]);
    assert_eq!(answers(&mut resolver), before, "every answer as before");
    assert_eq!(
        from_eu_west(&mut resolver, &owned(VICTIM)),
        (victim_eu, Some(0))
    );
    assert_eq!(
        std::fs::read_to_string(&file).ok().as_deref(),
        Some(original.as_str()),
        "release leaves the document as it was"
    );
    assert_eq!(server.status()["tenants"]["quarantined"], 0);
    assert_eq!(
        metric(&server, "steerdns_tenants", &[("state", "quarantined")]),
        0.0
    );
}
