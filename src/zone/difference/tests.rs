//! The difference path against a full build of the same file: the same nodes, or a reason.

use std::path::Path;

use super::*;
use crate::zone::model::example_zone;

const ORIGIN: &str = "example.com.";

fn origin() -> Name {
    Name::from_ascii(ORIGIN).expect("test origin")
}

/// A zone file of `hosts` names (`h<i> A 192.0.2.<i % 250>`) at `serial`, with an SOA in
/// parentheses and a comment at the top like a hand-written file.
fn text(serial: u32, hosts: usize) -> String {
    let mut text = format!(
        "$ORIGIN example.com.\n$TTL 300\n@ IN SOA ns1 hostmaster (\n  {serial} ; serial\n  \
         7200 900 1209600 60 )\n@ NS ns1\nns1 A 192.0.2.53\nmail MX 10 ns1\n"
    );
    for i in 0..hosts {
        text.push_str(&format!("h{i} A 192.0.2.{}\n", i % 250));
    }
    text.push_str("multi A 192.0.2.1\n      A 192.0.2.2\n");
    text
}

fn difference(old: &str, new: &str) -> Result<Applied, Fallback> {
    let served = example_zone(old);
    let windows = find_windows(old.as_bytes(), new.as_bytes(), ORIGIN)?;
    let path = Path::new("example.com.zone");
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for window in &windows {
        let ttl = window.ttl_line.as_ref();
        before.extend(parse_window(
            old.as_bytes(),
            &window.old,
            ttl,
            path,
            &origin(),
        )?);
        after.extend(parse_window(
            new.as_bytes(),
            &window.new,
            ttl,
            path,
            &origin(),
        )?);
    }
    apply(&served, &before, &after)
}

/// An RRset as compared: type, TTL, encoded records, targets.
type Set = (u16, u32, Box<[u8]>, Box<[Box<[u8]>]>);

