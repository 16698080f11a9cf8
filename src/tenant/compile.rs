//! A tenant's document checked against the platform and compiled into what serving reads
//! ([`ServedTenant`]): its names (each one label below a platform wildcard, not a name of a
//! zone file), and its own profile compiled beside the platform's (which are copied, never
//! recompiled). Pure: the platform comes in as a [`PlatformView`].

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cells::{CellInterner, CellTopology, TenantCells};

use crate::dns::wire::{display_wire_name, WireName};

use crate::policy::{
    compile_tenant_profile, name_wire, parse_absolute_name, CompiledPolicies, EndpointConfig,
    MonitorConfig, OwnMonitors, PolicyRoot, ProfileConfig, ProfileKind,
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
    /// Most `[monitors]` a document may define (`[tenants] max_monitors`).
    pub max_monitors: usize,
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

/// A fingerprint of what a plain tenant is compiled against: the platform's steered
/// wildcards (a tenant's names must sit one label below one of them). The tenants' cache is
/// keyed by it.
pub fn platform_key(policies: &CompiledPolicies) -> u64 {
    let view = PlatformView {
        policies,
        profiles: &BTreeMap::new(),
        exists: &|_| false,
        max_monitors: usize::MAX,
    };
    let mut parents = view.wildcard_parents();
    parents.sort();
    let key = crate::hash::fnv1a64(&parents.concat());
    // With cells, a plain tenant is cached with its cells (they depend on the platform): a
    // cache written without cells (or with others) is not this platform's.
    match policies.cells() {
        Some(cells) => key ^ cells.fingerprint(),
        None => key,
    }
}

/// A tenant's own profile, compiled: the platform's policies with it added, and the text it
/// was compiled from (the registry compiles it again when the platform changes).
pub struct OwnProfile {
    policies: CompiledPolicies,
    root: PolicyRoot,
    text: Box<str>,
    /// Its own monitors (`[monitors]` that its endpoints name), for the prober to attach and
    /// its answers to read; `None`: none.
    monitors: Option<Arc<OwnMonitors>>,
}

/// One tenant as served: immutable, shared by every name it owns in the tenant table.
///
/// Kept small on purpose: a million of them is the platform's scale, so a plain tenant is
/// one allocation of this struct plus one for its name and one for its names (no text, no
/// display strings: those are derived when status asks).
pub struct ServedTenant {
    /// Its version number (per tenant, counted up by each accepted change).
    pub serial: u64,
    /// FNV-1a of the document's bytes: tells versions apart (shown as [`Self::version`]) and
    /// tells whether a document read again is the one served.
    pub fingerprint: u64,
    /// When this version began to be served (seconds since the Unix epoch; 0: not yet).
    pub since: u32,
    pub state: TenantState,
    /// The TTL its answers carry at most; `None`: the platform's.
    pub ttl: Option<u32>,
    /// The tenant's name (its file's stem, at most 255 bytes) after its length byte, then
    /// the names it owns, lower-case wire format, back to back (wire names delimit
    /// themselves, so a name is found by its offset alone): one allocation for both.
    bytes: Box<[u8]>,
    own: Option<Box<OwnProfile>>,
    /// Its shard of the platform's cells (`[topology.cells]`), shared with every tenant of
    /// the same shard ([`CellInterner`]). `None` without cells (or with a profile of its
    /// own). A platform with other cells assigns them again ([`Self::with_cells_of`]): the
    /// shard is a pure function of the tenant's name, its `cells` and the topology, so no
    /// document is read or compiled again.
    cells: Option<Arc<TenantCells>>,
    /// Its document's `cells` (cells per layer; `None`: the platform's default).
    cells_asked: Option<u8>,
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

    /// The tenant's cells in the platform's layers, for its anycast answers; `None` without
    /// cells, or when they were computed for other cells than `platform`'s (then its answers
    /// are the platform's, as without cells, until it is compiled again).
    #[inline]
    pub fn cells(&self, platform: &CompiledPolicies) -> Option<&TenantCells> {
        let cells = self.cells.as_deref()?;
        (platform.cells()?.fingerprint() == cells.fingerprint()).then_some(cells)
    }

    /// Its cells as compiled, whatever platform they were compiled for.
    pub fn compiled_cells(&self) -> Option<&Arc<TenantCells>> {
        self.cells.as_ref()
    }

    /// Its document's `cells` (`None`: the platform's default).
    pub fn cells_asked(&self) -> Option<u8> {
        self.cells_asked
    }

    /// Whether its cells were assigned for another topology than `topology` (or it has
    /// none where the platform has cells, or cells where it has none): then
    /// [`Self::with_cells_of`] assigns them again. Never for a tenant with its own profile.
    pub fn cells_are_for_another_topology(&self, topology: Option<&CellTopology>) -> bool {
        if self.own.is_some() {
            return false;
        }
        let now = topology.map(CellTopology::fingerprint);
        let compiled = self.cells.as_deref().map(TenantCells::fingerprint);
        match (now, compiled) {
            (Some(now), Some(compiled)) => now != compiled,
            // A quarantined tenant whose platform lost its quarantine cells keeps none.
            (Some(_), None) => self.state != TenantState::Quarantined,
            (None, compiled) => compiled.is_some(),
        }
    }

    /// This version with its cells shared through `interner` (one copy of each shard).
    pub fn sharing_cells(self, interner: &mut CellInterner) -> ServedTenant {
        let cells = self.cells.map(|cells| interner.share(cells));
        ServedTenant { cells, ..self }
    }

    /// This version with its cells assigned from `topology` (none without one), shared
    /// through `interner`. `None` for a quarantined tenant when the platform has no quarantine
    /// cells: it cannot be served as written (the registry refuses it, keeping this version).
    pub fn with_cells_of(
        &self,
        topology: Option<&CellTopology>,
        interner: &mut CellInterner,
    ) -> Option<ServedTenant> {
        let k = self.cells_asked.map(usize::from);
        let cells = match topology {
            Some(topology) if self.state == TenantState::Quarantined => {
                Some(topology.assign_quarantined(self.name(), k)?)
            }
            Some(topology) => Some(topology.assign(self.name(), k)),
            None => None,
        };
        Some(ServedTenant {
            serial: self.serial,
            fingerprint: self.fingerprint,
            since: self.since,
            state: self.state,
            ttl: self.ttl,
            bytes: self.bytes.clone(),
            own: None,
            cells: cells.map(|cells| interner.intern(cells)),
            cells_asked: self.cells_asked,
        })
    }

    /// Whether the tenant answers by a profile of its own.
    pub fn has_own_profile(&self) -> bool {
        self.own.is_some()
    }

    /// Its own monitors (`[monitors]` its profile's endpoints name), if any.
    #[inline]
    pub fn own_monitors(&self) -> Option<&Arc<OwnMonitors>> {
        self.own.as_ref()?.monitors.as_ref()
    }

    /// The document text of a tenant with a profile of its own (which nests the platform's
    /// profiles, so it is compiled again when the platform changes); `None` for a plain
    /// tenant, cells or not.
    pub fn own_profile_text(&self) -> Option<&str> {
        self.own.as_ref().map(|own| &*own.text)
    }

    pub fn is_suspended(&self) -> bool {
        self.state == TenantState::Suspended
    }

    /// The tenant's name (its file's stem).
    pub fn name(&self) -> &str {
        let len = usize::from(self.bytes.first().copied().unwrap_or(0));
        let name = self.bytes.get(1..1 + len).unwrap_or_default();
        std::str::from_utf8(name).unwrap_or_default()
    }

    /// Its names back to back, lower-case wire format.
    #[inline]
    fn wire(&self) -> &[u8] {
        let len = usize::from(self.bytes.first().copied().unwrap_or(0));
        self.bytes.get(1 + len..).unwrap_or_default()
    }

    /// The version as status shows it: the fingerprint's low 32 bits in hex.
    pub fn version(&self) -> String {
        format!("{:08x}", self.fingerprint as u32)
    }

    /// Its names with their offsets in the back-to-back list, lower-case wire format.
    pub fn names(&self) -> impl Iterator<Item = (u16, &[u8])> + '_ {
        let mut at = 0usize;
        let wire = self.wire();
        std::iter::from_fn(move || {
            let rest = wire.get(at..).filter(|r| !r.is_empty())?;
            let len = wire_len(rest)?;
            let offset = u16::try_from(at).ok()?;
            at += len;
            Some((offset, &rest[..len]))
        })
    }

    /// Whether the name at `offset` is `name` (wire names are prefix-free: a whole wire name
    /// found at an offset is the name there).
    #[inline]
    pub fn name_at_is(&self, offset: u16, name: &[u8]) -> bool {
        let at = usize::from(offset);
        self.wire().get(at..at + name.len()) == Some(name)
    }

    /// The name at `offset` (empty past the end).
    pub fn name_at(&self, offset: u16) -> &[u8] {
        let rest = self.wire().get(usize::from(offset)..).unwrap_or_default();
        &rest[..wire_len(rest).unwrap_or(0)]
    }

    /// Its names as written (absolute, lower case).
    pub fn display_names(&self) -> Vec<String> {
        self.names()
            .map(|(_, wire)| display_wire_name(wire))
            .collect()
    }

    /// This version, served from `since` (seconds since the Unix epoch).
    pub fn served_from(self, since: u32) -> ServedTenant {
        ServedTenant { since, ..self }
    }

    /// Its names back to back, lower-case wire format (what the cache keeps).
    pub fn names_wire(&self) -> &[u8] {
        self.wire()
    }

    /// A plain tenant (the platform's policy, no profile of its own) from its parts, as the
    /// cache keeps them; `None` when `names` is not a list of whole wire names of at most
    /// 65535 bytes.
    pub fn plain(parts: PlainParts) -> Option<ServedTenant> {
        let names = &parts.names;
        if names.is_empty() || names.len() > usize::from(u16::MAX) {
            return None;
        }
        let mut at = 0usize;
        while at < names.len() {
            at += wire_len(names.get(at..)?)?;
        }
        Some(ServedTenant {
            serial: parts.serial,
            fingerprint: parts.fingerprint,
            since: parts.since,
            state: parts.state,
            ttl: parts.ttl,
            bytes: name_and_names(parts.name, names)?,
            own: None,
            cells: parts.cells,
            cells_asked: parts.cells_asked,
        })
    }

    /// A plain active tenant (tests).
    #[cfg(test)]
    pub(crate) fn for_test(name: &str, serial: u64, names: Vec<Box<[u8]>>) -> ServedTenant {
        ServedTenant {
            serial,
            fingerprint: 0,
            since: 0,
            state: TenantState::Active,
            ttl: None,
            bytes: name_and_names(name, &names.concat()).unwrap_or_default(),
            own: None,
            cells: None,
            cells_asked: None,
        }
    }
}

