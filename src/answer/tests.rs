//! The per-packet path over the bundled example, without sockets: every kind of answer, and
//! the promise that answering allocates nothing.

use std::net::IpAddr;
use std::path::Path;

use super::{respond, respond_summarised};
use crate::config::Config;
use crate::dns::sent::Sent;
use crate::dns::wire::{Requester, Transport};
use crate::rrl::Class;
use crate::snapshot::load::load;
use crate::snapshot::Snapshot;
use crate::test_alloc::allocations;

fn bundled_config() -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("steerdns.toml");
    match Config::load(&path) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// `config` loaded and served on its own.
fn serve(config: &Config) -> Snapshot {
    match load(config) {
        Ok(loaded) => Snapshot::standalone(loaded.compiled),
        Err(problems) => panic!("{problems:?}"),
    }
}

/// A query for `name`/`qtype` with EDNS and, if given, an ECS option.
fn query(id: u16, name: &str, qtype: u16, ecs: Option<(IpAddr, u8)>) -> Vec<u8> {
    let mut p = id.to_be_bytes().to_vec();
    p.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1]);
    for label in name.trim_end_matches('.').split('.') {
        p.push(label.len() as u8);
        p.extend_from_slice(label.as_bytes());
    }
    p.push(0);
    p.extend_from_slice(&qtype.to_be_bytes());
    p.extend_from_slice(&1u16.to_be_bytes());
    let mut options = Vec::new();
    if let Some((addr, prefix)) = ecs {
        let (family, octets): (u16, Vec<u8>) = match addr {
            IpAddr::V4(a) => (1, a.octets().to_vec()),
            IpAddr::V6(a) => (2, a.octets().to_vec()),
        };
        let len = (prefix as usize).div_ceil(8);
        options.extend_from_slice(&8u16.to_be_bytes());
        options.extend_from_slice(&((4 + len) as u16).to_be_bytes());
        options.extend_from_slice(&family.to_be_bytes());
        options.extend_from_slice(&[prefix, 0]);
        options.extend_from_slice(&octets[..len]);
    }
    p.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0]);
    p.extend_from_slice(&(options.len() as u16).to_be_bytes());
    p.extend_from_slice(&options);
    p
}

/// The bundled snapshot with response rate limiting on: `rate` per second, slip 2.
fn rate_limited(rate: u32) -> Snapshot {
    let mut config = bundled_config();
    config.rrl = crate::config::rrl::RrlConfig {
        enabled: true,
        responses_per_second: rate,
        slip: 2,
        ..crate::config::rrl::RrlConfig::default()
    };
    let snapshot = serve(&config);
    assert!(snapshot.rrl().is_some());
    snapshot
}

