//! Per-tenant response budgets (issue 31, item 5): while the server is saturated, a flood
//! against one tenant's names must not cost the other tenants their answers. Above a
//! utilisation threshold (UDP queries received per second over the configured capacity),
//! each tenant's names get at most a share of the capacity in UDP responses per second, one
//! token bucket per tenant; responses over budget are dropped, every `slip`-th sent truncated
//! so that real resolvers retry over TCP (never budgeted: its source is proven and the
//! listener's admission bounds it). Below the threshold nothing is charged.
//!
//! Owns the budgets' buckets (the rate limiter's [`Table`], shared across reloads), the
//! process-wide [`Load`] that says whether they are engaged, and the step that moves it
//! ([`Load::observe`], called off the serving path by the daemon's sampler every
//! [`SAMPLE_EVERY`]). The serving path reads one atomic flag and, when engaged, hashes the
//! tenant's name and does one compare-and-swap: no lock, no allocation, no I/O.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::table::{hash_bytes, Rate, Table};
use super::{clock, slip_or_drop, Verdict, LIMITED};
use crate::config::budgets::BudgetsConfig;
use crate::config::rrl::{MAX_RATE, MAX_TABLE};
use crate::dns::wire::{Requester, Transport};

/// How often the sampler looks at the query counters.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Samples in a row below the release level before engaged budgets release (a second: a
/// flood's own dips, or the budgets' relief, must not switch them off and on).
pub const RELEASE_AFTER: u64 = 10;

/// The budgets `[budgets]` asks for, compiled into a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetLimits {
    rate: Rate,
    slip: u32,
    table_size: usize,
    capacity_qps: u32,
    /// Engaged at or above this many queries per second; released below `release_qps`.
    engage_qps: u64,
    release_qps: u64,
}

impl BudgetLimits {
    /// `None` when `[budgets]` is off. The config must have passed
    /// [`BudgetsConfig::problem`]; out-of-range values are clamped here rather than trusted.
    pub fn from_config(config: &BudgetsConfig) -> Option<BudgetLimits> {
        if !config.enabled {
            return None;
        }
        let capacity = config.capacity_qps.clamp(1, MAX_RATE);
        let share = config.tenant_share.clamp(0.0, 1.0);
        let per_second = ((f64::from(capacity) * share).round() as u32).clamp(1, MAX_RATE);
        let engage = (f64::from(capacity) * config.engage_at.clamp(0.0, 1.0)).ceil() as u64;
        Some(BudgetLimits {
            rate: Rate {
                per_second,
                burst: per_second,
            },
            slip: config.slip,
            table_size: Table::len_for(config.table_size.clamp(1, MAX_TABLE)),
            capacity_qps: capacity,
            engage_qps: engage.max(1),
            release_qps: (engage * 9 / 10).max(1),
        })
    }

    /// UDP responses per second one tenant gets while engaged.
    pub fn tenant_rate(&self) -> u32 {
        self.rate.per_second
    }
}

/// Whether the budgets are engaged, and what they did: one per process (the serving path of
/// every snapshot reads it; the sampler writes it).
#[derive(Debug, Default)]
pub struct Load {
    engaged: AtomicBool,
    /// UDP queries per second in the last sample.
    qps: AtomicU64,
    /// Times the budgets engaged since start.
    engagements: AtomicU64,
    dropped: AtomicU64,
    slipped: AtomicU64,
    /// The query counter and the time (ms, the rate limiter's clock) at the last sample.
    last: AtomicU64,
    /// Samples in a row below the release level while engaged.
    calm: AtomicU64,
}

static LOAD: Load = Load {
    engaged: AtomicBool::new(false),
    qps: AtomicU64::new(0),
    engagements: AtomicU64::new(0),
    dropped: AtomicU64::new(0),
    slipped: AtomicU64::new(0),
    last: AtomicU64::new(0),
    calm: AtomicU64::new(0),
};

/// The process's load state.
pub fn load() -> &'static Load {
    &LOAD
}

/// What status and metrics show of the budgets.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BudgetStatus {
    pub capacity_qps: u32,
    /// Engaged at or above this many UDP queries per second, released below 90 % of it.
    pub engage_qps: u64,
    /// UDP responses per second one tenant's names get while engaged.
    pub tenant_rate: u32,
    pub engaged: bool,
    /// UDP queries per second in the last sample, and over the capacity.
    pub qps: u64,
    pub utilisation: f64,
    pub engagements: u64,
    /// Responses over a tenant's budget: dropped, and sent truncated.
    pub dropped: u64,
    pub slipped: u64,
}

