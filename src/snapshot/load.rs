//! Building a snapshot from files: the "food taster". Everything is read, parsed, validated and
//! compiled here; the caller swaps the result in only if this returns `Ok`.

use std::path::Path;
use std::time::Instant;

use crate::config::Config;
use crate::control::ControlFile;
use crate::geo::Locator;
use crate::policy::{ControlKnobs, PolicyError};
use crate::shield::live::DemandCounters;
use crate::zone::model::{RecordInput, Zone};
use crate::zone::parse::{load_zone_dir, ZoneProblem};
use crate::zone::validate::validate;

use super::steer::SteeringData;
use super::Snapshot;

/// A snapshot ready to serve, with the warnings found on the way and how long it took.
pub struct Loaded {
    pub snapshot: Snapshot,
    pub warnings: Vec<String>,
    pub elapsed: std::time::Duration,
}

/// Where the control knobs come from for one load.
pub enum ControlSource<'a> {
    /// Read the file the config names (if any).
    FromConfig,
    /// Use this text (already read, or a version from the history) as if it were that file.
    Text { path: &'a Path, text: &'a str },
}

/// Loads and compiles everything the config points at. `Err` carries one line per problem,
/// each naming file and line.
pub fn load(config: &Config) -> Result<Loaded, Vec<String>> {
    load_with(config, ControlSource::FromConfig)
}

/// Like [`load`], with the control knobs from `control`.
pub fn load_with(config: &Config, control: ControlSource<'_>) -> Result<Loaded, Vec<String>> {
    let started = Instant::now();
    let control = read_control(config, control)?;
    let (parsed, mut problems) = load_zone_dir(&config.server.zones);
    for zone in &parsed {
        problems.extend(validate(zone));
    }
    let (errors, warnings): (Vec<ZoneProblem>, Vec<ZoneProblem>) =
        problems.into_iter().partition(ZoneProblem::is_error);
    if !errors.is_empty() {
        return Err(errors.iter().map(ToString::to_string).collect());
    }
    if parsed.is_empty() {
        return Err(vec![format!(
            "{}: no zone files (*.zone) found",
            config.server.zones.display()
        )]);
    }
    let mut zones = Vec::with_capacity(parsed.len());
    let mut failures = Vec::new();
    for zone in &parsed {
        let records = zone.records.iter().map(|r| RecordInput {
            name: &r.name,
            rtype: u16::from(r.rtype),
            ttl: r.ttl,
            rdata: &r.rdata,
        });
        match Zone::build(&zone.origin, records) {
            Ok(z) => zones.push(z),
            Err(e) => failures.push(format!("{}: {e}", zone.path.display())),
        }
    }
    if !failures.is_empty() {
        return Err(failures);
    }
    let mut warnings: Vec<String> = warnings.iter().map(ToString::to_string).collect();
    let steering = compile_steering(config, &control, &mut zones, &mut warnings)?;
    let mut snapshot = Snapshot::build(
        zones,
        config.serve_options(),
        steering,
        config.trace.allow.clone(),
    );
    snapshot.control = control.map(|(file, _)| file).unwrap_or_default();
    snapshot.shield_settings = config.shield.settings();
    if let Some(ttl) = snapshot
        .policies()
        .and_then(crate::shield::live::steady_ttl)
    {
        snapshot.shield_settings.steady_ttl = ttl;
    }
    snapshot.load_file = config.shield.load_file.clone();
    snapshot.shield_tick_ms = config.shield.tick_ms;
    snapshot.rrl = crate::rrl::RateLimiter::from_config(&config.rrl);
    snapshot.serial = snapshot.control.serial.unwrap_or(0);
    Ok(Loaded {
        snapshot,
        warnings,
        elapsed: started.elapsed(),
    })
}

