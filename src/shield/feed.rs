//! The load feed: the JSON document that tells the shield how loaded each frontend region and
//! each fallback site is, and the checks it must pass before the shield may look at it.
//!
//! ```json
//! {"time": "2026-11-30T10:00:00Z",
//!  "source": "prometheus-exporter@mon-1",
//!  "regions":  {"eu-west": {"load": 950, "capacity": 1000}},
//!  "fallback": {"fb-eu":   {"load": 200, "capacity": 2000}},
//!  "cells":    {"global":  {"g1": {"load": 90, "capacity": 100}}},
//!  "tenants":  {"contoso": {"eu-west": 600}}}
//! ```
//!
//! - `time` (required): when the numbers were measured, RFC 3339 (`Z` or a `±HH:MM` offset,
//!   optional fraction). At most [`MAX_FUTURE_SKEW`] ahead of this server's clock.
//! - `regions`, `fallback` (each optional; a feed has at least one entry in them or `cells`): name → `{load, capacity}`, in the
//!   same units (requests/s, Gbit/s, … as long as both agree), each at most
//!   [`MAX_FEED_VALUE`]. Names must be configured regions and fallback sites; one left out of a
//!   feed means "no fresh data" for it.
//! - `cells` (optional): layer → cell → `{load, capacity}`, the load of one anycast cell,
//!   checked as a region's. Layers and cells are named as the control file names them
//!   (`[cells.LAYER.CELL]`): the layer is `global`, a region's or a fallback site's name with
//!   cells, the cell one of its cells; an unknown one is refused naming it. A cell goes hot
//!   (left out of tenants' answers) above the shield's high watermark and comes back below
//!   the low one ([`super::step::cells`]). Counted with the other entries.
//! - `tenants` (optional): tenant name → region name → the load that tenant's clients located
//!   in the region bring (wherever they are served), in the region's units, for tenant-first
//!   shedding (`[shield] tenant_share`). Region names must be configured; a tenant name is at
//!   most [`MAX_TENANT_NAME`] characters without control characters (a name the server does not
//!   serve moves nothing). Counted with the other entries against [`MAX_FEED_ENTRIES`].
//! - `source` (optional): a free-text label of the sender, for operators; the shield ignores it.
//!
//! Anything else is refused, and a feed with any fault is refused whole: the shield never acts
//! on half a feed. Every file, HTTP push and CLI push goes through [`parse_feed`].
//!
//! Owns the format and its checks only: no I/O and no clock (the caller passes `now`); where a
//! feed came from and which one is current is [`super::source`]'s business.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// Largest feed accepted, in bytes.
pub const MAX_FEED_BYTES: usize = 1 << 20;
/// Most `regions` plus `fallback` entries in one feed.
pub const MAX_FEED_ENTRIES: usize = 10_000;
/// How far a feed's `time` may be ahead of this server's clock (clock skew between hosts).
pub const MAX_FUTURE_SKEW: Duration = Duration::from_secs(300);
/// Largest load/capacity ratio believed; above it the two are surely in different units.
pub const MAX_LOAD_RATIO: f64 = 100.0;
/// Largest load or capacity accepted (10^15 of any unit: requests/s, bit/s, …). The step adds,
/// subtracts and divides these over every region and site; values near `f64::MAX` pass the
/// other checks yet overflow to infinity (then NaN) there.
pub const MAX_FEED_VALUE: f64 = 1e15;
/// Longest tenant name in a feed (a tenant's name is its document's file stem).
pub const MAX_TENANT_NAME: usize = 255;
/// Longest `source` label.
const MAX_SOURCE_LABEL: usize = 256;
/// How much of an unknown name is echoed back in an error.
const MAX_ECHOED_NAME: usize = 64;
/// How many configured names an "unknown name" error lists.
const MAX_LISTED_NAMES: usize = 12;

/// The names a feed may use: the configured regions, fallback sites and cells (each cell as
/// its layer's name as the control file writes it, and its own name).
#[derive(Debug, Clone, Copy, Default)]
pub struct FeedNames<'a> {
    pub regions: &'a [&'a str],
    pub sites: &'a [&'a str],
    pub cells: &'a [(&'a str, &'a str)],
}

/// The load of one region or site, in the sender's units (checked finite, `capacity > 0`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub load: f64,
    pub capacity: f64,
}

impl Sample {
    /// Load divided by capacity: 1.0 means full.
    pub fn utilisation(&self) -> f64 {
        self.load / self.capacity
    }
}

/// A feed that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadFeed {
    /// When the sender measured the numbers (its clock).
    pub time: SystemTime,
    /// Frontend regions, by configured name.
    pub regions: BTreeMap<String, Sample>,
    /// Fallback sites, by configured name.
    pub fallback: BTreeMap<String, Sample>,
    /// Per tenant, per configured region: the load the tenant's clients there bring.
    pub tenants: BTreeMap<String, BTreeMap<String, f64>>,
    /// Per layer (as the control file names it), per cell: the cell's load.
    pub cells: BTreeMap<String, BTreeMap<String, Sample>>,
}

impl LoadFeed {
    /// The feed as a feed document again (time to the millisecond), which [`parse_feed`]
    /// reads back to an equal feed: fleet mode shares a feed through etcd this way.
    pub fn to_json(&self) -> String {
        let section =
            |table: &BTreeMap<String, Sample>| -> serde_json::Map<String, serde_json::Value> {
                table
                    .iter()
                    .map(|(name, s)| {
                        (
                            name.clone(),
                            serde_json::json!({"load": s.load, "capacity": s.capacity}),
                        )
                    })
                    .collect()
            };
        let mut document = serde_json::json!({
            "time": crate::rfc3339::format_utc_millis(self.time),
            "regions": section(&self.regions),
            "fallback": section(&self.fallback),
        });
        if !self.tenants.is_empty() {
            document["tenants"] = serde_json::json!(self.tenants);
        }
        if !self.cells.is_empty() {
            let cells: serde_json::Map<String, serde_json::Value> = self
                .cells
                .iter()
                .map(|(layer, cells)| (layer.clone(), serde_json::Value::Object(section(cells))))
                .collect();
            document["cells"] = serde_json::Value::Object(cells);
        }
        document.to_string()
    }
}

