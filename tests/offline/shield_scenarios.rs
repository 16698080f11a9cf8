//! Scenario tests of the traffic shield: each scenario in tests/scenarios/ runs through the
//! simulator (the server's own step and policy code, the bundled steerdns.toml topology) with
//! the shield on and off, and the outcomes are compared.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use steerdns::config::Config;
use steerdns::policy::CompiledPolicies;
use steerdns::shield::sim::{self, Event, Scenario, SimResult};
use steerdns::shield::step::ShieldSettings;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn topology() -> &'static (CompiledPolicies, ShieldSettings) {
    static TOPOLOGY: OnceLock<(CompiledPolicies, ShieldSettings)> = OnceLock::new();
    TOPOLOGY.get_or_init(|| {
        let config = Config::load(&root().join("steerdns.toml"))
            .unwrap_or_else(|e| panic!("bundled steerdns.toml: {e}"));
        sim::compile_topology(&config).unwrap_or_else(|e| panic!("bundled topology: {e}"))
    })
}

fn scenario(name: &str) -> Scenario {
    let path = root().join("tests/scenarios").join(format!("{name}.toml"));
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn simulate(name: &str, shield_on: bool) -> SimResult {
    let (policies, settings) = topology();
    sim::run(&scenario(name), policies, settings, shield_on).unwrap_or_else(|e| panic!("{e}"))
}

/// Each scenario runs once per mode; the tests share the results.
fn runs(name: &str) -> &'static (SimResult, SimResult) {
    static SURGE: OnceLock<(SimResult, SimResult)> = OnceLock::new();
    static CAPACITY: OnceLock<(SimResult, SimResult)> = OnceLock::new();
    static STALE: OnceLock<(SimResult, SimResult)> = OnceLock::new();
    let cell = match name {
        "surge-eu-west" => &SURGE,
        "capacity-loss-na-east" => &CAPACITY,
        "stale-feed" => &STALE,
        other => panic!("no cache for scenario {other}"),
    };
    cell.get_or_init(|| (simulate(name, true), simulate(name, false)))
}

const SCENARIOS: [&str; 3] = ["surge-eu-west", "capacity-loss-na-east", "stale-feed"];

fn region(result: &SimResult, name: &str) -> usize {
    result
        .region_names
        .iter()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no region {name}"))
}

#[test]
fn surge_stays_below_capacity_everywhere_with_the_shield_and_not_without() {
    let (on, off) = runs("surge-eu-west");
    for node in &on.summary.nodes {
        assert!(
            node.peak_utilisation < 1.0,
            "shield on: {} peaked at {:.3} (t={})\n{}",
            node.name,
            node.peak_utilisation,
            node.peak_at,
            sim::summary_text(on)
        );
    }
    let eu_west = off.node("eu-west").expect("eu-west");
    assert!(
        eu_west.peak_utilisation > 1.0,
        "shield off: eu-west only reached {:.3}",
        eu_west.peak_utilisation
    );
    assert!(on.summary.overloaded_client_seconds == 0.0);
    assert!(off.summary.overloaded_client_seconds > 0.0);
}

#[test]
fn capacity_loss_is_relieved_within_one_steady_ttl_plus_a_minute() {
    let (on, off) = runs("capacity-loss-na-east");
    let lost_at = scenario("capacity-loss-na-east")
        .events
        .iter()
        .find_map(|e| match e {
            Event::Capacity { at, .. } => Some(*at),
            _ => None,
        })
        .expect("a capacity event");
    let steady_ttl = 300;
    let na_east = on.node("na-east").expect("na-east");
    let over_until = na_east.last_overload.map_or(lost_at, |t| t + 1);
    assert!(
        over_until <= lost_at + steady_ttl + 60,
        "na-east overloaded until t={over_until} (capacity lost at t={lost_at})\n{}",
        sim::summary_text(on)
    );
    // Without the shield it stays overloaded until the capacity comes back.
    let baseline = off.node("na-east").expect("na-east");
    assert!(baseline
        .last_overload
        .is_some_and(|t| t > lost_at + steady_ttl + 60));
    let (with, without) = (
        on.summary.overloaded_client_seconds,
        off.summary.overloaded_client_seconds,
    );
    assert!(
        with <= 0.2 * without,
        "overloaded client-seconds {with:.0} with the shield vs {without:.0} without"
    );
}

