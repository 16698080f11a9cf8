//! A zone file edit applied as a difference (issue 32 item 4), with the real binary over real
//! sockets: after SIGHUP the changed record is served, status says the difference path took
//! it, the answers are byte for byte those of a server started on the edited file, and an
//! edit the difference path cannot take is built whole.

use crate::common::udp_once;
use crate::control_common;

use std::time::Duration;

use control_common::*;

const RELOAD_WAIT: Duration = Duration::from_secs(20);
const HOSTS: usize = 3000;

/// `zones/big.example.zone`: `HOSTS` names at `serial`, SOA in parentheses.
fn big_zone(serial: u32) -> String {
    let mut text = format!(
        "$ORIGIN big.example.\n$TTL 300\n@ IN SOA ns1 hostmaster (\n  {serial} ; serial\n  \
         7200 900 1209600 60 )\n@ NS ns1\nns1 A 192.0.2.53\n@ MX 10 mail\nmail A 192.0.2.25\n\
         www CNAME h7\n"
    );
    for i in 0..HOSTS {
        text.push_str(&format!("h{i} A 192.0.2.{}\n", i % 250));
    }
    text
}

/// A query packet (id 0x4242, EDNS) for `name`/`qtype`.
fn packet(name: &str, qtype: u16) -> Vec<u8> {
    let mut p = vec![0x42, 0x42, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in name.trim_end_matches('.').split('.') {
        p.push(label.len() as u8);
        p.extend_from_slice(label.as_bytes());
    }
    p.push(0);
    p.extend_from_slice(&qtype.to_be_bytes());
    p.extend_from_slice(&1u16.to_be_bytes());
    p.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    p
}

fn sample() -> Vec<Vec<u8>> {
    let mut queries: Vec<Vec<u8>> = (0..HOSTS)
        .step_by(97)
        .chain([1500, 7])
        .flat_map(|i| [1u16, 28].map(|t| packet(&format!("h{i}.big.example."), t)))
        .collect();
    for (name, qtype) in [
        ("big.example.", 6u16),
        ("big.example.", 2),
        ("big.example.", 15),
        ("www.big.example.", 1),
        ("nx.big.example.", 1),
        ("mail.example.com.", 1),
    ] {
        queries.push(packet(name, qtype));
    }
    queries
}

fn answers(server: std::net::SocketAddr, queries: &[Vec<u8>]) -> Vec<Vec<u8>> {
    queries
        .iter()
        .map(|q| udp_once(server, q, Duration::from_secs(2)).expect("an answer"))
        .collect()
}

fn zones_from(status: &serde_json::Value) -> String {
    status["zones_from"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_zone_file_edit_after_sighup_is_served_as_a_difference_and_answers_as_a_full_load() {
    let setup = Setup::new("zone-difference");
    let zone = setup.path("zones/big.example.zone");
    std::fs::write(&zone, big_zone(1)).expect("write zone");
    let server = setup.start();
    let edited = big_zone(2).replace("h1500 A 192.0.2.0\n", "h1500 A 198.51.100.1\n");
    write_atomically(&zone, edited.as_bytes());
    let before = server.accepted();
    server.sighup();
    let status = server.wait_for_accepted(before, RELOAD_WAIT);
    assert_eq!(
        zones_from(&status),
        format!(
            "applied as a difference: 2 names changed, 2 records removed and 2 added ({})",
            zone.display()
        ),
        "{status:#}"
    );
    assert!(
        status["taster"]["last_result"]
            .as_str()
            .is_some_and(|l| l.contains("changed lines")),
        "the difference was tasted: {:#}",
        status["taster"]
    );
    let new_answer =
        udp_once(server.dns, &packet("h1500.big.example.", 1), RELOAD_WAIT).expect("an answer");
    assert!(
        new_answer.ends_with(&[198, 51, 100, 1, 0, 0, 41, 4, 208, 0, 0, 0, 0, 0, 0])
            || new_answer.windows(4).any(|w| w == [198, 51, 100, 1]),
        "the new address is served: {new_answer:?}"
    );

    // A second server started on the edited files: the same bytes for every sample answer.
    let fresh_setup = Setup::new("zone-difference-full");
    std::fs::write(fresh_setup.path("zones/big.example.zone"), &edited).expect("write zone");
    let fresh = fresh_setup.start();
    let queries = sample();
    let (got, want) = (answers(server.dns, &queries), answers(fresh.dns, &queries));
    for ((query, got), want) in queries.iter().zip(&got).zip(&want) {
        assert_eq!(got, want, "answers differ for {query:?}");
    }
    fresh.stop();

    // An $ORIGIN line the difference path cannot follow: built whole, and said why.
    let origin = big_zone(3).replace("h100 A", "$ORIGIN sub.big.example.\nh100 A");
    write_atomically(&zone, origin.as_bytes());
    let before = server.accepted();
    server.sighup();
    let status = server.wait_for_accepted(before, RELOAD_WAIT);
    let from = zones_from(&status);
    assert!(
        from.contains("not applied as a difference") && from.contains("$ORIGIN"),
        "{from}"
    );
    let moved =
        udp_once(server.dns, &packet("h100.sub.big.example.", 1), RELOAD_WAIT).expect("an answer");
    assert_eq!(moved[3] & 0x0f, 0, "h100 now lives under sub: {moved:?}");

    // A CNAME beside an A: refused, with the reason a full load gives.
    let cname = big_zone(4).replace("h9 A 192.0.2.9\n", "h9 A 192.0.2.9\nh9 CNAME ns1\n");
    write_atomically(&zone, cname.as_bytes());
    let refused = server.refused();
    server.sighup();
    let status = server.wait_for_refusal(refused, RELOAD_WAIT);
    let reasons = refusal_reasons(&status);
    assert!(reasons.iter().any(|r| r.contains("CNAME")), "{reasons:?}");
    server.stop();
}
