//! Steering glue: turns a client (ECS or source address) into a location, asks the policy
//! engine for a decision, and hands the lookup the records to answer with.

use std::cell::{Cell, OnceCell};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, OnceLock};

use crate::dns::wire::Client;
use crate::dns::wire::{rtype, ClientSubnet};
use crate::dnssec::SteeredSigs;
use crate::geo::Locator;
use crate::health::Board;
use crate::metrics::SnapshotCounters;
use crate::policy::{
    self, evaluate, evaluate_with_health, AnycastChoice, CompiledPolicies, Decision, Destination,
    HealthView, PolicyRoot, ShedView, Target,
};
use crate::shield::live::{DemandCounters, DemandSample, Shield};
use crate::zone::lookup::{SteeredAnswer, Steering, Synth};
use crate::zone::model::RRset;

/// Everything steering needs, compiled: policies, the locator, and the demand counters the
/// shield reads. (The shield's decisions live outside the snapshot: they change every tick.)
pub struct SteeringData {
    pub policies: CompiledPolicies,
    pub locator: Locator,
    pub demand: DemandCounters,
}

/// Where the client is, from the ECS option when it carries a prefix, else the source address.
pub fn locate(locator: &Locator, client: &Client, subnet: Option<&ClientSubnet>) -> policy::Client {
    let addr = match subnet {
        Some(ecs) if ecs.source_prefix > 0 => unmap(ecs.addr),
        _ => client.addr,
    };
    let located = locator.locate(addr);
    policy::Client {
        region: located.region,
        addr,
        prefix_len: located.prefix_len,
    }
}

/// The address this query's demand counts by, if it counts (see
/// [`DemandCounters::counted_address`]).
pub fn demand_address(
    data: &SteeringData,
    client: &Client,
    subnet: Option<&ClientSubnet>,
) -> Option<IpAddr> {
    let ecs = subnet
        .filter(|e| e.source_prefix > 0)
        .map(|e| unmap(e.addr));
    data.demand.counted_address(client.addr, ecs)
}

fn unmap(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// What profile roots are evaluated with: they never read the shield's view.
static NO_SHED: OnceLock<ShedView> = OnceLock::new();

/// The steering hook for one query.
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
    client: policy::Client,
    /// Pre-signed answers (signed zones), for queries that set DO.
    sigs: Option<&'s SteeredSigs>,
    /// The address the shield's demand counts this query by (`None`: not counted).
    demand_from: Option<IpAddr>,
    /// The demand of the anycast answer decided, for the answer path to count once it is
    /// sent ([`Self::demand`]).
    demand: Cell<Option<DemandSample>>,
    /// The first steered binding the lookup asked about (for traces).
    pub asked: Cell<Option<u32>>,
}

impl<'s> ClientSteering<'s> {
    pub fn new(
        data: &'s SteeringData,
        counters: &'s SnapshotCounters,
        shield: &'s Shield,
        health: &'s Board,
        client: policy::Client,
        sigs: Option<&'s SteeredSigs>,
        demand_from: Option<IpAddr>,
    ) -> Self {
        ClientSteering {
            data,
            counters,
            shield,
            shed: OnceCell::new(),
            health,
            health_view: OnceCell::new(),
            client,
            sigs,
            demand_from,
            demand: Cell::new(None),
            asked: Cell::new(None),
        }
    }

    /// The demand of the answer, to be counted ([`DemandCounters::record`]) only if it is
    /// sent.
    pub fn demand(&self) -> Option<DemandSample> {
        self.demand.get()
    }

    /// The signature of `data` at `binding`, with the TTL to serve under it (never above the
    /// TTL it was signed with).
    fn signed(&self, binding: u32, data: &Synth<'_>, ttl: u32) -> (Option<&'s RRset>, u32) {
        match self.sigs.and_then(|s| s.find(binding, data)) {
            Some(sig) => (Some(sig), ttl.min(sig.ttl)),
            None => (None, ttl),
        }
    }

    pub fn client(&self) -> &policy::Client {
        &self.client
    }
}