#[test]
fn answering_allocates_nothing() {
    // Rate limiting is on the path (with a rate nothing here reaches).
    let snapshot = rate_limited(1_000_000);
    let names = [
        ("www.example.com", 1),           // CNAME into a steered wildcard
        ("example.com", 6),               // precompiled static
        ("nope.example.com", 1),          // NXDOMAIN
        ("x.sub.example.com", 1),         // referral
        ("foo.wild.example.com", 1),      // wildcard
        ("critical.example.com", 1),      // weighted, one servable endpoint
        ("warm.example.com", 1),          // weighted 90/10
        ("gw.example.com", 1),            // geo
        ("gw.example.com", 28),           // geo, AAAA NODATA
        ("contoso.edge.example.net", 28), // anycast AAAA
        ("big.example.com", 16),          // truncated
        ("example.org", 1),               // REFUSED
    ];
    let clients: Vec<Option<(IpAddr, u8)>> = vec![
        None,
        Some((
            "81.2.69.0".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            24,
        )),
        Some(("2001:218::".parse().unwrap_or(IpAddr::from([0u16; 8])), 32)),
        Some(("8.8.8.0".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), 24)),
    ];
    let packets: Vec<Vec<u8>> = names
        .iter()
        .flat_map(|(name, qtype)| clients.iter().map(move |c| query(7, name, *qtype, *c)))
        .collect();
    let client = Requester::new(IpAddr::from([127, 0, 0, 1]), Transport::Udp);
    let mut out = vec![0u8; 4096];
    // Warm-up: arc-swap registers this thread once, on its first load (not per query).
    for packet in &packets {
        let _ = respond(&snapshot, packet, &client, &mut out);
    }
    let before = allocations();
    let mut answered = 0;
    for _ in 0..50 {
        for packet in &packets {
            answered += usize::from(respond(&snapshot, packet, &client, &mut out).is_some());
        }
    }
    assert_eq!(allocations() - before, 0, "the answer path allocated");
    assert_eq!(answered, 50 * packets.len());
    // Limited responses (dropped, or slipped: cut to a truncated header and question) do not
    // allocate either.
    let limited = rate_limited(1);
    let (mut sent, mut slipped) = (0, 0);
    for packet in &packets {
        let _ = respond(&limited, packet, &client, &mut out);
    }
    let before = allocations();
    for packet in packets.iter().cycle().take(20 * packets.len()) {
        if let Some(n) = respond(&limited, packet, &client, &mut out) {
            sent += 1;
            slipped += usize::from(out[2] & 0x02 != 0 && out[6..12] == [0; 6] && n < packet.len());
        }
    }
    assert_eq!(allocations() - before, 0, "the rate-limited path allocated");
    assert!(
        slipped > 0 && sent < 20 * packets.len(),
        "{sent} sent, {slipped} slipped"
    );
    // The counter does see allocations: a CHAOS trace (an operator's aid) allocates.
    let mut trace = query(8, "gw.example.com", 16, clients[1]);
    let qclass_at = 12 + "gw.example.com".len() + 2 + 2;
    trace[qclass_at..qclass_at + 2].copy_from_slice(&3u16.to_be_bytes());
    assert!(respond(&snapshot, &trace, &client, &mut out).is_some());
    assert!(allocations() > before, "the counting allocator saw nothing");
}

/// Every counter series of `snapshot` with its value, for comparing two snapshots' counts.
fn counter_series(snapshot: &Snapshot) -> Vec<String> {
    let mut all = Vec::new();
    snapshot
        .counters()
        .each_series(|series, value| all.push(format!("{series:?}={value}")));
    all
}

/// The bundled config's path and text, with absolute paths (zones from `zones`), no admin
/// token and no control file, so that it loads from any working directory.
fn bundled_text(zones: &Path) -> (std::path::PathBuf, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("steerdns.toml");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => panic!("{}: {e}", path.display()),
    };
    let text = text
        .replace(
            "zones = \"zones\"",
            &format!("zones = {:?}", zones.display().to_string()),
        )
        .replace(
            "database = \"geoip/example.mmdb\"",
            &format!(
                "database = {:?}",
                root.join("geoip/example.mmdb").display().to_string()
            ),
        )
        .replace("token_file = \"admin.token\"\n", "")
        .replace("[control]\nfile = \"control.toml\"\n", "");
    (path, text)
}

/// The bundled example plus steered names the fast path serves (exact names with address
/// answers: weighted, anycast, a two-address geo profile), with absolute paths and no control
/// file, so that it loads from any working directory.
fn bundled_with_address_names() -> Snapshot {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (path, text) = bundled_text(&root.join("zones"));
    let extra = r#"
[profiles.split]
type = "weighted"
ttl = 45

[[profiles.split.endpoints]]
name = "a"
addresses = ["192.0.2.100", "192.0.2.102", "2001:db8::100"]
weight = 90

[[profiles.split.endpoints]]
name = "b"
addresses = ["192.0.2.101"]
weight = 10

[[steered]]
name = "split.example.com."
profile = "split"

[[steered]]
name = "cdn.example.com."
policy = "anycast"
ttl = 120
"#;
    let config = match Config::parse(&format!("{text}{extra}"), &path) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    serve(&config)
}

