//! Weighted profiles over real sockets, at scale: the share of client subnets each endpoint
//! gets, weight-0 endpoints never served, per-subnet stickiness (repeats, hosts of one subnet,
//! server restarts), and minimal movement when weights change.

use crate::steering_common;

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::RecordType;
use steering_common::*;

const WARM: &str = "warm.example.com.";
const CRITICAL: &str = "critical.example.com.";
const WARM_FRONTDOOR: &str = "warm.edge.example.net.";
const WARM_ALT: &str = "warm.cdn.example.org.";

/// How many distinct /24s the distribution tests use.
const SUBNETS: usize = 10_000;

/// `count` distinct IPv4 /24 networks spread over many /8s, the same on every run.
fn distinct_v4_subnets(count: usize) -> Vec<Ipv4Addr> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut seen = HashSet::with_capacity(count);
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        // xorshift64*: deterministic, well spread, no dependency.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let r = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let first = 1 + (r >> 56) as u8 % 223; // 1..=223
        let net = Ipv4Addr::new(first, (r >> 48) as u8, (r >> 40) as u8, 0);
        if seen.insert(net) {
            out.push(net);
        }
    }
    out
}

/// `count` distinct IPv6 /56 networks under 2a00::/12 and 2400::/12.
fn distinct_v6_subnets(count: usize) -> Vec<Ipv6Addr> {
    (0..count)
        .map(|i| {
            let i = i as u32;
            let top = if i.is_multiple_of(2) { 0x2a00 } else { 0x2400 };
            Ipv6Addr::new(
                top | ((i >> 16) as u16 & 0x000f),
                (i.wrapping_mul(40503) & 0xffff) as u16,
                (i & 0xffff) as u16,
                (i.wrapping_mul(2654435761) >> 16) as u16 & 0xff00,
                0,
                0,
                0,
                0,
            )
        })
        .collect()
}

/// The first CNAME target `name` answers each ECS subnet with.
fn targets(client: &Exchanger, name: &str, subnets: &[(IpAddr, u8)]) -> Vec<String> {
    let queries: Vec<_> = subnets
        .iter()
        .map(|(addr, prefix)| ecs_query_addr(name, RecordType::A, *addr, *prefix))
        .collect();
    client
        .all(&queries)
        .iter()
        .zip(subnets)
        .map(|(r, (addr, prefix))| {
            assert_noerror(r, &format!("{name} for {addr}/{prefix}"));
            first_cname(r).unwrap_or_else(|| panic!("{name} for {addr}/{prefix}: no CNAME {r:?}"))
        })
        .collect()
}

fn as_v4_24s(nets: &[Ipv4Addr]) -> Vec<(IpAddr, u8)> {
    nets.iter().map(|n| (IpAddr::V4(*n), 24)).collect()
}

fn share(answers: &[String], target: &str) -> f64 {
    answers.iter().filter(|a| a.as_str() == target).count() as f64 / answers.len() as f64
}

#[test]
fn warm_splits_subnets_by_weight() {
    let server = example_server();
    let client = Exchanger::new(&server);
    let subnets = as_v4_24s(&distinct_v4_subnets(SUBNETS));
    let answers = targets(&client, WARM, &subnets);
    for a in &answers {
        assert!(
            a == WARM_FRONTDOOR || a == WARM_ALT,
            "unexpected target {a}"
        );
    }
    let alt = share(&answers, WARM_ALT);
    assert!(
        (0.08..=0.12).contains(&alt),
        "alt-cdn share {:.2}% over {SUBNETS} subnets, expected 10% ± 2",
        alt * 100.0
    );

    // IPv6 clients are split the same way, by /56.
    let v6: Vec<(IpAddr, u8)> = distinct_v6_subnets(4000)
        .into_iter()
        .map(|n| (IpAddr::V6(n), 56))
        .collect();
    let answers = targets(&client, WARM, &v6);
    let alt = share(&answers, WARM_ALT);
    assert!(
        (0.07..=0.13).contains(&alt),
        "IPv6 alt-cdn share {:.2}% over 4000 subnets",
        alt * 100.0
    );
}