#[test]
fn traffic_returns_to_global_anycast_after_the_events_end() {
    // Bound: the hold-down before shedding may reverse, plus one steady TTL for the last
    // clients to re-ask.
    let (_, settings) = topology();
    let bound = settings.hold_down_ms / 1000 + 300;
    for name in ["surge-eu-west", "capacity-loss-na-east"] {
        let (on, off) = runs(name);
        let end = on.summary.last_event_end.expect("events end");
        let back = on
            .summary
            .back_to_global_at
            .unwrap_or_else(|| panic!("{name}: never back to global\n{}", sim::summary_text(on)));
        assert!(
            back <= end + bound,
            "{name}: back to global at t={back}, events ended at t={end}"
        );
        let last = on.ticks.last().expect("ticks");
        assert!(last.regions.iter().all(|r| r.shed_fraction == 0.0));
        assert!(last.global_share >= 0.99, "{name}: {}", last.global_share);
        assert_eq!(off.summary.back_to_global_at, Some(0));
        assert_eq!(on.summary.unmapped_answers, 0);
    }
}

#[test]
fn no_destination_is_pushed_over_its_high_watermark_by_shedding() {
    for name in SCENARIOS {
        let (on, _) = runs(name);
        let hw = on.high_watermark;
        for tick in &on.ticks {
            let nodes = tick
                .regions
                .iter()
                .zip(&on.region_names)
                .chain(tick.sites.iter().zip(&on.site_names));
            for (sample, node) in nodes.filter(|(s, _)| s.shed_in > 0.0) {
                let allowed = hw.max(sample.own_utilisation());
                assert!(
                    sample.utilisation() <= allowed + 1e-9,
                    "{name}: {node} at {:.4} (own demand alone {:.4}) with {:.1} shed in at t={}",
                    sample.utilisation(),
                    sample.own_utilisation(),
                    sample.shed_in,
                    tick.t
                );
            }
        }
    }
}

#[test]
fn a_stale_feed_freezes_decisions_then_decays_them() {
    let (_, settings) = topology();
    let (stopped, secs) = scenario("stale-feed")
        .events
        .iter()
        .find_map(|e| match e {
            Event::FeedStale { at, secs } => Some((*at, *secs)),
            _ => None,
        })
        .expect("a feed_stale event");
    let (on, _) = runs("stale-feed");
    let west = region(on, "eu-west");
    let fraction = |t: u64| on.ticks[t as usize].regions[west].shed_fraction;
    // The last feed is the one of the tick before the stop; its age crosses the thresholds.
    let last_feed = stopped - 1;
    let frozen_from = last_feed + settings.stale_after_ms / 1000;
    let revert_from = last_feed + settings.revert_after_ms / 1000;
    assert!(revert_from < stopped + secs, "scenario too short to revert");
    let held = fraction(frozen_from - 1);
    assert!(held > 0.0, "eu-west was not shedding when the feed stopped");
    for t in frozen_from..revert_from {
        for (r, sample) in on.ticks[t as usize].regions.iter().enumerate() {
            let before = on.ticks[frozen_from as usize - 1].regions[r].shed_fraction;
            assert_eq!(
                sample.shed_fraction, before,
                "{} moved at t={t} while frozen",
                on.region_names[r]
            );
        }
    }
    // Then it decays by at most max_step per tick, down to normal answers.
    let mut t = revert_from;
    while fraction(t) > 0.0 {
        let step = fraction(t - 1) - fraction(t);
        assert!(
            step > 0.0 && step <= settings.max_step + 1e-9,
            "t={t}: {step}"
        );
        t += 1;
        assert!(t < stopped + secs, "still shedding when the feed came back");
    }
    assert!(fraction(revert_from) < held);
    assert!(t - revert_from <= (held / settings.max_step).ceil() as u64 + 1);
}

