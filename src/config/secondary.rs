//! `[secondary]`: zones this server pulls from a primary by zone transfer (issue 33 item 4).
//! Plain data; the transfer task itself lives in `crate::secondary`.

use std::collections::BTreeMap;
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
    /// For a catalog: settings for the members of a group (RFC 9432 4.4.2), by group name;
    /// a member takes those of the first of its groups (in name order) listed here, the
    /// catalog's own otherwise. Refused on a `[[secondary.zone]]`.
    #[serde(default)]
    pub group: BTreeMap<String, GroupSettings>,
    /// For a member of a consumed catalog: its `group` properties (RFC 9432 4.4.2).
    #[serde(skip)]
    pub catalog_groups: Vec<String>,
    /// For a member of a consumed catalog: the catalog named by its `coo` property (RFC 9432
    /// 4.4.1), which may take the member over.
    #[serde(skip)]
    pub catalog_coo: Option<String>,
}

/// What a catalog's member group sets for its members instead of the catalog's own.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSettings {
    #[serde(default)]
    pub primaries: Option<Vec<SocketAddr>>,
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    #[serde(default)]
    pub key: Option<String>,
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
            let absolute = |path: PathBuf| {
                if path.is_relative() {
                    base.join(path)
                } else {
                    path
                }
            };
            zone.key_file = zone.key_file.take().map(absolute);
            for settings in zone.group.values_mut() {
                settings.key_file = settings.key_file.take().map(absolute);
            }
        }
        self.dir = Some(dir);
    }

    /// The first problem as (field, message), if any.
    pub fn problem(&self) -> Option<(String, String)> {
        let zone = self.zone.iter().find(|z| !z.group.is_empty())?;
        Some((
            format!("secondary.zone {:?}: group", zone.name),
            "member groups are a catalog's ([[secondary.catalog]])".into(),
        ))
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
            group: BTreeMap::new(),
            catalog_groups: Vec::new(),
            catalog_coo: None,
        }
    }

    /// The member `member` of this catalog in `groups` (its group properties): the
    /// settings of the first group configured here, over [`SecondaryZoneConfig::member`]'s.
    pub fn member_in(&self, member: &str, dir: &Path, groups: Vec<String>) -> SecondaryZoneConfig {
        let mut zone = self.member(member, dir);
        if let Some(settings) = groups.iter().find_map(|g| self.group.get(g)) {
            if let Some(primaries) = &settings.primaries {
                zone.primaries = primaries.clone();
            }
            zone.timeout_secs = settings.timeout_secs.unwrap_or(zone.timeout_secs);
            if settings.key_file.is_some() {
                zone.key_file = settings.key_file.clone();
                zone.key = settings.key.clone();
            }
        }
        zone.catalog_groups = groups;
        zone
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
