//! A tenant's document checked against the platform and compiled into what serving reads
//! ([`ServedTenant`]): its names (each one label below a platform wildcard, not a name of a
//! zone file), and its own profile compiled beside the platform's (which are copied, never
//! recompiled). Pure: the platform comes in as a [`PlatformView`].

use std::collections::BTreeMap;

use crate::policy::{
    compile_tenant_profile, name_wire, parse_absolute_name, CompiledPolicies, EndpointConfig,
    PolicyRoot, ProfileConfig, ProfileKind,
};

use super::document::{
    effective_weights, Parsed, TenantEndpoint, TenantProblem, TenantProfile, TenantProfileKind,
    TenantState,
};

/// What a tenant's document may refer to.
pub struct PlatformView<'a> {
    /// The platform's compiled policies (regions, profiles, steered names).
    pub policies: &'a CompiledPolicies,
    /// The platform's `[profiles]`, as configured (a tenant's profile may nest them).
    pub profiles: &'a BTreeMap<String, ProfileConfig>,
    /// Whether a (lower-case wire) name is a node of a served zone: such a name answers by
    /// its own records, never by a tenant.
    pub exists: &'a dyn Fn(&[u8]) -> bool,
}

impl PlatformView<'_> {
    /// The wire names of the parents of the platform's steered wildcards
    /// (`edge.example.net.` for `*.edge.example.net.`).
    fn wildcard_parents(&self) -> Vec<Vec<u8>> {
        self.policies
            .steered()
            .iter()
            .filter(|s| s.is_wildcard)
            .map(|s| name_wire(&s.name.base_name()))
            .collect()
    }
}

/// A tenant's own profile, compiled: the platform's policies with it added.
pub struct OwnProfile {
    policies: CompiledPolicies,
    root: PolicyRoot,
}

/// One tenant as served: immutable, shared by every name it owns in the tenant table.
pub struct ServedTenant {
    /// The tenant's name (its file's stem).
    pub name: String,
    /// Its version number (per tenant, counted up by each accepted change).
    pub serial: u64,
    /// A fingerprint of the document's text (hex), to tell versions apart.
    pub version: String,
    pub state: TenantState,
    /// The TTL its answers carry at most; `None`: the platform's.
    pub ttl: Option<u32>,
    /// The names it owns, lower-case wire format.
    pub names: Vec<Box<[u8]>>,
    /// The same, as written (absolute, lower case).
    pub display_names: Vec<String>,
    own: Option<OwnProfile>,
}

impl ServedTenant {
    /// The policies and root a query for one of its names is decided with, given the root
    /// of the platform wildcard that covers the name (what it would answer without a
    /// tenant document).
    #[inline]
    pub fn route<'a>(
        &'a self,
        platform: &'a CompiledPolicies,
        wildcard: PolicyRoot,
    ) -> (&'a CompiledPolicies, PolicyRoot) {
        if let Some(own) = &self.own {
            return (&own.policies, own.root);
        }
        let root = match (wildcard, self.ttl) {
            (PolicyRoot::Anycast { .. }, Some(ttl)) => PolicyRoot::Anycast { ttl },
            (PolicyRoot::Profile { profile, .. }, Some(ttl)) => PolicyRoot::Profile {
                profile,
                ttl_cap: Some(ttl),
            },
            (root, None) => root,
        };
        (platform, root)
    }

    /// Whether the tenant answers by a profile of its own.
    pub fn has_own_profile(&self) -> bool {
        self.own.is_some()
    }

    pub fn is_suspended(&self) -> bool {
        self.state == TenantState::Suspended
    }

    /// A plain active tenant (tests).
    #[cfg(test)]
    pub(crate) fn for_test(name: &str, serial: u64, names: Vec<Box<[u8]>>) -> ServedTenant {
        ServedTenant {
            name: name.to_string(),
            serial,
            version: String::new(),
            state: TenantState::Active,
            ttl: None,
            display_names: Vec::new(),
            names,
            own: None,
        }
    }
}

/// Who the tenant is and which version of its document this is.
pub struct Identity<'a> {
    pub name: &'a str,
    pub serial: u64,
    pub version: String,
}

