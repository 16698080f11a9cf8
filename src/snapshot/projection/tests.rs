//! The projection of steered names into transfers: the records, the numbering of revisions,
//! the SOA serial moved with them, and the state file.

use super::*;
use crate::policy::{compile, ControlKnobs, EndpointKnobs};
use crate::zone::model::example_zone;
use crate::zone::transfer::{axfr_records, TransferView};

const ZONE: &str = "$TTL 300\n@ SOA ns1 hostmaster 7 3600 600 86400 300\n@ NS ns1\n\
                    ns1 A 192.0.2.53\ntxt TXT \"static data\"\n\
                    w A 203.0.113.99\n";

const POLICIES: &str = r#"
[topology]
global = ["192.0.2.1", "2001:db8::1"]
[[topology.regions]]
name = "eu-west"
continent = "EU"
anycast = ["198.51.100.4", "2001:db8:1::4"]
[profiles.w]
type = "weighted"
ttl = 120
[[profiles.w.endpoints]]
name = "a"
addresses = ["198.51.100.1"]
weight = 60
[[profiles.w.endpoints]]
name = "b"
cname = "b.cdn.example.net."
weight = 40
[[steered]]
name = "*.edge.example.com."
policy = "anycast"
ttl = 300
[[steered]]
name = "w.example.com."
profile = "w"
ttl = 60
[[steered]]
name = "hidden.example.com."
policy = "anycast"
ttl = 30
transfer = "omit"
[[steered]]
name = "txt.example.com."
profile = "w"
"#;

#[derive(serde::Deserialize)]
struct Fragment {
    topology: crate::policy::TopologyConfig,
    #[serde(default)]
    profiles: std::collections::BTreeMap<String, crate::policy::ProfileConfig>,
    #[serde(default)]
    steered: Vec<crate::policy::SteeredConfig>,
}

fn policies(weight_of_b: u32) -> CompiledPolicies {
    let f: Fragment = toml::from_str(POLICIES).expect("policies parse");
    let mut knobs = ControlKnobs::default();
    knobs
        .profiles
        .entry("w".into())
        .or_default()
        .endpoints
        .insert(
            "b".into(),
            EndpointKnobs {
                weight: Some(weight_of_b),
                ..EndpointKnobs::default()
            },
        );
    compile(&f.topology, &f.profiles, &f.steered, &knobs).expect("policies compile")
}

fn unsigned(_: &Name) -> Option<Box<[u8]>> {
    None
}

fn owners_and_types(view: TransferView<'_>) -> Vec<(String, u16)> {
    axfr_records(view)
        .expect("an SOA")
        .iter()
        .map(|(owner, record)| {
            let name = crate::dns::wire::display_wire_name(owner);
            (name, u16::from_be_bytes([record[0], record[1]]))
        })
        .collect()
}

#[test]
fn the_projection_carries_each_names_static_answer_and_leaves_out_what_it_must() {
    let zones = vec![example_zone(ZONE)];
    let p = policies(40);
    let records = project(Some(&p), &zones, &unsigned);
    assert_eq!(records.len(), 1);
    // The wildcard (A + AAAA), w and txt (the A of the heavier endpoint, beside txt's static
    // TXT); hidden says `transfer = "omit"`.
    assert_eq!((records[0].projected, records[0].omitted), (3, 1));
    let projections = number(records, &[7], &Remembered::new());
    let zone = projections.zone(&zones[0].apex).expect("projected");
    assert_eq!(zone.revision, 1, "first seen with records");
    assert_eq!(zone.transfer_serial(), 8);
    let view = TransferView {
        zone: &zones[0],
        projected: &zone.records,
    };
    let got = owners_and_types(view);
    for wanted in [
        ("*.edge.example.com.", rtype::A),
        ("*.edge.example.com.", rtype::AAAA),
        ("w.example.com.", rtype::A),
        ("txt.example.com.", rtype::A),
    ] {
        assert!(
            got.contains(&(wanted.0.to_string(), wanted.1)),
            "{wanted:?} in {got:?}"
        );
    }
    assert!(!got.iter().any(|(o, _)| o.starts_with("hidden")), "{got:?}");
    // w's static A (the base the policy takes over) gives way to its projected A.
    let w_a = got
        .iter()
        .filter(|e| **e == ("w.example.com.".to_string(), rtype::A));
    assert_eq!(w_a.count(), 1, "{got:?}");
    let ttl = |owner: &str| {
        zone.records
            .iter()
            .find(|(o, _)| crate::dns::wire::display_wire_name(o) == owner)
            .map(|(_, r)| u32::from_be_bytes([r[4], r[5], r[6], r[7]]))
    };
    assert_eq!(ttl("w.example.com."), Some(60));
    assert_eq!(ttl("*.edge.example.com."), Some(300));
    assert_eq!(ttl("txt.example.com."), Some(120));
}

