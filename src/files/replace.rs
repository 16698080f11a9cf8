//! Replacing a file atomically: readers see the old content or the new, never a mix, and a
//! crash leaves one of the two on disk. Used for the control file's edits (CLI and fleet cache),
//! the control history's versions, bundle markers, the GeoIP database `geoip build` writes and
//! DNSSEC key files (private: [`replace_private_file`]).
//!
//! Owns the temporary-file-and-rename dance (permissions, owner and symbolic links kept) and
//! its errors; what is written, and under which lock, is the caller's business.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The mode of a private file (DNSSEC keys): its owner may read and write it, nobody else.
const PRIVATE_MODE: u32 = 0o600;

/// A failed step of an atomic file replacement; names the file being replaced.
#[derive(Debug, thiserror::Error)]
#[error("{path}: cannot {action}: {source}")]
pub struct WriteError {
    /// The file that was to be replaced.
    pub path: PathBuf,
    /// The step that failed, e.g. "write the temporary file".
    pub action: &'static str,
    #[source]
    pub source: io::Error,
}

/// Replaces the file at `path` with `bytes` so that readers (the server's file watcher) see
/// either the old or the new content, never a mix, and a crash leaves one of the two on disk.
///
/// Writes a temporary file in the same directory, flushes it to disk, renames it over `path`
/// and flushes the directory. The original file's permissions are kept (and, best effort, its
/// owner). If `path` is a symbolic link, the file it points to is replaced and the link kept.
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    replace(path, bytes, Flush::Now, Access::KeepOriginal).map(|_| ())
}

/// Like [`replace_file`], for secrets: the file is 0600 whatever the original's mode was, and
/// so is the temporary file from the moment it is created, before a byte is written to it.
pub fn replace_private_file(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    replace(path, bytes, Flush::Now, Access::OwnerOnly).map(|_| ())
}

/// Like [`replace_file`], atomic for readers (they see the old or the new content) but not yet
/// flushed to disk: the caller makes it durable later (see [`super::flush_in_background`]).
/// Returns the file and the directory to flush.
pub(crate) fn replace_file_unflushed(
    path: &Path,
    bytes: &[u8],
) -> Result<[PathBuf; 2], WriteError> {
    replace(path, bytes, Flush::Later, Access::KeepOriginal)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flush {
    Now,
    Later,
}

/// Who may read the new file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Whoever could read the file it replaces (the umask's default for a new file).
    KeepOriginal,
    /// Its owner only (0600), from the temporary file's creation on.
    OwnerOnly,
}

/// The directory holding `target` (`.` for a bare file name).
pub(crate) fn parent_dir(target: &Path) -> PathBuf {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Replaces the file; returns the file replaced (a symbolic link followed) and its directory.
fn replace(
    path: &Path,
    bytes: &[u8],
    flush: Flush,
    access: Access,
) -> Result<[PathBuf; 2], WriteError> {
    let target = resolve_symlink(path)?;
    let fail = |action: &'static str| {
        let target = target.clone();
        move |source| WriteError {
            path: target,
            action,
            source,
        }
    };
    let dir = parent_dir(&target);
    let original = match fs::metadata(&target) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(fail("read the current file's permissions")(e)),
    };
    let (temp_path, mut temp) =
        create_temp(&dir, &target, access).map_err(fail("create a temporary file next to it"))?;
    let result = (|| {
        temp.write_all(bytes)
            .map_err(fail("write the temporary file"))?;
        if let Some(meta) = &original {
            copy_ownership_best_effort(&temp_path, meta);
            if access == Access::KeepOriginal {
                temp.set_permissions(meta.permissions())
                    .map_err(fail("copy the permissions to the temporary file"))?;
            }
        }
        if flush == Flush::Now {
            temp.sync_all()
                .map_err(fail("flush the temporary file to disk"))?;
        }
        fs::rename(&temp_path, &target).map_err(fail("rename the temporary file over it"))?;
        Ok(())
    })();
    if result.is_err() {
        // Best effort: the error that matters is the one being returned.
        let _ = fs::remove_file(&temp_path);
    }
    result?;
    if flush == Flush::Now {
        // Makes the rename itself durable.
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(fail("flush its directory to disk"))?;
    }
    Ok([target, dir])
}

/// Follows `path` if it is a symbolic link, so the link survives the rename.
pub(crate) fn resolve_symlink(path: &Path) -> Result<PathBuf, WriteError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            fs::canonicalize(path).map_err(|source| WriteError {
                path: path.to_path_buf(),
                action: "follow the symbolic link",
                source,
            })
        }
        _ => Ok(path.to_path_buf()),
    }
}

/// Creates a fresh, uniquely named hidden file next to `target` (0600 for [`Access::OwnerOnly`],
/// set again after creation: the umask cannot widen it, but an odd umask could narrow it).
fn create_temp(dir: &Path, target: &Path, access: Access) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp_path = dir.join(format!(".{name}.tmp.{}.{n}", std::process::id()));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        if access == Access::OwnerOnly {
            options.mode(PRIVATE_MODE);
        }
        match options.open(&temp_path) {
            Ok(file) => {
                if access == Access::OwnerOnly {
                    file.set_permissions(fs::Permissions::from_mode(PRIVATE_MODE))?;
                }
                return Ok((temp_path, file));
            }
            // A leftover from a crashed process with the same pid: try the next name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Gives the new file the original's owner when we are allowed to (root editing a file owned
/// by the service user); otherwise the new file is owned by whoever runs the command.
#[cfg(unix)]
fn copy_ownership_best_effort(temp_path: &Path, original: &fs::Metadata) {
    use std::os::unix::fs::MetadataExt;
    let _ = std::os::unix::fs::chown(temp_path, Some(original.uid()), Some(original.gid()));
}

#[cfg(not(unix))]
fn copy_ownership_best_effort(_temp_path: &Path, _original: &fs::Metadata) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("steerdns-replace-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn atomic_write_replaces_content_keeps_mode_and_leaves_no_temp() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("write");
        let path = dir.join("control.toml");
        fs::write(&path, "old\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        replace_file(&path, b"new\n").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "new\n");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["control.toml"]);

        // A new file is created too.
        replace_file(&dir.join("fresh.toml"), b"x = 1\n").unwrap();
        assert_eq!(
            fs::read_to_string(dir.join("fresh.toml")).unwrap(),
            "x = 1\n"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_private_file_is_owner_only_whatever_it_replaces() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("private");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let fresh = dir.join("Kexample.toml");
        replace_private_file(&fresh, b"secret = 1\n").unwrap();
        assert_eq!(mode(&fresh), 0o600);
        // An existing world-readable file becomes private too (not kept at its mode).
        fs::set_permissions(&fresh, fs::Permissions::from_mode(0o644)).unwrap();
        replace_private_file(&fresh, b"secret = 2\n").unwrap();
        assert_eq!(fs::read_to_string(&fresh).unwrap(), "secret = 2\n");
        assert_eq!(mode(&fresh), 0o600);
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["Kexample.toml"], "no temporary file left");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn atomic_write_through_a_symlink_keeps_the_link() {
        let dir = temp_dir("link");
        let real = dir.join("real.toml");
        let link = dir.join("control.toml");
        fs::write(&real, "old\n").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        replace_file(&link, b"new\n").unwrap();
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(&real).unwrap(), "new\n");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn atomic_write_into_a_missing_directory_names_the_file() {
        let dir = temp_dir("missing");
        let path = dir.join("nope").join("control.toml");
        let err = replace_file(&path, b"x").unwrap_err().to_string();
        assert!(err.contains("nope/control.toml"), "{err}");
        assert!(err.contains("temporary file"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
