//! `[rrl]`: response rate limiting settings (plain data and their checks). The limiter itself
//! is [`crate::rrl`].

use ipnet::IpNet;
use serde::Deserialize;

/// Largest rate or burst accepted: bucket tokens are kept in thousandths in 32 bits.
pub const MAX_RATE: u32 = 1_000_000;
/// Largest bucket table (entries of 8 bytes: 128 MiB).
pub const MAX_TABLE: usize = 1 << 24;

/// `[rrl]` in the config file.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RrlConfig {
    /// Off by default: turn it on where the server faces the internet.
    pub enabled: bool,
    /// Responses per second allowed per key (client prefix × class × name or zone).
    pub responses_per_second: u32,
    /// Responses a key may send at once after a quiet spell (the bucket size). Default: one
    /// second's worth, `responses_per_second`.
    pub burst: Option<u32>,
    /// Every `slip`-th limited response is sent truncated (TC=1) instead of dropped, so real
    /// resolvers retry over TCP. 0 drops them all, 1 truncates them all.
    pub slip: u32,
    /// Prefix length that groups IPv4 clients into one key.
    pub ipv4_prefix: u8,
    /// Prefix length that groups IPv6 clients into one key.
    pub ipv6_prefix: u8,
    /// Clients never limited (e.g. your own resolvers and monitoring).
    pub exempt: Vec<IpNet>,
    /// Buckets in the table (rounded up to a power of two); keys that share one share a rate.
    pub table_size: usize,
}

impl Default for RrlConfig {
    fn default() -> Self {
        RrlConfig {
            enabled: false,
            responses_per_second: 20,
            burst: None,
            slip: 2,
            ipv4_prefix: 24,
            ipv6_prefix: 56,
            exempt: Vec::new(),
            table_size: 1 << 16,
        }
    }
}

impl RrlConfig {
    /// The first problem with these settings, as (field, message).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let in_range = |v: u32| (1..=MAX_RATE).contains(&v);
        if !in_range(self.responses_per_second) {
            return Some((
                "rrl.responses_per_second",
                format!("{} is outside 1..={MAX_RATE}", self.responses_per_second),
            ));
        }
        if let Some(burst) = self.burst.filter(|b| !in_range(*b)) {
            return Some(("rrl.burst", format!("{burst} is outside 1..={MAX_RATE}")));
        }
        if !(1..=32).contains(&self.ipv4_prefix) {
            return Some((
                "rrl.ipv4_prefix",
                format!("{} is outside 1..=32", self.ipv4_prefix),
            ));
        }
        if !(1..=128).contains(&self.ipv6_prefix) {
            return Some((
                "rrl.ipv6_prefix",
                format!("{} is outside 1..=128", self.ipv6_prefix),
            ));
        }
        if !(1..=MAX_TABLE).contains(&self.table_size) {
            return Some((
                "rrl.table_size",
                format!("{} is outside 1..={MAX_TABLE}", self.table_size),
            ));
        }
        None
    }
}
