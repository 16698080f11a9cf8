//! Counters whose shape comes from the config: responses per zone and rcode, steered answers
//! per steered name, per profile endpoint and client region, per anycast destination and client
//! region. They are sized when a snapshot is built (the only time zones, profiles and regions
//! change) and live in the snapshot, so the serving path indexes a fixed array.
//!
//! Monotonic across reloads: every counter set is also held by a process-wide registry. A scrape
//! sums the sets still alive (the current snapshot, and an old one a worker may still hold), and
//! folds a set nobody else holds any more — its snapshot is gone, so nothing can bump it again —
//! into per-series totals keyed by label *names*, then forgets it. A series therefore keeps
//! counting across any number of reloads while its labels (zone, profile, endpoint, region
//! names) stay the same. The alternative, process-wide arrays re-mapped on reload, would need a
//! fixed capacity or a resize on the serving path; folding needs neither and costs the serving
//! path nothing.

use std::collections::BTreeMap;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::cells::{current_slot, Cells};
use super::serving::{rcode_bucket, RCODES};
use crate::policy::{AnycastChoice, CompiledPolicies, Destination, PolicyRoot, Trace};
use crate::zone::model::{SteeredBinding, Zone};

/// Zones counted under their own name; more are counted as [`OTHER`] (bounded cardinality).
pub const MAX_ZONE_SERIES: usize = 100;
/// Largest steered matrix (endpoints and anycast destinations × client regions) kept per
/// region; past it, client regions are merged into one `all` series.
pub const MAX_STEERED_CELLS: usize = 1 << 15;
/// Label of names outside every zone (and of zones past [`MAX_ZONE_SERIES`]).
pub const OTHER: &str = "other";

/// One time series, identified by its label values.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Series {
    /// Responses for names in `zone`.
    Zone { zone: String, rcode: &'static str },
    /// Steered answers for one `[[steered]]` name; `policy` is `anycast` or the root profile.
    Steered { name: String, policy: String },
    /// One profile on an answer's path chose `endpoint` for a client of `region`.
    Profile {
        profile: String,
        endpoint: String,
        region: String,
    },
    /// An anycast answer sent a client of `region` to `destination` (`global` when kept).
    Anycast { region: String, destination: String },
}

/// The counters of one snapshot, with the label names they count for.
pub struct SnapshotCounters {
    zones: Vec<String>,
    steered: Vec<(String, String)>,
    /// Per profile (ProfileId order): its name, endpoint names, first endpoint row.
    profiles: Vec<(String, Vec<String>, usize)>,
    /// Anycast destinations: `global`, regions, fallback sites (the `Destination` order).
    destinations: Vec<String>,
    regions: usize,
    /// Client region labels: the region names, or `["all"]` when merged.
    client_regions: Vec<String>,
    layout: Layout,
    cells: Cells,
}

/// Where each block of counters starts in `cells`.
#[derive(Debug, Clone, Copy)]
struct Layout {
    steered: usize,
    profiles: usize,
    anycast: usize,
    end: usize,
}

impl SnapshotCounters {
    /// Counters for these zones and policies, registered so that their totals outlive the
    /// snapshot that owns them.
    pub fn register(zones: &[Zone], policies: Option<&CompiledPolicies>) -> Arc<SnapshotCounters> {
        let counters = Arc::new(SnapshotCounters::new(zones, policies));
        let mut registry = registry();
        registry.retire_unused();
        registry.live.push(counters.clone());
        counters
    }

    fn new(zones: &[Zone], policies: Option<&CompiledPolicies>) -> SnapshotCounters {
        let zones: Vec<String> = zones
            .iter()
            .take(MAX_ZONE_SERIES)
            .map(|z| z.origin.to_string())
            .collect();
        let mut steered = Vec::new();
        let mut profiles = Vec::new();
        let mut endpoint_rows = 0;
        let mut destinations = Vec::new();
        let mut regions = 0;
        if let Some(p) = policies {
            steered = p
                .steered()
                .iter()
                .map(|s| (s.name.to_string(), policy_label(p, s.root)))
                .collect();
            for (name, endpoints) in p.endpoint_states() {
                let names: Vec<String> = endpoints.into_iter().map(|(e, _, _)| e).collect();
                let first = endpoint_rows;
                endpoint_rows += names.len();
                profiles.push((name, names, first));
            }
            regions = p.regions().len();
            destinations.push("global".to_string());
            destinations.extend(p.region_names().map(str::to_string));
            destinations.extend(p.fallback_sites().iter().map(|s| s.name.clone()));
        }
        let rows = endpoint_rows + destinations.len();
        let client_regions = match policies {
            Some(p) if rows * regions <= MAX_STEERED_CELLS => {
                p.region_names().map(str::to_string).collect()
            }
            Some(_) => vec!["all".to_string()],
            None => Vec::new(),
        };
        let steered_at = (zones.len() + 1) * RCODES.len();
        let profiles_at = steered_at + steered.len();
        let anycast_at = profiles_at + endpoint_rows * client_regions.len();
        let layout = Layout {
            steered: steered_at,
            profiles: profiles_at,
            anycast: anycast_at,
            end: anycast_at + destinations.len() * client_regions.len(),
        };
        SnapshotCounters {
            zones,
            steered,
            profiles,
            destinations,
            regions,
            client_regions,
            layout,
            cells: Cells::new(layout.end),
        }
    }

