//! Tenant-first shedding (issue 31, item 3): when a region is hot and one tenant's clients bring
//! more than `tenant_share` of its load, that tenant alone is shed — its clients in the region
//! answered with a neighbour region's or a fallback site's addresses (its cells there), per
//! client subnet like a region's shed — before the region, which carries everybody else, sheds.
//!
//! Part of the pure step: no I/O, the clock passed in. The same guards as a region's shed:
//! engaged above the high watermark, given back below the low one (aiming at the target between
//! them, so that what comes back leaves the region inside the band), at most `max_step` a tick,
//! the hold-down before reversing, stale data freezes, data stale for long decays it, and load
//! is placed only where a destination has headroom (the same `room` the regions share).
//!
//! Share. The feed's tenant figure is the load the tenant's clients *located in* a region bring,
//! wherever they are served, so it does not fall when the tenant is shed; the region's figure is
//! what its PoPs carry, which does. The tenant's share is its figure over the region's load with
//! the landed part of the tenant's own shed added back (what the region would carry without
//! it; the part still in flight is still in the reading). A tenant engages
//! above `tenant_share` and gives back once under `tenant_share × low / high` (hysteresis on the
//! share too): a tenant that calms down comes home even while the region stays hot, and the
//! region's own shed (for everybody) takes over if it must.
//!
//! A region with a tenant shed on its own sheds no more while that tenant can still be shed
//! more, nor while the region's load, once every move in flight has landed (the tenant's
//! included), is predicted under its high watermark: the region-wide shed is for what the
//! tenant's own cannot fix. (A tenant's moves land as its clients' answers expire, like a
//! region's; steering the region on the next short TTL alone would shed everybody for the
//! slow part of the tenant's move.)
//!
//! Owns the per-tenant entries of the state and their moves; the regions' decisions read only
//! whether a region is still the tenants' to relieve ([`TenantFirst`]).

use std::collections::BTreeMap;

use crate::policy::Destination;

use super::{
    destination_tiers, landing_share, snap_fraction, spread_over_tiers, take_back_least_preferred,
    Change, Inputs, Move, Note, Tick,
};

/// One tenant's figures in a tick's feed: the load its clients located in each region bring
/// (by region index; `None` where the feed gives none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantLoad {
    pub tenant: String,
    pub regions: Vec<Option<f64>>,
}

/// One tenant's own shed in one region.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantShed {
    pub tenant: String,
    pub region: u16,
    /// Share of the tenant's client subnets in the region sent elsewhere, 0..=1.
    pub fraction: f64,
    /// Where the shed share goes: proportions per destination, summing to 1 while shedding.
    pub shares: BTreeMap<Destination, f64>,
    /// The tenant's load from the region (the feed's figure) and its share of the region's.
    pub load: f64,
    pub share: f64,
    /// Last direction moved (+1 up, -1 down, 0 never) and when (ms): the hold-down reads them.
    pub last_direction: i8,
    pub last_move_at: u64,
    pub note: Note,
    /// Why it is in this state, for status.
    pub reason: String,
    /// Its moves not yet fully visible in readings (see [`Move`]).
    pub moves: Vec<Move>,
}

/// What the tenants' decisions leave for the regions' this tick.
pub(super) struct TenantFirst {
    pub changes: Vec<Change>,
    /// Per region: a tenant there can still be shed more, so the region does not shed more.
    pub lever_left: Vec<bool>,
    /// Per region: a tenant there is shed on its own.
    pub active: Vec<bool>,
}

