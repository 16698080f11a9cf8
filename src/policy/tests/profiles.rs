//! Weighted, geo, failover and nested profiles: distribution, stickiness, movement, scope.

use std::collections::BTreeMap;

use super::*;

const SUBNETS: u32 = 20_000;

/// A weighted profile `w` with endpoints e0..eN (CNAME eI.example.net.) of these weights.
fn weighted(weights: &[u32]) -> String {
    let mut text = format!("{TOPOLOGY}\n[profiles.w]\ntype = \"weighted\"\nttl = 120\n");
    for (i, w) in weights.iter().enumerate() {
        text.push_str(&format!(
            "[[profiles.w.endpoints]]\nname = \"e{i}\"\ncname = \"e{i}.example.net.\"\nweight = {w}\n"
        ));
    }
    text
}

/// The endpoint CNAME chosen for each of `SUBNETS` subnets.
fn choices(p: &CompiledPolicies, subnet: fn(u32) -> IpAddr) -> Vec<String> {
    let root = root_of(p, "w");
    (0..SUBNETS)
        .map(|i| {
            let d = evaluate(
                p,
                root,
                &client(EU_WEST, subnet(i), 24),
                &ShedView::default(),
            );
            cname_of(&d).unwrap_or_default()
        })
        .collect()
}

fn shares(choices: &[String]) -> BTreeMap<String, f64> {
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    for c in choices {
        *counts.entry(c.clone()).or_default() += 1.0;
    }
    counts.values_mut().for_each(|v| *v /= choices.len() as f64);
    counts
}

fn assert_shares(got: &BTreeMap<String, f64>, weights: &[u32]) {
    let total: u32 = weights.iter().sum();
    for (i, &w) in weights.iter().enumerate() {
        let name = format!("e{i}.example.net.");
        let share = got.get(&name).copied().unwrap_or(0.0);
        let want = f64::from(w) / f64::from(total);
        if w == 0 {
            assert_eq!(share, 0.0, "weight 0 endpoint e{i} was served");
        }
        assert!(
            (share - want).abs() <= 0.02,
            "e{i}: share {share:.4}, want {want:.4} ±0.02 ({got:?})"
        );
    }
}

#[test]
fn weighted_distribution_follows_weights_for_v4_and_v6() {
    for weights in [
        &[90, 10][..],
        &[50, 30, 20, 0],
        &[1, 1, 1, 997],
        &[333, 0, 334, 333],
    ] {
        let p = compile_ok(&weighted(weights), &ControlKnobs::default());
        assert_shares(&shares(&choices(&p, v4_subnet)), weights);
        assert_shares(&shares(&choices(&p, v6_subnet)), weights);
    }
}

#[test]
fn weighted_choice_is_sticky_per_subnet_and_scoped_to_the_hash_prefix() {
    let p = compile_ok(&weighted(&[50, 50]), &ControlKnobs::default());
    let root = root_of(&p, "w");
    let shed = ShedView::default();
    for i in 0..500 {
        let a = evaluate(&p, root, &client(EU_WEST, v4_subnet(i), 20), &shed);
        // Another host in the same /24, located by a different prefix and region.
        let IpAddr::V4(addr) = v4_subnet(i) else {
            continue;
        };
        let same_24 = IpAddr::V4(Ipv4Addr::from(u32::from(addr) ^ 0x7f));
        let b = evaluate(&p, root, &client(NA_EAST, same_24, 16), &shed);
        assert_eq!(a.target, b.target, "subnet {i}");
        assert_eq!((a.scope, b.scope), (24, 24), "hash prefix, not location");
        assert_eq!(a.ttl, 120);
    }
    let d = evaluate(&p, root, &client(EU_WEST, v6_subnet(1), 48), &shed);
    assert_eq!(d.scope, 56);
}

#[test]
fn single_servable_endpoint_needs_no_scope() {
    let p = compile_ok(&weighted(&[100, 0, 0]), &ControlKnobs::default());
    let d = evaluate(
        &p,
        root_of(&p, "w"),
        &client(EU_WEST, v4_subnet(9), 24),
        &ShedView::default(),
    );
    assert_eq!(cname_of(&d).as_deref(), Some("e0.example.net."));
    assert_eq!(d.scope, 0);
    assert_eq!(
        d.trace.steps[0].map(|s| s.choice),
        Some(StepChoice::Weighted { hashed: false })
    );
}

/// Share of subnets whose choice differs, and whether every move involves endpoint `changed`.
fn movement(before: &[String], after: &[String], changed: &str) -> (f64, bool) {
    let mut moved = 0usize;
    let mut only_changed = true;
    for (a, b) in before.iter().zip(after) {
        if a != b {
            moved += 1;
            only_changed &= a == changed || b == changed;
        }
    }
    (moved as f64 / before.len() as f64, only_changed)
}