    /// A response for a name in zone `zone` (index in the snapshot's zones; `None`: no zone).
    #[inline]
    pub fn record_response(&self, zone: Option<usize>, rcode: u16) {
        let row = zone
            .filter(|&z| z < self.zones.len())
            .unwrap_or(self.zones.len());
        self.cells
            .bump(current_slot(), row * RCODES.len() + rcode_bucket(rcode));
    }

    /// A steered answer for `binding` (the steered name) to a client of `region`,
    /// decided as `trace` says.
    #[inline]
    pub fn record_steered(&self, binding: SteeredBinding, region: u16, trace: &Trace) {
        let slot = current_slot();
        let binding = binding.index();
        if binding < self.steered.len() {
            self.cells.bump(slot, self.layout.steered + binding);
        }
        let Some(column) = self.client_region_column(region) else {
            return;
        };
        let width = self.client_regions.len();
        if let Some((anycast_region, choice)) = trace.anycast {
            if let (Some(row), Some(column)) = (
                self.destination_row(destination_of(choice)),
                self.client_region_column(anycast_region),
            ) {
                self.cells
                    .bump(slot, self.layout.anycast + row * width + column);
            }
        }
        for step in trace.steps.iter().flatten() {
            let Some((_, endpoints, first)) = self.profiles.get(usize::from(step.profile.0)) else {
                continue;
            };
            let endpoint = usize::from(step.endpoint);
            if endpoint < endpoints.len() {
                let row = first + endpoint;
                self.cells
                    .bump(slot, self.layout.profiles + row * width + column);
            }
        }
    }

    fn client_region_column(&self, region: u16) -> Option<usize> {
        match self.client_regions.len() {
            0 => None,
            1 if self.regions != 1 => Some(0),
            n => Some(usize::from(region)).filter(|&r| r < n),
        }
    }

    fn destination_row(&self, destination: Destination) -> Option<usize> {
        let row = match destination {
            Destination::Global => 0,
            Destination::Region(r) => 1 + usize::from(r),
            Destination::Fallback(s) => 1 + self.regions + usize::from(s),
        };
        (row < self.destinations.len()).then_some(row)
    }

    /// Every series of this set with its value (zone and steered-name series even when zero, the
    /// sparse matrices only when not).
    pub fn each_series(&self, mut f: impl FnMut(Series, u64)) {
        let zone_labels = self.zones.iter().map(String::as_str).chain([OTHER]);
        for (row, zone) in zone_labels.enumerate() {
            for (r, rcode) in RCODES.iter().enumerate() {
                let zone = zone.to_string();
                f(
                    Series::Zone { zone, rcode },
                    self.cells.sum(row * RCODES.len() + r),
                );
            }
        }
        for (i, (name, policy)) in self.steered.iter().enumerate() {
            let series = Series::Steered {
                name: name.clone(),
                policy: policy.clone(),
            };
            f(series, self.cells.sum(self.layout.steered + i));
        }
        let width = self.client_regions.len();
        for (profile, endpoints, first) in &self.profiles {
            for (e, endpoint) in endpoints.iter().enumerate() {
                for (column, region) in self.client_regions.iter().enumerate() {
                    let n = self
                        .cells
                        .sum(self.layout.profiles + (first + e) * width + column);
                    if n > 0 {
                        let series = Series::Profile {
                            profile: profile.clone(),
                            endpoint: endpoint.clone(),
                            region: region.clone(),
                        };
                        f(series, n);
                    }
                }
            }
        }
        for (row, destination) in self.destinations.iter().enumerate() {
            for (column, region) in self.client_regions.iter().enumerate() {
                let n = self.cells.sum(self.layout.anycast + row * width + column);
                if n > 0 {
                    let series = Series::Anycast {
                        region: region.clone(),
                        destination: destination.clone(),
                    };
                    f(series, n);
                }
            }
        }
        debug_assert_eq!(self.layout.end, self.cells.len());
    }
}

