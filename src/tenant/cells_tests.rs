//! A plain tenant compiled against a platform with cells: its shard, its `cells` override,
//! and the text kept so that the registry compiles it again when the platform changes.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{compile, parse, Identity, PlatformView, ServedTenant};
use crate::cells::LayerRef;
use crate::policy::{CompiledPolicies, ControlKnobs, SteeredConfig, TopologyConfig};

#[derive(Deserialize)]
struct Fragment {
    topology: TopologyConfig,
    steered: Vec<SteeredConfig>,
}

const PLATFORM: &str = r#"
[topology]
global = ["192.0.2.1"]
[[topology.regions]]
name = "eu-west"
continent = "EU"
anycast = ["198.51.100.4"]
[topology.cells]
k = 2
global = [
  { name = "g1", anycast = ["192.0.2.11"] },
  { name = "g2", anycast = ["192.0.2.12"] },
  { name = "g3", anycast = ["192.0.2.13"] },
  { name = "g4", anycast = ["192.0.2.14"] },
]
[[steered]]
name = "*.edge.example.net."
policy = "anycast"
ttl = 120
"#;

fn platform(text: &str) -> CompiledPolicies {
    let fragment: Fragment = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
    let compiled = crate::policy::compile(
        &fragment.topology,
        &BTreeMap::new(),
        &fragment.steered,
        &ControlKnobs::default(),
    );
    compiled.unwrap_or_else(|e| panic!("{e:?}"))
}

fn tenant(policies: &CompiledPolicies, name: &str, text: &str) -> ServedTenant {
    let file = format!("tenants/{name}.toml");
    let parsed = parse(&file, text).unwrap_or_else(|p| panic!("{p:?}"));
    let view = PlatformView {
        policies,
        profiles: &BTreeMap::new(),
        exists: &|_| false,
    };
    let identity = Identity {
        name,
        serial: 1,
        fingerprint: 0,
    };
    compile(&parsed, identity, &view).unwrap_or_else(|p| panic!("{p:?}"))
}

#[test]
fn cells_a_plain_tenant_gets_its_shard_and_keeps_its_text() {
    let p = platform(PLATFORM);
    let text = "names = [\"fabrikam.edge.example.net.\"]\n";
    let t = tenant(&p, "fabrikam", text);
    let cells = t
        .cells(&p)
        .map(|c| c.layer(LayerRef::Global).map(|(v4, _)| v4.len()));
    assert_eq!(cells, Some(Some(2)));
    assert_eq!(
        t.own_profile_text(),
        Some(text),
        "compiled again on a platform change"
    );
    assert!(!t.has_own_profile());
    let three = tenant(
        &p,
        "tailspin",
        "names = [\"tailspin.edge.example.net.\"]\ncells = 3\n",
    );
    let cells = three.cells(&p).and_then(|c| c.layer(LayerRef::Global));
    assert_eq!(cells.map(|(v4, _)| v4.len()), Some(3));
}

#[test]
fn cells_of_another_platform_are_not_served() {
    let p = platform(PLATFORM);
    let t = tenant(&p, "fabrikam", "names = [\"fabrikam.edge.example.net.\"]\n");
    let more = PLATFORM.replace(
        "  { name = \"g4\", anycast = [\"192.0.2.14\"] },\n",
        "  { name = \"g4\", anycast = [\"192.0.2.14\"] },\n  { name = \"g5\", anycast = [\"192.0.2.15\"] },\n",
    );
    let other = platform(&more);
    assert!(other.cells().is_some());
    assert!(
        t.cells(&other).is_none(),
        "computed for four cells, not five"
    );
    assert_ne!(super::platform_key(&p), super::platform_key(&other));
    let (Some(start), Some(end)) = (
        PLATFORM.find("[topology.cells]"),
        PLATFORM.find("[[steered]]"),
    ) else {
        panic!("the platform has cells and steered names")
    };
    let none = platform(&format!("{}{}", &PLATFORM[..start], &PLATFORM[end..]));
    assert!(none.cells().is_none());
    let plain = tenant(
        &none,
        "fabrikam",
        "names = [\"fabrikam.edge.example.net.\"]\ncells = 3\n",
    );
    assert!(plain.cells(&none).is_none());
    assert_eq!(
        plain.own_profile_text(),
        None,
        "without cells, cached in compiled form"
    );
}
