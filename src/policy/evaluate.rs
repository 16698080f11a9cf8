//! Per-query evaluation: pure, lock-free and allocation-free. Reads only the compiled policies,
//! the shield's [`ShedView`] and the client; returns borrowed answer data.
//!
//! ECS scope rule (RFC 7871 scope prefix of the answer):
//! - a choice that depends on the client's region (geo with more than one answer, anycast when
//!   any region is forced, drained, shed or hot) contributes the client's `prefix_len` (what
//!   located it);
//! - a choice made by a subnet hash (weighted with more than one servable endpoint, a partial
//!   shed, or a split over several shed destinations) contributes the hashed prefix length;
//! - the scope is the largest contribution (0 when nothing client-specific decided), capped at
//!   the address family's length.
//!
//! TTL rule: the smallest TTL among the profiles on the path, capped by the steered entry's
//! `ttl`; for anycast the steered entry's `ttl`, shortened to the shield's hot TTL while the
//! client's region is hot (and not overridden by an operator knob).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::Name;

use crate::cells::{left_out_of, LayerRef, LeftOut, TenantCells};

use super::hash::{permille_bucket, subnet_hash, Purpose, RendezvousScore, SubnetHasher};
use super::health::HealthView;
use super::knobs::{Destination, RegionShed, ShedView};
use super::model::{
    fallback_site_for, AllDown, CompiledPolicies, EndpointTarget, GeoRoute, PolicyRoot, Profile,
    ProfileId, RegionOverride, Rule, MAX_PROFILE_DEPTH,
};

/// IPv4 prefix hashed to decide per-subnet shedding.
pub const SHED_HASH_PREFIX_V4: u8 = 24;
/// IPv6 prefix hashed to decide per-subnet shedding.
pub const SHED_HASH_PREFIX_V6: u8 = 56;

/// The client as located by the geo module: what a policy evaluates. (Who sent the query, as
/// the socket saw it, is a `dns::wire::Requester`.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocatedClient {
    /// Region index (topology order).
    pub region: u16,
    /// ECS address if the query carried one, else the source address (IPv4-mapped IPv6
    /// addresses should be unmapped by the caller).
    pub addr: IpAddr,
    /// Prefix length that located the client: the geo database network or CIDR override.
    pub prefix_len: u8,
}

/// What to answer with: the policy's decision, for every query type (the DNS code takes the
/// query type's share of it: one family's addresses, or the CNAME).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// A records from `v4`, AAAA records from `v6` (either may be empty: NODATA).
    Addresses {
        /// IPv4 addresses.
        v4: &'a [Ipv4Addr],
        /// IPv6 addresses.
        v6: &'a [Ipv6Addr],
    },
    /// A CNAME to `name`; `wire` is its uncompressed wire form.
    Cname {
        /// The target name.
        name: &'a Name,
        /// Uncompressed wire form of `name`.
        wire: &'a [u8],
    },
}

/// The answer for one client, with TTL, ECS scope and a trace of how it was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision<'a> {
    /// What to answer with.
    pub target: Target<'a>,
    /// TTL of the answer records.
    pub ttl: u32,
    /// ECS scope prefix length to send back.
    pub scope: u8,
    /// Which of the target's addresses are left out: a tenant's impaired cells (see
    /// [`crate::cells::impaired`]); always [`LeftOut::NONE`] for a CNAME.
    pub left_out: LeftOut,
    /// How the answer was chosen.
    pub trace: Trace,
}

/// How an anycast answer was chosen for the client's region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnycastChoice {
    /// Global anycast, the shield not involved.
    Global,
    /// An operator's forced answer.
    Forced(Destination),
    /// The region is drained.
    Drained(Destination),
    /// The subnet's bucket is below the shed fraction: sent to `destination`.
    Shed {
        /// Where it was sent.
        destination: Destination,
        /// The subnet's bucket, 0..1000.
        bucket: u16,
        /// The region's shed fraction, per-mille.
        fraction_permille: u16,
    },
    /// The region is shedding, but not this subnet: global anycast.
    Kept {
        /// The subnet's bucket, 0..1000.
        bucket: u16,
        /// The region's shed fraction, per-mille.
        fraction_permille: u16,
    },
}

