//! The compiled, immutable policy tables that [`super::evaluate()`] reads per query.

use std::net::{Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::Name;

use super::knobs::Destination;
#[cfg(doc)]
use super::HealthView;

/// Most profiles on one evaluation path (a root profile plus three nested levels).
pub const MAX_PROFILE_DEPTH: usize = 4;

/// One frontend region, as compiled from `[[topology.regions]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInfo {
    /// Region name, e.g. `eu-west`.
    pub name: String,
    /// Continent code (AF, AN, AS, EU, NA, OC, SA).
    pub continent: String,
    /// Regional anycast IPv4 addresses.
    pub v4: Vec<Ipv4Addr>,
    /// Regional anycast IPv6 addresses.
    pub v6: Vec<Ipv6Addr>,
    /// Neighbour region indices in order of preference.
    pub neighbours: Vec<u16>,
    /// Capacity for the traffic shield (`None` = unknown, do not shed into it).
    pub capacity: Option<u64>,
}

/// One fallback ring site, as compiled from `[[topology.fallback]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteInfo {
    /// Site name, e.g. `fb-eu`.
    pub name: String,
    /// Continent code.
    pub continent: String,
    /// The site's anycast IPv4 addresses.
    pub v4: Vec<Ipv4Addr>,
    /// The site's anycast IPv6 addresses.
    pub v6: Vec<Ipv6Addr>,
    /// Capacity for the traffic shield (`None` = unknown).
    pub capacity: Option<u64>,
}

/// The fallback site a region's clients fall back to: the first on its continent, else the
/// first of all (availability beats latency); `None` without fallback sites. One rule for a
/// drained region and for a tenant whose cells there are all impaired.
pub(crate) fn fallback_site_for(region: &RegionInfo, sites: &[SiteInfo]) -> Option<Destination> {
    let same_continent = sites.iter().position(|s| s.continent == region.continent);
    let site = same_continent.or((!sites.is_empty()).then_some(0))?;
    Some(Destination::Fallback(u16::try_from(site).ok()?))
}

/// Identifies a compiled profile (its position in `[profiles]`, sorted by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProfileId(pub u16);

/// Where the evaluation of a steered name starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyRoot {
    /// Global/regional anycast with knobs and the shield; answers carry `ttl`.
    Anycast {
        /// TTL of answers (shortened while the client's region is hot).
        ttl: u32,
    },
    /// A profile; `ttl_cap`, if any, caps the TTL that the profile path yields.
    Profile {
        /// The profile to evaluate.
        profile: ProfileId,
        /// The steered entry's `ttl`, if it had one.
        ttl_cap: Option<u32>,
    },
}

/// A compiled `[[steered]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SteeredName {
    /// The name, lower-cased, absolute; for a wildcard it starts with the `*` label.
    pub name: Name,
    /// Whether `name` is a wildcard (`*.suffix.`); the zone lookup applies wildcard matching.
    pub is_wildcard: bool,
    /// How it answers.
    pub root: PolicyRoot,
    /// Whether zone transfers carry its static projection (`transfer = ...`).
    pub transfer: super::config::TransferProjection,
}

/// How a profile chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileKindTag {
    /// Sticky per subnet, by weight.
    Weighted,
    /// By client region.
    Geo,
    /// First enabled endpoint.
    Failover,
}

/// What an endpoint answers with, as compiled: addresses, a CNAME, or a nested profile
/// (evaluation follows nested profiles down to a [`super::Target`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EndpointTarget {
    Addresses {
        v4: Vec<Ipv4Addr>,
        v6: Vec<Ipv6Addr>,
    },
    Cname {
        name: Name,
        wire: Vec<u8>,
    },
    Profile(ProfileId),
}

/// One compiled endpoint, with the control knobs already applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) name: String,
    /// Stable identity for rendezvous hashing (from the profile and endpoint names).
    pub(crate) salt: u64,
    /// Effective weight (0 when disabled); weighted profiles only.
    pub(crate) weight: u32,
    pub(crate) enabled: bool,
    pub(crate) target: EndpointTarget,
    /// Its health slot (index into [`CompiledPolicies::monitors`] and the [`HealthView`]).
    pub(crate) monitor: Option<u16>,
    /// The control file's `force_up`: served as up whatever its monitor says.
    pub(crate) forced_up: bool,
    /// Not written by the operator: the target of `all_down = "fallback:PROFILE"`, served only
    /// when every candidate is down.
    pub(crate) hidden: bool,
}

/// How a geo profile reached the endpoint for a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeoRoute {
    /// The endpoint lists the region itself.
    Direct,
    /// Via the region's neighbour (region index).
    Neighbour(u16),
    /// Via another region on the same continent (region index).
    Continent(u16),
    /// The profile's `default = true` endpoint.
    Default,
    /// Any other endpoint of the profile (in the order written): the ones above were down.
    Elsewhere,
}

