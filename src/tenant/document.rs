//! A tenant's document as its operator writes it (`tenants/<name>.toml`), parsed with every
//! field's position, and the checks that need nothing but the document itself. Pure: no
//! files, no platform; [`mod@super::compile`] checks it against the platform.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use crate::policy::{parse_absolute_name, MonitorConfig, MAX_TTL, MAX_WEIGHT};
use crate::text_position::line_column;

/// Most names one tenant may own.
pub const MAX_NAMES: usize = 64;

/// Most endpoints in a tenant's own profile.
pub const MAX_ENDPOINTS: usize = 16;

/// The default of `[tenants] max_monitors`: most `[monitors]` one tenant's document defines.
pub const DEFAULT_MAX_MONITORS: usize = 64;

/// The default of `[tenants] probes_per_second`: each tenant's checks started per second.
pub const DEFAULT_PROBES_PER_SECOND: f64 = 20.0;

/// One problem with a tenant's document: the file, the line and the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("{file}:{line}: {field}: {problem}")]
pub struct TenantProblem {
    /// The document's file (as the reloader names it, e.g. `tenants/contoso.toml`).
    pub file: String,
    /// 1-based line of the field (0: the document as a whole).
    pub line: usize,
    /// The field, e.g. `profile.endpoints[1].weight` (`document` for the whole file).
    pub field: String,
    /// What is wrong, for an operator.
    pub problem: String,
}

/// Whether a tenant is answered (`active`), refused (`suspended`: every query for its names
/// is answered REFUSED, so resolvers neither cache an answer nor a negative one) or answered
/// from quarantine cells (`quarantined`).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantState {
    #[default]
    Active,
    Suspended,
    /// Answers from the platform's quarantine cells (`[topology.cells] quarantine`) only,
    /// wherever its clients are sent: shared with no healthy tenant.
    Quarantined,
}

impl TenantState {
    pub fn as_str(self) -> &'static str {
        match self {
            TenantState::Active => "active",
            TenantState::Suspended => "suspended",
            TenantState::Quarantined => "quarantined",
        }
    }
}

/// `tenants/<name>.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantDocument {
    /// The names the tenant owns, absolute, each one label below a platform wildcard
    /// (`fabrikam.edge.example.net.` under `*.edge.example.net.`).
    pub names: Spanned<Vec<Spanned<String>>>,
    /// `active` (the default) or `suspended`.
    #[serde(default)]
    pub state: Option<Spanned<TenantState>>,
    /// TTL of the tenant's answers (caps its own profile's); default: the platform's.
    #[serde(default)]
    pub ttl: Option<Spanned<u32>>,
    /// Cells per layer in the tenant's anycast answers (`[topology.cells]`), instead of the
    /// platform's `k`: 1 to [`crate::cells::MAX_K`]. No effect while the platform has no cells.
    #[serde(default)]
    pub cells: Option<Spanned<u32>>,
    /// The tenant's own profile; without one its names answer as the platform wildcard does.
    #[serde(default)]
    pub profile: Option<Spanned<TenantProfile>>,
    /// Break-glass: endpoint name → weight, replacing the endpoints' weights (weighted
    /// profile only). Flip `frontdoor = 0, alt-cdn = 100` to send everything to the alternate.
    #[serde(default)]
    pub breakglass: Option<Spanned<BTreeMap<String, Spanned<u32>>>>,
    /// The tenant's own health checks, by name: the same kinds and fields as a platform
    /// endpoint's `monitor` (`url`, `tcp` or `dns`, interval, timeout, rise/fall, startup),
    /// naming addresses, not host names. Its profile's endpoints name them (`monitor =
    /// "NAME"`); at most `[tenants] max_monitors` of them, probed from the tenant's own
    /// budget (`[tenants] probes_per_second`).
    #[serde(default)]
    pub monitors: Option<Spanned<BTreeMap<String, Spanned<MonitorConfig>>>>,
}

/// How a tenant's own profile chooses.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TenantProfileKind {
    /// Sticky per client subnet by weight (always-serve endpoints: never health-checked).
    Weighted,
    /// By client region (the platform's regions), to the tenant's app gateways.
    Geo,
}

