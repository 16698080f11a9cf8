//! The traffic-surge containment figure (issue 31, item 6, second bullet), with the fault
//! injected on purpose: 10,000 tenants on a five-region topology with cells; eu-west hot (990
//! of 1000) because one tenant's clients there bring 600 of it. The pure step runs 30 ticks on
//! that feed twice — with the feed's per-tenant figures (tenant-first shedding) and without
//! them (today's region-wide shedding) — and every tenant's answer is evaluated for clients in
//! every region, on the view each run publishes, against its answer with nothing shed.
//! Counted: the other tenants whose answers (addresses) changed, and their client subnets moved.
//!
//! `cargo test --lib containment -- --nocapture` prints the table (benches/RESULTS.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};

use serde::Deserialize;

use super::live::rings_of;
use super::step::{shed_view, step, Inputs, Reading, ShieldSettings, ShieldState, TenantLoad};
use crate::cells::TenantCells;
use crate::policy::{
    compile, evaluate_for_tenant, AsTenant, CompiledPolicies, ControlKnobs, HealthView,
    LocatedClient, PolicyRoot, ProfileConfig, ShedView, ShieldMode, SteeredConfig, Target,
    TopologyConfig,
};

const TENANTS: usize = 10_000;
const SURGING: usize = 0;
const EU_WEST: usize = 0;
/// Client subnets asked per tenant and region.
const SUBNETS: u32 = 8;
const TICKS: u64 = 30;

const TOPOLOGY: &str = r#"
[topology]
global = ["192.0.2.1", "2001:db8::1"]
[[topology.regions]]
name = "eu-west"
continent = "EU"
anycast = ["198.51.100.4", "2001:db8:1::4"]
neighbours = ["eu-north", "na-east"]
capacity = 1000
[[topology.regions]]
name = "eu-north"
continent = "EU"
anycast = ["198.51.100.5", "2001:db8:1::5"]
neighbours = ["eu-west"]
capacity = 600
[[topology.regions]]
name = "na-east"
continent = "NA"
anycast = ["198.51.100.1", "2001:db8:1::1"]
neighbours = ["na-west"]
capacity = 1000
[[topology.regions]]
name = "na-west"
continent = "NA"
anycast = ["198.51.100.2", "2001:db8:1::2"]
neighbours = ["na-east"]
capacity = 800
[[topology.regions]]
name = "af-south"
continent = "AF"
anycast = ["198.51.100.6", "2001:db8:1::6"]
neighbours = ["eu-west"]
capacity = 200
[[topology.fallback]]
name = "fb-eu"
continent = "EU"
anycast = ["203.0.113.2", "2001:db8:fb::2"]
capacity = 2000
[[topology.fallback]]
name = "fb-na"
continent = "NA"
anycast = ["203.0.113.1", "2001:db8:fb::1"]
capacity = 2000

[[steered]]
name = "*.edge.example.net."
policy = "anycast"
ttl = 300
"#;

#[derive(Deserialize)]
struct Fragment {
    topology: TopologyConfig,
    #[serde(default)]
    profiles: BTreeMap<String, ProfileConfig>,
    steered: Vec<SteeredConfig>,
}

/// `[topology.cells]`: 32 global cells, 8 in every region and site, k = 2.
fn cells_config() -> String {
    let cell = |name: String, layer: usize, i: usize| {
        format!(
            "  {{ name = \"{name}\", anycast = [\"10.{layer}.0.{i}\", \"2001:db8:{layer:x}::{i:x}\"] }},\n"
        )
    };
    let mut out = String::from("[topology.cells]\nk = 2\nglobal = [\n");
    for i in 0..32 {
        out.push_str(&cell(format!("g{i}"), 1, i));
    }
    out.push_str("]\n[topology.cells.regions]\n");
    for (r, region) in ["eu-west", "eu-north", "na-east", "na-west", "af-south"]
        .iter()
        .enumerate()
    {
        let _ = writeln!(out, "{region} = [");
        for i in 0..8 {
            out.push_str(&cell(format!("{region}-{i}"), 10 + r, i));
        }
        out.push_str("]\n");
    }
    out.push_str("[topology.cells.fallback]\n");
    for (s, site) in ["fb-eu", "fb-na"].iter().enumerate() {
        let _ = writeln!(out, "{site} = [");
        for i in 0..8 {
            out.push_str(&cell(format!("{site}-{i}"), 20 + s, i));
        }
        out.push_str("]\n");
    }
    out
}

fn policies() -> CompiledPolicies {
    let text = format!("{TOPOLOGY}\n{}", cells_config());
    let fragment: Fragment = match toml::from_str(&text) {
        Ok(f) => f,
        Err(e) => panic!("figure topology: {e}"),
    };
    let knobs = ControlKnobs::default();
    match compile(
        &fragment.topology,
        &fragment.profiles,
        &fragment.steered,
        &knobs,
    ) {
        Ok(p) => p,
        Err(e) => panic!("figure topology: {e:?}"),
    }
}

fn tenant_name(i: usize) -> String {
    format!("tenant{i}")
}