/// The compiled choice rule of a profile (over [`Profile::candidates`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Sticky per subnet by weight, among the candidates; one candidate = no hash needed.
    Weighted,
    /// Per region: endpoints in order of preference with how each was found (the first is the
    /// answer while it is up; the chain ends with every other candidate); `unknown` serves an
    /// out-of-range region; `uniform`: every region's first choice is the same endpoint.
    Geo {
        by_region: Vec<Vec<(u16, GeoRoute)>>,
        unknown: Vec<(u16, GeoRoute)>,
        uniform: bool,
    },
    /// The first candidate (enabled endpoints in the order written) that is up.
    Failover,
}

/// What a profile answers when every candidate is down by its monitor (`all_down`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AllDown {
    /// As if every candidate were up (Route 53, Traffic Manager).
    #[default]
    ServeAll,
    /// The candidates that were up last.
    ServeLastHealthy,
    /// This endpoint (index in the profile), whatever its health.
    Fallback(u16),
}

/// One compiled profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Profile {
    pub(crate) name: String,
    pub(crate) kind: ProfileKindTag,
    pub(crate) ttl: u32,
    pub(crate) hash_prefix_v4: u8,
    pub(crate) hash_prefix_v6: u8,
    pub(crate) endpoints: Vec<Endpoint>,
    /// Endpoints it may serve, in the order written: enabled, not hidden, and (weighted) with
    /// a weight above 0.
    pub(crate) candidates: Vec<u16>,
    pub(crate) rule: Rule,
    pub(crate) all_down: AllDown,
    /// Whether health can change its answer (a candidate has a monitor that is not forced up,
    /// or nests a profile that is monitored). Unmonitored profiles never read the health view.
    pub(crate) monitored: bool,
}

/// The anycast answer for one region's clients after the operator's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionOverride {
    /// No knob: global anycast, subject to the shield.
    None,
    /// Forced by the operator (`force = ...`); the shield is ignored.
    Forced(Destination),
    /// Drained: sent to this destination; the shield is ignored.
    Drained(Destination),
}

/// A profile's name and its endpoints as `(name, effective weight, enabled)`.
pub type ProfileState = (String, Vec<(String, u32, bool)>);

/// Everything the serving path needs to answer steered names: immutable once compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledPolicies {
    pub(crate) global_v4: Vec<Ipv4Addr>,
    pub(crate) global_v6: Vec<Ipv6Addr>,
    pub(crate) regions: Vec<RegionInfo>,
    pub(crate) sites: Vec<SiteInfo>,
    pub(crate) overrides: Vec<RegionOverride>,
    /// Whether any region has a knob (then anycast answers depend on client location).
    pub(crate) any_override: bool,
    pub(crate) profiles: Vec<Profile>,
    pub(crate) steered: Vec<SteeredName>,
    /// Distinct monitor targets; an endpoint's `monitor` is an index here.
    pub(crate) monitors: Vec<super::monitor::MonitorSpec>,
    /// `[topology.cells]`: the layers tenants' shards are drawn from (`None`: no cells; every
    /// answer carries the addresses above).
    pub(crate) cells: Option<std::sync::Arc<crate::cells::CellTopology>>,
    /// The cells left out of tenants' answers (the control file's drains); `None`: none.
    pub(crate) impaired_cells: Option<std::sync::Arc<crate::cells::ImpairedCells>>,
    /// Cells with a health probe: the cell and its slot in `monitors` (the health view's cells
    /// down are these cells whose slot is down).
    pub(crate) cell_monitors: Vec<(crate::cells::blame::ImpairedCell, u16)>,
}

impl CompiledPolicies {
    /// Effective (knobs applied) endpoint weights and enabled flags per profile, for status
    /// output: `(profile, [(endpoint, weight, enabled)])`. Allocates.
    pub fn endpoint_states(&self) -> Vec<ProfileState> {
        self.profiles
            .iter()
            .map(|p| {
                let endpoints = p
                    .endpoints
                    .iter()
                    .map(|e| (e.name.clone(), e.weight, e.enabled))
                    .collect();
                (p.name.clone(), endpoints)
            })
            .collect()
    }

    /// The distinct monitor targets, by health slot (what the prober checks and the
    /// [`HealthView`] is indexed by).
    pub fn monitors(&self) -> &[super::monitor::MonitorSpec] {
        &self.monitors
    }

    /// Every monitored endpoint: `(profile, endpoint, slot, forced up)`. Allocates.
    pub fn monitored_endpoints(&self) -> Vec<(&str, &str, u16, bool)> {
        self.profiles
            .iter()
            .flat_map(|p| {
                p.endpoints.iter().filter_map(move |e| {
                    e.monitor
                        .map(|slot| (p.name.as_str(), e.name.as_str(), slot, e.forced_up))
                })
            })
            .collect()
    }

