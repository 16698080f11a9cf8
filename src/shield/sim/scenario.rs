//! The scenario file (TOML): base demand per region, capacities, fallback-site base load, and
//! timed events. Parsed strictly (unknown fields refused) and checked against the topology
//! before a run, so that a typo in a region name is an error, not a silent no-op.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::policy::CompiledPolicies;

use super::SimError;

/// Default number of distinct client /24 subnets per region.
const DEFAULT_SUBNETS: u32 = 1000;
/// Most subnets per region (keeps a run to seconds and inside 10.0.0.0/8).
pub const MAX_SUBNETS: u32 = 8000;
/// Longest scenario, seconds (one day).
pub const MAX_DURATION_SECS: u64 = 86_400;

/// A simulation scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name, shown in the plot title and summary.
    pub name: String,
    /// What the scenario shows (free text).
    #[serde(default)]
    pub description: String,
    /// Simulated seconds (one tick per second).
    pub duration_secs: u64,
    /// Distinct client /24 subnets per region; each carries an equal share of its region's
    /// demand.
    #[serde(default = "default_subnets")]
    pub subnets_per_region: u32,
    /// Base demand per region in load units (the feed's units). Regions not listed have none.
    pub demand: BTreeMap<String, f64>,
    /// Capacity per region or fallback site; unlisted ones use the topology's `capacity`.
    #[serde(default)]
    pub capacity: BTreeMap<String, f64>,
    /// Load a fallback site carries on its own (its other traffic), in load units.
    #[serde(default)]
    pub site_load: BTreeMap<String, f64>,
    /// Seconds between load feeds (the monitoring system's interval).
    #[serde(default = "one")]
    pub feed_interval_secs: u64,
    /// Timed events.
    #[serde(default)]
    pub events: Vec<Event>,
    /// Tenants sharing the regions' demand, with per-tenant load series: the run compares
    /// tenant-first shedding with region-wide shedding ([`super::tenants`]).
    #[serde(default)]
    pub tenants: Option<TenantsScenario>,
}

/// `[tenants]`: `count` tenants (`tenant0`, `tenant1`, …) share every region's demand evenly,
/// each with `subnets_per_tenant` client subnets per region; `surges` add load of one tenant's
/// clients in one region over time (the per-tenant series a Prometheus query gives).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantsScenario {
    pub count: usize,
    #[serde(default = "default_subnets_per_tenant")]
    pub subnets_per_tenant: u32,
    #[serde(default)]
    pub surges: Vec<TenantSurge>,
}

fn default_subnets_per_tenant() -> u32 {
    10
}

/// Most tenants a scenario models (each evaluated per subnet every tick its answers expire).
pub const MAX_TENANTS: usize = 2000;

/// `[[tenants.surges]]`: tenant `tenant`'s clients located in `region` bring `load` more,
/// ramped over `ramp_secs` from `at`; from `end` (if any) it ramps away over `ramp_down_secs`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSurge {
    pub tenant: String,
    pub region: String,
    pub at: u64,
    pub load: f64,
    #[serde(default)]
    pub ramp_secs: u64,
    #[serde(default)]
    pub end: Option<u64>,
    #[serde(default)]
    pub ramp_down_secs: u64,
}

impl TenantSurge {
    /// Its extra load at second `t`.
    pub fn load_at(&self, t: u64) -> f64 {
        if t < self.at {
            return 0.0;
        }
        let up = ramp(t - self.at, self.ramp_secs);
        let down = match self.end {
            Some(e) if t >= e => 1.0 - ramp(t - e, self.ramp_down_secs),
            _ => 1.0,
        };
        self.load * up * down
    }
}

fn default_subnets() -> u32 {
    DEFAULT_SUBNETS
}

fn one() -> u64 {
    1
}

/// Something that happens during a scenario. Times are seconds from the start.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Event {
    /// A region's demand multiplies by `factor`, ramped linearly over `ramp_secs` from `at`;
    /// at `end` (if any) it ramps back to normal over `ramp_down_secs`.
    Surge {
        region: String,
        at: u64,
        factor: f64,
        #[serde(default)]
        ramp_secs: u64,
        #[serde(default)]
        end: Option<u64>,
        #[serde(default)]
        ramp_down_secs: u64,
    },
    /// A region's or site's capacity multiplies by `factor` at `at`, restored at `end`.
    Capacity {
        target: String,
        at: u64,
        factor: f64,
        #[serde(default)]
        end: Option<u64>,
    },
    /// The load feed stops for `secs` seconds from `at` (readings age, nothing new arrives).
    FeedStale { at: u64, secs: u64 },
    /// Feeds from `at` for `secs` seconds leave out one region or site.
    FeedMissing { target: String, at: u64, secs: u64 },
}

