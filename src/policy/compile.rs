//! Validation and compilation of topology, profiles, steered names and control knobs into
//! [`CompiledPolicies`]. Every problem is collected (not just the first) and names its field.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::Name;

use super::config::{
    FallbackSiteConfig, ProfileConfig, RegionConfig, SteeredConfig, SteeredPolicyKind,
    TopologyConfig,
};
use super::knobs::{ControlKnobs, Destination, ForcedAnswer};
use super::model::{
    CompiledPolicies, PolicyRoot, ProfileId, RegionInfo, RegionOverride, SiteInfo, SteeredName,
};
use super::profiles::compile_profiles;

/// Largest TTL a DNS answer may carry (RFC 2181 §8).
pub const MAX_TTL: u32 = 2_147_483_647;

/// One reason a policy configuration (or control file) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct PolicyError {
    /// Field path, e.g. `profiles.critical.endpoints[1].weight` or `control.regions.eu-west`.
    pub path: String,
    /// What is wrong, for an operator.
    pub problem: String,
}

/// Collects errors while compiling.
#[derive(Default)]
pub(crate) struct Errors(pub(crate) Vec<PolicyError>);

impl Errors {
    pub(crate) fn push(&mut self, path: impl Into<String>, problem: impl Into<String>) {
        self.0.push(PolicyError {
            path: path.into(),
            problem: problem.into(),
        });
    }
}

/// Validates and compiles the policy configuration with the control knobs applied.
///
/// Returns every problem found, each naming its field; nothing partial is ever returned.
pub fn compile(
    topology: &TopologyConfig,
    profiles: &BTreeMap<String, ProfileConfig>,
    steered: &[SteeredConfig],
    knobs: &ControlKnobs,
) -> Result<CompiledPolicies, Vec<PolicyError>> {
    let mut errors = Errors::default();
    let (global_v4, global_v6) = parse_addresses(&topology.global, "topology.global", &mut errors);
    let families = Families {
        v4: !global_v4.is_empty(),
        v6: !global_v6.is_empty(),
    };
    let regions = compile_regions(&topology.regions, families, &mut errors);
    let sites = compile_sites(&topology.fallback, families, &regions, &mut errors);
    let overrides = compile_region_knobs(knobs, &regions, &sites, &mut errors);
    let (compiled_profiles, mut monitors) =
        compile_profiles(profiles, &regions, knobs, &mut errors);
    let steered = compile_steered(steered, profiles, families, &mut errors);
    let cells = topology.cells.as_ref().and_then(|config| {
        let families = (families.v4, families.v6);
        super::cells::compile_cells(config, families, &regions, &sites, &mut errors)
    });
    let cell_monitors = match (topology.cells.as_ref(), cells.as_deref()) {
        (Some(config), Some(compiled)) => super::cells::compile_cell_monitors(
            config,
            compiled,
            &regions,
            &sites,
            &mut monitors,
            &mut errors,
        ),
        _ => Vec::new(),
    };
    let impaired_cells = super::cells::compile_cell_knobs(
        &knobs.cells,
        cells.as_deref(),
        &regions,
        &sites,
        &mut errors,
    );
    if !errors.0.is_empty() {
        return Err(errors.0);
    }
    let any_override = overrides.iter().any(|o| *o != RegionOverride::None);
    Ok(CompiledPolicies {
        global_v4,
        global_v6,
        regions,
        sites,
        overrides,
        any_override,
        profiles: compiled_profiles,
        steered,
        monitors: monitors.specs,
        cells,
        impaired_cells,
        cell_monitors,
    })
}

/// Which address families the global anycast answer has (regions and sites must match them).
#[derive(Clone, Copy)]
struct Families {
    v4: bool,
    v6: bool,
}

/// Parses a list of addresses, refusing bad and duplicate entries.
pub(crate) fn parse_addresses(
    list: &[String],
    path: &str,
    errors: &mut Errors,
) -> (Vec<Ipv4Addr>, Vec<Ipv6Addr>) {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for (i, text) in list.iter().enumerate() {
        match text.trim().parse::<IpAddr>() {
            Ok(IpAddr::V4(a)) if v4.contains(&a) => {
                errors.push(format!("{path}[{i}]"), format!("{a} is listed twice"))
            }
            Ok(IpAddr::V6(a)) if v6.contains(&a) => {
                errors.push(format!("{path}[{i}]"), format!("{a} is listed twice"))
            }
            Ok(IpAddr::V4(a)) => v4.push(a),
            Ok(IpAddr::V6(a)) => v6.push(a),
            Err(_) => errors.push(
                format!("{path}[{i}]"),
                format!("{text:?} is not an IPv4 or IPv6 address"),
            ),
        }
    }
    (v4, v6)
}

