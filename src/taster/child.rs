//! The taster's side of the process boundary (`steerdns taste`, run by the server only): load
//! the change completely — config, zones, geo database, policies with the candidate control
//! text — and print one JSON [`Verdict`] line. Whatever goes wrong in here kills only this
//! process. This is also the only place that reads the fault drill's environment variable.

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::snapshot::load::{load_policies, load_steering, load_with, ControlSource};

use super::FAULT_ENV;

/// The child's answer, one JSON line on stdout (exit status 0 for ok, 1 for problems).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// Loaded completely; `fingerprint` (hex) names what was read, `ms` how long it took.
    Ok { fingerprint: String, ms: f64 },
    /// The change is invalid: one line per problem, as an in-process load reports them.
    Problems { problems: Vec<String> },
}

impl Verdict {
    pub fn exit_code(&self) -> u8 {
        match self {
            Verdict::Ok { .. } => 0,
            Verdict::Problems { .. } => 1,
        }
    }
}

/// A drill: what the taster does when the candidate control text, config file or a zone file
/// contains a marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `abort:<text>`: abort (SIGABRT), as a crashing compiler would.
    Abort(String),
    /// `spin:<text>`: busy-loop forever (trips the wall-clock or CPU limit).
    Spin(String),
    /// `oom:<text>`: allocate without end (trips the memory limit).
    Oom(String),
    /// `slow:<text>`: take a second, then taste as usual (a slow taste: what waits behind it).
    Slow(String),
}

impl Fault {
    /// `kind:<text>` with a non-empty text; anything else is no fault.
    pub fn parse(spec: &str) -> Option<Fault> {
        let (kind, text) = spec.split_once(':')?;
        if text.is_empty() {
            return None;
        }
        let text = text.to_string();
        match kind {
            "abort" => Some(Fault::Abort(text)),
            "spin" => Some(Fault::Spin(text)),
            "oom" => Some(Fault::Oom(text)),
            "slow" => Some(Fault::Slow(text)),
            _ => None,
        }
    }

    fn marker(&self) -> &str {
        match self {
            Fault::Abort(t) | Fault::Spin(t) | Fault::Oom(t) | Fault::Slow(t) => t,
        }
    }

    /// Acts if `control` contains the marker; returns otherwise.
    fn strike(&self, control: &str) {
        if !control.contains(self.marker()) {
            return;
        }
        eprintln!("taster fault drill ({FAULT_ENV}): {self:?}");
        match self {
            Fault::Abort(_) => std::process::abort(),
            Fault::Spin(_) => loop {
                std::hint::spin_loop();
            },
            Fault::Oom(_) => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 64 << 20]);
                }
            }
            Fault::Slow(_) => std::thread::sleep(std::time::Duration::from_secs(1)),
        }
    }
}

/// Tastes one change: `config` as the server read it (same file, same overrides) and the
/// candidate control text (`None`: the config names no control file); everything, or with
/// `steering_only` all but the zones (the server shares the zones it serves).
pub fn taste(
    config: Result<Config, impl std::fmt::Display>,
    control: Option<&str>,
    steering_only: bool,
    zone_windows: &[crate::snapshot::load::TasteWindow],
) -> Verdict {
    if let Some(fault) = std::env::var(FAULT_ENV).ok().and_then(|s| Fault::parse(&s)) {
        for text in control
            .map(str::to_string)
            .into_iter()
            .chain(config.iter().flat_map(drill_texts))
        {
            fault.strike(&text);
        }
    }
    let started = std::time::Instant::now();
    let config = match config {
        Ok(config) => config,
        Err(problem) => {
            return Verdict::Problems {
                problems: vec![problem.to_string()],
            }
        }
    };
    let path = config.control.file.clone().unwrap_or_default();
    let source = || match control {
        Some(text) => ControlSource::Text { path: &path, text },
        None => ControlSource::FromConfig,
    };
    if steering_only {
        for window in zone_windows {
            window.taste();
        }
        return match load_steering(&config, source()) {
            Ok(taste) => {
                let fingerprint = super::steering_fingerprint(
                    taste.config.as_ref(),
                    &taste.steered,
                    &config,
                    control,
                );
                Verdict::Ok {
                    fingerprint: format!("{fingerprint:x}"),
                    ms: started.elapsed().as_secs_f64() * 1000.0,
                }
            }
            Err(problems) => Verdict::Problems { problems },
        };
    }
    let loaded = match control {
        Some(text) => load_with(&config, ControlSource::Text { path: &path, text }),
        None => load_with(&config, ControlSource::FromConfig),
    };
    match loaded {
        Ok(loaded) => {
            let fingerprint = super::fingerprint(&config, &loaded.compiled, control);
            // The process ends right after: freeing the snapshot piece by piece would only
            // delay the verdict.
            std::mem::forget(loaded);
            Verdict::Ok {
                fingerprint: format!("{fingerprint:x}"),
                ms: started.elapsed().as_secs_f64() * 1000.0,
            }
        }
        Err(problems) => Verdict::Problems { problems },
    }
}

