//! Client address → region, from `[geo]` config: CIDR overrides first (longest match), then the
//! database's country, then its continent, then the default region.
//!
//! Everything is decided at compile time: the database table and the overrides are merged into
//! one sorted range table per address family whose entries already hold the answer
//! ([`Located`]), so [`Locator::locate`] is a binary search and a copy.
//!
//! # ECS scope (`Located::prefix_len`)
//! Each entry of the merged table is an aligned CIDR block in which every address gets the same
//! answer, and `prefix_len` is that block's length:
//! - override: the override's length;
//! - database match (mapped or not): the matched database network's length;
//! - address the database does not cover: the length of the empty tree node ("no data"
//!   network) that covers it, e.g. /5 for 1.1.1.1 in MaxMind's test database. Answering /0
//!   there would tell resolvers the answer holds for every client, which is wrong as soon as the
//!   database knows any other address.
//!
//! Where an override sits inside one of those networks, the rest of the network is split into
//! the largest aligned blocks that avoid the override, so a scope never covers an address that
//! would get a different answer. Without a database (not configured or degraded) the whole
//! family maps to the default region and the scope is 0 outside overrides, which is exact.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::Deserialize;

use super::table::{DatabaseInfo, GeoTable, TableEntry};
use super::GeoError;

/// Continent codes used by GeoIP2 databases.
pub const CONTINENT_CODES: [&str; 7] = ["AF", "AN", "AS", "EU", "NA", "OC", "SA"];

/// The `[geo]` section of the config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeoConfig {
    /// MaxMind-format database; a relative path is relative to the config file's directory.
    #[serde(default)]
    pub database: Option<PathBuf>,
    /// Region for clients nothing else maps; when absent, the first region declared.
    #[serde(default)]
    pub default_region: Option<String>,
    /// ISO 3166-1 alpha-2 country code → region name.
    #[serde(default)]
    pub countries: BTreeMap<String, String>,
    /// Continent code (AF AN AS EU NA OC SA) → region name.
    #[serde(default)]
    pub continents: BTreeMap<String, String>,
    /// Networks pinned to a region whatever the database says; the longest match wins.
    #[serde(default)]
    pub overrides: Vec<GeoOverride>,
}

/// One `[[geo.overrides]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeoOverride {
    pub network: IpNet,
    pub region: String,
}

/// What decided a client's region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocationSource {
    /// A `[[geo.overrides]]` network.
    Override,
    /// The database's country or continent, through `geo.countries` / `geo.continents`.
    Database,
    /// Nothing applied: no override, and no database record or no mapping for it.
    Default,
}

/// Where a client is, as far as steering cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    /// Index into the `region_names` given to [`Locator::compile`].
    pub region: u16,
    /// ECS scope: length of the largest aligned network around the address that gets this
    /// same answer (see the module docs). IPv4 lengths for IPv4 addresses.
    pub prefix_len: u8,
    pub source: LocationSource,
    /// The database location ([`GeoTable::location`]) when the database matched and no
    /// override applied.
    pub location: Option<u32>,
}

/// The database part of a [`Locator`], for the server's status report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseStatus {
    /// `geo.database` is not set: all clients outside overrides go to the default region.
    NotConfigured,
    /// The database is loaded and compiled.
    Loaded { path: PathBuf, info: DatabaseInfo },
    /// The database is configured but could not be used; clients outside overrides go to the
    /// default region until it loads.
    Degraded { path: PathBuf, reason: String },
}

/// One address family's merged table.
#[derive(Debug, Clone)]
struct Answers<A> {
    starts: Vec<A>,
    answers: Vec<Located>,
}

impl<A: Copy + Ord> Answers<A> {
    fn find(&self, addr: A) -> Option<Located> {
        let index = self
            .starts
            .partition_point(|start| *start <= addr)
            .checked_sub(1)?;
        self.answers.get(index).copied()
    }
}

/// The IPv4 table with a first-level index by /16: a full country database has ~400k ranges,
/// and a plain binary search over them costs ~19 dependent cache misses per query; the index
/// narrows it to the few ranges that start inside the client's /16.
#[derive(Debug, Clone)]
struct V4Answers {
    table: Answers<u32>,
    /// `by_16[p]`: the index of the first range starting at or after `p << 16`; 65,537 entries.
    by_16: Box<[u32]>,
}

