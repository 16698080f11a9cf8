//! Property tests (proptest): name handling (letter case, compression, label limits), hashing
//! stability of per-subnet choices, the distribution of weighted choices, and the invariants of
//! the shield's decision step on small random topologies.
//!
//! Case counts are kept small so the whole file runs in a few seconds; `PROPTEST_CASES=N`
//! raises every block for a longer local run.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::OnceLock;

use hickory_proto::op::Message;
use hickory_proto::rr::Name;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed};

use steerdns::answer::respond;
use steerdns::config::Config;
use steerdns::dns::wire::{parse_query, Reject, WireName, MAX_NAME_LEN};
use steerdns::dns::wire::{Requester, Transport, MAX_MESSAGE};
use steerdns::dns::writer::Writer;
use steerdns::policy::ShieldMode;
use steerdns::policy::{
    compile, evaluate, AnycastChoice, CompiledPolicies, ControlKnobs, Destination, LocatedClient,
    PolicyRoot, RegionShed, ShedShare, ShedView, StepChoice,
};
use steerdns::shield::step::{
    shed_view, step, Inputs, Note, Reading, RegionState, RingNode, Rings, ShieldSettings,
    ShieldState,
};
use steerdns::snapshot::Snapshot;

/// `cases` unless `PROPTEST_CASES` says otherwise, from a fixed seed unless
/// `PROPTEST_RNG_SEED` says otherwise (so `cargo test` is repeatable), and no failure files
/// next to the sources.
fn cases(cases: u32) -> ProptestConfig {
    let defaults = ProptestConfig::default(); // reads the PROPTEST_* environment
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let rng_seed = match std::env::var("PROPTEST_RNG_SEED") {
        Ok(_) => defaults.rng_seed,
        Err(_) => RngSeed::Fixed(0x05ee_dd25),
    };
    ProptestConfig {
        cases,
        rng_seed,
        failure_persistence: None,
        ..defaults
    }
}

// ---------------------------------------------------------------------------------------------
// Names

/// Uncompressed wire form of `labels`.
fn wire(labels: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for label in labels {
        out.push(label.len() as u8);
        out.extend_from_slice(label);
    }
    out.push(0);
    out
}

/// A standard query (RD, optional EDNS with a 1232-byte payload) for a wire name.
fn query(id: u16, name: &[u8], qtype: u16, edns: bool) -> Vec<u8> {
    let mut p = id.to_be_bytes().to_vec();
    p.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)]);
    p.extend_from_slice(name);
    p.extend_from_slice(&qtype.to_be_bytes());
    p.extend_from_slice(&1u16.to_be_bytes());
    if edns {
        p.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
    }
    p
}

/// Labels from a small pool (so that names share suffixes), in random letter case.
fn pooled_name() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let pool = ["www", "a", "example", "com", "net", "edge", "x-1", "mail"];
    let label = (0..pool.len(), any::<u8>()).prop_map(move |(i, case)| {
        pool[i]
            .bytes()
            .enumerate()
            .map(|(j, b)| {
                if case >> (j % 8) & 1 == 1 {
                    b.to_ascii_uppercase()
                } else {
                    b
                }
            })
            .collect::<Vec<u8>>()
    });
    prop::collection::vec(label, 0..5)
}

