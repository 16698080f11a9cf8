//! Unit tests of the policy module (no sockets, no files other than the bundled example).

mod alloc;
mod anycast;
mod cells;
mod cells_live;
mod containment;
mod errors;
mod example;
mod health;
mod profiles;
mod projection;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Deserialize;

use super::*;

/// The policy part of a config file, as the lead embeds it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Fragment {
    #[serde(default)]
    topology: TopologyConfig,
    #[serde(default)]
    profiles: BTreeMap<String, ProfileConfig>,
    #[serde(default)]
    steered: Vec<SteeredConfig>,
}

pub(super) fn parse(text: &str) -> Fragment {
    match toml::from_str(text) {
        Ok(fragment) => fragment,
        Err(e) => panic!("test config does not parse: {e}"),
    }
}

pub(super) fn try_compile(
    text: &str,
    knobs: &ControlKnobs,
) -> Result<CompiledPolicies, Vec<PolicyError>> {
    let f = parse(text);
    compile(&f.topology, &f.profiles, &f.steered, knobs)
}

pub(super) fn compile_ok(text: &str, knobs: &ControlKnobs) -> CompiledPolicies {
    match try_compile(text, knobs) {
        Ok(p) => p,
        Err(errors) => panic!("unexpected compile errors: {errors:#?}"),
    }
}

pub(super) fn compile_err(text: &str, knobs: &ControlKnobs) -> Vec<PolicyError> {
    match try_compile(text, knobs) {
        Ok(_) => panic!("config compiled but should have been refused"),
        Err(errors) => errors,
    }
}

/// Asserts that some error has exactly `path` and a problem containing `needle`.
pub(super) fn assert_error(errors: &[PolicyError], path: &str, needle: &str) {
    assert!(
        errors
            .iter()
            .any(|e| e.path == path && e.problem.contains(needle)),
        "no error at {path:?} containing {needle:?} in {errors:#?}"
    );
}

/// A small topology: two EU regions, two NA regions, one AF region, fallback sites in EU and NA.
pub(super) const TOPOLOGY: &str = r#"
[topology]
global = ["192.0.2.1", "2001:db8::1"]
[[topology.regions]]
name = "eu-west"
continent = "EU"
anycast = ["198.51.100.4", "2001:db8:1::4"]
neighbours = ["eu-north", "na-east"]
capacity = 1000
[[topology.regions]]
name = "eu-north"
continent = "EU"
anycast = ["198.51.100.5", "2001:db8:1::5"]
neighbours = ["eu-west"]
[[topology.regions]]
name = "na-east"
continent = "NA"
anycast = ["198.51.100.1", "2001:db8:1::1"]
neighbours = ["na-west"]
[[topology.regions]]
name = "na-west"
continent = "NA"
anycast = ["198.51.100.2", "2001:db8:1::2"]
neighbours = ["na-east"]
[[topology.regions]]
name = "af-south"
continent = "AF"
anycast = ["198.51.100.6", "2001:db8:1::6"]
neighbours = ["eu-west"]
[[topology.fallback]]
name = "fb-eu"
continent = "EU"
anycast = ["203.0.113.2", "2001:db8:fb::2"]
capacity = 2000
[[topology.fallback]]
name = "fb-na"
continent = "NA"
anycast = ["203.0.113.1", "2001:db8:fb::1"]
"#;

pub(super) const EU_WEST: u16 = 0;
pub(super) const EU_NORTH: u16 = 1;
pub(super) const NA_EAST: u16 = 2;
pub(super) const NA_WEST: u16 = 3;
pub(super) const AF_SOUTH: u16 = 4;

/// The `i`-th distinct IPv4 /24 (host part varies to show it is ignored).
pub(super) fn v4_subnet(i: u32) -> IpAddr {
    let base = 0x0A00_0000u32 + (i << 8) + (i % 200) + 1;
    IpAddr::V4(Ipv4Addr::from(base))
}

/// The `i`-th distinct IPv6 /56.
pub(super) fn v6_subnet(i: u32) -> IpAddr {
    let base = (0x2001_0db8_u128 << 96) | (u128::from(i) << 72) | u128::from(i % 7 + 1);
    IpAddr::V6(Ipv6Addr::from(base))
}

pub(super) fn client(region: u16, addr: IpAddr, prefix_len: u8) -> LocatedClient {
    LocatedClient {
        region,
        addr,
        prefix_len,
    }
}

pub(super) fn v4(text: &str) -> Ipv4Addr {
    match text.parse() {
        Ok(a) => a,
        Err(e) => panic!("bad test address {text}: {e}"),
    }
}

pub(super) fn cname_of(d: &Decision<'_>) -> Option<String> {
    match d.target {
        Target::Cname { name, .. } => Some(name.to_ascii()),
        Target::Addresses { .. } => None,
    }
}

pub(super) fn v4_of<'a>(d: &Decision<'a>) -> &'a [Ipv4Addr] {
    match d.target {
        Target::Addresses { v4, .. } => v4,
        Target::Cname { .. } => &[],
    }
}

pub(super) fn root_of(p: &CompiledPolicies, name: &str) -> PolicyRoot {
    match p.profile_id(name) {
        Some(profile) => PolicyRoot::Profile {
            profile,
            ttl_cap: None,
        },
        None => panic!("no profile {name}"),
    }
}

/// The platform wildcard steered by the anycast policy (TTL 300), as the anycast and cells
/// tests configure it.
const STEERED: &str = r#"
[[steered]]
name = "*.edge.example.net."
policy = "anycast"
ttl = 300
"#;
