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
    AllDown, Endpoint, EndpointTarget, GeoRoute, Profile, ProfileId, ProfileKindTag, RegionInfo,
    Rule, MAX_PROFILE_DEPTH,
};
use super::monitor::MonitorTable;

/// Largest endpoint weight.
pub const MAX_WEIGHT: u32 = 1000;

/// Compiles every profile (in name order, which defines [`ProfileId`]s), with the distinct
/// monitor targets their endpoints use.
pub(crate) fn compile_profiles(
    configs: &BTreeMap<String, ProfileConfig>,
    regions: &[RegionInfo],
    knobs: &ControlKnobs,
    errors: &mut Errors,
) -> (Vec<Profile>, MonitorTable) {
    if configs.len() > usize::from(u16::MAX) {
        errors.push(
            "profiles",
            format!("{} profiles, at most {}", configs.len(), u16::MAX),
        );
        return (Vec::new(), MonitorTable::default());
    }
    let mut monitors = MonitorTable::default();
    for (name, profile_knobs) in &knobs.profiles {
        match configs.get(name) {
            None => errors.push(
                format!("control.profiles.{name}"),
                format!("unknown profile {name:?}"),
            ),
            Some(config) => check_endpoint_knobs(name, config, profile_knobs, errors),
        }
    }
    let mut compiled: Vec<Profile> = configs
        .iter()
        .map(|(name, config)| {
            let no_knobs = ProfileKnobs::default();
            let profile_knobs = knobs.profiles.get(name).unwrap_or(&no_knobs);
            let context = Context {
                all: configs,
                regions,
                knobs: profile_knobs,
            };
            compile_profile(name, config, &context, &mut monitors, errors)
        })
        .collect();
    check_nesting(&compiled, errors);
    mark_monitored(&mut compiled);
    (compiled, monitors)
}

/// What compiling one profile reads besides its own config.
struct Context<'a> {
    all: &'a BTreeMap<String, ProfileConfig>,
    regions: &'a [RegionInfo],
    knobs: &'a ProfileKnobs,
}

/// Sets [`Profile::monitored`]: a candidate with a monitor that is not forced up, or a
/// candidate nesting a monitored profile (nesting is at most [`MAX_PROFILE_DEPTH`] deep).
fn mark_monitored(profiles: &mut [Profile]) {
    for _ in 0..=MAX_PROFILE_DEPTH {
        let now: Vec<bool> = profiles
            .iter()
            .map(|p| {
                p.candidates.iter().any(|&i| {
                    p.endpoints.get(usize::from(i)).is_some_and(|e| {
                        (e.monitor.is_some() && !e.forced_up)
                            || matches!(e.target, EndpointTarget::Profile(next)
                                if profiles.get(usize::from(next.0)).is_some_and(|n| n.monitored))
                    })
                })
            })
            .collect();
        let mut changed = false;
        for (profile, monitored) in profiles.iter_mut().zip(now) {
            changed |= profile.monitored != monitored;
            profile.monitored = monitored;
        }
        if !changed {
            break;
        }
    }
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
        let monitored = config
            .endpoints
            .iter()
            .any(|e| &e.name == endpoint && e.monitor.is_some());
        if knob.force_up.is_some() && !monitored {
            errors.push(
                format!("{path}.force_up"),
                "only endpoints with a monitor can be forced up (the others are always up)",
            );
        }
    }
}

