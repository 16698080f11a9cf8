//! The shield's decision step: a pure function of the previous state, this tick's inputs, the
//! topology, the settings and the time (passed in). No I/O, no clock, no randomness, so it is
//! unit-tested and simulated exactly as it runs.
//!
//! Model. A region's observed load is what its own (un-shed) clients bring plus what other
//! regions shed into it. Its *natural* load N is what it would carry with no shedding. Shedding
//! a fraction f of its client subnets moves f·N elsewhere — but not at once: resolvers follow a
//! new answer only when their cached one expires, so a move made at time t shows up linearly
//! over the next short TTL. The step predicts loads by adding those in-flight moves to the
//! (lagging) observations, and decides on the prediction:
//! - above the high watermark: raise f to bring the region to the target (midway between the
//!   watermarks), by at most `max_step` per tick;
//! - below the low watermark: lower f toward the target, also capped by `max_step`;
//! - a change of direction waits for the hold-down;
//! - shed load goes to destinations in tiers — same-continent neighbours, same-continent
//!   fallback sites, then (if allowed) other continents — split by headroom, never beyond a
//!   destination's predicted headroom below its own high watermark; what does not fit is not
//!   shed, and the region is flagged;
//! - stale data freezes a region; data stale for longer decays its shedding back to zero.

use std::collections::BTreeMap;

pub mod cells;
mod tenant;

pub use tenant::{TenantLoad, TenantShed};

use crate::policy::ShieldMode;
use crate::policy::{Destination, RegionShed, ShedShare, ShedView, MAX_SHED_DESTINATIONS};

/// Knobs of the decision step (config `[shield]`, converted in [`super::config`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ShieldSettings {
    pub high_watermark: f64,
    pub low_watermark: f64,
    /// Largest change of a region's shed fraction per tick.
    pub max_step: f64,
    /// Wait this long (ms) after a move before moving the other way.
    pub hold_down_ms: u64,
    /// TTL for a hot region's clients (s): once they all hold it, a move lands within it.
    pub short_ttl: u32,
    /// TTL of normal answers (s): clients that got one before their region turned hot move
    /// only when it expires.
    pub steady_ttl: u32,
    /// Data older than this (ms) freezes a region's decisions.
    pub stale_after_ms: u64,
    /// Data older than this (ms) decays a region's shedding back to normal answers.
    pub revert_after_ms: u64,
    pub allow_cross_continent: bool,
    /// Tenant-first shedding: the share of a hot region's load one tenant may bring before it
    /// is shed alone, ahead of the region (`step::tenant`).
    pub tenant_share: f64,
    /// Most cells that go hot (out of tenants' answers for their load) in one tick, hottest
    /// first (`step::cells`): a feed that says many cells are hot at once moves tenants' answers
    /// a few cells at a time, as `max_step` paces a region.
    pub max_hot_cells_per_tick: usize,
}

impl ShieldSettings {
    fn target(&self) -> f64 {
        (self.high_watermark + self.low_watermark) / 2.0
    }
}

/// What the step needs to know about the rings (built once per snapshot from the policies).
#[derive(Debug, Clone, Default)]
pub struct Rings {
    pub regions: Vec<RingNode>,
    pub sites: Vec<RingNode>,
}

#[derive(Debug, Clone)]
pub struct RingNode {
    pub name: String,
    pub continent: String,
    /// Ordered neighbours (region indices); empty for fallback sites.
    pub neighbours: Vec<u16>,
}

/// One load reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    pub load: f64,
    pub capacity: f64,
    /// Age of the reading at this tick, ms.
    pub age_ms: u64,
}

/// DNS answers given to one client region since the last tick, by where they sent it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Demand {
    /// Answers that kept the client on global anycast (it lands in its own region).
    pub kept: f64,
    /// Answers sent to each destination.
    pub sent: BTreeMap<Destination, f64>,
}

/// Everything one tick looks at.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub regions: Vec<Option<Reading>>,
    pub sites: Vec<Option<Reading>>,
    /// Per client region (may be empty: then the step relies on its own bookkeeping).
    pub demand: Vec<Demand>,
    pub mode: ShieldMode,
    /// Regions the operator forced or drained: the shield leaves them alone and never sheds
    /// into them.
    pub operator_held: Vec<bool>,
    /// Per-tenant load by client region, for tenant-first shedding (`step::tenant`).
    pub tenants: Vec<TenantLoad>,
}

/// Why a region is in the state it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    Normal,
    Shedding,
    /// Needs to shed more but no destination has headroom.
    NoHeadroom,
    /// Data is stale: decisions frozen.
    Stale,
    /// Data stale for long: decaying back to normal answers.
    Reverting,
    /// Forced or drained by the operator.
    OperatorHeld,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RegionState {
    /// Share of the region's client subnets sent elsewhere, 0..=1.
    pub fraction: f64,
    /// Where the shed share goes: proportions per destination, summing to 1 while shedding.
    pub shares: BTreeMap<Destination, f64>,
    /// Last direction moved (+1 up, -1 down, 0 never) and when (ms).
    pub last_direction: i8,
    pub last_move_at: u64,
    /// Estimated load with no shedding.
    pub natural: f64,
    /// How fast the natural load grows (per second, smoothed): used to keep destinations
    /// below their watermark for the TTL it takes a correction to land.
    pub trend: f64,
    /// Predicted utilisation at this tick.
    pub predicted_utilisation: f64,
    pub hot: bool,
    /// Since when (ms) the region's clients have been given the short TTL.
    pub hot_since: Option<u64>,
    pub note: Note,
}

impl Default for RegionState {
    fn default() -> Self {
        RegionState {
            fraction: 0.0,
            shares: BTreeMap::new(),
            last_direction: 0,
            last_move_at: 0,
            natural: 0.0,
            trend: 0.0,
            predicted_utilisation: 0.0,
            hot: false,
            hot_since: None,
            note: Note::Normal,
        }
    }
}

/// A load move not yet fully visible in readings: `amount` started moving at `at` (ms) from
/// region `from` to `to`. Resolvers follow a new answer when their cached one expires, so a
/// move lands in two parts: `fast_share` of it (clients already holding the short TTL) linearly
/// over the short TTL, the rest (clients still holding a normal answer) linearly until
/// `slow_until`, when the last normal answer given before the region turned hot expires.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Move {
    pub from: u16,
    pub to: Destination,
    pub amount: f64,
    pub at: u64,
    pub fast_share: f64,
    pub slow_until: u64,
}

impl Move {
    /// The part of the move not yet visible at `now_ms`.
    fn unseen(&self, now_ms: u64, short_ms: u64) -> f64 {
        let elapsed = now_ms.saturating_sub(self.at) as f64;
        let fast = (1.0 - elapsed / short_ms.max(1) as f64).max(0.0);
        let slow = if self.slow_until > self.at {
            (self.slow_until.saturating_sub(now_ms) as f64 / (self.slow_until - self.at) as f64)
                .clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.amount * (self.fast_share * fast + (1.0 - self.fast_share) * slow)
    }

    fn landed(&self, now_ms: u64, short_ms: u64) -> bool {
        now_ms >= (self.at + short_ms).max(self.slow_until)
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShieldState {
    pub regions: Vec<RegionState>,
    pub moves: Vec<Move>,
    /// Predicted utilisation of each fallback site.
    pub site_utilisation: Vec<f64>,
    /// When the previous tick ran (ms).
    pub last_tick_ms: Option<u64>,
    /// Answer counts (TTL-weighted: clients holding each kind of answer, by Little's law)
    /// smoothed over a normal TTL, and for how long (ms) they have been accumulating.
    pub demand: Vec<Demand>,
    pub demand_age_ms: u64,
    /// Tenants shed on their own (tenant-first), sorted by tenant then region, each with its
    /// moves still in flight (kept apart from the regions' own, which they settle against).
    pub tenants: Vec<TenantShed>,
}

impl ShieldState {
    /// Every move in flight: the regions' and the tenants'.
    fn all_moves(&self) -> impl Iterator<Item = &Move> + '_ {
        self.moves
            .iter()
            .chain(self.tenants.iter().flat_map(|t| &t.moves))
    }
}

/// One decision that changed, for logs and status.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub region: u16,
    /// A tenant's own shed in the region (tenant-first), not the region's.
    pub tenant: Option<String>,
    pub from: f64,
    pub to: f64,
    pub reason: String,
}

/// Destination key for a region or site.
fn region_dest(i: usize) -> Destination {
    Destination::Region(i as u16)
}

fn site_dest(i: usize) -> Destination {
    Destination::Fallback(i as u16)
}

/// What every decision of one tick reads and none changes: the topology, the settings, the
/// loads predicted at the start of the tick, and the time. Borrowed, so regions are decided
/// against the same prediction, whatever the regions decided before them placed.
struct Tick<'a> {
    rings: &'a Rings,
    settings: &'a ShieldSettings,
    predicted: &'a Prediction,
    now_ms: u64,
    /// Per region: a tenant there is still being shed first, so the region sheds no more.
    tenant_first: &'a [bool],
}

