//! Unit tests of tenant-first shedding in the decision step: tables of ticks (a second apart)
//! over the four-region world of [`super::tests`]: eu-west hot, one tenant ("noisy") bringing
//! most of its load. Each row is the tick's feed; the assertions are on what the step decided.

use super::step::*;
use crate::policy::{Destination, ShieldMode};

const EU_WEST: usize = 0;
const EU_NORTH: u16 = 1;
const NOISY: &str = "noisy";
const QUIET: &str = "quiet";

fn node(name: &str, continent: &str, neighbours: &[u16]) -> RingNode {
    RingNode {
        name: name.into(),
        continent: continent.into(),
        neighbours: neighbours.to_vec(),
    }
}

fn rings() -> Rings {
    Rings {
        regions: vec![
            node("eu-west", "EU", &[1, 2]),
            node("eu-north", "EU", &[0, 2]),
            node("na-east", "NA", &[3, 0]),
            node("na-west", "NA", &[2]),
        ],
        sites: vec![node("fb-eu", "EU", &[]), node("fb-na", "NA", &[])],
    }
}

/// One tick's feed: eu-west's load (capacity 1000) and the tenants' loads from eu-west, the
/// other regions and sites calm, every reading `age_ms` old.
fn feed(eu_west: f64, tenants: &[(&str, f64)], age_ms: u64) -> Inputs {
    let reading = |load: f64, capacity: f64| {
        Some(Reading {
            load,
            capacity,
            age_ms,
        })
    };
    Inputs {
        regions: vec![
            reading(eu_west, 1000.0),
            reading(100.0, 600.0),
            reading(300.0, 1000.0),
            reading(100.0, 800.0),
        ],
        sites: vec![reading(100.0, 2000.0), reading(100.0, 2000.0)],
        demand: Vec::new(),
        mode: ShieldMode::Auto,
        operator_held: vec![false; 4],
        tenants: tenants
            .iter()
            .map(|(tenant, load)| TenantLoad {
                tenant: tenant.to_string(),
                regions: vec![Some(*load), None, None, None],
            })
            .collect(),
    }
}

fn fresh(eu_west: f64, tenants: &[(&str, f64)]) -> Inputs {
    feed(eu_west, tenants, 1000)
}

fn settings() -> ShieldSettings {
    ShieldSettings::default()
}

/// The tenant's own shed fraction in eu-west (0 without one).
fn tenant_fraction(state: &ShieldState, tenant: &str) -> f64 {
    state
        .tenants
        .iter()
        .find(|t| t.tenant == tenant && usize::from(t.region) == EU_WEST)
        .map_or(0.0, |t| t.fraction)
}

/// Runs `feeds` one a second from `at_ms`; returns the state and the time of the last tick.
fn run(state: ShieldState, at_ms: u64, feeds: &[Inputs]) -> (ShieldState, u64) {
    let mut state = state;
    let mut now = at_ms;
    for inputs in feeds {
        now += 1000;
        state = step(&state, inputs, &rings(), &settings(), now).0;
    }
    (state, now)
}

/// A surge whose relief the feed shows at once: eu-west carries 390 of everybody else plus
/// what the noisy tenant's unshed clients bring.
fn following_feed(state: &ShieldState, noisy: f64) -> Inputs {
    let kept = 1.0 - tenant_fraction(state, NOISY);
    fresh(390.0 + noisy * kept, &[(NOISY, noisy), (QUIET, 50.0)])
}

/// Ticks of a surge (noisy at 600 from eu-west) with the feed following the shed.
fn surge(ticks: usize) -> (ShieldState, u64) {
    let mut state = ShieldState::default();
    let mut now = 0;
    for _ in 0..ticks {
        let inputs = following_feed(&state, 600.0);
        (state, now) = run(state, now, &[inputs]);
        assert_eq!(
            state.regions[EU_WEST].fraction, 0.0,
            "the region is not shed while its tenant can be: {state:#?}"
        );
    }
    (state, now)
}