impl V4Answers {
    fn new(table: Answers<u32>) -> Self {
        let by_16 = (0..=1u64 << 16)
            .map(|p| {
                let at = table.starts.partition_point(|&s| u64::from(s) < p << 16);
                u32::try_from(at).unwrap_or(u32::MAX)
            })
            .collect();
        V4Answers { table, by_16 }
    }

    /// Same as [`Answers::find`]: every range before `by_16[p]` starts at or below `addr`,
    /// every range from `by_16[p + 1]` on starts above it.
    fn find(&self, addr: u32) -> Option<Located> {
        let prefix = (addr >> 16) as usize;
        let (Some(&low), Some(&high)) = (self.by_16.get(prefix), self.by_16.get(prefix + 1)) else {
            return self.table.find(addr);
        };
        let (low, high) = (low as usize, high as usize);
        let within = self
            .table
            .starts
            .get(low..high)?
            .partition_point(|&start| start <= addr);
        let index = (low + within).checked_sub(1)?;
        self.table.answers.get(index).copied()
    }
}

/// Maps client addresses to regions; built once per config/database snapshot.
#[derive(Debug, Clone)]
pub struct Locator {
    v4: V4Answers,
    v6: Answers<u128>,
    region_names: Vec<String>,
    default_region: u16,
    table: Option<GeoTable>,
    location_regions: Vec<Option<u16>>,
    overrides: Vec<(IpNet, u16)>,
    status: DatabaseStatus,
}

/// A validated override in integer form for the merge.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u128,
    end: u128,
    region: u16,
}

impl Locator {
    /// Validates `cfg` against the declared regions, loads the database (if any) and compiles
    /// the lookup tables. Config mistakes are errors; a missing or unreadable database is not:
    /// the locator is then degraded (see [`Locator::degraded`]) and maps to the default region.
    pub fn compile(
        cfg: &GeoConfig,
        base_dir: &Path,
        region_names: &[&str],
    ) -> Result<Locator, GeoError> {
        let region_index = |field: String, name: &str| -> Result<u16, GeoError> {
            region_names
                .iter()
                .position(|r| *r == name)
                .and_then(|i| u16::try_from(i).ok())
                .ok_or_else(|| GeoError::Config {
                    field,
                    message: format!("unknown region \"{name}\""),
                })
        };
        let default_region = match &cfg.default_region {
            Some(name) => region_index("geo.default_region".into(), name)?,
            None if region_names.is_empty() => {
                return Err(GeoError::Config {
                    field: "geo.default_region".into(),
                    message: "no regions are declared, so there is no default region".into(),
                })
            }
            None => 0,
        };
        let mut countries = BTreeMap::new();
        for (code, region) in &cfg.countries {
            let field = format!("geo.countries.{code}");
            check_country_code(&field, code)?;
            countries.insert(code.as_bytes().to_vec(), region_index(field, region)?);
        }
        let mut continents = BTreeMap::new();
        for (code, region) in &cfg.continents {
            let field = format!("geo.continents.{code}");
            if !CONTINENT_CODES.contains(&code.as_str()) {
                return Err(GeoError::Config {
                    field,
                    message: format!(
                        "unknown continent code \"{code}\" (expected one of {})",
                        CONTINENT_CODES.join(", ")
                    ),
                });
            }
            continents.insert(code.as_bytes().to_vec(), region_index(field, region)?);
        }
        let overrides = validate_overrides(&cfg.overrides, &region_index)?;

        let (table, status) = match &cfg.database {
            None => (None, DatabaseStatus::NotConfigured),
            Some(relative) => {
                let path = base_dir.join(relative);
                match GeoTable::open(&path) {
                    // Without a single country or continent the database would silently send
                    // every client to the default region: treat it as unusable.
                    Ok(table) if table.info().records_with_geo == 0 => (
                        None,
                        DatabaseStatus::Degraded {
                            reason: format!(
                                "{}: no record has a country or continent (not a Country/City-style database?)",
                                path.display()
                            ),
                            path,
                        },
                    ),
                    Ok(table) => {
                        let info = table.info().clone();
                        (Some(table), DatabaseStatus::Loaded { path, info })
                    }
                    Err(e) => (
                        None,
                        DatabaseStatus::Degraded {
                            path,
                            reason: e.to_string(),
                        },
                    ),
                }
            }
        };

        let location_regions: Vec<Option<u16>> = table
            .as_ref()
            .map(|t| {
                t.locations()
                    .iter()
                    .map(|loc| {
                        let by_country = loc.country.and_then(|c| countries.get(&c[..]).copied());
                        by_country
                            .or_else(|| loc.continent.and_then(|c| continents.get(&c[..]).copied()))
                    })
                    .collect()
            })
            .unwrap_or_default();

        let answer_for = |location: Option<u32>| -> (u16, LocationSource) {
            let mapped = location.and_then(|l| location_regions.get(l as usize).copied().flatten());
            match mapped {
                Some(region) => (region, LocationSource::Database),
                None => (default_region, LocationSource::Default),
            }
        };
        let empty = GeoTable::empty();
        let source_table = table.as_ref().unwrap_or(&empty);
        let (v4_spans, v6_spans) = spans_by_family(&overrides);
        let v4_db: Vec<TableEntry> = source_table.v4_entries();
        let v6_db: Vec<TableEntry> = source_table.v6_entries();
        let v4 = merge(32, &v4_db, &v4_spans, &answer_for);
        let v6 = merge(128, &v6_db, &v6_spans, &answer_for);

        Ok(Locator {
            v4: V4Answers::new(Answers {
                starts: v4.iter().map(|(start, _)| *start as u32).collect(),
                answers: v4.iter().map(|(_, a)| *a).collect(),
            }),
            v6: Answers {
                starts: v6.iter().map(|(start, _)| *start).collect(),
                answers: v6.iter().map(|(_, a)| *a).collect(),
            },
            region_names: region_names.iter().map(|r| r.to_string()).collect(),
            default_region,
            table,
            location_regions,
            overrides,
            status,
        })
    }

