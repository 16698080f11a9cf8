//! Differences between zones built from records, and the bounded history over serials.

use hickory_proto::rr::Name;

use super::*;
use crate::zone::model::{RecordInput, Zone};

fn name(text: &str) -> Name {
    Name::from_ascii(text).expect("test name")
}

fn soa_rdata(serial: u32) -> Vec<u8> {
    // mname and rname at the root, then serial, refresh, retry, expire, minimum.
    let mut rdata = vec![0u8, 0];
    for field in [serial, 3600, 600, 86400, 300] {
        rdata.extend_from_slice(&field.to_be_bytes());
    }
    rdata
}

/// A zone `example.` with this serial and one A record per (owner, last octet).
fn zone(serial: u32, hosts: &[(&str, u8)]) -> Zone {
    let origin = name("example.");
    let owners: Vec<Name> = hosts.iter().map(|(h, _)| name(h)).collect();
    let soa = soa_rdata(serial);
    let addresses: Vec<[u8; 4]> = hosts.iter().map(|&(_, o)| [192, 0, 2, o]).collect();
    let mut records = vec![RecordInput {
        name: &origin,
        rtype: rtype::SOA,
        ttl: 300,
        rdata: &soa,
    }];
    for (owner, address) in owners.iter().zip(&addresses) {
        records.push(RecordInput {
            name: owner,
            rtype: rtype::A,
            ttl: 300,
            rdata: address,
        });
    }
    Zone::build(&origin, records).expect("test zone")
}

fn a_record_owners(records: &[Record]) -> Vec<(String, u8)> {
    records
        .iter()
        .map(|(owner, record)| {
            let label = &owner[1..1 + usize::from(owner[0])];
            (
                String::from_utf8_lossy(label).into_owned(),
                record[record.len() - 1],
            )
        })
        .collect()
}

#[test]
fn serial_arithmetic_wraps_per_rfc_1982() {
    assert!(serial_newer(2, 1));
    assert!(!serial_newer(1, 2));
    assert!(!serial_newer(7, 7));
    assert!(serial_newer(0, u32::MAX));
    assert!(serial_newer(5, u32::MAX - 5));
    assert!(!serial_newer(u32::MAX, 0));
    // Exactly half the space apart: undefined, newer neither way.
    assert!(!serial_newer(1 << 31, 0));
    assert!(!serial_newer(0, 1 << 31));
}

#[test]
fn diff_has_the_deleted_and_added_records_and_both_soas() {
    let old = zone(1, &[("www.example.", 1), ("mail.example.", 2)]);
    let new = zone(
        2,
        &[
            ("www.example.", 9),
            ("mail.example.", 2),
            ("api.example.", 3),
        ],
    );
    let diff = Diff::between(&old, &new);
    assert_eq!((diff.from_serial, diff.to_serial), (1, 2));
    assert_eq!(a_record_owners(&diff.deleted), [("www".to_string(), 1)]);
    let mut added = a_record_owners(&diff.added);
    added.sort();
    assert_eq!(added, [("api".to_string(), 3), ("www".to_string(), 9)]);
    let serial_of = |soa: &Option<Record>| {
        let record = &soa.as_ref().expect("soa").1;
        u32::from_be_bytes(record[12..16].try_into().expect("4 bytes"))
    };
    assert_eq!((serial_of(&diff.old_soa), serial_of(&diff.new_soa)), (1, 2));
    assert_eq!(diff.size(), 3);
}

#[test]
fn history_answers_from_any_kept_serial_and_forgets_beyond_its_depth() {
    let versions: Vec<Zone> = (1..=5)
        .map(|s| zone(s, &[("www.example.", s as u8)]))
        .collect();
    let mut history = History::default();
    for pair in versions.windows(2) {
        history = history.with(Diff::between(&pair[0], &pair[1]), 3);
    }
    assert_eq!(history.depth(), 3);
    assert_eq!(history.oldest_serial(), Some(2));
    let serials = |diffs: Vec<&Diff>| diffs.iter().map(|d| d.to_serial).collect::<Vec<_>>();
    assert_eq!(history.since(2).map(serials), Some(vec![3, 4, 5]));
    assert_eq!(history.since(4).map(serials), Some(vec![5]));
    assert_eq!(history.since(5).map(serials), Some(vec![]));
    assert_eq!(history.since(1), None, "forgotten: AXFR-style answer");
    assert_eq!(history.since(99), None);
}

#[test]
fn a_serial_that_goes_back_or_jumps_starts_the_history_over() {
    let (z1, z2, z3) = (zone(1, &[]), zone(2, &[]), zone(3, &[]));
    let history = History::default().with(Diff::between(&z1, &z2), 10);
    let back = history.with(Diff::between(&z2, &z1), 10);
    assert_eq!(back.depth(), 0);
    let gap = history.with(Diff::between(&z1, &z3), 10);
    assert_eq!(gap.since(1).map(|d| d.len()), Some(1));
    assert_eq!(gap.since(2), None);
}

#[test]
fn journal_records_a_reload_only_when_the_serial_changed() {
    let journal = Journal::new(DEFAULT_DEPTH);
    let (old, same, new) = (zone(1, &[]), zone(1, &[("www.example.", 1)]), zone(2, &[]));
    let unchanged = journal.after_reload(&old, &same);
    assert_eq!(unchanged.zone(&old.apex), None);
    let changed = journal.after_reload(&old, &new);
    assert_eq!(changed.zone(&new.apex).map(History::depth), Some(1));
    assert_eq!(
        journal.zone(&new.apex),
        None,
        "the old value is left as it was"
    );
}

#[test]
fn a_forgotten_zone_has_no_history() {
    let v1 = zone(1, &[("www.example.", 1)]);
    let v2 = zone(2, &[("www.example.", 2)]);
    let journal = Journal::new(5).after_reload(&v1, &v2);
    assert!(journal.zone(&v2.apex).is_some());
    assert_eq!(journal.forget(&v2.apex).zone(&v2.apex), None);
}
