//! A fleet for tests: a real etcd ([`Etcd`]) and N real `steerdns serve` nodes on loopback, each
//! with its own copy of the bundled example (so each has its own control file: its cache of
//! the fleet's control state) and `[fleet]` pointing at the etcd under a prefix of its own.
//! Nodes can be killed and restarted; every wait polls observable state with a deadline.

#![allow(dead_code)]

use std::process::Output;
use std::time::{Duration, Instant};

use crate::control_common::*;

/// The bundled control file's `critical` weights: frontdoor 100, alt-cdn 0.
pub const SUBNETS: usize = 20;

pub struct Node {
    pub name: String,
    pub setup: Setup,
    pub daemon: Option<Daemon>,
    /// `VAR=value` settings the node's server runs with (e.g. the taster fault drill).
    pub env: Vec<String>,
}

impl Node {
    pub fn daemon(&self) -> &Daemon {
        self.daemon
            .as_ref()
            .unwrap_or_else(|| panic!("node {} is not running", self.name))
    }

    /// Starts (or restarts) the node's server.
    pub fn start(&mut self) {
        self.daemon = None;
        let args = ["--node", self.name.as_str()];
        self.daemon = Some(if self.env.is_empty() {
            self.setup.start_with(&args)
        } else {
            let mut wrapper = vec!["env"];
            wrapper.extend(self.env.iter().map(String::as_str));
            self.setup.start_under_with(&wrapper, &args)
        });
    }

    /// Kills the node's server.
    pub fn kill(&mut self) {
        if let Some(daemon) = self.daemon.take() {
            daemon.stop();
        }
    }

    /// `steerdns <args>` with this node's config (so, in fleet mode, against etcd).
    pub fn cli(&self, args: &[&str]) -> Output {
        match &self.daemon {
            Some(daemon) => daemon.cli(args),
            None => std::process::Command::new(BIN)
                .args(args)
                .arg("--config")
                .arg(&self.setup.config)
                .env("STEERDNS_LOG", "warn")
                .output()
                .expect("run steerdns"),
        }
    }

    pub fn status(&self) -> serde_json::Value {
        self.daemon().status()
    }

    /// `fleet.rollout` of the node's `/v1/status`.
    pub fn rollout(&self) -> serde_json::Value {
        self.status()["fleet"]["rollout"].clone()
    }

    /// The control revision the node serves (0 before it serves one from etcd).
    pub fn revision_served(&self) -> i64 {
        self.status()["fleet"]["revision_served"]
            .as_i64()
            .unwrap_or(0)
    }
}

pub struct Fleet {
    pub etcd: Etcd,
    pub prefix: String,
    pub nodes: Vec<Node>,
}

/// Puts the bundled example's tenants (fabrikam, tailspin) in `setup`'s tenants folder: the
/// node that starts with them seeds the fleet's etcd.
pub fn with_example_tenants(setup: &Setup) {
    let dir = setup.path("tenants");
    std::fs::create_dir_all(&dir).expect("mkdir tenants");
    for tenant in ["fabrikam", "tailspin"] {
        let file = format!("{tenant}.toml");
        std::fs::copy(repo_path(&format!("tenants/{file}")), dir.join(&file))
            .expect("copy the example's tenant");
    }
}

/// The `[fleet]` section for a node of this fleet.
pub fn fleet_section(endpoint: &str, prefix: &str, lease_ttl_secs: u64) -> String {
    format!(
        "[fleet]\netcd = [\"{endpoint}\"]\nprefix = \"{prefix}\"\nlease_ttl_secs = {lease_ttl_secs}\nconverge_timeout_secs = 10\ntimeout_ms = 1000\n"
    )
}

/// The primary and secondary addresses of [`monitored_failover`].
pub const MONITORED_PRIMARY: std::net::Ipv4Addr = std::net::Ipv4Addr::new(192, 0, 2, 101);
pub const MONITORED_SECONDARY: std::net::Ipv4Addr = std::net::Ipv4Addr::new(192, 0, 2, 102);