/// Why a feed was refused. Field paths read like `regions.eu-west.capacity`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FeedError {
    #[error("load feed is {size} bytes; the limit is {limit} bytes")]
    TooLarge { size: u64, limit: usize },
    #[error("load feed is not UTF-8 (invalid byte at offset {offset})")]
    NotUtf8 { offset: usize },
    /// Not JSON, or JSON of the wrong shape (the message carries line and column).
    #[error("load feed does not parse: {0}")]
    Syntax(String),
    #[error("load feed has {count} entries in regions, fallback, cells and tenants; the limit is {limit}")]
    TooManyEntries { count: usize, limit: usize },
    #[error("load feed has no regions and no fallback sites (and no cells)")]
    Empty,
    #[error("time: {value:?} is not an RFC 3339 time ({reason})")]
    BadTime { value: String, reason: String },
    #[error(
        "time: {value} is {ahead_secs} s ahead of this server's clock (at most {limit_secs} s \
         allowed; check the sender's clock)"
    )]
    FutureTime {
        value: String,
        ahead_secs: u64,
        limit_secs: u64,
    },
    #[error("source: {0}")]
    BadSource(String),
    /// A name that is not configured: a typo must not silently do nothing.
    #[error("{section}.{name}: unknown {kind} (configured: {known})")]
    UnknownName {
        section: &'static str,
        name: String,
        kind: &'static str,
        known: String,
    },
    /// A load or capacity that cannot be right.
    #[error("{field}: {problem}")]
    BadValue { field: String, problem: String },
    /// The feed could not be read at all (file source).
    #[error("{what}: cannot read: {reason}")]
    Unreadable { what: String, reason: String },
}

/// Parses and checks a feed against the configured region and fallback site names. `now` is
/// this server's clock, for the skew guard.
pub fn parse_feed(
    bytes: &[u8],
    names: &FeedNames<'_>,
    now: SystemTime,
) -> Result<LoadFeed, FeedError> {
    let FeedNames { regions, sites, .. } = *names;
    if bytes.len() > MAX_FEED_BYTES {
        return Err(FeedError::TooLarge {
            size: bytes.len() as u64,
            limit: MAX_FEED_BYTES,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| FeedError::NotUtf8 {
        offset: e.valid_up_to(),
    })?;
    let raw: RawFeed = serde_json::from_str(text).map_err(|e| FeedError::Syntax(e.to_string()))?;
    check_shape(&raw)?;
    let time = check_time(&raw.time, now)?;
    let tenants = check_tenants(
        raw.tenants.into_iter().flat_map(|(tenant, loads)| {
            loads.into_iter().map(move |(r, l)| (tenant.clone(), r, l))
        }),
        regions,
    )?;
    let cells = check_cells(
        raw.cells.into_iter().flat_map(|(layer, cells)| {
            cells
                .0
                .into_iter()
                .map(move |(cell, sample)| (layer.clone(), cell, sample))
        }),
        names.cells,
    )?;
    let regions = check_section("regions", "region", raw.regions, regions)?;
    let fallback = check_section("fallback", "fallback site", raw.fallback, sites)?;
    Ok(LoadFeed {
        time,
        regions,
        fallback,
        tenants,
        cells,
    })
}

/// A feed assembled from numbers rather than parsed from JSON (a Prometheus query's results):
/// name, load, capacity per entry. Non-finite values are allowed here, for the checks to refuse.
#[derive(Debug, Clone, PartialEq)]
pub struct FeedEntries {
    /// When the numbers were measured.
    pub time: SystemTime,
    pub regions: Vec<(String, f64, f64)>,
    pub fallback: Vec<(String, f64, f64)>,
    /// Tenant, region, load (a per-tenant query's results).
    pub tenants: Vec<(String, String, f64)>,
    /// Layer, cell, load, capacity (a per-cell query's results).
    pub cells: Vec<(String, String, f64, f64)>,
}

/// Checks assembled entries by exactly the rules [`parse_feed`] applies once the JSON is read:
/// entry count, no name twice, the clock-skew guard, configured names, finite non-negative
/// loads, positive capacities, believable load/capacity ratios.
pub fn check_entries(
    entries: FeedEntries,
    names: &FeedNames<'_>,
    now: SystemTime,
) -> Result<LoadFeed, FeedError> {
    let FeedNames { regions, sites, .. } = *names;
    let rings = entries.regions.len() + entries.fallback.len() + entries.cells.len();
    check_count(rings)?;
    check_count_with_tenants(rings, entries.tenants.len())?;
    check_skew(
        entries.time,
        || crate::rfc3339::format_utc(entries.time),
        now,
    )?;
    let raw = |section: &'static str, list: Vec<(String, f64, f64)>| {
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::with_capacity(list.len());
        for (name, load, capacity) in list {
            if !seen.insert(name.clone()) {
                return Err(FeedError::BadValue {
                    field: format!("{section}.{}", echo(&name)),
                    problem: "appears twice".into(),
                });
            }
            out.push((name, RawSample { load, capacity }));
        }
        Ok(out)
    };
    let tenants = check_tenants(entries.tenants, regions)?;
    let cells = check_cells(
        entries
            .cells
            .into_iter()
            .map(|(layer, cell, load, capacity)| (layer, cell, RawSample { load, capacity })),
        names.cells,
    )?;
    let regions = check_section(
        "regions",
        "region",
        raw("regions", entries.regions)?,
        regions,
    )?;
    let fallback = check_section(
        "fallback",
        "fallback site",
        raw("fallback", entries.fallback)?,
        sites,
    )?;
    Ok(LoadFeed {
        time: entries.time,
        regions,
        fallback,
        tenants,
        cells,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFeed {
    time: String,
    #[serde(default)]
    source: Option<String>,
    #[serde(default, deserialize_with = "unique_names")]
    regions: Vec<(String, RawSample)>,
    #[serde(default, deserialize_with = "unique_names")]
    fallback: Vec<(String, RawSample)>,
    #[serde(default, deserialize_with = "unique_names")]
    tenants: Vec<(String, TenantRegions)>,
    #[serde(default, deserialize_with = "unique_names")]
    cells: Vec<(String, LayerCells)>,
}

/// One layer's cells: cell → sample, each cell once.
struct LayerCells(Vec<(String, RawSample)>);

impl<'de> Deserialize<'de> for LayerCells {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        unique_names(deserializer).map(LayerCells)
    }
}

/// One tenant's figures: region → load, each region once.
struct TenantRegions(Vec<(String, f64)>);

impl<'de> Deserialize<'de> for TenantRegions {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        unique_names(deserializer).map(TenantRegions)
    }
}

impl IntoIterator for TenantRegions {
    type Item = (String, f64);
    type IntoIter = std::vec::IntoIter<(String, f64)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSample {
    load: f64,
    capacity: f64,
}

/// A JSON object read in order, refusing a name given twice (serde_json would silently keep
/// the last one, and two numbers for one region means the sender is confused).
fn unique_names<'de, D: Deserializer<'de>, V: Deserialize<'de>>(
    deserializer: D,
) -> Result<Vec<(String, V)>, D::Error> {
    struct UniqueNames<V>(std::marker::PhantomData<V>);
    impl<'de, V: Deserialize<'de>> Visitor<'de> for UniqueNames<V> {
        type Value = Vec<(String, V)>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object of names, each given once")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut seen = std::collections::BTreeSet::new();
            let mut entries = Vec::new();
            while let Some((name, sample)) = map.next_entry::<String, V>()? {
                if entries.len() >= MAX_FEED_ENTRIES {
                    return Err(serde::de::Error::custom(format!(
                        "more than {MAX_FEED_ENTRIES} entries"
                    )));
                }
                if !seen.insert(name.clone()) {
                    return Err(serde::de::Error::custom(format!(
                        "{:?} appears twice",
                        echo(&name)
                    )));
                }
                entries.push((name, sample));
            }
            Ok(entries)
        }
    }
    deserializer.deserialize_map(UniqueNames(std::marker::PhantomData))
}

