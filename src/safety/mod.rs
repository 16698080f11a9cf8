//! Safety rules (`[[safety.rules]]`): interlocks every control change must pass before it is
//! tasted — in the CLI (control file and fleet), the admin API and `steerdns safety check`.
//!
//! Owns the rules' shape, their checks against the topology and profiles, and [`evaluate`]:
//! one pure function from (rules, the config's baseline, the version before, the candidate,
//! the recent history, now) to the rules the candidate breaks. It reads no file and asks no
//! server; callers gather the inputs (see [`recent_from_history`]) and decide what a refusal
//! does. Three kinds of rule:
//!
//! - *assertions* on the state a change leaves: at least N of a set of endpoints of a profile
//!   (or of regions) serve; at most N regions drained; the fallback forced for at most N
//!   regions. A change is refused when the state after it breaks the assertion and is worse
//!   than the state before (so a change that repairs part of an overridden breach, or touches
//!   something else, is not refused for the breach an earlier override let in);
//! - *gates*: the listed knobs may change only while a gate (a control-file value,
//!   `gates.break-glass = "armed"`) held its value in the version before the change;
//! - a *wait period* on any rule: once the rule's targets changed, another change of them is
//!   refused for `wait_secs`, measured from the history's time of that change (anti-flap).
//!
//! Any of these is let through by an override naming the rule's id; the override (rule,
//! reason, who, when) is recorded in the version's text (`[[overrides]]`) and so in the
//! history, file or etcd alike.

pub mod tally;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::control::history::History;
use crate::control::ControlFile;
use crate::policy::{ForcedAnswer, ProfileConfig, TopologyConfig};

/// The `[safety]` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SafetyConfig {
    /// Evaluated in order; every broken rule is reported.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// What a rule checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleKind {
    /// At least `min` of `endpoints` of `profile` (all when empty) serve (enabled, weight not
    /// 0) — or, with `regions` instead of a profile, at least `min` of them are not drained.
    MinServing,
    /// At most `max` of `regions` (all when empty) drained.
    MaxDrained,
    /// At most `max` of `regions` (all when empty) forced to a fallback site.
    MaxFallback,
    /// `knobs` may change only while `gates.<gate>` is `gate_value` in the version before.
    Gate,
}

/// One `[[safety.rules]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Short name: what a refusal names and what `--override` takes.
    pub id: String,
    /// The rule in words, printed with every refusal.
    pub text: String,
    pub kind: RuleKind,
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub endpoints: Vec<String>,
    #[serde(default)]
    pub regions: Vec<String>,
    #[serde(default)]
    pub min: Option<usize>,
    #[serde(default)]
    pub max: Option<usize>,
    /// Gate rules: knob paths as in the control file (`profiles.critical`,
    /// `regions.*.drain`, `shield`); a path covers everything below it, `*` one name.
    #[serde(default)]
    pub knobs: Vec<String>,
    #[serde(default)]
    pub gate: Option<String>,
    #[serde(default = "default_gate_value")]
    pub gate_value: String,
    /// After a change of this rule's targets, further changes of them wait this long.
    #[serde(default)]
    pub wait_secs: u64,
}

fn default_gate_value() -> String {
    "armed".to_owned()
}

/// A rule problem in the config: the field (e.g. `safety.rules[1].min`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleProblem {
    pub field: String,
    pub message: String,
}

impl SafetyConfig {
    /// The first problem of the rules against the configured profiles and regions.
    pub fn problem(
        &self,
        profiles: &BTreeMap<String, ProfileConfig>,
        topology: &TopologyConfig,
    ) -> Option<RuleProblem> {
        let mut seen = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let at = |field: &str, message: String| {
                Some(RuleProblem {
                    field: format!("safety.rules[{i}].{field}"),
                    message,
                })
            };
            if !valid_name(&rule.id) {
                return at(
                    "id",
                    format!(
                        "{:?} is not a valid rule id (1 to 63 letters, digits, '-' or '_')",
                        rule.id
                    ),
                );
            }
            if seen.contains(&rule.id.as_str()) {
                return at("id", format!("{:?} is used by an earlier rule", rule.id));
            }
            seen.push(&rule.id);
            if rule.text.trim().is_empty() {
                return at("text", "must say what the rule protects".into());
            }
            if let Some(problem) = rule.problem(profiles, topology) {
                return at(problem.0, problem.1);
            }
        }
        None
    }

    /// The rule with this id.
    pub fn rule(&self, id: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.id == id)
    }
}

