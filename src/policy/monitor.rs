//! Endpoint monitors: checking `monitor = { ... }` and compiling it into a [`MonitorSpec`] (what
//! to check, how often, rise/fall, the startup state), with one spec per distinct target so
//! that a target is probed once per interval however many endpoints use it. Pure: the probing
//! itself is `crate::health`'s.

use std::collections::HashMap;

use super::compile::{name_wire, parse_absolute_name, Errors};
use super::config::MonitorConfig;

/// Default milliseconds between checks.
pub const DEFAULT_INTERVAL_MS: u64 = 5000;
/// Default milliseconds a check may take.
pub const DEFAULT_TIMEOUT_MS: u64 = 1000;
/// Default consecutive failures that take a target down.
pub const DEFAULT_FALL: u32 = 3;
/// Default consecutive successes that bring a target up.
pub const DEFAULT_RISE: u32 = 2;
/// Largest `fall`/`rise`.
pub const MAX_COUNT: u32 = 100;
/// Shortest interval.
pub const MIN_INTERVAL_MS: u64 = 100;
/// Longest interval (an hour).
pub const MAX_INTERVAL_MS: u64 = 3_600_000;

/// A target's state before its first check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Startup {
    /// Up: `fall` failures take it down.
    Up,
    /// Down: `rise` successes bring it up.
    Down,
    /// Unknown, answered as up; the first result decides.
    Unknown,
}

impl Startup {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Startup::Up => "up",
            Startup::Down => "down",
            Startup::Unknown => "unknown",
        }
    }
}

/// How an HTTPS check treats the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TlsCheck {
    /// Chain to the system's CA bundle, name = the URL's host.
    Verify,
    /// No check at all (labs).
    Skip,
    /// The leaf certificate's SHA-256 digest must be this.
    Pin([u8; 32]),
}

/// What one check does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Check {
    /// `GET path` over HTTP/1.1 (HTTPS when `tls` is set); passes on a status within
    /// `status` whose body contains `body`.
    Http {
        host: String,
        port: u16,
        path: String,
        tls: Option<TlsCheck>,
        status: (u16, u16),
        body: Option<String>,
    },
    /// A TCP connection is accepted.
    Tcp { host: String, port: u16 },
    /// A UDP DNS query for `name`/`qtype` is answered NOERROR.
    Dns {
        host: String,
        port: u16,
        /// Uncompressed wire form of the name asked.
        name: Vec<u8>,
        qtype: u16,
    },
}

/// One compiled monitor target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MonitorSpec {
    /// What is checked, as shown in status and metrics (`http://…`, `tcp:host:port`,
    /// `dns:host:port NAME TYPE`); unique among the specs.
    pub target: String,
    pub check: Check,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub fall: u32,
    pub rise: u32,
    pub startup: Startup,
}

/// Collects the distinct monitor specs while endpoints are compiled.
#[derive(Default)]
pub(crate) struct MonitorTable {
    pub(crate) specs: Vec<MonitorSpec>,
    /// Target → (slot, the field path that defined it first).
    by_target: HashMap<String, (u16, String)>,
    /// The first slot handed out: a tenant's own monitors are numbered after the platform's
    /// (a slot at or above it is read from the tenant's own view, see
    /// [`super::health::OwnMonitors`]).
    base: u16,
}

impl MonitorTable {
    /// A table whose first slot is `base`.
    pub(crate) fn starting_at(base: u16) -> MonitorTable {
        MonitorTable {
            base,
            ..MonitorTable::default()
        }
    }

    /// Compiles one endpoint's monitor and returns its slot (shared with every endpoint that
    /// monitors the same target with the same settings).
    pub(crate) fn add(
        &mut self,
        config: &MonitorConfig,
        path: &str,
        errors: &mut Errors,
    ) -> Option<u16> {
        let spec = compile_monitor(config, path, errors)?;
        if let Some((slot, first)) = self.by_target.get(&spec.target) {
            let same = self.specs.get(usize::from(*slot - self.base)) == Some(&spec);
            if !same {
                errors.push(
                    path,
                    format!(
                        "{} is also monitored by {first} with other settings; one target is probed once per interval, so give it the same settings everywhere",
                        spec.target
                    ),
                );
            }
            return Some(*slot);
        }
        let Some(slot) = u16::try_from(self.specs.len())
            .ok()
            .and_then(|n| n.checked_add(self.base))
            .filter(|slot| *slot < u16::MAX)
        else {
            errors.push(path, "too many monitor targets (at most 65535)");
            return None;
        };
        self.by_target
            .insert(spec.target.clone(), (slot, path.to_owned()));
        self.specs.push(spec);
        Some(slot)
    }
}

/// Compiles one monitor alone (a tenant's `[monitors.NAME]`), its problems naming the fields
/// under `path`.
pub fn compile_alone(
    config: &MonitorConfig,
    path: &str,
) -> Result<MonitorSpec, Vec<super::PolicyError>> {
    let mut errors = Errors::default();
    match compile_monitor(config, path, &mut errors) {
        Some(spec) if errors.0.is_empty() => Ok(spec),
        _ => Err(errors.0),
    }
}

