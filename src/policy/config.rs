//! The policy part of the configuration file, as written by operators.
//!
//! These types are deserialised as-is and checked by [`super::compile()`]; addresses and names are
//! kept as strings here so that every problem is reported with its field path rather than as a
//! bare parser error.

use serde::Deserialize;

/// Default prefix length hashed for per-subnet choices on IPv4 clients.
pub const DEFAULT_HASH_PREFIX_V4: u8 = 24;
/// Default prefix length hashed for per-subnet choices on IPv6 clients.
pub const DEFAULT_HASH_PREFIX_V6: u8 = 56;

/// `[topology]`: the global anycast addresses, the frontend regions and the fallback ring.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TopologyConfig {
    /// Global anycast addresses (announced by every frontend PoP): the normal anycast answer.
    /// At most one answer set; IPv4 and IPv6 may be mixed.
    #[serde(default)]
    pub global: Vec<String>,
    /// Frontend regions, in a fixed order: a region's position is its index (`u16`) everywhere
    /// else (geo lookup, shield decisions, counters).
    #[serde(default)]
    pub regions: Vec<RegionConfig>,
    /// Fallback ring sites, in a fixed order (position = site index).
    #[serde(default)]
    pub fallback: Vec<FallbackSiteConfig>,
    /// Address cells for shuffle-sharded tenant answers (absent: every tenant answers with
    /// the addresses above, as before).
    #[serde(default)]
    pub cells: Option<CellsConfig>,
}

/// `[topology.cells]`: anycast cells, each announced on its own, grouped in layers. Each
/// tenant's anycast answers carry `k` cells of the layer its client is sent to (the global
/// layer normally, a region's or fallback site's when pinned or shed there); a region or site
/// without cells answers with its own `anycast` addresses.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CellsConfig {
    /// Cells per tenant per layer (default 2; a tenant's document may set its own `cells`).
    #[serde(default)]
    pub k: Option<u32>,
    /// The global layer (required: it is the normal answer).
    #[serde(default)]
    pub global: Vec<CellConfig>,
    /// Region name → that region's cells.
    #[serde(default)]
    pub regions: std::collections::BTreeMap<String, Vec<CellConfig>>,
    /// Fallback site name → that site's cells.
    #[serde(default)]
    pub fallback: std::collections::BTreeMap<String, Vec<CellConfig>>,
    /// Cells for quarantined tenants (`state = "quarantined"` in a tenant's document) only:
    /// shared with no healthy tenant, announced like the global cells.
    #[serde(default)]
    pub quarantine: Vec<CellConfig>,
    /// Layer name (`global`, a region's or a fallback site's, as the control file names
    /// layers) → the health probe of each of that layer's cells (a cell's own `monitor`
    /// replaces it). `{cell}` in its `url`, `tcp` or `dns` stands for the cell's own address
    /// (its IPv4 address, else `[IPv6]`). A cell whose probe is down is left out of tenants'
    /// answers wherever a healthy cell of their shard is left.
    #[serde(default)]
    pub monitors: std::collections::BTreeMap<String, MonitorConfig>,
}

/// One cell: a name unique in its layer and at most one address per family.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CellConfig {
    pub name: String,
    /// One IPv4 and/or one IPv6 address; the same families as `topology.global`.
    pub anycast: Vec<String>,
    /// This cell's health probe (replaces its layer's in `[topology.cells.monitors]`);
    /// `{cell}` stands for the cell's own address as there.
    #[serde(default)]
    pub monitor: Option<MonitorConfig>,
}

/// The default of `[topology.cells] k`.
pub const DEFAULT_CELLS_K: u32 = 2;

/// `[[topology.regions]]`: one frontend region.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RegionConfig {
    /// Unique region name, e.g. `eu-west` (letters, digits, `-`, `_`).
    pub name: String,
    /// Continent code as in MaxMind databases: AF, AN, AS, EU, NA, OC or SA.
    pub continent: String,
    /// Regional anycast addresses (announced only by this region's PoPs). Must contain an IPv4
    /// address if `global` does, and an IPv6 address if `global` does.
    pub anycast: Vec<String>,
    /// Neighbour regions in order of preference: where a drain sends this region's clients and
    /// where a geo profile looks first when no endpoint serves this region.
    #[serde(default)]
    pub neighbours: Vec<String>,
    /// Load the region can take (in the load feed's unit, e.g. queries or Gbit/s); used by the
    /// traffic shield. Absent = unknown: the shield must not shed into it.
    #[serde(default)]
    pub capacity: Option<u64>,
}

