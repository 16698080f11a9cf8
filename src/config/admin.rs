//! `[admin]`: where the admin HTTP endpoint listens, what it trusts and how many connections it
//! keeps (plain data). The endpoint itself is [`crate::admin`].

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
    /// Most admin connections open at once. A newcomer beyond it closes the connection that
    /// has waited longest for a request (or is closed itself when every one is being served).
    pub max_connections: usize,
    /// Once the first byte of a request arrived, its head (request line and headers) must be
    /// complete within this many milliseconds.
    pub header_timeout_ms: u64,
    /// A connection waiting for a request (just opened, or kept alive after an answer) is
    /// closed after this many seconds without a byte.
    pub idle_timeout_secs: u64,
    /// File descriptors kept free for everything that is not a connection (zone and control
    /// files, etcd, the taster, a reload): the admin endpoint takes no connection that would
    /// leave fewer free, and the DNS listeners none that would leave fewer than this plus what
    /// the admin endpoint may still open (so a flood of either never locks the other out; see
    /// [`crate::descriptors`]).
    pub descriptor_reserve: usize,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 5380)),
            token_file: None,
            allowed_hosts: Vec::new(),
            max_connections: 64,
            header_timeout_ms: 5000,
            idle_timeout_secs: 30,
            descriptor_reserve: 128,
        }
    }
}

impl AdminConfig {
    /// The first out-of-range setting: (field, why).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if self.max_connections == 0 {
            return Some(("admin.max_connections", "must be at least 1".into()));
        }
        if self.header_timeout_ms < 100 {
            return Some((
                "admin.header_timeout_ms",
                format!("{} is below 100", self.header_timeout_ms),
            ));
        }
        if self.idle_timeout_secs == 0 {
            return Some(("admin.idle_timeout_secs", "must be at least 1".into()));
        }
        if self.descriptor_reserve < 16 {
            return Some((
                "admin.descriptor_reserve",
                format!(
                    "{} is below 16 (a reload alone opens several files)",
                    self.descriptor_reserve
                ),
            ));
        }
        None
    }
}