impl Check {
    /// The host it connects to, as written (`[...]` around an IPv6 address in a URL).
    pub fn host(&self) -> &str {
        match self {
            Check::Http { host, .. } | Check::Tcp { host, .. } | Check::Dns { host, .. } => host,
        }
    }

    /// Whether it connects to an address literal (no name lookup).
    pub fn names_an_address(&self) -> bool {
        let host = self.host();
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        bare.parse::<std::net::IpAddr>().is_ok()
    }
}

fn compile_monitor(config: &MonitorConfig, path: &str, errors: &mut Errors) -> Option<MonitorSpec> {
    let before = errors.0.len();
    let interval_ms = config.interval_ms.unwrap_or(DEFAULT_INTERVAL_MS);
    if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&interval_ms) {
        errors.push(
            format!("{path}.interval_ms"),
            format!("{interval_ms} is outside {MIN_INTERVAL_MS}..={MAX_INTERVAL_MS}"),
        );
    }
    let timeout_ms = config
        .timeout_ms
        .unwrap_or(DEFAULT_TIMEOUT_MS.min(interval_ms / 2));
    if timeout_ms == 0 || timeout_ms >= interval_ms {
        errors.push(
            format!("{path}.timeout_ms"),
            format!("{timeout_ms} must be above 0 and below interval_ms ({interval_ms}): a check ends before the next starts"),
        );
    }
    let fall = count(config.fall, DEFAULT_FALL, &format!("{path}.fall"), errors);
    let rise = count(config.rise, DEFAULT_RISE, &format!("{path}.rise"), errors);
    let startup = match config.startup.as_deref() {
        None | Some("unknown") => Startup::Unknown,
        Some("up") => Startup::Up,
        Some("down") => Startup::Down,
        Some(other) => {
            errors.push(
                format!("{path}.startup"),
                format!("{other:?} is not one of \"up\", \"down\", \"unknown\""),
            );
            Startup::Unknown
        }
    };
    let check = match (&config.url, &config.tcp, &config.dns) {
        (Some(url), None, None) => http_check(url, config, path, errors),
        (None, Some(tcp), None) => {
            let (host, port) = host_port(tcp, None, &format!("{path}.tcp"), errors)?;
            Some(Check::Tcp { host, port })
        }
        (None, None, Some(dns)) => dns_check(dns, config, path, errors),
        (None, None, None) => {
            errors.push(path, "needs one of url, tcp or dns (what to check)");
            None
        }
        _ => {
            errors.push(path, "give only one of url, tcp or dns");
            None
        }
    }?;
    refuse_foreign_fields(&check, config, path, errors);
    if errors.0.len() > before {
        return None;
    }
    Some(MonitorSpec {
        target: target_label(&check),
        check,
        interval_ms,
        timeout_ms,
        fall,
        rise,
        startup,
    })
}

fn count(value: Option<u32>, default: u32, path: &str, errors: &mut Errors) -> u32 {
    let n = value.unwrap_or(default);
    if !(1..=MAX_COUNT).contains(&n) {
        errors.push(path, format!("{n} is outside 1..={MAX_COUNT}"));
    }
    n
}

/// Fields that belong to another kind of check.
fn refuse_foreign_fields(check: &Check, config: &MonitorConfig, path: &str, errors: &mut Errors) {
    let http = matches!(check, Check::Http { .. });
    let dns = matches!(check, Check::Dns { .. });
    let mut refuse = |set: bool, field: &str, kind: &str| {
        if set {
            errors.push(
                format!("{path}.{field}"),
                format!("only {kind} checks have it"),
            );
        }
    };
    refuse(
        !http && config.expect_status.is_some(),
        "expect_status",
        "HTTP",
    );
    refuse(!http && config.expect_body.is_some(), "expect_body", "HTTP");
    refuse(!http && config.tls.is_some(), "tls", "HTTPS");
    refuse(!dns && config.dns_name.is_some(), "dns_name", "DNS");
    refuse(!dns && config.dns_type.is_some(), "dns_type", "DNS");
}

