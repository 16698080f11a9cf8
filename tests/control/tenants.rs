//! Tenants end to end (issue 30), with the real binary over real files and sockets: a
//! thousand tenant documents served (DNS, `/v1/tenants`, metrics, the CLI); a batch of changes
//! with one invalid document, where only that one is refused and keeps its previous version;
//! the taster crashing on one tenant's document (the fault drill's marker), where only that
//! tenant is refused; a tenant refused before it ever served, listed with its reason; and a
//! rollback to an earlier version.
//!
//! Each tenant `tNNNN` owns `tNNNN.edge.example.net.` and answers by the platform wildcard
//! with its own TTL, so the TTL of an answer tells which version of its document is served.

use crate::control_common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{DNSClass, RData, RecordType};

use control_common::*;

/// The watcher reacts within milliseconds (inotify) or at its backstop poll.
const APPLY_WAIT: Duration = Duration::from_secs(20);

pub(crate) fn tenant_name(i: usize) -> String {
    format!("t{i:04}")
}

pub(crate) fn owned(name: &str) -> String {
    format!("{name}.edge.example.net.")
}

/// A plain tenant document: one name, the platform's policy, TTL `ttl`.
fn plain(name: &str, ttl: u32) -> String {
    format!("names = [\"{}\"]\nttl = {ttl}\n", owned(name))
}

/// A copy of the bundled example with `count` plain tenants `t0000..`, tenant `i` at TTL
/// `ttl(i)`.
pub(crate) fn setup_with(label: &str, count: usize, ttl: impl Fn(usize) -> u32) -> Setup {
    let setup = Setup::new(label);
    let dir = tenants_dir(&setup);
    std::fs::create_dir_all(&dir).expect("mkdir tenants");
    for i in 0..count {
        let name = tenant_name(i);
        std::fs::write(dir.join(format!("{name}.toml")), plain(&name, ttl(i)))
            .expect("write tenant");
    }
    setup
}

/// [`setup_with`], every tenant at TTL `ttl`.
fn setup_with_tenants(label: &str, count: usize, ttl: u32) -> Setup {
    setup_with(label, count, |_| ttl)
}

fn tenants_dir(setup: &Setup) -> PathBuf {
    setup.path("tenants")
}

fn write_tenant(setup: &Setup, name: &str, text: &str) {
    write_atomically(
        &tenants_dir(setup).join(format!("{name}.toml")),
        text.as_bytes(),
    );
}

/// `GET /v1/tenants`, parsed.
fn list(server: &Daemon) -> Vec<serde_json::Value> {
    let (code, body) = http(server.admin, "GET", "/v1/tenants", None);
    assert_eq!(code, 200, "GET /v1/tenants: {body}");
    serde_json::from_str(&body).expect("/v1/tenants is JSON")
}

/// `GET /v1/tenants/{name}`, parsed.
fn show(server: &Daemon, name: &str) -> serde_json::Value {
    let (code, body) = http(server.admin, "GET", &format!("/v1/tenants/{name}"), None);
    assert_eq!(code, 200, "GET /v1/tenants/{name}: {body}");
    serde_json::from_str(&body).expect("/v1/tenants/NAME is JSON")
}

/// The `tenants` block of the status.
pub(crate) fn tenant_status(server: &Daemon) -> serde_json::Value {
    server.status()["tenants"].clone()
}