#[test]
fn changing_one_weight_moves_only_that_endpoints_share() {
    let before = choices(
        &compile_ok(&weighted(&[40, 40, 20]), &ControlKnobs::default()),
        v4_subnet,
    );
    // Middle weight 40 -> 20: shares go 40/40/20 -> 50/25/25, so 15% must move, all from e1.
    let after = choices(
        &compile_ok(&weighted(&[40, 20, 20]), &ControlKnobs::default()),
        v4_subnet,
    );
    let (moved, only_e1) = movement(&before, &after, "e1.example.net.");
    assert!(only_e1, "subnets moved between unchanged endpoints");
    assert!(
        (moved - 0.15).abs() <= 0.02,
        "moved {moved:.4}, minimum is 0.15"
    );

    // Break-glass via the control file: 90/10 -> 0/100 moves exactly the 90%.
    let warm = weighted(&[90, 10]);
    let normal = choices(&compile_ok(&warm, &ControlKnobs::default()), v4_subnet);
    let mut knobs = ControlKnobs::default();
    for (endpoint, weight) in [("e0", 0), ("e1", 100)] {
        knobs
            .profiles
            .entry("w".to_owned())
            .or_default()
            .endpoints
            .insert(
                endpoint.to_owned(),
                EndpointKnobs {
                    weight: Some(weight),
                    enabled: None,
                    force_up: None,
                },
            );
    }
    let flipped = choices(&compile_ok(&warm, &knobs), v4_subnet);
    assert!(flipped.iter().all(|c| c == "e1.example.net."));
    let (moved, _) = movement(&normal, &flipped, "e1.example.net.");
    assert!((moved - 0.9).abs() <= 0.02, "moved {moved:.4}");
}

#[test]
fn adding_an_endpoint_only_takes_its_share() {
    let before = choices(
        &compile_ok(&weighted(&[50, 50]), &ControlKnobs::default()),
        v4_subnet,
    );
    let after = choices(
        &compile_ok(&weighted(&[50, 50, 25]), &ControlKnobs::default()),
        v4_subnet,
    );
    let (moved, only_new) = movement(&before, &after, "e2.example.net.");
    assert!(only_new, "adding e2 moved subnets between e0 and e1");
    assert!(
        (moved - 0.2).abs() <= 0.02,
        "moved {moved:.4}, e2's share is 0.2"
    );
}

const NESTED: &str = r#"
[profiles.top]
type = "weighted"
ttl = 300
[[profiles.top.endpoints]]
name = "frontdoor"
cname = "top.edge.example.net."
weight = 0
[[profiles.top.endpoints]]
name = "gw"
profile = "gw"
weight = 100
[profiles.gw]
type = "failover"
ttl = 45
[[profiles.gw.endpoints]]
name = "primary"
profile = "geo"
[[profiles.gw.endpoints]]
name = "backup"
addresses = ["192.0.2.99", "2001:db8::99"]
[profiles.geo]
type = "geo"
ttl = 90
[[profiles.geo.endpoints]]
name = "eu"
addresses = ["203.0.113.10"]
regions = ["eu-west"]
[[profiles.geo.endpoints]]
name = "na"
addresses = ["203.0.113.20"]
regions = ["na-west"]
[[profiles.geo.endpoints]]
name = "elsewhere"
addresses = ["203.0.113.99"]
default = true
"#;

#[test]
fn nested_profiles_take_the_smallest_ttl_and_the_location_scope() {
    let p = compile_ok(&format!("{TOPOLOGY}\n{NESTED}"), &ControlKnobs::default());
    let shed = ShedView::default();
    let root = root_of(&p, "top");
    let d = evaluate(&p, root, &client(EU_WEST, v4_subnet(5), 19), &shed);
    assert_eq!(v4_of(&d), [v4("203.0.113.10")]);
    assert_eq!(d.ttl, 45);
    assert_eq!(d.scope, 19);
    let path: Vec<Option<&str>> = d
        .trace
        .steps
        .iter()
        .flatten()
        .map(|s| p.profile_name(s.profile))
        .collect();
    assert_eq!(path, [Some("top"), Some("gw"), Some("geo")]);

    let capped = PolicyRoot::Profile {
        profile: p.profile_id("top").unwrap_or(ProfileId(u16::MAX)),
        ttl_cap: Some(30),
    };
    assert_eq!(
        evaluate(&p, capped, &client(EU_WEST, v4_subnet(5), 19), &shed).ttl,
        30
    );
}

