//! The simulation loop: clients re-ask as their cached answers expire, loads follow the
//! answers, the feed reports the loads, and the step decides the next view.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use super::scenario::{Node, Resolved, Scenario};
use super::{NodeSample, NodeSummary, SimError, SimResult, Summary, Tick};
use crate::policy::ShieldMode;
use crate::policy::{
    evaluate, Client, CompiledPolicies, Destination, PolicyRoot, ShedView, Target,
};
use crate::shield::live::rings_of;
use crate::shield::step::{shed_view, step, Demand, Inputs, Reading, ShieldSettings, ShieldState};

/// Share of demand that must hold a global answer to count as "back to global".
const GLOBAL_SHARE_BACK: f64 = 0.99;

/// One client subnet and the answer its resolver holds.
struct Subnet {
    client: Client,
    answer: Destination,
    expires_at: u64,
}

/// The last load feed received.
struct Feed {
    at: u64,
    regions: Vec<Option<(f64, f64)>>,
    sites: Vec<Option<(f64, f64)>>,
}

/// Runs `scenario` against the topology in `policies` with the shield in `Auto` mode
/// (`shield_on`) or `Off` (the baseline: every answer global, steady TTL).
pub fn run(
    scenario: &Scenario,
    policies: &CompiledPolicies,
    settings: &ShieldSettings,
    shield_on: bool,
) -> Result<SimResult, SimError> {
    let resolved = Resolved::new(scenario, policies)?;
    let (root, steady_ttl) = anycast_root(policies)?;
    let addresses = answer_addresses(policies);
    let rings = rings_of(policies);
    let regions = rings.regions.len();
    let sites = rings.sites.len();
    let per_region = scenario.subnets_per_region as usize;
    let mut subnets = make_subnets(regions, per_region, steady_ttl);
    let mode = if shield_on {
        ShieldMode::Auto
    } else {
        ShieldMode::Off
    };
    let mut state = ShieldState::default();
    let mut view = ShedView::default();
    let mut feed: Option<Feed> = None;
    let mut ticks = Vec::with_capacity(scenario.duration_secs as usize);
    let mut unmapped = 0u64;
    for t in 0..scenario.duration_secs {
        let demand: Vec<f64> = (0..regions)
            .map(|r| resolved.base_demand[r] * resolved.demand_factor(r, t))
            .collect();
        let per_subnet: Vec<f64> = demand.iter().map(|d| d / per_region as f64).collect();
        let region_capacity: Vec<f64> = (0..regions)
            .map(|r| resolved.region_capacity[r] * resolved.capacity_factor(Node::Region(r), t))
            .collect();
        let site_capacity: Vec<f64> = (0..sites)
            .map(|s| resolved.site_capacity[s] * resolved.capacity_factor(Node::Site(s), t))
            .collect();

        // Resolvers whose answer expired ask again under the current view.
        let mut answers = vec![Demand::default(); regions];
        for subnet in subnets.iter_mut().filter(|s| s.expires_at <= t) {
            let decision = evaluate(policies, root, &subnet.client, &view);
            let answer = addresses.destination(&decision.target).unwrap_or_else(|| {
                unmapped += 1;
                Destination::Global
            });
            subnet.answer = answer;
            subnet.expires_at = t + u64::from(decision.ttl.max(1));
            let r = usize::from(subnet.client.region);
            // TTL-weighted, as the server counts: clients holding the answer, not query rate.
            let weight = per_subnet[r] * f64::from(decision.ttl.max(1));
            match answer {
                Destination::Global => answers[r].kept += weight,
                to => *answers[r].sent.entry(to).or_insert(0.0) += weight,
            }
        }

        let mut tick = land(&subnets, &per_subnet, &resolved.site_load, per_region);
        tick.t = t;
        for (r, sample) in tick.regions.iter_mut().enumerate() {
            sample.demand = demand[r];
            sample.capacity = region_capacity[r];
        }
        for (s, sample) in tick.sites.iter_mut().enumerate() {
            sample.demand = resolved.site_load[s];
            sample.capacity = site_capacity[s];
        }

        if !resolved.feed_stopped(t) && t % scenario.feed_interval_secs == 0 {
            feed = Some(take_feed(&resolved, &tick, t));
        }
        let inputs = Inputs {
            regions: readings(feed.as_ref(), t, true, regions),
            sites: readings(feed.as_ref(), t, false, sites),
            demand: answers,
            mode,
            operator_held: vec![false; regions],
        };
        let (next, changes) = step(&state, &inputs, &rings, settings, t * 1000);
        state = next;
        view = shed_view(&state, settings);
        for (r, sample) in tick.regions.iter_mut().enumerate() {
            sample.shed_fraction = state.regions.get(r).map_or(0.0, |x| x.fraction);
        }
        tick.changes = changes.len();
        ticks.push(tick);
    }
    let region_names: Vec<String> = rings.regions.iter().map(|n| n.name.clone()).collect();
    let site_names: Vec<String> = rings.sites.iter().map(|n| n.name.clone()).collect();
    let summary = summarise(
        &ticks,
        &region_names,
        &site_names,
        scenario.last_event_end(),
        unmapped,
    );
    Ok(SimResult {
        scenario: scenario.name.clone(),
        shield_on,
        region_names,
        site_names,
        high_watermark: settings.high_watermark,
        low_watermark: settings.low_watermark,
        ticks,
        summary,
    })
}