/// The one rule on how many entries a feed may have, parsed or assembled.
fn check_count(count: usize) -> Result<(), FeedError> {
    if count > MAX_FEED_ENTRIES {
        return Err(FeedError::TooManyEntries {
            count,
            limit: MAX_FEED_ENTRIES,
        });
    }
    if count == 0 {
        return Err(FeedError::Empty);
    }
    Ok(())
}

/// The entry limit counts tenant figures too (each tenant's each region).
fn check_count_with_tenants(rings: usize, tenant_figures: usize) -> Result<(), FeedError> {
    check_count(rings.saturating_add(tenant_figures))
}

fn check_shape(raw: &RawFeed) -> Result<(), FeedError> {
    let cells: usize = raw.cells.iter().map(|(_, c)| c.0.len()).sum();
    let rings = raw.regions.len() + raw.fallback.len() + cells;
    check_count(rings)?;
    let figures: usize = raw.tenants.iter().map(|(_, r)| r.0.len()).sum();
    check_count_with_tenants(rings, figures)?;
    if let Some(source) = &raw.source {
        if source.chars().count() > MAX_SOURCE_LABEL {
            return Err(FeedError::BadSource(format!(
                "longer than {MAX_SOURCE_LABEL} characters"
            )));
        }
        if source.chars().any(char::is_control) {
            return Err(FeedError::BadSource("contains control characters".into()));
        }
    }
    Ok(())
}

fn check_time(value: &str, now: SystemTime) -> Result<SystemTime, FeedError> {
    let time = crate::rfc3339::parse(value).map_err(|reason| FeedError::BadTime {
        value: echo(value),
        reason,
    })?;
    check_skew(time, || value.to_string(), now)?;
    Ok(time)
}

/// Refuses a time more than [`MAX_FUTURE_SKEW`] ahead of `now`; `shown` is how the time reads.
fn check_skew(
    time: SystemTime,
    shown: impl FnOnce() -> String,
    now: SystemTime,
) -> Result<(), FeedError> {
    if let Ok(ahead) = time.duration_since(now) {
        if ahead > MAX_FUTURE_SKEW {
            return Err(FeedError::FutureTime {
                value: shown(),
                ahead_secs: ahead.as_secs(),
                limit_secs: MAX_FUTURE_SKEW.as_secs(),
            });
        }
    }
    Ok(())
}

fn check_section(
    section: &'static str,
    kind: &'static str,
    entries: Vec<(String, RawSample)>,
    configured: &[&str],
) -> Result<BTreeMap<String, Sample>, FeedError> {
    let mut checked = BTreeMap::new();
    for (name, raw) in entries {
        if !configured.contains(&name.as_str()) {
            return Err(FeedError::UnknownName {
                section,
                name: echo(&name),
                kind,
                known: list_names(configured),
            });
        }
        let sample = check_sample(&format!("{section}.{name}"), raw)?;
        checked.insert(name, sample);
    }
    Ok(checked)
}

