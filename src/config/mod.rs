//! The static configuration file (TOML): listen addresses, protocol options, where zones live.
//! Later sections (geo, topology, profiles, steered names, control) are added by their parts.
//!
//! Owns parsing and checking the file; relative paths resolve against the file's directory.
//! Knows nothing of sockets or zones beyond their paths.
//!
//! Plain data, low in the layers: it imports only the pure cores' own section types
//! (`geo`, `policy`, `dnssec` settings) and `files`. Turning a section into what a part runs
//! with is that part's job (`ShieldSettings::from_config`, `TcpLimits::from_config`,
//! `ServeOptions::from_config`, `RrlLimits::from_config`), so nothing here points upward.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::Deserialize;

pub mod admin;
pub mod budgets;
pub mod drill;
pub mod fleet;
pub mod prometheus;
pub mod rrl;
pub mod secondary;
pub mod transfer;

use crate::geo::GeoConfig;
use crate::policy::{ProfileConfig, SteeredConfig, TopologyConfig};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    /// Client location: GeoIP database, country/continent → region, CIDR overrides.
    #[serde(default)]
    pub geo: GeoConfig,
    /// Global anycast, regions and fallback sites.
    #[serde(default)]
    pub topology: TopologyConfig,
    /// Weighted / geo / failover profiles, by name.
    #[serde(default)]
    pub profiles: BTreeMap<String, ProfileConfig>,
    /// Names whose A/AAAA (or CNAME) answers a policy computes.
    #[serde(default)]
    pub steered: Vec<SteeredConfig>,
    /// The control file with the live knobs (weights, drains, shield mode).
    #[serde(default)]
    pub control: ControlConfig,
    /// The traffic shield: watermarks, pacing, staleness, the load file.
    #[serde(default)]
    pub shield: ShieldConfig,
    /// The admin HTTP endpoint (status, reload; later metrics and load feeds).
    #[serde(default)]
    pub admin: admin::AdminConfig,
    /// Who may see decision traces (`dig CH TXT <steered name>`).
    #[serde(default)]
    pub trace: TraceConfig,
    /// Response rate limiting for UDP (off unless enabled).
    #[serde(default)]
    pub rrl: rrl::RrlConfig,
    /// Per-tenant response budgets while the server is saturated (off unless enabled).
    #[serde(default)]
    pub budgets: budgets::BudgetsConfig,
    /// Fleet mode: the control state shared by every node through etcd. Absent: single node.
    #[serde(default)]
    pub fleet: Option<fleet::FleetConfig>,
    /// DNSSEC: zones to sign, key directory, algorithm, signature validity, rollover.
    #[serde(default)]
    pub dnssec: crate::dnssec::DnssecConfig,
    /// The taster: a child process that loads every change before the server does.
    #[serde(default)]
    pub taster: TasterConfig,
    /// Safety rules every control change must pass (`[[safety.rules]]`).
    #[serde(default)]
    pub safety: crate::safety::SafetyConfig,
    /// Practice drills (`[[drills]]`): run by `steerdns drill run` or the server's schedule.
    #[serde(default)]
    pub drills: Vec<drill::DrillConfig>,
    /// Secondary zones pulled from primaries by zone transfer (`[[secondary.zone]]`).
    #[serde(default)]
    pub secondary: secondary::SecondaryConfig,
    /// Outgoing zone transfers and NOTIFY (`[transfer]`); absent: AXFR/IXFR refused.
    #[serde(default)]
    pub transfer: Option<transfer::TransferConfig>,
    /// Tenant documents: the folder of `<tenant>.toml` files the server watches.
    #[serde(default)]
    pub tenants: TenantsConfig,
    /// Directory the config file is in: relative paths (geo database) resolve against it.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The file this config was read from, if any.
    #[serde(skip)]
    pub source_path: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    /// Path of the control file (relative to the config file). Unset: no live knobs.
    pub file: Option<PathBuf>,
    /// Where accepted control versions are kept. Default: `<control file>.history` beside it.
    pub history_dir: Option<PathBuf>,
    /// How many accepted versions to keep.
    pub history_keep: usize,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            file: None,
            history_dir: None,
            history_keep: 50,
        }
    }
}