#[test]
fn scenario_files_are_checked_against_the_topology() {
    let (policies, settings) = topology();
    let path = Path::new("bad.toml");
    let unknown_field = "name = \"x\"\nduration_secs = 10\n[demand]\neu-west = 1\n[[events]]\nkind = \"surge\"\nregion = \"eu-west\"\nat = 1\nfactor = 2\nramp = 3\n";
    let e = Scenario::parse(unknown_field, path).expect_err("unknown field refused");
    assert!(e.to_string().contains("bad.toml:"), "{e}");
    assert!(e.to_string().contains("ramp"), "{e}");
    let unknown_region = "name = \"x\"\nduration_secs = 10\n[demand]\neu-wets = 1\n";
    let s = Scenario::parse(unknown_region, path).expect("parses");
    let e = sim::run(&s, policies, settings, true).expect_err("unknown region refused");
    assert!(e.to_string().contains("demand.eu-wets"), "{e}");
    let negative = "name = \"x\"\nduration_secs = 10\n[demand]\neu-west = -1\n";
    let e = Scenario::parse(negative, path).expect_err("negative demand refused");
    assert!(e.to_string().contains("demand.eu-west"), "{e}");
}

#[test]
fn outputs_are_written_with_a_labelled_plot() {
    let (on, _) = runs("surge-eu-west");
    let dir = std::env::temp_dir().join(format!("steerdns-sim-{}", std::process::id()));
    sim::write_outputs(on, &dir).unwrap_or_else(|e| panic!("{e}"));
    let csv = std::fs::read_to_string(dir.join("timeline.csv")).expect("csv");
    let mut lines = csv.lines();
    let header = lines.next().expect("header");
    assert!(
        header.starts_with("t,global_share,na-east.demand"),
        "{header}"
    );
    assert_eq!(lines.count(), on.ticks.len());
    let svg = std::fs::read_to_string(dir.join("plot.svg")).expect("svg");
    for text in [
        "time (s)",
        "utilisation (load / capacity)",
        "shed fraction per region",
        "eu-west",
        "fb-eu (fallback)",
        "high watermark 0.85",
    ] {
        assert!(svg.contains(text), "plot lacks {text:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three nameservers that resolvers spread their queries over: each deciding alone (on the
/// answers it gave and its own copy of the feed, received at its own phase) they answer some
/// eu-west subnets differently while eu-west sheds; serving one leader's decision, never.
#[test]
fn nameservers_disagree_alone_and_never_with_the_fleet_leader() {
    let (policies, settings) = topology();
    let surge = scenario("surge-eu-west");
    let run = |leader| {
        let nameservers = sim::Nameservers { count: 3, leader };
        sim::run_nameservers(&surge, policies, settings, true, nameservers)
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let (led, with_leader) = run(true);
    assert_eq!(with_leader.subnets, 8 * 2000);
    assert_eq!(with_leader.inconsistent_subnets, 0, "{with_leader:?}");
    assert_eq!(with_leader.inconsistent_subnet_seconds, 0);
    assert_eq!(with_leader.flips, 0);
    let eu_west = region(&led, "eu-west");
    assert!(
        led.ticks
            .iter()
            .any(|t| t.regions[eu_west].shed_fraction > 0.0),
        "the leader sheds eu-west"
    );
    let (_, alone) = run(false);
    assert!(alone.inconsistent_subnets > 0, "{alone:?}");
    assert!(alone.inconsistent_subnet_seconds >= alone.inconsistent_subnets as u64);
    let text = sim::consistency_text(&alone);
    assert!(
        text.starts_with("3 nameservers each deciding alone: "),
        "{text}"
    );
}

/// Issue 31, item 6 (traffic surge): `steerdns simulate` on the tenant scenario writes, per
/// second and in total, the other tenants' clients moved with tenant-first and with
/// region-wide shedding. The fault must be in the scenario (computed from it: the surging
/// tenant takes its region over the high watermark and brings more than `tenant_share` of
/// it), and then tenant-first moves nobody else (0 at every second) while region-wide moves
/// others (> 0).
#[test]
fn simulate_with_tenants_moves_no_other_tenant_first_and_others_region_wide() {
    let name = "tenant-surge-eu-west";
    let scenario = scenario(name);
    let (policies, settings) = topology();
    let Some(tenants) = &scenario.tenants else {
        panic!("{name} has [tenants]")
    };
    let surge = &tenants.surges[0];
    let r = policies
        .region_index(&surge.region)
        .unwrap_or_else(|| panic!("no region {}", surge.region));
    let capacity = policies.regions()[usize::from(r)].capacity.unwrap_or(0) as f64;
    let base = scenario.demand[&surge.region];
    let surging = base / tenants.count as f64 + surge.load;
    let peak = base + surge.load;
    assert!(
        peak / capacity > settings.high_watermark,
        "the fault: {} at {peak}/{capacity}, above the high watermark",
        surge.region
    );
    assert!(
        surging / peak > settings.tenant_share,
        "the fault: {} brings {surging} of {peak}, above tenant_share",
        surge.tenant
    );

    let out = std::env::temp_dir().join(format!("steerdns-sim-tenants-{}", std::process::id()));
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .arg("simulate")
        .arg(root().join("tests/scenarios").join(format!("{name}.toml")))
        .arg("--out")
        .arg(&out)
        .arg("--config")
        .arg(root().join("steerdns.toml"))
        .output()
        .unwrap_or_else(|e| panic!("run steerdns simulate: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let csv = std::fs::read_to_string(out.join("tenants.csv"))
        .unwrap_or_else(|e| panic!("tenants.csv: {e}"));
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    let (total, steps) = rows.split_last().unwrap_or_else(|| panic!("rows in {csv}"));
    assert_eq!(total[0], "total");
    assert_eq!(steps.len() as u64, scenario.duration_secs);
    let number = |cell: &str| -> f64 { cell.parse().unwrap_or_else(|e| panic!("{cell}: {e}")) };
    let sum = |column: usize| steps.iter().map(|row| number(row[column])).sum::<f64>();
    let (first, wide) = (sum(1), sum(2));
    assert!((first - number(total[1])).abs() < 0.01 * steps.len() as f64);
    assert!((wide - number(total[2])).abs() < 0.01 * steps.len() as f64);
    assert!(
        steps.iter().all(|row| number(row[1]) == 0.0),
        "tenant-first: no other tenant's client moved at any second\n{stdout}"
    );
    assert_eq!(
        total[5], "0",
        "tenant-first: no other tenant moved\n{stdout}"
    );
    assert!(
        sum(3) > 0.0,
        "tenant-first moved the surging tenant\n{stdout}"
    );
    assert!(
        wide > 0.0,
        "region-wide moved other tenants' clients\n{stdout}"
    );
    assert!(number(total[6]) > 0.0, "{stdout}");
    assert!(
        stdout.contains(&format!("region-wide shedding:  {wide:.1}")),
        "the summary says the same: {stdout}"
    );
    #[cfg(feature = "tools")]
    {
        let svg = std::fs::read_to_string(out.join("tenants.svg"))
            .unwrap_or_else(|e| panic!("tenants.svg: {e}"));
        assert!(svg.starts_with("<svg") && svg.contains("collateral client-seconds"));
    }
    let _ = std::fs::remove_dir_all(&out);
}