/// Runs one tick.
pub fn step(
    previous: &ShieldState,
    inputs: &Inputs,
    rings: &Rings,
    settings: &ShieldSettings,
    now_ms: u64,
) -> (ShieldState, Vec<Change>) {
    if let Some(outcome) = outside_auto(previous, inputs.mode) {
        return outcome;
    }
    let mut state = carried_over(previous, rings, settings, now_ms);
    let (first, mut changes) = shed_tenants_first(&mut state, inputs, rings, settings, now_ms);
    // Predicted again: the loads the regions decide on include what the tenants just moved.
    let predicted = Prediction::new(&state, inputs, rings, settings, now_ms);
    let tenant_first = regions_left_to_tenants(&first, &predicted, settings);
    let elapsed_ms = previous.last_tick_ms.map(|t| now_ms.saturating_sub(t));
    smooth_demand(&mut state, inputs, settings, elapsed_ms.unwrap_or(0));
    estimate_natural(&mut state, &predicted, settings, elapsed_ms);
    state.last_tick_ms = Some(now_ms);
    let tick = Tick {
        rings,
        settings,
        predicted: &predicted,
        now_ms,
        tenant_first: &tenant_first,
    };
    let mut room = predicted.headroom(&state, rings, settings);
    let closed = closed_regions(&state, inputs, &tick);
    close_to_shed_load(&mut state, &closed, &mut room);
    changes.extend(decide_regions(&mut state, inputs, &tick, &mut room));
    for (i, u) in predicted.site_util.iter().enumerate() {
        state.site_utilisation[i] = *u;
    }
    (state, changes)
}

/// The tenants' own sheds, decided before the regions' on the loads predicted at the start of
/// the tick, into the room left by destinations that are not closed; returns, per region,
/// whether a tenant there is still being shed first, and the changes.
fn shed_tenants_first(
    state: &mut ShieldState,
    inputs: &Inputs,
    rings: &Rings,
    settings: &ShieldSettings,
    now_ms: u64,
) -> (tenant::TenantFirst, Vec<Change>) {
    if inputs.tenants.is_empty() && state.tenants.is_empty() {
        let none = vec![false; rings.regions.len()];
        let first = tenant::TenantFirst {
            changes: Vec::new(),
            lever_left: none.clone(),
            active: none,
        };
        return (first, Vec::new());
    }
    let predicted = Prediction::new(state, inputs, rings, settings, now_ms);
    let tick = Tick {
        rings,
        settings,
        predicted: &predicted,
        now_ms,
        tenant_first: &[],
    };
    let mut room = predicted.headroom(state, rings, settings);
    for (r, closed) in closed_regions(state, inputs, &tick).iter().enumerate() {
        if *closed {
            room.remove(&region_dest(r));
        }
    }
    let mut decided = tenant::decide_tenants(state, inputs, &tick, &mut room);
    let changes = std::mem::take(&mut decided.changes);
    (decided, changes)
}

/// Per region: whether its tenants' own sheds are still what relieves it, so that it sheds no
/// more itself (see [`tenant`]): a tenant there can be shed more, or one is shed and the region
/// is predicted under its high watermark once every move in flight has landed.
fn regions_left_to_tenants(
    first: &tenant::TenantFirst,
    predicted: &Prediction,
    settings: &ShieldSettings,
) -> Vec<bool> {
    (0..first.lever_left.len())
        .map(|r| {
            let relieved = predicted.region_util[r] <= settings.high_watermark;
            first.lever_left[r] || (first.active[r] && relieved)
        })
        .collect()
}

/// The outcome of a tick outside automatic mode, if the mode says so: off drops every
/// decision (each region shedding goes back to normal answers, logged as a change); frozen
/// keeps the state exactly as it is, moves in flight and all.
fn outside_auto(previous: &ShieldState, mode: ShieldMode) -> Option<(ShieldState, Vec<Change>)> {
    match mode {
        ShieldMode::Off => {
            let changes = previous
                .regions
                .iter()
                .enumerate()
                .filter(|(_, r)| r.fraction > 0.0)
                .map(|(i, r)| Change {
                    region: i as u16,
                    tenant: None,
                    from: r.fraction,
                    to: 0.0,
                    reason: "shield off".into(),
                })
                .chain(
                    previous
                        .tenants
                        .iter()
                        .filter(|t| t.fraction > 0.0)
                        .map(|t| Change {
                            region: t.region,
                            tenant: Some(t.tenant.clone()),
                            from: t.fraction,
                            to: 0.0,
                            reason: "shield off".into(),
                        }),
                )
                .collect();
            Some((ShieldState::default(), changes))
        }
        ShieldMode::Frozen => Some((previous.clone(), Vec::new())),
        ShieldMode::Auto => None,
    }
}

/// The previous state as this tick starts from it: one entry per region and site of the
/// current rings (a region new to the rings starts from normal answers), and only the moves
/// still in flight (those that have fully landed are visible in the readings).
fn carried_over(
    previous: &ShieldState,
    rings: &Rings,
    settings: &ShieldSettings,
    now_ms: u64,
) -> ShieldState {
    let mut state = previous.clone();
    state
        .regions
        .resize(rings.regions.len(), RegionState::default());
    state.site_utilisation.resize(rings.sites.len(), 0.0);
    let short_ms = u64::from(settings.short_ttl) * 1000;
    state.moves.retain(|m| !m.landed(now_ms, short_ms));
    for tenant in state.tenants.iter_mut() {
        tenant.moves.retain(|m| !m.landed(now_ms, short_ms));
    }
    state
}

/// The regions that take no shed load this tick: held by the operator, already shedding, or
/// about to (over the high watermark one short TTL ahead): nothing may be shed into a region
/// that sheds.
fn closed_regions(state: &ShieldState, inputs: &Inputs, tick: &Tick) -> Vec<bool> {
    (0..tick.rings.regions.len())
        .map(|r| {
            inputs.operator_held.get(r).copied().unwrap_or(false)
                || state.regions[r].fraction > 0.0
                || tick.predicted.region_util_soon[r] > tick.settings.high_watermark
        })
        .collect()
}

/// Closes the `closed` regions: they offer no room, and whatever other regions placed there
/// is taken out of their shares (the rest rescaled to sum to 1), so that their decision this
/// tick places it again elsewhere.
fn close_to_shed_load(
    state: &mut ShieldState,
    closed: &[bool],
    room: &mut BTreeMap<Destination, f64>,
) {
    for (r, closed) in closed.iter().enumerate() {
        if *closed {
            room.remove(&region_dest(r));
        }
    }
    for region in state.regions.iter_mut() {
        let before = region.shares.len();
        region.shares.retain(|d, _| match d {
            Destination::Region(i) => !closed.get(*i as usize).copied().unwrap_or(false),
            _ => true,
        });
        if region.shares.len() != before {
            let sum: f64 = region.shares.values().sum();
            for share in region.shares.values_mut() {
                *share /= sum.max(f64::MIN_POSITIVE);
            }
        }
    }
}

