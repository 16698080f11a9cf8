//! Building a snapshot from files: the "food taster". Everything is read, parsed, validated and
//! compiled here; the caller swaps the result in only if this returns `Ok`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::config::Config;
use crate::control::ControlFile;
use crate::dns::wire::WireName;
use crate::files::Digest;
use crate::geo::Locator;
use crate::policy::{CompiledPolicies, ControlKnobs, PolicyError};
use crate::shield::live::DemandCounters;
use crate::zone::lookup::ZoneSet;
use crate::zone::model::{name_to_wire, RecordInput, SteeredBinding, Zone};
use crate::zone::parse::{
    load_zone_dir, load_zone_file, zone_files_in, ParsedZone, ZoneProblem, MAX_ZONE_FILE_BYTES,
};
use crate::zone::validate::validate;

use super::projection::{self, Projections};
use super::steer::SteeringData;
use super::Compiled;

mod difference;

/// What a load compiled, ready to serve, with the warnings found on the way and how long it
/// took.
pub struct Loaded {
    pub compiled: Compiled,
    pub warnings: Vec<String>,
    pub elapsed: std::time::Duration,
    /// Where the zones and precompiled answers came from.
    pub zones_from: ZonesFrom,
}

/// Where a load took its zones and precompiled answers from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZonesFrom {
    /// Parsed, validated and compiled from the zone files; the reason the zone cache was not
    /// used when a cold start looked at it, and the reason a reload did not apply the change
    /// as a difference.
    Built {
        cache_refused: Option<String>,
        difference_declined: Option<String>,
    },
    /// The zones served before with the changed records of these files laid over them
    /// (`load::difference`).
    Difference {
        names_changed: usize,
        removed: usize,
        added: usize,
        files: Vec<PathBuf>,
    },
    /// Shared with the snapshot served before (no zone or config file changed).
    Shared,
    /// The last-known-good zone cache ([`super::zone_cache`]).
    Cache,
}

impl ZonesFrom {
    /// For status: one line.
    pub fn describe(&self) -> String {
        match self {
            ZonesFrom::Built {
                cache_refused: None,
                difference_declined: None,
            } => "built from the zone files".to_string(),
            ZonesFrom::Built {
                cache_refused: Some(why),
                ..
            } => format!("built from the zone files (zone cache not used: {why})"),
            ZonesFrom::Built {
                difference_declined: Some(why),
                ..
            } => format!("built from the zone files (not applied as a difference: {why})"),
            ZonesFrom::Difference {
                names_changed,
                removed,
                added,
                files,
            } => {
                let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
                let plural = |n: usize, word: &str| match n {
                    1 => format!("1 {word}"),
                    n => format!("{n} {word}s"),
                };
                format!(
                    "applied as a difference: {} changed, {} removed and {added} added ({})",
                    plural(*names_changed, "name"),
                    plural(*removed, "record"),
                    files.join(", ")
                )
            }
            ZonesFrom::Shared => "shared with the snapshot served before".to_string(),
            ZonesFrom::Cache => "from the last-known-good zone cache".to_string(),
        }
    }
}

/// What a load may take its zones from instead of building them.
enum Reuse<'a> {
    /// The snapshot being served, when its inputs are unchanged.
    Served(&'a Compiled),
    /// The snapshot being served with the zone files' changes applied as a difference, and
    /// nothing else: a change the difference path declines stops the load
    /// ([`Stop::Declined`]) instead of building the zones.
    DifferenceOnly(&'a Compiled, &'a Prepared),
    /// The last-known-good zone cache in the state directory (a cold start).
    Cache,
    Nothing,
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
    load_after(config, control, None)
}

/// Like [`load_with`]; when `previous` (the snapshot being served) was built from the same
/// config file and zone files — compared byte for byte through their digests, re-read now —
/// and the steered names come out the same, its zones and precompiled answers are shared
/// instead of parsed and compiled again. Policies, the geo database and everything else are
/// always compiled afresh: a control-file change costs what the policies cost.
pub fn load_after(
    config: &Config,
    control: ControlSource<'_>,
    previous: Option<&Compiled>,
) -> Result<Loaded, Vec<String>> {
    let reuse = match previous {
        Some(previous) => Reuse::Served(previous),
        None => Reuse::Nothing,
    };
    load_reusing(config, control, reuse).map_err(Stop::into_problems)
}

/// What [`load_difference`] did.
pub enum DifferenceLoad {
    /// Loaded, the zone files' changes applied as a difference.
    Loaded(Box<Loaded>),
    /// Not loaded: the change is not one the difference path applies, for this reason (load
    /// it with [`load_after`]).
    Declined(String),
}

/// Like [`load_after`], for a change of zone files only that the difference path can apply
/// ([`difference_windows`] found it): applies it, or declines without building anything.
pub fn load_difference(
    config: &Config,
    control: ControlSource<'_>,
    previous: &Compiled,
    prepared: &Prepared,
) -> Result<DifferenceLoad, Vec<String>> {
    match load_reusing(config, control, Reuse::DifferenceOnly(previous, prepared)) {
        Ok(loaded) => Ok(DifferenceLoad::Loaded(Box::new(loaded))),
        Err(Stop::Declined(why)) => Ok(DifferenceLoad::Declined(why)),
        Err(Stop::Refused(problems)) => Err(problems),
    }
}

pub use difference::{difference_windows, Prepared, TasteWindow};

/// Why a load stopped: refused (one line per problem), or declined by the difference path.
enum Stop {
    Refused(Vec<String>),
    Declined(String),
}

impl From<Vec<String>> for Stop {
    fn from(problems: Vec<String>) -> Stop {
        Stop::Refused(problems)
    }
}

impl Stop {
    fn into_problems(self) -> Vec<String> {
        match self {
            Stop::Refused(problems) => problems,
            Stop::Declined(why) => vec![why],
        }
    }
}

/// A server's first load: like [`load_with`], taking the zones and precompiled answers from
/// the last-known-good zone cache when it holds exactly what the zone files and the config
/// would build ([`super::zone_cache`]), else building them (and saying why the cache was not
/// used, in [`Loaded::zones_from`]).
pub fn load_cold(config: &Config, control: ControlSource<'_>) -> Result<Loaded, Vec<String>> {
    load_reusing(config, control, Reuse::Cache).map_err(Stop::into_problems)
}

/// Phase 1 of a start from the zone cache: a snapshot that serves the cache's precompiled
/// answers, mapped in place, and the steered names' policies compiled from the config, with
/// no zones (`Compiled::loading`: every other query is held). Fast because it decodes
/// nothing per name and does not look at the zone files: the caller serves it at once, then
/// makes the full first load ([`load_cold`]), which decodes the zones and compares the zone
/// files with what the cache was built from, and swaps that in whole (a changed file is then
/// loaded as any first load loads it). `Err` says why there is no phase 1 (the caller goes
/// straight to the full load): no usable cache, or what it needs the zones for.
pub fn load_first_answers(config: &Config, control: ControlSource<'_>) -> Result<Loaded, String> {
    let started = Instant::now();
    if config.transfer.is_some() {
        return Err("outgoing transfers ([transfer]) are served from the zones".to_string());
    }
    if !super::catalog::secondary_zones(config).is_empty() {
        return Err("secondary zones (their expiry is the zones' own)".to_string());
    }
    let refused = |problems: Vec<String>| problems.join("; ");
    let control = read_control(config, control).map_err(refused)?;
    let keys = DnssecKeys::load(config, None).map_err(refused)?;
    if !keys.signs_nothing() || !keys.not_served.is_empty() {
        return Err("signed zones are not cached".to_string());
    }
    let config_digest = config_digest(config);
    let first = super::zone_cache::read_first_answers(config, config_digest.as_ref())
        .map_err(|e| e.to_string())?;
    let tls = load_tls(config).map_err(refused)?;
    let mut warnings = first.sources.zone_warnings.to_vec();
    let steering = compile_steering(config, &control, &mut warnings).map_err(refused)?;
    if steered_names(steering.as_ref()) != first.sources.steered {
        return Err("the config binds other steered names".to_string());
    }
    let cookies = super::cookies::load(&config.server.cookies)?;
    let options = super::ServeOptions::from_config(&config.server, cookies);
    let shield = shield_setup(config, steering.as_ref().map(|s| &s.policies));
    let compiled = Compiled {
        expired: Box::default(),
        zones: ZoneSet::new(Vec::new()),
        precompiled: first.precompiled,
        options,
        steering,
        trace_allow: config.trace.allow.clone(),
        control: control.map(|(file, _)| file).unwrap_or_default(),
        shield,
        rrl: crate::rrl::RrlLimits::from_config(&config.rrl),
        budgets: crate::rrl::budget::BudgetLimits::from_config(&config.budgets),
        // None: a reload never shares this snapshot's (absent) zones.
        sources: None,
        dnssec: None,
        dnssec_not_served: Vec::new(),
        tls,
        transfer: None,
        projections: Projections::default(),
        differences: Vec::new(),
        loading: true,
    };
    Ok(Loaded {
        compiled,
        warnings,
        elapsed: started.elapsed(),
        zones_from: ZonesFrom::Cache,
    })
}

