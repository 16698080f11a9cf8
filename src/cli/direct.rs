//! Break-glass when etcd is down (`--direct` on `weight set`, `drain`, `undrain`, `control
//! rollback` and `gate`): the CLI sends the change to every node's admin endpoint itself, with
//! the fleet's admin token, and each node serves it as a local override until etcd has it
//! (see `steerdns::fleet::direct`). Also `control override drop` and `fleet status` without
//! etcd.
//!
//! The nodes come from `[fleet] direct` if the config lists them, else from the registry the
//! local node last saw in etcd (asked over its admin endpoint, else read from its file). The
//! change is built on the newest version any reached node serves, screened here with this
//! config's safety rules, numbered one above every serial served, and sent whole, the same
//! text to every node, so that etcd ends up with one version when it is back.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use super::http::request;
use steerdns::change::{screen, ChangeError};
use steerdns::config::Config;
use steerdns::control::edit::{set_serial, EditError};
use steerdns::fleet::direct::{DirectRequest, KnownNode, NodeDirectView};

use super::safety::{print_overridden, print_refusal, OverrideArgs};
use super::Target;

/// `--direct`.
#[derive(clap::Args, Clone, Default, Debug)]
pub struct DirectArgs {
    /// Fleet break-glass when etcd is down: send the change straight to every node's admin
    /// endpoint (`[fleet] direct`, else the registry this node last saw); each serves it as a
    /// local override until etcd is back, then it is written there as a normal version.
    #[arg(long)]
    pub direct: bool,
}
/// A node to reach: its admin address and, when known, its name.
#[derive(Debug, Clone)]
struct Endpoint {
    name: Option<String>,
    addr: String,
}

impl Endpoint {
    fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("{name} ({})", self.addr),
            None => self.addr.clone(),
        }
    }
}

/// `http://host:port` or `host:port`, as the config or the registry names an admin endpoint.
pub(super) fn address_of(text: &str) -> String {
    let bare = text
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches('/');
    bare.to_string()
}

fn fetch_view(addr: &str) -> Result<NodeDirectView> {
    let response = request(addr, "GET", "/v1/fleet/direct", None, b"")?;
    if response.status != 200 {
        bail!("HTTP {}: {}", response.status, response.body.trim());
    }
    serde_json::from_str(&response.body).context("not the expected JSON")
}

/// The nodes `--direct` reaches (see the module doc).
fn endpoints(target: &Target, config: &Config) -> Result<Vec<Endpoint>> {
    let fleet = super::fleet::fleet_of(config)?;
    if !fleet.direct.is_empty() {
        return Ok(fleet
            .direct
            .iter()
            .map(|a| Endpoint {
                name: None,
                addr: address_of(a),
            })
            .collect());
    }
    let local = target.admin_addr(config).to_string();
    let known: Vec<KnownNode> = match fetch_view(&local) {
        Ok(view) => view.known,
        Err(e) => {
            let file = steerdns::fleet::direct::paths(config).map(|p| p.nodes_file);
            let from_file = file
                .as_deref()
                .and_then(steerdns::fleet::direct::load_json::<Vec<KnownNode>>);
            match (from_file, file) {
                (Some(known), _) => {
                    eprintln!(
                        "the local node at {local} did not answer ({}); using its saved registry",
                        super::report(&e)
                    );
                    known
                }
                (None, file) => bail!(
                    "no nodes to reach: [fleet] direct lists none, the local node at {local} did not answer ({}) and {} holds no saved registry; nothing was changed",
                    super::report(&e),
                    file.map_or("no file".to_string(), |f| f.display().to_string())
                ),
            }
        }
    };
    if known.is_empty() {
        bail!("no nodes to reach: the local node knows no registry yet (it has not seen etcd) and [fleet] direct lists none; nothing was changed");
    }
    Ok(known
        .into_iter()
        .map(|k| Endpoint {
            name: Some(k.name),
            addr: address_of(&k.admin),
        })
        .collect())
}

/// Asks every endpoint at once.
fn each<T: Send>(endpoints: &[Endpoint], ask: impl Fn(&Endpoint) -> T + Sync) -> Vec<T> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = endpoints.iter().map(|e| scope.spawn(|| ask(e))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}

