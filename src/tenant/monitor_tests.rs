//! A tenant's own monitors compiled against a platform that has monitors of its own: their
//! slots come after the platform's, its answers read them from the tenant's view (never the
//! platform's slot of the same number), every endpoint down answers as if all were up, and
//! the platform's limit on monitors per document is refused naming the field.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use serde::Deserialize;

use super::{compile, parse, Identity, PlatformView, ServedTenant};
use crate::policy::{
    evaluate_with_own_health, CompiledPolicies, ControlKnobs, HealthView, LocatedClient,
    ProfileConfig, ShedView, SlotHealth, SteeredConfig, Target, TopologyConfig,
};

#[derive(Deserialize)]
struct Fragment {
    topology: TopologyConfig,
    profiles: BTreeMap<String, ProfileConfig>,
    steered: Vec<SteeredConfig>,
}

/// A platform with one monitored endpoint (slot 0).
const PLATFORM: &str = r#"
[topology]
global = ["192.0.2.1"]
[[topology.regions]]
name = "eu-west"
continent = "EU"
anycast = ["198.51.100.4"]
[profiles.app]
type = "failover"
ttl = 30
[[profiles.app.endpoints]]
name = "primary"
addresses = ["203.0.113.50"]
monitor = { tcp = "10.0.0.5:443" }
[[steered]]
name = "*.edge.example.net."
policy = "anycast"
ttl = 120
[[steered]]
name = "app.example.net."
profile = "app"
"#;

fn platform() -> (CompiledPolicies, BTreeMap<String, ProfileConfig>) {
    let fragment: Fragment = toml::from_str(PLATFORM).unwrap_or_else(|e| panic!("{e}"));
    let compiled = crate::policy::compile(
        &fragment.topology,
        &fragment.profiles,
        &fragment.steered,
        &ControlKnobs::default(),
    );
    (
        compiled.unwrap_or_else(|e| panic!("{e:?}")),
        fragment.profiles,
    )
}

const TENANT: &str = r#"names = ["watched.edge.example.net."]
[monitors.a]
tcp = "127.0.0.1:1001"
interval_ms = 1000
[monitors.b]
tcp = "127.0.0.1:1002"
interval_ms = 1000
[monitors.spare]
url = "http://[::1]:8080/health"
[profile]
type = "weighted"
ttl = 30
[[profile.endpoints]]
name = "a"
addresses = ["198.51.100.1"]
weight = 100
monitor = "a"
[[profile.endpoints]]
name = "b"
addresses = ["198.51.100.2"]
weight = 100
monitor = "b"
"#;

fn compiled(
    policies: &CompiledPolicies,
    profiles: &BTreeMap<String, ProfileConfig>,
    text: &str,
    max_monitors: usize,
) -> Result<ServedTenant, Vec<String>> {
    let parsed = parse("tenants/watched.toml", text)
        .map_err(|p| p.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    let view = PlatformView {
        policies,
        profiles,
        exists: &|_| false,
        max_monitors,
    };
    let identity = Identity {
        name: "watched",
        serial: 1,
        fingerprint: 0,
    };
    compile(&parsed, identity, &view).map_err(|p| p.iter().map(ToString::to_string).collect())
}

fn answer(t: &ServedTenant, platform: &CompiledPolicies, own: &[bool]) -> Ipv4Addr {
    let Some(wildcard) = platform.steered().first().map(|s| s.root) else {
        panic!("the wildcard")
    };
    let (policies, root) = t.route(platform, wildcard);
    let Some(monitors) = t.own_monitors() else {
        panic!("own monitors")
    };
    let own = HealthView::new(
        own.iter()
            .map(|&up| SlotHealth { up, last_up: 0 })
            .collect(),
    );
    // The platform's slot 0 down: it must not take the tenant's first endpoint out.
    let platform_view = HealthView::new(vec![SlotHealth {
        up: false,
        last_up: 0,
    }]);
    let client = LocatedClient {
        region: 0,
        addr: IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)),
        prefix_len: 24,
    };
    let decision = evaluate_with_own_health(
        policies,
        root,
        &client,
        &ShedView::default(),
        &platform_view,
        monitors.base,
        &own,
    );
    match decision.target {
        Target::Addresses { v4, .. } if v4.len() == 1 => v4[0],
        other => panic!("{other:?}"),
    }
}

#[test]
fn own_monitors_are_numbered_after_the_platforms_and_read_from_the_tenants_view() {
    let (p, profiles) = platform();
    assert_eq!(p.monitors().len(), 1);
    let t = compiled(&p, &profiles, TENANT, 64).unwrap_or_else(|e| panic!("{e:?}"));
    let Some(monitors) = t.own_monitors() else {
        panic!("own monitors")
    };
    assert_eq!(monitors.base, 1);
    let names: Vec<&str> = monitors.specs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["a", "b", "spare"],
        "every monitor defined is probed"
    );
    let first = answer(&t, &p, &[true, true, true]);
    let a = Ipv4Addr::new(198, 51, 100, 1);
    let b = Ipv4Addr::new(198, 51, 100, 2);
    let (first_slot, other) = if first == a { (0, b) } else { (1, a) };
    let mut down = [true, true, true];
    down[first_slot] = false;
    assert_eq!(
        answer(&t, &p, &down),
        other,
        "the down endpoint is left out"
    );
    assert_eq!(
        answer(&t, &p, &[false, false, true]),
        first,
        "all down: answered as if every one were up, never empty"
    );
}

#[test]
fn more_monitors_than_the_platform_allows_are_refused_naming_the_field() {
    let (p, profiles) = platform();
    let problems = compiled(&p, &profiles, TENANT, 2).err().unwrap_or_default();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("tenants/watched.toml:2: monitors: 3 monitors, at most 2"),
        "{problems:?}"
    );
}

#[test]
fn a_monitor_names_an_address_and_an_endpoint_names_a_monitor_of_its_own_document() {
    let (p, profiles) = platform();
    let text = TENANT
        .replace("127.0.0.1:1002", "backend.example.org:1002")
        .replace("monitor = \"a\"", "monitor = \"other\"");
    let problems = compiled(&p, &profiles, &text, 64).err().unwrap_or_default();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems.iter().any(
            |p| p.starts_with("tenants/watched.toml:5: monitors.b:") && p.contains("host name")
        ),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("profile.endpoints[0].monitor:") && p.contains("\"other\"")),
        "{problems:?}"
    );
    let bad = TENANT.replace(
        "interval_ms = 1000\n[monitors.b]",
        "interval_ms = 10\n[monitors.b]",
    );
    let problems = compiled(&p, &profiles, &bad, 64).err().unwrap_or_default();
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("tenants/watched.toml:2: monitors.a.interval_ms:")),
        "{problems:?}"
    );
}
