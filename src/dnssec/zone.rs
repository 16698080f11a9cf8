//! Signing a compiled zone in place: DNSKEY, CDS and CDNSKEY at the apex, the NSEC chain, and
//! an RRSIG for every authoritative RRset (at a delegation only DS and NSEC are signed; glue
//! never is).

use super::keys::{Key, KeyError};
use super::settings::{Nsec3Params, ZoneSettings};
use super::sign::{rrset, sign_set, type_bitmap, Window};
use crate::dns::canonical::canonical_cmp;
use crate::dns::wire::display_wire_name;
use crate::dns::wire::rtype;
use crate::zone::model::{
    nsec3_hash, Chain, Denial, Node, Nsec3Chain, RRset, SteeredBinding, SteeredNodata, Zone,
    NSEC3_HASH_LEN,
};
use rustc_hash::FxHashMap;

/// Which address families and CNAME a steered name can answer with (its NSEC lists them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SteeredTypes {
    pub a: bool,
    pub aaaa: bool,
    pub cname: bool,
}

/// What signing a zone did.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The window its signatures are valid for (each zone has its own validity and refresh).
    pub window: Window,
    pub rrsets: usize,
    pub nsec: usize,
    /// The largest TTL of the zone's signed data (what a rollover waits out).
    pub max_ttl: u32,
    /// Key tags: in the DNSKEY RRset, signing the keys, signing the zone.
    pub published: Vec<u16>,
    pub key_signing: Vec<u16>,
    pub zone_signing: Vec<u16>,
    /// Keys whose algorithm is not the configured one: what steerdns does about them
    /// ([`super::rollover::algorithm_mismatch`]).
    pub algorithm_note: Option<String>,
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

/// Signs `zone` with its `keys` as `settings` say, for `window` (keys' states at `now`).
/// `steered` tells what the steered binding of a node can answer with.
pub fn sign_zone(
    zone: &mut Zone,
    keys: &[Key],
    settings: &ZoneSettings,
    window: &Window,
    now: u64,
    steered: &dyn Fn(SteeredBinding) -> SteeredTypes,
) -> Result<Signed, KeyError> {
    let unusable = |message: &str| KeyError::Unusable {
        dir: settings.keys.clone(),
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
    // NSEC3: the chain's names are hashed and checked for a collision before the zone is
    // touched, so a refused zone is left as it was. (Its owners do not depend on the types
    // removed below: every node not below a cut is one, but unsigned delegations with opt-out.)
    let nsec3 = settings.nsec3();
    let nsec3_chain_names = match nsec3 {
        Some(params) => {
            let order = chain_owners(zone, Some(params));
            let origin = zone.origin.to_string();
            let hash = |name: &[u8]| nsec3_hash(name, &params.salt, params.iterations);
            let hashed = hash_chain(&origin, &order, &hash).map_err(|m| unusable(&m))?;
            Some((params, order, hashed))
        }
        None => None,
    };
    let apex = zone.apex.clone();
    for node in zone.nodes.values_mut() {
        node.rrsets.retain(|s| !GENERATED.contains(&s.rtype));
    }
    // The apex: the keys, and what the parent should publish (RFC 7344): every key-signing
    // key that has not retired (during a rollover, the old and the new: double-DS).
    let dnskeys: Vec<Vec<u8>> = published.iter().map(|k| k.dnskey_rdata()).collect();
    let parent = parent_keys(keys, now);
    let cds: Vec<Vec<u8>> = parent.iter().map(|k| k.ds_rdata(&apex)).collect();
    let cdnskey: Vec<Vec<u8>> = parent.iter().map(|k| k.dnskey_rdata()).collect();
    let ttl = settings.dnskey_ttl;
    let mut apex_sets = vec![rrset(rtype::DNSKEY, ttl, &slices(&dnskeys))];
    if !cds.is_empty() {
        apex_sets.push(rrset(rtype::CDS, ttl, &slices(&cds)));
        apex_sets.push(rrset(rtype::CDNSKEY, ttl, &slices(&cdnskey)));
    }
    if let Some(node) = zone.nodes.get_mut(&apex) {
        node.rrsets.extend(apex_sets);
    }
    if let (Some(params), Some(node)) = (nsec3, zone.nodes.get_mut(&apex)) {
        node.rrsets.push(rrset(
            rtype::NSEC3PARAM,
            zone.negative_ttl,
            &[&nsec3_param(params, 0)],
        ));
    }
    let (chain, chain_len) = match nsec3_chain_names {
        Some((params, order, hashed)) => (
            nsec3_chain(
                zone,
                &order,
                &hashed,
                params,
                &zone_signing,
                window,
                steered,
            )?,
            order.len(),
        ),
        None => {
            let order = chain_owners(zone, None);
            (
                nsec_chain(zone, &order, &zone_signing, window, steered)?,
                order.len(),
            )
        }
    };
    let mut signed = Signed {
        window: *window,
        rrsets: 0,
        nsec: chain_len,
        max_ttl: chain.ttl,
        published: published.iter().map(|k| k.tag).collect(),
        key_signing: key_signing.iter().map(|k| k.tag).collect(),
        zone_signing: zone_signing.iter().map(|k| k.tag).collect(),
        algorithm_note: super::rollover::algorithm_mismatch(keys, settings, now),
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
        chain: chain.chain,
        steered_nodata: chain.steered_nodata,
    });
    Ok(signed)
}

