//! `[topology.cells]`: compilation, its errors, and a tenant's cells in anycast answers
//! (global normally, a region's or site's when sent there, the destination's own addresses
//! where its layer has no cells), with the ECS scope of the answer without cells.

use super::*;
use crate::cells::LayerRef;
use crate::test_alloc::allocations;

const CELLS: &str = r#"
[topology.cells]
k = 2
global = [
  { name = "g1", anycast = ["192.0.2.11", "2001:db8::11"] },
  { name = "g2", anycast = ["192.0.2.12", "2001:db8::12"] },
  { name = "g3", anycast = ["192.0.2.13", "2001:db8::13"] },
  { name = "g4", anycast = ["192.0.2.14", "2001:db8::14"] },
  { name = "g5", anycast = ["192.0.2.15", "2001:db8::15"] },
]
[topology.cells.regions]
eu-north = [
  { name = "en1", anycast = ["198.51.100.51", "2001:db8:1::51"] },
  { name = "en2", anycast = ["198.51.100.52", "2001:db8:1::52"] },
  { name = "en3", anycast = ["198.51.100.53", "2001:db8:1::53"] },
]
[topology.cells.fallback]
fb-eu = [
  { name = "fe1", anycast = ["203.0.113.21", "2001:db8:fb::21"] },
  { name = "fe2", anycast = ["203.0.113.22", "2001:db8:fb::22"] },
]
"#;

const ROOT: PolicyRoot = PolicyRoot::Anycast { ttl: 300 };

fn with_cells(knobs: &ControlKnobs) -> CompiledPolicies {
    compile_ok(&format!("{TOPOLOGY}\n{CELLS}\n{STEERED}"), knobs)
}

fn answer<'a>(
    p: &'a CompiledPolicies,
    cells: Option<&'a crate::cells::TenantCells>,
    region: u16,
    shed: &ShedView,
) -> Decision<'a> {
    let client = client(region, v4_subnet(7), 20);
    let tenant = cells.map(|cells| AsTenant {
        name: "tenant",
        cells: Some(cells),
    });
    evaluate_for_tenant(p, ROOT, &client, shed, &HealthView::all_up(), tenant)
}

fn v4s(d: &Decision<'_>) -> Vec<Ipv4Addr> {
    v4_of(d).to_vec()
}

#[test]
fn cells_without_cells_nothing_changes() {
    let plain = compile_ok(&format!("{TOPOLOGY}\n{STEERED}"), &ControlKnobs::default());
    assert!(plain.cells().is_none());
    let d = answer(&plain, None, EU_WEST, &ShedView::default());
    assert_eq!(v4s(&d), vec![v4("192.0.2.1")]);
}

#[test]
fn cells_a_tenant_answers_with_its_global_cells() {
    let p = with_cells(&ControlKnobs::default());
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    let fabrikam = topology.assign("fabrikam", None);
    let tailspin = topology.assign("tailspin", None);
    let a = answer(&p, Some(&fabrikam), EU_WEST, &ShedView::default());
    let b = answer(&p, Some(&tailspin), EU_WEST, &ShedView::default());
    assert_eq!(v4s(&a).len(), 2);
    assert_eq!(v4s(&b).len(), 2);
    assert_ne!(v4s(&a), v4s(&b), "two tenants, two shards (of C(5,2) = 10)");
    for d in [&a, &b] {
        assert!(v4s(d)
            .iter()
            .all(|a| a.octets()[..3] == [192, 0, 2] && a.octets()[3] > 10));
        assert_eq!((d.ttl, d.scope), (300, 0), "scope as without cells");
        let Target::Addresses { v6, .. } = d.target else {
            panic!("addresses")
        };
        assert_eq!(v6.len(), 2);
    }
    // The platform's own answer (a name without a tenant) is unchanged.
    let d = answer(&p, None, EU_WEST, &ShedView::default());
    assert_eq!(v4s(&d), vec![v4("192.0.2.1")]);
}

