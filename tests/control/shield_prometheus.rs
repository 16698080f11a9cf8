//! The shield's Prometheus load source end to end: Debian's real `prometheus` on loopback
//! scraping, every second, a small exporter the test serves; `steerdns serve` on the bundled
//! example with `[shield.prometheus]` pointed at it (capacities from the topology). Raising the
//! exporter's eu-west load makes eu-west shed (seen in status and in the answers for eu-west
//! client subnets); NaN and unknown names are refused with the reason shown, the last good
//! feed staying; stopping Prometheus freezes the decisions as a stale feed does. The same over
//! `https://`: Prometheus serving TLS with a self-signed certificate, trusted by `ca_file`.

use crate::control_common;

use std::time::Duration;

use serde_json::Value;

use control_common::*;

const EDGE: &str = "contoso.edge.example.net.";
/// The most any wait on the server or Prometheus may take.
const WAIT: Duration = Duration::from_secs(30);
/// The feed goes stale (decisions freeze) this long after Prometheus stops answering.
const STALE_AFTER_SECS: u64 = 4;
/// Loads of every region and site but eu-west: about half their topology capacity.
const STEADY: &[(&str, &str, &str)] = &[
    ("region", "na-east", "500"),
    ("region", "na-west", "400"),
    ("region", "sa-east", "150"),
    ("region", "eu-north", "200"),
    ("region", "af-south", "100"),
    ("region", "ap-east", "450"),
    ("region", "ap-south", "250"),
    ("fallback", "fb-na", "1000"),
    ("fallback", "fb-eu", "100"),
    ("fallback", "fb-ap", "1000"),
];

fn series(kind: &str, site: &str) -> String {
    format!("kind=\"{kind}\",site=\"{site}\"")
}

fn region<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["shield"]["regions"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("no shield status for {name}: {status:#}"))
}

fn wait_for(daemon: &Daemon, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    daemon.wait_for_status(what, WAIT, ready)
}

fn eu_west_load(status: &Value) -> Option<f64> {
    region(status, "eu-west")["load"].as_f64()
}

fn shed_fraction(status: &Value) -> f64 {
    region(status, "eu-west")["shed_fraction"]
        .as_f64()
        .expect("shed_fraction")
}