/// A plain tenant's parts (see [`ServedTenant::plain`]).
pub struct PlainParts<'a> {
    pub name: &'a str,
    pub serial: u64,
    pub fingerprint: u64,
    pub since: u32,
    pub state: TenantState,
    pub ttl: Option<u32>,
    pub names: &'a [u8],
    /// Its cells (shared), and its document's `cells`.
    pub cells: Option<Arc<TenantCells>>,
    pub cells_asked: Option<u8>,
}

/// A tenant's name after its length byte, then its names (`None`: a name over 255 bytes).
fn name_and_names(name: &str, names: &[u8]) -> Option<Box<[u8]>> {
    let len = u8::try_from(name.len()).ok()?;
    let mut bytes = Vec::with_capacity(1 + name.len() + names.len());
    bytes.push(len);
    bytes.extend_from_slice(name.as_bytes());
    bytes.extend_from_slice(names);
    Some(bytes.into_boxed_slice())
}

/// The length of the whole wire name at the start of `wire` (`None`: not a whole name).
fn wire_len(wire: &[u8]) -> Option<usize> {
    WireName::parse_uncompressed(wire, 0).map(|(_, end)| end)
}

/// Who the tenant is and which version of its document this is.
pub struct Identity<'a> {
    pub name: &'a str,
    pub serial: u64,
    /// FNV-1a of the document's bytes.
    pub fingerprint: u64,
}

