//! `steerdns simulate` with tenants (issue 31, item 6, traffic surge): the same scenario run
//! twice through the SAME step and the SAME tenant policy code as the server — once with the
//! feed's per-tenant figures (tenant-first shedding), once without them (region-wide shedding,
//! as before tenants had figures) — counting the **collateral client-seconds moved**: every
//! second, the load (clients) of the tenants other than the surging ones whose held answer
//! differs from what they are answered with nothing shed.
//!
//! Model. Each tenant has `subnets_per_tenant` client subnets in every region, sharing the
//! tenant's part of the region's demand (the scenario's `demand`, its surge events, divided
//! evenly among the tenants), plus the tenants' own surges. Each subnet holds its answer for
//! the answer's TTL (expiries staggered at start), then asks again under the view of the last
//! step; it lands where the answer sends it (global anycast: its own region). The feed reports
//! the regions' and sites' loads and, for the tenant-first run, every tenant's load from each
//! region (its clients located there, wherever served), as the per-tenant Prometheus series
//! does. One nameserver; no socket, no clock.

use std::net::{IpAddr, Ipv4Addr};

use super::scenario::{Node, Resolved, Scenario, TenantsScenario};
use super::SimError;
use crate::cells::TenantCells;
use crate::policy::{
    evaluate_for_tenant, AnycastChoice, AsTenant, CompiledPolicies, Decision, Destination,
    HealthView, LocatedClient, PolicyRoot, ShedView, ShieldMode, Target,
};
use crate::shield::live::rings_of;
use crate::shield::step::{
    shed_view, step, Demand, Inputs, Reading, ShieldSettings, ShieldState, TenantLoad,
};

/// A tenant's name in a scenario: `tenant0`, `tenant1`, …
pub fn tenant_name(i: usize) -> String {
    format!("tenant{i}")
}

/// The index of `name` among `count` tenants.
pub fn tenant_index(name: &str, count: usize) -> Option<usize> {
    let i: usize = name.strip_prefix("tenant")?.parse().ok()?;
    (i < count && tenant_name(i) == name).then_some(i)
}

/// One tick of both runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantTick {
    pub t: u64,
    /// Collateral client-seconds moved in this second: tenant-first, region-wide.
    pub collateral_tenant_first: f64,
    pub collateral_region_wide: f64,
    /// The surging tenants' own client-seconds moved: tenant-first, region-wide.
    pub surging_tenant_first: f64,
    pub surging_region_wide: f64,
    /// Other tenants holding a changed answer this second: tenant-first, region-wide.
    pub tenants_moved_tenant_first: usize,
    pub tenants_moved_region_wide: usize,
    /// The hottest region's utilisation (the feed's load over capacity): tenant-first,
    /// region-wide.
    pub hottest_tenant_first: f64,
    pub hottest_region_wide: f64,
}

/// Both runs of a scenario with tenants.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantComparison {
    pub scenario: String,
    pub tenants: usize,
    /// The tenants with surges (the others' moves are collateral).
    pub surging: Vec<String>,
    pub ticks: Vec<TenantTick>,
    /// Σ over the run: tenant-first, region-wide.
    pub collateral_tenant_first: f64,
    pub collateral_region_wide: f64,
    /// Other tenants that ever held a changed answer: tenant-first, region-wide.
    pub other_tenants_moved_tenant_first: usize,
    pub other_tenants_moved_region_wide: usize,
}

/// One client subnet of one tenant and the answer it holds.
struct Subnet {
    tenant: usize,
    client: LocatedClient,
    /// Where the held answer sends it, and which addresses it carries (a hash).
    destination: Destination,
    answer: u64,
    /// What it is answered with nothing shed (the same addresses hash).
    calm: u64,
    expires_at: u64,
}

/// The tenants of a run: names, cells, and which surge.
struct Tenants {
    names: Vec<String>,
    cells: Vec<Option<TenantCells>>,
    surging: Vec<bool>,
}

impl Tenants {
    fn of(spec: &TenantsScenario, policies: &CompiledPolicies) -> Tenants {
        let names: Vec<String> = (0..spec.count).map(tenant_name).collect();
        let cells = names
            .iter()
            .map(|n| policies.cells().map(|c| c.assign(n, None)))
            .collect();
        let mut surging = vec![false; spec.count];
        for surge in &spec.surges {
            if let Some(i) = tenant_index(&surge.tenant, spec.count) {
                surging[i] = true;
            }
        }
        Tenants {
            names,
            cells,
            surging,
        }
    }

    fn as_tenant(&self, i: usize) -> AsTenant<'_> {
        AsTenant {
            name: &self.names[i],
            cells: self.cells[i].as_ref(),
        }
    }
}