/// Decides every tenant's own shed for this tick (before the regions), placing what moves into
/// `room`; each entry keeps its moves.
pub(super) fn decide_tenants(
    state: &mut super::ShieldState,
    inputs: &Inputs,
    tick: &Tick,
    room: &mut BTreeMap<Destination, f64>,
) -> TenantFirst {
    let regions = tick.rings.regions.len();
    state.tenants.retain(|t| usize::from(t.region) < regions);
    engage_surging(state, inputs, tick);
    let mut changes = Vec::new();
    let mut lever_left = vec![false; regions];
    let mut active = vec![false; regions];
    let mut entries = std::mem::take(&mut state.tenants);
    for entry in entries.iter_mut() {
        let before = entry.fraction;
        let hot_since = state.regions[usize::from(entry.region)].hot_since;
        let moves = decide_one(entry, inputs, tick, hot_since, room);
        entry.moves.extend(moves);
        if (entry.fraction - before).abs() > 1e-9 {
            changes.push(Change {
                region: entry.region,
                tenant: Some(entry.tenant.clone()),
                from: before,
                to: entry.fraction,
                reason: entry.reason.clone(),
            });
        }
        if entry.note == Note::Shedding
            && entry.fraction < 1.0
            && entry.share > release_share(tick.settings)
        {
            lever_left[usize::from(entry.region)] = true;
        }
        if entry.fraction > 0.0 {
            active[usize::from(entry.region)] = true;
        }
    }
    // A released entry stays until its hold-down has passed: shedding it again at once would
    // reverse its last move.
    let hold_down_ms = tick.settings.hold_down_ms;
    entries
        .retain(|e| e.fraction > 0.0 || tick.now_ms.saturating_sub(e.last_move_at) < hold_down_ms);
    state.tenants = entries;
    TenantFirst {
        changes,
        lever_left,
        active,
    }
}

/// Adds an entry (at fraction 0, decided in the same tick) for each tenant whose share of a
/// region over its high watermark is above `tenant_share`, unless it has one there already.
fn engage_surging(state: &mut super::ShieldState, inputs: &Inputs, tick: &Tick) {
    let settings = tick.settings;
    for figures in &inputs.tenants {
        for (r, load) in figures.regions.iter().enumerate() {
            let Some(load) = *load else { continue };
            let hot = tick
                .predicted
                .region_util_soon
                .get(r)
                .copied()
                .unwrap_or(0.0)
                > settings.high_watermark;
            let held = inputs.operator_held.get(r).copied().unwrap_or(false);
            let fresh = tick.predicted.region_age[r].is_some_and(|a| a < settings.stale_after_ms);
            let region_load = region_measured(inputs, r);
            let surging = region_load > 0.0 && load / region_load > settings.tenant_share;
            let known = state
                .tenants
                .iter()
                .any(|t| usize::from(t.region) == r && t.tenant == figures.tenant);
            if hot && surging && fresh && !held && !known {
                state.tenants.push(TenantShed {
                    tenant: figures.tenant.clone(),
                    region: r as u16,
                    fraction: 0.0,
                    shares: BTreeMap::new(),
                    load,
                    share: load / region_load,
                    last_direction: 0,
                    last_move_at: 0,
                    note: Note::Shedding,
                    reason: String::new(),
                    moves: Vec::new(),
                });
            }
        }
    }
    state
        .tenants
        .sort_by(|a, b| (&a.tenant, a.region).cmp(&(&b.tenant, b.region)));
}

/// The region's load as its reading says (0 without one).
fn region_measured(inputs: &Inputs, r: usize) -> f64 {
    inputs
        .regions
        .get(r)
        .copied()
        .flatten()
        .map_or(0.0, |reading| reading.load)
}

/// The tenant's figure for the entry's region in this tick's feed.
fn tenant_figure(inputs: &Inputs, entry: &TenantShed) -> Option<f64> {
    inputs
        .tenants
        .iter()
        .find(|t| t.tenant == entry.tenant)
        .and_then(|t| t.regions.get(usize::from(entry.region)).copied().flatten())
}

