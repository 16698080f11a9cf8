//! `[budgets]`: per-tenant response budgets under saturation (plain data and their checks).
//! The budgets themselves are [`crate::rrl::budget`].

use serde::Deserialize;

use super::rrl::{MAX_RATE, MAX_TABLE};

/// `[budgets]` in the config file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetsConfig {
    /// Off by default.
    pub enabled: bool,
    /// Queries per second this server answers at most (measure it: `benches/budgets.sh`
    /// prints it); utilisation is the UDP queries received per second over this.
    pub capacity_qps: u32,
    /// Utilisation (0..1] above which budgets apply; below 90 % of it they stop again.
    pub engage_at: f64,
    /// While engaged, one tenant's names get at most this share of `capacity_qps` in UDP
    /// responses per second (0..1]; the rest are dropped, every `slip`-th sent truncated.
    pub tenant_share: f64,
    /// Every `slip`-th response over budget is sent truncated (TC=1: real resolvers retry
    /// over TCP, which budgets never limit); 0 drops them all.
    pub slip: u32,
    /// Buckets in the table (rounded up to a power of two); tenants sharing one share a
    /// budget.
    pub table_size: usize,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        BudgetsConfig {
            enabled: false,
            capacity_qps: 0,
            engage_at: 0.8,
            tenant_share: 0.1,
            slip: 2,
            table_size: 1 << 16,
        }
    }
}

impl BudgetsConfig {
    /// The first problem with these settings, as (field, message).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if !self.enabled {
            return None;
        }
        if !(1..=MAX_RATE).contains(&self.capacity_qps) {
            return Some((
                "budgets.capacity_qps",
                format!(
                    "{} is outside 1..={MAX_RATE}: say what this server answers per second \
                     (benches/budgets.sh measures it)",
                    self.capacity_qps
                ),
            ));
        }
        if !(self.engage_at > 0.0 && self.engage_at <= 1.0) {
            return Some((
                "budgets.engage_at",
                format!("{} is outside (0, 1]", self.engage_at),
            ));
        }
        if !(self.tenant_share > 0.0 && self.tenant_share <= 1.0) {
            return Some((
                "budgets.tenant_share",
                format!("{} is outside (0, 1]", self.tenant_share),
            ));
        }
        if !(1..=MAX_TABLE).contains(&self.table_size) {
            return Some((
                "budgets.table_size",
                format!("{} is outside 1..={MAX_TABLE}", self.table_size),
            ));
        }
        None
    }
}