impl Event {
    /// When the event is over (demand, capacity and feed back to normal), if it ends.
    pub fn end(&self) -> Option<u64> {
        match self {
            Event::Surge {
                end,
                ramp_down_secs,
                ..
            } => end.map(|e| e.saturating_add(*ramp_down_secs)),
            Event::Capacity { end, .. } => *end,
            Event::FeedStale { at, secs } | Event::FeedMissing { at, secs, .. } => {
                Some(at.saturating_add(*secs))
            }
        }
    }
}

impl Scenario {
    /// Reads and parses a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, SimError> {
        let text = std::fs::read_to_string(path).map_err(|error| SimError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        Scenario::parse(&text, path)
    }

    /// Parses scenario text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Scenario, SimError> {
        let scenario: Scenario = toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|span| crate::text_position::line_column(text, span.start))
                .unwrap_or((0, 0));
            SimError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                message: e.message().to_string(),
            }
        })?;
        scenario.check_numbers(path)?;
        Ok(scenario)
    }

    fn check_numbers(&self, path: &Path) -> Result<(), SimError> {
        let invalid = |field: String, message: String| SimError::Invalid {
            path: path.to_path_buf(),
            field,
            message,
        };
        if self.duration_secs == 0 || self.duration_secs > MAX_DURATION_SECS {
            return Err(invalid(
                "duration_secs".into(),
                format!("must be within 1..={MAX_DURATION_SECS}"),
            ));
        }
        if self.subnets_per_region == 0 || self.subnets_per_region > MAX_SUBNETS {
            return Err(invalid(
                "subnets_per_region".into(),
                format!("must be within 1..={MAX_SUBNETS}"),
            ));
        }
        if self.feed_interval_secs == 0 {
            return Err(invalid(
                "feed_interval_secs".into(),
                "must be at least 1".into(),
            ));
        }
        for (table, values) in [
            ("demand", &self.demand),
            ("capacity", &self.capacity),
            ("site_load", &self.site_load),
        ] {
            for (name, value) in values {
                if !value.is_finite() || *value < 0.0 {
                    return Err(invalid(
                        format!("{table}.{name}"),
                        format!("{value} is not a finite number >= 0"),
                    ));
                }
            }
        }
        for (i, event) in self.events.iter().enumerate() {
            let field = |name: &str| format!("events[{i}].{name}");
            match event {
                Event::Surge {
                    at, factor, end, ..
                }
                | Event::Capacity {
                    at, factor, end, ..
                } => {
                    if !factor.is_finite() || *factor < 0.0 {
                        return Err(invalid(
                            field("factor"),
                            format!("{factor} is not a finite number >= 0"),
                        ));
                    }
                    if end.is_some_and(|e| e <= *at) {
                        return Err(invalid(field("end"), "must be after `at`".into()));
                    }
                }
                Event::FeedStale { .. } | Event::FeedMissing { .. } => {}
            }
        }
        if let Some(tenants) = &self.tenants {
            if tenants.count == 0 || tenants.count > MAX_TENANTS {
                return Err(invalid(
                    "tenants.count".into(),
                    format!("must be within 1..={MAX_TENANTS}"),
                ));
            }
            if tenants.subnets_per_tenant == 0 || tenants.subnets_per_tenant > 1000 {
                return Err(invalid(
                    "tenants.subnets_per_tenant".into(),
                    "must be within 1..=1000".into(),
                ));
            }
            for (i, surge) in tenants.surges.iter().enumerate() {
                let field = |name: &str| format!("tenants.surges[{i}].{name}");
                if super::tenants::tenant_index(&surge.tenant, tenants.count).is_none() {
                    return Err(invalid(
                        field("tenant"),
                        format!(
                            "{:?} is not one of tenant0..tenant{}",
                            surge.tenant,
                            tenants.count - 1
                        ),
                    ));
                }
                if !surge.load.is_finite() || surge.load < 0.0 {
                    return Err(invalid(
                        field("load"),
                        format!("{} is not a finite number >= 0", surge.load),
                    ));
                }
                if surge.end.is_some_and(|e| e <= surge.at) {
                    return Err(invalid(field("end"), "must be after `at`".into()));
                }
            }
        }
        Ok(())
    }

    /// The latest time any event is over (`None` when there are no events or one never ends).
    pub fn last_event_end(&self) -> Option<u64> {
        let ends: Option<Vec<u64>> = self.events.iter().map(Event::end).collect();
        ends.and_then(|e| e.into_iter().max())
    }
}

/// A region or fallback site, by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Node {
    Region(usize),
    Site(usize),
}

/// A scenario with its names resolved against the topology.
#[derive(Debug, Clone)]
pub(super) struct Resolved {
    pub base_demand: Vec<f64>,
    pub region_capacity: Vec<f64>,
    pub site_capacity: Vec<f64>,
    pub site_load: Vec<f64>,
    pub events: Vec<(Event, Option<Node>)>,
}

