//! The shield's thin I/O shell: every tick it polls the load sources, reads the demand
//! counters, runs the pure [`super::step::step`] (as [`checked_step`]) and each cell's
//! [`step_cell`], publishes the new [`ShedView`] for the serving path (with the cells hot by
//! their load), logs each changed decision with its reason, and keeps a status for operators.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::feed::FeedNames;
use super::link::FleetLink;
use super::prometheus::Capacities;
use super::source::{FeedSlot, FeedStats, LoadSource};
use super::step::cells::{reading_of, step_cells, CellState};
use super::step::{
    checked_step, shed_view, Change, Demand, Inputs, Note, Reading, RingNode, Rings,
    ShieldSettings, ShieldState, TenantLoad,
};
use crate::cells::blame::ImpairedCell;
use crate::cells::{ImpairedCells, Why};
use crate::metrics::cells::{current_slot, Cells};
use crate::policy::ShieldMode;
use crate::policy::{CompiledPolicies, Destination, RegionOverride, ShedView};
use crate::rfc3339;

mod fleet;

pub use fleet::FleetShieldStatus;

/// Changes kept for status.
const RECENT_CHANGES: usize = 50;
/// How long a state repair stays an alert.
const REPAIR_ALERT: Duration = Duration::from_secs(600);

/// Bits in one tick's map of client prefixes already counted (128 KiB). Prefixes are hashed
/// into it: two that share a bit count once between them, which undercounts every region
/// alike (about 1% per 10,000 prefixes a tick), so the shares the step reads stay true.
const SEEN_BITS: usize = 1 << 20;
/// Prefix lengths that make one client for the demand count (the resolver-cache granularity
/// of ECS, and of the per-subnet steering hashes by default).
const DEMAND_PREFIX_V4: u8 = 24;
const DEMAND_PREFIX_V6: u8 = 56;

/// DNS answers *sent* per client region and destination since the last tick, weighted by
/// their TTL (answers × TTL ≈ clients holding that answer, by Little's law; a hot region's
/// clients ask more often and must not count more): the shield's demand estimate.
///
/// Poisoning is bounded three ways. Only answers that went out count (the answer path
/// commits a [`DemandSample`] after the rate limiter, and not for a truncated response).
/// Each client prefix counts at most once per tick, however often it asks (a bit in a
/// fixed map per tick). And an ECS address counts only from resolvers listed in `[shield]
/// trusted_ecs_resolvers`: ECS from anyone else is a claim anyone can make, so such answers
/// are still steered by it but not counted at all (counting them under the resolver's own
/// address would put a client located by its ECS under the wrong region's row); queries
/// without ECS count by their source address only where it is proven (TCP and the
/// encrypted transports, or a valid DNS server cookie) or trusted: a UDP source address is
/// as easy to spoof as an ECS option. The step bounds what the counts may say by
/// its own bookkeeping besides (see `estimate_natural`).
///
/// Serving path: one hash, one or two relaxed atomic operations on the map, one relaxed add
/// into the worker's own counter slot ([`Cells`]); no lock, no allocation.
pub struct DemandCounters {
    regions: usize,
    sites: usize,
    cells: Cells,
    /// Two maps of prefixes counted: the tick's, and the next one's (cleared before use).
    seen: [Box<[AtomicU64]>; 2],
    /// Which of the two maps the serving path marks (its low bit).
    epoch: AtomicUsize,
    trusted_ecs: Vec<IpNet>,
}

impl std::fmt::Debug for DemandCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemandCounters")
            .field("regions", &self.regions)
            .field("sites", &self.sites)
            .field("trusted_ecs", &self.trusted_ecs)
            .finish_non_exhaustive()
    }
}

/// How a query's source address was proven (see [`DemandCounters::counted_address`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// TCP, DoT, DoH or DoQ: a handshake answered at that address.
    Transport,
    /// A valid DNS server cookie (RFC 7873/9018): our earlier answer reached that address.
    Cookie,
}

/// Why an anycast answer's demand counted, or did not (counted per answer in
/// `/metrics`, `steerdns_shield_demand_answers_total{source}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemandSource {
    Proven(Proof),
    /// From a resolver of `trusted_ecs_resolvers`.
    Trusted,
    /// UDP without ECS, without a valid cookie, from a source not trusted: not counted.
    Unproven,
    /// ECS from a resolver not trusted: not counted.
    UntrustedEcs,
}