#[test]
fn geo_fallback_order_is_neighbour_then_continent_then_default() {
    let p = compile_ok(&format!("{TOPOLOGY}\n{NESTED}"), &ControlKnobs::default());
    let root = root_of(&p, "geo");
    let shed = ShedView::default();
    let route = |region: u16| {
        let d = evaluate(&p, root, &client(region, v4_subnet(1), 24), &shed);
        let step = d.trace.steps[0].map(|s| s.choice);
        (v4_of(&d).to_vec(), step)
    };
    assert_eq!(
        route(EU_WEST),
        (
            vec![v4("203.0.113.10")],
            Some(StepChoice::Geo(GeoRoute::Direct))
        )
    );
    // eu-north: first neighbour eu-west serves it.
    assert_eq!(
        route(EU_NORTH),
        (
            vec![v4("203.0.113.10")],
            Some(StepChoice::Geo(GeoRoute::Neighbour(EU_WEST)))
        )
    );
    // na-east: neighbour na-west.
    assert_eq!(
        route(NA_EAST),
        (
            vec![v4("203.0.113.20")],
            Some(StepChoice::Geo(GeoRoute::Neighbour(NA_WEST)))
        )
    );
    // af-south: its neighbour eu-west.
    assert_eq!(route(AF_SOUTH).0, vec![v4("203.0.113.10")]);

    // Disable "eu" by control: eu-west/eu-north have no EU-served region left -> default;
    // af-south (neighbour eu-west unserved, no AF region) -> default too.
    let mut knobs = ControlKnobs::default();
    knobs
        .profiles
        .entry("geo".to_owned())
        .or_default()
        .endpoints
        .insert(
            "eu".to_owned(),
            EndpointKnobs {
                weight: None,
                enabled: Some(false),
                force_up: None,
            },
        );
    let p2 = compile_ok(&format!("{TOPOLOGY}\n{NESTED}"), &knobs);
    let root2 = root_of(&p2, "geo");
    for region in [EU_WEST, EU_NORTH, AF_SOUTH] {
        let d = evaluate(&p2, root2, &client(region, v4_subnet(1), 24), &shed);
        assert_eq!(v4_of(&d), [v4("203.0.113.99")]);
        assert_eq!(
            d.trace.steps[0].map(|s| s.choice),
            Some(StepChoice::Geo(GeoRoute::Default))
        );
    }
}

#[test]
fn geo_falls_back_to_a_region_on_the_same_continent() {
    // na-east has no endpoint and its only neighbour (eu-west) has none either; na-west does.
    let text = format!(
        "{}\n{}",
        TOPOLOGY.replace("neighbours = [\"na-west\"]", "neighbours = [\"eu-north\"]"),
        r#"
[profiles.g]
type = "geo"
ttl = 60
[[profiles.g.endpoints]]
name = "na"
addresses = ["203.0.113.20"]
regions = ["na-west"]
[[profiles.g.endpoints]]
name = "rest"
addresses = ["203.0.113.99"]
default = true
"#
    );
    let p = compile_ok(&text, &ControlKnobs::default());
    let d = evaluate(
        &p,
        root_of(&p, "g"),
        &client(NA_EAST, v4_subnet(1), 24),
        &ShedView::default(),
    );
    assert_eq!(v4_of(&d), [v4("203.0.113.20")]);
    assert_eq!(
        d.trace.steps[0].map(|s| s.choice),
        Some(StepChoice::Geo(GeoRoute::Continent(NA_WEST)))
    );
}

#[test]
fn failover_takes_the_first_enabled_endpoint() {
    let p = compile_ok(&format!("{TOPOLOGY}\n{NESTED}"), &ControlKnobs::default());
    let d = evaluate(
        &p,
        root_of(&p, "gw"),
        &client(NA_WEST, v4_subnet(1), 24),
        &ShedView::default(),
    );
    assert_eq!(v4_of(&d), [v4("203.0.113.20")]);

    let mut knobs = ControlKnobs::default();
    knobs
        .profiles
        .entry("gw".to_owned())
        .or_default()
        .endpoints
        .insert(
            "primary".to_owned(),
            EndpointKnobs {
                weight: None,
                enabled: Some(false),
                force_up: None,
            },
        );
    let p = compile_ok(&format!("{TOPOLOGY}\n{NESTED}"), &knobs);
    let d = evaluate(
        &p,
        root_of(&p, "gw"),
        &client(NA_WEST, v6_subnet(1), 40),
        &ShedView::default(),
    );
    match d.target {
        Target::Addresses { v4, v6 } => {
            assert_eq!(v4, [Ipv4Addr::new(192, 0, 2, 99)]);
            assert_eq!(v6.len(), 1);
        }
        Target::Cname { .. } => panic!("expected addresses"),
    }
    assert_eq!(
        d.scope, 0,
        "failover to fixed addresses depends on nothing client-specific"
    );
}

#[test]
fn cname_target_carries_its_wire_form() {
    let p = compile_ok(&weighted(&[1]), &ControlKnobs::default());
    let d = evaluate(
        &p,
        root_of(&p, "w"),
        &client(0, v4_subnet(0), 24),
        &ShedView::default(),
    );
    match d.target {
        Target::Cname { wire, .. } => {
            assert_eq!(wire, b"\x02e0\x07example\x03net\x00");
        }
        Target::Addresses { .. } => panic!("expected a CNAME"),
    }
}

#[test]
fn out_of_range_region_does_not_panic() {
    let p = compile_ok(&format!("{TOPOLOGY}\n{NESTED}"), &ControlKnobs::default());
    let d = evaluate(
        &p,
        root_of(&p, "geo"),
        &client(999, v4_subnet(0), 24),
        &ShedView::default(),
    );
    assert_eq!(
        v4_of(&d),
        [v4("203.0.113.99")],
        "unknown region gets the default endpoint"
    );
}