    /// A profile's `all_down` rule.
    pub fn profile_all_down(&self, id: ProfileId) -> Option<AllDown> {
        self.profile(id).map(|p| p.all_down)
    }

    /// The steered names, in config order.
    pub fn steered(&self) -> &[SteeredName] {
        &self.steered
    }

    /// The regions in topology order; a region's position is its `u16` index.
    pub fn regions(&self) -> &[RegionInfo] {
        &self.regions
    }

    /// The fallback sites in config order; a site's position is its `u16` index.
    pub fn fallback_sites(&self) -> &[SiteInfo] {
        &self.sites
    }

    /// Region names in topology order (what the geo module maps client addresses to).
    pub fn region_names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.regions.iter().map(|r| r.name.as_str())
    }

    /// Index of the region with this name.
    pub fn region_index(&self, name: &str) -> Option<u16> {
        position_u16(self.regions.iter().map(|r| r.name.as_str()), name)
    }

    /// Index of the fallback site with this name.
    pub fn fallback_index(&self, name: &str) -> Option<u16> {
        position_u16(self.sites.iter().map(|s| s.name.as_str()), name)
    }

    /// A region's continent code.
    pub fn region_continent(&self, region: u16) -> Option<&str> {
        self.region(region).map(|r| r.continent.as_str())
    }

    /// A region's neighbours (region indices, in order); empty for an unknown index.
    pub fn region_neighbours(&self, region: u16) -> &[u16] {
        self.region(region).map_or(&[], |r| r.neighbours.as_slice())
    }

    /// A region's capacity.
    pub fn region_capacity(&self, region: u16) -> Option<u64> {
        self.region(region).and_then(|r| r.capacity)
    }

    /// The operator's override for a region (`RegionOverride::None` for an unknown index).
    pub fn region_override(&self, region: u16) -> RegionOverride {
        self.overrides
            .get(usize::from(region))
            .copied()
            .unwrap_or(RegionOverride::None)
    }

    /// The cells tenants' anycast answers are drawn from, if any are configured.
    pub fn cells(&self) -> Option<&crate::cells::CellTopology> {
        self.cells.as_deref()
    }

    /// The cells left out of tenants' answers, if any.
    pub fn impaired_cells(&self) -> Option<&std::sync::Arc<crate::cells::ImpairedCells>> {
        self.impaired_cells.as_ref()
    }

    /// A cell layer's name as the control file and the feeds write it: `global`, a region's
    /// or a fallback site's name.
    pub fn cell_layer_name(&self, at: crate::cells::LayerRef) -> Option<&str> {
        use crate::cells::LayerRef;
        match at {
            LayerRef::Global => Some("global"),
            LayerRef::Region(r) => self.region(r).map(|r| r.name.as_str()),
            LayerRef::Site(s) => self.sites.get(usize::from(s)).map(|s| s.name.as_str()),
        }
    }

    /// A cell's layer name (as [`Self::cell_layer_name`]) and its own name.
    pub fn cell_name(&self, cell: crate::cells::blame::ImpairedCell) -> Option<(&str, &str)> {
        let layer = self.cell_layer_name(cell.layer)?;
        let name = self
            .cells()?
            .layer(cell.layer)?
            .cells()
            .get(usize::from(cell.cell))?
            .name
            .as_str();
        Some((layer, name))
    }

    /// The cell `cell` of the layer named `layer` (as [`Self::cell_name`] names them).
    pub fn cell_named(&self, layer: &str, cell: &str) -> Option<crate::cells::blame::ImpairedCell> {
        self.cells()?.layers().find_map(|(at, cells)| {
            if self.cell_layer_name(at)? != layer {
                return None;
            }
            let index = cells.cells().iter().position(|c| c.name == cell)?;
            Some(crate::cells::blame::ImpairedCell {
                layer: at,
                cell: u16::try_from(index).ok()?,
            })
        })
    }

    /// Every cell, named as [`Self::cell_name`] names it, layer by layer in cell order.
    pub fn cell_names(&self) -> Vec<(&str, &str)> {
        let Some(topology) = self.cells() else {
            return Vec::new();
        };
        topology
            .layers()
            .filter_map(|(at, layer)| Some((self.cell_layer_name(at)?, layer)))
            .flat_map(|(name, layer)| layer.cells().iter().map(move |c| (name, c.name.as_str())))
            .collect()
    }

    /// The cells with a health probe, each with its monitor slot.
    pub fn cell_monitors(&self) -> &[(crate::cells::blame::ImpairedCell, u16)] {
        &self.cell_monitors
    }

    /// The global anycast addresses.
    pub fn global(&self) -> (&[Ipv4Addr], &[Ipv6Addr]) {
        (&self.global_v4, &self.global_v6)
    }

    /// The id of the profile with this name.
    pub fn profile_id(&self, name: &str) -> Option<ProfileId> {
        position_u16(self.profiles.iter().map(|p| p.name.as_str()), name).map(ProfileId)
    }

    /// The name of a profile.
    pub fn profile_name(&self, id: ProfileId) -> Option<&str> {
        self.profile(id).map(|p| p.name.as_str())
    }

    /// The kind of a profile.
    pub fn profile_kind(&self, id: ProfileId) -> Option<ProfileKindTag> {
        self.profile(id).map(|p| p.kind)
    }

    /// The name of an endpoint of a profile.
    pub fn endpoint_name(&self, id: ProfileId, endpoint: u16) -> Option<&str> {
        self.profile(id)
            .and_then(|p| p.endpoints.get(usize::from(endpoint)))
            .map(|e| e.name.as_str())
    }

    pub(crate) fn region(&self, region: u16) -> Option<&RegionInfo> {
        self.regions.get(usize::from(region))
    }

    pub(crate) fn profile(&self, id: ProfileId) -> Option<&Profile> {
        self.profiles.get(usize::from(id.0))
    }

    /// Whether any endpoint reachable from `root` (servable now or not) answers with a CNAME.
    /// Names that never do are served by the fast path (see `snapshot::precompiled`).
    pub fn may_answer_cname(&self, root: PolicyRoot) -> bool {
        let PolicyRoot::Profile { profile, .. } = root else {
            return false;
        };
        let mut pending = vec![(profile, 0usize)];
        while let Some((id, depth)) = pending.pop() {
            let Some(profile) = self.profile(id) else {
                continue;
            };
            for endpoint in &profile.endpoints {
                match endpoint.target {
                    EndpointTarget::Cname { .. } => return true,
                    EndpointTarget::Profile(next) if depth < MAX_PROFILE_DEPTH => {
                        pending.push((next, depth + 1));
                    }
                    _ => {}
                }
            }
        }
        false
    }
}