fn load_reusing(
    config: &Config,
    control: ControlSource<'_>,
    reuse: Reuse<'_>,
) -> Result<Loaded, Stop> {
    let started = Instant::now();
    let control = read_control(config, control)?;
    let config_digest = config_digest(config);
    let previous = match reuse {
        Reuse::Served(previous) | Reuse::DifferenceOnly(previous, _) => Some(previous),
        Reuse::Cache | Reuse::Nothing => None,
    };
    let prepared = match reuse {
        Reuse::DifferenceOnly(_, prepared) => Some(prepared),
        _ => None,
    };
    let difference_only = prepared.is_some();
    let keys = DnssecKeys::load(config, previous.and_then(|p| p.dnssec.as_deref()))?;
    let tls = load_tls(config)?;
    let transfer = match &config.transfer {
        Some(t) => Some(Arc::new(super::transfer::TransferSetup::load(t)?)),
        None => None,
    };
    let mut warnings = keys.not_served_warnings(config);
    let mut zones_from = ZonesFrom::Built {
        cache_refused: None,
        difference_declined: None,
    };
    let reusable = match reuse {
        Reuse::Served(previous) => previous
            .sources
            .as_ref()
            .filter(|sources| sources.unchanged(config, config_digest.as_ref()))
            .filter(|_| keys.signed_alike(previous.dnssec.as_deref()))
            .filter(|_| previous.dnssec_not_served == keys.not_served)
            .map(|sources| Reusable {
                zones: previous.zones.clone(),
                precompiled: previous.precompiled.clone(),
                sources: sources.clone(),
                signing: previous.dnssec.as_ref().map(|d| d.zones.clone()),
                from: ZonesFrom::Shared,
                projection: None,
            }),
        Reuse::Cache if keys.signs_nothing() && produces_no_catalog(transfer.as_deref()) => {
            match super::zone_cache::read(config, config_digest.as_ref()) {
                Ok(cached) => Some(Reusable {
                    zones: ZoneSet::new(cached.zones),
                    precompiled: cached.precompiled,
                    sources: cached.sources,
                    signing: None,
                    from: ZonesFrom::Cache,
                    projection: cached.projection,
                }),
                Err(why) => {
                    zones_from = ZonesFrom::Built {
                        cache_refused: Some(why.to_string()),
                        difference_declined: None,
                    };
                    None
                }
            }
        }
        Reuse::Cache => {
            let why = if keys.signs_nothing() {
                "a produced catalog zone ([transfer] catalog) is not cached"
            } else {
                "signed zones are not cached"
            };
            zones_from = ZonesFrom::Built {
                cache_refused: Some(why.to_string()),
                difference_declined: None,
            };
            None
        }
        Reuse::Nothing | Reuse::DifferenceOnly(..) => None,
    };
    let reused_sources = reusable.as_ref().map(|r| r.sources.clone());
    let mut shared = None;
    if let Some(reusable) = reusable {
        warnings.extend(reusable.sources.zone_warnings.iter().cloned());
        let steering = compile_steering(config, &control, &mut warnings)?;
        // A projection that changed moves its zone's SOA serial: the zone is built again.
        let projections = match (&transfer, previous) {
            (None, _) => Some(previous.map(|p| p.projections.clone()).unwrap_or_default()),
            (Some(_), Some(previous)) => previous
                .projections
                .same_records(&projection::project(
                    steering.as_ref().map(|s| &s.policies),
                    previous.zones.zones(),
                    &|origin| keys.stamp(origin),
                ))
                .then(|| previous.projections.clone()),
            (Some(_), None) => reusable.projection.as_ref().and_then(|numbered_with| {
                cached_projections(
                    config,
                    numbered_with,
                    &keys,
                    steering.as_ref(),
                    &reusable.zones,
                )
            }),
        };
        let same_steered = steered_names(steering.as_ref()) == reusable.sources.steered;
        if let (true, Some(projections)) = (same_steered, projections.clone()) {
            tracing::debug!(
                "config and zone files unchanged: {}",
                reusable.from.describe()
            );
            zones_from = reusable.from;
            shared = Some((
                reusable.zones,
                Some(reusable.precompiled),
                reusable.sources,
                steering,
                reusable.signing,
                projections,
            ));
        } else {
            if reusable.from == ZonesFrom::Cache {
                let why = if same_steered {
                    "the transfer projection moved since it was written (serials renumber)"
                } else {
                    "the config binds other steered names"
                };
                zones_from = ZonesFrom::Built {
                    cache_refused: Some(why.to_string()),
                    difference_declined: None,
                };
            }
            warnings = keys.not_served_warnings(config);
        }
    }
    let mut differences = Vec::new();
    if let (Some(previous), None, None) = (previous, &shared, &reused_sources) {
        let tried = try_difference(config, previous, &transfer, &keys, &control, prepared)?;
        let (from, outcome) = match tried {
            Difference::Applied(applied) => {
                warnings.extend(applied.shared.2.zone_warnings.iter().cloned());
                differences = applied.diffs;
                (applied.from, Some(applied.shared))
            }
            Difference::Declined(why) if difference_only => return Err(Stop::Declined(why)),
            Difference::Declined(why) => (
                ZonesFrom::Built {
                    cache_refused: None,
                    difference_declined: Some(why),
                },
                None,
            ),
        };
        tracing::debug!("zones: {}", from.describe());
        zones_from = from;
        shared = outcome;
    }
    let (zones, precompiled, sources, steering, signed, projections) = match shared {
        Some(shared) => shared,
        None => {
            let built = build_zones(config)?;
            warnings.extend(built.warnings.iter().cloned());
            let mut zones = built.zones;
            zones.retain(|z| !keys.refuses(&z.origin));
            let steering = compile_steering(config, &control, &mut warnings)?;
            bind(config, steering.as_ref(), &mut zones, &keys.not_served)?;
            let projections = match &transfer {
                Some(setup) => {
                    let remembered = remembered_projections(config, previous);
                    let mut projections =
                        project_zones(&remembered, &keys, steering.as_ref(), &mut zones);
                    if let Some(name) = &setup.config.catalog {
                        let (catalog, numbered) =
                            super::catalog::build(name, &zones, &setup.config, &remembered)
                                .map_err(|e| {
                                    vec![format!(
                                        "{}: transfer.catalog: {e}",
                                        config_location(config, "catalog")
                                    )]
                                })?;
                        zones.push(catalog);
                        projections.catalog = Some(numbered);
                    }
                    projections
                }
                None => Projections::default(),
            };
            let signed = keys.sign_zones(config, &mut zones, steering.as_ref())?;
            let mut projections = projections;
            keys.sign_projections(&zones, &mut projections)?;
            let sources = Sources {
                config_path: config.source_path.clone(),
                config: config_digest,
                zones_dir: config.server.zones.clone(),
                zone_files: built.zone_files,
                files: built.files,
                steered: steered_names(steering.as_ref()),
                zone_warnings: built.warnings,
                texts: built.texts,
            };
            // Rebuilt from the same bytes (a projection that moved its zone's serial): the
            // same sources, so that what the taster checked against them still holds.
            let sources = match reused_sources {
                Some(before) if before.same_inputs(&sources) => before,
                _ => Arc::new(sources),
            };
            (
                ZoneSet::new(zones),
                None,
                sources,
                steering,
                signed,
                projections,
            )
        }
    };
    let signing = keys.sign_steered(&zones, steering.as_ref(), signed)?;
    warnings.extend(keys.seed_warnings(config));
    warnings.extend(keys.algorithm_warnings(config));
    if let Some(material) = &tls {
        warnings.extend(material.warning(crate::tls::unix_now()));
    }
    let cookies = super::cookies::load(&config.server.cookies).map_err(|e| vec![e])?;
    let options = super::ServeOptions::from_config(&config.server, cookies);
    let policies = steering.as_ref().map(|s| &s.policies);
    let precompiled =
        precompiled.unwrap_or_else(|| super::Precompiled::build(&zones, policies, &options));
    let shield = shield_setup(config, policies);
    let expired = expired_zones(config, &zones);
    let compiled = Compiled {
        expired,
        zones,
        precompiled,
        options,
        steering,
        trace_allow: config.trace.allow.clone(),
        control: control.map(|(file, _)| file).unwrap_or_default(),
        shield,
        rrl: crate::rrl::RrlLimits::from_config(&config.rrl),
        budgets: crate::rrl::budget::BudgetLimits::from_config(&config.budgets),
        sources: Some(sources),
        dnssec: signing.map(Arc::new),
        dnssec_not_served: keys.not_served.clone(),
        tls,
        transfer,
        projections,
        differences,
        loading: false,
    };
    Ok(Loaded {
        compiled,
        warnings,
        elapsed: started.elapsed(),
        zones_from,
    })
}

