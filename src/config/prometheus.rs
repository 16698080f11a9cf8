//! `[shield.prometheus]`: where the Prometheus load source queries (plain data and its checks;
//! the URL form is [`crate::http_client::parse_base_url`]'s). The source itself is
//! [`crate::shield::prometheus`].

use serde::Deserialize;

/// `[shield.prometheus]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    /// Base URL of the Prometheus server, `http://host:port` or `https://host:port`
    /// (optionally with a path prefix).
    pub url: String,
    /// PEM certificates trusted for an `https://` URL. Unset: the system bundle
    /// ([`crate::http_client::CA_BUNDLE`]).
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// PromQL giving one series per region: its load.
    pub region_query: String,
    /// PromQL giving one series per fallback site: its load.
    #[serde(default)]
    pub fallback_query: Option<String>,
    /// PromQL giving one series per region or site: its capacity. Unset: `[topology]`'s.
    #[serde(default)]
    pub capacity_query: Option<String>,
    /// PromQL giving one series per tenant and client region: the load that tenant's clients
    /// located in the region bring (labelled by `tenant_label` and `label`), for tenant-first
    /// shedding (`[shield] tenant_share`).
    #[serde(default)]
    pub tenant_query: Option<String>,
    /// The series label naming the region or site.
    #[serde(default = "default_label")]
    pub label: String,
    /// The tenant query's label naming the tenant.
    #[serde(default = "default_tenant_label")]
    pub tenant_label: String,
    /// PromQL giving one series per anycast cell: its load (labelled by `cell_layer_label`,
    /// the layer as the control file names it, and `cell_label`, the cell's name). A cell is
    /// left out of tenants' answers while hot (above `[shield] high_watermark`).
    #[serde(default)]
    pub cell_query: Option<String>,
    /// PromQL giving one series per cell: its capacity (same labels). Required with
    /// `cell_query`: cells have no capacity in `[topology]`.
    #[serde(default)]
    pub cell_capacity_query: Option<String>,
    /// The cell queries' label naming the layer.
    #[serde(default = "default_cell_layer_label")]
    pub cell_layer_label: String,
    /// The cell queries' label naming the cell.
    #[serde(default = "default_cell_label")]
    pub cell_label: String,
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

fn default_tenant_label() -> String {
    "tenant".into()
}

fn default_cell_layer_label() -> String {
    "layer".into()
}

fn default_cell_label() -> String {
    "cell".into()
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
        if let Err(message) = crate::http_client::parse_base_url(&self.url) {
            return Some(("shield.prometheus.url", message));
        }
        for (field, label) in [
            ("shield.prometheus.label", &self.label),
            ("shield.prometheus.tenant_label", &self.tenant_label),
            ("shield.prometheus.cell_layer_label", &self.cell_layer_label),
            ("shield.prometheus.cell_label", &self.cell_label),
        ] {
            if !is_label_name(label) {
                return Some((field, format!("{label:?} is not a Prometheus label name")));
            }
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
            ("shield.prometheus.tenant_query", self.tenant_query.as_ref()),
            ("shield.prometheus.cell_query", self.cell_query.as_ref()),
            (
                "shield.prometheus.cell_capacity_query",
                self.cell_capacity_query.as_ref(),
            ),
        ] {
            if query.is_some_and(|q| q.trim().is_empty()) {
                return Some((field, "is empty".into()));
            }
        }
        if self.cell_query.is_some() != self.cell_capacity_query.is_some() {
            return Some((
                "shield.prometheus.cell_capacity_query",
                "cell_query and cell_capacity_query go together (cells have no capacity in [topology])".into(),
            ));
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

/// Whether `label` is a Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`).
fn is_label_name(label: &str) -> bool {
    !label.is_empty()
        && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !label.starts_with(|c: char| c.is_ascii_digit())
}