/// Continent codes as used by MaxMind databases.
const CONTINENTS: [&str; 7] = ["AF", "AN", "AS", "EU", "NA", "OC", "SA"];

/// Checks a region, site, profile or endpoint name: 1..=63 of `[A-Za-z0-9_-]`.
pub(crate) fn check_identifier(name: &str, path: &str, errors: &mut Errors) -> bool {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        errors.push(
            path,
            format!("{name:?} is not a valid name (1 to 63 letters, digits, '-' or '_')"),
        );
    }
    ok
}

fn check_continent(continent: &str, path: &str, errors: &mut Errors) {
    if !CONTINENTS.contains(&continent) {
        errors.push(
            path,
            format!("{continent:?} is not a continent code (one of {CONTINENTS:?})"),
        );
    }
}

/// Refuses an anycast list that cannot answer an address family the global answer has.
fn check_families(
    v4: &[Ipv4Addr],
    v6: &[Ipv6Addr],
    families: Families,
    path: &str,
    errors: &mut Errors,
) {
    if v4.is_empty() && v6.is_empty() {
        errors.push(path, "has no address");
        return;
    }
    if families.v4 && v4.is_empty() {
        errors.push(
            path,
            "has no IPv4 address but topology.global has one (A answers for clients sent here would be empty)",
        );
    }
    if families.v6 && v6.is_empty() {
        errors.push(
            path,
            "has no IPv6 address but topology.global has one (AAAA answers for clients sent here would be empty)",
        );
    }
}

fn compile_regions(
    configs: &[RegionConfig],
    families: Families,
    errors: &mut Errors,
) -> Vec<RegionInfo> {
    if configs.is_empty() {
        errors.push("topology.regions", "no regions; at least one is required");
    }
    if configs.len() > usize::from(u16::MAX) {
        errors.push(
            "topology.regions",
            format!("{} regions, at most {}", configs.len(), u16::MAX),
        );
        return Vec::new();
    }
    let mut first_use: HashMap<&str, usize> = HashMap::new();
    for (i, region) in configs.iter().enumerate() {
        let path = format!("topology.regions[{i}].name");
        if check_identifier(&region.name, &path, errors) {
            if let Some(first) = first_use.insert(&region.name, i) {
                errors.push(
                    path,
                    format!(
                        "{:?} is already the name of topology.regions[{first}]",
                        region.name
                    ),
                );
                first_use.insert(&region.name, first);
            }
        }
    }
    configs
        .iter()
        .enumerate()
        .map(|(i, region)| {
            let path = format!("topology.regions[{i}]");
            check_continent(&region.continent, &format!("{path}.continent"), errors);
            let anycast_path = format!("{path}.anycast");
            let (v4, v6) = parse_addresses(&region.anycast, &anycast_path, errors);
            check_families(&v4, &v6, families, &anycast_path, errors);
            let neighbours = resolve_neighbours(region, i, &path, &first_use, errors);
            RegionInfo {
                name: region.name.clone(),
                continent: region.continent.clone(),
                v4,
                v6,
                neighbours,
                capacity: region.capacity,
            }
        })
        .collect()
}

fn resolve_neighbours(
    region: &RegionConfig,
    own_index: usize,
    path: &str,
    index_of: &HashMap<&str, usize>,
    errors: &mut Errors,
) -> Vec<u16> {
    let mut neighbours: Vec<u16> = Vec::new();
    for (j, name) in region.neighbours.iter().enumerate() {
        let field = format!("{path}.neighbours[{j}]");
        match index_of.get(name.as_str()).copied() {
            None => errors.push(field, format!("unknown region {name:?}")),
            Some(n) if n == own_index => errors.push(field, "a region is not its own neighbour"),
            Some(n) => {
                // Region count was checked to fit in u16 above.
                let n = u16::try_from(n).unwrap_or(u16::MAX);
                if neighbours.contains(&n) {
                    errors.push(field, format!("{name:?} is listed twice"));
                } else {
                    neighbours.push(n);
                }
            }
        }
    }
    neighbours
}

