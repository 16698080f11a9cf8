//! The traffic shield end to end, with the real binary on loopback: load feeds pushed over HTTP
//! (`steerdns load push` and a raw `POST /v1/load`) and through the watched load file, then
//! what many eu-west client subnets are answered (the share sent to a neighbour or fallback
//! site against the fraction the status shows, the short TTL, the ECS scope), relief back to
//! global anycast, refused feeds, and the control file's shield modes (`off`, `frozen`).
//!
//! With a static feed the shield's prediction counts its moves as landing over the short TTL,
//! so once they have partly landed (the feed still saying "overloaded") the fraction may rise
//! again. Every comparison is therefore made against the decision the status showed both just
//! before and just after the batch of queries (retried, bounded, until the two agree), and each
//! subnet's answer against its own hash bucket, read once from the `CH TXT` decision trace.

use crate::control_common;

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hickory_proto::op::Message;
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{RData, RecordType};
use serde_json::{json, Value};

use control_common::*;

const EDGE: &str = "contoso.edge.example.net.";
/// The `[shield] short_ttl` of the test config (not the default 30, so it is seen to apply).
const SHORT_TTL: u32 = 5;
/// The steered entry's TTL for `*.edge.example.net` in the bundled example.
const STEADY_TTL: u32 = 300;
/// Hold-down of the test config.
const HOLD_DOWN: Duration = Duration::from_secs(1);
/// The shield's tick of the test config, in milliseconds.
const TICK_MS: u64 = 100;
/// The most any wait on the server may take.
const WAIT: Duration = Duration::from_secs(10);
/// eu-west client /24s asked in each batch.
const SUBNETS: usize = 1200;

/// Small timings so that the whole file runs in seconds (the short TTL is [`SHORT_TTL`]); the
/// feed stays fresh for a minute.
fn shield_config() -> String {
    format!(
        "\n[shield]\ntick_ms = {TICK_MS}\nhold_down_secs = {}\nshort_ttl = {SHORT_TTL}\n\
         stale_after_secs = 60\nrevert_after_secs = 120\nload_file = \"load.json\"\n",
        HOLD_DOWN.as_secs()
    )
}

/// IPv4 anycast address of each shed destination of the bundled example, by status name.
fn destination_v4(name: &str) -> Ipv4Addr {
    match name {
        "na-east" => Ipv4Addr::new(198, 51, 100, 1),
        "na-west" => Ipv4Addr::new(198, 51, 100, 2),
        "sa-east" => Ipv4Addr::new(198, 51, 100, 3),
        "eu-west" => Ipv4Addr::new(198, 51, 100, 4),
        "eu-north" => Ipv4Addr::new(198, 51, 100, 5),
        "af-south" => Ipv4Addr::new(198, 51, 100, 6),
        "ap-east" => Ipv4Addr::new(198, 51, 100, 7),
        "ap-south" => Ipv4Addr::new(198, 51, 100, 8),
        "fb-na" => Ipv4Addr::new(203, 0, 113, 1),
        "fb-eu" => Ipv4Addr::new(203, 0, 113, 2),
        "fb-ap" => Ipv4Addr::new(203, 0, 113, 3),
        other => panic!("status names an unknown destination {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Setup and feeds

/// The bundled example in a temp dir with an admin token and the test's `[shield]` section.
fn shield_setup(label: &str) -> Setup {
    let setup = Setup::new(label);
    let mut config = std::fs::OpenOptions::new()
        .append(true)
        .open(&setup.config)
        .expect("open config copy");
    config
        .write_all(shield_config().as_bytes())
        .expect("append [shield]");
    setup
}

/// Starts the server and waits for the shield's first tick (before it, the status has no
/// shield regions yet).
fn start(setup: &Setup) -> Daemon {
    let daemon = setup.start();
    wait_for(&daemon, "the shield's first tick", |s| {
        s["shield"]["regions"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
    });
    daemon
}

/// A feed measured now: eu-west at `eu_west_load`/1000, eu-north 200/600, fb-eu 100/2000,
/// every other region and site at about half its capacity.
fn feed(eu_west_load: f64) -> String {
    feed_value(eu_west_load).to_string()
}

fn feed_value(eu_west_load: f64) -> Value {
    every_region_feed(eu_west_load, "shield-e2e test")
}

const OVERLOAD: f64 = 990.0;
const RELIEF: f64 = 500.0;

/// One HTTP/1.1 request with a body to the admin endpoint; returns (status code, body).
fn http_with_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let request = json_request(addr, method, path, token, body);
    let reply = exchange_http(addr, &request, WAIT)
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"));
    (reply.code, reply.body)
}

fn post_load(daemon: &Daemon, body: &str, token: Option<&str>) -> (u16, String) {
    http_with_body(daemon.admin, "POST", "/v1/load", token, body.as_bytes())
}

// ---------------------------------------------------------------------------------------------
// Status

/// The shield's decision for one region as the status shows it.
#[derive(Debug, Clone, PartialEq)]
struct Decision {
    /// The shed fraction as the serving path uses it (per mille, rounded like the view).
    permille: u16,
    fraction: f64,
    /// Destination names, in status order.
    destinations: Vec<String>,
    /// Each destination's share of the shed part (changes a little from tick to tick while
    /// in-flight moves land; only the names are compared for "the same decision").
    shares: Vec<f64>,
    hot: bool,
    state: String,
}

impl Decision {
    /// The same decision for the serving path (the fraction in per mille, not the float).
    fn same_as(&self, other: &Decision) -> bool {
        self.permille == other.permille
            && self.destinations == other.destinations
            && self.hot == other.hot
    }

    fn destination_addresses(&self) -> Vec<Ipv4Addr> {
        self.destinations
            .iter()
            .map(|d| destination_v4(d))
            .collect()
    }
}

fn region_status<'a>(status: &'a Value, region: &str) -> &'a Value {
    status["shield"]["regions"]
        .as_array()
        .and_then(|regions| regions.iter().find(|r| r["name"] == region))
        .unwrap_or_else(|| panic!("no shield status for {region}: {status:#}"))
}

fn decision(status: &Value, region: &str) -> Decision {
    let r = region_status(status, region);
    let fraction = r["shed_fraction"].as_f64().expect("shed_fraction");
    Decision {
        permille: (fraction * 1000.0).round() as u16,
        fraction,
        destinations: r["destinations"]
            .as_array()
            .expect("destinations")
            .iter()
            .map(|d| d[0].as_str().expect("destination name").to_string())
            .collect(),
        shares: r["destinations"]
            .as_array()
            .expect("destinations")
            .iter()
            .map(|d| d[1].as_f64().expect("destination share"))
            .collect(),
        hot: r["hot"].as_bool().expect("hot"),
        state: r["state"].as_str().expect("state").to_string(),
    }
}

fn counter(status: &Value, name: &str) -> u64 {
    status["shield"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("shield.{name} missing: {status:#}"))
}

/// Polls the status until `ready` holds (at most [`WAIT`]); returns that status.
fn wait_for(daemon: &Daemon, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    daemon.wait_for_status(what, WAIT, ready)
}

fn wait_shedding(daemon: &Daemon) -> Decision {
    let status = wait_for(daemon, "eu-west shedding", |s| {
        decision(s, "eu-west").permille > 0
    });
    decision(&status, "eu-west")
}

// ---------------------------------------------------------------------------------------------
// Queries

/// What one A answer for the steered name said.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    address: Ipv4Addr,
    ttl: u32,
    scope: u8,
}