/// The keys the parent should have DS records for at `now`, in CDS and CDNSKEY (RFC 7344):
/// every published key-signing key that has not retired. During a double-DS rollover
/// (RFC 7583 §3.3.2) that is the old key and its successor from the successor's publication
/// until the old key retires, which is when the successor activates.
pub fn parent_keys(keys: &[Key], now: u64) -> Vec<&Key> {
    keys.iter()
        .filter(|k| k.timing.published(now))
        .filter(|k| k.role.signs_keys() && k.timing.retire.is_none_or(|r| now < r))
        .collect()
}

/// NSEC3PARAM (and NSEC3 head) RDATA: SHA-1, `flags`, iterations, salt (RFC 5155 §3.2, §4.2).
fn nsec3_param(params: &Nsec3Params, flags: u8) -> Vec<u8> {
    let mut rdata = vec![1, flags];
    rdata.extend_from_slice(&params.iterations.to_be_bytes());
    rdata.push(params.salt.len() as u8);
    rdata.extend_from_slice(&params.salt);
    rdata
}

/// A denial chain built, with its signed NODATA variants of steered names.
struct BuiltChain {
    chain: Chain,
    steered_nodata: FxHashMap<Box<[u8]>, SteeredNodata>,
    /// The TTL of its records.
    ttl: u32,
}

/// The names the chain proves things about, in canonical order: every authoritative name
/// with data and every delegation point; with NSEC3 also the empty non-terminals (RFC 5155
/// §7.1), less the unsigned delegations when opt-out is on.
fn chain_owners(zone: &Zone, nsec3_params: Option<&Nsec3Params>) -> Vec<Box<[u8]>> {
    let nsec3 = nsec3_params.is_some();
    let opt_out = nsec3_params.is_some_and(|p| p.opt_out);
    let mut order: Vec<Box<[u8]>> = zone
        .nodes
        .iter()
        .filter(|(_, n)| !n.below_cut)
        .filter(|(_, n)| nsec3 || !n.is_empty_non_terminal())
        .filter(|(_, n)| !(opt_out && n.is_cut && n.rrset(rtype::DS).is_none()))
        .map(|(k, _)| k.clone())
        .collect();
    order.sort_by(|a, b| canonical_cmp(a, b));
    order
}

