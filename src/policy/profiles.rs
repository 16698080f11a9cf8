//! Compilation of `[profiles]` with the control knobs applied: endpoint targets, weights, the
//! geo region table with its fallback order, failover choice, and the nesting checks.

use std::collections::{BTreeMap, HashSet};

use super::compile::{
    check_identifier, name_wire, parse_absolute_name, parse_addresses, to_u16, Errors, MAX_TTL,
};
use super::config::{EndpointConfig, ProfileConfig, ProfileKind};
use super::hash::name_salt;
use super::knobs::{ControlKnobs, EndpointKnobs, ProfileKnobs};
use super::model::{
    Endpoint, EndpointTarget, GeoRoute, Profile, ProfileId, ProfileKindTag, RegionInfo, Rule,
    MAX_PROFILE_DEPTH,
};

/// Largest endpoint weight.
pub const MAX_WEIGHT: u32 = 1000;

/// Compiles every profile (in name order, which defines [`ProfileId`]s).
pub(crate) fn compile_profiles(
    configs: &BTreeMap<String, ProfileConfig>,
    regions: &[RegionInfo],
    knobs: &ControlKnobs,
    errors: &mut Errors,
) -> Vec<Profile> {
    if configs.len() > usize::from(u16::MAX) {
        errors.push(
            "profiles",
            format!("{} profiles, at most {}", configs.len(), u16::MAX),
        );
        return Vec::new();
    }
    for (name, profile_knobs) in &knobs.profiles {
        match configs.get(name) {
            None => errors.push(
                format!("control.profiles.{name}"),
                format!("unknown profile {name:?}"),
            ),
            Some(config) => check_endpoint_knobs(name, config, profile_knobs, errors),
        }
    }
    let compiled: Vec<Profile> = configs
        .iter()
        .map(|(name, config)| {
            let no_knobs = ProfileKnobs::default();
            let profile_knobs = knobs.profiles.get(name).unwrap_or(&no_knobs);
            compile_profile(name, config, configs, regions, profile_knobs, errors)
        })
        .collect();
    check_nesting(&compiled, errors);
    compiled
}

fn check_endpoint_knobs(
    profile: &str,
    config: &ProfileConfig,
    knobs: &ProfileKnobs,
    errors: &mut Errors,
) {
    for (endpoint, knob) in &knobs.endpoints {
        let path = format!("control.profiles.{profile}.endpoints.{endpoint}");
        if !config.endpoints.iter().any(|e| &e.name == endpoint) {
            errors.push(
                path,
                format!("profile {profile:?} has no endpoint {endpoint:?}"),
            );
            continue;
        }
        match knob.weight {
            Some(_) if config.kind != ProfileKind::Weighted => errors.push(
                format!("{path}.weight"),
                "weights only apply to endpoints of weighted profiles",
            ),
            Some(w) if w > MAX_WEIGHT => errors.push(
                format!("{path}.weight"),
                format!("{w} is above {MAX_WEIGHT}"),
            ),
            _ => {}
        }
    }
}

fn compile_profile(
    name: &str,
    config: &ProfileConfig,
    all: &BTreeMap<String, ProfileConfig>,
    regions: &[RegionInfo],
    knobs: &ProfileKnobs,
    errors: &mut Errors,
) -> Profile {
    let path = format!("profiles.{name}");
    check_identifier(name, &path, errors);
    check_profile_fields(config, &path, errors);
    let mut seen = HashSet::new();
    let endpoints: Vec<Endpoint> = config
        .endpoints
        .iter()
        .enumerate()
        .map(|(i, endpoint)| {
            let endpoint_path = format!("{path}.endpoints[{i}]");
            if check_identifier(&endpoint.name, &format!("{endpoint_path}.name"), errors)
                && !seen.insert(endpoint.name.as_str())
            {
                errors.push(
                    format!("{endpoint_path}.name"),
                    format!("{:?} is already an endpoint of this profile", endpoint.name),
                );
            }
            let knob = knobs.endpoints.get(&endpoint.name);
            compile_endpoint(
                name,
                config.kind,
                endpoint,
                knob,
                all,
                &endpoint_path,
                errors,
            )
        })
        .collect();
    let adjusted = !knobs.endpoints.is_empty();
    let rule = match config.kind {
        ProfileKind::Weighted => weighted_rule(&endpoints, &path, adjusted, errors),
        ProfileKind::Geo => geo_rule(config, &endpoints, regions, &path, adjusted, errors),
        ProfileKind::Failover => failover_rule(&endpoints, &path, adjusted, errors),
    };
    Profile {
        name: name.to_owned(),
        kind: match config.kind {
            ProfileKind::Weighted => ProfileKindTag::Weighted,
            ProfileKind::Geo => ProfileKindTag::Geo,
            ProfileKind::Failover => ProfileKindTag::Failover,
        },
        ttl: config.ttl,
        hash_prefix_v4: config.hash_prefix_v4,
        hash_prefix_v6: config.hash_prefix_v6,
        endpoints,
        rule,
    }
}