fn compile_profile(
    name: &str,
    config: &ProfileConfig,
    context: &Context<'_>,
    monitors: &mut MonitorTable,
    errors: &mut Errors,
) -> Profile {
    let Context {
        all,
        regions,
        knobs,
    } = *context;
    let path = format!("profiles.{name}");
    check_identifier(name, &path, errors);
    check_profile_fields(config, &path, errors);
    let fallback = config
        .all_down
        .as_deref()
        .and_then(|a| a.strip_prefix("fallback:"));
    let mut seen = HashSet::new();
    let mut endpoints: Vec<Endpoint> = config
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
            let spec = EndpointSpec {
                profile: name,
                kind: config.kind,
                config: endpoint,
                knob,
                is_fallback: fallback == Some(endpoint.name.as_str()),
            };
            compile_endpoint(&spec, all, monitors, &endpoint_path, errors)
        })
        .collect();
    let adjusted = !knobs.endpoints.is_empty();
    let all_down = compile_all_down(name, config, all, &mut endpoints, &path, adjusted, errors);
    let candidates: Vec<u16> = endpoints
        .iter()
        .enumerate()
        .filter(|(i, e)| {
            // A geo endpoint that serves no region is only the all_down fallback.
            let serves = config
                .endpoints
                .get(*i)
                .is_some_and(|c| !c.regions.is_empty() || c.default);
            e.enabled
                && !e.hidden
                && match config.kind {
                    ProfileKind::Weighted => e.weight > 0,
                    ProfileKind::Geo => serves,
                    ProfileKind::Failover => true,
                }
        })
        .map(|(i, _)| to_u16(i))
        .collect();
    let rule = match config.kind {
        ProfileKind::Weighted => weighted_rule(&endpoints, &candidates, &path, adjusted, errors),
        ProfileKind::Geo => geo_rule(
            config,
            &endpoints,
            &candidates,
            regions,
            &path,
            adjusted,
            errors,
        ),
        ProfileKind::Failover => failover_rule(&endpoints, &candidates, &path, adjusted, errors),
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
        candidates,
        rule,
        all_down,
        monitored: false,
    }
}

/// Parses `all_down`; `fallback:PROFILE` adds a hidden endpoint nesting that profile.
fn compile_all_down(
    profile: &str,
    config: &ProfileConfig,
    all: &BTreeMap<String, ProfileConfig>,
    endpoints: &mut Vec<Endpoint>,
    path: &str,
    adjusted: bool,
    errors: &mut Errors,
) -> AllDown {
    let field = format!("{path}.all_down");
    let Some(text) = config.all_down.as_deref() else {
        return AllDown::ServeAll;
    };
    match text {
        "serve-all" => return AllDown::ServeAll,
        "serve-last-healthy" => return AllDown::ServeLastHealthy,
        _ => {}
    }
    let Some(target) = text.strip_prefix("fallback:").filter(|t| !t.is_empty()) else {
        errors.push(
            field,
            format!(
                "{text:?} is not one of \"serve-all\", \"serve-last-healthy\", \"fallback:NAME\""
            ),
        );
        return AllDown::ServeAll;
    };
    if let Some(i) = endpoints.iter().position(|e| e.name == target) {
        if !endpoints[i].enabled {
            errors.push(
                field,
                format!(
                    "falls back to endpoint {target:?}, which is disabled{}: every endpoint down would leave nothing to serve",
                    after_knobs(adjusted)
                ),
            );
        }
        return AllDown::Fallback(to_u16(i));
    }
    let Some(index) = all.keys().position(|p| p == target) else {
        errors.push(
            field,
            format!("{target:?} is neither an endpoint of this profile nor a profile"),
        );
        return AllDown::ServeAll;
    };
    let name = format!("fallback:{target}");
    endpoints.push(Endpoint {
        salt: name_salt(profile, &name),
        name,
        weight: 0,
        enabled: true,
        target: EndpointTarget::Profile(ProfileId(to_u16(index))),
        monitor: None,
        forced_up: false,
        hidden: true,
    });
    AllDown::Fallback(to_u16(endpoints.len() - 1))
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

/// One endpoint to compile, with what decides how.
struct EndpointSpec<'a> {
    profile: &'a str,
    kind: ProfileKind,
    config: &'a EndpointConfig,
    knob: Option<&'a EndpointKnobs>,
    /// Named by the profile's `all_down = "fallback:..."`.
    is_fallback: bool,
}

