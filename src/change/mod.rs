//! One operator change of the control state, from a candidate text to a written control file:
//! the safety rules ([`screen`]: the one place a candidate is checked against them, for the
//! local control file and the fleet's etcd alike), the overrides recorded with the version, an
//! explicit serial kept increasing, the taste with the server's own loader, and the lock and
//! compare-before-replace that keep two writers apart ([`edit_file`]).
//!
//! Used by the CLI (`weight set`, `drain`, `undrain`, `control rollback`, `gate set`) and by
//! the admin API (`POST /v1/control`, `POST /v1/control/edit`); the fleet path calls [`screen`] and writes to etcd
//! itself. It prints nothing and never tells the server to reload: the caller does.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::config::Config;
use crate::control::edit::{
    explicit_serial, replace_if_unchanged, set_overrides, set_serial, ControlLock, EditError,
};
use crate::control::history::{History, HistoryError};
use crate::control::{summarize, ControlFile, Override};
use crate::safety::{evaluate, refused, Baseline, Change, Recorded, Violation};
use crate::snapshot::load::{load_after, ControlSource};
use crate::snapshot::Compiled;

/// An operator's `--override RULE --reason TEXT`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OverrideRequest {
    pub rule: String,
    pub reason: String,
}

/// Why a change was not written.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// Safety rules the change breaks, none overridden (the list has every broken rule).
    #[error("refused by safety rules, nothing written: {}", list(.0))]
    Refused(Vec<Violation>),
    /// The taster's (the loader's) problems, one line each.
    #[error("refused, nothing written: {}", .0.join("; "))]
    Invalid(Vec<String>),
    /// An override that names no configured rule, or has no reason.
    #[error("{0}; nothing written")]
    BadOverride(String),
    #[error("no control file configured ([control] file in the config)")]
    NoControlFile,
    /// The edit itself could not be made on the file's text (a knob that is not there, a name
    /// the config would refuse, text that is not TOML), or the file's lock not taken.
    #[error("{}: {source}", path.display())]
    Edit {
        path: PathBuf,
        #[source]
        source: EditError,
    },
    /// The edit could not be made on a text that is not a file (the fleet's state in etcd).
    #[error("the change does not apply: {0}")]
    Text(#[from] EditError),
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    History(#[from] HistoryError),
    /// The candidate's `[[overrides]]` could not be written into its text.
    #[error("cannot record the overrides in the candidate: {0}")]
    RecordOverrides(#[source] EditError),
    #[error("{path}: changed by someone else during each of {attempts} attempts; nothing written")]
    Contended { path: PathBuf, attempts: usize },
}

fn list(violations: &[Violation]) -> String {
    let parts: Vec<String> = violations
        .iter()
        .filter(|v| !v.overridden)
        .map(ToString::to_string)
        .collect();
    parts.join("; ")
}

/// A candidate that passed the safety rules.
#[derive(Debug, Clone)]
pub struct Screened {
    /// The candidate with the overrides it needed recorded (`[[overrides]]`), stale ones gone.
    pub text: String,
    /// The rules it breaks, every one overridden.
    pub overridden: Vec<Violation>,
    /// Overrides given that no broken rule needed (not recorded).
    pub unused: Vec<String>,
}

/// Checks `candidate` (replacing `before`, empty when there is none) against the config's
/// safety rules with `overrides`, and records the overrides it needed in its text. A candidate
/// that does not parse passes unchanged: the taster refuses it with the reason.
pub fn screen(
    config: &Config,
    before: &str,
    candidate: &str,
    recent: &[Recorded],
    overrides: &[OverrideRequest],
    by: &str,
) -> Result<Screened, ChangeError> {
    screen_at(
        config,
        before,
        candidate,
        recent,
        overrides,
        by,
        SystemTime::now(),
    )
}

/// [`screen`] at a given time (wait periods count to `now`; the override records it).
pub fn screen_at(
    config: &Config,
    before: &str,
    candidate: &str,
    recent: &[Recorded],
    overrides: &[OverrideRequest],
    by: &str,
    now: SystemTime,
) -> Result<Screened, ChangeError> {
    for o in overrides {
        if config.safety.rule(&o.rule).is_none() {
            let ids: Vec<&str> = config.safety.rules.iter().map(|r| r.id.as_str()).collect();
            return Err(ChangeError::BadOverride(format!(
                "--override {}: no such safety rule (configured: {})",
                o.rule,
                if ids.is_empty() {
                    "none".to_string()
                } else {
                    ids.join(", ")
                }
            )));
        }
        if o.reason.trim().is_empty() {
            return Err(ChangeError::BadOverride(format!(
                "--override {} needs --reason TEXT (it is recorded in the history)",
                o.rule
            )));
        }
    }
    let path = Path::new("control");
    let Ok(after) = ControlFile::parse(candidate, path) else {
        return Ok(Screened {
            text: candidate.to_owned(),
            overridden: Vec::new(),
            unused: overrides.iter().map(|o| o.rule.clone()).collect(),
        });
    };
    let before = ControlFile::parse(before, path).unwrap_or_default();
    let ids: Vec<String> = overrides.iter().map(|o| o.rule.clone()).collect();
    let change = Change {
        before: &before,
        after: &after,
        recent,
        now,
    };
    let mut violations = evaluate(
        &config.safety,
        &Baseline::new(&config.profiles, &config.topology),
        change,
        &ids,
    );
    for v in &mut violations {
        v.line = v
            .field
            .as_deref()
            .and_then(|f| crate::control::line_of_field(candidate, f));
    }
    if refused(&violations) {
        return Err(ChangeError::Refused(violations));
    }
    let at = crate::rfc3339::format_utc(now);
    let records: Vec<Override> = overrides
        .iter()
        .filter(|o| violations.iter().any(|v| v.rule == o.rule))
        .map(|o| Override {
            rule: o.rule.clone(),
            reason: o.reason.trim().to_owned(),
            by: by.to_owned(),
            at: at.clone(),
        })
        .collect();
    let text = set_overrides(candidate, &records).map_err(ChangeError::RecordOverrides)?;
    Ok(Screened {
        text,
        unused: ids
            .into_iter()
            .filter(|id| !violations.iter().any(|v| &v.rule == id))
            .collect(),
        overridden: violations,
    })
}

/// The control file's history as the config places it.
pub fn history(config: &Config) -> Result<History, ChangeError> {
    let file = config
        .control
        .file
        .as_ref()
        .ok_or(ChangeError::NoControlFile)?;
    let dir = config
        .control
        .history_dir
        .clone()
        .unwrap_or_else(|| History::default_dir(file));
    Ok(History::open(&dir, config.control.history_keep)?)
}

/// The local control store the config names: its control file and history, and its tenants'
/// folder (`tenants/<name>` keys).
pub fn file_store(config: &Config) -> Result<crate::control::store::FileStore, ChangeError> {
    let file = config
        .control
        .file
        .clone()
        .ok_or(ChangeError::NoControlFile)?;
    Ok(
        crate::control::store::FileStore::new(file, history(config)?)
            .with_tenants(config.tenants.dir.clone(), config.tenants.history_keep),
    )
}

/// What [`edit_file`] wrote.
#[derive(Debug, Clone)]
pub struct Written {
    pub path: PathBuf,
    pub text: String,
    /// How the knobs changed (and the overrides recorded).
    pub summary: String,
    pub overridden: Vec<Violation>,
    pub unused: Vec<String>,
}

/// How long an edit waits for another one to finish.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How often an edit starts over when the file changed underneath it (a writer that does not
/// take the lock) before giving up.
const EDIT_ATTEMPTS: usize = 3;

/// One edit of the control file, serialized with every other: takes the file's lock, reads it,
/// applies `edit`, screens the result against the safety rules (with `overrides`), bumps an
/// explicit `serial` above `floor` (everything recorded or served), tastes it with the loader
/// the server uses, and replaces the file only if all is good and it did not change since it
/// was read (else starts over). Nothing is written on any refusal.
///
/// `served` is what the running server serves when the server itself makes the edit (the
/// admin API): the taste then shares its zones when their files are unchanged, so a
/// break-glass flip costs the policies, not every zone compiled again (issue 29 item 3). The
/// CLI without a server passes `None` and loads everything.
pub fn edit_file(
    config: &Config,
    floor: u64,
    served: Option<&Compiled>,
    overrides: &[OverrideRequest],
    by: &str,
    edit: impl Fn(&str) -> Result<String, EditError>,
) -> Result<Written, ChangeError> {
    let path = config
        .control
        .file
        .clone()
        .ok_or(ChangeError::NoControlFile)?;
    let edit_error = |source| ChangeError::Edit {
        path: path.clone(),
        source,
    };
    let _lock = ControlLock::acquire(&path, LOCK_WAIT).map_err(edit_error)?;
    let recent = history(config)
        .map(|h| crate::safety::recent_from_history(&h, crate::safety::RECENT_VERSIONS))
        .unwrap_or_default();
    for _ in 0..EDIT_ATTEMPTS {
        let old = match crate::files::read_text_limited(&path, crate::files::SMALL_FILE_LIMIT) {
            Ok(text) => Some(text),
            Err(source) if path.exists() => {
                return Err(ChangeError::Read {
                    path: path.clone(),
                    source,
                })
            }
            Err(_) => None,
        };
        let current = old.as_deref().unwrap_or("");
        let edited = edit(current).map_err(edit_error)?;
        let screened = screen(config, current, &edited, &recent, overrides, by)?;
        let new_text = bump_serial(current, &screened.text, floor).map_err(edit_error)?;
        let candidate = ControlSource::Text {
            path: &path,
            text: &new_text,
        };
        load_after(config, candidate, served).map_err(ChangeError::Invalid)?;
        match replace_if_unchanged(&path, old.as_deref(), &new_text) {
            Ok(()) => {}
            Err(EditError::ChangedUnderneath { .. }) => continue,
            Err(e) => return Err(edit_error(e)),
        }
        let summary = match (
            ControlFile::parse(current, &path),
            ControlFile::parse(&new_text, &path),
        ) {
            (Ok(before), Ok(after)) if old.is_some() => summarize(&before, &after),
            _ => "control file replaced".to_string(),
        };
        return Ok(Written {
            path,
            text: new_text,
            summary,
            overridden: screened.overridden,
            unused: screened.unused,
        });
    }
    Err(ChangeError::Contended {
        path,
        attempts: EDIT_ATTEMPTS,
    })
}

/// An edit that keeps, adds or restores an explicit `serial` gets one above the file's, the
/// restored text's and `floor`: a version that is not newer would be refused by the history.
/// Without a serial on either side, the server numbers the version.
pub fn bump_serial(current: &str, edited: &str, floor: u64) -> Result<String, EditError> {
    let before = explicit_serial(current).unwrap_or(None);
    let after = explicit_serial(edited)?;
    if before.is_none() && after.is_none() {
        return Ok(edited.to_owned());
    }
    let next =
        crate::control::store::next_serial_above([before.unwrap_or(0), after.unwrap_or(0), floor]);
    set_serial(edited, next)
}

/// The newest serial the history recorded (0 if none).
pub fn recorded_floor(config: &Config) -> u64 {
    history(config)
        .ok()
        .and_then(|h| h.list().ok())
        .and_then(|v| v.last().map(|m| m.serial))
        .unwrap_or(0)
}