/// The first anycast steered name's root and its (steady) TTL.
fn anycast_root(policies: &CompiledPolicies) -> Result<(PolicyRoot, u64), SimError> {
    policies
        .steered()
        .iter()
        .find_map(|s| match s.root {
            PolicyRoot::Anycast { ttl } => Some((s.root, u64::from(ttl.max(1)))),
            PolicyRoot::Profile { .. } => None,
        })
        .ok_or_else(|| {
            SimError::Topology(
                "no [[steered]] name uses policy = \"anycast\": nothing to simulate".into(),
            )
        })
}

/// Maps an answered address back to where it sends the client.
struct AnswerAddresses(HashMap<IpAddr, Destination>);

fn answer_addresses(policies: &CompiledPolicies) -> AnswerAddresses {
    let mut map = HashMap::new();
    let mut add = |v4: &[Ipv4Addr], v6: &[std::net::Ipv6Addr], d: Destination| {
        for a in v4 {
            map.entry(IpAddr::V4(*a)).or_insert(d);
        }
        for a in v6 {
            map.entry(IpAddr::V6(*a)).or_insert(d);
        }
    };
    let (g4, g6) = policies.global();
    add(g4, g6, Destination::Global);
    for (i, r) in policies.regions().iter().enumerate() {
        add(&r.v4, &r.v6, Destination::Region(i as u16));
    }
    for (i, s) in policies.fallback_sites().iter().enumerate() {
        add(&s.v4, &s.v6, Destination::Fallback(i as u16));
    }
    AnswerAddresses(map)
}

impl AnswerAddresses {
    fn destination(&self, target: &Target<'_>) -> Option<Destination> {
        match target {
            Target::Addresses { v4, v6 } => {
                let first = v4
                    .first()
                    .map(|a| IpAddr::V4(*a))
                    .or_else(|| v6.first().map(|a| IpAddr::V6(*a)))?;
                self.0.get(&first).copied()
            }
            Target::Cname { .. } => None,
        }
    }
}

/// `per_region` distinct /24s per region (10.0.0.0/8 upwards), all holding a global answer
/// whose expiry is staggered uniformly over the steady TTL.
fn make_subnets(regions: usize, per_region: usize, steady_ttl: u64) -> Vec<Subnet> {
    let mut subnets = Vec::with_capacity(regions * per_region);
    for r in 0..regions {
        for i in 0..per_region {
            let index = (r * per_region + i) as u32;
            let addr = Ipv4Addr::from(0x0A00_0000u32.wrapping_add(index << 8));
            subnets.push(Subnet {
                client: Client {
                    region: r as u16,
                    addr: IpAddr::V4(addr),
                    prefix_len: 24,
                },
                answer: Destination::Global,
                expires_at: i as u64 * steady_ttl / per_region as u64,
            });
        }
    }
    subnets
}