/// Decides every region, the most loaded first (they get first pick of headroom, as `room`
/// is shared), and returns the fractions that changed, with why.
fn decide_regions(
    state: &mut ShieldState,
    inputs: &Inputs,
    tick: &Tick,
    room: &mut BTreeMap<Destination, f64>,
) -> Vec<Change> {
    let util = &tick.predicted.region_util;
    let mut order: Vec<usize> = (0..tick.rings.regions.len()).collect();
    order.sort_by(|&a, &b| util[b].total_cmp(&util[a]));
    let mut changes = Vec::new();
    for r in order {
        let before = state.regions[r].fraction;
        let reason = decide_region(state, r, inputs, tick, room);
        let after = state.regions[r].fraction;
        if (after - before).abs() > 1e-9 {
            changes.push(Change {
                region: r as u16,
                tenant: None,
                from: before,
                to: after,
                reason,
            });
        }
    }
    changes
}

/// [`step`] with the state checked on the way in and out: any non-finite number (which would
/// make every comparison false and silently stop shedding for good) is repaired — the region
/// it belongs to starts over from normal answers, a bad move or demand figure is dropped — and
/// each repair is described, for an alert. Inputs are bounded by the feed checks, so a repair
/// means a bug; the live loop must still never stay broken until a restart.
pub fn checked_step(
    previous: &ShieldState,
    inputs: &Inputs,
    rings: &Rings,
    settings: &ShieldSettings,
    now_ms: u64,
) -> (ShieldState, Vec<Change>, Vec<String>) {
    let mut repaired = previous.clone();
    let mut repairs = repair(&mut repaired, rings);
    let (mut next, changes) = step(&repaired, inputs, rings, settings, now_ms);
    repairs.extend(repair(&mut next, rings));
    (next, changes, repairs)
}

/// Replaces every non-finite number in `state` (see [`checked_step`]); returns what it fixed.
pub fn repair(state: &mut ShieldState, rings: &Rings) -> Vec<String> {
    let mut repairs = Vec::new();
    let reset = reset_broken_regions(&mut state.regions, rings, &mut repairs);
    drop_broken_moves(&mut state.moves, &reset, &mut repairs);
    zero_broken_site_utilisation(&mut state.site_utilisation, rings, &mut repairs);
    restart_broken_demand(state, &mut repairs);
    drop_broken_tenant_sheds(state, &mut repairs);
    repairs
}

/// Drops every tenant shed with a non-finite number (its clients go back to the region's
/// answer) and the tenant moves that are not finite.
fn drop_broken_tenant_sheds(state: &mut ShieldState, repairs: &mut Vec<String>) {
    let finite = |t: &TenantShed| {
        [t.fraction, t.load, t.share].iter().all(|v| v.is_finite())
            && t.shares.values().all(|v| v.is_finite())
            && t.moves
                .iter()
                .all(|m| m.amount.is_finite() && m.fast_share.is_finite())
    };
    for broken in state.tenants.iter().filter(|t| !finite(t)) {
        repairs.push(format!(
            "tenant {} in region {}: not finite: its own shed dropped",
            broken.tenant, broken.region
        ));
    }
    state.tenants.retain(finite);
}

/// Starts every region with a non-finite number over from normal answers (keeping its TTL
/// state: whether its clients hold the short TTL is a fact, not a decision); returns them.
fn reset_broken_regions(
    regions: &mut [RegionState],
    rings: &Rings,
    repairs: &mut Vec<String>,
) -> Vec<u16> {
    let name = |r: usize| rings.regions.get(r).map_or("?", |n| n.name.as_str());
    let mut reset = Vec::new();
    for (r, region) in regions.iter_mut().enumerate() {
        let bad = non_finite_fields(region);
        if !bad.is_empty() {
            repairs.push(format!(
                "{}: {} not finite: reset to normal answers",
                name(r),
                bad.join(", ")
            ));
            *region = RegionState {
                hot: region.hot,
                hot_since: region.hot_since,
                ..RegionState::default()
            };
            reset.push(r as u16);
        }
    }
    reset
}

/// What in `region` is not a finite number, named for the repair report.
fn non_finite_fields(region: &RegionState) -> Vec<&'static str> {
    let numbers = [
        ("fraction", region.fraction),
        ("natural load", region.natural),
        ("trend", region.trend),
        ("predicted utilisation", region.predicted_utilisation),
    ];
    numbers
        .iter()
        .filter(|(_, v)| !v.is_finite())
        .map(|(what, _)| *what)
        .chain(
            region
                .shares
                .values()
                .any(|v| !v.is_finite())
                .then_some("destination shares"),
        )
        .collect()
}

/// Drops the moves in flight with a non-finite number, and those of a region just `reset`:
/// they belong to a decision it no longer has.
fn drop_broken_moves(moves: &mut Vec<Move>, reset: &[u16], repairs: &mut Vec<String>) {
    let before = moves.len();
    moves.retain(|m| m.amount.is_finite() && m.fast_share.is_finite() && !reset.contains(&m.from));
    if moves.len() != before {
        repairs.push(format!(
            "{} move(s) in flight dropped (not finite, or from a reset region)",
            before - moves.len()
        ));
    }
}

/// Sets a non-finite site utilisation to 0: it is a prediction, made again next tick.
fn zero_broken_site_utilisation(
    site_utilisation: &mut [f64],
    rings: &Rings,
    repairs: &mut Vec<String>,
) {
    for (i, u) in site_utilisation.iter_mut().enumerate() {
        if !u.is_finite() {
            let site = rings.sites.get(i).map_or("?", |n| n.name.as_str());
            repairs.push(format!(
                "{site}: predicted utilisation not finite: reset to 0"
            ));
            *u = 0.0;
        }
    }
}

/// Starts the smoothed demand over if any figure in it is not finite: it is one average, so
/// one bad figure spoils the shares computed from all of them.
fn restart_broken_demand(state: &mut ShieldState, repairs: &mut Vec<String>) {
    let demand_ok = state
        .demand
        .iter()
        .all(|d| d.kept.is_finite() && d.sent.values().all(|v| v.is_finite()));
    if !demand_ok {
        repairs.push("demand estimate not finite: started over".to_string());
        state.demand.clear();
        state.demand_age_ms = 0;
    }
}

/// Loads as they will be once the moves in flight have landed.
struct Prediction {
    region_load: Vec<Option<f64>>,
    region_capacity: Vec<f64>,
    /// Utilisation once every move in flight has landed (what destinations must allow for).
    region_util: Vec<f64>,
    /// Utilisation one short TTL from now (what a shedding region steers on: moves that land
    /// later cannot relieve it sooner).
    region_util_soon: Vec<f64>,
    /// Utilisation as measured (the reading alone), for decision reasons.
    region_util_measured: Vec<Option<f64>>,
    site_load: Vec<Option<f64>>,
    site_capacity: Vec<f64>,
    site_util: Vec<f64>,
    region_age: Vec<Option<u64>>,
    site_fresh: Vec<bool>,
}

impl Prediction {
    fn new(
        state: &ShieldState,
        inputs: &Inputs,
        rings: &Rings,
        settings: &ShieldSettings,
        now_ms: u64,
    ) -> Self {
        let (regions, sites) = (rings.regions.len(), rings.sites.len());
        let short_ms = u64::from(settings.short_ttl) * 1000;
        // What lands within the next short TTL: the horizon a source region is steered on.
        // Only regions steer, so sites are left out of it.
        let mut region_load_soon = measured_loads(&inputs.regions, regions);
        shift_by_moves(
            state.all_moves(),
            |m| m.unseen(now_ms, short_ms) - m.unseen(now_ms + short_ms, short_ms),
            &mut region_load_soon,
            &mut [],
        );
        let mut region_load = measured_loads(&inputs.regions, regions);
        let mut site_load = measured_loads(&inputs.sites, sites);
        shift_by_moves(
            state.all_moves(),
            |m| m.unseen(now_ms, short_ms),
            &mut region_load,
            &mut site_load,
        );
        let region_capacity = capacities(&inputs.regions, regions);
        let site_capacity = capacities(&inputs.sites, sites);
        Prediction {
            region_util: utilisations(&region_load, &region_capacity),
            region_util_soon: utilisations(&region_load_soon, &region_capacity),
            site_util: utilisations(&site_load, &site_capacity),
            region_util_measured: measured_utilisations(&inputs.regions, regions),
            region_age: ages(&inputs.regions, regions),
            site_fresh: fresh(&inputs.sites, sites, settings.stale_after_ms),
            region_load,
            region_capacity,
            site_load,
            site_capacity,
        }
    }