fn ecs_scope(response: &Message) -> Option<u8> {
    match response.edns.as_ref()?.option(EdnsCode::Subnet)? {
        EdnsOption::Subnet(cs) => Some(cs.scope_prefix()),
        _ => None,
    }
}

fn answer_of(response: &Message, subnet: &str) -> Answer {
    let records: Vec<(Ipv4Addr, u32)> = response
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some((a.0, r.ttl)),
            _ => None,
        })
        .collect();
    assert_eq!(
        records.len(),
        1,
        "{subnet}: expected one A record: {response:?}"
    );
    Answer {
        address: records[0].0,
        ttl: records[0].1,
        scope: ecs_scope(response)
            .unwrap_or_else(|| panic!("{subnet}: no ECS option echoed: {response:?}")),
    }
}

/// The number after `label` in a trace, e.g. `bucket 417`.
fn number_after(trace: &str, label: &str) -> Option<u16> {
    let rest = &trace[trace.find(label)? + label.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The A answer of the steered name for every subnet.
fn ask(resolver: &mut Resolver, subnets: &[String]) -> Vec<Answer> {
    resolver
        .ask_a_from_each(EDGE, subnets)
        .iter()
        .zip(subnets)
        .map(|(r, s)| answer_of(r, s))
        .collect()
}

/// Each subnet's shed bucket (0..1000, a pure function of its /24), read from the `CH TXT`
/// decision trace while eu-west sheds: the subnet is shed exactly when its bucket is below the
/// region's fraction in per mille. Also checks what each trace says about TTL and scope.
fn buckets(daemon: &Daemon, resolver: &mut Resolver, subnets: &[String]) -> Vec<u16> {
    let before = decision(&daemon.status(), "eu-west");
    let queries: Vec<Message> = subnets.iter().map(|s| trace_query(EDGE, s)).collect();
    let traces: Vec<String> = resolver.ask_all(&queries).iter().map(trace_text).collect();
    let after = decision(&daemon.status(), "eu-west");
    subnets
        .iter()
        .zip(&traces)
        .map(|(subnet, trace)| {
            assert!(trace.contains("region eu-west"), "{subnet}: {trace}");
            assert!(
                trace.contains(&format!("ttl {SHORT_TTL}")),
                "{subnet}: {trace}"
            );
            assert!(trace.contains("scope 24"), "{subnet}: {trace}");
            let fraction = number_after(trace, "shedding ")
                .unwrap_or_else(|| panic!("{subnet}: eu-west not shedding in {trace:?}"));
            assert!(
                (before.permille.min(after.permille)..=before.permille.max(after.permille))
                    .contains(&fraction),
                "{subnet}: the trace's fraction {fraction} is not the status's \
                 ({} .. {}): {trace}",
                before.permille,
                after.permille
            );
            let bucket = number_after(trace, "bucket ")
                .unwrap_or_else(|| panic!("{subnet}: no bucket in the trace {trace:?}"));
            assert!(bucket < 1000, "{subnet}: {trace}");
            bucket
        })
        .collect()
}

/// Asks every subnet while the status shows one unchanged decision for `region` before and
/// after the batch (retried, bounded, until it does); returns that decision and the answers.
fn observe_stable(
    daemon: &Daemon,
    resolver: &mut Resolver,
    region: &str,
    subnets: &[String],
) -> (Decision, Vec<Answer>) {
    let deadline = Instant::now() + WAIT;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let before = decision(&daemon.status(), region);
        let answers = ask(resolver, subnets);
        let after = decision(&daemon.status(), region);
        if before.same_as(&after) {
            return (after, answers);
        }
        assert!(
            Instant::now() < deadline,
            "{region}'s decision kept changing during every batch ({attempts} tries): \
             last {before:?} -> {after:?}"
        );
    }
}

/// Checks one batch of eu-west answers against the decision shown: exactly the subnets whose
/// bucket is below the fraction go to the destinations (about `permille`/1000 of them), the
/// rest to global anycast; all with the short TTL and scope 24 (the location prefix is /8, the
/// shed hash prefix /24); each destination gets about its share. Returns the observed share.
fn assert_shed_batch(
    decision: &Decision,
    subnets: &[String],
    answers: &[Answer],
    buckets: &[u16],
) -> f64 {
    let destinations = decision.destination_addresses();
    let mut shed = 0usize;
    for ((subnet, answer), bucket) in subnets.iter().zip(answers).zip(buckets) {
        let is_shed = destinations.contains(&answer.address);
        assert!(
            is_shed || answer.address == GLOBAL_V4,
            "{subnet}: answered {answer:?}, neither global nor one of {:?}",
            decision.destinations
        );
        assert_eq!(
            is_shed,
            *bucket < decision.permille,
            "{subnet}: bucket {bucket}, fraction {} per mille, answered {answer:?}",
            decision.permille
        );
        shed += usize::from(is_shed);
        assert_eq!(answer.ttl, SHORT_TTL, "{subnet}: hot region, short TTL");
        assert_eq!(
            answer.scope, 24,
            "{subnet}: scope = max(/8 location, /24 hash)"
        );
    }
    let n = subnets.len() as f64;
    let p = f64::from(decision.permille) / 1000.0;
    let observed = shed as f64 / n;
    // The shed set is the subnets whose hash bucket is below the fraction: for a good hash,
    // binomial(n, p). Four standard deviations (plus rounding) fails a good hash about once
    // in 16 000; the hash is deterministic, so this either always holds or never does.
    let tolerance = 4.0 * (p * (1.0 - p) / n).sqrt() + 1.0 / n;
    assert!(
        (observed - p).abs() <= tolerance,
        "{shed} of {} subnets shed ({observed:.3}); the status shows {p:.3} (± {tolerance:.3})",
        subnets.len()
    );
    // Among the shed subnets, each destination gets about its share (a weighted rendezvous
    // hash), within the binomial bound plus the drift of the shares between status reads.
    for (name, share) in decision.destinations.iter().zip(&decision.shares) {
        let address = destination_v4(name);
        let got = answers.iter().filter(|a| a.address == address).count() as f64;
        let expected = shed as f64 * share;
        let slack = 4.0 * (shed as f64 * share * (1.0 - share)).sqrt() + 0.02 * shed as f64 + 1.0;
        assert!(
            (got - expected).abs() <= slack,
            "{got} shed subnets answered {name} ({address}); expected {expected:.0} ± {slack:.0} \
             (share {share:.3} of {shed})"
        );
    }
    observed
}

/// Every subnet answered global anycast with the steady TTL and no hash scope: 0 when nothing
/// anywhere is shed or hot, else the /8 that located the client.
fn assert_all_global(subnets: &[String], answers: &[Answer]) {
    for (subnet, answer) in subnets.iter().zip(answers) {
        assert_eq!(answer.address, GLOBAL_V4, "{subnet}: {answer:?}");
        assert_eq!(answer.ttl, STEADY_TTL, "{subnet}: {answer:?}");
        assert!(
            answer.scope == 0 || answer.scope == 8,
            "{subnet}: scope {}",
            answer.scope
        );
    }
}

/// Clients of regions that are not hot keep global anycast with the steady TTL. The scope is
/// their location prefix while any region is shed or hot (the answer then depends on where the
/// client is); with `shedding` false it may also be 0 (nothing anywhere shed or hot).
fn assert_other_regions_global(resolver: &mut Resolver, shedding: bool) {
    for (subnet, located_by) in [("216.160.83.56/29", 29), ("202.196.224.0/20", 20)] {
        let response = resolver.ask(&ecs_query(EDGE, RecordType::A, subnet));
        let answer = answer_of(&response, subnet);
        assert_eq!(answer.address, GLOBAL_V4, "{subnet}: {answer:?}");
        assert_eq!(answer.ttl, STEADY_TTL, "{subnet}: {answer:?}");
        assert!(
            answer.scope == located_by || (!shedding && answer.scope == 0),
            "{subnet}: scope {} (located by /{located_by}; eu-west shedding: {shedding})",
            answer.scope
        );
    }
}

/// Runs the real `dig` against the daemon; fails the test if dig is missing.
fn dig(daemon: &Daemon, args: &[&str]) -> String {
    let output = Command::new("dig")
        .arg(format!("@{}", daemon.dns.ip()))
        .arg("-p")
        .arg(daemon.dns.port().to_string())
        .args(["+time=3", "+tries=2"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("dig must be installed (apt-get install bind9-dnsutils); .ci/run installs it");
    assert!(output.status.success(), "dig {args:?} failed: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Real `dig +subnet=` for one shed subnet: its A record (one of the destinations the status
/// shows right after), TTL and the scope dig reports, and the `CH TXT` trace saying the region
/// is shedding.
fn dig_shed_subnet(daemon: &Daemon, subnet: &str) {
    let out = dig(
        daemon,
        &[
            "A",
            "contoso.edge.example.net",
            &format!("+subnet={subnet}"),
        ],
    );
    let destinations = decision(&daemon.status(), "eu-west").destination_addresses();
    let record = out
        .lines()
        .map(str::split_whitespace)
        .map(Iterator::collect::<Vec<_>>)
        .find(|f| f.len() == 5 && f[0] == EDGE && f[3] == "A")
        .unwrap_or_else(|| panic!("no A record in dig's output:\n{out}"));
    assert_eq!(
        record[1],
        SHORT_TTL.to_string(),
        "TTL in dig's output:\n{out}"
    );
    let address: Ipv4Addr = record[4].parse().expect("dig prints an IPv4 address");
    assert!(
        destinations.contains(&address),
        "{subnet} is shed (bucket below the fraction) but dig got {address}:\n{out}"
    );
    let expected = format!("CLIENT-SUBNET: {subnet}/24");
    assert!(
        out.contains(&expected),
        "dig should report scope 24 ({expected}):\n{out}"
    );
    let out = dig(
        daemon,
        &[
            "CH",
            "TXT",
            "contoso.edge.example.net",
            &format!("+subnet={subnet}"),
            "+short",
        ],
    );
    // dig prints the trace's character strings quoted, separated by spaces.
    let trace = out.trim().trim_matches('"').replace("\" \"", "");
    for part in [
        "region eu-west",
        "shedding",
        "per mille",
        "region hot (short TTL)",
    ] {
        assert!(trace.contains(part), "{part:?} missing from {trace:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn overload_pushed_over_http_sheds_the_shown_share_with_short_ttl_and_scope() {
    let setup = shield_setup("shield-http");
    let daemon = start(&setup);
    let mut resolver = Resolver::new(daemon.dns);
    let subnets = eu_west_subnets(SUBNETS);

    // Before any feed: nothing shed, global with the steady TTL.
    let answers = ask(&mut resolver, &subnets);
    assert_all_global(&subnets, &answers);

    let out = daemon.push_load(&setup, &feed(OVERLOAD));
    let printed = ok(&out, "steerdns load push");
    assert!(printed.contains("accepted"), "{printed}");
    // The same over raw HTTP with the token (a fresh measurement of the same overload).
    let (code, body) = post_load(&daemon, &feed(OVERLOAD), Some(TOKEN));
    assert_eq!((code, body.trim()), (200, "accepted"));

    let first = wait_shedding(&daemon);
    // The status is refreshed every tick.
    let status = wait_for(&daemon, "both pushes counted", |s| {
        counter(s, "feeds_accepted") >= 2
    });
    assert_eq!(
        counter(&status, "feeds_accepted"),
        2,
        "{:#}",
        status["shield"]
    );
    assert_eq!(status["shield"]["feed_origin"], "http");
    let eu_west = region_status(&status, "eu-west");
    assert_eq!(eu_west["load"], 990.0);
    assert!(eu_west["utilisation"].as_f64().expect("utilisation") > 0.85);
    assert!(
        first.destinations.first().map(String::as_str) == Some("eu-north"),
        "eu-west sheds to its same-continent neighbour eu-north first: {first:?}"
    );
    assert!(first.hot, "{first:?}");
    assert_eq!(first.state, "shedding", "{first:?}");
    let changes = status["shield"]["recent_changes"]
        .as_array()
        .expect("changes");
    assert!(
        changes.iter().any(|c| c["region"] == "eu-west"
            && c["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("measured utilisation 0.99, predicted ")
                    && r.contains("above high watermark 0.85"))),
        "the change is logged with its reason: {changes:?}"
    );

    let bucket_of = buckets(&daemon, &mut resolver, &subnets);
    let (shown, batch) = observe_stable(&daemon, &mut resolver, "eu-west", &subnets);
    let observed = assert_shed_batch(&shown, &subnets, &batch, &bucket_of);
    println!(
        "http: status fraction {:.3} ({} per mille) to {:?}; answers: {observed:.3} of {} subnets shed",
        shown.fraction,
        shown.permille,
        shown.destinations,
        subnets.len()
    );
    assert!(shown.permille > 0 && shown.permille < 1000, "{shown:?}");
    assert_other_regions_global(&mut resolver, true);

    // Real dig for one shed subnet: while overloaded with a static feed the fraction only
    // grows, so a subnet shed a moment ago is still shed (to a destination the status names).
    let shed_subnet = subnets
        .iter()
        .zip(&batch)
        .find(|(_, a)| a.address != GLOBAL_V4)
        .map(|(s, _)| s.clone())
        .expect("at least one shed subnet");
    dig_shed_subnet(&daemon, &shed_subnet);

    // With the feed unchanged the shield's moves "land" without the load falling, so the
    // fraction keeps rising; past what eu-north can take below its high watermark
    // (0.85 × 600 − 200 = 310 of eu-west's 990) the rest goes to the same-continent fallback
    // site fb-eu, never to another continent while fb-eu has room.
    wait_for(
        &daemon,
        "eu-west shedding more, to eu-north and fb-eu",
        |s| {
            let d = decision(s, "eu-west");
            d.destinations.len() >= 2 && d.permille > shown.permille
        },
    );
    let (split, later) = observe_stable(&daemon, &mut resolver, "eu-west", &subnets);
    let mut names = split.destinations.clone();
    names.sort();
    assert_eq!(names, ["eu-north", "fb-eu"], "{split:?}");
    let observed_later = assert_shed_batch(&split, &subnets, &later, &bucket_of);
    println!(
        "http, later: status fraction {:.3} ({} per mille) to {:?} with shares {:?}; answers: \
         {observed_later:.3} of {} subnets shed",
        split.fraction,
        split.permille,
        split.destinations,
        split.shares,
        subnets.len()
    );
    assert!(split.permille > shown.permille, "{shown:?} -> {split:?}");
    // Raising the fraction only adds subnets: every subnet shed before is still shed, and
    // those that changed destination went to the new one (fb-eu), never back.
    let fb_eu = destination_v4("fb-eu");
    for ((subnet, before), after) in subnets.iter().zip(&batch).zip(&later) {
        if before.address != GLOBAL_V4 {
            assert_ne!(
                after.address, GLOBAL_V4,
                "{subnet} was shed at {} per mille, not at {}",
                shown.permille, split.permille
            );
            assert!(
                after.address == before.address || after.address == fb_eu,
                "{subnet}: {} -> {}",
                before.address,
                after.address
            );
        }
    }
    let newly_shed = batch
        .iter()
        .zip(&later)
        .filter(|(b, a)| b.address == GLOBAL_V4 && a.address != GLOBAL_V4)
        .count();
    let switched = batch
        .iter()
        .zip(&later)
        .filter(|(b, a)| b.address != GLOBAL_V4 && a.address != b.address)
        .count();
    println!(
        "http, later: {newly_shed} subnets newly shed, {switched} moved eu-north -> fb-eu, none \
         returned to global"
    );
}

#[test]
fn overload_written_to_the_watched_file_sheds_the_shown_share() {
    let setup = shield_setup("shield-file");
    let daemon = start(&setup);
    let mut resolver = Resolver::new(daemon.dns);
    let subnets = eu_west_subnets(SUBNETS);

    write_atomically(&setup.path("load.json"), feed(OVERLOAD).as_bytes());
    let first = wait_shedding(&daemon);
    let status = daemon.status();
    assert_eq!(
        status["shield"]["feed_origin"], "file",
        "{:#}",
        status["shield"]
    );
    assert_eq!(counter(&status, "feeds_accepted"), 1);
    assert_eq!(
        first.destinations.first().map(String::as_str),
        Some("eu-north")
    );

    let bucket_of = buckets(&daemon, &mut resolver, &subnets);
    let (shown, batch) = observe_stable(&daemon, &mut resolver, "eu-west", &subnets);
    let observed = assert_shed_batch(&shown, &subnets, &batch, &bucket_of);
    println!(
        "file: status fraction {:.3} ({} per mille) to {:?}; answers: {observed:.3} of {} subnets shed",
        shown.fraction,
        shown.permille,
        shown.destinations,
        subnets.len()
    );
    assert_other_regions_global(&mut resolver, true);

    // A rewrite of the file with relief is picked up the same way.
    write_atomically(&setup.path("load.json"), feed(RELIEF).as_bytes());
    wait_for(&daemon, "eu-west load 500 read from the file", |s| {
        region_status(s, "eu-west")["load"] == 500.0
    });
    assert_eq!(counter(&daemon.status(), "feeds_accepted"), 2);
}

/// Every status read of one region's fraction, with when the request went out and when the
/// answer came back: enough to bound when the server changed its decision.
#[derive(Default)]
struct FractionLog {
    /// (request sent, response received, per mille)
    reads: Vec<(Instant, Instant, u16)>,
}

impl FractionLog {
    fn read(&mut self, daemon: &Daemon, region: &str) -> Value {
        let sent = Instant::now();
        let status = daemon.status();
        self.reads
            .push((sent, Instant::now(), decision(&status, region).permille));
        status
    }

    /// The time between the last raise and the first decrease, as bounded by the reads: the
    /// last raise came after the last read still showing less than the peak was *sent*, and the
    /// first decrease before the first read showing less than the peak *came back*. None if
    /// the reads show no such pair.
    fn raise_to_decrease(&self) -> Option<(u16, Duration)> {
        let peak_at = self
            .reads
            .iter()
            .enumerate()
            .max_by_key(|(i, r)| (r.2, std::cmp::Reverse(*i)))?
            .0;
        let peak = self.reads[peak_at].2;
        let last_lower = self.reads[..peak_at].iter().rev().find(|r| r.2 < peak)?.0;
        let first_down = self.reads[peak_at..].iter().find(|r| r.2 < peak)?.1;
        Some((peak, first_down.duration_since(last_lower)))
    }
}

#[test]
fn relief_returns_every_subnet_to_global_after_the_hold_down() {
    let setup = shield_setup("shield-relief");
    let daemon = start(&setup);
    let mut resolver = Resolver::new(daemon.dns);
    let subnets = eu_west_subnets(SUBNETS);
    let mut log = FractionLog::default();

    // Overload until the fraction has risen over several ticks (at most `max_step` each), so
    // that relief has to bring it down over several ticks too.
    log.read(&daemon, "eu-west");
    let (code, body) = post_load(&daemon, &feed(OVERLOAD), Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    let deadline = Instant::now() + WAIT;
    let peak = loop {
        let d = decision(&log.read(&daemon, "eu-west"), "eu-west");
        if d.fraction >= 0.3 {
            break d;
        }
        assert!(Instant::now() < deadline, "eu-west never shed 30%: {d:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    let relieved_at = Instant::now();
    let (code, body) = post_load(&daemon, &feed(RELIEF), Some(TOKEN));
    assert_eq!(code, 200, "{body}");

    // During the hold-down the decision holds: the answers still follow it.
    let bucket_of = buckets(&daemon, &mut resolver, &subnets);
    let (held, batch) = observe_stable(&daemon, &mut resolver, "eu-west", &subnets);
    if held.permille > 0 {
        assert_shed_batch(&held, &subnets, &batch, &bucket_of);
    }

    let status = loop {
        let status = log.read(&daemon, "eu-west");
        let d = decision(&status, "eu-west");
        if d.fraction == 0.0 && !d.hot {
            break status;
        }
        if relieved_at.elapsed() >= WAIT {
            let sample = ask(&mut resolver, &subnets[..1]);
            panic!(
                "eu-west not back to normal (fraction exactly 0, not hot) within {WAIT:?} of \
                 relief from {peak:?}: {d:?}; {} is answered {:?}\nrecent changes: {:#}",
                subnets[0], sample[0], status["shield"]["recent_changes"]
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = relieved_at.elapsed();
    let (highest, gap) = log
        .raise_to_decrease()
        .expect("the reads saw a raise and a decrease");
    println!(
        "relief: from {} ({highest} per mille at most) to 0 in {took:?}; last raise to first \
         decrease at least {gap:?} apart",
        peak.fraction
    );
    // The hold-down: a decrease waits at least that long after the last raise. (The server's
    // tick clock and ours differ by the few milliseconds it takes to publish a status.)
    assert!(
        gap + Duration::from_millis(20) >= HOLD_DOWN,
        "reversed {gap:?} after the last raise; hold-down is {HOLD_DOWN:?}"
    );
    let eu_west = decision(&status, "eu-west");
    assert_eq!(eu_west.state, "normal", "{eu_west:?}");
    assert!(eu_west.destinations.is_empty(), "{eu_west:?}");
    let changes = status["shield"]["recent_changes"]
        .as_array()
        .expect("changes");
    assert!(
        changes.iter().any(|c| c["region"] == "eu-west"
            && c["to"] == 0.0
            && c["reason"]
                .as_str()
                .is_some_and(|r| r.contains("below low watermark"))),
        "the return is logged with its reason: {changes:?}"
    );

    let answers = ask(&mut resolver, &subnets);
    assert_all_global(&subnets, &answers);
    assert_other_regions_global(&mut resolver, false);
}

#[test]
fn malformed_feeds_are_refused_whole_and_the_decisions_stand() {
    let setup = shield_setup("shield-refuse");
    let daemon = start(&setup);
    let mut resolver = Resolver::new(daemon.dns);
    let subnets = eu_west_subnets(400);

    let (code, body) = post_load(&daemon, &feed(OVERLOAD), Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    let before = wait_shedding(&daemon);
    let bucket_of = buckets(&daemon, &mut resolver, &subnets);
    let accepted = counter(&daemon.status(), "feeds_accepted");

    let mut typo = feed_value(RELIEF);
    let regions = typo["regions"].as_object_mut().expect("regions");
    let sample = regions.remove("eu-west").expect("eu-west in the feed");
    regions.insert("eu-wset".into(), sample);
    let typo = typo.to_string();
    let mut negative = feed_value(RELIEF);
    negative["regions"]["eu-west"]["load"] = json!(-5.0);
    let negative = negative.to_string();
    let bad_json = format!("{}{{", &feed(RELIEF)[..40]);
    // Finite, in a sane ratio, but so large that the shield's sums overflow (issue 12 item 7).
    let mut huge = feed_value(RELIEF);
    huge["regions"]["eu-west"] = json!({"load": 1.7e308, "capacity": 1.7e308});
    let huge = huge.to_string();
    let cases: [(&str, &str, &str); 4] = [
        ("unknown region", &typo, "regions.eu-wset: unknown region"),
        (
            "negative load",
            &negative,
            "regions.eu-west.load: must be ≥ 0",
        ),
        ("bad JSON", &bad_json, "does not parse"),
        (
            "magnitude near f64::MAX",
            &huge,
            "regions.eu-west.load: 1.7e308 is above the limit of 1e15",
        ),
    ];
    for (i, (what, body, reason)) in cases.iter().enumerate() {
        let refused_before = counter(&daemon.status(), "feeds_refused");
        // Over HTTP: 400 with the reason.
        let (code, text) = post_load(&daemon, body, Some(TOKEN));
        assert_eq!(code, 400, "{what}: {text}");
        assert!(
            text.contains(reason),
            "{what}: {text:?} should say {reason:?}"
        );
        // Through the CLI: a non-zero exit, the reason printed.
        let out = daemon.push_load(&setup, body);
        assert!(!out.status.success(), "{what}: load push should fail");
        let printed = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            printed.contains(reason),
            "{what}: {printed:?} should say {reason:?}"
        );
        // The status is refreshed every tick.
        let status = wait_for(
            &daemon,
            &format!("{what} (case {i}): both refusals counted"),
            |s| counter(s, "feeds_refused") >= refused_before + 2,
        );
        assert_eq!(
            counter(&status, "feeds_refused"),
            refused_before + 2,
            "{what}"
        );
        let last = status["shield"]["last_feed_refusal"]
            .as_str()
            .unwrap_or_default();
        assert!(last.contains(reason), "{what}: last refusal {last:?}");
        assert_eq!(counter(&status, "feeds_accepted"), accepted, "{what}");
    }

    // Without the token, or with a wrong one: 401, and the feed is not taken.
    for token in [None, Some("not-the-token")] {
        let (code, text) = post_load(&daemon, &feed(RELIEF), token);
        assert_eq!(code, 401, "{token:?}: {text}");
    }

    // The previous decisions stand: the last good feed (overload) still drives eu-west.
    let status = daemon.wait_for_shield_ticks(3, WAIT);
    assert_eq!(counter(&status, "feeds_accepted"), accepted);
    assert_eq!(region_status(&status, "eu-west")["load"], 990.0);
    let now = decision(&status, "eu-west");
    assert!(
        now.permille >= before.permille && now.hot,
        "still shedding at least as much: {before:?} -> {now:?}"
    );
    let (shown, batch) = observe_stable(&daemon, &mut resolver, "eu-west", &subnets);
    assert_shed_batch(&shown, &subnets, &batch, &bucket_of);
}

#[test]
fn control_file_shield_off_and_frozen() {
    let setup = shield_setup("shield-modes");
    let original = String::from_utf8(setup.control_bytes()).expect("control file is UTF-8");
    setup.write_control_atomically(&format!("shield = \"off\"\n{original}"));
    let daemon = start(&setup);
    let mut resolver = Resolver::new(daemon.dns);
    let subnets = eu_west_subnets(400);

    // Off: an overload changes nothing.
    let (code, body) = post_load(&daemon, &feed(OVERLOAD), Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    wait_for(&daemon, "overload feed seen with the shield off", |s| {
        s["shield"]["mode"] == "off" && region_status(s, "eu-west")["load"] == 990.0
    });
    let off = decision(&daemon.wait_for_shield_ticks(5, WAIT), "eu-west");
    assert_eq!(off.permille, 0, "shield off sheds nothing: {off:?}");
    assert!(!off.hot, "{off:?}");
    let answers = ask(&mut resolver, &subnets);
    assert_all_global(&subnets, &answers);

    // Auto: the same overload sheds.
    let serial = daemon.serial();
    setup.write_control_atomically(&format!("shield = \"auto\"\n{original}"));
    daemon.wait_for_serial_change(serial, WAIT);
    // A fresh measurement, so the test does not depend on when the first one was taken.
    let (code, body) = post_load(&daemon, &feed(OVERLOAD), Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    wait_shedding(&daemon);
    let bucket_of = buckets(&daemon, &mut resolver, &subnets);

    // Frozen: the current decision holds even when the feed says the overload is over.
    let serial = daemon.serial();
    setup.write_control_atomically(&format!("shield = \"frozen\"\n{original}"));
    daemon.wait_for_serial_change(serial, WAIT);
    let status = wait_for(&daemon, "mode frozen", |s| s["shield"]["mode"] == "frozen");
    let frozen = decision(&status, "eu-west");
    assert!(frozen.permille > 0, "{frozen:?}");
    let (code, body) = post_load(&daemon, &feed(RELIEF), Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    wait_for(&daemon, "relief feed seen while frozen", |s| {
        region_status(s, "eu-west")["load"] == 500.0
    });
    // Longer than the hold-down (a span of wall-clock time) plus several ticks run after it:
    // in auto mode it would have come down.
    std::thread::sleep(HOLD_DOWN);
    daemon.wait_for_shield_ticks(5, WAIT);
    let (held, batch) = observe_stable(&daemon, &mut resolver, "eu-west", &subnets);
    assert_eq!(
        held.permille, frozen.permille,
        "frozen holds: {frozen:?} -> {held:?}"
    );
    assert_eq!(held.destinations, frozen.destinations);
    assert_shed_batch(&held, &subnets, &batch, &bucket_of);
    println!(
        "frozen: holding {:.3} to {:?} under a relief feed",
        held.fraction, held.destinations
    );

    // Back to auto: the relief is acted on.
    let serial = daemon.serial();
    setup.write_control_atomically(&format!("shield = \"auto\"\n{original}"));
    daemon.wait_for_serial_change(serial, WAIT);
    wait_for(&daemon, "eu-west back to normal after unfreezing", |s| {
        let d = decision(s, "eu-west");
        d.permille == 0 && !d.hot
    });
    let answers = ask(&mut resolver, &subnets);
    assert_all_global(&subnets, &answers);

    // Off again while shedding: everything returns to global at once.
    let (code, body) = post_load(&daemon, &feed(OVERLOAD), Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    wait_shedding(&daemon);
    let serial = daemon.serial();
    setup.write_control_atomically(&format!("shield = \"off\"\n{original}"));
    daemon.wait_for_serial_change(serial, WAIT);
    wait_for(&daemon, "shield off stops shedding", |s| {
        s["shield"]["mode"] == "off" && decision(s, "eu-west").permille == 0
    });
    let answers = ask(&mut resolver, &subnets);
    assert_all_global(&subnets, &answers);
}

// ---------------------------------------------------------------------------------------------
// Demand poisoning (issue 12)

/// A flood of queries with chosen ECS subnets must not make eu-west look as if it had no
/// clients of its own. eu-north is drained (its clients are answered with eu-west), the
/// resolvers on loopback are trusted for ECS, and an attacker sends queries for thousands of
/// chosen eu-north subnets: the demand counters then say nearly every answer landing in
/// eu-west is eu-north's. Trusted as they were, the counters made eu-west's own load ~0 and
/// an overload of it was never shed; bounded by the shield's bookkeeping (which placed
/// nothing into eu-west), eu-west's load stays its own and it sheds.
#[test]
fn an_ecs_flood_does_not_make_an_overloaded_region_look_empty() {
    let setup = Setup::new("shield-poison");
    let config = std::fs::read_to_string(&setup.config).expect("read config");
    // Normal answers of 2 s, so the counters are trusted ("mature") within seconds.
    let anycast = "policy = \"anycast\"\nttl = 300";
    assert!(config.contains(anycast), "the example's anycast entry");
    std::fs::write(
        &setup.config,
        config.replace(anycast, "policy = \"anycast\"\nttl = 2"),
    )
    .expect("write config");
    setup.extend_config(
        "[[geo.overrides]]\nnetwork = \"10.0.0.0/8\"\nregion = \"eu-north\"\n\n\
         [shield]\ntick_ms = 100\nhold_down_secs = 1\nshort_ttl = 1\nstale_after_secs = 60\n\
         revert_after_secs = 120\ntrusted_ecs_resolvers = [\"127.0.0.0/8\"]\n",
    );
    let original = String::from_utf8(setup.control_bytes()).expect("control file is UTF-8");
    setup.write_control_atomically(&format!("{original}\n[regions.eu-north]\ndrain = true\n"));
    let daemon = start(&setup);

    // The flood: 3000 chosen eu-north /24s, again and again, until the test is done (at most
    // 30 s); each answer sends its "client" to eu-west.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        let dns = daemon.dns;
        std::thread::spawn(move || {
            let queries: Vec<Message> = (0..3000)
                .map(|i| {
                    ecs_query(
                        EDGE,
                        RecordType::A,
                        &format!("10.{}.{}.0/24", i / 256, i % 256),
                    )
                })
                .collect();
            let mut resolver = Resolver::new(dns);
            let started = Instant::now();
            let mut answered = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && started.elapsed() < Duration::from_secs(30)
            {
                answered += resolver.ask_all(&queries).len();
            }
            answered
        })
    };
    // A normal TTL's worth of ticks with the flood counted (the counters are then mature).
    let ticks = counter(&daemon.status(), "ticks");
    wait_for(&daemon, "3 s of ticks under the flood", |s| {
        counter(s, "ticks") >= ticks + 30
    });
    let (code, body) = post_load(&daemon, &feed(OVERLOAD), Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    let shedding = wait_shedding(&daemon);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answered = flood.join().expect("flood thread");
    assert!(answered >= 3000, "the flood was answered: {answered}");
    println!("eu-west sheds {shedding:?} under an ECS flood of {answered} answers");
}

// ---------------------------------------------------------------------------------------------
// Demand poisoning by spoofed UDP sources (issue 28)

/// The shield's demand estimate summed over every region (`shield.regions[].demand`).
fn total_demand(status: &Value) -> f64 {
    status["shield"]["regions"]
        .as_array()
        .map_or(0.0, |regions| {
            regions.iter().filter_map(|r| r["demand"].as_f64()).sum()
        })
}

/// `steerdns_shield_demand_answers_total{source}`.
fn demand_answers(daemon: &Daemon, source: &str) -> f64 {
    let scrape = scrape_metrics(daemon.admin);
    samples_with(
        &scrape,
        "steerdns_shield_demand_answers_total",
        &[("source", source)],
    )
    .first()
    .map_or(0.0, |s| match s.value {
        prometheus_parse::Value::Counter(v) => v,
        _ => panic!("{source}: not a counter"),
    })
}

/// A UDP query without ECS and without a valid server cookie is what a spoofed packet looks
/// like: it is answered, but its source does not count in the demand estimate (50 spoofed
/// /24s raised a region's demand fifty-fold before). A source proven by a valid DNS server
/// cookie (dig learns ours, then sends it back) or by TCP counts.
#[test]
fn demand_counts_a_udp_source_only_when_a_cookie_or_tcp_proves_it() {
    let setup = Setup::new("shield-proven");
    setup.extend_config("[shield]\ntick_ms = 100\n");
    for proof in ["cookie", "tcp"] {
        let daemon = start(&setup);
        for _ in 0..5 {
            let answer = dig(&daemon, &["+nocookie", EDGE, "A"]);
            assert!(answer.contains("status: NOERROR"), "{answer}");
        }
        // Still answered with a cookie, as long as the client has not sent ours back.
        let learnt = dig(&daemon, &["+cookie", EDGE, "A"]);
        let cookie = learnt
            .lines()
            .find_map(|l| l.strip_prefix("; COOKIE: "))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no cookie learnt:\n{learnt}"))
            .to_string();
        let ticks = counter(&daemon.status(), "ticks");
        let status = wait_for(&daemon, "5 ticks after the unproven queries", |s| {
            counter(s, "ticks") >= ticks + 5
        });
        assert_eq!(total_demand(&status), 0.0, "{:#}", status["shield"]);
        assert_eq!(demand_answers(&daemon, "unproven_not_counted"), 6.0);

        match proof {
            "cookie" => {
                let answer = dig(&daemon, &[&format!("+cookie={cookie}"), EDGE, "A"]);
                assert!(
                    answer.contains(&format!("; COOKIE: {cookie} (good)")),
                    "{answer}"
                );
            }
            _ => {
                let answer = dig(&daemon, &["+tcp", "+nocookie", EDGE, "A"]);
                assert!(answer.contains("status: NOERROR"), "{answer}");
            }
        }
        let status = wait_for(&daemon, &format!("demand counted from a {proof}"), |s| {
            total_demand(s) > 0.0
        });
        println!("{proof}: demand {}", total_demand(&status));
        let label = if proof == "cookie" {
            "cookie"
        } else {
            "tcp_or_encrypted"
        };
        assert_eq!(demand_answers(&daemon, label), 1.0, "{proof}");
        let cookies = &status["cookies"];
        assert!(
            cookies["secret"]
                .as_str()
                .is_some_and(|s| s.contains("generated")),
            "{cookies}"
        );
        if proof == "cookie" {
            assert_eq!(cookies["queries"]["valid"], 1, "{cookies}");
            assert_eq!(cookies["queries"]["client_only"], 1, "{cookies}");
        }
        daemon.stop();
    }
}