/// Config text: a failover profile `name` steering `NAME.example.com.`, whose primary is
/// monitored at `url` (every 300 ms, fall 2, rise 2) and whose secondary is always served.
pub fn monitored_failover(name: &str, url: &str) -> String {
    format!(
        "
[profiles.{name}]
type = \"failover\"
ttl = 5
[[profiles.{name}.endpoints]]
name = \"primary\"
addresses = [\"{MONITORED_PRIMARY}\"]
monitor = {{ url = \"{url}\", interval_ms = 300, timeout_ms = 200, fall = 2, rise = 2 }}
[[profiles.{name}.endpoints]]
name = \"secondary\"
addresses = [\"{MONITORED_SECONDARY}\"]

[[steered]]
name = \"{name}.example.com.\"
profile = \"{name}\"
"
    )
}

impl Fleet {
    /// etcd and `n` nodes (ns1..nsN), started one after another; ns1 seeds the fleet.
    pub fn start(label: &str, n: usize, lease_ttl_secs: u64) -> Fleet {
        Fleet::start_on(Etcd::start(), label, n, lease_ttl_secs, "", &[])
    }

    /// Like [`Fleet::start`], on a given etcd (e.g. [`Etcd::start`] or [`Etcd::start_secure`]),
    /// with `extra` appended to every node's `[fleet]` section (e.g. a `[fleet.rollout]` table)
    /// and every node's server run with the `env` settings.
    pub fn start_on(
        etcd: Etcd,
        label: &str,
        n: usize,
        lease_ttl_secs: u64,
        extra: &str,
        env: &[&str],
    ) -> Fleet {
        let mut fleet = Fleet {
            etcd,
            prefix: format!("/steerdns/{label}"),
            nodes: Vec::new(),
        };
        for _ in 0..n {
            fleet.add_node(label, lease_ttl_secs, extra, env);
        }
        fleet
    }

    /// Starts one more node (ns<N+1>), `extra` appended to its `[fleet]` section.
    pub fn add_node(
        &mut self,
        label: &str,
        lease_ttl_secs: u64,
        extra: &str,
        env: &[&str],
    ) -> &Node {
        self.add_prepared_node(label, lease_ttl_secs, extra, env, |_| {})
    }

    /// Like [`Fleet::add_node`], with `prepare` run on the node's copy of the example before
    /// it starts (e.g. to put documents in its tenants folder).
    pub fn add_prepared_node(
        &mut self,
        label: &str,
        lease_ttl_secs: u64,
        extra: &str,
        env: &[&str],
        prepare: impl FnOnce(&Setup),
    ) -> &Node {
        let i = self.nodes.len() + 1;
        let setup = Setup::new(&format!("{label}-ns{i}"));
        prepare(&setup);
        setup.extend_config(&fleet_section(
            &self.etcd.endpoint(),
            &self.prefix,
            lease_ttl_secs,
        ));
        if !extra.is_empty() {
            setup.extend_config(extra);
        }
        let mut node = Node {
            name: format!("ns{i}"),
            setup,
            daemon: None,
            env: env.iter().map(|v| v.to_string()).collect(),
        };
        node.start();
        self.nodes.push(node);
        &self.nodes[i - 1]
    }

    /// Waits until every running node's status says it is connected to etcd and serves
    /// control revision `revision` or later; returns the serials they serve.
    pub fn wait_revision(&self, revision: i64, limit: Duration) -> Vec<u64> {
        let deadline = Instant::now() + limit;
        loop {
            let statuses: Vec<(String, serde_json::Value)> = self
                .nodes
                .iter()
                .filter(|n| n.daemon.is_some())
                .map(|n| (n.name.clone(), n.status()))
                .collect();
            let behind: Vec<String> = statuses
                .iter()
                .filter(|(_, s)| s["fleet"]["revision_served"].as_i64().unwrap_or(0) < revision)
                .map(|(name, s)| format!("{name}: {}", s["fleet"]))
                .collect();
            if behind.is_empty() {
                return statuses
                    .iter()
                    .map(|(_, s)| s["serial"].as_u64().unwrap_or(0))
                    .collect();
            }
            assert!(
                Instant::now() < deadline,
                "not on revision {revision} within {limit:?}: {behind:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// With `[fleet.rollout]`: waits (at most `limit`) until every node is connected and the
    /// coordinator settled the seeded version on every node; returns its revision.
    pub fn wait_settled(&self, limit: Duration) -> i64 {
        self.wait_connected(limit);
        let (revision, _) = self.control_in_etcd();
        crate::control_common::wait_for(
            "every node sees the seeded version settled",
            limit,
            || {
                self.nodes
                    .iter()
                    .all(|n| {
                        let r = n.rollout();
                        r["phase"] == "completed"
                            && r["candidate"] == revision
                            && n.revision_served() == revision
                    })
                    .then_some(())
            },
        );
        revision
    }

    /// Waits until every running node is connected to etcd.
    pub fn wait_connected(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        for node in self.nodes.iter().filter(|n| n.daemon.is_some()) {
            loop {
                let status = node.status();
                if status["fleet"]["connected"] == true {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{} not connected to etcd within {limit:?}: {}",
                    node.name,
                    status["fleet"]
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Waits until every running node answers `critical.example.com` with `target` for every
    /// one of `subnets`.
    pub fn wait_all_target(&self, subnets: &[String], target: &str, limit: Duration) {
        let started = Instant::now();
        for node in self.nodes.iter().filter(|n| n.daemon.is_some()) {
            let mut resolver = Resolver::new(node.daemon().dns);
            let left = limit.saturating_sub(started.elapsed());
            wait_all_target(&mut resolver, subnets, target, Instant::now(), left);
        }
    }

    /// The fleet's control revision and text in etcd (via etcdctl).
    pub fn control_in_etcd(&self) -> (i64, String) {
        let key = format!("{}/control", self.prefix);
        let json = self.etcd.etcdctl(&["get", &key, "-w", "json"]);
        let value: serde_json::Value = serde_json::from_str(&json).expect("etcdctl json");
        let kv = &value["kvs"][0];
        let revision = kv["mod_revision"].as_i64().expect("mod_revision");
        let text = kv["value"].as_str().expect("value");
        (revision, decode_base64(text))
    }
}

/// etcdctl's JSON output encodes values in base64.
pub fn decode_base64(text: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for b in text.bytes().filter(|&b| b != b'=') {
        let v = ALPHABET.iter().position(|&a| a == b).expect("base64") as u32;
        bits = (bits << 6) | v;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    String::from_utf8(out).expect("utf-8 value")
}
