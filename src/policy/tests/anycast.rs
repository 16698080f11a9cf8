//! Anycast: global answers, forced answers, drains, per-subnet shedding, TTL and scope.

use super::*;

fn policies(knobs: &ControlKnobs) -> CompiledPolicies {
    compile_ok(&format!("{TOPOLOGY}\n{STEERED}"), knobs)
}

fn region_knob(region: &str, knob: RegionKnobs) -> ControlKnobs {
    let mut knobs = ControlKnobs::default();
    knobs.regions.insert(region.to_owned(), knob);
    knobs
}

const ROOT: PolicyRoot = PolicyRoot::Anycast { ttl: 300 };

fn first_v4(d: &Decision<'_>) -> Ipv4Addr {
    v4_of(d).first().copied().unwrap_or(Ipv4Addr::UNSPECIFIED)
}

#[test]
fn normal_answer_is_global_with_scope_zero() {
    let p = policies(&ControlKnobs::default());
    assert_eq!(p.steered()[0].root, ROOT);
    for region in [EU_WEST, NA_EAST, AF_SOUTH] {
        let d = evaluate(
            &p,
            ROOT,
            &client(region, v4_subnet(3), 20),
            &ShedView::default(),
        );
        assert_eq!(first_v4(&d), v4("192.0.2.1"));
        assert_eq!((d.ttl, d.scope), (300, 0));
    }
    let d = evaluate(
        &p,
        ROOT,
        &client(EU_WEST, v6_subnet(3), 48),
        &ShedView::default(),
    );
    match d.target {
        Target::Addresses { v6, .. } => assert_eq!(v6.len(), 1),
        Target::Cname { .. } => panic!("expected addresses"),
    }
}

#[test]
fn forced_answers_pin_a_region_and_scope_everyone_by_location() {
    let regional = policies(&region_knob(
        "eu-west",
        RegionKnobs {
            force: Some(ForcedAnswer::Regional),
            drain: false,
        },
    ));
    let d = evaluate(
        &regional,
        ROOT,
        &client(EU_WEST, v4_subnet(1), 20),
        &ShedView::default(),
    );
    assert_eq!(first_v4(&d), v4("198.51.100.4"));
    assert_eq!(d.scope, 20);
    // Other regions still get global, but the answer now depends on location.
    let other = evaluate(
        &regional,
        ROOT,
        &client(NA_EAST, v4_subnet(1), 21),
        &ShedView::default(),
    );
    assert_eq!(first_v4(&other), v4("192.0.2.1"));
    assert_eq!(other.scope, 21);

    let fallback = policies(&region_knob(
        "eu-west",
        RegionKnobs {
            force: Some(ForcedAnswer::Fallback("fb-na".to_owned())),
            drain: false,
        },
    ));
    let d = evaluate(
        &fallback,
        ROOT,
        &client(EU_WEST, v4_subnet(1), 20),
        &ShedView::default(),
    );
    assert_eq!(first_v4(&d), v4("203.0.113.1"));
}

#[test]
fn drain_goes_to_first_usable_neighbour_then_fallback_site() {
    let mut knobs = region_knob(
        "eu-west",
        RegionKnobs {
            force: None,
            drain: true,
        },
    );
    let p = policies(&knobs);
    let d = evaluate(
        &p,
        ROOT,
        &client(EU_WEST, v4_subnet(1), 20),
        &ShedView::default(),
    );
    assert_eq!(first_v4(&d), v4("198.51.100.5"), "first neighbour eu-north");

    // eu-north drained too: eu-west's next neighbour na-east; eu-north's only neighbour
    // (eu-west) is drained -> fallback site on its continent, fb-eu.
    knobs.regions.insert(
        "eu-north".to_owned(),
        RegionKnobs {
            force: None,
            drain: true,
        },
    );
    let p = policies(&knobs);
    let d = evaluate(
        &p,
        ROOT,
        &client(EU_WEST, v4_subnet(1), 20),
        &ShedView::default(),
    );
    assert_eq!(first_v4(&d), v4("198.51.100.1"));
    let d = evaluate(
        &p,
        ROOT,
        &client(EU_NORTH, v4_subnet(1), 20),
        &ShedView::default(),
    );
    assert_eq!(first_v4(&d), v4("203.0.113.2"));
    assert_eq!(
        p.region_override(EU_NORTH),
        RegionOverride::Drained(Destination::Fallback(0))
    );
}

