//! Operator commands that change or inspect a running system: weights, drains, control history
//! and rollback, status, reload. Every change to the control file is tasted with the same
//! loader the server uses before it is written (atomically), then the command reports what the
//! server serves.

pub mod args;
pub mod commands;
pub mod direct;
pub mod dnssec;
pub mod drill;
pub mod fleet;
mod http;
mod report;
pub mod rollout;
pub mod safety;
pub mod serve;
pub mod tenant;

pub use report::report;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use steerdns::admin::{read_token, StatusView};
use steerdns::change::ChangeError;
use steerdns::config::Config;
use steerdns::control::edit::{parse_assignment, Edit, EditError};
use steerdns::control::history::History;
use steerdns::control::store::{ControlStore, FileStore, StoreError, CONTROL};
use steerdns::control::summarize;
use steerdns::control::ControlFile;
use steerdns::fleet::control_store::EtcdStore;
use steerdns::reload::Source;
use steerdns::snapshot::load::{load_with, ControlSource};

/// How long a command waits for the server to pick up a change it wrote.
const CONVERGE_WAIT: Duration = Duration::from_secs(3);

/// Shared options of the operator commands.
#[derive(clap::Args, Clone, Default)]
pub struct Target {
    /// Config file (TOML). Default: ./steerdns.toml if it exists.
    #[arg(long, short, global = true)]
    pub config: Option<PathBuf>,
    /// Admin endpoint of the running server; default: [admin] listen from the config.
    #[arg(long, value_name = "ADDR", global = true)]
    pub admin: Option<SocketAddr>,
}

impl Target {
    pub fn config(&self) -> Result<Config> {
        let source = Source {
            config: self.config.clone(),
            ..Source::default()
        };
        source.read_config().map_err(anyhow::Error::msg)
    }

    pub(crate) fn admin_addr(&self, config: &Config) -> SocketAddr {
        self.admin.unwrap_or(config.admin.listen)
    }
}

fn control_path(config: &Config) -> Result<PathBuf> {
    config
        .control
        .file
        .clone()
        .context("no control file configured ([control] file in the config)")
}

fn history(config: &Config) -> Result<History> {
    control_path(config)?;
    Ok(steerdns::change::history(config)?)
}

/// One change of the local control file: a [`Edit`] value, or a whole text (a rollback).
enum LocalChange<'a> {
    Edit(&'a Edit),
    Replace { what: String, text: &'a str },
}

impl LocalChange<'_> {
    fn describe(&self) -> String {
        match self {
            LocalChange::Edit(edit) => edit.describe(),
            LocalChange::Replace { what, .. } => what.clone(),
        }
    }

    fn apply(&self, text: &str) -> Result<String, EditError> {
        match self {
            LocalChange::Edit(edit) => edit.apply(text),
            LocalChange::Replace { text, .. } => Ok((*text).to_owned()),
        }
    }
}

