//! The admin token: the secret that writes (`POST`) must present as `Authorization: Bearer`.
//!
//! It lives in the file `[admin] token_file` names, which the server and the operator CLI both
//! read. Nothing ships a token: `serve` creates a missing file with 64 random hex characters and
//! mode 0600 (and logs where). A token shorter than [`MIN_TOKEN_LEN`] characters, or in a file
//! that every local user can read, is refused (writes stay disabled and the reason is logged and
//! sent with every refused write), the way sshd's StrictModes refuses a readable private key.
//!
//! Every authorisation first looks at the file's identity (one `stat`: device, inode, size,
//! mtime, ctime, mode) and re-reads it when that changed since the last read, so replacing the
//! file rotates the token at once (the old one is refused from the next write on), and a
//! `chmod` that made it world-readable, or fixed that, takes effect at the next write too; a
//! reload (SIGHUP, `steerdns reload`, a control change) re-reads it as well.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

/// Shortest token accepted: 32 characters (128 bits as hex); generated ones have 64.
pub const MIN_TOKEN_LEN: usize = 32;

/// Why a token file gives no usable token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("no admin token configured ([admin] token_file)")]
    NotConfigured,
    #[error("{path}: cannot read the admin token: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("{path}: the admin token file is empty")]
    Empty { path: PathBuf },
    #[error(
        "{path}: the admin token is {len} characters, shorter than {MIN_TOKEN_LEN}: refused \
         (make one with `openssl rand -hex 32`, or delete the file and steerdns creates one)"
    )]
    TooShort { path: PathBuf, len: usize },
    #[error(
        "{path}: the admin token file is readable by every user (mode {mode:04o}): refused \
         (chmod o-rwx {path})"
    )]
    WorldReadable { path: PathBuf, mode: u32 },
    #[error("{path}: cannot create the admin token file: {reason}")]
    CannotCreate { path: PathBuf, reason: String },
}