impl<'s> ClientSteering<'s> {
    /// The policy's decision for `binding`, not yet counted.
    fn decide(&self, binding: u32) -> Option<Decision<'s>> {
        let policies = &self.data.policies;
        let steered = policies.steered().get(binding as usize)?;
        let decision = match steered.root {
            PolicyRoot::Anycast { .. } => {
                let shed = self.shed.get_or_init(|| self.shield.view());
                evaluate(policies, steered.root, &self.client, shed)
            }
            PolicyRoot::Profile { .. } if self.health.is_empty() => {
                let shed = NO_SHED.get_or_init(ShedView::default);
                evaluate(policies, steered.root, &self.client, shed)
            }
            PolicyRoot::Profile { .. } => {
                let shed = NO_SHED.get_or_init(ShedView::default);
                let health = self.health_view.get_or_init(|| self.health.view());
                evaluate_with_health(policies, steered.root, &self.client, shed, health)
            }
        };
        Some(decision)
    }

    /// Counts a decision that was answered (steered-answer counters) and notes its demand
    /// for the shield (the first anycast answer of the query), counted once it is sent.
    fn record(&self, binding: u32, decision: &Decision<'_>) {
        self.counters
            .record_steered(binding, self.client.region, &decision.trace);
        if let (Some((region, choice)), Some(addr), None) =
            (decision.trace.anycast, self.demand_from, self.demand.get())
        {
            let to = match choice {
                AnycastChoice::Global | AnycastChoice::Kept { .. } => Destination::Global,
                AnycastChoice::Forced(d) | AnycastChoice::Drained(d) => d,
                AnycastChoice::Shed { destination, .. } => destination,
            };
            let sample = self.data.demand.sample(addr, region, to, decision.ttl);
            self.demand.set(Some(sample));
        }
    }

    /// The fast path's question: for an A (or AAAA) query at `binding`'s name, the addresses
    /// the policy answers with, if that is what it decided (not a CNAME, not NODATA). The
    /// decision is counted only when the caller reports it answered ([`Self::answered`]), so a
    /// fallback to the general path does not count it twice.
    /// With `dnssec`, the answer's signature too (and its TTL kept within the signed one).
    pub fn addresses(
        &self,
        binding: u32,
        qtype: u16,
        dnssec: bool,
    ) -> Option<SteeredAddresses<'s>> {
        let mut decision = self.decide(binding)?;
        let addresses = match (decision.target, qtype) {
            (Target::Addresses { v4, .. }, rtype::A) if !v4.is_empty() => AddressSet::V4(v4),
            (Target::Addresses { v6, .. }, rtype::AAAA) if !v6.is_empty() => AddressSet::V6(v6),
            _ => return None,
        };
        let mut sig = None;
        if dnssec {
            let data = match addresses {
                AddressSet::V4(a) => Synth::V4(a),
                AddressSet::V6(a) => Synth::V6(a),
            };
            (sig, decision.ttl) = self.signed(binding, &data, decision.ttl);
        }
        Some(SteeredAddresses {
            addresses,
            decision,
            sig,
        })
    }

    /// Counts a fast-path answer made from [`Self::addresses`].
    pub fn answered(&self, binding: u32, answer: &SteeredAddresses<'_>) {
        self.record(binding, &answer.decision);
    }
}

/// The addresses of a steered answer, for an A or an AAAA query.
#[derive(Clone, Copy, Debug)]
pub enum AddressSet<'s> {
    V4(&'s [Ipv4Addr]),
    V6(&'s [Ipv6Addr]),
}

/// A steered answer made of addresses only (see [`ClientSteering::addresses`]).
pub struct SteeredAddresses<'s> {
    /// Never empty.
    pub addresses: AddressSet<'s>,
    pub decision: Decision<'s>,
    /// Its signature, when asked for and the zone is signed.
    pub sig: Option<&'s RRset>,
}

impl<'s> Steering<'s> for ClientSteering<'s> {
    fn steer(&self, binding: u32, qtype: u16) -> Option<SteeredAnswer<'s>> {
        if self.asked.get().is_none() {
            self.asked.set(Some(binding));
        }
        if !matches!(qtype, rtype::A | rtype::AAAA | rtype::CNAME) {
            return None;
        }
        let decision = self.decide(binding)?;
        self.record(binding, &decision);
        let data = match (decision.target, qtype) {
            (Target::Cname { wire, .. }, _) => Synth::Cname(wire),
            (Target::Addresses { v4, .. }, rtype::A) => Synth::V4(v4),
            (Target::Addresses { v6, .. }, rtype::AAAA) => Synth::V6(v6),
            // A CNAME query at a name answered with addresses: the static data answers.
            (Target::Addresses { .. }, _) => return None,
        };
        let (sig, ttl) = self.signed(binding, &data, decision.ttl);
        Some(SteeredAnswer {
            data,
            ttl,
            scope: decision.scope,
            sig,
        })
    }
}

/// A one-line explanation of the decision for `binding` (for `CH TXT`); allocates.
pub fn trace(
    data: &SteeringData,
    shed: &ShedView,
    health: &HealthView,
    binding: u32,
    client: &policy::Client,
    source: &str,
) -> Option<String> {
    let steered = data.policies.steered().get(binding as usize)?;
    let location = data.locator.describe(client.addr);
    let decision = policy::explain_with_health(&data.policies, steered.root, client, shed, health);
    let database = match data.locator.degraded() {
        Some(reason) => format!("; geo database degraded: {reason}"),
        None => String::new(),
    };
    Some(format!(
        "{} via {source}; {location}{database}; name {}; {decision}",
        client.addr, steered.name
    ))
}
