//! Human-readable trace of a policy decision (for `CH TXT` debugging queries). Allocates; not
//! for the hot path.

use std::fmt::Write as _;

use super::evaluate::{
    evaluate_for_tenant, AnycastChoice, AsTenant, LocatedClient, StepChoice, StepHealth, Target,
};
use super::health::HealthView;
use super::knobs::{Destination, ShedView};
use super::model::{AllDown, CompiledPolicies, GeoRoute, PolicyRoot};
use crate::cells::LeftOut;

/// Explains how `root` answers `client`: profile path, chosen endpoints, shed state, hash
/// bucket, TTL and ECS scope, e.g.
/// `profile critical[weighted] -> endpoint frontdoor (single servable); answer CNAME
/// critical.edge.example.net.; ttl 60; scope 0`.
pub fn explain(
    p: &CompiledPolicies,
    root: PolicyRoot,
    client: &LocatedClient,
    shed: &ShedView,
) -> String {
    explain_with_health(p, root, client, shed, &HealthView::all_up())
}

/// [`explain`] with the monitors' view: endpoints skipped because they are down are named
/// (`skipped for health: primary down`), and an all-down profile says which rule answered.
pub fn explain_with_health(
    p: &CompiledPolicies,
    root: PolicyRoot,
    client: &LocatedClient,
    shed: &ShedView,
    health: &HealthView,
) -> String {
    explain_for_tenant(p, root, client, shed, health, None)
}

/// [`explain_with_health`] for a tenant's name: its cells in the answer, the impaired ones left
/// out, the layer it fell back to when all of them were, and a shed that is its own
/// (tenant-first shedding), with its share of the region's load as the shield last saw it.
pub fn explain_for_tenant(
    p: &CompiledPolicies,
    root: PolicyRoot,
    client: &LocatedClient,
    shed: &ShedView,
    health: &HealthView,
    tenant: Option<AsTenant<'_>>,
) -> String {
    explain_for_tenant_with_own(p, root, client, shed, health, tenant, None)
}

/// [`explain_for_tenant`] for a tenant whose profile has monitors of its own: `own` is their
/// first slot and their view (see [`super::evaluate_with_own_health`]).
pub fn explain_for_tenant_with_own(
    p: &CompiledPolicies,
    root: PolicyRoot,
    client: &LocatedClient,
    shed: &ShedView,
    health: &HealthView,
    tenant: Option<AsTenant<'_>>,
    own: Option<(u16, &HealthView)>,
) -> String {
    let decision = match (root, own) {
        (PolicyRoot::Profile { .. }, Some((base, view))) => {
            super::evaluate_with_own_health(p, root, client, shed, health, base, view)
        }
        _ => evaluate_for_tenant(p, root, client, shed, health, tenant),
    };
    let tenant = tenant.map(|t| t.name);
    let mut out = String::new();
    if let Some((region, choice)) = decision.trace.anycast {
        let _ = write!(out, "anycast; region {}", region_label(p, region));
        if decision.trace.tenant_first {
            let _ = write!(
                out,
                "; tenant-first: tenant {} shed on its own (its share of the region's load is \
                 above the shield's tenant_share), the region is not",
                tenant.unwrap_or("?")
            );
        }
        let _ = write!(out, "; {}", anycast_choice(p, choice));
        if let Some(revision) = shed.revision() {
            let _ = write!(out, "; shield state revision {revision}");
        }
    }
    for step in decision.trace.steps.iter().flatten() {
        if !out.is_empty() {
            out.push_str(" -> ");
        }
        let profile = p.profile_name(step.profile).unwrap_or("?");
        let kind = match step.choice {
            StepChoice::Weighted { .. } => "weighted",
            StepChoice::Geo(_) => "geo",
            StepChoice::Failover => "failover",
        };
        let endpoint = p.endpoint_name(step.profile, step.endpoint).unwrap_or("?");
        let reason = match step.health {
            StepHealth::AllDown(rule) => format!("every endpoint down: {}", all_down_text(rule)),
            _ => step_reason(p, step.choice, client.region),
        };
        let _ = write!(
            out,
            "profile {profile}[{kind}] -> endpoint {endpoint} ({reason})"
        );
        if step.health != StepHealth::Unchanged {
            let down = down_endpoints(p, step.profile, health, own);
            if !down.is_empty() {
                let _ = write!(out, "; skipped for health: {} down", down.join(", "));
            }
        }
    }
    if let Some(to) = decision.trace.cells_fallback {
        let _ = write!(
            out,
            "; every cell of the tenant's shard impaired -> {}",
            destination_label(p, to)
        );
    }
    if decision.left_out.any() {
        out.push_str("; impaired cells left out");
        let named = left_out_cells(p, decision.target, decision.left_out, shed, health);
        if !named.is_empty() {
            let _ = write!(out, ": {}", named.join(", "));
        }
    }
    if decision.trace.hot {
        out.push_str("; region hot (short TTL)");
    }
    let _ = write!(
        out,
        "; answer {}; ttl {}; scope {}",
        target_text(decision.target, decision.left_out),
        decision.ttl,
        decision.scope
    );
    out
}

