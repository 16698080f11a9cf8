use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::*;

fn cell(layer: u8, i: u16) -> Cell {
    Cell {
        name: format!("c{i}"),
        v4: Some(Ipv4Addr::new(10, layer, (i >> 8) as u8, i as u8)),
        v6: Some(Ipv6Addr::new(
            0x2001,
            0xdb8,
            u16::from(layer),
            i,
            0,
            0,
            0,
            1,
        )),
    }
}

fn layer(name: &str, id: u8, cells: u16) -> Layer {
    let cells = (0..cells).map(|i| cell(id, i)).collect();
    Layer::new(name, cells).unwrap_or_else(|e| panic!("{e}"))
}

fn tenants(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("tenant-{i}")).collect()
}

fn shards(layer: &Layer, tenants: &[String], k: usize) -> Vec<Shard> {
    tenants.iter().map(|t| layer.shard(t, k)).collect()
}

/// Names of a shard's cells (positions differ between layers with different cell lists).
fn names(layer: &Layer, shard: &Shard) -> Vec<String> {
    let mut names: Vec<String> = shard
        .cells()
        .iter()
        .map(|&i| layer.cells()[usize::from(i)].name.clone())
        .collect();
    names.sort();
    names
}

#[test]
fn cells_shard_is_deterministic_and_independent_of_cell_order() {
    let forward = layer("global", 1, 16);
    let mut reversed_cells = forward.cells().to_vec();
    reversed_cells.reverse();
    let reversed = Layer::new("global", reversed_cells).unwrap_or_else(|e| panic!("{e}"));
    for tenant in tenants(500) {
        let a = forward.shard(&tenant, 3);
        assert_eq!(
            a,
            forward.shard(&tenant, 3),
            "{tenant}: same input, same shard"
        );
        assert_eq!(a.cells().len(), 3);
        assert_eq!(
            names(&forward, &a),
            names(&reversed, &reversed.shard(&tenant, 3)),
            "{tenant}: the cells written in another order"
        );
    }
    // A fixed expectation: the hash must never change across builds (it would reshuffle
    // every tenant of a fleet during a rolling upgrade).
    assert_eq!(
        names(&forward, &forward.shard("fabrikam", 2)),
        vec!["c2", "c6"]
    );
}

#[test]
fn cells_k_is_clamped_to_the_layer() {
    let small = layer("global", 1, 3);
    assert_eq!(small.shard("t", 5).cells(), &[0, 1, 2]);
    assert_eq!(small.shard("t", 0).cells().len(), 1);
    let big = layer("global", 1, 64);
    assert_eq!(big.shard("t", 100).cells().len(), MAX_K);
}

#[test]
fn cells_adding_a_cell_moves_only_the_tenants_that_take_it() {
    let all = tenants(10_000);
    for (cells, k) in [(16u16, 2usize), (64, 4)] {
        let before = layer("global", 1, cells);
        let after = layer("global", 1, cells + 1);
        let new = format!("c{cells}");
        let mut moved = 0usize;
        for t in &all {
            let (a, b) = (
                names(&before, &before.shard(t, k)),
                names(&after, &after.shard(t, k)),
            );
            if a != b {
                moved += 1;
                assert!(b.contains(&new), "{t} moved without taking the new cell");
                let kept = a.iter().filter(|c| b.contains(c)).count();
                assert_eq!(kept, k - 1, "{t}: a move swaps exactly one cell");
            }
        }
        // The minimum: the new cell's fair share, T·k/(C+1).
        let minimum = all.len() * k / (usize::from(cells) + 1);
        println!(
            "C={cells} k={k}: add one cell -> {moved} of {} tenants moved (minimum {minimum})",
            all.len()
        );
        assert!(
            moved.abs_diff(minimum) * 10 < minimum,
            "moved {moved}, the minimum is {minimum}"
        );
    }
}