/// `[tenants]`: where the tenant documents are.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantsConfig {
    /// The folder of `<tenant>.toml` documents (relative to the config file; default
    /// `tenants` beside it). A missing folder: no tenants. Empty (built-in defaults, no
    /// config file): no tenants.
    pub dir: PathBuf,
    /// How many accepted versions of each tenant `<dir>/.history/<tenant>/` keeps.
    pub history_keep: usize,
    /// Quarantine the tenants blame names (`named`: their shards hold every impaired cell and
    /// chance explains less than one tenant) by itself, as `steerdns tenant quarantine` would.
    /// Off by default: a drained cell is an operator's act, and blame is advice until trusted.
    pub auto_quarantine: bool,
    /// Most `[monitors]` one tenant's document may define (a document with more is refused,
    /// naming the field).
    pub max_monitors: usize,
    /// Each tenant's probe budget: checks of its monitors started per second, at most. A
    /// tenant whose monitors ask for more has its checks spread out (intervals stretched),
    /// shown as throttled; other tenants' and the platform's checks never wait for it.
    pub probes_per_second: f64,
}

impl Default for TenantsConfig {
    fn default() -> Self {
        TenantsConfig {
            dir: PathBuf::new(),
            history_keep: 20,
            auto_quarantine: false,
            max_monitors: crate::tenant::document::DEFAULT_MAX_MONITORS,
            probes_per_second: crate::tenant::document::DEFAULT_PROBES_PER_SECOND,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShieldConfig {
    /// A region above this utilisation sheds (0..1).
    pub high_watermark: f64,
    /// A region below this takes traffic back; above it, its clients get the short TTL.
    pub low_watermark: f64,
    /// Largest change of a region's shed fraction per tick.
    pub max_step: f64,
    /// Seconds to wait before reversing direction.
    pub hold_down_secs: u64,
    /// TTL (s) of answers for clients of a hot or shedding region.
    pub short_ttl: u32,
    /// Load data older than this (s) freezes decisions...
    pub stale_after_secs: u64,
    /// ...and older than this (s) decays them back to normal answers.
    pub revert_after_secs: u64,
    pub allow_cross_continent: bool,
    /// Milliseconds between decisions.
    pub tick_ms: u64,
    /// A load-feed JSON file to watch (relative to the config file). Feeds can also be pushed
    /// with `POST /v1/load` or `steerdns load push`.
    pub load_file: Option<PathBuf>,
    /// A Prometheus server to query for load (`[shield.prometheus]`).
    pub prometheus: Option<prometheus::PrometheusConfig>,
    /// Resolvers (source address networks) the shield's demand count trusts: their ECS
    /// addresses count, and so do their queries without ECS over UDP without a valid DNS
    /// cookie. ECS from any other source still steers the answer but is not counted; other
    /// queries without ECS count by their source only when it is proven (TCP, DoT/DoH/DoQ,
    /// or a valid server cookie). Empty (default): nothing counts unproven.
    pub trusted_ecs_resolvers: Vec<IpNet>,
    /// Tenant-first shedding: a tenant whose clients bring more than this share of a hot
    /// region's load (the feed's `tenants` section) is shed alone before the region is
    /// (0 < share <= 1; 1 turns it off, as no tenant can bring more than all of it).
    pub tenant_share: f64,
    /// Most cells that go hot in one tick (hottest first; the others wait for the next tick).
    pub max_hot_cells_per_tick: usize,
}

impl Default for ShieldConfig {
    fn default() -> Self {
        ShieldConfig {
            high_watermark: 0.85,
            low_watermark: 0.70,
            max_step: 0.1,
            hold_down_secs: 30,
            short_ttl: 30,
            stale_after_secs: 30,
            revert_after_secs: 300,
            allow_cross_continent: true,
            tick_ms: 1000,
            load_file: None,
            prometheus: None,
            trusted_ecs_resolvers: Vec::new(),
            tenant_share: 0.3,
            max_hot_cells_per_tick: 2,
        }
    }
}

/// The taster ("food taster"): before the server builds a snapshot from a change (control
/// version, config, zones, geo database), a child process loads the very same change under
/// these limits. A crash, abort, timeout or out-of-memory in the child refuses the change and
/// the server keeps serving what it served.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TasterConfig {
    /// Taste every change in a child process first (default true). Off: changes are loaded
    /// in the serving process directly, as validated as ever but without the isolation.
    pub enabled: bool,
    /// Wall-clock limit (ms) for one taste; the child is killed when it runs longer.
    pub timeout_ms: u64,
    /// Address-space limit of the child (MiB, RLIMIT_AS). Loading a million names takes
    /// about 600 MiB.
    pub memory_mb: u64,
    /// CPU-time limit of the child (s, RLIMIT_CPU).
    pub cpu_secs: u64,
}

impl Default for TasterConfig {
    fn default() -> Self {
        TasterConfig {
            enabled: true,
            timeout_ms: 30_000,
            memory_mb: 4096,
            cpu_secs: 60,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TraceConfig {
    /// Clients allowed to ask `CH TXT <name>` for a decision trace. Default: loopback only.
    pub allow: Vec<IpNet>,
}

impl Default for TraceConfig {
    fn default() -> Self {
        let loopback = |s: &str| s.parse().ok();
        TraceConfig {
            allow: ["127.0.0.0/8", "::1/128"]
                .iter()
                .filter_map(|s| loopback(s))
                .collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Addresses to serve on, UDP and TCP alike. Port 0 picks a free port (tests).
    pub listen: Vec<SocketAddr>,
    /// Directory of zone files, one zone per `<origin>.zone` file.
    pub zones: PathBuf,
    /// UDP worker threads (and sockets) per listen address; 0 = one per CPU core.
    pub udp_workers: usize,
    /// Largest UDP payload we advertise and send (512..=4096; 1232 avoids IP fragmentation).
    pub edns_payload: u16,
    /// RFC 5001 NSID sent to clients that ask (e.g. the node name).
    pub nsid: Option<String>,
    /// Answer to `dig CH TXT id.server` / `hostname.bind`; unset refuses.
    pub identity: Option<String>,
    /// Answer to `dig CH TXT version.bind`; "" refuses. Default: `"steerdns <version>"`.
    pub version: Option<String>,
    /// Log one query in this many at info (client, name, type, rcode); 0 (default) = none.
    pub query_log_sample: u32,
    pub tcp: TcpConfig,
    /// The optional AF_XDP path for UDP queries (Linux; needs CAP_NET_ADMIN and CAP_BPF).
    pub xdp: Option<XdpConfig>,
    /// DNS over TLS, HTTPS and QUIC (optional).
    pub tls: Option<TlsConfig>,
    /// DNS Cookies (RFC 7873, RFC 9018 server cookies).
    pub cookies: CookieConfig,
    /// Where the server keeps what it needs across restarts (the record of the inputs it last
    /// served). Default: `<config file>.state/` beside the config file; none without one.
    pub state_dir: Option<PathBuf>,
}

/// `[server.cookies]`: DNS Cookies (RFC 7873) with RFC 9018's interoperable server cookie.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CookieConfig {
    /// Answer COOKIE options (on by default); off, no cookie is sent back and none proves a
    /// source (a malformed option is FORMERR either way: RFC 7873 §5.2.2).
    pub enabled: bool,
    /// The server secret: a file (0600) whose first line is 32 hex digits (16 bytes), and
    /// optionally a second line with the previous secret, still accepted while a new one is
    /// rolled out. Give every node of a fleet the same file, so each verifies the cookies
    /// the others issued. Unset: a random secret made when the process starts (kept across
    /// reloads; cookies from other nodes or an earlier process do not verify).
    pub secret_file: Option<PathBuf>,
}

impl Default for CookieConfig {
    fn default() -> Self {
        CookieConfig {
            enabled: true,
            secret_file: None,
        }
    }
}

/// `[server.tls]`: the encrypted transports -- DNS over TLS (RFC 7858), over HTTPS (RFC 8484,
/// path `/dns-query`, GET and POST) and over QUIC (RFC 9250) -- with one certificate. Each
/// list of addresses is optional; the limits work like `[server.tcp]`'s, per transport.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first. Re-read on every reload.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the leaf certificate.
    pub key: PathBuf,
    /// DNS over TLS listen addresses (TCP), e.g. ["192.0.2.1:853"].
    pub dot: Vec<SocketAddr>,
    /// DNS over HTTPS (HTTP/2) listen addresses (TCP), e.g. ["192.0.2.1:443"].
    pub doh: Vec<SocketAddr>,
    /// DNS over QUIC listen addresses (UDP), e.g. ["192.0.2.1:853"].
    pub doq: Vec<SocketAddr>,
    /// Seconds a client has to complete the TLS (or QUIC) handshake.
    pub handshake_timeout_secs: u64,
    /// Seconds a connection may stay without a query before we close it (while at most half
    /// the slots are taken; beyond, less, down to `busy_idle_timeout_ms` when all are).
    pub idle_timeout_secs: u64,
    /// Milliseconds a connection may stay without a query when every slot is taken.
    pub busy_idle_timeout_ms: u64,
    /// Seconds a connection may live, however busy (wall clock); the client reconnects.
    pub max_connection_lifetime_secs: u64,
    /// Seconds a client has to finish a query once it started sending it.
    pub frame_timeout_secs: u64,
    /// Connections served at once, per transport.
    pub max_connections: usize,
    /// Connections one client may hold open per transport (a client is a prefix of
    /// [server.tcp] `client_prefix_v4`/`client_prefix_v6`).
    pub max_connections_per_client: usize,
    /// Queries answered on one connection before it is closed.
    pub max_queries_per_connection: usize,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            cert: PathBuf::new(),
            key: PathBuf::new(),
            dot: Vec::new(),
            doh: Vec::new(),
            doq: Vec::new(),
            handshake_timeout_secs: 5,
            idle_timeout_secs: 30,
            busy_idle_timeout_ms: 1000,
            max_connection_lifetime_secs: 600,
            frame_timeout_secs: 3,
            max_connections: 1024,
            max_connections_per_client: 32,
            max_queries_per_connection: 10_000,
        }
    }
}

/// `[server.xdp]`: take UDP queries to our ports off an interface before the kernel's stack.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XdpConfig {
    /// The interface queries arrive on, e.g. "eth0".
    pub interface: String,
    /// Receive queues to serve (one worker thread each); default: all of the interface's.
    #[serde(default)]
    pub queues: Option<Vec<u32>>,
    /// UDP destination ports to take; default: the ports of `listen`.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// "auto" (driver mode, else generic), "native" or "generic".
    #[serde(default)]
    pub attach: XdpAttach,
    /// Try zero-copy first where the driver supports it (else copy mode).
    #[serde(default = "default_true")]
    pub zero_copy: bool,
}

fn default_true() -> bool {
    true
}

/// Where the XDP program runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XdpAttach {
    #[default]
    Auto,
    Native,
    Generic,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: vec![
                SocketAddr::from(([127, 0, 0, 1], 5353)),
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 5353)),
            ],
            zones: PathBuf::from("zones"),
            udp_workers: 0,
            edns_payload: 1232,
            nsid: None,
            identity: None,
            version: None,
            query_log_sample: 0,
            tcp: TcpConfig::default(),
            xdp: None,
            tls: None,
            cookies: CookieConfig::default(),
            state_dir: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TcpConfig {
    /// Seconds a connection may stay silent before we close it (while at most half the
    /// slots are taken; beyond, less, down to `busy_idle_timeout_ms` when all are).
    pub idle_timeout_secs: u64,
    /// Milliseconds a connection may stay silent when every slot is taken.
    pub busy_idle_timeout_ms: u64,
    /// Seconds a connection may live, however busy (wall clock); the client reconnects.
    pub max_connection_lifetime_secs: u64,
    /// TCP connections served at once. A newcomer to full slots closes the worst holder (idle,
    /// or mid-query longest for the queries it completed) or, if every holder is answering
    /// right now, is closed itself; the accept loop never waits.
    pub max_connections: usize,
    /// Connections one client (a `client_prefix_v4`/`client_prefix_v6` prefix) may hold
    /// open; further ones are closed at once.
    pub max_connections_per_client: usize,
    /// Prefix lengths that make one client for `max_connections_per_client`, here and on the
    /// encrypted transports ([server.tls]): /24 and /48 by default.
    pub client_prefix_v4: u8,
    pub client_prefix_v6: u8,
    /// Seconds a client has to finish a query (length and message) once it sent its first
    /// byte; a connection that stalls mid-frame is closed.
    pub frame_timeout_secs: u64,
    /// Queries answered on one connection before it is closed.
    pub max_queries_per_connection: usize,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            idle_timeout_secs: 10,
            busy_idle_timeout_ms: 200,
            max_connection_lifetime_secs: 120,
            max_connections: 1024,
            max_connections_per_client: 32,
            client_prefix_v4: 24,
            client_prefix_v6: 48,
            frame_timeout_secs: 3,
            max_queries_per_connection: 10_000,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {field}: {message}")]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// A problem of one field whose line is known.
    #[error("{path}:{line}: {field}: {message}")]
    InvalidAt {
        path: PathBuf,
        line: usize,
        field: String,
        message: String,
    },
}