#[test]
fn cells_a_tenant_sent_to_a_region_gets_its_cells_there() {
    // eu-west drained -> its first neighbour eu-north, which has cells; eu-north's clients
    // are not drained (global cells). Drain eu-north too -> fb-eu (site with cells).
    let mut knobs = ControlKnobs::default();
    let drain = RegionKnobs {
        force: None,
        drain: true,
    };
    knobs.regions.insert("eu-west".to_owned(), drain.clone());
    let p = with_cells(&knobs);
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    let t = topology.assign("fabrikam", None);
    let d = answer(&p, Some(&t), EU_WEST, &ShedView::default());
    let got = v4s(&d);
    assert_eq!(got.len(), 2);
    assert!(got
        .iter()
        .all(|a| a.octets()[..3] == [198, 51, 100] && a.octets()[3] > 50));
    assert_eq!(
        d.scope, 20,
        "location decided: the client's prefix, as without cells"
    );
    // A region without cells answers with its own addresses: drain na-east's clients to
    // na-west (no cells there).
    knobs.regions.insert("na-east".to_owned(), drain.clone());
    knobs.regions.insert("eu-north".to_owned(), drain);
    let p = with_cells(&knobs);
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    let t = topology.assign("fabrikam", None);
    let d = answer(&p, Some(&t), NA_EAST, &ShedView::default());
    assert_eq!(v4s(&d), vec![v4("198.51.100.2")]);
    let d = answer(&p, Some(&t), EU_NORTH, &ShedView::default());
    let got = v4s(&d);
    assert_eq!(got.len(), 2, "fb-eu has two cells, k = 2: both");
    assert!(got
        .iter()
        .all(|a| a.octets()[..3] == [203, 0, 113] && a.octets()[3] > 20));
}

#[test]
fn cells_answers_allocate_nothing() {
    let p = with_cells(&ControlKnobs::default());
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    let t = topology.assign("fabrikam", Some(3));
    let before = allocations();
    let mut n = 0;
    for region in 0..6 {
        n += v4s_len(&answer(&p, Some(&t), region, &ShedView::default()));
    }
    assert_eq!(allocations(), before);
    assert_eq!(n, 6 * 3);
}

fn v4s_len(d: &Decision<'_>) -> usize {
    v4_of(d).len()
}

#[test]
fn cells_errors_name_their_field() {
    let bad = r#"
[topology.cells]
k = 9
global = [
  { name = "g1", anycast = ["192.0.2.11"] },
  { name = "g1", anycast = ["192.0.2.12", "2001:db8::12"] },
  { name = "g3", anycast = ["192.0.2.13", "192.0.2.14", "2001:db8::13"] },
]
[topology.cells.regions]
mars = [{ name = "m1", anycast = ["198.51.100.99", "2001:db8:1::99"] }]
"#;
    let errors = compile_err(
        &format!("{TOPOLOGY}\n{bad}\n{STEERED}"),
        &ControlKnobs::default(),
    );
    assert_error(&errors, "topology.cells.k", "1 to 8");
    assert_error(
        &errors,
        "topology.cells.global[0].anycast",
        "no IPv6 address",
    );
    assert_error(
        &errors,
        "topology.cells.global[2].anycast",
        "at most one IPv4",
    );
    assert_error(&errors, "topology.cells.regions.mars", "not a region");
    let twice = r#"
[topology.cells]
global = [
  { name = "g1", anycast = ["192.0.2.11", "2001:db8::11"] },
  { name = "g1", anycast = ["192.0.2.12", "2001:db8::12"] },
]
"#;
    let errors = compile_err(
        &format!("{TOPOLOGY}\n{twice}\n{STEERED}"),
        &ControlKnobs::default(),
    );
    assert_error(&errors, "topology.cells.global", "listed twice");
    let reused = r#"
[topology.cells]
global = [{ name = "g1", anycast = ["192.0.2.11", "2001:db8::11"] }]
[topology.cells.fallback]
fb-na = [{ name = "f1", anycast = ["192.0.2.11", "2001:db8:fb::11"] }]
"#;
    let errors = compile_err(
        &format!("{TOPOLOGY}\n{reused}\n{STEERED}"),
        &ControlKnobs::default(),
    );
    assert_error(&errors, "topology.cells", "already cell \"g1\"");
    let unknown = "[topology.cells]\ncolour = 1\nglobal = []\n";
    let parsed: Result<Fragment, _> = toml::from_str(&format!("{TOPOLOGY}\n{unknown}"));
    assert!(parsed.is_err(), "unknown fields are refused");
    let empty = "[topology.cells]\nk = 2\n";
    let errors = compile_err(
        &format!("{TOPOLOGY}\n{empty}\n{STEERED}"),
        &ControlKnobs::default(),
    );
    assert_error(&errors, "topology.cells.global", "no global cells");
}

