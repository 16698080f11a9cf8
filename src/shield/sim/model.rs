//! The simulation loop: clients re-ask as their cached answers expire, loads follow the
//! answers, the feed reports the loads, and the step decides the next view.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use super::scenario::{Node, Resolved, Scenario};
use super::{NodeSample, NodeSummary, SimError, SimResult, Summary, Tick};
use crate::policy::ShieldMode;
use crate::policy::{
    evaluate, CompiledPolicies, Destination, LocatedClient, PolicyRoot, ShedView, Target,
};
use crate::shield::live::rings_of;
use crate::shield::step::{shed_view, step, Demand, Inputs, Reading, ShieldSettings, ShieldState};

/// Share of demand that must hold a global answer to count as "back to global".
const GLOBAL_SHARE_BACK: f64 = 0.99;

/// One client subnet and the answer its resolver holds.
struct Subnet {
    client: LocatedClient,
    answer: Destination,
    expires_at: u64,
}

/// The last load feed received.
#[derive(Clone)]
struct Feed {
    at: u64,
    regions: Vec<Option<(f64, f64)>>,
    sites: Vec<Option<(f64, f64)>>,
}

/// How many nameservers answer and whether one fleet leader decides for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nameservers {
    /// Resolvers spread their queries evenly over this many nameservers (at least 1).
    pub count: usize,
    /// `true`: one shield state, decided on the fleet-wide demand and served by every
    /// nameserver (fleet mode's shield leader). `false`: each nameserver decides on its own
    /// demand counters and its own copy of the load feed.
    pub leader: bool,
}

impl Nameservers {
    pub const ONE: Nameservers = Nameservers {
        count: 1,
        leader: true,
    };
}

/// How consistently the nameservers answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Consistency {
    pub nameservers: usize,
    pub leader: bool,
    /// Client subnets that, at some second, got different answers from different nameservers.
    pub inconsistent_subnets: usize,
    /// Of all subnets.
    pub subnets: usize,
    /// Σ over seconds of the subnets answered inconsistently in that second.
    pub inconsistent_subnet_seconds: u64,
    /// Times a subnet's held answer changed destination while its region's decision did not
    /// call for it: it re-asked and hit a nameserver with a different view.
    pub flips: u64,
}

/// Runs `scenario` against the topology in `policies` with the shield in `Auto` mode
/// (`shield_on`) or `Off` (the baseline: every answer global, steady TTL).
pub fn run(
    scenario: &Scenario,
    policies: &CompiledPolicies,
    settings: &ShieldSettings,
    shield_on: bool,
) -> Result<SimResult, SimError> {
    run_nameservers(scenario, policies, settings, shield_on, Nameservers::ONE).map(|(r, _)| r)
}

