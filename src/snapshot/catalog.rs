//! Catalog zones (RFC 9432, schema version 2): the one this server produces, and the members
//! of the ones it consumes ([`members`], [`secondary_zones`]).
//!
//! The catalog zone this server produces: one zone, named by
//! `[transfer] catalog`, listing every other zone served, so that a secondary provider (Knot
//! with `catalog-role: interpret`, BIND, PowerDNS) provisions and drops member zones by
//! itself. Built with the zones when a snapshot is built, served and transferred like any zone.
//!
//! Its content, as RFC 9432 section 4 asks:
//!
//! ```text
//! <catalog>                     0 SOA invalid. invalid. <serial> 3600 600 2147483646 0
//! <catalog>                     0 NS  invalid.
//! version.<catalog>             0 TXT "2"
//! <id>.zones.<catalog>          0 PTR <member zone>.
//! ```
//!
//! `<id>`, a member's unique label, is the first 8 bytes of the SHA-256 of the member's
//! lower-cased wire name in hex: stable across restarts and servers, so a secondary never sees
//! a member leave and come back under another label (which RFC 9432 5.1 treats as a reset).
//! The serial is numbered like a projection ([`super::projection`]): the revision, starting
//! at 1, grows by one whenever the set of members changes, and is kept in the state directory.

