//! `[fleet]`: where a fleet of nameservers keeps its shared control state (etcd), and who this
//! node is, and how a change is rolled out over the fleet (`[fleet.rollout]`, a
//! [`crate::rollout::Plan`]). Pure data; the etcd work lives in `crate::fleet`.

use std::path::PathBuf;

use serde::Deserialize;

/// `[fleet]` in the config file. Absent: single-node mode, the control file is the only source.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// etcd endpoints, e.g. `["http://10.0.0.1:2379", "http://10.0.0.2:2379"]` (`https://`
    /// with `ca_file` for TLS).
    pub etcd: Vec<String>,
    /// Every key of this fleet lives under this prefix, e.g. `/steerdns/prod`.
    pub prefix: String,
    /// This node's name in the registry (`steerdns serve --node NAME` overrides it). Default:
    /// the NSID if set, else the host name.
    #[serde(default)]
    pub node: Option<String>,
    /// Seconds a dead node's registry entry lingers (its etcd lease TTL).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl_secs: u64,
    /// Fleet control versions kept in etcd for history/rollback (default: `[control]
    /// history_keep`).
    #[serde(default)]
    pub history_keep: Option<usize>,
    /// How long `weight set`, `drain` and `rollback` wait for every live node to serve a change.
    #[serde(default = "default_converge_timeout")]
    pub converge_timeout_secs: u64,
    /// Milliseconds to wait for a connection to etcd, and for each request.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// etcd user (etcd's auth); the password comes from `password_file`.
    #[serde(default)]
    pub user: Option<String>,
    /// File holding the etcd password (first line; relative to the config file).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// PEM CA bundle that signed the etcd servers' certificates (turns TLS on).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate and key, for etcd clusters with `--client-cert-auth`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// TLS server name to verify, when the endpoints are IP addresses not in the certificate.
    #[serde(default)]
    pub tls_server_name: Option<String>,
    /// With `[fleet.rollout]`: where this node keeps its config/zone/GeoIP bundles (the one it
    /// serves, the last known good, the one waiting for its wave), relative to the config
    /// file. Default: `<control file>.bundles`, beside the control file's history.
    #[serde(default)]
    pub bundle_dir: Option<PathBuf>,
    /// `[fleet.rollout]`: staged rollout of every change (waves, bake time, gates, probes).
    /// Absent: every node serves the newest version as soon as it has tasted it.
    #[serde(default)]
    pub rollout: Option<crate::rollout::Plan>,
    /// This node's site (PoP) label, e.g. `"ams"`: the probers of a health target are taken
    /// from different sites where the fleet has them (`[fleet.health]`).
    #[serde(default)]
    pub site: Option<String>,
    /// `[fleet.health]`: how the fleet shares health probing.
    #[serde(default)]
    pub health: HealthSharing,
    /// Every node's admin endpoint (`"http://10.0.0.1:8053"` or `"10.0.0.1:8053"`), for
    /// break-glass with `--direct` when etcd is down. Empty (default): the registry the local
    /// node last saw in etcd.
    #[serde(default)]
    pub direct: Vec<String>,
}

/// `[fleet.health]`: each monitored target is probed by `probers` nodes of the fleet (chosen
/// from the live ones, from different sites where possible), which publish their results in
/// etcd; every node serves the quorum of those results.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HealthSharing {
    /// Nodes that probe each target (default 2; 0: no sharing, every node probes every target
    /// itself and serves what it sees).
    #[serde(default = "default_probers")]
    pub probers: usize,
}

/// Most probers per target.
pub const MAX_PROBERS: usize = 16;

fn default_probers() -> usize {
    2
}

impl Default for HealthSharing {
    fn default() -> Self {
        HealthSharing {
            probers: default_probers(),
        }
    }
}

fn default_lease_ttl() -> u64 {
    10
}

fn default_converge_timeout() -> u64 {
    10
}

fn default_timeout_ms() -> u64 {
    2000
}

