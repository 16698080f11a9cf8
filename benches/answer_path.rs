//! The answer path, query bytes to response bytes (`steerdns::answer::respond`), on a
//! snapshot built from the bundled example (`steerdns.toml`, `zones/`, `geoip/example.mmdb`):
//! no sockets, so a regression in parsing, lookup, steering or writing shows up here without
//! the whole harness (`benches/harness.sh`).
//!
//!   cargo bench --bench answer_path
//!
//! With `ANSWER_PATH_REPEAT=N` the bench skips criterion and answers each case (or only the
//! one `ANSWER_PATH_CASE` names) N times in `repeat_case`, for counting instructions per
//! answer under `valgrind --tool=callgrind`: `benches/callgrind.sh` runs one case per valgrind
//! run and divides `repeat_case`'s inclusive instructions by N.
//!
//! Cases: a precompiled static answer (with and without EDNS), a geo profile (gw.example.com
//! with ECS), a weighted profile (warm.example.com with ECS: a CNAME into the anycast zone; and
//! wt.example.com, 90/10 addresses, no EDNS, like the harness's `wt`), the anycast policy
//! through a wildcard unshed and with a partial shed active (eu-west shedding ~30% through the
//! shield's published view, for a subnet that is shed), the same shed at an exact name
//! (cdn.example.com, like the harness's `cdn`), NXDOMAIN, and an answer too big for UDP (TC).
//! Both zones are signed (fresh CSKs in a temporary key directory): the `_do` cases are the
//! same questions with DO set, answered with their RRSIGs (and NSECs) — the DO=1 against DO=0
//! comparison of issue 18 without sockets.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use steerdns::answer::respond;
use steerdns::config::Config;
use steerdns::dns::wire::{Requester, Transport, MAX_MESSAGE};
use steerdns::rfc3339;
use steerdns::shield::live::Shield;
use steerdns::shield::source::{FeedOrigin, LoadSource};
use steerdns::snapshot::Snapshot;

const TYPE_A: u16 = 1;
const TYPE_TXT: u16 = 16;
const EDNS_PAYLOAD: u16 = 1232;

/// A query in wire format: id 0x1234, RD, one question, optionally an OPT record carrying an
/// EDNS Client Subnet option for `ecs` (IPv4, source prefix 24).
fn query(name: &str, qtype: u16, edns: bool, ecs: Option<Ipv4Addr>) -> Vec<u8> {
    query_do(name, qtype, edns, ecs, false)
}

/// [`query`] with the DO bit (`dnssec`) set in its OPT record.
fn query_do(name: &str, qtype: u16, edns: bool, ecs: Option<Ipv4Addr>, dnssec: bool) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, u8::from(edns)];
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&1u16.to_be_bytes());
    if edns {
        q.push(0); // root owner
        q.extend_from_slice(&41u16.to_be_bytes()); // OPT
        q.extend_from_slice(&EDNS_PAYLOAD.to_be_bytes());
        // Extended rcode, version, flags (DO is the top bit).
        q.extend_from_slice(&[0, 0, if dnssec { 0x80 } else { 0 }, 0]);
        let option: Vec<u8> = match ecs {
            Some(addr) => {
                let mut o = vec![0, 8, 0, 7, 0, 1, 24, 0];
                o.extend_from_slice(&addr.octets()[..3]);
                o
            }
            None => Vec::new(),
        };
        q.extend_from_slice(&(option.len() as u16).to_be_bytes());
        q.extend_from_slice(&option);
    }
    q
}

/// [`query`] (with EDNS) carrying a COOKIE option (RFC 7873) after its other options.
fn query_with_cookie(name: &str, ecs: Option<Ipv4Addr>, cookie: &[u8]) -> Vec<u8> {
    let mut q = query(name, TYPE_A, true, ecs);
    let name_len: usize = name
        .trim_end_matches('.')
        .split('.')
        .map(|l| l.len() + 1)
        .sum::<usize>()
        + 1;
    // Header, question, then OPT's owner, type, class and TTL: its RDATA length follows.
    let rdlen_at = 12 + name_len + 4 + 1 + 2 + 2 + 4;
    let rdlen = u16::from_be_bytes([q[rdlen_at], q[rdlen_at + 1]]) as usize + 4 + cookie.len();
    q[rdlen_at..rdlen_at + 2].copy_from_slice(&(rdlen as u16).to_be_bytes());
    q.extend_from_slice(&10u16.to_be_bytes());
    q.extend_from_slice(&(cookie.len() as u16).to_be_bytes());
    q.extend_from_slice(cookie);
    q
}

