//! Inputs that change at run time: the operator's control knobs (compiled into the policies) and
//! the traffic shield's shed decisions (read per query, never compiled).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

/// What the traffic shield may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShieldMode {
    /// Decide from the load feed every tick.
    #[default]
    Auto,
    /// Hold the current decisions.
    Frozen,
    /// Normal answers only.
    Off,
}

impl ShieldMode {
    /// The mode as the control file spells it (`auto`, `frozen`, `off`), for status and summaries.
    pub fn name(self) -> &'static str {
        match self {
            ShieldMode::Auto => "auto",
            ShieldMode::Frozen => "frozen",
            ShieldMode::Off => "off",
        }
    }
}

/// Operator control state (from the control file). `ControlKnobs::default()` changes nothing.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ControlKnobs {
    /// Per profile (by name): endpoint overrides.
    #[serde(default)]
    pub profiles: BTreeMap<String, ProfileKnobs>,
    /// Per region (by name): forced answer and drain.
    #[serde(default)]
    pub regions: BTreeMap<String, RegionKnobs>,
    /// Per cell layer (`global`, a region's or a fallback site's name), per cell (by name):
    /// `[cells.LAYER.CELL] drain = true` leaves the cell out of tenants' answers.
    #[serde(default)]
    pub cells: BTreeMap<String, BTreeMap<String, CellKnobs>>,
}

/// Operator knobs for one cell of `[topology.cells]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CellKnobs {
    /// Leave the cell out of every tenant answer that has another cell of its shard in the
    /// layer (a tenant whose shard in the layer is all drained keeps it whole).
    #[serde(default)]
    pub drain: bool,
}

/// Overrides for one profile's endpoints.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProfileKnobs {
    /// Per endpoint (by name).
    #[serde(default)]
    pub endpoints: BTreeMap<String, EndpointKnobs>,
}

/// Overrides for one endpoint.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EndpointKnobs {
    /// Replaces the configured weight (weighted profiles only; 0..=1000).
    #[serde(default)]
    pub weight: Option<u32>,
    /// `Some(false)` takes the endpoint out of service; `Some(true)` puts a configured-disabled
    /// endpoint back.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `true` serves a monitored endpoint as up whatever its monitor says (it is still probed,
    /// and status shows both). `enabled = false` wins over it.
    #[serde(default)]
    pub force_up: Option<bool>,
}

/// Operator knobs for one region (they take precedence over the traffic shield).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RegionKnobs {
    /// Pin the anycast answer for this region's clients.
    #[serde(default)]
    pub force: Option<ForcedAnswer>,
    /// Send this region's clients to its first usable neighbour (or a fallback site).
    #[serde(default)]
    pub drain: bool,
}

/// A forced anycast answer for a region's clients: `global`, `regional` or `fallback:<site>`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum ForcedAnswer {
    /// The global anycast addresses (also ignores the shield for this region).
    Global,
    /// The region's own regional anycast addresses.
    Regional,
    /// A fallback site's addresses, by site name.
    Fallback(String),
}

/// A string that is not `global`, `regional` or `fallback:<site>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not one of \"global\", \"regional\", \"fallback:<site>\"")]
pub struct BadForcedAnswer(pub String);

impl FromStr for ForcedAnswer {
    type Err = BadForcedAnswer;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "global" => Ok(Self::Global),
            "regional" => Ok(Self::Regional),
            _ => match s.strip_prefix("fallback:") {
                Some(site) if !site.is_empty() => Ok(Self::Fallback(site.to_owned())),
                _ => Err(BadForcedAnswer(s.to_owned())),
            },
        }
    }
}

impl TryFrom<String> for ForcedAnswer {
    type Error = BadForcedAnswer;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl fmt::Display for ForcedAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Global => f.write_str("global"),
            Self::Regional => f.write_str("regional"),
            Self::Fallback(site) => write!(f, "fallback:{site}"),
        }
    }
}