/// Per zone of `zones`: a secondary zone whose expired marker exists (read on every load, so
/// a zone shared from the previous load gets its expiry from now).
fn expired_zones(config: &Config, zones: &ZoneSet) -> Box<[bool]> {
    let mut expired = vec![false; zones.zones().len()];
    let mut any = false;
    for zone in &super::catalog::secondary_zones(config) {
        let Some(origin) = zone.origin() else {
            continue;
        };
        let apex = crate::zone::model::name_to_wire(&origin.to_lowercase());
        if let Some(i) = zones.zones().iter().position(|z| z.apex == apex) {
            if zone.expired_marker().exists() {
                expired[i] = true;
                any = true;
            }
        }
    }
    if any {
        expired.into_boxed_slice()
    } else {
        Box::default()
    }
}

/// What a load takes instead of building: zones, precompiled answers (`None`: build them),
/// sources, steering, what signing did, projections.
type Shared = (
    ZoneSet,
    Option<super::Precompiled>,
    Arc<Sources>,
    Option<SteeringData>,
    Option<ZonesSigned>,
    Projections,
);

/// What the difference path made of a reload.
enum Difference {
    Applied(Box<AppliedDifference>),
    /// Built whole instead, for this reason.
    Declined(String),
}

struct AppliedDifference {
    shared: Shared,
    from: ZonesFrom,
    diffs: Vec<(Box<[u8]>, crate::zone::journal::Diff)>,
}

/// The served zones with the zone files' changes applied as a difference, when that is sure
/// to serve what a full build would; the steering compiled as for any load. `Err` only for
/// what refuses the load whole (the policies).
fn try_difference(
    config: &Config,
    previous: &Compiled,
    transfer: &Option<Arc<super::transfer::TransferSetup>>,
    keys: &DnssecKeys,
    control: &Option<(ControlFile, String)>,
    prepared: Option<&Prepared>,
) -> Result<Difference, Vec<String>> {
    let declined = |why: String| Ok(Difference::Declined(why));
    if !keys.signs_nothing() {
        return declined("DNSSEC zones are built whole".to_string());
    }
    let digest = config_digest(config);
    let transferring = transfer.is_some();
    let applied = match difference::apply(config, digest.as_ref(), previous, transferring, prepared)
    {
        Ok(Some(applied)) => applied,
        Ok(None) => return declined("no zone file changed".to_string()),
        Err(why) => return declined(why.to_string()),
    };
    let mut ignored = Vec::new();
    let steering = compile_steering(config, control, &mut ignored)?;
    if steered_names(steering.as_ref()) != applied.sources.steered {
        return declined("the config binds other steered names".to_string());
    }
    let projections = match transfer {
        None => Projections::default(),
        Some(_) => match unmoved_projections(previous, &applied.zones, steering.as_ref(), keys) {
            Some(projections) => projections,
            None => {
                return declined(
                    "steered names are projected into the zones' transfers".to_string(),
                )
            }
        },
    };
    let from = ZonesFrom::Difference {
        names_changed: applied.names_changed,
        removed: applied.removed,
        added: applied.added,
        files: applied.files,
    };
    Ok(Difference::Applied(Box::new(AppliedDifference {
        shared: (
            applied.zones,
            Some(applied.precompiled),
            applied.sources,
            steering,
            None,
            projections,
        ),
        from,
        diffs: applied.diffs,
    })))
}

/// The projections of `zones` when no zone projects anything, before or now (every zone is
/// then transferred at its file serial, which the difference set); `None` otherwise.
fn unmoved_projections(
    previous: &Compiled,
    zones: &ZoneSet,
    steering: Option<&SteeringData>,
    keys: &DnssecKeys,
) -> Option<Projections> {
    let before = &previous.projections;
    if before.catalog.is_some()
        || before
            .zones()
            .iter()
            .any(|p| p.revision != 0 || !before.records(&p.apex).is_empty())
    {
        return None;
    }
    let records = projection::project(steering.map(|s| &s.policies), zones.zones(), &|origin| {
        keys.stamp(origin)
    });
    let serials: Vec<u32> = zones.zones().iter().map(|z| z.serial).collect();
    let numbered = projection::number(records, &serials, &before.remembered());
    let moved = zones.zones().iter().any(|z| {
        !numbered.records(&z.apex).is_empty()
            || numbered
                .zone(&z.apex)
                .is_some_and(|p| p.transfer_serial() != z.serial)
    });
    (!moved).then_some(numbered)
}

/// Zones and precompiled answers a load may take instead of building them.
struct Reusable {
    zones: ZoneSet,
    precompiled: super::Precompiled,
    sources: Arc<Sources>,
    signing: Option<Vec<(String, crate::dnssec::zone::Signed)>>,
    from: ZonesFrom,
    /// From the zone cache with `[transfer]`: the projection revisions its serials carry.
    projection: Option<projection::Remembered>,
}

/// Whether `transfer` (if any) produces no catalog zone: a catalog is built from the zones
/// at load and is not kept in the zone cache.
fn produces_no_catalog(transfer: Option<&super::transfer::TransferSetup>) -> bool {
    transfer.is_none_or(|t| t.config.catalog.is_none())
}

/// The projections of zones read from the cache, numbered with the revisions the cache was
/// written with (`numbered_with`), when those are still what the state directory says and
/// the projection of the cached zones numbers to the very serials they hold (every zone
/// projecting what it projected then); `None` otherwise, and the zones are built.
fn cached_projections(
    config: &Config,
    numbered_with: &projection::Remembered,
    keys: &DnssecKeys,
    steering: Option<&SteeringData>,
    zones: &ZoneSet,
) -> Option<Projections> {
    let recorded = projection::read_state(&config.state_dir()?);
    if recorded != *numbered_with {
        return None;
    }
    let zones = zones.zones();
    let records = projection::project(steering.map(|s| &s.policies), zones, &|origin| {
        keys.stamp(origin)
    });
    let file_serials: Vec<u32> = zones
        .iter()
        .zip(&records)
        .map(|(zone, r)| {
            let revision = numbered_with
                .get(&r.zone)
                .map_or(0, |(_, revision)| *revision);
            zone.serial.wrapping_sub(revision)
        })
        .collect();
    let numbered = projection::number(records, &file_serials, numbered_with);
    let same_serials = zones.iter().all(|zone| {
        numbered
            .zone(&zone.apex)
            .is_none_or(|p| p.transfer_serial() == zone.serial)
    });
    same_serials.then_some(numbered)
}