/// `[profile]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantProfile {
    #[serde(rename = "type")]
    pub kind: Spanned<TenantProfileKind>,
    /// TTL of the profile's answers.
    pub ttl: Spanned<u32>,
    pub endpoints: Spanned<Vec<Spanned<TenantEndpoint>>>,
}

/// `[[profile.endpoints]]`: exactly one of `cname`, `addresses`, `profile` (a platform
/// profile's name).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantEndpoint {
    pub name: Spanned<String>,
    #[serde(default)]
    pub cname: Option<Spanned<String>>,
    #[serde(default)]
    pub addresses: Option<Spanned<Vec<String>>>,
    /// A platform-level profile this endpoint delegates to (e.g. `appgw`).
    #[serde(default)]
    pub profile: Option<Spanned<String>>,
    /// Weighted only, required there: 0..=1000.
    #[serde(default)]
    pub weight: Option<Spanned<u32>>,
    /// Geo only: the platform regions this endpoint serves.
    #[serde(default)]
    pub regions: Vec<String>,
    /// Geo only: serves regions no endpoint, neighbour or continent covers.
    #[serde(default)]
    pub default: bool,
    /// One of the document's own `[monitors]`, by name: the endpoint is served only while it
    /// passes (left out of the tenant's answers while it is down, never an empty answer).
    #[serde(default)]
    pub monitor: Option<Spanned<String>>,
}

/// A parsed document and where its fields are, for problems that name lines.
pub struct Parsed<'t> {
    pub document: TenantDocument,
    file: &'t str,
    text: &'t str,
}

impl Parsed<'_> {
    /// The document's text.
    pub fn text(&self) -> &str {
        self.text
    }

    /// A problem about the field whose value starts at byte `at`.
    pub fn problem(
        &self,
        at: usize,
        field: impl Into<String>,
        problem: impl Into<String>,
    ) -> TenantProblem {
        TenantProblem {
            file: self.file.to_string(),
            line: line_column(self.text, at).0,
            field: field.into(),
            problem: problem.into(),
        }
    }

    pub fn file(&self) -> &str {
        self.file
    }
}

/// Whether `name` is a tenant's name: 1 to 63 of lower-case letters, digits, `-` (it is the
/// file's stem and a URL path segment).
pub fn valid_tenant_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Parses `text` (the file `file`) and runs every check that needs only the document.
/// Every problem is returned, not just the first.
pub fn parse<'t>(file: &'t str, text: &'t str) -> Result<Parsed<'t>, Vec<TenantProblem>> {
    let document: TenantDocument = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(0, |s| line_column(text, s.start).0);
        vec![TenantProblem {
            file: file.to_string(),
            line,
            field: "document".to_string(),
            problem: e.message().to_string(),
        }]
    })?;
    let parsed = Parsed {
        document,
        file,
        text,
    };
    let mut problems = Vec::new();
    check_names(&parsed, &mut problems);
    check_ttl(&parsed, &mut problems);
    check_cells(&parsed, &mut problems);
    if let Some(profile) = &parsed.document.profile {
        check_profile(&parsed, profile, &mut problems);
    }
    check_breakglass(&parsed, &mut problems);
    check_monitors(&parsed, &mut problems);
    if problems.is_empty() {
        Ok(parsed)
    } else {
        Err(problems)
    }
}

fn check_names(parsed: &Parsed<'_>, problems: &mut Vec<TenantProblem>) {
    let names = &parsed.document.names;
    if names.get_ref().is_empty() {
        problems.push(parsed.problem(names.span().start, "names", "no names; at least one"));
    }
    if names.get_ref().len() > MAX_NAMES {
        problems.push(parsed.problem(
            names.span().start,
            "names",
            format!("{} names, at most {MAX_NAMES}", names.get_ref().len()),
        ));
    }
    let mut seen = Vec::new();
    for (i, name) in names.get_ref().iter().enumerate() {
        let at = name.span().start;
        let field = format!("names[{i}]");
        match parse_absolute_name(name.get_ref(), false) {
            Ok(parsed_name) if seen.contains(&parsed_name) => problems.push(parsed.problem(
                at,
                field,
                format!("{:?} is listed twice", name.get_ref()),
            )),
            Ok(parsed_name) => seen.push(parsed_name),
            Err(problem) => problems.push(parsed.problem(at, field, problem.to_string())),
        }
    }
}