fn valid_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Rule {
    /// What is wrong with this rule's own fields: (field, message).
    fn problem(
        &self,
        profiles: &BTreeMap<String, ProfileConfig>,
        topology: &TopologyConfig,
    ) -> Option<(&'static str, String)> {
        let unknown_region = self
            .regions
            .iter()
            .find(|r| !topology.regions.iter().any(|t| &t.name == *r));
        if let Some(region) = unknown_region {
            return Some((
                "regions",
                format!("{region:?} is not a region of [topology]"),
            ));
        }
        let unused = |field: &'static str, set: bool| {
            set.then(|| (field, format!("is not used by a {} rule", self.kind_name())))
        };
        match self.kind {
            RuleKind::MinServing => {
                if self.min.is_none() {
                    return Some(("min", "is required (at least how many serve)".into()));
                }
                match (&self.profile, self.regions.is_empty()) {
                    (Some(_), false) | (None, true) => {
                        return Some((
                            "profile",
                            "name either a profile (with optional endpoints) or regions".into(),
                        ))
                    }
                    (Some(name), true) => {
                        let Some(profile) = profiles.get(name) else {
                            return Some((
                                "profile",
                                format!("{name:?} is not a configured profile"),
                            ));
                        };
                        if let Some(e) = self
                            .endpoints
                            .iter()
                            .find(|e| !profile.endpoints.iter().any(|c| &c.name == *e))
                        {
                            return Some((
                                "endpoints",
                                format!("{e:?} is not an endpoint of profile {name:?}"),
                            ));
                        }
                    }
                    (None, false) => {
                        if !self.endpoints.is_empty() {
                            return Some(("endpoints", "endpoints need a profile".into()));
                        }
                    }
                }
                unused("max", self.max.is_some())
                    .or_else(|| unused("gate", self.gate.is_some()))
                    .or_else(|| unused("knobs", !self.knobs.is_empty()))
            }
            RuleKind::MaxDrained | RuleKind::MaxFallback => {
                if self.max.is_none() {
                    return Some(("max", "is required (at most how many regions)".into()));
                }
                unused("min", self.min.is_some())
                    .or_else(|| unused("profile", self.profile.is_some()))
                    .or_else(|| unused("endpoints", !self.endpoints.is_empty()))
                    .or_else(|| unused("gate", self.gate.is_some()))
                    .or_else(|| unused("knobs", !self.knobs.is_empty()))
            }
            RuleKind::Gate => {
                match &self.gate {
                    None => return Some(("gate", "is required (the gate's name)".into())),
                    Some(g) if !valid_name(g) => {
                        return Some(("gate", format!("{g:?} is not a valid gate name")))
                    }
                    Some(_) => {}
                }
                if self.knobs.is_empty() {
                    return Some(("knobs", "is required (the knobs the gate guards)".into()));
                }
                if let Some(k) = self.knobs.iter().find(|k| !valid_pattern(k)) {
                    return Some(("knobs", format!("{k:?} is not a knob path (e.g. \"profiles.critical\", \"regions.*.drain\")")));
                }
                unused("min", self.min.is_some())
                    .or_else(|| unused("max", self.max.is_some()))
                    .or_else(|| unused("profile", self.profile.is_some()))
                    .or_else(|| unused("regions", !self.regions.is_empty()))
            }
        }
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            RuleKind::MinServing => "min-serving",
            RuleKind::MaxDrained => "max-drained",
            RuleKind::MaxFallback => "max-fallback",
            RuleKind::Gate => "gate",
        }
    }

    /// The knob paths this rule watches for its wait period.
    fn targets(&self) -> Vec<String> {
        let regions = |knob: &str| -> Vec<String> {
            if self.regions.is_empty() {
                vec![format!("regions.*.{knob}")]
            } else {
                self.regions
                    .iter()
                    .map(|r| format!("regions.{r}.{knob}"))
                    .collect()
            }
        };
        match self.kind {
            RuleKind::MinServing => match &self.profile {
                Some(p) if self.endpoints.is_empty() => vec![format!("profiles.{p}")],
                Some(p) => self
                    .endpoints
                    .iter()
                    .map(|e| format!("profiles.{p}.endpoints.{e}"))
                    .collect(),
                None => regions("drain"),
            },
            RuleKind::MaxDrained => regions("drain"),
            RuleKind::MaxFallback => regions("force"),
            RuleKind::Gate => self.knobs.clone(),
        }
    }
}

