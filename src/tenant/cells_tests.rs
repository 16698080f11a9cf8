//! A plain tenant compiled against a platform with cells: its shard, its `cells` override,
//! and its cells assigned again (no text kept, no document compiled) when the platform's
//! cells change.

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
        max_monitors: usize::MAX,
    };
    let identity = Identity {
        name,
        serial: 1,
        fingerprint: 0,
    };
    compile(&parsed, identity, &view).unwrap_or_else(|p| panic!("{p:?}"))
}

#[test]
fn cells_a_plain_tenant_gets_its_shard_and_another_platform_assigns_it_again() {
    let p = platform(PLATFORM);
    let text = "names = [\"fabrikam.edge.example.net.\"]\n";
    let t = tenant(&p, "fabrikam", text);
    let cells = t
        .cells(&p)
        .map(|c| c.layer(LayerRef::Global).map(|(v4, _)| v4.len()));
    assert_eq!(cells, Some(Some(2)));
    assert_eq!(t.own_profile_text(), None, "no text kept for its cells");
    assert!(!t.has_own_profile());
    assert!(!t.cells_are_for_another_topology(p.cells()));
    // Another platform's cells: assigned again from the tenant alone, exactly as compiling
    // its document against that platform would, its own `cells` kept.
    let more = PLATFORM.replace(
        "  { name = \"g4\", anycast = [\"192.0.2.14\"] },\n",
        "  { name = \"g4\", anycast = [\"192.0.2.14\"] },\n  { name = \"g5\", anycast = [\"192.0.2.15\"] },\n",
    );
    let other = platform(&more);
    let mut interner = crate::cells::CellInterner::default();
    for (name, text) in [
        ("fabrikam", text),
        (
            "tailspin",
            "names = [\"tailspin.edge.example.net.\"]\ncells = 3\n",
        ),
    ] {
        let before = tenant(&p, name, text);
        assert!(before.cells_are_for_another_topology(other.cells()));
        let again = before
            .with_cells_of(other.cells(), &mut interner)
            .unwrap_or_else(|| panic!("{name}: not quarantined"));
        let compiled = tenant(&other, name, text);
        assert!(again.cells(&other).is_some(), "{name}");
        assert_eq!(again.cells(&other), compiled.cells(&other), "{name}");
        assert_eq!(again.cells_asked(), compiled.cells_asked(), "{name}");
        assert!(!again.cells_are_for_another_topology(other.cells()));
    }
    // Equal cells in a layer are one copy.
    let a = tenant(&p, "fabrikam", text).with_cells_of(other.cells(), &mut interner);
    let b = tenant(&p, "fabrikam", text).with_cells_of(other.cells(), &mut interner);
    let (Some(a), Some(b)) = (a, b) else {
        panic!("assigned")
    };
    let global = |t: &ServedTenant| {
        t.compiled_cells()
            .and_then(|c| c.layer(LayerRef::Global))
            .map(|(v4, _)| v4.as_ptr())
    };
    assert!(global(&a).is_some());
    assert_eq!(global(&a), global(&b));
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

const QUARANTINE: &str = r#"
quarantine = [
  { name = "q1", anycast = ["192.0.2.21"] },
  { name = "q2", anycast = ["192.0.2.22"] },
  { name = "q3", anycast = ["192.0.2.23"] },
]
"#;

/// The platform with quarantine cells (appended to `[topology.cells]`, before `[[steered]]`).
fn with_quarantine() -> CompiledPolicies {
    let text = PLATFORM.replacen("[[steered]]", &format!("{QUARANTINE}\n[[steered]]"), 1);
    platform(&text)
}

fn problems(policies: &CompiledPolicies, text: &str) -> Vec<String> {
    let parsed = parse("tenants/q.toml", text).unwrap_or_else(|p| panic!("{p:?}"));
    let view = PlatformView {
        policies,
        profiles: &BTreeMap::new(),
        exists: &|_| false,
        max_monitors: usize::MAX,
    };
    let identity = Identity {
        name: "q",
        serial: 1,
        fingerprint: 0,
    };
    match compile(&parsed, identity, &view) {
        Ok(_) => Vec::new(),
        Err(problems) => problems
            .iter()
            .map(|p| format!("{}: {}", p.field, p.problem))
            .collect(),
    }
}

#[test]
fn quarantine_a_quarantined_tenant_answers_from_quarantine_cells_in_every_layer() {
    let p = with_quarantine();
    let text = "names = [\"fabrikam.edge.example.net.\"]\nstate = \"quarantined\"\n";
    let t = tenant(&p, "fabrikam", text);
    let Some(cells) = t.cells(&p) else {
        panic!("quarantine cells assigned")
    };
    assert!(cells.is_quarantined());
    let quarantine: Vec<std::net::Ipv4Addr> = (21..=23)
        .map(|n| std::net::Ipv4Addr::new(192, 0, 2, n))
        .collect();
    for at in [LayerRef::Global, LayerRef::Region(0)] {
        let Some((v4, _)) = cells.layer(at) else {
            panic!("{at:?}: quarantine cells in every layer, even one without cells")
        };
        assert_eq!(v4.len(), 2, "{at:?}: k of the quarantine cells");
        assert!(v4.iter().all(|a| quarantine.contains(a)), "{at:?}: {v4:?}");
    }
    assert_eq!(t.state.as_str(), "quarantined");
    // Healthy tenants never get a quarantine cell.
    for i in 0..200 {
        let healthy = tenant(
            &p,
            &format!("t{i}"),
            &format!("names = [\"t{i}.edge.example.net.\"]\n"),
        );
        let (v4, _) = healthy
            .cells(&p)
            .and_then(|c| c.layer(LayerRef::Global))
            .unwrap_or_default();
        assert!(v4.iter().all(|a| !quarantine.contains(a)), "t{i}: {v4:?}");
    }
}

#[test]
fn quarantine_needs_quarantine_cells_and_the_platform_policy() {
    let text = "names = [\"q.edge.example.net.\"]\nstate = \"quarantined\"\n";
    let got = problems(&platform(PLATFORM), text);
    assert!(
        got.iter()
            .any(|p| p.starts_with("state: ") && p.contains("no quarantine cells")),
        "{got:?}"
    );
    let own = "names = [\"q.edge.example.net.\"]\nstate = \"quarantined\"\n[profile]\ntype = \"weighted\"\nttl = 30\nendpoints = [{ name = \"a\", cname = \"a.example.\", weight = 1 }]\n";
    let got = problems(&with_quarantine(), own);
    assert!(
        got.iter()
            .any(|p| p.starts_with("state: ") && p.contains("own [profile]")),
        "{got:?}"
    );
    // Quarantine cells that reuse a cell's address are refused with the platform.
    let reused = PLATFORM.replacen(
        "[[steered]]",
        "quarantine = [{ name = \"q1\", anycast = [\"192.0.2.12\"] }]\n[[steered]]",
        1,
    );
    let fragment: Fragment = toml::from_str(&reused).unwrap_or_else(|e| panic!("{e}"));
    let compiled = crate::policy::compile(
        &fragment.topology,
        &BTreeMap::new(),
        &fragment.steered,
        &ControlKnobs::default(),
    );
    let Err(errors) = compiled else {
        panic!("a quarantine cell on g2's address must be refused")
    };
    assert!(
        errors
            .iter()
            .any(|e| e.path == "topology.cells" && e.problem.contains("g2")),
        "{errors:?}"
    );
}

#[test]
fn cache_keeps_cells_compiled_each_shard_once_quarantine_included() {
    use super::cache::{decode, encode, CacheKey};
    let p = with_quarantine();
    let mut tenants: Vec<ServedTenant> = (0..300)
        .map(|i| {
            tenant(
                &p,
                &format!("t{i}"),
                &format!("names = [\"t{i}.edge.example.net.\"]\n"),
            )
        })
        .collect();
    tenants.push(tenant(
        &p,
        "tailspin",
        "names = [\"tailspin.edge.example.net.\"]\ncells = 3\n",
    ));
    tenants.push(tenant(
        &p,
        "fabrikam",
        "names = [\"fabrikam.edge.example.net.\"]\nstate = \"quarantined\"\n",
    ));
    let key = CacheKey {
        binary: "steerdns test".into(),
        platform: super::platform_key(&p),
    };
    let bytes = encode(&key, 0, tenants.iter(), std::iter::empty());
    let cached = decode(&bytes, &key).unwrap_or_else(|e| panic!("{e}"));
    assert!(cached.own.is_empty(), "no tenant cached as its text");
    assert_eq!(cached.plain.len(), tenants.len());
    for (a, b) in tenants.iter().zip(&cached.plain) {
        assert_eq!(a.name(), b.name());
        assert!(b.cells(&p).is_some(), "{}", a.name());
        assert_eq!(a.cells(&p), b.cells(&p), "{}", a.name());
        assert_eq!(a.cells_asked(), b.cells_asked(), "{}", a.name());
        assert_eq!(a.state, b.state, "{}", a.name());
    }
    // Four global cells, k = 2: at most six distinct global cells of plain tenants (plus
    // tailspin's and the quarantined one's), each held once after the read.
    let mut distinct: Vec<*const std::net::Ipv4Addr> = cached
        .plain
        .iter()
        .filter_map(|t| t.compiled_cells()?.layer(LayerRef::Global))
        .map(|(v4, _)| v4.as_ptr())
        .collect();
    distinct.sort();
    distinct.dedup();
    assert!(distinct.len() <= 8, "{} copies", distinct.len());
    // Far smaller than one shard per tenant in the file too.
    let each_once = encode(&key, 0, tenants.iter().take(1), std::iter::empty()).len();
    assert!(bytes.len() < each_once * tenants.len() / 2);
}

/// The bundled example's topology (cells in the global layer, in regions and at fallback
/// sites) with the platform wildcard.
fn example_platform() -> CompiledPolicies {
    let example: toml::Value =
        toml::from_str(include_str!("../../steerdns.toml")).unwrap_or_else(|e| panic!("{e}"));
    let topology: TopologyConfig = example
        .get("topology")
        .cloned()
        .map(|t| t.try_into().unwrap_or_else(|e| panic!("{e}")))
        .unwrap_or_else(|| panic!("the example has a topology"));
    let steered: Fragment = toml::from_str(PLATFORM).unwrap_or_else(|e| panic!("{e}"));
    let compiled = crate::policy::compile(
        &topology,
        &BTreeMap::new(),
        &steered.steered,
        &ControlKnobs::default(),
    );
    compiled.unwrap_or_else(|e| panic!("{e:?}"))
}

/// With cells in many layers nearly every tenant's whole shard is its own (the product of
/// each layer's choices), so sharing is per layer: a few copies of each layer's addresses
/// however many tenants, in memory and in the cache file, the same after the round trip.
#[test]
fn cells_are_shared_layer_by_layer_in_memory_and_in_the_cache() {
    use super::cache::{decode, encode, CacheKey};
    let p = example_platform();
    let topology = p.cells().unwrap_or_else(|| panic!("the example has cells"));
    let mut interner = crate::cells::CellInterner::default();
    let tenants: Vec<ServedTenant> = (0..2000)
        .map(|i| {
            let text = format!("names = [\"t{i}.edge.example.net.\"]\n");
            tenant(&p, &format!("t{i}"), &text).sharing_cells(&mut interner)
        })
        .collect();
    let layers: Vec<LayerRef> = topology.layers().map(|(at, _)| at).collect();
    assert!(layers.len() > 3, "cells in several layers: {layers:?}");
    let whole: std::collections::HashSet<&crate::cells::TenantCells> = tenants
        .iter()
        .filter_map(|t| t.compiled_cells())
        .map(|c| &**c)
        .collect();
    assert!(whole.len() > 1000, "{} distinct whole shards", whole.len());
    // Per layer: at most C(n, k) copies of its addresses, however many tenants.
    let copies = |tenants: &[ServedTenant]| -> usize {
        layers
            .iter()
            .map(|&at| {
                let mut seen: Vec<*const std::net::Ipv4Addr> = tenants
                    .iter()
                    .filter_map(|t| t.compiled_cells()?.layer(at))
                    .map(|(v4, _)| v4.as_ptr())
                    .collect();
                seen.sort();
                seen.dedup();
                seen.len()
            })
            .sum()
    };
    let bound: usize = topology
        .layers()
        .map(|(_, layer)| {
            let n = layer.cells().len();
            let k = topology.k().min(n);
            (0..k).fold(1, |c, i| c * (n - i) / (i + 1))
        })
        .sum();
    assert!(copies(&tenants) <= bound, "{} > {bound}", copies(&tenants));

    let key = CacheKey {
        binary: "steerdns test".into(),
        platform: super::platform_key(&p),
    };
    let bytes = encode(&key, 0, tenants.iter(), std::iter::empty());
    let cached = decode(&bytes, &key).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cached.plain.len(), tenants.len());
    for (a, b) in tenants.iter().zip(&cached.plain) {
        assert_eq!(a.cells(&p), b.cells(&p), "{}", a.name());
    }
    assert!(copies(&cached.plain) <= bound);
    // Each tenant's shard is a record of numbers in the file: well under the addresses of
    // its cells (2 cells x (4 + 16) bytes in each layer).
    let per_tenant = bytes.len() / tenants.len();
    assert!(
        per_tenant < 40 * layers.len(),
        "{per_tenant} bytes a tenant for {} layers",
        layers.len()
    );
}
