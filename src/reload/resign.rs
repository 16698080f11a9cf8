//! Renewing DNSSEC signatures off the serving path: a thread that sleeps until the served
//! snapshot's signatures are due for renewal (the start of a zone's next refresh period; zones
//! may have their own) or a key changes state (published, activated, retired, removed — see `crate::dnssec::rollover`), and
//! then rebuilds the snapshot through [`Reloader::reload`] like any other change: read, taste,
//! sign in full, swap. Answers keep coming from the snapshot being served meanwhile, and its
//! signatures stay valid for `signature_validity_secs - refresh_secs` more (at least two
//! refresh periods), so a refused or late re-sign has time to be retried and seen in status.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Reloader, Trigger};

/// The longest sleep: a snapshot swapped in meanwhile (a reload enabling DNSSEC, new keys) is
/// looked at within this.
const MAX_SLEEP: Duration = Duration::from_secs(30);

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The re-signing loop, for a thread of its own (the daemon's supervisor starts it): `sleep`
/// pauses and returns true when the daemon is stopping, and the loop returns then.
pub fn run(reloader: Arc<Reloader>) -> impl FnOnce(&dyn Fn(Duration) -> bool) + Send {
    move |sleep| resign_loop(&reloader, sleep)
}

fn resign_loop(reloader: &Reloader, sleep: &dyn Fn(Duration) -> bool) {
    // After a refused re-sign: wait this long before the next try (doubling, up to a quarter
    // of the shortest refresh period), so a bad file on disk does not cause a reload storm.
    let mut retry = Duration::from_secs(1);
    loop {
        let snapshot = reloader.snapshot().load_full();
        let Some(signing) = snapshot.dnssec() else {
            drop(snapshot);
            if sleep(MAX_SLEEP) {
                return;
            }
            continue;
        };
        let due = signing.next_event();
        let refresh = signing
            .shortest_refresh()
            .map_or(MAX_SLEEP, Duration::from_secs);
        drop(snapshot);
        let now = unix_now();
        match due {
            Some(due) if due <= now => {}
            Some(due) => {
                if sleep(Duration::from_secs(due - now).min(MAX_SLEEP)) {
                    return;
                }
                continue;
            }
            None => {
                if sleep(MAX_SLEEP) {
                    return;
                }
                continue;
            }
        }
        if signing_rollover_due(reloader, now) {
            if let Err(e) = roll_keys(reloader, now) {
                tracing::error!("DNSSEC key rollover: {e}");
                if sleep(retry) {
                    return;
                }
                retry = (retry * 2).min((refresh / 4).max(Duration::from_secs(1)));
                continue;
            }
        }
        match reloader.reload(Trigger::Resign) {
            Ok(accepted) => {
                tracing::info!(
                    "DNSSEC signatures renewed (serial {}, {:.1} ms)",
                    accepted.serial,
                    accepted.elapsed_ms
                );
                retry = Duration::from_secs(1);
            }
            Err(_) => {
                // The reasons are logged and in status (last refusal) by the reloader.
                if sleep(retry) {
                    return;
                }
                retry = (retry * 2).min((refresh / 4).max(Duration::from_secs(1)));
            }
        }
    }
}

/// Is a key rollover due at `now` in the snapshot being served?
fn signing_rollover_due(reloader: &Reloader, now: u64) -> bool {
    let snapshot = reloader.snapshot().load();
    snapshot
        .dnssec()
        .and_then(|s| s.rollover_at)
        .is_some_and(|at| at <= now)
}

/// Starts the rollovers due at `now`: successors and new timings written to each zone's key
/// directory (the reload that follows signs with them), removed keys' files moved aside.
fn roll_keys(reloader: &Reloader, now: u64) -> Result<(), String> {
    use crate::dnssec::{keys, rollover, ZoneSettings};
    let config = reloader.source().read_config().map_err(|e| e.to_string())?;
    let max_ttls: Vec<(String, u32)> = reloader
        .snapshot()
        .load()
        .dnssec()
        .map(|s| {
            s.zones
                .iter()
                .map(|(z, signed)| (z.clone(), signed.max_ttl))
                .collect()
        })
        .unwrap_or_default();
    for zone in &config.dnssec.zones {
        let settings = ZoneSettings::for_zone(&config.dnssec, zone).map_err(|e| e.to_string())?;
        let zone = keys::normalize_zone(zone);
        let mut zone_keys =
            keys::load_zone_keys(&settings.keys, &zone).map_err(|e| e.to_string())?;
        let max_ttl = max_ttls
            .iter()
            .find(|(z, _)| *z == zone)
            .map_or(0, |(_, t)| *t);
        let rolls = rollover::plan(&zone_keys, &settings, max_ttl, now);
        for line in
            rollover::apply(&settings.keys, &mut zone_keys, &rolls).map_err(|e| e.to_string())?
        {
            tracing::info!("DNSSEC rollover: {line}");
        }
        for moved in rollover::retire_files(&zone_keys, now) {
            tracing::info!("DNSSEC rollover: removed key moved to {}", moved.display());
        }
    }
    Ok(())
}
