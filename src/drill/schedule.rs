//! The server's drill schedule: each drill with `every_secs` runs that often (first one
//! period after startup, or after its last run in the log), on a thread of its own, through
//! the same runner as `steerdns drill run`. Never during an incident: the runner's checks
//! before (no alert, no open rollout, no other drill) block it, and a blocked run is retried
//! after [`RETRY_BLOCKED`] (or its period, if shorter).

use std::time::{Duration, SystemTime};

use super::{log, run, Endpoints};
use crate::config::Config;

/// A blocked scheduled run is tried again after this long.
pub const RETRY_BLOCKED: Duration = Duration::from_secs(300);

/// Starts the schedule (if any drill has `every_secs`): reads the config through `config`
/// each round, so a reload's drills apply.
pub fn start(
    config: impl Fn() -> Option<Config> + Send + 'static,
    at: Endpoints,
) -> Option<std::thread::JoinHandle<()>> {
    let first = config()?;
    if !first.drills.iter().any(|d| d.every_secs.is_some()) || first.fleet.is_some() {
        return None;
    }
    let started = SystemTime::now();
    let spawned = std::thread::Builder::new()
        .name("drill-schedule".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let Some(config) = config() else { continue };
            if let Some(name) = due(&config, started, SystemTime::now()) {
                match run(&config, &name, at, "schedule", &mut |line| {
                    tracing::info!("{line}")
                }) {
                    Ok(record) if record.result == "failed" => tracing::error!(
                        "scheduled drill {name} FAILED: {}",
                        record.reason.as_deref().unwrap_or("?")
                    ),
                    Ok(record) => tracing::info!(
                        "scheduled drill {name}: {}{}",
                        record.result,
                        record.reason.map(|r| format!(": {r}")).unwrap_or_default()
                    ),
                    Err(e) => tracing::warn!("scheduled drill {name}: {e}"),
                }
            }
        });
    match spawned {
        Ok(handle) => Some(handle),
        Err(e) => {
            tracing::error!("drill schedule not started: {e}");
            None
        }
    }
}

/// The first drill whose time has come at `now` (from its last run in the log, else from
/// `started`).
pub fn due(config: &Config, started: SystemTime, now: SystemTime) -> Option<String> {
    let runs = log::path(config).map(|p| log::read(&p)).unwrap_or_default();
    config.drills.iter().find_map(|d| {
        let every = Duration::from_secs(d.every_secs?);
        let last = runs.iter().rev().find(|r| r.drill == d.name);
        let next = match last {
            Some(r) => {
                let at = crate::rfc3339::parse(&r.started).ok()?;
                let wait = if r.result == "blocked" {
                    every.min(RETRY_BLOCKED)
                } else {
                    every
                };
                at + wait
            }
            None => started + every,
        };
        (now >= next).then(|| d.name.clone())
    })
}