/// `[[topology.fallback]]`: one fallback ring site.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FallbackSiteConfig {
    /// Unique site name (shares one namespace with region names), e.g. `fb-eu`.
    pub name: String,
    /// Continent code (AF, AN, AS, EU, NA, OC, SA): drains prefer a site on the same continent.
    pub continent: String,
    /// The site's own anycast addresses; same IPv4/IPv6 rule as for regions.
    pub anycast: Vec<String>,
    /// Load the site can take; see [`RegionConfig::capacity`].
    #[serde(default)]
    pub capacity: Option<u64>,
}

/// How a profile picks one of its endpoints.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProfileKind {
    /// Sticky per client subnet, in proportion to the endpoints' weights.
    Weighted,
    /// By client region, with the fallback order neighbours → same continent → `default`.
    Geo,
    /// The first enabled endpoint in the order written.
    Failover,
}

/// `[profiles.NAME]`: a named profile (weighted, geo or failover).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    /// `weighted`, `geo` or `failover`.
    #[serde(rename = "type")]
    pub kind: ProfileKind,
    /// TTL (seconds) of answers decided by this profile. When profiles are nested the answer
    /// carries the smallest TTL on the path.
    pub ttl: u32,
    /// Weighted profiles: IPv4 prefix length whose hash picks the endpoint (default 24).
    #[serde(default = "default_hash_prefix_v4")]
    pub hash_prefix_v4: u8,
    /// Weighted profiles: IPv6 prefix length whose hash picks the endpoint (default 56).
    #[serde(default = "default_hash_prefix_v6")]
    pub hash_prefix_v6: u8,
    /// The endpoints, in priority order (which matters for failover profiles only).
    pub endpoints: Vec<EndpointConfig>,
    /// What the profile answers when every endpoint it could serve is down by its monitor:
    /// `"serve-all"` (the default: as if every one were up), `"serve-last-healthy"` (the
    /// endpoints that were up last), or `"fallback:NAME"` (an endpoint of this profile, else a
    /// profile, served whatever its health). Never an empty answer.
    #[serde(default)]
    pub all_down: Option<String>,
}

fn default_hash_prefix_v4() -> u8 {
    DEFAULT_HASH_PREFIX_V4
}

fn default_hash_prefix_v6() -> u8 {
    DEFAULT_HASH_PREFIX_V6
}

/// `[[profiles.NAME.endpoints]]`: one answer target inside a profile. Exactly one of `cname`,
/// `addresses` and `profile` must be given.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// Endpoint name, unique within its profile; the control file refers to it by this name.
    pub name: String,
    /// Answer with a CNAME to this absolute name (with the trailing dot).
    #[serde(default)]
    pub cname: Option<String>,
    /// Answer with these addresses (A for IPv4, AAAA for IPv6).
    #[serde(default)]
    pub addresses: Option<Vec<String>>,
    /// Delegate the choice to another profile (nesting at most 4 profiles deep, no cycles).
    #[serde(default)]
    pub profile: Option<String>,
    /// Weighted profiles only, required there: 0..=1000. 0 is a real zero: never served.
    #[serde(default)]
    pub weight: Option<u32>,
    /// Always-serve: the endpoint is never health-checked and is eligible whenever its weight
    /// is above 0. The default is `true` without a `monitor` and `false` with one; `true`
    /// together with a `monitor` is refused (a break-glass endpoint must not drop out on a
    /// failed check), and `false` without one is refused (nothing would say it is up).
    #[serde(default)]
    pub always_serve: Option<bool>,
    /// A health check: the endpoint is served only while it passes (see [`MonitorConfig`]).
    #[serde(default)]
    pub monitor: Option<MonitorConfig>,
    /// Geo profiles only: the regions this endpoint serves.
    #[serde(default)]
    pub regions: Vec<String>,
    /// Geo profiles only: serves regions that neither an endpoint, a neighbour nor a region on
    /// the same continent covers. At most one per profile.
    #[serde(default)]
    pub default: bool,
    /// `false` takes the endpoint out of service (the control file can also do this).
    #[serde(default = "default_true")]
    pub enabled: bool,
}