fn check_profile_fields(config: &ProfileConfig, path: &str, errors: &mut Errors) {
    if config.ttl > MAX_TTL {
        errors.push(
            format!("{path}.ttl"),
            format!("{} is above the largest TTL {MAX_TTL}", config.ttl),
        );
    }
    if config.hash_prefix_v4 > 32 {
        errors.push(
            format!("{path}.hash_prefix_v4"),
            format!("{} is longer than 32 bits", config.hash_prefix_v4),
        );
    }
    if config.hash_prefix_v6 > 128 {
        errors.push(
            format!("{path}.hash_prefix_v6"),
            format!("{} is longer than 128 bits", config.hash_prefix_v6),
        );
    }
    if config.endpoints.is_empty() {
        errors.push(format!("{path}.endpoints"), "no endpoints");
    }
    if config.endpoints.len() > usize::from(u16::MAX) {
        errors.push(format!("{path}.endpoints"), "too many endpoints");
    }
}

fn compile_endpoint(
    profile: &str,
    kind: ProfileKind,
    config: &EndpointConfig,
    knob: Option<&EndpointKnobs>,
    all: &BTreeMap<String, ProfileConfig>,
    path: &str,
    errors: &mut Errors,
) -> Endpoint {
    check_kind_fields(kind, config, path, errors);
    if !config.always_serve {
        errors.push(
            format!("{path}.always_serve"),
            "false is not supported: steerdns has no health checks, every endpoint is always-serve",
        );
    }
    let configured_weight = match (kind, config.weight) {
        (_, Some(w)) if w > MAX_WEIGHT => {
            errors.push(
                format!("{path}.weight"),
                format!("{w} is above {MAX_WEIGHT}"),
            );
            0
        }
        (ProfileKind::Weighted, None) => {
            errors.push(
                format!("{path}.weight"),
                "required for endpoints of weighted profiles (0..=1000)",
            );
            0
        }
        (_, w) => w.unwrap_or(0),
    };
    let enabled = knob.and_then(|k| k.enabled).unwrap_or(config.enabled);
    let weight = knob
        .and_then(|k| k.weight)
        .filter(|&w| w <= MAX_WEIGHT)
        .unwrap_or(configured_weight);
    Endpoint {
        name: config.name.clone(),
        salt: name_salt(profile, &config.name),
        weight: if enabled { weight } else { 0 },
        enabled,
        target: endpoint_target(config, all, path, errors),
    }
}

/// Refuses fields that mean nothing for the profile's kind (likely a mistake).
fn check_kind_fields(kind: ProfileKind, config: &EndpointConfig, path: &str, errors: &mut Errors) {
    if kind != ProfileKind::Weighted && config.weight.is_some() {
        errors.push(
            format!("{path}.weight"),
            "only endpoints of weighted profiles have a weight",
        );
    }
    if kind != ProfileKind::Geo && !config.regions.is_empty() {
        errors.push(
            format!("{path}.regions"),
            "only endpoints of geo profiles serve regions",
        );
    }
    if kind != ProfileKind::Geo && config.default {
        errors.push(
            format!("{path}.default"),
            "only endpoints of geo profiles can be the default",
        );
    }
    if kind == ProfileKind::Geo && config.regions.is_empty() && !config.default {
        errors.push(
            format!("{path}.regions"),
            "serves no region; list regions or set default = true",
        );
    }
}