proptest! {
    #![proptest_config(cases(256))]

    /// RFC 1035 limits: a label is at most 63 octets, a name at most 255 (root included).
    /// Exactly those names are read, lower-cased, with every suffix addressable.
    #[test]
    fn names_within_rfc_limits_are_read_and_others_refused(
        labels in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..=70), 0..9)
    ) {
        let name = wire(&labels);
        let lower = name.to_ascii_lowercase();
        let valid = labels.iter().all(|l| l.len() <= 63) && name.len() <= MAX_NAME_LEN;
        match WireName::parse_uncompressed(&name, 0) {
            Some((parsed, end)) => {
                prop_assert!(valid, "accepted an over-long name of {} octets", name.len());
                prop_assert_eq!(end, name.len());
                prop_assert_eq!(parsed.as_wire(), lower.as_slice());
                prop_assert_eq!(parsed.label_count(), labels.len());
                let mut at = 0;
                for skip in 0..=labels.len() {
                    prop_assert_eq!(parsed.suffix(skip), &lower[at..]);
                    at += labels.get(skip).map_or(0, |l| 1 + l.len());
                }
            }
            None => prop_assert!(!valid, "refused a valid name of {} octets", name.len()),
        }
        // The same verdict through the query parser: an invalid question name is FORMERR.
        match parse_query(&query(1, &name, 1, false)) {
            Ok(q) => {
                prop_assert!(valid);
                prop_assert_eq!(q.qname.as_wire(), lower.as_slice());
            }
            Err(Reject::Error { rcode, .. }) => {
                prop_assert!(!valid);
                prop_assert_eq!(rcode, 1);
            }
            Err(Reject::Drop) => prop_assert!(false, "a query was dropped"),
        }
    }

    /// Names written with compression read back (hickory) as the same names, never longer
    /// than uncompressed, and the question keeps the client's letter case byte for byte.
    #[test]
    fn compressed_names_round_trip_through_hickory(
        question in pooled_name(),
        owners in prop::collection::vec(pooled_name(), 1..12),
    ) {
        let mut buf = vec![0u8; 4096];
        let mut w = Writer::new(&mut buf).map_err(|_| TestCaseError::fail("no room"))?;
        let qwire = wire(&question);
        let mut q = qwire.clone();
        q.extend_from_slice(&[0, 1, 0, 1]);
        w.put_question(&q).map_err(|_| TestCaseError::fail("question"))?;
        let mut uncompressed = 12 + q.len();
        for owner in &owners {
            let name = wire(owner);
            uncompressed += name.len() + 14;
            w.put_name(&name).map_err(|_| TestCaseError::fail("name"))?;
            for part in [&[0u8, 1, 0, 1][..], &[0, 0, 0, 60], &[0, 4, 192, 0, 2, 1]] {
                w.put(part).map_err(|_| TestCaseError::fail("record"))?;
            }
        }
        w.set_u16(2, 0x8400);
        w.set_u16(4, 1);
        w.set_u16(6, owners.len() as u16);
        let len = w.len();
        prop_assert!(len <= uncompressed);
        prop_assert_eq!(&buf[12..12 + qwire.len()], qwire.as_slice());
        let message = Message::from_vec(&buf[..len])
            .map_err(|e| TestCaseError::fail(format!("hickory: {e}")))?;
        prop_assert_eq!(message.answers.len(), owners.len());
        for (record, owner) in message.answers.iter().zip(&owners) {
            let expected = Name::from_labels(owner.iter().map(|l| l.as_slice()))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(
                record.name.to_lowercase().to_ascii(),
                expected.to_lowercase().to_ascii()
            );
        }
        let query_name = Name::from_labels(question.iter().map(|l| l.as_slice()))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(message.queries[0].name().to_ascii(), query_name.to_ascii());
    }

    /// The writer reports overflow instead of panicking, whatever the buffer size.
    #[test]
    fn writer_overflows_cleanly(
        size in 0usize..300,
        names in prop::collection::vec(pooled_name(), 1..20),
    ) {
        let mut buf = vec![0u8; size];
        let Ok(mut w) = Writer::new(&mut buf) else {
            prop_assert!(size < 12);
            return Ok(());
        };
        for name in &names {
            if w.put_name(&wire(name)).is_err() {
                break;
            }
        }
        prop_assert!(w.len() <= size);
    }
}

/// The bundled example, loaded once.
fn bundled() -> &'static Snapshot {
    static SNAPSHOT: OnceLock<Snapshot> = OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("steerdns.toml");
        let config = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
        match steerdns::snapshot::load::load(&config) {
            Ok(loaded) => Snapshot::standalone(loaded.compiled),
            Err(problems) => panic!("{problems:?}"),
        }
    })
}

/// Names the example answers in different ways (static, CNAME, steered, wildcard, referral,
/// NXDOMAIN, outside every zone).
const SERVED: [&str; 9] = [
    "example.com",
    "www.example.com",
    "gw.example.com",
    "warm.example.com",
    "contoso.edge.example.net",
    "foo.wild.example.com",
    "x.sub.example.com",
    "nope.example.com",
    "example.org",
];