fn shed_view(
    region: u16,
    fraction: u16,
    destinations: &[ShedShare],
    hot_ttl: Option<u32>,
) -> ShedView {
    let mut view = ShedView::default();
    match RegionShed::new(fraction, destinations, hot_ttl) {
        Ok(state) => view.set_region(region, state),
        Err(e) => panic!("bad test shed state: {e}"),
    }
    view
}

fn to(destination: Destination, share: u16) -> ShedShare {
    ShedShare {
        destination,
        share_permille: share,
    }
}

/// For each of 20k subnets of eu-west: the first IPv4 answer.
fn answers(p: &CompiledPolicies, view: &ShedView) -> Vec<Ipv4Addr> {
    (0..20_000)
        .map(|i| first_v4(&evaluate(p, ROOT, &client(EU_WEST, v4_subnet(i), 20), view)))
        .collect()
}

#[test]
fn shedding_moves_the_fraction_of_subnets_and_raising_it_moves_only_the_difference() {
    let p = policies(&ControlKnobs::default());
    let global = v4("192.0.2.1");
    let dest = [to(Destination::Region(EU_NORTH), 1000)];
    let at_20 = answers(&p, &shed_view(EU_WEST, 200, &dest, None));
    let at_30 = answers(&p, &shed_view(EU_WEST, 300, &dest, None));
    let share = |v: &[Ipv4Addr]| v.iter().filter(|a| **a != global).count() as f64 / v.len() as f64;
    assert!(
        (share(&at_20) - 0.2).abs() <= 0.02,
        "20%: {}",
        share(&at_20)
    );
    assert!(
        (share(&at_30) - 0.3).abs() <= 0.02,
        "30%: {}",
        share(&at_30)
    );
    for (a, b) in at_20.iter().zip(&at_30) {
        if *a != global {
            assert_eq!(
                a, b,
                "a subnet shed at 20% must stay shed (same place) at 30%"
            );
        }
    }
    // Other regions are untouched.
    let view = shed_view(EU_WEST, 1000, &dest, None);
    let d = evaluate(&p, ROOT, &client(NA_EAST, v4_subnet(1), 20), &view);
    assert_eq!(first_v4(&d), global);
}

#[test]
fn shed_destinations_split_by_share_and_stay_put_when_the_fraction_changes() {
    let p = policies(&ControlKnobs::default());
    let dest = [
        to(Destination::Region(EU_NORTH), 750),
        to(Destination::Fallback(0), 250),
    ];
    let all = answers(&p, &shed_view(EU_WEST, 1000, &dest, None));
    let north = all.iter().filter(|a| **a == v4("198.51.100.5")).count() as f64 / 20_000.0;
    let fb = all.iter().filter(|a| **a == v4("203.0.113.2")).count() as f64 / 20_000.0;
    assert!(
        (north - 0.75).abs() <= 0.02 && (fb - 0.25).abs() <= 0.02,
        "{north} {fb}"
    );
    let half = answers(&p, &shed_view(EU_WEST, 500, &dest, None));
    for (a, b) in all.iter().zip(&half) {
        if *b != v4("192.0.2.1") {
            assert_eq!(a, b);
        }
    }
}

