//! Break-glass over real sockets with the real binary: `steerdns weight set` flips every answer
//! of a weighted profile within a second, `control rollback` flips it back, the history and
//! diff show what happened, drains move a region's clients off global anycast, a direct edit of
//! the control file is picked up by the watcher just as fast, and a change that does not
//! validate is refused without touching the file.

use crate::control_common;

use std::process::Command;
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;

use control_common::*;

/// Distinct client subnets asked after every change.
const SUBNETS: usize = 200;
/// The promise: every answer follows within a second.
const CONVERGENCE: Duration = Duration::from_secs(1);

/// The serial named by "... serves serial N ..." in a command's output.
fn served_serial(output: &str) -> u64 {
    let rest = output
        .split("serves serial ")
        .nth(1)
        .unwrap_or_else(|| panic!("no 'serves serial' in output:\n{output}"));
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no serial number in output:\n{output}"))
}

/// The versions listed by `control history`: (serial, whole line).
fn history_lines(output: &str) -> Vec<(u64, String)> {
    output
        .lines()
        .filter_map(|line| {
            let serial = line.split_whitespace().next()?.parse().ok()?;
            Some((serial, line.to_string()))
        })
        .collect()
}

#[test]
fn weight_set_flips_every_answer_within_a_second_and_rollback_restores_them() {
    let setup = Setup::new("breakglass");
    let server = setup.start();
    let subnets = distinct_subnets(SUBNETS);
    let mut resolver = Resolver::new(server.dns);

    assert_all_critical(&mut resolver, &subnets, FRONTDOOR);
    let first_serial = server.serial();
    assert!(
        server
            .chaos_serial()
            .starts_with(&format!("serial {first_serial} config ")),
        "CH TXT serial.steerdns: {}",
        server.chaos_serial()
    );

    // Break glass.
    let started = Instant::now();
    let output = server.cli(&["weight", "set", "critical", "frontdoor=0", "alt-cdn=100"]);
    let returned = Instant::now();
    let text = ok(&output, "weight set");
    let flipped_serial = served_serial(&text);
    assert_ne!(flipped_serial, first_serial, "output:\n{text}");
    assert_eq!(server.serial(), flipped_serial);
    let after_exit = wait_all_target(&mut resolver, &subnets, ALT_CDN, returned, CONVERGENCE);
    println!(
        "break-glass: command took {:?}; all {SUBNETS} subnets on alt-cdn {after_exit:?} after it returned",
        returned - started
    );
    assert!(after_exit < CONVERGENCE);
    let chaos = server.chaos_serial();
    assert!(
        chaos.starts_with(&format!("serial {flipped_serial} config ")),
        "CH TXT serial.steerdns after weight set: {chaos}"
    );

    // What is served, as the operator sees it.
    let show = ok(&server.cli(&["weight", "show", "critical"]), "weight show");
    assert!(
        show.contains(&format!("serving serial {flipped_serial}")),
        "weight show:\n{show}"
    );
    let critical_line = show
        .lines()
        .find(|l| l.starts_with("critical:"))
        .unwrap_or_else(|| panic!("no critical line in weight show:\n{show}"));
    for expected in ["frontdoor=0", "alt-cdn=100", "appgw=0"] {
        assert!(
            critical_line.split_whitespace().any(|w| w == expected),
            "weight show should list {expected}: {critical_line}"
        );
    }
    assert!(
        !show.lines().any(|l| l.starts_with("warm:")),
        "weight show critical lists only critical:\n{show}"
    );

    // Roll back to the version before.
    let output = server.cli(&["control", "rollback"]);
    let returned = Instant::now();
    let text = ok(&output, "control rollback");
    let rolled_back_serial = served_serial(&text);
    assert!(
        rolled_back_serial > flipped_serial,
        "a rollback is a new version: {text}"
    );
    let after_exit = wait_all_target(&mut resolver, &subnets, FRONTDOOR, returned, CONVERGENCE);
    println!("rollback: all {SUBNETS} subnets on frontdoor {after_exit:?} after it returned");
    let chaos = server.chaos_serial();
    assert!(
        chaos.starts_with(&format!("serial {rolled_back_serial} config ")),
        "CH TXT serial.steerdns after rollback: {chaos}"
    );

    // History: startup, break-glass, rollback, each with what changed.
    let history = ok(&server.cli(&["control", "history"]), "control history");
    let versions = history_lines(&history);
    assert!(versions.len() >= 3, "control history:\n{history}");
    let line_of = |serial: u64| -> &str {
        versions
            .iter()
            .find(|(s, _)| *s == serial)
            .map(|(_, l)| l.as_str())
            .unwrap_or_else(|| panic!("version {serial} not listed:\n{history}"))
    };
    assert!(line_of(first_serial).contains("startup"), "{history}");
    let flip = line_of(flipped_serial);
    assert!(
        flip.contains("critical.frontdoor weight 100->0")
            && flip.contains("critical.alt-cdn weight 0->100"),
        "summary of the break-glass version: {flip}"
    );
    let back = line_of(rolled_back_serial);
    assert!(
        back.contains("critical.frontdoor weight 0->100")
            && back.contains("critical.alt-cdn weight 100->0"),
        "summary of the rollback version: {back}"
    );

    // Diff of the break-glass change.
    let diff = ok(
        &server.cli(&[
            "control",
            "diff",
            &first_serial.to_string(),
            &flipped_serial.to_string(),
        ]),
        "control diff",
    );
    assert!(
        diff.contains("critical.frontdoor weight 100->0"),
        "control diff:\n{diff}"
    );
    let removed: Vec<&str> = diff.lines().filter(|l| l.starts_with("- ")).collect();
    let added: Vec<&str> = diff.lines().filter(|l| l.starts_with("+ ")).collect();
    assert!(
        removed
            .iter()
            .any(|l| l.contains("frontdoor") && l.contains("100")),
        "diff should remove the old frontdoor weight:\n{diff}"
    );
    assert!(
        added
            .iter()
            .any(|l| l.contains("frontdoor") && l.contains("weight = 0")),
        "diff should add the new frontdoor weight:\n{diff}"
    );
    assert!(
        added
            .iter()
            .any(|l| l.contains("alt-cdn") && l.contains("100")),
        "diff should add the new alt-cdn weight:\n{diff}"
    );

    // A rollback to a named version works too, and the history refuses unknown ones.
    let output = server.cli(&["control", "rollback", &flipped_serial.to_string()]);
    let returned = Instant::now();
    ok(&output, "control rollback N");
    wait_all_target(&mut resolver, &subnets, ALT_CDN, returned, CONVERGENCE);
    let before = setup.control_bytes();
    let output = server.cli(&["control", "rollback", "999999"]);
    assert!(!output.status.success(), "rollback to a version never seen");
    assert_eq!(setup.control_bytes(), before, "a failed rollback wrote");
}