impl FleetConfig {
    /// Problems with the section, as `fleet.FIELD: message`.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.etcd.is_empty() {
            problems.push("fleet.etcd: at least one etcd endpoint is needed".to_string());
        }
        for endpoint in &self.etcd {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                problems.push(format!(
                    "fleet.etcd: {endpoint:?} must start with http:// or https://"
                ));
            }
        }
        if !self.prefix.starts_with('/') || self.prefix.len() < 2 || self.prefix.ends_with('/') {
            problems.push(format!(
                "fleet.prefix: {:?} must start with '/', name something, and not end with '/' (e.g. \"/steerdns/prod\")",
                self.prefix
            ));
        }
        if let Some(node) = &self.node {
            if let Some(problem) = node_name_problem(node) {
                problems.push(format!("fleet.node: {problem}"));
            }
        }
        if !(2..=3600).contains(&self.lease_ttl_secs) {
            problems.push(format!(
                "fleet.lease_ttl_secs: {} is outside 2..=3600",
                self.lease_ttl_secs
            ));
        }
        if self.timeout_ms == 0 {
            problems.push("fleet.timeout_ms: must be above 0".to_string());
        }
        if self.cert_file.is_some() != self.key_file.is_some() {
            problems.push("fleet.cert_file and fleet.key_file: set both or neither".to_string());
        }
        if self.user.is_some() != self.password_file.is_some() {
            problems.push("fleet.user and fleet.password_file: set both or neither".to_string());
        }
        if let Some(site) = &self.site {
            if let Some(problem) = node_name_problem(site) {
                problems.push(format!("fleet.site: {problem}"));
            }
        }
        if self.health.probers > MAX_PROBERS {
            problems.push(format!(
                "fleet.health.probers: {} is above {MAX_PROBERS}",
                self.health.probers
            ));
        }
        if let Some(plan) = &self.rollout {
            problems.extend(plan.problems().iter().map(|p| format!("fleet.rollout.{p}")));
        }
        problems
    }
}

/// Why `name` cannot be a node name (it becomes part of an etcd key), if it cannot.
pub fn node_name_problem(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > 63 {
        return Some(format!("{name:?} must be 1 to 63 characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Some(format!(
            "{name:?} may hold only letters, digits, '-', '_' and '.'"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<FleetConfig, String> {
        toml::from_str::<FleetConfig>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_problems() {
        let ok = parse("etcd = [\"http://127.0.0.1:2379\"]\nprefix = \"/steerdns/prod\"\n")
            .expect("minimal section");
        assert_eq!(ok.lease_ttl_secs, 10);
        assert_eq!(ok.health.probers, 2);
        assert_eq!(ok.site, None);
        assert!(ok.problems().is_empty(), "{:?}", ok.problems());
        let bad = parse(
            "etcd = [\"127.0.0.1:2379\"]\nprefix = \"steerdns/\"\nnode = \"ns 1\"\nlease_ttl_secs = 1\nuser = \"u\"\nsite = \"a/b\"\n[health]\nprobers = 17\n",
        )
        .expect("parses");
        let problems = bad.problems().join("\n");
        for field in [
            "fleet.etcd",
            "fleet.prefix",
            "fleet.node",
            "fleet.lease_ttl_secs",
            "fleet.user",
            "fleet.site",
            "fleet.health.probers",
        ] {
            assert!(problems.contains(field), "{field} not in:\n{problems}");
        }
        let staged = parse(
            "etcd = [\"http://127.0.0.1:2379\"]\nprefix = \"/p\"\n[rollout]\nwaves = [[\"ns1\"], [\"ns2\", \"ns1\"]]\nbake_secs = 5\nprobes = [\"critical.example.com BOGUS\"]\n",
        )
        .expect("parses");
        let problems = staged.problems().join("\n");
        assert!(
            problems.contains("fleet.rollout.waves: node ns1"),
            "{problems}"
        );
        assert!(problems.contains("fleet.rollout.probes"), "{problems}");
        assert_eq!(staged.rollout.map(|p| p.bake_secs), Some(5));
        assert!(parse("etcd = []\nprefix = \"/p\"\n[rollout]\nbake = 1\n")
            .unwrap_err()
            .contains("bake"));
        assert!(parse("etcd = []\nprefix = \"/p\"\ncolour = 1\n")
            .unwrap_err()
            .contains("colour"));
    }
}