/// How one profile on the path chose its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepChoice {
    /// Weighted: `hashed` is false when only one endpoint was servable.
    Weighted {
        /// Whether a subnet hash decided.
        hashed: bool,
    },
    /// Geo, via the given route (for the client's region).
    Geo(GeoRoute),
    /// Failover: the first enabled endpoint (that is up).
    Failover,
}

/// What health did to one profile's choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepHealth {
    /// Health changed nothing: the endpoint chosen is the one chosen with every endpoint up.
    #[default]
    Unchanged,
    /// That endpoint was down, so another was chosen.
    Skipped,
    /// Every candidate was down: the profile's `all_down` rule chose.
    AllDown(AllDown),
}

/// One profile on the evaluation path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceStep {
    /// The profile.
    pub profile: ProfileId,
    /// The chosen endpoint's index in the profile.
    pub endpoint: u16,
    /// How it was chosen.
    pub choice: StepChoice,
    /// What health did to the choice.
    pub health: StepHealth,
}

/// A small, copyable record of the decision (for logs, metrics and `CH TXT` traces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Trace {
    /// Anycast roots: the client's region and the choice.
    pub anycast: Option<(u16, AnycastChoice)>,
    /// Profile roots: the profiles on the path, root first.
    pub steps: [Option<TraceStep>; MAX_PROFILE_DEPTH],
    /// Whether the shield's hot TTL was applied.
    pub hot: bool,
    /// Anycast roots of a tenant whose every cell in a layer was impaired: the layer fallen
    /// back to (the last, when it fell twice).
    pub cells_fallback: Option<Destination>,
    /// The shed in the anycast choice was the tenant's own (tenant-first shedding), not its
    /// region's.
    pub tenant_first: bool,
}

/// Computes the answer for `client` under `root` with every monitored endpoint up. Never
/// panics and never allocates.
pub fn evaluate<'a>(
    p: &'a CompiledPolicies,
    root: PolicyRoot,
    client: &LocatedClient,
    shed: &ShedView,
) -> Decision<'a> {
    evaluate_with_health(p, root, client, shed, &ALL_UP)
}

/// The view in which every target is up.
static ALL_UP: HealthView = HealthView::all_up();

/// Computes the answer for `client` under `root`, skipping endpoints that `health` says are
/// down. Never panics and never allocates.
pub fn evaluate_with_health<'a>(
    p: &'a CompiledPolicies,
    root: PolicyRoot,
    client: &LocatedClient,
    shed: &ShedView,
    health: &HealthView,
) -> Decision<'a> {
    evaluate_for_tenant(p, root, client, shed, health, None)
}

/// The tenant a name belongs to, for [`evaluate_for_tenant`]: its name (to find its own shed,
/// tenant-first shedding) and its cells (its shard of each layer, computed when the tenant was
/// compiled; `None` without cells).
#[derive(Clone, Copy, Debug)]
pub struct AsTenant<'a> {
    pub name: &'a str,
    pub cells: Option<&'a TenantCells>,
}

/// [`evaluate_with_health`] for a tenant's name: an anycast answer carries the tenant's cells
/// instead of the destination's own addresses, where that layer has cells, and the tenant's
/// own shed in the client's region (in the shield's view) applies when it sheds more than the
/// region's. Which cells is decided by the name, not by the client: the choice, TTL and ECS
/// scope are the ones the shed decides. Never panics and never allocates.
pub fn evaluate_for_tenant<'a>(
    p: &'a CompiledPolicies,
    root: PolicyRoot,
    client: &LocatedClient,
    shed: &ShedView,
    health: &HealthView,
    tenant: Option<AsTenant<'a>>,
) -> Decision<'a> {
    match root {
        PolicyRoot::Anycast { ttl } => evaluate_anycast(p, ttl, client, shed, health, tenant),
        PolicyRoot::Profile { profile, ttl_cap } => {
            let health = Health::new(p, health);
            evaluate_profile(p, profile, ttl_cap.unwrap_or(u32::MAX), client, &health)
        }
    }
}

