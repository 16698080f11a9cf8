//! A control-only change shares the zones and precompiled answers of the snapshot being
//! served (nothing else changed); these tests check what a client sees: the new weights take
//! effect, the static data stays, and a zone edit that comes with (or without) a control
//! change is picked up in full — never hidden behind the shared zones.

use crate::control_common;

use std::net::Ipv4Addr;
use std::time::Duration;

use hickory_proto::rr::RecordType;

use control_common::*;

const RELOAD: Duration = Duration::from_secs(10);

fn critical_target(resolver: &mut Resolver) -> Option<String> {
    first_cname(&resolver.ask(&plain_query("critical.example.com.", RecordType::A)))
}

fn addresses(resolver: &mut Resolver, name: &str) -> Vec<Ipv4Addr> {
    a_records(&resolver.ask(&plain_query(name, RecordType::A)))
}

#[test]
fn control_only_reloads_serve_the_new_weights_and_the_same_static_data() {
    let setup = Setup::new("reuse-weights");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let mail = addresses(&mut resolver, "mail.example.com.");
    assert_eq!(mail, [Ipv4Addr::new(192, 0, 2, 25)]);
    let wild = addresses(&mut resolver, "anything.wild.example.com.");
    assert_eq!(wild, [Ipv4Addr::new(192, 0, 2, 100)]);

    for (round, (weights, expected)) in [((0, 100, 0), ALT_CDN), ((100, 0, 0), FRONTDOOR)]
        .into_iter()
        .cycle()
        .take(4)
        .enumerate()
    {
        let serial = server.serial();
        setup.write_control_atomically(&critical_control(weights.0, weights.1, weights.2));
        server.wait_for_serial_change(serial, RELOAD);
        assert_eq!(
            critical_target(&mut resolver).as_deref(),
            Some(expected),
            "round {round}: the new weights are not served"
        );
        assert_eq!(addresses(&mut resolver, "mail.example.com."), mail);
        assert_eq!(addresses(&mut resolver, "anything.wild.example.com."), wild);
    }
    assert_eq!(server.refused(), 0, "{:#}", server.status());
    server.stop();
}

#[test]
fn a_zone_edit_is_picked_up_with_a_control_change_and_on_its_own() {
    let setup = Setup::new("reuse-zone-edit");
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let zone = setup.path("zones/example.com.zone");
    let original = std::fs::read_to_string(&zone).expect("read zone");
    assert!(addresses(&mut resolver, "added.example.com.").is_empty());

    // A zone edit and a control change together: the control change triggers the reload, the
    // zone file's new bytes make it a full one.
    write_atomically(
        &zone,
        format!("{original}\nadded IN A 192.0.2.201\n").as_bytes(),
    );
    let serial = server.serial();
    setup.write_control_atomically(&critical_control(0, 100, 0));
    server.wait_for_serial_change(serial, RELOAD);
    assert_eq!(critical_target(&mut resolver).as_deref(), Some(ALT_CDN));
    assert_eq!(
        addresses(&mut resolver, "added.example.com."),
        [Ipv4Addr::new(192, 0, 2, 201)]
    );

    // A control change alone after that: the edited zone stays served.
    let serial = server.serial();
    setup.write_control_atomically(&critical_control(100, 0, 0));
    server.wait_for_serial_change(serial, RELOAD);
    assert_eq!(critical_target(&mut resolver).as_deref(), Some(FRONTDOOR));
    assert_eq!(
        addresses(&mut resolver, "added.example.com."),
        [Ipv4Addr::new(192, 0, 2, 201)]
    );

    // A zone edit alone, then SIGHUP (the control text is unchanged, so the serial stays):
    // the changed record is served.
    write_atomically(
        &zone,
        format!("{original}\nadded IN A 192.0.2.202\n").as_bytes(),
    );
    let accepted = server.accepted();
    server.sighup();
    let deadline = std::time::Instant::now() + RELOAD;
    while server.accepted() == accepted {
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP not accepted: {:#}",
            server.status()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        addresses(&mut resolver, "added.example.com."),
        [Ipv4Addr::new(192, 0, 2, 202)]
    );
    assert_eq!(critical_target(&mut resolver).as_deref(), Some(FRONTDOOR));
    assert_eq!(server.refused(), 0, "{:#}", server.status());
    server.stop();
}
