//! The cell-failure containment figure (issue 31, item 6), with the fault injected on purpose:
//! 10,000 tenants; every cell of one tenant's shard impaired (drained) — in the global layer
//! only, then in every layer — and every other tenant's answer evaluated from every region.
//! Counted: tenants whose answers changed at all (a cell left out), tenants whose whole
//! global shard is impaired (next to the binomial expectation (N−1)/C(C,k)), and tenants left
//! without a healthy cell from some region (next to the same expectation over the layers a
//! client falls through). The count is cross-checked against the shards themselves, and an
//! untouched tenant's answer must be exactly its answer without the fault.
//!
//! `cargo test --lib containment -- --nocapture` prints the table (benches/RESULTS.md).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::*;
use crate::cells::{choose, LayerRef, TenantCells};

const TENANTS: usize = 10_000;
const REGIONS: [&str; 5] = ["eu-west", "eu-north", "na-east", "na-west", "af-south"];
const SITES: [&str; 2] = ["fb-eu", "fb-na"];
/// Each region's fallback site when its shard there is impaired (same continent, else the
/// first), as `cells_fallback` picks it.
const SITE_OF_REGION: [u16; 5] = [0, 0, 1, 1, 0];

/// `[topology.cells]` with `global` global cells and `per` cells in every region and site.
fn cells_config(global: usize, per: usize, k: usize) -> String {
    let cell = |name: String, layer: usize, i: usize| {
        format!(
            "  {{ name = \"{name}\", anycast = [\"10.{layer}.{}.{}\", \"2001:db8:{layer:x}::{i:x}\"] }},\n",
            i / 256,
            i % 256
        )
    };
    let mut out = format!("[topology.cells]\nk = {k}\nglobal = [\n");
    for i in 0..global {
        out.push_str(&cell(format!("g{i}"), 1, i));
    }
    out.push_str("]\n[topology.cells.regions]\n");
    for (r, region) in REGIONS.iter().enumerate() {
        let _ = writeln!(out, "{region} = [");
        for i in 0..per {
            out.push_str(&cell(format!("{region}-{i}"), 10 + r, i));
        }
        out.push_str("]\n");
    }
    out.push_str("[topology.cells.fallback]\n");
    for (s, site) in SITES.iter().enumerate() {
        let _ = writeln!(out, "{site} = [");
        for i in 0..per {
            out.push_str(&cell(format!("{site}-{i}"), 20 + s, i));
        }
        out.push_str("]\n");
    }
    out
}

fn compiled(cells: &str, knobs: &ControlKnobs) -> CompiledPolicies {
    compile_ok(&format!("{TOPOLOGY}\n{cells}\n{STEERED}"), knobs)
}

/// The names of `tenant`'s cells in layer `at`.
fn shard_names(p: &CompiledPolicies, tenant: &TenantCells, at: LayerRef) -> Vec<String> {
    let (Some(layer), Some((v4, _))) = (p.cells().and_then(|t| t.layer(at)), tenant.layer(at))
    else {
        return Vec::new();
    };
    v4.iter()
        .filter_map(|a| layer.cells().iter().find(|c| c.v4 == Some(*a)))
        .map(|c| c.name.clone())
        .collect()
}

/// What a tenant is served from `region`: the addresses written (cells left out removed).
fn served(p: &CompiledPolicies, tenant: &TenantCells, region: u16) -> Vec<Ipv4Addr> {
    let client = client(region, v4_subnet(u32::from(region) + 1), 24);
    let root = PolicyRoot::Anycast { ttl: 300 };
    let d = evaluate_for_tenant(
        p,
        root,
        &client,
        &ShedView::default(),
        &HealthView::all_up(),
        Some(AsTenant {
            name: "tenant",
            cells: Some(tenant),
        }),
    );
    d.left_out.keep(v4_of(&d)).copied().collect()
}

struct Figures {
    changed: usize,
    global_all_impaired: usize,
    without_healthy: usize,
    expected_without_healthy: f64,
}