fn check_ttl(parsed: &Parsed<'_>, problems: &mut Vec<TenantProblem>) {
    let ttls = [
        parsed.document.ttl.as_ref().map(|t| ("ttl", t)),
        parsed
            .document
            .profile
            .as_ref()
            .map(|p| ("profile.ttl", &p.get_ref().ttl)),
    ];
    for (field, ttl) in ttls.into_iter().flatten() {
        if *ttl.get_ref() > MAX_TTL {
            problems.push(parsed.problem(
                ttl.span().start,
                field,
                format!("{} is above the largest TTL {MAX_TTL}", ttl.get_ref()),
            ));
        }
    }
}

fn check_cells(parsed: &Parsed<'_>, problems: &mut Vec<TenantProblem>) {
    let Some(cells) = &parsed.document.cells else {
        return;
    };
    let k = *cells.get_ref();
    if k == 0 || k as usize > crate::cells::MAX_K {
        problems.push(parsed.problem(
            cells.span().start,
            "cells",
            format!("{k}: 1 to {} cells per layer", crate::cells::MAX_K),
        ));
    }
}

fn check_profile(
    parsed: &Parsed<'_>,
    profile: &Spanned<TenantProfile>,
    problems: &mut Vec<TenantProblem>,
) {
    let endpoints = &profile.get_ref().endpoints;
    let kind = *profile.get_ref().kind.get_ref();
    let count = endpoints.get_ref().len();
    if count == 0 || count > MAX_ENDPOINTS {
        problems.push(parsed.problem(
            endpoints.span().start,
            "profile.endpoints",
            format!("{count} endpoints; 1 to {MAX_ENDPOINTS}"),
        ));
    }
    let mut names: Vec<&str> = Vec::new();
    for (i, endpoint) in endpoints.get_ref().iter().enumerate() {
        let path = format!("profile.endpoints[{i}]");
        let endpoint_ref = endpoint.get_ref();
        let name = endpoint_ref.name.get_ref().as_str();
        if names.contains(&name) {
            problems.push(parsed.problem(
                endpoint_ref.name.span().start,
                format!("{path}.name"),
                format!("{name:?} is already an endpoint of this profile"),
            ));
        }
        names.push(name);
        check_endpoint(parsed, kind, endpoint, &path, problems);
    }
    if kind == TenantProfileKind::Weighted
        && effective_weights(&parsed.document)
            .iter()
            .all(|(_, w)| *w == 0)
        && count > 0
    {
        problems.push(parsed.problem(
            endpoints.span().start,
            "profile.endpoints",
            "every weight is 0 (after breakglass): the profile would never answer",
        ));
    }
}

fn check_endpoint(
    parsed: &Parsed<'_>,
    kind: TenantProfileKind,
    endpoint: &Spanned<TenantEndpoint>,
    path: &str,
    problems: &mut Vec<TenantProblem>,
) {
    let at = endpoint.span().start;
    let e = endpoint.get_ref();
    let targets = [
        e.cname.is_some(),
        e.addresses.is_some(),
        e.profile.is_some(),
    ];
    if targets.iter().filter(|t| **t).count() != 1 {
        problems.push(parsed.problem(at, path, "give exactly one of cname, addresses or profile"));
    }
    match (kind, &e.weight) {
        (TenantProfileKind::Weighted, None) => problems.push(parsed.problem(
            at,
            format!("{path}.weight"),
            "required in a weighted profile",
        )),
        (TenantProfileKind::Weighted, Some(w)) if *w.get_ref() > MAX_WEIGHT => {
            problems.push(parsed.problem(
                w.span().start,
                format!("{path}.weight"),
                format!("{} is above {MAX_WEIGHT}", w.get_ref()),
            ))
        }
        (TenantProfileKind::Geo, Some(w)) => problems.push(parsed.problem(
            w.span().start,
            format!("{path}.weight"),
            "weights only apply to weighted profiles",
        )),
        _ => {}
    }
    if kind == TenantProfileKind::Weighted && (!e.regions.is_empty() || e.default) {
        problems.push(parsed.problem(
            at,
            format!("{path}.regions"),
            "regions and default only apply to geo profiles",
        ));
    }
}