fn region_label(p: &CompiledPolicies, region: u16) -> String {
    match p.regions().get(usize::from(region)) {
        Some(r) => r.name.clone(),
        None => format!("#{region} (unknown)"),
    }
}

fn destination_label(p: &CompiledPolicies, destination: Destination) -> String {
    match destination {
        Destination::Global => "global".to_owned(),
        Destination::Region(r) => format!("regional {}", region_label(p, r)),
        Destination::Fallback(s) => match p.fallback_sites().get(usize::from(s)) {
            Some(site) => format!("fallback {}", site.name),
            None => format!("fallback #{s} (unknown)"),
        },
    }
}

fn anycast_choice(p: &CompiledPolicies, choice: AnycastChoice) -> String {
    match choice {
        AnycastChoice::Global => "not shed -> global".to_owned(),
        AnycastChoice::Forced(d) => format!("forced -> {}", destination_label(p, d)),
        AnycastChoice::Drained(d) => format!("drained -> {}", destination_label(p, d)),
        AnycastChoice::Shed {
            destination,
            bucket,
            fraction_permille,
        } => format!(
            "shedding {fraction_permille} per mille, bucket {bucket} -> {}",
            destination_label(p, destination)
        ),
        AnycastChoice::Kept {
            bucket,
            fraction_permille,
        } => format!("shedding {fraction_permille} per mille, bucket {bucket} kept -> global"),
    }
}

fn step_reason(p: &CompiledPolicies, choice: StepChoice, client_region: u16) -> String {
    match choice {
        StepChoice::Weighted { hashed: false } => "single servable".to_owned(),
        StepChoice::Weighted { hashed: true } => "subnet hash".to_owned(),
        StepChoice::Failover => "first enabled".to_owned(),
        StepChoice::Geo(route) => {
            let region = region_label(p, client_region);
            match route {
                GeoRoute::Direct => format!("serves {region}"),
                GeoRoute::Neighbour(n) => {
                    format!("{region} via neighbour {}", region_label(p, n))
                }
                GeoRoute::Continent(c) => {
                    format!("{region} via same-continent {}", region_label(p, c))
                }
                GeoRoute::Default => format!("{region} via default"),
                GeoRoute::Elsewhere => format!("{region} via another endpoint"),
            }
        }
    }
}

fn all_down_text(rule: AllDown) -> &'static str {
    match rule {
        AllDown::ServeAll => "all_down serve-all",
        AllDown::ServeLastHealthy => "all_down serve-last-healthy",
        AllDown::Fallback(_) => "all_down fallback",
    }
}

/// The candidates of a profile that are down (monitored or nesting a profile with nothing up).
fn down_endpoints(
    p: &CompiledPolicies,
    id: super::model::ProfileId,
    view: &HealthView,
    own: Option<(u16, &HealthView)>,
) -> Vec<String> {
    let mut health = super::evaluate::Health::new(p, view);
    if let Some((base, own)) = own {
        health.own_base = base;
        health.own = own;
    }
    let Some(profile) = p.profile(id) else {
        return Vec::new();
    };
    profile
        .candidates
        .iter()
        .filter(|&&i| !health.endpoint_up(profile, i, 0))
        .filter_map(|&i| profile.endpoints.get(usize::from(i)))
        .map(|e| e.name.clone())
        .collect()
}

/// The cells `left_out` leaves out of `target`, each with why (`g1 (probe-down)`).
fn left_out_cells(
    p: &CompiledPolicies,
    target: Target<'_>,
    left_out: LeftOut,
    shed: &ShedView,
    health: &HealthView,
) -> Vec<String> {
    let (Some(topology), Target::Addresses { v4, v6 }) = (p.cells(), target) else {
        return Vec::new();
    };
    let out_v4: Vec<_> = v4
        .iter()
        .enumerate()
        .filter(|(i, _)| left_out.leaves_out(*i))
        .map(|(_, a)| *a)
        .collect();
    let out_v6: Vec<_> = v6
        .iter()
        .enumerate()
        .filter(|(i, _)| left_out.leaves_out(*i))
        .map(|(_, a)| *a)
        .collect();
    let sources = [
        p.impaired_cells().map(|c| &**c),
        health.cells(),
        shed.cells(),
    ];
    let union = crate::cells::ImpairedCells::union(topology, sources);
    union
        .with_reasons()
        .filter_map(|(cell, why)| {
            let found = topology
                .layer(cell.layer)?
                .cells()
                .get(usize::from(cell.cell))?;
            let hit = found.v4.is_some_and(|a| out_v4.contains(&a))
                || found.v6.is_some_and(|a| out_v6.contains(&a));
            let reasons: Vec<&str> = why.iter().map(crate::cells::Why::as_str).collect();
            hit.then(|| format!("{} ({})", found.name, reasons.join("+")))
        })
        .collect()
}

fn target_text(target: Target<'_>, left_out: LeftOut) -> String {
    match target {
        Target::Cname { name, .. } => format!("CNAME {name}"),
        Target::Addresses { v4, v6 } => {
            let all: Vec<String> = left_out
                .keep(v4)
                .map(ToString::to_string)
                .chain(left_out.keep(v6).map(ToString::to_string))
                .collect();
            if all.is_empty() {
                "no addresses".to_owned()
            } else {
                all.join(" ")
            }
        }
    }
}
