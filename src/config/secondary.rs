//! `[secondary]`: zones this server pulls from a primary by zone transfer (issue 33 item 4).
//! Plain data; the transfer task itself lives in `crate::secondary`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// `[secondary]` with `[[secondary.zone]]` entries.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecondaryConfig {
    /// Where transferred zones are kept (`<zone>.zone`) for cold start. Default: `secondary/`
    /// beside the config file.
    pub dir: Option<PathBuf>,
    /// The secondary zones.
    pub zone: Vec<SecondaryZoneConfig>,
    /// Catalog zones (RFC 9432) pulled like a secondary zone; every member they list becomes a
    /// secondary zone from the same primaries (copy `<dir>/<member>.zone`).
    pub catalog: Vec<SecondaryZoneConfig>,
}

/// One zone pulled from its primaries.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecondaryZoneConfig {
    /// The zone's name, e.g. `example.org`.
    pub name: String,
    /// The primaries (`addr:port`), asked in order.
    pub primaries: Vec<SocketAddr>,
    /// The on-disk copy. Default: `<dir>/<name>.zone`.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// Seconds a connection to a primary, or one read from it, may take.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// A TSIG key file (mode 0600, the `key "name" { ... };` format of `[transfer] key_files`),
    /// read by the zone's task at its first refresh and again on every SIGHUP or reload:
    /// SOA queries and transfer requests are signed with its key, every answer and NOTIFY must
    /// carry its MAC.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Which key of `key_file`; unset: the file must hold exactly one.
    #[serde(default)]
    pub key: Option<String>,
    /// For a member of a consumed catalog: its `group` properties (RFC 9432 4.4.2).
    #[serde(skip)]
    pub catalog_groups: Vec<String>,
    /// For a member of a consumed catalog: the catalog named by its `coo` property (RFC 9432
    /// 4.4.1), which may take the member over.
    #[serde(skip)]
    pub catalog_coo: Option<String>,
}

fn default_timeout_secs() -> u64 {
    10
}

impl SecondaryConfig {
    /// Resolves relative paths against `base` and fills the default copy paths.
    pub fn resolve(&mut self, base: &Path) {
        let dir = match self.dir.take() {
            Some(dir) if dir.is_relative() => base.join(dir),
            Some(dir) => dir,
            None => base.join("secondary"),
        };
        for zone in self.zone.iter_mut().chain(&mut self.catalog) {
            let file = match zone.file.take() {
                Some(file) if file.is_relative() => base.join(file),
                Some(file) => file,
                None => dir.join(format!("{}.zone", zone.name.trim_end_matches('.'))),
            };
            zone.file = Some(file);
            if let Some(key_file) = zone.key_file.take() {
                zone.key_file = Some(if key_file.is_relative() {
                    base.join(key_file)
                } else {
                    key_file
                });
            }
        }
        self.dir = Some(dir);
    }
}

impl SecondaryZoneConfig {
    /// The secondary zone `member` of this catalog: its primaries, timeout and key, its copy
    /// in `dir`.
    pub fn member(&self, member: &str, dir: &Path) -> SecondaryZoneConfig {
        let name = member.trim_end_matches('.').to_ascii_lowercase();
        SecondaryZoneConfig {
            file: Some(dir.join(format!("{name}.zone"))),
            name,
            primaries: self.primaries.clone(),
            timeout_secs: self.timeout_secs,
            key_file: self.key_file.clone(),
            key: self.key.clone(),
            catalog_groups: Vec::new(),
            catalog_coo: None,
        }
    }

    /// `name` as an absolute domain name (`example.org` → `example.org.`); `None` if it is not
    /// a domain name.
    pub fn origin(&self) -> Option<hickory_proto::rr::Name> {
        let name = &self.name;
        let absolute = if name.ends_with('.') {
            name.to_string()
        } else {
            format!("{name}.")
        };
        hickory_proto::rr::Name::from_ascii(absolute).ok()
    }

    /// The on-disk copy (after [`SecondaryConfig::resolve`]).
    pub fn copy_path(&self) -> PathBuf {
        self.file
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.zone", self.name)))
    }

    /// The marker beside the copy that says the zone is past its SOA expire time
    /// (`<copy>.expired`): written by the secondary task when the primaries stay silent that
    /// long, removed once one answers. While it exists every load answers the zone SERVFAIL
    /// (RFC 1035 §4.3.5: expired data is no longer authoritative); a restart keeps it so.
    pub fn expired_marker(&self) -> PathBuf {
        let mut name = self.copy_path().into_os_string();
        name.push(".expired");
        PathBuf::from(name)
    }
}
