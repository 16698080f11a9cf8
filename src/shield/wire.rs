//! The shield as fleet mode keeps it in etcd: the leader's published state
//! ([`PublishedState`]), each node's report ([`NodeReport`]: its demand and what it serves) and
//! the freshest load feed ([`LoadRecord`]), as JSON, with their checks.
//!
//! Regions, fallback sites and destinations go by name (`"region:eu-north"`,
//! `"site:fb-eu"`), so a record is read against this node's own topology. Anything in etcd may
//! have been written by hand or by a broken node: an unknown name, a non-finite or absurd
//! number, a timer far in the future or a record too large is refused whole with the field
//! path, and nothing of a refused record is used. Pure: no I/O, no clock (callers pass
//! `now_ms`, milliseconds since the Unix epoch, the step's clock in fleet mode).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::step::{Demand, Move, Note, RegionState, Rings, ShieldState, TenantShed};
use crate::policy::Destination;

/// Largest record accepted from etcd, in bytes.
pub const MAX_RECORD_BYTES: usize = 1 << 20;
/// Most moves in flight a published state may carry (a real one holds a few per region).
const MAX_MOVES: usize = 4096;
/// Most tenant sheds a published state may carry (a tenant is shed on its own only when it
/// surges; a real state holds a handful).
const MAX_TENANT_SHEDS: usize = 4096;
/// Largest load, demand or trend figure believed (the feed's own bound: 10^15 of any unit).
const MAX_MAGNITUDE: f64 = super::feed::MAX_FEED_VALUE;
/// How far ahead of this node's clock a timer may be: a move lands at most a normal TTL
/// after it starts, and TTLs are at most a day; beyond that the record is nonsense.
const MAX_FUTURE_MS: u64 = 2 * 86_400_000;
/// How far ahead of this node's clock a past event's timer (a move's start, the last move, a
/// region turning hot, a record's own time) may be: clocks differ, but by less than a
/// hold-down; beyond it a fast clock on the leader would freeze hold-downs after a failover.
/// (A slow move's end is a normal TTL ahead of its start: that bound is the steady TTL more.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    pub now_ms: u64,
    /// Bound for past events' timers.
    pub skew_ms: u64,
    /// Bound for a slow move's end.
    pub slow_ms: u64,
}

impl Clock {
    pub fn new(now_ms: u64, settings: &super::step::ShieldSettings) -> Clock {
        // At least a second: clocks of healthy nodes differ by milliseconds.
        let skew_ms = settings.hold_down_ms.clamp(1000, MAX_FUTURE_MS);
        Clock {
            now_ms,
            skew_ms,
            slow_ms: skew_ms
                .saturating_add(u64::from(settings.steady_ttl) * 1000)
                .min(MAX_FUTURE_MS),
        }
    }
}

/// Most nodes a published state names as demand sources.
const MAX_NODES: usize = 1024;

/// Why a record from etcd was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WireError {
    #[error("{size} bytes; the limit is {limit}")]
    TooLarge { size: usize, limit: usize },
    #[error("does not parse: {0}")]
    Syntax(String),
    #[error("{path}: unknown {kind} {name:?}")]
    UnknownName {
        path: String,
        kind: &'static str,
        name: String,
    },
    #[error("{path}: {problem}")]
    BadValue { path: String, problem: String },
}

/// The shield state the leader published: what every node serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedState {
    /// The node that computed it.
    pub leader: String,
    /// When (ms since the epoch, the leader's clock).
    pub at_ms: u64,
    /// The load feed the step used, if any.
    pub feed: Option<FeedInfo>,
    /// Nodes whose demand was summed.
    pub demand_from: Vec<String>,
    pub state: WireState,
    /// The cells the leader's step found hot, by layer and cell name, for every node to
    /// leave out as the leader does (absent when none: a state without hot cells reads as
    /// before on a node that predates them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hot_cells: Vec<WireCell>,
}

/// One cell, named as the control file and the feed name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireCell {
    pub layer: String,
    pub cell: String,
}