fn compile_endpoint(
    spec: &EndpointSpec<'_>,
    all: &BTreeMap<String, ProfileConfig>,
    monitors: &mut MonitorTable,
    path: &str,
    errors: &mut Errors,
) -> Endpoint {
    let EndpointSpec {
        profile,
        kind,
        config,
        knob,
        is_fallback,
    } = *spec;
    check_kind_fields(kind, config, is_fallback, path, errors);
    let monitor = match (&config.monitor, config.always_serve) {
        (Some(_), Some(true)) => {
            errors.push(
                format!("{path}.always_serve"),
                "true together with a monitor: an always-serve endpoint is never health-checked \
                 (it must not drop out on a failed check); remove the monitor or always_serve",
            );
            None
        }
        (Some(_), _) if config.profile.is_some() => {
            errors.push(
                format!("{path}.monitor"),
                "an endpoint nesting a profile has no monitor of its own: it is down when \
                 every endpoint of that profile is down",
            );
            None
        }
        (Some(monitor), _) => monitors.add(monitor, &format!("{path}.monitor"), errors),
        (None, Some(false)) => {
            errors.push(
                format!("{path}.always_serve"),
                "false needs a monitor: without one nothing says whether the endpoint is up",
            );
            None
        }
        (None, _) => None,
    };
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
        monitor,
        forced_up: monitor.is_some() && knob.and_then(|k| k.force_up) == Some(true),
        hidden: false,
    }
}