/// Checks tenant figures (tenant, region, load): a tenant name of at most
/// [`MAX_TENANT_NAME`] characters without control characters, a configured region, a finite
/// non-negative load within [`MAX_FEED_VALUE`], each (tenant, region) once.
fn check_tenants(
    figures: impl IntoIterator<Item = (String, String, f64)>,
    regions: &[&str],
) -> Result<BTreeMap<String, BTreeMap<String, f64>>, FeedError> {
    let mut checked: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for (tenant, region, load) in figures {
        let field = format!("tenants.{}.{}", echo(&tenant), echo(&region));
        let bad = |problem: String| FeedError::BadValue {
            field: field.clone(),
            problem,
        };
        if tenant.is_empty()
            || tenant.chars().count() > MAX_TENANT_NAME
            || tenant.chars().any(char::is_control)
        {
            return Err(bad(format!(
                "a tenant name is 1..={MAX_TENANT_NAME} characters without control characters"
            )));
        }
        if !regions.contains(&region.as_str()) {
            return Err(FeedError::UnknownName {
                section: "tenants",
                name: format!("{}.{}", echo(&tenant), echo(&region)),
                kind: "region",
                known: list_names(regions),
            });
        }
        if !(0.0..=MAX_FEED_VALUE).contains(&load) {
            return Err(bad(format!(
                "must be ≥ 0 and at most {MAX_FEED_VALUE:e} (got {load})"
            )));
        }
        if checked
            .entry(tenant)
            .or_default()
            .insert(region, load)
            .is_some()
        {
            return Err(bad("appears twice".into()));
        }
    }
    Ok(checked)
}

/// Checks cell loads (layer, cell, sample): a configured cell of a configured layer (else
/// refused naming `cells.LAYER.CELL` and the configured cells), the sample as a region's,
/// each cell once.
fn check_cells(
    entries: impl IntoIterator<Item = (String, String, RawSample)>,
    configured: &[(&str, &str)],
) -> Result<BTreeMap<String, BTreeMap<String, Sample>>, FeedError> {
    let mut checked: BTreeMap<String, BTreeMap<String, Sample>> = BTreeMap::new();
    for (layer, cell, raw) in entries {
        let field = format!("cells.{}.{}", echo(&layer), echo(&cell));
        if !configured.contains(&(layer.as_str(), cell.as_str())) {
            let known: Vec<String> = configured.iter().map(|(l, c)| format!("{l}.{c}")).collect();
            let known: Vec<&str> = known.iter().map(String::as_str).collect();
            let kind = if configured.iter().any(|(l, _)| *l == layer) {
                "cell"
            } else {
                "cell layer"
            };
            return Err(FeedError::UnknownName {
                section: "cells",
                name: format!("{}.{}", echo(&layer), echo(&cell)),
                kind,
                known: list_names(&known),
            });
        }
        let sample = check_sample(&field, raw)?;
        if checked
            .entry(layer)
            .or_default()
            .insert(cell, sample)
            .is_some()
        {
            return Err(FeedError::BadValue {
                field,
                problem: "appears twice".into(),
            });
        }
    }
    Ok(checked)
}

fn check_sample(field: &str, raw: RawSample) -> Result<Sample, FeedError> {
    let bad = |which: &str, problem: String| FeedError::BadValue {
        field: format!("{field}.{which}"),
        problem,
    };
    if !raw.load.is_finite() || raw.load < 0.0 {
        return Err(bad("load", format!("must be ≥ 0 (got {})", raw.load)));
    }
    if !raw.capacity.is_finite() || raw.capacity <= 0.0 {
        return Err(bad(
            "capacity",
            format!("must be > 0 (got {})", raw.capacity),
        ));
    }
    for (which, value) in [("load", raw.load), ("capacity", raw.capacity)] {
        if value > MAX_FEED_VALUE {
            return Err(bad(
                which,
                format!("{value:e} is above the limit of {MAX_FEED_VALUE:e} (use a larger unit)"),
            ));
        }
    }
    let ratio = raw.load / raw.capacity;
    if !ratio.is_finite() || ratio > MAX_LOAD_RATIO {
        return Err(bad(
            "load",
            format!(
                "{} is more than {MAX_LOAD_RATIO} × capacity {} (load and capacity in \
                 different units?)",
                raw.load, raw.capacity
            ),
        ));
    }
    Ok(Sample {
        load: raw.load,
        capacity: raw.capacity,
    })
}

/// A name from outside, shortened for an error message (the message is escaped with `{:?}`
/// where it is shown, so control characters cannot forge log lines).
fn echo(name: &str) -> String {
    if name.chars().count() <= MAX_ECHOED_NAME {
        name.to_string()
    } else {
        let mut short: String = name.chars().take(MAX_ECHOED_NAME).collect();
        short.push('…');
        short
    }
}

