//! The shield's thread: every tick it hands the shield ([`crate::shield::live`]) what the
//! current snapshot says (policies, demand counters, settings, mode) and keeps the load file
//! source in step with the config. Lives here, above both, so the shield never sees a
//! snapshot.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::prometheus::PrometheusConfig;
use crate::shield::live::{capacities_of, Shield};
use crate::shield::prometheus::{Capacities, PrometheusSource};
use crate::shield::source::{FileSource, LoadSource};
use crate::snapshot::{SharedSnapshot, Snapshot};

/// The load sources the current snapshot asks for, rebuilt when what it asks for changes.
#[derive(Default)]
struct Sources {
    list: Vec<Box<dyn LoadSource>>,
    watched: Option<std::path::PathBuf>,
    prometheus: Option<(PrometheusConfig, Capacities)>,
}

impl Sources {
    fn follow(&mut self, snapshot: &Snapshot) {
        let setup = snapshot.compiled().shield_setup();
        let prometheus = setup.prometheus.clone().map(|config| {
            let capacities = snapshot.policies().map(capacities_of).unwrap_or_default();
            (config, capacities)
        });
        if setup.load_file == self.watched && prometheus == self.prometheus {
            return;
        }
        self.watched = setup.load_file.clone();
        self.prometheus = prometheus;
        let mut list: Vec<Box<dyn LoadSource>> = Vec::new();
        if let Some(path) = &self.watched {
            list.push(Box::new(FileSource::new(path.clone())));
        }
        if let Some((config, capacities)) = &self.prometheus {
            match PrometheusSource::new(config.clone(), capacities.clone()) {
                Ok(source) => list.push(Box::new(source)),
                // No thread for it: no Prometheus feed (it goes stale), the rest runs on.
                Err(e) => tracing::error!("cannot start the Prometheus load source: {e}"),
            }
        }
        self.list = list;
    }
}

/// Runs the shield's first tick now and returns its loop, for a thread of its own (the
/// daemon's supervisor starts it), against whatever snapshot is current (so reloads change
/// topology, settings and the load file in place). `sleep` pauses between ticks and returns
/// true when the daemon is stopping; the loop returns then.
pub fn start(
    shield: Arc<Shield>,
    snapshot: SharedSnapshot,
) -> impl FnOnce(&dyn Fn(Duration) -> bool) + Send {
    let started = std::time::Instant::now();
    let mut sources = Sources::default();
    let mut tick = move |shield: &Shield| {
        let current = snapshot.load_full();
        sources.follow(&current);
        let now_ms = started.elapsed().as_millis() as u64;
        shield.tick(
            current.shield_inputs(),
            &mut sources.list,
            SystemTime::now(),
            now_ms,
        );
        Duration::from_millis(current.compiled().shield_setup().tick_ms.max(100))
    };
    // The first tick runs before the server says it is ready, so status and the dashboard
    // show every region and fallback site from the start.
    let mut pause = tick(&shield);
    move |sleep| {
        while !sleep(pause) {
            pause = tick(&shield);
        }
    }
}
