//! Signed zones with steered names in outgoing transfers (issue 33 item 3): the projection
//! goes out signed (RRSIGs, the NSEC/NSEC3 records of the steered names re-typed to what the
//! transfer carries), `ldns-verify-zone` accepts what `dig AXFR` returns, and Knot, validating
//! every zone it receives (`dnssec-validation: on`), serves it; the live answers stay the
//! policies'. And a re-sign (short signature validity) moves the SOA serial forward and the
//! NOTIFY brings the new signatures to Knot. A missing tool fails the test.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use crate::control_common::{self, common::free_port, common::kdig, common::wait_for};
use crate::xfr_out::{
    dig_axfr_of, knot_secondary_with, projection_setup, serial_of, short, tool, EXAMPLE_SERIAL,
};

const ZONES: [&str; 2] = ["example.com", "edge.example.net"];

/// Knot validates what it receives: a zone whose signatures or chain do not verify is not
/// loaded (and the test waiting on its serial fails).
const VALIDATING: &str = "    dnssec-validation: on\n";

/// The projection example (NOTIFY to `notify`) with example.com signed with NSEC and
/// edge.example.net with NSEC3, `extra` in `[dnssec]`, fresh keys.
fn signed_projection_setup(label: &str, notify: u16, extra: &str) -> control_common::Setup {
    let setup = projection_setup(label, notify);
    // The omitted name keeps zone-file data of its own: transferred as written, signed.
    let zone = setup.path("zones/example.com.zone");
    let mut text = std::fs::read_to_string(&zone).expect("zone file");
    text.push_str("gw IN TXT \"application gateways\"\ngw IN A 192.0.2.99\n");
    std::fs::write(&zone, text).expect("zone file");
    setup.extend_config(&format!(
        "[dnssec]\nkeys = \"keys\"\nzones = [\"example.com.\", \"edge.example.net.\"]\n{extra}\
         [dnssec.zone.\"edge.example.net.\"]\ndenial = \"nsec3\"\n"
    ));
    for zone in ZONES {
        let output = Command::new(env!("CARGO_BIN_EXE_steerdns"))
            .args(["dnssec", "keygen", &format!("{zone}.")])
            .arg("--config")
            .arg(&setup.config)
            .env("STEERDNS_LOG", "warn")
            .output()
            .expect("run steerdns dnssec keygen");
        assert!(output.status.success(), "{output:?}");
    }
    setup
}

/// `dig AXFR` of `zone`, checked by `ldns-verify-zone`; the records.
fn verified_axfr(setup: &control_common::Setup, server: SocketAddr, zone: &str) -> String {
    let verify = tool("/usr/bin/ldns-verify-zone", "ldnsutils");
    let (ok, text) = dig_axfr_of(server, zone);
    assert!(ok && !text.contains("failed"), "{text}");
    let records: String = text
        .lines()
        .filter(|l| !l.starts_with(';') && !l.contains("\tTSIG\t") && !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    let file = setup.path(&format!("{zone}.axfr"));
    std::fs::write(&file, &records).expect("write axfr");
    let output = Command::new(verify)
        .arg(&file)
        .output()
        .expect("run ldns-verify-zone");
    assert!(output.status.success(), "{output:?}\n{records}");
    records
}

/// Whether `records` (dig's presentation) hold one at `owner` of `rtype` whose data starts
/// with `data`.
fn has(records: &str, owner: &str, rtype: &str, data: &str) -> bool {
    records.lines().any(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        fields.len() > 4
            && fields[0].eq_ignore_ascii_case(owner)
            && fields[3] == rtype
            && fields[4..].join(" ").starts_with(data)
    })
}

fn wait_knot(knot: SocketAddr, serial: u32) {
    wait_for(
        &format!("Knot (validating) at serial {serial}"),
        Duration::from_secs(20),
        || {
            ZONES
                .iter()
                .all(|z| serial_of(knot, z) == Some(serial))
                .then_some(())
        },
    );
}

