//! The answer engine: from (name, type) to the records of a response, per RFC 1034 §4.3.2,
//! RFC 2308 (negative answers), RFC 4592 (wildcards), RFC 8482 (minimal ANY).
//!
//! The result is a [`Plan`]: references into the immutable zones (and into the policy data for
//! steered names), in fixed-capacity arrays, so building one allocates nothing. Writing the plan
//! onto the wire is the job of [`crate::snapshot::compose`].

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use arrayvec::ArrayVec;
use rustc_hash::FxHashMap;

use super::model::{Chain, Denial, Node, Nsec3Chain, RRset, SteeredBinding, Zone};
use crate::cells::LeftOut;
use crate::dns::wire::{rcode, rtype, WireName, MAX_NAME_LEN};

/// Longest CNAME chain we follow inside our own zones.
pub const MAX_CNAME_CHAIN: usize = 8;

/// All zones served, found by longest suffix match. Cloning shares the zones (a reload that
/// changes no zone file reuses them).
#[derive(Debug, Default, Clone)]
pub struct ZoneSet {
    zones: Arc<[Zone]>,
    by_apex: FxHashMap<Box<[u8]>, usize>,
    max_labels: usize,
}

impl ZoneSet {
    pub fn new(zones: Vec<Zone>) -> Self {
        let by_apex = zones
            .iter()
            .enumerate()
            .map(|(i, z)| (z.apex.clone(), i))
            .collect();
        let max_labels = zones.iter().map(|z| z.apex_labels).max().unwrap_or(0);
        ZoneSet {
            zones: zones.into(),
            by_apex,
            max_labels,
        }
    }

    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// The zone whose apex is exactly `apex` (lower-cased wire name).
    pub fn by_apex(&self, apex: &[u8]) -> Option<&Zone> {
        self.by_apex.get(apex).map(|&i| &self.zones[i])
    }

    /// The zone with the longest apex that `name` is at or below, and how many labels of `name`
    /// sit above that apex.
    pub fn find(&self, name: &WireName) -> Option<(&Zone, usize)> {
        self.find_index(name)
            .map(|(i, skip)| (&self.zones[i], skip))
    }

    /// Like [`ZoneSet::find`], with the zone's index in [`ZoneSet::zones`].
    pub fn find_index(&self, name: &WireName) -> Option<(usize, usize)> {
        let labels = name.label_count();
        let first = labels.saturating_sub(self.max_labels);
        (first..=labels).find_map(|skip| self.by_apex.get(name.suffix(skip)).map(|&i| (i, skip)))
    }
}

/// Who owns a record in the response.
#[derive(Clone, Copy, Debug)]
pub enum Owner<'z> {
    /// The name in the question (written as a pointer to it: the client's letter case).
    Question,
    /// Another name, lower-cased wire format.
    Name(&'z [u8]),
}

/// The addresses chosen for a steered answer to an A or an AAAA query: one family's (the
/// policy's decision, `policy::Target::Addresses`, holds both; an empty family is a NODATA
/// answer). The general lookup and the steered fast path answer with the same type. The
/// [`LeftOut`] mask names the addresses not written (a tenant's impaired cells); it never
/// leaves out every address.
#[derive(Clone, Copy, Debug)]
pub enum Addresses<'z> {
    /// A records.
    V4(&'z [Ipv4Addr], LeftOut),
    /// AAAA records.
    V6(&'z [Ipv6Addr], LeftOut),
}

impl Addresses<'_> {
    /// How many records are written.
    pub fn count(&self) -> usize {
        match self {
            Addresses::V4(addrs, left_out) => left_out.kept(addrs.len()),
            Addresses::V6(addrs, left_out) => left_out.kept(addrs.len()),
        }
    }
}