/// [`run`] with resolvers spreading their queries over `nameservers.count` nameservers,
/// nameserver i receiving each load feed i seconds after nameserver 1 (pushes and polls do not
/// reach every node at the same moment). Without a leader each runs the step on the answers it gave;
/// with one, one step runs on the sum of every nameserver's answers and the freshest feed, and
/// every nameserver serves its result. The series and summary are those of nameserver 1's
/// decisions; [`Consistency`] says how often the nameservers disagreed.
pub fn run_nameservers(
    scenario: &Scenario,
    policies: &CompiledPolicies,
    settings: &ShieldSettings,
    shield_on: bool,
    nameservers: Nameservers,
) -> Result<(SimResult, Consistency), SimError> {
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
    let count = nameservers.count.max(1);
    // One decision-maker with a leader, else one per nameserver.
    let deciders = if nameservers.leader { 1 } else { count };
    let mut states = vec![ShieldState::default(); deciders];
    let mut views = vec![ShedView::default(); deciders];
    let mut feeds: Vec<Option<Feed>> = (0..count).map(|_| None).collect();
    // The feeds sent lately, oldest first.
    let mut sent: std::collections::VecDeque<Feed> = std::collections::VecDeque::new();
    let mut consistency = Consistency {
        nameservers: count,
        leader: nameservers.leader,
        subnets: subnets.len(),
        ..Consistency::default()
    };
    let mut ever_inconsistent = vec![false; subnets.len()];
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

        // Resolvers whose answer expired ask again, each of one nameserver, under its view.
        let mut answers = vec![vec![Demand::default(); regions]; deciders];
        for (index, subnet) in subnets
            .iter_mut()
            .enumerate()
            .filter(|(_, s)| s.expires_at <= t)
        {
            let asked = pick_nameserver(index, t, count);
            let decider = if nameservers.leader { 0 } else { asked };
            let decision = evaluate(policies, root, &subnet.client, &views[decider]);
            let answer = addresses.destination(&decision.target).unwrap_or_else(|| {
                unmapped += 1;
                Destination::Global
            });
            if count > 1 && subnet.answer != answer {
                let others_agree = views
                    .iter()
                    .all(|v| other_answer(policies, root, &addresses, subnet, v) == answer);
                if !others_agree {
                    consistency.flips += 1;
                }
            }
            subnet.answer = answer;
            subnet.expires_at = t + u64::from(decision.ttl.max(1));
            let r = usize::from(subnet.client.region);
            // TTL-weighted, as the server counts: clients holding the answer, not query rate.
            let weight = per_subnet[r] * f64::from(decision.ttl.max(1));
            match answer {
                Destination::Global => answers[decider][r].kept += weight,
                to => *answers[decider][r].sent.entry(to).or_insert(0.0) += weight,
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
            sent.push_back(take_feed(&resolved, &tick, t));
            if sent.len() > count + 1 {
                sent.pop_front();
            }
        }
        // Nameserver i receives each feed i seconds after nameserver 1 (pushes and polls do
        // not reach every node at the same moment).
        for (i, feed) in feeds.iter_mut().enumerate() {
            if let Some(arrived) = sent.iter().rev().find(|f| f.at + i as u64 <= t) {
                if feed.as_ref().is_none_or(|held| held.at < arrived.at) {
                    *feed = Some(arrived.clone());
                }
            }
        }
        let mut changed = 0;
        for d in 0..deciders {
            let feed = if nameservers.leader {
                // The leader reads the freshest feed any nameserver received.
                feeds.iter().flatten().max_by_key(|f| f.at)
            } else {
                feeds[d].as_ref()
            };
            let inputs = Inputs {
                regions: readings(feed, t, true, regions),
                sites: readings(feed, t, false, sites),
                demand: std::mem::take(&mut answers[d]),
                mode,
                operator_held: vec![false; regions],
                tenants: Vec::new(),
            };
            let (next, changes) = step(&states[d], &inputs, &rings, settings, t * 1000);
            states[d] = next;
            views[d] = shed_view(&states[d], settings);
            changed += changes.len();
        }
        for (r, sample) in tick.regions.iter_mut().enumerate() {
            sample.shed_fraction = states[0].regions.get(r).map_or(0.0, |x| x.fraction);
        }
        if views.iter().any(|v| *v != views[0]) {
            // Only regions whose decisions differ between nameservers can answer differently.
            let differs: Vec<bool> = (0..regions as u16)
                .map(|r| views.iter().any(|v| v.region(r) != views[0].region(r)))
                .collect();
            for (index, subnet) in subnets
                .iter()
                .enumerate()
                .filter(|(_, s)| differs[usize::from(s.client.region)])
            {
                let first = other_answer(policies, root, &addresses, subnet, &views[0]);
                if views[1..]
                    .iter()
                    .any(|v| other_answer(policies, root, &addresses, subnet, v) != first)
                {
                    consistency.inconsistent_subnet_seconds += 1;
                    ever_inconsistent[index] = true;
                }
            }
        }
        tick.changes = changed;
        ticks.push(tick);
    }
    consistency.inconsistent_subnets = ever_inconsistent.iter().filter(|x| **x).count();
    let region_names: Vec<String> = rings.regions.iter().map(|n| n.name.clone()).collect();
    let site_names: Vec<String> = rings.sites.iter().map(|n| n.name.clone()).collect();
    let summary = summarise(
        &ticks,
        &region_names,
        &site_names,
        scenario.last_event_end(),
        unmapped,
    );
    let result = SimResult {
        scenario: scenario.name.clone(),
        shield_on,
        region_names,
        site_names,
        high_watermark: settings.high_watermark,
        low_watermark: settings.low_watermark,
        ticks,
        summary,
    };
    Ok((result, consistency))
}

/// Which nameserver a resolver asks for `subnet` at second `t`: spread evenly and
/// deterministically (a hash of both), as resolvers rotating over a zone's NS set do.
fn pick_nameserver(subnet: usize, t: u64, count: usize) -> usize {
    if count <= 1 {
        return 0;
    }
    let mut x = (subnet as u64) ^ t.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    (x % count as u64) as usize
}

/// The destination `view` would answer `subnet`.
fn other_answer(
    policies: &CompiledPolicies,
    root: PolicyRoot,
    addresses: &AnswerAddresses,
    subnet: &Subnet,
    view: &ShedView,
) -> Destination {
    let decision = evaluate(policies, root, &subnet.client, view);
    addresses
        .destination(&decision.target)
        .unwrap_or(Destination::Global)
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
                client: LocatedClient {
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