impl DemandSource {
    /// Its index in the metric's labels (`metrics::serving::DEMAND_SOURCE_LABELS`).
    pub fn index(self) -> usize {
        match self {
            DemandSource::Proven(Proof::Transport) => 0,
            DemandSource::Proven(Proof::Cookie) => 1,
            DemandSource::Trusted => 2,
            DemandSource::Unproven => 3,
            DemandSource::UntrustedEcs => 4,
        }
    }
}

/// One answer's demand, held by the answer path until the answer is known to be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemandSample {
    cell: usize,
    ttl: u32,
    prefix: u64,
}

impl DemandCounters {
    pub fn new(regions: usize, sites: usize, trusted_ecs: Vec<IpNet>) -> DemandCounters {
        let map = || (0..SEEN_BITS / 64).map(|_| AtomicU64::new(0)).collect();
        DemandCounters {
            regions,
            sites,
            cells: Cells::new(regions * (1 + regions + sites)),
            seen: [map(), map()],
            epoch: AtomicUsize::new(0),
            trusted_ecs,
        }
    }

    fn width(&self) -> usize {
        1 + self.regions + self.sites
    }

    /// The address a query's demand counts by, and why (`None`: not counted). An ECS
    /// address counts from a trusted resolver only. A query without ECS counts by its source
    /// when the source is proven (`proven`: TCP or an encrypted transport, or a valid DNS
    /// server cookie: a spoofed UDP source can show neither) or trusted; a plain UDP source
    /// is a claim anyone can make, so it does not count.
    #[inline]
    pub fn counted_address(
        &self,
        source: IpAddr,
        ecs: Option<IpAddr>,
        proven: Option<Proof>,
    ) -> (Option<IpAddr>, DemandSource) {
        let trusted = || self.trusted_ecs.iter().any(|n| n.contains(&source));
        match (ecs, proven) {
            (None, Some(proof)) => (Some(source), DemandSource::Proven(proof)),
            (None, None) if trusted() => (Some(source), DemandSource::Trusted),
            (None, None) => (None, DemandSource::Unproven),
            (Some(ecs), _) if trusted() => (Some(ecs), DemandSource::Trusted),
            (Some(_), _) => (None, DemandSource::UntrustedEcs),
        }
    }

    /// The demand of one answer with `ttl` for a client at `addr` (see
    /// [`Self::counted_address`]) of `region`, sent to `to` (`Global` = kept); counted by
    /// [`Self::record`] once the answer is sent.
    #[inline]
    pub fn sample(&self, addr: IpAddr, region: u16, to: Destination, ttl: u32) -> DemandSample {
        let column = match to {
            Destination::Global => 0,
            Destination::Region(r) => 1 + r as usize,
            Destination::Fallback(s) => 1 + self.regions + s as usize,
        };
        DemandSample {
            cell: region as usize * self.width() + column,
            ttl,
            prefix: crate::policy::demand_key(addr, DEMAND_PREFIX_V4, DEMAND_PREFIX_V6),
        }
    }

    /// Counts a sent answer, unless its client prefix was counted already this tick.
    pub fn record(&self, sample: &DemandSample) {
        let map = &self.seen[self.epoch.load(Ordering::Acquire) & 1];
        let bit = (sample.prefix % SEEN_BITS as u64) as usize;
        let (Some(word), mask) = (map.get(bit / 64), 1u64 << (bit % 64)) else {
            return;
        };
        // Read first: a prefix that asks again (a flood) only reads a shared line.
        if word.load(Ordering::Relaxed) & mask != 0
            || word.fetch_or(mask, Ordering::Relaxed) & mask != 0
        {
            return;
        }
        self.cells
            .add(current_slot(), sample.cell, u64::from(sample.ttl));
    }

    /// Reads and resets the counters, and starts a new tick's map of prefixes counted.
    pub fn take(&self) -> Vec<Demand> {
        // The next map is cleared while nobody marks it, then put in service; an answer
        // that read the old epoch just before marks the old map, cleared next tick.
        let epoch = self.epoch.load(Ordering::Acquire);
        for word in self.seen[(epoch + 1) & 1].iter() {
            word.store(0, Ordering::Relaxed);
        }
        self.epoch.store(epoch.wrapping_add(1), Ordering::Release);
        (0..self.regions)
            .map(|r| {
                let row = r * self.width();
                let mut demand = Demand {
                    kept: self.cells.take(row) as f64,
                    ..Demand::default()
                };
                for i in 0..self.width() - 1 {
                    let n = self.cells.take(row + 1 + i);
                    if n > 0 {
                        let to = if i < self.regions {
                            Destination::Region(i as u16)
                        } else {
                            Destination::Fallback((i - self.regions) as u16)
                        };
                        demand.sent.insert(to, n as f64);
                    }
                }
                demand
            })
            .collect()
    }
}