#[test]
fn cells_removing_a_cell_moves_exactly_the_tenants_that_had_it() {
    let all = tenants(10_000);
    let before = layer("global", 1, 16);
    let removed = "c5";
    let kept_cells: Vec<Cell> = before
        .cells()
        .iter()
        .filter(|c| c.name != removed)
        .cloned()
        .collect();
    let after = Layer::new("global", kept_cells).unwrap_or_else(|e| panic!("{e}"));
    let (mut moved, mut had) = (0, 0);
    for t in &all {
        let (a, b) = (
            names(&before, &before.shard(t, 2)),
            names(&after, &after.shard(t, 2)),
        );
        let has = a.iter().any(|c| c == removed);
        had += usize::from(has);
        if a != b {
            moved += 1;
            assert!(has, "{t} moved without having the removed cell");
            assert_eq!(a.iter().filter(|c| b.contains(c)).count(), 1);
        }
    }
    println!("C=16 k=2: remove one cell -> {moved} moved, {had} had it (the minimum)");
    assert_eq!(moved, had);
}

#[test]
fn cells_are_balanced() {
    let all = tenants(10_000);
    let l = layer("global", 1, 16);
    let mut load = [0usize; 16];
    for s in shards(&l, &all, 2) {
        for &c in s.cells() {
            load[usize::from(c)] += 1;
        }
    }
    let fair = 10_000 * 2 / 16;
    for (c, n) in load.iter().enumerate() {
        assert!(
            n.abs_diff(fair) * 100 < fair * 8,
            "cell {c}: {n} tenants, fair {fair}"
        );
    }
}

#[test]
fn cells_layers_draw_independently() {
    // Two layers with the very same cell names: were the layer not hashed in, every tenant
    // would get the same shard in both.
    let all = tenants(10_000);
    let global = layer("global", 1, 16);
    let region = layer("region eu-west", 2, 16);
    let same = all
        .iter()
        .filter(|t| names(&global, &global.shard(t, 2)) == names(&region, &region.shard(t, 2)))
        .count();
    // Expected 10,000 / C(16,2) ≈ 83.
    println!("identical shards in two layers: {same} of 10000 (expected ~83)");
    assert!(
        same < 150,
        "{same} tenants have the same shard in both layers"
    );
}

fn brute_force(shards: &[Shard], k: usize) -> Vec<u64> {
    let mut pairs = vec![0u64; k + 1];
    for (i, a) in shards.iter().enumerate() {
        for b in &shards[i + 1..] {
            pairs[a.overlap(b)] += 1;
        }
    }
    pairs
}

#[test]
fn cells_overlap_distribution_matches_counting_every_pair() {
    let l = layer("global", 1, 12);
    let all = tenants(400);
    for k in [1, 2, 3, 4] {
        let s = shards(&l, &all, k);
        let d = overlap_distribution(&s);
        assert_eq!(d.pairs, brute_force(&s, k), "k={k}");
        assert_eq!(d.total_pairs(), 400 * 399 / 2);
    }
}

/// Measured at 10,000 tenants against the hypergeometric expectation (and printed).
fn measure(cells: u16, k: usize, m: usize) -> OverlapDistribution {
    let l = layer("global", 1, cells);
    let d = overlap_distribution(&shards(&l, &tenants(10_000), k));
    let expected = expected_overlap(usize::from(cells), k);
    let total = d.total_pairs() as f64;
    println!(
        "C={cells} k={k}: {} shards; overlap ≤ {m} possible for at most {} tenants; pairs above m: {}",
        choose(u64::from(cells), k as u64),
        packing_bound(usize::from(cells), k, m),
        d.pairs_above(m)
    );
    for (s, (&n, p)) in d.pairs.iter().zip(&expected).enumerate() {
        let e = p * total;
        println!("  share {s}: {n} pairs (expected {e:.0})");
        // Within 5% of the expectation, or within 4 standard deviations (Poisson) when rare.
        let slack = (e * 0.05).max(4.0 * e.sqrt()).max(10.0);
        assert!(
            (n as f64 - e).abs() <= slack,
            "share {s}: {n} pairs, expected {e:.0}"
        );
    }
    d
}

#[test]
fn cells_overlap_at_10000_tenants_16_cells_k2() {
    let d = measure(16, 2, 1);
    // 120 shards for 10,000 tenants: identical shards cannot be avoided by any assignment.
    assert_eq!(packing_bound(16, 2, 1), 120);
    assert_eq!(d.max_overlap(), 2);
}