/// The records a steering policy chose for one query, computed per query: one family's
/// addresses, or a CNAME.
#[derive(Clone, Copy, Debug)]
pub enum SteeredData<'z> {
    Addresses(Addresses<'z>),
    /// A CNAME to this uncompressed wire name.
    Cname(&'z [u8]),
}

/// What an answer record set is made of: a zone's stored records, or a policy's.
#[derive(Clone, Copy, Debug)]
pub enum Data<'z> {
    Static(&'z RRset),
    Steered(SteeredData<'z>),
}

#[derive(Clone, Copy, Debug)]
pub struct Entry<'z> {
    pub owner: Owner<'z>,
    pub data: Data<'z>,
    pub ttl: u32,
    /// The RRSIG records covering `data` (signed zones), written after it when the query
    /// set DO.
    pub sig: Option<&'z RRset>,
}

impl<'z> Entry<'z> {
    fn stored(owner: Owner<'z>, set: &'z RRset) -> Self {
        Entry {
            owner,
            data: Data::Static(set),
            ttl: set.ttl,
            sig: set.rrsig.as_deref(),
        }
    }
}

/// What a steering policy decided for one steered name.
#[derive(Clone, Copy, Debug)]
pub struct SteeredAnswer<'z> {
    pub data: SteeredData<'z>,
    pub ttl: u32,
    /// ECS scope prefix length that covers what decided this answer.
    pub scope: u8,
    /// The pre-computed signature of exactly this answer (signed zones; `None` otherwise).
    pub sig: Option<&'z RRset>,
}

/// The hook through which the lookup asks policies for steered names' answers. The
/// implementation carries the client (ECS or source address) it answers for.
pub trait Steering<'z> {
    /// The answer for `binding` and query type A, AAAA or CNAME; `None` for other types (the
    /// name's static records answer those).
    fn steer(&mut self, binding: SteeredBinding, qtype: u16) -> Option<SteeredAnswer<'z>>;
}

/// Steering for contexts with no client (precompiling static answers): never steers.
pub struct NoSteering;

impl<'z> Steering<'z> for NoSteering {
    fn steer(&mut self, _: SteeredBinding, _: u16) -> Option<SteeredAnswer<'z>> {
        None
    }
}

/// The records of one response, by section.
#[derive(Debug, Default)]
pub struct Plan<'z> {
    pub rcode: u16,
    pub authoritative: bool,
    pub referral: bool,
    pub answer: ArrayVec<Entry<'z>, 24>,
    pub authority: ArrayVec<Entry<'z>, 8>,
    pub additional: ArrayVec<Entry<'z>, 32>,
    /// False when any part came from a steering policy (the answer depends on the client).
    pub client_independent: bool,
    /// Widest ECS scope any steering decision in this answer needed.
    pub scope: u8,
    /// The query set DO: signed zones add their proofs of non-existence, and the writer adds
    /// each entry's signatures.
    pub dnssec: bool,
}

/// Answers `qtype` for `qname`, following CNAMEs inside our zones. `None` when no zone of ours
/// contains the name (the caller answers REFUSED). With `dnssec` (the query set DO), signed
/// zones add the NSEC records that prove what does not exist.
pub fn resolve<'z>(
    zones: &'z ZoneSet,
    qname: &WireName,
    qtype: u16,
    steering: &mut dyn Steering<'z>,
    dnssec: bool,
) -> Option<Plan<'z>> {
    let (zone, _) = zones.find_index(qname)?;
    resolve_in(zones, zone, qname, qtype, steering, dnssec)
}

