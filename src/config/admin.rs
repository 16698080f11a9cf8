//! `[admin]`: where the admin HTTP endpoint listens and what it trusts (plain data). The
//! endpoint itself is [`crate::admin`].

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where the admin endpoint listens; loopback by default. Port 0 picks a free port.
    pub listen: SocketAddr,
    /// File holding the token that writes (`POST`) must present as `Authorization: Bearer`.
    /// Missing: `serve` creates it (random, mode 0600). Unset, unreadable, shorter than 32
    /// characters or readable by every user: writes are refused.
    pub token_file: Option<PathBuf>,
    /// Names (or addresses) besides loopback literals, `localhost` and the listen address that
    /// requests may carry in `Host`, e.g. the name a reverse proxy uses.
    pub allowed_hosts: Vec<String>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 5380)),
            token_file: None,
            allowed_hosts: Vec::new(),
        }
    }
}