fn valid_pattern(pattern: &str) -> bool {
    pattern
        .split('.')
        .all(|part| part == "*" || valid_name(part))
}

/// Does `pattern` cover `key` (both dotted; `*` matches one name; a pattern covers what is
/// below it)?
fn covers(pattern: &str, key: &str) -> bool {
    let mut keys = key.split('.');
    pattern
        .split('.')
        .all(|p| keys.next().is_some_and(|k| p == "*" || p == k))
}

/// What the config says before any control file: each endpoint's weight and whether it is
/// enabled, and the regions.
#[derive(Debug, Clone, Default)]
pub struct Baseline {
    profiles: BTreeMap<String, BTreeMap<String, (Option<u32>, bool)>>,
    regions: Vec<String>,
}

impl Baseline {
    pub fn new(profiles: &BTreeMap<String, ProfileConfig>, topology: &TopologyConfig) -> Baseline {
        Baseline {
            profiles: profiles
                .iter()
                .map(|(name, p)| {
                    let endpoints = p
                        .endpoints
                        .iter()
                        .map(|e| (e.name.clone(), (e.weight, e.enabled)))
                        .collect();
                    (name.clone(), endpoints)
                })
                .collect(),
            regions: topology.regions.iter().map(|r| r.name.clone()).collect(),
        }
    }

    /// Every knob the control file can set, as `path -> value`, with the config's values where
    /// `control` sets nothing.
    fn knobs(&self, control: &ControlFile) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (profile, endpoints) in &self.profiles {
            for (endpoint, (weight, enabled)) in endpoints {
                let knobs = control
                    .profiles
                    .get(profile)
                    .and_then(|p| p.endpoints.get(endpoint));
                let prefix = format!("profiles.{profile}.endpoints.{endpoint}");
                let weight = knobs.and_then(|k| k.weight).or(*weight);
                let enabled = knobs.and_then(|k| k.enabled).unwrap_or(*enabled);
                let force_up = knobs.and_then(|k| k.force_up).unwrap_or(false);
                out.insert(format!("{prefix}.weight"), format!("{weight:?}"));
                out.insert(format!("{prefix}.enabled"), enabled.to_string());
                out.insert(format!("{prefix}.force_up"), force_up.to_string());
            }
        }
        for region in &self.regions {
            let knobs = control.regions.get(region);
            out.insert(
                format!("regions.{region}.drain"),
                knobs.is_some_and(|k| k.drain).to_string(),
            );
            let force = knobs.and_then(|k| k.force.as_ref());
            out.insert(
                format!("regions.{region}.force"),
                force.map_or_else(|| "none".to_owned(), ToString::to_string),
            );
        }
        out.insert("shield".into(), control.shield.name().to_owned());
        for (gate, value) in &control.gates {
            out.insert(format!("gates.{gate}"), value.clone());
        }
        out
    }

    /// How many of the rule's set serve / are drained / are forced to a fallback in `control`.
    fn count(&self, rule: &Rule, control: &ControlFile) -> usize {
        let in_set = |region: &&String| rule.regions.is_empty() || rule.regions.contains(region);
        let regions = self.regions.iter().filter(in_set);
        match rule.kind {
            RuleKind::MinServing => match &rule.profile {
                Some(profile) => self.serving(profile, &rule.endpoints, control),
                None => regions.filter(|r| !drained(control, r)).count(),
            },
            RuleKind::MaxDrained => regions.filter(|r| drained(control, r)).count(),
            RuleKind::MaxFallback => regions
                .filter(|r| {
                    control
                        .regions
                        .get(*r)
                        .is_some_and(|k| matches!(k.force, Some(ForcedAnswer::Fallback(_))))
                })
                .count(),
            RuleKind::Gate => 0,
        }
    }

    fn serving(&self, profile: &str, only: &[String], control: &ControlFile) -> usize {
        let Some(endpoints) = self.profiles.get(profile) else {
            return 0;
        };
        endpoints
            .iter()
            .filter(|(name, _)| only.is_empty() || only.contains(name))
            .filter(|(name, (weight, enabled))| {
                let knobs = control
                    .profiles
                    .get(profile)
                    .and_then(|p| p.endpoints.get(*name));
                let weight = knobs.and_then(|k| k.weight).or(*weight);
                let enabled = knobs.and_then(|k| k.enabled).unwrap_or(*enabled);
                enabled && weight != Some(0)
            })
            .count()
    }
}

