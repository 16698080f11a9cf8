//! Cells fail alone (issue 31, item 2) by their own probes and their own load, with the real
//! binary over real sockets: thirty tenants on the bundled example's six global cells (k = 2).
//!
//! - A probe: g1 is given a TCP monitor on a loopback listener the test owns. While it
//!   accepts, every answer is as without a probe; once the test closes it, g1 is left out of
//!   exactly the answers of the tenants whose shard holds it (their other cell still answers,
//!   TTL unchanged) and no other tenant's answer moves; status, `/metrics`, `steerdns tenant
//!   blame` and the `CH TXT` trace say `probe-down` and name the probe; once the listener is
//!   back, every answer is as before.
//! - A load: a feed says g2 is at 95% (above the high watermark): g2 is left out of its
//!   tenants' answers only, status shows it `hot` with its utilisation; at 80% (between the
//!   watermarks) it stays out; at 50% (below the low one) it comes back, after the hold-down.
//!
//! Every wait is for something the server shows (a status field, shield ticks), never a sleep.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::control_common::*;
use crate::tenants::{chaos_trace, metric, owned, setup_with, wait_tenants};

const TENANTS: usize = 30;
const G1: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 101);
const G2: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 102);
const WAIT: Duration = Duration::from_secs(15);

type Answers = BTreeMap<String, (u32, BTreeSet<Ipv4Addr>)>;

fn answers(resolver: &mut Resolver) -> Answers {
    crate::tenants::answers_of(resolver, TENANTS)
}

/// The tenants whose answer holds `cell`.
fn holding(answers: &Answers, cell: Ipv4Addr) -> BTreeSet<String> {
    answers
        .iter()
        .filter(|(_, (_, a))| a.contains(&cell))
        .map(|(t, _)| t.clone())
        .collect()
}

/// Checks that exactly the tenants of `holders` lost `cell` (keeping their other cell and
/// their TTL) and that every other tenant's answer is as `before`.
fn only_holders_lost(before: &Answers, now: &Answers, holders: &BTreeSet<String>, cell: Ipv4Addr) {
    for (tenant, (ttl, addresses)) in now {
        let (ttl_before, was) = &before[tenant];
        assert_eq!(ttl, ttl_before, "{tenant}: TTL as before");
        if holders.contains(tenant) {
            let mut expected = was.clone();
            expected.remove(&cell);
            assert_eq!(addresses, &expected, "{tenant}: its other cell only");
        } else {
            assert_eq!(addresses, was, "{tenant} does not hold {cell}: untouched");
        }
    }
}