    /// The region for a client address. Allocation-free; callers pass IPv4-mapped IPv6
    /// addresses already unmapped (they are looked up as IPv6 here).
    pub fn locate(&self, ip: IpAddr) -> Located {
        let found = match ip {
            IpAddr::V4(v4) => self.v4.find(u32::from(v4)),
            IpAddr::V6(v6) => self.v6.find(u128::from(v6)),
        };
        // The merged tables cover each family from address 0, so this fallback is unreachable;
        // it keeps locate() total without a panic path.
        found.unwrap_or(Located {
            region: self.default_region,
            prefix_len: match ip {
                IpAddr::V4(_) => 32,
                IpAddr::V6(_) => 128,
            },
            source: LocationSource::Default,
            location: None,
        })
    }

    /// Why the database is not in use, if it is configured but failed to load.
    pub fn degraded(&self) -> Option<&str> {
        match &self.status {
            DatabaseStatus::Degraded { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// The database's state, for status output.
    pub fn database_status(&self) -> &DatabaseStatus {
        &self.status
    }

    /// The compiled database, when one is loaded.
    pub fn table(&self) -> Option<&GeoTable> {
        self.table.as_ref()
    }

    /// Region names in index order (as given to [`Locator::compile`]).
    pub fn region_names(&self) -> &[String] {
        &self.region_names
    }

    /// Index of the default region.
    pub fn default_region(&self) -> u16 {
        self.default_region
    }

    /// The region `geo.countries`/`geo.continents` give a database location, if any.
    pub fn region_of_location(&self, location: u32) -> Option<u16> {
        self.location_regions
            .get(location as usize)
            .copied()
            .flatten()
    }

    /// A one-line human explanation of [`Locator::locate`] for `steerdns geoip lookup`.
    pub fn describe(&self, ip: IpAddr) -> String {
        let located = self.locate(ip);
        let region = self
            .region_names
            .get(usize::from(located.region))
            .map_or("?", String::as_str);
        let mut out = format!(
            "{ip}: region {region} ({}), scope {}",
            match located.source {
                LocationSource::Override => "override",
                LocationSource::Database => "database",
                LocationSource::Default => "default",
            },
            network_of(ip, located.prefix_len)
        );
        if located.source == LocationSource::Override {
            if let Some((net, _)) = self.longest_override(ip) {
                let _ = write!(out, "; override {net}");
            }
        }
        match &self.table {
            Some(table) => {
                let block = table.lookup_block(ip);
                let network = network_of(ip, block.prefix_len);
                match block.location.and_then(|l| table.location(l)) {
                    Some(loc) => {
                        let _ = write!(
                            out,
                            "; database network {network}: country {}, continent {}",
                            loc.country_str().unwrap_or("-"),
                            loc.continent_str().unwrap_or("-")
                        );
                    }
                    None => {
                        let _ = write!(out, "; database has no data for {network}");
                    }
                }
            }
            None => match &self.status {
                DatabaseStatus::Degraded { reason, .. } => {
                    let _ = write!(out, "; database degraded: {reason}");
                }
                _ => out.push_str("; no database configured"),
            },
        }
        out
    }

    fn longest_override(&self, ip: IpAddr) -> Option<(IpNet, u16)> {
        self.overrides
            .iter()
            .filter(|(net, _)| net.contains(&ip))
            .max_by_key(|(net, _)| net.prefix_len())
            .copied()
    }
}

fn check_country_code(field: &str, code: &str) -> Result<(), GeoError> {
    let valid = code.len() == 2 && code.bytes().all(|b| b.is_ascii_uppercase());
    if valid {
        Ok(())
    } else {
        Err(GeoError::Config {
            field: field.to_string(),
            message: format!(
                "\"{code}\" is not a country code (two upper-case letters, ISO 3166-1 alpha-2, e.g. \"GB\")"
            ),
        })
    }
}

fn validate_overrides(
    overrides: &[GeoOverride],
    region_index: &dyn Fn(String, &str) -> Result<u16, GeoError>,
) -> Result<Vec<(IpNet, u16)>, GeoError> {
    let mut seen: BTreeMap<IpNet, usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(overrides.len());
    for (i, o) in overrides.iter().enumerate() {
        let field = format!("geo.overrides[{i}]");
        if o.network.trunc() != o.network {
            return Err(GeoError::Config {
                field: format!("{field}.network"),
                message: format!(
                    "{} has host bits set; did you mean {}?",
                    o.network,
                    o.network.trunc()
                ),
            });
        }
        if let IpNet::V6(v6) = o.network {
            if v6.addr().to_ipv4_mapped().is_some() && v6.prefix_len() >= 96 {
                return Err(GeoError::Config {
                    field: format!("{field}.network"),
                    message: format!(
                        "{} is IPv4-mapped; clients are located by their IPv4 address, write the IPv4 network",
                        o.network
                    ),
                });
            }
        }
        if let Some(first) = seen.insert(o.network, i) {
            return Err(GeoError::Config {
                field: format!("{field}.network"),
                message: format!("{} is already listed in geo.overrides[{first}]", o.network),
            });
        }
        let region = region_index(format!("{field}.region"), &o.region)?;
        out.push((o.network, region));
    }
    Ok(out)
}

/// Overrides as integer spans per family, sorted by start then shorter prefix first, so that
/// at one start address the enclosing network comes before the nested one.
fn spans_by_family(overrides: &[(IpNet, u16)]) -> (Vec<Span>, Vec<Span>) {
    let mut sorted = overrides.to_vec();
    sorted.sort_by_key(|(net, _)| (net.network(), net.prefix_len()));
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for (net, region) in sorted {
        match net {
            IpNet::V4(n) => v4.push(Span {
                start: u128::from(u32::from(n.network())),
                end: u128::from(u32::from(n.broadcast())),
                region,
            }),
            IpNet::V6(n) => v6.push(Span {
                start: u128::from(n.network()),
                end: u128::from(n.broadcast()),
                region,
            }),
        }
    }
    (v4, v6)
}

/// Merges the database table (aligned blocks covering the family, in order) with the
/// overrides into aligned blocks with their final answer.
///
/// Override boundaries cut the family into segments inside which the innermost override is
/// the same; segments under an override take its answer whole, the others take the database
/// networks they overlap. Each piece is then cut into maximal aligned blocks.
fn merge(
    bits: u8,
    db: &[TableEntry],
    spans: &[Span],
    answer_for: &dyn Fn(Option<u32>) -> (u16, LocationSource),
) -> Vec<(u128, Located)> {
    let family_end = last_address(bits);
    let mut cuts: Vec<u128> = vec![0];
    for span in spans {
        cuts.push(span.start);
        if span.end < family_end {
            cuts.push(span.end + 1);
        }
    }
    cuts.sort_unstable();
    cuts.dedup();

    let mut out = Vec::with_capacity(db.len() + 2 * spans.len());
    let mut active: Vec<Span> = Vec::new();
    let mut next_span = 0;
    for (i, &seg_start) in cuts.iter().enumerate() {
        let seg_end = cuts.get(i + 1).map_or(family_end, |next| next - 1);
        while active.last().is_some_and(|s| s.end < seg_start) {
            active.pop();
        }
        while let Some(span) = spans.get(next_span).filter(|s| s.start == seg_start) {
            active.push(*span);
            next_span += 1;
        }
        if let Some(span) = active.last() {
            let answer = |prefix_len| Located {
                region: span.region,
                prefix_len,
                source: LocationSource::Override,
                location: None,
            };
            push_blocks(bits, seg_start, seg_end, &answer, &mut out);
            continue;
        }
        let first = db
            .partition_point(|(start, _, _)| *start <= seg_start)
            .saturating_sub(1);
        for (k, &(start, _, location)) in db.iter().enumerate().skip(first) {
            if start > seg_end {
                break;
            }
            let end = db.get(k + 1).map_or(family_end, |(next, _, _)| next - 1);
            let (region, source) = answer_for(location);
            let answer = |prefix_len| Located {
                region,
                prefix_len,
                source,
                location,
            };
            push_blocks(
                bits,
                start.max(seg_start),
                end.min(seg_end),
                &answer,
                &mut out,
            );
        }
    }
    out
}

fn last_address(bits: u8) -> u128 {
    host_mask(u32::from(bits))
}

/// The lowest `host_bits` bits set.
fn host_mask(host_bits: u32) -> u128 {
    if host_bits >= 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    }
}

/// Cuts `[first, last]` into the fewest aligned blocks and pushes each with its answer.
fn push_blocks(
    bits: u8,
    first: u128,
    last: u128,
    answer: &dyn Fn(u8) -> Located,
    out: &mut Vec<(u128, Located)>,
) {
    let mut start = first;
    loop {
        let aligned_bits = if start == 0 {
            u32::from(bits)
        } else {
            start.trailing_zeros().min(u32::from(bits))
        };
        let mut host_bits = aligned_bits;
        while host_bits > 0 && start + host_mask(host_bits) > last {
            host_bits -= 1;
        }
        let prefix_len = bits - host_bits as u8;
        out.push((start, answer(prefix_len)));
        let end = start + host_mask(host_bits);
        if end >= last {
            break;
        }
        start = end + 1;
    }
}

/// `ip`'s network of length `prefix_len`, for display.
fn network_of(ip: IpAddr, prefix_len: u8) -> IpNet {
    let net = match ip {
        IpAddr::V4(v4) => IpNet::new(IpAddr::V4(v4), prefix_len.min(32)),
        IpAddr::V6(v6) => IpNet::new(IpAddr::V6(v6), prefix_len.min(128)),
    };
    net.map(|n| n.trunc()).unwrap_or_else(|_| match ip {
        IpAddr::V4(_) => IpNet::from(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        IpAddr::V6(_) => IpNet::from(IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The /16 index finds exactly what a binary search over the whole table finds: ranges
    /// starting inside, at the edges of and across /16 boundaries, a table not starting at 0,
    /// and an empty one.
    #[test]
    fn the_slash16_index_answers_like_a_plain_binary_search() {
        let located = |region: u16| Located {
            region,
            prefix_len: 24,
            source: LocationSource::Database,
            location: None,
        };
        let mut x = 0x9e37_79b9u32;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        let mut starts: Vec<u32> = (0..5_000).map(|_| next()).collect();
        starts.extend([0x0001_0000, 0x0001_ffff, 0x0002_0000, 0xffff_0000, u32::MAX]);
        starts.sort_unstable();
        starts.dedup();
        for table in [
            starts.clone(),
            starts[1..].to_vec(),
            vec![0, 0x0a00_0000, 0x0a00_0100],
            Vec::new(),
        ] {
            let answers = (0..table.len()).map(|i| located(i as u16)).collect();
            let plain = Answers {
                starts: table.clone(),
                answers,
            };
            let indexed = V4Answers::new(plain.clone());
            let probes = table
                .iter()
                .flat_map(|&s| [s.wrapping_sub(1), s, s.wrapping_add(1)])
                .chain((0..20_000).map(|_| next()))
                .chain([0, u32::MAX, 0x0001_0000, 0x0000_ffff]);
            for addr in probes {
                assert_eq!(
                    indexed.find(addr).map(|l| l.region),
                    plain.find(addr).map(|l| l.region),
                    "{addr:#010x}"
                );
            }
        }
    }
}