proptest! {
    #![proptest_config(cases(128))]

    /// Whatever the letter case of the question, the response echoes it byte for byte, and
    /// records owned by the question name carry the client's spelling.
    #[test]
    fn responses_preserve_the_question_case(
        which in 0..SERVED.len(),
        case_bits in any::<u64>(),
        qtype in prop::sample::select(vec![1u16, 2, 5, 6, 15, 16, 28, 255]),
        edns in any::<bool>(),
        tcp in any::<bool>(),
    ) {
        let mut bit = 0;
        let labels: Vec<Vec<u8>> = SERVED[which]
            .split('.')
            .map(|label| {
                label
                    .bytes()
                    .map(|b| {
                        bit = (bit + 1) % 64;
                        if case_bits >> bit & 1 == 1 { b.to_ascii_uppercase() } else { b }
                    })
                    .collect()
            })
            .collect();
        let name = wire(&labels);
        let packet = query(0x4242, &name, qtype, edns);
        let transport = if tcp { Transport::Tcp } else { Transport::Udp };
        let client = Requester::new(IpAddr::from([81, 2, 69, 142]), transport);
        let mut out = vec![0u8; MAX_MESSAGE];
        let len = respond(bundled(), &packet, &client, &mut out)
            .ok_or_else(|| TestCaseError::fail("no response"))?;
        let question_end = 12 + name.len() + 4;
        prop_assert_eq!(&out[12..question_end], &packet[12..question_end]);
        let message = Message::from_vec(&out[..len])
            .map_err(|e| TestCaseError::fail(format!("hickory: {e}")))?;
        let asked = Name::from_labels(labels.iter().map(|l| l.as_slice()))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        for record in &message.answers {
            if record.name.to_lowercase() == asked.to_lowercase() {
                prop_assert_eq!(record.name.to_ascii(), asked.to_ascii());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hashing and weights

/// A topology of three regions and a fallback site, a weighted profile `w` over `weights`
/// (endpoint i answers 10.0.0.i / 2001:db8:10::i), hashed on the given prefixes, and an
/// anycast name.
fn policies(weights: &[u32], prefix_v4: u8, prefix_v6: u8) -> CompiledPolicies {
    let mut text = String::from(
        "[topology]\nglobal = [\"192.0.2.1\", \"2001:db8::1\"]\n\
         [[topology.regions]]\nname = \"r0\"\ncontinent = \"EU\"\nanycast = [\"198.51.100.1\", \"2001:db8:1::1\"]\nneighbours = [\"r1\", \"r2\"]\n\
         [[topology.regions]]\nname = \"r1\"\ncontinent = \"EU\"\nanycast = [\"198.51.100.2\", \"2001:db8:1::2\"]\nneighbours = [\"r0\"]\n\
         [[topology.regions]]\nname = \"r2\"\ncontinent = \"NA\"\nanycast = [\"198.51.100.3\", \"2001:db8:1::3\"]\nneighbours = [\"r0\"]\n\
         [[topology.fallback]]\nname = \"f0\"\ncontinent = \"EU\"\nanycast = [\"203.0.113.1\", \"2001:db8:fb::1\"]\n",
    );
    text.push_str(&format!(
        "[profiles.w]\ntype = \"weighted\"\nttl = 60\nhash_prefix_v4 = {prefix_v4}\nhash_prefix_v6 = {prefix_v6}\n"
    ));
    for (i, weight) in weights.iter().enumerate() {
        text.push_str(&format!(
            "[[profiles.w.endpoints]]\nname = \"e{i}\"\naddresses = [\"10.0.0.{i}\", \"2001:db8:10::{i}\"]\nweight = {weight}\n"
        ));
    }
    text.push_str(
        "[[steered]]\nname = \"w.example.com.\"\nprofile = \"w\"\n\
         [[steered]]\nname = \"a.example.com.\"\npolicy = \"anycast\"\nttl = 300\n",
    );
    let config = Config::parse(&text, Path::new("properties.toml"))
        .unwrap_or_else(|e| panic!("test config: {e}"));
    compile(
        &config.topology,
        &config.profiles,
        &config.steered,
        &ControlKnobs::default(),
    )
    .unwrap_or_else(|e| panic!("test config: {e:?}"))
}

fn root(p: &CompiledPolicies, name: &str) -> PolicyRoot {
    p.steered()
        .iter()
        .find(|s| s.name.to_ascii() == name)
        .map(|s| s.root)
        .unwrap_or_else(|| panic!("{name} is not steered"))
}

/// `addr` with every bit beyond `prefix` replaced by `noise`'s.
fn same_subnet(addr: IpAddr, prefix: u8, noise: u128) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let keep = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            let bits = (u32::from(a) & keep) | (noise as u32 & !keep);
            IpAddr::V4(Ipv4Addr::from(bits))
        }
        IpAddr::V6(a) => {
            let keep = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from((u128::from(a) & keep) | (noise & !keep)))
        }
    }
}

fn any_addr() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<u32>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
        any::<u128>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
    ]
}

fn chosen_endpoint(decision: &steerdns::policy::Decision<'_>) -> Option<u16> {
    decision.trace.steps[0].map(|s| s.endpoint)
}

