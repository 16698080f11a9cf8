//! Unit tests of the decision step: each rule on its own, then closed-loop runs against a small
//! world model in which clients follow answers only as their cached ones expire.

use std::collections::BTreeMap;

use super::step::*;
use crate::policy::Destination;
use crate::policy::ShieldMode;

const EU_WEST: usize = 0;
const EU_NORTH: usize = 1;
const NA_EAST: usize = 2;
const NA_WEST: usize = 3;
const FB_EU: usize = 0;
const FB_NA: usize = 1;

fn node(name: &str, continent: &str, neighbours: &[u16]) -> RingNode {
    RingNode {
        name: name.into(),
        continent: continent.into(),
        neighbours: neighbours.to_vec(),
    }
}

/// eu-west, eu-north (EU); na-east, na-west (NA); fallback fb-eu (EU), fb-na (NA).
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

fn reading(load: f64, capacity: f64) -> Option<Reading> {
    Some(Reading {
        load,
        capacity,
        age_ms: 1000,
    })
}

fn inputs(regions: &[(f64, f64)], sites: &[(f64, f64)]) -> Inputs {
    Inputs {
        regions: regions.iter().map(|&(l, c)| reading(l, c)).collect(),
        sites: sites.iter().map(|&(l, c)| reading(l, c)).collect(),
        demand: Vec::new(),
        mode: ShieldMode::Auto,
        operator_held: vec![false; regions.len()],
        tenants: Vec::new(),
    }
}

fn settings() -> ShieldSettings {
    ShieldSettings::default()
}

/// Load region `r` places at `d`.
fn placed_at(state: &ShieldState, r: usize, d: Destination) -> f64 {
    let region = &state.regions[r];
    region.fraction * region.natural * region.shares.get(&d).copied().unwrap_or(0.0)
}

