//! From the `[shield]` section of the config file to the decision step's settings. The step
//! ([`super::step`]) knows nothing of the config file; this is the one conversion.

use crate::config::ShieldConfig;

use super::step::ShieldSettings;

/// TTL of normal answers until the snapshot sets the anycast policies' own (s).
const DEFAULT_STEADY_TTL: u32 = 300;

impl ShieldSettings {
    /// The step's settings for `[shield]`. `steady_ttl` is the default; the snapshot sets the
    /// anycast policies' TTL when it is built.
    pub fn from_config(config: &ShieldConfig) -> ShieldSettings {
        ShieldSettings {
            high_watermark: config.high_watermark,
            low_watermark: config.low_watermark,
            max_step: config.max_step,
            hold_down_ms: config.hold_down_secs.saturating_mul(1000),
            short_ttl: config.short_ttl,
            steady_ttl: DEFAULT_STEADY_TTL,
            stale_after_ms: config.stale_after_secs.saturating_mul(1000),
            revert_after_ms: config.revert_after_secs.saturating_mul(1000),
            allow_cross_continent: config.allow_cross_continent,
            tenant_share: config.tenant_share,
            max_hot_cells_per_tick: config.max_hot_cells_per_tick,
        }
    }
}

impl Default for ShieldSettings {
    /// The settings of a config without `[shield]`.
    fn default() -> Self {
        ShieldSettings::from_config(&ShieldConfig::default())
    }
}