fn endpoint_target(
    config: &EndpointConfig,
    all: &BTreeMap<String, ProfileConfig>,
    path: &str,
    errors: &mut Errors,
) -> EndpointTarget {
    let empty = EndpointTarget::Addresses {
        v4: Vec::new(),
        v6: Vec::new(),
    };
    match (&config.cname, &config.addresses, &config.profile) {
        (Some(cname), None, None) => match parse_absolute_name(cname, false) {
            Ok(name) => EndpointTarget::Cname {
                wire: name_wire(&name),
                name,
            },
            Err(problem) => {
                errors.push(format!("{path}.cname"), problem);
                empty
            }
        },
        (None, Some(list), None) => {
            let field = format!("{path}.addresses");
            let (v4, v6) = parse_addresses(list, &field, errors);
            if list.is_empty() {
                errors.push(field, "no addresses");
            }
            EndpointTarget::Addresses { v4, v6 }
        }
        (None, None, Some(profile)) => match all.keys().position(|p| p == profile) {
            Some(index) => EndpointTarget::Profile(ProfileId(to_u16(index))),
            None => {
                errors.push(
                    format!("{path}.profile"),
                    format!("unknown profile {profile:?}"),
                );
                empty
            }
        },
        (None, None, None) => {
            errors.push(path, "needs one of cname, addresses or profile");
            empty
        }
        _ => {
            errors.push(path, "give only one of cname, addresses or profile");
            empty
        }
    }
}

fn after_knobs(adjusted: bool) -> &'static str {
    if adjusted {
        " (after the control file's overrides)"
    } else {
        ""
    }
}

fn weighted_rule(endpoints: &[Endpoint], path: &str, adjusted: bool, errors: &mut Errors) -> Rule {
    let servable: Vec<u16> = endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| e.weight > 0)
        .map(|(i, _)| to_u16(i))
        .collect();
    if servable.is_empty() && !endpoints.is_empty() {
        errors.push(
            path,
            format!(
                "no servable endpoint: every weight is 0 or the endpoint is disabled{}",
                after_knobs(adjusted)
            ),
        );
    }
    Rule::Weighted { servable }
}

fn failover_rule(endpoints: &[Endpoint], path: &str, adjusted: bool, errors: &mut Errors) -> Rule {
    match endpoints.iter().position(|e| e.enabled) {
        Some(chosen) => Rule::Failover {
            chosen: to_u16(chosen),
        },
        None => {
            if !endpoints.is_empty() {
                errors.push(
                    path,
                    format!(
                        "no servable endpoint: every endpoint is disabled{}",
                        after_knobs(adjusted)
                    ),
                );
            }
            Rule::Failover { chosen: 0 }
        }
    }
}

/// Builds the region → endpoint table: the region's own endpoint, else its neighbours' in
/// order, else another region's on the same continent (topology order), else the default.
fn geo_rule(
    config: &ProfileConfig,
    endpoints: &[Endpoint],
    regions: &[RegionInfo],
    path: &str,
    adjusted: bool,
    errors: &mut Errors,
) -> Rule {
    let direct = direct_geo_table(config, endpoints, regions, path, errors);
    let defaults: Vec<usize> = config
        .endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| e.default)
        .map(|(i, _)| i)
        .collect();
    if defaults.len() > 1 {
        errors.push(
            format!("{path}.endpoints[{}].default", defaults[1]),
            format!("endpoints[{}] is already the default", defaults[0]),
        );
    }
    let default = defaults
        .first()
        .copied()
        .filter(|&i| endpoints.get(i).is_some_and(|e| e.enabled))
        .map(|i| (to_u16(i), GeoRoute::Default));
    let mut by_region = Vec::with_capacity(regions.len());
    for (r, region) in regions.iter().enumerate() {
        match geo_route(r, regions, &direct).or(default) {
            Some(entry) => by_region.push(entry),
            None => {
                errors.push(
                    path,
                    format!(
                        "region {:?} has no endpoint: none serves it, its neighbours or its continent, and there is no enabled default{}",
                        region.name,
                        after_knobs(adjusted)
                    ),
                );
                by_region.push((0, GeoRoute::Default));
            }
        }
    }
    let unknown = default
        .or_else(|| by_region.first().copied())
        .unwrap_or((0, GeoRoute::Default));
    let uniform = by_region.iter().all(|&(e, _)| e == unknown.0);
    Rule::Geo {
        by_region,
        unknown,
        uniform,
    }
}

