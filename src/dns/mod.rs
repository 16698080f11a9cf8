//! The DNS wire protocol: reading queries in place ([`wire`]), writing responses with
//! compression ([`writer`]), and the transport-agnostic per-packet path ([`respond`]).
//!
//! Owns byte-level correctness (header flags, EDNS, ECS, truncation, letter case). It reads the
//! snapshot but never changes it, and knows nothing about sockets.

pub mod canonical;
pub mod chaos;
pub mod respond;
pub mod wire;
pub mod writer;

#[cfg(test)]
mod tests;