fn drained(control: &ControlFile, region: &str) -> bool {
    control.regions.get(region).is_some_and(|k| k.drain)
}

/// One recorded version: when it was accepted and what it held.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub at: SystemTime,
    pub control: ControlFile,
}

/// A change to evaluate.
#[derive(Debug, Clone, Copy)]
pub struct Change<'a> {
    /// The version the change replaces (`ControlFile::default()` when there is none).
    pub before: &'a ControlFile,
    pub after: &'a ControlFile,
    /// Recent accepted versions, oldest first (for wait periods).
    pub recent: &'a [Recorded],
    pub now: SystemTime,
}

/// A rule the change breaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub rule: String,
    pub text: String,
    /// Why this change breaks it.
    pub why: String,
    /// The first knob the change touched that the rule watches (`profiles.critical.endpoints.
    /// frontdoor.weight`), to name in the refusal.
    #[serde(default)]
    pub field: Option<String>,
    /// That knob's line in the candidate text, when the caller looked it up.
    #[serde(default)]
    pub line: Option<usize>,
    /// Let through by an override naming the rule.
    pub overridden: bool,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "safety rule {} ({}): {}", self.rule, self.text, self.why)?;
        if self.overridden {
            write!(f, " [overridden]")?;
        }
        Ok(())
    }
}

/// Every rule `change` breaks, each marked overridden when `overrides` names its id. The
/// change may go ahead when none is left un-overridden (see [`refused`]).
pub fn evaluate(
    rules: &SafetyConfig,
    baseline: &Baseline,
    change: Change<'_>,
    overrides: &[String],
) -> Vec<Violation> {
    let before = baseline.knobs(change.before);
    let after = baseline.knobs(change.after);
    let touched: Vec<&String> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .chain(before.keys().filter(|k| !after.contains_key(*k)))
        .collect();
    let mut out = Vec::new();
    for rule in &rules.rules {
        let mut why = breach(rule, baseline, change, &touched);
        if why.is_none() && rule.wait_secs > 0 {
            why = too_soon(rule, baseline, change, &touched);
        }
        if let Some(why) = why {
            let targets = rule.targets();
            let field = touched
                .iter()
                .find(|k| targets.iter().any(|t| covers(t, k)))
                .map(|k| k.to_string());
            out.push(Violation {
                rule: rule.id.clone(),
                text: rule.text.clone(),
                why,
                field,
                line: None,
                overridden: overrides.contains(&rule.id),
            });
        }
    }
    out
}