/// [`evaluate_with_health`] for a tenant's own profile with monitors of its own: slots from
/// `own.base` on are read from `own_view` (what the tenant's monitors say), the others from
/// the platform's `health`. Never panics and never allocates.
pub fn evaluate_with_own_health<'a>(
    p: &'a CompiledPolicies,
    root: PolicyRoot,
    client: &LocatedClient,
    shed: &ShedView,
    health: &HealthView,
    own_base: u16,
    own_view: &HealthView,
) -> Decision<'a> {
    match root {
        PolicyRoot::Profile { profile, ttl_cap } => {
            let health = Health {
                p,
                view: health,
                own_base,
                own: own_view,
            };
            evaluate_profile(p, profile, ttl_cap.unwrap_or(u32::MAX), client, &health)
        }
        PolicyRoot::Anycast { .. } => evaluate_for_tenant(p, root, client, shed, health, None),
    }
}

fn family_bits(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

fn evaluate_anycast<'a>(
    p: &'a CompiledPolicies,
    ttl: u32,
    client: &LocatedClient,
    shed: &ShedView,
    health: &HealthView,
    tenant: Option<AsTenant<'a>>,
) -> Decision<'a> {
    let cells = tenant.and_then(|t| t.cells);
    let impaired = Impaired { p, shed, health };
    let tenant = tenant.map(|t| t.name);
    let region = client.region;
    let mut trace = Trace::default();
    let mut ttl = ttl;
    let mut hashed = false;
    let choice = match p.region_override(region) {
        RegionOverride::Forced(destination) => AnycastChoice::Forced(destination),
        RegionOverride::Drained(destination) => AnycastChoice::Drained(destination),
        RegionOverride::None => match shed_for(shed, tenant, region) {
            None => AnycastChoice::Global,
            Some((state, tenant_first)) => {
                trace.tenant_first = tenant_first;
                if let Some(hot) = state.hot_ttl() {
                    trace.hot = hot < ttl;
                    ttl = ttl.min(hot);
                }
                let (choice, used_hash) = shed_choice(state, client.addr);
                hashed = used_hash;
                choice
            }
        },
    };
    trace.anycast = Some((region, choice));
    let location_dependent =
        p.any_override || shed.any_active() || tenant.is_some_and(|t| shed.tenant_shed_anywhere(t));
    let mut scope = if location_dependent {
        client.prefix_len
    } else {
        0
    };
    if hashed {
        scope = scope.max(match client.addr {
            IpAddr::V4(_) => SHED_HASH_PREFIX_V4,
            IpAddr::V6(_) => SHED_HASH_PREFIX_V6,
        });
    }
    let mut destination = destination_of(choice);
    // At most two steps: global -> the client's region -> a fallback site -> none.
    let (target, left_out) = loop {
        match destination_target(p, destination, cells, &impaired) {
            Served::Addresses(target, left_out) => break (target, left_out),
            Served::AllImpaired(whole) => match cells_fallback(p, destination, region) {
                Some(next) => {
                    trace.cells_fallback = Some(next);
                    // Where the client is now decides the answer.
                    scope = scope.max(client.prefix_len);
                    destination = next;
                }
                None => break (whole, LeftOut::NONE),
            },
        }
    };
    Decision {
        target,
        ttl,
        scope: scope.min(family_bits(client.addr)),
        left_out,
        trace,
    }
}

