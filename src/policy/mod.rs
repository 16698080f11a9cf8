//! Policy: how a steered name answers a given client.
//!
//! Owns the `[topology]`, `[profiles]` and `[[steered]]` config types, their validation and
//! compilation (with the operator's control knobs applied) into [`CompiledPolicies`], the
//! traffic shield's read-side [`ShedView`] type, and the per-query [`evaluate()`] function
//! (pure, lock-free, allocation-free) plus [`explain()`] for traces. Endpoint monitors are
//! compiled here too ([`monitor`]); their results come in as a [`HealthView`], read per query
//! like the shield's view.
//!
//! It may not touch sockets, files, clocks or global state: callers hand it parsed config,
//! knobs and the client's location (from `geo`), and the DNS code turns a [`Decision`] into
//! records. The shield (which writes `ShedView`s) and the control file reader live elsewhere.

mod cells;
mod compile;
pub mod config;
mod evaluate;
mod explain;
mod hash;
mod health;
mod knobs;
mod model;
pub mod monitor;
mod profiles;
mod projection;

#[cfg(test)]
mod tests;

pub use compile::{compile, name_wire, parse_absolute_name, NameError, PolicyError, MAX_TTL};
pub use profiles::{compile_tenant_profile, TenantProfile};

/// A key of `addr`'s client prefix (`prefix_v4`/`prefix_v6` bits), for the shield's
/// once-per-prefix demand count within a tick. It only spreads prefixes over this node's
/// bit map (nothing sticky hangs on it, and nothing leaves the node), so a multiply-xorshift
/// mix does, at a tenth of the SipHash the steering choices need.
pub fn demand_key(addr: std::net::IpAddr, prefix_v4: u8, prefix_v6: u8) -> u64 {
    hash::prefix_mix(addr, prefix_v4, prefix_v6)
}
pub use config::{
    CellConfig, CellsConfig, EndpointConfig, FallbackSiteConfig, MonitorConfig, ProfileConfig,
    ProfileKind, RegionConfig, SteeredConfig, SteeredPolicyKind, TopologyConfig,
    TransferProjection,
};
pub use evaluate::{
    evaluate, evaluate_for_tenant, evaluate_with_health, evaluate_with_own_health, AnycastChoice,
    AsTenant, Decision, LocatedClient, StepChoice, StepHealth, Target, Trace, TraceStep,
    SHED_HASH_PREFIX_V4, SHED_HASH_PREFIX_V6,
};
pub use explain::{explain, explain_for_tenant, explain_for_tenant_with_own, explain_with_health};
pub use health::{HealthView, OwnMonitors, SlotHealth};
pub use knobs::{
    BadForcedAnswer, CellKnobs, ControlKnobs, Destination, EndpointKnobs, ForcedAnswer,
    ProfileKnobs, RegionKnobs, RegionShed, ShedError, ShedShare, ShedView, ShieldMode,
    MAX_SHED_DESTINATIONS,
};
pub use model::{
    AllDown, CompiledPolicies, GeoRoute, PolicyRoot, ProfileId, ProfileKindTag, RegionInfo,
    RegionOverride, SiteInfo, SteeredName, MAX_PROFILE_DEPTH,
};
pub use profiles::MAX_WEIGHT;
pub use projection::StaticAnswer;