/// The surge feed: eu-west at 990 of 1000, the others calm; with `per_tenant`, the surging
/// tenant's 600 and every other tenant's even share of the remaining 390.
fn surge(per_tenant: bool, regions: usize) -> Inputs {
    let reading = |load: f64, capacity: f64| {
        Some(Reading {
            load,
            capacity,
            age_ms: 1000,
        })
    };
    let figure = |i: usize| {
        let load = if i == SURGING {
            600.0
        } else {
            390.0 / (TENANTS - 1) as f64
        };
        let mut figures = vec![None; regions];
        figures[EU_WEST] = Some(load);
        TenantLoad {
            tenant: tenant_name(i),
            regions: figures,
        }
    };
    Inputs {
        regions: vec![
            reading(990.0, 1000.0),
            reading(200.0, 600.0),
            reading(500.0, 1000.0),
            reading(400.0, 800.0),
            reading(100.0, 200.0),
        ],
        sites: vec![reading(100.0, 2000.0), reading(1000.0, 2000.0)],
        demand: Vec::new(),
        mode: ShieldMode::Auto,
        operator_held: vec![false; regions],
        tenants: if per_tenant {
            (0..TENANTS).map(figure).collect()
        } else {
            Vec::new()
        },
    }
}

/// The view after [`TICKS`] ticks of the surge, and eu-west's shed fraction.
fn shielded(p: &CompiledPolicies, per_tenant: bool) -> (ShedView, f64, f64) {
    let rings = rings_of(p);
    let settings = ShieldSettings::default();
    let inputs = surge(per_tenant, rings.regions.len());
    let mut state = ShieldState::default();
    for t in 1..=TICKS {
        state = step(&state, &inputs, &rings, &settings, t * 1000).0;
    }
    let own = state
        .tenants
        .iter()
        .find(|t| t.tenant == tenant_name(SURGING))
        .map_or(0.0, |t| t.fraction);
    (
        shed_view(&state, &settings),
        state.regions[EU_WEST].fraction,
        own,
    )
}

/// A tenant's A addresses for subnet `s` of a client of `region`.
fn answer(
    p: &CompiledPolicies,
    view: &ShedView,
    (name, cells): (&str, &TenantCells),
    region: u16,
    s: u32,
) -> Vec<Ipv4Addr> {
    let addr = IpAddr::V4(Ipv4Addr::from(
        0x0A00_0000u32 + (u32::from(region) << 16) + (s << 8) + 1,
    ));
    let client = LocatedClient {
        region,
        addr,
        prefix_len: 20,
    };
    let root = PolicyRoot::Anycast { ttl: 300 };
    let tenant = AsTenant {
        name,
        cells: Some(cells),
    };
    let d = evaluate_for_tenant(p, root, &client, view, &HealthView::all_up(), Some(tenant));
    match d.target {
        Target::Addresses { v4, .. } => d.left_out.keep(v4).copied().collect(),
        Target::Cname { .. } => Vec::new(),
    }
}

struct Moved {
    other_tenants: usize,
    other_subnets: usize,
    surging_subnets: usize,
}

/// What changed under `view` against nothing shed.
fn moved(p: &CompiledPolicies, tenants: &[(String, TenantCells)], view: &ShedView) -> Moved {
    let calm = ShedView::default();
    let mut out = Moved {
        other_tenants: 0,
        other_subnets: 0,
        surging_subnets: 0,
    };
    let regions = p.regions().len() as u16;
    for (i, (name, cells)) in tenants.iter().enumerate() {
        let mut changed = 0;
        for region in 0..regions {
            for s in 0..SUBNETS {
                let tenant = (name.as_str(), cells);
                let before = answer(p, &calm, tenant, region, s);
                let after = answer(p, view, tenant, region, s);
                assert!(!after.is_empty(), "{name}: never empty");
                changed += usize::from(after != before);
            }
        }
        if i == SURGING {
            out.surging_subnets = changed;
        } else {
            out.other_tenants += usize::from(changed > 0);
            out.other_subnets += changed;
        }
    }
    out
}

#[test]
fn containment_a_surging_tenant_moves_alone_where_region_shedding_moves_everybody() {
    let p = policies();
    let Some(topology) = p.cells() else {
        panic!("cells compiled")
    };
    let tenants: Vec<(String, TenantCells)> = (0..TENANTS)
        .map(|i| (tenant_name(i), topology.assign(&tenant_name(i), None)))
        .collect();
    let asked = (TENANTS - 1) * p.regions().len() * SUBNETS as usize;
    let mut table = String::from(
        "| shedding | eu-west shed | surging tenant's own shed | its subnets moved | other \
         tenants whose answers changed | their client subnets moved |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut figures = Vec::new();
    for (label, per_tenant) in [
        ("tenant-first (feed with tenants)", true),
        ("region-wide (today)", false),
    ] {
        let (view, region, own) = shielded(&p, per_tenant);
        let m = moved(&p, &tenants, &view);
        let _ = writeln!(
            table,
            "| {label} | {:.0}% | {:.0}% | {} of {} | {} of {} | {} of {asked} |",
            region * 100.0,
            own * 100.0,
            m.surging_subnets,
            SUBNETS * u32::from(p.regions().len() as u16),
            m.other_tenants,
            TENANTS - 1,
            m.other_subnets,
        );
        figures.push((region, own, m));
    }
    println!(
        "{TENANTS} tenants, eu-west at 990/1000, tenant0 bringing 600 of it, {TICKS} ticks; \
         answers for {SUBNETS} client subnets per region:\n{table}"
    );
    let (tenant_first, region_wide) = (&figures[0], &figures[1]);
    // The bar: with tenant-first shedding, nobody else's answer changes.
    assert_eq!(tenant_first.0, 0.0, "tenant-first: eu-west not shed");
    assert!(tenant_first.1 > 0.0 && tenant_first.2.surging_subnets > 0);
    assert_eq!(tenant_first.2.other_tenants, 0, "the bar: 0");
    // The fault is injected: region-wide shedding does move other tenants.
    assert!(region_wide.0 > 0.0 && region_wide.2.other_tenants > 0);
}