/// The shed that decides for a client of `region`: the region's, or the tenant's own when it
/// sheds more (a subnet shed by either is shed; both hash the same buckets, so the larger
/// fraction covers the smaller). The bool says the tenant's own decided.
#[inline]
fn shed_for<'v>(
    shed: &'v ShedView,
    tenant: Option<&str>,
    region: u16,
) -> Option<(&'v RegionShed, bool)> {
    let of_region = shed.region(region);
    let own = tenant.and_then(|t| shed.tenant_region(t, region));
    match (of_region, own) {
        (Some(r), Some(t)) if r.fraction_permille() >= t.fraction_permille() => Some((r, false)),
        (_, Some(t)) => Some((t, true)),
        (r, None) => r.map(|r| (r, false)),
    }
}

fn destination_of(choice: AnycastChoice) -> Destination {
    match choice {
        AnycastChoice::Forced(d) | AnycastChoice::Drained(d) => d,
        AnycastChoice::Shed { destination, .. } => destination,
        AnycastChoice::Global | AnycastChoice::Kept { .. } => Destination::Global,
    }
}

/// Shed decision for one subnet; the bool says whether a subnet hash decided it.
///
/// A subnet is shed when its bucket is below the fraction, so raising the fraction only adds
/// subnets. The destination is picked by an independent rendezvous hash over the shares, so a
/// shed subnet keeps its destination when the fraction changes.
#[inline]
fn shed_choice(state: &RegionShed, addr: IpAddr) -> (AnycastChoice, bool) {
    let fraction = state.fraction_permille();
    if fraction == 0 {
        return (AnycastChoice::Global, false);
    }
    let bucket = permille_bucket(subnet_hash(
        addr,
        SHED_HASH_PREFIX_V4,
        SHED_HASH_PREFIX_V6,
        Purpose::ShedBucket,
        0,
    ));
    if bucket >= fraction {
        let kept = AnycastChoice::Kept {
            bucket,
            fraction_permille: fraction,
        };
        return (kept, true);
    }
    let mut best: Option<(RendezvousScore, Destination)> = None;
    let mut count = 0;
    let hasher = SubnetHasher::new(
        addr,
        SHED_HASH_PREFIX_V4,
        SHED_HASH_PREFIX_V6,
        Purpose::ShedDestination,
    );
    for share in state.destinations() {
        count += 1;
        let hash = hasher.hash(destination_salt(share.destination));
        let mut score = RendezvousScore::new(hash, u32::from(share.share_permille));
        if best.as_mut().is_none_or(|(b, _)| score.beats(b)) {
            best = Some((score, share.destination));
        }
    }
    let Some((_, destination)) = best else {
        return (AnycastChoice::Global, false);
    };
    let choice = AnycastChoice::Shed {
        destination,
        bucket,
        fraction_permille: fraction,
    };
    (choice, fraction < 1000 || count > 1)
}

fn destination_salt(destination: Destination) -> u64 {
    match destination {
        Destination::Global => 0,
        Destination::Region(r) => (1 << 32) | u64::from(r),
        Destination::Fallback(s) => (2 << 32) | u64::from(s),
    }
}

/// What a destination serves a tenant.
enum Served<'a> {
    /// These addresses, less the cells left out.
    Addresses(Target<'a>, LeftOut),
    /// Every cell of the tenant's shard there is impaired: its whole shard, served only if
    /// there is no layer to fall back to.
    AllImpaired(Target<'a>),
}

/// Where impaired cells come from: the operator's drains (the snapshot), the cells' probes
/// (the health view) and their load (the shield's view).
struct Impaired<'v> {
    p: &'v CompiledPolicies,
    shed: &'v ShedView,
    health: &'v HealthView,
}

impl Impaired<'_> {
    /// What to leave out of a tenant's shard `v4`, `v6` in layer `at` (`None`: all of it).
    #[inline]
    fn left_out(&self, at: LayerRef, v4: &[Ipv4Addr], v6: &[Ipv6Addr]) -> Option<LeftOut> {
        let sources = [
            self.p.impaired_cells.as_deref(),
            self.health.cells(),
            self.shed.cells(),
        ];
        if sources.iter().all(Option::is_none) {
            return Some(LeftOut::NONE);
        }
        left_out_of(sources, at, v4, v6)
    }
}