use hickory_proto::rr::{Name, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
use sha2::{Digest, Sha256};

use crate::config::secondary::SecondaryZoneConfig;
use crate::config::Config;
use crate::zone::parse::{load_zone_file, ParsedZone};

use super::projection::{number, Remembered, ZoneProjection, ZoneRecords};
use crate::dns::wire::{class, rtype};
use crate::zone::model::{name_to_wire, RecordInput, Zone};

/// The PTR type (RFC 1035), of the member records.
const PTR: u16 = 12;

/// The SOA timers of the catalog: refresh, retry, expire (RFC 9432 recommends a large
/// expire: a secondary must not drop every member because the primary is unreachable for a
/// while), minimum.
const TIMERS: [u32; 4] = [3600, 600, 2_147_483_646, 0];

/// The catalog zone named `name` listing `zones` (every zone served but the catalog), and its
/// numbering after `remembered`. `Err` when the name is not a domain name or is a zone that is
/// served already.
pub fn build(
    name: &str,
    zones: &[Zone],
    remembered: &Remembered,
) -> Result<(Zone, ZoneProjection), String> {
    let origin = Name::from_ascii(name)
        .map(|n| n.to_lowercase())
        .map_err(|e| format!("{name:?} is not a domain name: {e}"))?;
    let origin = Name::from_ascii(format!("{}.", origin.to_ascii().trim_end_matches('.')))
        .map_err(|e| format!("{name:?} is not a domain name: {e}"))?;
    let apex = name_to_wire(&origin);
    if zones.iter().any(|z| z.apex == apex) {
        return Err(format!(
            "{origin} is a zone served: the catalog needs a name of its own"
        ));
    }
    let members = member_records(&origin, zones)?;
    let numbered = number(
        vec![ZoneRecords {
            zone: origin.to_string(),
            apex,
            records: members
                .iter()
                .map(|(owner, rdata)| (name_to_wire(owner), ptr_record(rdata)))
                .collect(),
            signing: Box::default(),
            projected: members.len(),
            omitted: 0,
        }],
        &[0],
        remembered,
    );
    let state = numbered
        .zones()
        .first()
        .cloned()
        .ok_or("the catalog could not be numbered")?;
    let zone = catalog_zone(&origin, &members, state.transfer_serial())?;
    Ok((zone, state))
}

/// `<id>.zones.<catalog>` and the PTR RDATA (the member's wire name) of every member, sorted.
fn member_records(origin: &Name, zones: &[Zone]) -> Result<Vec<(Name, Vec<u8>)>, String> {
    let mut members: Vec<(Name, Vec<u8>)> = zones
        .iter()
        .map(|zone| {
            let owner = Name::from_ascii(format!("{}.zones", member_label(&zone.apex)))
                .and_then(|label| label.append_domain(origin))
                .map_err(|e| format!("member {}: {e}", zone.origin))?;
            Ok((owner, zone.apex.to_vec()))
        })
        .collect::<Result<_, String>>()?;
    members.sort();
    Ok(members)
}

/// A member's unique label: 16 hex digits of the SHA-256 of its wire name.
pub fn member_label(apex: &[u8]) -> String {
    let digest = Sha256::digest(apex);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A PTR record's bytes after the owner (type, class, TTL 0, RDLENGTH, RDATA).
fn ptr_record(rdata: &[u8]) -> Box<[u8]> {
    let mut bytes = Vec::with_capacity(10 + rdata.len());
    bytes.extend_from_slice(&PTR.to_be_bytes());
    bytes.extend_from_slice(&class::IN.to_be_bytes());
    bytes.extend_from_slice(&0u32.to_be_bytes());
    bytes.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    bytes.extend_from_slice(rdata);
    bytes.into_boxed_slice()
}

fn catalog_zone(origin: &Name, members: &[(Name, Vec<u8>)], serial: u32) -> Result<Zone, String> {
    let invalid = name_to_wire(
        &Name::root()
            .prepend_label("invalid")
            .map_err(|e| e.to_string())?,
    );
    let mut soa = Vec::new();
    soa.extend_from_slice(&invalid);
    soa.extend_from_slice(&invalid);
    soa.extend_from_slice(&serial.to_be_bytes());
    for timer in TIMERS {
        soa.extend_from_slice(&timer.to_be_bytes());
    }
    let version = Name::from_ascii("version")
        .and_then(|v| v.append_domain(origin))
        .map_err(|e| e.to_string())?;
    let version_text = [1u8, b'2'];
    let mut records = vec![
        RecordInput {
            name: origin,
            rtype: rtype::SOA,
            ttl: 0,
            rdata: &soa,
        },
        RecordInput {
            name: origin,
            rtype: rtype::NS,
            ttl: 0,
            rdata: &invalid,
        },
        RecordInput {
            name: &version,
            rtype: rtype::TXT,
            ttl: 0,
            rdata: &version_text,
        },
    ];
    records.extend(members.iter().map(|(owner, rdata)| RecordInput {
        name: owner,
        rtype: PTR,
        ttl: 0,
        rdata,
    }));
    Zone::build(origin, records).map_err(|e| e.to_string())
}

/// The member zones a consumed catalog lists: the PTR targets at `<label>.zones.<catalog>`
/// (RFC 9432 4.3.1), lower case, sorted. `Err` when the catalog does not say `version TXT "2"`
/// (4.2.1: a consumer must not interpret a schema it does not know).
pub fn members(catalog: &ParsedZone) -> Result<Vec<Name>, String> {
    let origin = &catalog.origin;
    let version = Name::from_ascii("version")
        .and_then(|v| v.append_domain(origin))
        .map_err(|e| e.to_string())?;
    let zones = Name::from_ascii("zones")
        .and_then(|v| v.append_domain(origin))
        .map_err(|e| e.to_string())?;
    let is_version_2 = catalog
        .records
        .iter()
        .any(|r| r.rtype == RecordType::TXT && r.name == version && r.rdata == [1, b'2']);
    if !is_version_2 {
        return Err(format!(
            "{origin}: no version TXT \"2\" (RFC 9432 schema 2)"
        ));
    }
    let mut members: Vec<Name> = catalog
        .records
        .iter()
        .filter(|r| r.rtype == RecordType::PTR && r.name.num_labels() == zones.num_labels() + 1)
        .filter(|r| zones.zone_of(&r.name))
        .filter_map(|r| {
            let mut decoder = BinDecoder::new(&r.rdata);
            Name::read(&mut decoder).ok().map(|n| n.to_lowercase())
        })
        .collect();
    members.sort();
    members.dedup();
    Ok(members)
}

/// Every secondary zone `config` names: its `[[secondary.zone]]`s, its catalogs, and the
/// members of each catalog whose copy is on disk and reads as a schema 2 catalog (a catalog
/// not transferred yet, or not readable, provisions nothing). Reads the catalogs' copies.
pub fn secondary_zones(config: &Config) -> Vec<SecondaryZoneConfig> {
    let secondary = &config.secondary;
    let mut zones = secondary.zone.clone();
    let dir = secondary.dir.clone().unwrap_or_default();
    for catalog in &secondary.catalog {
        zones.push(catalog.clone());
        for member in catalog_members(catalog) {
            let member = catalog.member(&member.to_ascii(), &dir);
            if !zones
                .iter()
                .any(|z| z.name.trim_end_matches('.') == member.name)
            {
                zones.push(member);
            }
        }
    }
    zones
}

/// The members listed by the copy of `catalog` on disk (none when there is no good copy).
pub fn catalog_members(catalog: &SecondaryZoneConfig) -> Vec<Name> {
    let path = catalog.copy_path();
    let (Some(origin), true) = (catalog.origin(), path.is_file()) else {
        return Vec::new();
    };
    match load_zone_file(&path, &origin).map(|copy| members(&copy)) {
        Ok(Ok(members)) => members,
        Ok(Err(problem)) => {
            tracing::warn!("catalog {origin}: {problem}; provisioning nothing from it");
            Vec::new()
        }
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::model::example_zone;
    use crate::zone::transfer::axfr_records;

    #[test]
    fn the_catalog_lists_every_zone_with_a_stable_label_and_a_serial_that_follows_the_set() {
        let zones = vec![example_zone(
            "$TTL 300\n@ SOA ns1 hostmaster 7 3600 600 86400 300\n@ NS ns1\nns1 A 192.0.2.1\n",
        )];
        let (catalog, state) = build("catalog.invalid", &zones, &Remembered::new()).expect("built");
        assert_eq!((catalog.serial, state.projected), (1, 1));
        let types: Vec<u16> = axfr_records(&catalog)
            .expect("SOA")
            .iter()
            .map(|(_, r)| u16::from_be_bytes([r[0], r[1]]))
            .collect();
        assert_eq!(
            types,
            [rtype::SOA, rtype::NS, rtype::TXT, PTR, rtype::SOA],
            "SOA, NS, version, the member (canonical order), SOA"
        );
        let label = member_label(&zones[0].apex);
        assert_eq!(label.len(), 16);
        assert_eq!(label, member_label(b"\x07example\x03com\x00"), "stable");

        let mut remembered = Remembered::new();
        remembered.insert(state.zone.clone(), (state.digest, state.revision));
        let (same, _) = build("catalog.invalid.", &zones, &remembered).expect("built");
        assert_eq!(same.serial, 1, "same members, same serial");
        let (fewer, _) = build("catalog.invalid", &[], &remembered).expect("built");
        assert_eq!(fewer.serial, 2, "a member left");

        let e = build("example.com", &zones, &Remembered::new()).expect_err("a served zone");
        assert!(e.contains("is a zone served"), "{e}");
    }

    fn consumed(text: &str) -> Result<Vec<String>, String> {
        let origin = Name::from_ascii("cat.test.").expect("origin");
        let parsed =
            crate::zone::parse::parse_zone_text(text, std::path::Path::new("cat.zone"), &origin)
                .map_err(|p| format!("{p:?}"))?;
        members(&parsed).map(|m| m.iter().map(|n| n.to_ascii()).collect())
    }

    #[test]
    fn a_consumer_reads_the_members_of_a_schema_2_catalog_only() {
        let head = "$TTL 0\n@ SOA invalid. invalid. 1 3600 600 2147483646 0\n@ NS invalid.\n";
        let listed = consumed(&format!(
            "{head}version TXT \"2\"\nb1.zones PTR B.test.\na1.zones PTR a.test.\n\
             group.a1.zones TXT \"ignored property\"\nelsewhere PTR c.test.\n"
        ));
        assert_eq!(
            listed,
            Ok(vec!["a.test.".to_string(), "b.test.".to_string()])
        );
        let old = consumed(&format!("{head}version TXT \"1\"\na1.zones PTR a.test.\n"));
        assert!(old.is_err_and(|e| e.contains("schema 2")));
    }
}