/// The same query through the fast path and through the general lookup (a snapshot without
/// precompiled entries) gives the same bytes and counts the same: names, letter case, ECS
/// (IPv4, IPv6, IPv4-mapped, source prefix 0), no EDNS at all, A and AAAA, and the decisions
/// the fast path hands back (CNAME, NODATA, wildcards).
#[test]
fn steered_fast_path_answers_and_counts_like_the_general_path() {
    use crate::dns::wire::{rtype, WireName};
    use crate::snapshot::FastPathEntry;
    let fast = bundled_with_address_names();
    let general = bundled_with_address_names().without_precompiled();
    let parsed = |name: &str| {
        let wire = query(1, name, rtype::A, None);
        match WireName::parse_uncompressed(&wire, 12) {
            Some((qname, _)) => qname,
            None => panic!("{name}: no name"),
        }
    };
    let on_fast_path = |name: &str, qtype: u16| {
        let qname = parsed(name);
        matches!(
            fast.fast_path(&qname, qtype, false),
            Some((
                _,
                FastPathEntry::Steered(_) | FastPathEntry::SteeredWildcard(_)
            ))
        )
    };
    for (name, expected) in [
        ("split.example.com", true),
        ("cdn.example.com", true),
        ("gw.example.com", true),
        // A customer hostname under the steered wildcard *.edge.example.net ...
        ("contoso.edge.example.net", true),
        // ... but not an existing name there, nor one two labels down.
        ("ns1.edge.example.net", false),
        ("a.b.edge.example.net", false),
        // Policies that may answer with a CNAME need the general lookup.
        ("critical.example.com", false),
        ("warm.example.com", false),
    ] {
        for qtype in [rtype::A, rtype::AAAA] {
            assert_eq!(on_fast_path(name, qtype), expected, "{name}/{qtype}");
        }
    }
    // The wildcard's own check, whatever the static table holds: an existing name is never
    // answered by the wildcard.
    let ns1 = parsed("ns1.edge.example.net");
    assert!(fast
        .compiled()
        .precompiled()
        .wildcard(fast.zones(), &ns1, rtype::A)
        .is_none());
    let ip = |s: &str| s.parse::<IpAddr>().unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let clients = [
        None,
        Some((ip("81.2.69.0"), 24)),
        Some((ip("5.0.7.0"), 24)),
        Some((ip("8.8.8.0"), 24)),
        Some((ip("2001:218::"), 32)),
        Some((ip("::ffff:81.2.69.0"), 120)),
        Some((ip("81.2.69.0"), 0)),
    ];
    let names = [
        "split.example.com",
        "SpLiT.ExAmPlE.CoM",
        "cdn.example.com",
        "CDN.example.COM",
        "gw.example.com",
        "critical.example.com",
        "warm.example.com",
        "contoso.edge.example.net",
        "CoNtOsO.EdGe.example.net",
        "ns1.edge.example.net",
        "a.b.edge.example.net",
    ];
    let sources = [ip("127.0.0.1"), ip("192.0.2.77"), ip("::1")];
    let mut compared = 0;
    for name in names {
        for qtype in [rtype::A, rtype::AAAA] {
            for ecs in &clients {
                for source in sources {
                    let client = Requester::new(source, Transport::Udp);
                    let mut with_edns = query(0x4242, name, qtype, *ecs);
                    let mut packets = vec![with_edns.clone()];
                    if ecs.is_none() {
                        // The same question without an OPT record.
                        with_edns[11] = 0;
                        with_edns.truncate(with_edns.len() - 11);
                        packets.push(with_edns);
                    }
                    for packet in packets {
                        let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
                        let na = respond(&fast, &packet, &client, &mut a);
                        let nb = respond(&general, &packet, &client, &mut b);
                        assert_eq!(
                            na.map(|n| &a[..n]),
                            nb.map(|n| &b[..n]),
                            "{name}/{qtype} ecs {ecs:?} from {source}"
                        );
                        compared += 1;
                    }
                }
            }
        }
    }
    assert!(compared > 300, "{compared}");
    assert_eq!(
        counter_series(&fast),
        counter_series(&general),
        "counters differ"
    );
    let demand = |s: &Snapshot| s.steering().map(|d| format!("{:?}", d.demand.take()));
    let fast_demand = demand(&fast);
    assert!(
        fast_demand.as_ref().is_some_and(|d| d.contains("kept: ")),
        "{fast_demand:?}"
    );
    assert_eq!(fast_demand, demand(&general), "shield demand differs");
}

