//! Tests of the control plane of one server: edits, reloads, faults, the taster, safety rules,
//! the shield end to end, metrics, DNSSEC with a real Unbound, encrypted transports and
//! zone transfers in and out.
//!
//! One test binary per group (issue 29 item 6): every binary links the whole library, so a
//! binary per file cost a link each. Each file is a module; the shared helpers are declared
//! once here.

#[path = "../common/mod.rs"]
mod common;
#[path = "../control_common/mod.rs"]
mod control_common;

mod admin_guard;
mod bad_inputs;
mod budgets;
mod cell_drains;
mod cell_health;
mod control_breakglass;
mod control_edits;
mod control_faults;
mod control_reload_load;
mod control_reload_reuse;
mod dnssec_unbound;
mod encrypted;
mod fault_drills;
mod idle;
mod metrics;
mod quarantine;
mod safety;
mod shield_e2e;
mod shield_prometheus;
mod taster;
mod tenant_first;
mod tenant_monitors;
pub(crate) mod tenants;
mod xfr_in;
mod xfr_out;
mod xfr_signed;
mod zone_cache_phases;
mod zone_difference;