#[test]
fn a_signed_zone_transfers_its_projection_signed_and_a_validating_knot_serves_it() {
    let knot_port = free_port();
    let setup = signed_projection_setup("xfrsigned-projection", knot_port, "");
    let primary = setup.start();
    let first = EXAMPLE_SERIAL + 1;
    assert_eq!(serial_of(primary.dns, "example.com"), Some(first));

    // The projected CNAMEs (NSEC zone) and the wildcard's addresses (NSEC3 zone), signed; the
    // omitted name carries no address; the re-typed denial records verify.
    let example = verified_axfr(&setup, primary.dns, "example.com");
    assert!(
        has(
            &example,
            "critical.example.com.",
            "CNAME",
            "critical.edge.example.net."
        ),
        "{example}"
    );
    assert!(
        has(&example, "critical.example.com.", "RRSIG", "CNAME "),
        "{example}"
    );
    assert!(
        has(&example, "critical.example.com.", "NSEC", "")
            && !has(
                &example,
                "critical.example.com.",
                "NSEC",
                "gw.example.com. A "
            ),
        "{example}"
    );
    // The omitted name: its zone-file records as written, signed, and its NSEC listing them.
    assert!(
        has(&example, "gw.example.com.", "A", "192.0.2.99")
            && has(&example, "gw.example.com.", "RRSIG", "A ")
            && has(
                &example,
                "gw.example.com.",
                "TXT",
                "\"application gateways\""
            )
            && has(&example, "gw.example.com.", "RRSIG", "TXT "),
        "{example}"
    );
    let gw_types: Vec<String> = example
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 5 && f[0] == "gw.example.com." && f[3] == "NSEC")
        .map(|f| f[5..].iter().map(|t| t.to_string()).collect())
        .unwrap_or_default();
    assert_eq!(gw_types, ["A", "TXT", "RRSIG", "NSEC"], "{example}");
    let edge = verified_axfr(&setup, primary.dns, "edge.example.net");
    assert!(
        has(&edge, "*.edge.example.net.", "A", "192.0.2.1"),
        "{edge}"
    );
    assert!(
        has(&edge, "*.edge.example.net.", "RRSIG", "AAAA "),
        "{edge}"
    );

    // The serving path is the policies': gw is answered live, signed as before.
    assert_eq!(short(primary.dns, "A", "gw.example.com"), "203.0.113.20");
    let (_, live) = kdig(primary.dns, &["+dnssec", "A", "gw.example.com"]);
    assert!(live.contains("RRSIG"), "{live}");

    // Knot validates each zone it receives, and serves the projection with its signatures.
    let knot = SocketAddr::from((Ipv4Addr::LOCALHOST, knot_port));
    let _secondary = knot_secondary_with(knot_port, primary.dns, &ZONES, VALIDATING);
    wait_knot(knot, first);
    let (_, answer) = kdig(knot, &["+dnssec", "CNAME", "critical.example.com"]);
    assert!(
        answer.contains("critical.edge.example.net.") && answer.contains("RRSIG"),
        "{answer}"
    );
    assert_eq!(short(knot, "A", "anything.edge.example.net"), "192.0.2.1");

    // Break glass: the projection changes, signed again; Knot validates the IXFR.
    let output = primary.cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]);
    control_common::ok(&output, "weight set");
    let second = first + 1;
    wait_for("Knot at the new serial", Duration::from_secs(20), || {
        (serial_of(knot, "example.com") == Some(second)).then_some(())
    });
    assert_eq!(
        short(knot, "CNAME", "critical.example.com"),
        "critical.cdn.example.org."
    );
    verified_axfr(&setup, primary.dns, "example.com");
}

/// The expiration (YYYYMMDDHHmmSS) of the RRSIG over `rtype` at `name`, as `server` has it.
fn expiration(server: SocketAddr, name: &str, rtype: &str) -> Option<String> {
    let (_, text) = kdig(server, &["+short", "RRSIG", name]);
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&rtype))
        .and_then(|f| f.get(4).map(|s| s.to_string()))
}

/// Is `a` after `b` in RFC 1982 serial order?
fn serial_after(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

#[test]
fn a_re_sign_raises_the_serial_and_a_validating_knot_picks_the_new_signatures_up() {
    let knot_port = free_port();
    let setup = signed_projection_setup(
        "xfrsigned-resign",
        knot_port,
        "refresh_secs = 3\nsignature_validity_secs = 30\n",
    );
    let primary = setup.start();
    let knot = SocketAddr::from((Ipv4Addr::LOCALHOST, knot_port));
    let _secondary = knot_secondary_with(knot_port, primary.dns, &ZONES, VALIDATING);
    let before = wait_for("Knot holding example.com", Duration::from_secs(20), || {
        let serial = serial_of(knot, "example.com")?;
        let static_sig = expiration(knot, "www.example.com", "CNAME")?;
        let projected_sig = expiration(knot, "critical.example.com", "CNAME")?;
        Some((serial, static_sig, projected_sig))
    });

    // The next refresh period signs again: the serial moves forward, the NOTIFY goes out,
    // and Knot (refresh timer two hours) holds the new signatures, validated.
    wait_for(
        "Knot holding the new signatures",
        Duration::from_secs(30),
        || {
            let serial = serial_of(knot, "example.com")?;
            let static_sig = expiration(knot, "www.example.com", "CNAME")?;
            let projected_sig = expiration(knot, "critical.example.com", "CNAME")?;
            (serial_after(serial, before.0) && static_sig > before.1 && projected_sig > before.2)
                .then_some(())
        },
    );
    let primary_serial = serial_of(primary.dns, "example.com").expect("primary SOA");
    assert!(serial_after(primary_serial, before.0), "{primary_serial}");
    let metrics = control_common::http(primary.admin, "GET", "/metrics", None).1;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("steerdns_notify_total") && l.contains("result=\"acked\"")),
        "{metrics}"
    );
    verified_axfr(&setup, primary.dns, "example.com");
    verified_axfr(&setup, primary.dns, "edge.example.net");
}
