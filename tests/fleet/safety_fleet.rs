//! Safety rules in fleet mode, with a real etcd and real nodes: a third drain written through
//! etcd is refused by the bundled `max-two-drained` (naming it, writing nothing to etcd), and
//! `--override max-two-drained --reason TEXT` lets it through to every node, recorded in the
//! fleet's history with who and why.

use crate::control_common;
use crate::fleet_common;

use std::time::Duration;

use control_common::*;
use fleet_common::*;

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn a_third_drain_through_etcd_is_refused_until_overridden_and_the_fleet_history_records_it() {
    let fleet = Fleet::start("safety", 2, 10);
    fleet.wait_connected(LIMIT);
    for region in ["eu-west", "na-west"] {
        ok(&fleet.nodes[0].cli(&["drain", region]), "drain");
    }
    let (revision, before) = fleet.control_in_etcd();

    let output = fleet.nodes[1].cli(&["drain", "ap-east"]);
    let said = format!("{}{}", stdout(&output), stderr(&output));
    println!("{said}");
    assert!(!output.status.success(), "{said}");
    assert!(said.contains("max-two-drained"), "{said}");
    assert!(
        said.contains("no more than two regions drained at once"),
        "{said}"
    );
    assert!(said.contains("regions.ap-east.drain"), "{said}");
    assert_eq!(
        fleet.control_in_etcd(),
        (revision, before),
        "etcd unchanged"
    );

    let output = fleet.nodes[1].cli(&[
        "drain",
        "ap-east",
        "--override",
        "max-two-drained",
        "--reason",
        "ap-east power work",
    ]);
    let text = ok(&output, "overridden drain");
    assert!(text.contains("all 2 live nodes serve serial"), "{text}");
    let (revision, control) = fleet.control_in_etcd();
    assert!(control.contains("[[overrides]]"), "{control}");
    fleet.wait_revision(revision, LIMIT);
    for node in &fleet.nodes {
        let drained = node.status()["regions"]["ap-east"]
            .as_str()
            .unwrap_or("")
            .starts_with("drained");
        assert!(drained, "{} serves ap-east drained", node.name);
    }
    let history = ok(&fleet.nodes[0].cli(&["control", "history"]), "history");
    println!("{history}");
    let line = history
        .lines()
        .find(|l| l.contains("OVERRIDE max-two-drained"))
        .unwrap_or_else(|| panic!("no override in the history:\n{history}"));
    assert!(
        line.contains("ap-east power work") && line.contains(" by "),
        "{line}"
    );

    // The next change records no override (it needs none: undraining repairs the breach).
    ok(&fleet.nodes[0].cli(&["undrain", "ap-east"]), "undrain");
    let (_, control) = fleet.control_in_etcd();
    assert!(!control.contains("[[overrides]]"), "{control}");
}