/// Where a feed came from and how old it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedInfo {
    /// When it was measured (the sender's `time`) and received by the first node, ms since the
    /// epoch.
    pub measured_ms: u64,
    pub received_ms: u64,
    /// `<node> (<how>)`, e.g. `ns2 (http)`.
    pub origin: String,
}

/// [`ShieldState`] by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireState {
    pub regions: BTreeMap<String, WireRegion>,
    pub moves: Vec<WireMove>,
    /// Predicted utilisation per fallback site.
    pub sites: BTreeMap<String, f64>,
    pub last_tick_ms: Option<u64>,
    /// Smoothed demand per client region.
    pub demand: BTreeMap<String, WireDemand>,
    pub demand_age_ms: u64,
    /// Tenants shed on their own (tenant-first). Left out when there are none, so that a
    /// state without one reads the same to a node built before tenant sheds were published.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenants: Vec<WireTenantShed>,
}

/// One tenant's own shed in one region ([`TenantShed`] by name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireTenantShed {
    pub tenant: String,
    pub region: String,
    pub fraction: f64,
    pub shares: BTreeMap<String, f64>,
    pub load: f64,
    pub share: f64,
    pub last_direction: i8,
    pub last_move_at: u64,
    pub note: String,
    pub reason: String,
    pub moves: Vec<WireMove>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireRegion {
    pub fraction: f64,
    /// Destination → proportion of the shed part.
    pub shares: BTreeMap<String, f64>,
    pub last_direction: i8,
    pub last_move_at: u64,
    pub natural: f64,
    pub trend: f64,
    pub predicted_utilisation: f64,
    pub hot: bool,
    pub hot_since: Option<u64>,
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireMove {
    pub from: String,
    pub to: String,
    pub amount: f64,
    pub at: u64,
    pub fast_share: f64,
    pub slow_until: u64,
}

/// TTL-weighted answers (clients holding them) of one client region, by where they went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireDemand {
    pub kept: f64,
    #[serde(default)]
    pub sent: BTreeMap<String, f64>,
}

/// What one node tells the leader every tick (on its lease): its demand, as clients holding
/// each kind of answer (TTL-weighted answers per second), and what it serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeReport {
    pub node: String,
    pub at_ms: u64,
    pub demand: BTreeMap<String, WireDemand>,
    /// The state revision it serves (`None`: none yet, or decaying on its own).
    pub serving: Option<i64>,
    /// How it serves: `leader`, `published`, `fail-static`, `reverting`, `waiting`.
    pub role: String,
    /// Age of its load feed, ms.
    pub feed_age_ms: Option<u64>,
}

/// The freshest load feed, as the node that received it wrote it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadRecord {
    pub node: String,
    /// How it reached that node (`http`, `file`, `prometheus …`).
    pub origin: String,
    pub received_ms: u64,
    /// The feed document, checked again by every reader like any feed.
    pub feed: String,
}

/// Reads a JSON record of at most [`MAX_RECORD_BYTES`].
pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, WireError> {
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(WireError::TooLarge {
            size: bytes.len(),
            limit: MAX_RECORD_BYTES,
        });
    }
    serde_json::from_slice(bytes).map_err(|e| WireError::Syntax(e.to_string()))
}

/// How a destination is named on the wire.
fn destination_name(d: Destination, rings: &Rings) -> String {
    match d {
        Destination::Global => "global".to_string(),
        Destination::Region(r) => format!(
            "region:{}",
            rings
                .regions
                .get(r as usize)
                .map_or("?", |n| n.name.as_str())
        ),
        Destination::Fallback(s) => format!(
            "site:{}",
            rings.sites.get(s as usize).map_or("?", |n| n.name.as_str())
        ),
    }
}

fn region_index(name: &str, rings: &Rings, path: &str) -> Result<u16, WireError> {
    rings
        .regions
        .iter()
        .position(|n| n.name == name)
        .map(|i| i as u16)
        .ok_or_else(|| unknown(path, "region", name))
}