/// Where shed (or drained, or forced) anycast traffic goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Destination {
    /// The global anycast addresses.
    Global,
    /// A region's regional anycast addresses (region index).
    Region(u16),
    /// A fallback site's anycast addresses (site index).
    Fallback(u16),
}

/// The most destinations one region's shed traffic may be split over.
pub const MAX_SHED_DESTINATIONS: usize = 4;

/// One destination of a region's shed traffic and its share (relative weight, 1..=1000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShedShare {
    /// Where this share goes (`Region` or `Fallback`).
    pub destination: Destination,
    /// Relative share among the region's destinations (per-mille by convention).
    pub share_permille: u16,
}

/// Why a [`RegionShed`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShedError {
    /// Fraction above 1000 per-mille.
    #[error("shed fraction {0} per mille is above 1000 per mille")]
    FractionTooLarge(u16),
    /// More destinations than [`MAX_SHED_DESTINATIONS`].
    #[error("{0} shed destinations, at most {MAX_SHED_DESTINATIONS} are allowed")]
    TooManyDestinations(usize),
    /// A share of 0 or above 1000.
    #[error("shed share {0} per mille must be within 1..=1000")]
    BadShare(u16),
    /// Shedding a fraction but with nowhere to send it.
    #[error("shed fraction {0} per mille with no destination")]
    NoDestination(u16),
    /// A destination of `Global` (shedding exists to move traffic away from global anycast).
    #[error("the global anycast is not a shed destination")]
    GlobalDestination,
}

/// The traffic shield's decision for one region: shed `fraction_permille` of its client subnets
/// over `destinations`, and use `hot_ttl` for its clients while it is hot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RegionShed {
    fraction_permille: u16,
    destinations: [Option<ShedShare>; MAX_SHED_DESTINATIONS],
    hot_ttl: Option<u32>,
}

impl RegionShed {
    /// Builds a region's shed state, checking its invariants.
    pub fn new(
        fraction_permille: u16,
        destinations: &[ShedShare],
        hot_ttl: Option<u32>,
    ) -> Result<Self, ShedError> {
        if fraction_permille > 1000 {
            return Err(ShedError::FractionTooLarge(fraction_permille));
        }
        if destinations.len() > MAX_SHED_DESTINATIONS {
            return Err(ShedError::TooManyDestinations(destinations.len()));
        }
        if fraction_permille > 0 && destinations.is_empty() {
            return Err(ShedError::NoDestination(fraction_permille));
        }
        let mut slots = [None; MAX_SHED_DESTINATIONS];
        for (slot, share) in slots.iter_mut().zip(destinations) {
            if share.share_permille == 0 || share.share_permille > 1000 {
                return Err(ShedError::BadShare(share.share_permille));
            }
            if share.destination == Destination::Global {
                return Err(ShedError::GlobalDestination);
            }
            *slot = Some(*share);
        }
        Ok(Self {
            fraction_permille,
            destinations: slots,
            hot_ttl,
        })
    }

    /// Share of the region's client subnets sent elsewhere, per-mille.
    pub fn fraction_permille(&self) -> u16 {
        self.fraction_permille
    }

    /// The destinations and their shares.
    pub fn destinations(&self) -> impl Iterator<Item = &ShedShare> + '_ {
        self.destinations.iter().flatten()
    }

    /// The short TTL used for this region's clients while it is hot.
    pub fn hot_ttl(&self) -> Option<u32> {
        self.hot_ttl
    }

    /// Whether this state changes anything for the region's clients.
    pub fn is_active(&self) -> bool {
        self.fraction_permille > 0 || self.hot_ttl.is_some()
    }
}

