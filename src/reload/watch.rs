//! Watching the control file: inotify (via `notify`) for changes within milliseconds, plus a
//! slow poll as a backstop for filesystems and editors that inotify misses. Both only wake the
//! reloader, which re-reads and compares the bytes; the same content is never tasted twice.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};

use super::Reloader;

/// Settle time after the first event, so that a burst (truncate + write + rename) is one reload.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// Backstop poll interval.
const POLL: Duration = Duration::from_secs(2);

/// Starts watching `control_file` in a background thread for the life of the process.
pub fn spawn(reloader: Arc<Reloader>, control_file: PathBuf) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<()>();
    let dir = match control_file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = control_file.file_name().map(|n| n.to_os_string());
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let relevant = match &event {
            Ok(e) => {
                changes_content(&e.kind)
                    && e.paths
                        .iter()
                        .any(|p| p.file_name().map(|n| n.to_os_string()) == name)
            }
            Err(_) => true,
        };
        if relevant {
            let _ = tx.send(());
        }
    });
    let watcher = match watcher {
        Ok(mut w) => match w.watch(&dir, RecursiveMode::NonRecursive) {
            Ok(()) => Some(w),
            Err(e) => {
                tracing::warn!(
                    "cannot watch {}: {e}; polling every {POLL:?}",
                    dir.display()
                );
                None
            }
        },
        Err(e) => {
            tracing::warn!(
                "no file watcher ({e}); polling {} every {POLL:?}",
                dir.display()
            );
            None
        }
    };
    std::thread::Builder::new()
        .name("control-watch".into())
        .spawn(move || {
            let _keep_alive = watcher;
            watch_loop(&reloader, &rx, &control_file);
        })?;
    Ok(())
}

/// Whether an event can mean new content. Opening, reading and closing a file unchanged are
/// events too; reacting to them would make the watcher's own read of the control file wake it
/// again, 20 times a second, forever.
fn changes_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

fn watch_loop(reloader: &Reloader, events: &mpsc::Receiver<()>, control_file: &Path) {
    loop {
        match events.recv_timeout(POLL) {
            Ok(()) => {
                std::thread::sleep(DEBOUNCE);
                while events.try_recv().is_ok() {}
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(POLL),
        }
        if let Some(Err(reasons)) = reloader.reload_if_control_changed() {
            tracing::debug!("{}: {} problem(s)", control_file.display(), reasons.len());
        }
    }
}

/// What the tenants' watcher saw: one tenant's file changed, or something it cannot pin on
/// one file (an overflow, a watcher error): then the whole folder is looked at.
enum Seen {
    Tenant(String),
    Folder,
}

/// How long between full looks at the tenants' folder (the backstop for changes inotify
/// missed): two seconds, plus one per 20,000 tenants, since a full look stats every file.
fn tenant_backstop(tenants: usize) -> Duration {
    POLL + Duration::from_secs((tenants / 20_000) as u64)
}

/// Starts watching the tenants' folder (the one the platform served names) in a background
/// thread for the life of the process: inotify on the folder, plus the backstop full look.
/// A wake-up by the watcher looks at the files it named only, so a change costs the files
/// changed, not the folder.
pub fn spawn_tenants(reloader: Arc<Reloader>) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<Seen>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let event = match event {
            Ok(event) if event.need_rescan() => {
                let _ = tx.send(Seen::Folder);
                return;
            }
            Ok(event) if changes_content(&event.kind) => event,
            Ok(_) => return,
            Err(_) => {
                let _ = tx.send(Seen::Folder);
                return;
            }
        };
        for path in &event.paths {
            let name = path.file_name().and_then(|n| n.to_str());
            if let Some(tenant) = name.and_then(super::tenants::tenant_of) {
                let _ = tx.send(Seen::Tenant(tenant.to_string()));
            }
        }
    });
    let mut watcher = match watcher {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!("no file watcher for the tenants ({e}); polling every {POLL:?}");
            None
        }
    };
    std::thread::Builder::new()
        .name("tenant-watch".into())
        .spawn(move || {
            let mut watching: Option<PathBuf> = None;
            let mut full = true;
            let mut names = BTreeSet::new();
            let mut last_full = Instant::now();
            loop {
                let status = reloader.tenants().status();
                if status.dir != watching {
                    if let (Some(w), Some(dir)) = (watcher.as_mut(), &status.dir) {
                        if let Err(e) = w.watch(dir, RecursiveMode::NonRecursive) {
                            tracing::debug!("cannot watch {}: {e}; polling", dir.display());
                        }
                    }
                    watching = status.dir;
                    full = true;
                }
                if full {
                    reloader.tenants().check();
                    last_full = Instant::now();
                } else if !names.is_empty() {
                    reloader.tenants().check_names(&names);
                }
                full = false;
                names.clear();
                match reloader.tenants().save_cache(false) {
                    Ok(Some(count)) => tracing::debug!("tenants: cache written ({count} tenants)"),
                    Ok(None) => {}
                    Err(e) => tracing::warn!("tenants: cache not written: {e}"),
                }
                let backstop = match watcher {
                    Some(_) => tenant_backstop(status.served),
                    None => POLL,
                };
                let wait = backstop.saturating_sub(last_full.elapsed());
                match rx.recv_timeout(wait) {
                    Ok(seen) => {
                        std::thread::sleep(DEBOUNCE);
                        for seen in std::iter::once(seen).chain(rx.try_iter()) {
                            match seen {
                                Seen::Tenant(name) => {
                                    names.insert(name);
                                }
                                Seen::Folder => full = true,
                            }
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => full = true,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(POLL);
                        full = true;
                    }
                }
            }
        })?;
    Ok(())
}