fn unknown(path: &str, kind: &'static str, name: &str) -> WireError {
    WireError::UnknownName {
        path: path.to_string(),
        kind,
        name: name.chars().take(64).collect(),
    }
}

fn parse_destination(name: &str, rings: &Rings, path: &str) -> Result<Destination, WireError> {
    if let Some(region) = name.strip_prefix("region:") {
        return region_index(region, rings, path).map(Destination::Region);
    }
    if let Some(site) = name.strip_prefix("site:") {
        return rings
            .sites
            .iter()
            .position(|n| n.name == site)
            .map(|i| Destination::Fallback(i as u16))
            .ok_or_else(|| unknown(path, "fallback site", site));
    }
    Err(unknown(
        path,
        "destination (region:NAME or site:NAME)",
        name,
    ))
}

fn note_name(note: Note) -> &'static str {
    match note {
        Note::Normal => "normal",
        Note::Shedding => "shedding",
        Note::NoHeadroom => "no-headroom",
        Note::Stale => "stale",
        Note::Reverting => "reverting",
        Note::OperatorHeld => "operator-held",
    }
}

fn parse_note(name: &str, path: &str) -> Result<Note, WireError> {
    Ok(match name {
        "normal" => Note::Normal,
        "shedding" => Note::Shedding,
        "no-headroom" => Note::NoHeadroom,
        "stale" => Note::Stale,
        "reverting" => Note::Reverting,
        "operator-held" => Note::OperatorHeld,
        other => return Err(unknown(path, "state", other)),
    })
}

/// A number that must be finite and within `range`.
fn bounded(value: f64, path: &str, low: f64, high: f64) -> Result<f64, WireError> {
    if value.is_finite() && (low..=high).contains(&value) {
        Ok(value)
    } else {
        Err(WireError::BadValue {
            path: path.to_string(),
            problem: format!("{value} is outside {low}..={high}"),
        })
    }
}

/// A finite number within ±[`MAX_MAGNITUDE`].
fn magnitude(value: f64, path: &str) -> Result<f64, WireError> {
    bounded(value, path, -MAX_MAGNITUDE, MAX_MAGNITUDE)
}

/// A proportion, 0..=1; float sums a hair beyond 1 (shares renormalised by the step) are 1.
fn share_of(value: f64, path: &str) -> Result<f64, WireError> {
    bounded(value, path, 0.0, 1.0 + 1e-9).map(|v| v.min(1.0))
}

/// A past event's timer (ms since the epoch): at most a hold-down ahead of this node's clock.
fn timer(value: u64, path: &str, clock: Clock) -> Result<u64, WireError> {
    ahead(value, path, clock.now_ms, clock.skew_ms)
}

/// A slow move's end: at most a hold-down and a steady TTL ahead.
fn slow_timer(value: u64, path: &str, clock: Clock) -> Result<u64, WireError> {
    ahead(value, path, clock.now_ms, clock.slow_ms)
}

fn ahead(value: u64, path: &str, now_ms: u64, limit_ms: u64) -> Result<u64, WireError> {
    if value > now_ms.saturating_add(limit_ms) {
        return Err(WireError::BadValue {
            path: path.to_string(),
            problem: format!(
                "{value} ms is {} ms ahead of this node's clock; the limit is {limit_ms} ms",
                value - now_ms
            ),
        });
    }
    Ok(value)
}

/// The wire form of one client region's demand.
pub fn encode_demand(demand: &[Demand], rings: &Rings) -> BTreeMap<String, WireDemand> {
    demand
        .iter()
        .enumerate()
        .filter_map(|(r, d)| {
            let name = rings.regions.get(r)?.name.clone();
            let sent = d
                .sent
                .iter()
                .map(|(to, v)| (destination_name(*to, rings), *v))
                .collect();
            Some((name, WireDemand { kept: d.kept, sent }))
        })
        .collect()
}

