//! Building a snapshot from files: the "food taster". Everything is read, parsed, validated and
//! compiled here; the caller swaps the result in only if this returns `Ok`.

use std::time::Instant;

use crate::config::Config;
use crate::zone::model::{RecordInput, Zone};
use crate::zone::parse::{load_zone_dir, ZoneProblem};
use crate::zone::validate::validate;

use super::Snapshot;

/// A snapshot ready to serve, with the warnings found on the way and how long it took.
pub struct Loaded {
    pub snapshot: Snapshot,
    pub warnings: Vec<String>,
    pub elapsed: std::time::Duration,
}

/// Loads and compiles everything the config points at. `Err` carries one line per problem,
/// each naming file and line.
pub fn load(config: &Config) -> Result<Loaded, Vec<String>> {
    let started = Instant::now();
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
    let snapshot = Snapshot::build(zones, config.serve_options());
    Ok(Loaded {
        snapshot,
        warnings: warnings.iter().map(ToString::to_string).collect(),
        elapsed: started.elapsed(),
    })
}
