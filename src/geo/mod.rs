//! Client location for steering: client address → database location → region.
//!
//! Owns: loading a MaxMind-format database (`maxminddb`) and compiling it into sorted range
//! tables ([`GeoTable`]), the `[geo]` config and its region mapping with CIDR overrides
//! ([`GeoConfig`], [`Locator`]), and building databases from CSV (`build_mmdb_from_csv`, with the `tools` feature).
//!
//! Does not touch: DNS parsing, the choice between the EDNS Client Subnet address and the
//! resolver's source address, or unmapping IPv4-mapped IPv6 (the caller does those and passes
//! the result to [`Locator::locate`]); endpoint choice (policy) and CLI wiring (`main.rs`).
//!
//! Serving path: [`Locator::locate`] is a binary search over precompiled answers; it neither
//! allocates nor locks nor decodes database records.

#[cfg(feature = "tools")]
mod build;
mod error;
mod locator;
mod table;

#[cfg(feature = "tools")]
pub use build::{build_mmdb_from_csv, BuildReport};
pub use error::GeoError;
pub use locator::{
    DatabaseStatus, GeoConfig, GeoOverride, Located, LocationSource, Locator, CONTINENT_CODES,
};
pub use table::{DatabaseInfo, GeoBlock, GeoHit, GeoLocation, GeoTable};

#[cfg(all(test, feature = "tools"))]
mod build_tests;
#[cfg(test)]
mod tests;