#[test]
fn shed_scope_and_hot_ttl() {
    let p = policies(&ControlKnobs::default());
    let dest = [to(Destination::Region(EU_NORTH), 1000)];
    // Partial shed: hash decided -> at least /24 (or /56), location prefix if longer.
    let view = shed_view(EU_WEST, 200, &dest, Some(30));
    let d = evaluate(&p, ROOT, &client(EU_WEST, v4_subnet(7), 20), &view);
    assert_eq!((d.scope, d.ttl), (24, 30));
    assert!(d.trace.hot);
    let d = evaluate(&p, ROOT, &client(EU_WEST, v4_subnet(7), 26), &view);
    assert_eq!(d.scope, 26);
    let d = evaluate(&p, ROOT, &client(EU_WEST, v6_subnet(7), 48), &view);
    assert_eq!(d.scope, 56);
    // Another region: depends on location only, normal TTL.
    let d = evaluate(&p, ROOT, &client(NA_EAST, v4_subnet(7), 20), &view);
    assert_eq!((d.scope, d.ttl), (20, 300));
    // Full shed to one destination: no hash involved.
    let full = shed_view(EU_WEST, 1000, &dest, None);
    let d = evaluate(&p, ROOT, &client(EU_WEST, v4_subnet(7), 20), &full);
    assert_eq!((d.scope, d.ttl), (20, 300));
    // Hot without shedding: short TTL, location scope, still global.
    let hot = shed_view(EU_WEST, 0, &[], Some(20));
    let d = evaluate(&p, ROOT, &client(EU_WEST, v4_subnet(7), 22), &hot);
    assert_eq!((first_v4(&d), d.scope, d.ttl), (v4("192.0.2.1"), 22, 20));
}

#[test]
fn operator_knobs_win_over_the_shield() {
    let p = policies(&region_knob(
        "eu-west",
        RegionKnobs {
            force: Some(ForcedAnswer::Global),
            drain: false,
        },
    ));
    let view = shed_view(
        EU_WEST,
        1000,
        &[to(Destination::Fallback(0), 1000)],
        Some(10),
    );
    let d = evaluate(&p, ROOT, &client(EU_WEST, v4_subnet(1), 20), &view);
    assert_eq!((first_v4(&d), d.ttl), (v4("192.0.2.1"), 300));
}

#[test]
fn shed_view_with_unknown_destination_falls_back_to_global() {
    let p = policies(&ControlKnobs::default());
    let view = shed_view(EU_WEST, 1000, &[to(Destination::Region(77), 1000)], None);
    let d = evaluate(&p, ROOT, &client(EU_WEST, v4_subnet(1), 20), &view);
    assert_eq!(first_v4(&d), v4("192.0.2.1"));
    let d = evaluate(&p, ROOT, &client(900, v4_subnet(1), 20), &view);
    assert_eq!(first_v4(&d), v4("192.0.2.1"));
}

#[test]
fn region_shed_checks_its_invariants() {
    let d = [to(Destination::Region(1), 500)];
    assert_eq!(
        RegionShed::new(1001, &d, None),
        Err(ShedError::FractionTooLarge(1001))
    );
    assert_eq!(
        RegionShed::new(10, &[], None),
        Err(ShedError::NoDestination(10))
    );
    assert_eq!(
        RegionShed::new(10, &[to(Destination::Global, 5)], None),
        Err(ShedError::GlobalDestination)
    );
    assert_eq!(
        RegionShed::new(10, &[to(Destination::Region(1), 0)], None),
        Err(ShedError::BadShare(0))
    );
    assert_eq!(
        RegionShed::new(10, &[d[0]; 5], None),
        Err(ShedError::TooManyDestinations(5))
    );
    assert!(!ShedView::default().any_active());
}

#[test]
fn explain_reports_the_shed_state_and_bucket() {
    let p = policies(&ControlKnobs::default());
    let view = shed_view(
        EU_WEST,
        1000,
        &[to(Destination::Fallback(0), 1000)],
        Some(30),
    );
    let text = explain(&p, ROOT, &client(EU_WEST, v4_subnet(1), 20), &view);
    assert!(
        text.starts_with("anycast; region eu-west; shedding 1000 per mille, bucket "),
        "{text}"
    );
    assert!(text.contains("-> fallback fb-eu"), "{text}");
    assert!(
        text.ends_with("answer 203.0.113.2 2001:db8:fb::2; ttl 30; scope 20"),
        "{text}"
    );
}