    /// How much more load each destination can take before its high watermark, allowing for
    /// the growth expected before a correction could land (one short TTL of each source's trend).
    fn headroom(
        &self,
        state: &ShieldState,
        rings: &Rings,
        settings: &ShieldSettings,
    ) -> BTreeMap<Destination, f64> {
        let horizon_s = f64::from(settings.short_ttl);
        let mut growth: BTreeMap<Destination, f64> = BTreeMap::new();
        for (i, region) in state.regions.iter().enumerate() {
            let rising = region.trend.max(0.0) * horizon_s;
            *growth.entry(region_dest(i)).or_insert(0.0) += rising * (1.0 - region.fraction);
            for (dest, share) in &region.shares {
                *growth.entry(*dest).or_insert(0.0) += rising * region.fraction * share;
            }
        }
        let projected =
            |dest: Destination, load: f64| load + growth.get(&dest).copied().unwrap_or(0.0);
        let mut room = BTreeMap::new();
        for i in 0..rings.regions.len() {
            let fresh = self.region_age[i].is_some_and(|a| a < settings.stale_after_ms);
            if let (Some(load), true) = (self.region_load[i], fresh) {
                let d = region_dest(i);
                room.insert(
                    d,
                    settings.high_watermark * self.region_capacity[i] - projected(d, load),
                );
            }
        }
        for i in 0..rings.sites.len() {
            if let (Some(load), true) = (self.site_load[i], self.site_fresh[i]) {
                let d = site_dest(i);
                room.insert(
                    d,
                    settings.high_watermark * self.site_capacity[i] - projected(d, load),
                );
            }
        }
        room
    }
}

/// The reading of ring member `i`, if there is one.
fn reading_at(readings: &[Option<Reading>], i: usize) -> Option<Reading> {
    readings.get(i).copied().flatten()
}

/// The `n` loads as read (none where there is no reading).
fn measured_loads(readings: &[Option<Reading>], n: usize) -> Vec<Option<f64>> {
    (0..n)
        .map(|i| reading_at(readings, i).map(|r| r.load))
        .collect()
}

/// The `n` capacities as read (0 where there is no reading: no utilisation can be told).
fn capacities(readings: &[Option<Reading>], n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| reading_at(readings, i).map_or(0.0, |r| r.capacity))
        .collect()
}

/// Load over capacity, 0 where either is unknown.
fn utilisations(loads: &[Option<f64>], capacities: &[f64]) -> Vec<f64> {
    loads
        .iter()
        .zip(capacities)
        .map(|(load, &cap)| match load {
            Some(l) if cap > 0.0 => l / cap,
            _ => 0.0,
        })
        .collect()
}

/// The `n` utilisations as read, before any move in flight is allowed for.
fn measured_utilisations(readings: &[Option<Reading>], n: usize) -> Vec<Option<f64>> {
    (0..n)
        .map(|i| {
            let reading = reading_at(readings, i)?;
            (reading.capacity > 0.0).then(|| reading.load / reading.capacity)
        })
        .collect()
}

/// The ages of the `n` readings (none where there is no reading).
fn ages(readings: &[Option<Reading>], n: usize) -> Vec<Option<u64>> {
    (0..n)
        .map(|i| reading_at(readings, i).map(|r| r.age_ms))
        .collect()
}

/// Whether each of the `n` readings is younger than `stale_after_ms` (no reading: not fresh).
fn fresh(readings: &[Option<Reading>], n: usize, stale_after_ms: u64) -> Vec<bool> {
    (0..n)
        .map(|i| reading_at(readings, i).is_some_and(|r| r.age_ms < stale_after_ms))
        .collect()
}

/// Moves `amount(m)` of each move in flight, in order, from its source region's load to its
/// destination's (a load never drops below 0). Destinations without a load (no reading, or
/// sites when `site_load` is empty) are left alone.
fn shift_by_moves<'m>(
    moves: impl IntoIterator<Item = &'m Move>,
    amount: impl Fn(&Move) -> f64,
    region_load: &mut [Option<f64>],
    site_load: &mut [Option<f64>],
) {
    for m in moves {
        let amount = amount(m);
        if let Some(Some(load)) = region_load.get_mut(m.from as usize) {
            *load = (*load - amount).max(0.0);
        }
        let to = match m.to {
            Destination::Region(d) => region_load.get_mut(d as usize),
            Destination::Fallback(d) => site_load.get_mut(d as usize),
            Destination::Global => None,
        };
        if let Some(Some(load)) = to {
            *load += amount;
        }
    }
}

/// Natural load per region: the part of its predicted load its own clients bring, scaled up
/// by what it already sheds. The share of its own clients comes from the shield's own
/// bookkeeping, corrected within a bound by DNS answer counts when there are mature ones
/// (answers are what clients follow; see [`bounded_own_share`]).
fn estimate_natural(
    state: &mut ShieldState,
    predicted: &Prediction,
    settings: &ShieldSettings,
    elapsed_ms: Option<u64>,
) {
    let regions = state.regions.len();
    let mature = state.demand_age_ms >= u64::from(settings.steady_ttl) * 1000;
    let mut naturals = vec![0.0; regions];
    for (r, natural) in naturals.iter_mut().enumerate() {
        let Some(load) = predicted.region_load[r] else {
            *natural = state.regions[r].natural;
            continue;
        };
        // Who brings region r's load: our own bookkeeping of what other regions shed into
        // it, corrected by the DNS demand counters (clients holding answers that land there)
        // once they cover a normal TTL -- but only within a bound of the bookkeeping, since
        // anyone can send queries with chosen ECS subnets.
        let placed = placed_into(state, r);
        let counted = mature.then(|| demand_own_share(&state.demand, r)).flatten();
        let own_share = match counted {
            Some(share) => bounded_own_share(share, placed, load),
            None if load > 0.0 => (1.0 - placed / load).clamp(0.0, 1.0),
            None => 1.0,
        };
        let kept = 1.0 - state.regions[r].fraction;
        *natural = if kept > 0.05 {
            load * own_share / kept
        } else {
            state.regions[r].natural
        };
    }
    for (r, natural) in naturals.into_iter().enumerate() {
        let region = &mut state.regions[r];
        if let Some(ms) = elapsed_ms.filter(|&ms| ms > 0 && region.natural > 0.0) {
            // Smoothed over a few ticks: one noisy reading must not look like a surge.
            let rate = (natural - region.natural) / (ms as f64 / 1000.0);
            region.trend = 0.7 * region.trend + 0.3 * rate;
        }
        region.natural = natural;
    }
}

/// Fractions are sums of float steps: 0.3 - 0.1 - 0.1 - 0.1 is not 0. Anything this close to
/// 0 or 1 is that, so a region that gave everything back is exactly back to normal.
fn snap_fraction(f: f64) -> f64 {
    if f < 1e-6 {
        0.0
    } else if f > 1.0 - 1e-6 {
        1.0
    } else {
        f
    }
}

