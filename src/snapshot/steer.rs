//! Steering glue: turns a requester (ECS or source address) into a located client, asks the
//! policy engine for a decision (a [`Target`]), and hands the records to answer with to the
//! general lookup (a [`SteeredAnswer`]) or the fast path (a [`SteeredAddressAnswer`]).

use std::cell::OnceCell;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use crate::dns::wire::{rtype, ClientSubnet};
use crate::dnssec::SteeredSigs;
use crate::geo::Locator;
use crate::health::Board;
use crate::metrics::SnapshotCounters;
use crate::policy::{
    self, evaluate, evaluate_for_tenant, evaluate_with_health, evaluate_with_own_health,
    AnycastChoice, AsTenant, CompiledPolicies, Decision, Destination, HealthView, OwnMonitors,
    PolicyRoot, ShedView, Target,
};
use crate::shield::live::{DemandCounters, DemandSample, Proof, Shield};
use crate::tenant::ServedTenant;
use crate::zone::lookup::{Addresses, SteeredAnswer, SteeredData, Steering};
use crate::zone::model::{RRset, SteeredBinding};

/// Everything steering needs, compiled: policies, the locator, and the demand counters the
/// shield reads. (The shield's decisions live outside the snapshot: they change every tick.)
pub struct SteeringData {
    pub policies: CompiledPolicies,
    pub locator: Locator,
    pub demand: DemandCounters,
}

/// Where the client is, from the ECS option when it carries a prefix, else the source address.
pub fn locate(
    locator: &Locator,
    source: IpAddr,
    subnet: Option<&ClientSubnet>,
) -> policy::LocatedClient {
    let addr = match subnet {
        Some(ecs) if located_by_ecs(subnet) => unmap(ecs.addr),
        _ => source,
    };
    let located = locator.locate(addr);
    policy::LocatedClient {
        region: located.region,
        addr,
        prefix_len: located.prefix_len,
    }
}

/// Whether the client was located by its ECS address (else by the query's source).
fn located_by_ecs(subnet: Option<&ClientSubnet>) -> bool {
    subnet.is_some_and(|ecs| ecs.source_prefix > 0)
}

fn unmap(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// The demand of an anycast answer for the shield (see [`DemandCounters::sample`]); `None`
/// for other answers and for clients whose demand does not count.
fn demand_of(
    data: &SteeringData,
    source: IpAddr,
    subnet: Option<&ClientSubnet>,
    proven: Option<Proof>,
    client: &policy::LocatedClient,
    decision: &Decision<'_>,
) -> Option<DemandSample> {
    let (region, choice) = decision.trace.anycast?;
    // The address the client was located by is the ECS address when there is one.
    let ecs = located_by_ecs(subnet).then_some(client.addr);
    let (addr, why) = data.demand.counted_address(source, ecs, proven);
    crate::metrics::serving().record_demand_source(why.index());
    let addr = addr?;
    let to = match choice {
        AnycastChoice::Global | AnycastChoice::Kept { .. } => Destination::Global,
        AnycastChoice::Forced(d) | AnycastChoice::Drained(d) => d,
        AnycastChoice::Shed { destination, .. } => destination,
    };
    Some(data.demand.sample(addr, region, to, decision.ttl))
}

/// Who asked, as steering sees it: the source address, the ECS option the query carried, and
/// how the source is proven (`None`: plain UDP without a valid cookie).
#[derive(Clone, Copy)]
pub struct Asker<'q> {
    pub source: IpAddr,
    pub subnet: Option<&'q ClientSubnet>,
    pub proven: Option<Proof>,
}

/// What anycast roots are evaluated with when no cell has a probe (they read the monitors'
/// view only for the cells' probes).
static ALL_UP: HealthView = HealthView::all_up();

/// What profile roots are evaluated with: they never read the shield's view.
static NO_SHED: OnceLock<ShedView> = OnceLock::new();

/// The steering hook for one query. It locates the client only when a steered name is first
/// decided (a query that reaches no steered name never touches the geo database), and counts
/// every decision in one place (`ClientSteering::decision`), whichever path answers with it.
pub struct ClientSteering<'s> {
    data: &'s SteeringData,
    counters: &'s SnapshotCounters,
    shield: &'s Shield,
    /// The shield's view, loaded when an anycast decision first needs it (profiles never do,
    /// and the atomic load is a noticeable part of a geo or weighted answer).
    shed: OnceCell<arc_swap::Guard<Arc<ShedView>>>,
    /// The monitors' view, loaded when a profile decision first needs it (never when nothing
    /// is monitored).
    health: &'s Board,
    health_view: OnceCell<arc_swap::Guard<Arc<HealthView>>>,
    /// The address that sent the query, the ECS option it carried, and how the address is
    /// proven (`None`: plain UDP without a valid cookie, which anyone can spoof).
    source: IpAddr,
    subnet: Option<ClientSubnet>,
    proven: Option<Proof>,
    /// Where the client is: located when a decision first needs it. (An `Option` filled
    /// through `&mut self`, not a `OnceCell`: the cell's out-of-line initialisation was a
    /// visible part of a steered answer's instructions.)
    located: Option<policy::LocatedClient>,
    /// Pre-signed answers (signed zones), for queries that set DO.
    sigs: Option<&'s SteeredSigs>,
    /// The demand of the first anycast answer decided, for the answer path to count once it
    /// is sent ([`Self::demand`]).
    demand: Option<DemandSample>,
    /// The last decision made (and counted), with its binding. Kept here rather than passed
    /// up by value: a decision (target and trace) is ~100 bytes, and copying it through each
    /// caller was a tenth of a steered answer's instructions.
    decided: Option<(SteeredBinding, Decision<'s>)>,
    /// Whether the fast path handed `decided` to the general lookup (it could not answer
    /// with it): the lookup's question for that binding reuses it, uncounted, once.
    handed_over: bool,
    /// The tenant owning the query's name: the first decision (the query's own name) is
    /// the tenant's; any later one (a CNAME target) is the platform's.
    tenant: Option<&'s ServedTenant>,
}