impl Load {
    /// One sample: `queries` is the UDP queries received since start, `now_ms` the rate
    /// limiter's clock. Engages at `engage_qps`, releases after [`RELEASE_AFTER`] samples in
    /// a row below `release_qps` (hysteresis and hold-down: a load hovering at the threshold
    /// does not flap); without budgets, releases.
    pub fn observe(&self, limits: Option<&BudgetLimits>, queries: u64, now_ms: u32) {
        // The previous sample: the counter's low 39 bits and the clock.
        let before = self.last.swap(pack(queries, now_ms), Ordering::Relaxed);
        let (then_queries, then_ms) = unpack(before);
        let elapsed = (now_ms & CLOCK_BITS).wrapping_sub(then_ms) & CLOCK_BITS;
        let Some(limits) = limits else {
            self.engaged.store(false, Ordering::Relaxed);
            return;
        };
        if before == 0 || elapsed == 0 || elapsed > 10_000 {
            return;
        }
        let counted = (queries & LOW_39).wrapping_sub(then_queries) & LOW_39;
        let qps = counted * 1000 / u64::from(elapsed);
        self.qps.store(qps, Ordering::Relaxed);
        let engaged = self.engaged.load(Ordering::Relaxed);
        let now = if engaged {
            let calm = if qps >= limits.release_qps {
                0
            } else {
                self.calm.load(Ordering::Relaxed) + 1
            };
            self.calm.store(calm, Ordering::Relaxed);
            calm < RELEASE_AFTER
        } else {
            qps >= limits.engage_qps
        };
        if !now {
            self.calm.store(0, Ordering::Relaxed);
        }
        if now && !engaged {
            self.engagements.fetch_add(1, Ordering::Relaxed);
        }
        self.engaged.store(now, Ordering::Relaxed);
    }

    pub fn engaged(&self) -> bool {
        self.engaged.load(Ordering::Relaxed)
    }

    /// Status for `limits` (`None`: budgets off).
    pub fn status(&self, limits: &BudgetLimits) -> BudgetStatus {
        let qps = self.qps.load(Ordering::Relaxed);
        BudgetStatus {
            capacity_qps: limits.capacity_qps,
            engage_qps: limits.engage_qps,
            tenant_rate: limits.rate.per_second,
            engaged: self.engaged(),
            qps,
            utilisation: qps as f64 / f64::from(limits.capacity_qps),
            engagements: self.engagements.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            slipped: self.slipped.load(Ordering::Relaxed),
        }
    }
}

/// The query counter's bits kept (bit 63 marks a sample taken).
const LOW_39: u64 = (1 << 39) - 1;

/// The clock's bits kept: 24 (4.6 hours) measure a sample's length.
const CLOCK_BITS: u32 = 0xFF_FFFF;

fn pack(queries: u64, now_ms: u32) -> u64 {
    ((queries & LOW_39) << 24) | u64::from(now_ms & CLOCK_BITS) | 1 << 63
}

fn unpack(packed: u64) -> (u64, u32) {
    ((packed >> 24) & LOW_39, (packed as u32) & CLOCK_BITS)
}

/// The budgets of one snapshot: its limits, and buckets that outlive reloads.
pub struct TenantBudgets {
    limits: BudgetLimits,
    table: Arc<Table>,
}

impl TenantBudgets {
    /// Budgets for `limits`, charging `previous`'s buckets when the table has the same size
    /// (a reload during a flood hands no tenant a fresh burst).
    pub fn new(limits: &BudgetLimits, previous: Option<&TenantBudgets>) -> TenantBudgets {
        TenantBudgets {
            limits: limits.clone(),
            table: Table::carried(limits.table_size, previous.map(|p| &p.table)),
        }
    }

    pub fn limits(&self) -> &BudgetLimits {
        &self.limits
    }

    /// The verdict on a UDP response for a name of `tenant` (its name); `None` when the
    /// budgets are not engaged or the query came over TCP.
    #[inline]
    pub fn check(&self, tenant: &str, client: &Requester) -> Option<Verdict> {
        if client.transport != Transport::Udp || !LOAD.engaged() {
            return None;
        }
        Some(self.charge(tenant, clock::now_ms()))
    }