fn default_true() -> bool {
    true
}

/// `monitor = { ... }` on an endpoint: how and how often to check it. Exactly one of `url`,
/// `tcp` and `dns` names what is checked. One target (the same URL, TCP address or DNS
/// server and name) is probed once per interval however many endpoints use it, so every
/// endpoint that names it must give it the same settings.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MonitorConfig {
    /// HTTP(S) check: `http://host:port/path` or `https://...`; GET, HTTP/1.1.
    #[serde(default)]
    pub url: Option<String>,
    /// TCP check: `host:port` accepts a connection.
    #[serde(default)]
    pub tcp: Option<String>,
    /// DNS check: `host:port` of a DNS server that must answer `dns_name` (`dns_type`) with
    /// NOERROR over UDP.
    #[serde(default)]
    pub dns: Option<String>,
    /// DNS checks: the name asked (absolute, with the trailing dot).
    #[serde(default)]
    pub dns_name: Option<String>,
    /// DNS checks: the type asked, `A`, `AAAA`, `SOA`, `NS` or `TXT` (default `SOA`).
    #[serde(default)]
    pub dns_type: Option<String>,
    /// Milliseconds between checks (100..=3600000, default 5000).
    #[serde(default)]
    pub interval_ms: Option<u64>,
    /// Milliseconds a check may take before it counts as failed (default 1000, below
    /// `interval_ms`).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Consecutive failures that take an up endpoint down (1..=100, default 3).
    #[serde(default)]
    pub fall: Option<u32>,
    /// Consecutive successes that bring a down endpoint up (1..=100, default 2).
    #[serde(default)]
    pub rise: Option<u32>,
    /// State before the first check: `"up"`, `"down"` or `"unknown"` (the default: answered
    /// as up, and the first result decides).
    #[serde(default)]
    pub startup: Option<String>,
    /// HTTP checks: accepted status codes, `[low, high]` inclusive (default `[200, 399]`).
    #[serde(default)]
    pub expect_status: Option<[u16; 2]>,
    /// HTTP checks: a substring the body (first 64 KiB) must contain.
    #[serde(default)]
    pub expect_body: Option<String>,
    /// HTTPS checks: `"verify"` (default: the system's CA bundle and the URL's host name),
    /// `"skip"` (no certificate check; labs only), or `"sha256:HEX"` (the server's leaf
    /// certificate must have this SHA-256 digest; names and CAs are not checked).
    #[serde(default)]
    pub tls: Option<String>,
}

/// What a steered name answers with.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SteeredPolicyKind {
    /// Global anycast, with per-region forced answers, drains and traffic-shield shedding.
    Anycast,
}

/// `[[steered]]`: a name whose A/AAAA (or CNAME) answer is computed per client.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SteeredConfig {
    /// Absolute name with the trailing dot; `*.` as the first label makes it a wildcard.
    pub name: String,
    /// `anycast`; give either this or `profile`.
    #[serde(default)]
    pub policy: Option<SteeredPolicyKind>,
    /// Name of a profile in `[profiles]`; give either this or `policy`.
    #[serde(default)]
    pub profile: Option<String>,
    /// TTL (seconds). Required for `policy = "anycast"`; with `profile` it is optional and
    /// caps the profile's TTL.
    #[serde(default)]
    pub ttl: Option<u32>,
    /// What an outgoing zone transfer carries for this name (see [`TransferProjection`]).
    #[serde(default)]
    pub transfer: TransferProjection,
}

/// `transfer = "default" | "omit"` on a `[[steered]]` entry: what a secondary that cannot run
/// the policies gets for the name in a zone transfer.
///
/// `"default"` is the default: an operator who turns transfers on for a second provider
/// expects every name of the zone to resolve there, so a steered name left out would be a
/// silent NXDOMAIN on the day the provider is the only one answering. `"omit"` is for the
/// names whose static answer would be wrong everywhere (a name that must never be answered
/// without its policy).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TransferProjection {
    /// The name's always-serve answer, as plain records (its static projection).
    #[default]
    Default,
    /// Left out of transfers.
    Omit,
}