/// Takes `amount` of region `from`'s shed at `to` back out of the moves still in flight, the
/// latest first (lowering the fraction un-sheds the subnets shed last). Of each move, the part
/// not yet landed is cancelled outright -- those clients still hold their old answer and now
/// keep it -- and only the part that did land is returned, to be moved back. Whatever exceeds
/// the moves in flight had landed long ago and comes back whole. The moves in flight are also
/// cut to what stays placed (`amount` is measured with today's natural load, the moves with
/// the natural load of their day; what is no longer placed cannot still be on its way).
fn cancel_unlanded(
    moves: &mut Vec<Move>,
    (from, to): (u16, Destination),
    (amount, still_placed): (f64, f64),
    now_ms: u64,
    short_ms: u64,
) -> f64 {
    let in_flight: f64 = moves
        .iter()
        .filter(|m| m.from == from && m.to == to && m.amount > 0.0)
        .map(|m| m.amount)
        .sum();
    let mut left = amount.max(in_flight - still_placed);
    let mut returning = 0.0;
    for m in moves.iter_mut().rev() {
        if left <= 1e-9 {
            break;
        }
        if m.from != from || m.to != to || m.amount <= 0.0 {
            continue;
        }
        let unseen_share = (m.unseen(now_ms, short_ms) / m.amount).clamp(0.0, 1.0);
        let take = m.amount.min(left);
        m.amount -= take;
        returning += take * (1.0 - unseen_share);
        left -= take;
    }
    moves.retain(|m| m.amount.abs() > 1e-9);
    (returning + left.max(0.0)).min(amount)
}

/// How far beyond its eventual need a region may shed to get relief sooner.
const OVERSHED: f64 = 2.0;

/// The share of a move made at `now_ms` that lands within one short TTL, for a region whose
/// clients have been given the short TTL since `hot_since`.
fn landing_share(hot_since: u64, now_ms: u64, settings: &ShieldSettings) -> f64 {
    let short_ms = u64::from(settings.short_ttl) * 1000;
    let steady_ms = u64::from(settings.steady_ttl) * 1000;
    if steady_ms <= short_ms {
        return 1.0;
    }
    let fast = (now_ms.saturating_sub(hot_since) as f64 / steady_ms as f64).clamp(0.0, 1.0);
    let slow_left = (hot_since + steady_ms).saturating_sub(now_ms).max(1) as f64;
    let slow_soon = (short_ms as f64 / slow_left).min(1.0);
    (fast + (1.0 - fast) * slow_soon).clamp(0.05, 1.0)
}

/// Load other regions have placed into region `r`.
fn placed_into(state: &ShieldState, r: usize) -> f64 {
    state
        .regions
        .iter()
        .enumerate()
        .filter(|(s, _)| *s != r)
        .map(|(_, s)| {
            s.fraction * s.natural * s.shares.get(&region_dest(r)).copied().unwrap_or(0.0)
        })
        .sum()
}

/// Folds this tick's answer counts into the smoothed demand (an average over a normal TTL).
fn smooth_demand(
    state: &mut ShieldState,
    inputs: &Inputs,
    settings: &ShieldSettings,
    elapsed_ms: u64,
) {
    if inputs.demand.is_empty() {
        return;
    }
    let window_ms = (u64::from(settings.steady_ttl) * 1000).max(1);
    let alpha = (elapsed_ms as f64 / window_ms as f64).clamp(0.0, 1.0);
    state.demand.resize(inputs.demand.len(), Demand::default());
    for (avg, now) in state.demand.iter_mut().zip(&inputs.demand) {
        avg.kept += alpha * (now.kept - avg.kept);
        let keys: Vec<Destination> = avg.sent.keys().chain(now.sent.keys()).copied().collect();
        for d in keys {
            let current = now.sent.get(&d).copied().unwrap_or(0.0);
            let entry = avg.sent.entry(d).or_insert(0.0);
            *entry += alpha * (current - *entry);
        }
        avg.sent.retain(|_, v| *v > 1e-9);
    }
    state.demand_age_ms = state.demand_age_ms.saturating_add(elapsed_ms);
}

/// How far the demand counters may move the load other regions bring into a region from
/// what the shield placed there: at most this factor either way.
pub const DEMAND_TRUST: f64 = 2.0;

/// A region's own share of its `load` as the demand counters say (`counted`), bounded by the
/// bookkeeping: the load shed into it is taken to lie between `placed / DEMAND_TRUST` and
/// `placed × DEMAND_TRUST`. The bookkeeping is an estimate (it rests on other regions' own
/// estimates of their natural load), which the counters may correct; but a flood of queries
/// with chosen ECS subnets can make the counters say anything -- that a region has no clients
/// of its own (so it never sheds) or nothing but (so it sheds far more than it needs) -- and
/// must not move the estimate further than the bookkeeping could plausibly be wrong. With
/// nothing placed into a region (operator drains and forces are not the shield's), its whole
/// load counts as its own, whatever the counters say.
pub fn bounded_own_share(counted: f64, placed: f64, load: f64) -> f64 {
    if load <= 0.0 {
        return 1.0;
    }
    let lowest = (1.0 - placed * DEMAND_TRUST / load).clamp(0.0, 1.0);
    let highest = (1.0 - placed / DEMAND_TRUST / load).clamp(0.0, 1.0);
    counted.clamp(lowest, highest)
}

/// Of the clients whose answers send them into region `r`, the share that are r's own.
fn demand_own_share(demand: &[Demand], r: usize) -> Option<f64> {
    let own = demand.get(r)?.kept;
    let incoming: f64 = demand
        .iter()
        .enumerate()
        .filter(|(s, _)| *s != r)
        .map(|(_, d)| d.sent.get(&region_dest(r)).copied().unwrap_or(0.0))
        .sum();
    (own + incoming > 0.0).then(|| own / (own + incoming))
}

/// Decides region `r`'s fraction for this tick and places it; returns why it changed, for the
/// change log. Regions are decided one by one, most loaded first, sharing `room`.
fn decide_region(
    state: &mut ShieldState,
    r: usize,
    inputs: &Inputs,
    tick: &Tick,
    room: &mut BTreeMap<Destination, f64>,
) -> String {
    let (settings, predicted, now_ms) = (tick.settings, tick.predicted, tick.now_ms);
    let region = &mut state.regions[r];
    region.predicted_utilisation = predicted.region_util[r];
    if inputs.operator_held.get(r).copied().unwrap_or(false) {
        return leave_to_operator(region);
    }
    match react_to_data_age(region, predicted.region_age[r], settings) {
        Freshness::Fresh => {}
        Freshness::Idle => return String::new(),
        Freshness::Stale(reason) => {
            keep_frozen_share_placed(state, r, tick, room);
            return reason.into();
        }
    }
    // Steer on the load one short TTL ahead: moves landing later cannot relieve it sooner.
    let util = predicted.region_util_soon[r];
    let wanted = wanted_fraction(state, r, util, tick);
    let wanted = respect_hold_down(&state.regions[r], wanted, settings, now_ms);
    // Tenant first: while a tenant of the region can still be shed on its own, the region
    // (everybody else) sheds no more.
    let wanted = if tick.tenant_first.get(r).copied().unwrap_or(false) {
        wanted.min(state.regions[r].fraction)
    } else {
        wanted
    };
    // The region turns hot (short TTL) before its moves are scheduled: moves made now land
    // according to how long its clients have had the short TTL.
    let region = &mut state.regions[r];
    if region.hot_since.is_none() && (util > settings.low_watermark || wanted > 0.0) {
        region.hot_since = Some(now_ms);
    }
    let reason = place(state, r, snap_fraction(wanted), tick, room);
    keep_hot_while_needed(&mut state.regions[r], util, settings);
    reason
}

/// The fraction region `r` wants at utilisation `util`, before the hold-down: more over the
/// high watermark, less under the low one while it sheds, the same in between.
fn wanted_fraction(state: &ShieldState, r: usize, util: f64, tick: &Tick) -> f64 {
    let settings = tick.settings;
    let region = &state.regions[r];
    let capacity = tick.predicted.region_capacity[r];
    if region.natural <= 0.0 || capacity <= 0.0 {
        // Without a load estimate or a capacity there is nothing to steer on: hold still.
        region.fraction
    } else if util > settings.high_watermark {
        let incoming = placed_into(state, r);
        fraction_to_relieve(region, util, incoming, capacity, settings, tick.now_ms)
    } else if util < settings.low_watermark && region.fraction > 0.0 {
        fraction_to_give_back(region, util, capacity, settings)
    } else {
        region.fraction
    }
}