#[test]
fn a_weight_change_moves_the_revision_and_the_soa_serial_and_a_cname_never_sits_beside_data() {
    let mut zones = vec![example_zone(ZONE)];
    let first = number(
        project(Some(&policies(40)), &zones, &unsigned),
        &[7],
        &Remembered::new(),
    );
    apply_serials(&mut zones, &first);
    assert_eq!(zones[0].serial, 8);
    let soa = zones[0].soa().and_then(|s| s.rdatas().next()).expect("SOA");
    assert_eq!(&soa[soa.len() - 20..soa.len() - 16], &8u32.to_be_bytes());

    // Same projection: same revision, same serial.
    let again = number(
        project(Some(&policies(40)), &zones, &unsigned),
        &[7],
        &first.remembered(),
    );
    assert_eq!(again, first);

    // b (a CNAME) heavier: w moves to the CNAME, txt (static TXT beside it) is left out.
    let moved = number(
        project(Some(&policies(90)), &zones, &unsigned),
        &[7],
        &first.remembered(),
    );
    let zone = &moved.zones()[0];
    assert_eq!((zone.revision, zone.transfer_serial()), (2, 9));
    assert_eq!((zone.projected, zone.omitted), (2, 2));
    let cname = zone
        .records
        .iter()
        .find(|(_, r)| u16::from_be_bytes([r[0], r[1]]) == rtype::CNAME)
        .map(|(o, _)| crate::dns::wire::display_wire_name(o));
    assert_eq!(cname.as_deref(), Some("w.example.com."));
    let view = TransferView {
        zone: &zones[0],
        projected: &zone.records,
    };
    let at_w: Vec<u16> = owners_and_types(view)
        .into_iter()
        .filter(|(o, _)| o == "w.example.com.")
        .map(|(_, t)| t)
        .collect();
    assert_eq!(at_w, [rtype::CNAME], "the CNAME stands alone");

    // A new zone file serial keeps the revision: the sum still moves forward.
    let file_bump = number(
        project(Some(&policies(90)), &zones, &unsigned),
        &[10],
        &moved.remembered(),
    );
    assert_eq!(file_bump.zones()[0].transfer_serial(), 12);
    // A signed zone projects the same records; its signing stamp is part of what is
    // numbered: signed again (another window), it is a new revision, the serial moves on.
    let stamp = |s: u8| move |_: &Name| Some(Box::from(&[s; 8][..]));
    let signed = number(
        project(Some(&policies(90)), &zones, &stamp(1)),
        &[10],
        &moved.remembered(),
    );
    assert_eq!(signed.zones()[0].records, file_bump.zones()[0].records);
    assert_eq!(signed.zones()[0].transfer_serial(), 13);
    let same = number(
        project(Some(&policies(90)), &zones, &stamp(1)),
        &[10],
        &signed.remembered(),
    );
    assert_eq!(
        same.zones()[0].transfer_serial(),
        13,
        "same signatures, same serial"
    );
    let resigned = number(
        project(Some(&policies(90)), &zones, &stamp(2)),
        &[10],
        &same.remembered(),
    );
    assert_eq!(
        resigned.zones()[0].transfer_serial(),
        14,
        "re-signed: the serial moves"
    );
}

#[test]
fn no_steered_names_keep_the_file_serial_and_the_state_file_round_trips() {
    let zones = vec![example_zone(ZONE)];
    let plain = number(project(None, &zones, &unsigned), &[7], &Remembered::new());
    assert_eq!(plain.zones()[0].transfer_serial(), 7);

    let projections = number(
        project(Some(&policies(40)), &zones, &unsigned),
        &[7],
        &Remembered::new(),
    );
    let dir = std::env::temp_dir().join(format!("steerdns-projection-{}", std::process::id()));
    write_state(&dir, &projections).expect("write state");
    assert_eq!(read_state(&dir), projections.remembered());
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(read_state(&dir), Remembered::new());
}