/// Refuses fields that mean nothing for the profile's kind (likely a mistake).
fn check_kind_fields(
    kind: ProfileKind,
    config: &EndpointConfig,
    is_fallback: bool,
    path: &str,
    errors: &mut Errors,
) {
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
    if kind == ProfileKind::Geo && config.regions.is_empty() && !config.default && !is_fallback {
        errors.push(
            format!("{path}.regions"),
            "serves no region; list regions, set default = true, or name it in all_down = \"fallback:...\"",
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
                errors.push(format!("{path}.cname"), problem.to_string());
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

fn weighted_rule(
    endpoints: &[Endpoint],
    candidates: &[u16],
    path: &str,
    adjusted: bool,
    errors: &mut Errors,
) -> Rule {
    if candidates.is_empty() && !endpoints.is_empty() {
        errors.push(
            path,
            format!(
                "no servable endpoint: every weight is 0 or the endpoint is disabled{}",
                after_knobs(adjusted)
            ),
        );
    }
    Rule::Weighted
}

fn failover_rule(
    endpoints: &[Endpoint],
    candidates: &[u16],
    path: &str,
    adjusted: bool,
    errors: &mut Errors,
) -> Rule {
    if candidates.is_empty() && !endpoints.is_empty() {
        errors.push(
            path,
            format!(
                "no servable endpoint: every endpoint is disabled{}",
                after_knobs(adjusted)
            ),
        );
    }
    Rule::Failover
}

/// Builds the region → endpoints table: the region's own endpoint, else its neighbours' in
/// order, else another region's on the same continent (topology order), else the default,
/// else (only when all of those are down) any other candidate in the order written.
fn geo_rule(
    config: &ProfileConfig,
    endpoints: &[Endpoint],
    candidates: &[u16],
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
        let mut chain = geo_chain(r, regions, &direct);
        chain.extend(default);
        if !chain.is_empty() {
            finish_chain(&mut chain, candidates);
            by_region.push(chain);
        } else {
            {
                errors.push(
                    path,
                    format!(
                        "region {:?} has no endpoint: none serves it, its neighbours or its continent, and there is no enabled default{}",
                        region.name,
                        after_knobs(adjusted)
                    ),
                );
                by_region.push(vec![(0, GeoRoute::Default)]);
            }
        }
    }
    let unknown = match default {
        Some(entry) => {
            let mut chain = vec![entry];
            finish_chain(&mut chain, candidates);
            chain
        }
        None => by_region
            .first()
            .cloned()
            .unwrap_or_else(|| vec![(0, GeoRoute::Default)]),
    };
    let first = unknown.first().map(|&(e, _)| e);
    let uniform = by_region
        .iter()
        .all(|chain| chain.first().map(|&(e, _)| e) == first);
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

/// Region `r`'s endpoints in order of preference: its own, its neighbours' (in order), then
/// other regions' on its continent (topology order).
fn geo_chain(r: usize, regions: &[RegionInfo], direct: &[Option<u16>]) -> Vec<(u16, GeoRoute)> {
    let mut chain = Vec::new();
    if let Some(e) = direct.get(r).copied().flatten() {
        chain.push((e, GeoRoute::Direct));
    }
    let Some(region) = regions.get(r) else {
        return chain;
    };
    for &n in &region.neighbours {
        if let Some(e) = direct.get(usize::from(n)).copied().flatten() {
            chain.push((e, GeoRoute::Neighbour(n)));
        }
    }
    for (c, other) in regions.iter().enumerate() {
        if c == r || other.continent != region.continent {
            continue;
        }
        if let Some(e) = direct.get(c).copied().flatten() {
            chain.push((e, GeoRoute::Continent(to_u16(c))));
        }
    }
    chain
}

/// Appends every other candidate (in the order written) and keeps each endpoint's first place.
fn finish_chain(chain: &mut Vec<(u16, GeoRoute)>, candidates: &[u16]) {
    chain.extend(candidates.iter().map(|&c| (c, GeoRoute::Elsewhere)));
    let mut seen = HashSet::new();
    chain.retain(|&(e, _)| seen.insert(e));
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

/// A tenant's profile compiled beside the platform's (see [`compile_tenant_profile`]).
pub struct TenantProfile {
    /// The platform's policies with the tenant's profile added.
    pub policies: super::model::CompiledPolicies,
    pub id: ProfileId,
    /// The first slot of the tenant's own monitors (the platform's slot count).
    pub base: u16,
    /// The tenant's own monitor targets, by slot − `base`.
    pub monitors: Vec<super::monitor::MonitorSpec>,
}

/// A tenant's own profile (`tenants/<name>.toml`), compiled beside the platform's: the
/// platform's compiled policies with this one profile added last (its [`ProfileId`] is the
/// one returned). It may nest the platform's profiles (by name, as in `profiles`) and name
/// the platform's regions; the platform's profiles are not recompiled, only copied. Error
/// paths start at `profile`. `own_monitors` (field path, monitor) are the tenant's own
/// monitors, numbered after the platform's whether an endpoint names them or not.
/// Allocates (off the serving path).
pub fn compile_tenant_profile(
    platform: &super::model::CompiledPolicies,
    platform_profiles: &BTreeMap<String, ProfileConfig>,
    name: &str,
    config: &ProfileConfig,
    own_monitors: &[(String, &super::config::MonitorConfig)],
) -> Result<TenantProfile, Vec<super::PolicyError>> {
    let mut errors = Errors::default();
    let id = ProfileId(to_u16(platform.profiles.len()));
    if platform.profiles.len() >= usize::from(u16::MAX) {
        errors.push("profile", "the platform has too many profiles to add one");
        return Err(errors.0);
    }
    let no_knobs = ProfileKnobs::default();
    let context = Context {
        all: platform_profiles,
        regions: &platform.regions,
        knobs: &no_knobs,
    };
    // Its own monitors are numbered after the platform's: the prober keeps them apart.
    let base = to_u16(platform.monitors.len());
    let mut monitors = MonitorTable::starting_at(base);
    // Every monitor the tenant defines is probed (in the order written), named by an
    // endpoint or not; an endpoint's own gets the same slot.
    for (path, monitor) in own_monitors {
        monitors.add(monitor, path, &mut errors);
    }
    let profile = compile_profile(name, config, &context, &mut monitors, &mut errors);
    let mut compiled = platform.clone();
    compiled.profiles.push(profile);
    check_nesting(&compiled.profiles, &mut errors);
    mark_monitored(&mut compiled.profiles);
    if errors.0.is_empty() {
        return Ok(TenantProfile {
            policies: compiled,
            id,
            base,
            monitors: monitors.specs,
        });
    }
    let prefix = format!("profiles.{name}");
    Err(errors
        .0
        .into_iter()
        .map(|mut e| {
            if let Some(rest) = e.path.strip_prefix(&prefix) {
                e.path = format!("profile{rest}");
            }
            e
        })
        .collect())
}