#[test]
fn nothing_happens_below_the_high_watermark() {
    let i = inputs(
        &[
            (800.0, 1000.0),
            (300.0, 600.0),
            (500.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    let (state, changes) = step(&ShieldState::default(), &i, &rings(), &settings(), 1000);
    assert!(changes.is_empty());
    assert!(state.regions.iter().all(|r| r.fraction == 0.0));
    // 0.80 is above the low watermark: eu-west's clients get the short TTL.
    assert!(state.regions[EU_WEST].hot);
    assert!(!state.regions[NA_WEST].hot);
}

#[test]
fn overload_sheds_max_step_capped_to_the_same_continent_neighbour_first() {
    let i = inputs(
        &[
            (1000.0, 1000.0),
            (100.0, 600.0),
            (500.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    let (state, changes) = step(&ShieldState::default(), &i, &rings(), &settings(), 1000);
    let west = &state.regions[EU_WEST];
    assert!(
        (west.fraction - 0.1).abs() < 1e-9,
        "max_step cap: {}",
        west.fraction
    );
    assert_eq!(changes.len(), 1);
    assert_eq!(
        changes[0].reason,
        "measured utilisation 1.00, predicted 1.00 in 30 s: above high watermark 0.85"
    );
    assert_eq!(
        west.shares.keys().copied().collect::<Vec<_>>(),
        vec![Destination::Region(EU_NORTH as u16)]
    );
    // Ten seconds on, the reading still says 1.00 but the move in flight has partly landed:
    // the reason says both, so "0.9x above 0.85" never reads like a contradiction.
    let (_, changes) = step(&state, &i, &rings(), &settings(), 11_000);
    let reason = &changes[0].reason;
    assert!(
        reason.starts_with("measured utilisation 1.00, predicted 0.9")
            && reason.ends_with("above high watermark 0.85"),
        "{reason}"
    );
    assert_eq!(west.note, Note::Shedding);
}

#[test]
fn never_overfills_a_destination_and_uses_the_fallback_site_before_other_continents() {
    // eu-north can take 0.85*600-450 = 60; fb-eu the rest; na-east nothing while EU has room.
    let i = inputs(
        &[
            (1200.0, 1000.0),
            (450.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(100.0, 2000.0), (0.0, 2000.0)],
    );
    let mut s = settings();
    s.max_step = 1.0;
    // Clients already on the short TTL (as after a long hot spell): moves land within it.
    s.steady_ttl = s.short_ttl;
    let (state, _) = step(&ShieldState::default(), &i, &rings(), &s, 1000);
    let north = placed_at(&state, EU_WEST, Destination::Region(EU_NORTH as u16));
    assert!(north <= 60.0 + 1e-6, "eu-north got {north}");
    assert!(north > 59.0);
    assert!(placed_at(&state, EU_WEST, Destination::Fallback(FB_EU as u16)) > 0.0);
    assert_eq!(
        placed_at(&state, EU_WEST, Destination::Region(NA_EAST as u16)),
        0.0
    );
    assert_eq!(
        placed_at(&state, EU_WEST, Destination::Fallback(FB_NA as u16)),
        0.0
    );
    // Target is midway between the watermarks: 0.775 of 1000 -> shed 425 of 1200.
    let total: f64 = state.regions[EU_WEST].fraction * state.regions[EU_WEST].natural;
    assert!((total - 425.0).abs() < 1e-6, "{total}");
}

#[test]
fn a_freshly_hot_region_sheds_more_than_it_needs_but_at_most_twice() {
    // Its clients still hold normal (300 s) answers: only a tenth of a move lands within the
    // short TTL, so the step sheds beyond the eventual need to get relief sooner — bounded.
    let i = inputs(
        &[
            (1200.0, 1000.0),
            (100.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(100.0, 2000.0), (0.0, 2000.0)],
    );
    let mut s = settings();
    s.max_step = 1.0;
    let (state, _) = step(&ShieldState::default(), &i, &rings(), &s, 1000);
    let total = state.regions[EU_WEST].fraction * state.regions[EU_WEST].natural;
    assert!(
        total > 425.0 + 1.0 && total <= 2.0 * 425.0 + 1e-6,
        "{total}"
    );
    // Once its clients have had the short TTL for a full normal TTL, it sheds just what it needs.
    let mut held = inputs(
        &[
            (1200.0, 1000.0),
            (100.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(100.0, 2000.0), (0.0, 2000.0)],
    );
    held.mode = ShieldMode::Auto;
    let mut warm = ShieldState {
        regions: vec![RegionState::default(); 4],
        ..ShieldState::default()
    };
    warm.regions[EU_WEST].hot_since = Some(0);
    warm.regions[EU_WEST].hot = true;
    let later = u64::from(s.steady_ttl) * 1000 + 1000;
    let (state, _) = step(&warm, &held, &rings(), &s, later);
    let total = state.regions[EU_WEST].fraction * state.regions[EU_WEST].natural;
    assert!((total - 425.0).abs() < 1e-6, "{total}");
}

#[test]
fn crosses_continents_only_when_nothing_closer_has_room() {
    let i = inputs(
        &[
            (1000.0, 1000.0),
            (600.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(1900.0, 2000.0), (0.0, 2000.0)],
    );
    let (state, _) = step(&ShieldState::default(), &i, &rings(), &settings(), 1000);
    assert!(placed_at(&state, EU_WEST, Destination::Region(NA_EAST as u16)) > 0.0);
    let mut s = settings();
    s.allow_cross_continent = false;
    let (state, changes) = step(&ShieldState::default(), &i, &rings(), &s, 1000);
    assert_eq!(state.regions[EU_WEST].fraction, 0.0);
    assert_eq!(state.regions[EU_WEST].note, Note::NoHeadroom);
    assert!(changes.is_empty());
}

#[test]
fn a_change_of_direction_waits_for_the_hold_down() {
    let r = rings();
    let s = settings();
    let hot = inputs(
        &[
            (1000.0, 1000.0),
            (100.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    let (state, _) = step(&ShieldState::default(), &hot, &r, &s, 1_000);
    assert!(state.regions[EU_WEST].fraction > 0.0);
    // Load collapses right away: no reversal before the hold-down has passed...
    let cold = inputs(
        &[
            (300.0, 1000.0),
            (100.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    let (held, changes) = step(&state, &cold, &r, &s, 1_000 + s.hold_down_ms - 1);
    assert_eq!(
        held.regions[EU_WEST].fraction,
        state.regions[EU_WEST].fraction
    );
    assert!(changes.is_empty());
    // ...and then it gives traffic back.
    let (released, changes) = step(&held, &cold, &r, &s, 1_000 + s.hold_down_ms);
    assert!(released.regions[EU_WEST].fraction < state.regions[EU_WEST].fraction);
    assert!(changes[0].reason.contains("below low watermark"));
}

#[test]
fn stale_data_freezes_then_reverts() {
    let r = rings();
    let s = settings();
    let hot = inputs(
        &[
            (1000.0, 1000.0),
            (100.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    let (state, _) = step(&ShieldState::default(), &hot, &r, &s, 1_000);
    let before = state.regions[EU_WEST].fraction;
    let mut stale = hot.clone();
    for reading in stale.regions.iter_mut().flatten() {
        reading.age_ms = s.stale_after_ms + 1;
    }
    let (frozen, changes) = step(&state, &stale, &r, &s, 2_000);
    assert_eq!(frozen.regions[EU_WEST].fraction, before);
    assert_eq!(frozen.regions[EU_WEST].note, Note::Stale);
    assert!(changes.is_empty());
    for reading in stale.regions.iter_mut().flatten() {
        reading.age_ms = s.revert_after_ms + 1;
    }
    let (reverting, _) = step(&frozen, &stale, &r, &s, 3_000);
    assert!(reverting.regions[EU_WEST].fraction < before);
    assert_eq!(reverting.regions[EU_WEST].note, Note::Reverting);
    // A missing reading counts as stale too: it keeps decaying to zero.
    let mut missing = stale.clone();
    missing.regions[EU_WEST] = None;
    let mut st = reverting;
    for t in 0..20 {
        st = step(&st, &missing, &r, &s, 4_000 + t * 1000).0;
    }
    assert_eq!(st.regions[EU_WEST].fraction, 0.0);
}

#[test]
fn a_hot_fallback_site_takes_no_more_and_gives_back_its_excess() {
    let r = rings();
    let mut s = settings();
    s.max_step = 1.0;
    s.allow_cross_continent = false;
    // eu-north full; fb-eu has room at first.
    let first = inputs(
        &[
            (1200.0, 1000.0),
            (600.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(100.0, 2000.0), (0.0, 2000.0)],
    );
    let (state, _) = step(&ShieldState::default(), &first, &r, &s, 1_000);
    // Share of eu-west's clients answered with fb-eu.
    let sent = |st: &ShieldState| {
        let w = &st.regions[EU_WEST];
        w.fraction
            * w.shares
                .get(&Destination::Fallback(FB_EU as u16))
                .copied()
                .unwrap_or(0.0)
    };
    let to_site = sent(&state);
    assert!(to_site > 0.0);
    // The feed now says fb-eu is itself hot (its own load grew): send it less, not more.
    let later = inputs(
        &[
            (1200.0, 1000.0),
            (600.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(1900.0, 2000.0), (0.0, 2000.0)],
    );
    let (after, _) = step(&state, &later, &r, &s, 1_000 + 60_000);
    assert!(sent(&after) < to_site, "{} -> {}", to_site, sent(&after));
}

#[test]
fn operator_held_regions_are_left_alone_and_never_destinations() {
    let mut i = inputs(
        &[
            (1000.0, 1000.0),
            (100.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    i.operator_held[EU_NORTH] = true;
    let (state, _) = step(&ShieldState::default(), &i, &rings(), &settings(), 1000);
    assert_eq!(
        placed_at(&state, EU_WEST, Destination::Region(EU_NORTH as u16)),
        0.0
    );
    assert!(placed_at(&state, EU_WEST, Destination::Fallback(FB_EU as u16)) > 0.0);
    i.operator_held[EU_WEST] = true;
    let (state, _) = step(&state, &i, &rings(), &settings(), 2000);
    assert_eq!(state.regions[EU_WEST].fraction, 0.0);
    assert_eq!(state.regions[EU_WEST].note, Note::OperatorHeld);
}

#[test]
fn modes_off_and_frozen() {
    let mut i = inputs(
        &[
            (1000.0, 1000.0),
            (100.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    let (state, _) = step(&ShieldState::default(), &i, &rings(), &settings(), 1000);
    i.mode = ShieldMode::Frozen;
    i.regions[EU_WEST] = reading(1500.0, 1000.0);
    let (frozen, changes) = step(&state, &i, &rings(), &settings(), 2000);
    assert_eq!(frozen, state);
    assert!(changes.is_empty());
    i.mode = ShieldMode::Off;
    let (off, changes) = step(&state, &i, &rings(), &settings(), 3000);
    assert!(off.regions.iter().all(|r| r.fraction == 0.0));
    assert_eq!(changes.len(), 1);
    assert_eq!(
        shed_view(&off, &settings()),
        crate::policy::ShedView::default()
    );
}

#[test]
fn the_view_has_per_mille_fractions_shares_summing_to_1000_and_short_ttl() {
    let i = inputs(
        &[
            (1200.0, 1000.0),
            (450.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(100.0, 2000.0), (0.0, 2000.0)],
    );
    let mut s = settings();
    s.max_step = 1.0;
    let (state, _) = step(&ShieldState::default(), &i, &rings(), &s, 1000);
    let view = shed_view(&state, &s);
    let west = view.region(EU_WEST as u16).expect("eu-west shed");
    assert_eq!(
        west.fraction_permille(),
        (state.regions[EU_WEST].fraction * 1000.0).round() as u16
    );
    let shares: u32 = west
        .destinations()
        .map(|d| u32::from(d.share_permille))
        .sum();
    assert_eq!(shares, 1000);
    assert_eq!(west.hot_ttl(), Some(s.short_ttl));
    assert!(view.region(NA_WEST as u16).is_none());
}

/// A world in which region r's clients bring `demand[r]` load; clients follow the decided
/// placement only as their cached answers expire (linearly over the short TTL).
struct World {
    demand: Vec<f64>,
    capacity: Vec<f64>,
    site_capacity: Vec<f64>,
    site_base: Vec<f64>,
    /// Currently followed placement per source region (load amounts by destination).
    following: Vec<BTreeMap<Destination, f64>>,
    /// The last TTL seconds of decided (fraction × share) per region and destination.
    answered: std::collections::VecDeque<Vec<BTreeMap<Destination, f64>>>,
}

impl World {
    fn readings(&self) -> (Vec<f64>, Vec<f64>) {
        let mut regions: Vec<f64> = self.demand.clone();
        let mut sites = self.site_base.clone();
        for (r, placed) in self.following.iter().enumerate() {
            for (d, amount) in placed {
                regions[r] -= amount;
                match d {
                    Destination::Region(x) => regions[*x as usize] += amount,
                    Destination::Fallback(x) => sites[*x as usize] += amount,
                    Destination::Global => {}
                }
            }
        }
        (regions, sites)
    }

    /// Resolvers re-ask when their cached answer expires, uniformly over the TTL: what clients
    /// follow now is the average of the answers given over the last TTL seconds.
    fn follow(&mut self, state: &ShieldState, ttl_s: usize) {
        let given: Vec<BTreeMap<Destination, f64>> = state
            .regions
            .iter()
            .map(|r| r.shares.iter().map(|(d, s)| (*d, r.fraction * s)).collect())
            .collect();
        self.answered.push_back(given);
        while self.answered.len() > ttl_s {
            self.answered.pop_front();
        }
        for r in 0..self.demand.len() {
            let mut avg: BTreeMap<Destination, f64> = BTreeMap::new();
            for tick in &self.answered {
                for (d, f) in &tick[r] {
                    *avg.entry(*d).or_insert(0.0) += f / ttl_s as f64;
                }
            }
            self.following[r] = avg
                .into_iter()
                .map(|(d, f)| (d, f * self.demand[r]))
                .collect();
        }
    }

    fn inputs(&self) -> Inputs {
        let (regions, sites) = self.readings();
        Inputs {
            regions: regions
                .iter()
                .zip(&self.capacity)
                .map(|(&l, &c)| reading(l, c))
                .collect(),
            sites: sites
                .iter()
                .zip(&self.site_capacity)
                .map(|(&l, &c)| reading(l, c))
                .collect(),
            demand: Vec::new(),
            mode: ShieldMode::Auto,
            operator_held: vec![false; self.demand.len()],
            tenants: Vec::new(),
        }
    }
}

fn world(demand: [f64; 4]) -> World {
    World {
        demand: demand.to_vec(),
        capacity: vec![1000.0, 600.0, 1000.0, 800.0],
        site_capacity: vec![2000.0, 2000.0],
        site_base: vec![200.0, 200.0],
        following: vec![BTreeMap::new(); 4],
        answered: std::collections::VecDeque::new(),
    }
}

#[test]
fn closed_loop_surge_is_relieved_without_overfilling_or_oscillating() {
    let r = rings();
    let s = settings();
    let mut w = world([600.0, 300.0, 500.0, 300.0]);
    let mut state = ShieldState::default();
    let mut fractions = Vec::new();
    let mut worst_destination: f64 = 0.0;
    for t in 0..600u64 {
        // eu-west ramps to 1.6x over two minutes from t=60, stays, then falls back at t=400.
        w.demand[EU_WEST] = match t {
            0..=59 => 600.0,
            60..=179 => 600.0 + 1000.0 * (t - 60) as f64 / 120.0,
            180..=399 => 1600.0,
            _ => 600.0,
        };
        let i = w.inputs();
        state = step(&state, &i, &r, &s, t * 1000).0;
        w.follow(&state, s.short_ttl as usize);
        let (regions, sites) = w.readings();
        for (x, load) in regions.iter().enumerate().filter(|(x, _)| *x != EU_WEST) {
            worst_destination = worst_destination.max(load / w.capacity[x]);
        }
        for (x, load) in sites.iter().enumerate() {
            worst_destination = worst_destination.max(load / w.site_capacity[x]);
        }
        fractions.push(state.regions[EU_WEST].fraction);
    }
    assert!(
        worst_destination <= s.high_watermark + 1e-6,
        "a destination reached {worst_destination}"
    );
    // Direction changes at most once per hold-down window.
    let mut last_dir = 0i8;
    let mut last_flip: Option<usize> = None;
    for (t, pair) in fractions.windows(2).enumerate() {
        let dir = match pair[1].total_cmp(&pair[0]) {
            std::cmp::Ordering::Greater => 1,
            std::cmp::Ordering::Less => -1,
            std::cmp::Ordering::Equal => 0,
        };
        if dir != 0 && last_dir != 0 && dir != last_dir {
            if let Some(prev) = last_flip {
                assert!(
                    (t - prev) as u64 * 1000 >= s.hold_down_ms,
                    "flipped at {prev} and {t}"
                );
            }
            last_flip = Some(t);
        }
        if dir != 0 {
            last_dir = dir;
        }
    }
    // Traffic returns to global anycast once the surge is over.
    assert_eq!(
        *fractions.last().unwrap_or(&1.0),
        0.0,
        "still shedding at the end"
    );
}

/// eu-west (load 700) sheds 20% of its clients (natural 1000 by the last tick) to
/// eu-north, which carries 500: by the bookkeeping 300 of its own plus the 200 placed there.
fn shedding_into_eu_north(demand: Vec<Demand>) -> (ShieldState, Inputs) {
    let mut i = inputs(
        &[
            (700.0, 1000.0),
            (500.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    i.demand = demand.clone();
    let mut state = ShieldState {
        demand,
        demand_age_ms: u64::from(settings().steady_ttl) * 1000,
        last_tick_ms: Some(0),
        regions: vec![RegionState::default(); 4],
        ..ShieldState::default()
    };
    let west = &mut state.regions[EU_WEST];
    west.fraction = 0.2;
    west.natural = 1000.0;
    west.shares
        .insert(Destination::Region(EU_NORTH as u16), 1.0);
    (state, i)
}

/// Answer counts in which eu-north's own clients hold `own` and eu-west's shed clients
/// `shed_in` of the answers landing in eu-north.
fn north_counts(own: f64, shed_in: f64) -> Vec<Demand> {
    let mut west = Demand {
        kept: 700.0,
        ..Demand::default()
    };
    west.sent
        .insert(Destination::Region(EU_NORTH as u16), shed_in);
    let north = Demand {
        kept: own,
        sent: BTreeMap::new(),
    };
    vec![west, north, Demand::default(), Demand::default()]
}

#[test]
fn demand_counters_separate_own_clients_from_shed_in_traffic() {
    // Counts that have not yet covered a normal TTL are not trusted: with no bookkeeping of
    // shed-in traffic, eu-north's whole load counts as its own.
    let mut young = inputs(
        &[
            (700.0, 1000.0),
            (500.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    young.demand = north_counts(300.0, 200.0);
    let (state, _) = step(&ShieldState::default(), &young, &rings(), &settings(), 1000);
    assert!((state.regions[EU_NORTH].natural - 500.0).abs() < 1e-6);
    // Mature counts (a normal TTL's worth, smoothed) split the load where the bookkeeping
    // is wrong: 250 shed in (the bookkeeping says 200), so 250 are eu-north's own.
    let (mature, i) = shedding_into_eu_north(north_counts(250.0, 250.0));
    let (state, _) = step(&mature, &i, &rings(), &settings(), 1000);
    let north = state.regions[EU_NORTH].natural;
    assert!((north - 250.0).abs() < 1e-6, "{north}");
}

/// A flood of queries with chosen ECS subnets makes the counters say what the attacker
/// likes; the estimate moves no further than the bookkeeping allows (a factor of
/// [`DEMAND_TRUST`] on the load shed in).
#[test]
fn poisoned_demand_counts_are_bounded_by_the_bookkeeping() {
    // "eu-north has no clients of its own": 200 placed in, so at most 400 of 500 shed in.
    let (state, i) = shedding_into_eu_north(north_counts(0.0, 10_000.0));
    let (next, _) = step(&state, &i, &rings(), &settings(), 1000);
    let north = next.regions[EU_NORTH].natural;
    assert!((north - 100.0).abs() < 1e-6, "looks empty: {north}");
    // "eu-north's load is all its own": at least 100 of the 200 placed in are not.
    let (state, i) = shedding_into_eu_north(north_counts(10_000.0, 0.0));
    let (next, _) = step(&state, &i, &rings(), &settings(), 1000);
    let north = next.regions[EU_NORTH].natural;
    assert!((north - 400.0).abs() < 1e-6, "looks overfull: {north}");
    // Nothing placed into a region: its load is its own, whatever the counts say.
    assert_eq!(bounded_own_share(0.0, 0.0, 500.0), 1.0);
    assert_eq!(bounded_own_share(0.3, 0.0, 500.0), 1.0);
    assert_eq!(bounded_own_share(0.5, 100.0, 0.0), 1.0);
    assert_eq!(bounded_own_share(0.5, 400.0, 500.0), 0.5);
    assert_eq!(bounded_own_share(0.0, 400.0, 500.0), 0.0);
}

#[test]
fn giving_back_in_steps_returns_exactly_to_zero() {
    // 0.1 + 0.1 + 0.1 - 0.1 - 0.1 - 0.1 is not 0.0 in floating point: the step must still end
    // at exactly 0, normal, not hot (or clients would keep the short TTL forever).
    let r = rings();
    let mut s = settings();
    s.hold_down_ms = 0;
    s.steady_ttl = s.short_ttl;
    let hot = inputs(
        &[
            (1000.0, 1000.0),
            (100.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    let mut state = ShieldState::default();
    for t in 1..=3 {
        state = step(&state, &hot, &r, &s, t * 1000).0;
    }
    assert!(
        state.regions[EU_WEST].fraction > 0.15,
        "{}",
        state.regions[EU_WEST].fraction
    );
    let cold = inputs(
        &[
            (200.0, 1000.0),
            (100.0, 600.0),
            (100.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    for t in 4..=20 {
        state = step(&state, &cold, &r, &s, t * 1000).0;
    }
    let west = &state.regions[EU_WEST];
    assert_eq!(west.fraction, 0.0);
    assert_eq!(west.note, Note::Normal);
    assert!(!west.hot);
    assert!(shed_view(&state, &s).region(EU_WEST as u16).is_none());
}

/// Readings near `f64::MAX` (which the feed now refuses) overflowed the step's sums into
/// infinity and NaN, and the state kept them: shedding stayed off for good. The checked step
/// the live loop runs repairs the state, says so, and sheds again once the readings are sane.
#[test]
fn non_finite_state_is_repaired_and_reported_not_kept() {
    let huge = inputs(
        &[
            (1.7e308, 1.7e308),
            (1.0e308, 1.7e308),
            (1.7e308, 1.7e308),
            (1.0e308, 1.7e308),
        ],
        &[(1.0e308, 1.7e308), (1.0e308, 1.7e308)],
    );
    let hot = inputs(
        &[
            (1000.0, 1000.0),
            (100.0, 600.0),
            (500.0, 1000.0),
            (100.0, 800.0),
        ],
        &[(0.0, 2000.0), (0.0, 2000.0)],
    );
    let s = settings();
    let mut poisoned = ShieldState::default();
    for t in 1..=3 {
        poisoned = step(&poisoned, &huge, &rings(), &s, t * 1000).0;
    }
    // Unchecked, eu-west never sheds again however long it stays overloaded.
    let mut state = poisoned.clone();
    for t in 4..=40 {
        state = step(&state, &hot, &rings(), &s, t * 1000).0;
        assert_eq!(state.regions[EU_WEST].fraction, 0.0, "tick {t}: {state:?}");
    }
    let (state, changes, repairs) = checked_step(&poisoned, &hot, &rings(), &s, 4000);
    assert!(!repairs.is_empty());
    assert!(
        repairs.iter().any(|r| r.starts_with("eu-west: ")),
        "{repairs:?}"
    );
    assert!(
        state.regions[EU_WEST].fraction > 0.0,
        "{:?}",
        state.regions[EU_WEST]
    );
    assert!(!changes.is_empty());
    let (_, _, again) = checked_step(&state, &hot, &rings(), &s, 5000);
    assert!(again.is_empty(), "repaired once, clean after: {again:?}");
}

#[test]
fn repair_names_what_it_fixed() {
    let mut broken = ShieldState {
        regions: vec![RegionState {
            natural: f64::INFINITY,
            hot: true,
            fraction: 0.3,
            ..RegionState::default()
        }],
        moves: vec![Move {
            from: 1,
            to: Destination::Region(0),
            amount: f64::NAN,
            at: 0,
            fast_share: 1.0,
            slow_until: 0,
        }],
        ..ShieldState::default()
    };
    let repairs = repair(&mut broken, &rings());
    assert_eq!(
        repairs,
        vec![
            "eu-west: natural load not finite: reset to normal answers",
            "1 move(s) in flight dropped (not finite, or from a reset region)",
        ]
    );
    assert_eq!(broken.regions[EU_WEST].fraction, 0.0);
    assert!(broken.regions[EU_WEST].hot, "keeps the short TTL");
    assert!(broken.moves.is_empty());
}

/// A shed taken back before its slow part landed: the clients still holding normal answers
/// never moved, and now never will. The step used to keep expecting them to leave (the
/// positive move's slow part stayed "unseen" for a normal TTL) while counting the take-back as
/// landed within the short TTL, so it predicted the region far below its reading and a
/// returning overload went unanswered for minutes (shield_e2e `control_file_shield_off_and_
/// frozen`, intermittently "hot with 0 shed").
#[test]
fn a_shed_taken_back_early_does_not_hide_a_returning_overload() {
    let r = rings();
    let mut s = settings();
    s.hold_down_ms = 1000;
    let load = |west: f64| {
        inputs(
            &[
                (west, 1000.0),
                (200.0, 600.0),
                (500.0, 1000.0),
                (400.0, 800.0),
            ],
            &[(100.0, 2000.0), (1000.0, 2000.0)],
        )
    };
    let mut state = ShieldState::default();
    let mut now = 0;
    let mut run = |state: &mut ShieldState, west: f64, ticks: u64| {
        for _ in 0..ticks {
            now += 100;
            *state = step(state, &load(west), &r, &s, now).0;
        }
    };
    run(&mut state, 990.0, 5);
    assert!(
        state.regions[EU_WEST].fraction > 0.2,
        "{:?}",
        state.regions[EU_WEST]
    );
    run(&mut state, 500.0, 30);
    assert_eq!(state.regions[EU_WEST].fraction, 0.0, "relief taken back");
    // The reading is the truth again: nothing in flight can relieve the region.
    run(&mut state, 990.0, 15);
    let west = &state.regions[EU_WEST];
    assert!(
        west.fraction > 0.0,
        "overload 1.5 s after the hold-down, predicted utilisation {:.2}: {west:?}",
        west.predicted_utilisation
    );
}

/// Every state the step makes on the way up and back down (moves back carry negative
/// amounts, shares are float sums) passes fleet mode's checks and reads back unchanged: a
/// leader never publishes a state its followers would refuse.
#[test]
fn every_state_of_a_surge_and_its_relief_survives_the_fleet_wire() {
    let rings = rings();
    let settings = ShieldSettings {
        steady_ttl: 60,
        hold_down_ms: 0,
        ..settings()
    };
    let mut state = ShieldState::default();
    let mut now_ms = 1_700_000_000_000u64;
    let mut shed_then_relieved = (false, false);
    for t in 0..240 {
        let eu_west = if t < 120 { 990.0 } else { 300.0 };
        let mut inputs = inputs(
            &[
                (eu_west, 1000.0),
                (200.0, 600.0),
                (400.0, 1000.0),
                (300.0, 800.0),
            ],
            &[(100.0, 2000.0), (500.0, 2000.0)],
        );
        inputs.demand = vec![
            Demand {
                kept: 10.0,
                sent: BTreeMap::from([(Destination::Region(EU_NORTH as u16), 2.5)]),
            };
            4
        ];
        let (next, _) = step(&state, &inputs, &rings, &settings, now_ms);
        state = next;
        now_ms += 1000;
        let wire = super::wire::encode_state(&state, &rings);
        let bytes = serde_json::to_vec(&wire).unwrap_or_default();
        let read: super::wire::WireState =
            super::wire::decode(&bytes).unwrap_or_else(|e| panic!("tick {t}: {e}"));
        let back =
            super::wire::decode_state(&read, &rings, super::wire::Clock::new(now_ms, &settings))
                .unwrap_or_else(|e| panic!("tick {t}: {e}\n{state:#?}"));
        assert_eq!(back, state, "tick {t}");
        shed_then_relieved.0 |= state.regions[EU_WEST].fraction > 0.0;
        shed_then_relieved.1 |= shed_then_relieved.0 && state.moves.iter().any(|m| m.amount < 0.0);
    }
    assert_eq!(
        shed_then_relieved,
        (true, true),
        "the run sheds and moves back"
    );
}