fn compile_sites(
    configs: &[FallbackSiteConfig],
    families: Families,
    regions: &[RegionInfo],
    errors: &mut Errors,
) -> Vec<SiteInfo> {
    if configs.len() > usize::from(u16::MAX) {
        errors.push(
            "topology.fallback",
            format!("{} sites, at most {}", configs.len(), u16::MAX),
        );
        return Vec::new();
    }
    let mut first_use: HashMap<&str, usize> = HashMap::new();
    configs
        .iter()
        .enumerate()
        .map(|(i, site)| {
            let path = format!("topology.fallback[{i}]");
            let name_path = format!("{path}.name");
            if check_identifier(&site.name, &name_path, errors) {
                if let Some(r) = regions.iter().position(|r| r.name == site.name) {
                    errors.push(
                        &name_path,
                        format!(
                            "{:?} is already the name of topology.regions[{r}]",
                            site.name
                        ),
                    );
                } else if let Some(first) = first_use.get(site.name.as_str()) {
                    errors.push(
                        &name_path,
                        format!(
                            "{:?} is already the name of topology.fallback[{first}]",
                            site.name
                        ),
                    );
                } else {
                    first_use.insert(&site.name, i);
                }
            }
            check_continent(&site.continent, &format!("{path}.continent"), errors);
            let anycast_path = format!("{path}.anycast");
            let (v4, v6) = parse_addresses(&site.anycast, &anycast_path, errors);
            check_families(&v4, &v6, families, &anycast_path, errors);
            SiteInfo {
                name: site.name.clone(),
                continent: site.continent.clone(),
                v4,
                v6,
                capacity: site.capacity,
            }
        })
        .collect()
}

/// Resolves the per-region knobs into one override per region.
fn compile_region_knobs(
    knobs: &ControlKnobs,
    regions: &[RegionInfo],
    sites: &[SiteInfo],
    errors: &mut Errors,
) -> Vec<RegionOverride> {
    let mut overrides = vec![RegionOverride::None; regions.len()];
    let mut drained = vec![false; regions.len()];
    for (name, knob) in &knobs.regions {
        let path = format!("control.regions.{name}");
        let Some(index) = regions.iter().position(|r| &r.name == name) else {
            errors.push(path, format!("unknown region {name:?}"));
            continue;
        };
        drained[index] = knob.drain;
        if knob.drain && knob.force.is_some() {
            errors.push(
                path,
                "both drained and forced; a region is either drained or has a forced answer",
            );
            continue;
        }
        let Some(force) = &knob.force else { continue };
        let destination = match force {
            ForcedAnswer::Global => Some(Destination::Global),
            ForcedAnswer::Regional => Some(Destination::Region(to_u16(index))),
            ForcedAnswer::Fallback(site) => match sites.iter().position(|s| &s.name == site) {
                Some(s) => Some(Destination::Fallback(to_u16(s))),
                None => {
                    errors.push(
                        format!("{path}.force"),
                        format!("unknown fallback site {site:?}"),
                    );
                    None
                }
            },
        };
        if let Some(destination) = destination {
            overrides[index] = RegionOverride::Forced(destination);
        }
    }
    for (index, region) in regions.iter().enumerate() {
        if !drained[index] {
            continue;
        }
        match drain_destination(index, regions, sites, &drained) {
            Some(destination) => overrides[index] = RegionOverride::Drained(destination),
            None => errors.push(
                format!("control.regions.{}.drain", region.name),
                "leaves nowhere to go: every neighbour is drained and there is no fallback site",
            ),
        }
    }
    overrides
}

/// Where a drained region's clients go: its first neighbour that is not drained, else a
/// fallback site on its continent, else any fallback site (availability beats latency).
fn drain_destination(
    index: usize,
    regions: &[RegionInfo],
    sites: &[SiteInfo],
    drained: &[bool],
) -> Option<Destination> {
    let region = regions.get(index)?;
    let neighbour = region
        .neighbours
        .iter()
        .copied()
        .find(|&n| !drained.get(usize::from(n)).copied().unwrap_or(true));
    if let Some(n) = neighbour {
        return Some(Destination::Region(n));
    }
    super::model::fallback_site_for(region, sites)
}

/// Converts an index already checked to fit (topology sizes are limited to `u16::MAX`).
pub(crate) fn to_u16(index: usize) -> u16 {
    u16::try_from(index).unwrap_or(u16::MAX)
}