/// [`resolve`] for a caller that found the zone already: `zone` is the index (in
/// [`ZoneSet::zones`]) of the zone [`ZoneSet::find_index`] gives for `qname`.
pub fn resolve_in<'z>(
    zones: &'z ZoneSet,
    zone: usize,
    qname: &WireName,
    qtype: u16,
    steering: &mut dyn Steering<'z>,
    dnssec: bool,
) -> Option<Plan<'z>> {
    let zone = zones.zones().get(zone)?;
    let depth = qname.label_count().checked_sub(zone.apex_labels)?;
    let mut plan = Plan {
        authoritative: true,
        client_independent: true,
        dnssec,
        ..Plan::default()
    };
    // The name being answered: the question, then each CNAME target followed (built only
    // when a chain is followed; the question itself is never copied).
    let mut followed: Option<WireName> = None;
    let mut zone = zone;
    let mut depth = depth;
    let mut owner: Owner<'z> = Owner::Question;
    for step in 0..=MAX_CNAME_CHAIN {
        let name = followed.as_ref().unwrap_or(qname);
        let next = answer_in_zone(
            zone,
            name,
            depth,
            qtype,
            owner,
            steering,
            &mut plan,
            step == 0,
        );
        let Some(target) = next else {
            break;
        };
        if step == MAX_CNAME_CHAIN {
            break;
        }
        // Follow the chain only into zones we are authoritative for.
        let Some(target_name) = WireName::from_wire(target) else {
            break;
        };
        let Some((next_zone, next_depth)) = zones.find(&target_name) else {
            break;
        };
        if target == qname.as_wire() || chain_revisits(&plan, target) {
            break;
        }
        followed = Some(target_name);
        zone = next_zone;
        depth = next_depth;
        owner = Owner::Name(target);
    }
    Some(plan)
}

/// Has the chain already produced records owned by `target`? (CNAME loop.)
fn chain_revisits(plan: &Plan<'_>, target: &[u8]) -> bool {
    plan.answer
        .iter()
        .any(|e| matches!(e.owner, Owner::Name(n) if n == target))
}

/// Answers one name inside one zone, appending to `plan`. Returns the CNAME target to follow.
#[allow(clippy::too_many_arguments)]
fn answer_in_zone<'z>(
    zone: &'z Zone,
    name: &WireName,
    depth: usize,
    qtype: u16,
    owner: Owner<'z>,
    steering: &mut dyn Steering<'z>,
    plan: &mut Plan<'z>,
    first: bool,
) -> Option<&'z [u8]> {
    // Walk down from just below the apex, looking for a zone cut or the first missing name.
    for skip in (0..depth).rev() {
        let Some(node) = zone.node(name.suffix(skip)) else {
            return answer_missing(zone, name, skip + 1, qtype, owner, steering, plan);
        };
        if node.is_cut && !(skip == 0 && qtype == rtype::DS) {
            if first {
                refer(zone, node, name.suffix(skip), plan);
            }
            return None;
        }
    }
    let (key, node) = zone.nodes.get_key_value(name.suffix(0))?;
    answer_node(zone, key, node, qtype, owner, steering, plan)
}

/// The name does not exist; its closest existing ancestor drops `encloser_skip` labels.
fn answer_missing<'z>(
    zone: &'z Zone,
    name: &WireName,
    encloser_skip: usize,
    qtype: u16,
    owner: Owner<'z>,
    steering: &mut dyn Steering<'z>,
    plan: &mut Plan<'z>,
) -> Option<&'z [u8]> {
    let encloser = name.suffix(encloser_skip);
    let has_wildcard = zone.node(encloser).is_some_and(|n| n.has_wildcard_child);
    if has_wildcard {
        let mut key = [0u8; MAX_NAME_LEN + 2];
        key[..2].copy_from_slice(b"\x01*");
        if let Some(dst) = key.get_mut(2..2 + encloser.len()) {
            dst.copy_from_slice(encloser);
            if let Some((source_key, source)) = zone.nodes.get_key_value(&key[..2 + encloser.len()])
            {
                // The proof that the name itself does not exist (RFC 4035 §3.1.3.3; with
                // NSEC3, the record covering the next closer name, RFC 5155 §7.2.6).
                let next_closer = name.suffix(encloser_skip - 1);
                if let Some((owner, set)) = plan
                    .dnssec
                    .then(|| zone.wildcard_proof(name.as_wire(), next_closer))
                    .flatten()
                {
                    push_authority_once(owner, set, plan);
                }
                let answered = plan.answer.len();
                let next = answer_node(zone, source_key, source, qtype, owner, steering, plan);
                if plan.answer.len() == answered {
                    // Wildcard NODATA (RFC 5155 §7.2.5): the closest encloser's record too.
                    if let Some(chain) = nsec3(zone, plan) {
                        push_nsec3_matching(chain, encloser, plan);
                    }
                }
                return next;
            }
        }
    }
    plan.rcode = rcode::NXDOMAIN;
    negative(zone, plan);
    // RFC 4035 §3.1.3.2: no such name, and no wildcard at the closest encloser. With NSEC3
    // (RFC 5155 §7.2.2): the closest encloser proof, and the record covering its wildcard.
    let chain = nsec3(zone, plan);
    match chain {
        Some(chain) => {
            push_nsec3_matching(chain, encloser, plan);
            push_nsec3_covering(chain, name.suffix(encloser_skip - 1), plan);
        }
        None => push_covering(zone, name.as_wire(), plan),
    }
    let mut wildcard = [0u8; MAX_NAME_LEN + 2];
    wildcard[..2].copy_from_slice(b"\x01*");
    if let Some(dst) = wildcard.get_mut(2..2 + encloser.len()) {
        dst.copy_from_slice(encloser);
        let wildcard = &wildcard[..2 + encloser.len()];
        match chain {
            Some(chain) => push_nsec3_covering(chain, wildcard, plan),
            None => push_covering(zone, wildcard, plan),
        }
    }
    None
}

