//! The counting hooks on the real answer path (the bundled example, no sockets): per-zone and
//! steered counters move by exactly the queries answered, and counting plus query-log sampling
//! allocate nothing for queries that are not sampled.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use super::per_snapshot::Series;
use crate::answer::respond;
use crate::config::Config;
use crate::dns::wire::{Requester, Transport};
use crate::snapshot::load::load;
use crate::snapshot::Snapshot;
use crate::test_alloc::allocations;

fn bundled_config() -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("steerdns.toml");
    Config::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn serve(config: &Config) -> Snapshot {
    match load(config) {
        Ok(loaded) => Snapshot::standalone(loaded.compiled),
        Err(problems) => panic!("{problems:?}"),
    }
}

fn bundled() -> Snapshot {
    serve(&bundled_config())
}

/// A query with EDNS and an optional IPv4 ECS option.
fn query(name: &str, qtype: u16, ecs: Option<[u8; 3]>) -> Vec<u8> {
    let mut p = vec![0x12, 0x34, 0x00, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
    for label in name.trim_end_matches('.').split('.') {
        p.push(label.len() as u8);
        p.extend_from_slice(label.as_bytes());
    }
    p.push(0);
    p.extend_from_slice(&qtype.to_be_bytes());
    p.extend_from_slice(&1u16.to_be_bytes());
    let mut options = Vec::new();
    if let Some(net) = ecs {
        options.extend_from_slice(&[0, 8, 0, 7, 0, 1, 24, 0]);
        options.extend_from_slice(&net);
    }
    p.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    p.extend_from_slice(&(options.len() as u16).to_be_bytes());
    p.extend_from_slice(&options);
    p
}

fn series(snapshot: &Snapshot) -> BTreeMap<Series, u64> {
    let mut all = BTreeMap::new();
    snapshot.counters().each_series(|s, n| {
        all.insert(s, n);
    });
    all
}

fn get(all: &BTreeMap<Series, u64>, series: Series) -> u64 {
    all.get(&series).copied().unwrap_or(0)
}

fn zone(zone: &str, rcode: &'static str) -> Series {
    Series::Zone {
        zone: zone.to_string(),
        rcode,
    }
}

#[test]
fn answers_are_counted_by_zone_and_steering_decision() {
    let snapshot = bundled();
    let client = Requester::new(IpAddr::from([127, 0, 0, 1]), Transport::Udp);
    let mut out = vec![0u8; 4096];
    let eu_west = Some([81, 2, 69]);
    let asked = [
        (query("example.com", 6, None), 2),
        (query("nope.example.com", 1, None), 3),
        (query("example.org", 1, None), 1),
        (query("warm.example.com", 1, eu_west), 5),
    ];
    for (packet, times) in &asked {
        for _ in 0..*times {
            assert!(respond(&snapshot, packet, &client, &mut out).is_some());
        }
    }
    let all = series(&snapshot);
    assert_eq!(get(&all, zone("example.com.", "NOERROR")), 2 + 5);
    assert_eq!(get(&all, zone("example.com.", "NXDOMAIN")), 3);
    assert_eq!(get(&all, zone("other", "REFUSED")), 1);
    assert_eq!(get(&all, zone("edge.example.net.", "NOERROR")), 0);
    let steered = Series::Steered {
        name: "warm.example.com.".into(),
        policy: "warm".into(),
    };
    assert_eq!(get(&all, steered), 5);
    // The same subnet always gets the same endpoint of the 90/10 profile.
    let warm: Vec<(String, u64)> = all
        .iter()
        .filter_map(|(s, n)| match s {
            Series::Profile {
                profile,
                endpoint,
                region,
            } if profile == "warm" => {
                assert_eq!(region, "eu-west");
                Some((endpoint.clone(), *n))
            }
            _ => None,
        })
        .collect();
    assert_eq!(warm.len(), 1, "{warm:?}");
    assert_eq!(warm[0].1, 5);
}

#[test]
fn counting_and_unsampled_queries_allocate_nothing() {
    let mut config = bundled_config();
    // Sampled once (the first query on this thread), then not for a very long time.
    config.server.query_log_sample = u32::MAX;
    let snapshot = serve(&config);
    let client = Requester::new(IpAddr::from([127, 0, 0, 1]), Transport::Tcp);
    let packets = [
        query("example.com", 6, None),
        query("critical.example.com", 1, Some([81, 2, 69])),
        query("www.edge.example.net", 1, Some([8, 8, 8])),
        query("nope.example.com", 1, None),
        query("example.org", 1, None),
        vec![0u8; 5],
    ];
    let mut out = vec![0u8; 65535];
    for packet in &packets {
        let _ = respond(&snapshot, packet, &client, &mut out);
    }
    let before = allocations();
    for _ in 0..100 {
        for packet in &packets {
            let _ = respond(&snapshot, packet, &client, &mut out);
        }
    }
    assert_eq!(allocations() - before, 0, "counting allocated");
    let all = series(&snapshot);
    assert_eq!(get(&all, zone("example.com.", "NXDOMAIN")), 101);
}