/// The addresses of a destination: the tenant's cells of its layer when it has some there
/// (less its impaired cells), else the destination's own; an index that does not exist (a
/// shield view built for a different topology) falls back to the global answer rather than
/// answering empty. Which cells are impaired changes what is written, never the TTL or the
/// ECS scope: the name decided which cells, not the client.
fn destination_target<'a>(
    p: &'a CompiledPolicies,
    destination: Destination,
    cells: Option<&'a TenantCells>,
    impaired: &Impaired<'_>,
) -> Served<'a> {
    let global = (&p.global_v4[..], &p.global_v6[..]);
    let (layer, own) = match destination {
        Destination::Global => (LayerRef::Global, Some(global)),
        Destination::Region(r) => (
            LayerRef::Region(r),
            p.regions
                .get(usize::from(r))
                .map(|r| (&r.v4[..], &r.v6[..])),
        ),
        Destination::Fallback(s) => (
            LayerRef::Site(s),
            p.sites.get(usize::from(s)).map(|s| (&s.v4[..], &s.v6[..])),
        ),
    };
    let (layer, (own_v4, own_v6)) = own.map_or((LayerRef::Global, global), |own| (layer, own));
    let Some((v4, v6)) = cells.and_then(|c| c.layer(layer)) else {
        let target = Target::Addresses {
            v4: own_v4,
            v6: own_v6,
        };
        return Served::Addresses(target, LeftOut::NONE);
    };
    let target = Target::Addresses { v4, v6 };
    match impaired.left_out(layer, v4, v6) {
        Some(left_out) => Served::Addresses(target, left_out),
        None => Served::AllImpaired(target),
    }
}

/// Where a tenant goes when every cell of its shard at `from` is impaired, as the shield's
/// rings fall back: from global to the client's region, from a region to a fallback site on
/// its continent (else the first), from a fallback site nowhere.
fn cells_fallback(p: &CompiledPolicies, from: Destination, region: u16) -> Option<Destination> {
    let site_for = |r: u16| fallback_site_for(p.regions.get(usize::from(r))?, &p.sites);
    match from {
        Destination::Global if usize::from(region) < p.regions.len() => {
            Some(Destination::Region(region))
        }
        // A region index this topology does not have: the first site, if any.
        Destination::Global => (!p.sites.is_empty()).then_some(Destination::Fallback(0)),
        Destination::Region(r) => site_for(r),
        Destination::Fallback(_) => None,
    }
}

fn evaluate_profile<'a>(
    p: &'a CompiledPolicies,
    root: ProfileId,
    ttl_cap: u32,
    client: &LocatedClient,
    health: &Health<'_>,
) -> Decision<'a> {
    let mut trace = Trace::default();
    let mut ttl = ttl_cap;
    let mut scope = 0u8;
    let mut current = root;
    // Compilation guarantees an acyclic path of at most MAX_PROFILE_DEPTH profiles; the loop
    // bound only keeps a broken table from looping.
    for (depth, slot) in trace.steps.iter_mut().enumerate() {
        let Some(profile) = p.profile(current) else {
            break;
        };
        ttl = ttl.min(profile.ttl);
        let (index, choice, step_scope, step_health) =
            choose_with_health(profile, client, health, depth);
        scope = scope.max(step_scope);
        *slot = Some(TraceStep {
            profile: current,
            endpoint: index,
            choice,
            health: step_health,
        });
        let Some(endpoint) = profile.endpoints.get(usize::from(index)) else {
            break;
        };
        let target = match &endpoint.target {
            EndpointTarget::Addresses { v4, v6 } => Target::Addresses { v4, v6 },
            EndpointTarget::Cname { name, wire } => Target::Cname { name, wire },
            EndpointTarget::Profile(next) => {
                current = *next;
                continue;
            }
        };
        return Decision {
            target,
            ttl,
            scope: scope.min(family_bits(client.addr)),
            left_out: LeftOut::NONE,
            trace,
        };
    }
    Decision {
        target: Target::Addresses { v4: &[], v6: &[] },
        ttl: ttl.min(ttl_cap),
        scope: 0,
        left_out: LeftOut::NONE,
        trace,
    }
}