#[test]
fn a_surging_tenant_is_shed_first_and_the_region_is_not() {
    let (state, changes) = step(
        &ShieldState::default(),
        &fresh(990.0, &[(NOISY, 600.0), (QUIET, 50.0)]),
        &rings(),
        &settings(),
        1000,
    );
    assert!(
        (tenant_fraction(&state, NOISY) - 0.1).abs() < 1e-9,
        "max_step"
    );
    assert_eq!(tenant_fraction(&state, QUIET), 0.0, "under its share");
    assert_eq!(state.regions[EU_WEST].fraction, 0.0);
    assert_eq!(changes.len(), 1, "{changes:#?}");
    assert_eq!(changes[0].tenant.as_deref(), Some(NOISY));
    assert!(
        changes[0].reason.contains("share 0.61") && changes[0].reason.contains("above high"),
        "{}",
        changes[0].reason
    );
    let noisy = &state.tenants[0];
    assert_eq!(
        noisy.shares.keys().copied().collect::<Vec<_>>(),
        vec![Destination::Region(EU_NORTH)],
        "the same-continent neighbour first, as a region's shed"
    );
    // The view: the tenant's own shed in eu-west, the region itself only hot.
    let view = shed_view(&state, &settings());
    let own = view.tenant_region(NOISY, EU_WEST as u16).expect("own shed");
    assert_eq!(own.fraction_permille(), 100);
    assert!(view.tenant_region(QUIET, EU_WEST as u16).is_none());
    assert_eq!(
        view.region(EU_WEST as u16).map(|r| r.fraction_permille()),
        Some(0)
    );

    // A few more ticks, the feed showing the relief: the tenant rises until eu-west is back
    // inside the band, then holds; the region never sheds.
    let (state, _) = surge(12);
    let f = tenant_fraction(&state, NOISY);
    let load = 390.0 + 600.0 * (1.0 - f);
    assert!(f > 0.2 && f < 1.0, "{f}");
    assert!(load < 850.0, "eu-west below its high watermark: {load}");
}

#[test]
fn a_static_surge_sheds_the_whole_tenant_and_never_the_region_while_that_is_enough() {
    // The feed never shows the relief (the tenant's clients hold normal answers for minutes):
    // the tenant goes all the way, the region waits for it to land.
    let hot = fresh(990.0, &[(NOISY, 600.0), (QUIET, 50.0)]);
    let mut state = ShieldState::default();
    for t in 0..120u64 {
        state = step(&state, &hot, &rings(), &settings(), (t + 1) * 1000).0;
        assert_eq!(state.regions[EU_WEST].fraction, 0.0, "tick {t}");
    }
    assert_eq!(tenant_fraction(&state, NOISY), 1.0);
    assert_eq!(tenant_fraction(&state, QUIET), 0.0);
}

#[test]
fn a_tenant_under_its_share_leaves_the_region_to_shed_as_before() {
    let inputs = fresh(990.0, &[(NOISY, 200.0), (QUIET, 50.0)]);
    let (state, _) = step(
        &ShieldState::default(),
        &inputs,
        &rings(),
        &settings(),
        1000,
    );
    assert!(state.tenants.is_empty(), "{:#?}", state.tenants);
    assert!((state.regions[EU_WEST].fraction - 0.1).abs() < 1e-9);
}

#[test]
fn when_the_whole_tenant_is_not_enough_the_region_sheds_too() {
    // eu-west at 1.3, the noisy tenant 400 of it: even all of it leaves 0.9, above the high
    // watermark. The tenant goes to 1 (max_step a tick), then the region sheds.
    let hot = fresh(1300.0, &[(NOISY, 400.0)]);
    let (state, _) = run(ShieldState::default(), 0, &vec![hot.clone(); 9]);
    assert!(tenant_fraction(&state, NOISY) < 1.0);
    assert_eq!(
        state.regions[EU_WEST].fraction, 0.0,
        "not yet: the tenant first"
    );
    let (state, _) = run(state, 9000, std::slice::from_ref(&hot));
    assert_eq!(tenant_fraction(&state, NOISY), 1.0);
    assert!(
        state.regions[EU_WEST].fraction <= 0.1 + 1e-9,
        "in the tick the tenant is all shed, the region's first step at most"
    );
    let (state, _) = run(state, 10_000, &vec![hot; 2]);
    assert!(
        state.regions[EU_WEST].fraction > 0.0,
        "then everybody else: {state:#?}"
    );
}

#[test]
fn hysteresis_holds_inside_the_band_and_releases_a_calm_tenant_after_the_hold_down() {
    let (state, now) = surge(12);
    let held = tenant_fraction(&state, NOISY);
    // The band: the same surge, eu-west between the watermarks: nothing moves for a minute.
    let band = following_feed(&state, 600.0);
    let (state, now) = run(state, now, &vec![band; 60]);
    assert_eq!(
        tenant_fraction(&state, NOISY),
        held,
        "holds inside the band"
    );
    // Calm: the tenant is back to 50 (share far below the release share): it is given back,
    // max_step a tick. Its last move was up more than the hold-down ago, so at once.
    let calm = fresh(430.0, &[(NOISY, 50.0), (QUIET, 50.0)]);
    let (state, now) = run(state, now, std::slice::from_ref(&calm));
    let f = tenant_fraction(&state, NOISY);
    assert!((held - f - 0.1).abs() < 1e-9, "{held} -> {f}");
    let (state, now) = run(state, now, &vec![calm.clone(); 10]);
    assert_eq!(tenant_fraction(&state, NOISY), 0.0, "released");
    assert!(shed_view(&state, &settings())
        .tenant_region(NOISY, EU_WEST as u16)
        .is_none());
    // Released entries are forgotten once their hold-down has passed.
    let (state, _) = run(state, now, &vec![calm; 31]);
    assert!(state.tenants.is_empty(), "{:#?}", state.tenants);
}