/// A client cookie, and with it a server cookie the snapshot's secret made for `client` now.
fn valid_cookie(snapshot: &Snapshot, client: &Requester) -> Vec<u8> {
    let client_cookie = *b"benchcli";
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as u32;
    let secrets = &snapshot
        .options()
        .cookies
        .as_ref()
        .expect("cookies on")
        .secrets;
    let server = secrets.issue(&client_cookie, client.addr, now);
    [&client_cookie[..], &server[..]].concat()
}

/// Steered names shaped like the harness's workloads (`benches/harness.sh`): exact names
/// answered with addresses — a 90/10 weighted profile and an anycast name.
const HARNESS_SHAPED: &str = r#"
[profiles.wt]
type = "weighted"
ttl = 60
endpoints = [
  { name = "a", addresses = ["192.0.2.100"], weight = 90, always_serve = true },
  { name = "b", addresses = ["192.0.2.101"], weight = 10, always_serve = true },
]

[[steered]]
name = "wt.example.com."
profile = "wt"

[[steered]]
name = "cdn.example.com."
policy = "anycast"
ttl = 300
"#;

/// The bundled example plus [`HARNESS_SHAPED`], with its relative paths made absolute and no
/// control file (the bench must not depend on the working directory or the live knobs).
fn load_example() -> Snapshot {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("steerdns.toml");
    let mut text = std::fs::read_to_string(&path).expect("bundled steerdns.toml");
    for (relative, absolute) in [
        ("\"zones\"", root.join("zones")),
        ("\"geoip/example.mmdb\"", root.join("geoip/example.mmdb")),
    ] {
        text = text.replace(relative, &format!("{:?}", absolute.display().to_string()));
    }
    text = text.replace("file = \"control.toml\"", "");
    text.push_str(HARNESS_SHAPED);
    text.push_str(&signed_section());
    let config =
        Config::parse(&text, &path).unwrap_or_else(|e| panic!("bundled steerdns.toml: {e}"));
    match steerdns::snapshot::load::load(&config) {
        Ok(loaded) => Snapshot::standalone(loaded.compiled),
        Err(problems) => panic!("bundled example does not load: {problems:?}"),
    }
}

/// `[dnssec]` signing both example zones with fresh ECDSA P-256 CSKs in a temporary key
/// directory, so that the DO cases answer with their RRSIGs and denial records.
fn signed_section() -> String {
    use steerdns::dnssec::keys::{generate, Timing};
    use steerdns::dnssec::{Algorithm, Role};
    let dir = std::env::temp_dir().join(format!("steerdns-bench-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let zones = ["example.com.", "edge.example.net."];
    for zone in zones {
        let csk = Role::Csk;
        generate(
            &dir,
            zone,
            Algorithm::EcdsaP256Sha256,
            csk,
            Timing::default(),
        )
        .expect("keygen");
    }
    format!(
        "\n[dnssec]\nkeys = {:?}\nzones = {zones:?}\n",
        dir.display().to_string()
    )
}

/// Makes eu-west hot through the shield's own path (a feed, then decision ticks that publish
/// the view the serving path reads) until it sheds at least 28% of its client subnets.
fn shed_eu_west(snapshot: &Snapshot) -> f64 {
    let shield: &Shield = snapshot.shield();
    let policies = snapshot.policies().expect("the example steers names");
    let known = steerdns::shield::live::KnownNames::of(policies);
    let regions = &known.regions;
    let start = SystemTime::now();
    let feed = format!(
        r#"{{"time": "{}", "regions": {{"eu-west": {{"load": 900, "capacity": 1000}},
            "eu-north": {{"load": 100, "capacity": 600}}, "na-east": {{"load": 100, "capacity": 1000}}}},
            "fallback": {{"fb-eu": {{"load": 100, "capacity": 2000}}}}}}"#,
        rfc3339::format_utc(start)
    );
    shield
        .feed
        .offer(
            feed.as_bytes(),
            FeedOrigin::Other("bench".into()),
            &known.names(),
            start,
        )
        .expect("the bench's load feed is valid");
    let eu_west = regions
        .iter()
        .position(|r| *r == "eu-west")
        .expect("eu-west");
    let mut sources: Vec<Box<dyn LoadSource>> = Vec::new();
    for tick in 1..=60u64 {
        let now = start + Duration::from_secs(tick);
        shield.tick(snapshot.shield_inputs(), &mut sources, now, tick * 1000);
        let fraction = shield.status().regions[eu_west].shed_fraction;
        if fraction >= 0.28 {
            return fraction;
        }
    }
    panic!("eu-west never shed 28% of its clients");
}