/// The static projection of the steered names of `zones` (issue 33 item 3), numbered after
/// `remembered` (the projections of the snapshot before, at start the state directory's),
/// with each zone's SOA
/// serial moved to its transfer serial. Before signing: a signed zone signs that SOA.
fn project_zones(
    remembered: &projection::Remembered,
    keys: &DnssecKeys,
    steering: Option<&SteeringData>,
    zones: &mut [Zone],
) -> Projections {
    let records = projection::project(steering.map(|s| &s.policies), zones, &|origin| {
        keys.stamp(origin)
    });
    let file_serials: Vec<u32> = zones.iter().map(|z| z.serial).collect();
    let projections = projection::number(records, &file_serials, remembered);
    projection::apply_serials(zones, &projections);
    projections
}

/// How the projections (and the catalog) were numbered last: by `previous`, else (at start)
/// as kept in the state directory.
fn remembered_projections(config: &Config, previous: Option<&Compiled>) -> projection::Remembered {
    match previous.map(|p| &p.projections).filter(|p| !p.is_empty()) {
        Some(before) => before.remembered(),
        None => config
            .state_dir()
            .map(|dir| projection::read_state(&dir))
            .unwrap_or_default(),
    }
}

/// What the shield runs with under `config`: `[shield]`, with the steady TTL the policies
/// answer with when they name one.
fn shield_setup(config: &Config, policies: Option<&CompiledPolicies>) -> super::ShieldSetup {
    let mut settings = crate::shield::step::ShieldSettings::from_config(&config.shield);
    if let Some(ttl) = policies.and_then(crate::shield::live::steady_ttl) {
        settings.steady_ttl = ttl;
    }
    super::ShieldSetup {
        settings,
        load_file: config.shield.load_file.clone(),
        prometheus: config.shield.prometheus.clone(),
        tick_ms: config.shield.tick_ms,
    }
}

/// The certificate and key of `[server.tls]`, read and checked; `None` without it.
fn load_tls(config: &Config) -> Result<Option<Arc<crate::tls::Material>>, Vec<String>> {
    let Some(tls) = &config.server.tls else {
        return Ok(None);
    };
    crate::tls::Material::load(&tls.cert, &tls.key)
        .map(|m| Some(Arc::new(m)))
        .map_err(|e| vec![format!("server.tls: {e}")])
}

/// What [`load_steering`] built: the config file's digest and the steered names.
pub struct SteeringTaste {
    pub config: Option<Digest>,
    pub steered: Vec<Box<[u8]>>,
}

/// The control-dependent half of [`load_after`]'s sharing path, for the taster: reads the
/// control text and compiles the steering (policies with the knobs, the geo database), and
/// says which steered names would be bound into the zones — without building the zones. When
/// the server will share its zones (same files, same steered names), this is all of the work
/// the change causes, so tasting it tastes the change whole.
pub fn load_steering(
    config: &Config,
    control: ControlSource<'_>,
) -> Result<SteeringTaste, Vec<String>> {
    let control = read_control(config, control)?;
    let mut warnings = Vec::new();
    let steering = compile_steering(config, &control, &mut warnings)?;
    Ok(SteeringTaste {
        config: config_digest(config),
        steered: steered_names(steering.as_ref()),
    })
}

/// The platform's compiled policies with `control`'s knobs (no geo database, no zones): what
/// a tenant's document is checked against in the taster. `None` when no names are steered.
pub fn load_policies(
    config: &Config,
    control: ControlSource<'_>,
) -> Result<Option<crate::policy::CompiledPolicies>, Vec<String>> {
    let control = read_control(config, control)?;
    if !config.has_steering() {
        return Ok(None);
    }
    let knobs = control
        .as_ref()
        .map_or_else(ControlKnobs::default, |(file, _)| file.knobs());
    config.compile_policies(&knobs).map(Some).map_err(|errors| {
        errors
            .iter()
            .map(|e| describe_policy_error(config, &control, e))
            .collect()
    })
}

/// The sources of `previous` if a load with `config` could share its zones: the same config
/// and zone files, byte for byte (re-read now). Whether the steered names also stay the same
/// depends on the control knobs. `None` with DNSSEC zones: sharing them still signs the
/// steered answers again, which needs the zones ([`load_steering`] does not cover it).
pub fn shareable_sources(config: &Config, previous: &Compiled) -> Option<Arc<Sources>> {
    if !config.dnssec.zones.is_empty() {
        return None;
    }
    let sources = previous.sources.as_ref()?;
    sources
        .unchanged(config, config_digest(config).as_ref())
        .then(|| sources.clone())
}

/// What signing the zones did, each with the window it signed for (shared with the snapshots
/// that share the zones).
type ZonesSigned = Vec<(String, crate::dnssec::zone::Signed)>;

/// One zone to sign, as read for one load: its settings, keys and signing window.
struct ZoneKeys {
    zone: String,
    settings: crate::dnssec::ZoneSettings,
    keys: Vec<crate::dnssec::Key>,
    window: crate::dnssec::Window,
}

/// The DNSSEC keys of every zone to sign, as read for one load at `now`, and the zones left
/// out because their keys could not be read.
struct DnssecKeys {
    zones: Vec<ZoneKeys>,
    not_served: Vec<NotServed>,
    now: u64,
}

/// A zone to sign that is not served: its keys could not be read (and it was not being
/// served signed, or the load would have been refused instead).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NotServed {
    /// The zone (lower case, absolute).
    pub zone: String,
    /// Why: the key file or directory and what is wrong with it.
    pub reason: String,
}

