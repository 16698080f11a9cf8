//! Tests of a fleet on a real etcd: the control store, records, rollouts, the shared shield and
//! health, direct writes, drills, and the dashboard in a real Chromium.
//!
//! One test binary per group (issue 29 item 6): every binary links the whole library, so a
//! binary per file cost a link each. Each file is a module; the shared helpers are declared
//! once here.

#[path = "../common/mod.rs"]
mod common;
#[path = "../control_common/mod.rs"]
mod control_common;
#[path = "../fleet_common/mod.rs"]
mod fleet_common;

mod cells_fleet;
mod control_store;
mod dashboard_browser;
mod drills;
mod fleet;
mod fleet_direct;
mod fleet_drill;
mod fleet_records;
mod fleet_shield;
mod health_fleet;
mod rollout;
mod safety_fleet;
mod tenants_fleet;