/// The bundled example with both zones signed (fresh ECDSA P-256 CSKs) using `denial` (`nsec`
/// or `nsec3`), in a fresh directory holding the keys and a copy of the zones in which the
/// edge zone has one more name two labels below its wildcard's parent (`x.deep`), so that a
/// proof's owner can share less with the question than the parent.
fn signed_bundled(denial: &str) -> Config {
    use crate::dnssec::keys::{generate, Timing};
    use crate::dnssec::{Algorithm, Role};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!(
        "steerdns-signed-wildcard-{denial}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let zones = dir.join("zones");
    if let Err(e) = std::fs::create_dir_all(&zones) {
        panic!("{}: {e}", zones.display());
    }
    for file in ["example.com.zone", "edge.example.net.zone"] {
        let text = match std::fs::read_to_string(root.join("zones").join(file)) {
            Ok(t) => t,
            Err(e) => panic!("{file}: {e}"),
        };
        let extra = if file.starts_with("edge") {
            "x.deep IN A 192.0.2.9\n"
        } else {
            ""
        };
        if let Err(e) = std::fs::write(zones.join(file), format!("{text}{extra}")) {
            panic!("{file}: {e}");
        }
    }
    let apexes = ["example.com.", "edge.example.net."];
    for zone in apexes {
        let key = generate(
            &dir.join("keys"),
            zone,
            Algorithm::EcdsaP256Sha256,
            Role::Csk,
            Timing::default(),
        );
        if let Err(e) = key {
            panic!("keygen {zone}: {e}");
        }
    }
    let (path, text) = bundled_text(&zones);
    let dnssec = format!(
        "\n[dnssec]\nkeys = {:?}\nzones = {apexes:?}\ndenial = {denial:?}\n",
        dir.join("keys").display().to_string()
    );
    match Config::parse(&format!("{text}{dnssec}"), &path) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

/// A DO query for a customer name under the signed steered wildcard is answered on the fast
/// path, with the wildcard's signature and the proof that the name itself does not exist,
/// in the very bytes the general lookup writes (and counted the same): for NSEC and NSEC3,
/// for names whose proof is owned by the apex (the question's own suffix), by the wildcard,
/// by names beside and below it, in any letter case, with and without ECS, A and AAAA; and
/// allocating nothing.
#[test]
fn signed_wildcard_fast_path_answers_like_the_general_path() {
    use crate::dns::wire::{rtype, WireName};
    use crate::snapshot::FastPathEntry;
    for denial in ["nsec", "nsec3"] {
        // Signing is deterministic: both builds serve the same signatures.
        let config = signed_bundled(denial);
        let fast = serve(&config);
        let general = serve(&config).without_precompiled();
        let names = [
            "contoso.edge.example.net",
            "CoNtOsO.EdGe.example.net",
            "!.edge.example.net",
            "a.edge.example.net",
            "deeq.edge.example.net",
            "m.edge.example.net",
            "ns1a.edge.example.net",
            "zz.edge.example.net",
            "customer-42.edge.example.net",
        ];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let clients = [None, Some((ip("81.2.69.0"), 24)), Some((ip("8.8.8.0"), 24))];
        let client = Requester::new(ip("192.0.2.77"), Transport::Udp);
        // Warm-up: arc-swap registers this thread once, on its first load (not per query).
        // Both answer it, so that their counters stay comparable.
        for snapshot in [&fast, &general] {
            let _ = respond(
                snapshot,
                &query(1, names[0], rtype::A, None),
                &client,
                &mut [0; 512],
            );
        }
        let mut proofs = 0;
        for name in names {
            let wire = query(1, name, rtype::A, None);
            let Some((qname, _)) = WireName::parse_uncompressed(&wire, 12) else {
                panic!("{name}: no name");
            };
            assert!(
                matches!(
                    fast.fast_path(&qname, rtype::A, true),
                    Some((_, FastPathEntry::SteeredWildcard(_)))
                ),
                "{denial} {name}: not on the fast path"
            );
            for qtype in [rtype::A, rtype::AAAA] {
                for ecs in &clients {
                    let mut packet = query(0x4242, name, qtype, *ecs);
                    set_do(&mut packet);
                    let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 4096]);
                    let before = allocations();
                    let na = respond(&fast, &packet, &client, &mut a);
                    assert_eq!(allocations(), before, "{denial} {name}: allocated");
                    let nb = respond(&general, &packet, &client, &mut b);
                    let (fast_answer, general_answer) = (na.map(|n| &a[..n]), nb.map(|n| &b[..n]));
                    assert_eq!(
                        fast_answer, general_answer,
                        "{denial} {name}/{qtype} {ecs:?}"
                    );
                    // Answers with their RRSIG, and the proof with its RRSIG in authority.
                    let answer = fast_answer.unwrap_or_default();
                    let count = |at: usize| u16::from_be_bytes([answer[at], answer[at + 1]]);
                    assert!(
                        count(6) >= 2 && count(8) == 2,
                        "{denial} {name}: {answer:?}"
                    );
                    proofs += 1;
                }
            }
        }
        assert_eq!(proofs, names.len() * 2 * clients.len());
        assert_eq!(
            counter_series(&fast),
            counter_series(&general),
            "{denial}: counters differ"
        );
    }
}