/// The traffic shield's current decisions, indexed by region, with the tenants shed on their
/// own and the cells hot by their load. `ShedView::default()` sheds nothing. Read per query; the shield publishes a new one (behind an atomic pointer) per tick.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShedView {
    regions: Vec<RegionShed>,
    any_active: bool,
    /// Tenants shed on their own (tenant-first): (tenant, region, shed), sorted by tenant then
    /// region, so that a query finds its tenant's by binary search, without allocating.
    tenants: Vec<(Box<str>, u16, RegionShed)>,
    /// Fleet mode: the revision of the leader's published state this view was built from
    /// (shown in `CH TXT` traces); `None` when this node decided alone.
    revision: Option<i64>,
    /// Cells hot by their load in the feed (left out of tenants' answers); `None`: none.
    cells: Option<std::sync::Arc<crate::cells::ImpairedCells>>,
}

impl ShedView {
    /// Sets one region's state (growing the table as needed).
    pub fn set_region(&mut self, region: u16, state: RegionShed) {
        let index = usize::from(region);
        if self.regions.len() <= index {
            self.regions.resize(index + 1, RegionShed::default());
        }
        self.regions[index] = state;
        self.any_active = self.regions.iter().any(RegionShed::is_active);
    }

    /// The state of one region (`None` when it is not shed at all).
    pub fn region(&self, region: u16) -> Option<&RegionShed> {
        self.regions
            .get(usize::from(region))
            .filter(|state| state.is_active())
    }

    /// Whether any region is shed or hot (then anycast answers depend on client location).
    pub fn any_active(&self) -> bool {
        self.any_active
    }

    /// Sets the cells hot by their load (replacing any set before; an empty set is none).
    pub fn set_cells(&mut self, cells: Option<std::sync::Arc<crate::cells::ImpairedCells>>) {
        self.cells = cells.filter(|c| !c.is_empty());
    }

    /// The cells hot by their load, if any.
    #[inline]
    pub fn cells(&self) -> Option<&crate::cells::ImpairedCells> {
        self.cells.as_deref()
    }

    /// The same set, shared (for status and blame).
    pub fn cells_shared(&self) -> Option<&std::sync::Arc<crate::cells::ImpairedCells>> {
        self.cells.as_ref()
    }

    /// Sets the tenants shed on their own (replacing any set before).
    pub fn set_tenants<'a>(&mut self, sheds: impl IntoIterator<Item = (&'a str, u16, RegionShed)>) {
        self.tenants = sheds
            .into_iter()
            .filter(|(_, _, shed)| shed.is_active())
            .map(|(tenant, region, shed)| (Box::from(tenant), region, shed))
            .collect();
        self.tenants.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        self.tenants.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    }

    /// `tenant`'s own shed in `region`, if it has one. No allocation: a binary search (and
    /// nothing at all while no tenant is shed).
    #[inline]
    pub fn tenant_region(&self, tenant: &str, region: u16) -> Option<&RegionShed> {
        if self.tenants.is_empty() {
            return None;
        }
        self.tenants
            .binary_search_by(|(t, r, _)| (&**t, *r).cmp(&(tenant, region)))
            .ok()
            .map(|i| &self.tenants[i].2)
    }

    /// Whether `tenant` has an own shed in any region (then its anycast answers depend on the
    /// client's location).
    #[inline]
    pub fn tenant_shed_anywhere(&self, tenant: &str) -> bool {
        if self.tenants.is_empty() {
            return false;
        }
        let first = self.tenants.partition_point(|(t, _, _)| &**t < tenant);
        self.tenants
            .get(first)
            .is_some_and(|(t, _, _)| &**t == tenant)
    }

    /// Every tenant's own shed: (tenant, region, shed).
    pub fn tenants(&self) -> impl Iterator<Item = (&str, u16, &RegionShed)> + '_ {
        self.tenants.iter().map(|(t, r, s)| (&**t, *r, s))
    }

    /// Marks the view as built from the fleet's published state `revision`.
    pub fn with_revision(mut self, revision: i64) -> Self {
        self.revision = Some(revision);
        self
    }

    /// The published state revision the view was built from (fleet mode).
    pub fn revision(&self) -> Option<i64> {
        self.revision
    }
}
