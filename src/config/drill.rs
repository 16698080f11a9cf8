//! The `[[drills]]` sections: practice shifts the drill runner (`crate::drill`) makes, watches
//! and reverts. Plain data and its checks against the topology and profiles.

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde::Deserialize;

use crate::policy::{ProfileConfig, TopologyConfig};

/// What a drill changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrillAction {
    /// Move `share` percent of `profile`'s total weight from endpoint `from` to `to`.
    Shift,
    /// Drain `region`.
    Drain,
    /// Force `region`'s clients to fallback site `site`.
    Fallback,
}

/// One `[[drills]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrillConfig {
    pub name: String,
    /// What the drill practises, in words.
    #[serde(default)]
    pub text: String,
    pub action: DrillAction,
    #[serde(default)]
    pub profile: Option<String>,
    #[serde(default)]
    pub from: Option<String>,
    #[serde(default)]
    pub to: Option<String>,
    /// Shift: percent of the profile's total weight moved (1..=100).
    #[serde(default)]
    pub share: Option<u32>,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub site: Option<String>,
    /// How long the shift is held (and checked) before it is reverted.
    pub duration_secs: u64,
    /// The name whose answers are observed (a steered name), and its type.
    pub query: String,
    #[serde(default = "default_qtype")]
    pub qtype: String,
    /// Sample client subnets, asked with ECS: each must get the answer the drill's control
    /// version predicts.
    pub subnets: Vec<IpNet>,
    /// Run by the server's schedule this often (never during an alert or an open rollout).
    #[serde(default)]
    pub every_secs: Option<u64>,
    /// Checks during the drill this often.
    #[serde(default = "default_check_interval_ms")]
    pub check_interval_ms: u64,
    /// A change (and the revert) must be served within this long.
    #[serde(default = "default_serve_timeout_ms")]
    pub serve_timeout_ms: u64,
    /// The server's SERVFAIL share may grow by at most this much (0..1) during the drill.
    #[serde(default = "default_servfail_increase")]
    pub max_servfail_increase: f64,
}

fn default_qtype() -> String {
    "A".into()
}
fn default_check_interval_ms() -> u64 {
    500
}
fn default_serve_timeout_ms() -> u64 {
    5000
}
fn default_servfail_increase() -> f64 {
    0.01
}

/// The first problem of the drills: (field, message), the field as `drills[i].name`.
pub fn problem(
    drills: &[DrillConfig],
    profiles: &BTreeMap<String, ProfileConfig>,
    topology: &TopologyConfig,
) -> Option<(String, String)> {
    for (i, d) in drills.iter().enumerate() {
        let at = |field: &str, message: String| Some((format!("drills[{i}].{field}"), message));
        let valid = |n: &str| {
            (1..=63).contains(&n.len())
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !valid(&d.name) {
            return at("name", format!("{:?} is not a valid drill name", d.name));
        }
        if drills[..i].iter().any(|o| o.name == d.name) {
            return at("name", format!("{:?} is used by an earlier drill", d.name));
        }
        if !(1..=3600).contains(&d.duration_secs) {
            return at("duration_secs", "must be 1..=3600".into());
        }
        if d.subnets.is_empty() || d.subnets.len() > 256 {
            return at("subnets", "needs 1 to 256 sample subnets".into());
        }
        if !matches!(d.qtype.as_str(), "A" | "AAAA") {
            return at("qtype", format!("{:?}: a drill asks A or AAAA", d.qtype));
        }
        if !d.query.ends_with('.') {
            return at("query", format!("{:?} needs the trailing dot", d.query));
        }
        if d.check_interval_ms < 50 || d.serve_timeout_ms < 100 {
            return at(
                "check_interval_ms",
                "need check_interval_ms >= 50 and serve_timeout_ms >= 100".into(),
            );
        }
        if !(0.0..=1.0).contains(&d.max_servfail_increase) {
            return at("max_servfail_increase", "must be within 0..=1".into());
        }
        if d.every_secs.is_some_and(|e| e <= d.duration_secs) {
            return at("every_secs", "must be longer than duration_secs".into());
        }
        if let Some(p) = action_problem(d, profiles, topology) {
            return at(p.0, p.1);
        }
    }
    None
}

fn action_problem(
    d: &DrillConfig,
    profiles: &BTreeMap<String, ProfileConfig>,
    topology: &TopologyConfig,
) -> Option<(&'static str, String)> {
    let region_ok = |r: &Option<String>| match r {
        None => Some(("region", "is required".to_string())),
        Some(r) if !topology.regions.iter().any(|t| &t.name == r) => {
            Some(("region", format!("{r:?} is not a region of [topology]")))
        }
        Some(_) => None,
    };
    match d.action {
        DrillAction::Shift => {
            let Some(name) = &d.profile else {
                return Some(("profile", "is required".into()));
            };
            let Some(profile) = profiles.get(name) else {
                return Some(("profile", format!("{name:?} is not a configured profile")));
            };
            for (field, endpoint) in [("from", &d.from), ("to", &d.to)] {
                match endpoint {
                    None => return Some((field, "is required".into())),
                    Some(e) if !profile.endpoints.iter().any(|c| &c.name == e) => {
                        return Some((field, format!("{e:?} is not an endpoint of {name:?}")))
                    }
                    Some(_) => {}
                }
            }
            if d.from == d.to {
                return Some(("to", "must differ from `from`".into()));
            }
            if !d.share.is_some_and(|s| (1..=100).contains(&s)) {
                return Some(("share", "is required, 1..=100 (percent)".into()));
            }
            None
        }
        DrillAction::Drain => region_ok(&d.region),
        DrillAction::Fallback => region_ok(&d.region).or_else(|| match &d.site {
            None => Some(("site", "is required".into())),
            Some(s) if !topology.fallback.iter().any(|f| &f.name == s) => Some((
                "site",
                format!("{s:?} is not a fallback site of [topology]"),
            )),
            Some(_) => None,
        }),
    }
}