#[test]
fn the_hold_down_delays_a_release_right_after_a_raise() {
    let (state, now) = surge(1);
    assert!(tenant_fraction(&state, NOISY) > 0.0);
    let calm = fresh(430.0, &[(NOISY, 50.0)]);
    // 29 s after the raise: still within the 30 s hold-down.
    let (state, now) = run(state, now, &vec![calm.clone(); 29]);
    assert!((tenant_fraction(&state, NOISY) - 0.1).abs() < 1e-9);
    let (state, _) = run(state, now, &vec![calm; 2]);
    assert_eq!(tenant_fraction(&state, NOISY), 0.0);
}

#[test]
fn a_share_between_release_and_limit_keeps_a_shed_tenant_but_engages_no_new_one() {
    let (state, now) = surge(3);
    let f = tenant_fraction(&state, NOISY);
    // Share 0.27: above the release share (0.3 × 0.70 / 0.85 ≈ 0.247), below the limit 0.3.
    let kept = 1.0 - f;
    let eu_west = 990.0 - 270.0 * f;
    let middling = fresh(eu_west, &[(NOISY, 270.0), (QUIET, 270.0 * kept + 0.01)]);
    let (state, _) = run(state, now, &[middling]);
    assert!(tenant_fraction(&state, NOISY) >= f, "still shed");
    assert_eq!(
        tenant_fraction(&state, QUIET),
        0.0,
        "not engaged below the limit"
    );
}

#[test]
fn stale_data_freezes_a_tenant_shed_and_long_stale_data_reverts_it() {
    let (state, now) = surge(3);
    let f = tenant_fraction(&state, NOISY);
    let stale = feed(990.0, &[(NOISY, 600.0)], 60_000);
    let (state, now) = run(state, now, &vec![stale; 20]);
    assert_eq!(tenant_fraction(&state, NOISY), f, "frozen");
    assert_eq!(state.tenants[0].note, Note::Stale);
    assert_eq!(state.regions[EU_WEST].fraction, 0.0);
    let gone = feed(990.0, &[(NOISY, 600.0)], 400_000);
    let (state, now) = run(state, now, std::slice::from_ref(&gone));
    assert!(
        (tenant_fraction(&state, NOISY) - (f - 0.1)).abs() < 1e-9,
        "one step back"
    );
    assert_eq!(state.tenants[0].note, Note::Reverting);
    let (state, _) = run(state, now, &vec![gone; 10]);
    assert_eq!(tenant_fraction(&state, NOISY), 0.0);
}

#[test]
fn an_operator_held_region_drops_its_tenant_sheds() {
    let (state, now) = surge(3);
    let mut held = fresh(990.0, &[(NOISY, 600.0)]);
    held.operator_held[EU_WEST] = true;
    let (state, changes) = step(&state, &held, &rings(), &settings(), now + 1000);
    assert_eq!(tenant_fraction(&state, NOISY), 0.0);
    assert!(changes
        .iter()
        .any(|c| c.tenant.as_deref() == Some(NOISY) && c.reason == "operator override"));
}

#[test]
fn shield_off_drops_tenant_sheds_and_frozen_keeps_them() {
    let (state, now) = surge(3);
    let f = tenant_fraction(&state, NOISY);
    let mut frozen = fresh(990.0, &[(NOISY, 600.0)]);
    frozen.mode = ShieldMode::Frozen;
    let (kept, _) = step(&state, &frozen, &rings(), &settings(), now + 1000);
    assert_eq!(tenant_fraction(&kept, NOISY), f);
    let mut off = frozen;
    off.mode = ShieldMode::Off;
    let (dropped, changes) = step(&state, &off, &rings(), &settings(), now + 1000);
    assert!(dropped.tenants.is_empty());
    assert!(changes.iter().any(|c| c.tenant.as_deref() == Some(NOISY)));
}

#[test]
fn a_broken_tenant_shed_is_repaired_away() {
    let (mut state, now) = surge(2);
    state.tenants[0].share = f64::NAN;
    let inputs = following_feed(&state, 600.0);
    let (next, _, repairs) = checked_step(&state, &inputs, &rings(), &settings(), now + 1000);
    assert!(
        repairs.iter().any(|r| r.contains("tenant noisy")),
        "{repairs:?}"
    );
    assert!(next.tenants.iter().all(|t| t.share.is_finite()));
}