/// A region stays hot (its clients get the short TTL) while it is over the low watermark or
/// sheds, so that a correction lands quickly; otherwise it goes back to the normal TTL.
fn keep_hot_while_needed(region: &mut RegionState, util: f64, settings: &ShieldSettings) {
    region.hot = util > settings.low_watermark || region.fraction > 0.0;
    if !region.hot {
        region.hot_since = None;
    }
}

/// An operator-held region is the operator's alone: the shield's decision for it is dropped
/// whole, bookkeeping included, so that a release starts over from normal answers rather than
/// resuming a decision taken before the hold.
fn leave_to_operator(region: &mut RegionState) -> String {
    let from = region.fraction;
    *region = RegionState {
        note: Note::OperatorHeld,
        ..RegionState::default()
    };
    if from > 0.0 {
        "operator override".into()
    } else {
        String::new()
    }
}

/// What the age of a region's load data leaves for the step to decide.
enum Freshness {
    /// Fresh data: decide on it.
    Fresh,
    /// No usable data and nothing shed: nothing to decide.
    Idle,
    /// Stale data (decisions frozen) or stale for long (already stepped back toward normal
    /// answers): only keep what is still shed placed. The reason is for the change log.
    Stale(&'static str),
}

/// How old load data is, by the staleness settings: the one rule regions, tenants and cells
/// share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataAge {
    /// Younger than `stale_after_ms`: decide on it.
    Fresh,
    /// Older: decisions frozen.
    Stale,
    /// Older than `revert_after_ms`, or never seen: back to normal answers.
    Expired,
}

pub(crate) fn data_age(age: Option<u64>, settings: &ShieldSettings) -> DataAge {
    match age {
        Some(a) if a < settings.stale_after_ms => DataAge::Fresh,
        Some(a) if a < settings.revert_after_ms => DataAge::Stale,
        _ => DataAge::Expired,
    }
}

/// Whether a move from `from` to `wanted` reverses the last move (`last_direction`, made at
/// `last_move_at`) within the hold-down: the one hold-down rule regions, tenants and cells
/// share.
pub(crate) fn held_down(
    from: f64,
    wanted: f64,
    (last_direction, last_move_at): (i8, u64),
    settings: &ShieldSettings,
    now_ms: u64,
) -> bool {
    let direction = direction_of(from, wanted);
    let reversing = direction != 0 && last_direction == -direction;
    reversing && now_ms.saturating_sub(last_move_at) < settings.hold_down_ms
}

/// +1 for a move up from `from` to `to`, -1 down, 0 none.
pub(crate) fn direction_of(from: f64, to: f64) -> i8 {
    match to.total_cmp(&from) {
        std::cmp::Ordering::Greater => 1,
        std::cmp::Ordering::Less => -1,
        std::cmp::Ordering::Equal => 0,
    }
}

/// Applies the staleness rules to `region`. Stale data is not trusted to move a region
/// either way, so its fraction is frozen; but a feed that stays away must not pin clients
/// elsewhere for ever, so after `revert_after_ms` the shedding decays by `max_step` per tick.
fn react_to_data_age(
    region: &mut RegionState,
    age: Option<u64>,
    settings: &ShieldSettings,
) -> Freshness {
    match data_age(age, settings) {
        DataAge::Fresh => Freshness::Fresh,
        DataAge::Stale => {
            region.note = Note::Stale;
            Freshness::Stale("load data stale: frozen")
        }
        DataAge::Expired if region.fraction == 0.0 => {
            // No data: keep the TTL as it is (a region reverted while hot keeps the short TTL
            // until fresh data shows it cool, so a returning overload is answered quickly).
            region.note = Note::Normal;
            Freshness::Idle
        }
        DataAge::Expired => {
            // Stale for long (or never seen): step back to normal answers, `max_step` a tick.
            let to = snap_fraction(region.fraction - settings.max_step);
            region.fraction = to;
            if to == 0.0 {
                region.shares.clear();
            }
            region.note = Note::Reverting;
            Freshness::Stale("load data stale too long: reverting")
        }
    }
}

/// A stale region keeps its fraction, but not into a destination that closed meanwhile (held,
/// or shedding itself): its shares were dropped then, so the same share is placed elsewhere,
/// or nothing is shed. The note stays what staleness made it: the region is not deciding.
fn keep_frozen_share_placed(
    state: &mut ShieldState,
    r: usize,
    tick: &Tick,
    room: &mut BTreeMap<Destination, f64>,
) {
    let region = &state.regions[r];
    if region.fraction > 0.0 && region.shares.is_empty() {
        let keep = region.fraction;
        let note = region.note;
        place(state, r, keep, tick, room);
        state.regions[r].note = note;
    }
}

/// The fraction a region over its high watermark wants: enough more, at most `max_step` more,
/// to bring it back to the target.
fn fraction_to_relieve(
    region: &RegionState,
    util: f64,
    incoming: f64,
    capacity: f64,
    settings: &ShieldSettings,
    now_ms: u64,
) -> f64 {
    let natural = region.natural;
    let target = settings.target();
    // Only part of a move made now lands within the horizon (clients still holding normal
    // answers move when those expire): shed enough that the part landing soon relieves it.
    let landing = landing_share(region.hot_since.unwrap_or(now_ms), now_ms, settings);
    let excess = (util - target) * capacity;
    let step_up = (excess / (natural * landing)).min(settings.max_step);
    // Shedding more than needed in the end speeds relief (only expiring answers move), but
    // by a bounded factor: never more than OVERSHED times the fraction that will be needed
    // once everything has landed.
    let needed = (1.0 - (target * capacity - incoming) / natural).clamp(0.0, 1.0);
    let ceiling = (OVERSHED * needed).min(1.0).max(region.fraction);
    (region.fraction + step_up).min(ceiling)
}

/// The fraction a shedding region under its low watermark wants: less, by what its spare
/// capacity below the target can take back, at most `max_step` less. It aims at the target,
/// midway between the watermarks, not at the low watermark: the load coming back should leave
/// the region inside the band, where neither rule moves it again.
fn fraction_to_give_back(
    region: &RegionState,
    util: f64,
    capacity: f64,
    settings: &ShieldSettings,
) -> f64 {
    let spare = (settings.target() - util) * capacity;
    (region.fraction - (spare / region.natural).min(settings.max_step)).max(0.0)
}

/// `wanted`, unless it reverses the region's last move within the hold-down: then the current
/// fraction. Readings lag the moves, so without it a region would flap between shedding more
/// and less on its own in-flight corrections.
fn respect_hold_down(
    region: &RegionState,
    wanted: f64,
    settings: &ShieldSettings,
    now_ms: u64,
) -> f64 {
    let last = (region.last_direction, region.last_move_at);
    if held_down(region.fraction, wanted, last, settings, now_ms) {
        region.fraction
    } else {
        wanted
    }
}

/// Places `wanted × natural` of region `r`'s load across destinations (keeping what is
/// already placed where it still fits), records the moves, and sets the fraction to what fit.
fn place(
    state: &mut ShieldState,
    r: usize,
    wanted: f64,
    tick: &Tick,
    room: &mut BTreeMap<Destination, f64>,
) -> String {
    let placement = Placement::rebalanced(&state.regions[r], r, wanted, tick, room);
    let fraction = placement.fraction();
    let short = fraction + 1e-9 < wanted;
    let region = &mut state.regions[r];
    record_placement(region, &placement, fraction, short, tick.now_ms);
    let (mut moves, taken_back) = placement_moves(r, &placement, region.hot_since, tick);
    moves.extend(return_taken_back(
        &mut state.moves,
        r,
        taken_back,
        &placement.placed,
        tick,
    ));
    state.moves.extend(moves);
    placement_reason(r, &placement, fraction, short, tick)
}