/// `weight set|drain|undrain|gate … --direct`: `edit` applied to the newest version any
/// reached node serves.
pub(super) fn edit(
    target: &Target,
    what: &str,
    overrides: &OverrideArgs,
    edit: impl Fn(&str) -> Result<String, EditError>,
) -> Result<ExitCode> {
    let config = target.config()?;
    let requests = overrides.requests()?;
    let endpoints = endpoints(target, &config)?;
    let views = each(&endpoints, |e| fetch_view(&e.addr));
    let reached: Vec<&NodeDirectView> = views.iter().filter_map(|v| v.as_ref().ok()).collect();
    let Some(base) = reached.iter().max_by_key(|v| v.serial) else {
        println!("no node reached, nothing was changed ({what}):");
        for (e, v) in endpoints.iter().zip(&views) {
            if let Err(err) = v {
                println!("  {}: unreachable ({})", e.label(), super::report(err));
            }
        }
        return Ok(ExitCode::FAILURE);
    };
    let edited = edit(&base.text)?;
    let by = steerdns::fleet::store::who();
    let recent = steerdns::change::history(&config)
        .map(|h| steerdns::safety::recent_from_history(&h, steerdns::safety::RECENT_VERSIONS))
        .unwrap_or_default();
    let screened = match screen(&config, &base.text, &edited, &recent, &requests, &by) {
        Ok(screened) => screened,
        Err(ChangeError::Refused(violations)) => {
            print_refusal(
                &format!("the version {} serves", base.node),
                what,
                &violations,
            );
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => bail!("{e}"),
    };
    print_overridden(&screened.overridden, &screened.unused);
    let serial = steerdns::control::store::next_serial_above(
        reached
            .iter()
            .map(|v| v.serial.max(steerdns::fleet::store::serial_of(&v.text))),
    );
    let text = set_serial(&screened.text, serial).map_err(|e| anyhow::anyhow!("{e}"))?;
    let body = serde_json::to_vec(&DirectRequest {
        text,
        base_revision: reached.iter().map(|v| v.revision).max().unwrap_or(0),
        by: by.clone(),
        what: what.to_string(),
        overrides: requests,
    })?;
    let token = steerdns::admin::read_token(config.admin.token_file.as_ref())
        .map_err(|e| anyhow::anyhow!("{e}; nothing was changed"))?;
    println!(
        "{what}: serial {serial} sent straight to {} node(s), bypassing etcd:",
        endpoints.len()
    );
    let outcomes = each(&endpoints, |e| {
        request(&e.addr, "POST", "/v1/fleet/override", Some(&token), &body)
    });
    let mut serving = 0;
    for ((endpoint, view), outcome) in endpoints.iter().zip(&views).zip(outcomes) {
        let name = match view {
            Ok(v) => Endpoint {
                name: Some(v.node.clone()),
                ..endpoint.clone()
            }
            .label(),
            Err(_) => endpoint.label(),
        };
        match outcome {
            Ok(r) if r.status == 200 => {
                let served: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
                serving += 1;
                println!(
                    "  {name}: reached, serves serial {} (local override)",
                    served["serial"]
                );
            }
            Ok(r) => {
                let body: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
                let reason = body["refused"]
                    .as_str()
                    .or(body["error"].as_str())
                    .map_or_else(|| r.body.trim().to_string(), str::to_string);
                println!("  {name}: REFUSED ({reason})");
            }
            Err(e) => println!("  {name}: UNREACHABLE ({})", super::report(&e)),
        }
    }
    if serving == endpoints.len() {
        println!(
            "all {serving} node(s) serve serial {serial} as a local override; it is written to etcd as a normal version when etcd is back"
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "warning: {} of {} node(s) do not serve serial {serial}",
        endpoints.len() - serving,
        endpoints.len()
    );
    Ok(ExitCode::FAILURE)
}

/// `control rollback [VERSION] --direct`: a version from this node's own history (etcd's is
/// out of reach); default the one before the serial served.
pub fn rollback(
    target: &Target,
    version: Option<u64>,
    overrides: &OverrideArgs,
) -> Result<ExitCode> {
    let config = target.config()?;
    let history = steerdns::change::history(&config)?;
    let versions = history.list().map_err(|e| anyhow::anyhow!("{e}"))?;
    let serial = match version {
        Some(v) => v,
        None => {
            let served = fetch_view(&target.admin_addr(&config).to_string())
                .map(|v| v.serial)
                .ok();
            let before = match served {
                Some(served) => versions.iter().rev().find(|v| v.serial < served),
                None => versions.iter().rev().nth(1),
            };
            before
                .map(|v| v.serial)
                .context("no previous version in this node's history to roll back to")?
        }
    };
    let (_, text) = history
        .get(serial)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .with_context(|| {
            format!(
                "version {serial} is not in this node's history ({})",
                history.dir().display()
            )
        })?;
    edit(target, &format!("rollback to {serial}"), overrides, |_| {
        Ok(text.clone())
    })
}

/// `control override drop`: every node forgets its local override and serves the fleet's
/// version (etcd's newest, else the one the override replaced).
pub fn drop_override(target: &Target) -> Result<ExitCode> {
    let config = target.config()?;
    let endpoints = endpoints(target, &config)?;
    let token = steerdns::admin::read_token(config.admin.token_file.as_ref())
        .map_err(|e| anyhow::anyhow!("{e}; nothing was changed"))?;
    let outcomes = each(&endpoints, |e| {
        request(
            &e.addr,
            "POST",
            "/v1/fleet/override/drop",
            Some(&token),
            b"",
        )
    });
    let mut ok = true;
    for (endpoint, outcome) in endpoints.iter().zip(outcomes) {
        let name = endpoint.label();
        match outcome {
            Ok(r) => {
                let body: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
                match (r.status, body["dropped"].as_bool()) {
                    (200, Some(true)) => {
                        println!(
                            "  {name}: override dropped, serves serial {}",
                            body["serial"]
                        )
                    }
                    (200, _) => {
                        println!("  {name}: no override (serves serial {})", body["serial"])
                    }
                    _ => {
                        ok = false;
                        println!("  {name}: FAILED ({})", r.body.trim());
                    }
                }
            }
            Err(e) => {
                ok = false;
                println!("  {name}: UNREACHABLE ({})", super::report(&e));
            }
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `fleet status`: from etcd; when etcd is out of reach (or with `--direct`), from the nodes.
pub fn fleet_status(target: &Target, json: bool, direct: bool) -> Result<ExitCode> {
    let config = target.config()?;
    let fleet = super::fleet::fleet_of(&config)?;
    if !direct {
        let reachable = super::fleet::runtime()?.block_on(super::fleet::connect(fleet));
        match reachable {
            Ok(_) => return super::fleet::status(&config, json),
            Err(e) => eprintln!("{}; asking the nodes directly", super::report(&e)),
        }
    }
    let endpoints = endpoints(target, &config)?;
    let views = each(&endpoints, |e| fetch_view(&e.addr));
    if json {
        let list: Vec<serde_json::Value> = endpoints
            .iter()
            .zip(&views)
            .map(|(e, v)| match v {
                Ok(view) => serde_json::json!({ "admin": e.addr, "reached": true, "node": view.node, "serial": view.serial, "revision": view.revision, "connected": view.connected, "local_override": view.local_override }),
                Err(err) => serde_json::json!({ "admin": e.addr, "reached": false, "error": super::report(err) }),
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "direct": true, "nodes": list }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "fleet {} asked directly ({} node(s), not through etcd):",
        fleet.prefix,
        endpoints.len()
    );
    for (endpoint, view) in endpoints.iter().zip(&views) {
        match view {
            Ok(v) => println!(
                "  {:<12} serial {:<6} rev {:<6} etcd link {} admin {}{}",
                v.node,
                v.serial,
                v.revision,
                if v.connected { "up" } else { "DOWN" },
                endpoint.addr,
                v.local_override
                    .as_ref()
                    .map(|o| format!("; {}", super::override_line(o)))
                    .unwrap_or_default()
            ),
            Err(e) => println!(
                "  {:<12} UNREACHABLE ({})",
                endpoint.label(),
                super::report(e)
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}