#[test]
fn drain_moves_a_regions_clients_off_global_anycast_and_undrain_restores_them() {
    let setup = Setup::new("drain");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let contoso = |resolver: &mut Resolver, subnet: &str| {
        a_records(&resolver.ask(&ecs_query(
            "contoso.edge.example.net.",
            RecordType::A,
            subnet,
        )))
    };
    // A subnet outside Europe (the example database has no entry for it: default region).
    let elsewhere = "1.2.3.0/24";
    assert_eq!(contoso(&mut resolver, EU_WEST_SUBNET), vec![GLOBAL_V4]);
    assert_eq!(contoso(&mut resolver, elsewhere), vec![GLOBAL_V4]);
    let serial_before = server.serial();

    let output = server.cli(&["drain", "eu-west"]);
    let returned = Instant::now();
    let text = ok(&output, "drain eu-west");
    assert!(text.contains("eu-west drained"), "drain output:\n{text}");
    let drained_serial = served_serial(&text);
    assert_ne!(drained_serial, serial_before);
    let drained = loop {
        let answer = contoso(&mut resolver, EU_WEST_SUBNET);
        if answer != vec![GLOBAL_V4] {
            break answer;
        }
        assert!(
            returned.elapsed() < CONVERGENCE,
            "eu-west clients still get global anycast after the drain"
        );
    };
    assert_eq!(drained.len(), 1, "one address: {drained:?}");
    let octets = drained[0].octets();
    let regional_or_fallback = matches!(octets, [198, 51, 100, _] | [203, 0, 113, _]);
    assert!(
        regional_or_fallback && drained[0].octets() != [198, 51, 100, 4],
        "a drained eu-west client gets another region's or a fallback site's anycast, not {:?}",
        drained[0]
    );
    assert_eq!(
        contoso(&mut resolver, elsewhere),
        vec![GLOBAL_V4],
        "other regions are not drained"
    );
    let status = server.status();
    let state = status["regions"]["eu-west"].as_str().unwrap_or("");
    assert!(state.starts_with("drained"), "status regions: {status:#}");
    assert!(server
        .chaos_serial()
        .starts_with(&format!("serial {drained_serial} ")));

    let output = server.cli(&["undrain", "eu-west"]);
    let returned = Instant::now();
    let text = ok(&output, "undrain eu-west");
    let undrained_serial = served_serial(&text);
    assert_ne!(undrained_serial, drained_serial);
    while contoso(&mut resolver, EU_WEST_SUBNET) != vec![GLOBAL_V4] {
        assert!(
            returned.elapsed() < CONVERGENCE,
            "eu-west clients do not get global anycast back after undrain"
        );
    }
    let status = server.status();
    assert!(
        status["regions"].get("eu-west").is_none(),
        "eu-west should have no override left: {status:#}"
    );
    assert!(server
        .chaos_serial()
        .starts_with(&format!("serial {undrained_serial} ")));
}