/// Answers from an existing node (exact match or wildcard source, `key` its name); returns a
/// CNAME to follow.
fn answer_node<'z>(
    zone: &'z Zone,
    key: &'z [u8],
    node: &'z Node,
    qtype: u16,
    owner: Owner<'z>,
    steering: &mut dyn Steering<'z>,
    plan: &mut Plan<'z>,
) -> Option<&'z [u8]> {
    if let Some(binding) = node.steer {
        let steer_type = if qtype == rtype::ANY { rtype::A } else { qtype };
        if let Some(steered) = steering.steer(binding, steer_type) {
            plan.client_independent = false;
            plan.scope = plan.scope.max(steered.scope);
            return push_steered(zone, key, owner, qtype, steered, plan);
        }
        if matches!(qtype, rtype::A | rtype::AAAA | rtype::CNAME | rtype::ANY) {
            // Static precompilation cannot answer for a policy: mark and answer nothing.
            plan.client_independent = false;
        }
    }
    if qtype != rtype::CNAME {
        if let Some(cname) = node.rrset(rtype::CNAME) {
            let _ = plan.answer.try_push(Entry::stored(owner, cname));
            return cname.cname_target();
        }
    }
    if qtype == rtype::ANY {
        // RFC 8482: answer with one RRset rather than everything.
        match node.rrsets.first() {
            Some(set) => {
                let _ = plan.answer.try_push(Entry::stored(owner, set));
                add_additional(zone, set, plan);
            }
            None => nodata(zone, key, node, plan),
        }
        return None;
    }
    match node.rrset(qtype) {
        Some(set) => {
            let _ = plan.answer.try_push(Entry::stored(owner, set));
            add_additional(zone, set, plan);
        }
        None => nodata(zone, key, node, plan),
    }
    None
}

/// NODATA: the SOA, and (signed, DO) the proof that the name lacks the type.
fn nodata<'z>(zone: &'z Zone, key: &'z [u8], node: &'z Node, plan: &mut Plan<'z>) {
    negative(zone, plan);
    prove_nodata(zone, key, node, plan);
}

/// The proof that existing name `key` has no records of the type asked (signed, DO).
/// NSEC: the name's own NSEC, whose bitmap lacks the type; an empty non-terminal has none,
/// and the NSEC that covers it proves it has no data. NSEC3 (RFC 5155 §7.2.3): the name's
/// record; a name without one (an insecure delegation left out by opt-out, asked for its
/// DS) gets the closest provable encloser proof instead (§7.2.4).
fn prove_nodata<'z>(zone: &'z Zone, key: &'z [u8], node: &'z Node, plan: &mut Plan<'z>) {
    let Some(denial) = denial(zone, plan) else {
        return;
    };
    match &denial.chain {
        Chain::Nsec3(chain) => push_nsec3_proof(chain, key, plan),
        Chain::Nsec(_) if node.rrset(rtype::NSEC).is_some() => push_nsec(zone, key, plan),
        Chain::Nsec(_) => push_covering(zone, key, plan),
    }
}