fn drained(cells: &[(&str, &str)]) -> ControlKnobs {
    let mut knobs = ControlKnobs::default();
    for (layer, cell) in cells {
        knobs
            .cells
            .entry((*layer).to_owned())
            .or_default()
            .insert((*cell).to_owned(), CellKnobs { drain: true });
    }
    knobs
}

/// The addresses an answer writer serves for `d`: its list without the cells left out.
fn served_v4(d: &Decision<'_>) -> Vec<Ipv4Addr> {
    d.left_out.keep(v4_of(d)).copied().collect()
}

#[test]
fn cells_a_drained_cell_is_left_out_of_its_tenants_answers_only() {
    let p = with_cells(&ControlKnobs::default());
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    // Find two tenants: one whose global shard holds g1, one whose does not.
    let names: Vec<String> = (0..50).map(|i| format!("tenant{i}")).collect();
    let g1 = v4("192.0.2.11");
    let holds = |t: &str| {
        v4s(&answer(
            &p,
            Some(&topology.assign(t, None)),
            EU_WEST,
            &ShedView::default(),
        ))
        .contains(&g1)
    };
    let Some(hit) = names.iter().find(|t| holds(t)) else {
        panic!("some tenant of 50 holds g1 (2 of 5 cells)")
    };
    let Some(miss) = names.iter().find(|t| !holds(t)) else {
        panic!("some tenant of 50 does not hold g1")
    };

    let p = with_cells(&drained(&[("global", "g1")]));
    assert!(p.impaired_cells().is_some());
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    let hit_cells = topology.assign(hit, None);
    let d = answer(&p, Some(&hit_cells), EU_WEST, &ShedView::default());
    let served = served_v4(&d);
    assert_eq!(served.len(), 1, "{hit}: g1 left out, its other cell kept");
    assert!(!served.contains(&g1));
    assert_eq!(
        (d.ttl, d.scope),
        (300, 0),
        "TTL and scope as without a drain"
    );
    let Target::Addresses { v6, .. } = d.target else {
        panic!("addresses")
    };
    let served_v6: Vec<_> = d.left_out.keep(v6).collect();
    assert_eq!(served_v6.len(), 1, "the same cell left out of AAAA");
    assert!(!served_v6.contains(
        &&"2001:db8::11"
            .parse::<Ipv6Addr>()
            .unwrap_or(Ipv6Addr::UNSPECIFIED)
    ));

    let miss_cells = topology.assign(miss, None);
    let d = answer(&p, Some(&miss_cells), EU_WEST, &ShedView::default());
    assert!(!d.left_out.any(), "{miss} does not hold g1: untouched");
    assert_eq!(served_v4(&d).len(), 2);

    // The platform's own answer is untouched.
    let d = answer(&p, None, EU_WEST, &ShedView::default());
    assert_eq!(served_v4(&d), vec![v4("192.0.2.1")]);

    // Every cell of a shard drained: the whole shard is served, never an empty answer.
    let shard: Vec<String> = v4s(&answer(&p, Some(&hit_cells), EU_WEST, &ShedView::default()))
        .iter()
        .map(|a| format!("g{}", a.octets()[3] - 10))
        .collect();
    let both: Vec<(&str, &str)> = shard.iter().map(|c| ("global", c.as_str())).collect();
    let p = with_cells(&drained(&both));
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    let hit_cells = topology.assign(hit, None);
    // From eu-west (no cells there): the region's own addresses, location-decided.
    let d = answer(&p, Some(&hit_cells), EU_WEST, &ShedView::default());
    assert_eq!(
        served_v4(&d),
        vec![v4("198.51.100.4")],
        "eu-west's own anycast"
    );
    assert_eq!(d.trace.cells_fallback, Some(Destination::Region(EU_WEST)));
    assert_eq!(
        (d.ttl, d.scope),
        (300, 20),
        "the client's region decided: its prefix"
    );
    // From eu-north: the tenant's cells there.
    let d = answer(&p, Some(&hit_cells), EU_NORTH, &ShedView::default());
    let got = served_v4(&d);
    assert_eq!(got.len(), 2);
    assert!(got
        .iter()
        .all(|a| a.octets()[..3] == [198, 51, 100] && a.octets()[3] > 50));
}