/// Demand per client region in topology order (regions not named: none).
pub fn decode_demand(
    wire: &BTreeMap<String, WireDemand>,
    rings: &Rings,
    path: &str,
) -> Result<Vec<Demand>, WireError> {
    let mut demand = vec![Demand::default(); rings.regions.len()];
    for (name, d) in wire {
        let here = format!("{path}.{name}");
        let r = region_index(name, rings, &here)?;
        let slot = &mut demand[r as usize];
        slot.kept = bounded(d.kept, &format!("{here}.kept"), 0.0, MAX_MAGNITUDE)?;
        for (to, v) in &d.sent {
            let at = format!("{here}.sent.{to}");
            let destination = parse_destination(to, rings, &at)?;
            slot.sent
                .insert(destination, bounded(*v, &at, 0.0, MAX_MAGNITUDE)?);
        }
    }
    Ok(demand)
}

/// The wire form of a state.
pub fn encode_state(state: &ShieldState, rings: &Rings) -> WireState {
    let dest = |d: &Destination| destination_name(*d, rings);
    WireState {
        regions: state
            .regions
            .iter()
            .enumerate()
            .filter_map(|(r, region)| {
                let name = rings.regions.get(r)?.name.clone();
                Some((
                    name,
                    WireRegion {
                        fraction: region.fraction,
                        shares: region.shares.iter().map(|(d, s)| (dest(d), *s)).collect(),
                        last_direction: region.last_direction,
                        last_move_at: region.last_move_at,
                        natural: region.natural,
                        trend: region.trend,
                        predicted_utilisation: region.predicted_utilisation,
                        hot: region.hot,
                        hot_since: region.hot_since,
                        note: note_name(region.note).to_string(),
                    },
                ))
            })
            .collect(),
        moves: state.moves.iter().map(|m| encode_move(m, rings)).collect(),
        sites: state
            .site_utilisation
            .iter()
            .enumerate()
            .filter_map(|(i, u)| Some((rings.sites.get(i)?.name.clone(), *u)))
            .collect(),
        last_tick_ms: state.last_tick_ms,
        demand: encode_demand(&state.demand, rings),
        demand_age_ms: state.demand_age_ms,
        tenants: state
            .tenants
            .iter()
            .map(|t| encode_tenant(t, rings))
            .collect(),
    }
}

fn region_name(r: u16, rings: &Rings) -> String {
    rings
        .regions
        .get(r as usize)
        .map_or("?".into(), |n| n.name.clone())
}

fn encode_move(m: &Move, rings: &Rings) -> WireMove {
    WireMove {
        from: region_name(m.from, rings),
        to: destination_name(m.to, rings),
        amount: m.amount,
        at: m.at,
        fast_share: m.fast_share,
        slow_until: m.slow_until,
    }
}

fn encode_tenant(t: &TenantShed, rings: &Rings) -> WireTenantShed {
    WireTenantShed {
        tenant: t.tenant.clone(),
        region: region_name(t.region, rings),
        fraction: t.fraction,
        shares: t
            .shares
            .iter()
            .map(|(d, s)| (destination_name(*d, rings), *s))
            .collect(),
        load: t.load,
        share: t.share,
        last_direction: t.last_direction,
        last_move_at: t.last_move_at,
        note: note_name(t.note).to_string(),
        reason: t.reason.clone(),
        moves: t.moves.iter().map(|m| encode_move(m, rings)).collect(),
    }
}