/// One CLI change of the control file. When the server that serves this control file answers,
/// the change is sent to it (`POST /v1/control/edit`, or `/v1/control` for a whole text): it
/// tastes the change against what it serves, sharing the zones when their files are unchanged,
/// writes and serves it, so a break-glass flip costs the policies, not two loads of every
/// zone. Otherwise the CLI makes it in-process through [`steerdns::change::edit_file`] (lock,
/// safety rules, serial, a whole load, compare-before-replace). Then it reports what the
/// server serves. A refusal by a safety rule is counted by the running server either way.
fn edit_control(
    target: &Target,
    config: &Config,
    change: LocalChange<'_>,
    overrides: &safety::OverrideArgs,
) -> Result<ExitCode> {
    let requests = overrides.requests()?;
    let by = steerdns::fleet::store::who();
    if let Some(token) = server_of_this_file(target, config) {
        match ask_server(target, config, &change, &requests, &by, &token) {
            Asked::Done(code) => return code,
            Asked::NotServed(why) => tracing::debug!("editing in-process: {why}"),
        }
    }
    let what = change.describe();
    let path = control_path(config)?;
    let floor = serial_floor(target, config);
    let edit = |text: &str| change.apply(text);
    match steerdns::change::edit_file(config, floor, None, &requests, &by, edit) {
        Ok(written) => {
            safety::print_overridden(&written.overridden, &written.unused);
            println!("wrote {}: {}", written.path.display(), written.summary);
            report_convergence(target, config, &written.text);
            Ok(ExitCode::SUCCESS)
        }
        Err(ChangeError::Refused(violations)) => {
            safety::print_refusal(&path.display().to_string(), &what, &violations);
            safety::report_refusal(config, target.admin_addr(config), &violations);
            Ok(ExitCode::FAILURE)
        }
        Err(ChangeError::Invalid(problems)) => {
            print_invalid(&what, &problems);
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(anyhow::anyhow!("{e}")),
    }
}

fn print_invalid(what: &str, problems: &[String]) {
    println!("refused, nothing written ({what}):");
    for p in problems {
        println!("  {p}");
    }
}

/// The admin token, when the server at the admin address answers and serves this config's
/// control file (a CLI run with another config must not edit that server's file); `None`:
/// make the change in-process.
fn server_of_this_file(target: &Target, config: &Config) -> Option<String> {
    let ours = std::fs::canonicalize(config.control.file.as_ref()?).ok()?;
    let status = fetch_status(target.admin_addr(config)).ok()?;
    let theirs = std::fs::canonicalize(status.control.control_file.as_ref()?).ok()?;
    if ours != theirs {
        return None;
    }
    read_token(config.admin.token_file.as_ref())
        .ok()
        .map(|t| t.to_string())
}

/// What came of sending a change to the server.
enum Asked {
    /// The server made or refused the change (reported): the command's outcome.
    Done(Result<ExitCode>),
    /// The server did not take it up (unreachable, no such route, not authorized): make it
    /// in-process.
    NotServed(String),
}

/// The server's answer to a change, as the in-process path words it.
#[derive(serde::Deserialize)]
struct ServerAnswer {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    path: Option<PathBuf>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    overridden: Vec<steerdns::safety::Violation>,
    #[serde(default)]
    unused_overrides: Vec<String>,
    #[serde(default)]
    refused_by: Option<Vec<steerdns::safety::Violation>>,
    #[serde(default)]
    refused: Option<Vec<String>>,
    #[serde(default)]
    error: Option<String>,
}

fn ask_server(
    target: &Target,
    config: &Config,
    change: &LocalChange<'_>,
    overrides: &[steerdns::change::OverrideRequest],
    by: &str,
    token: &str,
) -> Asked {
    let (route, body) = match change {
        LocalChange::Edit(edit) => (
            "/v1/control/edit",
            serde_json::json!({ "edit": edit, "overrides": overrides, "by": by }),
        ),
        LocalChange::Replace { text, .. } => (
            "/v1/control",
            serde_json::json!({ "text": text, "overrides": overrides, "by": by }),
        ),
    };
    let addr = target.admin_addr(config);
    let response = match http::request(
        addr,
        "POST",
        route,
        Some(token),
        body.to_string().as_bytes(),
    ) {
        Ok(r) => r,
        Err(e) => return Asked::NotServed(report(&e)),
    };
    if matches!(response.status, 401 | 403 | 404 | 405) {
        return Asked::NotServed(format!("the server answered HTTP {}", response.status));
    }
    let answer: ServerAnswer = match serde_json::from_str(&response.body) {
        Ok(a) => a,
        Err(e) => {
            return Asked::Done(Err(anyhow::anyhow!(
                "the server at {addr} answered HTTP {} with an unexpected body ({e}): {}",
                response.status,
                response.body.trim()
            )))
        }
    };
    Asked::Done(report_answer(target, config, &change.describe(), answer))
}

/// Prints the server's answer the way the in-process path prints its outcome.
fn report_answer(
    target: &Target,
    config: &Config,
    what: &str,
    answer: ServerAnswer,
) -> Result<ExitCode> {
    if let Some(violations) = answer.refused_by {
        let path = control_path(config)?;
        safety::print_refusal(&path.display().to_string(), what, &violations);
        return Ok(ExitCode::FAILURE);
    }
    if let Some(problems) = answer.refused {
        print_invalid(what, &problems);
        return Ok(ExitCode::FAILURE);
    }
    if let Some(error) = answer.error {
        bail!("{error}");
    }
    let (Some(text), Some(path)) = (answer.text, answer.path) else {
        bail!("the server's answer names no written control text");
    };
    safety::print_overridden(&answer.overridden, &answer.unused_overrides);
    println!(
        "wrote {}: {}",
        path.display(),
        answer.summary.unwrap_or_default()
    );
    report_convergence(target, config, &text);
    Ok(ExitCode::SUCCESS)
}

/// The serial every new version must be above: the newest recorded in the history and the one
/// the server serves (either may be ahead: the history is written after serving).
fn serial_floor(target: &Target, config: &Config) -> u64 {
    let served = fetch_status(target.admin_addr(config))
        .map(|s| s.control.serial)
        .unwrap_or(0);
    steerdns::change::recorded_floor(config).max(served)
}

/// Waits (bounded) until the server serves what the control file now says, and prints it.
fn report_convergence(target: &Target, config: &Config, text: &str) {
    let addr = target.admin_addr(config);
    let Ok(expected) = ControlFile::parse(text, Path::new("control")) else {
        return;
    };
    let deadline = Instant::now() + CONVERGE_WAIT;
    let mut last = None;
    while Instant::now() < deadline {
        match fetch_status(addr) {
            Ok(status) => {
                if serves(&status, &expected) {
                    println!(
                        "server at {addr} serves serial {}: {}",
                        status.control.serial,
                        weights_line(&status)
                    );
                    return;
                }
                last = Some(status);
            }
            Err(_) => {
                println!(
                    "server at {addr} not reachable; it applies the change when it (re)starts"
                );
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Some(status) = last {
        println!(
            "warning: after {CONVERGE_WAIT:?} the server still serves serial {}{}",
            status.control.serial,
            status
                .control
                .last_refusal
                .map(|r| format!("; last refusal: {}", r.reasons.join("; ")))
                .unwrap_or_default()
        );
    }
}

/// Does the server's status show every weight and drain the control file sets?
fn serves(status: &StatusView, expected: &ControlFile) -> bool {
    let weights_ok = expected.profiles.iter().all(|(profile, knobs)| {
        knobs.endpoints.iter().all(|(endpoint, k)| {
            let live = status.profiles.get(profile).and_then(|p| p.get(endpoint));
            match (live, k.weight, k.enabled) {
                (None, _, _) => false,
                (Some(l), _, Some(false)) => !l.enabled,
                (Some(l), Some(w), _) => l.weight == Some(w) && l.enabled,
                (Some(_), None, _) => true,
            }
        })
    });
    let drains_ok = expected.regions.iter().all(|(region, k)| {
        let live = status.regions.get(region).map(String::as_str).unwrap_or("");
        k.drain == live.starts_with("drained")
    });
    weights_ok && drains_ok
}

fn weights_line(status: &StatusView) -> String {
    let mut parts = Vec::new();
    for (profile, endpoints) in &status.profiles {
        let list: Vec<String> = endpoints
            .iter()
            .map(|(name, e)| endpoint_text(name, e))
            .collect();
        parts.push(format!("{profile}: {}", list.join(" ")));
    }
    for (region, state) in &status.regions {
        parts.push(format!("{region} {state}"));
    }
    parts.join("; ")
}

fn endpoint_text(name: &str, e: &steerdns::admin::EndpointView) -> String {
    match (e.enabled, e.weight) {
        (false, _) => format!("{name}=off"),
        (true, Some(w)) => format!("{name}={w}"),
        (true, None) => format!("{name}=on"),
    }
}

/// One line per profile (or only `only`): `name: endpoint=weight|on|off ...`.
fn print_profiles(
    profiles: &std::collections::BTreeMap<
        String,
        std::collections::BTreeMap<String, steerdns::admin::EndpointView>,
    >,
    only: Option<&str>,
) {
    for (name, endpoints) in profiles {
        if only.is_some_and(|p| p != name) {
            continue;
        }
        let list: Vec<String> = endpoints.iter().map(|(e, v)| endpoint_text(e, v)).collect();
        println!("{name}: {}", list.join(" "));
    }
}

pub(crate) fn fetch_status(addr: SocketAddr) -> Result<StatusView> {
    let response = http::request(addr, "GET", "/v1/status", None, b"")?;
    if response.status != 200 {
        bail!(
            "status request failed: HTTP {}: {}",
            response.status,
            response.body.trim()
        );
    }
    serde_json::from_str(&response.body).context("status response is not the expected JSON")
}

/// The flags every command that writes the control state shares.
#[derive(clap::Args, Debug, Clone)]
pub struct WriteArgs {
    /// Fleet with staged rollouts: skip the bake times (never the taster or the gates).
    #[arg(long)]
    pub emergency: bool,
    #[command(flatten)]
    pub overrides: safety::OverrideArgs,
    #[command(flatten)]
    pub direct: direct::DirectArgs,
}

/// Writes one edit of the control text the way the command was asked to: with `--direct` to
/// every node's admin endpoint, else through etcd in fleet mode, else to the local file (by the
/// running server when it answers).
fn write_edit(target: &Target, write: &WriteArgs, edit: &Edit) -> Result<ExitCode> {
    let what = edit.describe();
    if write.direct.direct {
        return direct::edit(target, &what, &write.overrides, |text| edit.apply(text));
    }
    let config = target.config()?;
    if config.fleet.is_some() {
        return safety::fleet_edit(&config, &what, write.emergency, &write.overrides, |text| {
            edit.apply(text)
        });
    }
    edit_control(target, &config, LocalChange::Edit(edit), &write.overrides)
}

/// `weight set PROFILE ENDPOINT=WEIGHT…`.
pub fn weight_set(
    target: &Target,
    profile: &str,
    assignments: &[String],
    write: &WriteArgs,
) -> Result<ExitCode> {
    let weights = assignments
        .iter()
        .map(|a| parse_assignment(a).map_err(|e| anyhow::anyhow!("{e}")))
        .collect::<Result<Vec<_>>>()?;
    let edit = Edit::SetWeights {
        profile: profile.to_owned(),
        weights,
    };
    write_edit(target, write, &edit)
}

pub fn weight_show(target: &Target, profile: Option<&str>) -> Result<ExitCode> {
    let config = target.config()?;
    let addr = target.admin_addr(&config);
    match fetch_status(addr) {
        Ok(status) => {
            println!(
                "serving serial {} (server at {addr})",
                status.control.serial
            );
            print_profiles(&status.profiles, profile);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            // No server: show what the files would serve.
            eprintln!("{}; showing the files instead", report(&e));
            let loaded = load_with(&config, ControlSource::FromConfig)
                .map_err(|p| anyhow::anyhow!("the files do not load: {}", p.join("; ")))?;
            let Some(steering) = loaded.compiled.steering() else {
                println!("no steered names configured");
                return Ok(ExitCode::SUCCESS);
            };
            print_profiles(&steerdns::admin::profile_views(&steering.policies), profile);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `drain REGION` (`on`) and `undrain REGION`.
pub fn drain(target: &Target, region: &str, on: bool, write: &WriteArgs) -> Result<ExitCode> {
    let edit = Edit::Drain {
        region: region.to_owned(),
        on,
    };
    write_edit(target, write, &edit)
}

/// `cell drain LAYER CELL` (`on`) / `cell undrain LAYER CELL`.
pub fn cell_drain(
    target: &Target,
    layer: &str,
    cell: &str,
    on: bool,
    write: &WriteArgs,
) -> Result<ExitCode> {
    let edit = Edit::DrainCell {
        layer: layer.to_owned(),
        cell: cell.to_owned(),
        on,
    };
    write_edit(target, write, &edit)
}

/// `gate set NAME VALUE` / `gate clear NAME`: a gate the safety rules look at.
pub fn gate(
    target: &Target,
    name: &str,
    value: Option<&str>,
    write: &WriteArgs,
) -> Result<ExitCode> {
    let edit = Edit::Gate {
        name: name.to_owned(),
        value: value.map(str::to_owned),
    };
    write_edit(target, write, &edit)
}

/// The control store the config names, chosen once: the fleet's etcd with `[fleet]`, else the
/// local control file and its history.
pub(crate) struct Store {
    pub(crate) inner: Box<dyn ControlStore>,
    fleet: Option<steerdns::config::fleet::FleetConfig>,
    /// Where the file store's history is, for its messages.
    history_dir: Option<PathBuf>,
}

pub(crate) fn open_store(config: &Config) -> Result<Store> {
    if let Some(fleet_config) = &config.fleet {
        let runtime = fleet::runtime()?;
        let (client, keys) = runtime.block_on(fleet::connect(fleet_config))?;
        let keep = fleet_config
            .history_keep
            .unwrap_or(config.control.history_keep);
        let local = FileStore::new(control_path(config)?, history(config)?)
            .with_tenants(config.tenants.dir.clone(), config.tenants.history_keep);
        let store = EtcdStore::new(runtime, client, keys, keep)
            .with_tenants(local, config.tenants.dir.clone());
        return Ok(Store {
            inner: Box::new(store),
            fleet: Some(fleet_config.clone()),
            history_dir: None,
        });
    }
    let history = history(config)?;
    Ok(Store {
        history_dir: Some(history.dir().to_path_buf()),
        inner: Box::new(
            FileStore::new(control_path(config)?, history)
                .with_tenants(config.tenants.dir.clone(), config.tenants.history_keep),
        ),
        fleet: None,
    })
}

impl Store {
    /// A store error as the commands have always worded it (for etcd: which step, and
    /// whether etcd is down or holds a bad value).
    pub(crate) fn error(&self, e: StoreError) -> anyhow::Error {
        if let (Some(fleet_config), StoreError::Backend { step, source }) = (&self.fleet, &e) {
            if let Some(fleet_error) = source.downcast_ref::<steerdns::fleet::FleetError>() {
                return fleet::failed(fleet_config, step, fleet_error);
            }
        }
        anyhow::anyhow!("{e}")
    }

    /// What the commands call the history: the fleet's, or the local one.
    fn history_name(&self) -> &'static str {
        if self.fleet.is_some() {
            "fleet history"
        } else {
            "history"
        }
    }
}

pub fn history_list(target: &Target) -> Result<ExitCode> {
    history_of(target, CONTROL)
}

/// The recorded versions of the store's document `key` (the control document, or a tenant's
/// `tenants/<name>`), oldest first.
pub(crate) fn history_of(target: &Target, key: &str) -> Result<ExitCode> {
    let config = target.config()?;
    let store = open_store(&config)?;
    let current = match &store.fleet {
        Some(_) => store.inner.current(key).map_err(|e| store.error(e))?,
        None => None,
    };
    let listed = store.inner.versions(key).map_err(|e| store.error(e))?;
    if listed.versions.is_empty() && key != CONTROL {
        println!("no accepted versions of {key} recorded yet");
    } else if listed.versions.is_empty() {
        match (&store.fleet, &store.history_dir) {
            (Some(fleet_config), _) => {
                println!(
                    "no fleet versions recorded yet under {}",
                    fleet_config.prefix
                )
            }
            (None, Some(dir)) => {
                println!("no accepted versions recorded yet in {}", dir.display())
            }
            (None, None) => {}
        }
    }
    if store.fleet.is_some() {
        let bad: Vec<steerdns::fleet::store::BadRecord> = listed
            .bad
            .iter()
            .map(|b| steerdns::fleet::store::BadRecord {
                key: b.location.clone(),
                reason: b.problem.clone(),
                seen_by: String::new(),
            })
            .collect();
        fleet::print_bad(&bad);
    } else {
        for b in &listed.bad {
            tracing::warn!(
                "{}: skipping control history entry: {}",
                b.location,
                b.problem
            );
        }
    }
    for v in listed.versions {
        match v.revision.filter(|_| store.fleet.is_some()) {
            Some(revision) => {
                let mark = if current.as_ref().map(|c| c.serial) == Some(v.serial) {
                    "*"
                } else {
                    " "
                };
                println!(
                    "{mark}{:>6}  {}  rev {:<6}  {:<28}  {}",
                    v.serial, v.time, revision, v.source, v.summary
                );
            }
            None => println!(
                "{:>6}  {}  {:<20}  {}",
                v.serial, v.time, v.source, v.summary
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn rollback(target: &Target, version: Option<u64>, write: &WriteArgs) -> Result<ExitCode> {
    if write.direct.direct {
        return direct::rollback(target, version, &write.overrides);
    }
    let config = target.config()?;
    if config.fleet.is_some() {
        return fleet::rollback(&config, version, write.emergency, &write.overrides);
    }
    let overrides = &write.overrides;
    let history = history(&config)?;
    let versions = history.list().map_err(|e| anyhow::anyhow!("{e}"))?;
    let serial = match version {
        Some(v) => v,
        // The version before the one being served (the history is written just after a
        // version is served, so its newest entry may not be the served one yet); without a
        // server, the one before the newest recorded.
        None => {
            let served = fetch_status(target.admin_addr(&config)).map(|s| s.control.serial);
            let before = match served {
                Ok(served) => versions.iter().rev().find(|v| v.serial < served),
                Err(_) => versions.iter().rev().nth(1),
            };
            match before {
                Some(v) => v.serial,
                None => {
                    bail!("no previous version to roll back to (see `steerdns control history`)")
                }
            }
        }
    };
    let (_, text) = history
        .get(serial)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .with_context(|| {
            format!("version {serial} is not in the history (see `steerdns control history`)")
        })?;
    let change = LocalChange::Replace {
        what: format!("rollback to version {serial}"),
        text: &text,
    };
    edit_control(target, &config, change, overrides)
}

pub fn diff(target: &Target, a: u64, b: u64) -> Result<ExitCode> {
    diff_of(target, CONTROL, a, b)
}

/// Versions `a` and `b` of the store's document `key`: what changed (the control document's
/// summary line) and the lines only in either.
pub(crate) fn diff_of(target: &Target, key: &str, a: u64, b: u64) -> Result<ExitCode> {
    let config = target.config()?;
    let store = open_store(&config)?;
    let get = |serial: u64| -> Result<String> {
        let (_, text) = store
            .inner
            .get(key, serial)
            .map_err(|e| store.error(e))?
            .with_context(|| format!("version {serial} is not in the {}", store.history_name()))?;
        Ok(text)
    };
    let (ta, tb) = (get(a)?, get(b)?);
    if key != CONTROL {
        println!("{key} {a} -> {b}");
        for line in line_diff(&ta, &tb) {
            println!("{line}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let path = Path::new("control");
    let (pa, pb) = (
        ControlFile::parse(&ta, path).map_err(|e| anyhow::anyhow!("version {a}: {e}"))?,
        ControlFile::parse(&tb, path).map_err(|e| anyhow::anyhow!("version {b}: {e}"))?,
    );
    println!("{a} -> {b}: {}", summarize(&pa, &pb));
    for line in line_diff(&ta, &tb) {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Lines only in `a` (prefixed `-`) and only in `b` (`+`), in order: enough for small files.
fn line_diff(a: &str, b: &str) -> Vec<String> {
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let mut out: Vec<String> = la
        .iter()
        .filter(|l| !lb.contains(l))
        .map(|l| format!("- {l}"))
        .collect();
    out.extend(
        lb.iter()
            .filter(|l| !la.contains(l))
            .map(|l| format!("+ {l}")),
    );
    out
}

pub fn status(target: &Target, json: bool) -> Result<ExitCode> {
    let config = target.config()?;
    let addr = target.admin_addr(&config);
    let status = fetch_status(addr)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(ExitCode::SUCCESS);
    }
    let c = &status.control;
    println!(
        "serving serial {} (config {}) since {} ({})",
        c.serial, c.config_hash, c.loaded_at, c.loaded_by
    );
    if let Some(file) = &c.control_file {
        println!("control file {}", file.display());
    }
    println!(
        "reloads: {} accepted, {} refused; last took {:.1} ms",
        c.reloads_accepted, c.reloads_refused, c.last_reload_ms
    );
    match &c.last_refusal {
        Some(r) => {
            println!("last refused change: {} ({})", r.at, r.trigger);
            for reason in &r.reasons {
                println!("  {reason}");
            }
        }
        None => println!("no refused changes"),
    }
    println!(
        "startup: first answer after {:.0} ms, fully loaded after {:.0} ms ({}); {}",
        c.startup.first_answer_ms, c.startup.fully_loaded_ms, c.startup.phase, c.startup.reason
    );
    print_taster(&c.taster);
    print_tenants(&status.tenants);
    if let Some(cells) = &status.cells {
        print_cells(cells);
    }
    if let Some(b) = &status.budgets {
        println!(
            "tenant budgets {}: {} UDP queries/s of {} (engage at {}); {} responses/s per tenant; over budget {} dropped, {} truncated",
            if b.engaged { "ENGAGED" } else { "not engaged" },
            b.qps,
            b.capacity_qps,
            b.engage_qps,
            b.tenant_rate,
            b.dropped,
            b.slipped
        );
    }
    print_safety(&status.safety);
    print_drills(&status.drills);
    if let Some(b) = &c.bundle {
        print_bundle(b);
    }
    for (profile, endpoints) in &status.profiles {
        let list: Vec<String> = endpoints.iter().map(|(e, v)| endpoint_text(e, v)).collect();
        println!("profile {profile}: {}", list.join(" "));
    }
    for (region, state) in &status.regions {
        println!("region {region}: {state}");
    }
    for w in &c.warnings {
        println!("warning: {w}");
    }
    if let Some(parts) = &status.supervisor {
        print_supervisor(parts);
    }
    if let Some(f) = &status.fleet {
        println!(
            "fleet node {} ({} under {}): etcd link {} for {:.0} s; serving revision {} (newest seen {}){}{}",
            f.node,
            f.endpoints.join(","),
            f.prefix,
            if f.connected { "up" } else { "DOWN" },
            f.since_secs,
            f.revision_served,
            f.revision_latest,
            f.refused_revision
                .map(|r| format!("; REFUSED revision {r}"))
                .unwrap_or_default(),
            match (&f.last_error, f.connected) {
                (Some(e), false) => format!("; {e}"),
                _ => String::new(),
            }
        );
        if let Some(o) = &f.local_override {
            println!("{}", override_line(o));
        }
        println!(
            "fleet registry kept for --direct: {} node(s); etcd clients made: {}",
            f.known_nodes, f.etcd_connections
        );
        if let Some(r) = &f.rollout {
            print_rollout(r);
        }
        fleet::print_link_problems(f);
    }
    if let Some(health) = &status.health {
        print_health(health);
    }
    print_shield(&status.shield);
    if let Some(xdp) = &status.xdp {
        print_xdp(xdp);
    }
    if let Some(encrypted) = &status.encrypted {
        print_encrypted(encrypted);
    }
    if let Some(cookies) = &status.cookies {
        print_cookies(cookies);
    }
    for zone in &status.dnssec_not_served {
        println!("dnssec: {} NOT SERVED: {}", zone.zone, zone.reason);
    }
    if let Some(dnssec) = &status.dnssec {
        print_dnssec(dnssec);
    }
    for (zone, t) in status.transfer.iter().flatten() {
        println!("{}", transfer_line(zone, t));
    }
    for (zone, s) in &status.secondary {
        println!("{}", secondary_line(zone, s));
    }
    print_connection_limits(&status);
    Ok(ExitCode::SUCCESS)
}

/// One secondary zone: serial, last transfer in (kind, serial, when, result), last NOTIFY,
/// last refusal of a transfer and of a NOTIFY.
fn secondary_line(zone: &str, s: &steerdns::secondary::ZoneStatus) -> String {
    let serial = s
        .serial
        .map_or("no copy yet".to_string(), |n| format!("serial {n}"));
    let last = match &s.last_transfer {
        Some(at) => format!(
            "last in {} serial {} at {at}: {}",
            s.last_transfer_kind.as_deref().unwrap_or("?"),
            s.last_transfer_serial
                .map_or("-".to_string(), |n| n.to_string()),
            s.last_result.as_deref().unwrap_or("?")
        ),
        None => "no transfer in yet".to_string(),
    };
    let mut line = format!(
        "secondary {zone}: {serial}{}; {last}",
        if s.expired { " EXPIRED" } else { "" }
    );
    let notes = [
        ("last NOTIFY", &s.last_notify),
        ("last refusal", &s.last_refusal),
        ("last NOTIFY refused", &s.last_notify_refusal),
        ("key file", &s.key_problem),
    ];
    for (label, value) in notes {
        if let Some(value) = value {
            line.push_str(&format!("; {label} {value}"));
        }
    }
    if !s.catalog_groups.is_empty() {
        line.push_str(&format!("; catalog group {}", s.catalog_groups.join(", ")));
    }
    line
}

/// One zone's transfers out: serial, journal, last transfer, NOTIFY targets, last refusal.
fn transfer_line(zone: &str, t: &steerdns::admin::transfer::ZoneTransferView) -> String {
    let s = &t.status;
    let last = match (&s.last_transfer, &s.last_transfer_to) {
        (Some(at), Some(to)) => format!(
            "last out {} serial {} to {to} at {at}",
            s.last_transfer_kind.as_deref().unwrap_or("?"),
            s.last_transfer_serial.unwrap_or(0)
        ),
        _ => "no transfer out yet".to_string(),
    };
    let notify: Vec<String> = s
        .notify
        .iter()
        .map(|(target, n)| match (n.acked_serial, &n.last_error) {
            (_, Some(e)) => format!("{target} FAILED {e}"),
            (Some(serial), None) => format!("{target} acked {serial}"),
            (None, None) => format!("{target} not acked yet"),
        })
        .collect();
    format!(
        "transfer {zone}: serial {}, journal {} version(s); {last}{}{}",
        t.serial,
        t.journal_depth,
        if notify.is_empty() {
            String::new()
        } else {
            format!("; notify {}", notify.join(", "))
        },
        s.last_refusal
            .as_ref()
            .map(|r| format!("; last refusal {r}"))
            .unwrap_or_default()
    ) + &projection_line(t)
}

/// The static projection of a zone's steered names (empty for a zone without any), or what a
/// catalog zone lists.
fn projection_line(t: &steerdns::admin::transfer::ZoneTransferView) -> String {
    if let Some(members) = t.catalog_members {
        return format!("; catalog zone listing {members} zone(s)");
    }
    if t.projected_names + t.omitted_names == 0 {
        return String::new();
    }
    format!(
        "; projected {} steered name(s), {} omitted (zone file serial {})",
        t.projected_names, t.omitted_names, t.file_serial
    )
}

fn print_supervisor(parts: &steerdns::metrics::supervisor::SupervisorView) {
    print!(
        "supervised threads and tasks: {} running of {} started",
        parts.running, parts.started
    );
    match &parts.last_unexpected {
        Some(last) => println!(
            "; {} ENDED UNEXPECTEDLY (last: {last}; see the log)",
            parts.unexpected_exits
        ),
        None => println!("; none ended unexpectedly"),
    }
}

/// A local override as status and `fleet status` print it.
pub(crate) fn override_line(o: &steerdns::fleet::status::OverrideView) -> String {
    format!(
        "LOCAL OVERRIDE serial {} ({} by {}, since {}; replaced revision {}){}",
        o.serial,
        o.what,
        o.by,
        o.at,
        o.base_revision,
        match o.conflict {
            Some(r) => format!(
                "; CONFLICT: etcd has a newer revision {r}, not written over; `steerdns control override drop` to serve it"
            ),
            None => "; written to etcd when etcd is back".to_string(),
        }
    )
}

/// The admin endpoint's connections and the descriptor budget (servers older than them send
/// neither).
fn print_connection_limits(status: &StatusView) {
    if let Some(a) = &status.admin_connections {
        println!(
            "admin connections: {} open of {}; closed {} slow head(s), {} idle, {} evicted for \
             newcomers; refused {} (every place serving), {} (descriptor reserve)",
            a.open,
            a.max_connections,
            a.closed_header_timeout,
            a.closed_idle_timeout,
            a.evicted,
            a.refused_full,
            a.refused_descriptors
        );
    }
    if let Some(d) = status.descriptors.as_ref().filter(|d| d.limit > 0) {
        println!(
            "file descriptors: about {} of {} open; {} kept free, {} for the admin endpoint; \
             {} DNS connection(s) refused to keep them",
            d.open_estimate, d.limit, d.reserve, d.admin_share, d.refused_dns
        );
    }
}

fn print_drills(d: &steerdns::drill::log::DrillStatus) {
    for drill in &d.drills {
        match &drill.last {
            Some(r) => println!(
                "drill {}: last run {} {} ({}): change to served {}, revert to served {}{}{}",
                drill.name,
                r.started,
                r.result,
                r.trigger,
                r.change_to_served_ms
                    .map_or("-".into(), |v| format!("{v:.0} ms")),
                r.revert_to_served_ms
                    .map_or("-".into(), |v| format!("{v:.0} ms")),
                match r.nodes.as_slice() {
                    [] => String::new(),
                    nodes => format!(" on every node ({})", nodes.join(" ")),
                },
                r.reason
                    .as_ref()
                    .map(|x| format!("; {x}"))
                    .unwrap_or_default()
            ),
            None => println!("drill {}: never run", drill.name),
        }
    }
    if d.running {
        println!("a drill is running now");
    }
    for alert in &d.alerts {
        println!("ALERT: {alert}");
    }
}

fn print_safety(s: &steerdns::safety::tally::SafetyStatus) {
    if s.rules.is_empty() && s.refusals.is_empty() {
        return;
    }
    let counts: Vec<String> = s
        .refusals
        .iter()
        .map(|(rule, n)| format!("{rule} {n}"))
        .collect();
    println!(
        "safety rules: {}; refusals: {}{}",
        s.rules.join(", "),
        counts.join(", "),
        s.last_refusal
            .as_ref()
            .map(|l| format!("; last refusal {l}"))
            .unwrap_or_default()
    );
}

fn print_encrypted(view: &steerdns::metrics::encrypted::EncryptedView) {
    let listeners: Vec<String> = view
        .listeners
        .iter()
        .map(|l| format!("{} {}", l.transport, l.addr))
        .collect();
    println!("encrypted transports: {}", listeners.join(", "));
    if let Some(cert) = &view.certificate {
        println!(
            "  certificate {} (key {}): valid until {}, {} day(s) left{}",
            cert.cert,
            cert.key,
            cert.not_after,
            cert.days_left,
            cert.warning
                .as_ref()
                .map(|w| format!(" -- WARNING: {w}"))
                .unwrap_or_default()
        );
    }
    for t in &view.transports {
        println!(
            "  {}: {} queries, {} connections open, {} accepted; refused per client {}, \
             refused full {}, handshakes failed {} timed out {}, frame timeouts {}, bad requests \
             {}, idle timeouts {}; closed to make room: idle {}, stalled {}; closed at lifetime {}",
            t.transport,
            t.queries,
            t.connections_open,
            t.connections_accepted,
            t.refused_per_client,
            t.refused_full,
            t.handshake_failed,
            t.handshake_timeout,
            t.frame_timeout,
            t.bad_request,
            t.idle_timeout,
            t.closed_idle_to_make_room,
            t.closed_stalled_to_make_room,
            t.closed_at_lifetime
        );
    }
}

fn print_rollout(r: &steerdns::fleet::status::RolloutView) {
    let wave = r
        .wave
        .map_or("no wave".to_string(), |w| format!("wave {w}"));
    let held = if r.held {
        format!(
            "; the newest revision is not released to {wave} yet: serving {}",
            r.allowed
        )
    } else {
        String::new()
    };
    println!(
        "rollout of revision {} from {}: {} ({} of {} wave(s) released; this node: {wave}){}{}{}",
        r.candidate,
        r.lkg,
        r.phase,
        r.released,
        r.waves,
        if r.emergency { " [emergency]" } else { "" },
        held,
        if r.coordinator {
            "; this node coordinates"
        } else {
            ""
        }
    );
    if let Some(reason) = &r.halted {
        println!("  HALTED: {reason}");
    }
}

fn print_cookies(view: &steerdns::admin::CookieView) {
    let join = |counts: &std::collections::BTreeMap<String, u64>| {
        counts
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("dns cookies: {}", view.secret);
    println!("  queries with a cookie: {}", join(&view.queries));
    println!("  anycast answers, demand: {}", join(&view.demand_answers));
}

fn print_dnssec(d: &steerdns::admin::DnssecView) {
    println!(
        "dnssec: signed {}; signatures valid {} .. {}; next re-sign or key event {}; {} steered answers pre-signed",
        d.signed_at,
        d.signatures_from,
        d.signatures_until,
        d.next_event.as_deref().unwrap_or("none"),
        d.steered_variants
    );
    for zone in &d.zones {
        let keys: Vec<String> = zone
            .keys
            .iter()
            .map(|k| {
                format!(
                    "{} {} (alg {}) {}{}",
                    k.role,
                    k.tag,
                    k.algorithm,
                    k.state,
                    k.next_event
                        .as_ref()
                        .map(|e| format!(", {e}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        println!(
            "  {}: {} RRsets, {} NSEC; signatures valid {} .. {}; keys: {}",
            zone.zone,
            zone.rrsets,
            zone.nsec,
            zone.signatures_from,
            zone.signatures_until,
            keys.join("; ")
        );
        if let Some(note) = &zone.algorithm_note {
            println!("    warning: {note}");
        }
    }
}

fn print_bundle(b: &steerdns::reload::BundleStatus) {
    println!(
        "bundle (config, zones, GeoIP) served: {} in {}",
        b.serving,
        b.dir.display()
    );
    if let Some(pending) = &b.pending {
        println!("  live files: bundle {pending}, tasted, waiting for the fleet's rollout");
    }
    if let Some(refused) = &b.refused {
        println!(
            "  refused: bundle {}: {}",
            refused.bundle,
            refused.reasons.join("; ")
        );
    }
}

/// The impaired cells and blame's verdict over them.
pub(crate) fn print_cells(c: &steerdns::admin::cells::CellsView) {
    let cells: Vec<String> = c
        .impaired
        .iter()
        .map(|i| {
            let mut why = i.reason.clone();
            if let Some(probe) = &i.probe {
                why.push_str(&format!(", probe {probe}"));
            }
            if let Some(u) = i.utilisation {
                why.push_str(&format!(", load {:.0}%", u * 100.0));
            }
            format!("{}/{} ({why})", i.layer, i.cell)
        })
        .collect();
    println!("impaired cells: {}", cells.join(", "));
    let Some(b) = &c.blame else {
        return;
    };
    println!(
        "blame {}: {} impaired cells, {} tenants looked at; {} hold {} of them; {:.2} would by chance",
        b.verdict, b.impaired, b.tenants, b.tied, b.best_cover, b.by_chance
    );
    for s in &b.suspects {
        println!(
            "  suspect {} holds {} of {}",
            s.tenant, s.covers, b.impaired
        );
    }
}

fn print_tenants(t: &steerdns::reload::tenants::TenantsStatus) {
    if t.count == 0 {
        return;
    }
    println!(
        "tenants: {} documents, {} served ({} suspended, {} quarantined), {} refused; {} changes applied",
        t.count,
        t.served,
        t.suspended,
        t.quarantined,
        t.refused.len(),
        t.changes_applied
    );
    for r in &t.refused {
        let serving = if r.serving_previous {
            "serving its previous version"
        } else {
            "never served"
        };
        println!("  tenant {} refused ({serving}): {}", r.name, r.reason);
    }
}

fn print_taster(t: &steerdns::taster::TasterStatus) {
    if t.mode.is_empty() {
        return;
    }
    println!(
        "taster: {} (limits {} ms, {} MiB, {} s CPU): {} ok, {} invalid, {} crashed, {} timed out",
        t.mode, t.timeout_ms, t.memory_mb, t.cpu_secs, t.ok, t.problems, t.crashed, t.timed_out
    );
    if let Some(last) = &t.last_result {
        println!("  last taste {:.1} ms: {last}", t.last_ms);
    }
}

fn print_xdp(xdp: &steerdns::metrics::xdp::XdpView) {
    match (&xdp.attach, &xdp.error) {
        (Some(attach), _) => println!(
            "xdp on {} ({attach}, {}), UDP ports {:?}",
            xdp.interface,
            xdp.copy_mode.as_deref().unwrap_or("?"),
            xdp.ports
        ),
        (None, error) => println!(
            "xdp NOT serving on {} (UDP on sockets): {}",
            xdp.interface,
            error.as_deref().unwrap_or("unknown reason")
        ),
    }
    for q in &xdp.queues {
        println!(
            "  queue {}: rx {} tx {} ({} kicks) dropped {} tx-ring-full {} rx-ring-full {} fill-empty {}",
            q.queue,
            q.rx,
            q.tx,
            q.tx_kicks,
            q.dropped,
            q.tx_ring_full,
            q.rx_ring_full,
            q.fill_ring_empty
        );
    }
}

fn print_health(health: &steerdns::health::HealthReport) {
    if let Some(sharing) = &health.sharing {
        let link = match (sharing.connected, sharing.fail_static) {
            (true, _) => "connected".to_string(),
            (false, true) => format!(
                "etcd UNREACHABLE since {}, serving the last shared view (fail-static): {}",
                sharing.since,
                sharing.last_error.as_deref().unwrap_or("?")
            ),
            (false, false) => format!(
                "not connected, no shared view yet (this node probes every target itself and serves what it sees): {}",
                sharing.last_error.as_deref().unwrap_or("?")
            ),
        };
        let probers: Vec<&str> = sharing.probers.iter().map(|p| p.node.as_str()).collect();
        println!(
            "health shared by the fleet: {} prober(s) per target, {link}; probers {}; this node probes {}",
            sharing.probers_per_target,
            probers.join(" "),
            sharing.probing_here.len()
        );
        for refused in &sharing.refused {
            println!("  REFUSED {refused}");
        }
    }
    if health.lookups_in_flight > 0 {
        println!(
            "health: {} of at most {} name lookups of probe targets in flight (all of them for \
             long: the system resolver hangs)",
            health.lookups_in_flight,
            steerdns::health::lookup::MAX_LOOKUPS
        );
    }
    for t in &health.targets {
        let mut line = format!(
            "health {}: {} (every {} ms, fall {}, rise {}, startup {}; {} checks, {} failed",
            t.target, t.state, t.interval_ms, t.fall, t.rise, t.startup, t.checks, t.failures
        );
        if let Some(ms) = t.last_latency_ms {
            line.push_str(&format!("; last took {ms:.1} ms"));
        }
        if let Some(at) = &t.last_change {
            line.push_str(&format!("; changed {at}"));
        }
        if let Some(error) = &t.last_error {
            line.push_str(&format!("; last error: {error}"));
        }
        println!("{line})");
        if let Some(shared) = &t.shared {
            let votes: Vec<String> = shared
                .probers
                .iter()
                .map(|p| format!("{} {}", p.node, p.vote.as_str()))
                .collect();
            println!(
                "  decided by {}: {}; {} down of {} reporting, down at {}{}",
                shared.decided_by,
                votes.join(", "),
                shared.down_votes,
                shared.reporting,
                shared.quorum,
                shared
                    .local_state
                    .as_deref()
                    .map_or(String::new(), |s| format!("; probed here: {s}"))
            );
        }
    }
    for e in &health.endpoints {
        let forced = if e.forced_up { ", forced up" } else { "" };
        let served = if e.served { "served" } else { "SKIPPED" };
        println!(
            "  endpoint {}/{}: {served} ({}{forced}; {})",
            e.profile, e.endpoint, e.state, e.target
        );
    }
}

fn print_shield(shield: &steerdns::shield::live::ShieldStatus) {
    let age = shield.feed_age_secs.map_or("no feed yet".to_string(), |a| {
        format!(
            "feed {a:.0} s old via {}",
            shield.feed_origin.as_deref().unwrap_or("?")
        )
    });
    println!(
        "shield {} ({age}; watermarks {:.2}/{:.2}; feeds {} accepted, {} refused)",
        shield.mode,
        shield.low_watermark,
        shield.high_watermark,
        shield.feeds_accepted,
        shield.feeds_refused
    );
    if !shield.sources.is_empty() {
        println!("  load sources: {}", shield.sources.join(", "));
    }
    if let Some(fleet) = &shield.fleet {
        let secs = |a: Option<f64>| a.map_or("-".to_string(), |a| format!("{a:.1} s"));
        println!(
            "  fleet: node {} {}; leader {}; serving state revision {} by {} ({} old); etcd contact {} ago",
            fleet.node,
            fleet.role,
            fleet.leader.as_deref().unwrap_or("none"),
            fleet.revision.map_or("-".to_string(), |r| r.to_string()),
            fleet.published_by.as_deref().unwrap_or("-"),
            secs(fleet.state_age_secs),
            secs(fleet.contact_age_secs)
        );
        if !fleet.demand_from.is_empty() {
            println!("  fleet demand from: {}", fleet.demand_from.join(", "));
        }
        if !fleet.hot_cells.is_empty() {
            println!(
                "  fleet cells hot (the leader's decision, served): {}",
                fleet.hot_cells.join(", ")
            );
        }
        if let Some(refusal) = &fleet.last_refusal {
            println!(
                "  fleet records refused: {} (last: {refusal})",
                fleet.refused
            );
        }
    }
    if let Some(refusal) = &shield.last_feed_refusal {
        println!("  last refused feed: {refusal}");
    }
    for ring in shield.regions.iter().chain(&shield.sites) {
        let util = ring
            .utilisation
            .map_or("-".to_string(), |u| format!("{:.0}%", u * 100.0));
        let mut line = format!("  {:<10} {:>5}", ring.name, util);
        if ring.shed_fraction > 0.0 {
            let to: Vec<String> = ring
                .destinations
                .iter()
                .map(|(d, s)| format!("{d} {:.0}%", s * 100.0))
                .collect();
            line.push_str(&format!(
                "  shedding {:.0}% -> {}",
                ring.shed_fraction * 100.0,
                to.join(", ")
            ));
        }
        if !ring.state.is_empty() && ring.state != "normal" {
            line.push_str(&format!("  [{}]", ring.state));
        }
        println!("{line}");
    }
    for tenant in &shield.tenants {
        let to: Vec<String> = tenant
            .destinations
            .iter()
            .map(|(d, s)| format!("{d} {:.0}%", s * 100.0))
            .collect();
        println!(
            "  tenant-first: {} in {}: shedding {:.0}% -> {} (share {:.0}% of the region, limit \
             {:.0}%) [{}]",
            tenant.tenant,
            tenant.region,
            tenant.shed_fraction * 100.0,
            to.join(", "),
            tenant.share * 100.0,
            shield.tenant_share * 100.0,
            tenant.state
        );
    }
    for cell in &shield.cells {
        let load = match (cell.load, cell.capacity) {
            (Some(load), Some(capacity)) => format!("{load}/{capacity}"),
            _ => "no fresh load".to_string(),
        };
        let util = cell
            .utilisation
            .map_or(String::new(), |u| format!(" ({:.0}%)", u * 100.0));
        println!(
            "  cell {}/{}: {load}{util} [{}]{}",
            cell.layer,
            cell.cell,
            cell.state,
            if cell.hot {
                ", left out of answers"
            } else {
                ""
            }
        );
    }
    for alert in &shield.alerts {
        println!("  alert: {alert}");
    }
    for change in shield.recent_changes.iter().take(5) {
        let who = match &change.tenant {
            Some(tenant) => format!("{} (tenant {tenant})", change.region),
            None => change.region.clone(),
        };
        println!(
            "  {} {} {:.0}% -> {:.0}%: {}",
            change.at,
            who,
            change.from * 100.0,
            change.to * 100.0,
            change.reason
        );
    }
}

/// Sends a load feed (a file, or `-` for standard input) to the running server.
pub fn load_push(target: &Target, file: &str) -> Result<ExitCode> {
    use std::io::Read;
    let config = target.config()?;
    let addr = target.admin_addr(&config);
    let limit = steerdns::shield::feed::MAX_FEED_BYTES as u64 + 1;
    let mut body = Vec::new();
    if file == "-" {
        std::io::stdin().take(limit).read_to_end(&mut body)?;
    } else {
        std::fs::File::open(file)
            .with_context(|| format!("reading {file}"))?
            .take(limit)
            .read_to_end(&mut body)?;
    }
    if body.len() > steerdns::shield::feed::MAX_FEED_BYTES {
        bail!(
            "{file}: the feed is larger than the {} byte limit; nothing was sent",
            steerdns::shield::feed::MAX_FEED_BYTES
        );
    }
    let token = admin_token(&config);
    let response = http::request(addr, "POST", "/v1/load", token.as_deref(), &body)?;
    println!("{}", response.body.trim());
    Ok(if response.status == 200 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The token from the file the config names (the one the server reads or created); a problem
/// is said on stderr and the request goes without one (the server then says why it refuses).
pub(crate) fn admin_token(config: &Config) -> Option<std::sync::Arc<str>> {
    match read_token(config.admin.token_file.as_ref()) {
        Ok(token) => Some(token),
        Err(e) => {
            eprintln!("warning: {e}");
            None
        }
    }
}

pub fn reload(target: &Target) -> Result<ExitCode> {
    let config = target.config()?;
    let addr = target.admin_addr(&config);
    let token = admin_token(&config);
    let response = http::request(addr, "POST", "/v1/reload", token.as_deref(), b"")?;
    println!("{}", response.body.trim());
    Ok(if response.status == 200 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
