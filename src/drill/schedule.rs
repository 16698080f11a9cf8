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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drill_is_due_a_period_after_startup_or_its_last_run_and_sooner_after_a_block() {
        let dir = std::env::temp_dir().join(format!("steerdns-drill-due-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let text = include_str!("../../steerdns.toml")
            .replace(
                "file = \"control.toml\"",
                &format!("file = \"{}/control.toml\"", dir.display()),
            )
            .replace(
                "duration_secs = 5\n",
                "duration_secs = 5\nevery_secs = 3600\n",
            );
        let config = Config::parse(&text, std::path::Path::new("steerdns.toml")).unwrap();
        let start = crate::rfc3339::parse("2026-01-01T00:00:00Z").unwrap();
        let hour = Duration::from_secs(3600);
        assert_eq!(
            due(&config, start, start + hour - Duration::from_secs(1)),
            None
        );
        assert_eq!(
            due(&config, start, start + hour).as_deref(),
            Some("critical-alt-cdn")
        );
        let drill = &config.drills[0];
        let mut run = log::DrillRun::new(drill, "schedule");
        run.started = "2026-01-01T02:00:00Z".into();
        run.result = "passed".into();
        let path = log::path(&config).unwrap();
        log::append(&path, &run).unwrap();
        let last = crate::rfc3339::parse(&run.started).unwrap();
        assert_eq!(
            due(&config, start, last + hour - Duration::from_secs(1)),
            None
        );
        assert!(due(&config, start, last + hour).is_some());
        run.result = "blocked".into();
        log::append(&path, &run).unwrap();
        assert!(due(&config, start, last + RETRY_BLOCKED).is_some());
        assert_eq!(
            due(
                &config,
                start,
                last + RETRY_BLOCKED - Duration::from_secs(1)
            ),
            None
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