impl DnssecKeys {
    /// Reads the keys of every zone `[dnssec] zones` names, each from its key directory. A
    /// zone whose keys cannot be read (missing, unreadable, readable by others, corrupt) is
    /// refused alone: when `previous` (the snapshot in service) serves it signed, the load is
    /// refused, so that zone goes on being served as last signed (with everything else);
    /// otherwise it is left out of the snapshot (not served: REFUSED) and the other zones
    /// are served. Never served unsigned: see the README ("A bad key file").
    fn load(
        config: &Config,
        previous: Option<&crate::dnssec::Signing>,
    ) -> Result<DnssecKeys, Vec<String>> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut zones = Vec::new();
        let mut not_served = Vec::new();
        let mut errors = Vec::new();
        let location = config_location(config, "dnssec");
        for zone in &config.dnssec.zones {
            match ZoneKeys::load(&config.dnssec, zone, now) {
                Ok(keys) => zones.push(keys),
                Err(ZoneKeysError::Settings(e)) => errors.push(format!("{location}: {e}")),
                Err(ZoneKeysError::Keys { zone, reason }) => {
                    if previous.is_some_and(|p| p.window_of(&zone).is_some()) {
                        errors.push(format!(
                            "{location}: {reason} ({zone} goes on being served as last signed)"
                        ));
                    } else {
                        not_served.push(NotServed { zone, reason });
                    }
                }
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(DnssecKeys {
            zones,
            not_served,
            now,
        })
    }

    /// The signing stamp of `origin` when it is a zone to sign: what its signatures depend
    /// on beside its records (the window, each key's tag, algorithm and state), so that a
    /// re-sign is a new projection revision and a new serial (`crate::snapshot::projection`).
    fn stamp(&self, origin: &hickory_proto::rr::Name) -> Option<Box<[u8]>> {
        let origin = origin.to_string();
        let to_sign = self
            .zones
            .iter()
            .find(|z| z.zone.eq_ignore_ascii_case(&origin))?;
        let mut stamp = Vec::new();
        stamp.extend_from_slice(&to_sign.window.inception.to_be_bytes());
        stamp.extend_from_slice(&to_sign.window.expiration.to_be_bytes());
        for key in &to_sign.keys {
            let timing = &key.timing;
            stamp.extend_from_slice(&key.tag.to_be_bytes());
            stamp.push(key.algorithm.number());
            stamp.push(
                u8::from(timing.published(self.now))
                    | u8::from(timing.active(self.now)) << 1
                    | u8::from(key.role.signs_keys()) << 2
                    | u8::from(key.role.signs_zone()) << 3,
            );
        }
        Some(stamp.into_boxed_slice())
    }

    /// The active zone-signing keys of `to_sign` at this load's time.
    fn zone_signing<'k>(&self, to_sign: &'k ZoneKeys) -> Vec<&'k crate::dnssec::Key> {
        to_sign
            .keys
            .iter()
            .filter(|k| {
                k.role.signs_zone() && k.timing.published(self.now) && k.timing.active(self.now)
            })
            .collect()
    }

    /// Signs the projections of the signed zones of `zones` (signed already): what their
    /// transfers carry ([`crate::dnssec::transfer`]).
    fn sign_projections(
        &self,
        zones: &[Zone],
        projections: &mut Projections,
    ) -> Result<(), Vec<String>> {
        for projection in projections.zones_mut() {
            let Some(zone) = zones.iter().find(|z| z.apex == projection.apex) else {
                continue;
            };
            let Some(to_sign) = self.zones.iter().find(|z| z.zone == projection.zone) else {
                continue;
            };
            if zone.denial.is_none() {
                continue;
            }
            let keys = self.zone_signing(to_sign);
            projection.transferred = crate::dnssec::transfer::sign_projection(
                zone,
                &projection.records,
                &keys,
                &to_sign.window,
            )
            .map_err(|e| vec![e.to_string()])?;
        }
        Ok(())
    }

    /// Is `origin` a zone left out for its keys?
    fn refuses(&self, origin: &hickory_proto::rr::Name) -> bool {
        let origin = origin.to_string().to_ascii_lowercase();
        self.not_served.iter().any(|n| n.zone == origin)
    }

    /// One warning per zone left out (status, `steerdns check`, the log at startup).
    fn not_served_warnings(&self, config: &Config) -> Vec<String> {
        self.not_served
            .iter()
            .map(|n| {
                format!(
                    "{}: {}: not served: {} (a signed zone is never served unsigned; fix the \
                     key and reload)",
                    config_location(config, "dnssec"),
                    n.zone,
                    n.reason
                )
            })
            .collect()
    }

    fn fingerprint(&self) -> Vec<crate::dnssec::KeyRecord> {
        self.zones
            .iter()
            .flat_map(|z| {
                z.keys.iter().map(move |k| crate::dnssec::KeyRecord {
                    zone: z.zone.clone(),
                    tag: k.tag,
                    role: k.role,
                    algorithm: k.algorithm.number(),
                    timing: k.timing,
                })
            })
            .collect()
    }

    /// No zone is to be signed, and none is left out for want of its keys.
    fn signs_nothing(&self) -> bool {
        self.zones.is_empty() && self.not_served.is_empty()
    }

    /// Would the zones of `previous` be signed the same way now (same keys, key states and
    /// windows)?
    fn signed_alike(&self, previous: Option<&crate::dnssec::Signing>) -> bool {
        match previous {
            None => self.zones.is_empty(),
            Some(p) => {
                p.zones.len() == self.zones.len()
                    && self
                        .zones
                        .iter()
                        .all(|z| p.window_of(&z.zone) == Some(z.window))
                    && p.keys == self.fingerprint()
                    && p.keys_unchanged_at(self.now)
            }
        }
    }

    /// Signs the zones to sign, in place, before they are compiled into a snapshot.
    fn sign_zones(
        &self,
        config: &Config,
        zones: &mut [Zone],
        steering: Option<&SteeringData>,
    ) -> Result<Option<ZonesSigned>, Vec<String>> {
        if self.zones.is_empty() {
            return Ok(None);
        }
        let mut report = Vec::new();
        let mut errors = Vec::new();
        for to_sign in &self.zones {
            let name = &to_sign.zone;
            let Some(zone) = zones
                .iter_mut()
                .find(|z| z.origin.to_string().eq_ignore_ascii_case(name))
            else {
                errors.push(format!(
                    "{}: dnssec.zones: {name} is not a served zone",
                    config_location(config, "dnssec")
                ));
                continue;
            };
            let types = |binding: SteeredBinding| match steering {
                Some(s) => crate::dnssec::steered::steered_types(&s.policies, binding),
                None => crate::dnssec::zone::SteeredTypes::default(),
            };
            match crate::dnssec::zone::sign_zone(
                zone,
                &to_sign.keys,
                &to_sign.settings,
                &to_sign.window,
                self.now,
                &types,
            ) {
                Ok(signed) => report.push((name.clone(), signed)),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Some(report))
    }

    /// The signing keys and window of the steered name at `owner` (wire), when it is in a
    /// signed zone.
    fn steered_owner<'k>(
        &'k self,
        zones: &ZoneSet,
        owner: Box<[u8]>,
    ) -> Option<crate::dnssec::steered::SteeredOwner<'k>> {
        let name = WireName::from_wire(&owner)?;
        let (zone, _) = zones.find(&name)?;
        zone.denial.as_ref()?;
        let origin = zone.origin.to_string().to_ascii_lowercase();
        let to_sign = self.zones.iter().find(|z| z.zone == origin)?;
        let keys = self.zone_signing(to_sign);
        Some(crate::dnssec::steered::SteeredOwner {
            owner,
            apex: zone.apex.clone(),
            keys,
            window: to_sign.window,
        })
    }

    /// Pre-signs every steered answer in a signed zone; the snapshot's DNSSEC state.
    fn sign_steered(
        &self,
        zones: &ZoneSet,
        steering: Option<&SteeringData>,
        signed: Option<ZonesSigned>,
    ) -> Result<Option<crate::dnssec::Signing>, Vec<String>> {
        let Some(mut report) = signed else {
            return Ok(None);
        };
        let mut steered = crate::dnssec::SteeredSigs::default();
        if let Some(steering) = steering {
            let owners: Vec<Option<crate::dnssec::steered::SteeredOwner<'_>>> = steering
                .policies
                .steered()
                .iter()
                .map(|s| self.steered_owner(zones, name_to_wire(&s.name)))
                .collect();
            steered = crate::dnssec::SteeredSigs::build(&steering.policies, &owners)
                .map_err(|e| vec![e.to_string()])?;
        }
        // A steered answer's TTL counts too in what a rollover must wait out.
        let steered_ttl = steering.map_or(0, |s| {
            let policies = &s.policies;
            policies
                .steered()
                .iter()
                .map(|b| policies.ttl_bound(b.root))
                .max()
                .unwrap_or(0)
        });
        for (_, signed) in &mut report {
            signed.max_ttl = signed.max_ttl.max(steered_ttl);
        }
        let rollover_at = self
            .zones
            .iter()
            .filter_map(|z| {
                let max_ttl = report
                    .iter()
                    .find(|(name, _)| *name == z.zone)
                    .map_or(steered_ttl, |(_, s)| s.max_ttl);
                z.rollover_at(self.now, max_ttl)
            })
            .min();
        Ok(Some(crate::dnssec::Signing {
            steered,
            zones: report,
            keys: self.fingerprint(),
            signed_at: self.now,
            rollover_at,
        }))
    }

    /// The warning for each zone whose keys are not of its configured algorithm: they are
    /// kept, and rolled over to keys of their own algorithm (see `crate::dnssec::rollover`).
    fn algorithm_warnings(&self, config: &Config) -> Vec<String> {
        self.zones
            .iter()
            .filter_map(|z| {
                crate::dnssec::rollover::algorithm_mismatch(&z.keys, &z.settings, self.now)
            })
            .map(|note| format!("{}: {note}", config_location(config, "dnssec")))
            .collect()
    }

    /// The warning for each key directory whose zones have key lifetimes set but no rollover
    /// seed to derive successors from.
    fn seed_warnings(&self, config: &Config) -> Vec<String> {
        let mut dirs: Vec<&Path> = self
            .zones
            .iter()
            .filter(|z| z.rollover_at(self.now, 0).is_some())
            .map(|z| z.settings.keys.as_path())
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs.into_iter()
            .map(|dir| dir.join(crate::dnssec::rollover::SEED_FILE))
            .filter(|seed| !seed.exists())
            .map(|seed| {
                format!(
                    "{}: dnssec: key lifetimes are set but {} is missing: keys cannot roll \
                     over (`steerdns dnssec keygen` makes it; every node needs the same file)",
                    config_location(config, "dnssec"),
                    seed.display()
                )
            })
            .collect()
    }
}

