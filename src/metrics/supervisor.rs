//! What the daemon's supervisor ([`crate::daemon::Supervisor`]) knows about the threads and
//! tasks it owns: how many run, how many were started, and which ended before shutdown or
//! panicked. Kept here, below the admin endpoint that shows it in `/v1/status` and
//! `/metrics`, so the daemon that wires the admin endpoint can hand it over.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The supervisor's counters (shared with the admin endpoint).
#[derive(Debug, Default)]
pub struct SupervisorStatus {
    running: AtomicUsize,
    started: AtomicUsize,
    unexpected_exits: AtomicU64,
    last_unexpected: Mutex<Option<String>>,
}

/// [`SupervisorStatus`] as `/v1/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorView {
    /// Threads and tasks running now.
    pub running: usize,
    /// Threads and tasks started since the daemon started.
    pub started: usize,
    /// Threads and tasks that ended before shutdown, or panicked.
    pub unexpected_exits: u64,
    /// The name of the last part that ended unexpectedly.
    pub last_unexpected: Option<String>,
}

impl SupervisorStatus {
    /// Threads and tasks running now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }

    /// Threads and tasks started since the daemon started.
    pub fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }

    /// Threads and tasks that ended before shutdown, or panicked.
    pub fn unexpected_exits(&self) -> u64 {
        self.unexpected_exits.load(Ordering::Relaxed)
    }

    /// The name of the last part that ended unexpectedly.
    pub fn last_unexpected(&self) -> Option<String> {
        self.last_unexpected.lock().ok().and_then(|g| g.clone())
    }

    pub fn view(&self) -> SupervisorView {
        SupervisorView {
            running: self.running(),
            started: self.started(),
            unexpected_exits: self.unexpected_exits(),
            last_unexpected: self.last_unexpected(),
        }
    }

    /// A part is about to start.
    pub(crate) fn begin(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.running.fetch_add(1, Ordering::Relaxed);
    }

    /// A part announced by [`Self::begin`] could not be started after all.
    pub(crate) fn never_began(&self) {
        self.running.fetch_sub(1, Ordering::Relaxed);
    }

    /// A part ended: reported as an error unless shutdown was asked for.
    pub(crate) fn end(&self, name: &str, shutting_down: bool, panicked: bool) {
        self.running.fetch_sub(1, Ordering::Relaxed);
        if panicked || !shutting_down {
            let how = if panicked { "panicked" } else { "ended" };
            tracing::error!("{name} {how} before shutdown; it no longer runs");
            self.unexpected_exits.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut last) = self.last_unexpected.lock() {
                *last = Some(name.to_string());
            }
        }
    }
}