/// The types present at `node` for its denial record (a delegation: only NS and DS, the
/// rest is glue), with what its steered binding can answer; RRSIG when anything there is
/// signed. Sorted.
fn node_types(node: &Node, steered: Option<SteeredTypes>) -> Vec<u16> {
    let mut types: Vec<u16> = if node.is_cut {
        node.rrsets
            .iter()
            .map(|s| s.rtype)
            .filter(|&t| t == rtype::NS || t == rtype::DS)
            .collect()
    } else {
        node.rrsets.iter().map(|s| s.rtype).collect()
    };
    if let Some(st) = steered {
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
    let signed = types.iter().any(|&t| !node.is_cut || t == rtype::DS);
    if signed {
        types.push(rtype::RRSIG);
    }
    types.sort_unstable();
    types.dedup();
    types
}

/// A steered owner's denial record without A and without AAAA, each signed.
fn steered_variants(
    types: &[u16],
    make: &dyn Fn(&[u16]) -> RRset,
    sign: &dyn Fn(&RRset) -> Result<Option<RRset>, KeyError>,
) -> Result<[RRset; 2], KeyError> {
    let variant = |without: u16| -> Result<RRset, KeyError> {
        let fewer: Vec<u16> = types.iter().copied().filter(|&t| t != without).collect();
        let mut set = make(&fewer);
        set.rrsig = sign(&set)?.map(Box::new);
        Ok(set)
    };
    Ok([variant(rtype::A)?, variant(rtype::AAAA)?])
}

/// The NSEC chain (RFC 4034 §4): an NSEC at every owner of `order`, in its node (signed with
/// the node's other RRsets).
fn nsec_chain(
    zone: &mut Zone,
    order: &[Box<[u8]>],
    zone_signing: &[&Key],
    window: &Window,
    steered: &dyn Fn(SteeredBinding) -> SteeredTypes,
) -> Result<BuiltChain, KeyError> {
    let apex = zone.apex.clone();
    let ttl = zone.negative_ttl;
    let mut steered_nodata = FxHashMap::default();
    for (i, owner) in order.iter().enumerate() {
        let next = &order[(i + 1) % order.len()];
        let Some(node) = zone.nodes.get_mut(owner) else {
            continue;
        };
        let steered_types = node.steer.map(steered);
        let mut types = node_types(node, steered_types);
        types.extend([rtype::RRSIG, rtype::NSEC]);
        types.sort_unstable();
        types.dedup();
        let nsec = |types: &[u16]| -> RRset {
            let mut rdata = next.to_vec();
            rdata.extend_from_slice(&type_bitmap(types));
            rrset(rtype::NSEC, ttl, &[&rdata])
        };
        if steered_types.is_some() {
            let sign = |set: &RRset| sign_set(zone_signing, &apex, owner, set, window);
            let pair = steered_variants(&types, &nsec, &sign)?;
            let nodata = SteeredNodata {
                owner: owner.clone(),
                without: pair,
            };
            steered_nodata.insert(owner.clone(), nodata);
        }
        node.rrsets.push(nsec(&types));
        node.rrsets.sort_by_key(|s| s.rtype);
    }
    Ok(BuiltChain {
        chain: Chain::Nsec(order.to_vec().into_boxed_slice()),
        steered_nodata,
        ttl,
    })
}

/// `<base32hex(hash)>.<apex>`, lower-case (RFC 5155 §3).
fn hashed_owner(hash: &[u8; NSEC3_HASH_LEN], apex: &[u8]) -> Box<[u8]> {
    let label = data_encoding::BASE32HEX_NOPAD
        .encode(hash)
        .to_ascii_lowercase();
    let mut owner = Vec::with_capacity(1 + label.len() + apex.len());
    owner.push(label.len() as u8);
    owner.extend_from_slice(label.as_bytes());
    owner.extend_from_slice(apex);
    owner.into_boxed_slice()
}

/// The names of `order` (indices into it) with their NSEC3 hashes (`hash`), in hash order;
/// or, when two names of zone `origin` hash alike, the message refusing the zone. No salt can
/// change the hashes (RFC 9276: none, which is all steerdns accepts), so the way out is the
/// NSEC chain for that zone.
fn hash_chain(
    origin: &str,
    order: &[Box<[u8]>],
    hash: &dyn Fn(&[u8]) -> [u8; NSEC3_HASH_LEN],
) -> Result<Vec<([u8; NSEC3_HASH_LEN], usize)>, String> {
    let mut hashed: Vec<([u8; NSEC3_HASH_LEN], usize)> = order
        .iter()
        .enumerate()
        .map(|(i, name)| (hash(name), i))
        .collect();
    hashed.sort_by_key(|a| a.0);
    if let Some(pair) = hashed.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(format!(
            "NSEC3 hashes of {} and {} collide (SHA-1; RFC 9276 leaves no salt to change them, \
             and steerdns accepts none): sign this zone with the NSEC chain instead, \
             denial = \"nsec\" in [dnssec.zone.\"{origin}\"]",
            display_wire_name(&order[pair[0].1]),
            display_wire_name(&order[pair[1].1])
        ));
    }
    Ok(hashed)
}

