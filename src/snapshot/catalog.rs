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
//! and per member, from its `[transfer.zone."<name>"]`, the properties of RFC 9432 4.4:
//!
//! ```text
//! group.<id>.zones.<catalog>    0 TXT "<catalog_group>"
//! coo.<id>.zones.<catalog>      0 PTR <catalog_coo>.
//! ```
//!
//! A consumed catalog's members are read with their `group` and `coo` properties
//! ([`member_entries`]); other properties (`ext`, unknown ones) are passed over, as 4.4 asks.
//! A member listed by two consumed catalogs belongs to the first, unless that one's `coo`
//! names the second (5.6: the change of ownership), which then takes it over.
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
use crate::config::transfer::TransferConfig;
use crate::config::Config;
use std::path::Path;

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

/// The catalog zone named `name` listing `zones` (every zone served but the catalog), with
/// each member's properties from `transfer`, and its numbering after `remembered`. `Err` when
/// the name is not a domain name or is a zone that is served already.
pub fn build(
    name: &str,
    zones: &[Zone],
    transfer: &TransferConfig,
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
    let members = member_records(&origin, zones, transfer)?;
    let numbered = number(
        vec![ZoneRecords {
            zone: origin.to_string(),
            apex,
            records: members
                .iter()
                .map(|(owner, rt, rdata)| (name_to_wire(owner), catalog_record(*rt, rdata)))
                .collect(),
            signing: Box::default(),
            projected: zones.len(),
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

/// A record of the catalog: owner, type, RDATA.
type CatalogRecord = (Name, u16, Vec<u8>);

/// `<id>.zones.<catalog>` PTR (the member's wire name) of every member, with its `group` TXT
/// and `coo` PTR properties as `transfer` gives them; sorted.
fn member_records(
    origin: &Name,
    zones: &[Zone],
    transfer: &TransferConfig,
) -> Result<Vec<CatalogRecord>, String> {
    let mut records = Vec::new();
    for zone in zones {
        let fail = |e: hickory_proto::ProtoError| format!("member {}: {e}", zone.origin);
        let member = Name::from_ascii(format!("{}.zones", member_label(&zone.apex)))
            .and_then(|label| label.append_domain(origin))
            .map_err(fail)?;
        let property = |label: &str| {
            Name::from_ascii(label)
                .and_then(|l| l.append_domain(&member))
                .map_err(fail)
        };
        let rules = transfer.zone(&zone.origin.to_ascii());
        if let Some(group) = rules.and_then(|r| r.catalog_group.as_deref()) {
            let mut text = vec![group.len().min(255) as u8];
            text.extend(group.bytes().take(255));
            records.push((property("group")?, rtype::TXT, text));
        }
        if let Some(coo) = rules.and_then(|r| r.catalog_coo.as_deref()) {
            let absolute = format!("{}.", coo.trim_end_matches('.'));
            let target = Name::from_ascii(absolute).map_err(fail)?.to_lowercase();
            records.push((property("coo")?, PTR, name_to_wire(&target).to_vec()));
        }
        records.push((member, PTR, zone.apex.to_vec()));
    }
    records.sort();
    Ok(records)
}

/// A member's unique label: 16 hex digits of the SHA-256 of its wire name.
pub fn member_label(apex: &[u8]) -> String {
    let digest = Sha256::digest(apex);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A catalog record's bytes after the owner (type, class, TTL 0, RDLENGTH, RDATA).
fn catalog_record(rt: u16, rdata: &[u8]) -> Box<[u8]> {
    let mut bytes = Vec::with_capacity(10 + rdata.len());
    bytes.extend_from_slice(&rt.to_be_bytes());
    bytes.extend_from_slice(&class::IN.to_be_bytes());
    bytes.extend_from_slice(&0u32.to_be_bytes());
    bytes.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    bytes.extend_from_slice(rdata);
    bytes.into_boxed_slice()
}

fn catalog_zone(origin: &Name, members: &[CatalogRecord], serial: u32) -> Result<Zone, String> {
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
    records.extend(members.iter().map(|(owner, rt, rdata)| RecordInput {
        name: owner,
        rtype: *rt,
        ttl: 0,
        rdata,
    }));
    Zone::build(origin, records).map_err(|e| e.to_string())
}

/// A member of a consumed catalog with the properties steerdns reads (RFC 9432 4.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member zone (lower case).
    pub zone: Name,
    /// Its `group` properties, sorted.
    pub groups: Vec<String>,
    /// The catalog its `coo` property names (lower case), if any.
    pub coo: Option<Name>,
}

/// The member zones a consumed catalog lists: the PTR targets at `<label>.zones.<catalog>`
/// (RFC 9432 4.3.1), lower case, sorted. `Err` when the catalog does not say `version TXT "2"`
/// (4.2.1: a consumer must not interpret a schema it does not know).
pub fn members(catalog: &ParsedZone) -> Result<Vec<Name>, String> {
    member_entries(catalog).map(|m| m.into_iter().map(|m| m.zone).collect())
}

/// [`members`] with their `group` and `coo` properties (`<property>.<label>.zones.<catalog>`);
/// any other property is passed over.
pub fn member_entries(catalog: &ParsedZone) -> Result<Vec<Member>, String> {
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
    let depth = zones.num_labels();
    let under = |r: &&crate::zone::parse::SourceRecord, extra: u8| {
        r.name.num_labels() == depth + extra && zones.zone_of(&r.name)
    };
    let read_name = |rdata: &[u8]| {
        let mut decoder = BinDecoder::new(rdata);
        Name::read(&mut decoder).ok().map(|n| n.to_lowercase())
    };
    let mut members: Vec<Member> = catalog
        .records
        .iter()
        .filter(|r| r.rtype == RecordType::PTR && under(r, 1))
        .filter_map(|r| {
            let label = r.name.to_lowercase().trim_to(usize::from(depth) + 1);
            let properties = catalog.records.iter().filter(|p| {
                under(p, 2) && p.name.to_lowercase().trim_to(usize::from(depth) + 1) == label
            });
            let mut member = Member {
                zone: read_name(&r.rdata)?,
                groups: Vec::new(),
                coo: None,
            };
            for p in properties {
                let property = p.name.iter().next().map(|l| l.to_ascii_lowercase());
                match (property.as_deref(), p.rtype) {
                    (Some(b"group"), RecordType::TXT) => member.groups.push(txt_string(&p.rdata)),
                    (Some(b"coo"), RecordType::PTR) => member.coo = read_name(&p.rdata),
                    _ => {}
                }
            }
            member.groups.sort();
            Some(member)
        })
        .collect();
    members.sort_by(|a, b| a.zone.cmp(&b.zone));
    members.dedup_by(|a, b| a.zone == b.zone);
    Ok(members)
}

/// The first character-string of TXT RDATA, as text.
fn txt_string(rdata: &[u8]) -> String {
    let len = rdata.first().map_or(0, |&l| usize::from(l));
    let text = rdata.get(1..1 + len).unwrap_or_default();
    String::from_utf8_lossy(text).into_owned()
}

/// Every secondary zone `config` names: its `[[secondary.zone]]`s, its catalogs, and the
/// members of each catalog whose copy is on disk and reads as a schema 2 catalog (a catalog
/// not transferred yet, or not readable, provisions nothing). Reads the catalogs' copies. A
/// member two catalogs list belongs to the first, unless its `coo` there names the other.
pub fn secondary_zones(config: &Config) -> Vec<SecondaryZoneConfig> {
    let secondary = &config.secondary;
    let mut zones = secondary.zone.clone();
    let dir = secondary.dir.clone().unwrap_or_default();
    for catalog in &secondary.catalog {
        zones.push(catalog.clone());
        for member in catalog_member_zones(catalog, &dir) {
            let held = zones
                .iter()
                .position(|z| z.name.trim_end_matches('.') == member.name);
            match held {
                None => zones.push(member),
                Some(i) if moves_to(&zones[i], catalog) => zones[i] = member,
                Some(_) => {}
            }
        }
    }
    zones
}

/// Whether member `held` (of another catalog) says by its `coo` that `catalog` takes it over.
fn moves_to(held: &SecondaryZoneConfig, catalog: &SecondaryZoneConfig) -> bool {
    let named = |n: &str| n.trim_end_matches('.').to_ascii_lowercase();
    held.catalog_coo
        .as_deref()
        .is_some_and(|coo| named(coo) == named(&catalog.name))
}

/// The secondary zones the copy of `catalog` on disk provisions (copies in `dir`), each with
/// its properties.
pub fn catalog_member_zones(catalog: &SecondaryZoneConfig, dir: &Path) -> Vec<SecondaryZoneConfig> {
    catalog_entries(catalog)
        .into_iter()
        .map(|m| {
            let mut zone = catalog.member_in(&m.zone.to_ascii(), dir, m.groups);
            zone.catalog_coo = m.coo.map(|c| c.to_ascii());
            zone
        })
        .collect()
}

/// The members listed by the copy of `catalog` on disk (none when there is no good copy).
pub fn catalog_members(catalog: &SecondaryZoneConfig) -> Vec<Name> {
    catalog_entries(catalog)
        .into_iter()
        .map(|m| m.zone)
        .collect()
}

fn catalog_entries(catalog: &SecondaryZoneConfig) -> Vec<Member> {
    let path = catalog.copy_path();
    let (Some(origin), true) = (catalog.origin(), path.is_file()) else {
        return Vec::new();
    };
    match load_zone_file(&path, &origin).map(|copy| member_entries(&copy)) {
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

    fn plain() -> TransferConfig {
        TransferConfig::default()
    }

    #[test]
    fn members_carry_their_group_and_coo_properties_and_a_change_moves_the_serial() {
        let zones = vec![example_zone(
            "$TTL 300\n@ SOA ns1 hostmaster 7 3600 600 86400 300\n@ NS ns1\nns1 A 192.0.2.1\n",
        )];
        let text = "[transfer]\n[transfer.zone.\"example.com\"]\ncatalog_group = \"edge\"\n\
                    catalog_coo = \"new-catalog.invalid\"\n";
        let config = crate::config::Config::parse(text, std::path::Path::new("t.toml"))
            .expect("config")
            .transfer
            .expect("transfer");
        let (plain_catalog, state) =
            build("catalog.invalid", &zones, &plain(), &Remembered::new()).expect("built");
        let mut remembered = Remembered::new();
        remembered.insert(state.zone.clone(), (state.digest, state.revision));
        let (catalog, numbered) =
            build("catalog.invalid", &zones, &config, &remembered).expect("built");
        assert_eq!(numbered.projected, 1, "one member");
        assert_eq!(
            catalog.serial,
            plain_catalog.serial + 1,
            "properties changed"
        );
        let label = member_label(&zones[0].apex);
        let records = axfr_records(&catalog).expect("SOA");
        let at = |owner: &str| {
            let wire = name_to_wire(&Name::from_ascii(owner).expect("name"));
            records
                .iter()
                .filter(|(o, _)| **o == wire[..])
                .map(|(_, r)| r.to_vec())
                .collect::<Vec<_>>()
        };
        let group = at(&format!("group.{label}.zones.catalog.invalid."));
        assert_eq!(group.len(), 1);
        assert!(group[0].ends_with(b"\x04edge"), "{group:?}");
        let coo = at(&format!("coo.{label}.zones.catalog.invalid."));
        assert!(
            coo[0].ends_with(b"\x0bnew-catalog\x07invalid\x00"),
            "{coo:?}"
        );
        // What is produced reads back as the same member and properties.
        let origin = Name::from_ascii("catalog.invalid.").expect("origin");
        let text: String = records
            .iter()
            .map(|(o, r)| {
                let rt = u16::from_be_bytes([r[0], r[1]]);
                let rdata = &r[10..];
                let hex: String = rdata.iter().map(|b| format!("{b:02x}")).collect();
                let owner = crate::dns::wire::display_wire_name(o);
                format!("{owner} 0 IN TYPE{rt} \\# {} {hex}\n", rdata.len())
            })
            .skip(1)
            .collect();
        let parsed = crate::zone::parse::parse_zone_text(&text, Path::new("c.zone"), &origin)
            .expect("parses");
        let read = member_entries(&parsed).expect("schema 2");
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].zone.to_ascii(), "example.com.");
        assert_eq!(read[0].groups, ["edge"]);
        assert_eq!(
            read[0].coo.as_ref().map(|c| c.to_ascii()),
            Some("new-catalog.invalid.".to_string())
        );
    }

    #[test]
    fn the_catalog_lists_every_zone_with_a_stable_label_and_a_serial_that_follows_the_set() {
        let zones = vec![example_zone(
            "$TTL 300\n@ SOA ns1 hostmaster 7 3600 600 86400 300\n@ NS ns1\nns1 A 192.0.2.1\n",
        )];
        let (catalog, state) =
            build("catalog.invalid", &zones, &plain(), &Remembered::new()).expect("built");
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
        let (same, _) = build("catalog.invalid.", &zones, &plain(), &remembered).expect("built");
        assert_eq!(same.serial, 1, "same members, same serial");
        let (fewer, _) = build("catalog.invalid", &[], &plain(), &remembered).expect("built");
        assert_eq!(fewer.serial, 2, "a member left");

        let e =
            build("example.com", &zones, &plain(), &Remembered::new()).expect_err("a served zone");
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
        // Properties: group and coo read, `ext` and unknown ones passed over.
        let origin = Name::from_ascii("cat.test.").expect("origin");
        let text = format!(
            "{head}version TXT \"2\"\na1.zones PTR a.test.\ngroup.a1.zones TXT \"edge\"\n\
             coo.a1.zones PTR other.test.\nserial.a1.zones TXT \"unknown\"\n\
             flavour.ext.a1.zones TXT \"vendor\"\nb1.zones PTR b.test.\n"
        );
        let parsed = crate::zone::parse::parse_zone_text(&text, Path::new("c.zone"), &origin)
            .expect("parses");
        let entries = member_entries(&parsed).expect("schema 2");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].groups, ["edge"]);
        assert_eq!(
            entries[0].coo.as_ref().map(|c| c.to_ascii()),
            Some("other.test.".to_string())
        );
        assert_eq!(
            (entries[1].groups.len(), entries[1].coo.is_none()),
            (0, true)
        );
        let old = consumed(&format!("{head}version TXT \"1\"\na1.zones PTR a.test.\n"));
        assert!(old.is_err_and(|e| e.contains("schema 2")));
    }

    #[test]
    fn a_member_of_two_catalogs_is_the_first_ones_unless_its_coo_names_the_second() {
        let dir = std::env::temp_dir().join(format!("steerdns-coo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let head = "$TTL 0\n@ SOA invalid. invalid. 1 3600 600 2147483646 0\n@ NS invalid.\n\
                    version TXT \"2\"\n";
        let write = |name: &str, body: &str| {
            std::fs::write(dir.join(format!("{name}.zone")), format!("{head}{body}")).expect("copy")
        };
        write(
            "old.cat",
            "m1.zones PTR moving.test.\ncoo.m1.zones PTR new.cat.\nm2.zones PTR staying.test.\n",
        );
        write(
            "new.cat",
            "n1.zones PTR moving.test.\ngroup.n1.zones TXT \"edge\"\nn2.zones PTR staying.test.\n",
        );
        let text = format!(
            "[secondary]\ndir = {:?}\n\
             [[secondary.catalog]]\nname = \"old.cat\"\nprimaries = [\"192.0.2.1:53\"]\n\
             [[secondary.catalog]]\nname = \"new.cat\"\nprimaries = [\"192.0.2.2:53\"]\n\
             [secondary.catalog.group.\"edge\"]\nprimaries = [\"192.0.2.3:53\"]\n",
            dir.display().to_string()
        );
        let path = dir.join("steerdns.toml");
        std::fs::write(&path, text).expect("config file");
        let config = crate::config::Config::load(&path).expect("config");
        let zones = secondary_zones(&config);
        let _ = std::fs::remove_dir_all(&dir);
        let primary_of = |name: &str| {
            zones
                .iter()
                .find(|z| z.name == name)
                .map(|z| (z.primaries[0].to_string(), z.catalog_groups.clone()))
        };
        // The coo moves it to the catalog it names, with that catalog's properties (group
        // edge, whose settings give it its own primaries)...
        assert_eq!(
            primary_of("moving.test"),
            Some(("192.0.2.3:53".to_string(), vec!["edge".to_string()]))
        );
        // ...and without one the first catalog keeps it.
        assert_eq!(
            primary_of("staying.test"),
            Some(("192.0.2.1:53".to_string(), Vec::new()))
        );
        assert_eq!(zones.iter().filter(|z| z.name == "moving.test").count(), 1);
    }

    #[test]
    fn member_groups_belong_to_catalogs_only() {
        let text = "[[secondary.zone]]\nname = \"a.test\"\nprimaries = [\"192.0.2.1:53\"]\n\
                    [secondary.zone.group.\"edge\"]\ntimeout_secs = 3\n";
        let e = crate::config::Config::parse(text, Path::new("t.toml")).expect_err("refused");
        assert!(e.to_string().contains("a catalog's"), "{e}");
    }
}