#[test]
fn cells_drains_in_a_region_and_a_site_apply_where_the_tenant_is_sent() {
    // eu-west drained -> eu-north's cells; drain en1 there.
    let mut knobs = drained(&[("eu-north", "en1"), ("eu-north", "en2")]);
    knobs.regions.insert(
        "eu-west".to_owned(),
        RegionKnobs {
            force: None,
            drain: true,
        },
    );
    let p = with_cells(&knobs);
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    let mut fell_back = 0;
    for i in 0..30 {
        let t = topology.assign(&format!("tenant{i}"), None);
        let d = answer(&p, Some(&t), EU_WEST, &ShedView::default());
        let served = served_v4(&d);
        assert!(!served.is_empty());
        let shard = v4s(&d);
        if d.trace.cells_fallback.is_some() {
            // Both of its eu-north cells drained: its cells at eu-north's fallback site.
            assert_eq!(d.trace.cells_fallback, Some(Destination::Fallback(0)));
            assert!(
                served.iter().all(|a| a.octets()[..3] == [203, 0, 113]),
                "tenant{i}: {served:?}"
            );
            fell_back += 1;
        } else {
            assert!(
                !served.contains(&v4("198.51.100.51")) && !served.contains(&v4("198.51.100.52")),
                "tenant{i}: {shard:?} served {served:?}"
            );
        }
        // Global answers (eu-north's own clients) are not touched by eu-north's drains.
        let d = answer(&p, Some(&t), EU_NORTH, &ShedView::default());
        assert!(!d.left_out.any());
    }
    assert!(
        fell_back > 0,
        "one of 3 pairs is en1+en2: some of 30 tenants hold it"
    );
}

#[test]
fn cells_a_shard_impaired_in_every_layer_it_can_reach_is_served_whole() {
    let p = with_cells(&ControlKnobs::default());
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    let t = topology.assign("fabrikam", None);
    let name = |layer: LayerRef, a: &Ipv4Addr| -> Option<String> {
        let layer = topology.layer(layer)?;
        Some(
            layer
                .cells()
                .iter()
                .find(|c| c.v4 == Some(*a))?
                .name
                .clone(),
        )
    };
    let mut all = Vec::new();
    for (layer, key) in [
        (LayerRef::Global, "global"),
        (LayerRef::Region(EU_NORTH), "eu-north"),
        (LayerRef::Site(0), "fb-eu"),
    ] {
        let (v4, _) = t.layer(layer).unwrap_or_default();
        for a in v4 {
            all.push((key, name(layer, a).unwrap_or_default()));
        }
    }
    let cells: Vec<(&str, &str)> = all.iter().map(|(l, c)| (*l, c.as_str())).collect();
    let p = with_cells(&drained(&cells));
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    let t = topology.assign("fabrikam", None);
    let d = answer(&p, Some(&t), EU_NORTH, &ShedView::default());
    assert_eq!(d.trace.cells_fallback, Some(Destination::Fallback(0)));
    let served = served_v4(&d);
    assert_eq!(
        served.len(),
        2,
        "nothing left to fall back to: the site shard whole"
    );
    assert!(served.iter().all(|a| a.octets()[..3] == [203, 0, 113]));
}

#[test]
fn cells_drain_errors_name_their_field() {
    let errors = compile_err(
        &format!("{TOPOLOGY}\n{CELLS}\n{STEERED}"),
        &drained(&[("mars", "m1"), ("global", "g9"), ("fb-eu", "nope")]),
    );
    assert_error(&errors, "control.cells.mars", "not a layer with cells");
    assert_error(&errors, "control.cells.global.g9", "not a cell of layer");
    assert_error(&errors, "control.cells.fb-eu.nope", "not a cell of layer");
    // A region without cells is no layer either.
    let errors = compile_err(
        &format!("{TOPOLOGY}\n{CELLS}\n{STEERED}"),
        &drained(&[("na-west", "x")]),
    );
    assert_error(&errors, "control.cells.na-west", "not a layer with cells");
    // No cells at all.
    let errors = compile_err(
        &format!("{TOPOLOGY}\n{STEERED}"),
        &drained(&[("global", "g1")]),
    );
    assert_error(&errors, "control.cells", "no [topology.cells]");
}