/// What operators see of the shield (`steerdns status`, `/v1/status`, the dashboard).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ShieldStatus {
    pub mode: String,
    pub feed_age_secs: Option<f64>,
    pub feed_origin: Option<String>,
    /// The load sources polled (`file …`, `prometheus …`); pushes need none.
    #[serde(default)]
    pub sources: Vec<String>,
    pub feeds_accepted: u64,
    pub feeds_refused: u64,
    pub last_feed_refusal: Option<String>,
    pub high_watermark: f64,
    pub low_watermark: f64,
    pub regions: Vec<RingStatus>,
    pub sites: Vec<RingStatus>,
    pub alerts: Vec<String>,
    pub recent_changes: VecDeque<ChangeRecord>,
    /// Ticks whose state held a non-finite number that had to be repaired (a bug: inputs are
    /// bounded), and the latest repair (time: what).
    #[serde(default)]
    pub state_repairs: u64,
    #[serde(default)]
    pub last_state_repair: Option<String>,
    /// Ticks run since the server started (tests and operators wait for "N more ticks").
    #[serde(default)]
    pub ticks: u64,
    /// Fleet mode: who leads, which published state this node serves and how.
    #[serde(default)]
    pub fleet: Option<FleetShieldStatus>,
    /// Tenant-first shedding: the limit on one tenant's share of a hot region's load, and the
    /// tenants shed on their own.
    #[serde(default)]
    pub tenant_share: f64,
    #[serde(default)]
    pub tenants: Vec<TenantShedStatus>,
    /// Cells with a load in the feed (or hot): their load and whether it leaves them out of
    /// tenants' answers.
    #[serde(default)]
    pub cells: Vec<CellLoadStatus>,
}

/// One cell's load, as status shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CellLoadStatus {
    /// `global`, a region's or a fallback site's name, as the control file names layers.
    pub layer: String,
    pub cell: String,
    pub load: Option<f64>,
    pub capacity: Option<f64>,
    /// At the last fresh reading.
    pub utilisation: Option<f64>,
    /// Left out of tenants' answers for its load.
    pub hot: bool,
    /// `normal`, `hot`, `hold-down`, `stale (frozen)` or `stale (reverting)`.
    pub state: String,
}

/// One tenant shed on its own in one region (tenant-first shedding), as status shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TenantShedStatus {
    pub tenant: String,
    pub region: String,
    /// Its clients' load from the region and its share of the region's load (the tenant's
    /// shed added back).
    pub load: f64,
    pub share: f64,
    /// Share of its client subnets in the region shed, where to (destination, share).
    pub shed_fraction: f64,
    pub destinations: Vec<(String, f64)>,
    pub state: String,
    pub reason: String,
}