fn refusal(status: &Value) -> String {
    status["shield"]["last_feed_refusal"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// How many of `subnets` are answered something other than global anycast.
fn shed_answers(resolver: &mut Resolver, subnets: &[String]) -> usize {
    resolver
        .ask_a_from_each(EDGE, subnets)
        .iter()
        .zip(subnets)
        .filter(|(response, subnet)| {
            let addresses = a_records(response);
            assert_eq!(addresses.len(), 1, "{subnet}: {response:?}");
            addresses[0] != GLOBAL_V4
        })
        .count()
}

#[test]
fn prometheus_load_drives_the_shield_and_a_dead_prometheus_is_a_stale_feed() {
    let exporter = Exporter::start("edge_load");
    for (kind, site, value) in STEADY {
        exporter.set(&series(kind, site), value);
    }
    exporter.set(&series("region", "eu-west"), "500");
    let mut prometheus = Prometheus::start(exporter.addr);
    exporter.wait_scraped(1, WAIT);

    let setup = Setup::new("shield-prometheus");
    setup.extend_config(&format!(
        "[shield]\ntick_ms = 100\nhold_down_secs = 1\nshort_ttl = 5\n\
         stale_after_secs = {STALE_AFTER_SECS}\nrevert_after_secs = 600\n\n\
         [shield.prometheus]\nurl = \"{}\"\n\
         region_query = 'max by (site) (edge_load{{kind=\"region\"}})'\n\
         fallback_query = 'max by (site) (edge_load{{kind=\"fallback\"}})'\n\
         label = \"site\"\ninterval_ms = 300\ntimeout_ms = 2000\n",
        prometheus.url()
    ));
    let daemon = setup.start();

    // The first feed from Prometheus: eu-west at half its topology capacity, nothing shed.
    let status = wait_for(&daemon, "a feed from prometheus", |s| {
        s["shield"]["feed_origin"] == "prometheus" && eu_west_load(s) == Some(500.0)
    });
    assert_eq!(region(&status, "eu-west")["capacity"], 1000.0);
    assert_eq!(region(&status, "na-west")["capacity"], 800.0);
    let sources = status["shield"]["sources"].as_array().expect("sources");
    assert_eq!(
        sources,
        &vec![Value::from(format!("prometheus {}", prometheus.url()))]
    );
    assert_eq!(shed_fraction(&status), 0.0);
    let subnets = eu_west_subnets(200);
    let mut resolver = Resolver::new(daemon.dns);
    assert_eq!(shed_answers(&mut resolver, &subnets), 0);

    // NaN from the exporter: the whole result is refused with the reason, the last feed stays.
    exporter.set(&series("region", "eu-west"), "NaN");
    let status = wait_for(&daemon, "the NaN refused", |s| {
        refusal(s).contains("regions.eu-west.load: must be ≥ 0 (got NaN)")
    });
    assert!(
        refusal(&status).contains("(prometheus)"),
        "{}",
        refusal(&status)
    );
    assert_eq!(eu_west_load(&status), Some(500.0));
    // A series for a region that is not configured: refused by name.
    exporter.set(&series("region", "eu-west"), "500");
    exporter.set(&series("region", "mars"), "1");
    wait_for(&daemon, "the unknown name refused", |s| {
        refusal(s).contains("regions.mars: unknown region")
    });
    exporter.remove(&series("region", "mars"));

    // eu-west overloaded at the exporter: eu-west sheds, and eu-west clients see it.
    exporter.set(&series("region", "eu-west"), "990");
    let status = wait_for(&daemon, "eu-west shedding", |s| {
        eu_west_load(s) == Some(990.0) && shed_fraction(s) > 0.0
    });
    assert!(region(&status, "eu-west")["hot"].as_bool().expect("hot"));
    let status = wait_for(&daemon, "eu-west shedding 5 %", |s| {
        shed_fraction(s) >= 0.05
    });
    assert!(shed_fraction(&status) <= 1.0);
    let shed = shed_answers(&mut resolver, &subnets);
    assert!(
        shed > 0,
        "none of {} eu-west subnets shed at fraction {}",
        subnets.len(),
        shed_fraction(&status)
    );

    // Prometheus gone: no new feed; once the last one is older than stale_after the decisions
    // freeze (state "stale (frozen)"), the fraction held, and the failure is shown.
    prometheus.stop();
    let frozen = wait_for(&daemon, "decisions frozen", |s| {
        region(s, "eu-west")["state"] == "stale (frozen)"
    });
    let held = shed_fraction(&frozen);
    assert!(held > 0.0, "{frozen:#}");
    assert!(
        frozen["shield"]["alerts"]
            .as_array()
            .expect("alerts")
            .iter()
            .any(|a| a == "load feed is stale: decisions frozen"),
        "{:#}",
        frozen["shield"]
    );
    assert!(
        refusal(&frozen).contains("cannot connect"),
        "{}",
        refusal(&frozen)
    );
    // A couple more seconds of ticks (seen in the feed's age) change nothing.
    let age = frozen["shield"]["feed_age_secs"].as_f64().expect("age");
    let later = wait_for(&daemon, "the feed two seconds older", |s| {
        s["shield"]["feed_age_secs"].as_f64().expect("age") >= age + 2.0
    });
    assert_eq!(shed_fraction(&later), held);
    assert_eq!(region(&later, "eu-west")["state"], "stale (frozen)");
    assert!(shed_answers(&mut resolver, &subnets) > 0);
    daemon.stop();
}

#[test]
fn an_https_prometheus_trusted_by_ca_file_feeds_the_shield() {
    let exporter = Exporter::start("edge_load");
    for (kind, site, value) in STEADY {
        exporter.set(&series(kind, site), value);
    }
    exporter.set(&series("region", "eu-west"), "700");
    let prometheus = Prometheus::start_tls(exporter.addr);
    exporter.wait_scraped(1, WAIT);
    let cert = prometheus
        .cert
        .clone()
        .expect("a TLS Prometheus has a certificate");
    assert!(prometheus.url().starts_with("https://"));

    let setup = Setup::new("shield-prometheus-tls");
    setup.extend_config(&format!(
        "[shield]\ntick_ms = 100\n\n\
         [shield.prometheus]\nurl = \"{}\"\nca_file = \"{}\"\n\
         region_query = 'max by (site) (edge_load{{kind=\"region\"}})'\n\
         fallback_query = 'max by (site) (edge_load{{kind=\"fallback\"}})'\n\
         label = \"site\"\ninterval_ms = 300\ntimeout_ms = 2000\n",
        prometheus.url(),
        cert.display()
    ));
    let daemon = setup.start();
    let status = wait_for(&daemon, "a feed from prometheus over https", |s| {
        s["shield"]["feed_origin"] == "prometheus" && eu_west_load(s) == Some(700.0)
    });
    assert_eq!(
        status["shield"]["sources"],
        serde_json::json!([format!("prometheus {}", prometheus.url())])
    );
    daemon.stop();
}