impl Resolved {
    /// Checks every name in the scenario against the topology.
    pub fn new(scenario: &Scenario, policies: &CompiledPolicies) -> Result<Resolved, SimError> {
        let path = PathBuf::from(&scenario.name);
        let unknown = |field: String, name: &str| SimError::Invalid {
            path: path.clone(),
            field,
            message: format!("{name:?} is not a region or fallback site of the topology"),
        };
        let node = |name: &str| -> Option<Node> {
            policies
                .region_index(name)
                .map(|r| Node::Region(r as usize))
                .or_else(|| {
                    policies
                        .fallback_index(name)
                        .map(|s| Node::Site(s as usize))
                })
        };
        let regions = policies.regions().len();
        let sites = policies.fallback_sites().len();
        let mut base_demand = vec![0.0; regions];
        for (name, value) in &scenario.demand {
            match node(name) {
                Some(Node::Region(r)) => base_demand[r] = *value,
                _ => return Err(unknown(format!("demand.{name}"), name)),
            }
        }
        let mut region_capacity: Vec<f64> = policies
            .regions()
            .iter()
            .map(|r| r.capacity.unwrap_or(0) as f64)
            .collect();
        let mut site_capacity: Vec<f64> = policies
            .fallback_sites()
            .iter()
            .map(|s| s.capacity.unwrap_or(0) as f64)
            .collect();
        for (name, value) in &scenario.capacity {
            match node(name) {
                Some(Node::Region(r)) => region_capacity[r] = *value,
                Some(Node::Site(s)) => site_capacity[s] = *value,
                None => return Err(unknown(format!("capacity.{name}"), name)),
            }
        }
        let mut site_load = vec![0.0; sites];
        for (name, value) in &scenario.site_load {
            match node(name) {
                Some(Node::Site(s)) => site_load[s] = *value,
                _ => return Err(unknown(format!("site_load.{name}"), name)),
            }
        }
        let mut events = Vec::new();
        for (i, event) in scenario.events.iter().enumerate() {
            let target = match event {
                Event::Surge { region, .. } => match node(region) {
                    Some(n @ Node::Region(_)) => Some(n),
                    _ => return Err(unknown(format!("events[{i}].region"), region)),
                },
                Event::Capacity { target, .. } | Event::FeedMissing { target, .. } => {
                    match node(target) {
                        Some(n) => Some(n),
                        None => return Err(unknown(format!("events[{i}].target"), target)),
                    }
                }
                Event::FeedStale { .. } => None,
            };
            events.push((event.clone(), target));
        }
        Ok(Resolved {
            base_demand,
            region_capacity,
            site_capacity,
            site_load,
            events,
        })
    }

    /// Demand multiplier of region `r` at second `t`.
    pub fn demand_factor(&self, r: usize, t: u64) -> f64 {
        let mut factor = 1.0;
        for (event, node) in &self.events {
            if let (
                Event::Surge {
                    at,
                    factor: f,
                    ramp_secs,
                    end,
                    ramp_down_secs,
                    ..
                },
                Some(Node::Region(x)),
            ) = (event, node)
            {
                if *x != r || t < *at {
                    continue;
                }
                let up = ramp(t - at, *ramp_secs);
                let down = match end {
                    Some(e) if t >= *e => 1.0 - ramp(t - e, *ramp_down_secs),
                    _ => 1.0,
                };
                factor *= 1.0 + (f - 1.0) * up * down;
            }
        }
        factor
    }

    /// Capacity multiplier of a node at second `t`.
    pub fn capacity_factor(&self, node: Node, t: u64) -> f64 {
        self.events
            .iter()
            .filter_map(|(event, target)| match event {
                Event::Capacity {
                    at, factor, end, ..
                } if *target == Some(node) && t >= *at && end.is_none_or(|e| t < e) => {
                    Some(*factor)
                }
                _ => None,
            })
            .product()
    }

    /// Whether the feed is stopped at second `t`.
    pub fn feed_stopped(&self, t: u64) -> bool {
        self.events.iter().any(|(event, _)| match event {
            Event::FeedStale { at, secs } => t >= *at && t < at.saturating_add(*secs),
            _ => false,
        })
    }

    /// Whether feeds at second `t` leave out this node.
    pub fn feed_omits(&self, node: Node, t: u64) -> bool {
        self.events.iter().any(|(event, target)| match event {
            Event::FeedMissing { at, secs, .. } => {
                *target == Some(node) && t >= *at && t < at.saturating_add(*secs)
            }
            _ => false,
        })
    }
}

/// Progress 0..=1 of a linear ramp `elapsed` seconds into `length` seconds.
fn ramp(elapsed: u64, length: u64) -> f64 {
    if length == 0 {
        1.0
    } else {
        (elapsed as f64 / length as f64).min(1.0)
    }
}