/// Does any violation stand (not overridden)?
pub fn refused(violations: &[Violation]) -> bool {
    violations.iter().any(|v| !v.overridden)
}

/// The assertion or gate `rule` states, broken by `change`: why, if so.
fn breach(
    rule: &Rule,
    baseline: &Baseline,
    change: Change<'_>,
    touched: &[&String],
) -> Option<String> {
    let (before, after) = (
        baseline.count(rule, change.before),
        baseline.count(rule, change.after),
    );
    match rule.kind {
        RuleKind::MinServing => {
            let min = rule.min.unwrap_or(0);
            (after < min && after < before)
                .then(|| format!("{after} would serve, at least {min} must (before: {before})"))
        }
        RuleKind::MaxDrained | RuleKind::MaxFallback => {
            let max = rule.max.unwrap_or(usize::MAX);
            let what = if rule.kind == RuleKind::MaxDrained {
                "drained"
            } else {
                "forced to a fallback site"
            };
            (after > max && after > before).then(|| {
                format!("{after} regions would be {what}, at most {max} may (before: {before})")
            })
        }
        RuleKind::Gate => {
            let gate = rule.gate.as_deref().unwrap_or_default();
            let guarded: Vec<&str> = touched
                .iter()
                .filter(|k| rule.knobs.iter().any(|p| covers(p, k)))
                .map(|k| k.as_str())
                .collect();
            let open = change.before.gates.get(gate) == Some(&rule.gate_value);
            (!guarded.is_empty() && !open).then(|| {
                format!(
                    "{} changed while gates.{gate} is not {:?} (arm it in an earlier change)",
                    guarded.join(", "),
                    rule.gate_value
                )
            })
        }
    }
}

/// The change touches the rule's targets within `wait_secs` of their last recorded change.
fn too_soon(
    rule: &Rule,
    baseline: &Baseline,
    change: Change<'_>,
    touched: &[&String],
) -> Option<String> {
    let targets = rule.targets();
    let hits = |key: &String| targets.iter().any(|t| covers(t, key));
    if !touched.iter().any(|k| hits(k)) {
        return None;
    }
    let last = change.recent.windows(2).rev().find_map(|pair| {
        let (a, b) = (
            baseline.knobs(&pair[0].control),
            baseline.knobs(&pair[1].control),
        );
        let changed = b.iter().any(|(k, v)| hits(k) && a.get(k) != Some(v));
        changed.then_some(pair[1].at)
    })?;
    let wait = Duration::from_secs(rule.wait_secs);
    let since = change.now.duration_since(last).unwrap_or(Duration::ZERO);
    (since < wait).then(|| {
        format!(
            "its targets changed {} s ago (at {}); wait {} s between changes ({} s left)",
            since.as_secs(),
            crate::rfc3339::format_utc(last),
            rule.wait_secs,
            (wait - since).as_secs().max(1)
        )
    })
}

/// The recent accepted versions of a control history, oldest first, with their times; entries
/// whose time or text does not parse are left out (they cannot start a wait period).
pub fn recent_from_history(history: &History, how_many: usize) -> Vec<Recorded> {
    let Ok(versions) = history.list() else {
        return Vec::new();
    };
    let start = versions.len().saturating_sub(how_many);
    versions[start..]
        .iter()
        .filter_map(|meta| {
            let (_, text) = history.get(meta.serial).ok()??;
            recorded(&meta.time, &text)
        })
        .collect()
}

/// One history entry (`time` RFC 3339, the version's text) as a [`Recorded`].
pub fn recorded(time: &str, text: &str) -> Option<Recorded> {
    let at = crate::rfc3339::parse(time).ok()?;
    let control = ControlFile::parse(text, std::path::Path::new("history")).ok()?;
    Some(Recorded { at, control })
}

/// How many recent versions a wait period looks back over.
pub const RECENT_VERSIONS: usize = 20;

#[cfg(test)]
mod tests;