/// Why a configured name is not one a steered name, endpoint or tenant may use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{0:?} must be an absolute name ending with a dot, e.g. \"example.com.\"")]
    NotAbsolute(String),
    #[error("{text:?} is not a valid name: {reason}")]
    Invalid { text: String, reason: String },
    #[error("{0:?}: '*' is only allowed as the whole first label of a steered name")]
    Wildcard(String),
    #[error("{0:?}: labels are letters, digits, '-' or '_' and do not start or end with '-'")]
    BadLabel(String),
}

/// Parses an absolute DNS name (trailing dot required), optionally allowing a leading `*.`.
pub fn parse_absolute_name(text: &str, allow_wildcard: bool) -> Result<Name, NameError> {
    if !text.ends_with('.') || text == "." {
        return Err(NameError::NotAbsolute(text.to_owned()));
    }
    let name = Name::from_ascii(text).map_err(|e| NameError::Invalid {
        text: text.to_owned(),
        reason: e.to_string(),
    })?;
    for (i, label) in name.iter().enumerate() {
        if label == b"*" {
            if i == 0 && allow_wildcard {
                continue;
            }
            return Err(NameError::Wildcard(text.to_owned()));
        }
        let valid = !label.is_empty()
            && label
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && label.first() != Some(&b'-')
            && label.last() != Some(&b'-');
        if !valid {
            return Err(NameError::BadLabel(text.to_owned()));
        }
    }
    Ok(name.to_lowercase())
}

/// The uncompressed wire form of a name (length-prefixed labels, then the root).
pub fn name_wire(name: &Name) -> Vec<u8> {
    let mut wire = Vec::with_capacity(name.len() + 2);
    for label in name.iter() {
        // Labels are at most 63 bytes (hickory enforces it on parse).
        wire.push(label.len().min(63) as u8);
        wire.extend_from_slice(label);
    }
    wire.push(0);
    wire
}

fn compile_steered(
    configs: &[SteeredConfig],
    profiles: &BTreeMap<String, ProfileConfig>,
    families: Families,
    errors: &mut Errors,
) -> Vec<SteeredName> {
    let mut compiled: Vec<SteeredName> = Vec::new();
    let mut first_use: HashMap<Name, usize> = HashMap::new();
    for (i, entry) in configs.iter().enumerate() {
        let path = format!("steered[{i}]");
        let name = match parse_absolute_name(&entry.name, true) {
            Ok(name) => name,
            Err(problem) => {
                errors.push(format!("{path}.name"), problem.to_string());
                continue;
            }
        };
        if let Some(first) = first_use.get(&name) {
            errors.push(
                format!("{path}.name"),
                format!("{:?} is already steered by steered[{first}]", entry.name),
            );
            continue;
        }
        first_use.insert(name.clone(), i);
        if let Some(ttl) = entry.ttl.filter(|&t| t > MAX_TTL) {
            errors.push(
                format!("{path}.ttl"),
                format!("{ttl} is above the largest TTL {MAX_TTL}"),
            );
        }
        let Some(root) = steered_root(entry, profiles, families, &path, errors) else {
            continue;
        };
        compiled.push(SteeredName {
            is_wildcard: name.is_wildcard(),
            name,
            root,
            transfer: entry.transfer,
        });
    }
    compiled
}

fn steered_root(
    entry: &SteeredConfig,
    profiles: &BTreeMap<String, ProfileConfig>,
    families: Families,
    path: &str,
    errors: &mut Errors,
) -> Option<PolicyRoot> {
    match (&entry.policy, &entry.profile) {
        (Some(SteeredPolicyKind::Anycast), None) => {
            if !families.v4 && !families.v6 {
                errors.push(
                    format!("{path}.policy"),
                    "anycast needs at least one address in topology.global",
                );
            }
            match entry.ttl {
                Some(ttl) => Some(PolicyRoot::Anycast { ttl }),
                None => {
                    errors.push(format!("{path}.ttl"), "required with policy = \"anycast\"");
                    None
                }
            }
        }
        (None, Some(profile)) => match profiles.keys().position(|p| p == profile) {
            Some(index) => Some(PolicyRoot::Profile {
                profile: ProfileId(to_u16(index)),
                ttl_cap: entry.ttl,
            }),
            None => {
                errors.push(
                    format!("{path}.profile"),
                    format!("unknown profile {profile:?}"),
                );
                None
            }
        },
        _ => {
            errors.push(
                path,
                "give exactly one of policy = \"anycast\" or profile = \"NAME\"",
            );
            None
        }
    }
}