fn http_check(url: &str, config: &MonitorConfig, path: &str, errors: &mut Errors) -> Option<Check> {
    let field = format!("{path}.url");
    // One URL grammar for the project: http::Uri, as the HTTP client's base URLs.
    let uri: http::Uri = match url.parse() {
        Ok(uri) => uri,
        Err(e) => {
            errors.push(
                field,
                format!("{url:?} is not a URL ({e}; spaces and control characters must be percent-encoded)"),
            );
            return None;
        }
    };
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            errors.push(
                field,
                format!("{url:?} must start with http:// or https://"),
            );
            return None;
        }
    };
    let Some(authority) = uri.authority().map(http::uri::Authority::as_str) else {
        errors.push(field, format!("{url:?} names no host"));
        return None;
    };
    if authority.contains('@') {
        errors.push(&field, "credentials in the URL are not supported");
        return None;
    }
    if url.contains('#') {
        errors.push(&field, "a health check URL has no fragment ('#')");
        return None;
    }
    let request_path = match uri.path_and_query().map_or("", |p| p.as_str()) {
        "" => "/".to_owned(),
        query if query.starts_with('?') => format!("/{query}"),
        path => path.to_owned(),
    };
    let (host, port) = host_port(
        authority,
        Some(if https { 443 } else { 80 }),
        &field,
        errors,
    )?;
    let status = match config.expect_status {
        None => (200, 399),
        Some([low, high]) if (100..=599).contains(&low) && low <= high && high <= 599 => {
            (low, high)
        }
        Some([low, high]) => {
            errors.push(
                format!("{path}.expect_status"),
                format!("[{low}, {high}] is not a range of status codes within 100..=599"),
            );
            return None;
        }
    };
    if config.expect_body.as_deref() == Some("") {
        errors.push(
            format!("{path}.expect_body"),
            "is empty (leave it out instead)",
        );
    }
    let tls = match (https, config.tls.as_deref()) {
        (false, Some(_)) => {
            errors.push(format!("{path}.tls"), "only https:// URLs use TLS");
            None
        }
        (false, None) => None,
        (true, None | Some("verify")) => Some(TlsCheck::Verify),
        (true, Some("skip")) => Some(TlsCheck::Skip),
        (true, Some(other)) => {
            match other.strip_prefix("sha256:").and_then(parse_digest) {
                Some(digest) => Some(TlsCheck::Pin(digest)),
                None => {
                    errors.push(
                    format!("{path}.tls"),
                    format!("{other:?} is not \"verify\", \"skip\" or \"sha256:\" and 64 hex digits"),
                );
                    None
                }
            }
        }
    };
    Some(Check::Http {
        host,
        port,
        path: request_path,
        tls,
        status,
        body: config.expect_body.clone(),
    })
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.replace(':', "");
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

fn dns_check(
    server: &str,
    config: &MonitorConfig,
    path: &str,
    errors: &mut Errors,
) -> Option<Check> {
    let (host, port) = host_port(server, Some(53), &format!("{path}.dns"), errors)?;
    let Some(name) = &config.dns_name else {
        errors.push(
            format!("{path}.dns_name"),
            "required for DNS checks: the name to ask, e.g. \"example.com.\"",
        );
        return None;
    };
    let name = match parse_absolute_name(name, false) {
        Ok(name) => name_wire(&name),
        Err(problem) => {
            errors.push(format!("{path}.dns_name"), problem.to_string());
            return None;
        }
    };
    let qtype = match config.dns_type.as_deref().unwrap_or("SOA") {
        "A" => 1,
        "NS" => 2,
        "SOA" => 6,
        "TXT" => 16,
        "AAAA" => 28,
        other => {
            errors.push(
                format!("{path}.dns_type"),
                format!("{other:?} is not one of A, AAAA, SOA, NS, TXT"),
            );
            return None;
        }
    };
    Some(Check::Dns {
        host,
        port,
        name,
        qtype,
    })
}

/// `host:port`, `[v6]:port`, or (with a default port) `host` / `[v6]`. The host is an IP
/// address or a DNS name (resolved at each check).
fn host_port(
    text: &str,
    default_port: Option<u16>,
    path: &str,
    errors: &mut Errors,
) -> Option<(String, u16)> {
    let bad = |errors: &mut Errors, why: &str| {
        errors.push(path, format!("{text:?}: {why}"));
        None
    };
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return bad(errors, "unclosed '['");
        };
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return bad(errors, "not an IPv6 address between '[' and ']'");
        }
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return bad(errors, "expected ':port' after ']'"),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return bad(errors, "write IPv6 addresses as [address]:port")
            }
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let valid_host = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b':' || b == b'_');
    if !valid_host {
        return bad(errors, "not a host name or IP address");
    }
    let port = match (port, default_port) {
        (Some(port), _) => match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return bad(errors, "the port is not a number within 1..=65535"),
        },
        (None, Some(default)) => default,
        (None, None) => return bad(errors, "needs a port (host:port)"),
    };
    Some((host.to_ascii_lowercase(), port))
}

fn target_label(check: &Check) -> String {
    let host_port = |host: &str, port: u16| {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    match check {
        Check::Http {
            host,
            port,
            path,
            tls,
            ..
        } => {
            let scheme = if tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{}{path}", host_port(host, *port))
        }
        Check::Tcp { host, port } => format!("tcp:{}", host_port(host, *port)),
        Check::Dns {
            host,
            port,
            name,
            qtype,
        } => format!(
            "dns:{} {} {}",
            host_port(host, *port),
            wire_text(name),
            match qtype {
                1 => "A",
                2 => "NS",
                6 => "SOA",
                16 => "TXT",
                _ => "AAAA",
            }
        ),
    }
}

/// Presentation form of an uncompressed wire name of letters, digits, '-' and '_'.
fn wire_text(wire: &[u8]) -> String {
    let mut out = String::new();
    let mut at = 0;
    while let Some(&len) = wire.get(at) {
        if len == 0 {
            break;
        }
        let label = wire.get(at + 1..at + 1 + usize::from(len)).unwrap_or(&[]);
        out.push_str(&String::from_utf8_lossy(label));
        out.push('.');
        at += 1 + usize::from(len);
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}
