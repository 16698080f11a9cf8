//! The traffic shield: the overwatch of the frontend ring and the fallback ring. Load feeds
//! come in ([`feed`], [`source`], [`prometheus`]); every tick the pure decision step ([`step`]) turns the
//! latest readings, the DNS demand counters and the operator's mode into per-region shed
//! decisions, which the serving path reads through one atomic pointer as a
//! [`crate::policy::ShedView`].
//!
//! In fleet mode one node leads: it runs the step on every node's demand and publishes the
//! state through etcd ([`wire`] is its format, [`link`] the mailbox to the fleet's etcd task),
//! and every node serves what was published.
//!
//! Owns the decisions and their bookkeeping. Never touches the serving path except by
//! publishing a new view; never reads clocks or files inside the step.

pub mod config;
pub mod feed;
pub mod link;
pub mod live;
pub mod prometheus;
pub mod sim;
pub mod source;
pub mod step;
pub mod wire;

#[cfg(test)]
mod surge_figure;
#[cfg(test)]
mod tenant_tests;
#[cfg(test)]
mod tests;
