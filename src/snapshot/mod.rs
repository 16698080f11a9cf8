//! The snapshot: the immutable, fully validated compilation of config + zones (+ geo database,
//! policies, control file) that the serving path reads through one atomic pointer.
//!
//! Everything that can fail happens while building a snapshot, off the serving path; a snapshot
//! that exists is servable. Swapping one in is a single atomic store ([`SharedSnapshot`]).

pub mod load;
mod precompiled;

use std::sync::Arc;

use arc_swap::ArcSwap;

pub use precompiled::Precompiled;

use crate::dns::respond::Client;
use crate::dns::wire::{ClientSubnet, WireName};
use crate::zone::lookup::{NoSteering, ZoneSet};
use crate::zone::model::Zone;

/// The pointer the serving path loads for every packet; reloads store a new snapshot into it.
pub type SharedSnapshot = Arc<ArcSwap<Snapshot>>;

/// Protocol options that shape every response.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The UDP payload size we advertise and accept at most (RFC 6891; 1232 avoids fragmentation).
    pub edns_payload: u16,
    /// RFC 5001 name server identifier, sent when a query asks for it.
    pub nsid: Option<Box<[u8]>>,
    /// Answer to `CH TXT version.bind`; `None` refuses.
    pub version: Option<String>,
    /// Answer to `CH TXT id.server` / `hostname.bind`; `None` refuses.
    pub identity: Option<String>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            edns_payload: 1232,
            nsid: None,
            version: Some(format!("steerdns {}", env!("CARGO_PKG_VERSION"))),
            identity: None,
        }
    }
}

pub struct Snapshot {
    pub zones: ZoneSet,
    pub precompiled: Precompiled,
    pub options: ServeOptions,
}

impl Snapshot {
    /// Compiles zones and options into a servable snapshot, precompiling static answers.
    pub fn build(zones: Vec<Zone>, options: ServeOptions) -> Snapshot {
        let mut snapshot = Snapshot {
            zones: ZoneSet::new(zones),
            precompiled: Precompiled::default(),
            options,
        };
        snapshot.precompiled = Precompiled::build(&snapshot);
        snapshot
    }

    /// The steering context for one query (None while no policies are configured).
    pub fn steering_for(&self, _client: &Client, _subnet: Option<&ClientSubnet>) -> Option<NoSteering> {
        None
    }

    /// CHAOS names beyond version/identity (none yet).
    pub fn chaos_extra(&self, _qname: &WireName, _client: &Client) -> Option<String> {
        None
    }
}
