//! DNSSEC end to end: the bundled example signed (example.com. with a KSK/ZSK pair and ECDSA
//! P-256, edge.example.net. with an Ed25519 CSK), served by the real binary, and validated by
//! a real validating resolver — Debian's `unbound`, started here on a loopback port with the
//! DS records `steerdns dnssec ds` prints as its trust anchors, stub zones pointing at
//! steerdns and client-subnet forwarding on. Every answer must come back with AD and never
//! SERVFAIL: static names, the SOA, a CNAME chain into the steered wildcard, geo answers for
//! three regions chosen by ECS, a weighted profile, NXDOMAIN, NODATA, after a break-glass
//! weight change and while the shield sheds. The zone dump verifies with `ldns-verify-zone`.
//!
//! A test whose tool (unbound, dig, ldns-verify-zone) is missing fails.

use crate::control_common;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use control_common::*;
use steerdns::rfc3339;

/// The most any wait may take.
const WAIT: Duration = Duration::from_secs(20);

fn run(args: &[&str], config: &Path) -> String {
    let output = Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(config)
        .env("STEERDNS_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run steerdns");
    assert!(
        output.status.success(),
        "steerdns {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The bundled example with `[dnssec]` (and `extra` config) and fresh keys for both zones.
fn signed_setup(label: &str, extra: &str) -> Setup {
    let setup = Setup::new(label);
    setup.extend_config(&format!(
        "[dnssec]\nkeys = \"keys\"\nzones = [\"example.com.\", \"edge.example.net.\"]\n{extra}\n"
    ));
    run(
        &["dnssec", "keygen", "example.com.", "--split"],
        &setup.config,
    );
    run(
        &["dnssec", "keygen", "edge.example.net.", "--algorithm", "15"],
        &setup.config,
    );
    setup
}

/// A running unbound, killed on drop.
struct Unbound {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Drop for Unbound {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Unbound {
    /// Starts unbound in `dir` validating with `anchors` (DS lines), with stub zones for both
    /// example zones at `auth`; waits until it answers.
    fn start(dir: &Path, auth: SocketAddr, anchors: &str) -> Unbound {
        Unbound::start_expecting(dir, auth, anchors, "NOERROR")
    }

    /// Like [`Unbound::start`]; ready once `example.com SOA` gets `status`.
    fn start_expecting(dir: &Path, auth: SocketAddr, anchors: &str, status: &str) -> Unbound {
        Unbound::start_full(dir, &example_stubs(auth), anchors, status, "")
    }

    /// Like [`Unbound::start`], with no tolerance for signature times: unbound normally
    /// accepts a signature up to an hour (at least) after it expired; this one does not.
    fn start_strict(dir: &Path, auth: SocketAddr, anchors: &str) -> Unbound {
        let strict = "    val-sig-skew-min: 0\n    val-sig-skew-max: 0\n";
        Unbound::start_full(dir, &example_stubs(auth), anchors, "NOERROR", strict)
    }

    /// Starts unbound with stub zones `stubs` (zone, server) and `extra` lines in its
    /// `server:` section.
    fn start_full(
        dir: &Path,
        stubs: &[(&str, SocketAddr)],
        anchors: &str,
        status: &str,
        extra: &str,
    ) -> Unbound {
        let port = free_port();
        let dir = dir.join(format!("unbound-{port}"));
        std::fs::create_dir_all(&dir).expect("unbound dir");
        let dir = dir.as_path();
        let log = dir.join("unbound.log");
        let anchors: String = anchors
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| format!("    trust-anchor: \"{l}\"\n"))
            .collect();
        let stub_text: String = stubs
            .iter()
            .map(|(zone, auth)| {
                format!(
                    "stub-zone:\n    name: \"{zone}\"\n    stub-addr: {}@{}\n",
                    auth.ip(),
                    auth.port()
                )
            })
            .collect();
        let conf = format!(
            "server:\n    interface: 127.0.0.1\n    port: {port}\n    do-daemonize: no\n\
             \x20   use-syslog: no\n    logfile: \"{}\"\n    chroot: \"\"\n    username: \"\"\n\
             \x20   directory: \"{}\"\n    pidfile: \"\"\n    do-ip6: no\n\
             \x20   do-not-query-localhost: no\n    access-control: 127.0.0.0/8 allow\n\
             \x20   module-config: \"subnetcache validator iterator\"\n\
             \x20   send-client-subnet: {}\n    client-subnet-always-forward: yes\n\
             \x20   max-client-subnet-ipv6: 56\n    cache-max-ttl: 1\n\
             \x20   cache-max-negative-ttl: 1\n    val-log-level: 2\n    verbosity: 1\n\
             \x20   qname-minimisation: no\n    harden-referral-path: no\n{extra}{anchors}\
             {stub_text}remote-control:\n    control-enable: no\n",
            log.display(),
            dir.display(),
            "127.0.0.1",
        );
        let conf_path = dir.join("unbound.conf");
        std::fs::write(&conf_path, conf).expect("write unbound.conf");
        let child = Command::new("unbound")
            .arg("-d")
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("unbound must be installed (apt-get install unbound); .ci/run installs it");
        let unbound = Unbound { child, port, log };
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(answer) = unbound.try_ask(&["example.com", "SOA"]) {
                if answer.status == status {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "unbound did not answer within {WAIT:?}; log:\n{}",
                unbound.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        unbound
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn try_ask(&self, args: &[&str]) -> Option<Answer> {
        let output = Command::new("dig")
            .arg("@127.0.0.1")
            .arg("-p")
            .arg(self.port.to_string())
            .args(["+time=3", "+tries=1", "+dnssec", "+adflag"])
            .args(args)
            .output()
            .expect("dig must be installed (apt-get install bind9-dnsutils)");
        if !output.status.success() {
            return None;
        }
        Some(Answer::parse(&String::from_utf8_lossy(&output.stdout)))
    }

    /// Asks through unbound; the answer must be validated (AD) and not SERVFAIL.
    fn validated(&self, args: &[&str]) -> Answer {
        let answer = self
            .try_ask(args)
            .unwrap_or_else(|| panic!("dig {args:?} through unbound got no answer"));
        assert!(
            answer.ad && answer.status != "SERVFAIL",
            "dig {args:?}: not validated (status {}, flags {:?}):\n{}\nunbound log:\n{}",
            answer.status,
            answer.flags,
            answer.text,
            self.log_text()
        );
        answer
    }
}

/// Stub zones for both example zones, served at `auth`.
fn example_stubs(auth: SocketAddr) -> [(&'static str, SocketAddr); 2] {
    [("example.com.", auth), ("edge.example.net.", auth)]
}

/// What dig printed: status, header flags, the answer section's records.
struct Answer {
    status: String,
    flags: Vec<String>,
    ad: bool,
    /// (owner, type, rdata) of each answer record.
    records: Vec<(String, String, String)>,
    text: String,
}

impl Answer {
    fn parse(text: &str) -> Answer {
        let status = text
            .lines()
            .find_map(|l| l.split("status: ").nth(1))
            .and_then(|rest| rest.split(',').next())
            .unwrap_or("")
            .to_string();
        let flags: Vec<String> = text
            .lines()
            .find_map(|l| l.strip_prefix(";; flags: "))
            .and_then(|rest| rest.split(';').next())
            .map(|f| f.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        let mut records = Vec::new();
        let mut in_answer = false;
        for line in text.lines() {
            if line.starts_with(";; ANSWER SECTION:") {
                in_answer = true;
                continue;
            }
            if in_answer {
                if line.trim().is_empty() {
                    break;
                }
                let fields: Vec<&str> = line.split_whitespace().collect();
                if fields.len() >= 5 {
                    records.push((
                        fields[0].to_ascii_lowercase(),
                        fields[3].to_string(),
                        fields[4..].join(" "),
                    ));
                }
            }
        }
        Answer {
            status,
            ad: flags.iter().any(|f| f == "ad"),
            flags,
            records,
            text: text.to_string(),
        }
    }

    /// The RDATA of the answer records of `rtype`.
    fn of(&self, rtype: &str) -> Vec<String> {
        self.records
            .iter()
            .filter(|(_, t, _)| t == rtype)
            .map(|(_, _, r)| r.clone())
            .collect()
    }
}

/// A load feed measured now: eu-west at `eu_west`/1000, the rest with room.
fn feed(eu_west: f64) -> String {
    every_region_feed(eu_west, "dnssec test").to_string()
}

#[test]
fn unbound_validates_every_kind_of_answer_through_breakglass_and_shed() {
    let setup = signed_setup(
        "dnssec-unbound",
        "\n[shield]\ntick_ms = 100\nhold_down_secs = 1\nshort_ttl = 5\n\
         stale_after_secs = 60\nrevert_after_secs = 120\n",
    );
    let anchors = run(&["dnssec", "ds", "example.com."], &setup.config)
        + &run(&["dnssec", "ds", "edge.example.net."], &setup.config);
    assert_eq!(anchors.lines().count(), 2, "one KSK each: {anchors}");
    assert!(
        anchors.contains(" IN DS ") && anchors.contains(" 13 2 ") && anchors.contains(" 15 2 ")
    );
    let daemon = setup.start();
    let unbound = Unbound::start(setup.dir.path(), daemon.dns, &anchors);

    let soa = unbound.validated(&["example.com", "SOA"]);
    assert_eq!(soa.of("SOA").len(), 1, "{}", soa.text);
    let stat = unbound.validated(&["mail.example.com", "A"]);
    assert_eq!(stat.of("A"), ["192.0.2.25"]);
    let dnskey = unbound.validated(&["example.com", "DNSKEY"]);
    assert_eq!(dnskey.of("DNSKEY").len(), 2, "KSK and ZSK: {}", dnskey.text);
    let wild = unbound.validated(&["foo.wild.example.com", "A"]);
    assert_eq!(wild.of("A"), ["192.0.2.100"]);
    // A CNAME chain into the steered wildcard (Ed25519-signed zone, anycast policy).
    let chain = unbound.validated(&["www.example.com", "A", "+subnet=81.2.69.0/24"]);
    assert_eq!(chain.of("CNAME"), ["contoso.edge.example.net."]);
    assert_eq!(chain.of("A"), ["192.0.2.1"]);
    let v6 = unbound.validated(&["other.edge.example.net", "AAAA"]);
    assert_eq!(v6.of("AAAA"), ["2001:db8::1"]);
    // Geo answers for three regions, chosen by the client subnet unbound forwards.
    for (subnet, expected) in [
        ("81.2.69.0/24", "203.0.113.10"),
        ("216.160.83.0/24", "203.0.113.20"),
        ("2001:218::/32", "203.0.113.30"),
    ] {
        let arg = format!("+subnet={subnet}");
        let geo = unbound.validated(&["gw.example.com", "A", &arg]);
        assert_eq!(geo.of("A"), [expected], "{subnet}: {}", geo.text);
    }
    // The geo endpoints have no IPv6: NODATA with the NSEC variant that lacks AAAA.
    let steered_nodata = unbound.validated(&["gw.example.com", "AAAA", "+subnet=81.2.69.0/24"]);
    assert_eq!(steered_nodata.status, "NOERROR");
    assert!(steered_nodata.records.is_empty(), "{}", steered_nodata.text);
    // A weighted profile (frontdoor, a CNAME into the platform zone).
    let weighted = unbound.validated(&["critical.example.com", "A", "+subnet=81.2.69.0/24"]);
    assert_eq!(weighted.of("CNAME"), ["critical.edge.example.net."]);
    assert_eq!(weighted.of("A"), ["192.0.2.1"]);
    // Denial of existence.
    let nx = unbound.validated(&["nope.example.com", "A"]);
    assert_eq!(nx.status, "NXDOMAIN");
    let nx_edge = unbound.validated(&["no.such.ns1.edge.example.net", "A"]);
    assert_eq!(nx_edge.status, "NXDOMAIN");
    let nodata = unbound.validated(&["mail.example.com", "TXT"]);
    assert_eq!(
        (nodata.status.as_str(), nodata.records.len()),
        ("NOERROR", 0)
    );
    let ent = unbound.validated(&["ent.example.com", "A"]);
    assert_eq!((ent.status.as_str(), ent.records.len()), ("NOERROR", 0));
    let ds = unbound.validated(&["sub.example.com", "DS"]);
    assert_eq!(ds.of("DS").len(), 1, "{}", ds.text);

    // Break-glass: the critical profile flipped to the regional app gateways.
    let flipped = daemon.cli(&["weight", "set", "critical", "frontdoor=0", "appgw=100"]);
    assert!(flipped.status.success(), "weight set: {flipped:?}");
    let deadline = Instant::now() + WAIT;
    loop {
        let answer = unbound.validated(&["critical.example.com", "A", "+subnet=81.2.69.0/24"]);
        if answer.of("A") == ["203.0.113.10"] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "break-glass never seen: {}",
            answer.text
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The shield sheds part of eu-west (the EU continent's IPv6 space maps there): shed
    // subnets get a neighbour's regional anycast or a fallback site, signed like the rest.
    let pushed = daemon.push_load(&setup, &feed(990.0));
    assert!(pushed.status.success(), "load push: {pushed:?}");
    let deadline = Instant::now() + WAIT;
    let mut shed_seen = None;
    while shed_seen.is_none() {
        for n in 0..32u32 {
            let arg = format!("+subnet=2a00:{:x}::/56", 0x100 + n);
            let answer = unbound.validated(&["contoso.edge.example.net", "A", &arg]);
            let a = answer.of("A");
            assert_eq!(a.len(), 1, "{}", answer.text);
            if a[0] != "192.0.2.1" {
                shed_seen = Some(a[0].clone());
                break;
            }
        }
        assert!(Instant::now() < deadline, "no eu-west subnet was shed");
        let _ = daemon.push_load(&setup, &feed(990.0));
    }
    let shed_to = shed_seen.unwrap_or_default();
    assert!(
        shed_to.starts_with("198.51.100.") || shed_to.starts_with("203.0.113."),
        "shed to {shed_to}"
    );

    // The control: a validator anchored to a DS that is not ours refuses the same answers.
    let wrong: String = anchors
        .lines()
        .map(|l| {
            let (head, digest) = l.rsplit_once(' ').expect("DS line");
            let flipped = if digest.starts_with('0') { "1" } else { "0" };
            format!("{head} {flipped}{}\n", &digest[1..])
        })
        .collect();
    let doubting = Unbound::start_expecting(setup.dir.path(), daemon.dns, &wrong, "SERVFAIL");
    let refused = doubting
        .try_ask(&["mail.example.com", "A"])
        .expect("an answer");
    assert_eq!(refused.status, "SERVFAIL", "{}", refused.text);
    assert!(!refused.ad);
}

#[test]
fn zone_dump_verifies_with_ldns_and_a_broken_signature_does_not() {
    for (label, denial) in [
        ("dnssec-dump", ""),
        ("dnssec-dump3", "denial = \"nsec3\"\nnsec3_opt_out = true\n"),
    ] {
        verify_dumps(&signed_setup(label, denial), denial);
    }
}

/// Dumps both signed zones of `setup` and has ldns-verify-zone check them.
fn verify_dumps(setup: &Setup, denial: &str) {
    if !denial.is_empty() {
        // An unsigned delegation, left out of the chain by opt-out.
        let zone_file = setup.path("zones/example.com.zone");
        let text = std::fs::read_to_string(&zone_file).expect("zone file");
        std::fs::write(&zone_file, text + "open NS ns.example.net.\n").expect("write zone");
    }
    let chain = if denial.is_empty() {
        NSEC_TYPE
    } else {
        NSEC3_TYPE
    };
    for zone in ["example.com.", "edge.example.net."] {
        verify_dump(setup, zone, chain);
    }
}

/// The generic type names of NSEC and NSEC3 in a dump.
const NSEC_TYPE: &str = "TYPE47";
const NSEC3_TYPE: &str = "TYPE50";

/// Dumps `zone` of `setup` (its denial chain of type `chain`) and has ldns-verify-zone check
/// it; one changed SOA must then fail it.
fn verify_dump(setup: &Setup, zone: &str, chain: &str) {
    let text = run(&["dnssec", "dump", zone], &setup.config);
    assert!(text.contains("TYPE46"), "RRSIGs in the dump of {zone}");
    assert!(text.contains(chain), "{zone}: {chain} in the dump");
    let other = if chain == NSEC_TYPE {
        NSEC3_TYPE
    } else {
        NSEC_TYPE
    };
    assert!(
        !text.contains(&format!(" IN {other} ")),
        "{zone}: no {other} in the dump"
    );
    let path = setup.path(&format!("{zone}zone"));
    std::fs::write(&path, &text).expect("write dump");
    let verified = Command::new("ldns-verify-zone")
        .arg(&path)
        .output()
        .expect("ldns-verify-zone must be installed (apt-get install ldnsutils)");
    assert!(
        verified.status.success(),
        "{zone}: {}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );
    // The verifier does check: one flipped signature byte fails it.
    let broken: String = text
        .lines()
        .map(|line| {
            if line.contains(" IN TYPE6 ") {
                // The SOA's RDATA: change the serial, so its RRSIG no longer matches.
                line.replace('7', "8")
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&path, broken + "\n").expect("write broken dump");
    let refused = Command::new("ldns-verify-zone")
        .arg(&path)
        .output()
        .expect("ldns-verify-zone");
    assert!(
        !refused.status.success(),
        "{zone}: a changed SOA still verified"
    );
}

/// The key files of `zone` in the setup's key directory.
fn zone_key_files(setup: &Setup, zone: &str) -> Vec<std::path::PathBuf> {
    let dir = setup.path("keys");
    key_files(&dir)
        .into_iter()
        .filter(|name| name.starts_with(&format!("K{zone}+")))
        .map(|name| dir.join(name))
        .collect()
}

/// A bad key file refuses its own zone, never the others (issue 28). At startup (`check`
/// loads exactly what `serve` loads) the zone is left out — not served, never served unsigned
/// — and every other zone is served, signed; status, `/metrics` and `check` say so. Once the
/// key is fixed a reload serves it signed. Broken again while it is served signed, the reload
/// is refused: it goes on being served as last signed.
#[test]
fn a_bad_key_refuses_its_zone_alone_and_a_signed_zone_keeps_its_last_signing() {
    let setup = signed_setup("dnssec-badkey", "");
    let edge_keys = zone_key_files(&setup, "edge.example.net.");
    assert!(!edge_keys.is_empty(), "edge.example.net.'s key files");
    for key in &edge_keys {
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let output = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&setup.config)
        .output()
        .expect("run steerdns check");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "check refused the whole config: {text}"
    );
    assert!(text.contains("edge.example.net.: not served"), "{text}");
    assert!(text.contains("must be 0600"), "{text}");

    let daemon = setup.start();
    let example = dig_answered(daemon.dns, &["example.com", "SOA"]);
    assert!(
        example.contains("status: NOERROR") && example.contains("RRSIG"),
        "{example}"
    );
    let edge = dig_answered(daemon.dns, &["edge.example.net", "SOA"]);
    assert!(
        edge.contains("status: REFUSED"),
        "left out, not unsigned: {edge}"
    );
    let status = daemon.status();
    let not_served = &status["dnssec_not_served"];
    assert_eq!(not_served[0]["zone"], "edge.example.net.", "{not_served}");
    assert!(
        not_served[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("0600")),
        "{not_served}"
    );
    let warnings = status["warnings"].to_string();
    assert!(
        warnings.contains("edge.example.net.: not served"),
        "{warnings}"
    );
    let scrape = scrape_metrics(daemon.admin);
    let gauge = samples_with(
        &scrape,
        "steerdns_dnssec_zone_not_served",
        &[("zone", "edge.example.net.")],
    );
    assert_eq!(gauge.len(), 1, "the metric names the zone");

    // Fixed: a reload serves it, signed.
    for key in &edge_keys {
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let accepted = daemon.accepted();
    daemon.sighup();
    let status = daemon.wait_for_accepted(accepted, WAIT);
    assert_eq!(
        status["dnssec_not_served"],
        serde_json::json!([]),
        "{status:#}"
    );
    let edge = dig_answered(daemon.dns, &["edge.example.net", "SOA"]);
    assert!(
        edge.contains("status: NOERROR") && edge.contains("RRSIG"),
        "{edge}"
    );

    // Broken while served signed: the reload is refused and the zone is served as last signed.
    let before = daemon.refused();
    for key in &edge_keys {
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    daemon.sighup();
    let status = daemon.wait_for_refusal(before, WAIT);
    let reasons = refusal_reasons(&status).join("\n");
    assert!(reasons.contains("must be 0600"), "{reasons}");
    assert!(reasons.contains("served as last signed"), "{reasons}");
    let edge = dig_answered(daemon.dns, &["edge.example.net", "SOA"]);
    assert!(
        edge.contains("RRSIG"),
        "still signed after the refused reload: {edge}"
    );

    // The whole key directory gone: the same for both signed zones.
    let before = daemon.refused();
    std::fs::remove_dir_all(setup.path("keys")).expect("remove keys");
    daemon.sighup();
    let status = daemon.wait_for_refusal(before, WAIT);
    let reasons = refusal_reasons(&status).join("\n");
    assert!(reasons.contains("key directory"), "{reasons}");
    let text = dig_answered(daemon.dns, &["example.com", "SOA"]);
    assert!(
        text.contains("RRSIG"),
        "still signed after the refused reload: {text}"
    );

    // A zone to sign without any key at startup is left out too; the unsigned rest is served.
    let setup = Setup::new("dnssec-nokey");
    setup.extend_config("[dnssec]\nzones = [\"example.com.\"]\n");
    let daemon = setup.start();
    let example = dig_answered(daemon.dns, &["example.com", "SOA"]);
    assert!(example.contains("status: REFUSED"), "{example}");
    let edge = dig_answered(daemon.dns, &["edge.example.net", "SOA"]);
    assert!(
        edge.contains("status: NOERROR") && !edge.contains("RRSIG"),
        "{edge}"
    );
    let status = daemon.status();
    assert_eq!(
        status["dnssec_not_served"][0]["zone"], "example.com.",
        "{status:#}"
    );
}

/// Asks steerdns at `server` directly (DO set, no recursion); dig's text.
fn dig_direct(server: SocketAddr, args: &[&str]) -> String {
    let output = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .arg("-p")
        .arg(server.port().to_string())
        .args(["+dnssec", "+norec", "+time=3", "+tries=2"])
        .args(args)
        .output()
        .expect("dig must be installed (apt-get install bind9-dnsutils)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Like [`dig_direct`], but only an answer counts: when dig got no reply in its 2 x 3 s (the
/// server starved of CPU, or the datagram lost), it asks again, up to 5 times, and then
/// fails saying so. An answer, whatever it holds, is returned as it came, with a note of the
/// tries that went unanswered: a caller checking its content still fails on a wrong answer.
fn dig_answered(server: SocketAddr, args: &[&str]) -> String {
    const TRIES: usize = 5;
    let mut unanswered = Vec::new();
    for _ in 0..TRIES {
        let text = dig_direct(server, args);
        // dig prints the header only of a reply it received.
        if text.contains(";; ->>HEADER<<-") {
            if unanswered.is_empty() {
                return text;
            }
            return format!(
                "{text};; (after {} unanswered tries:)\n{}",
                unanswered.len(),
                unanswered.join("\n")
            );
        }
        unanswered.push(text);
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "{server} never answered dig {args:?} ({TRIES} times no reply within 2 x 3 s: a timeout, \
         not a wrong answer):\n{}",
        unanswered.join("\n")
    );
}

/// The RRSIG records of dig's output (every section), as text.
fn rrsigs(text: &str) -> Vec<String> {
    let mut sigs: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with(';'))
        .filter(|l| l.split_whitespace().nth(3) == Some("RRSIG"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    sigs.sort();
    sigs
}

#[test]
fn two_nodes_with_the_same_keys_serve_identical_signatures() {
    // ECDSA P-256 (RFC 6979 nonces) for example.com., Ed25519 for edge.example.net.
    let setup = signed_setup("dnssec-fleet", "");
    let questions: [&[&str]; 6] = [
        &["mail.example.com", "A"],
        &["example.com", "DNSKEY"],
        &["nope.example.com", "A"],
        &["gw.example.com", "A", "+subnet=81.2.69.0/24"],
        &["contoso.edge.example.net", "A", "+subnet=81.2.69.0/24"],
        &["gw.example.com", "AAAA", "+subnet=81.2.69.0/24"],
    ];
    // Two processes signing on their own, from the same config and key files.
    let (first, second) = (setup.start(), setup.start());
    for question in questions {
        let a = rrsigs(&dig_direct(first.dns, question));
        let b = rrsigs(&dig_direct(second.dns, question));
        assert!(!a.is_empty(), "{question:?}: no RRSIG from the first node");
        assert_eq!(a, b, "{question:?}: the nodes' signatures differ");
    }
    // The whole signed zone, as two more processes sign it.
    for zone in ["example.com.", "edge.example.net."] {
        let a = run(&["dnssec", "dump", zone], &setup.config);
        let b = run(&["dnssec", "dump", zone], &setup.config);
        assert!(a.contains("TYPE46"), "{zone}: no RRSIG in the dump");
        assert_eq!(a, b, "{zone}: two dumps differ");
    }
}

/// The expiration field of the first RRSIG in dig's output (`YYYYMMDDHHmmSS`).
fn first_expiration(text: &str) -> String {
    rrsigs(text)
        .first()
        .and_then(|sig| sig.split_whitespace().nth(8).map(str::to_string))
        .unwrap_or_else(|| panic!("no RRSIG in:\n{text}"))
}

/// Now, in the RRSIG time format (`YYYYMMDDHHmmSS`, UTC).
fn rrsig_time_now() -> String {
    rfc3339::format_utc(SystemTime::now())
        .chars()
        .filter(char::is_ascii_digit)
        .take(14)
        .collect()
}

#[test]
fn signatures_are_renewed_before_they_expire_and_validation_never_breaks() {
    // Signatures valid 16 s, renewed every 4 s; unbound accepts no signature past its time.
    let setup = signed_setup(
        "dnssec-resign",
        "refresh_secs = 4\nsignature_validity_secs = 16\n",
    );
    let anchors = run(&["dnssec", "ds", "example.com."], &setup.config)
        + &run(&["dnssec", "ds", "edge.example.net."], &setup.config);
    let daemon = setup.start();
    let unbound = Unbound::start_strict(setup.dir.path(), daemon.dns, &anchors);
    let first = first_expiration(&dig_direct(daemon.dns, &["example.com", "SOA"]));
    let questions: [&[&str]; 5] = [
        &["example.com", "SOA"],
        &["mail.example.com", "A"],
        &["nope.example.com", "A"],
        &["gw.example.com", "A", "+subnet=81.2.69.0/24"],
        &["contoso.edge.example.net", "A", "+subnet=81.2.69.0/24"],
    ];
    // The expirations served for a static and for a steered answer.
    let mut expirations = [
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
    ];
    let deadline = Instant::now() + Duration::from_secs(90);
    // Until the first signatures have expired and both answers have been renewed twice.
    while rrsig_time_now() <= first || expirations.iter().any(|e| e.len() < 3) {
        for question in questions {
            unbound.validated(question);
        }
        let soa = dig_direct(daemon.dns, &["example.com", "SOA"]);
        let steered = dig_direct(daemon.dns, &["gw.example.com", "A", "+subnet=81.2.69.0/24"]);
        expirations[0].insert(first_expiration(&soa));
        expirations[1].insert(first_expiration(&steered));
        assert!(
            Instant::now() < deadline,
            "signatures not renewed twice within 90 s (expirations served {expirations:?})"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let status = daemon.status();
    let dnssec = &status["dnssec"];
    assert!(
        dnssec["signatures_until"].as_str() > Some(""),
        "status shows the window: {dnssec}"
    );
    assert!(dnssec["next_event"].is_string(), "{dnssec}");
    assert_eq!(status["loaded_by"], "DNSSEC re-sign", "{status}");
    assert_eq!(status["reloads_refused"], 0, "{status}");
}

/// The key tags of the RRSIGs over `rtype` in dig's output.
/// Every 300 ms until `deadline`: validates `questions` through `unbound`, asks `server` for
/// mail.example.com A and hands the answer to `check`; returns once one ZSK other than
/// `old_zsk` signs it.
fn until_a_new_zsk_signs(
    unbound: &Unbound,
    server: SocketAddr,
    questions: &[&[&str]],
    old_zsk: &[String],
    deadline: Instant,
    mut check: impl FnMut(&str),
) {
    loop {
        for question in questions {
            unbound.validated(question);
        }
        let answer = dig_direct(server, &["mail.example.com", "A"]);
        check(&answer);
        let tags = signer_tags(&answer, "A");
        if tags != old_zsk {
            assert_eq!(tags.len(), 1, "one ZSK signs: {tags:?}");
            return;
        }
        assert!(Instant::now() < deadline, "the successor never signed");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn signer_tags(text: &str, rtype: &str) -> Vec<String> {
    rrsigs(text)
        .iter()
        .filter(|sig| sig.split_whitespace().nth(4) == Some(rtype))
        .filter_map(|sig| sig.split_whitespace().nth(10).map(str::to_string))
        .collect()
}

/// How many DNSKEYs `server` publishes for example.com.
fn dnskey_count(server: SocketAddr) -> usize {
    dig_direct(server, &["example.com", "DNSKEY"])
        .lines()
        .filter(|l| !l.starts_with(';') && l.split_whitespace().nth(3) == Some("DNSKEY"))
        .count()
}

#[test]
fn a_zsk_rolls_over_by_itself_across_a_restart_and_validation_never_breaks() {
    // ZSK lifetime 24 s; pre-publication waits the DNSKEY TTL (6 s) + propagation (2 s).
    let setup = signed_setup(
        "dnssec-roll",
        "refresh_secs = 2\nsignature_validity_secs = 60\nzsk_lifetime_secs = 24\n\
         dnskey_ttl = 6\npropagation_delay_secs = 2\n",
    );
    let anchors = run(&["dnssec", "ds", "example.com."], &setup.config)
        + &run(&["dnssec", "ds", "edge.example.net."], &setup.config);
    assert!(
        setup.path("keys/rollover.seed").exists(),
        "keygen makes the seed"
    );
    let questions: [&[&str]; 5] = [
        &["example.com", "SOA"],
        &["example.com", "DNSKEY"],
        &["mail.example.com", "A"],
        &["nope.example.com", "A"],
        &["gw.example.com", "A", "+subnet=81.2.69.0/24"],
    ];
    let deadline = Instant::now() + Duration::from_secs(120);
    let daemon = setup.start();
    let old_zsk = signer_tags(&dig_direct(daemon.dns, &["mail.example.com", "A"]), "A");
    assert_eq!(old_zsk.len(), 1, "one ZSK signs: {old_zsk:?}");
    assert_eq!(dnskey_count(daemon.dns), 2, "KSK and ZSK");
    {
        let unbound = Unbound::start_strict(setup.dir.path(), daemon.dns, &anchors);
        // Step 1: the successor is published (not signing yet).
        while dnskey_count(daemon.dns) < 3 {
            for question in questions {
                unbound.validated(question);
            }
            assert!(Instant::now() < deadline, "no successor ZSK published");
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    // A restart in the middle of the rollover resumes it from the key files.
    daemon.stop();
    let daemon = setup.start();
    let unbound = Unbound::start_strict(setup.dir.path(), daemon.dns, &anchors);
    // Step 2: the successor signs; the old ZSK stays published for what caches hold.
    until_a_new_zsk_signs(&unbound, daemon.dns, &questions, &old_zsk, deadline, |_| {});
    assert_eq!(
        dnskey_count(daemon.dns),
        3,
        "the old ZSK is still published"
    );
    for question in questions {
        unbound.validated(question);
    }
    let status = run(&["dnssec", "status"], &setup.config);
    let zsk_states: Vec<&str> = status
        .lines()
        .filter(|l| l.trim_start().starts_with("zsk"))
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    assert_eq!(zsk_states, ["retired", "active"], "{status}");
    let served = daemon.status();
    let keys = served["dnssec"]["zones"][0]["keys"].to_string();
    assert!(keys.contains("\"retired\""), "{keys}");
}

/// The NSEC3 records of dig's authority section: (owner, flags field).
fn nsec3_records(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with(';'))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields.get(3) == Some(&"NSEC3")).then(|| (fields[0].to_string(), fields[5].into()))
        })
        .collect()
}

#[test]
fn nsec3_with_opt_out_proves_every_kind_of_denial_to_unbound_and_ldns() {
    // RFC 9276 parameters (SHA-1, no extra iteration, no salt), opt-out for an unsigned
    // delegation added to the zone (only the record spanning it has the flag: the other
    // NXDOMAIN proofs stay secure).
    let setup = signed_setup("dnssec-nsec3", "denial = \"nsec3\"\nnsec3_opt_out = true\n");
    let zone_file = setup.path("zones/example.com.zone");
    let text = std::fs::read_to_string(&zone_file).expect("zone file");
    std::fs::write(&zone_file, text + "open NS ns.example.net.\n").expect("write zone");
    let anchors = run(&["dnssec", "ds", "example.com."], &setup.config)
        + &run(&["dnssec", "ds", "edge.example.net."], &setup.config);
    let daemon = setup.start();
    let unbound = Unbound::start(setup.dir.path(), daemon.dns, &anchors);

    let param = unbound.validated(&["example.com", "NSEC3PARAM"]);
    assert_eq!(param.of("NSEC3PARAM"), ["1 0 0 -"], "{}", param.text);
    let stat = unbound.validated(&["mail.example.com", "A"]);
    assert_eq!(stat.of("A"), ["192.0.2.25"]);
    // NXDOMAIN: closest encloser, next closer and wildcard, three NSEC3 (one may repeat).
    let nx = unbound.validated(&["no.such.example.com", "A"]);
    assert_eq!(nx.status, "NXDOMAIN");
    let direct = dig_direct(daemon.dns, &["no.such.example.com", "A"]);
    let proofs = nsec3_records(&direct);
    assert!(
        (2..=3).contains(&proofs.len()),
        "closest encloser proof and wildcard: {direct}"
    );
    assert!(
        !direct.contains("\tNSEC\t"),
        "no NSEC in an NSEC3 zone: {direct}"
    );
    let nx_edge = unbound.validated(&["no.such.ns1.edge.example.net", "A"]);
    assert_eq!(nx_edge.status, "NXDOMAIN");
    // NODATA at a name, at an empty non-terminal, at a wildcard, for a steered address set.
    for question in [
        ["mail.example.com", "TXT"],
        ["ent.example.com", "A"],
        ["b.ent.example.com", "A"],
        ["foo.wild.example.com", "MX"],
    ] {
        let nodata = unbound.validated(&question);
        assert_eq!(
            (nodata.status.as_str(), nodata.records.len()),
            ("NOERROR", 0),
            "{question:?}: {}",
            nodata.text
        );
    }
    let steered_nodata = unbound.validated(&["gw.example.com", "AAAA", "+subnet=81.2.69.0/24"]);
    assert!(steered_nodata.records.is_empty(), "{}", steered_nodata.text);
    // Wildcard answers: static, and a customer name under the steered wildcard.
    let wild = unbound.validated(&["foo.wild.example.com", "A"]);
    assert_eq!(wild.of("A"), ["192.0.2.100"]);
    let chain = unbound.validated(&["www.example.com", "A", "+subnet=81.2.69.0/24"]);
    assert_eq!(chain.of("A"), ["192.0.2.1"], "{}", chain.text);
    let geo = unbound.validated(&["gw.example.com", "A", "+subnet=216.160.83.0/24"]);
    assert_eq!(geo.of("A"), ["203.0.113.20"]);
    // A signed delegation's DS; an opt-out one has none, proven insecure (no AD, no SERVFAIL).
    let ds = unbound.validated(&["sub.example.com", "DS"]);
    assert_eq!(ds.of("DS").len(), 1, "{}", ds.text);
    let insecure = unbound
        .try_ask(&["open.example.com", "DS"])
        .expect("an answer");
    assert_eq!(
        (insecure.status.as_str(), insecure.records.len()),
        ("NOERROR", 0),
        "{}\n{}",
        insecure.text,
        unbound.log_text()
    );
    // The referral to it: NS, and the closest provable encloser proof (opt-out) for no DS.
    let referral = dig_direct(daemon.dns, &["host.open.example.com", "A"]);
    assert!(referral.contains("AUTHORITY: "), "{referral}");
    let proofs = nsec3_records(&referral);
    assert_eq!(proofs.len(), 2, "encloser and next closer: {referral}");
    assert_eq!(
        proofs.iter().filter(|(_, flags)| flags == "1").count(),
        1,
        "the next closer's record has the opt-out flag, the encloser's not: {referral}"
    );
    assert!(
        !unbound.log_text().contains("validation failure"),
        "{}",
        unbound.log_text()
    );
}

/// Per-zone settings: example.com. with the section's (NSEC, ECDSA P-256, 14-day signatures,
/// keys in `keys/`), edge.example.net. with its own table (NSEC3, Ed25519, 7-day signatures,
/// keys in `keys-edge/`).
const PER_ZONE: &str = r#"
[dnssec]
keys = "keys"
zones = ["example.com.", "edge.example.net."]
denial = "nsec"
[dnssec.zone."edge.example.net."]
denial = "nsec3"
algorithm = 15
keys = "keys-edge"
signature_validity_secs = 604800
"#;

/// The key files (`*.toml`) in `dir`, by file name.
fn key_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".toml"))
        .collect();
    names.sort();
    names
}

/// An RRSIG time (`YYYYMMDDHHmmSS`) as Unix seconds.
fn rrsig_secs(time: &str) -> u64 {
    let digits = |range: std::ops::Range<usize>| &time[range];
    let text = format!(
        "{}-{}-{}T{}:{}:{}Z",
        digits(0..4),
        digits(4..6),
        digits(6..8),
        digits(8..10),
        digits(10..12),
        digits(12..14)
    );
    rfc3339::parse(&text)
        .unwrap_or_else(|e| panic!("{time}: {e}"))
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// (algorithm, expiration in Unix seconds) of every RRSIG in dig's output.
fn rrsig_algorithms_and_expirations(text: &str) -> Vec<(String, u64)> {
    rrsigs(text)
        .iter()
        .map(|sig| {
            let fields: Vec<&str> = sig.split_whitespace().collect();
            (fields[5].to_string(), rrsig_secs(fields[8]))
        })
        .collect()
}

#[test]
fn zones_with_their_own_settings_each_validate_through_unbound_and_ldns() {
    let setup = Setup::new("dnssec-per-zone");
    setup.extend_config(PER_ZONE);
    // keygen follows each zone's settings: no --algorithm, no key directory given.
    run(&["dnssec", "keygen", "example.com."], &setup.config);
    run(&["dnssec", "keygen", "edge.example.net."], &setup.config);
    let (main_keys, edge_keys) = (
        key_files(&setup.path("keys")),
        key_files(&setup.path("keys-edge")),
    );
    assert!(
        main_keys.iter().all(|k| k.contains("example.com")) && main_keys.len() == 1,
        "keys/: {main_keys:?}"
    );
    assert!(
        edge_keys.iter().all(|k| k.contains("edge.example.net")) && edge_keys.len() == 1,
        "keys-edge/: {edge_keys:?}"
    );
    assert!(
        setup.path("keys-edge/rollover.seed").exists(),
        "each key directory has its seed"
    );
    let ds_main = run(&["dnssec", "ds", "example.com."], &setup.config);
    let ds_edge = run(&["dnssec", "ds", "edge.example.net."], &setup.config);
    assert!(ds_main.contains(" 13 2 "), "{ds_main}");
    assert!(ds_edge.contains(" 15 2 "), "{ds_edge}");
    let status = run(&["dnssec", "status"], &setup.config);
    assert!(
        status.contains("example.com.: key directory")
            && status.contains("algorithm 13; denial nsec;"),
        "{status}"
    );
    assert!(status.contains("algorithm 15; denial nsec3;"), "{status}");

    let daemon = setup.start();
    let unbound = Unbound::start(setup.dir.path(), daemon.dns, &(ds_main + &ds_edge));
    for question in [
        &["example.com", "SOA"][..],
        &["mail.example.com", "A"],
        &["gw.example.com", "A", "+subnet=81.2.69.0/24"],
        &["edge.example.net", "SOA"],
        &["edge.example.net", "TXT"],
        &["contoso.edge.example.net", "A", "+subnet=81.2.69.0/24"],
    ] {
        assert!(
            !unbound.validated(question).records.is_empty(),
            "{question:?}"
        );
    }
    for (question, status) in [
        (["nope.example.com", "A"], "NXDOMAIN"),
        (["no.such.ns1.edge.example.net", "A"], "NXDOMAIN"),
        (["mail.example.com", "TXT"], "NOERROR"),
        (["ns1.edge.example.net", "TXT"], "NOERROR"),
    ] {
        let answer = unbound.validated(&question);
        assert_eq!(
            (answer.status.as_str(), answer.records.len()),
            (status, 0),
            "{question:?}: {}",
            answer.text
        );
    }
    // Each zone is served as configured: its denial records, algorithm and validity.
    let main_nx = dig_direct(daemon.dns, &["nope.example.com", "A"]);
    assert!(
        main_nx.contains("\tNSEC\t") && !main_nx.contains("NSEC3"),
        "{main_nx}"
    );
    let edge_nx = dig_direct(daemon.dns, &["no.such.ns1.edge.example.net", "A"]);
    assert!(
        !nsec3_records(&edge_nx).is_empty() && !edge_nx.contains("\tNSEC\t"),
        "{edge_nx}"
    );
    let main_sigs = rrsig_algorithms_and_expirations(&main_nx);
    let edge_sigs = rrsig_algorithms_and_expirations(&edge_nx);
    assert!(main_sigs.iter().all(|(alg, _)| alg == "13"), "{main_nx}");
    assert!(edge_sigs.iter().all(|(alg, _)| alg == "15"), "{edge_nx}");
    let now = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Expiration: the window's start (at most a refresh period, a day, ago) plus validity.
    for (sigs, validity) in [(&main_sigs, 14 * 86400), (&edge_sigs, 7 * 86400)] {
        for (_, expiration) in sigs.iter() {
            assert!(
                (now + validity - 86400..=now + validity).contains(expiration),
                "expiration {expiration} for validity {validity} at {now}"
            );
        }
    }
    assert!(
        !unbound.log_text().contains("validation failure"),
        "{}",
        unbound.log_text()
    );
    verify_dump(&setup, "example.com.", NSEC_TYPE);
    verify_dump(&setup, "edge.example.net.", NSEC3_TYPE);
}

/// Asks steerdns at `server` directly over UDP with a `payload`-byte EDNS buffer; `+ignore`
/// keeps a truncated answer instead of retrying over TCP.
fn dig_small(server: SocketAddr, payload: u16, args: &[&str]) -> Answer {
    let output = Command::new("dig")
        .arg(format!("@{}", server.ip()))
        .arg("-p")
        .arg(server.port().to_string())
        .arg(format!("+bufsize={payload}"))
        .args(["+norec", "+time=3", "+tries=2"])
        .args(args)
        .output()
        .expect("dig must be installed (apt-get install bind9-dnsutils)");
    Answer::parse(&String::from_utf8_lossy(&output.stdout))
}

/// A section's record count from dig's header line (`AUTHORITY: 2`).
fn section_count(answer: &Answer, section: &str) -> usize {
    answer
        .text
        .split(&format!("{section}: "))
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {section} count in:\n{}", answer.text))
}

#[test]
fn large_signed_answers_truncate_over_udp_and_validate_over_tcp() {
    // NSEC3 without opt-out (its proofs are the larger ones).
    let setup = signed_setup("dnssec-tc", "denial = \"nsec3\"\n");
    let anchors = run(&["dnssec", "ds", "example.com."], &setup.config)
        + &run(&["dnssec", "ds", "edge.example.net."], &setup.config);
    let daemon = setup.start();
    // Fits in 512 bytes without DO, not with its NSECs and RRSIGs: TC, no records at all (a
    // partial denial proof would not validate), then whole over TCP.
    let questions: [&[&str]; 2] = [&["nope.example.com", "A"], &["www.example.com", "A"]];
    for question in questions {
        let plain = dig_small(daemon.dns, 512, &[&["+ignore"], question].concat());
        assert!(!plain.flags.iter().any(|f| f == "tc"), "{}", plain.text);
        // DO clear: no DNSSEC record at all, in any section.
        assert!(
            rrsigs(&plain.text).is_empty() && nsec3_records(&plain.text).is_empty(),
            "{}",
            plain.text
        );
        let signed = dig_small(
            daemon.dns,
            512,
            &[&["+ignore", "+dnssec"], question].concat(),
        );
        assert!(signed.flags.iter().any(|f| f == "tc"), "{}", signed.text);
        assert_eq!(
            (
                section_count(&signed, "ANSWER"),
                section_count(&signed, "AUTHORITY")
            ),
            (0, 0),
            "{}",
            signed.text
        );
        let retried = dig_small(daemon.dns, 512, &[&["+dnssec"], question].concat());
        assert!(retried.text.contains("(TCP)"), "{}", retried.text);
        assert!(!retried.flags.iter().any(|f| f == "tc"), "{}", retried.text);
        assert!(rrsigs(&retried.text).len() >= 2, "{}", retried.text);
        // A client with room gets it over UDP at once.
        let roomy = dig_small(
            daemon.dns,
            1232,
            &[&["+ignore", "+dnssec"], question].concat(),
        );
        assert!(!roomy.flags.iter().any(|f| f == "tc"), "{}", roomy.text);
        assert_eq!(rrsigs(&roomy.text), rrsigs(&retried.text));
    }
    // Minimal responses: a positive answer carries its RRset and RRSIG, no authority; a
    // referral's optional glue is dropped (no TC) when it does not fit, the NS, DS and RRSIG
    // stay.
    let positive = dig_small(daemon.dns, 1232, &["+dnssec", "mail.example.com", "A"]);
    assert_eq!(
        (
            section_count(&positive, "ANSWER"),
            section_count(&positive, "AUTHORITY"),
            section_count(&positive, "ADDITIONAL")
        ),
        (2, 0, 1),
        "{}",
        positive.text
    );
    let tight = dig_small(
        daemon.dns,
        512,
        &["+ignore", "+dnssec", "example.com", "NS"],
    );
    let roomy = dig_small(
        daemon.dns,
        1232,
        &["+ignore", "+dnssec", "example.com", "NS"],
    );
    assert!(!tight.flags.iter().any(|f| f == "tc"), "{}", tight.text);
    assert_eq!(tight.of("NS").len(), 2);
    assert!(
        section_count(&tight, "ADDITIONAL") <= section_count(&roomy, "ADDITIONAL"),
        "{}",
        tight.text
    );
    // Through unbound asking with a 512-byte buffer: every large answer comes back validated
    // (unbound retried over TCP; steerdns counted the truncations).
    let truncated = |d: &Daemon| {
        let (code, body) = http(d.admin, "GET", "/metrics", None);
        assert_eq!(code, 200);
        body.lines()
            .find_map(|l| l.strip_prefix("steerdns_truncated_responses_total{transport=\"udp\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let before = truncated(&daemon);
    let unbound = Unbound::start_full(
        setup.dir.path(),
        &example_stubs(daemon.dns),
        &anchors,
        "NOERROR",
        "    edns-buffer-size: 512\n",
    );
    let nx = unbound.validated(&["nope.example.com", "A"]);
    assert_eq!(nx.status, "NXDOMAIN");
    let chain = unbound.validated(&["www.example.com", "A", "+subnet=81.2.69.0/24"]);
    assert_eq!(chain.of("A"), ["192.0.2.1"]);
    unbound.validated(&["example.com", "DNSKEY"]);
    assert!(
        truncated(&daemon) > before,
        "unbound's 512-byte queries were never truncated"
    );
}

/// The parent zone `com.` of the KSK rollover test, delegating example.com. with `ds` (DS
/// lines as `steerdns dnssec ds` prints them).
fn parent_zone(ds: &[String]) -> String {
    let mut text = "$ORIGIN com.\n$TTL 2\n@ IN SOA ns.com. hostmaster.com. 1 60 60 600 1\n\
                    @ NS ns\nns A 127.0.0.1\nexample NS ns1.example\n\
                    ns1.example A 192.0.2.53\n"
        .to_string();
    for line in ds {
        let rdata = line.split(" IN DS ").nth(1).expect("a DS line");
        text.push_str(&format!("example DS {rdata}\n"));
    }
    text
}

/// The CDS records `server` publishes for example.com., as DS lines (`… IN DS tag 13 2 HEX`),
/// sorted, and dig's whole output (for a failure's message). Only an answer is looked at (see
/// [`dig_answered`]): an answer without CDS gives an empty set, a timeout is asked again.
fn child_cds(server: SocketAddr) -> (Vec<String>, String) {
    let text = dig_answered(server, &["+nosplit", "example.com", "CDS"]);
    let mut ds: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with(';'))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields.get(3) == Some(&"CDS"))
                .then(|| format!("example.com. IN DS {}", fields[4..].join(" ")))
        })
        .collect();
    ds.sort();
    (ds, text)
}

/// The CSK lines of `steerdns dnssec status`: (tag, state, next event).
fn csk_status(config: &Path) -> Vec<(String, String, String)> {
    run(&["dnssec", "status"], config)
        .lines()
        .filter(|l| l.trim_start().starts_with("csk"))
        .map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let next = l.split("next: ").nth(1).unwrap_or("").to_string();
            (fields[2].to_string(), fields[5].to_string(), next)
        })
        .collect()
}

#[test]
fn a_csk_rolls_over_with_the_parent_following_cds_and_validation_never_breaks() {
    // The parent: a second steerdns serving com. (signed), unbound's only trust anchor.
    let parent = Setup::new("dnssec-parent");
    for zone in ["example.com.zone", "edge.example.net.zone"] {
        std::fs::remove_file(parent.path(&format!("zones/{zone}"))).expect("remove zone");
    }
    std::fs::write(
        &parent.config,
        "[server]\nzones = \"zones\"\n\n[admin]\ntoken_file = \"admin.token\"\n\n\
         [dnssec]\nkeys = \"keys\"\nzones = [\"com.\"]\n",
    )
    .expect("parent config");
    run(&["dnssec", "keygen", "com."], &parent.config);
    // The child: example.com. with a CSK living 20 s; the rollover waits the DNSKEY and the
    // parent's DS TTL (2 s) plus 4 s for the parent to follow the CDS.
    let child = Setup::new("dnssec-child");
    child.extend_config(
        "[dnssec]\nkeys = \"keys\"\nzones = [\"example.com.\"]\nrefresh_secs = 2\n\
         signature_validity_secs = 60\nksk_lifetime_secs = 20\ndnskey_ttl = 2\n\
         parent_ds_ttl = 2\npropagation_delay_secs = 4\n",
    );
    run(&["dnssec", "keygen", "example.com."], &child.config);
    let mut delegated: Vec<String> = run(&["dnssec", "ds", "example.com."], &child.config)
        .lines()
        .map(str::to_string)
        .collect();
    let zone_path = parent.path("zones/com.zone");
    std::fs::write(&zone_path, parent_zone(&delegated)).expect("parent zone");
    let anchor = run(&["dnssec", "ds", "com."], &parent.config);
    let first = csk_status(&child.config);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].1, "active");
    assert!(first[0].2.starts_with("rollover starts at "), "{first:?}");

    let parent_daemon = parent.start();
    let child_daemon = child.start();
    let unbound = Unbound::start_full(
        child.dir.path(),
        &[
            ("com.", parent_daemon.dns),
            ("example.com.", child_daemon.dns),
        ],
        &anchor,
        "NOERROR",
        "",
    );
    let questions: [&[&str]; 5] = [
        &["example.com", "SOA"],
        &["example.com", "DNSKEY"],
        &["example.com", "DS"],
        &["mail.example.com", "A"],
        &["nope.example.com", "A"],
    ];
    let old_tag = first[0].0.clone();
    let mut double_ds_seen = false;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        for question in questions {
            unbound.validated(question);
        }
        // The parent operator (RFC 7344): publish what the child's CDS says.
        let (cds, dig_output) = child_cds(child_daemon.dns);
        assert!(
            !cds.is_empty(),
            "the child always publishes CDS; dig said:\n{dig_output}\nkeys: {:?}",
            csk_status(&child.config)
        );
        if cds != delegated {
            let before = parent_daemon.accepted();
            std::fs::write(&zone_path, parent_zone(&cds)).expect("parent zone");
            parent_daemon.sighup();
            parent_daemon.wait_for_accepted(before, WAIT);
            if cds.len() == 2 {
                double_ds_seen = true;
                let keys = csk_status(&child.config);
                let states: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
                assert_eq!(states, ["active", "published"], "{keys:?}");
                assert!(keys.iter().all(|k| k.2.contains(" at ")), "{keys:?}");
            }
            delegated = cds;
        }
        let signer = signer_tags(
            &dig_answered(child_daemon.dns, &["example.com", "SOA"]),
            "SOA",
        );
        // (An unsigned answer is not the successor signing.)
        if double_ds_seen
            && delegated.len() == 1
            && !signer.is_empty()
            && signer != [old_tag.clone()]
        {
            assert!(!delegated[0].contains(&format!(" DS {old_tag} ")));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rollover did not complete (CDS {delegated:?}, signer {signer:?})"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    for question in questions {
        unbound.validated(question);
    }
    // Once unbound's cached DS RRset (TTL 2) has expired, it sees the parent's new one alone.
    loop {
        let ds = unbound.validated(&["example.com", "DS"]);
        if ds.of("DS").len() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "still two DS: {}", ds.text);
        std::thread::sleep(Duration::from_millis(300));
    }
    let keys = csk_status(&child.config);
    let states: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
    assert_eq!(states, ["retired", "active"], "{keys:?}");
    assert!(keys[0].2.starts_with("remove at "), "{keys:?}");
}

#[test]
fn keys_of_another_algorithm_than_configured_keep_signing_and_roll_and_are_said() {
    // example.com.'s KSK and ZSK are ECDSA P-256 (13, the default when they were made); the
    // config then says Ed25519 (15) for it. edge.example.net.'s CSK is 15 and so is its
    // setting: nothing to say there. A 12-second ZSK lifetime brings a rollover.
    let setup = signed_setup(
        "dnssec-alg",
        "refresh_secs = 2\nsignature_validity_secs = 60\nzsk_lifetime_secs = 12\n\
         dnskey_ttl = 2\npropagation_delay_secs = 1\n",
    );
    setup.extend_config(
        "[dnssec.zone.\"example.com.\"]\nalgorithm = 15\n\
         [dnssec.zone.\"edge.example.net.\"]\nalgorithm = 15\n",
    );
    let said = "example.com.: dnssec.zone.\"example.com.\".algorithm is 15 (Ed25519) but its keys";
    let keeps = "are algorithm 13 (ECDSA P-256): steerdns keeps signing with them";
    // `check` (what the server loads) warns; `dnssec status` says it under the zone.
    let check = run(&["check"], &setup.config);
    assert!(check.contains(said) && check.contains(keeps), "{check}");
    assert!(!check.contains("edge.example.net.: dnssec"), "{check}");
    let status = run(&["dnssec", "status"], &setup.config);
    assert!(
        status.contains(&format!("  warning: {said}")),
        "dnssec status:\n{status}"
    );
    assert_eq!(status.matches("warning:").count(), 1, "{status}");
    // keygen will not add an Ed25519 key next to them (an unsequenced algorithm rollover).
    let keys_before = key_files(&setup.path("keys"));
    let output = Command::new(BIN)
        .args(["dnssec", "keygen", "example.com.", "--config"])
        .arg(&setup.config)
        .output()
        .expect("run steerdns");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "keygen added a key: {stderr}");
    assert!(
        stderr.contains("would start an algorithm rollover") && stderr.contains("--algorithm 13"),
        "{stderr}"
    );
    assert_eq!(key_files(&setup.path("keys")), keys_before);
    // The key of their own algorithm is still made.
    run(
        &["dnssec", "keygen", "example.com.", "--algorithm", "13"],
        &setup.config,
    );
    let made: Vec<String> = key_files(&setup.path("keys"))
        .into_iter()
        .filter(|k| !keys_before.contains(k))
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(made[0].starts_with("Kexample.com.+013+"), "{made:?}");
    std::fs::remove_file(setup.path("keys").join(&made[0])).expect("remove the extra key");

    let anchors = run(&["dnssec", "ds", "example.com."], &setup.config)
        + &run(&["dnssec", "ds", "edge.example.net."], &setup.config);
    let daemon = setup.start();
    assert!(daemon.log_shows(said, WAIT), "{}", daemon.log());
    let served = daemon.status();
    let zones = served["dnssec"]["zones"].as_array().expect("zones").clone();
    let note = |zone: &str| {
        zones
            .iter()
            .find(|z| z["zone"] == zone)
            .map(|z| z["algorithm_note"].clone())
            .unwrap_or_else(|| panic!("{zone} not in {zones:?}"))
    };
    assert!(
        note("example.com.")
            .as_str()
            .is_some_and(|n| n.contains(keeps)),
        "{zones:?}"
    );
    assert!(note("edge.example.net.").is_null(), "{zones:?}");
    let warnings = served["warnings"].to_string();
    assert!(warnings.contains(keeps), "{warnings}");
    // Signing and the rollover stay with algorithm 13, and every answer validates.
    let questions: [&[&str]; 4] = [
        &["example.com", "SOA"],
        &["example.com", "DNSKEY"],
        &["mail.example.com", "A"],
        &["nope.example.com", "A"],
    ];
    let unbound = Unbound::start_strict(setup.dir.path(), daemon.dns, &anchors);
    let old_zsk = signer_tags(&dig_direct(daemon.dns, &["mail.example.com", "A"]), "A");
    assert_eq!(old_zsk.len(), 1, "one ZSK signs: {old_zsk:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    until_a_new_zsk_signs(
        &unbound,
        daemon.dns,
        &questions,
        &old_zsk,
        deadline,
        |answer| {
            let text = dig_direct(daemon.dns, &["example.com", "DNSKEY"]);
            let algorithms: Vec<&str> = text
                .lines()
                .filter(|l| !l.starts_with(';') && l.split_whitespace().nth(3) == Some("DNSKEY"))
                .filter_map(|l| l.split_whitespace().nth(6))
                .collect();
            assert!(algorithms.iter().all(|a| *a == "13"), "{text}");
            let algorithms: Vec<String> = rrsig_algorithms_and_expirations(answer)
                .into_iter()
                .map(|(algorithm, _)| algorithm)
                .collect();
            assert!(algorithms.iter().all(|a| a == "13"), "{answer}");
        },
    );
    for question in questions {
        unbound.validated(question);
    }
    // Still said after the rollover's reloads.
    let status = run(&["dnssec", "status"], &setup.config);
    assert!(status.contains(&format!("  warning: {said}")), "{status}");
}