/// Sets the DO bit in the OPT record that follows the question of a [`query`].
fn set_do(packet: &mut [u8]) {
    let mut at = 12;
    while packet[at] != 0 {
        at += 1 + usize::from(packet[at]);
    }
    // Root, type and class end the question; then OPT's root owner, type, payload size,
    // extended rcode and version, and the flags, DO their top bit.
    let flags_at = at + 5 + 7;
    packet[flags_at] |= 0x80;
}

/// What the header of a response in `out[..sent.len]` says, as a [`Sent`] would (the old way
/// of knowing it: reading the bytes back); `badvers`: the query asked for EDNS version 1.
fn read_back(out: &[u8], sent: &Sent, badvers: bool) -> Sent {
    let mut read = Sent::of_precompiled(out, sent.len);
    if badvers {
        read.rcode = crate::dns::wire::rcode::BADVERS;
    }
    read
}

#[test]
fn what_is_sent_is_summarised_as_its_bytes_say() {
    let names = [
        ("www.example.com", 1),
        ("example.com", 6),
        ("example.com", 2),
        ("nope.example.com", 1),
        ("x.sub.example.com", 1),
        ("foo.wild.example.com", 1),
        ("critical.example.com", 1),
        ("warm.example.com", 1),
        ("gw.example.com", 1),
        ("gw.example.com", 28),
        ("contoso.edge.example.net", 1),
        ("contoso.edge.example.net", 28),
        ("big.example.com", 16),
        ("example.org", 1),
        ("example.com", 41),  // qtype OPT: FORMERR
        ("example.com", 251), // IXFR over UDP
        ("example.com", 253), // MAILB: NOTIMP
    ];
    let mut packets: Vec<Vec<u8>> = names
        .iter()
        .flat_map(|(name, qtype)| {
            [None, Some((IpAddr::from([81, 2, 69, 0]), 24))]
                .into_iter()
                .map(move |c| query(9, name, *qtype, c))
        })
        .collect();
    // EDNS version 1 (the OPT record's TTL: extended rcode, version, flags): BADVERS.
    let mut badvers = query(10, "example.com", 1, None);
    let at = badvers.len() - 5;
    badvers[at] = 1;
    packets.push(badvers);
    let client = Requester::new(IpAddr::from([127, 0, 0, 1]), Transport::Udp);
    let mut out = vec![0u8; 4096];
    let mut classes = std::collections::BTreeSet::new();
    let (mut truncated, mut slipped) = (0, 0);
    for (limited, snapshot) in [(false, serve(&bundled_config())), (true, rate_limited(1))] {
        for packet in packets.iter().cycle().take(3 * packets.len()) {
            let Some(sent) = respond_summarised(&snapshot, packet, &client, &mut out) else {
                continue;
            };
            let badvers = packet[..2] == [0, 10];
            assert_eq!(sent, read_back(&out, &sent, badvers), "{packet:?}");
            if !limited {
                assert_eq!(
                    respond(&snapshot, packet, &client, &mut out),
                    Some(sent.len)
                );
            }
            classes.insert(format!("{:?}", Class::of(&sent)));
            truncated += usize::from(sent.truncated);
            slipped += usize::from(sent.truncated && !sent.answers && sent.len < packet.len());
        }
    }
    // Every class, a truncated answer and rate-limiter slips were among them.
    assert_eq!(classes.len(), 5, "{classes:?}");
    assert!(
        truncated > 0 && slipped > 0,
        "{truncated} truncated, {slipped} slipped"
    );
}