/// Region `r`'s placement of its shed load this tick next to the one it replaces, in load
/// units (its shares × its fraction × its natural load), so that it can be compared with the
/// destinations' headroom.
struct Placement {
    /// The region's natural load (never negative).
    natural: f64,
    /// The fraction decided for this tick, and the load it amounts to.
    wanted: f64,
    goal: f64,
    /// The fraction and the placement at the start of the tick.
    old_fraction: f64,
    old_placed: BTreeMap<Destination, f64>,
    /// The new placement and its total: `goal`, unless it did not all fit.
    placed: BTreeMap<Destination, f64>,
    total: f64,
}

impl Placement {
    /// Region `r`'s placement rebalanced to `wanted` (see [`rebalance`]).
    fn rebalanced(
        region: &RegionState,
        r: usize,
        wanted: f64,
        tick: &Tick,
        room: &mut BTreeMap<Destination, f64>,
    ) -> Self {
        let natural = region.natural.max(0.0);
        let old_fraction = region.fraction;
        let old_placed = current_placement(region, natural);
        let goal = wanted * natural;
        let (placed, total) = rebalance(&old_placed, goal, r, tick, room);
        Placement {
            natural,
            wanted,
            goal,
            old_fraction,
            old_placed,
            placed,
            total,
        }
    }

    /// The fraction the placement amounts to. It is published and read back, so it is the
    /// decided number wherever the placement allows, rather than a float-rounded
    /// recomputation that would drift a little every tick.
    fn fraction(&self) -> f64 {
        let unchanged = self.placed.len() == self.old_placed.len()
            && self
                .placed
                .iter()
                .all(|(d, a)| self.old_placed.get(d).is_some_and(|o| (o - a).abs() < 1e-9));
        let (goal, total) = (self.goal, self.total);
        snap_fraction(if self.placed.is_empty() {
            // Nowhere placed (no natural load, or every destination closed): nothing is shed.
            0.0
        } else if unchanged {
            self.old_fraction
        } else if goal > 0.0 && (total - goal).abs() <= 1e-9 * goal.max(1.0) {
            // Everything wanted was placed (perhaps re-placed after a hot destination gave some
            // back): the fraction is exactly what was decided, not a float-rounded neighbour.
            self.wanted
        } else if self.natural > 0.0 {
            (total / self.natural).clamp(0.0, 1.0)
        } else {
            0.0
        })
    }
}

/// Region `r`'s placement of `goal` load, and its total. It starts from the current placement
/// (`old_placed`), so that clients already moved stay where they are, and changes only what
/// must: what a destination over its watermark gives back, then the difference to `goal`.
fn rebalance(
    old_placed: &BTreeMap<Destination, f64>,
    goal: f64,
    r: usize,
    tick: &Tick,
    room: &mut BTreeMap<Destination, f64>,
) -> (BTreeMap<Destination, f64>, f64) {
    let mut placed = old_placed.clone();
    give_back_over_watermark(&mut placed, room);
    let mut total: f64 = placed.values().sum();
    if total > goal {
        let tiers = destination_tiers(r, tick.rings, tick.settings);
        take_back_least_preferred(&mut placed, total - goal, &tiers, room);
        total = placed.values().sum();
    } else if goal > total {
        let tiers = destination_tiers(r, tick.rings, tick.settings);
        spread_over_tiers(&mut placed, goal - total, &tiers, tick, room);
        total = placed.values().sum();
    }
    (placed, total)
}

/// Writes the placement into the region: its `fraction`, its shares (proportions of what was
/// placed, not of the goal: what fits nowhere is not shed), its note (`short`: the fraction
/// falls short of the one wanted), and the direction and time of the move, which the
/// hold-down reads next tick.
fn record_placement(
    region: &mut RegionState,
    placement: &Placement,
    fraction: f64,
    short: bool,
    now_ms: u64,
) {
    let old_fraction = placement.old_fraction;
    region.note = if short {
        Note::NoHeadroom
    } else if fraction > 0.0 {
        Note::Shedding
    } else {
        Note::Normal
    };
    if (fraction - old_fraction).abs() > 1e-9 {
        region.last_direction = if fraction > old_fraction { 1 } else { -1 };
        region.last_move_at = now_ms;
    }
    region.fraction = fraction;
    let total = placement.total;
    region.shares = if total > 0.0 {
        placement
            .placed
            .iter()
            .map(|(d, a)| (*d, a / total))
            .collect()
    } else {
        BTreeMap::new()
    };
}

/// The load region `r` has placed at each destination: its shares in load units, so that
/// it can be compared with the destinations' headroom.
fn current_placement(region: &RegionState, natural: f64) -> BTreeMap<Destination, f64> {
    region
        .shares
        .iter()
        .map(|(d, share)| (*d, region.fraction * natural * share))
        .collect()
}

/// A destination over its watermark (negative room) takes no more and gives back its excess,
/// as far as this region placed it there: it must not be pushed further over by shedding.
/// A destination without fresh data has no room entry: what is there stays, but nothing is
/// taken back on a guess.
fn give_back_over_watermark(
    placed: &mut BTreeMap<Destination, f64>,
    room: &mut BTreeMap<Destination, f64>,
) {
    for (dest, amount) in placed.iter_mut() {
        if let Some(free) = room.get_mut(dest) {
            if *free < 0.0 {
                let give_back = (-*free).min(*amount);
                *amount -= give_back;
                *free += give_back;
            }
        }
    }
    placed.retain(|_, a| *a > 1e-9);
}

/// Shedding less: `excess` is taken back from the least preferred destinations first, so the
/// load that stays shed stays as close to home as it can.
fn take_back_least_preferred(
    placed: &mut BTreeMap<Destination, f64>,
    mut excess: f64,
    tiers: &[Vec<Destination>],
    room: &mut BTreeMap<Destination, f64>,
) {
    for dest in tiers.iter().rev().flatten() {
        if excess <= 0.0 {
            break;
        }
        if let Some(amount) = placed.get_mut(dest) {
            let take = amount.min(excess);
            *amount -= take;
            excess -= take;
            if let Some(free) = room.get_mut(dest) {
                *free += take;
            }
        }
    }
    placed.retain(|_, a| *a > 1e-9);
}

/// Shedding more: `need` goes to the most preferred tier with room first, split within the
/// tier by headroom, so no destination fills up while a peer of the same preference has room
/// to spare. A region already over its high watermark (once moves in flight land) takes
/// nothing, whatever its room says. What fits nowhere is not placed.
fn spread_over_tiers(
    placed: &mut BTreeMap<Destination, f64>,
    mut need: f64,
    tiers: &[Vec<Destination>],
    tick: &Tick,
    room: &mut BTreeMap<Destination, f64>,
) {
    for tier in tiers {
        if need <= 1e-9 {
            break;
        }
        let eligible: Vec<(Destination, f64)> = tier
            .iter()
            .filter(|d| match d {
                Destination::Region(i) => {
                    tick.predicted.region_util[*i as usize] < tick.settings.high_watermark
                }
                _ => true,
            })
            .filter_map(|d| room.get(d).map(|free| (*d, *free)))
            .filter(|(_, free)| *free > 1e-9)
            .collect();
        let tier_room: f64 = eligible.iter().map(|(_, f)| f).sum();
        if tier_room <= 0.0 {
            continue;
        }
        let take = need.min(tier_room);
        for (dest, free) in eligible {
            let amount = take * free / tier_room;
            *placed.entry(dest).or_insert(0.0) += amount;
            if let Some(f) = room.get_mut(&dest) {
                *f -= amount;
            }
        }
        need -= take;
    }
}