/// Reads and checks the token in `path`: its first line, trimmed.
pub fn read_token_file(path: &Path) -> Result<Arc<str>, TokenError> {
    let shown = path.to_path_buf();
    let file = std::fs::File::open(path).map_err(|e| TokenError::Unreadable {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    let meta = file.metadata().map_err(|e| TokenError::Unreadable {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o004 != 0 {
        return Err(TokenError::WorldReadable { path: shown, mode });
    }
    let bytes = crate::files::read_limited(path, 4096).map_err(|e| TokenError::Unreadable {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        return Err(TokenError::Empty { path: shown });
    }
    let len = token.chars().count();
    if len < MIN_TOKEN_LEN {
        return Err(TokenError::TooShort { path: shown, len });
    }
    Ok(Arc::from(token))
}

/// Reads the token the config names (for the CLI): `Err` says why there is none.
pub fn read_token(path: Option<&PathBuf>) -> Result<Arc<str>, TokenError> {
    read_token_file(path.ok_or(TokenError::NotConfigured)?)
}

/// Creates `path` with a fresh random token (64 hex characters), mode 0600, never replacing an
/// existing file. `Ok(false)`: it already existed.
pub fn create_token_file(path: &Path) -> Result<bool, TokenError> {
    let failed = |e: std::io::Error| TokenError::CannotCreate {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut random = [0u8; 32];
    {
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut random))
            .map_err(failed)?;
    }
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let mut file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(failed(e)),
    };
    // The umask cannot widen 0600, but say it explicitly.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(failed)?;
    file.write_all(format!("{hex}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(failed)?;
    Ok(true)
}

/// Identity of a file and its contents as far as a cheap `stat` tells: which file (device,
/// inode), what it holds (size, mtime) and who may read it (mode; ctime catches a `chmod` or
/// `chown` that left the mode bits as they were).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
        mode: meta.mode(),
    })
}

/// The server's current token, replaced whole when the file is re-read.
pub struct AdminToken {
    path: Option<PathBuf>,
    current: ArcSwap<Result<Arc<str>, TokenError>>,
    /// What the file looked like when last read; serializes re-reads.
    read_at: Mutex<Option<Stamp>>,
}

impl AdminToken {
    /// For `serve`: creates a missing token file (logged), then reads it. Problems are logged;
    /// writes stay disabled until a reload finds a good token.
    pub fn open(path: Option<PathBuf>) -> AdminToken {
        if let Some(path) = &path {
            match create_token_file(path) {
                Ok(true) => tracing::warn!(
                    "created the admin token file {} (random, mode 0600): `steerdns reload` and \
                     the other CLI commands read it from there",
                    path.display()
                ),
                Ok(false) => {}
                Err(e) => tracing::error!("{e}"),
            }
        }
        let token = AdminToken {
            path,
            current: ArcSwap::from_pointee(Err(TokenError::NotConfigured)),
            read_at: Mutex::new(None),
        };
        token.reread();
        token
    }

    /// A fixed token (tests, embedding).
    pub fn fixed(token: Option<&str>) -> AdminToken {
        AdminToken {
            path: None,
            current: ArcSwap::from_pointee(token.map(Arc::from).ok_or(TokenError::NotConfigured)),
            read_at: Mutex::new(None),
        }
    }

    /// Re-reads the file (on reload and SIGHUP). A problem is logged and disables writes: a
    /// replaced token must stop working even if its successor is unusable.
    pub fn reread(&self) {
        let Some(path) = &self.path else {
            return;
        };
        let mut read_at = self.read_at.lock().unwrap_or_else(|p| p.into_inner());
        let before = stamp(path);
        let result = read_token_file(path);
        if let Err(e) = &result {
            let previous = self.current.load();
            if previous.as_ref().as_ref().err() != Some(e) {
                tracing::error!("admin writes disabled: {e}");
            }
        } else if self.current.load().as_ref().as_ref().ok() != result.as_ref().ok() {
            tracing::info!("admin token read from {}", path.display());
        }
        *read_at = before;
        self.current.store(Arc::new(result));
    }

    /// Re-reads the file only if its [`Stamp`] changed since the last read (one `stat`).
    fn reread_if_changed(&self) {
        let Some(path) = &self.path else {
            return;
        };
        let last = *self.read_at.lock().unwrap_or_else(|p| p.into_inner());
        if stamp(path) != last {
            self.reread();
        }
    }

    /// Checks a presented token in constant time, against the file as it is now: replaced,
    /// removed or re-permissioned since the last read, it is read again first.
    pub fn check(&self, presented: &str) -> Result<(), TokenCheck> {
        self.reread_if_changed();
        self.compare(presented)
    }

    fn compare(&self, presented: &str) -> Result<(), TokenCheck> {
        match self.current.load().as_ref() {
            Ok(expected) => {
                if super::constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
                    Ok(())
                } else {
                    Err(TokenCheck::Wrong)
                }
            }
            Err(e) => Err(TokenCheck::Disabled(e.to_string())),
        }
    }
}

/// Why a write was not authorized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenCheck {
    /// No usable token on the server: writes are disabled (the reason).
    Disabled(String),
    /// A token is configured and this is not it.
    Wrong,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(label: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("steerdns-token-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_mode(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_missing_file_is_created_random_and_private() {
        let dir = scratch("create");
        let path = dir.join("admin.token");
        assert_eq!(create_token_file(&path), Ok(true));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let first = read_token_file(&path).unwrap();
        assert_eq!(first.len(), 64);
        assert!(first.chars().all(|c| c.is_ascii_hexdigit()));
        // Never replaced once there.
        assert_eq!(create_token_file(&path), Ok(false));
        assert_eq!(read_token_file(&path).unwrap(), first);
        let other = dir.join("other.token");
        create_token_file(&other).unwrap();
        assert_ne!(read_token_file(&other).unwrap(), first, "not random");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn short_or_world_readable_tokens_are_refused() {
        let dir = scratch("refuse");
        let path = dir.join("admin.token");
        write_mode(&path, "short-token\n", 0o600);
        assert!(matches!(
            read_token_file(&path),
            Err(TokenError::TooShort { len: 11, .. })
        ));
        let good = "0123456789abcdef0123456789abcdef";
        write_mode(&path, &format!("{good}\n"), 0o644);
        assert!(matches!(
            read_token_file(&path),
            Err(TokenError::WorldReadable { mode: 0o644, .. })
        ));
        write_mode(&path, &format!("  {good}  \nignored\n"), 0o640);
        assert_eq!(read_token_file(&path).unwrap().as_ref(), good);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_check_sees_a_replaced_or_re_permissioned_file() {
        let dir = scratch("identity");
        let path = dir.join("admin.token");
        let old = "old-token-0123456789abcdef0123456789";
        let new = "new-token-0123456789abcdef0123456789";
        write_mode(&path, old, 0o600);
        let token = AdminToken::open(Some(path.clone()));
        assert_eq!(token.check(old), Ok(()));
        // Replaced (rename over it): the old token is refused at once, no reload needed.
        write_mode(&dir.join("tmp"), new, 0o600);
        std::fs::rename(dir.join("tmp"), &path).unwrap();
        assert_eq!(token.check(old), Err(TokenCheck::Wrong));
        assert_eq!(token.check(new), Ok(()));
        // Made world-readable: refused at the next check; made private again: accepted at the
        // next check, with no stale refusal.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            matches!(token.check(new), Err(TokenCheck::Disabled(ref why)) if why.contains("0644")),
            "{:?}",
            token.check(new)
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(token.check(new), Ok(()));
        // Rewritten in place with the same length (same inode, same size): mtime tells.
        let same_len = "NEW-token-0123456789abcdef0123456789";
        std::fs::write(&path, same_len).unwrap();
        assert_eq!(token.check(new), Err(TokenCheck::Wrong));
        assert_eq!(token.check(same_len), Ok(()));
        // An unusable replacement disables writes rather than keeping the old token.
        write_mode(&path, "tiny", 0o600);
        assert!(matches!(
            token.check(same_len),
            Err(TokenCheck::Disabled(_))
        ));
        // Removed: writes are disabled, not left to the last token read.
        write_mode(&path, same_len, 0o600);
        assert_eq!(token.check(same_len), Ok(()));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            token.check(same_len),
            Err(TokenCheck::Disabled(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