#[test]
fn critical_never_answers_weight_zero_endpoints() {
    let server = example_server();
    let client = Exchanger::new(&server);
    let mut subnets = as_v4_24s(&distinct_v4_subnets(SUBNETS));
    subnets.extend(
        distinct_v6_subnets(2000)
            .into_iter()
            .map(|n| (IpAddr::V6(n), 56)),
    );
    let queries: Vec<_> = subnets
        .iter()
        .map(|(addr, prefix)| ecs_query_addr(CRITICAL, RecordType::A, *addr, *prefix))
        .collect();
    for (r, (addr, prefix)) in client.all(&queries).iter().zip(&subnets) {
        assert_eq!(
            first_cname(r).as_deref(),
            Some("critical.edge.example.net."),
            "{addr}/{prefix}: {r:?}"
        );
        // Not alt-cdn's CNAME, and not appgw's addresses either.
        assert_eq!(a_records(r), vec![GLOBAL_V4], "{addr}/{prefix}");
    }
}

#[test]
fn a_subnet_keeps_its_answer() {
    let server = example_server();
    let client = Exchanger::new(&server);
    let nets = distinct_v4_subnets(2000);
    let subnets = as_v4_24s(&nets);
    let first = targets(&client, WARM, &subnets);
    assert!(
        first.iter().any(|a| a == WARM_ALT),
        "some subnets go to alt-cdn"
    );

    // Asked again, on another socket.
    let again = targets(&Exchanger::new(&server), WARM, &subnets);
    assert_eq!(first, again, "same subnet, same answer");

    // Any host or longer prefix inside the /24 is the same subnet.
    let sample = &nets[..500];
    for (host, prefix) in [(1u8, 32u8), (77, 32), (254, 32), (128, 25), (0, 28)] {
        let inside: Vec<(IpAddr, u8)> = sample
            .iter()
            .map(|n| {
                let o = n.octets();
                (IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], host)), prefix)
            })
            .collect();
        let answers = targets(&client, WARM, &inside);
        assert_eq!(
            answers,
            first[..sample.len()],
            "hosts .{host}/{prefix} answer like their /24"
        );
    }

    // IPv6: anything inside one /56 is one subnet.
    let v6 = distinct_v6_subnets(500);
    let at = |prefix: u8, tweak: u16| -> Vec<(IpAddr, u8)> {
        v6.iter()
            .map(|n| {
                let mut s = n.segments();
                s[3] |= tweak;
                (IpAddr::V6(Ipv6Addr::from(s)), prefix)
            })
            .collect()
    };
    let base = targets(&client, WARM, &at(56, 0));
    assert_eq!(
        base,
        targets(&client, WARM, &at(64, 0x00ab)),
        "/64 inside the /56"
    );
    assert_eq!(
        base,
        targets(&client, WARM, &at(60, 0x00f0)),
        "/60 inside the /56"
    );
    drop(server);

    // Another server process (another nameserver of the fleet) makes the same choices.
    let other = example_server();
    let after_restart = targets(&Exchanger::new(&other), WARM, &subnets);
    assert_eq!(first, after_restart, "choices survive a restart");
}

#[test]
fn weight_change_moves_only_the_subnets_it_must() {
    let nets = distinct_v4_subnets(SUBNETS);
    let subnets = as_v4_24s(&nets);
    let setup = Setup::new(
        "",
        "[profiles.warm.endpoints]\nfrontdoor = { weight = 90 }\nalt-cdn = { weight = 10 }\n",
    );
    let before = {
        let server = setup.start(&[]);
        targets(&Exchanger::new(&server), WARM, &subnets)
    };
    setup.write_control(
        "[profiles.warm.endpoints]\nfrontdoor = { weight = 80 }\nalt-cdn = { weight = 20 }\n",
    );
    let after = {
        let server = setup.start(&[]);
        targets(&Exchanger::new(&server), WARM, &subnets)
    };

    let alt_after = share(&after, WARM_ALT);
    assert!(
        (0.18..=0.22).contains(&alt_after),
        "alt-cdn share after 80/20: {:.2}%",
        alt_after * 100.0
    );
    let mut moved = 0;
    for ((b, a), net) in before.iter().zip(&after).zip(&nets) {
        if b != a {
            moved += 1;
            assert_eq!(
                (b.as_str(), a.as_str()),
                (WARM_FRONTDOOR, WARM_ALT),
                "{net}/24 moved the wrong way"
            );
        }
    }
    let moved_share = moved as f64 / SUBNETS as f64;
    assert!(
        (0.08..=0.12).contains(&moved_share),
        "{:.2}% of subnets moved for a 10-point weight change",
        moved_share * 100.0
    );
}