fn list_names(names: &[&str]) -> String {
    if names.is_empty() {
        return "none".to_string();
    }
    let mut listed = names
        .iter()
        .take(MAX_LISTED_NAMES)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > MAX_LISTED_NAMES {
        listed.push_str(&format!(", … ({} in all)", names.len()));
    }
    listed
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGIONS: &[&str] = &["eu-west", "eu-central", "na-east"];
    const SITES: &[&str] = &["fb-eu", "fb-na"];
    const CELLS: &[(&str, &str)] = &[("global", "g1"), ("global", "g2"), ("eu-west", "w1")];
    const KNOWN: FeedNames<'static> = FeedNames {
        regions: REGIONS,
        sites: SITES,
        cells: CELLS,
    };

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// 2026-11-30T10:00:00Z.
    const FEED_TIME: u64 = 1_796_032_800;

    fn parse(text: &str) -> Result<LoadFeed, FeedError> {
        parse_feed(text.as_bytes(), &KNOWN, at(FEED_TIME))
    }

    fn with_regions(regions: &str) -> String {
        format!(r#"{{"time": "2026-11-30T10:00:00Z", "regions": {{{regions}}}}}"#)
    }

    fn refusal(text: &str) -> String {
        match parse(text) {
            Ok(feed) => panic!("accepted {feed:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn accepts_the_documented_shape() {
        let feed = parse(
            r#"{"time": "2026-11-30T10:00:00Z", "source": "exporter@mon-1",
                "regions": {"eu-west": {"load": 950, "capacity": 1000},
                            "na-east": {"load": 12.5, "capacity": 100.0}},
                "fallback": {"fb-eu": {"load": 200, "capacity": 2000}}}"#,
        )
        .unwrap();
        assert_eq!(feed.time, at(FEED_TIME));
        assert_eq!(
            feed.regions.keys().collect::<Vec<_>>(),
            ["eu-west", "na-east"]
        );
        assert_eq!(
            feed.regions["eu-west"],
            Sample {
                load: 950.0,
                capacity: 1000.0
            }
        );
        assert!((feed.regions["eu-west"].utilisation() - 0.95).abs() < 1e-12);
        assert_eq!(feed.fallback["fb-eu"].capacity, 2000.0);
        assert!(
            !feed.regions.contains_key("eu-central"),
            "missing = no data"
        );
    }

    #[test]
    fn either_section_may_be_left_out() {
        assert_eq!(
            parse(&with_regions(r#""eu-west": {"load": 1, "capacity": 2}"#))
                .unwrap()
                .fallback
                .len(),
            0
        );
        let sites_only = parse(
            r#"{"time": "2026-11-30T10:00:00Z", "fallback": {"fb-na": {"load": 0, "capacity": 1}}}"#,
        )
        .unwrap();
        assert!(sites_only.regions.is_empty());
        assert_eq!(sites_only.fallback.len(), 1);
    }

    #[test]
    fn refuses_an_empty_feed() {
        assert_eq!(
            parse(r#"{"time": "2026-11-30T10:00:00Z"}"#),
            Err(FeedError::Empty)
        );
        assert_eq!(
            parse(r#"{"time": "2026-11-30T10:00:00Z", "regions": {}, "fallback": {}}"#),
            Err(FeedError::Empty)
        );
    }

    #[test]
    fn refuses_what_is_not_json_of_the_shape() {
        for text in [
            "",
            "not json",
            "[]",
            "null",
            r#"{"time": "2026-11-30T10:00:00Z", "regions": {"eu-west": {"load": 1, "capacity": 2}}"#,
            r#"{"regions": {"eu-west": {"load": 1, "capacity": 2}}}"#,
            r#"{"time": 5, "regions": {"eu-west": {"load": 1, "capacity": 2}}}"#,
            r#"{"time": "2026-11-30T10:00:00Z", "regions": []}"#,
            r#"{"time": "2026-11-30T10:00:00Z", "regions": {"eu-west": {"load": "1", "capacity": 2}}}"#,
            r#"{"time": "2026-11-30T10:00:00Z", "regions": {"eu-west": {"load": 1}}}"#,
            r#"{"time": "2026-11-30T10:00:00Z", "regions": {"eu-west": {"load": 1, "capacity": 1e999}}}"#,
        ] {
            assert!(
                matches!(parse(text), Err(FeedError::Syntax(_))),
                "{text}: {:?}",
                parse(text)
            );
        }
    }

    #[test]
    fn refuses_unknown_fields_at_both_levels() {
        let top = refusal(
            r#"{"time": "2026-11-30T10:00:00Z", "region": {"eu-west": {"load": 1, "capacity": 2}}}"#,
        );
        assert!(top.contains("unknown field `region`"), "{top}");
        let inner = refusal(&with_regions(
            r#""eu-west": {"load": 1, "capacity": 2, "unit": "rps"}"#,
        ));
        assert!(inner.contains("unknown field `unit`"), "{inner}");
    }

    #[test]
    fn refuses_a_name_given_twice() {
        let text = refusal(&with_regions(
            r#""eu-west": {"load": 1, "capacity": 2}, "eu-west": {"load": 9, "capacity": 2}"#,
        ));
        assert!(text.contains("\"eu-west\" appears twice"), "{text}");
    }

    #[test]
    fn refuses_unknown_names_naming_the_configured_ones() {
        let error = parse(&with_regions(
            r#""eu-west": {"load": 1, "capacity": 2}, "eu-wset": {"load": 1, "capacity": 2}"#,
        ))
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "regions.eu-wset: unknown region (configured: eu-west, eu-central, na-east)"
        );
        // A site name in the region section is a mistake too.
        let misplaced = refusal(&with_regions(r#""fb-eu": {"load": 1, "capacity": 2}"#));
        assert!(
            misplaced.starts_with("regions.fb-eu: unknown region"),
            "{misplaced}"
        );
        let site = refusal(
            r#"{"time": "2026-11-30T10:00:00Z", "fallback": {"eu-west": {"load": 1, "capacity": 2}}}"#,
        );
        assert!(
            site.starts_with("fallback.eu-west: unknown fallback site (configured: fb-eu, fb-na)"),
            "{site}"
        );
    }

    #[test]
    fn unknown_names_are_shortened_in_errors() {
        let long = "x".repeat(5000);
        let text = refusal(&with_regions(&format!(
            r#""{long}": {{"load": 1, "capacity": 2}}"#
        )));
        assert!(text.len() < 300, "{text}");
    }

    #[test]
    fn refuses_a_negative_load_and_a_zero_capacity_naming_the_field() {
        assert_eq!(
            refusal(&with_regions(r#""eu-west": {"load": 1, "capacity": 0}"#)),
            "regions.eu-west.capacity: must be > 0 (got 0)"
        );
        assert_eq!(
            refusal(&with_regions(r#""na-east": {"load": 1, "capacity": -5}"#)),
            "regions.na-east.capacity: must be > 0 (got -5)"
        );
        assert_eq!(
            refusal(&with_regions(
                r#""eu-west": {"load": -0.5, "capacity": 10}"#
            )),
            "regions.eu-west.load: must be ≥ 0 (got -0.5)"
        );
        let site = refusal(
            r#"{"time": "2026-11-30T10:00:00Z", "fallback": {"fb-na": {"load": 3, "capacity": 0.0}}}"#,
        );
        assert_eq!(site, "fallback.fb-na.capacity: must be > 0 (got 0)");
    }

    #[test]
    fn refuses_absurd_ratios_but_not_heavy_overload() {
        assert!(parse(&with_regions(
            r#""eu-west": {"load": 100000, "capacity": 1000}"#
        ))
        .is_ok());
        let text = refusal(&with_regions(
            r#""eu-west": {"load": 100001, "capacity": 1000}"#,
        ));
        assert!(
            text.starts_with("regions.eu-west.load: 100001 is more than 100 × capacity 1000"),
            "{text}"
        );
        // Tiny capacity with a huge load overflows the ratio to infinity: still refused.
        let text = refusal(&with_regions(
            r#""eu-west": {"load": 1e300, "capacity": 1e-300}"#,
        ));
        assert!(text.starts_with("regions.eu-west.load:"), "{text}");
    }

    /// Finite values near `f64::MAX` in a sane ratio overflow the step's sums: refused.
    #[test]
    fn refuses_magnitudes_the_step_cannot_add_up() {
        let text = refusal(&with_regions(
            r#""eu-west": {"load": 1.7e308, "capacity": 1.7e308}"#,
        ));
        assert!(
            text.starts_with("regions.eu-west.load: 1.7e308 is above the limit of 1e15"),
            "{text}"
        );
        let text = refusal(&with_regions(r#""eu-west": {"load": 0, "capacity": 1e16}"#));
        assert!(text.starts_with("regions.eu-west.capacity:"), "{text}");
        assert!(parse(&with_regions(
            r#""eu-west": {"load": 1e15, "capacity": 1e15}"#
        ))
        .is_ok());
    }

    #[test]
    fn refuses_feeds_from_the_future_beyond_the_skew_allowance() {
        let feed = with_regions(r#""eu-west": {"load": 1, "capacity": 2}"#);
        let now = at(FEED_TIME);
        let five_min_before = now - MAX_FUTURE_SKEW;
        assert!(parse_feed(feed.as_bytes(), &KNOWN, five_min_before).is_ok());
        let error = parse_feed(
            feed.as_bytes(),
            &KNOWN,
            five_min_before - Duration::from_secs(1),
        )
        .unwrap_err();
        assert_eq!(
            error,
            FeedError::FutureTime {
                value: "2026-11-30T10:00:00Z".into(),
                ahead_secs: 301,
                limit_secs: 300
            }
        );
        // Old feeds are accepted here; staleness is the step's business.
        assert!(parse_feed(feed.as_bytes(), &KNOWN, now + Duration::from_secs(86_400)).is_ok());
    }

    #[test]
    fn refuses_a_bad_time_naming_it() {
        let text = refusal(
            r#"{"time": "2026-13-30T10:00:00Z", "regions": {"eu-west": {"load": 1, "capacity": 2}}}"#,
        );
        assert_eq!(
            text,
            "time: \"2026-13-30T10:00:00Z\" is not an RFC 3339 time (month 13 is not in 1..=12)"
        );
        let text =
            refusal(r#"{"time": "yesterday", "regions": {"eu-west": {"load": 1, "capacity": 2}}}"#);
        assert!(text.starts_with("time: \"yesterday\""), "{text}");
    }

    #[test]
    fn refuses_too_many_entries() {
        let many: Vec<String> = (0..=MAX_FEED_ENTRIES)
            .map(|i| format!(r#""r{i}": {{"load": 1, "capacity": 2}}"#))
            .collect();
        let text = refusal(&with_regions(&many.join(",")));
        assert!(text.contains("more than 10000 entries"), "{text}");
        // The limit spans both sections.
        let names: Vec<String> = (0..6000).map(|i| format!("n{i}")).collect();
        let known: Vec<&str> = names.iter().map(String::as_str).collect();
        let half = |range: std::ops::Range<usize>| {
            range
                .map(|i| format!(r#""n{i}": {{"load": 1, "capacity": 2}}"#))
                .collect::<Vec<_>>()
                .join(",")
        };
        let text = format!(
            r#"{{"time": "2026-11-30T10:00:00Z", "regions": {{{}}}, "fallback": {{{}}}}}"#,
            half(0..5001),
            half(1000..6000)
        );
        assert_eq!(
            parse_feed(
                text.as_bytes(),
                &FeedNames {
                    regions: &known,
                    sites: &known,
                    cells: &[],
                },
                at(FEED_TIME)
            ),
            Err(FeedError::TooManyEntries {
                count: 10_001,
                limit: 10_000
            })
        );
    }

    #[test]
    fn refuses_more_than_a_mebibyte_before_parsing() {
        let mut text = with_regions(r#""eu-west": {"load": 1, "capacity": 2}"#).into_bytes();
        text.resize(MAX_FEED_BYTES, b' ');
        assert!(
            parse_feed(&text, &KNOWN, at(FEED_TIME)).is_ok(),
            "exactly the limit is fine"
        );
        text.push(b' ');
        assert_eq!(
            parse_feed(&text, &KNOWN, at(FEED_TIME)),
            Err(FeedError::TooLarge {
                size: MAX_FEED_BYTES as u64 + 1,
                limit: MAX_FEED_BYTES
            })
        );
    }

    #[test]
    fn refuses_invalid_utf8_with_its_offset() {
        let mut text = with_regions(r#""eu-west": {"load": 1, "capacity": 2}"#).into_bytes();
        text[3] = 0xff;
        assert_eq!(
            parse_feed(&text, &KNOWN, at(FEED_TIME)),
            Err(FeedError::NotUtf8 { offset: 3 })
        );
    }

    #[test]
    fn refuses_a_bad_source_label() {
        let label = |source: &str| {
            parse(&format!(
                r#"{{"time": "2026-11-30T10:00:00Z", "source": {source}, "regions": {{"eu-west": {{"load": 1, "capacity": 2}}}}}}"#
            ))
        };
        assert!(label(r#""mon-1""#).is_ok());
        assert!(matches!(label("7"), Err(FeedError::Syntax(_))));
        assert!(matches!(label(r#""a\nb""#), Err(FeedError::BadSource(_))));
        assert!(matches!(
            label(&format!("{:?}", "x".repeat(257))),
            Err(FeedError::BadSource(_))
        ));
    }

    #[test]
    fn one_bad_entry_refuses_the_whole_feed() {
        let text = with_regions(
            r#""eu-west": {"load": 1, "capacity": 2}, "na-east": {"load": 1, "capacity": 0}"#,
        );
        assert!(parse(&text).is_err());
    }

    fn xorshift(mut x: u64) -> u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }

    /// Random bytes and random mutations of a good feed: never a panic, and whatever is
    /// accepted still obeys every rule.
    #[test]
    fn garbage_never_panics_and_never_slips_through() {
        let good = br#"{"time": "2026-11-30T10:00:00.5+01:00", "source": "m",
            "regions": {"eu-west": {"load": 950, "capacity": 1000}, "na-east": {"load": 1e2, "capacity": 3}},
            "fallback": {"fb-eu": {"load": 200, "capacity": 2000}}}"#;
        let alphabet = b"{}[]\":,.-+eE0123456789 tTzZ\\nul";
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut accepted = 0;
        for round in 0..20_000 {
            let mut bytes = good.to_vec();
            if round % 5 == 0 {
                seed = xorshift(seed);
                bytes = (0..seed % 200)
                    .map(|i| (xorshift(seed + i) >> 24) as u8)
                    .collect();
            } else {
                seed = xorshift(seed);
                for _ in 0..=(seed % 4) {
                    seed = xorshift(seed);
                    let at = (seed as usize) % bytes.len();
                    let pick = alphabet[((seed >> 32) as usize) % alphabet.len()];
                    match seed % 3 {
                        0 => bytes[at] = pick,
                        1 => bytes.insert(at, pick),
                        _ => {
                            bytes.remove(at);
                        }
                    }
                }
            }
            if let Ok(feed) = parse_feed(&bytes, &KNOWN, at(FEED_TIME)) {
                accepted += 1;
                assert!(!feed.regions.is_empty() || !feed.fallback.is_empty());
                assert!(feed.time <= at(FEED_TIME) + MAX_FUTURE_SKEW);
                for (name, s) in feed.regions.iter().chain(&feed.fallback) {
                    assert!(REGIONS.contains(&name.as_str()) || SITES.contains(&name.as_str()));
                    assert!(s.load.is_finite() && s.load >= 0.0, "{name} {s:?}");
                    assert!(s.capacity.is_finite() && s.capacity > 0.0, "{name} {s:?}");
                    assert!(s.utilisation() <= MAX_LOAD_RATIO, "{name} {s:?}");
                    assert!(s.load.max(s.capacity) <= MAX_FEED_VALUE, "{name} {s:?}");
                }
            }
        }
        // The mutations are small enough that some survive; if none did, the loop would only
        // be exercising the JSON parser.
        assert!(accepted > 100, "only {accepted} mutated feeds accepted");
    }

    #[test]
    fn a_feed_written_back_as_json_reads_back_equal() {
        let text = r#"{"time": "2026-11-30T10:00:00.125Z",
            "regions": {"eu-west": {"load": 950.5, "capacity": 1000}},
            "fallback": {"fb-eu": {"load": 200, "capacity": 2000}},
            "cells": {"global": {"g1": {"load": 90, "capacity": 100}}}}"#;
        let now = crate::rfc3339::parse("2026-11-30T10:00:01Z").unwrap_or(SystemTime::UNIX_EPOCH);
        let names = FeedNames {
            regions: &["eu-west"],
            sites: &["fb-eu"],
            cells: &[("global", "g1")],
        };
        let feed = parse_feed(text.as_bytes(), &names, now);
        let feed = feed.unwrap_or_else(|e| panic!("{e}"));
        let again = parse_feed(feed.to_json().as_bytes(), &names, now);
        assert_eq!(again, Ok(feed));
    }

    #[test]
    fn tenant_figures_are_read_by_region_and_written_back() {
        let text = r#"{"time": "2026-11-30T10:00:00Z",
            "regions": {"eu-west": {"load": 950, "capacity": 1000}},
            "tenants": {"contoso": {"eu-west": 600, "na-east": 3.5}, "fabrikam": {}}}"#;
        let feed = parse(text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(feed.tenants["contoso"]["eu-west"], 600.0);
        assert_eq!(feed.tenants["contoso"]["na-east"], 3.5);
        assert!(
            !feed.tenants.contains_key("fabrikam"),
            "no figures, nothing to keep"
        );
        let again = parse(&feed.to_json()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, feed);
    }

    #[test]
    fn refuses_bad_tenant_figures_naming_the_field() {
        let with_tenants = |tenants: &str| {
            format!(
                r#"{{"time": "2026-11-30T10:00:00Z",
                    "regions": {{"eu-west": {{"load": 950, "capacity": 1000}}}},
                    "tenants": {{{tenants}}}}}"#
            )
        };
        let unknown = refusal(&with_tenants(r#""contoso": {"mars-1": 5}"#));
        assert!(
            unknown.starts_with("tenants.contoso.mars-1: unknown region"),
            "{unknown}"
        );
        let negative = refusal(&with_tenants(r#""contoso": {"eu-west": -1}"#));
        assert!(
            negative.starts_with("tenants.contoso.eu-west: must be"),
            "{negative}"
        );
        let twice = refusal(&with_tenants(r#""contoso": {"eu-west": 1, "eu-west": 2}"#));
        assert!(twice.contains("appears twice"), "{twice}");
        let nameless = refusal(&with_tenants(r#""": {"eu-west": 1}"#));
        assert!(nameless.contains("a tenant name is"), "{nameless}");
        let shape = refusal(&with_tenants(r#""contoso": {"eu-west": {"load": 1}}"#));
        assert!(shape.starts_with("load feed does not parse"), "{shape}");
    }

    #[test]
    fn assembled_tenant_figures_pass_the_same_checks() {
        let entries = |load: f64| FeedEntries {
            time: at(FEED_TIME),
            regions: vec![("eu-west".into(), 950.0, 1000.0)],
            fallback: Vec::new(),
            tenants: vec![("contoso".into(), "eu-west".into(), load)],
            cells: Vec::new(),
        };
        let feed = check_entries(entries(600.0), &KNOWN, at(FEED_TIME));
        assert_eq!(feed.map(|f| f.tenants["contoso"]["eu-west"]), Ok(600.0));
        let nan = check_entries(entries(f64::NAN), &KNOWN, at(FEED_TIME));
        assert!(matches!(nan, Err(FeedError::BadValue { .. })), "{nan:?}");
    }

    #[test]
    fn cell_loads_are_read_by_layer_and_cell_and_may_be_the_whole_feed() {
        let feed = parse(
            r#"{"time": "2026-11-30T10:00:00Z",
                "cells": {"global": {"g1": {"load": 95, "capacity": 100},
                                     "g2": {"load": 10, "capacity": 100}},
                          "eu-west": {"w1": {"load": 1, "capacity": 4}}}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(feed.regions.is_empty() && feed.fallback.is_empty());
        assert_eq!(feed.cells["global"]["g1"].load, 95.0);
        assert_eq!(feed.cells["eu-west"]["w1"].utilisation(), 0.25);
        assert_eq!(
            parse(r#"{"time": "2026-11-30T10:00:00Z", "cells": {"global": {}}}"#),
            Err(FeedError::Empty)
        );
    }

    #[test]
    fn refuses_an_unknown_cell_or_layer_and_a_bad_cell_load_naming_it() {
        let cells = |body: &str| {
            refusal(&format!(
                r#"{{"time": "2026-11-30T10:00:00Z", "cells": {{{body}}}}}"#
            ))
        };
        assert_eq!(
            cells(r#""global": {"g9": {"load": 1, "capacity": 2}}"#),
            "cells.global.g9: unknown cell (configured: global.g1, global.g2, eu-west.w1)"
        );
        assert!(cells(r#""mars": {"g1": {"load": 1, "capacity": 2}}"#)
            .starts_with("cells.mars.g1: unknown cell layer"),);
        assert_eq!(
            cells(r#""global": {"g1": {"load": 1, "capacity": 0}}"#),
            "cells.global.g1.capacity: must be > 0 (got 0)"
        );
        assert_eq!(
            cells(r#""global": {"g1": {"load": -1, "capacity": 2}}"#),
            "cells.global.g1.load: must be ≥ 0 (got -1)"
        );
        let twice = cells(
            r#""global": {"g1": {"load": 1, "capacity": 2}, "g1": {"load": 1, "capacity": 2}}"#,
        );
        assert!(twice.contains("\"g1\" appears twice"), "{twice}");
        let unknown = cells(r#""global": {"g1": {"load": 1, "capacity": 2, "hot": true}}"#);
        assert!(unknown.contains("unknown field `hot`"), "{unknown}");
    }

    #[test]
    fn assembled_cell_entries_pass_the_same_checks() {
        let entries = |layer: &str, cell: &str| FeedEntries {
            time: at(FEED_TIME),
            regions: Vec::new(),
            fallback: Vec::new(),
            tenants: Vec::new(),
            cells: vec![(layer.into(), cell.into(), 50.0, 100.0)],
        };
        let feed = check_entries(entries("global", "g2"), &KNOWN, at(FEED_TIME));
        assert_eq!(feed.map(|f| f.cells["global"]["g2"].load), Ok(50.0));
        let unknown = check_entries(entries("global", "zz"), &KNOWN, at(FEED_TIME));
        assert!(
            matches!(
                &unknown,
                Err(FeedError::UnknownName {
                    section: "cells",
                    ..
                })
            ),
            "{unknown:?}"
        );
    }
}