fn answer(snapshot: &Snapshot, packet: &[u8], client: &Requester) -> Vec<u8> {
    let mut out = vec![0u8; MAX_MESSAGE];
    let len = respond(snapshot, packet, client, &mut out).expect("an answer");
    out.truncate(len);
    out
}

/// The global anycast address as it appears in an A record: RDLENGTH 4, then 192.0.2.1.
const GLOBAL_A_RDATA: [u8; 6] = [0, 4, 192, 0, 2, 1];

/// The first eu-west /24 (RIPE space, 5.0.N.0/24, continent EU) whose anycast answer is not the
/// global address: a subnet the shield sends elsewhere.
fn shed_subnet(snapshot: &Snapshot, client: &Requester) -> Ipv4Addr {
    (0..=255u8)
        .map(|n| Ipv4Addr::new(5, 0, n, 0))
        .find(|&subnet| {
            let packet = query("contoso.edge.example.net", TYPE_A, true, Some(subnet));
            let out = answer(snapshot, &packet, client);
            !out.windows(GLOBAL_A_RDATA.len())
                .any(|w| w == GLOBAL_A_RDATA)
        })
        .expect("some eu-west subnet is shed")
}

fn bench_answer_path(c: &mut Criterion) {
    let snapshot = load_example();
    let client = Requester::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 77)), Transport::Udp);
    let eu = Some(Ipv4Addr::new(81, 2, 69, 0)); // GB -> eu-west

    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "static_precompiled",
            query("mail.example.com", TYPE_A, false, None),
        ),
        (
            "static_precompiled_edns",
            query("mail.example.com", TYPE_A, true, None),
        ),
        (
            "static_precompiled_do",
            query_do("mail.example.com", TYPE_A, true, None, true),
        ),
        ("geo_gw_ecs", query("gw.example.com", TYPE_A, true, eu)),
        (
            "geo_gw_ecs_do",
            query_do("gw.example.com", TYPE_A, true, eu, true),
        ),
        (
            "weighted_addresses_no_edns",
            query("wt.example.com", TYPE_A, false, None),
        ),
        (
            "weighted_warm_ecs",
            query(
                "warm.example.com",
                TYPE_A,
                true,
                Some(Ipv4Addr::new(8, 8, 8, 0)),
            ),
        ),
        (
            "anycast_unshed_ecs",
            query("contoso.edge.example.net", TYPE_A, true, eu),
        ),
        (
            "anycast_unshed_ecs_do",
            query_do("contoso.edge.example.net", TYPE_A, true, eu, true),
        ),
        (
            "anycast_exact_ecs",
            query("cdn.example.com", TYPE_A, true, eu),
        ),
        (
            "anycast_exact_ecs_do",
            query_do("cdn.example.com", TYPE_A, true, eu, true),
        ),
        ("nxdomain", query("nope.example.com", TYPE_A, true, None)),
        (
            "nxdomain_do",
            query_do("nope.example.com", TYPE_A, true, None, true),
        ),
        (
            "truncated_tc",
            query("big.example.com", TYPE_TXT, false, None),
        ),
    ];
    let fraction = shed_eu_west(&snapshot);
    let subnet = shed_subnet(&snapshot, &client);
    eprintln!(
        "eu-west sheds {:.0}% of its subnets; the shed case asks for {subnet}/24",
        fraction * 100.0
    );
    cases.push((
        "anycast_shed_active_ecs",
        query("contoso.edge.example.net", TYPE_A, true, Some(subnet)),
    ));
    cases.push((
        "anycast_exact_shed_active_ecs",
        query("cdn.example.com", TYPE_A, true, Some(subnet)),
    ));
    // DNS Cookies: a client that has not learnt ours yet (one hash: a fresh server cookie), and
    // one that sends a valid one back (one hash: verified, echoed while young).
    let cookie = valid_cookie(&snapshot, &client);
    cases.push((
        "static_precompiled_cookie_new",
        query_with_cookie("mail.example.com", None, &cookie[..8]),
    ));
    cases.push((
        "static_precompiled_cookie_valid",
        query_with_cookie("mail.example.com", None, &cookie),
    ));
    cases.push((
        "anycast_exact_ecs_cookie_valid",
        query_with_cookie("cdn.example.com", eu, &cookie),
    ));

    // A valid cookie is verified and echoed (our OPT ends with it).
    for (name, packet) in &cases {
        if name.ends_with("_cookie_valid") {
            let out = answer(&snapshot, packet, &client);
            assert!(out.ends_with(&cookie), "{name}: the cookie echoed");
        }
    }
    // Each case must answer what its name says, or the figures would measure something else.
    for (name, packet) in &cases {
        let out = answer(&snapshot, packet, &client);
        let (rcode, truncated, answers) = (out[3] & 0x0F, out[2] & 0x02 != 0, out[7]);
        let expected = match name.trim_end_matches("_do") {
            "nxdomain" => rcode == 3 && answers == 0,
            "truncated_tc" => truncated && answers == 0,
            _ => rcode == 0 && !truncated && answers > 0,
        };
        assert!(
            expected,
            "{name}: rcode {rcode}, TC {truncated}, {answers} answers"
        );
        // A DO case carries its signatures: longer than the same answer without DO.
        if let Some(plain) = name.strip_suffix("_do") {
            let base = cases
                .iter()
                .find(|(n, _)| *n == plain || *n == format!("{plain}_edns"))
                .map(|(_, p)| answer(&snapshot, p, &client).len());
            assert!(
                base.is_some_and(|len| out.len() > len),
                "{name}: {} bytes, without DO {base:?}",
                out.len()
            );
        }
        eprintln!(
            "{name}: {} query bytes -> {} response bytes, rcode {rcode}, {answers} answer records",
            packet.len(),
            out.len()
        );
    }
    if let Some(n) = std::env::var("ANSWER_PATH_REPEAT")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    {
        let only = std::env::var("ANSWER_PATH_CASE").ok();
        let mut out = vec![0u8; MAX_MESSAGE];
        for (name, packet) in &cases {
            if only.as_deref().is_none_or(|only| only == *name) {
                eprintln!("repeat_case {name}");
                repeat_case(&snapshot, packet, &client, &mut out, n);
            }
        }
        return;
    }
    let mut group = c.benchmark_group("answer_path");
    group.throughput(Throughput::Elements(1));
    for (name, packet) in &cases {
        let mut out = vec![0u8; MAX_MESSAGE];
        group.bench_function(*name, |b| {
            b.iter(|| respond(black_box(&snapshot), black_box(packet), &client, &mut out))
        });
    }
    group.finish();
}

/// Answers `packet` `n` times (callgrind counts this function's inclusive instructions).
#[inline(never)]
fn repeat_case(snapshot: &Snapshot, packet: &[u8], client: &Requester, out: &mut [u8], n: u64) {
    for _ in 0..n {
        black_box(respond(black_box(snapshot), black_box(packet), client, out));
    }
}

criterion_group!(benches, bench_answer_path);
criterion_main!(benches);
