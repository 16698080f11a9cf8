//! steerdns: an authoritative DNS server that steers clients between global anycast, regional
//! anycast and a fallback ring, with weighted always-serve profiles for break-glass failover.
//!
//! A packet's path: [`server`] (sockets) → [`dns`] (parse the query, write the answer) →
//! [`snapshot`] (the immutable, validated view of config + zones) → [`zone`] (lookup) and, for
//! steered names, [`geo`] (where is the client) and [`policy`] (which endpoint answers).

pub mod admin;
pub mod answer;
pub mod cells;
pub mod change;
pub mod civil;
pub mod config;
pub mod control;
pub mod daemon;
pub mod descriptors;
pub mod dns;
pub mod dnssec;
pub mod drill;
pub mod files;
pub mod fleet;
pub mod geo;
pub mod hash;
pub mod health;
pub mod http_client;
pub mod le_reader;
pub mod lkg;
pub mod metrics;
pub mod policy;
pub mod reload;
pub mod rfc3339;
pub mod rollout;
pub mod rrl;
pub mod safety;
pub mod secondary;
pub mod server;
pub mod shield;
pub mod snapshot;
pub mod taster;
pub mod tenant;
pub mod text_position;
pub mod tls;
pub mod zone;

#[cfg(test)]
mod test_alloc;