/// The NSEC3 chain (RFC 5155 §7.1): one signed record per name of `order`, at its hashed
/// owner, in hash order (`hashed`, from [`hash_chain`]), each pointing at the next. With
/// opt-out, only the records whose span holds a left-out delegation get the flag (it is per
/// record, §3.1.2.1): a validator cannot tell an NXDOMAIN proven by a flagged record from an
/// unsigned delegation, so it calls it insecure (no AD); every other span keeps authenticated
/// denial.
fn nsec3_chain(
    zone: &Zone,
    order: &[Box<[u8]>],
    hashed: &[([u8; NSEC3_HASH_LEN], usize)],
    params: &Nsec3Params,
    zone_signing: &[&Key],
    window: &Window,
    steered: &dyn Fn(SteeredBinding) -> SteeredTypes,
) -> Result<BuiltChain, KeyError> {
    let salt = &params.salt;
    let iterations = params.iterations;
    let ttl = zone.negative_ttl;
    let mut left_out: Vec<[u8; NSEC3_HASH_LEN]> = zone
        .nodes
        .iter()
        .filter(|(k, _)| order.binary_search_by(|o| canonical_cmp(o, k)).is_err())
        .filter(|(_, n)| n.is_cut && !n.below_cut)
        .map(|(k, _)| nsec3_hash(k, salt, iterations))
        .collect();
    left_out.sort_unstable();
    let mut records = Vec::with_capacity(hashed.len());
    let mut by_name = FxHashMap::default();
    let mut steered_nodata = FxHashMap::default();
    for (i, (hash, index)) in hashed.iter().enumerate() {
        let name = &order[*index];
        let next = &hashed[(i + 1) % hashed.len()].0;
        let spans = |h: &[u8; NSEC3_HASH_LEN]| {
            if hash < next {
                hash < h && h < next
            } else {
                h > hash || h < next
            }
        };
        let head = nsec3_param(params, u8::from(left_out.iter().any(spans)));
        let owner = hashed_owner(hash, &zone.apex);
        let node = zone.nodes.get(name);
        let steered_types = node.and_then(|n| n.steer).map(steered);
        let types = node.map_or_else(Vec::new, |n| node_types(n, steered_types));
        let nsec3 = |types: &[u16]| -> RRset {
            let mut rdata = head.clone();
            rdata.push(NSEC3_HASH_LEN as u8);
            rdata.extend_from_slice(next);
            rdata.extend_from_slice(&type_bitmap(types));
            rrset(rtype::NSEC3, ttl, &[&rdata])
        };
        let sign = |set: &RRset| sign_set(zone_signing, &zone.apex, &owner, set, window);
        if steered_types.is_some() {
            let pair = steered_variants(&types, &nsec3, &sign)?;
            let nodata = SteeredNodata {
                owner: owner.clone(),
                without: pair,
            };
            steered_nodata.insert(name.clone(), nodata);
        }
        let mut set = nsec3(&types);
        set.rrsig = sign(&set)?.map(Box::new);
        by_name.insert(name.clone(), i as u32);
        records.push((owner, set));
    }
    Ok(BuiltChain {
        chain: Chain::Nsec3(Nsec3Chain {
            salt: salt.clone().into_boxed_slice(),
            iterations,
            hashes: hashed.iter().map(|(h, _)| *h).collect(),
            records: records.into_boxed_slice(),
            by_name,
        }),
        steered_nodata,
        ttl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(labels: &[&str]) -> Box<[u8]> {
        let mut name = Vec::new();
        for label in labels {
            name.push(label.len() as u8);
            name.extend_from_slice(label.as_bytes());
        }
        name.push(0);
        name.into_boxed_slice()
    }

    #[test]
    fn an_nsec3_collision_is_refused_with_advice_that_can_be_followed() {
        let order = [
            wire(&["example", "com"]),
            wire(&["a", "example", "com"]),
            wire(&["b", "example", "com"]),
        ];
        // The real hash: no collision, every name once, in hash order.
        let sha1 = |name: &[u8]| nsec3_hash(name, &[], 0);
        let hashed = hash_chain("example.com.", &order, &sha1).expect("no collision");
        let mut indices: Vec<usize> = hashed.iter().map(|(_, i)| *i).collect();
        assert!(hashed.windows(2).all(|w| w[0].0 < w[1].0));
        indices.sort_unstable();
        assert_eq!(indices, [0, 1, 2]);
        // Two names hashing alike (SHA-1 will not oblige a test: an injected hash does).
        let colliding = |name: &[u8]| {
            let mut hash = sha1(name);
            if name.starts_with(b"\x01") {
                hash = [7; NSEC3_HASH_LEN];
            }
            hash
        };
        let message = hash_chain("example.com.", &order, &colliding).expect_err("collision");
        assert!(
            message.contains("a.example.com.") && message.contains("b.example.com."),
            "{message}"
        );
        // The way out is one the config accepts (a salt is refused, RFC 9276).
        assert!(
            message.contains("denial = \"nsec\" in [dnssec.zone.\"example.com.\"]"),
            "{message}"
        );
        assert!(!message.contains("set another nsec3_salt"), "{message}");
        let advice = "zones = [\"example.com.\"]\ndenial = \"nsec3\"\n\
                      [zone.\"example.com.\"]\ndenial = \"nsec\"\n";
        let config: super::super::DnssecConfig = toml::from_str(advice).expect("parses");
        assert_eq!(config.problem(), None);
        let settings = ZoneSettings::for_zone(&config, "example.com.").expect("resolves");
        assert_eq!(settings.nsec3(), None);
    }
}