/// A published state read against this node's topology; every region and site of the
/// topology gets an entry (one the record does not name starts from normal answers).
pub fn decode_state(
    wire: &WireState,
    rings: &Rings,
    clock: Clock,
) -> Result<ShieldState, WireError> {
    let mut state = ShieldState {
        regions: vec![RegionState::default(); rings.regions.len()],
        site_utilisation: vec![0.0; rings.sites.len()],
        ..ShieldState::default()
    };
    for (name, region) in &wire.regions {
        let path = format!("state.regions.{name}");
        let r = region_index(name, rings, &path)?;
        state.regions[r as usize] = decode_region(region, rings, &path, clock)?;
    }
    if wire.moves.len() > MAX_MOVES {
        return Err(WireError::BadValue {
            path: "state.moves".into(),
            problem: format!("{} moves; the limit is {MAX_MOVES}", wire.moves.len()),
        });
    }
    for (i, m) in wire.moves.iter().enumerate() {
        let path = format!("state.moves[{i}]");
        state.moves.push(decode_move(m, rings, &path, clock)?);
    }
    for (name, u) in &wire.sites {
        let path = format!("state.sites.{name}");
        let i = rings
            .sites
            .iter()
            .position(|n| &n.name == name)
            .ok_or_else(|| unknown(&path, "fallback site", name))?;
        state.site_utilisation[i] = magnitude(*u, &path)?;
    }
    state.last_tick_ms = match wire.last_tick_ms {
        Some(t) => Some(timer(t, "state.last_tick_ms", clock)?),
        None => None,
    };
    state.demand = decode_demand(&wire.demand, rings, "state.demand")?;
    state.demand_age_ms = wire.demand_age_ms;
    state.tenants = decode_tenants(&wire.tenants, rings, clock)?;
    Ok(state)
}

fn decode_move(m: &WireMove, rings: &Rings, path: &str, clock: Clock) -> Result<Move, WireError> {
    let to = parse_destination(&m.to, rings, &format!("{path}.to"))?;
    if to == Destination::Global {
        return Err(unknown(&format!("{path}.to"), "destination", "global"));
    }
    Ok(Move {
        from: region_index(&m.from, rings, &format!("{path}.from"))?,
        to,
        // Negative: shedding less moves clients back.
        amount: magnitude(m.amount, &format!("{path}.amount"))?,
        at: timer(m.at, &format!("{path}.at"), clock)?,
        fast_share: bounded(m.fast_share, &format!("{path}.fast_share"), 0.0, 1.0)?,
        slow_until: slow_timer(m.slow_until, &format!("{path}.slow_until"), clock)?,
    })
}

/// The tenant sheds of a published state, sorted by tenant then region as the step keeps
/// them (the serving view searches them), one entry per tenant and region.
fn decode_tenants(
    wire: &[WireTenantShed],
    rings: &Rings,
    clock: Clock,
) -> Result<Vec<TenantShed>, WireError> {
    if wire.len() > MAX_TENANT_SHEDS {
        return Err(WireError::BadValue {
            path: "state.tenants".into(),
            problem: format!(
                "{} tenant sheds; the limit is {MAX_TENANT_SHEDS}",
                wire.len()
            ),
        });
    }
    let mut moves = 0;
    let mut tenants = Vec::with_capacity(wire.len());
    for (i, t) in wire.iter().enumerate() {
        let path = format!("state.tenants[{i}]");
        moves += t.moves.len();
        if moves > MAX_MOVES {
            return Err(WireError::BadValue {
                path: format!("{path}.moves"),
                problem: format!("more than {MAX_MOVES} tenant moves in all"),
            });
        }
        tenants.push(decode_tenant(t, rings, &path, clock)?);
    }
    tenants.sort_by(|a, b| (&a.tenant, a.region).cmp(&(&b.tenant, b.region)));
    if let Some(twice) = tenants
        .windows(2)
        .find(|w| w[0].tenant == w[1].tenant && w[0].region == w[1].region)
    {
        return Err(WireError::BadValue {
            path: "state.tenants".into(),
            problem: format!(
                "tenant {:?} is shed twice in region {}",
                twice[0].tenant,
                region_name(twice[0].region, rings)
            ),
        });
    }
    Ok(tenants)
}