/// Why a zone's keys could not be had: its settings (a config error, refusing the load), or
/// its key files (refusing that zone only).
enum ZoneKeysError {
    Settings(String),
    Keys { zone: String, reason: String },
}

impl ZoneKeys {
    /// `zone`'s settings and keys (from its key directory) and its window at `now`.
    fn load(
        config: &crate::dnssec::DnssecConfig,
        zone: &str,
        now: u64,
    ) -> Result<ZoneKeys, ZoneKeysError> {
        let settings = crate::dnssec::ZoneSettings::for_zone(config, zone)
            .map_err(|e| ZoneKeysError::Settings(e.to_string()))?;
        let zone = crate::dnssec::keys::normalize_zone(zone);
        let keys = match crate::dnssec::keys::load_zone_keys(&settings.keys, &zone) {
            Ok(keys) => keys,
            Err(e) => {
                let reason = format!("dnssec.zones: {e}");
                return Err(ZoneKeysError::Keys { zone, reason });
            }
        };
        Ok(ZoneKeys {
            window: settings.window(now),
            zone,
            settings,
            keys,
        })
    }

    /// When the first rollover of this zone's active keys is due (`None`: no lifetime set, or
    /// every rollover under way), in a zone whose largest TTL is `max_ttl`.
    fn rollover_at(&self, now: u64, max_ttl: u32) -> Option<u64> {
        self.keys
            .iter()
            .filter(|k| k.timing.active(now))
            .filter_map(|k| {
                crate::dnssec::rollover::due_at(k.role, &k.timing, &self.settings, max_ttl)
            })
            .min()
    }
}

/// The inputs a snapshot's zones and precompiled answers were built from: the config file,
/// the zone directory and every file read from it, and the steered names bound into the zones.
#[derive(Clone)]
pub struct Sources {
    pub(super) config_path: Option<PathBuf>,
    /// `None`: built-in defaults (no config file).
    pub(super) config: Option<Digest>,
    pub(super) zones_dir: PathBuf,
    /// The `*.zone` files of the directory, in load order.
    pub(super) zone_files: Vec<PathBuf>,
    /// Every file read (zone files and included files) and what it held.
    pub(super) files: Vec<(PathBuf, Digest)>,
    /// The steered names, lower-cased wire format, in binding order.
    pub(super) steered: Vec<Box<[u8]>>,
    /// The zone warnings of the load that built them (repeated when they are shared).
    pub(super) zone_warnings: Arc<[String]>,
    /// The zone files' bytes as served, for the next reload to find what an edit changed
    /// (empty when the zones came from the zone cache).
    pub(super) texts: Vec<(PathBuf, crate::zone::parse::Text)>,
}

impl Sources {
    /// `path` now holds `text` (whose digest is `digest`).
    fn replace_file(&mut self, path: &Path, digest: Digest, text: crate::zone::parse::Text) {
        for (p, d) in &mut self.files {
            if p == path {
                *d = digest;
            }
        }
        self.texts.retain(|(p, _)| p != path);
        self.texts.push((path.to_path_buf(), text));
    }

    /// The config file's digest (`None`: built-in defaults).
    pub fn config_digest(&self) -> Option<&Digest> {
        self.config.as_ref()
    }

    /// The steered names bound into the zones (lower-cased wire format, in binding order).
    pub fn steered(&self) -> &[Box<[u8]>] {
        &self.steered
    }

    /// Every file read (zone files and included files) and what it held, in read order.
    pub fn files(&self) -> &[(PathBuf, Digest)] {
        &self.files
    }

    /// The `*.zone` files of the directory (and secondary copies), in load order.
    pub fn zone_files(&self) -> &[PathBuf] {
        &self.zone_files
    }

    /// One number for every input file as it was read (the config file, the zone directory's
    /// files and their includes): equal for two loads — the taster's and the server's — that
    /// read the same bytes. Comparable between processes of the same binary only.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        self.config_path.hash(&mut hasher);
        self.config.hash(&mut hasher);
        self.zones_dir.hash(&mut hasher);
        self.zone_files.hash(&mut hasher);
        self.files.hash(&mut hasher);
        hasher.finish()
    }

    /// Does the config still name the same files, and does every file still hold the same
    /// bytes? Reads them all again; any doubt (an unreadable file) answers no.
    /// Whether `other` was built from exactly the inputs these were (the same bytes of the
    /// same files, the same steered names).
    fn same_inputs(&self, other: &Sources) -> bool {
        self.config_path == other.config_path
            && self.config == other.config
            && self.zones_dir == other.zones_dir
            && self.zone_files == other.zone_files
            && self.files == other.files
            && self.steered == other.steered
    }

    pub(super) fn unchanged(&self, config: &Config, config_digest: Option<&Digest>) -> bool {
        if self.config_path != config.source_path
            || self.config.as_ref() != config_digest
            || (config.source_path.is_some() && config_digest.is_none())
            || self.zones_dir != config.server.zones
        {
            return false;
        }
        if zone_paths(config).as_ref() != Some(&self.zone_files) {
            return false;
        }
        self.files.iter().all(|(path, digest)| {
            crate::files::read_limited(path, MAX_ZONE_FILE_BYTES)
                .is_ok_and(|bytes| crate::files::digest(&bytes) == *digest)
        })
    }
}

/// The config file's digest; `None` without a config file or when it cannot be read.
pub fn config_digest(config: &Config) -> Option<Digest> {
    let path = config.source_path.as_ref()?;
    crate::files::read_limited(path, crate::files::SMALL_FILE_LIMIT)
        .ok()
        .map(|bytes| crate::files::digest(&bytes))
}

fn steered_names(steering: Option<&SteeringData>) -> Vec<Box<[u8]>> {
    steering.map_or_else(Vec::new, |s| {
        s.policies
            .steered()
            .iter()
            .map(|steered| name_to_wire(&steered.name))
            .collect()
    })
}

/// Zones compiled from the zone directory.
struct BuiltZones {
    zones: Vec<Zone>,
    warnings: Arc<[String]>,
    /// The `*.zone` files loaded, in order.
    zone_files: Vec<PathBuf>,
    /// Every file read and what it held.
    files: Vec<(PathBuf, Digest)>,
    /// The zone files' bytes.
    texts: Vec<(PathBuf, crate::zone::parse::Text)>,
}

/// Reads, validates and compiles the zone files.
fn build_zones(config: &Config) -> Result<BuiltZones, Vec<String>> {
    let (mut parsed, mut problems) = load_zone_dir(&config.server.zones);
    for zone in &parsed {
        problems.extend(validate(zone));
    }
    let secondary_warnings = load_secondary_copies(config, &mut parsed);
    let (errors, mut warnings): (Vec<ZoneProblem>, Vec<ZoneProblem>) =
        problems.into_iter().partition(ZoneProblem::is_error);
    if !errors.is_empty() {
        return Err(errors.iter().map(ToString::to_string).collect());
    }
    warnings.extend(secondary_warnings);
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
    let built = BuiltZones {
        zones,
        warnings: warnings.iter().map(ToString::to_string).collect(),
        zone_files: parsed.iter().map(|z| z.path.clone()).collect(),
        files: parsed
            .iter()
            .flat_map(|z| z.sources.iter().cloned())
            .collect(),
        texts: parsed
            .iter_mut()
            .filter_map(|z| Some((z.path.clone(), z.text.take()?)))
            .collect(),
    };
    drop_in_background(parsed);
    Ok(built)
}

/// The on-disk copies of the secondary zones (`[[secondary.zone]]`) that exist, parsed and
/// validated like zone files. A copy that fails (it was checked before it was written, so
/// this means damage on disk) is left out with a warning instead of refusing every zone: the
/// secondary task transfers it again. A name the zone directory also serves is left out too.
fn load_secondary_copies(config: &Config, parsed: &mut Vec<ParsedZone>) -> Vec<ZoneProblem> {
    let mut warnings = Vec::new();
    for zone in &super::catalog::secondary_zones(config) {
        let path = zone.copy_path();
        if !path.is_file() {
            continue;
        }
        let Some(origin) = zone.origin() else {
            let message = format!("secondary zone name {:?} is not a domain name", zone.name);
            warnings.push(ZoneProblem::warning(&path, 0, message));
            continue;
        };
        if parsed.iter().any(|p| p.origin == origin) {
            let message = format!(
                "secondary zone {origin} is also in the zone directory; the zone file is served"
            );
            warnings.push(ZoneProblem::warning(&path, 0, message));
            continue;
        }
        let problems = match load_zone_file(&path, &origin) {
            Ok(copy) => {
                let problems = validate(&copy);
                if !problems.iter().any(ZoneProblem::is_error) {
                    parsed.push(copy);
                    continue;
                }
                problems
            }
            Err(problems) => problems,
        };
        for problem in problems.iter().filter(|p| p.is_error()) {
            let message = format!("secondary copy not served: {}", problem.message);
            warnings.push(ZoneProblem::warning(&problem.file, problem.line, message));
        }
    }
    warnings
}