impl<'s> ClientSteering<'s> {
    pub fn new(
        data: &'s SteeringData,
        counters: &'s SnapshotCounters,
        shield: &'s Shield,
        health: &'s Board,
        asker: Asker<'_>,
        sigs: Option<&'s SteeredSigs>,
    ) -> Self {
        let Asker {
            source,
            subnet,
            proven,
        } = asker;
        ClientSteering {
            data,
            counters,
            shield,
            shed: OnceCell::new(),
            health,
            health_view: OnceCell::new(),
            source,
            subnet: subnet.copied(),
            proven,
            located: None,
            sigs,
            demand: None,
            decided: None,
            handed_over: false,
            tenant: None,
        }
    }

    /// The query's name is `tenant`'s: its first decision follows the tenant's document.
    pub fn set_tenant(&mut self, tenant: &'s ServedTenant) {
        self.tenant = Some(tenant);
    }

    /// The demand of the answer, to be counted ([`DemandCounters::record`]) only if it is
    /// sent.
    pub fn demand(&self) -> Option<DemandSample> {
        self.demand
    }

    /// The signature of `data` at `binding`, with the TTL to serve under it (never above the
    /// TTL it was signed with).
    fn signed(
        &self,
        binding: SteeredBinding,
        data: &SteeredData<'_>,
        ttl: u32,
    ) -> (Option<&'s RRset>, u32) {
        match self.sigs.and_then(|s| s.find(binding, data)) {
            Some(sig) => (Some(sig), ttl.min(sig.ttl)),
            None => (None, ttl),
        }
    }

    /// Where the client is (located on first use).
    #[inline]
    fn client(&mut self) -> policy::LocatedClient {
        match self.located {
            Some(client) => client,
            None => {
                let client = locate(&self.data.locator, self.source, self.subnet.as_ref());
                self.located = Some(client);
                client
            }
        }
    }
}