impl CompiledPolicies {
    /// Every answer a steered name with this root can give, whatever the client, the knobs or
    /// the shield: global anycast, each region's and fallback site's addresses (anycast), or
    /// every endpoint's addresses and CNAME target, nested profiles included, enabled or not.
    /// DNSSEC signs each of them ahead of time. Allocates (off the serving path).
    pub fn possible_targets(&self, root: PolicyRoot) -> Vec<super::Target<'_>> {
        use super::Target;
        let mut out = Vec::new();
        match root {
            PolicyRoot::Anycast { .. } => {
                out.push(Target::Addresses {
                    v4: &self.global_v4,
                    v6: &self.global_v6,
                });
                for region in &self.regions {
                    out.push(Target::Addresses {
                        v4: &region.v4,
                        v6: &region.v6,
                    });
                }
                for site in &self.sites {
                    out.push(Target::Addresses {
                        v4: &site.v4,
                        v6: &site.v6,
                    });
                }
            }
            PolicyRoot::Profile { profile, .. } => {
                let mut pending = vec![(profile, 0usize)];
                let mut seen = Vec::new();
                while let Some((id, depth)) = pending.pop() {
                    if seen.contains(&id) {
                        continue;
                    }
                    seen.push(id);
                    let Some(profile) = self.profile(id) else {
                        continue;
                    };
                    for endpoint in &profile.endpoints {
                        match &endpoint.target {
                            EndpointTarget::Addresses { v4, v6 } => {
                                out.push(Target::Addresses { v4, v6 })
                            }
                            EndpointTarget::Cname { name, wire } => {
                                out.push(Target::Cname { name, wire })
                            }
                            EndpointTarget::Profile(next) if depth < MAX_PROFILE_DEPTH => {
                                pending.push((*next, depth + 1));
                            }
                            EndpointTarget::Profile(_) => {}
                        }
                    }
                }
            }
        }
        out
    }

    /// The largest TTL an answer from this root can carry (profiles: the root profile's TTL
    /// under the steered entry's cap; nested profiles only shorten it).
    pub fn ttl_bound(&self, root: PolicyRoot) -> u32 {
        match root {
            PolicyRoot::Anycast { ttl } => ttl,
            PolicyRoot::Profile { profile, ttl_cap } => self
                .profile(profile)
                .map_or(0, |p| p.ttl)
                .min(ttl_cap.unwrap_or(u32::MAX)),
        }
    }
}

fn position_u16<'a>(mut names: impl Iterator<Item = &'a str>, wanted: &str) -> Option<u16> {
    names
        .position(|n| n == wanted)
        .and_then(|i| u16::try_from(i).ok())
}
