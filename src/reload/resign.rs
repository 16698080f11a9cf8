//! Renewing DNSSEC signatures off the serving path: a thread that sleeps until the served
//! snapshot's signatures are due for renewal (the start of the next refresh period) or a key
//! changes state (published, activated, retired, removed — see `crate::dnssec::rollover`), and
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

/// Starts the re-signing thread for the life of the process.
pub fn spawn(reloader: Arc<Reloader>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("dnssec-resign".into())
        .spawn(move || resign_loop(&reloader))?;
    Ok(())
}

fn resign_loop(reloader: &Reloader) {
    // After a refused re-sign: wait this long before the next try (doubling, up to a quarter
    // of the refresh period), so a bad file on disk does not cause a reload storm.
    let mut retry = Duration::from_secs(1);
    loop {
        let snapshot = reloader.snapshot().load_full();
        let Some(signing) = snapshot.dnssec.as_deref() else {
            drop(snapshot);
            std::thread::sleep(MAX_SLEEP);
            continue;
        };
        let due = signing.next_event();
        let refresh = signing
            .window
            .map_or(MAX_SLEEP, |w| Duration::from_secs(w.refresh_at - w.start));
        drop(snapshot);
        let now = unix_now();
        match due {
            Some(due) if due <= now => {}
            Some(due) => {
                std::thread::sleep(Duration::from_secs(due - now).min(MAX_SLEEP));
                continue;
            }
            None => {
                std::thread::sleep(MAX_SLEEP);
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
                std::thread::sleep(retry);
                retry = (retry * 2).min((refresh / 4).max(Duration::from_secs(1)));
            }
        }
    }
}