/// Compiles topology, profiles and steered names, locates the geo database, and binds every
/// steered name into its zone. `Ok(None)` when nothing is steered.
fn compile_steering(
    config: &Config,
    control: &Option<(ControlFile, String)>,
    zones: &mut [Zone],
    warnings: &mut Vec<String>,
) -> Result<Option<SteeringData>, Vec<String>> {
    if !config.has_steering() {
        return Ok(None);
    }
    let knobs = control
        .as_ref()
        .map_or_else(ControlKnobs::default, |(file, _)| file.knobs());
    let policies = config.compile_policies(&knobs).map_err(|errors| {
        errors
            .iter()
            .map(|e| describe_policy_error(config, control, e))
            .collect::<Vec<_>>()
    })?;
    let region_names: Vec<&str> = policies.region_names().collect();
    let locator = Locator::compile(&config.geo, &config.base_dir, &region_names).map_err(|e| {
        let field = match &e {
            crate::geo::GeoError::Config { field, .. } => field.as_str(),
            _ => "geo.database",
        };
        vec![format!("{}: {e}", config_location(config, field))]
    })?;
    if let Some(reason) = locator.degraded() {
        warnings.push(format!(
            "geo database unusable, every client maps to the default region: {reason}"
        ));
    }
    bind_steered_names(config, &policies, zones)?;
    let (region_count, site_count) = (policies.regions().len(), policies.fallback_sites().len());
    Ok(Some(SteeringData {
        policies,
        locator,
        demand: DemandCounters::new(region_count, site_count),
    }))
}

fn bind_steered_names(
    config: &Config,
    policies: &crate::policy::CompiledPolicies,
    zones: &mut [Zone],
) -> Result<(), Vec<String>> {
    let mut per_zone: Vec<Vec<(&hickory_proto::rr::Name, u32)>> = vec![Vec::new(); zones.len()];
    let mut errors = Vec::new();
    for (i, steered) in policies.steered().iter().enumerate() {
        let owner = zones
            .iter()
            .enumerate()
            .filter(|(_, z)| z.origin.zone_of(&steered.name))
            .max_by_key(|(_, z)| z.apex_labels);
        match owner {
            Some((zi, _)) => per_zone[zi].push((&steered.name, i as u32)),
            None => errors.push(format!(
                "{}: steered[{i}].name: {} is not inside any served zone",
                config_location(config, &format!("steered[{i}].name")),
                steered.name
            )),
        }
    }
    for (zone, bindings) in zones.iter_mut().zip(&per_zone) {
        if !bindings.is_empty() {
            if let Err(e) = zone.bind_steered(bindings) {
                errors.push(format!("{}: {e}", config_location(config, "steered")));
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Reads and parses the control knobs; `None` when no control file is configured.
fn read_control(
    config: &Config,
    source: ControlSource<'_>,
) -> Result<Option<(ControlFile, String)>, Vec<String>> {
    let (path, text) = match source {
        ControlSource::Text { path, text } => (path.to_path_buf(), text.to_string()),
        ControlSource::FromConfig => match &config.control.file {
            None => return Ok(None),
            Some(path) => {
                let text = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT)
                    .map_err(|e| vec![format!("{}: cannot read: {e}", path.display())])?;
                (path.clone(), text)
            }
        },
    };
    let file = ControlFile::parse(&text, &path).map_err(|e| vec![e.to_string()])?;
    Ok(Some((file, text)))
}

/// A policy error as one line naming the file, line and field: control knobs point into the
/// control file, everything else into the config.
fn describe_policy_error(
    config: &Config,
    control: &Option<(ControlFile, String)>,
    error: &PolicyError,
) -> String {
    if let (Some((file, text)), Some(path)) = (control, config.control.file.as_ref()) {
        // Knob errors carry a `control.` path; a profile or region the control file touches
        // (e.g. all weights now 0) is the control file's doing too.
        let field = error.path.strip_prefix("control.").or_else(|| {
            let mut parts = error.path.splitn(3, '.');
            let (section, name) = (parts.next()?, parts.next()?);
            let touched = match section {
                "profiles" => file.profiles.contains_key(name),
                "regions" => file.regions.contains_key(name),
                _ => false,
            };
            touched.then_some(error.path.as_str())
        });
        if let Some(field) = field {
            let line = crate::control::line_of_field(text, field)
                .map_or(String::new(), |l| format!(":{l}"));
            return format!("{}{line}: {field}: {}", path.display(), error.problem);
        }
    }
    format!(
        "{}: {}: {}",
        config_location(config, &error.path),
        error.path,
        error.problem
    )
}

/// `file:line` of a field in the config file (or just the file, or "config" for built-in
/// defaults), for errors found after parsing.
fn config_location(config: &Config, field: &str) -> String {
    let Some(path) = &config.source_path else {
        return "config".to_string();
    };
    let line = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT)
        .ok()
        .and_then(|text| crate::control::line_of_field(&text, field));
    match line {
        Some(line) => format!("{}:{line}", path.display()),
        None => path.display().to_string(),
    }
}