#[test]
fn cells_overlap_at_10000_tenants_64_cells_k4() {
    let d = measure(64, 4, 2);
    assert_eq!(packing_bound(64, 4, 2), 10_416);
    // 1 in C(64,4) = 635,376 pairs share a whole shard: ~79 of ~50 million.
    assert!(d.pairs[4] < 200, "{} pairs share all 4 cells", d.pairs[4]);
}

#[test]
fn cells_layer_checks() {
    let named = |name: &str, v4: Option<[u8; 4]>, v6: Option<u16>| Cell {
        name: name.to_string(),
        v4: v4.map(Ipv4Addr::from),
        v6: v6.map(|x| Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, x)),
    };
    assert!(matches!(
        Layer::new("g", vec![]),
        Err(CellsError::Empty { .. })
    ));
    let twice = vec![
        named("a", Some([10, 0, 0, 1]), None),
        named("a", Some([10, 0, 0, 2]), None),
    ];
    assert!(matches!(
        Layer::new("g", twice),
        Err(CellsError::DuplicateName { .. })
    ));
    let mixed = vec![
        named("a", Some([10, 0, 0, 1]), Some(1)),
        named("b", Some([10, 0, 0, 2]), None),
    ];
    assert!(matches!(
        Layer::new("g", mixed),
        Err(CellsError::MixedFamilies { .. })
    ));
    assert!(matches!(
        Layer::new("g", vec![named("a", None, None)]),
        Err(CellsError::NoAddress { .. })
    ));
    let g = Layer::new("global", vec![named("a", Some([10, 0, 0, 1]), None)]);
    let r = Layer::new("region x", vec![named("b", Some([10, 0, 0, 1]), None)]);
    let (Ok(g), Ok(r)) = (g, r) else {
        panic!("layers are fine alone")
    };
    let dup = CellTopology::new(Some(g.clone()), vec![Some(r)], vec![], 2);
    assert!(
        matches!(dup, Err(CellsError::DuplicateAddress { .. })),
        "{dup:?}"
    );
    assert!(matches!(
        CellTopology::new(Some(g), vec![], vec![], 0),
        Err(CellsError::BadK { k: 0 })
    ));
}

#[test]
fn cells_tenant_addresses_per_layer() {
    let topology = CellTopology::new(
        Some(layer("global", 1, 6)),
        vec![None, Some(layer("region eu-west", 2, 4))],
        vec![Some(layer("fallback fb-eu", 3, 3))],
        2,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let a = topology.assign("fabrikam", None);
    let b = topology.assign("tailspin", Some(3));
    assert_eq!(a.fingerprint(), topology.fingerprint());
    let Some((v4, v6)) = a.layer(LayerRef::Global) else {
        panic!("global has cells")
    };
    assert_eq!((v4.len(), v6.len()), (2, 2));
    let global = topology
        .layer(LayerRef::Global)
        .map(|l| l.shard("fabrikam", 2));
    let want: Vec<Ipv4Addr> = global
        .iter()
        .flat_map(|s| s.cells().iter().map(|&i| Ipv4Addr::new(10, 1, 0, i as u8)))
        .collect();
    assert_eq!(v4, &want[..]);
    assert_eq!(
        a.layer(LayerRef::Region(0)),
        None,
        "no cells: the region's own addresses"
    );
    assert_eq!(
        a.layer(LayerRef::Region(1)).map(|(v4, _)| v4.len()),
        Some(2)
    );
    assert_eq!(a.layer(LayerRef::Region(2)), None, "past the regions");
    assert_eq!(a.layer(LayerRef::Site(0)).map(|(v4, _)| v4.len()), Some(2));
    assert_eq!(a.layer(LayerRef::Site(1)), None);
    assert_eq!(b.layer(LayerRef::Global).map(|(v4, _)| v4.len()), Some(3));
    assert_ne!(a.layer(LayerRef::Global), b.layer(LayerRef::Global));
    let other = CellTopology::new(Some(layer("global", 1, 7)), vec![], vec![], 2);
    assert_ne!(
        other.map(|t| t.fingerprint()).ok(),
        Some(topology.fingerprint())
    );
    let distinct: HashSet<_> = (0..50)
        .map(|i| {
            topology
                .assign(&format!("t{i}"), None)
                .layer(LayerRef::Global)
                .map(|(v4, _)| v4.to_vec())
        })
        .collect();
    assert!(distinct.len() > 5, "tenants spread over the shards");
}