/// A loopback TCP listener that accepts (and drops) connections until stopped.
struct Target {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Target {
    fn listen(addr: SocketAddr) -> Target {
        let listener = TcpListener::bind(addr).expect("bind the probe target");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => drop(stream),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Target {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// Closes the listener: connections are refused from now on.
    fn close(mut self) -> SocketAddr {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.addr
    }
}

/// The example's config with g1 probed at `addr` (every 100 ms, one failure takes it down,
/// one success brings it up).
fn probe_g1(setup: &Setup, addr: SocketAddr) {
    let text = std::fs::read_to_string(&setup.config).expect("config");
    let g1 = r#"{ name = "g1", anycast = ["192.0.2.101", "2001:db8::101"] }"#;
    assert!(text.contains(g1), "the bundled example's first global cell");
    let probed = format!(
        r#"{{ name = "g1", anycast = ["192.0.2.101", "2001:db8::101"], monitor = {{ tcp = "{addr}", interval_ms = 100, timeout_ms = 50, fall = 1, rise = 1 }} }}"#
    );
    std::fs::write(&setup.config, text.replace(g1, &probed)).expect("write config");
}

/// The probe target's state in the status (`unknown`, `up`, `down`).
fn probe_state(status: &serde_json::Value, target: &str) -> Option<String> {
    status["health"]["targets"]
        .as_array()?
        .iter()
        .find(|t| t["target"] == target)?["state"]
        .as_str()
        .map(str::to_owned)
}

#[test]
fn a_cell_whose_probe_fails_is_left_out_of_its_tenants_answers_only_and_comes_back() {
    let setup = setup_with("cell-probe", TENANTS, |i| 200 + i as u32);
    let target = Target::listen("127.0.0.1:0".parse().expect("addr"));
    let addr = target.addr;
    let probe = format!("tcp:{addr}");
    probe_g1(&setup, addr);
    let server = setup.start();
    wait_tenants(&server, "every tenant served", |t| {
        t["served"].as_u64() == Some(TENANTS as u64)
    });
    server.wait_for_status("the probe up", WAIT, |s| {
        probe_state(s, &probe).as_deref() == Some("up")
    });
    let mut resolver = Resolver::new(server.dns);
    let before = answers(&mut resolver);
    assert!(before.values().all(|(_, a)| a.len() == 2), "{before:?}");
    assert!(server.status()["cells"].is_null(), "no cell impaired yet");
    let on_g1 = holding(&before, G1);
    assert!(
        !on_g1.is_empty() && on_g1.len() < TENANTS,
        "some, not all, tenants hold g1: {on_g1:?}"
    );

    // The target goes away: g1 is probe-down, left out of its tenants' answers only.
    let closed = target.close();
    let status = server.wait_for_status("g1 probe-down", WAIT, |s| {
        s["cells"]["impaired"]
            .as_array()
            .is_some_and(|i| !i.is_empty())
    });
    assert_eq!(
        status["cells"]["impaired"],
        serde_json::json!([{"layer": "global", "cell": "g1", "reason": "probe-down", "probe": probe}]),
        "{:#}",
        status["cells"]
    );
    only_holders_lost(&before, &answers(&mut resolver), &on_g1, G1);
    assert_eq!(
        metric(
            &server,
            "steerdns_cell_impaired",
            &[
                ("layer", "global"),
                ("cell", "g1"),
                ("reason", "probe-down")
            ]
        ),
        1.0
    );
    assert_eq!(metric(&server, "steerdns_cells_impaired", &[]), 1.0);
    let text = ok(&server.cli(&["tenant", "blame"]), "tenant blame");
    assert!(
        text.contains(&format!(
            "impaired cells: global/g1 (probe-down, probe {probe})"
        )),
        "{text}"
    );
    let holder = on_g1.iter().next().expect("a holder");
    let trace = chaos_trace(&mut resolver, &owned(holder));
    assert!(
        trace.contains("impaired cells left out: g1 (probe-down)"),
        "{holder}: {trace}"
    );

    // The target is back: every answer as before.
    let target = Target::listen(closed);
    server.wait_for_status("g1 back", WAIT, |s| s["cells"].is_null());
    assert_eq!(answers(&mut resolver), before);
    assert_eq!(metric(&server, "steerdns_cells_impaired", &[]), 0.0);
    target.close();
}

/// A feed of g2's load only, measured now.
fn cell_feed(load: f64) -> String {
    serde_json::json!({
        "time": steerdns::rfc3339::format_utc(std::time::SystemTime::now()),
        "source": "cell-load test",
        "cells": {"global": {"g2": {"load": load, "capacity": 100}}},
    })
    .to_string()
}

/// g2's entry in the shield's cell status.
fn g2_load(status: &serde_json::Value) -> serde_json::Value {
    status["shield"]["cells"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["cell"] == "g2").cloned())
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn a_hot_cell_is_left_out_above_the_high_watermark_and_back_below_the_low_one() {
    let setup = setup_with("cell-load", TENANTS, |i| 200 + i as u32);
    setup.extend_config(
        "[shield]\ntick_ms = 100\nhold_down_secs = 1\nhigh_watermark = 0.85\n\
         low_watermark = 0.70\nstale_after_secs = 60\nrevert_after_secs = 120\n",
    );
    let server = setup.start();
    wait_tenants(&server, "every tenant served", |t| {
        t["served"].as_u64() == Some(TENANTS as u64)
    });
    let mut resolver = Resolver::new(server.dns);
    let before = answers(&mut resolver);
    let on_g2 = holding(&before, G2);
    assert!(
        !on_g2.is_empty() && on_g2.len() < TENANTS,
        "some, not all, tenants hold g2: {on_g2:?}"
    );

    // 95%: hot, left out of its tenants' answers only.
    ok(&server.push_load(&setup, &cell_feed(95.0)), "load push");
    let status = server.wait_for_status("g2 hot", WAIT, |s| !s["cells"].is_null());
    let impaired = &status["cells"]["impaired"];
    assert_eq!(impaired[0]["cell"], "g2", "{impaired:#}");
    assert_eq!(impaired[0]["reason"], "hot", "{impaired:#}");
    assert_eq!(impaired[0]["utilisation"], 0.95, "{impaired:#}");
    assert_eq!(g2_load(&status)["state"], "hot");
    only_holders_lost(&before, &answers(&mut resolver), &on_g2, G2);
    let text = ok(&server.cli(&["status"]), "status");
    assert!(
        text.contains("cell global/g2: 95/100 (95%) [hot], left out of answers")
            && text.contains("global/g2 (hot, load 95%)"),
        "{text}"
    );
    let trace = chaos_trace(&mut resolver, &owned(on_g2.iter().next().expect("holder")));
    assert!(trace.contains("g2 (hot)"), "{trace}");
    assert_eq!(
        metric(
            &server,
            "steerdns_cell_utilisation",
            &[("layer", "global"), ("cell", "g2")]
        ),
        0.95
    );

    // 80%, between the watermarks: still out (hysteresis), for as many ticks as we look.
    ok(&server.push_load(&setup, &cell_feed(80.0)), "load push");
    server.wait_for_status("80% read", WAIT, |s| g2_load(s)["utilisation"] == 0.8);
    let status = server.wait_for_shield_ticks(5, WAIT);
    assert_eq!(g2_load(&status)["hot"], true, "{:#}", status["shield"]);
    only_holders_lost(&before, &answers(&mut resolver), &on_g2, G2);

    // 50%, below the low watermark: back in every answer.
    ok(&server.push_load(&setup, &cell_feed(50.0)), "load push");
    let status = server.wait_for_status("g2 back", WAIT, |s| s["cells"].is_null());
    assert_eq!(g2_load(&status)["state"], "normal");
    assert_eq!(answers(&mut resolver), before);
    let changes = status["shield"]["recent_changes"].to_string();
    assert!(
        changes.contains("cell global.g2") && changes.contains("below the low watermark"),
        "{changes}"
    );

    // A feed naming a cell that does not exist is refused whole, naming it.
    let bad = cell_feed(10.0).replace("\"g2\"", "\"g9\"");
    let refused = server.push_load(&setup, &bad);
    assert!(!refused.status.success(), "{refused:?}");
    let said = format!("{}{}", stdout(&refused), stderr(&refused));
    assert!(said.contains("cells.global.g9: unknown cell"), "{said}");
}
