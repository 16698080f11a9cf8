//! Deferred durability: flushes files (and directories, for their renames) to disk on a
//! background thread, so the reloader never waits for a slow disk while it holds its lock.
//!
//! The control history is the one user (with [`super::replace_file_unflushed`]): a version must
//! be visible to readers (the CLI, a rollback) as soon as it is served, which the rename gives at
//! once; its durability across a machine crash can follow a moment later (and a version torn by
//! a crash is skipped when the history is read). Flush failures are logged; nothing waits on
//! them.

use std::fs::File;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;

/// The flusher thread's queue; `None` if the thread could not be started (flush inline then).
static QUEUE: OnceLock<Option<Sender<Vec<PathBuf>>>> = OnceLock::new();

/// Flushes every path (files and directories) to disk soon, in order, on the flusher thread.
pub(crate) fn flush_in_background(paths: impl IntoIterator<Item = PathBuf>) {
    let paths: Vec<PathBuf> = paths.into_iter().collect();
    let queue = QUEUE.get_or_init(start_flusher);
    let rejected = match queue {
        Some(sender) => sender.send(paths).err().map(|e| e.0),
        None => Some(paths),
    };
    if let Some(paths) = rejected {
        flush(&paths);
    }
}

fn start_flusher() -> Option<Sender<Vec<PathBuf>>> {
    let (sender, receiver) = channel::<Vec<PathBuf>>();
    let started = std::thread::Builder::new()
        .name("history-flush".into())
        .spawn(move || {
            for paths in receiver {
                flush(&paths);
            }
        });
    match started {
        Ok(_) => Some(sender),
        Err(e) => {
            tracing::warn!("cannot start the history flush thread ({e}); flushing inline");
            None
        }
    }
}

fn flush(paths: &[PathBuf]) {
    for path in paths {
        if let Err(e) = File::open(path).and_then(|f| f.sync_all()) {
            tracing::warn!(
                "control history: cannot flush {} to disk: {e}",
                path.display()
            );
        }
    }
}