/// Decides one entry; returns the moves it made.
fn decide_one(
    entry: &mut TenantShed,
    inputs: &Inputs,
    tick: &Tick,
    hot_since: Option<u64>,
    room: &mut BTreeMap<Destination, f64>,
) -> Vec<Move> {
    let settings = tick.settings;
    let r = usize::from(entry.region);
    if inputs.operator_held.get(r).copied().unwrap_or(false) {
        entry.reason = "operator override".into();
        entry.note = Note::OperatorHeld;
        return move_to(entry, 0.0, tick, hot_since, room);
    }
    let age = tick.predicted.region_age[r];
    match age {
        Some(a) if a < settings.stale_after_ms => {}
        Some(a) if a < settings.revert_after_ms => {
            entry.note = Note::Stale;
            entry.reason = "load data stale: frozen".into();
            return Vec::new();
        }
        _ => {
            entry.note = Note::Reverting;
            entry.reason = "load data stale too long: reverting".into();
            let to = snap_fraction(entry.fraction - settings.max_step);
            return move_to(entry, to, tick, hot_since, room);
        }
    }
    let Some(load) = tenant_figure(inputs, entry) else {
        entry.note = Note::Reverting;
        entry.reason = "the feed gives no figure for the tenant: giving back".into();
        let to = snap_fraction(entry.fraction - settings.max_step);
        return move_to(entry, to, tick, hot_since, room);
    };
    entry.load = load;
    // What the region would carry without the tenant's shed: the reading, plus the part of the
    // shed that has landed (the rest is still in the reading).
    let short_ms = u64::from(settings.short_ttl) * 1000;
    let unseen: f64 = entry
        .moves
        .iter()
        .map(|m| m.unseen(tick.now_ms, short_ms))
        .sum();
    let landed = (entry.fraction * load - unseen).max(0.0);
    let without_shed = region_measured(inputs, r) + landed;
    entry.share = if without_shed > 0.0 {
        (load / without_shed).min(1.0)
    } else {
        0.0
    };
    let (wanted, reason) = wanted_fraction(entry, r, tick, hot_since);
    let wanted = respect_hold_down(entry, wanted, tick);
    let moves = move_to(entry, wanted, tick, hot_since, room);
    let short = entry.fraction + 1e-9 < wanted;
    entry.note = if short {
        Note::NoHeadroom
    } else if entry.fraction > 0.0 {
        Note::Shedding
    } else {
        Note::Normal
    };
    entry.reason = if short {
        format!(
            "{reason}; no destination has headroom beyond {:.2}",
            entry.fraction
        )
    } else {
        reason
    };
    moves
}

/// The fraction the entry wants this tick, and why.
fn wanted_fraction(
    entry: &TenantShed,
    r: usize,
    tick: &Tick,
    hot_since: Option<u64>,
) -> (f64, String) {
    let settings = tick.settings;
    let util = tick.predicted.region_util_soon[r];
    let capacity = tick.predicted.region_capacity[r];
    let release_share = release_share(settings);
    let share = entry.share;
    let said = format!(
        "share {share:.2} of the region's load (limit {:.2}), region utilisation {util:.2} in {} s",
        settings.tenant_share, settings.short_ttl
    );
    if entry.load <= 0.0 || capacity <= 0.0 {
        return (
            snap_fraction(entry.fraction - settings.max_step),
            format!("{said}: no load"),
        );
    }
    if share > release_share && util > settings.high_watermark {
        // Only part of a move made now lands within the horizon: shed enough that it does.
        let landing = landing_share(hot_since.unwrap_or(tick.now_ms), tick.now_ms, settings);
        let excess = (util - settings.target()) * capacity;
        let up = (excess / (entry.load * landing)).min(settings.max_step);
        let reason = format!(
            "{said}: above high watermark {:.2}",
            settings.high_watermark
        );
        (snap_fraction((entry.fraction + up).min(1.0)), reason)
    } else if share < release_share {
        let reason = format!("{said}: below the release share {release_share:.2}");
        (snap_fraction(entry.fraction - settings.max_step), reason)
    } else if util < settings.low_watermark {
        let spare = (settings.target() - util) * capacity;
        let down = (spare / entry.load).min(settings.max_step);
        let reason = format!("{said}: below low watermark {:.2}", settings.low_watermark);
        (snap_fraction(entry.fraction - down), reason)
    } else {
        (
            entry.fraction,
            format!("{said}: between the watermarks, holding"),
        )
    }
}

