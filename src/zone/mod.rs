//! Zones: loading master files with file:line for every record ([`parse`]), checking them
//! ([`validate`]), the compiled immutable form the serving path reads ([`model`]), the
//! answer engine ([`lookup`]), and the differences between versions of a zone ([`journal`]), and what a zone transfer
//! sends ([`transfer`], [`ixfr`]).
//!
//! Owns authoritative semantics (RFC 1034/2308/4592/8482). Knows nothing of sockets, and of
//! policies only the [`lookup::Steering`] hook through which steered names (bound to them by a
//! [`model::SteeredBinding`]) get their answers ([`lookup::SteeredData`]).

pub mod cache;
pub mod difference;
pub mod group;
pub mod ixfr;
pub mod journal;
pub mod lookup;
pub mod model;
pub mod nodes;
pub mod parse;
pub mod transfer;
pub mod validate;
