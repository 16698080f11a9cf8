//! `steerdns drill list` and `drill run NAME`: the configured practice drills, and one run now
//! against the running server (see `steerdns::drill`), its measured times printed in ms. In
//! fleet mode the drill's change and revert go through the fleet's edit path
//! (`safety::fleet_edit`: the safety rules, the compare-and-swap in etcd, the rollout), and a
//! write counts as served when every registered node's admin endpoint says it serves it.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use steerdns::change::OverrideRequest;
use steerdns::config::Config;
use steerdns::control::edit::EditError;
use steerdns::drill::{run, run_with, Endpoints, WriteFailure, Writer};

use super::safety::{fleet_edit_refused, OverrideArgs};
use super::{fleet, Target};

/// One line per drill, its name first.
pub fn list(target: &Target) -> Result<ExitCode> {
    let config = target.config()?;
    if config.drills.is_empty() {
        println!("no drills configured ([[drills]] in the config)");
    }
    for d in &config.drills {
        let what = match d.action {
            steerdns::config::drill::DrillAction::Shift => format!(
                "shift {}% of {} from {} to {}",
                d.share.unwrap_or(0),
                d.profile.as_deref().unwrap_or("?"),
                d.from.as_deref().unwrap_or("?"),
                d.to.as_deref().unwrap_or("?")
            ),
            steerdns::config::drill::DrillAction::Drain => {
                format!("drain {}", d.region.as_deref().unwrap_or("?"))
            }
            steerdns::config::drill::DrillAction::Fallback => format!(
                "force {} to fallback:{}",
                d.region.as_deref().unwrap_or("?"),
                d.site.as_deref().unwrap_or("?")
            ),
        };
        let every = d
            .every_secs
            .map_or("on demand".to_string(), |e| format!("every {e} s"));
        println!(
            "{}  {what} for {} s; {} sample subnets asking {} {}; {every}",
            d.name,
            d.duration_secs,
            d.subnets.len(),
            d.query,
            d.qtype
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs drill `name` now; `dns`: the server's DNS address (default: the config's first listen
/// address, through loopback if it is unspecified).
pub fn run_now(target: &Target, name: &str, dns: Option<SocketAddr>) -> Result<ExitCode> {
    let config = target.config()?;
    let dns = match dns {
        Some(dns) => dns,
        None => {
            let mut addr = *config
                .server
                .listen
                .first()
                .context("no [server] listen address; give --dns ADDR")?;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            addr
        }
    };
    let at = Endpoints {
        admin: target.admin.unwrap_or(config.admin.listen),
        dns,
    };
    let trigger = format!("drill run by {}", steerdns::fleet::store::who());
    let mut print = |line: &str| println!("{line}");
    let record = if config.fleet.is_some() {
        let mut writer = FleetWriter {
            config: &config,
            written: None,
        };
        run_with(&config, name, at, &trigger, &mut writer, &mut print)
    } else {
        run(&config, name, at, &trigger, &mut print)
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} ms"));
    let everywhere = match record.nodes.len() {
        0 => String::new(),
        n => format!(" on every node ({n}: {})", record.nodes.join(" ")),
    };
    println!(
        "drill {}: {} — change to served {}, revert to served {}{everywhere}, held {}, {} checks of {} subnets{}",
        record.drill,
        record.result.to_uppercase(),
        ms(record.change_to_served_ms),
        ms(record.revert_to_served_ms),
        ms(record.held_ms),
        record.checks,
        record.subnets,
        record
            .reason
            .as_ref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    Ok(if record.result == "passed" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The fleet's control state in etcd, written the way `weight set` writes it in fleet mode.
struct FleetWriter<'a> {
    config: &'a Config,
    /// The control revision of the last write (etcd's `mod_revision`).
    written: Option<i64>,
}

impl FleetWriter<'_> {
    fn control(&self) -> Result<steerdns::fleet::store::Control, String> {
        let fleet = fleet::fleet_of(self.config).map_err(|e| format!("{e:#}"))?;
        let read = fleet::runtime()
            .map_err(|e| format!("{e:#}"))?
            .block_on(async {
                let (mut client, keys) = fleet::connect(fleet).await?;
                steerdns::fleet::store::get_control(&mut client, &keys)
                    .await
                    .map_err(|e| fleet::failed(fleet, "reading the fleet's control state", &e))
            });
        read.map_err(|e| format!("{e:#}"))?
            .ok_or_else(|| format!("no fleet control state under {}", fleet.prefix))
    }

    /// The revision of this CLI's write `what` if the fleet's history has it above `serial`.
    fn landed(&self, what: &str, serial: u64) -> Option<i64> {
        let fleet = fleet::fleet_of(self.config).ok()?;
        let source = format!("{what} by {}", steerdns::fleet::store::who());
        let versions = fleet::runtime().ok()?.block_on(async {
            let (mut client, keys) = fleet::connect(fleet).await.ok()?;
            steerdns::fleet::store::history(&mut client, &keys)
                .await
                .ok()
        })?;
        versions
            .records
            .into_iter()
            .rev()
            .find(|v| v.serial > serial && v.source == source)
            .map(|v| v.revision)
    }

    /// The registered nodes: name and admin address.
    fn nodes(&self) -> Result<Vec<(String, String)>, String> {
        let fleet = fleet::fleet_of(self.config).map_err(|e| format!("{e:#}"))?;
        let listed = fleet::runtime()
            .map_err(|e| format!("{e:#}"))?
            .block_on(async {
                let (mut client, keys) = fleet::connect(fleet).await?;
                steerdns::fleet::store::nodes(&mut client, &keys)
                    .await
                    .map_err(|e| fleet::failed(fleet, "listing the fleet's nodes", &e))
            });
        let listed = listed.map_err(|e| format!("{e:#}"))?;
        Ok(listed
            .records
            .into_iter()
            .map(|n| (n.name, super::direct::address_of(&n.admin)))
            .collect())
    }
}

/// The control revision a node's admin endpoint says it serves.
fn revision_served(addr: &str) -> Result<i64, String> {
    let response =
        super::http::request(addr, "GET", "/v1/status", None, b"").map_err(|e| format!("{e:#}"))?;
    if response.status != 200 {
        return Err(format!("HTTP {}", response.status));
    }
    let status: serde_json::Value =
        serde_json::from_str(&response.body).map_err(|e| format!("/v1/status: {e}"))?;
    Ok(status["fleet"]["revision_served"].as_i64().unwrap_or(0))
}

impl Writer for FleetWriter<'_> {
    fn place(&self) -> String {
        let prefix = self.config.fleet.as_ref().map_or("", |f| f.prefix.as_str());
        format!("the fleet's control state ({prefix})")
    }

    fn current(&mut self) -> Result<String, String> {
        Ok(self.control()?.text)
    }

    fn write(
        &mut self,
        what: &str,
        _by: &str,
        overrides: &[OverrideRequest],
        edit: &dyn Fn(&str) -> Result<String, EditError>,
    ) -> Result<(), WriteFailure> {
        let args = OverrideArgs {
            rules: overrides.iter().map(|o| o.rule.clone()).collect(),
            reason: overrides.first().map(|o| o.reason.clone()),
        };
        let before = self.control().map_err(WriteFailure::Failed)?.serial;
        let (code, refused) = fleet_edit_refused(self.config, what, false, &args, edit);
        if matches!(code, Ok(ExitCode::SUCCESS)) {
            self.written = Some(self.control().map_err(WriteFailure::Failed)?.revision);
            return Ok(());
        }
        if let Some(violations) = refused {
            let refusal = steerdns::change::ChangeError::Refused(violations);
            return Err(WriteFailure::Refused(format!("{what}: {refusal}")));
        }
        // Refused (nothing written), or written but not followed by every node (a lagging
        // node, a halted rollout): then it counts as written, so that the drill reverts it.
        if let Some(revision) = self.landed(what, before) {
            self.written = Some(revision);
            return Ok(());
        }
        Err(match code {
            Err(e) => WriteFailure::Failed(format!("{e:#}")),
            Ok(_) => {
                WriteFailure::Refused(format!("{what}: refused, nothing written (said above)"))
            }
        })
    }

    fn wait_every_node(&mut self, limit: Duration) -> Result<Vec<String>, String> {
        let revision = self.written.ok_or("nothing written yet")?;
        let nodes = self.nodes()?;
        if nodes.is_empty() {
            return Err("no live nodes registered in etcd".into());
        }
        let started = Instant::now();
        loop {
            let behind: Vec<String> = nodes
                .iter()
                .filter_map(|(name, addr)| match revision_served(addr) {
                    Ok(served) if served >= revision => None,
                    Ok(served) => Some(format!("{name} ({addr}) serves revision {served}")),
                    Err(e) => Some(format!("{name} ({addr}): {e}")),
                })
                .collect();
            if behind.is_empty() {
                return Ok(nodes.into_iter().map(|(name, _)| name).collect());
            }
            if started.elapsed() >= limit {
                return Err(format!(
                    "not every node serves revision {revision} within {limit:?}: {}",
                    behind.join("; ")
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
