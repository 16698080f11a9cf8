//! The DNS Cookie secret a snapshot answers with (`[server.cookies]`): read from the
//! configured file — the same file on every node of a fleet, so each verifies the cookies
//! the others issued — or, without one, made at random once per process and kept across
//! reloads (a reload must not invalidate every client's cookie).
//!
//! Read off the serving path, with the rest of a load; a bad file refuses the load like any
//! other bad input, naming the file and line.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::config::CookieConfig;
use crate::dns::cookie::CookieSecrets;

/// Where the secret came from (for status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    File(PathBuf),
    /// Random, made when this process started: only this process verifies its cookies.
    Generated,
}

/// The cookie settings a snapshot serves with; `None` in [`super::ServeOptions`] when
/// cookies are off.
#[derive(Debug, Clone)]
pub struct CookieSetup {
    pub secrets: CookieSecrets,
    pub source: SecretSource,
}

impl CookieSetup {
    /// One line for status: where the secret is from and whether a previous one is accepted.
    pub fn describe(&self) -> String {
        let previous = if self.secrets.has_previous() {
            ", previous secret still accepted"
        } else {
            ""
        };
        match &self.source {
            SecretSource::File(path) => format!("secret from {}{previous}", path.display()),
            SecretSource::Generated => {
                "secret generated at start (this process only: set [server.cookies] secret_file to share it across a fleet)".to_string()
            }
        }
    }
}

/// The setup `[server.cookies]` asks for.
pub fn load(config: &CookieConfig) -> Result<Option<CookieSetup>, String> {
    if !config.enabled {
        return Ok(None);
    }
    let setup = match &config.secret_file {
        Some(path) => CookieSetup {
            secrets: read_secret_file(path)?,
            source: SecretSource::File(path.clone()),
        },
        None => CookieSetup {
            secrets: CookieSecrets::new(process_secret()?, None),
            source: SecretSource::Generated,
        },
    };
    Ok(Some(setup))
}

/// This process's random secret, made on first use.
fn process_secret() -> Result<[u8; 16], String> {
    static SECRET: OnceLock<[u8; 16]> = OnceLock::new();
    if let Some(secret) = SECRET.get() {
        return Ok(*secret);
    }
    let mut secret = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
        .map_err(|_| "server.cookies: no randomness for a cookie secret".to_string())?;
    Ok(*SECRET.get_or_init(|| secret))
}

/// Reads a secret file: 0600, the current secret on its first line, optionally the previous
/// one on the second (32 hex digits each); `#` lines and blank lines are skipped.
fn read_secret_file(path: &Path) -> Result<CookieSecrets, String> {
    let shown = path.display();
    let meta =
        std::fs::metadata(path).map_err(|e| format!("{shown}: server.cookies.secret_file: {e}"))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{shown}: server.cookies.secret_file: readable by group or others (mode {mode:o}); a cookie secret must be 0600"
        ));
    }
    let text = crate::files::read_text_limited(path, 4096)
        .map_err(|e| format!("{shown}: server.cookies.secret_file: {e}"))?;
    let mut secrets = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let secret = parse_secret(line)
            .ok_or_else(|| format!("{shown}:{}: not a secret of 32 hex digits", index + 1))?;
        secrets.push((index + 1, secret));
    }
    match secrets.as_slice() {
        [(_, current)] => Ok(CookieSecrets::new(*current, None)),
        [(_, current), (_, previous)] => Ok(CookieSecrets::new(*current, Some(*previous))),
        [] => Err(format!("{shown}: no secret (32 hex digits) in the file")),
        [_, _, (line, _), ..] => Err(format!(
            "{shown}:{line}: a third secret: the file holds the current secret and at most the previous one"
        )),
    }
}

fn parse_secret(line: &str) -> Option<[u8; 16]> {
    let bytes = data_encoding::HEXLOWER_PERMISSIVE
        .decode(line.as_bytes())
        .ok()?;
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str, mode: u32) -> PathBuf {
        let path = dir.join("cookie.secret");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    fn config(path: Option<PathBuf>) -> CookieConfig {
        CookieConfig {
            enabled: true,
            secret_file: path,
        }
    }

    #[test]
    fn a_secret_file_gives_the_current_and_previous_secret_and_bad_ones_are_named() {
        let dir = std::env::temp_dir().join(format!("steerdns-cookie-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = write(
            &dir,
            "# rolled 2026-12-03\ne5e973e5a6b2a43f48e7dc849e37bfcf\nDD3BDF9344B678B185A6F5CB60FCA715\n",
            0o600,
        );
        let setup = load(&config(Some(path.clone()))).unwrap().unwrap();
        assert!(setup.secrets.has_previous());
        assert_eq!(setup.source, SecretSource::File(path.clone()));

        let path = write(&dir, "e5e973e5a6b2a43f48e7dc849e37bf\n", 0o600);
        let error = load(&config(Some(path.clone()))).unwrap_err();
        assert!(error.contains("cookie.secret:1: not a secret"), "{error}");
        let path = write(&dir, "e5e973e5a6b2a43f48e7dc849e37bfcf\n", 0o644);
        let error = load(&config(Some(path))).unwrap_err();
        assert!(error.contains("0600"), "{error}");
        let path = write(&dir, "\n# nothing\n", 0o600);
        assert!(load(&config(Some(path))).unwrap_err().contains("no secret"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_generated_secret_is_kept_for_the_process_and_cookies_can_be_off() {
        let a = load(&config(None)).unwrap().unwrap();
        let b = load(&config(None)).unwrap().unwrap();
        assert_eq!(a.secrets, b.secrets);
        assert_eq!(a.source, SecretSource::Generated);
        let off = CookieConfig {
            enabled: false,
            secret_file: None,
        };
        assert!(load(&off).unwrap().is_none());
    }
}
