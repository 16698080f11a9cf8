//! Cells drained (issue 31, items 2 and 4), with the real binary over real sockets: thirty
//! tenants on the bundled example's six global cells (k = 2); `steerdns cell drain global
//! g1` leaves g1 out of exactly the answers of the tenants whose shard holds it (their other
//! cell still answers, TTL unchanged) and touches no other tenant; a second drained cell
//! makes blame (status, metrics, `steerdns tenant blame`) name the tenants holding both — the
//! same tenants the DNS answers show — and sends those a layer down, to the client's region; a drain of a cell that does not exist is refused with
//! its file, line and field named, and changes nothing; undrain brings every answer back.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use crate::control_common::*;
use crate::tenants::{chaos_trace, metric, owned, setup_with, tenant_name, wait_tenants};

const TENANTS: usize = 30;
const G1: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 101);
const G2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 102);

/// Every tenant's TTL and A addresses.
fn answers(resolver: &mut Resolver) -> BTreeMap<String, (u32, BTreeSet<Ipv4Addr>)> {
    crate::tenants::answers_of(resolver, TENANTS)
}

/// Runs `steerdns ARGS` and checks that the server then serves a new serial.
fn change(server: &Daemon, args: &[&str]) {
    let before = server.serial();
    ok(&server.cli(args), &args.join(" "));
    server.wait_for_serial_change(before, std::time::Duration::from_secs(10));
}

