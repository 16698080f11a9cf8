//! Observability: the serving counters, their Prometheus exposition (`GET /metrics` on the
//! admin endpoint) and the sampled query log.
//!
//! - [`mod@serving`]: process-wide counters of fixed shape (queries, responses by transport and
//!   rcode, truncations, drops, TCP connections and limits, rate-limited responses).
//! - [`per_snapshot`]: counters shaped by the config (per zone, per steered name, per profile
//!   endpoint and client region, per anycast destination), sized when a snapshot is built and
//!   kept monotonic across reloads.
//! - The scrape (reading counters, control-plane and shield status, encoding them with
//!   `prometheus-client`) is [`crate::admin::metrics`], above the parts it reads.
//! - [`querylog`]: one query in N logged at info.
//! - [`supervisor`]: the daemon's threads and tasks, running and ended unexpectedly.
//!
//! The rule this module exists to keep: the serving path (respond, the UDP worker loop, a TCP
//! connection) only does relaxed atomic adds into fixed arrays, in a per-thread slot
//! ([`cells`]); it never locks, allocates or logs (except a sampled query). Everything else —
//! summing, locking, formatting — happens in the scrape. This module never changes what is
//! served.

pub mod cells;
pub mod encrypted;
pub mod per_snapshot;
pub mod querylog;
pub mod serving;
pub mod supervisor;
pub mod transfer;
pub mod xdp;

#[cfg(test)]
mod tests;

pub use cells::claim_worker_slot;
pub use per_snapshot::SnapshotCounters;
pub use serving::serving;