fn decode_tenant(
    t: &WireTenantShed,
    rings: &Rings,
    path: &str,
    clock: Clock,
) -> Result<TenantShed, WireError> {
    let name_ok = !t.tenant.is_empty()
        && t.tenant.len() <= 63
        && t.tenant
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !name_ok {
        return Err(unknown(&format!("{path}.tenant"), "tenant name", &t.tenant));
    }
    let mut shares = BTreeMap::new();
    for (to, share) in &t.shares {
        let at = format!("{path}.shares.{to}");
        shares.insert(parse_destination(to, rings, &at)?, share_of(*share, &at)?);
    }
    if !(-1..=1).contains(&t.last_direction) {
        return Err(WireError::BadValue {
            path: format!("{path}.last_direction"),
            problem: format!("{} is not -1, 0 or 1", t.last_direction),
        });
    }
    let moves = t
        .moves
        .iter()
        .enumerate()
        .map(|(i, m)| decode_move(m, rings, &format!("{path}.moves[{i}]"), clock))
        .collect::<Result<_, _>>()?;
    Ok(TenantShed {
        tenant: t.tenant.clone(),
        region: region_index(&t.region, rings, &format!("{path}.region"))?,
        fraction: share_of(t.fraction, &format!("{path}.fraction"))?,
        shares,
        load: bounded(t.load, &format!("{path}.load"), 0.0, MAX_MAGNITUDE)?,
        share: bounded(t.share, &format!("{path}.share"), 0.0, MAX_MAGNITUDE)?,
        last_direction: t.last_direction,
        last_move_at: timer(t.last_move_at, &format!("{path}.last_move_at"), clock)?,
        note: parse_note(&t.note, &format!("{path}.note"))?,
        reason: t.reason.chars().take(512).collect(),
        moves,
    })
}

fn decode_region(
    wire: &WireRegion,
    rings: &Rings,
    path: &str,
    clock: Clock,
) -> Result<RegionState, WireError> {
    let mut shares = BTreeMap::new();
    for (to, share) in &wire.shares {
        let at = format!("{path}.shares.{to}");
        let destination = parse_destination(to, rings, &at)?;
        shares.insert(destination, share_of(*share, &at)?);
    }
    if !(-1..=1).contains(&wire.last_direction) {
        return Err(WireError::BadValue {
            path: format!("{path}.last_direction"),
            problem: format!("{} is not -1, 0 or 1", wire.last_direction),
        });
    }
    Ok(RegionState {
        fraction: share_of(wire.fraction, &format!("{path}.fraction"))?,
        shares,
        last_direction: wire.last_direction,
        last_move_at: timer(wire.last_move_at, &format!("{path}.last_move_at"), clock)?,
        // Estimates: finite and of a believable size (the step may dip them below zero).
        natural: magnitude(wire.natural, &format!("{path}.natural"))?,
        trend: magnitude(wire.trend, &format!("{path}.trend"))?,
        predicted_utilisation: magnitude(
            wire.predicted_utilisation,
            &format!("{path}.predicted_utilisation"),
        )?,
        hot: wire.hot,
        hot_since: match wire.hot_since {
            Some(t) => Some(timer(t, &format!("{path}.hot_since"), clock)?),
            None => None,
        },
        note: parse_note(&wire.note, &format!("{path}.note"))?,
    })
}

/// A published state's own fields checked (names, sizes); its state is read by
/// [`decode_state`].
pub fn check_published(published: &PublishedState, clock: Clock) -> Result<(), WireError> {
    if published.demand_from.len() > MAX_NODES {
        return Err(WireError::BadValue {
            path: "demand_from".into(),
            problem: format!(
                "{} nodes; the limit is {MAX_NODES}",
                published.demand_from.len()
            ),
        });
    }
    timer(published.at_ms, "at_ms", clock)?;
    if let Some(feed) = &published.feed {
        timer(feed.measured_ms, "feed.measured_ms", clock)?;
        timer(feed.received_ms, "feed.received_ms", clock)?;
    }
    Ok(())
}

/// A published state from etcd, checked whole and read against this node's topology.
pub fn read_published(
    bytes: &[u8],
    rings: &Rings,
    clock: Clock,
) -> Result<(PublishedState, ShieldState), WireError> {
    let published: PublishedState = decode(bytes)?;
    check_published(&published, clock)?;
    let state = decode_state(&published.state, rings, clock)?;
    Ok((published, state))
}