fn policy_label(policies: &CompiledPolicies, root: PolicyRoot) -> String {
    match root {
        PolicyRoot::Anycast { .. } => "anycast".to_string(),
        PolicyRoot::Profile { profile, .. } => policies
            .profile_name(profile)
            .unwrap_or("unknown")
            .to_string(),
    }
}

/// Where an anycast choice sent the client (`Global` when it was kept on global anycast).
fn destination_of(choice: AnycastChoice) -> Destination {
    match choice {
        AnycastChoice::Global | AnycastChoice::Kept { .. } => Destination::Global,
        AnycastChoice::Forced(d) | AnycastChoice::Drained(d) => d,
        AnycastChoice::Shed { destination, .. } => destination,
    }
}

struct Registry {
    live: Vec<Arc<SnapshotCounters>>,
    retired: BTreeMap<Series, u64>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: Vec::new(),
    retired: BTreeMap::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    // Poisoning only means a scrape panicked; the totals are still whole numbers.
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Registry {
    /// Folds the sets that only the registry still holds into `retired`.
    fn retire_unused(&mut self) {
        let (unused, live): (Vec<_>, Vec<_>) = std::mem::take(&mut self.live)
            .into_iter()
            .partition(|c| Arc::strong_count(c) == 1);
        self.live = live;
        if unused.is_empty() {
            return;
        }
        // The last other owner released its reference after its final bump; pair with that.
        fence(Ordering::Acquire);
        for counters in unused {
            counters.each_series(|series, n| {
                if n > 0 {
                    *self.retired.entry(series).or_insert(0) += n;
                }
            });
        }
    }
}

/// Every series ever counted in this process, summed over live and retired counter sets.
pub fn totals() -> BTreeMap<Series, u64> {
    let mut registry = registry();
    registry.retire_unused();
    let mut totals = registry.retired.clone();
    for counters in &registry.live {
        counters.each_series(|series, n| *totals.entry(series).or_insert(0) += n);
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(origin: &str) -> Zone {
        use crate::zone::model::RecordInput;
        let name = hickory_proto::rr::Name::from_ascii(origin).unwrap_or_default();
        let soa = [
            0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let records = [RecordInput {
            name: &name,
            rtype: 6,
            ttl: 300,
            rdata: &soa,
        }];
        match Zone::build(&name, records) {
            Ok(z) => z,
            Err(e) => panic!("{e}"),
        }
    }

    fn zone_count(totals: &BTreeMap<Series, u64>, zone: &str, rcode: &'static str) -> u64 {
        let key = Series::Zone {
            zone: zone.to_string(),
            rcode,
        };
        totals.get(&key).copied().unwrap_or(0)
    }

    #[test]
    fn zone_responses_are_counted_by_zone_and_rcode() {
        let counters = SnapshotCounters::new(&[zone("a.test."), zone("b.test.")], None);
        counters.record_response(Some(1), 3);
        counters.record_response(Some(1), 3);
        counters.record_response(None, 5);
        counters.record_response(Some(7), 0);
        let mut seen = BTreeMap::new();
        counters.each_series(|s, n| {
            seen.insert(s, n);
        });
        assert_eq!(zone_count(&seen, "b.test.", "NXDOMAIN"), 2);
        assert_eq!(zone_count(&seen, "a.test.", "NXDOMAIN"), 0);
        assert_eq!(zone_count(&seen, OTHER, "REFUSED"), 1);
        assert_eq!(zone_count(&seen, OTHER, "NOERROR"), 1);
        // Every zone × rcode is present, zero or not, and nothing else.
        assert_eq!(seen.len(), 3 * RCODES.len());
    }

    #[test]
    fn totals_survive_the_snapshot_that_counted_them() {
        // A zone name no other test uses: the registry is process-wide.
        let origin = "retire.metrics.test.";
        let before = zone_count(&totals(), origin, "NOERROR");
        let first = SnapshotCounters::register(&[zone(origin)], None);
        first.record_response(Some(0), 0);
        first.record_response(Some(0), 0);
        assert_eq!(zone_count(&totals(), origin, "NOERROR"), before + 2);
        // A reload: the new set counts on, the old one is dropped and folded in.
        let second = SnapshotCounters::register(&[zone(origin)], None);
        drop(first);
        second.record_response(Some(0), 0);
        assert_eq!(zone_count(&totals(), origin, "NOERROR"), before + 3);
        drop(second);
        assert_eq!(zone_count(&totals(), origin, "NOERROR"), before + 3);
    }
}
