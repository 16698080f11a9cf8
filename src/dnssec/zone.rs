//! Signing a compiled zone in place: DNSKEY, CDS and CDNSKEY at the apex, the NSEC chain, and
//! an RRSIG for every authoritative RRset (at a delegation only DS and NSEC are signed; glue
//! never is).

use super::config::DnssecConfig;
use super::keys::{Key, KeyError};
use super::sign::{rrset, sign_set, type_bitmap, Window};
use crate::dns::canonical::canonical_cmp;
use crate::dns::wire::rtype;
use crate::zone::model::{Denial, RRset, Zone};

/// Which address families and CNAME a steered name can answer with (its NSEC lists them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SteeredTypes {
    pub a: bool,
    pub aaaa: bool,
    pub cname: bool,
}

/// What signing a zone did.
#[derive(Debug, Clone, Default)]
pub struct Signed {
    pub rrsets: usize,
    pub nsec: usize,
    /// The largest TTL of the zone's signed data (what a rollover waits out).
    pub max_ttl: u32,
    /// Key tags: in the DNSKEY RRset, signing the keys, signing the zone.
    pub published: Vec<u16>,
    pub key_signing: Vec<u16>,
    pub zone_signing: Vec<u16>,
}

fn slices(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(Vec::as_slice).collect()
}

/// Types we generate; any the zone file carried are replaced.
const GENERATED: [u16; 7] = [
    rtype::RRSIG,
    rtype::NSEC,
    rtype::NSEC3,
    rtype::NSEC3PARAM,
    rtype::DNSKEY,
    rtype::CDS,
    rtype::CDNSKEY,
];

/// Signs `zone` with its `keys` for `window` (keys' states at `now`). `steered` tells what the
/// steered binding of a node can answer with.
pub fn sign_zone(
    zone: &mut Zone,
    keys: &[Key],
    config: &DnssecConfig,
    window: &Window,
    now: u64,
    steered: &dyn Fn(u32) -> SteeredTypes,
) -> Result<Signed, KeyError> {
    let unusable = |message: &str| KeyError::Unusable {
        dir: config.keys.clone(),
        zone: zone.origin.to_string(),
        message: message.to_string(),
    };
    let published: Vec<&Key> = keys.iter().filter(|k| k.timing.published(now)).collect();
    let key_signing: Vec<&Key> = published
        .iter()
        .copied()
        .filter(|k| k.role.signs_keys() && k.timing.active(now))
        .collect();
    let zone_signing: Vec<&Key> = published
        .iter()
        .copied()
        .filter(|k| k.role.signs_zone() && k.timing.active(now))
        .collect();
    if key_signing.is_empty() {
        return Err(unusable("no published, active CSK or KSK"));
    }
    if zone_signing.is_empty() {
        return Err(unusable("no published, active CSK or ZSK"));
    }
    let apex = zone.apex.clone();
    for node in zone.nodes.values_mut() {
        node.rrsets.retain(|s| !GENERATED.contains(&s.rtype));
    }
    // The apex: the keys, and what the parent should publish (RFC 7344): every key-signing
    // key that has not retired (during a rollover, the old and the new: double-DS).
    let dnskeys: Vec<Vec<u8>> = published.iter().map(|k| k.dnskey_rdata()).collect();
    let parent: Vec<&Key> = published
        .iter()
        .copied()
        .filter(|k| k.role.signs_keys() && k.timing.retire.is_none_or(|r| now < r))
        .collect();
    let cds: Vec<Vec<u8>> = parent.iter().map(|k| k.ds_rdata(&apex)).collect();
    let cdnskey: Vec<Vec<u8>> = parent.iter().map(|k| k.dnskey_rdata()).collect();
    let ttl = config.dnskey_ttl;
    let mut apex_sets = vec![rrset(rtype::DNSKEY, ttl, &slices(&dnskeys))];
    if !cds.is_empty() {
        apex_sets.push(rrset(rtype::CDS, ttl, &slices(&cds)));
        apex_sets.push(rrset(rtype::CDNSKEY, ttl, &slices(&cdnskey)));
    }
    if let Some(node) = zone.nodes.get_mut(&apex) {
        node.rrsets.extend(apex_sets);
    }
    // The chain: every authoritative name with data, and every delegation point.
    let mut order: Vec<Box<[u8]>> = zone
        .nodes
        .iter()
        .filter(|(_, n)| !n.below_cut && (!n.rrsets.is_empty() || n.steer.is_some()))
        .map(|(k, _)| k.clone())
        .collect();
    order.sort_by(|a, b| canonical_cmp(a, b));
    let negative_ttl = zone.negative_ttl;
    let mut steered_nodata = rustc_hash::FxHashMap::default();
    for (i, owner) in order.iter().enumerate() {
        let next = &order[(i + 1) % order.len()];
        let Some(node) = zone.nodes.get_mut(owner) else {
            continue;
        };
        let mut types: Vec<u16> = if node.is_cut {
            node.rrsets
                .iter()
                .map(|s| s.rtype)
                .filter(|&t| t == rtype::NS || t == rtype::DS)
                .collect()
        } else {
            node.rrsets.iter().map(|s| s.rtype).collect()
        };
        let steered_types = node.steer.map(steered);
        if let Some(st) = steered_types {
            types.extend(
                [
                    (st.a, rtype::A),
                    (st.aaaa, rtype::AAAA),
                    (st.cname, rtype::CNAME),
                ]
                .into_iter()
                .filter_map(|(on, t)| on.then_some(t)),
            );
        }
        types.extend([rtype::RRSIG, rtype::NSEC]);
        types.sort_unstable();
        types.dedup();
        let nsec = |types: &[u16]| -> RRset {
            let mut rdata = next.to_vec();
            rdata.extend_from_slice(&type_bitmap(types));
            rrset(rtype::NSEC, negative_ttl, &[&rdata])
        };
        if steered_types.is_some() {
            let mut variants: Vec<RRset> = Vec::with_capacity(2);
            for without in [rtype::A, rtype::AAAA] {
                let fewer: Vec<u16> = types.iter().copied().filter(|&t| t != without).collect();
                let mut set = nsec(&fewer);
                set.rrsig = sign_set(&zone_signing, &apex, owner, &set, window)?.map(Box::new);
                variants.push(set);
            }
            if let Ok(pair) = <[RRset; 2]>::try_from(variants) {
                steered_nodata.insert(owner.clone(), pair);
            }
        }
        node.rrsets.push(nsec(&types));
        node.rrsets.sort_by_key(|s| s.rtype);
    }
    let mut signed = Signed {
        nsec: order.len(),
        published: published.iter().map(|k| k.tag).collect(),
        key_signing: key_signing.iter().map(|k| k.tag).collect(),
        zone_signing: zone_signing.iter().map(|k| k.tag).collect(),
        ..Signed::default()
    };
    for (owner, node) in zone.nodes.iter_mut() {
        if node.below_cut {
            continue;
        }
        let is_cut = node.is_cut;
        for set in node.rrsets.iter_mut() {
            if is_cut && !matches!(set.rtype, rtype::DS | rtype::NSEC) {
                continue;
            }
            let signers = match set.rtype {
                rtype::DNSKEY | rtype::CDS | rtype::CDNSKEY => &key_signing,
                _ => &zone_signing,
            };
            set.rrsig = sign_set(signers, &apex, owner, set, window)?.map(Box::new);
            signed.rrsets += 1;
            signed.max_ttl = signed.max_ttl.max(set.ttl);
        }
    }
    zone.denial = Some(Denial {
        order: order.into_boxed_slice(),
        steered_nodata,
    });
    Ok(signed)
}