/// The differences between the old and the new placement, per destination: the moves out
/// (recorded so that predictions include them until they are visible in readings) and the
/// amounts taken back (which [`return_taken_back`] settles against the moves in flight).
/// The order is that of the destinations in the old placement, then the new: it is the order
/// of the moves in the state, which later sums and cancellations follow.
fn placement_moves(
    r: usize,
    placement: &Placement,
    hot_since: Option<u64>,
    tick: &Tick,
) -> (Vec<Move>, Vec<(Destination, f64)>) {
    let (old_placed, placed) = (&placement.old_placed, &placement.placed);
    let (settings, now_ms) = (tick.settings, tick.now_ms);
    let mut moves = Vec::new();
    let mut taken_back = Vec::new();
    let dests: Vec<Destination> = old_placed.keys().chain(placed.keys()).copied().collect();
    for dest in dests {
        let delta = placed.get(&dest).copied().unwrap_or(0.0)
            - old_placed.get(&dest).copied().unwrap_or(0.0);
        if delta.abs() <= 1e-9 || moves.iter().any(|m: &Move| m.to == dest) {
            continue;
        }
        if delta < 0.0 {
            if !taken_back.iter().any(|(d, _)| *d == dest) {
                taken_back.push((dest, -delta));
            }
            continue;
        }
        let steady_ms = u64::from(settings.steady_ttl) * 1000;
        let hot_since = hot_since.unwrap_or(now_ms);
        // Shedding more moves clients that may still hold normal answers.
        let fast_share = if steady_ms == 0 {
            1.0
        } else {
            (now_ms.saturating_sub(hot_since) as f64 / steady_ms as f64).clamp(0.0, 1.0)
        };
        moves.push(Move {
            from: r as u16,
            to: dest,
            amount: delta,
            at: now_ms,
            fast_share,
            slow_until: hot_since + steady_ms,
        });
    }
    (moves, taken_back)
}

/// Settles what region `r` took back from each destination against its moves in flight
/// (see [`cancel_unlanded`]) and returns the moves back home for what had landed.
fn return_taken_back(
    in_flight: &mut Vec<Move>,
    r: usize,
    taken_back: Vec<(Destination, f64)>,
    placed: &BTreeMap<Destination, f64>,
    tick: &Tick,
) -> Vec<Move> {
    let now_ms = tick.now_ms;
    let short_ms = u64::from(tick.settings.short_ttl) * 1000;
    let mut moves = Vec::new();
    for (dest, amount) in taken_back {
        let still_placed = placed.get(&dest).copied().unwrap_or(0.0);
        let returning = cancel_unlanded(
            in_flight,
            (r as u16, dest),
            (amount, still_placed),
            now_ms,
            short_ms,
        );
        // Shed clients that did move come back as their (short TTL) answers expire.
        if returning > 1e-9 {
            moves.push(Move {
                from: r as u16,
                to: dest,
                amount: -returning,
                at: now_ms,
                fast_share: 1.0,
                slow_until: now_ms,
            });
        }
    }
    moves
}

/// Why region `r`'s fraction is what [`place`] made it, for the change log.
fn placement_reason(
    r: usize,
    placement: &Placement,
    fraction: f64,
    short: bool,
    tick: &Tick,
) -> String {
    let (wanted, old_fraction) = (placement.wanted, placement.old_fraction);
    let (predicted, settings) = (tick.predicted, tick.settings);
    // The decision is taken on the utilisation predicted one short TTL ahead (moves in
    // flight partly landed); say that next to what was measured, or the two contradict.
    let utilisation = match predicted.region_util_measured[r] {
        Some(m) => format!(
            "measured utilisation {m:.2}, predicted {:.2} in {} s",
            predicted.region_util_soon[r], settings.short_ttl
        ),
        None => format!(
            "predicted utilisation {:.2} in {} s",
            predicted.region_util_soon[r], settings.short_ttl
        ),
    };
    if short {
        format!(
            "{utilisation}: wants {wanted:.2}, no destination has headroom beyond {fraction:.2}"
        )
    } else if fraction > old_fraction {
        format!(
            "{utilisation}: above high watermark {:.2}",
            settings.high_watermark
        )
    } else if fraction < old_fraction && predicted.region_util_soon[r] < settings.low_watermark {
        format!(
            "{utilisation}: below low watermark {:.2}",
            settings.low_watermark
        )
    } else if fraction < old_fraction {
        format!("{utilisation}: a destination took back what it has no more room for")
    } else {
        String::new()
    }
}

/// Destinations for region `r`, in order of preference: same-continent neighbours, then
/// same-continent fallback sites, then (if allowed) other continents' neighbours and sites.
fn destination_tiers(r: usize, rings: &Rings, settings: &ShieldSettings) -> Vec<Vec<Destination>> {
    let me = &rings.regions[r];
    let same = |c: &str| c == me.continent;
    let neighbours: Vec<usize> = me
        .neighbours
        .iter()
        .map(|&n| n as usize)
        .filter(|&n| n != r && n < rings.regions.len())
        .collect();
    let mut tiers = vec![
        neighbours
            .iter()
            .filter(|&&n| same(&rings.regions[n].continent))
            .map(|&n| region_dest(n))
            .collect(),
        rings
            .sites
            .iter()
            .enumerate()
            .filter(|(_, s)| same(&s.continent))
            .map(|(i, _)| site_dest(i))
            .collect::<Vec<_>>(),
    ];
    if settings.allow_cross_continent {
        tiers.push(
            neighbours
                .iter()
                .filter(|&&n| !same(&rings.regions[n].continent))
                .map(|&n| region_dest(n))
                .collect(),
        );
        tiers.push(
            rings
                .sites
                .iter()
                .enumerate()
                .filter(|(_, s)| !same(&s.continent))
                .map(|(i, _)| site_dest(i))
                .collect(),
        );
    }
    tiers
}

/// The read side for the serving path: per region, the shed fraction and destinations in
/// per-mille, and the short TTL while hot.
pub fn shed_view(state: &ShieldState, settings: &ShieldSettings) -> ShedView {
    let mut view = ShedView::default();
    for (r, region) in state.regions.iter().enumerate() {
        let hot_ttl = region.hot.then_some(settings.short_ttl);
        if let Some(shed) = region_shed(region.fraction, &region.shares, hot_ttl) {
            view.set_region(r as u16, shed);
        }
    }
    // A shed tenant's clients keep the short TTL, so that they come home quickly.
    let tenants = state.tenants.iter().filter_map(|t| {
        region_shed(t.fraction, &t.shares, Some(settings.short_ttl))
            .filter(|shed| shed.fraction_permille() > 0)
            .map(|shed| (t.tenant.as_str(), t.region, shed))
    });
    view.set_tenants(tenants);
    view
}

/// A shed in per-mille, with at most [`MAX_SHED_DESTINATIONS`] destinations (the largest);
/// `None` when it changes nothing.
fn region_shed(
    fraction: f64,
    shares: &BTreeMap<Destination, f64>,
    hot_ttl: Option<u32>,
) -> Option<RegionShed> {
    let fraction = (fraction * 1000.0).round().clamp(0.0, 1000.0) as u16;
    let mut shares: Vec<(Destination, f64)> = shares.iter().map(|(d, a)| (*d, *a)).collect();
    shares.sort_by(|a, b| b.1.total_cmp(&a.1));
    shares.truncate(MAX_SHED_DESTINATIONS);
    let total: f64 = shares.iter().map(|s| s.1).sum();
    let mut permille: Vec<ShedShare> = Vec::new();
    if fraction > 0 && total > 0.0 {
        let mut given = 0u16;
        for (i, (dest, amount)) in shares.iter().enumerate() {
            let share = if i + 1 == shares.len() {
                1000 - given
            } else {
                ((amount / total) * 1000.0).round() as u16
            };
            if share == 0 || given + share > 1000 {
                continue;
            }
            given += share;
            permille.push(ShedShare {
                destination: *dest,
                share_permille: share,
            });
        }
    }
    let fraction = if permille.is_empty() { 0 } else { fraction };
    RegionShed::new(fraction, &permille, hot_ttl)
        .ok()
        .filter(RegionShed::is_active)
}