impl Default for Config {
    fn default() -> Self {
        Config {
            server: ServerConfig::default(),
            geo: GeoConfig::default(),
            topology: TopologyConfig::default(),
            profiles: BTreeMap::new(),
            steered: Vec::new(),
            control: ControlConfig::default(),
            admin: admin::AdminConfig::default(),
            shield: ShieldConfig::default(),
            trace: TraceConfig::default(),
            rrl: rrl::RrlConfig::default(),
            budgets: budgets::BudgetsConfig::default(),
            fleet: None,
            dnssec: crate::dnssec::DnssecConfig::default(),
            taster: TasterConfig::default(),
            safety: crate::safety::SafetyConfig::default(),
            drills: Vec::new(),
            secondary: secondary::SecondaryConfig::default(),
            transfer: None,
            tenants: TenantsConfig::default(),
            base_dir: PathBuf::from("."),
            source_path: None,
        }
    }
}

impl Config {
    /// Compiles topology, profiles and steered names with the given control knobs.
    pub fn compile_policies(
        &self,
        knobs: &crate::policy::ControlKnobs,
    ) -> Result<crate::policy::CompiledPolicies, Vec<crate::policy::PolicyError>> {
        crate::policy::compile(&self.topology, &self.profiles, &self.steered, knobs)
    }

