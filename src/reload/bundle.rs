//! A fleet node's **bundles**: the files a node serves besides the control state — its config
//! file, its zone directory and its GeoIP database — captured as one unit so that the fleet can
//! stage them like control versions (see `crate::fleet` and README "Staged rollouts").
//!
//! With `[fleet.rollout]` the node never serves its live files directly. A reload (SIGHUP,
//! `steerdns reload`, a restart) *captures* them: copies them into
//! `<bundle_dir>/<id>/` (`steerdns.toml`, `zones/`, `geo.mmdb`) and names the copy by a hash of
//! what was copied (the id). The node serves a copy, never the live files, so it can hold the
//! bundle it serves while a new one waits for its wave, and go back to its last known good
//! after a halt, whatever the deployment did to the live files meanwhile. A copy's relative
//! paths (control file, history, keys, certificates) still resolve against the live config's
//! directory: those are not part of the bundle.
//!
//! `<bundle_dir>/serving` names the bundle served, so that a restart serves it again (not the
//! live files) until the rollout releases the new one. Owns the store's files; pure I/O, no
//! policy (the reloader decides what to capture and serve, the fleet what is released).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::Source;
use crate::config::Config;

/// A bundle's id: 16 hex digits of the FNV-1a hash of every file it holds (name and bytes).
pub type BundleId = String;

/// Most files a zone directory may hold to be captured (a runaway directory is refused).
const MAX_FILES: usize = 10_000;
/// Largest file captured (zone files are bounded by the parser; GeoIP databases are big).
const MAX_FILE_BYTES: u64 = 1 << 30;
/// The marker of the bundle served.
const SERVING: &str = "serving";

/// Why a bundle could not be captured or marked served (nothing is served from it then).
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("a staged bundle needs a config file (none was read)")]
    NoConfigFile,
    #[error("{}: more than {MAX_FILES} files to stage", path.display())]
    TooManyFiles { path: PathBuf },
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        /// What was being done: "read", "write", "create", "store the bundle".
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Marker {
        path: PathBuf,
        #[source]
        source: crate::files::WriteError,
    },
}