/// The zone files a load reads: the zone directory's, then the secondary copies present.
pub fn zone_paths(config: &Config) -> Option<Vec<PathBuf>> {
    let mut paths = zone_files_in(&config.server.zones).ok()?;
    let copies = super::catalog::secondary_zones(config)
        .into_iter()
        .map(|z| z.copy_path());
    paths.extend(copies.filter(|p| p.is_file()));
    Some(paths)
}

/// Frees the parsed records on a thread of their own: a million names take a while to free
/// and nothing needs to wait for it. (If no thread can be started, `spawn` drops them here.)
fn drop_in_background(parsed: Vec<crate::zone::parse::ParsedZone>) {
    let spawned = std::thread::Builder::new()
        .name("drop-parsed".into())
        .spawn(move || drop(parsed));
    if let Err(e) = spawned {
        tracing::debug!("no thread to free the parsed zones: {e}");
    }
}

/// Compiles topology, profiles and steered names and locates the geo database. `Ok(None)` when
/// nothing is steered.
fn compile_steering(
    config: &Config,
    control: &Option<(ControlFile, String)>,
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
    let (region_count, site_count) = (policies.regions().len(), policies.fallback_sites().len());
    Ok(Some(SteeringData {
        policies,
        locator,
        demand: DemandCounters::new(
            region_count,
            site_count,
            config.shield.trusted_ecs_resolvers.clone(),
        ),
    }))
}

/// Binds every steered name into its zone.
/// Binds the steered names into their zones; a name inside a zone left out for its keys
/// (`not_served`) is not served either.
fn bind(
    config: &Config,
    steering: Option<&SteeringData>,
    zones: &mut [Zone],
    not_served: &[NotServed],
) -> Result<(), Vec<String>> {
    match steering {
        Some(steering) => bind_steered_names(config, &steering.policies, zones, not_served),
        None => Ok(()),
    }
}