/// For each region, the enabled endpoint that lists it (if any).
fn direct_geo_table(
    config: &ProfileConfig,
    endpoints: &[Endpoint],
    regions: &[RegionInfo],
    path: &str,
    errors: &mut Errors,
) -> Vec<Option<u16>> {
    let mut direct: Vec<Option<u16>> = vec![None; regions.len()];
    let mut listed_by: Vec<Option<usize>> = vec![None; regions.len()];
    for (i, endpoint) in config.endpoints.iter().enumerate() {
        for (j, name) in endpoint.regions.iter().enumerate() {
            let field = format!("{path}.endpoints[{i}].regions[{j}]");
            let Some(r) = regions.iter().position(|region| &region.name == name) else {
                errors.push(field, format!("unknown region {name:?}"));
                continue;
            };
            if let Some(first) = listed_by[r] {
                errors.push(
                    field,
                    format!("region {name:?} is already served by endpoints[{first}]"),
                );
                continue;
            }
            listed_by[r] = Some(i);
            if endpoints.get(i).is_some_and(|e| e.enabled) {
                direct[r] = Some(to_u16(i));
            }
        }
    }
    direct
}

fn geo_route(r: usize, regions: &[RegionInfo], direct: &[Option<u16>]) -> Option<(u16, GeoRoute)> {
    if let Some(e) = direct.get(r).copied().flatten() {
        return Some((e, GeoRoute::Direct));
    }
    let region = regions.get(r)?;
    let via_neighbour = region.neighbours.iter().find_map(|&n| {
        let e = direct.get(usize::from(n)).copied().flatten()?;
        Some((e, GeoRoute::Neighbour(n)))
    });
    via_neighbour.or_else(|| {
        regions.iter().enumerate().find_map(|(c, other)| {
            let e = direct.get(c).copied().flatten()?;
            (c != r && other.continent == region.continent)
                .then_some((e, GeoRoute::Continent(to_u16(c))))
        })
    })
}

/// Refuses cycles and paths of more than [`MAX_PROFILE_DEPTH`] profiles, following every
/// nested endpoint (also disabled or weight-0 ones: a control change could enable them).
fn check_nesting(profiles: &[Profile], errors: &mut Errors) {
    // Longest chain (in profiles) starting at each profile; `None` while being visited.
    let mut depth: Vec<Option<Option<usize>>> = vec![None; profiles.len()];
    for start in 0..profiles.len() {
        let mut stack = Vec::new();
        chain_depth(start, profiles, &mut depth, &mut stack, errors);
    }
    for (i, d) in depth.iter().enumerate() {
        if let Some(Some(d)) = d {
            if *d > MAX_PROFILE_DEPTH {
                errors.push(
                    format!("profiles.{}", profiles[i].name),
                    format!(
                        "nests {d} profiles deep; at most {MAX_PROFILE_DEPTH} profiles may be on one path"
                    ),
                );
            }
        }
    }
}

/// Depth-first search: returns the longest chain from `at`, or `None` on a cycle (reported once).
fn chain_depth(
    at: usize,
    profiles: &[Profile],
    depth: &mut Vec<Option<Option<usize>>>,
    stack: &mut Vec<usize>,
    errors: &mut Errors,
) -> Option<usize> {
    match depth.get(at).copied().flatten() {
        Some(done) => return done,
        None if stack.contains(&at) => {
            let cycle: Vec<&str> = stack
                .iter()
                .skip_while(|&&p| p != at)
                .chain(std::iter::once(&at))
                .filter_map(|&p| profiles.get(p).map(|p| p.name.as_str()))
                .collect();
            errors.push(
                format!("profiles.{}", profiles.get(at).map_or("", |p| &p.name)),
                format!("nested profiles form a cycle: {}", cycle.join(" -> ")),
            );
            return None;
        }
        None => {}
    }
    let profile = profiles.get(at)?;
    stack.push(at);
    let mut longest = Some(1);
    for endpoint in &profile.endpoints {
        if let EndpointTarget::Profile(next) = endpoint.target {
            let below = chain_depth(usize::from(next.0), profiles, depth, stack, errors);
            longest = match (longest, below) {
                (Some(l), Some(b)) => Some(l.max(b + 1)),
                _ => None,
            };
        }
    }
    stack.pop();
    if let Some(slot) = depth.get_mut(at) {
        *slot = Some(longest);
    }
    longest
}