/// A node's report from etcd, checked whole; its demand in topology order.
pub fn read_report(
    bytes: &[u8],
    rings: &Rings,
    clock: Clock,
) -> Result<(NodeReport, Vec<Demand>), WireError> {
    let report: NodeReport = decode(bytes)?;
    timer(report.at_ms, "at_ms", clock)?;
    let demand = decode_demand(&report.demand, rings, "demand")?;
    Ok((report, demand))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shield::step::RingNode;

    fn rings() -> Rings {
        let node = |name: &str, neighbours: Vec<u16>| RingNode {
            name: name.into(),
            continent: "EU".into(),
            neighbours,
        };
        Rings {
            regions: vec![node("eu-west", vec![1]), node("eu-north", vec![0])],
            sites: vec![node("fb-eu", vec![])],
        }
    }

    fn shedding_state() -> ShieldState {
        let mut state = ShieldState {
            regions: vec![RegionState::default(); 2],
            site_utilisation: vec![0.25],
            last_tick_ms: Some(1_000),
            demand_age_ms: 500,
            ..ShieldState::default()
        };
        state.regions[0].fraction = 0.3;
        state.regions[0].shares = BTreeMap::from([
            (Destination::Region(1), 0.5),
            (Destination::Fallback(0), 0.5),
        ]);
        state.regions[0].hot = true;
        state.regions[0].hot_since = Some(900);
        state.regions[0].note = Note::Shedding;
        state.regions[0].last_direction = 1;
        state.moves.push(Move {
            from: 0,
            to: Destination::Fallback(0),
            amount: 120.0,
            at: 950,
            fast_share: 0.4,
            slow_until: 300_950,
        });
        state.demand = vec![
            Demand {
                kept: 10.0,
                sent: BTreeMap::from([(Destination::Region(1), 4.0)]),
            },
            Demand::default(),
        ];
        state
    }

    fn clock(now_ms: u64) -> Clock {
        Clock::new(now_ms, &crate::shield::step::ShieldSettings::default())
    }

    #[test]
    fn timers_ahead_of_the_clock_by_more_than_a_hold_down_are_refused() {
        let settings = crate::shield::step::ShieldSettings::default();
        let now = 10_000_000;
        let clock = Clock::new(now, &settings);
        let mut wire = encode_state(&shedding_state(), &rings());
        let within = now + settings.hold_down_ms;
        if let Some(r) = wire.regions.get_mut("eu-west") {
            r.last_move_at = within;
        }
        assert!(decode_state(&wire, &rings(), clock).is_ok());
        // A leader whose clock runs an hour fast would freeze every hold-down after a failover.
        if let Some(r) = wire.regions.get_mut("eu-west") {
            r.last_move_at = now + 3_600_000;
        }
        let error = decode_state(&wire, &rings(), clock)
            .err()
            .unwrap_or_else(|| panic!("a last move an hour ahead accepted"));
        assert!(
            error
                .to_string()
                .starts_with("state.regions.eu-west.last_move_at"),
            "{error}"
        );
    }

    /// [`shedding_state`] with tenant t0003 shed on its own from eu-west to fb-eu.
    fn tenant_shedding_state() -> ShieldState {
        let mut state = shedding_state();
        state.tenants.push(TenantShed {
            tenant: "t0003".into(),
            region: 0,
            fraction: 0.4,
            shares: BTreeMap::from([(Destination::Fallback(0), 1.0)]),
            load: 600.0,
            share: 0.61,
            last_direction: 1,
            last_move_at: 950,
            note: Note::Shedding,
            reason: "61% of eu-west".into(),
            moves: vec![Move {
                from: 0,
                to: Destination::Fallback(0),
                amount: 240.0,
                at: 950,
                fast_share: 0.5,
                slow_until: 300_950,
            }],
        });
        state
    }

    #[test]
    fn tenant_sheds_read_back_as_written_and_are_left_out_when_there_are_none() {
        let state = tenant_shedding_state();
        let json = serde_json::to_vec(&encode_state(&state, &rings())).unwrap_or_default();
        let read: WireState = decode(&json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read.tenants[0].region, "eu-west");
        assert_eq!(read.tenants[0].moves[0].to, "site:fb-eu");
        assert_eq!(decode_state(&read, &rings(), clock(2_000)), Ok(state));
        let none =
            serde_json::to_string(&encode_state(&shedding_state(), &rings())).unwrap_or_default();
        assert!(!none.contains("tenants"), "{none}");
    }

    #[test]
    fn bad_tenant_sheds_are_refused_with_the_field() {
        let good = encode_state(&tenant_shedding_state(), &rings());
        let refused = |edit: &dyn Fn(&mut WireTenantShed)| {
            let mut wire = good.clone();
            edit(&mut wire.tenants[0]);
            decode_state(&wire, &rings(), clock(2_000))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| panic!("accepted"))
        };
        assert!(refused(&|t| t.region = "mars-1".into()).starts_with("state.tenants[0].region"));
        assert!(refused(&|t| t.fraction = f64::NAN).starts_with("state.tenants[0].fraction"));
        assert!(refused(&|t| t.tenant = "Bad Name".into()).starts_with("state.tenants[0].tenant"));
        assert!(refused(&|t| t.moves[0].at = u64::MAX).starts_with("state.tenants[0].moves[0].at"));
        assert!(
            refused(&|t| t.shares = BTreeMap::from([("site:nowhere".into(), 1.0)]))
                .starts_with("state.tenants[0].shares.site:nowhere")
        );
        let mut twice = good.clone();
        twice.tenants.push(twice.tenants[0].clone());
        let error = decode_state(&twice, &rings(), clock(2_000))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("shed twice"), "{error}");
    }

    #[test]
    fn a_state_reads_back_as_it_was_written() {
        let state = shedding_state();
        let wire = encode_state(&state, &rings());
        let json = serde_json::to_vec(&wire).unwrap_or_default();
        let read: WireState = decode(&json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(decode_state(&read, &rings(), clock(2_000)), Ok(state));
    }

    #[test]
    fn bad_contents_are_refused_with_the_field() {
        let good = encode_state(&shedding_state(), &rings());
        let mut unknown_region = good.clone();
        let region = unknown_region.regions.remove("eu-west");
        unknown_region
            .regions
            .insert("mars-1".into(), region.unwrap_or_else(|| panic!("eu-west")));
        let mut absurd = good.clone();
        if let Some(r) = absurd.regions.get_mut("eu-west") {
            r.fraction = 7.0;
        }
        let mut future = good.clone();
        future.moves[0].at = u64::MAX;
        let mut bad_destination = good.clone();
        bad_destination.moves[0].to = "site:fb-mars".into();
        for (wire, field) in [
            (unknown_region, "state.regions.mars-1"),
            (absurd, "state.regions.eu-west.fraction"),
            (future, "state.moves[0].at"),
            (bad_destination, "state.moves[0].to"),
        ] {
            let error = decode_state(&wire, &rings(), clock(2_000))
                .err()
                .unwrap_or_else(|| panic!("{field} accepted"));
            assert!(error.to_string().starts_with(field), "{error}");
        }
        for garbage in [&b"{not json"[..], b"[]", b"{\"regions\": 1}"] {
            assert!(matches!(
                decode::<WireState>(garbage),
                Err(WireError::Syntax(_))
            ));
        }
        let huge = vec![b' '; MAX_RECORD_BYTES + 1];
        assert!(matches!(
            decode::<WireState>(&huge),
            Err(WireError::TooLarge { .. })
        ));
    }

    #[test]
    fn demand_with_negative_or_non_finite_figures_is_refused() {
        let wire = BTreeMap::from([(
            "eu-west".to_string(),
            WireDemand {
                kept: -1.0,
                sent: BTreeMap::new(),
            },
        )]);
        assert!(decode_demand(&wire, &rings(), "demand").is_err());
        let wire = BTreeMap::from([(
            "eu-west".to_string(),
            WireDemand {
                kept: 1.0,
                sent: BTreeMap::from([("region:eu-north".to_string(), f64::INFINITY)]),
            },
        )]);
        assert!(decode_demand(&wire, &rings(), "demand").is_err());
    }
}