/// Runs the scenario's tenants with tenant-first shedding and with region-wide shedding, on
/// the topology and shield settings given (the shield in `Auto` mode both times).
pub fn run_tenants(
    scenario: &Scenario,
    policies: &CompiledPolicies,
    settings: &ShieldSettings,
) -> Result<TenantComparison, SimError> {
    let Some(spec) = &scenario.tenants else {
        return Err(SimError::Invalid {
            path: scenario.name.clone().into(),
            field: "tenants".into(),
            message: "the scenario has no [tenants]".into(),
        });
    };
    let resolved = Resolved::new(scenario, policies)?;
    let mut surge_regions = Vec::new();
    for (i, surge) in spec.surges.iter().enumerate() {
        let Some(r) = policies.region_index(&surge.region) else {
            return Err(SimError::Invalid {
                path: scenario.name.clone().into(),
                field: format!("tenants.surges[{i}].region"),
                message: format!("{:?} is not a region of the topology", surge.region),
            });
        };
        surge_regions.push(usize::from(r));
    }
    let tenants = Tenants::of(spec, policies);
    let first = run_one(
        scenario,
        spec,
        &surge_regions,
        &resolved,
        policies,
        settings,
        &tenants,
        true,
    )?;
    let wide = run_one(
        scenario,
        spec,
        &surge_regions,
        &resolved,
        policies,
        settings,
        &tenants,
        false,
    )?;
    let ticks: Vec<TenantTick> = first
        .ticks
        .iter()
        .zip(&wide.ticks)
        .map(|(a, b)| TenantTick {
            t: a.t,
            collateral_tenant_first: a.collateral,
            collateral_region_wide: b.collateral,
            surging_tenant_first: a.surging,
            surging_region_wide: b.surging,
            tenants_moved_tenant_first: a.tenants_moved,
            tenants_moved_region_wide: b.tenants_moved,
            hottest_tenant_first: a.hottest,
            hottest_region_wide: b.hottest,
        })
        .collect();
    Ok(TenantComparison {
        scenario: scenario.name.clone(),
        tenants: spec.count,
        surging: (0..spec.count)
            .filter(|i| tenants.surging[*i])
            .map(tenant_name)
            .collect(),
        collateral_tenant_first: ticks.iter().map(|t| t.collateral_tenant_first).sum(),
        collateral_region_wide: ticks.iter().map(|t| t.collateral_region_wide).sum(),
        other_tenants_moved_tenant_first: first.ever_moved,
        other_tenants_moved_region_wide: wide.ever_moved,
        ticks,
    })
}

/// The last feed: when, and (load, capacity) per region and per site (`None`: left out).
type Feed = (u64, Vec<Option<(f64, f64)>>, Vec<Option<(f64, f64)>>);

struct OneTick {
    t: u64,
    collateral: f64,
    surging: f64,
    tenants_moved: usize,
    hottest: f64,
}

struct OneRun {
    ticks: Vec<OneTick>,
    /// Other tenants that ever held a changed answer.
    ever_moved: usize,
}

