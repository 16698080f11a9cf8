//! Where the control text comes from, behind one small trait: the local control file (one
//! node) or a store shared by a fleet of nodes (`crate::fleet`, etcd). The reloader asks its
//! origin for the text on every reload and tells it what became of it; it knows nothing else
//! about where the text lives.

use std::path::PathBuf;

use crate::config::Config;

/// Where the control text comes from: the local control file (one node, the default:
/// [`FileOrigin`]) or a store shared by a fleet (`crate::fleet`), whose newest version the
/// origin hands to every reload. Whatever the origin, the text takes the one reload path: tasted
/// whole, swapped in or refused with the last known good still serving.
pub trait ControlOrigin: Send + Sync {
    /// The control text to taste now and the path that names it in errors; `None` when the
    /// config names no control file.
    fn current(&self, config: &Config) -> Result<Option<(PathBuf, String)>, String>;
    /// `text` was accepted and is being served (called under the reload lock, after the swap).
    /// Returns a problem worth a warning in status (e.g. the local cache is not writable).
    fn accepted(&self, config: &Config, text: &str) -> Option<String> {
        let _ = (config, text);
        None
    }
    /// `text` was refused (the reasons are in status already).
    fn refused(&self, text: &str) {
        let _ = text;
    }
    /// The node's bundles changed (one tasted, refused or served): a fleet node tells the
    /// fleet (see [`super::bundle`]).
    fn bundles_changed(&self) {}
    /// Whether operators edit the control file directly (so it is watched). In fleet mode the
    /// file is only the node's cache and is not watched.
    fn watches_file(&self) -> bool {
        true
    }
    /// Whether `text` is a fleet node's local override (served although etcd does not hold
    /// it; `CH TXT serial.steerdns` says so).
    fn is_local_override(&self, text: &str) -> bool {
        let _ = text;
        false
    }
}

/// The control file named by the config: read on every reload.
pub struct FileOrigin;

impl ControlOrigin for FileOrigin {
    fn current(&self, config: &Config) -> Result<Option<(PathBuf, String)>, String> {
        super::read_control_text(config)
    }
}