/// Reads the health view for one evaluation: whether an endpoint is up (a nested profile is
/// up while it has a candidate that is up) and when it was last up.
pub(crate) struct Health<'h> {
    pub(crate) p: &'h CompiledPolicies,
    pub(crate) view: &'h HealthView,
    /// A tenant's own monitors: slots from `own_base` on are read from `own`.
    pub(crate) own_base: u16,
    pub(crate) own: &'h HealthView,
}

impl<'h> Health<'h> {
    /// The platform's view only.
    pub(crate) fn new(p: &'h CompiledPolicies, view: &'h HealthView) -> Health<'h> {
        Health {
            p,
            view,
            own_base: u16::MAX,
            own: &ALL_UP,
        }
    }

    #[inline]
    fn slot_up(&self, slot: u16) -> bool {
        match slot.checked_sub(self.own_base) {
            Some(own) => self.own.up(own),
            None => self.view.up(slot),
        }
    }

    #[inline]
    fn slot_last_up(&self, slot: u16) -> u64 {
        match slot.checked_sub(self.own_base) {
            Some(own) => self.own.last_up(own),
            None => self.view.last_up(slot),
        }
    }

    /// Whether endpoint `index` of `profile` (at nesting `depth`) is up.
    pub(crate) fn endpoint_up(&self, profile: &Profile, index: u16, depth: usize) -> bool {
        let Some(endpoint) = profile.endpoints.get(usize::from(index)) else {
            return false;
        };
        if endpoint.forced_up {
            return true;
        }
        if let Some(slot) = endpoint.monitor {
            return self.slot_up(slot);
        }
        match endpoint.target {
            EndpointTarget::Profile(next) if depth + 1 < MAX_PROFILE_DEPTH => {
                self.profile_up(next, depth + 1)
            }
            _ => true,
        }
    }

    /// Whether a profile has a candidate that is up.
    pub(crate) fn profile_up(&self, id: ProfileId, depth: usize) -> bool {
        match self.p.profile(id) {
            Some(profile) if profile.monitored => profile
                .candidates
                .iter()
                .any(|&i| self.endpoint_up(profile, i, depth)),
            _ => true,
        }
    }

    /// The health generation in which the endpoint was last up (`u64::MAX`: up now).
    fn endpoint_last_up(&self, profile: &Profile, index: u16, depth: usize) -> u64 {
        let Some(endpoint) = profile.endpoints.get(usize::from(index)) else {
            return 0;
        };
        if endpoint.forced_up {
            return u64::MAX;
        }
        if let Some(slot) = endpoint.monitor {
            return self.slot_last_up(slot);
        }
        match endpoint.target {
            EndpointTarget::Profile(next) if depth + 1 < MAX_PROFILE_DEPTH => {
                match self.p.profile(next) {
                    Some(nested) if nested.monitored => nested
                        .candidates
                        .iter()
                        .map(|&i| self.endpoint_last_up(nested, i, depth + 1))
                        .max()
                        .unwrap_or(0),
                    _ => u64::MAX,
                }
            }
            _ => u64::MAX,
        }
    }
}

