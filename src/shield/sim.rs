//! `steerdns simulate`: a discrete-time model of clients, resolvers and PoPs that drives the
//! SAME decision [`step`](super::step::step) and the SAME policy
//! [`evaluate`](crate::policy::evaluate) as the server, one tick per simulated second.
//!
//! Model. Every region's demand is spread evenly over many client /24 subnets. Each subnet
//! holds its last DNS answer until its TTL runs out (expiries staggered at start), then asks
//! again and lands where the answer says: global anycast = its own region, a regional anycast
//! = that region, a fallback address = that site. A destination's load is the demand of the
//! subnets landing there (plus a site's own base load). The load feed reports those loads (it
//! can stop, or leave a node out); the answers given, weighted by the asking subnet's demand,
//! are the step's demand counters. The step's new view applies to answers from the next tick.
//!
//! Nameservers. Resolvers spread their queries over a zone's nameservers;
//! [`run_nameservers`] models N of them, each either deciding alone on the answers it gave and
//! its own copy of the feed (nameserver i receiving each feed i seconds late), or all serving
//! one fleet leader's decision made on the fleet-wide demand, and counts the client subnets
//! that different nameservers would have answered differently.
//!
//! Tenants. A scenario with `[tenants]` runs [`tenants`]: the same surge with tenant-first
//! and with region-wide shedding, counting the other tenants' clients moved.
//!
//! Owns the scenario format, the model and its outputs (CSV, SVG plot, summary). Touches no
//! socket and no clock; reads only the files it is given and writes only into the output
//! directory.

mod model;
mod output;
#[cfg(feature = "tools")]
mod plot;
mod scenario;
pub mod tenants;

use std::path::PathBuf;

pub use model::{run, run_nameservers, Consistency, Nameservers};
pub use output::{consistency_text, summary_text, timeline_csv, write_outputs};
#[cfg(feature = "tools")]
pub use plot::plot_svg;
pub use scenario::{
    Event, Scenario, TenantSurge, TenantsScenario, MAX_DURATION_SECS, MAX_SUBNETS, MAX_TENANTS,
};
pub use tenants::{run_tenants, tenants_csv, tenants_text, write_tenant_outputs, TenantComparison};

use super::step::ShieldSettings;
use crate::config::Config;
use crate::policy::{CompiledPolicies, Destination};

/// Why a simulation could not run or write its outputs.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{path}: cannot read: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
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
    #[error("topology: {0}")]
    Topology(String),
    #[error("{path}: cannot write: {error}")]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("plot: {0}")]
    Plot(String),
}

/// The policies (control knobs at their defaults) and shield settings of a config, as the
/// server would compile them.
pub fn compile_topology(config: &Config) -> Result<(CompiledPolicies, ShieldSettings), SimError> {
    let policies = config
        .compile_policies(&Default::default())
        .map_err(|errors| {
            let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
            SimError::Topology(lines.join("; "))
        })?;
    let mut settings = crate::shield::step::ShieldSettings::from_config(&config.shield);
    if let Some(ttl) = super::live::steady_ttl(&policies) {
        settings.steady_ttl = ttl;
    }
    Ok((policies, settings))
}

/// One region or fallback site at one tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeSample {
    /// A region: its own clients' demand (where ever they land). A site: its base load.
    pub demand: f64,
    /// What lands there.
    pub load: f64,
    pub capacity: f64,
    /// Of `load`, what other regions' clients bring (shed in).
    pub shed_in: f64,
    /// Regions: the shield's shed fraction after this tick's step.
    pub shed_fraction: f64,
    /// Regions: share of its clients (by demand) landing at each destination (`Global` = own
    /// region via global anycast), from the answers they hold.
    pub destinations: Vec<(Destination, f64)>,
}

impl NodeSample {
    /// Load over capacity (infinite for load on no capacity; 0 for nothing on nothing).
    pub fn utilisation(&self) -> f64 {
        utilisation(self.load, self.capacity)
    }

    /// Utilisation the node would have with only its own demand on it.
    pub fn own_utilisation(&self) -> f64 {
        utilisation(self.demand, self.capacity)
    }
}

fn utilisation(load: f64, capacity: f64) -> f64 {
    if capacity > 0.0 {
        load / capacity
    } else if load > 0.0 {
        f64::INFINITY
    } else {
        0.0
    }
}

/// The world after one tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tick {
    /// Seconds from the start.
    pub t: u64,
    pub regions: Vec<NodeSample>,
    pub sites: Vec<NodeSample>,
    /// Share of all demand whose held answer is global anycast.
    pub global_share: f64,
    /// Decisions the step changed this tick.
    pub changes: usize,
}

/// Per region or site over the whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSummary {
    pub name: String,
    pub is_site: bool,
    pub peak_utilisation: f64,
    pub peak_at: u64,
    /// Seconds above 1.0 utilisation.
    pub overloaded_secs: u64,
    pub first_overload: Option<u64>,
    pub last_overload: Option<u64>,
    /// Highest utilisation while other regions' clients were shed into it.
    pub peak_with_shed_in: f64,
}

/// Outcome metrics of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub nodes: Vec<NodeSummary>,
    /// Σ over ticks of the load on regions and sites above 1.0 utilisation (load units × s).
    pub overloaded_client_seconds: f64,
    /// When the last event is over (`None`: no events, or one never ends).
    pub last_event_end: Option<u64>,
    /// From this second to the end: no region sheds and ≥ 99% of demand holds a global answer.
    pub back_to_global_at: Option<u64>,
    /// Answers whose address matched no global, regional or fallback address (should be 0).
    pub unmapped_answers: u64,
}

/// A finished run: the series per tick and the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct SimResult {
    pub scenario: String,
    pub shield_on: bool,
    pub region_names: Vec<String>,
    pub site_names: Vec<String>,
    pub high_watermark: f64,
    pub low_watermark: f64,
    pub ticks: Vec<Tick>,
    pub summary: Summary,
}

impl SimResult {
    /// Name of a destination (`global` for global anycast).
    pub fn destination_name(&self, d: Destination) -> &str {
        match d {
            Destination::Global => "global",
            Destination::Region(r) => self
                .region_names
                .get(usize::from(r))
                .map_or("?", String::as_str),
            Destination::Fallback(s) => self
                .site_names
                .get(usize::from(s))
                .map_or("?", String::as_str),
        }
    }

    /// The summary of a region or site by name.
    pub fn node(&self, name: &str) -> Option<&NodeSummary> {
        self.summary.nodes.iter().find(|n| n.name == name)
    }
}
