//! `[shield.prometheus]`: where the Prometheus load source queries (plain data, its checks,
//! and the URL form they accept). The source itself is [`crate::shield::prometheus`].

use serde::Deserialize;

/// `[shield.prometheus]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    /// Base URL of the Prometheus server, `http://host:port` (optionally with a path prefix).
    pub url: String,
    /// PromQL giving one series per region: its load.
    pub region_query: String,
    /// PromQL giving one series per fallback site: its load.
    #[serde(default)]
    pub fallback_query: Option<String>,
    /// PromQL giving one series per region or site: its capacity. Unset: `[topology]`'s.
    #[serde(default)]
    pub capacity_query: Option<String>,
    /// The series label naming the region or site.
    #[serde(default = "default_label")]
    pub label: String,
    /// Milliseconds between queries.
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// Milliseconds one query may take (connect, send, answer).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_label() -> String {
    "region".into()
}

fn default_interval_ms() -> u64 {
    5000
}

fn default_timeout_ms() -> u64 {
    2000
}

impl PrometheusConfig {
    /// The first thing wrong with the section: (field, message).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if let Err(message) = split_url(&self.url) {
            return Some(("shield.prometheus.url", message));
        }
        let valid_label = !self.label.is_empty()
            && self
                .label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !self.label.starts_with(|c: char| c.is_ascii_digit());
        if !valid_label {
            return Some((
                "shield.prometheus.label",
                format!("{:?} is not a Prometheus label name", self.label),
            ));
        }
        for (field, query) in [
            ("shield.prometheus.region_query", Some(&self.region_query)),
            (
                "shield.prometheus.fallback_query",
                self.fallback_query.as_ref(),
            ),
            (
                "shield.prometheus.capacity_query",
                self.capacity_query.as_ref(),
            ),
        ] {
            if query.is_some_and(|q| q.trim().is_empty()) {
                return Some((field, "is empty".into()));
            }
        }
        if self.interval_ms < 100 || self.timeout_ms < 100 {
            return Some((
                "shield.prometheus",
                format!(
                    "interval_ms and timeout_ms must be >= 100 (got {} and {})",
                    self.interval_ms, self.timeout_ms
                ),
            ));
        }
        None
    }
}

/// `http://host[:port][/prefix]` → (`host:port`, `/prefix` without a trailing slash).
pub fn split_url(url: &str) -> Result<(String, String), String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!(
            "{url:?}: only http:// URLs are supported (put a TLS-terminating proxy on loopback \
             for https)"
        ));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') || authority.contains(char::is_whitespace) {
        return Err(format!("{url:?}: needs a host (and no user info)"));
    }
    let has_port = match authority.rsplit_once(':') {
        Some((host, port)) => !host.ends_with(':') && port.parse::<u16>().is_ok(),
        None => false,
    };
    let host = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    Ok((host, path.to_string()))
}