    /// Charges one response to `tenant`'s bucket at `now_ms` (tests use a fake clock).
    pub fn charge(&self, tenant: &str, now_ms: u32) -> Verdict {
        let slot = self.table.slot(|h| hash_bytes(h, tenant.as_bytes()));
        if self.table.take(slot, now_ms, self.limits.rate) {
            return Verdict::Send;
        }
        let verdict = LIMITED
            .try_with(|limited| slip_or_drop(self.limits.slip, limited))
            .unwrap_or(Verdict::Drop);
        let counter = match verdict {
            Verdict::Slip => &LOAD.slipped,
            _ => &LOAD.dropped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(capacity: u32, share: f64) -> BudgetLimits {
        let config = BudgetsConfig {
            enabled: true,
            capacity_qps: capacity,
            tenant_share: share,
            slip: 0,
            ..BudgetsConfig::default()
        };
        BudgetLimits::from_config(&config).unwrap_or_else(|| panic!("enabled"))
    }

    #[test]
    fn a_flooded_tenant_spends_its_budget_and_another_keeps_its_own() {
        let budgets = TenantBudgets::new(&limits(1000, 0.1), None);
        assert_eq!(budgets.limits().tenant_rate(), 100);
        let now = 5_000;
        let sent = (0..1000)
            .filter(|_| budgets.charge("flooded", now) == Verdict::Send)
            .count();
        assert_eq!(sent, 100, "one second's budget, then nothing");
        let other = (0..50)
            .filter(|_| budgets.charge("quiet", now) == Verdict::Send)
            .count();
        assert_eq!(other, 50, "another tenant's budget is untouched");
        // A second later the flooded tenant has its budget back.
        assert_eq!(budgets.charge("flooded", now + 1000), Verdict::Send);
    }

    #[test]
    fn the_load_engages_above_the_threshold_and_releases_below_ninety_percent_of_it() {
        let limits = limits(1000, 0.1); // engage at 800 qps, release below 720
        let load = Load::default();
        load.observe(Some(&limits), 0, 1_000);
        load.observe(Some(&limits), 50, 1_100); // 500 qps
        assert!(!load.engaged());
        load.observe(Some(&limits), 140, 1_200); // 900 qps
        assert!(load.engaged());
        load.observe(Some(&limits), 215, 1_300); // 750 qps: above the release level
        assert!(load.engaged(), "hysteresis: no flapping at the threshold");
        let (mut q, mut t) = (215, 1_300);
        for i in 0..RELEASE_AFTER {
            assert!(load.engaged(), "held down: {i} calm samples");
            q += 70; // 700 qps
            t += 100;
            load.observe(Some(&limits), q, t);
            if i == 4 {
                // One sample back above the release level starts the count again.
                q += 80;
                t += 100;
                load.observe(Some(&limits), q, t);
            }
        }
        assert!(load.engaged(), "the count started again");
        for _ in 0..5 {
            q += 70;
            t += 100;
            load.observe(Some(&limits), q, t);
        }
        assert!(!load.engaged(), "released after a calm second");
        assert_eq!(load.status(&limits).engagements, 1);
        load.observe(Some(&limits), q + 215, t + 100); // 2150 qps
        assert!(load.engaged());
        load.observe(None, 900, 1_600);
        assert!(!load.engaged(), "budgets switched off: released");
        // A clock past 24 bits: samples are still measured by their difference.
        let late = Load::default();
        let t = 0x0FFF_FFF0_u32;
        late.observe(Some(&limits), 1_000, t);
        late.observe(Some(&limits), 1_100, t.wrapping_add(100)); // 1000 qps, across a wrap
        assert!(late.engaged(), "{:?}", late.status(&limits));
    }

    #[test]
    fn budgets_off_or_invalid_compile_to_nothing_or_a_clamped_value() {
        assert!(BudgetLimits::from_config(&BudgetsConfig::default()).is_none());
        let tiny = limits(5, 0.01);
        assert_eq!(tiny.tenant_rate(), 1, "at least one response per second");
        let bad = BudgetsConfig {
            enabled: true,
            capacity_qps: 0,
            ..BudgetsConfig::default()
        };
        assert_eq!(bad.problem().map(|p| p.0), Some("budgets.capacity_qps"));
        let share = BudgetsConfig {
            enabled: true,
            capacity_qps: 10,
            tenant_share: 1.5,
            ..BudgetsConfig::default()
        };
        assert_eq!(share.problem().map(|p| p.0), Some("budgets.tenant_share"));
    }
}