/// Checks `parsed` against `platform` and compiles it. Every problem is returned.
pub fn compile(
    parsed: &Parsed<'_>,
    identity: Identity<'_>,
    platform: &PlatformView<'_>,
) -> Result<ServedTenant, Vec<TenantProblem>> {
    let mut problems = Vec::new();
    let (names, display_names) = compile_names(parsed, platform, &mut problems);
    let own = match &parsed.document.profile {
        Some(profile) => compile_own(parsed, identity.name, profile, platform, &mut problems),
        None => None,
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    let document = &parsed.document;
    Ok(ServedTenant {
        name: identity.name.to_string(),
        serial: identity.serial,
        version: identity.version,
        state: document
            .state
            .as_ref()
            .map(|s| *s.get_ref())
            .unwrap_or_default(),
        ttl: document.ttl.as_ref().map(|t| *t.get_ref()),
        names,
        display_names,
        own,
    })
}

fn compile_names(
    parsed: &Parsed<'_>,
    platform: &PlatformView<'_>,
    problems: &mut Vec<TenantProblem>,
) -> (Vec<Box<[u8]>>, Vec<String>) {
    let parents = platform.wildcard_parents();
    let mut names = Vec::new();
    let mut display = Vec::new();
    for (i, name) in parsed.document.names.get_ref().iter().enumerate() {
        let at = name.span().start;
        let field = format!("names[{i}]");
        let Ok(parsed_name) = parse_absolute_name(name.get_ref(), false) else {
            continue; // reported by the document's own checks
        };
        let wire = name_wire(&parsed_name);
        let parent = wire.get(usize::from(wire[0]) + 1..).unwrap_or_default();
        if !parents.iter().any(|p| p.as_slice() == parent) {
            problems.push(parsed.problem(
                at,
                field,
                format!(
                    "{:?} is not one label below a platform wildcard (steered `*.` names: {})",
                    name.get_ref(),
                    wildcard_list(platform.policies)
                ),
            ));
            continue;
        }
        if (platform.exists)(&wire) {
            problems.push(parsed.problem(
                at,
                field,
                format!(
                    "{:?} is a name of a zone file: it answers by its own records",
                    name.get_ref()
                ),
            ));
            continue;
        }
        names.push(wire.into_boxed_slice());
        display.push(parsed_name.to_ascii());
    }
    (names, display)
}

fn wildcard_list(policies: &CompiledPolicies) -> String {
    let list: Vec<String> = policies
        .steered()
        .iter()
        .filter(|s| s.is_wildcard)
        .map(|s| s.name.to_ascii())
        .collect();
    if list.is_empty() {
        "none".to_string()
    } else {
        list.join(", ")
    }
}

fn compile_own(
    parsed: &Parsed<'_>,
    tenant: &str,
    profile: &toml::Spanned<TenantProfile>,
    platform: &PlatformView<'_>,
    problems: &mut Vec<TenantProblem>,
) -> Option<OwnProfile> {
    let config = profile_config(parsed, profile.get_ref());
    match compile_tenant_profile(platform.policies, platform.profiles, tenant, &config) {
        Ok((policies, id)) => Some(OwnProfile {
            policies,
            root: PolicyRoot::Profile {
                profile: id,
                ttl_cap: parsed.document.ttl.as_ref().map(|t| *t.get_ref()),
            },
        }),
        Err(errors) => {
            for error in errors {
                let at = field_position(profile, &error.path);
                problems.push(parsed.problem(at, error.path, error.problem));
            }
            None
        }
    }
}

/// Where the field a policy error names starts: its endpoint, else the profile.
fn field_position(profile: &toml::Spanned<TenantProfile>, path: &str) -> usize {
    let endpoint = path
        .strip_prefix("profile.endpoints[")
        .and_then(|rest| rest.split(']').next())
        .and_then(|i| i.parse::<usize>().ok())
        .and_then(|i| profile.get_ref().endpoints.get_ref().get(i));
    endpoint.map_or(profile.span().start, |e| e.span().start)
}

/// The tenant's profile as a platform profile config: always-serve endpoints, the
/// break-glass weights applied.
fn profile_config(parsed: &Parsed<'_>, profile: &TenantProfile) -> ProfileConfig {
    let weights = effective_weights(&parsed.document);
    let kind = match profile.kind.get_ref() {
        TenantProfileKind::Weighted => ProfileKind::Weighted,
        TenantProfileKind::Geo => ProfileKind::Geo,
    };
    let endpoints = profile
        .endpoints
        .get_ref()
        .iter()
        .map(|e| endpoint_config(e.get_ref(), kind, &weights))
        .collect();
    ProfileConfig {
        kind,
        ttl: *profile.ttl.get_ref(),
        hash_prefix_v4: crate::policy::config::DEFAULT_HASH_PREFIX_V4,
        hash_prefix_v6: crate::policy::config::DEFAULT_HASH_PREFIX_V6,
        endpoints,
        all_down: None,
    }
}

fn endpoint_config(
    e: &TenantEndpoint,
    kind: ProfileKind,
    weights: &[(String, u32)],
) -> EndpointConfig {
    let name = e.name.get_ref().clone();
    let weight = match kind {
        ProfileKind::Weighted => weights.iter().find(|(n, _)| *n == name).map(|(_, w)| *w),
        _ => None,
    };
    EndpointConfig {
        cname: e.cname.as_ref().map(|c| c.get_ref().clone()),
        addresses: e.addresses.as_ref().map(|a| a.get_ref().clone()),
        profile: e.profile.as_ref().map(|p| p.get_ref().clone()),
        weight,
        regions: e.regions.clone(),
        default: e.default,
        name,
        enabled: true,
        ..EndpointConfig::default()
    }
}
