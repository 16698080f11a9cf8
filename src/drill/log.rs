//! The drill log: one JSON line per drill run (`<control file>.drills.log`, beside the
//! control file), the newest last, kept to the last [`KEEP`] runs; and the drill status the
//! server shows from it (status, metrics, dashboard): each drill's last run and measured
//! times, the alerts failed drills raise, whether one is running.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::config::drill::DrillConfig;
use crate::config::Config;

/// Runs kept in the log.
pub const KEEP: usize = 200;

/// One drill run as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrillRun {
    pub drill: String,
    /// When it started, RFC 3339.
    pub started: String,
    /// Who or what ran it: `drill run by user@host`, `schedule`.
    pub trigger: String,
    /// `passed`, `failed` (after the change; reverted) or `blocked` (a check before: nothing
    /// changed).
    pub result: String,
    #[serde(default)]
    pub reason: Option<String>,
    /// Write of the change → every sample subnet served the drill's answers (ms).
    #[serde(default)]
    pub change_to_served_ms: Option<f64>,
    /// Write of the revert → every sample subnet served as before (ms).
    #[serde(default)]
    pub revert_to_served_ms: Option<f64>,
    /// How long the change was held and checked (ms).
    #[serde(default)]
    pub held_ms: Option<f64>,
    /// The nodes that served the change (fleet mode: each node's admin endpoint said so
    /// before the change counted as served; empty on a single node).
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Checks made while it was held.
    #[serde(default)]
    pub checks: u64,
    pub subnets: usize,
}

impl DrillRun {
    pub(super) fn new(drill: &DrillConfig, trigger: &str) -> DrillRun {
        DrillRun {
            drill: drill.name.clone(),
            started: super::now_text(),
            trigger: trigger.to_owned(),
            result: "running".into(),
            reason: None,
            change_to_served_ms: None,
            revert_to_served_ms: None,
            held_ms: None,
            nodes: Vec::new(),
            checks: 0,
            subnets: drill.subnets.len(),
        }
    }
}

/// The log of this config's drills (`None` without a control file).
pub fn path(config: &Config) -> Option<PathBuf> {
    let control = config.control.file.as_ref()?;
    let mut name = control.file_name()?.to_os_string();
    name.push(".drills.log");
    Some(control.with_file_name(name))
}

/// Appends `run`; past [`KEEP`] runs the file is rewritten with the newest half.
pub fn append(path: &Path, run: &DrillRun) -> Result<(), String> {
    let line = serde_json::to_string(run).map_err(|e| e.to_string())?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open: {e}"))?;
    writeln!(file, "{line}").map_err(|e| format!("cannot write: {e}"))?;
    let runs = read(path);
    if runs.len() > KEEP {
        let mut text = String::new();
        for run in &runs[runs.len() - KEEP / 2..] {
            text.push_str(&serde_json::to_string(run).map_err(|e| e.to_string())?);
            text.push('\n');
        }
        crate::files::replace_file(path, text.as_bytes()).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Every run in the log, oldest first (unreadable lines are skipped).
pub fn read(path: &Path) -> Vec<DrillRun> {
    let Ok(text) = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// What status shows of the drills.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DrillStatus {
    /// Every configured drill with its last run.
    pub drills: Vec<DrillState>,
    /// The newest runs, newest first.
    pub recent: Vec<DrillRun>,
    /// One per drill whose last run failed (`drill NAME failed at ...: reason`).
    pub alerts: Vec<String>,
    /// A drill holds the drill lock now.
    pub running: bool,
    /// Runs in the log by drill and result.
    pub runs: BTreeMap<String, BTreeMap<String, u64>>,
    pub log: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DrillState {
    pub name: String,
    pub text: String,
    pub every_secs: Option<u64>,
    pub last: Option<DrillRun>,
}

/// The drills the server was started with (names, schedule, text) and its log.
static CONFIGURED: Mutex<(Vec<DrillState>, Option<PathBuf>)> = Mutex::new((Vec::new(), None));

/// Remembers `config`'s drills and log for [`status`].
pub fn configure(config: &Config) {
    let drills = config
        .drills
        .iter()
        .map(|d| DrillState {
            name: d.name.clone(),
            text: d.text.clone(),
            every_secs: d.every_secs,
            last: None,
        })
        .collect();
    *CONFIGURED.lock().unwrap_or_else(|p| p.into_inner()) = (drills, path(config));
}

/// The drill status from the configured drills and the log (read now).
pub fn status() -> DrillStatus {
    let (mut drills, log) = CONFIGURED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let Some(log) = log else {
        return DrillStatus::default();
    };
    let runs = read(&log);
    let mut counts: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for run in &runs {
        *counts
            .entry(run.drill.clone())
            .or_default()
            .entry(run.result.clone())
            .or_default() += 1;
    }
    let mut alerts = Vec::new();
    for drill in &mut drills {
        drill.last = runs.iter().rev().find(|r| r.drill == drill.name).cloned();
        if let Some(last) = drill.last.as_ref().filter(|r| r.result == "failed") {
            alerts.push(format!(
                "drill {} failed at {}: {}",
                drill.name,
                last.started,
                last.reason.as_deref().unwrap_or("?")
            ));
        }
    }
    let running =
        crate::control::edit::ControlLock::acquire(&log, std::time::Duration::ZERO).is_err();
    DrillStatus {
        drills,
        recent: runs.iter().rev().take(10).cloned().collect(),
        alerts,
        running,
        runs: counts,
        log: Some(log),
    }
}