fn check_breakglass(parsed: &Parsed<'_>, problems: &mut Vec<TenantProblem>) {
    let Some(breakglass) = &parsed.document.breakglass else {
        return;
    };
    let profile = parsed.document.profile.as_ref().map(Spanned::get_ref);
    let weighted = profile.is_some_and(|p| *p.kind.get_ref() == TenantProfileKind::Weighted);
    if !weighted {
        problems.push(parsed.problem(
            breakglass.span().start,
            "breakglass",
            "break-glass weights need a weighted [profile]",
        ));
        return;
    }
    for (endpoint, weight) in breakglass.get_ref() {
        let field = format!("breakglass.{endpoint}");
        let known = profile.is_some_and(|p| {
            p.endpoints
                .get_ref()
                .iter()
                .any(|e| e.get_ref().name.get_ref() == endpoint)
        });
        if !known {
            problems.push(parsed.problem(
                weight.span().start,
                field,
                format!("the profile has no endpoint {endpoint:?}"),
            ));
        } else if *weight.get_ref() > MAX_WEIGHT {
            problems.push(parsed.problem(
                weight.span().start,
                field,
                format!("{} is above {MAX_WEIGHT}", weight.get_ref()),
            ));
        }
    }
}

/// Each `[monitors.NAME]` compiled alone (its problems name `monitors.NAME.FIELD`), naming an
/// address (a tenant's probes never wait for the system resolver, which the platform's share),
/// and each endpoint's `monitor` one of them.
fn check_monitors(parsed: &Parsed<'_>, problems: &mut Vec<TenantProblem>) {
    let monitors = parsed.document.monitors.as_ref().map(Spanned::get_ref);
    for (name, config) in monitors.into_iter().flatten() {
        let at = config.span().start;
        let path = format!("monitors.{name}");
        if !valid_monitor_name(name) {
            problems.push(parsed.problem(
                at,
                &path,
                format!("{name:?}: a monitor's name is 1 to 63 letters, digits, '-' or '_'"),
            ));
        }
        match crate::policy::monitor::compile_alone(config.get_ref(), &path) {
            Ok(spec) if !spec.check.names_an_address() => problems.push(parsed.problem(
                at,
                &path,
                format!(
                    "{:?} is a host name: a tenant's monitor names an IP address (name lookups                      are shared with the platform's probes)",
                    spec.check.host()
                ),
            )),
            Ok(_) => {}
            Err(errors) => problems.extend(
                errors
                    .into_iter()
                    .map(|e| parsed.problem(at, e.path, e.problem)),
            ),
        }
    }
    let Some(profile) = &parsed.document.profile else {
        if let Some(monitors) = &parsed.document.monitors {
            problems.push(parsed.problem(
                monitors.span().start,
                "monitors",
                "monitors need a [profile] of the tenant's own (its endpoints name them)",
            ));
        }
        return;
    };
    for (i, endpoint) in profile.get_ref().endpoints.get_ref().iter().enumerate() {
        let Some(monitor) = &endpoint.get_ref().monitor else {
            continue;
        };
        let known = monitors.is_some_and(|m| m.contains_key(monitor.get_ref()));
        if !known {
            problems.push(parsed.problem(
                monitor.span().start,
                format!("profile.endpoints[{i}].monitor"),
                format!(
                    "{:?} is not one of this document's [monitors] (a tenant names its own)",
                    monitor.get_ref()
                ),
            ));
        }
    }
}

/// Whether `name` may name a tenant's monitor.
fn valid_monitor_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// How many `[monitors]` the document defines.
pub fn monitor_count(document: &TenantDocument) -> usize {
    document.monitors.as_ref().map_or(0, |m| m.get_ref().len())
}