fn bind_steered_names(
    config: &Config,
    policies: &crate::policy::CompiledPolicies,
    zones: &mut [Zone],
    not_served: &[NotServed],
) -> Result<(), Vec<String>> {
    let mut per_zone: Vec<Vec<(&hickory_proto::rr::Name, SteeredBinding)>> =
        vec![Vec::new(); zones.len()];
    let mut errors = Vec::new();
    let left_out: Vec<hickory_proto::rr::Name> = not_served
        .iter()
        .filter_map(|n| hickory_proto::rr::Name::from_ascii(&n.zone).ok())
        .collect();
    for (i, steered) in policies.steered().iter().enumerate() {
        if left_out.iter().any(|zone| zone.zone_of(&steered.name)) {
            continue;
        }
        let owner = zones
            .iter()
            .enumerate()
            .filter(|(_, z)| z.origin.zone_of(&steered.name))
            .max_by_key(|(_, z)| z.apex_labels);
        match owner {
            Some((zi, _)) => per_zone[zi].push((&steered.name, SteeredBinding::new(i as u32))),
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

/// A policy error as one line naming the file, line and field where the bad value is written:
/// a knob (`control.` path) points into the control file, a field of `[profiles]` or
/// `[topology]` into the config file, even for a profile the control file also touches. Only a
/// profile-wide problem in a profile the control file adjusts (e.g. every weight now 0) is the
/// control file's doing: it points there, and says where the profile itself is configured.
fn describe_policy_error(
    config: &Config,
    control: &Option<(ControlFile, String)>,
    error: &PolicyError,
) -> String {
    if let (Some((file, text)), Some(path)) = (control, config.control.file.as_ref()) {
        let knob = error.path.strip_prefix("control.");
        let adjusted_profile = || {
            let (section, name) = error.path.split_once('.')?;
            let whole_profile = section == "profiles" && !name.contains(['.', '[']);
            (whole_profile && file.profiles.contains_key(name)).then_some(error.path.as_str())
        };
        if let Some(field) = knob.or_else(adjusted_profile) {
            let line = crate::control::line_of_field(text, field)
                .map_or(String::new(), |l| format!(":{l}"));
            let configured = if knob.is_none() {
                format!(" (the profile: {})", config_location(config, field))
            } else {
                String::new()
            };
            return format!(
                "{}{line}: {field}: {}{configured}",
                path.display(),
                error.problem
            );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::wire::rtype;

    /// A private copy of the bundled example (config, zones, geo database, control file).
    struct Example(PathBuf);

    impl Example {
        fn new(label: &str) -> Example {
            let root = std::env::temp_dir().join(format!(
                "steerdns-load-{label}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&root);
            let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
            std::fs::create_dir_all(root.join("zones")).expect("mkdir zones");
            std::fs::create_dir_all(root.join("geoip")).expect("mkdir geoip");
            for entry in std::fs::read_dir(repo.join("zones")).expect("zones/") {
                let entry = entry.expect("zones/ entry");
                std::fs::copy(entry.path(), root.join("zones").join(entry.file_name()))
                    .expect("copy zone");
            }
            for file in ["steerdns.toml", "control.toml", "geoip/example.mmdb"] {
                std::fs::copy(repo.join(file), root.join(file)).expect("copy");
            }
            Example(root)
        }

        fn path(&self, relative: &str) -> PathBuf {
            self.0.join(relative)
        }

        fn config(&self) -> Config {
            Config::load(&self.path("steerdns.toml")).expect("config loads")
        }

        fn load(&self, previous: Option<&Compiled>) -> Compiled {
            match load_after(&self.config(), ControlSource::FromConfig, previous) {
                Ok(loaded) => loaded.compiled,
                Err(problems) => panic!("load refused: {problems:?}"),
            }
        }

        fn append(&self, relative: &str, text: &str) {
            let path = self.path(relative);
            let mut bytes = std::fs::read(&path).expect("read");
            bytes.extend_from_slice(text.as_bytes());
            std::fs::write(&path, bytes).expect("write");
        }
    }

    impl Drop for Example {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn shares_zones(a: &Compiled, b: &Compiled) -> bool {
        std::ptr::eq(a.zones().zones().as_ptr(), b.zones().zones().as_ptr())
    }

    fn precompiled_ptr(snapshot: &Compiled, name: &str, qtype: u16) -> Option<*const u8> {
        let wire = name_to_wire(&hickory_proto::rr::Name::from_ascii(name).expect("name"));
        let name = crate::dns::wire::WireName::from_wire(&wire).expect("wire name");
        snapshot
            .precompiled
            .get(&name, qtype, false)
            .and_then(|(_, entry)| match entry {
                crate::snapshot::FastPathEntry::Response(response) => Some(response.as_ptr()),
                crate::snapshot::FastPathEntry::Steered(_)
                | crate::snapshot::FastPathEntry::SteeredWildcard(_) => None,
            })
    }

    /// What an edit touches, the edit, and a name it adds (or keeps).
    type Edit = (&'static str, Box<dyn Fn(&Example)>, &'static str);

    fn weights(frontdoor: u32, alt_cdn: u32) -> String {
        format!(
            "[profiles.critical.endpoints]\nfrontdoor = {{ weight = {frontdoor} }}\n\
             alt-cdn = {{ weight = {alt_cdn} }}\nappgw = {{ weight = 0 }}\n"
        )
    }

    /// A zone of `hosts` names at `serial`, as `zones/big.example.zone`.
    fn big_zone(serial: u32, hosts: usize) -> String {
        let mut text = format!(
            "$ORIGIN big.example.\n$TTL 300\n@ IN SOA ns1 hostmaster (\n  {serial} ; serial\n  \
             7200 900 1209600 60 )\n@ NS ns1\nns1 A 192.0.2.53\n@ MX 10 mail\nmail A 192.0.2.25\n\
             www CNAME h7\n"
        );
        for i in 0..hosts {
            text.push_str(&format!("h{i} A 192.0.2.{}\n", i % 250));
        }
        text
    }

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut p = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 1];
        for label in name.trim_end_matches('.').split('.') {
            p.push(label.len() as u8);
            p.extend_from_slice(label.as_bytes());
        }
        p.push(0);
        p.extend_from_slice(&qtype.to_be_bytes());
        p.extend_from_slice(&1u16.to_be_bytes());
        p.extend_from_slice(&[0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0, 0, 0]);
        p
    }

    /// The response of `snapshot` to each query.
    fn answers(snapshot: &crate::snapshot::Snapshot, queries: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let client = crate::dns::wire::Requester::new(
            std::net::IpAddr::from([127, 0, 0, 1]),
            crate::dns::wire::Transport::Udp,
        );
        let mut out = vec![0u8; 4096];
        queries
            .iter()
            .map(|q| {
                let len = crate::answer::respond(snapshot, q, &client, &mut out).unwrap_or(0);
                out[..len].to_vec()
            })
            .collect()
    }

    #[test]
    fn a_zone_file_edit_is_applied_as_a_difference_and_answers_as_a_full_build() {
        let example = Example::new("difference");
        let path = example.path("zones/big.example.zone");
        std::fs::write(&path, big_zone(1, 2000)).expect("write zone");
        let first = example.load(None);
        let edited = big_zone(2, 2000).replace("h1000 A 192.0.2.0\n", "h1000 A 198.51.100.1\n");
        std::fs::write(&path, &edited).expect("write zone");
        let loaded = load_after(&example.config(), ControlSource::FromConfig, Some(&first))
            .unwrap_or_else(|problems| panic!("refused: {problems:?}"));
        assert!(
            matches!(
                &loaded.zones_from,
                ZonesFrom::Difference {
                    names_changed: 2,
                    removed: 2,
                    added: 2,
                    ..
                }
            ),
            "{}",
            loaded.zones_from.describe()
        );
        let full = example.load(None);
        let mut queries = Vec::new();
        for i in (0..2000).step_by(37).chain([1000, 7]) {
            for qtype in [rtype::A, rtype::AAAA, rtype::TXT] {
                queries.push(query(&format!("h{i}.big.example."), qtype));
            }
        }
        for (name, qtype) in [
            ("big.example.", rtype::SOA),
            ("big.example.", rtype::NS),
            ("big.example.", rtype::MX),
            ("www.big.example.", rtype::A),
            ("nx.big.example.", rtype::A),
            ("mail.example.com.", rtype::A),
        ] {
            queries.push(query(name, qtype));
        }
        let applied = crate::snapshot::Snapshot::standalone(loaded.compiled);
        let built = crate::snapshot::Snapshot::standalone(full);
        let (got, want) = (answers(&applied, &queries), answers(&built, &queries));
        for ((q, got), want) in queries.iter().zip(&got).zip(&want) {
            assert!(!want.is_empty());
            assert_eq!(got, want, "query {q:?}");
        }
        assert!(want[queries.len() - 6..].iter().all(|r| r.len() > 12));
    }

    #[test]
    fn an_edit_the_difference_cannot_take_is_built_whole_or_refused_as_a_full_load_refuses_it() {
        let example = Example::new("difference-declined");
        let path = example.path("zones/big.example.zone");
        std::fs::write(&path, big_zone(1, 200)).expect("write zone");
        let first = example.load(None);
        let origin = big_zone(2, 200).replace("h100 A", "$ORIGIN sub.big.example.\nh100 A");
        std::fs::write(&path, &origin).expect("write zone");
        let loaded = load_after(&example.config(), ControlSource::FromConfig, Some(&first))
            .unwrap_or_else(|problems| panic!("refused: {problems:?}"));
        match &loaded.zones_from {
            ZonesFrom::Built {
                difference_declined: Some(why),
                ..
            } => assert!(why.contains("$ORIGIN"), "{why}"),
            other => panic!("{}", other.describe()),
        }
        let cname = big_zone(2, 200).replace(
            "h100 A 192.0.2.100\n",
            "h100 A 192.0.2.100\nh100 CNAME ns1\n",
        );
        std::fs::write(&path, &cname).expect("write zone");
        let refused = load_after(&example.config(), ControlSource::FromConfig, Some(&first));
        let full = load_after(&example.config(), ControlSource::FromConfig, None);
        match (refused, full) {
            (Err(refused), Err(full)) => assert_eq!(refused, full),
            _ => panic!("a CNAME beside an A is refused"),
        }
    }

    #[test]
    fn a_control_change_shares_the_zones_and_precompiled_answers() {
        let example = Example::new("control");
        std::fs::write(example.path("control.toml"), weights(100, 0)).expect("write");
        let first = example.load(None);
        std::fs::write(example.path("control.toml"), weights(0, 100)).expect("write");
        let second = example.load(Some(&first));
        assert!(shares_zones(&first, &second));
        let mail = precompiled_ptr(&first, "mail.example.com.", rtype::A);
        assert!(mail.is_some());
        assert_eq!(
            precompiled_ptr(&second, "mail.example.com.", rtype::A),
            mail
        );
        assert_eq!(second.precompiled().len(), first.precompiled().len());
        assert_ne!(first.control, second.control, "the new knobs are compiled");
        // A load without a previous snapshot builds everything.
        let fresh = example.load(None);
        assert!(!shares_zones(&second, &fresh));
        assert_eq!(fresh.precompiled().len(), second.precompiled().len());
    }

    #[test]
    fn any_edit_to_the_zone_inputs_or_the_config_builds_the_zones_again() {
        let example = Example::new("edits");
        std::fs::write(
            example.path("zones/inc.example.zone"),
            "$TTL 60\n@ IN SOA ns1 h 1 2 3 4 5\n@ IN NS ns1\nns1 IN A 192.0.2.1\n$INCLUDE hosts.part\n",
        )
        .expect("write zone");
        std::fs::write(example.path("zones/hosts.part"), "www IN A 192.0.2.2\n").expect("write");
        let mut previous = example.load(None);
        assert!(precompiled_ptr(&previous, "www.inc.example.", rtype::A).is_some());
        let edits: [Edit; 4] = [
            (
                "an included file",
                Box::new(|e| e.append("zones/hosts.part", "new1 IN A 192.0.2.3\n")),
                "new1.inc.example.",
            ),
            (
                "a zone file",
                Box::new(|e| e.append("zones/example.com.zone", "new2 IN A 192.0.2.4\n")),
                "new2.example.com.",
            ),
            (
                "a new zone file",
                Box::new(|e| {
                    std::fs::write(
                        e.path("zones/new.example.zone"),
                        "@ 60 IN SOA ns1 h 1 2 3 4 5\n@ 60 IN NS ns1\nns1 60 IN A 192.0.2.1\nnew3 60 IN A 192.0.2.5\n",
                    )
                    .expect("write zone")
                }),
                "new3.new.example.",
            ),
            (
                "the config file",
                Box::new(|e| e.append("steerdns.toml", "\n# edited\n")),
                "mail.example.com.",
            ),
        ];
        for (what, edit, name) in edits {
            let unchanged = example.load(Some(&previous));
            assert!(shares_zones(&previous, &unchanged), "before editing {what}");
            edit(&example);
            let next = example.load(Some(&unchanged));
            assert!(!shares_zones(&unchanged, &next), "after editing {what}");
            assert!(
                precompiled_ptr(&next, name, rtype::A).is_some(),
                "{name} is not served after editing {what}"
            );
            previous = next;
        }
        // A zone file removed.
        std::fs::remove_file(example.path("zones/new.example.zone")).expect("remove");
        let next = example.load(Some(&previous));
        assert!(!shares_zones(&previous, &next));
        assert!(precompiled_ptr(&next, "new3.new.example.", rtype::A).is_none());
    }
}