/// The share under which a shed tenant is given back: `tenant_share` scaled as the low
/// watermark is to the high one.
fn release_share(settings: &super::ShieldSettings) -> f64 {
    settings.tenant_share * settings.low_watermark / settings.high_watermark
}

/// `wanted`, unless it reverses the entry's last move within the hold-down.
fn respect_hold_down(entry: &TenantShed, wanted: f64, tick: &Tick) -> f64 {
    let last = (entry.last_direction, entry.last_move_at);
    if super::held_down(entry.fraction, wanted, last, tick.settings, tick.now_ms) {
        entry.fraction
    } else {
        wanted
    }
}

/// Moves the entry to `wanted` as far as the destinations' room allows (more: the preferred
/// tiers first; less: the least preferred given back first), records its fraction, shares and
/// direction, and returns the moves (what leaves, and what comes back).
fn move_to(
    entry: &mut TenantShed,
    wanted: f64,
    tick: &Tick,
    hot_since: Option<u64>,
    room: &mut BTreeMap<Destination, f64>,
) -> Vec<Move> {
    let r = usize::from(entry.region);
    let load = entry.load.max(0.0);
    let old: BTreeMap<Destination, f64> = entry
        .shares
        .iter()
        .map(|(d, s)| (*d, entry.fraction * load * s))
        .collect();
    let mut placed = old.clone();
    let delta = (wanted - entry.fraction) * load;
    let tiers = destination_tiers(r, tick.rings, tick.settings);
    if delta > 1e-9 {
        spread_over_tiers(&mut placed, delta, &tiers, tick, room);
    } else if delta < -1e-9 {
        take_back_least_preferred(&mut placed, -delta, &tiers, room);
    }
    let total: f64 = placed.values().sum();
    let fraction = if wanted <= 0.0 || load <= 0.0 {
        0.0
    } else if (total - wanted * load).abs() <= 1e-9 * load.max(1.0) {
        wanted
    } else {
        snap_fraction((total / load).clamp(0.0, 1.0))
    };
    if (fraction - entry.fraction).abs() > 1e-9 {
        entry.last_direction = if fraction > entry.fraction { 1 } else { -1 };
        entry.last_move_at = tick.now_ms;
    }
    entry.fraction = fraction;
    entry.shares = if total > 0.0 && fraction > 0.0 {
        placed.iter().map(|(d, a)| (*d, a / total)).collect()
    } else {
        BTreeMap::new()
    };
    moves_between(r, &old, &placed, tick, hot_since)
}

/// The moves from the old placement to the new one: more at a destination leaves as its
/// clients' answers expire (the region's short TTL, or the normal one for clients that got
/// theirs before it turned hot); less comes back within the short TTL.
fn moves_between(
    r: usize,
    old: &BTreeMap<Destination, f64>,
    new: &BTreeMap<Destination, f64>,
    tick: &Tick,
    hot_since: Option<u64>,
) -> Vec<Move> {
    let now_ms = tick.now_ms;
    let steady_ms = u64::from(tick.settings.steady_ttl) * 1000;
    let hot_since = hot_since.unwrap_or(now_ms);
    let fast_share = if steady_ms == 0 {
        1.0
    } else {
        (now_ms.saturating_sub(hot_since) as f64 / steady_ms as f64).clamp(0.0, 1.0)
    };
    let mut dests: Vec<Destination> = old.keys().chain(new.keys()).copied().collect();
    dests.sort();
    dests.dedup();
    dests
        .into_iter()
        .filter_map(|dest| {
            let delta =
                new.get(&dest).copied().unwrap_or(0.0) - old.get(&dest).copied().unwrap_or(0.0);
            (delta.abs() > 1e-9).then(|| {
                let leaving = delta > 0.0;
                Move {
                    from: r as u16,
                    to: dest,
                    amount: delta,
                    at: now_ms,
                    fast_share: if leaving { fast_share } else { 1.0 },
                    slow_until: if leaving {
                        hot_since + steady_ms
                    } else {
                        now_ms
                    },
                }
            })
        })
        .collect()
}