/// What one tick reads from the served state (the snapshot builds it; the shield does not
/// know the snapshot).
pub struct TickInputs<'a> {
    /// The compiled policies and the demand counters the serving path fills; `None` when no
    /// names are steered (the shield then publishes an empty view).
    pub steering: Option<(&'a CompiledPolicies, &'a DemandCounters)>,
    pub settings: &'a ShieldSettings,
    /// The operator's shield mode (control file).
    pub mode: ShieldMode,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RingStatus {
    pub name: String,
    pub load: Option<f64>,
    pub capacity: Option<f64>,
    pub utilisation: Option<f64>,
    /// Regions only: share of clients shed, where to (destination, share of the shed part).
    pub shed_fraction: f64,
    pub destinations: Vec<(String, f64)>,
    pub hot: bool,
    pub state: String,
    /// Regions only: the demand estimate — answers counted for the region's clients (TTL-
    /// weighted, smoothed over a normal TTL: about the clients holding an answer), kept and
    /// sent elsewhere together. Only proven or trusted sources count (see
    /// [`DemandCounters::counted_address`]).
    #[serde(default)]
    pub demand: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChangeRecord {
    pub at: String,
    pub region: String,
    /// A tenant's own shed in the region (tenant-first), not the region's.
    #[serde(default)]
    pub tenant: Option<String>,
    pub from: f64,
    pub to: f64,
    pub reason: String,
}

/// The shield's shared parts: the published view, the feed slot, the bookkeeping.
pub struct Shield {
    view: ArcSwap<ShedView>,
    pub feed: FeedSlot,
    state: Mutex<ShieldState>,
    status: Mutex<ShieldStatus>,
    /// When the state was last repaired (for the alert's lifetime).
    repaired_at: Mutex<Option<SystemTime>>,
    /// Fleet mode: the mailbox to the etcd task, and this side's bookkeeping.
    pub fleet: FleetLink,
    fleet_side: Mutex<fleet::Side>,
    /// Each cell's load decision, by (layer, cell) name, and the cells hot now.
    cells: Mutex<CellBook>,
}

/// The cells' load decisions between ticks.
#[derive(Default)]
struct CellBook {
    states: std::collections::BTreeMap<(String, String), CellState>,
    /// The last load a feed carried for each cell: (load, capacity, the feed's time, when it
    /// was received), for the feeds that leave the cell out ([`reading_of`]).
    carried: std::collections::BTreeMap<(String, String), (f64, f64, SystemTime, SystemTime)>,
    /// The cells hot now by this node's own step.
    hot: Option<Arc<ImpairedCells>>,
    /// Fleet mode, on a node serving the leader's published state: the cells hot by the
    /// leader's step, served instead of `hot` (`None`: this node serves its own).
    published: Option<Option<Arc<ImpairedCells>>>,
}

impl CellBook {
    /// The cells the serving path leaves out for their load.
    fn served(&self) -> Option<Arc<ImpairedCells>> {
        match &self.published {
            Some(published) => published.clone(),
            None => self.hot.clone(),
        }
    }
}

impl Default for Shield {
    fn default() -> Self {
        Shield {
            view: ArcSwap::from_pointee(ShedView::default()),
            feed: FeedSlot::new(),
            state: Mutex::new(ShieldState::default()),
            status: Mutex::new(ShieldStatus::default()),
            repaired_at: Mutex::new(None),
            fleet: FleetLink::default(),
            fleet_side: Mutex::new(fleet::Side::default()),
            cells: Mutex::new(CellBook::default()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shield {
    /// The view the serving path reads for this query.
    pub fn view(&self) -> arc_swap::Guard<Arc<ShedView>> {
        self.view.load()
    }

    pub fn status(&self) -> ShieldStatus {
        lock(&self.status).clone()
    }

    /// Publishes `view` for the serving path, with the cells hot now.
    fn publish(&self, mut view: ShedView) {
        view.set_cells(lock(&self.cells).served());
        self.view.store(Arc::new(view));
    }

    /// Publishes the view served again if the cells hot now are not the ones it carries (a
    /// fleet node serving the leader's published state between two revisions).
    fn publish_cells(&self) {
        let hot = lock(&self.cells).served();
        let current = self.view.load();
        let same = match (current.cells_shared(), &hot) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        if !same {
            let mut view = ShedView::clone(&current);
            view.set_cells(hot);
            self.view.store(Arc::new(view));
        }
    }

    /// Decides each cell's load from the latest feed ([`step_cell`]) and keeps the cells hot
    /// now for [`Self::publish`]; returns the changes, for the log.
    fn tick_cells(
        &self,
        policies: &CompiledPolicies,
        settings: &ShieldSettings,
        now: SystemTime,
        now_ms: u64,
    ) -> Vec<(String, String)> {
        let Some(topology) = policies.cells() else {
            *lock(&self.cells) = CellBook::default();
            return Vec::new();
        };
        let latest = self.feed.latest();
        let carried_now = |layer: &str, cell: &str| {
            let (feed, received, _) = latest.as_ref()?;
            let sample = feed.cells.get(layer)?.get(cell)?;
            Some((sample.load, sample.capacity, feed.time, *received))
        };
        let reading_of_carried =
            |(load, capacity, time, received): (f64, f64, SystemTime, SystemTime)| Reading {
                load,
                capacity,
                age_ms: feed_age(time, received, now).as_millis() as u64,
            };
        let mut book = lock(&self.cells);
        let mut carried = std::collections::BTreeMap::new();
        let mut cells = Vec::new();
        for (at, layer) in topology.layers() {
            let Some(layer_name) = policies.cell_layer_name(at) else {
                continue;
            };
            for (index, cell) in layer.cells().iter().enumerate() {
                let key = (layer_name.to_string(), cell.name.clone());
                let previous = book.states.get(&key).copied().unwrap_or_default();
                let now_carried = carried_now(layer_name, &cell.name);
                let last = book.carried.get(&key).copied();
                let reading = reading_of(
                    now_carried.map(reading_of_carried),
                    last.map(reading_of_carried),
                    settings,
                );
                if let Some(c) = now_carried.or(last) {
                    carried.insert(key.clone(), c);
                }
                cells.push((key, at, index, previous, reading));
            }
        }
        let decided = step_cells(
            &cells
                .iter()
                .map(|(_, _, _, previous, reading)| (*previous, *reading))
                .collect::<Vec<_>>(),
            settings,
            now_ms,
        );
        let mut states = std::collections::BTreeMap::new();
        let mut hot = Vec::new();
        let mut changes = Vec::new();
        for ((key, at, index, _, reading), (next, change)) in cells.into_iter().zip(decided) {
            if let Some(reason) = change {
                changes.push((format!("cell {}.{}", key.0, key.1), reason));
            }
            if next.hot {
                hot.push(ImpairedCell {
                    layer: at,
                    cell: index as u16,
                });
            }
            if reading.is_some() || next != CellState::default() {
                states.insert(key, next);
            }
        }
        book.states = states;
        book.carried = carried;
        let same = book
            .hot
            .as_ref()
            .is_some_and(|h| h.cells() == hot.as_slice())
            || (book.hot.is_none() && hot.is_empty());
        if !same {
            book.hot = (!hot.is_empty())
                .then(|| Arc::new(ImpairedCells::because(topology, &hot, Why::Hot)));
        }
        changes
    }

    /// The cells' load as status shows it.
    fn cell_status(&self) -> Vec<CellLoadStatus> {
        let latest = self.feed.latest();
        let book = lock(&self.cells);
        book.states
            .iter()
            .map(|((layer, cell), state)| {
                let sample = latest
                    .as_ref()
                    .and_then(|(feed, _, _)| feed.cells.get(layer)?.get(cell).copied());
                CellLoadStatus {
                    layer: layer.clone(),
                    cell: cell.clone(),
                    load: sample.map(|s| s.load),
                    capacity: sample.map(|s| s.capacity),
                    utilisation: state.utilisation,
                    hot: state.hot,
                    state: state.note.as_str().to_string(),
                }
            })
            .collect()
    }

    /// Logs and records for status what the cells' step changed.
    fn log_cell_changes(&self, changes: Vec<(String, String)>, now: SystemTime) {
        let mut status = lock(&self.status);
        for (who, reason) in changes {
            tracing::info!("shield: {who}: {reason}");
            let hot = reason.contains("left out");
            status.recent_changes.push_front(ChangeRecord {
                at: rfc3339::format_utc(now),
                region: who,
                tenant: None,
                from: if hot { 0.0 } else { 1.0 },
                to: if hot { 1.0 } else { 0.0 },
                reason,
            });
        }
        status.recent_changes.truncate(RECENT_CHANGES);
        status.cells = self.cell_status();
    }

    /// One tick: poll sources, decide, publish. `now_ms` is a monotonic clock in ms.
    pub fn tick(
        &self,
        served: TickInputs<'_>,
        sources: &mut [Box<dyn LoadSource>],
        now: SystemTime,
        now_ms: u64,
    ) {
        self.fleet.set_can_lead(served.steering.is_some());
        let Some((policies, demand)) = served.steering else {
            *lock(&self.cells) = CellBook::default();
            self.publish(ShedView::default());
            lock(&self.status).ticks += 1;
            return;
        };
        let known = KnownNames::of(policies);
        let region_names = &known.regions;
        let fleet_node = self.fleet.node().map(str::to_string);
        let leading = self.fleet.inbox().leading;
        for source in sources.iter_mut() {
            if fleet_node.is_none() || leading || !source.leader_only() {
                source.poll(&self.feed, &known.names(), now);
            }
        }
        let settings = served.settings;
        let cell_changes = self.tick_cells(policies, settings, now, now_ms);
        self.log_cell_changes(cell_changes, now);
        let rings = rings_of(policies);
        if let Some(node) = fleet_node {
            let tick = fleet::Tick {
                node: &node,
                policies,
                rings: &rings,
                settings,
                mode: served.mode,
                sources: sources.iter().map(|s| s.name()).collect(),
                now,
            };
            self.fleet_tick(tick, demand.take());
            self.publish_cells();
            return;
        }
        let inputs = self.inputs(policies, served.mode, demand.take(), now);
        let (next, changes, repairs) = {
            let previous = lock(&self.state);
            checked_step(&previous, &inputs, &rings, settings, now_ms)
        };
        self.publish(shed_view(&next, settings));
        let mut status = lock(&self.status);
        self.log_outcome(&mut status, &changes, &repairs, region_names, now);
        status.sources = sources.iter().map(|s| s.name()).collect();
        self.fill_status(&mut status, &next, &inputs, policies, settings, now);
        *lock(&self.state) = next;
        // Counted last: a reader that sees N ticks sees the state and status of the N-th.
        status.ticks += 1;
    }

    /// Logs and records for status what one step changed and repaired.
    fn log_outcome(
        &self,
        status: &mut ShieldStatus,
        changes: &[Change],
        repairs: &[String],
        region_names: &[&str],
        now: SystemTime,
    ) {
        if !repairs.is_empty() {
            let what = repairs.join("; ");
            tracing::error!("shield: state repaired (non-finite numbers): {what}");
            status.state_repairs += 1;
            status.last_state_repair = Some(format!("{}: {what}", rfc3339::format_utc(now)));
            *lock(&self.repaired_at) = Some(now);
        }
        for change in changes {
            let region = region_names
                .get(change.region as usize)
                .copied()
                .unwrap_or("?");
            let who = match &change.tenant {
                Some(tenant) => format!("tenant {tenant} in {region}"),
                None => region.to_string(),
            };
            tracing::info!(
                "shield: {who} shed {:.1}% -> {:.1}%: {}",
                change.from * 100.0,
                change.to * 100.0,
                change.reason
            );
            status.recent_changes.push_front(ChangeRecord {
                at: rfc3339::format_utc(now),
                region: region.to_string(),
                tenant: change.tenant.clone(),
                from: change.from,
                to: change.to,
                reason: change.reason.clone(),
            });
        }
        status.recent_changes.truncate(RECENT_CHANGES);
    }

    fn inputs(
        &self,
        policies: &CompiledPolicies,
        mode: ShieldMode,
        demand: Vec<Demand>,
        now: SystemTime,
    ) -> Inputs {
        let latest = self.feed.latest();
        let age_ms = latest
            .as_ref()
            .map(|(feed, received, _)| feed_age(feed.time, *received, now).as_millis() as u64);
        let read = |name: &str, regions: bool| -> Option<Reading> {
            let (feed, _, _) = latest.as_ref()?;
            let table = if regions {
                &feed.regions
            } else {
                &feed.fallback
            };
            let sample = table.get(name)?;
            Some(Reading {
                load: sample.load,
                capacity: sample.capacity,
                age_ms: age_ms.unwrap_or(u64::MAX),
            })
        };
        Inputs {
            regions: policies.region_names().map(|n| read(n, true)).collect(),
            sites: policies
                .fallback_sites()
                .iter()
                .map(|s| read(&s.name, false))
                .collect(),
            demand,
            mode,
            operator_held: (0..policies.regions().len())
                .map(|r| policies.region_override(r as u16) != RegionOverride::None)
                .collect(),
            tenants: latest
                .as_ref()
                .map(|(feed, _, _)| tenant_loads(&feed.tenants, policies))
                .unwrap_or_default(),
        }
    }

    fn fill_status(
        &self,
        status: &mut ShieldStatus,
        state: &ShieldState,
        inputs: &Inputs,
        policies: &CompiledPolicies,
        settings: &ShieldSettings,
        now: SystemTime,
    ) {
        let stats: FeedStats = self.feed.stats();
        let latest = self.feed.latest();
        status.mode = inputs.mode.name().to_string();
        status.feed_age_secs = latest
            .as_ref()
            .map(|(feed, received, _)| feed_age(feed.time, *received, now).as_secs_f64());
        status.feed_origin = latest.as_ref().map(|(_, _, origin)| origin.to_string());
        status.feeds_accepted = stats.accepted;
        status.feeds_refused = stats.refused;
        status.last_feed_refusal = stats
            .last_refusal
            .map(|r| format!("{} ({}): {}", r.at, r.origin, r.reason));
        status.high_watermark = settings.high_watermark;
        status.low_watermark = settings.low_watermark;
        let dest_name = |d: &Destination| match d {
            Destination::Global => "global".to_string(),
            Destination::Region(r) => policies
                .regions()
                .get(*r as usize)
                .map_or("?".into(), |x| x.name.clone()),
            Destination::Fallback(s) => policies
                .fallback_sites()
                .get(*s as usize)
                .map_or("?".into(), |x| x.name.clone()),
        };
        status.regions = policies
            .regions()
            .iter()
            .enumerate()
            .map(|(i, info)| {
                let reading = inputs.regions.get(i).copied().flatten();
                let region = state.regions.get(i).cloned().unwrap_or_default();
                RingStatus {
                    name: info.name.clone(),
                    load: reading.map(|r| r.load),
                    capacity: reading.map(|r| r.capacity),
                    utilisation: reading.map(|r| r.load / r.capacity),
                    shed_fraction: region.fraction,
                    destinations: region
                        .shares
                        .iter()
                        .map(|(d, s)| (dest_name(d), *s))
                        .collect(),
                    hot: region.hot,
                    state: note_text(region.note).to_string(),
                    demand: state
                        .demand
                        .get(i)
                        .map_or(0.0, |d| d.kept + d.sent.values().sum::<f64>()),
                }
            })
            .collect();
        status.tenant_share = settings.tenant_share;
        status.tenants = state
            .tenants
            .iter()
            .filter(|t| t.fraction > 0.0)
            .map(|t| TenantShedStatus {
                tenant: t.tenant.clone(),
                region: policies
                    .regions()
                    .get(usize::from(t.region))
                    .map_or("?".into(), |r| r.name.clone()),
                load: t.load,
                share: t.share,
                shed_fraction: t.fraction,
                destinations: t.shares.iter().map(|(d, s)| (dest_name(d), *s)).collect(),
                state: note_text(t.note).to_string(),
                reason: t.reason.clone(),
            })
            .collect();
        status.sites = policies
            .fallback_sites()
            .iter()
            .enumerate()
            .map(|(i, info)| {
                let reading = inputs.sites.get(i).copied().flatten();
                RingStatus {
                    name: info.name.clone(),
                    load: reading.map(|r| r.load),
                    capacity: reading.map(|r| r.capacity),
                    utilisation: reading.map(|r| r.load / r.capacity),
                    ..RingStatus::default()
                }
            })
            .collect();
        status.alerts = status
            .regions
            .iter()
            .filter(|r| r.state == note_text(Note::NoHeadroom))
            .map(|r| format!("{}: overloaded and no destination has headroom", r.name))
            .collect();
        let repaired_at = *lock(&self.repaired_at);
        let recent = repaired_at.is_some_and(|at| {
            now.duration_since(at)
                .map_or(true, |since| since < REPAIR_ALERT)
        });
        if let (true, Some(last)) = (recent, &status.last_state_repair) {
            status.alerts.push(format!(
                "shield state was repaired ({} time(s) since start; latest {last})",
                status.state_repairs
            ));
        }
        if latest.is_none() {
            status.alerts.push("no load feed received yet".into());
        } else if let Some(age_ms) = status.feed_age_secs.map(|a| a * 1000.0) {
            if age_ms > settings.revert_after_ms as f64 {
                status
                    .alerts
                    .push("load feed is stale: reverting to normal answers".into());
            } else if age_ms > settings.stale_after_ms as f64 {
                status
                    .alerts
                    .push("load feed is stale: decisions frozen".into());
            }
        }
    }
}

/// The names a feed may use for these policies (see [`FeedNames`]).
pub struct KnownNames<'p> {
    pub regions: Vec<&'p str>,
    pub sites: Vec<&'p str>,
    pub cells: Vec<(&'p str, &'p str)>,
}

impl<'p> KnownNames<'p> {
    pub fn of(policies: &'p CompiledPolicies) -> KnownNames<'p> {
        KnownNames {
            regions: policies.region_names().collect(),
            sites: policies
                .fallback_sites()
                .iter()
                .map(|s| s.name.as_str())
                .collect(),
            cells: policies.cell_names(),
        }
    }

    pub fn names(&self) -> FeedNames<'_> {
        FeedNames {
            regions: &self.regions,
            sites: &self.sites,
            cells: &self.cells,
        }
    }
}

/// The feed's tenant figures by region index, for the step.
fn tenant_loads(
    tenants: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, f64>>,
    policies: &CompiledPolicies,
) -> Vec<TenantLoad> {
    tenants
        .iter()
        .map(|(tenant, loads)| TenantLoad {
            tenant: tenant.clone(),
            regions: policies
                .region_names()
                .map(|region| loads.get(region).copied())
                .collect(),
        })
        .collect()
}

/// How old a feed's data is: from its own time, but never younger than since it arrived (a
/// sender whose clock runs ahead must not keep its data fresh for longer).
fn feed_age(stamped: SystemTime, received: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(stamped.min(received))
        .unwrap_or(Duration::ZERO)
}

fn note_text(note: Note) -> &'static str {
    match note {
        Note::Normal => "normal",
        Note::Shedding => "shedding",
        Note::NoHeadroom => "no headroom",
        Note::Stale => "stale (frozen)",
        Note::Reverting => "stale (reverting)",
        Note::OperatorHeld => "operator override",
    }
}

/// The rings as the step sees them.
pub fn rings_of(policies: &CompiledPolicies) -> Rings {
    Rings {
        regions: policies
            .regions()
            .iter()
            .map(|r| RingNode {
                name: r.name.clone(),
                continent: r.continent.clone(),
                neighbours: r.neighbours.clone(),
            })
            .collect(),
        sites: policies
            .fallback_sites()
            .iter()
            .map(|s| RingNode {
                name: s.name.clone(),
                continent: s.continent.clone(),
                neighbours: Vec::new(),
            })
            .collect(),
    }
}

/// The topology's capacities, for load sources that give load only.
pub fn capacities_of(policies: &CompiledPolicies) -> Capacities {
    Capacities {
        regions: policies
            .regions()
            .iter()
            .map(|r| (r.name.clone(), r.capacity.map(|c| c as f64)))
            .collect(),
        sites: policies
            .fallback_sites()
            .iter()
            .map(|s| (s.name.clone(), s.capacity.map(|c| c as f64)))
            .collect(),
    }
}

/// The TTL of normal anycast answers (the longest, to be safe), which the step needs to know
/// how long clients of a region that just turned hot keep their cached answers.
pub fn steady_ttl(policies: &CompiledPolicies) -> Option<u32> {
    policies
        .steered()
        .iter()
        .filter_map(|s| match s.root {
            crate::policy::PolicyRoot::Anycast { ttl } => Some(ttl),
            _ => None,
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> IpAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn each_client_prefix_counts_once_per_tick() {
        let counters = DemandCounters::new(2, 1, Vec::new());
        // A flood from one /24 (any host in it) is one client holding a 300 s answer.
        for host in 0..1000u32 {
            let a = addr(&format!("192.0.2.{}", host % 256));
            counters.record(&counters.sample(a, 0, Destination::Global, 300));
        }
        // Another /24, sent elsewhere; and an IPv6 /56 asked from two /64s.
        let other = counters.sample(addr("198.51.100.7"), 0, Destination::Region(1), 30);
        counters.record(&other);
        counters.record(&other);
        for a in ["2001:db8:0:1::1", "2001:db8:0:2::1"] {
            counters.record(&counters.sample(addr(a), 1, Destination::Fallback(0), 5));
        }
        let demand = counters.take();
        assert_eq!(demand[0].kept, 300.0);
        assert_eq!(demand[0].sent.get(&Destination::Region(1)), Some(&30.0));
        assert_eq!(demand[1].sent.get(&Destination::Fallback(0)), Some(&5.0));
        // The next tick counts each prefix afresh.
        counters.record(&other);
        counters.record(&other);
        assert_eq!(
            counters.take()[0].sent.get(&Destination::Region(1)),
            Some(&30.0)
        );
        assert_eq!(counters.take()[0], Demand::default());
    }

    #[test]
    fn ecs_counts_only_from_trusted_resolvers_and_sources_only_when_proven() {
        let trusted: IpNet = "192.0.2.0/28".parse().unwrap_or_else(|e| panic!("{e}"));
        let counters = DemandCounters::new(1, 0, vec![trusted]);
        let ecs = Some(addr("81.2.69.0"));
        let cookie = Some(Proof::Cookie);
        assert_eq!(
            counters.counted_address(addr("192.0.2.5"), ecs, None),
            (ecs, DemandSource::Trusted)
        );
        assert_eq!(
            counters.counted_address(addr("192.0.2.99"), ecs, cookie),
            (None, DemandSource::UntrustedEcs)
        );
        let plain = addr("203.0.113.9");
        assert_eq!(
            counters.counted_address(plain, None, None),
            (None, DemandSource::Unproven)
        );
        for proof in [Proof::Cookie, Proof::Transport] {
            assert_eq!(
                counters.counted_address(plain, None, Some(proof)),
                (Some(plain), DemandSource::Proven(proof))
            );
        }
        let resolver = addr("192.0.2.7");
        assert_eq!(
            counters.counted_address(resolver, None, None),
            (Some(resolver), DemandSource::Trusted)
        );
    }
}
