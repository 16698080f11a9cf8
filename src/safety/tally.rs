//! The server's count of changes refused by safety rules, by rule id (the admin API's own
//! refusals, and the CLI's, which it reports): what status and `/metrics` show. Kept apart
//! from the pure rules; never touched by the serving path.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// What status shows of the safety rules.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SafetyStatus {
    /// The configured rules' ids, in order.
    pub rules: Vec<String>,
    /// Refused changes per rule id since the server started.
    pub refusals: BTreeMap<String, u64>,
    /// Overrides recorded per rule id since the server started (by the admin API).
    pub overrides: BTreeMap<String, u64>,
    /// The last refusal: when (RFC 3339) and which rules.
    pub last_refusal: Option<String>,
}

#[derive(Default)]
struct Counts {
    /// The configured rules' ids, as last read (at startup, and by each admin API write).
    configured: Vec<String>,
    refusals: BTreeMap<String, u64>,
    overrides: BTreeMap<String, u64>,
    last_refusal: Option<String>,
}

static COUNTS: Mutex<Counts> = Mutex::new(Counts {
    configured: Vec::new(),
    refusals: BTreeMap::new(),
    overrides: BTreeMap::new(),
    last_refusal: None,
});

fn counts() -> std::sync::MutexGuard<'static, Counts> {
    COUNTS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Longest rule id counted (ids come from the CLI's report: bounded, like the config's).
const MAX_ID: usize = 63;
/// Most distinct ids counted (a confused client cannot grow the map without bound).
const MAX_IDS: usize = 256;

fn bump(map: &mut BTreeMap<String, u64>, id: &str) {
    if id.is_empty() || id.len() > MAX_ID || (map.len() >= MAX_IDS && !map.contains_key(id)) {
        return;
    }
    *map.entry(id.to_owned()).or_default() += 1;
}

/// One change refused, by these rules.
pub fn count_refusal<'a>(rules: impl IntoIterator<Item = &'a str>) {
    let mut counts = counts();
    let mut ids = Vec::new();
    for id in rules {
        bump(&mut counts.refusals, id);
        ids.push(id.to_owned());
    }
    counts.last_refusal = Some(format!(
        "{}: {}",
        crate::rfc3339::format_utc(std::time::SystemTime::now()),
        ids.join(", ")
    ));
}

/// One change let through by overrides of these rules.
pub fn count_override<'a>(rules: impl IntoIterator<Item = &'a str>) {
    let mut counts = counts();
    for id in rules {
        bump(&mut counts.overrides, id);
    }
}

/// The rules the config has now (status lists them, with 0 for the never refused).
pub fn configure(rules: &super::SafetyConfig) {
    counts().configured = rules.rules.iter().map(|r| r.id.clone()).collect();
}

/// The counts, with the configured rules (every configured id appears, 0 if never refused).
pub fn status() -> SafetyStatus {
    let counts = counts();
    let mut refusals = counts.refusals.clone();
    let mut overrides = counts.overrides.clone();
    for id in &counts.configured {
        refusals.entry(id.clone()).or_default();
        overrides.entry(id.clone()).or_default();
    }
    SafetyStatus {
        rules: counts.configured.clone(),
        refusals,
        overrides,
        last_refusal: counts.last_refusal.clone(),
    }
}