    /// Does this config steer any names? (Without steered names no topology is needed.)
    pub fn has_steering(&self) -> bool {
        !self.steered.is_empty()
    }

    /// Reads and checks a config file; relative paths in it become relative to its directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_relative_to(path, None)
    }

    /// Like [`Config::load`], with relative paths resolved against `base` instead of the
    /// file's directory (a copy of a config file kept elsewhere, e.g. a fleet node's staged
    /// bundle, names the same files as the original).
    pub fn load_relative_to(path: &Path, base: Option<&Path>) -> Result<Config, ConfigError> {
        let text = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT).map_err(
            |source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            },
        )?;
        let mut config = Config::parse(&text, path)?;
        let base = match (base, path.parent()) {
            (Some(base), _) => base,
            (None, Some(p)) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        config.resolve_paths(base);
        config.source_path = Some(path.to_path_buf());
        Ok(config)
    }

    /// Parses config text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|span| crate::text_position::line_column(text, span.start))
                .unwrap_or((0, 0));
            ConfigError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                message: e.message().to_string(),
            }
        })?;
        config.check(path)?;
        config.check_safety(text, path)?;
        Ok(config)
    }

    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        let server = &self.server;
        if !(512..=4096).contains(&server.edns_payload) {
            return Err(invalid(
                "server.edns_payload",
                format!("{} is outside 512..=4096", server.edns_payload),
            ));
        }
        if server.listen.is_empty() {
            return Err(invalid(
                "server.listen",
                "needs at least one address".into(),
            ));
        }
        if let Some(nsid) = &server.nsid {
            if nsid.len() > 255 {
                return Err(invalid("server.nsid", "longer than 255 bytes".into()));
            }
        }
        let shield = &self.shield;
        let in_unit = |v: f64| v.is_finite() && v > 0.0 && v <= 1.0;
        if !(in_unit(shield.low_watermark)
            && in_unit(shield.high_watermark)
            && shield.low_watermark < shield.high_watermark)
        {
            return Err(invalid(
                "shield.low_watermark / shield.high_watermark",
                format!(
                    "need 0 < low < high <= 1 (got {} and {})",
                    shield.low_watermark, shield.high_watermark
                ),
            ));
        }
        if !in_unit(shield.max_step) {
            return Err(invalid(
                "shield.max_step",
                format!("{} is outside (0, 1]", shield.max_step),
            ));
        }
        if shield.max_hot_cells_per_tick == 0 {
            return Err(invalid(
                "shield.max_hot_cells_per_tick",
                "must be at least 1".into(),
            ));
        }
        if !in_unit(shield.tenant_share) {
            return Err(invalid(
                "shield.tenant_share",
                format!("{} is outside (0, 1]", shield.tenant_share),
            ));
        }
        if shield.stale_after_secs >= shield.revert_after_secs {
            return Err(invalid(
                "shield.stale_after_secs",
                "must be shorter than shield.revert_after_secs".into(),
            ));
        }
        if shield.short_ttl == 0 || shield.tick_ms < 100 {
            return Err(invalid(
                "shield",
                "short_ttl must be >= 1 s and tick_ms >= 100".into(),
            ));
        }
        if let Some((field, message)) = shield.prometheus.as_ref().and_then(|p| p.problem()) {
            return Err(invalid(field, message));
        }
        if let Some((field, message)) = self.admin.problem() {
            return Err(invalid(field, message));
        }
        if self.control.history_keep == 0 {
            return Err(invalid("control.history_keep", "must be at least 1".into()));
        }
        let rate = self.tenants.probes_per_second;
        if !(rate.is_finite() && (0.01..=10_000.0).contains(&rate)) {
            return Err(invalid(
                "tenants.probes_per_second",
                format!("{rate} is outside 0.01..=10000 (checks per second per tenant)"),
            ));
        }
        if server.tcp.max_connections == 0
            || server.tcp.max_queries_per_connection == 0
            || server.tcp.max_connections_per_client == 0
        {
            return Err(invalid(
                "server.tcp",
                "max_connections, max_connections_per_client and max_queries_per_connection \
                 must be at least 1"
                    .into(),
            ));
        }
        if server.tcp.client_prefix_v4 == 0
            || server.tcp.client_prefix_v4 > 32
            || server.tcp.client_prefix_v6 == 0
            || server.tcp.client_prefix_v6 > 128
        {
            return Err(invalid(
                "server.tcp",
                "client_prefix_v4 must be 1..=32 and client_prefix_v6 1..=128".into(),
            ));
        }
        if server.tcp.max_connection_lifetime_secs == 0 {
            return Err(invalid(
                "server.tcp.max_connection_lifetime_secs",
                "must be at least 1".into(),
            ));
        }
        if let Some(tls) = &server.tls {
            if tls.max_connection_lifetime_secs == 0 {
                return Err(invalid(
                    "server.tls.max_connection_lifetime_secs",
                    "must be at least 1".into(),
                ));
            }
            if tls.cert.as_os_str().is_empty() || tls.key.as_os_str().is_empty() {
                return Err(invalid(
                    "server.tls",
                    "cert and key are required (PEM files)".into(),
                ));
            }
            if tls.max_connections == 0
                || tls.max_queries_per_connection == 0
                || tls.max_connections_per_client == 0
                || tls.handshake_timeout_secs == 0
            {
                return Err(invalid(
                    "server.tls",
                    "max_connections, max_connections_per_client, max_queries_per_connection \
                     and handshake_timeout_secs must be at least 1"
                        .into(),
                ));
            }
            // TCP ports: listen, dot, doh; UDP ports: listen, doq. Port 0 picks a free one.
            let tcp: Vec<_> = server
                .listen
                .iter()
                .chain(&tls.dot)
                .chain(&tls.doh)
                .collect();
            let udp: Vec<_> = server.listen.iter().chain(&tls.doq).collect();
            let twice = |addrs: &[&SocketAddr]| {
                addrs
                    .iter()
                    .enumerate()
                    .find_map(|(i, a)| (a.port() != 0 && addrs[i + 1..].contains(a)).then_some(**a))
            };
            let clash = twice(&tcp).or_else(|| twice(&udp));
            if let Some(addr) = clash {
                return Err(invalid(
                    "server.tls",
                    format!("{addr} is used twice (by another transport or server.listen)"),
                ));
            }
        }
        let taster = &self.taster;
        if taster.timeout_ms < 100 || taster.memory_mb < 64 || taster.cpu_secs == 0 {
            return Err(invalid(
                "taster",
                format!(
                    "need timeout_ms >= 100, memory_mb >= 64 and cpu_secs >= 1 (got {}, {}, {})",
                    taster.timeout_ms, taster.memory_mb, taster.cpu_secs
                ),
            ));
        }
        if let Some((field, message)) = self.rrl.problem() {
            return Err(invalid(field, message));
        }
        if let Some((field, message)) = self.budgets.problem() {
            return Err(invalid(field, message));
        }
        if let Some(fleet) = &self.fleet {
            if let Some(problem) = fleet.problems().into_iter().next() {
                return Err(invalid("fleet", problem));
            }
            if self.control.file.is_none() {
                return Err(invalid(
                    "control.file",
                    "fleet mode needs a control file: it is the node's cache of the fleet's \
                     control state (served at startup when etcd is unreachable)"
                        .into(),
                ));
            }
        }
        if let Some(problem) = self.dnssec.problem() {
            return Err(invalid(&problem.field, problem.message));
        }
        if let Some((field, message)) = self.transfer.as_ref().and_then(|t| t.problem()) {
            return Err(invalid(&field, message));
        }
        if let Some((field, message)) = self.secondary.problem() {
            return Err(invalid(&field, message));
        }
        Ok(())
    }

    /// The safety rules and drills against the profiles and regions, the error naming the
    /// line of the field (or of its rule or drill).
    fn check_safety(&self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let problem = self
            .safety
            .problem(&self.profiles, &self.topology)
            .map(|p| (p.field, p.message))
            .or_else(|| drill::problem(&self.drills, &self.profiles, &self.topology));
        let Some((field, message)) = problem else {
            return Ok(());
        };
        let line = crate::control::line_of_field(text, &field).unwrap_or(0);
        Err(ConfigError::InvalidAt {
            path: path.to_path_buf(),
            line,
            field,
            message,
        })
    }

    fn resolve_paths(&mut self, base: &Path) {
        self.base_dir = base.to_path_buf();
        for path in [
            &mut self.control.file,
            &mut self.control.history_dir,
            &mut self.admin.token_file,
            &mut self.shield.load_file,
            &mut self.server.cookies.secret_file,
            &mut self.server.state_dir,
        ]
        .into_iter()
        .chain(self.fleet.iter_mut().flat_map(|f| {
            [
                &mut f.password_file,
                &mut f.ca_file,
                &mut f.cert_file,
                &mut f.key_file,
                &mut f.bundle_dir,
            ]
        }))
        .flatten()
        {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
        if self.server.zones.is_relative() {
            self.server.zones = base.join(&self.server.zones);
        }
        if self.tenants.dir.as_os_str().is_empty() {
            self.tenants.dir = PathBuf::from("tenants");
        }
        if self.tenants.dir.is_relative() {
            self.tenants.dir = base.join(&self.tenants.dir);
        }
        self.secondary.resolve(base);
        if let Some(transfer) = &mut self.transfer {
            transfer.resolve(base);
        }
        if let Some(tls) = &mut self.server.tls {
            for path in [&mut tls.cert, &mut tls.key] {
                if path.is_relative() {
                    *path = base.join(&*path);
                }
            }
        }
        let dnssec = &mut self.dnssec;
        let zone_keys = dnssec.zone.values_mut().filter_map(|z| z.keys.as_mut());
        for keys in std::iter::once(&mut dnssec.keys).chain(zone_keys) {
            if keys.is_relative() {
                *keys = base.join(&*keys);
            }
        }
    }

    /// The state directory (`[server] state_dir`, else `<config file>.state` beside the
    /// config file); `None` when neither is given (built-in defaults, no config file).
    pub fn state_dir(&self) -> Option<PathBuf> {
        if let Some(dir) = &self.server.state_dir {
            return Some(dir.clone());
        }
        let config = self.source_path.as_ref()?;
        let mut name = config.file_name()?.to_os_string();
        name.push(".state");
        Some(config.with_file_name(name))
    }

    pub fn udp_workers(&self) -> usize {
        match self.server.udp_workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_serve_loopback_5353() {
        let c = Config::parse("", Path::new("x.toml")).unwrap();
        assert_eq!(c.server.listen[0].to_string(), "127.0.0.1:5353");
        assert_eq!(c.server.listen[1].to_string(), "[::1]:5353");
        assert_eq!(c.server.edns_payload, 1232);
    }

    #[test]
    fn unknown_field_names_line_and_column() {
        let err = Config::parse(
            "[server]\nedns_payload = 1232\nlisten_on = []\n",
            Path::new("s.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("s.toml:3:1: unknown field `listen_on`"),
            "{err}"
        );
    }

    #[test]
    fn rrl_and_tcp_limits_are_read_and_checked() {
        let c = Config::parse(
            "[server.tcp]\nmax_connections_per_client = 3\nframe_timeout_secs = 2\n\n\
             [rrl]\nenabled = true\nresponses_per_second = 7\nslip = 3\n\
             exempt = [\"10.0.0.0/8\"]\n",
            Path::new("s.toml"),
        )
        .unwrap();
        assert_eq!(c.server.tcp.max_connections_per_client, 3);
        assert_eq!(c.server.tcp.frame_timeout_secs, 2);
        assert!(c.rrl.enabled);
        assert_eq!((c.rrl.responses_per_second, c.rrl.slip), (7, 3));
        let err = Config::parse("[rrl]\nipv6_prefix = 200\n", Path::new("s.toml"))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "s.toml: rrl.ipv6_prefix: 200 is outside 1..=128");
        let err = Config::parse("[rrl]\nrate = 5\n", Path::new("s.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `rate`"), "{err}");
    }

    #[test]
    fn out_of_range_payload_names_the_field() {
        let err = Config::parse("[server]\nedns_payload = 100\n", Path::new("s.toml"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "s.toml: server.edns_payload: 100 is outside 512..=4096"
        );
    }
}
