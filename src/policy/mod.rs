//! Policy: how a steered name answers a given client.
//!
//! Owns the `[topology]`, `[profiles]` and `[[steered]]` config types, their validation and
//! compilation (with the operator's control knobs applied) into [`CompiledPolicies`], the
//! traffic shield's read-side [`ShedView`] type, and the per-query [`evaluate`] function
//! (pure, lock-free, allocation-free) plus [`explain`] for traces.
//!
//! It may not touch sockets, files, clocks or global state: callers hand it parsed config,
//! knobs and the client's location (from `geo`), and the DNS code turns a [`Decision`] into
//! records. The shield (which writes `ShedView`s) and the control file reader live elsewhere.

mod compile;
pub mod config;
mod evaluate;
mod explain;
mod hash;
mod knobs;
mod model;
mod profiles;

#[cfg(test)]
mod tests;

pub use compile::{compile, PolicyError, MAX_TTL};
pub use config::{
    EndpointConfig, FallbackSiteConfig, ProfileConfig, ProfileKind, RegionConfig, SteeredConfig,
    SteeredPolicyKind, TopologyConfig,
};
pub use evaluate::{
    evaluate, AnycastChoice, Client, Decision, StepChoice, Target, Trace, TraceStep,
    SHED_HASH_PREFIX_V4, SHED_HASH_PREFIX_V6,
};
pub use explain::explain;
pub use knobs::{
    BadForcedAnswer, ControlKnobs, Destination, EndpointKnobs, ForcedAnswer, ProfileKnobs,
    RegionKnobs, RegionShed, ShedError, ShedShare, ShedView, ShieldMode, MAX_SHED_DESTINATIONS,
};
pub use model::{
    CompiledPolicies, GeoRoute, PolicyRoot, ProfileId, ProfileKindTag, RegionInfo, RegionOverride,
    SiteInfo, SteeredName, MAX_PROFILE_DEPTH,
};
pub use profiles::MAX_WEIGHT;