/// Loads, shed-in loads and destination shares from the answers the subnets hold.
fn land(subnets: &[Subnet], per_subnet: &[f64], site_load: &[f64], per_region: usize) -> Tick {
    let regions = per_subnet.len();
    let sites = site_load.len();
    let mut tick = Tick {
        regions: vec![NodeSample::default(); regions],
        sites: site_load
            .iter()
            .map(|&l| NodeSample {
                load: l,
                ..NodeSample::default()
            })
            .collect(),
        ..Tick::default()
    };
    // Subnets per (client region, destination column): 0 = global, then regions, then sites.
    let width = 1 + regions + sites;
    let mut held = vec![0u32; regions * width];
    for subnet in subnets {
        let r = usize::from(subnet.client.region);
        let column = match subnet.answer {
            Destination::Global => 0,
            Destination::Region(x) => 1 + usize::from(x),
            Destination::Fallback(x) => 1 + regions + usize::from(x),
        };
        if let Some(count) = held.get_mut(r * width + column.min(width - 1)) {
            *count += 1;
        }
    }
    let mut global = 0.0;
    let mut total = 0.0;
    for r in 0..regions {
        let row = &held[r * width..(r + 1) * width];
        for (column, &count) in row.iter().enumerate().filter(|(_, c)| **c > 0) {
            let amount = f64::from(count) * per_subnet[r];
            total += amount;
            let (destination, sample) = if column == 0 {
                global += amount;
                (Destination::Global, &mut tick.regions[r])
            } else if column <= regions {
                (
                    Destination::Region((column - 1) as u16),
                    &mut tick.regions[column - 1],
                )
            } else {
                let s = column - 1 - regions;
                (Destination::Fallback(s as u16), &mut tick.sites[s])
            };
            sample.load += amount;
            // Anything not arriving through the client's own region counts as shed in.
            if column != 0 && column != 1 + r {
                sample.shed_in += amount;
            }
            tick.regions[r]
                .destinations
                .push((destination, f64::from(count) / per_region as f64));
        }
    }
    tick.global_share = if total > 0.0 { global / total } else { 1.0 };
    tick
}

fn take_feed(resolved: &Resolved, tick: &Tick, t: u64) -> Feed {
    let report = |node: Node, sample: &NodeSample| {
        (!resolved.feed_omits(node, t)).then_some((sample.load, sample.capacity))
    };
    Feed {
        at: t,
        regions: tick
            .regions
            .iter()
            .enumerate()
            .map(|(r, s)| report(Node::Region(r), s))
            .collect(),
        sites: tick
            .sites
            .iter()
            .enumerate()
            .map(|(i, s)| report(Node::Site(i), s))
            .collect(),
    }
}

fn readings(feed: Option<&Feed>, t: u64, regions: bool, count: usize) -> Vec<Option<Reading>> {
    (0..count)
        .map(|i| {
            let feed = feed?;
            let table = if regions { &feed.regions } else { &feed.sites };
            let (load, capacity) = table.get(i).copied().flatten()?;
            Some(Reading {
                load,
                capacity,
                age_ms: (t - feed.at) * 1000,
            })
        })
        .collect()
}

fn summarise(
    ticks: &[Tick],
    region_names: &[String],
    site_names: &[String],
    last_event_end: Option<u64>,
    unmapped_answers: u64,
) -> Summary {
    let node = |name: &String, is_site: bool, pick: &dyn Fn(&Tick) -> &NodeSample| {
        let mut summary = NodeSummary {
            name: name.clone(),
            is_site,
            peak_utilisation: 0.0,
            peak_at: 0,
            overloaded_secs: 0,
            first_overload: None,
            last_overload: None,
            peak_with_shed_in: 0.0,
        };
        for tick in ticks {
            let sample = pick(tick);
            let u = sample.utilisation();
            if u > summary.peak_utilisation {
                summary.peak_utilisation = u;
                summary.peak_at = tick.t;
            }
            if sample.shed_in > 0.0 {
                summary.peak_with_shed_in = summary.peak_with_shed_in.max(u);
            }
            if u > 1.0 {
                summary.overloaded_secs += 1;
                summary.first_overload.get_or_insert(tick.t);
                summary.last_overload = Some(tick.t);
            }
        }
        summary
    };
    let mut nodes = Vec::new();
    for (r, name) in region_names.iter().enumerate() {
        nodes.push(node(name, false, &|t: &Tick| &t.regions[r]));
    }
    for (s, name) in site_names.iter().enumerate() {
        nodes.push(node(name, true, &|t: &Tick| &t.sites[s]));
    }
    let overloaded_client_seconds = ticks
        .iter()
        .flat_map(|t| t.regions.iter().chain(&t.sites))
        .filter(|s| s.utilisation() > 1.0)
        .map(|s| s.load)
        .fold(0.0, |a, b| a + b);
    let unsettled = |t: &Tick| {
        t.global_share < GLOBAL_SHARE_BACK || t.regions.iter().any(|r| r.shed_fraction > 0.0)
    };
    let back_to_global_at = match ticks.iter().rposition(unsettled) {
        None => Some(0),
        Some(i) if i + 1 < ticks.len() => Some(ticks[i + 1].t),
        Some(_) => None,
    };
    Summary {
        nodes,
        overloaded_client_seconds,
        last_event_end,
        back_to_global_at,
        unmapped_answers,
    }
}