/// Where an anycast decision sends the client, and a hash of the addresses it carries.
fn landing(decision: &Decision<'_>) -> (Destination, u64) {
    let destination = match decision.trace.anycast {
        Some((_, AnycastChoice::Shed { destination, .. }))
        | Some((_, AnycastChoice::Forced(destination)))
        | Some((_, AnycastChoice::Drained(destination))) => destination,
        _ => Destination::Global,
    };
    let mut hash = crate::hash::FNV1A64_OFFSET_BASIS;
    if let Target::Addresses { v4, v6 } = decision.target {
        for a in decision.left_out.keep(v4) {
            hash = crate::hash::fnv1a64_more(hash, &a.octets());
        }
        for a in decision.left_out.keep(v6) {
            hash = crate::hash::fnv1a64_more(hash, &a.octets());
        }
    }
    (destination, hash)
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    scenario: &Scenario,
    spec: &TenantsScenario,
    surge_regions: &[usize],
    resolved: &Resolved,
    policies: &CompiledPolicies,
    settings: &ShieldSettings,
    tenants: &Tenants,
    tenant_first: bool,
) -> Result<OneRun, SimError> {
    let Some((root, steady_ttl)) = policies.steered().iter().find_map(|s| match s.root {
        PolicyRoot::Anycast { ttl } => Some((s.root, u64::from(ttl.max(1)))),
        PolicyRoot::Profile { .. } => None,
    }) else {
        return Err(SimError::Topology(
            "no [[steered]] name uses policy = \"anycast\": nothing to simulate".into(),
        ));
    };
    let rings = rings_of(policies);
    let regions = rings.regions.len();
    let sites = rings.sites.len();
    let per_tenant = spec.subnets_per_tenant as usize;
    let calm_view = ShedView::default();
    let all_up = HealthView::all_up();
    let mut subnets = Vec::with_capacity(spec.count * regions * per_tenant);
    for tenant in 0..spec.count {
        for r in 0..regions {
            for i in 0..per_tenant {
                let index = ((tenant * regions + r) * per_tenant + i) as u32;
                let client = LocatedClient {
                    region: r as u16,
                    addr: IpAddr::V4(Ipv4Addr::from(0x0A00_0000u32.wrapping_add(index << 8))),
                    prefix_len: 24,
                };
                let decision = evaluate_for_tenant(
                    policies,
                    root,
                    &client,
                    &calm_view,
                    &all_up,
                    Some(tenants.as_tenant(tenant)),
                );
                let (destination, calm) = landing(&decision);
                subnets.push(Subnet {
                    tenant,
                    client,
                    destination,
                    answer: calm,
                    calm,
                    expires_at: (index as u64).wrapping_mul(7919) % steady_ttl,
                });
            }
        }
    }
    let mut state = ShieldState::default();
    let mut view = ShedView::default();
    let mut feed: Option<Feed> = None;
    let mut ever = vec![false; spec.count];
    let mut ticks = Vec::with_capacity(scenario.duration_secs as usize);
    for t in 0..scenario.duration_secs {
        // Each tenant's load from each region (its clients located there).
        let mut load = vec![vec![0.0; regions]; spec.count];
        for (r, base) in resolved.base_demand.iter().enumerate() {
            let share = base * resolved.demand_factor(r, t) / spec.count as f64;
            for row in load.iter_mut() {
                row[r] = share;
            }
        }
        for (surge, &r) in spec.surges.iter().zip(surge_regions) {
            if let Some(i) = super::tenants::tenant_index(&surge.tenant, spec.count) {
                load[i][r] += surge.load_at(t);
            }
        }
        let mut answers = vec![Demand::default(); regions];
        for subnet in subnets.iter_mut().filter(|s| s.expires_at <= t) {
            let decision = evaluate_for_tenant(
                policies,
                root,
                &subnet.client,
                &view,
                &all_up,
                Some(tenants.as_tenant(subnet.tenant)),
            );
            (subnet.destination, subnet.answer) = landing(&decision);
            subnet.expires_at = t + u64::from(decision.ttl.max(1));
            let r = usize::from(subnet.client.region);
            let weight =
                load[subnet.tenant][r] / per_tenant as f64 * f64::from(decision.ttl.max(1));
            match subnet.destination {
                Destination::Global => answers[r].kept += weight,
                to => *answers[r].sent.entry(to).or_insert(0.0) += weight,
            }
        }
        // Where the load lands, and what moved.
        let mut region_load = vec![0.0; regions];
        let mut site_load = resolved.site_load.clone();
        let mut collateral = 0.0;
        let mut surging = 0.0;
        let mut moved = vec![false; spec.count];
        for subnet in &subnets {
            let r = usize::from(subnet.client.region);
            let amount = load[subnet.tenant][r] / per_tenant as f64;
            match subnet.destination {
                Destination::Global => region_load[r] += amount,
                Destination::Region(x) => {
                    if let Some(l) = region_load.get_mut(usize::from(x)) {
                        *l += amount;
                    }
                }
                Destination::Fallback(s) => {
                    if let Some(l) = site_load.get_mut(usize::from(s)) {
                        *l += amount;
                    }
                }
            }
            if subnet.answer != subnet.calm {
                if tenants.surging[subnet.tenant] {
                    surging += amount;
                } else {
                    collateral += amount;
                    moved[subnet.tenant] = true;
                }
            }
        }
        for (e, m) in ever.iter_mut().zip(&moved) {
            *e |= *m;
        }
        let region_capacity: Vec<f64> = (0..regions)
            .map(|r| resolved.region_capacity[r] * resolved.capacity_factor(Node::Region(r), t))
            .collect();
        let site_capacity: Vec<f64> = (0..sites)
            .map(|s| resolved.site_capacity[s] * resolved.capacity_factor(Node::Site(s), t))
            .collect();
        let hottest = region_load
            .iter()
            .zip(&region_capacity)
            .filter(|(_, c)| **c > 0.0)
            .map(|(l, c)| l / c)
            .fold(0.0, f64::max);
        if !resolved.feed_stopped(t) && t % scenario.feed_interval_secs == 0 {
            let report = |node: Node, load: f64, capacity: f64| {
                (!resolved.feed_omits(node, t)).then_some((load, capacity))
            };
            feed = Some((
                t,
                (0..regions)
                    .map(|r| report(Node::Region(r), region_load[r], region_capacity[r]))
                    .collect(),
                (0..sites)
                    .map(|s| report(Node::Site(s), site_load[s], site_capacity[s]))
                    .collect(),
            ));
        }
        let reading = |table: &[Option<(f64, f64)>], at: u64, i: usize| {
            let (load, capacity) = table.get(i).copied().flatten()?;
            Some(Reading {
                load,
                capacity,
                age_ms: (t - at) * 1000,
            })
        };
        let (region_readings, site_readings) = match &feed {
            Some((at, r, s)) => (
                (0..regions).map(|i| reading(r, *at, i)).collect(),
                (0..sites).map(|i| reading(s, *at, i)).collect(),
            ),
            None => (vec![None; regions], vec![None; sites]),
        };
        let tenant_figures = if tenant_first && feed.is_some() {
            load.iter()
                .enumerate()
                .map(|(i, row)| TenantLoad {
                    tenant: tenants.names[i].clone(),
                    regions: row.iter().map(|l| Some(*l)).collect(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let inputs = Inputs {
            regions: region_readings,
            sites: site_readings,
            demand: answers,
            mode: ShieldMode::Auto,
            operator_held: vec![false; regions],
            tenants: tenant_figures,
        };
        state = step(&state, &inputs, &rings, settings, t * 1000).0;
        view = shed_view(&state, settings);
        ticks.push(OneTick {
            t,
            collateral,
            surging,
            tenants_moved: moved.iter().filter(|m| **m).count(),
            hottest,
        });
    }
    Ok(OneRun {
        ticks,
        ever_moved: ever.iter().filter(|m| **m).count(),
    })
}

/// One row per second: both runs' collateral and surging client-seconds moved, other tenants
/// moved and the hottest region's utilisation; a last `total` row.
pub fn tenants_csv(c: &TenantComparison) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "t,collateral_tenant_first,collateral_region_wide,surging_tenant_first,\
         surging_region_wide,other_tenants_moved_tenant_first,other_tenants_moved_region_wide,\
         hottest_utilisation_tenant_first,hottest_utilisation_region_wide\n",
    );
    for t in &c.ticks {
        let _ = writeln!(
            out,
            "{},{:.3},{:.3},{:.3},{:.3},{},{},{:.4},{:.4}",
            t.t,
            t.collateral_tenant_first,
            t.collateral_region_wide,
            t.surging_tenant_first,
            t.surging_region_wide,
            t.tenants_moved_tenant_first,
            t.tenants_moved_region_wide,
            t.hottest_tenant_first,
            t.hottest_region_wide
        );
    }
    let surging_first: f64 = c.ticks.iter().map(|t| t.surging_tenant_first).sum();
    let surging_wide: f64 = c.ticks.iter().map(|t| t.surging_region_wide).sum();
    let _ = writeln!(
        out,
        "total,{:.3},{:.3},{surging_first:.3},{surging_wide:.3},{},{},,",
        c.collateral_tenant_first,
        c.collateral_region_wide,
        c.other_tenants_moved_tenant_first,
        c.other_tenants_moved_region_wide
    );
    out
}

/// The comparison in a few lines.
pub fn tenants_text(c: &TenantComparison) -> String {
    format!(
        "scenario {}: {} tenants, surging: {}\n\
         collateral client-seconds moved (other tenants' clients whose answers changed x s):\n\
         \x20 tenant-first shedding: {:.1} ({} other tenants moved)\n\
         \x20 region-wide shedding:  {:.1} ({} other tenants moved)\n",
        c.scenario,
        c.tenants,
        c.surging.join(", "),
        c.collateral_tenant_first,
        c.other_tenants_moved_tenant_first,
        c.collateral_region_wide,
        c.other_tenants_moved_region_wide
    )
}

/// Writes `tenants.csv` and (with the `tools` feature) `tenants.svg` into `dir`.
pub fn write_tenant_outputs(c: &TenantComparison, dir: &std::path::Path) -> Result<(), SimError> {
    let write_error = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |error| SimError::Write { path, error }
    };
    std::fs::create_dir_all(dir).map_err(write_error(dir))?;
    let csv = dir.join("tenants.csv");
    std::fs::write(&csv, tenants_csv(c)).map_err(write_error(&csv))?;
    #[cfg(feature = "tools")]
    {
        let svg = dir.join("tenants.svg");
        std::fs::write(&svg, super::plot::plot_tenants_svg(c)?).map_err(write_error(&svg))?;
    }
    Ok(())
}