pub(crate) fn count(status: &serde_json::Value, field: &str) -> u64 {
    status[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no tenants.{field} in {status:#}"))
}

/// Waits until `ready` holds of the tenants' status; returns it.
pub(crate) fn wait_tenants(
    server: &Daemon,
    what: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + APPLY_WAIT;
    loop {
        let status = tenant_status(server);
        if ready(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {APPLY_WAIT:?}; tenants: {status:#}\nlog:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The TTL and addresses of the A answer for `name` (the answer must be NOERROR with an A).
pub(crate) fn answer(resolver: &mut Resolver, name: &str) -> (u32, Vec<std::net::Ipv4Addr>) {
    let response = resolver.ask(&plain_query(name, RecordType::A));
    assert_eq!(
        response.metadata.response_code,
        ResponseCode::NoError,
        "{name}: {response:?}"
    );
    let ttl = response
        .answers
        .iter()
        .find(|r| matches!(r.data, RData::A(_)))
        .map(|r| r.ttl)
        .unwrap_or_else(|| panic!("{name}: no A in {response:?}"));
    (ttl, a_records(&response))
}

/// The TTL and A addresses of tenants `t0000`.. `count` of them, by name.
pub(crate) fn answers_of(
    resolver: &mut Resolver,
    count: usize,
) -> std::collections::BTreeMap<String, (u32, std::collections::BTreeSet<std::net::Ipv4Addr>)> {
    (0..count)
        .map(|i| {
            let (ttl, addresses) = answer(resolver, &owned(&tenant_name(i)));
            (tenant_name(i), (ttl, addresses.into_iter().collect()))
        })
        .collect()
}

/// `CH TXT <name>`: the decision trace, which names the tenant's served version.
pub(crate) fn chaos_trace(resolver: &mut Resolver, name: &str) -> String {
    let mut query: Message = plain_query(name, RecordType::TXT);
    query.queries[0].set_query_class(DNSClass::CH);
    let response = resolver.ask(&query);
    response
        .answers
        .iter()
        .find_map(|r| match &r.data {
            RData::TXT(txt) => Some(txt.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no TXT in the CH answer for {name}: {response:?}"))
}

/// One sample of a metric with the given labels.
pub(crate) fn metric(server: &Daemon, name: &str, labels: &[(&str, &str)]) -> f64 {
    let scrape = scrape_metrics(server.admin);
    let samples = samples_with(&scrape, name, labels);
    let sample = samples
        .first()
        .unwrap_or_else(|| panic!("no {name}{labels:?} in the metrics"));
    match sample.value {
        prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("{name}: unexpected value {other:?}"),
    }
}

/// `dig @server -p PORT args…` with the real dig; its stdout.
fn dig(server: &Daemon, args: &[&str]) -> String {
    let output = Command::new("dig")
        .arg(format!("@{}", server.dns.ip()))
        .arg("-p")
        .arg(server.dns.port().to_string())
        .args(["+time=3", "+tries=2"])
        .args(args)
        .output()
        .expect("dig must be installed (apt-get install bind9-dnsutils); .ci/run installs it");
    assert!(output.status.success(), "dig {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Issue 30: 1,000 tenant documents are served, and every view agrees.
#[test]
fn a_thousand_tenants_are_served() {
    const N: usize = 1000;
    // Each its own TTL, so an answer shows that its own document is served.
    let setup = setup_with("tenants-thousand", N, |i| 100 + i as u32);
    let server = setup.start();
    let status = tenant_status(&server);
    assert_eq!(
        (count(&status, "count"), count(&status, "served")),
        (N as u64, N as u64),
        "{status:#}"
    );
    assert_eq!(status["refused"].as_array().map(Vec::len), Some(0));
    assert_eq!(list(&server).len(), N);

    let mut resolver = Resolver::new(server.dns);
    for i in (0..N).step_by(37).chain([N - 1]) {
        let (ttl, addresses) = answer(&mut resolver, &owned(&tenant_name(i)));
        assert_eq!(ttl, 100 + i as u32, "{}", tenant_name(i));
        // The bundled example has cells (issue 31): two of its six global cells.
        assert_eq!(addresses.len(), 2, "{}: {addresses:?}", tenant_name(i));
        assert!(
            addresses
                .iter()
                .all(|a| a.octets()[..3] == [192, 0, 2] && a.octets()[3] > 100),
            "{}: {addresses:?}",
            tenant_name(i)
        );
    }
    // A name without a document keeps the wildcard's answer (TTL 300).
    assert_eq!(
        answer(&mut resolver, "contoso.edge.example.net."),
        (300, vec![GLOBAL_V4])
    );
    let dug = dig(
        &server,
        &["t0500.edge.example.net", "A", "+noall", "+answer"],
    );
    assert!(
        dug.contains("600") && dug.contains("192.0.2.1"),
        "dig t0500: {dug}"
    );

    assert_eq!(
        metric(&server, "steerdns_tenants", &[("state", "active")]),
        N as f64
    );
    assert_eq!(
        metric(&server, "steerdns_tenants", &[("state", "refused")]),
        0.0
    );

    let listed = ok(&server.cli(&["tenant", "list"]), "tenant list");
    assert_eq!(listed.lines().count(), N, "{listed}");
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("t0042 active serial 1 ")
                && l.ends_with("t0042.edge.example.net.")),
        "{listed}"
    );
    let shown = ok(&server.cli(&["tenant", "show", "t0042"]), "tenant show");
    assert!(shown.contains("state active"), "{shown}");
    assert!(shown.contains("served serial 1 version "), "{shown}");
    assert!(shown.contains("last refusal none"), "{shown}");
}

/// Issue 30: a batch of 50 changes with one invalid document: 49 are served at their new
/// version; the invalid one is refused with a reason naming its file and field, and keeps
/// serving its previous version (DNS, CH TXT, `tenant show`, metrics).
#[test]
fn a_batch_with_one_invalid_document_serves_the_other_49() {
    let setup = setup_with_tenants("tenants-batch", 60, 100);
    let server = setup.start();
    let bad = tenant_name(17);
    let mut resolver = Resolver::new(server.dns);
    let before_trace = chaos_trace(&mut resolver, &owned(&bad));
    assert!(
        before_trace.contains(&format!("tenant {bad} serial 1 version ")),
        "{before_trace}"
    );
    let before = tenant_status(&server);
    let applied = count(&before, "changes_applied");
    let refusals = count(&before, "refusals_total");

    for i in 0..50 {
        let name = tenant_name(i);
        let text = if name == bad {
            // Line 2: a TTL above the largest there is.
            format!("names = [\"{}\"]\nttl = 4294967295\n", owned(&name))
        } else {
            plain(&name, 200)
        };
        write_tenant(&setup, &name, &text);
    }
    let status = wait_tenants(&server, "49 applied and 1 refused", |s| {
        count(s, "changes_applied") >= applied + 49 && count(s, "refusals_total") > refusals
    });
    assert_eq!(
        count(&status, "changes_applied"),
        applied + 49,
        "{status:#}"
    );
    assert_eq!(count(&status, "refusals_total"), refusals + 1, "{status:#}");
    let refused = status["refused"].as_array().expect("refused list");
    assert_eq!(refused.len(), 1, "{status:#}");
    assert_eq!(refused[0]["name"], bad.as_str());
    assert_eq!(refused[0]["serving_previous"], true);

    for i in 0..60 {
        let name = tenant_name(i);
        let expected = if i < 50 && name != bad { 200 } else { 100 };
        assert_eq!(answer(&mut resolver, &owned(&name)).0, expected, "{name}");
    }
    // The refused tenant's trace still names its first version.
    assert_eq!(chaos_trace(&mut resolver, &owned(&bad)), before_trace);
    let changed = chaos_trace(&mut resolver, &owned(&tenant_name(3)));
    assert!(changed.contains("tenant t0003 serial 2 "), "{changed}");

    let view = show(&server, &bad);
    assert_eq!(
        (view["state"].as_str(), view["serial"].as_u64()),
        (Some("active"), Some(1))
    );
    let reasons = view["last_refusal"]["reasons"].to_string();
    assert!(
        reasons.contains("tenants/t0017.toml:2: ttl: 4294967295 is above the largest TTL"),
        "{reasons}"
    );
    let shown = ok(&server.cli(&["tenant", "show", &bad]), "tenant show");
    assert!(shown.contains("served serial 1 version "), "{shown}");
    assert!(shown.contains("tenants/t0017.toml:2: ttl:"), "{shown}");
    assert_eq!(
        metric(&server, "steerdns_tenants", &[("state", "refused")]),
        1.0
    );
    assert_eq!(
        metric(&server, "steerdns_tenants", &[("state", "never_served")]),
        0.0
    );
    assert_eq!(
        metric(&server, "steerdns_tenant_refusals_total", &[]),
        (refusals + 1) as f64
    );

    // Fixed, it is served at its new version and no longer listed as refused.
    write_tenant(&setup, &bad, &plain(&bad, 200));
    wait_tenants(&server, "the fixed tenant applied", |s| {
        count(s, "changes_applied") > applied + 49
    });
    assert_eq!(answer(&mut resolver, &owned(&bad)).0, 200);
    assert_eq!(show(&server, &bad)["last_refusal"], serde_json::Value::Null);
}

/// Issue 30: the taster child crashes on one tenant's document (the fault drill's marker):
/// only that tenant is refused, with the crash as the reason; the others are applied.
#[test]
fn the_taster_crashing_on_one_tenant_refuses_only_that_tenant() {
    let setup = setup_with_tenants("tenants-taster", 20, 100);
    let server = setup.start_under_with(&["env", "STEERDNS_TASTER_FAULT=abort:TENANT-BOOM"], &[]);
    let before = tenant_status(&server);
    let (applied, tastes) = (count(&before, "changes_applied"), count(&before, "tastes"));
    let culprit = tenant_name(6);
    // The documents land in one rename each, so the watcher may see them in one batch or a
    // few; the culprit is found either way.
    for i in 0..12 {
        let name = tenant_name(i);
        let mut text = plain(&name, 250);
        if name == culprit {
            text.push_str("# TENANT-BOOM\n");
        }
        write_tenant(&setup, &name, &text);
    }
    let status = wait_tenants(&server, "11 applied and the culprit refused", |s| {
        count(s, "changes_applied") >= applied + 11
            && s["refused"].as_array().is_some_and(|r| !r.is_empty())
    });
    let refused = status["refused"].as_array().expect("refused list");
    assert_eq!(refused.len(), 1, "{status:#}");
    assert_eq!(refused[0]["name"], culprit.as_str());
    let reason = refused[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("taster") && reason.contains("signal 6"),
        "{reason}"
    );
    assert!(count(&status, "tastes") > tastes + 1, "{status:#}");
    let mut resolver = Resolver::new(server.dns);
    for i in 0..20 {
        let name = tenant_name(i);
        let expected = if i < 12 && name != culprit { 250 } else { 100 };
        assert_eq!(answer(&mut resolver, &owned(&name)).0, expected, "{name}");
    }
    assert!(server.log_shows("taster killed by signal 6", Duration::from_secs(5)));
}

/// Issue 30: a tenant whose first document is refused is listed, with the reason naming its
/// file and field; its name keeps the wildcard's answer.
#[test]
fn a_tenant_refused_before_it_ever_served_is_listed_with_its_reason() {
    let setup = setup_with_tenants("tenants-never", 3, 100);
    write_tenant(
        &setup,
        "newcomer",
        "names = [\n  \"newcomer.edge.example.net.\",\n  \"newcomer.elsewhere.example.\",\n]\n",
    );
    let server = setup.start();
    let listed = list(&server);
    let entry = listed
        .iter()
        .find(|t| t["name"] == "newcomer")
        .unwrap_or_else(|| panic!("newcomer not listed: {listed:?}"));
    assert_eq!(entry["state"], "refused", "{entry:#}");
    assert_eq!(entry["serial"], serde_json::Value::Null);
    let reasons = entry["last_refusal"]["reasons"].to_string();
    assert!(
        reasons.contains("tenants/newcomer.toml:3: names[1]"),
        "{reasons}"
    );
    let status = tenant_status(&server);
    assert_eq!(count(&status, "served"), 3, "{status:#}");
    assert_eq!(status["refused"][0]["serving_previous"], false);
    assert_eq!(
        metric(&server, "steerdns_tenants", &[("state", "never_served")]),
        1.0
    );
    let listed = ok(&server.cli(&["tenant", "list"]), "tenant list");
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("newcomer refused never served")),
        "{listed}"
    );
    let shown = ok(&server.cli(&["tenant", "show", "newcomer"]), "tenant show");
    assert!(shown.contains("served never served"), "{shown}");
    assert!(
        shown.contains("tenants/newcomer.toml:3: names[1]"),
        "{shown}"
    );
    let mut resolver = Resolver::new(server.dns);
    assert_eq!(
        answer(&mut resolver, "newcomer.edge.example.net.").0,
        300,
        "the wildcard answers a name no served tenant owns"
    );
}

/// Issue 30: an earlier version of a tenant, put back from its history, is served again
/// (under a new serial, with the earlier version's fingerprint).
#[test]
fn a_tenant_rolled_back_to_an_earlier_version_is_served() {
    let setup = setup_with_tenants("tenants-rollback", 2, 100);
    let server = setup.start();
    let name = tenant_name(1);
    let first = show(&server, &name);
    let applied = count(&tenant_status(&server), "changes_applied");
    write_tenant(&setup, &name, &plain(&name, 222));
    wait_tenants(&server, "version 2 applied", |s| {
        count(s, "changes_applied") > applied
    });
    let mut resolver = Resolver::new(server.dns);
    assert_eq!(answer(&mut resolver, &owned(&name)).0, 222);

    let history = tenants_dir(&setup).join(".history").join(&name);
    let earlier = std::fs::read_to_string(history.join("0000000001.toml"))
        .unwrap_or_else(|e| panic!("{}: {e}", history.display()));
    assert_eq!(earlier, plain(&name, 100));
    write_tenant(&setup, &name, &earlier);
    wait_tenants(&server, "the rollback applied", |s| {
        count(s, "changes_applied") > applied + 1
    });
    assert_eq!(answer(&mut resolver, &owned(&name)).0, 100);
    let now = show(&server, &name);
    assert_eq!(now["serial"].as_u64(), Some(3), "{now:#}");
    assert_eq!(now["version"], first["version"], "{now:#}");
    assert!(history.join("0000000003.toml").exists());
}

fn put(server: &Daemon, name: &str, toml: &str, if_match: Option<&str>) -> (u16, String) {
    request(
        server,
        "PUT",
        &format!("/v1/tenants/{name}"),
        Some("application/toml"),
        if_match,
        toml,
    )
}

/// The `ETag` of `GET /v1/tenants/{name}`.
fn etag(server: &Daemon, name: &str) -> String {
    let request = format!(
        "GET /v1/tenants/{name} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        server.admin
    );
    let reply = exchange_http(server.admin, request.as_bytes(), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("GET /v1/tenants/{name}: {e}"));
    assert_eq!(reply.code, 200, "{}", reply.body);
    reply
        .head
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once(':')?;
            key.eq_ignore_ascii_case("etag")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no ETag in {}", reply.head))
}

/// Issue 30: 20 concurrent PUTs of different tenants (TOML and JSON bodies) all land, and each
/// is served by the time its response comes back.
#[test]
fn twenty_concurrent_puts_to_different_tenants_all_land_and_are_served() {
    let setup = setup_with_tenants("tenants-api-many", 2, 100);
    let server = setup.start();
    let barrier = std::sync::Barrier::new(20);
    let replies: Vec<(usize, u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let (server, barrier) = (&server, &barrier);
                scope.spawn(move || {
                    let name = format!("api{i:02}");
                    barrier.wait();
                    let (code, body) = if i % 2 == 0 {
                        put(server, &name, &plain(&name, 100 + i as u32), None)
                    } else {
                        let json = serde_json::json!({
                            "names": [owned(&name)],
                            "ttl": 100 + i,
                        });
                        request(
                            server,
                            "PUT",
                            &format!("/v1/tenants/{name}"),
                            Some("application/json"),
                            None,
                            &json.to_string(),
                        )
                    };
                    (i, code, body)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("PUT thread"))
            .collect()
    });
    let mut resolver = Resolver::new(server.dns);
    for (i, code, body) in &replies {
        assert_eq!(*code, 201, "api{i:02}: {body}");
        let reply: serde_json::Value = serde_json::from_str(body).expect("PUT reply is JSON");
        assert_eq!(reply["tenant"]["serial"], 1, "{reply:#}");
        let name = format!("api{i:02}");
        // Served when the response came back: no wait.
        assert_eq!(
            answer(&mut resolver, &owned(&name)).0,
            100 + *i as u32,
            "{name}"
        );
        assert!(tenants_dir(&setup).join(format!("{name}.toml")).exists());
        assert!(tenants_dir(&setup)
            .join(format!(".history/{name}/0000000001.toml"))
            .exists());
    }
    let status = tenant_status(&server);
    assert_eq!(count(&status, "served"), 22, "{status:#}");
    // The folder's next look finds nothing new: the API's writes were applied already.
    let applied = count(&status, "changes_applied");
    let checks = count(&status, "checks");
    wait_tenants(&server, "two more looks at the folder", |s| {
        count(s, "checks") >= checks + 2
    });
    assert_eq!(count(&tenant_status(&server), "changes_applied"), applied);
}

/// Issue 30: two concurrent PUTs of one tenant with the same `If-Match`: exactly one lands,
/// the other gets 412 and writes nothing.
#[test]
fn two_puts_with_the_same_if_match_one_is_refused_with_412() {
    let setup = setup_with_tenants("tenants-api-cas", 1, 100);
    let server = setup.start();
    let name = tenant_name(0);
    let tag = etag(&server, &name);
    let barrier = std::sync::Barrier::new(2);
    let replies: Vec<(u32, u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = [201u32, 202]
            .into_iter()
            .map(|ttl| {
                let (server, barrier, name, tag) = (&server, &barrier, &name, &tag);
                scope.spawn(move || {
                    barrier.wait();
                    let (code, body) = put(server, name, &plain(name, ttl), Some(tag));
                    (ttl, code, body)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("PUT"))
            .collect()
    });
    let codes: Vec<u16> = replies.iter().map(|r| r.1).collect();
    let won: Vec<&(u32, u16, String)> = replies.iter().filter(|r| r.1 == 200).collect();
    assert_eq!(won.len(), 1, "{replies:?}");
    assert!(codes.contains(&412), "{replies:?}");
    let lost = replies.iter().find(|r| r.1 == 412).expect("a 412");
    assert!(lost.2.contains("\"written\":false"), "{}", lost.2);
    let winner = won[0].0;
    let mut resolver = Resolver::new(server.dns);
    assert_eq!(answer(&mut resolver, &owned(&name)).0, winner);
    let on_disk = std::fs::read_to_string(tenants_dir(&setup).join(format!("{name}.toml")))
        .expect("tenant file");
    assert_eq!(on_disk, plain(&name, winner));
    // The new ETag works; the old one does not.
    let (code, body) = put(&server, &name, &plain(&name, 150), Some(&tag));
    assert_eq!(code, 412, "{body}");
    let (code, body) = put(
        &server,
        &name,
        &plain(&name, 150),
        Some(&etag(&server, &name)),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(answer(&mut resolver, &owned(&name)).0, 150);
}

/// Issue 30: a bad body is refused naming the field (422) or what it is not (400), and
/// nothing is written; a write needs the token; DELETE gives the names back to the wildcard.
#[test]
fn a_bad_tenant_body_writes_nothing_and_delete_gives_the_names_back() {
    let setup = setup_with_tenants("tenants-api-bad", 1, 100);
    let server = setup.start();
    let name = tenant_name(0);
    let file = tenants_dir(&setup).join(format!("{name}.toml"));
    let before = std::fs::read_to_string(&file).expect("tenant file");

    let (code, body) = put(
        &server,
        &name,
        &format!("names = [\"{}\"]\nttl = 4294967295\n", owned(&name)),
        None,
    );
    assert_eq!(code, 422, "{body}");
    let reply: serde_json::Value = serde_json::from_str(&body).expect("JSON error body");
    assert_eq!(reply["written"], false);
    assert_eq!(reply["problems"][0]["field"], "ttl", "{reply:#}");
    assert_eq!(
        reply["problems"][0]["file"], "tenants/t0000.toml",
        "{reply:#}"
    );
    assert_eq!(reply["problems"][0]["line"], 2, "{reply:#}");

    let (code, body) = request(
        &server,
        "PUT",
        &format!("/v1/tenants/{name}"),
        Some("application/json"),
        None,
        "{\"names\": [",
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("not JSON"), "{body}");
    let (code, body) = request(
        &server,
        "PUT",
        &format!("/v1/tenants/{name}"),
        Some("application/json"),
        None,
        &serde_json::json!({ "names": [owned(&name)], "colour": 3 }).to_string(),
    );
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("colour"), "{body}");
    // Another tenant's name is refused naming both.
    let (code, body) = put(&server, "thief", &plain(&name, 100), None);
    assert_eq!(code, 422, "{body}");
    assert!(body.contains("already claimed by tenant t0000"), "{body}");
    assert!(!tenants_dir(&setup).join("thief.toml").exists());
    // No token: refused before the body is read.
    let (code, _) = http(server.admin, "PUT", &format!("/v1/tenants/{name}"), None);
    assert_eq!(code, 401);
    assert_eq!(std::fs::read_to_string(&file).expect("tenant file"), before);
    let mut resolver = Resolver::new(server.dns);
    assert_eq!(answer(&mut resolver, &owned(&name)).0, 100);

    let (code, body) = request(
        &server,
        "DELETE",
        &format!("/v1/tenants/{name}"),
        None,
        Some("\"1\""),
        "",
    );
    assert_eq!(code, 412, "{body}");
    let (code, body) = request(
        &server,
        "DELETE",
        &format!("/v1/tenants/{name}"),
        None,
        None,
        "",
    );
    assert_eq!(code, 200, "{body}");
    assert!(!file.exists());
    assert_eq!(answer(&mut resolver, &owned(&name)).0, 300);
    let (code, _) = http(server.admin, "GET", &format!("/v1/tenants/{name}"), None);
    assert_eq!(code, 404);
    let (code, body) = request(
        &server,
        "DELETE",
        &format!("/v1/tenants/{name}"),
        None,
        None,
        "",
    );
    assert_eq!(code, 404, "{body}");
}

/// Issue 30: `tenant put`, `history`, `diff`, `rollback`, `delete` and `import` through the
/// running server: each write is served when the command returns.
#[test]
fn the_tenant_commands_put_roll_back_delete_and_import() {
    let setup = setup_with_tenants("tenants-cli", 1, 100);
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    let drafts = setup.path("drafts");
    std::fs::create_dir_all(&drafts).expect("mkdir drafts");
    let draft = drafts.join("cli.toml");
    let path = draft.display().to_string();

    std::fs::write(&draft, plain("cli", 111)).expect("write draft");
    let out = ok(&server.cli(&["tenant", "put", &path]), "tenant put");
    assert!(out.contains("tenant cli: serving serial 1"), "{out}");
    assert_eq!(answer(&mut resolver, &owned("cli")).0, 111);
    std::fs::write(&draft, plain("cli", 122)).expect("write draft");
    let out = ok(&server.cli(&["tenant", "put", &path]), "tenant put");
    assert!(out.contains("serving serial 2"), "{out}");
    assert_eq!(answer(&mut resolver, &owned("cli")).0, 122);

    // A bad document: refused naming the field, nothing written, the old version served.
    std::fs::write(
        &draft,
        format!("names = [\"{}\"]\nttl = 4294967295\n", owned("cli")),
    )
    .expect("write draft");
    let refused = server.cli(&["tenant", "put", &path]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("tenants/cli.toml:2: ttl:"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(answer(&mut resolver, &owned("cli")).0, 122);

    let history = ok(&server.cli(&["tenant", "history", "cli"]), "tenant history");
    assert_eq!(history.lines().count(), 2, "{history}");
    let diff = ok(&server.cli(&["tenant", "diff", "cli"]), "tenant diff");
    assert!(
        diff.contains("- ttl = 111") && diff.contains("+ ttl = 122"),
        "{diff}"
    );
    let out = ok(
        &server.cli(&["tenant", "rollback", "cli"]),
        "tenant rollback",
    );
    assert!(out.contains("rolling back to version 1"), "{out}");
    assert!(out.contains("serving serial 3"), "{out}");
    assert_eq!(answer(&mut resolver, &owned("cli")).0, 111);
    let out = ok(
        &server.cli(&["tenant", "rollback", "cli", "2"]),
        "tenant rollback 2",
    );
    assert!(out.contains("serving serial 4"), "{out}");
    assert_eq!(answer(&mut resolver, &owned("cli")).0, 122);

    let out = ok(&server.cli(&["tenant", "delete", "cli"]), "tenant delete");
    assert!(out.contains("removed"), "{out}");
    assert_eq!(answer(&mut resolver, &owned("cli")).0, 300);
    assert!(!tenants_dir(&setup).join("cli.toml").exists());

    // Import: five documents, one bad; four served, the bad one refused on its own.
    let import = setup.path("import");
    std::fs::create_dir_all(&import).expect("mkdir import");
    for i in 0..5 {
        let name = format!("imp{i}");
        let text = if i == 3 {
            format!("names = [\"{}\"]\ncolour = 1\n", owned(&name))
        } else {
            plain(&name, 130 + i)
        };
        std::fs::write(import.join(format!("{name}.toml")), text).expect("write import");
    }
    let imported = server.cli(&["tenant", "import", &import.display().to_string()]);
    assert!(
        !imported.status.success(),
        "a refused document fails the import"
    );
    assert!(
        stdout(&imported).contains("imported 4 of 5 tenant documents"),
        "{}",
        stdout(&imported)
    );
    assert!(
        stderr(&imported).contains("colour"),
        "{}",
        stderr(&imported)
    );
    for i in [0u32, 1, 2, 4] {
        assert_eq!(answer(&mut resolver, &owned(&format!("imp{i}"))).0, 130 + i);
    }
    assert_eq!(answer(&mut resolver, &owned("imp3")).0, 300);
}

/// Issue 30: with no server answering, `tenant put` writes the folder through the store, and
/// a server started afterwards serves it.
#[test]
fn tenant_put_without_a_server_writes_the_folder() {
    let setup = setup_with_tenants("tenants-cli-offline", 1, 100);
    let draft = setup.path("solo.toml");
    std::fs::write(&draft, plain("solo", 144)).expect("write draft");
    let output = Command::new(BIN)
        .args(["tenant", "put", &draft.display().to_string()])
        .arg("--config")
        .arg(&setup.config)
        .arg("--admin")
        .arg(format!("127.0.0.1:{}", free_port()))
        .env("STEERDNS_LOG", "warn")
        .output()
        .expect("run steerdns");
    let out = ok(&output, "tenant put (no server)");
    assert!(out.contains("written to the tenants folder"), "{out}");
    assert_eq!(
        std::fs::read_to_string(tenants_dir(&setup).join("solo.toml")).expect("written"),
        plain("solo", 144)
    );
    let server = setup.start();
    let mut resolver = Resolver::new(server.dns);
    assert_eq!(answer(&mut resolver, &owned("solo")).0, 144);
}

/// Waits until `name` answers with TTL `ttl`.
fn wait_ttl(resolver: &mut Resolver, server: &Daemon, name: &str, ttl: u32) {
    let deadline = Instant::now() + APPLY_WAIT;
    loop {
        let (got, _) = answer(resolver, name);
        if got == ttl {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: TTL {got}, not {ttl}, within {APPLY_WAIT:?}\nlog:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 30 (cold start) and 32: a restart serves every tenant from the last-known-good cache
/// (`tenants/.lkg/tenants.bin`) before it reads a document, then picks up what changed while
/// it was down (a document edited, one removed); a damaged cache is refused whole, status
/// says why, and the folder is read as before.
#[test]
fn a_restart_serves_tenants_from_the_cache_then_what_changed_while_it_was_down() {
    const N: usize = 300;
    let setup = setup_with_tenants("tenants-cache", N, 100);
    let server = setup.start();
    let status = tenant_status(&server);
    assert!(status["cache_loaded"].is_null(), "{status:#}");
    let not_used = status["cache_not_used"].as_str().unwrap_or_default();
    assert!(not_used.contains("none yet"), "{status:#}");
    wait_tenants(&server, "the cache written", |s| {
        count(s, "cache_writes") >= 1
    });
    server.stop();

    write_tenant(&setup, "t0007", &plain("t0007", 222));
    std::fs::remove_file(tenants_dir(&setup).join("t0008.toml")).expect("remove t0008");
    let server = setup.start();
    let status = tenant_status(&server);
    assert_eq!(
        status["cache_loaded"].as_u64(),
        Some(N as u64),
        "{status:#}"
    );
    assert!(
        server
            .log()
            .contains(&format!("tenants: {N} served from the cache")),
        "{}",
        server.log()
    );
    wait_tenants(&server, "the removal made while down", |s| {
        count(s, "served") == N as u64 - 1
    });
    let mut resolver = Resolver::new(server.dns);
    wait_ttl(&mut resolver, &server, &owned("t0007"), 222);
    assert_eq!(answer(&mut resolver, &owned("t0100")).0, 100);
    assert_eq!(
        answer(&mut resolver, &owned("t0008")).0,
        300,
        "the wildcard's TTL"
    );
    assert_eq!(show(&server, "t0007")["serial"].as_u64(), Some(2));
    assert_eq!(
        metric(&server, "steerdns_tenants_from_cache", &[]),
        N as f64
    );
    wait_tenants(&server, "the cache written again", |s| {
        count(s, "cache_writes") >= 1
    });
    server.stop();

    let cache = tenants_dir(&setup).join(".lkg").join("tenants.bin");
    let mut bytes = std::fs::read(&cache).expect("the cache exists");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&cache, bytes).expect("damage the cache");
    let server = setup.start();
    let status = tenant_status(&server);
    assert!(status["cache_loaded"].is_null(), "{status:#}");
    let not_used = status["cache_not_used"].as_str().unwrap_or_default();
    assert!(not_used.contains("checksum"), "{status:#}");
    assert_eq!(count(&status, "served"), N as u64 - 1, "{status:#}");
    assert_eq!(
        answer(&mut Resolver::new(server.dns), &owned("t0007")).0,
        222
    );
}

/// Issue 30 (1,000 changes a second): puts that arrive while the taster is busy are tasted
/// together. One put is held a second in the taster (the drill's `slow:` marker); the twenty
/// sent meanwhile wait for it and then share one taster run, not twenty, and every one is
/// served at its own version.
#[test]
fn puts_that_arrive_during_a_taste_share_the_next_taster_run() {
    let setup = setup_with_tenants("tenants-combined", 1, 100);
    let server = setup.start_under_with(&["env", "STEERDNS_TASTER_FAULT=slow:SLOW-TASTE"], &[]);
    let before = count(&tenant_status(&server), "tastes");
    let replies: Vec<(usize, u16, String)> = std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            let text = format!("# SLOW-TASTE\n{}", plain("slow", 150));
            put(&server, "slow", &text, None)
        });
        // The slow put is in the taster once the taster count moved.
        wait_tenants(&server, "the slow put in the taster", |s| {
            count(s, "tastes") > before
        });
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let server = &server;
                scope.spawn(move || {
                    let name = format!("q{i:02}");
                    let (code, body) = put(server, &name, &plain(&name, 100 + i as u32), None);
                    (i, code, body)
                })
            })
            .collect();
        let mut replies: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("PUT thread"))
            .collect();
        let (code, body) = slow.join().expect("slow PUT thread");
        replies.push((99, code, body));
        replies
    });
    for (i, code, body) in &replies {
        assert_eq!(*code, 201, "put {i}: {body}");
    }
    let mut resolver = Resolver::new(server.dns);
    for i in 0..20 {
        assert_eq!(
            answer(&mut resolver, &owned(&format!("q{i:02}"))).0,
            100 + i
        );
    }
    assert_eq!(answer(&mut resolver, &owned("slow")).0, 150);
    let tastes = count(&tenant_status(&server), "tastes") - before;
    // One for the slow put, one (rarely two or three, on a busy machine) for the twenty.
    assert!(
        tastes <= 4,
        "21 puts took {tastes} taster runs: queued puts are not tasted together"
    );
}
