//! `[transfer]`: outgoing zone transfers (AXFR/IXFR out, NOTIFY out; issue 33 items 1-2).
//! Plain data: the TSIG key files, who may transfer each zone (networks and key names, with a
//! default for every zone), the limits, the journal depth and the NOTIFY targets per zone.
//! Reading the key files is the snapshot load's; answering transfers is the server's.
//!
//! Off unless the section is present. When it is, every zone served may be transferred by a
//! client in `allow` (default: anywhere) whose request is signed with one of `keys` (default:
//! every key of `key_files`); unsigned requests only from loopback unless `allow_unsigned`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::Deserialize;

/// `[transfer]` with its `[transfer.zone."<name>"]` tables.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransferConfig {
    /// BIND/Knot key files (`key "name" { algorithm hmac-sha256; secret "..."; };`), mode 0600.
    pub key_files: Vec<PathBuf>,
    /// Networks whose clients may transfer a zone that does not say otherwise.
    pub allow: Vec<IpNet>,
    /// Key names a request may be signed with; unset: every key of `key_files`.
    pub keys: Option<Vec<String>>,
    /// Accept unsigned requests from `allow` beyond loopback (off: TSIG required).
    pub allow_unsigned: bool,
    /// Transfers out at the same time, all clients together; more are refused.
    pub max_concurrent: usize,
    /// Transfers one client address may start per minute; more are refused.
    pub per_client_per_minute: u32,
    /// How many zone versions the IXFR journal keeps per zone (0: no IXFR, always AXFR style).
    pub journal_depth: usize,
    /// How many times a NOTIFY is sent to a target that does not answer (back-off doubling
    /// from `notify_timeout_ms`).
    pub notify_retries: u32,
    /// How long the first NOTIFY waits for its answer.
    pub notify_timeout_ms: u64,
    /// Per-zone rules, by zone name (`example.com`).
    pub zone: BTreeMap<String, TransferZoneConfig>,
    /// The name of a catalog zone (RFC 9432) listing every zone served, produced and served
    /// like a zone (transfers, NOTIFY through its own `[transfer.zone."<name>"]`); unset: none.
    /// A name under `.invalid` (`catalog.invalid`) keeps it out of the public DNS.
    pub catalog: Option<String>,
}

impl Default for TransferConfig {
    fn default() -> Self {
        TransferConfig {
            key_files: Vec::new(),
            allow: vec![
                "0.0.0.0/0".parse().unwrap_or_default(),
                "::/0".parse().unwrap_or_default(),
            ],
            keys: None,
            allow_unsigned: false,
            max_concurrent: 4,
            per_client_per_minute: 60,
            journal_depth: crate::zone::journal::DEFAULT_DEPTH,
            notify_retries: 5,
            notify_timeout_ms: 1000,
            zone: BTreeMap::new(),
            catalog: None,
        }
    }
}

/// One zone's rules; every field unset falls back to the `[transfer]` default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransferZoneConfig {
    pub allow: Option<Vec<IpNet>>,
    pub keys: Option<Vec<String>>,
    pub allow_unsigned: Option<bool>,
    /// Secondaries told of every serial change (RFC 1996).
    pub notify: Vec<NotifyTarget>,
    /// The zone's `group` property in the catalog produced (RFC 9432 4.4.2): a consumer
    /// chooses its settings by it (Knot: the `catalog-template` of that id).
    pub catalog_group: Option<String>,
    /// The zone's `coo` property (change of ownership, RFC 9432 4.4.1): the catalog a consumer
    /// may move the zone to, keeping its data, when that catalog lists it too.
    pub catalog_coo: Option<String>,
}

/// A secondary to NOTIFY.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyTarget {
    /// `address:port` (UDP).
    pub addr: SocketAddr,
    /// The key name the NOTIFY is signed with; unset: unsigned.
    #[serde(default)]
    pub key: Option<String>,
}

