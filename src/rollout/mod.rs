//! Staged rollout of control changes across a fleet (the seeds' ConfigShield): a new control
//! version is released wave by wave — canary first — and each wave must stay healthy for a bake
//! time before the next one gets it. A failed gate halts the rollout, and every node then
//! serves the last known good (LKG) version again; a completed rollout makes the change the
//! new LKG.
//!
//! This module is the **pure core**: [`Rollout`] is the whole state (it is what the fleet
//! keeps in etcd, as JSON), [`Rollout::step`] decides from the nodes' [`NodeReport`]s and the
//! time passed in, and [`Rollout::allowed`] says which version a node may serve. Nothing here
//! does I/O, reads a clock or knows about etcd, DNS or processes: the driver (the fleet's
//! coordinator) gathers reports, calls `step`, and writes the result back.
//!
//! Gates, for every node of every released wave (so earlier waves are rechecked each step):
//! - it is still there, and has not restarted since the rollout began (a crash shows as a new
//!   boot id or a vanished registry entry);
//! - it did not refuse the version (its taster crashed, timed out, or found it invalid);
//! - it serves the version (within `wave_timeout` of the wave's release);
//! - its SERVFAIL share since it serves the version is not worse than before the change by
//!   more than `servfail_margin` (judged once `min_queries` queries were seen);
//! - every sanity probe that answered well before the change still does.
//!
//! Owns the rollout's rules; imports nothing above it.

mod machine;
#[cfg(test)]
mod tests;

pub use machine::{
    parse_probe, Health, NodeProgress, NodeReport, NodeState, Phase, Plan, PlanError, ProbeResult,
    Revision, Rollout,
};
