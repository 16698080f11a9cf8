//! The DNS wire protocol: reading queries in place ([`wire`]), writing messages with
//! compression ([`writer`]), what a written response says ([`sent`]), DNSSEC's canonical order ([`canonical`]), DNS Cookies
//! ([`cookie`]), TSIG signatures and key files ([`tsig`]), and who asked ([`wire::Requester`]).
//!
//! Owns byte-level correctness (header flags, EDNS, ECS, truncation, letter case). The lowest
//! layer: it imports nothing else of steerdns. Answering a query is [`crate::answer`].

pub mod canonical;
pub mod cookie;
pub mod sent;
pub mod tsig;
pub mod wire;
pub mod writer;
