//! The CLI side of the safety rules: `--override RULE --reason TEXT` on every writing command,
//! how a refusal is printed (rule id and text) and reported to the running server (which
//! counts refusals by rule), the fleet path's screening, `steerdns safety check FILE` and
//! `steerdns gate set|clear`.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use steerdns::change::{screen, ChangeError, OverrideRequest};
use steerdns::config::Config;
use steerdns::control::edit::EditError;
use steerdns::safety::{recorded, Recorded, Violation, RECENT_VERSIONS};

use super::{fleet, http, Target};

/// `--override RULE --reason TEXT`, on `weight set`, `drain`, `undrain`, `control rollback`
/// and `gate`.
#[derive(clap::Args, Clone, Default, Debug)]
pub struct OverrideArgs {
    /// Let the change through although it breaks this safety rule (its id; repeatable).
    /// Recorded with the version, with --reason and who, in the control history.
    #[arg(long = "override", value_name = "RULE")]
    pub rules: Vec<String>,
    /// Why the override is needed (required with --override).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

impl OverrideArgs {
    pub fn requests(&self) -> Result<Vec<OverrideRequest>> {
        if self.rules.is_empty() {
            if self.reason.is_some() {
                bail!("--reason goes with --override RULE; nothing written");
            }
            return Ok(Vec::new());
        }
        let reason = self
            .reason
            .clone()
            .filter(|r| !r.trim().is_empty())
            .context(
                "--override needs --reason TEXT (it is recorded in the history); nothing written",
            )?;
        Ok(self
            .rules
            .iter()
            .map(|rule| OverrideRequest {
                rule: rule.clone(),
                reason: reason.clone(),
            })
            .collect())
    }
}

/// `file` names the candidate (the control file, or the fleet's control state).
pub(super) fn print_refusal(file: &str, what: &str, violations: &[Violation]) {
    println!("refused by safety rules, nothing written ({what}):");
    for v in violations.iter().filter(|v| !v.overridden) {
        println!("  {}{v}", location(file, v));
    }
    let ids: Vec<&str> = violations
        .iter()
        .filter(|v| !v.overridden)
        .map(|v| v.rule.as_str())
        .collect();
    println!(
        "  (to go ahead anyway: --override {} --reason TEXT)",
        ids.join(" --override ")
    );
}

pub(super) fn print_overridden(overridden: &[Violation], unused: &[String]) {
    for v in overridden {
        println!("OVERRIDE recorded: {v}");
    }
    for id in unused {
        println!(
            "note: --override {id} was not needed (the change breaks no such rule); not recorded"
        );
    }
}

/// `file:line: field: ` for a violation whose knob is known, else `file: `.
fn location(file: &str, v: &Violation) -> String {
    match (&v.field, v.line) {
        (Some(field), Some(line)) => format!("{file}:{line}: {field}: "),
        (Some(field), None) => format!("{file}: {field}: "),
        _ => format!("{file}: "),
    }
}

/// Tells the running server a change was refused, so that it counts the refusal by rule
/// (`steerdns_safety_refusals_total`); best effort: an unreachable server misses the count.
pub(super) fn report_refusal(config: &Config, addr: SocketAddr, violations: &[Violation]) {
    let rules: Vec<&str> = violations
        .iter()
        .filter(|v| !v.overridden)
        .map(|v| v.rule.as_str())
        .collect();
    let Ok(token) = steerdns::admin::read_token(config.admin.token_file.as_ref()) else {
        return;
    };
    let body = serde_json::json!({ "rules": rules }).to_string();
    let _ = http::request(
        addr,
        "POST",
        "/v1/safety/refusals",
        Some(&token),
        body.as_bytes(),
    );
}

/// The fleet's recent versions (etcd), for wait periods.
fn fleet_recent(config: &Config) -> Result<Vec<Recorded>> {
    let fleet_config = fleet::fleet_of(config)?;
    fleet::runtime()?.block_on(async {
        let (mut client, keys) = fleet::connect(fleet_config).await?;
        let versions = steerdns::fleet::store::history(&mut client, &keys)
            .await
            .map_err(|e| fleet::down(fleet_config, &e))?
            .records;
        let start = versions.len().saturating_sub(RECENT_VERSIONS);
        Ok(versions[start..]
            .iter()
            .filter_map(|v| recorded(&v.time, &v.text))
            .collect())
    })
}

/// A fleet edit screened by the safety rules against the fleet's current state (inside the
/// compare-and-swap loop, so a retried write is screened again against what it replaces).
pub(super) fn fleet_edit(
    config: &Config,
    what: &str,
    emergency: bool,
    overrides: &OverrideArgs,
    edit: impl Fn(&str) -> Result<String, EditError>,
) -> Result<ExitCode> {
    fleet_edit_refused(config, what, emergency, overrides, edit).0
}

/// [`fleet_edit`], and the safety rules' refusal when they refused it (for callers that record
/// why, such as drills).
pub(super) fn fleet_edit_refused(
    config: &Config,
    what: &str,
    emergency: bool,
    overrides: &OverrideArgs,
    edit: impl Fn(&str) -> Result<String, EditError>,
) -> (Result<ExitCode>, Option<Vec<Violation>>) {
    let inputs = || -> Result<_> { Ok((overrides.requests()?, fleet_recent(config)?)) };
    let (requests, recent) = match inputs() {
        Ok(inputs) => inputs,
        Err(e) => return (Err(e), None),
    };
    let by = steerdns::fleet::store::who();
    let refusal: RefCell<Option<Vec<Violation>>> = RefCell::new(None);
    let outcome = fleet::edit(config, what, emergency, |current| {
        let edited = edit(current)?;
        match screen(config, current, &edited, &recent, &requests, &by) {
            Ok(screened) => {
                print_overridden(&screened.overridden, &screened.unused);
                Ok(screened.text)
            }
            Err(ChangeError::Refused(violations)) => {
                *refusal.borrow_mut() = Some(violations.clone());
                Err(ChangeError::Refused(violations))
            }
            Err(e) => Err(e),
        }
    });
    match (outcome, refusal.into_inner()) {
        (Err(_), Some(violations)) => {
            let prefix = fleet::fleet_of(config).map_or(String::new(), |f| f.prefix.clone());
            print_refusal(&format!("fleet control {prefix}"), what, &violations);
            report_refusal(config, config.admin.listen, &violations);
            (Ok(ExitCode::FAILURE), Some(violations))
        }
        (outcome, _) => (outcome, None),
    }
}

/// `steerdns safety check FILE`: the safety rules (and the loader) on a candidate control
/// file, against what the control file (or the fleet) holds now and its history.
pub fn check(target: &Target, file: &Path, overrides: &OverrideArgs) -> Result<ExitCode> {
    let config = target.config()?;
    let candidate = steerdns::files::read_text_limited(file, steerdns::files::SMALL_FILE_LIMIT)
        .with_context(|| format!("reading {}", file.display()))?;
    let (current, recent) = current_and_recent(&config)?;
    let requests = overrides.requests()?;
    let by = steerdns::fleet::store::who();
    let mut code = ExitCode::SUCCESS;
    match screen(&config, &current, &candidate, &recent, &requests, &by) {
        Ok(screened) => {
            for v in &screened.overridden {
                println!("{}: overridden: {v}", file.display());
            }
            println!(
                "{}: passes the {} safety rule(s)",
                file.display(),
                config.safety.rules.len()
            );
        }
        Err(ChangeError::Refused(violations)) => {
            for v in violations.iter().filter(|v| !v.overridden) {
                println!("{}{v}", location(&file.display().to_string(), v));
            }
            code = ExitCode::FAILURE;
        }
        Err(e) => bail!("{e}"),
    }
    let path = config
        .control
        .file
        .clone()
        .unwrap_or_else(|| file.to_path_buf());
    let source = steerdns::snapshot::load::ControlSource::Text {
        path: &path,
        text: &candidate,
    };
    match steerdns::snapshot::load::load_with(&config, source) {
        Ok(_) => println!("{}: loads with the config", file.display()),
        Err(problems) => {
            for p in problems {
                println!("{}: {p}", file.display());
            }
            code = ExitCode::FAILURE;
        }
    }
    Ok(code)
}

/// What a candidate replaces, and the recent versions: the fleet's (etcd) in fleet mode, else
/// the control file's and its history's.
fn current_and_recent(config: &Config) -> Result<(String, Vec<Recorded>)> {
    if let Some(fleet_config) = &config.fleet {
        let recent = fleet_recent(config)?;
        let current = fleet::runtime()?.block_on(async {
            let (mut client, keys) = fleet::connect(fleet_config).await?;
            let control = steerdns::fleet::store::get_control(&mut client, &keys)
                .await
                .map_err(|e| fleet::down(fleet_config, &e))?;
            Ok::<_, anyhow::Error>(control.map(|c| c.text).unwrap_or_default())
        })?;
        return Ok((current, recent));
    }
    let current = match &config.control.file {
        Some(path) => steerdns::files::read_text_limited(path, steerdns::files::SMALL_FILE_LIMIT)
            .unwrap_or_default(),
        None => String::new(),
    };
    let recent = steerdns::change::history(config)
        .map(|h| steerdns::safety::recent_from_history(&h, RECENT_VERSIONS))
        .unwrap_or_default();
    Ok((current, recent))
}