/// Checks `parsed` against `platform` and compiles it. Every problem is returned.
pub fn compile(
    parsed: &Parsed<'_>,
    identity: Identity<'_>,
    platform: &PlatformView<'_>,
) -> Result<ServedTenant, Vec<TenantProblem>> {
    let mut problems = Vec::new();
    let names = compile_names(parsed, platform, &mut problems);
    let own = match &parsed.document.profile {
        Some(profile) => compile_own(parsed, identity.name, profile, platform, &mut problems),
        None => None,
    };
    let monitors = super::document::monitor_count(&parsed.document);
    if monitors > platform.max_monitors {
        let at = parsed
            .document
            .monitors
            .as_ref()
            .map_or(0, |m| m.span().start);
        problems.push(parsed.problem(
            at,
            "monitors",
            format!(
                "{monitors} monitors, at most {} per tenant ([tenants] max_monitors)",
                platform.max_monitors
            ),
        ));
    }
    let names_len: usize = names.iter().map(Vec::len).sum();
    if names_len > usize::from(u16::MAX) {
        problems.push(parsed.problem(
            parsed.document.names.span().start,
            "names".to_string(),
            format!("{names_len} bytes of names: a tenant owns at most 65535 (about 2,500 names)"),
        ));
    }
    let state = parsed
        .document
        .state
        .as_ref()
        .map(|s| *s.get_ref())
        .unwrap_or_default();
    if state == TenantState::Quarantined {
        check_quarantine(parsed, platform, &mut problems);
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let document = &parsed.document;
    let Some(bytes) = name_and_names(identity.name, &names.concat()) else {
        return Err(vec![parsed.problem(
            0,
            "file name",
            "a tenant name is at most 255 bytes",
        )]);
    };
    // Cells only matter to anycast answers, which a tenant with its own profile never gives.
    let cells_asked = document
        .cells
        .as_ref()
        .and_then(|k| u8::try_from(*k.get_ref()).ok());
    let k = cells_asked.map(usize::from);
    let cells = match (platform.policies.cells(), &own) {
        (Some(topology), None) => match state {
            TenantState::Quarantined => topology.assign_quarantined(identity.name, k),
            _ => Some(topology.assign(identity.name, k)),
        },
        _ => None,
    };
    Ok(ServedTenant {
        serial: identity.serial,
        fingerprint: identity.fingerprint,
        since: 0,
        state,
        ttl: document.ttl.as_ref().map(|t| *t.get_ref()),
        bytes,
        own: own.map(Box::new),
        cells: cells.map(Arc::new),
        cells_asked,
    })
}

/// A quarantined tenant answers from the platform's quarantine cells: it needs them, and the
/// platform's policy (a profile of its own answers with its endpoints, never cells).
fn check_quarantine(
    parsed: &Parsed<'_>,
    platform: &PlatformView<'_>,
    problems: &mut Vec<TenantProblem>,
) {
    let at = parsed.document.state.as_ref().map_or(0, |s| s.span().start);
    if parsed.document.profile.is_some() {
        problems.push(parsed.problem(
            at,
            "state",
            "quarantined, but the tenant answers by its own [profile] (its endpoints, never \
             cells): quarantine needs the platform's policy",
        ));
    } else if platform
        .policies
        .cells()
        .and_then(|t| t.quarantine())
        .is_none()
    {
        problems.push(parsed.problem(
            at,
            "state",
            "quarantined, but the platform has no quarantine cells ([topology.cells] quarantine)",
        ));
    }
}

fn compile_names(
    parsed: &Parsed<'_>,
    platform: &PlatformView<'_>,
    problems: &mut Vec<TenantProblem>,
) -> Vec<Vec<u8>> {
    let parents = platform.wildcard_parents();
    let mut names: Vec<Vec<u8>> = Vec::new();
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
        if names.contains(&wire) {
            continue; // the same name twice claims it once
        }
        names.push(wire);
    }
    names
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
    let defined: Vec<(String, &MonitorConfig)> = parsed
        .document
        .monitors
        .iter()
        .flat_map(|m| m.get_ref())
        .map(|(name, config)| (format!("monitors.{name}"), config.get_ref()))
        .collect();
    match compile_tenant_profile(
        platform.policies,
        platform.profiles,
        tenant,
        &config,
        &defined,
    ) {
        Ok(compiled) => Some(OwnProfile {
            monitors: own_monitors(parsed, compiled.base, compiled.monitors),
            policies: compiled.policies,
            text: parsed.text().into(),
            root: PolicyRoot::Profile {
                profile: compiled.id,
                ttl_cap: parsed.document.ttl.as_ref().map(|t| *t.get_ref()),
            },
        }),
        Err(errors) => {
            for error in errors {
                let at = monitor_position(parsed, &error.path)
                    .unwrap_or_else(|| field_position(profile, &error.path));
                problems.push(parsed.problem(at, error.path, error.problem));
            }
            None
        }
    }
}