impl<'s> ClientSteering<'s> {
    /// The policy's decision under `root` for `client`, not counted.
    #[inline]
    fn decide(
        &self,
        policies: &'s CompiledPolicies,
        root: PolicyRoot,
        client: &policy::LocatedClient,
        tenant: Option<AsTenant<'s>>,
        own: Option<&'s OwnMonitors>,
    ) -> Decision<'s> {
        if let (PolicyRoot::Profile { .. }, Some(own)) = (root, own) {
            // A tenant's profile with monitors of its own: their view beside the platform's
            // (for the platform profiles it nests).
            let shed = NO_SHED.get_or_init(ShedView::default);
            let own_view = own.view();
            let platform = if self.health.is_empty() {
                &ALL_UP
            } else {
                self.health_view.get_or_init(|| self.health.view())
            };
            return evaluate_with_own_health(
                policies, root, client, shed, platform, own.base, &own_view,
            );
        }
        match (root, tenant) {
            // A tenant's anycast answer: its cells, and its own shed (tenant-first) if any.
            (PolicyRoot::Anycast { .. }, Some(_)) => {
                let shed = self.shed.get_or_init(|| self.shield.view());
                if self.health.probes_cells() {
                    // Its cells' probes: which are down is in the monitors' view.
                    let health = self.health_view.get_or_init(|| self.health.view());
                    evaluate_for_tenant(policies, root, client, shed, health, tenant)
                } else {
                    evaluate_for_tenant(policies, root, client, shed, &ALL_UP, tenant)
                }
            }
            (PolicyRoot::Anycast { .. }, None) => {
                let shed = self.shed.get_or_init(|| self.shield.view());
                evaluate(policies, root, client, shed)
            }
            (PolicyRoot::Profile { .. }, _) if self.health.is_empty() => {
                let shed = NO_SHED.get_or_init(ShedView::default);
                evaluate(policies, root, client, shed)
            }
            (PolicyRoot::Profile { .. }, _) => {
                let shed = NO_SHED.get_or_init(ShedView::default);
                let health = self.health_view.get_or_init(|| self.health.view());
                evaluate_with_health(policies, root, client, shed, health)
            }
        }
    }

    /// The decision for `binding`, counted: the one the fast path handed over, or a new one,
    /// counted here (steered-answer counters) with its demand noted for the shield (the first
    /// anycast answer of the query, counted once it is sent). The only place a decision is
    /// counted.
    /// (The fast path hands over the decision for the query's own name, which is the first
    /// one the general lookup asks for; a decision for another binding replaces it.)
    fn decision(&mut self, binding: SteeredBinding) -> Option<&Decision<'s>> {
        let reuse = self.handed_over && matches!(self.decided, Some((b, _)) if b == binding);
        self.handed_over = false;
        if !reuse {
            let platform = &self.data.policies;
            let root = platform.steered().get(binding.index())?.root;
            let (policies, root, tenant, own) = match self.tenant.take() {
                Some(tenant) => {
                    let (policies, root) = tenant.route(platform, root);
                    let as_tenant = AsTenant {
                        name: tenant.name(),
                        cells: tenant.cells(platform),
                    };
                    let own = tenant.own_monitors().map(|m| &**m);
                    (policies, root, Some(as_tenant), own)
                }
                None => (platform, root, None, None),
            };
            let client = self.client();
            // Built in its slot and counted there: no copy of the decision on the way.
            let decision = self.decide(policies, root, &client, tenant, own);
            let (_, decision) = self.decided.insert((binding, decision));
            self.counters
                .record_steered(binding, client.region, &decision.trace);
            if self.demand.is_none() {
                let subnet = self.subnet.as_ref();
                self.demand = demand_of(
                    self.data,
                    self.source,
                    subnet,
                    self.proven,
                    &client,
                    decision,
                );
            }
        }
        self.decided.as_ref().map(|(_, decision)| decision)
    }

    /// The fast path's question: for an A (or AAAA) query at `binding`'s name, the addresses
    /// the policy answers with, if that is what it decided (not a CNAME, not NODATA). The
    /// decision is counted here; when the fast path cannot answer with it, the general
    /// lookup's question for the same binding gets it back, uncounted.
    /// With `dnssec`, the answer's signature too (and its TTL kept within the signed one).
    pub fn addresses(
        &mut self,
        binding: SteeredBinding,
        qtype: u16,
        dnssec: bool,
    ) -> Option<SteeredAddressAnswer<'s>> {
        let decision = self.decision(binding)?;
        let (target, mut ttl, scope) = (decision.target, decision.ttl, decision.scope);
        let left_out = decision.left_out;
        // Until the fast path has written its answer, the general lookup may need it.
        self.handed_over = true;
        let addresses = match (target, qtype) {
            (Target::Addresses { v4, .. }, rtype::A) if !v4.is_empty() => {
                Addresses::V4(v4, left_out)
            }
            (Target::Addresses { v6, .. }, rtype::AAAA) if !v6.is_empty() => {
                Addresses::V6(v6, left_out)
            }
            _ => return None,
        };
        let mut sig = None;
        if dnssec {
            let data = SteeredData::Addresses(addresses);
            (sig, ttl) = self.signed(binding, &data, ttl);
        }
        Some(SteeredAddressAnswer {
            addresses,
            ttl,
            scope,
            sig,
        })
    }
}

/// The fast path's steered answer: addresses only (see [`ClientSteering::addresses`]). The
/// general lookup's is a [`SteeredAnswer`].
pub struct SteeredAddressAnswer<'s> {
    /// Never empty.
    pub addresses: Addresses<'s>,
    /// The records' TTL (with DO, never above the signature's).
    pub ttl: u32,
    /// ECS scope prefix length to send back.
    pub scope: u8,
    /// Its signature, when asked for and the zone is signed.
    pub sig: Option<&'s RRset>,
}

impl<'s> Steering<'s> for ClientSteering<'s> {
    fn steer(&mut self, binding: SteeredBinding, qtype: u16) -> Option<SteeredAnswer<'s>> {
        if !matches!(qtype, rtype::A | rtype::AAAA | rtype::CNAME) {
            return None;
        }
        let decision = self.decision(binding)?;
        let (target, ttl, scope) = (decision.target, decision.ttl, decision.scope);
        let left_out = decision.left_out;
        let data = match (target, qtype) {
            (Target::Cname { wire, .. }, _) => SteeredData::Cname(wire),
            (Target::Addresses { v4, .. }, rtype::A) => {
                SteeredData::Addresses(Addresses::V4(v4, left_out))
            }
            (Target::Addresses { v6, .. }, rtype::AAAA) => {
                SteeredData::Addresses(Addresses::V6(v6, left_out))
            }
            // A CNAME query at a name answered with addresses: the static data answers.
            (Target::Addresses { .. }, _) => return None,
        };
        let (sig, ttl) = self.signed(binding, &data, ttl);
        Some(SteeredAnswer {
            data,
            ttl,
            scope,
            sig,
        })
    }
}