/// Picks an endpoint of one profile with health applied: the health-blind choice while it is
/// up (so health never moves a client whose endpoint is up), else the choice among the
/// candidates that are up, else the profile's `all_down` rule.
fn choose_with_health(
    profile: &Profile,
    client: &LocatedClient,
    health: &Health<'_>,
    depth: usize,
) -> (u16, StepChoice, u8, StepHealth) {
    let (index, choice, scope) = choose_endpoint(profile, client, |_| true);
    if !profile.monitored || health.endpoint_up(profile, index, depth) {
        return (index, choice, scope, StepHealth::Unchanged);
    }
    let up = |i: u16| health.endpoint_up(profile, i, depth);
    if profile.candidates.iter().any(|&i| up(i)) {
        let (index, choice, scope) = choose_endpoint(profile, client, up);
        return (index, choice, scope, StepHealth::Skipped);
    }
    let all_down = StepHealth::AllDown(profile.all_down);
    match profile.all_down {
        AllDown::ServeAll => (index, choice, scope, all_down),
        AllDown::ServeLastHealthy => {
            let last = |i: u16| health.endpoint_last_up(profile, i, depth);
            let newest = profile.candidates.iter().map(|&i| last(i)).max();
            let (index, choice, scope) =
                choose_endpoint(profile, client, |i| Some(last(i)) == newest);
            (index, choice, scope, all_down)
        }
        AllDown::Fallback(index) => (index, choice, 0, all_down),
    }
}

/// Picks an endpoint of one profile among the candidates that `eligible` accepts (at least
/// one must be): (endpoint index, how, ECS scope contribution).
fn choose_endpoint(
    profile: &Profile,
    client: &LocatedClient,
    eligible: impl Fn(u16) -> bool,
) -> (u16, StepChoice, u8) {
    match &profile.rule {
        Rule::Weighted => {
            let mut eligible_ones = profile.candidates.iter().filter(|&&i| eligible(i));
            let first = eligible_ones.next().copied().unwrap_or(0);
            if eligible_ones.next().is_none() {
                return (first, StepChoice::Weighted { hashed: false }, 0);
            }
            let chosen = rendezvous(profile, &eligible, client.addr);
            let prefix = match client.addr {
                IpAddr::V4(_) => profile.hash_prefix_v4,
                IpAddr::V6(_) => profile.hash_prefix_v6,
            };
            (chosen, StepChoice::Weighted { hashed: true }, prefix)
        }
        Rule::Geo {
            by_region,
            unknown,
            uniform,
        } => {
            let fallback = (0, GeoRoute::Default);
            let first = |chain: &[(u16, GeoRoute)]| {
                chain
                    .iter()
                    .copied()
                    .find(|&(e, _)| eligible(e))
                    .or(chain.first().copied())
                    .unwrap_or(fallback)
            };
            if *uniform {
                if let Some(&(index, route)) = unknown.first().filter(|(e, _)| eligible(*e)) {
                    return (index, StepChoice::Geo(route), 0);
                }
            }
            let chain = by_region
                .get(usize::from(client.region))
                .map_or(unknown.as_slice(), Vec::as_slice);
            let (index, route) = first(chain);
            (index, StepChoice::Geo(route), client.prefix_len)
        }
        Rule::Failover => {
            let chosen = profile
                .candidates
                .iter()
                .copied()
                .find(|&i| eligible(i))
                .or(profile.candidates.first().copied())
                .unwrap_or(0);
            (chosen, StepChoice::Failover, 0)
        }
    }
}

/// Weighted rendezvous hashing: each eligible candidate scores the subnet, the best wins. An
/// endpoint wins with probability weight / total, and changing one endpoint's weight (or
/// taking it out) only moves subnets to or from that endpoint.
fn rendezvous(profile: &Profile, eligible: &impl Fn(u16) -> bool, addr: IpAddr) -> u16 {
    let mut best: Option<(RendezvousScore, u16)> = None;
    let hasher = SubnetHasher::new(
        addr,
        profile.hash_prefix_v4,
        profile.hash_prefix_v6,
        Purpose::Weighted,
    );
    for &index in profile.candidates.iter().filter(|&&i| eligible(i)) {
        let Some(endpoint) = profile.endpoints.get(usize::from(index)) else {
            continue;
        };
        let hash = hasher.hash(endpoint.salt);
        let mut score = RendezvousScore::new(hash, endpoint.weight);
        if best.as_mut().is_none_or(|(b, _)| score.beats(b)) {
            best = Some((score, index));
        }
    }
    best.map_or(0, |(_, index)| index)
}