/// What the server sends the child on stdin (one JSON value) with `--difference-stdin`: the
/// candidate control text and the changed lines of the zone files it will apply as a
/// difference (see `crate::snapshot::load::difference_windows`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DifferenceBatch {
    pub control: Option<String>,
    pub windows: Vec<crate::snapshot::load::TasteWindow>,
}

/// One tenant document for the child to taste.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TenantTaste {
    pub name: String,
    pub file: String,
    pub text: String,
}

/// What the server sends the child on stdin (one JSON value) with `--tenants-stdin`: the
/// control text served (the platform's knobs) and the tenant documents to taste.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TenantBatch {
    pub control: Option<String>,
    pub tenants: Vec<TenantTaste>,
}

/// Tastes a batch of tenant documents: each is parsed and compiled against the platform
/// (config and control text, no zones). The fault drill strikes on a document's text too.
pub fn taste_tenants(
    config: Result<Config, impl std::fmt::Display>,
    batch: &TenantBatch,
) -> Verdict {
    if let Some(fault) = std::env::var(FAULT_ENV).ok().and_then(|s| Fault::parse(&s)) {
        for tenant in &batch.tenants {
            fault.strike(&tenant.text);
        }
    }
    let started = std::time::Instant::now();
    let config = match config {
        Ok(config) => config,
        Err(problem) => {
            return Verdict::Problems {
                problems: vec![problem.to_string()],
            }
        }
    };
    let path = config.control.file.clone().unwrap_or_default();
    let source = match &batch.control {
        Some(text) => ControlSource::Text { path: &path, text },
        None => ControlSource::FromConfig,
    };
    let policies = match load_policies(&config, source) {
        Ok(Some(policies)) => policies,
        Ok(None) => {
            return Verdict::Problems {
                problems: vec![
                    "the config steers no names: a tenant's names need a platform wildcard"
                        .to_string(),
                ],
            }
        }
        Err(problems) => return Verdict::Problems { problems },
    };
    let exists = |_: &[u8]| false;
    let platform = crate::tenant::PlatformView {
        policies: &policies,
        profiles: &config.profiles,
        exists: &exists,
        max_monitors: config.tenants.max_monitors,
    };
    let problems: Vec<String> = batch
        .tenants
        .iter()
        .flat_map(|t| taste_one_tenant(t, &platform))
        .collect();
    if problems.is_empty() {
        Verdict::Ok {
            fingerprint: "0".to_string(),
            ms: started.elapsed().as_secs_f64() * 1000.0,
        }
    } else {
        Verdict::Problems { problems }
    }
}

fn taste_one_tenant(
    tenant: &TenantTaste,
    platform: &crate::tenant::PlatformView<'_>,
) -> Vec<String> {
    let identity = crate::tenant::Identity {
        name: &tenant.name,
        serial: 0,
        fingerprint: 0,
    };
    crate::tenant::parse(&tenant.file, &tenant.text)
        .and_then(|parsed| crate::tenant::compile(&parsed, identity, platform))
        .err()
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// The files of a change besides its control text that the drill looks into: the config file
/// and the zone directory's files (so that a config or zone change can be drilled too).
fn drill_texts(config: &Config) -> Vec<String> {
    let read = |path: &std::path::Path| {
        crate::files::read_text_limited(path, crate::zone::parse::MAX_ZONE_FILE_BYTES).ok()
    };
    let zone_files = std::fs::read_dir(&config.server.zones)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path());
    config
        .source_path
        .iter()
        .cloned()
        .chain(zone_files)
        .filter_map(|path| read(&path))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_specs() {
        assert_eq!(
            Fault::parse("abort:BOOM"),
            Some(Fault::Abort("BOOM".into()))
        );
        assert_eq!(Fault::parse("spin:a:b"), Some(Fault::Spin("a:b".into())));
        assert_eq!(Fault::parse("oom:x"), Some(Fault::Oom("x".into())));
        assert_eq!(Fault::parse("abort:"), None);
        assert_eq!(Fault::parse("explode:x"), None);
        assert_eq!(Fault::parse("abort"), None);
        // No marker in the text: nothing happens.
        Fault::Abort("BOOM".into()).strike("weights = 1");
    }

    #[test]
    fn verdict_lines() {
        let ok = Verdict::Ok {
            fingerprint: "ff".into(),
            ms: 1.5,
        };
        let line = serde_json::to_string(&ok).expect("json");
        assert_eq!(line, r#"{"verdict":"ok","fingerprint":"ff","ms":1.5}"#);
        assert_eq!(serde_json::from_str::<Verdict>(&line).expect("parse"), ok);
        assert_eq!(ok.exit_code(), 0);
        let problems = Verdict::Problems {
            problems: vec!["a".into()],
        };
        assert_eq!(problems.exit_code(), 1);
    }

    #[test]
    fn an_unreadable_config_is_a_problem_not_a_crash() {
        let verdict = taste(Err("steerdns.toml: cannot read"), None, false, &[]);
        assert_eq!(
            verdict,
            Verdict::Problems {
                problems: vec!["steerdns.toml: cannot read".into()]
            }
        );
    }
}