#[test]
fn a_drained_cell_leaves_only_its_tenants_answers_and_blame_names_the_common_factor() {
    let setup = setup_with("cell-drains", TENANTS, |i| 200 + i as u32);
    let server = setup.start();
    wait_tenants(&server, "every tenant served", |t| {
        t["served"].as_u64() == Some(TENANTS as u64)
    });
    let mut resolver = Resolver::new(server.dns);
    let before = answers(&mut resolver);
    assert!(before.values().all(|(_, a)| a.len() == 2), "{before:?}");
    assert!(server.status()["cells"].is_null(), "no cell impaired yet");
    let holds = |cell: Ipv4Addr| -> BTreeSet<&String> {
        before
            .iter()
            .filter(|(_, (_, a))| a.contains(&cell))
            .map(|(t, _)| t)
            .collect()
    };
    let on_g1 = holds(G1);
    assert!(
        !on_g1.is_empty() && on_g1.len() < TENANTS,
        "some, not all, of {TENANTS} tenants hold g1 (2 of 6 cells): {on_g1:?}"
    );

    // One cell drained: left out of its tenants' answers, nobody else's.
    change(&server, &["cell", "drain", "global", "g1"]);
    assert!(
        std::fs::read_to_string(setup.control_path())
            .is_ok_and(|t| t.contains("[cells.global.g1]\ndrain = true")),
        "the drain is a recorded change of the control file"
    );
    let drained = answers(&mut resolver);
    for (tenant, (ttl, addresses)) in &drained {
        let (ttl_before, before) = &before[tenant];
        assert_eq!(ttl, ttl_before, "{tenant}: TTL as without the drain");
        if on_g1.contains(tenant) {
            let mut expected = before.clone();
            expected.remove(&G1);
            assert_eq!(addresses, &expected, "{tenant}: its other cell only");
        } else {
            assert_eq!(addresses, before, "{tenant} does not hold g1: untouched");
        }
    }
    let status = server.status();
    let cells = &status["cells"];
    assert_eq!(
        cells["impaired"],
        serde_json::json!([{"layer": "global", "cell": "g1", "reason": "drained"}]),
        "{cells:#}"
    );
    assert_eq!(cells["blame"]["verdict"], "too-few-cells", "{cells:#}");
    assert_eq!(metric(&server, "steerdns_cells_impaired", &[]), 1.0);

    // A second: blame counts the tenants whose shard holds both, as the answers show them.
    change(&server, &["cell", "drain", "global", "g2"]);
    let on_g2 = holds(G2);
    let cover = |t: &String| usize::from(on_g1.contains(t)) + usize::from(on_g2.contains(t));
    let best = before.keys().map(cover).max().unwrap_or(0);
    // Shards are a pure function of the names: with these thirty, some tenant holds both
    // (t0008), so the layer fallback below is exercised.
    assert_eq!(best, 2, "a tenant of {TENANTS} holds g1 and g2: {before:?}");
    let tied: BTreeSet<&String> = before.keys().filter(|t| cover(t) == best).collect();
    let status = server.status();
    let blame = &status["cells"]["blame"];
    assert_eq!(blame["impaired"], 2, "{blame:#}");
    assert_eq!(blame["tenants"], TENANTS, "{blame:#}");
    assert_eq!(blame["best_cover"], best, "{blame:#}");
    assert_eq!(blame["tied"], tied.len(), "{blame:#}");
    let suspects: BTreeSet<&str> = blame["suspects"]
        .as_array()
        .map(|s| s.iter().filter_map(|s| s["tenant"].as_str()).collect())
        .unwrap_or_default();
    let expected: BTreeSet<&str> = tied.iter().map(|t| t.as_str()).collect();
    assert_eq!(suspects, expected, "{blame:#}");
    // 30 tenants, one pair of 15: two expected by chance, so no tenant can be named.
    let by_chance = blame["by_chance"].as_f64().unwrap_or(-1.0);
    assert!((by_chance - 2.0).abs() < 1e-9, "{blame:#}");
    let verdict = if best == 2 {
        "ambiguous"
    } else {
        "no-common-factor"
    };
    assert_eq!(blame["verdict"], verdict, "{blame:#}");
    assert_eq!(metric(&server, "steerdns_cells_impaired", &[]), 2.0);
    assert_eq!(
        metric(
            &server,
            "steerdns_cell_blame_verdict",
            &[("verdict", verdict)]
        ),
        1.0
    );
    assert_eq!(
        metric(&server, "steerdns_cell_blame_suspects", &[]),
        tied.len() as f64
    );
    let text = ok(&server.cli(&["tenant", "blame"]), "tenant blame");
    assert!(
        text.contains("impaired cells: global/g1 (drained), global/g2 (drained)"),
        "{text}"
    );
    assert!(text.contains(&format!("blame {verdict}")), "{text}");
    for t in &expected {
        assert!(text.contains(&format!("suspect {t} holds")), "{text}");
    }
    // A tenant holding both falls back a layer (the client's region), never an empty answer.
    for (tenant, (_, addresses)) in answers(&mut resolver) {
        assert!(!addresses.is_empty(), "{tenant}");
        let trace = chaos_trace(&mut resolver, &owned(&tenant));
        match cover(&tenant) {
            2 => {
                assert!(
                    !addresses.contains(&G1) && !addresses.contains(&G2),
                    "{tenant}: both its global cells drained, served {addresses:?}"
                );
                assert!(
                    trace.contains("every cell of the tenant's shard impaired -> regional"),
                    "{tenant}: {trace}"
                );
            }
            1 => assert!(
                trace.contains("impaired cells left out"),
                "{tenant}: {trace}"
            ),
            _ => assert!(!trace.contains("impaired"), "{tenant}: {trace}"),
        }
        for a in &addresses {
            assert!(trace.contains(&a.to_string()), "{tenant}: {a} in {trace}");
        }
    }

    // A cell that does not exist: refused, its field named, nothing changed.
    let serial = server.serial();
    let refused = server.cli(&["cell", "drain", "global", "g9"]);
    assert!(!refused.status.success(), "{refused:?}");
    let said = format!("{}{}", stdout(&refused), stderr(&refused));
    assert!(
        said.contains("control.toml:") && said.contains("cells.global.g9: \"g9\" is not a cell"),
        "file, line and field named: {said}"
    );
    assert_eq!(server.serial(), serial);
    assert_eq!(
        server.status()["cells"]["impaired"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // Undrained: every answer as before, and nothing impaired.
    change(&server, &["cell", "undrain", "global", "g1"]);
    change(&server, &["cell", "undrain", "global", "g2"]);
    assert_eq!(answers(&mut resolver), before);
    assert!(server.status()["cells"].is_null());
    assert_eq!(metric(&server, "steerdns_cells_impaired", &[]), 0.0);
    let text = ok(&server.cli(&["tenant", "blame"]), "tenant blame");
    assert!(text.contains("no impaired cells"), "{text}");
}

/// `[tenants] auto_quarantine`: sixteen global cells (k = 2, 120 pairs), thirty tenants; one
/// tenant's pair drained — chance puts 0.25 tenants on a given pair, so blame names the
/// tenants holding it, and each is quarantined by itself (a recorded change of its document),
/// answering from the quarantine cells while nobody else moves.
#[test]
fn auto_quarantine_quarantines_the_tenant_blame_names() {
    auto_quarantine_after("auto-quarantine", |setup, _, names| {
        // Both cells in one control change: blame sees the pair at once.
        let control = std::fs::read_to_string(setup.control_path()).expect("control");
        setup.write_control_atomically(&format!(
            "{control}\n[cells.global.{}]\ndrain = true\n[cells.global.{}]\ndrain = true\n",
            names[0], names[1]
        ));
    });
}

/// The same with the pair hot by its load in the feed (issue 31 item 2): blame, and so
/// automatic quarantine, looks at every cell left out, not only the drained ones.
#[test]
fn auto_quarantine_blames_cells_hot_by_their_load_too() {
    auto_quarantine_after("auto-quarantine-hot", |setup, server, names| {
        let cell = |name: &str| {
            (
                name.to_string(),
                serde_json::json!({"load": 95, "capacity": 100}),
            )
        };
        let feed = serde_json::json!({
            "time": steerdns::rfc3339::format_utc(std::time::SystemTime::now()),
            "source": "auto-quarantine test",
            "cells": {"global": names.iter().map(|n| cell(n)).collect::<serde_json::Map<_, _>>()},
        });
        ok(&server.push_load(setup, &feed.to_string()), "load push");
    });
}

/// Sixteen global cells and thirty tenants with `[tenants] auto_quarantine`; `impair` leaves
/// out the pair of global cells (named) that tenant 0's answers carry; then every tenant
/// holding that pair, and only those, is quarantined by itself.
fn auto_quarantine_after(label: &str, impair: impl FnOnce(&Setup, &Daemon, &[String])) {
    let setup = setup_with(label, TENANTS, |i| 200 + i as u32);
    let text = std::fs::read_to_string(&setup.config).expect("config");
    let g6 = "  { name = \"g6\", anycast = [\"192.0.2.106\", \"2001:db8::106\"] },\n";
    assert!(text.contains(g6), "the bundled example's sixth global cell");
    let more: String = (7..=16)
        .map(|n| {
            format!(
                "  {{ name = \"g{n}\", anycast = [\"192.0.2.{}\", \"2001:db8::{}\"] }},\n",
                120 + n,
                120 + n
            )
        })
        .collect();
    std::fs::write(&setup.config, text.replacen(g6, &format!("{g6}{more}"), 1)).expect("config");
    setup.extend_config(
        "[tenants]\nauto_quarantine = true\n[shield]\ntick_ms = 100\nhigh_watermark = 0.85\n\
         low_watermark = 0.70\nstale_after_secs = 60\nrevert_after_secs = 120\n",
    );
    let server = setup.start();
    wait_tenants(&server, "every tenant served", |t| {
        t["served"].as_u64() == Some(TENANTS as u64)
    });
    let mut resolver = Resolver::new(server.dns);
    let before = answers(&mut resolver);
    let victim = tenant_name(0);
    let pair: Vec<Ipv4Addr> = before[&victim].1.iter().copied().collect();
    let holders: BTreeSet<&String> = before
        .iter()
        .filter(|(_, (_, a))| a.iter().copied().collect::<Vec<_>>() == pair)
        .map(|(t, _)| t)
        .collect();
    let names: Vec<String> = pair
        .iter()
        .map(|a| match a.octets()[3] {
            n @ 101..=106 => format!("g{}", n - 100),
            n => format!("g{}", n - 120),
        })
        .collect();
    let before_changes = server.status()["tenants"]["changes_applied"].as_u64();
    impair(&setup, &server, &names);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        let status = server.status();
        let done = status["cells"]["auto_quarantined"]
            .as_array()
            .map_or(0, Vec::len);
        if done >= holders.len() && status["tenants"]["quarantined"] == holders.len() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "auto quarantine of {holders:?} ({names:?}): {:#}\n{}",
            status["cells"],
            server.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let done: BTreeSet<&str> = status["cells"]["auto_quarantined"]
        .as_array()
        .map(|d| d.iter().filter_map(|e| e["tenant"].as_str()).collect())
        .unwrap_or_default();
    let expected: BTreeSet<&str> = holders.iter().map(|t| t.as_str()).collect();
    assert_eq!(done, expected, "{:#}", status["cells"]);
    assert!(status["tenants"]["changes_applied"].as_u64() > before_changes);
    let quarantine: BTreeSet<Ipv4Addr> = (111..=113).map(|n| Ipv4Addr::new(192, 0, 2, n)).collect();
    for (tenant, (_, addresses)) in answers(&mut resolver) {
        if holders.contains(&tenant) {
            assert!(addresses.is_subset(&quarantine), "{tenant}: {addresses:?}");
        } else {
            assert!(
                addresses.is_disjoint(&quarantine),
                "{tenant}: {addresses:?}"
            );
        }
    }
    let file = setup.path(&format!("tenants/{victim}.toml"));
    assert!(std::fs::read_to_string(file).is_ok_and(|t| t.contains("state = \"quarantined\"")));
}
