//! A signed zone in zone-file form, as served: every RRset with its RRSIGs, the NSEC or NSEC3 chain,
//! and each steered name with one pre-signed answer per type it can have. RDATA is written in
//! the generic form of RFC 3597 (`\# LEN HEX`), which every zone-file reader accepts and
//! which cannot be mis-printed; an independent verifier (`ldns-verify-zone`) reads it back.

use std::fmt::Write;

use super::steered::SteeredSigs;
use crate::dns::canonical::canonical_cmp;
use crate::dns::wire::display_wire_name;
use crate::zone::model::{Chain, RRset, Zone};

fn put_set(out: &mut String, owner: &str, set: &RRset) {
    for record in set.records() {
        let rt = u16::from_be_bytes([record[0], record[1]]);
        let rdata = record.get(10..).unwrap_or_default();
        let _ = writeln!(
            out,
            "{owner} {} IN TYPE{rt} \\# {} {}",
            set.ttl,
            rdata.len(),
            if rdata.is_empty() {
                String::new()
            } else {
                data_encoding::HEXUPPER.encode(rdata)
            }
        );
    }
}

/// The zone's text; `None` when it is not signed.
pub fn zone_text(zone: &Zone, steered: Option<&SteeredSigs>) -> Option<String> {
    let denial = zone.denial.as_ref()?;
    let mut keys: Vec<&Box<[u8]>> = zone.nodes.keys().collect();
    keys.sort_by(|a, b| canonical_cmp(a, b));
    let mut out = String::new();
    for key in keys {
        let Some(node) = zone.nodes.get(key) else {
            continue;
        };
        let owner = display_wire_name(key);
        for set in &node.rrsets {
            put_set(&mut out, &owner, set);
            if let Some(sig) = &set.rrsig {
                put_set(&mut out, &owner, sig);
            }
        }
        if let (Some(binding), Some(steered)) = (node.steer, steered) {
            for (set, sig) in steered.examples(binding) {
                put_set(&mut out, &owner, &set);
                put_set(&mut out, &owner, sig);
            }
        }
    }
    if let Chain::Nsec3(chain) = &denial.chain {
        for (owner, set) in chain.records.iter() {
            let owner = display_wire_name(owner);
            put_set(&mut out, &owner, set);
            if let Some(sig) = &set.rrsig {
                put_set(&mut out, &owner, sig);
            }
        }
    }
    Some(out)
}