/// The weighted profile's endpoints with the weights served: `breakglass` where it names the
/// endpoint, else the endpoint's own.
pub fn effective_weights(document: &TenantDocument) -> Vec<(String, u32)> {
    let Some(profile) = &document.profile else {
        return Vec::new();
    };
    let breakglass = document.breakglass.as_ref().map(Spanned::get_ref);
    profile
        .get_ref()
        .endpoints
        .get_ref()
        .iter()
        .map(|e| {
            let e = e.get_ref();
            let name = e.name.get_ref().clone();
            let flipped = breakglass.and_then(|b| b.get(&name)).map(|w| *w.get_ref());
            let weight = flipped
                .or(e.weight.as_ref().map(|w| *w.get_ref()))
                .unwrap_or(0);
            (name, weight)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<TenantProblem> {
        match parse("tenants/t.toml", text) {
            Ok(_) => Vec::new(),
            Err(p) => p,
        }
    }

    #[test]
    fn a_plain_document_parses() {
        let parsed =
            parse("tenants/t.toml", "names = [\"t.edge.example.net.\"]\n").map_err(|p| p.len());
        assert!(parsed.is_ok());
    }

    #[test]
    fn an_unknown_field_names_file_and_line() {
        let p = problems("names = [\"t.edge.example.net.\"]\ncolour = 3\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].file, "tenants/t.toml");
        assert_eq!(p[0].line, 2);
        assert!(p[0].problem.contains("colour"), "{p:?}");
    }

    #[test]
    fn a_bad_name_names_its_field_and_line() {
        let p = problems("names = [\n  \"t.edge.example.net.\",\n  \"no-dot\",\n]\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!((p[0].line, p[0].field.as_str()), (3, "names[1]"));
    }

    #[test]
    fn never_an_all_zero_profile() {
        let text = "names = [\"t.edge.example.net.\"]\n[profile]\ntype = \"weighted\"\nttl = 60\n\
                    [[profile.endpoints]]\nname = \"a\"\ncname = \"a.example.org.\"\nweight = 100\n\
                    [breakglass]\na = 0\n";
        let p = problems(text);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].field, "profile.endpoints");
        assert!(p[0].problem.contains("every weight is 0"));
    }

    #[test]
    fn breakglass_names_only_endpoints_of_the_profile() {
        let text = "names = [\"t.edge.example.net.\"]\n[profile]\ntype = \"weighted\"\nttl = 60\n\
                    [[profile.endpoints]]\nname = \"a\"\ncname = \"a.example.org.\"\nweight = 100\n\
                    [breakglass]\nb = 100\n";
        let p = problems(text);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!((p[0].field.as_str(), p[0].line), ("breakglass.b", 10));
    }

    #[test]
    fn breakglass_weights_replace_the_endpoints() {
        let text = "names = [\"t.edge.example.net.\"]\n[profile]\ntype = \"weighted\"\nttl = 60\n\
                    [[profile.endpoints]]\nname = \"a\"\ncname = \"a.example.org.\"\nweight = 100\n\
                    [[profile.endpoints]]\nname = \"b\"\ncname = \"b.example.org.\"\nweight = 0\n\
                    [breakglass]\na = 0\nb = 100\n";
        let parsed = parse("tenants/t.toml", text).map_err(|p| format!("{p:?}"));
        let weights = parsed.map(|p| effective_weights(&p.document));
        assert_eq!(
            weights,
            Ok(vec![("a".to_string(), 0), ("b".to_string(), 100)])
        );
    }

    #[test]
    fn cells_out_of_range_name_file_line_and_field() {
        let p = problems("names = [\"t.edge.example.net.\"]\nttl = 60\ncells = 0\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(
            (p[0].file.as_str(), p[0].line, p[0].field.as_str()),
            ("tenants/t.toml", 3, "cells")
        );
        assert_eq!(
            problems("names = [\"t.edge.example.net.\"]\ncells = 9\n").len(),
            1
        );
        assert!(problems("names = [\"t.edge.example.net.\"]\ncells = 3\n").is_empty());
    }

    #[test]
    fn tenant_names_are_lower_case_identifiers() {
        assert!(valid_tenant_name("contoso-2"));
        assert!(!valid_tenant_name("Contoso"));
        assert!(!valid_tenant_name(""));
        assert!(!valid_tenant_name("-x"));
        assert!(!valid_tenant_name("a.b"));
    }
}
