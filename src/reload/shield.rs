//! The shield's thread: every tick it hands the shield ([`crate::shield::live`]) what the
//! current snapshot says (policies, demand counters, settings, mode) and keeps the load file
//! source in step with the config. Lives here, above both, so the shield never sees a
//! snapshot.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::shield::live::Shield;
use crate::shield::source::{FileSource, LoadSource};
use crate::snapshot::SharedSnapshot;

/// Runs the shield every tick for the life of the process, on its own thread, against whatever
/// snapshot is current (so reloads change topology, settings and the load file in place).
pub fn spawn(shield: Arc<Shield>, snapshot: SharedSnapshot) -> std::io::Result<()> {
    let started = std::time::Instant::now();
    let mut sources: Vec<Box<dyn LoadSource>> = Vec::new();
    let mut watched: Option<std::path::PathBuf> = None;
    let mut tick = move |shield: &Shield| {
        let current = snapshot.load_full();
        if current.load_file != watched {
            watched = current.load_file.clone();
            sources = watched
                .iter()
                .map(|p| Box::new(FileSource::new(p.clone())) as Box<dyn LoadSource>)
                .collect();
        }
        let now_ms = started.elapsed().as_millis() as u64;
        shield.tick(
            current.shield_inputs(),
            &mut sources,
            SystemTime::now(),
            now_ms,
        );
        Duration::from_millis(current.shield_tick_ms.max(100))
    };
    // The first tick runs before the server says it is ready, so status and the dashboard
    // show every region and fallback site from the start.
    let mut pause = tick(&shield);
    std::thread::Builder::new()
        .name("shield".into())
        .spawn(move || loop {
            std::thread::sleep(pause);
            pause = tick(&shield);
        })?;
    Ok(())
}