/// What an edit must fall back for.
type Case = (&'static str, String, fn(&Fallback) -> bool);

/// Every node of `full` is in `applied` with the same records and flags, and no other.
fn assert_same_zone(applied: &Zone, full: &Zone) {
    assert_eq!(applied.nodes.len(), full.nodes.len(), "node count");
    assert_eq!(applied.serial, full.serial);
    assert_eq!(applied.negative_ttl, full.negative_ttl);
    for (name, node) in &full.nodes {
        let shown = crate::dns::wire::display_wire_name(name);
        let other = applied
            .nodes
            .get(name)
            .unwrap_or_else(|| panic!("{shown} missing"));
        assert_eq!(
            (node.is_cut, node.below_cut, node.has_wildcard_child),
            (other.is_cut, other.below_cut, other.has_wildcard_child),
            "{shown} flags"
        );
        let sets = |n: &Node| -> Vec<Set> {
            n.rrsets
                .iter()
                .map(|s| (s.rtype, s.ttl, s.encoded.clone(), s.targets.clone()))
                .collect()
        };
        assert_eq!(sets(node), sets(other), "{shown} records");
    }
}

#[test]
fn one_changed_address_builds_what_a_full_build_builds() {
    let old = text(1, 500);
    let new = text(2, 500).replace("h250 A 192.0.2.0\n", "h250 A 198.51.100.7\n");
    let applied = difference(&old, &new).expect("applied as a difference");
    assert_eq!(
        (applied.removed, applied.added, applied.names_changed),
        (2, 2, 2)
    );
    assert_same_zone(&applied.zone, &example_zone(&new));
    assert_eq!(
        applied.zone.nodes.overlay_len(),
        2,
        "only the changed names are new"
    );
    assert_eq!((applied.diff.from_serial, applied.diff.to_serial), (1, 2));
    assert_eq!(
        (applied.diff.deleted.len(), applied.diff.added.len()),
        (1, 1)
    );
}

#[test]
fn added_names_get_their_empty_non_terminals_and_owners_may_be_inherited() {
    let old = text(1, 50);
    let new = text(2, 50)
        .replace("h7 A 192.0.2.7\n", "h7 A 192.0.2.7\na.b.c A 192.0.2.99\n")
        .replace(
            "      A 192.0.2.2\n",
            "      A 192.0.2.3\n      TXT \"x\"\n",
        );
    let applied = difference(&old, &new).expect("applied as a difference");
    assert_same_zone(&applied.zone, &example_zone(&new));
}

#[test]
fn an_edit_of_the_soa_in_parentheses_is_a_difference_too() {
    let old = text(1, 20);
    let new = text(2, 20).replace("7200 900", "3600 900");
    let applied = difference(&old, &new).expect("applied as a difference");
    assert_same_zone(&applied.zone, &example_zone(&new));
}

#[test]
fn edits_a_difference_cannot_be_sure_of_are_built_whole() {
    let old = text(1, 50);
    let bumped = text(2, 50);
    let cases: [Case; 6] = [
        (
            "an $ORIGIN line",
            bumped.replace("h9 A", "$ORIGIN sub.example.com.\nh9 A"),
            |f| matches!(f, Fallback::Directive(d) if d == "$ORIGIN"),
        ),
        (
            "a CNAME beside an A",
            bumped.replace("h9 A 192.0.2.9\n", "h9 A 192.0.2.9\nh9 CNAME ns1\n"),
            |f| *f == Fallback::Invalid,
        ),
        (
            "a name removed",
            bumped.replace("h9 A 192.0.2.9\n", ""),
            |f| matches!(f, Fallback::NameRemoved(_)),
        ),
        (
            "a delegation added",
            bumped.replace("h9 A 192.0.2.9\n", "h9 A 192.0.2.9\nh9 NS ns1\n"),
            |f| matches!(f, Fallback::Structural(..)),
        ),
        (
            "the serial not moved",
            old.replace("h9 A 192.0.2.9\n", "h9 A 192.0.2.10\n"),
            |f| *f == Fallback::SerialNotForward,
        ),
        (
            "an out-of-zone record",
            bumped.replace(
                "h9 A 192.0.2.9\n",
                "h9 A 192.0.2.9\nh9.example.org. A 192.0.2.1\n",
            ),
            |f| *f == Fallback::Invalid,
        ),
    ];
    for (what, new, expected) in cases {
        match difference(&old, &new) {
            Ok(_) => panic!("{what}: applied as a difference"),
            Err(why) => assert!(expected(&why), "{what}: {why}"),
        }
    }
}

#[test]
fn a_changed_set_must_lie_whole_in_the_changed_lines_other_sets_may_not() {
    // h3's TXT lies far from its A: the A set is rebuilt, the TXT kept as served.
    let old = format!("{}h3 TXT \"far away\"\n", text(1, 50));
    let new = old
        .replace(" 1 ; serial", " 2 ; serial")
        .replace("h3 A 192.0.2.3\n", "h3 A 192.0.2.33\n");
    let applied = difference(&old, &new).expect("applied as a difference");
    assert_same_zone(&applied.zone, &example_zone(&new));
    // A second A record of h3 far away: the A set is not whole in the changed lines.
    let old = format!("{}h3 A 192.0.2.200\n", text(1, 50));
    let new = old
        .replace(" 1 ; serial", " 2 ; serial")
        .replace("h3 A 192.0.2.3\n", "h3 A 192.0.2.33\n");
    assert!(matches!(
        difference(&old, &new),
        Err(Fallback::OwnerOutsideWindow(name)) if name.starts_with("h3.")
    ));
}

#[test]
fn the_window_is_whole_records() {
    let old = text(1, 10);
    let new = old.replace("h5 A 192.0.2.5\n", "h5 A 192.0.2.50\n");
    let windows = find_windows(old.as_bytes(), new.as_bytes(), ORIGIN).expect("windows");
    assert_eq!(windows.len(), 1);
    let window = &windows[0];
    assert_eq!(&new[window.new.clone()], "h5 A 192.0.2.50\n");
    assert_eq!(&old[window.old.clone()], "h5 A 192.0.2.5\n");
    assert_eq!(window.ttl_line.clone().map(|r| &new[r]), Some("$TTL 300"));
    assert_eq!(
        find_windows(old.as_bytes(), old.as_bytes(), ORIGIN),
        Ok(Vec::new())
    );
    // The serial at the top and a record further down: two windows, the SOA's whole.
    let both = text(2, 10).replace("h5 A 192.0.2.5\n", "h5 A 192.0.2.50\n");
    let windows = find_windows(old.as_bytes(), both.as_bytes(), ORIGIN).expect("windows");
    let texts: Vec<&str> = windows.iter().map(|w| &both[w.new.clone()]).collect();
    assert_eq!(
        texts,
        [
            "@ IN SOA ns1 hostmaster (\n  2 ; serial\n  7200 900 1209600 60 )\n",
            "h5 A 192.0.2.50\n"
        ]
    );
}