/// Impairs every cell of tenant 0's shard in `layers` and counts over the other tenants.
fn run(global: usize, per: usize, k: usize, every_layer: bool) -> Figures {
    let cells = cells_config(global, per, k);
    let healthy = compiled(&cells, &ControlKnobs::default());
    let Some(topology) = healthy.cells() else {
        panic!("cells compiled")
    };
    let tenants: Vec<TenantCells> = (0..TENANTS)
        .map(|i| topology.assign(&format!("tenant{i}"), None))
        .collect();
    let victim = &tenants[0];
    let mut layers = vec![(LayerRef::Global, "global".to_owned())];
    if every_layer {
        for (r, name) in REGIONS.iter().enumerate() {
            layers.push((LayerRef::Region(r as u16), (*name).to_owned()));
        }
        for (s, name) in SITES.iter().enumerate() {
            layers.push((LayerRef::Site(s as u16), (*name).to_owned()));
        }
    }
    let mut knobs = ControlKnobs::default();
    let mut impaired_v4 = BTreeSet::new();
    for (at, key) in &layers {
        for name in shard_names(&healthy, victim, *at) {
            knobs
                .cells
                .entry(key.clone())
                .or_default()
                .insert(name, CellKnobs { drain: true });
        }
        if let Some((v4, _)) = victim.layer(*at) {
            impaired_v4.extend(v4.iter().copied());
        }
    }
    let faulty = compiled(&cells, &knobs);
    let Some(faulty_topology) = faulty.cells() else {
        panic!("cells compiled")
    };
    let same_shard = |t: &TenantCells, at: LayerRef| {
        layers.iter().any(|(l, _)| *l == at) && t.layer(at) == victim.layer(at)
    };
    let mut figures = Figures {
        changed: 0,
        global_all_impaired: 0,
        without_healthy: 0,
        expected_without_healthy: 0.0,
    };
    for (i, healthy_cells) in tenants.iter().enumerate().skip(1) {
        // The same tenant under the faulty policies (same topology: same shards).
        let cells = faulty_topology.assign(&format!("tenant{i}"), None);
        assert_eq!(
            cells.layer(LayerRef::Global),
            healthy_cells.layer(LayerRef::Global)
        );
        let touches = layers.iter().any(|(at, _)| {
            healthy_cells
                .layer(*at)
                .is_some_and(|(v4, _)| v4.iter().any(|a| impaired_v4.contains(a)))
        });
        let mut changed = false;
        let mut without = false;
        for region in 0..REGIONS.len() as u16 {
            let before = served(&healthy, healthy_cells, region);
            let after = served(&faulty, &cells, region);
            assert!(!after.is_empty(), "tenant{i} from {region}: never empty");
            if !touches {
                assert_eq!(after, before, "tenant{i} shares no cell: untouched");
            }
            changed |= after != before;
            let no_healthy = after.iter().all(|a| impaired_v4.contains(a));
            // Cross-check: a tenant is left without a healthy cell from a region exactly when
            // its shard equals the victim's in every layer that region's clients fall through.
            let chain = [
                LayerRef::Global,
                LayerRef::Region(region),
                LayerRef::Site(SITE_OF_REGION[usize::from(region)]),
            ];
            let predicted = chain.iter().all(|at| same_shard(&cells, *at));
            assert_eq!(no_healthy, predicted, "tenant{i} from region {region}");
            without |= no_healthy;
        }
        figures.changed += usize::from(changed);
        figures.global_all_impaired += usize::from(same_shard(&cells, LayerRef::Global));
        figures.without_healthy += usize::from(without);
    }
    // Expected tenants left without a healthy cell from at least one region (union over the
    // regions; the site shards are shared between regions of a continent).
    let p_global = 1.0 / choose(global as u64, k as u64) as f64;
    let p_per = 1.0 / choose(per as u64, k as u64) as f64;
    let others = (TENANTS - 1) as f64;
    figures.expected_without_healthy = if every_layer {
        // Some region's chain matches: global, and for some region both its and its site's.
        let regions_by_site = [3usize, 2]; // fb-eu: eu-west, eu-north, af-south; fb-na: two.
        let miss: f64 = regions_by_site
            .iter()
            .map(|&n| 1.0 - p_per * (1.0 - (1.0 - p_per).powi(n as i32)))
            .product();
        others * p_global * (1.0 - miss)
    } else {
        0.0
    };
    figures
}

#[test]
fn containment_one_tenants_impaired_cells_leave_no_other_without_a_healthy_cell() {
    let mut table = String::from(
        "| cells (global / region, site), k | impaired | other tenants whose answer changed | \
         global shard all impaired (expected) | left without a healthy cell (expected) |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for (global, per, k) in [(6, 3, 2), (16, 4, 2), (32, 8, 2), (32, 8, 4)] {
        for every_layer in [false, true] {
            let f = run(global, per, k, every_layer);
            let expected_global = (TENANTS - 1) as f64 / choose(global as u64, k as u64) as f64;
            let _ = writeln!(
                table,
                "| {global} / {per}, {k} | {} | {} | {} ({expected_global:.2}) | {} ({:.2}) |",
                if every_layer { "every layer" } else { "global" },
                f.changed,
                f.global_all_impaired,
                f.without_healthy,
                f.expected_without_healthy,
            );
            if !every_layer {
                // The global shard lost: every one of them falls back to its regional cells.
                assert_eq!(f.without_healthy, 0, "{global}/{per} k={k}");
            }
            if (global, per, k) == (32, 8, 2) {
                // The bar: with the default k and a production-like cell count, nobody else.
                assert_eq!(f.without_healthy, 0, "32/8 k=2, every layer: {every_layer}");
            }
        }
    }
    println!("{TENANTS} tenants, tenant0's shard impaired:\n{table}");
}