#[test]
fn a_direct_edit_of_the_control_file_takes_effect_within_a_second() {
    let setup = Setup::new("direct-edit");
    let server = setup.start();
    let subnets = distinct_subnets(SUBNETS);
    let mut resolver = Resolver::new(server.dns);
    assert_all_critical(&mut resolver, &subnets, FRONTDOOR);
    let serial_before = server.serial();

    let written = Instant::now();
    setup.write_control_atomically(&critical_control(0, 100, 0));
    let took = wait_all_target(&mut resolver, &subnets, ALT_CDN, written, CONVERGENCE);
    println!("direct edit: all {SUBNETS} subnets on alt-cdn {took:?} after the write");
    let flipped = server.serial();
    assert_ne!(flipped, serial_before);
    assert!(server
        .chaos_serial()
        .starts_with(&format!("serial {flipped} ")));
    assert_eq!(server.status()["loaded_by"], "control file change");

    let written = Instant::now();
    setup.write_control_atomically(&critical_control(100, 0, 0));
    let took = wait_all_target(&mut resolver, &subnets, FRONTDOOR, written, CONVERGENCE);
    println!("direct edit back: all {SUBNETS} subnets on frontdoor {took:?} after the write");
    let back = server.serial();
    assert!(back > flipped, "serials grow: {flipped} then {back}");

    let history = ok(&server.cli(&["control", "history"]), "control history");
    let edits = history_lines(&history)
        .into_iter()
        .filter(|(_, line)| line.contains("control file change"))
        .count();
    assert_eq!(edits, 2, "both edits recorded:\n{history}");
}

#[test]
fn a_refused_weight_set_names_the_file_and_field_and_writes_nothing() {
    let setup = Setup::new("refused-set");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let subnets = distinct_subnets(20);
    let before = setup.control_bytes();
    let serial = server.serial();
    let accepted = server.accepted();

    let output = server.cli(&[
        "weight",
        "set",
        "critical",
        "frontdoor=0",
        "alt-cdn=0",
        "appgw=0",
    ]);
    assert!(
        !output.status.success(),
        "an all-zero profile must be refused"
    );
    let said = format!("{}{}", stdout(&output), stderr(&output));
    assert!(said.contains("control.toml"), "names the file:\n{said}");
    assert!(
        said.contains("profiles.critical"),
        "names the field:\n{said}"
    );
    assert_eq!(
        setup.control_bytes(),
        before,
        "the control file was changed"
    );

    for bad in [
        vec!["weight", "set", "critical", "nosuch=100"],
        vec!["weight", "set", "nosuch", "frontdoor=100"],
        vec!["weight", "set", "critical", "frontdoor=lots"],
    ] {
        let output = server.cli(&bad);
        assert!(!output.status.success(), "{bad:?} must be refused");
        let said = format!("{}{}", stdout(&output), stderr(&output));
        assert!(
            said.contains("nosuch") || said.contains("lots"),
            "{bad:?}: {said}"
        );
        assert_eq!(setup.control_bytes(), before, "{bad:?} changed the file");
    }

    // Nothing reached the server: two more looks at the control file (watcher events or the
    // 2 s backstop poll), at least one begun after the last refused command, and it has seen no
    // change.
    server.wait_for_control_checks(2, Duration::from_secs(10));
    assert_eq!(server.serial(), serial);
    assert_eq!(server.accepted(), accepted);
    assert_eq!(server.refused(), 0);
    assert_all_critical(&mut resolver, &subnets, FRONTDOOR);
}

/// `weight show` without a reachable server shows what the files would serve, the way the
/// server shows what it serves: weights for weighted profiles, on/off for geo endpoints.
#[test]
fn weight_show_without_a_server_reads_the_files_and_says_what_the_server_would() {
    let setup = Setup::new("show-offline");
    let server = setup.start();
    let online = ok(&server.cli(&["weight", "show"]), "weight show");
    server.stop();
    // Nothing listens on the discard port of loopback: the CLI falls back to the files.
    let output = Command::new(BIN)
        .current_dir(setup.dir.path())
        .args(["weight", "show", "--config"])
        .arg(&setup.config)
        .args(["--admin", "127.0.0.1:9"])
        .output()
        .expect("run steerdns");
    let offline = ok(&output, "weight show (offline)");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("showing the files instead"),
        "says where it reads from: {output:?}"
    );
    let profile_lines = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with("serving serial"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(profile_lines(&offline), profile_lines(&online));
    assert!(
        offline.lines().any(|l| l == "appgw: ap=on eu=on na=on"),
        "geo endpoints are on/off, not weight 0:\n{offline}"
    );
}