impl TransferConfig {
    /// Resolves relative key file paths against `base`.
    pub fn resolve(&mut self, base: &Path) {
        for path in &mut self.key_files {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
    }

    /// The first problem as (field, message), if any.
    pub fn problem(&self) -> Option<(String, String)> {
        if self.max_concurrent == 0 {
            return Some((
                "transfer.max_concurrent".into(),
                "must be at least 1".into(),
            ));
        }
        if self.per_client_per_minute == 0 {
            return Some((
                "transfer.per_client_per_minute".into(),
                "must be at least 1".into(),
            ));
        }
        if self.journal_depth > 10_000 {
            return Some((
                "transfer.journal_depth".into(),
                format!("{} is above 10000", self.journal_depth),
            ));
        }
        if self.notify_retries > 20 || !(10..=60_000).contains(&self.notify_timeout_ms) {
            return Some((
                "transfer.notify_retries / transfer.notify_timeout_ms".into(),
                "need notify_retries <= 20 and notify_timeout_ms in 10..=60000".into(),
            ));
        }
        if let Some(name) = self.catalog.as_ref().filter(|n| !valid_zone_name(n)) {
            return Some((
                "transfer.catalog".into(),
                format!("{name:?} is not a domain name"),
            ));
        }
        for (name, zone) in &self.zone {
            if !valid_zone_name(name) {
                return Some((
                    format!("transfer.zone.{name}"),
                    "is not a domain name".into(),
                ));
            }
            let keys = zone.keys.iter().flatten().chain(self.keys.iter().flatten());
            if let Some(key) = keys.clone().find(|k| k.is_empty()) {
                return Some((
                    format!("transfer.zone.{name}.keys"),
                    format!("{key:?} is empty"),
                ));
            }
            if let Some(group) = zone
                .catalog_group
                .as_ref()
                .filter(|g| g.is_empty() || g.len() > 255)
            {
                return Some((
                    format!("transfer.zone.{name}.catalog_group"),
                    format!("{group:?} must be 1 to 255 bytes (one TXT string)"),
                ));
            }
            if let Some(coo) = zone.catalog_coo.as_ref().filter(|n| !valid_zone_name(n)) {
                return Some((
                    format!("transfer.zone.{name}.catalog_coo"),
                    format!("{coo:?} is not a domain name"),
                ));
            }
            for target in &zone.notify {
                if target.addr.port() == 0 {
                    return Some((
                        format!("transfer.zone.{name}.notify"),
                        format!("{}: port 0", target.addr),
                    ));
                }
            }
        }
        None
    }

    /// The rules of the zone named `name` (`example.com`, any case, final dot or not).
    pub fn zone(&self, name: &str) -> Option<&TransferZoneConfig> {
        let wanted = name.trim_end_matches('.');
        self.zone
            .iter()
            .find(|(n, _)| n.trim_end_matches('.').eq_ignore_ascii_case(wanted))
            .map(|(_, z)| z)
    }
}

fn valid_zone_name(name: &str) -> bool {
    let name = name.trim_end_matches('.');
    !name.is_empty()
        && name.len() <= 253
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.len() <= 63 && !l.contains(char::is_whitespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<crate::config::Config, crate::config::ConfigError> {
        crate::config::Config::parse(text, Path::new("t.toml"))
    }

    #[test]
    fn off_unless_present_and_defaults_when_present() {
        assert!(parse("").expect("empty config").transfer.is_none());
        let config = parse("[transfer]\n").expect("valid");
        let transfer = config.transfer.expect("present");
        assert_eq!(transfer.allow.len(), 2);
        assert!(!transfer.allow_unsigned);
        assert_eq!(transfer.max_concurrent, 4);
    }

    #[test]
    fn zones_notify_targets_and_errors_name_the_field() {
        let config = parse(
            "[transfer]\nkey_files = [\"k.key\"]\n[transfer.zone.\"example.com\"]\n\
             allow = [\"192.0.2.0/24\"]\nnotify = [{ addr = \"192.0.2.1:53\", key = \"k\" }]\n",
        )
        .expect("valid");
        let transfer = config.transfer.expect("present");
        let zone = transfer.zone("Example.COM.").expect("zone");
        assert_eq!(zone.notify[0].key.as_deref(), Some("k"));
        assert_eq!(transfer.key_files[0], Path::new("k.key"));

        let e = parse("[transfer]\nmax_concurrent = 0\n").expect_err("refused");
        assert!(e.to_string().contains("transfer.max_concurrent"), "{e}");
        let e = parse("[transfer.zone.\"example.com\"]\nnotfy = []\n").expect_err("refused");
        assert!(e.to_string().contains("notfy"), "{e}");
        let e = parse("[transfer.zone.\"example.com\"]\nnotify = [{ addr = \"192.0.2.1:0\" }]\n")
            .expect_err("refused");
        assert!(
            e.to_string().contains("transfer.zone.example.com.notify"),
            "{e}"
        );
    }
}