/// An I/O failure on `path` while doing `action`.
fn io(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> BundleError {
    let path = path.to_path_buf();
    move |source| BundleError::Io {
        path,
        action,
        source,
    }
}

/// The directory of one node's bundles.
#[derive(Debug, Clone)]
pub struct BundleStore {
    dir: PathBuf,
}

impl BundleStore {
    /// The store `config` asks for: `[fleet] bundle_dir`, else `<control file>.bundles`.
    /// `None` without `[fleet.rollout]` (bundles are staged only in a fleet that stages).
    pub fn for_config(config: &Config) -> Option<BundleStore> {
        let fleet = config.fleet.as_ref()?;
        fleet.rollout.as_ref()?;
        let dir = match (&fleet.bundle_dir, &config.control.file) {
            (Some(dir), _) => dir.clone(),
            (None, Some(control)) => {
                let mut name = control
                    .file_name()
                    .map(|n| n.to_os_string())
                    .unwrap_or_else(|| "control".into());
                name.push(".bundles");
                control.with_file_name(name)
            }
            (None, None) => config.base_dir.join("steerdns.bundles"),
        };
        Some(BundleStore { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Copies the files `live` (the config as read from the live files) names into the store;
    /// returns the copy's id. Capturing the same bytes again returns the same id.
    pub fn capture(&self, live: &Config) -> Result<BundleId, BundleError> {
        let Some(config_file) = &live.source_path else {
            return Err(BundleError::NoConfigFile);
        };
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir, "create"))?;
        let scratch = self.dir.join(format!(".capture-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        let mut copy = Copy::new(&scratch)?;
        let captured = (|| {
            copy.file(config_file, Path::new("steerdns.toml"))?;
            copy.tree(&live.server.zones, Path::new("zones"))?;
            if let Some(database) = &live.geo.database {
                copy.file(&live.base_dir.join(database), Path::new("geo.mmdb"))?;
            }
            Ok::<_, BundleError>(())
        })();
        if let Err(e) = captured {
            let _ = std::fs::remove_dir_all(&scratch);
            return Err(e);
        }
        let id = format!("{:016x}", copy.hash);
        let target = self.dir.join(&id);
        if target.is_dir() {
            let _ = std::fs::remove_dir_all(&scratch);
        } else {
            std::fs::rename(&scratch, &target).map_err(io(&target, "store the bundle"))?;
        }
        Ok(id)
    }

    /// Whether the store holds bundle `id`.
    pub fn has(&self, id: &str) -> bool {
        valid_id(id) && self.dir.join(id).join("steerdns.toml").is_file()
    }

    /// The source that reads bundle `id` as `live` reads the live files: the copy's config
    /// (relative paths against the live config's directory `base`), zones and database.
    pub fn source(&self, live: &Source, base: &Path, id: &str) -> Source {
        let root = self.dir.join(id);
        let database = root.join("geo.mmdb");
        Source {
            config: Some(root.join("steerdns.toml")),
            zones: Some(root.join("zones")),
            base_dir: Some(base.to_path_buf()),
            geo_database: database.is_file().then_some(database),
            ..live.clone()
        }
    }

    /// The bundle served when this process (or the last one) last changed bundles, and the
    /// one served before it (the way back), if the store still holds them.
    pub fn serving(&self) -> Option<(BundleId, Option<BundleId>)> {
        let text = std::fs::read_to_string(self.dir.join(SERVING)).ok()?;
        let mut lines = text.lines().map(str::trim);
        let serving = lines.next().filter(|id| self.has(id))?.to_string();
        let previous = lines.next().filter(|id| self.has(id)).map(str::to_string);
        Some((serving, previous))
    }

    /// Records `serving` (and the bundle before it) for the next start, and deletes every
    /// bundle but those two and `keep`.
    pub fn set_serving(
        &self,
        serving: &str,
        previous: Option<&str>,
        keep: &[&str],
    ) -> Result<(), BundleError> {
        let marker = self.dir.join(SERVING);
        let text = format!("{serving}\n{}\n", previous.unwrap_or(""));
        crate::files::replace_file(&marker, text.as_bytes()).map_err(|source| {
            BundleError::Marker {
                path: marker.clone(),
                source,
            }
        })?;
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let kept =
                name == serving || previous == Some(name.as_str()) || keep.contains(&name.as_str());
            if (name.starts_with(".capture-") || valid_id(&name)) && !kept {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        Ok(())
    }
}

fn valid_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A copy in progress, hashing every file's name and bytes as they are written.
struct Copy {
    root: PathBuf,
    hash: u64,
    files: usize,
}

impl Copy {
    fn new(root: &Path) -> Result<Copy, BundleError> {
        std::fs::create_dir_all(root).map_err(io(root, "create"))?;
        Ok(Copy {
            root: root.to_path_buf(),
            hash: crate::hash::fnv1a64(b""),
            files: 0,
        })
    }

    fn mix(&mut self, bytes: &[u8]) {
        self.hash = crate::hash::fnv1a64_more(self.hash, bytes);
    }

    fn file(&mut self, from: &Path, to: &Path) -> Result<(), BundleError> {
        self.files += 1;
        if self.files > MAX_FILES {
            return Err(BundleError::TooManyFiles {
                path: from.to_path_buf(),
            });
        }
        let bytes = crate::files::read_limited(from, MAX_FILE_BYTES).map_err(io(from, "read"))?;
        self.mix(to.to_string_lossy().as_bytes());
        self.mix(&[0]);
        self.mix(&(bytes.len() as u64).to_be_bytes());
        self.mix(&bytes);
        let path = self.root.join(to);
        let mut file = std::fs::File::create(&path).map_err(io(&path, "write"))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(io(&path, "write"))
    }

    /// Copies directory `from` (regular files and subdirectories, in name order) to `to`.
    fn tree(&mut self, from: &Path, to: &Path) -> Result<(), BundleError> {
        let target = self.root.join(to);
        std::fs::create_dir_all(&target).map_err(io(&target, "create"))?;
        let mut entries: Vec<_> = std::fs::read_dir(from)
            .map_err(io(from, "read"))?
            .flatten()
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let name = to.join(entry.file_name());
            if path.is_dir() {
                self.tree(&path, &name)?;
            } else if path.is_file() {
                self.file(&path, &name)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("steerdns-bundle-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("live/zones/parts")).expect("mkdir");
        dir
    }

    fn live(dir: &Path, zone: &str) -> Config {
        std::fs::write(dir.join("live/steerdns.toml"), "").expect("config");
        std::fs::write(dir.join("live/zones/example.com.zone"), zone).expect("zone");
        std::fs::write(dir.join("live/zones/parts/hosts.inc"), "www A 192.0.2.1\n").expect("inc");
        let mut config = Config {
            source_path: Some(dir.join("live/steerdns.toml")),
            ..Config::default()
        };
        config.server.zones = dir.join("live/zones");
        config
    }

    #[test]
    fn a_capture_is_named_by_its_bytes_and_survives_the_live_files_changing() {
        let dir = scratch("capture");
        let store = BundleStore {
            dir: dir.join("store"),
        };
        let first = store.capture(&live(&dir, "serial 1\n")).expect("capture");
        assert_eq!(
            store.capture(&live(&dir, "serial 1\n")).ok(),
            Some(first.clone())
        );
        let second = store.capture(&live(&dir, "serial 2\n")).expect("capture");
        assert_ne!(first, second);
        let kept = dir
            .join("store")
            .join(&first)
            .join("zones/example.com.zone");
        assert_eq!(std::fs::read_to_string(kept).expect("copy"), "serial 1\n");
        assert!(dir
            .join("store")
            .join(&second)
            .join("zones/parts/hosts.inc")
            .is_file());
        store
            .set_serving(&second, Some(&first), &[])
            .expect("marker");
        assert_eq!(store.serving(), Some((second.clone(), Some(first.clone()))));
        let third = store.capture(&live(&dir, "serial 3\n")).expect("capture");
        store
            .set_serving(&third, Some(&second), &[])
            .expect("marker");
        assert!(!store.has(&first), "pruned");
        assert!(store.has(&second) && store.has(&third));
        let source = store.source(&Source::default(), &dir.join("live"), &third);
        assert_eq!(source.base_dir.as_deref(), Some(dir.join("live").as_path()));
        assert_eq!(source.geo_database, None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_zone_directory_is_an_error_and_leaves_nothing_behind() {
        let dir = scratch("missing");
        let store = BundleStore {
            dir: dir.join("store"),
        };
        let mut config = live(&dir, "x");
        config.server.zones = dir.join("nowhere");
        let error = store.capture(&config).expect_err("no zones");
        assert!(
            matches!(&error, BundleError::Io { path, action: "read", .. } if path.ends_with("nowhere")),
            "{error}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.join("store"))
            .expect("store")
            .flatten()
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