/// The tenant's monitor targets (by slot − `base`) with the `[monitors]` name of each.
fn own_monitors(
    parsed: &Parsed<'_>,
    base: u16,
    specs: Vec<crate::policy::monitor::MonitorSpec>,
) -> Option<Arc<OwnMonitors>> {
    if specs.is_empty() {
        return None;
    }
    // The slots were handed out in the document's order, one per new target.
    let mut seen = std::collections::HashMap::new();
    for (name, config) in parsed.document.monitors.iter().flat_map(|m| m.get_ref()) {
        if let Ok(spec) = crate::policy::monitor::compile_alone(config.get_ref(), name) {
            seen.entry(spec.target).or_insert_with(|| name.clone());
        }
    }
    let named: Vec<(String, crate::policy::monitor::MonitorSpec)> = specs
        .into_iter()
        .map(|spec| {
            let name = seen
                .get(&spec.target)
                .cloned()
                .unwrap_or_else(|| spec.target.clone());
            (name, spec)
        })
        .collect();
    Some(Arc::new(OwnMonitors::new(base, named)))
}

/// Where the `[monitors.NAME]` a policy error names starts.
fn monitor_position(parsed: &Parsed<'_>, path: &str) -> Option<usize> {
    let name = path.strip_prefix("monitors.")?.split('.').next()?;
    let monitors = parsed.document.monitors.as_ref()?.get_ref();
    Some(monitors.get(name)?.span().start)
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
    let monitors = parsed.document.monitors.as_ref().map(|m| m.get_ref());
    let endpoints = profile
        .endpoints
        .get_ref()
        .iter()
        .map(|e| {
            let e = e.get_ref();
            let monitor = e
                .monitor
                .as_ref()
                .and_then(|name| monitors?.get(name.get_ref()))
                .map(|m| m.get_ref().clone());
            endpoint_config(e, kind, &weights, monitor)
        })
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
    monitor: Option<MonitorConfig>,
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
        monitor,
        ..EndpointConfig::default()
    }
}