proptest! {
    #![proptest_config(cases(64))]

    /// A weighted choice depends only on the hashed prefix of the client's address: host bits
    /// beyond it never change the endpoint, and the answer's ECS scope is that prefix.
    #[test]
    fn weighted_choice_ignores_host_bits(
        weights in prop::collection::vec(1u32..=100, 2..5),
        prefix_v4 in 8u8..=32,
        prefix_v6 in 16u8..=128,
        addr in any_addr(),
        noise in any::<u128>(),
        region in 0u16..3,
    ) {
        let p = policies(&weights, prefix_v4, prefix_v6);
        let w = root(&p, "w.example.com.");
        let prefix = if addr.is_ipv4() { prefix_v4 } else { prefix_v6 };
        let other = same_subnet(addr, prefix, noise);
        let shed = ShedView::default();
        let a = evaluate(&p, w, &LocatedClient { region, addr, prefix_len: 16 }, &shed);
        let b = evaluate(&p, w, &LocatedClient { region, addr: other, prefix_len: 16 }, &shed);
        prop_assert_eq!(chosen_endpoint(&a), chosen_endpoint(&b), "{} vs {}", addr, other);
        prop_assert_eq!(a.target, b.target);
        let hashed = matches!(
            a.trace.steps[0].map(|s| s.choice),
            Some(StepChoice::Weighted { hashed: true })
        );
        prop_assert!(hashed, "not decided by the subnet hash: {:?}", a.trace);
        prop_assert_eq!(a.scope, prefix);
        // Stable: the same client gets the same answer every time.
        prop_assert_eq!(evaluate(&p, w, &LocatedClient { region, addr, prefix_len: 16 }, &shed), a);
    }

    /// Shedding is decided per /24 (IPv4) or /56 (IPv6): host bits never matter, and raising a
    /// region's fraction only adds subnets, each keeping its destination.
    #[test]
    fn shed_choice_is_per_subnet_and_monotonic(
        addr in any_addr(),
        noise in any::<u128>(),
        fraction in 1u16..=1000,
        raise in 0u16..=1000,
        shares in prop::collection::vec(1u16..=1000, 1..=3),
    ) {
        let p = policies(&[1, 1], 24, 56);
        let anycast = root(&p, "a.example.com.");
        let destinations = [Destination::Region(1), Destination::Region(2), Destination::Fallback(0)];
        let shares: Vec<ShedShare> = shares
            .iter()
            .zip(destinations)
            .map(|(&share_permille, destination)| ShedShare { destination, share_permille })
            .collect();
        let view = |fraction: u16| {
            let mut view = ShedView::default();
            let state = RegionShed::new(fraction, &shares, Some(30))
                .unwrap_or_else(|e| panic!("{e}"));
            view.set_region(0, state);
            view
        };
        let prefix = if addr.is_ipv4() { 24 } else { 56 };
        let other = same_subnet(addr, prefix, noise);
        let client = |addr| LocatedClient { region: 0, addr, prefix_len: 20 };
        let low = view(fraction);
        let a = evaluate(&p, anycast, &client(addr), &low);
        let b = evaluate(&p, anycast, &client(other), &low);
        prop_assert_eq!(a.target, b.target);
        prop_assert_eq!(a.scope, b.scope);
        let higher = evaluate(&p, anycast, &client(addr), &view(fraction.saturating_add(raise).min(1000)));
        if let Some((_, AnycastChoice::Shed { destination, .. })) = a.trace.anycast {
            match higher.trace.anycast {
                Some((_, AnycastChoice::Shed { destination: d, .. })) => prop_assert_eq!(d, destination),
                other => prop_assert!(false, "shed at {} but not at a higher fraction: {:?}", fraction, other),
            }
        }
    }
}

/// Deterministic, well-spread /24s: the i-th is i times an odd constant (a bijection on u32).
fn sample_subnet(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(i.wrapping_mul(0x9E37_79B9) & 0xFFFF_FF00))
}