/// The zone's denial chain, when the zone is signed and the query asked for proofs.
fn denial<'z>(zone: &'z Zone, plan: &Plan<'z>) -> Option<&'z Denial> {
    zone.denial.as_ref().filter(|_| plan.dnssec)
}

/// The zone's NSEC3 chain, when it has one and the query asked for proofs.
fn nsec3<'z>(zone: &'z Zone, plan: &Plan<'z>) -> Option<&'z Nsec3Chain> {
    match &denial(zone, plan)?.chain {
        Chain::Nsec3(chain) => Some(chain),
        Chain::Nsec(_) => None,
    }
}

/// Adds NSEC3 record `index` of `chain` to the authority section, once.
fn push_nsec3_at<'z>(chain: &'z Nsec3Chain, index: usize, plan: &mut Plan<'z>) {
    let Some((owner, set)) = chain.records.get(index) else {
        return;
    };
    push_authority_once(owner, set, plan);
}

/// Adds the NSEC3 record matching `name` (a name with one).
fn push_nsec3_matching<'z>(chain: &'z Nsec3Chain, name: &[u8], plan: &mut Plan<'z>) {
    if let Some(index) = chain.matching(name) {
        push_nsec3_at(chain, index, plan);
    }
}

/// Adds the NSEC3 record covering `name` (a name without one): hashed here, on the stack.
fn push_nsec3_covering<'z>(chain: &'z Nsec3Chain, name: &[u8], plan: &mut Plan<'z>) {
    if let Some(index) = chain.covering(name) {
        push_nsec3_at(chain, index, plan);
    }
}

/// The record matching `name`, or else the closest provable encloser proof (RFC 5155
/// §7.2.1): the record matching the closest ancestor that has one, and the record covering
/// the next closer name (with opt-out, it has the opt-out flag).
fn push_nsec3_proof<'z>(chain: &'z Nsec3Chain, name: &[u8], plan: &mut Plan<'z>) {
    let Some((encloser, next_closer)) = chain.closest_encloser(name) else {
        return;
    };
    push_nsec3_at(chain, encloser, plan);
    if let Some(next_closer) = next_closer {
        push_nsec3_covering(chain, next_closer, plan);
    }
}

/// Adds `set` owned by `owner` to the authority section unless it is there already.
fn push_authority_once<'z>(owner: &'z [u8], set: &'z RRset, plan: &mut Plan<'z>) {
    if plan
        .authority
        .iter()
        .any(|e| matches!(e.data, Data::Static(s) if std::ptr::eq(s, set)))
    {
        return;
    }
    let _ = plan
        .authority
        .try_push(Entry::stored(Owner::Name(owner), set));
}

/// Adds the NSEC owned by `owner` (a chain owner) to the authority section, once.
fn push_nsec<'z>(zone: &'z Zone, owner: &[u8], plan: &mut Plan<'z>) {
    let Some((key, node)) = zone.nodes.get_key_value(owner) else {
        return;
    };
    let Some(nsec) = node.rrset(rtype::NSEC) else {
        return;
    };
    push_authority_once(key, nsec, plan);
}

/// Adds the NSEC that covers (or matches) `name`, when signed and asked for.
fn push_covering<'z>(zone: &'z Zone, name: &[u8], plan: &mut Plan<'z>) {
    if let Some(owner) = denial(zone, plan).and_then(|d| d.covering(name)) {
        push_nsec(zone, owner, plan);
    }
}

