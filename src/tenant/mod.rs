//! Tenants: one document per customer (`tenants/<name>.toml`), the unit of configuration.
//! A tenant owns names one label below a platform wildcard (`fabrikam.edge.example.net.`
//! under `*.edge.example.net.`) and answers them by its own document: the platform's
//! wildcard policy with its own TTL, or a profile of its own (weighted always-serve with
//! break-glass weights, or geo to its app gateways), or REFUSED while suspended.
//!
//! Owns the document ([`document`]: parsing and the checks that need only the document),
//! its compilation against the platform ([`mod@compile`]) and the sharded table the serving path
//! reads ([`table`]). Pure: no files, sockets or clocks; the reloader reads the folder,
//! tastes, numbers and swaps.

pub mod cache;
pub mod compile;
pub mod document;
pub mod edit;
pub mod table;

#[cfg(test)]
mod cells_tests;
#[cfg(test)]
mod monitor_tests;

pub use compile::{compile, platform_key, Identity, PlainParts, PlatformView, ServedTenant};
pub use document::{parse, valid_tenant_name, TenantDocument, TenantProblem, TenantState};
pub use table::{NameChange, TenantIndex, TenantTable};