proptest! {
    #![proptest_config(cases(12))]

    /// Over many subnets, each endpoint wins about weight/total of them (within 5 standard
    /// deviations), and an endpoint of weight 0 never wins while another has weight.
    #[test]
    fn weighted_choices_follow_the_weights(
        weights in prop::collection::vec(1u32..=100, 2..5),
    ) {
        const SAMPLES: u32 = 4000;
        let mut with_zero = weights.clone();
        with_zero.push(0);
        let p = policies(&with_zero, 24, 56);
        let w = root(&p, "w.example.com.");
        let mut wins = vec![0u32; with_zero.len()];
        for i in 0..SAMPLES {
            let client = LocatedClient { region: 0, addr: sample_subnet(i), prefix_len: 24 };
            let decision = evaluate(&p, w, &client, &ShedView::default());
            let endpoint = chosen_endpoint(&decision).ok_or_else(|| TestCaseError::fail("no choice"))?;
            wins[usize::from(endpoint)] += 1;
        }
        prop_assert_eq!(wins[weights.len()], 0, "the weight-0 endpoint won");
        let total: u32 = weights.iter().sum();
        for (i, &weight) in weights.iter().enumerate() {
            let expected = f64::from(weight) / f64::from(total);
            let observed = f64::from(wins[i]) / f64::from(SAMPLES);
            let sd = (expected * (1.0 - expected) / f64::from(SAMPLES)).sqrt();
            prop_assert!(
                (observed - expected).abs() <= 5.0 * sd + 0.002,
                "endpoint {} (weight {} of {}): {:.4} of subnets, expected {:.4}",
                i, weight, total, observed, expected
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shield step invariants

#[derive(Debug, Clone)]
struct Topology {
    rings: Rings,
}

fn topology() -> impl Strategy<Value = Topology> {
    let continents = ["EU", "NA"];
    (1usize..=5, 0usize..=2)
        .prop_flat_map(move |(regions, sites)| {
            (
                prop::collection::vec(
                    (
                        0..continents.len(),
                        prop::collection::vec(0..regions as u16, 0..4),
                    ),
                    regions,
                ),
                prop::collection::vec(0..continents.len(), sites),
            )
        })
        .prop_map(move |(regions, sites)| Topology {
            rings: Rings {
                regions: regions
                    .into_iter()
                    .enumerate()
                    .map(|(i, (c, mut neighbours))| {
                        // As compiled: no region twice (the config refuses duplicates).
                        let mut seen = Vec::new();
                        neighbours.retain(|n| {
                            !seen.contains(n) && {
                                seen.push(*n);
                                true
                            }
                        });
                        RingNode {
                            name: format!("r{i}"),
                            continent: continents[c].to_string(),
                            neighbours,
                        }
                    })
                    .collect(),
                sites: sites
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| RingNode {
                        name: format!("f{i}"),
                        continent: continents[c].to_string(),
                        neighbours: Vec::new(),
                    })
                    .collect(),
            },
        })
}

/// One tick's readings: mostly fresh, some stale or missing, loads from idle to overloaded.
fn reading() -> impl Strategy<Value = Option<Reading>> {
    prop_oneof![
        1 => Just(None),
        8 => (0.0f64..2000.0, 50.0f64..1000.0, prop_oneof![
            6 => 0u64..5_000,
            1 => 5_000u64..400_000,
        ])
        .prop_map(|(load, capacity, age_ms)| Some(Reading { load, capacity, age_ms })),
    ]
}

#[derive(Debug, Clone)]
struct Tick {
    regions: Vec<Option<Reading>>,
    sites: Vec<Option<Reading>>,
    held: Vec<bool>,
    advance_ms: u64,
}

fn ticks() -> impl Strategy<Value = Vec<Tick>> {
    let tick = (
        prop::collection::vec(reading(), 5),
        prop::collection::vec(reading(), 2),
        prop::collection::vec(prop::bool::weighted(0.15), 5),
        500u64..60_000,
    )
        .prop_map(|(regions, sites, held, advance_ms)| Tick {
            regions,
            sites,
            held,
            advance_ms,
        });
    prop::collection::vec(tick, 1..8)
}

fn settings() -> impl Strategy<Value = ShieldSettings> {
    (0.3f64..0.9, 0.05f64..0.3, 0.02f64..1.0, any::<bool>()).prop_map(
        |(high, gap, max_step, cross)| ShieldSettings {
            high_watermark: high,
            low_watermark: high - gap,
            max_step,
            allow_cross_continent: cross,
            ..ShieldSettings::default()
        },
    )
}

/// Load placed by every shedding region into each destination (fraction × natural × share).
fn placed(state: &ShieldState) -> BTreeMap<Destination, f64> {
    let mut placed = BTreeMap::new();
    for region in &state.regions {
        for (dest, share) in &region.shares {
            *placed.entry(*dest).or_insert(0.0) += region.fraction * region.natural * share;
        }
    }
    placed
}

/// Runs `ticks` through the step from a calm start, calling `check(tick, held, state)` after
/// each one.
fn run_ticks(
    topology: &Topology,
    settings: &ShieldSettings,
    ticks: &[Tick],
    mut check: impl FnMut(usize, &[bool], &ShieldState) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let rings = &topology.rings;
    let (n, m) = (rings.regions.len(), rings.sites.len());
    let mut state = ShieldState::default();
    let mut now = 1_000_000u64;
    for (t, tick) in ticks.iter().enumerate() {
        now += tick.advance_ms;
        let inputs = Inputs {
            regions: tick.regions[..n].to_vec(),
            sites: tick.sites[..m].to_vec(),
            demand: Vec::new(),
            mode: ShieldMode::Auto,
            operator_held: tick.held[..n].to_vec(),
            tenants: Vec::new(),
        };
        let (next, _changes) = step(&state, &inputs, rings, settings, now);
        prop_assert_eq!(next.regions.len(), n);
        check(t, &inputs.operator_held, &next)?;
        state = next;
    }
    Ok(())
}

/// Like [`run_ticks`], with `check` called for each region `r` of the state after each tick
/// `t` (and the regions the operator held then).
fn run_ticks_per_region(
    topology: &Topology,
    settings: &ShieldSettings,
    ticks: &[Tick],
    mut check: impl FnMut(
        usize,
        &[bool],
        &ShieldState,
        usize,
        &RegionState,
    ) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    run_ticks(topology, settings, ticks, |t, held, state| {
        for (r, region) in state.regions.iter().enumerate() {
            check(t, held, state, r, region)?;
        }
        Ok(())
    })
}

/// Regions that `region` sheds into.
fn region_destinations(region: &RegionState) -> impl Iterator<Item = usize> + '_ {
    region.shares.keys().filter_map(|d| match d {
        Destination::Region(i) => Some(usize::from(*i)),
        _ => None,
    })
}

proptest! {
    #![proptest_config(cases(1024))]

    /// After every tick: fractions and shares within [0, 1], no region shedding into itself,
    /// held regions reset, and the per-mille view the serving path reads adds up.
    #[test]
    fn shield_step_keeps_fractions_and_shares_in_range(
        topology in topology(),
        settings in settings(),
        ticks in ticks(),
    ) {
        run_ticks(&topology, &settings, &ticks, |t, held, state| {
            for (r, region) in state.regions.iter().enumerate() {
                let f = region.fraction;
                prop_assert!(f.is_finite() && (0.0..=1.0).contains(&f), "tick {}: r{} fraction {}", t, r, f);
                for (dest, share) in &region.shares {
                    prop_assert!(share.is_finite() && (0.0..=1.0).contains(share),
                        "tick {}: r{} share {} to {:?}", t, r, share, dest);
                    prop_assert!(*dest != Destination::Region(r as u16), "r{} sheds into itself", r);
                }
                if held[r] {
                    prop_assert_eq!(f, 0.0);
                    prop_assert_eq!(region.note, Note::OperatorHeld);
                }
            }
            let view = shed_view(state, &settings);
            for r in 0..state.regions.len() {
                if let Some(shed) = view.region(r as u16) {
                    if shed.fraction_permille() > 0 {
                        let total: u32 = shed.destinations().map(|s| u32::from(s.share_permille)).sum();
                        prop_assert_eq!(total, 1000, "tick {}: r{} view shares", t, r);
                    }
                }
            }
            Ok(())
        })?;
    }

    /// A region with a shed fraction has destinations whose shares sum to 1.
    #[test]
    fn a_shedding_region_has_destinations_summing_to_one(
        topology in topology(),
        settings in settings(),
        ticks in ticks(),
    ) {
        run_ticks_per_region(&topology, &settings, &ticks, |t, _, _, r, region| {
            if region.fraction > 0.0 {
                let sum: f64 = region.shares.values().sum();
                prop_assert!((sum - 1.0).abs() < 1e-6,
                    "tick {}: r{} sheds {} but its shares sum to {}", t, r, region.fraction, sum);
            }
            Ok(())
        })?;
    }

    /// Nothing is shed into a region the operator forced or drained ("the shield leaves them
    /// alone and never sheds into them").
    #[test]
    fn nothing_is_shed_into_a_held_region(
        topology in topology(),
        settings in settings(),
        ticks in ticks(),
    ) {
        run_ticks_per_region(&topology, &settings, &ticks, |t, held, _, r, region| {
            for d in region_destinations(region) {
                prop_assert!(!held[d], "tick {}: r{} sheds into held r{}", t, r, d);
            }
            Ok(())
        })?;
    }

    /// Nothing is shed into a region that is itself shedding.
    #[test]
    fn nothing_is_shed_into_a_shedding_region(
        topology in topology(),
        settings in settings(),
        ticks in ticks(),
    ) {
        run_ticks_per_region(&topology, &settings, &ticks, |t, _, state, r, region| {
            for d in region_destinations(region) {
                let theirs = state.regions[d].fraction;
                prop_assert!(theirs == 0.0,
                    "tick {}: r{} sheds into r{}, itself shedding {}", t, r, d, theirs);
            }
            Ok(())
        })?;
    }

    /// From a calm start, one tick never places more load into a destination than its
    /// headroom below the high watermark (no trend or earlier moves exist yet).
    #[test]
    fn first_step_respects_destination_headroom(
        topology in topology(),
        settings in settings(),
        tick in ticks().prop_map(|t| t[0].clone()),
    ) {
        let rings = &topology.rings;
        let (n, m) = (rings.regions.len(), rings.sites.len());
        let inputs = Inputs {
            regions: tick.regions[..n].to_vec(),
            sites: tick.sites[..m].to_vec(),
            demand: Vec::new(),
            mode: ShieldMode::Auto,
            operator_held: tick.held[..n].to_vec(),
            tenants: Vec::new(),
        };
        let (next, _) = step(&ShieldState::default(), &inputs, rings, &settings, 1_000_000);
        let fresh = |r: &Option<Reading>| r.filter(|r| r.age_ms < settings.stale_after_ms);
        for (dest, amount) in placed(&next) {
            let reading = match dest {
                Destination::Region(d) => fresh(&inputs.regions[usize::from(d)]),
                Destination::Fallback(s) => fresh(&inputs.sites[usize::from(s)]),
                Destination::Global => None,
            };
            let Some(reading) = reading else {
                prop_assert!(false, "placed {} into {:?}, which has no fresh reading", amount, dest);
                continue;
            };
            let headroom = (settings.high_watermark * reading.capacity - reading.load).max(0.0);
            prop_assert!(amount <= headroom + 1e-6 * reading.capacity.max(1.0),
                "placed {} into {:?} with headroom {}", amount, dest, headroom);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Safety rules: over random sequences of operator edits (drains, weights, forced fallbacks,
// gate flips, some with overrides, at random times), every version accepted through the one
// acceptance path (`change::screen_at`) that breaks a rule carries a recorded override of it —
// in that version, or (for an assertion) in the version that began the breach.

const SAFETY_RULES: &str = r#"
[[safety.rules]]
id = "min-one-critical"
text = "critical keeps one endpoint serving"
kind = "min-serving"
profile = "critical"
min = 1

[[safety.rules]]
id = "max-two-drained"
text = "at most two regions drained"
kind = "max-drained"
max = 2

[[safety.rules]]
id = "one-fallback"
text = "the fallback is forced for at most one region"
kind = "max-fallback"
max = 1

[[safety.rules]]
id = "warm-gated"
text = "warm changes only while break-glass is armed"
kind = "gate"
knobs = ["profiles.warm"]
gate = "break-glass"

[[safety.rules]]
id = "drain-calm"
text = "drains change at most once per 30 s"
kind = "max-drained"
max = 8
wait_secs = 30
"#;

fn safety_config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let text = include_str!("../../steerdns.toml");
        let start = text.find("[[safety.rules]]").unwrap_or(text.len());
        Config::parse(
            &format!("{}{SAFETY_RULES}", &text[..start]),
            Path::new("steerdns.toml"),
        )
        .expect("the example with the test's rules parses")
    })
}

const REGIONS: [&str; 5] = ["na-east", "eu-west", "eu-north", "ap-east", "sa-east"];

#[derive(Debug, Clone)]
enum Edit {
    Drain(usize, bool),
    Weights(u32, u32, u32),
    Fallback(usize, bool),
    Warm(u32),
    Gate(bool),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0..REGIONS.len(), any::<bool>()).prop_map(|(r, on)| Edit::Drain(r, on)),
        (0u32..3, 0u32..3, 0u32..3).prop_map(|(a, b, c)| Edit::Weights(a * 50, b * 50, c * 50)),
        (0..REGIONS.len(), any::<bool>()).prop_map(|(r, on)| Edit::Fallback(r, on)),
        (0u32..=10).prop_map(|w| Edit::Warm(w * 10)),
        any::<bool>().prop_map(Edit::Gate),
    ]
}

fn apply(text: &str, edit: &Edit) -> String {
    use steerdns::control::edit::{set_drain, set_gate, set_weights};
    let pairs = |ws: &[(&str, u32)]| -> Vec<(String, u32)> {
        ws.iter().map(|(n, w)| (n.to_string(), *w)).collect()
    };
    let out = match edit {
        Edit::Drain(r, on) => set_drain(text, REGIONS[*r], *on),
        Edit::Weights(a, b, c) => set_weights(
            text,
            "critical",
            &pairs(&[("frontdoor", *a), ("alt-cdn", *b), ("appgw", *c)]),
        ),
        Edit::Fallback(r, on) => {
            // A forced fallback is written as a whole region table, the way an operator would.
            let mut doc: toml_edit::DocumentMut = text.parse().expect("control text parses");
            let region = &mut doc["regions"][REGIONS[*r]];
            if !region.is_table_like() {
                *region = toml_edit::table();
            }
            if *on {
                region["force"] = toml_edit::value("fallback:fb-eu");
            } else if let Some(t) = region.as_table_like_mut() {
                t.remove("force");
            }
            Ok(doc.to_string())
        }
        Edit::Warm(w) => set_weights(
            text,
            "warm",
            &pairs(&[("frontdoor", 100 - w), ("alt-cdn", *w)]),
        ),
        Edit::Gate(on) => set_gate(text, "break-glass", on.then_some("armed")),
    };
    out.expect("edits of valid control text succeed")
}

/// Does `control` break the assertion of `rule` (its state alone)?
fn breaks(rule: &steerdns::safety::Rule, control: &steerdns::control::ControlFile) -> bool {
    use steerdns::safety::RuleKind;
    let drained = REGIONS
        .iter()
        .filter(|r| control.regions.get(**r).is_some_and(|k| k.drain))
        .count();
    let fallback = REGIONS
        .iter()
        .filter(|r| {
            control
                .regions
                .get(**r)
                .and_then(|k| k.force.as_ref())
                .is_some_and(|f| f.to_string().starts_with("fallback:"))
        })
        .count();
    match rule.kind {
        RuleKind::MinServing => {
            let weights = control.profiles.get("critical").map(|p| &p.endpoints);
            let serving = ["frontdoor", "alt-cdn", "appgw"]
                .iter()
                .filter(|e| {
                    let configured = if **e == "frontdoor" { 100 } else { 0 };
                    let w = weights
                        .and_then(|w| w.get(**e))
                        .and_then(|k| k.weight)
                        .unwrap_or(configured);
                    w > 0
                })
                .count();
            serving < rule.min.unwrap_or(0)
        }
        RuleKind::MaxDrained => drained > rule.max.unwrap_or(usize::MAX),
        RuleKind::MaxFallback => fallback > rule.max.unwrap_or(usize::MAX),
        RuleKind::Gate => false,
    }
}

proptest! {
    #![proptest_config(cases(48))]

    #[test]
    fn no_rule_is_broken_without_a_recorded_override(
        steps in proptest::collection::vec(
            (edit(), proptest::option::weighted(0.3, 0usize..5), 0u64..40),
            1..40,
        )
    ) {
        use std::time::{Duration, UNIX_EPOCH};
        use steerdns::change::{screen_at, OverrideRequest};
        use steerdns::control::ControlFile;
        use steerdns::safety::Recorded;

        let config = safety_config();
        let rules = &config.safety.rules;
        let parse = |t: &str| ControlFile::parse(t, Path::new("c")).expect("accepted text parses");
        let mut text = include_str!("../../control.toml").to_string();
        let mut now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut accepted: Vec<Recorded> = vec![Recorded { at: now, control: parse(&text) }];
        for (edit, override_of, secs) in steps {
            now += Duration::from_secs(secs);
            let candidate = apply(&text, &edit);
            let overrides: Vec<OverrideRequest> = override_of
                .map(|i| OverrideRequest { rule: rules[i].id.clone(), reason: "test".into() })
                .into_iter()
                .collect();
            let Ok(screened) = screen_at(config, &text, &candidate, &accepted, &overrides, "prop", now) else {
                continue; // refused: nothing written
            };
            let version = parse(&screened.text);
            let recorded: Vec<&str> = version.overrides.iter().map(|o| o.rule.as_str()).collect();
            // Every rule the acceptance path itself saw broken is overridden and recorded.
            for v in &screened.overridden {
                prop_assert!(recorded.contains(&v.rule.as_str()), "{v} not recorded");
            }
            text = screened.text;
            accepted.push(Recorded { at: now, control: version });
        }
        // Each version in a breach of an assertion: the breach began with a recorded override.
        for rule in rules {
            let mut breach_began_with_override = false;
            for (i, version) in accepted.iter().enumerate() {
                if !breaks(rule, &version.control) {
                    breach_began_with_override = false;
                    continue;
                }
                let overridden_here = version.control.overrides.iter().any(|o| o.rule == rule.id);
                let began_here = i == 0 || !breaks(rule, &accepted[i - 1].control);
                if began_here {
                    breach_began_with_override = overridden_here;
                }
                prop_assert!(
                    i > 0 && (breach_began_with_override || overridden_here),
                    "version {i} breaks {} without a recorded override", rule.id
                );
            }
        }
        // A gated knob changed only while the gate was armed before, or with an override; a
        // drain changed within 30 s of the last one only with an override.
        let mut last_drain_change = None;
        for pair in accepted.windows(2) {
            let (a, b) = (&pair[0].control, &pair[1].control);
            let recorded = |id: &str| b.overrides.iter().any(|o| o.rule == id);
            if a.profiles.get("warm") != b.profiles.get("warm") {
                let armed = a.gates.get("break-glass").map(String::as_str) == Some("armed");
                prop_assert!(armed || recorded("warm-gated"), "warm changed with the gate closed");
            }
            let drains = |c: &ControlFile| -> Vec<bool> {
                REGIONS.iter().map(|r| c.regions.get(*r).is_some_and(|k| k.drain)).collect()
            };
            if drains(a) != drains(b) {
                if let Some(last) = last_drain_change {
                    let since = pair[1].at.duration_since(last).unwrap_or_default();
                    prop_assert!(
                        since >= Duration::from_secs(30) || recorded("drain-calm"),
                        "drains changed {since:?} after the last change without an override"
                    );
                }
                last_drain_change = Some(pair[1].at);
            }
        }
    }
}