fn push_steered<'z>(
    zone: &'z Zone,
    key: &'z [u8],
    owner: Owner<'z>,
    qtype: u16,
    steered: SteeredAnswer<'z>,
    plan: &mut Plan<'z>,
) -> Option<&'z [u8]> {
    let entry = Entry {
        owner,
        data: Data::Steered(steered.data),
        ttl: steered.ttl,
        sig: steered.sig,
    };
    match steered.data {
        SteeredData::Cname(target) => {
            let _ = plan.answer.try_push(entry);
            (qtype != rtype::CNAME).then_some(target)
        }
        SteeredData::Addresses(Addresses::V4(addrs, _))
            if !addrs.is_empty() && qtype != rtype::AAAA =>
        {
            let _ = plan.answer.try_push(entry);
            None
        }
        SteeredData::Addresses(Addresses::V6(addrs, _))
            if !addrs.is_empty() && qtype != rtype::A =>
        {
            let _ = plan.answer.try_push(entry);
            None
        }
        _ => {
            negative(zone, plan);
            // The policy's addresses have none of this type: the NSEC (NSEC3) variant without it.
            let variant = denial(zone, plan)
                .and_then(|d| d.steered_nodata.get(key))
                .and_then(|nodata| match qtype {
                    rtype::A => Some((&nodata.owner, &nodata.without[0])),
                    rtype::AAAA => Some((&nodata.owner, &nodata.without[1])),
                    _ => None,
                });
            match (variant, zone.nodes.get(key)) {
                (Some((owner, set)), _) => push_authority_once(owner, set, plan),
                (None, Some(node)) => prove_nodata(zone, key, node, plan),
                (None, None) => {}
            }
            None
        }
    }
}

/// NODATA / NXDOMAIN authority: the zone's SOA with the negative-caching TTL.
fn negative<'z>(zone: &'z Zone, plan: &mut Plan<'z>) {
    if let Some(soa) = zone.soa() {
        let _ = plan.authority.try_push(Entry {
            owner: Owner::Name(&zone.apex),
            data: Data::Static(soa),
            ttl: zone.negative_ttl,
            sig: soa.rrsig.as_deref(),
        });
    }
}

/// A referral: NS of the child in authority, glue for in-zone targets in additional, AA clear.
fn refer<'z>(zone: &'z Zone, cut: &'z Node, cut_name: &[u8], plan: &mut Plan<'z>) {
    let Some(ns) = cut.rrset(rtype::NS) else {
        return;
    };
    // The key of the cut node owns the NS records; find it to borrow for the plan's lifetime.
    let Some((owner, _)) = zone.nodes.get_key_value(cut_name) else {
        return;
    };
    plan.authoritative = false;
    plan.referral = true;
    let _ = plan
        .authority
        .try_push(Entry::stored(Owner::Name(owner), ns));
    if denial(zone, plan).is_some() {
        // RFC 4035 §3.1.4: the signed DS, or the NSEC proving there is none (NSEC3, RFC 5155
        // §7.2.7: the cut's record, or with opt-out the closest provable encloser proof).
        match cut.rrset(rtype::DS) {
            Some(ds) => {
                let _ = plan
                    .authority
                    .try_push(Entry::stored(Owner::Name(owner), ds));
            }
            None => prove_nodata(zone, owner, cut, plan),
        }
    }
    for target in ns.targets.iter() {
        push_addresses(zone, target, true, plan);
    }
}

/// RFC 1035 §3.3 additional-section processing for NS, MX and SRV targets inside the zone.
fn add_additional<'z>(zone: &'z Zone, set: &'z RRset, plan: &mut Plan<'z>) {
    if matches!(set.rtype, rtype::NS | rtype::MX | rtype::SRV) {
        for target in set.targets.iter() {
            push_addresses(zone, target, set.rtype == rtype::NS, plan);
        }
    }
}

fn push_addresses<'z>(zone: &'z Zone, target: &'z [u8], glue_ok: bool, plan: &mut Plan<'z>) {
    let Some(node) = zone.node(target) else {
        return;
    };
    if node.below_cut && !glue_ok {
        return;
    }
    for rt in [rtype::A, rtype::AAAA] {
        if let Some(set) = node.rrset(rt) {
            let _ = plan
                .additional
                .try_push(Entry::stored(Owner::Name(target), set));
        }
    }
}
