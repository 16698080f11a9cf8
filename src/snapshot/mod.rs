//! The snapshot: the immutable, fully validated compilation of config + zones (+ geo database,
//! policies, control file) that the serving path reads through one atomic pointer.
//!
//! Everything that can fail happens while building a snapshot, off the serving path; a snapshot
//! that exists is servable. Swapping one in is a single atomic store ([`SharedSnapshot`]).

pub mod compose;
pub mod load;
mod precompiled;
pub mod steer;

use std::sync::Arc;

use arc_swap::ArcSwap;

pub use precompiled::{Cached, Precompiled};

use ipnet::IpNet;

use crate::config::ServerConfig;
use crate::control::ControlFile;
use crate::dns::wire::Client;
use crate::dns::wire::{ClientSubnet, WireName};
use crate::metrics::SnapshotCounters;
use crate::shield::live::Shield;
use crate::shield::step::ShieldSettings;
use crate::zone::lookup::{resolve, ZoneSet};
use crate::zone::model::Zone;
use steer::{ClientSteering, SteeringData};

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
    /// Log one query in this many at info (client, name, type, rcode); 0 = no query log.
    pub query_log_sample: u32,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            edns_payload: 1232,
            nsid: None,
            version: Some(format!("steerdns {}", env!("CARGO_PKG_VERSION"))),
            identity: None,
            query_log_sample: 0,
        }
    }
}

impl ServeOptions {
    /// The options `[server]` asks for: `version = ""` refuses `version.bind`, unset answers
    /// the default.
    pub fn from_config(server: &ServerConfig) -> ServeOptions {
        let defaults = ServeOptions::default();
        ServeOptions {
            edns_payload: server.edns_payload,
            nsid: server.nsid.as_ref().map(|n| n.as_bytes().into()),
            version: match &server.version {
                None => defaults.version,
                Some(v) if v.is_empty() => None,
                Some(v) => Some(v.clone()),
            },
            identity: server.identity.clone(),
            query_log_sample: server.query_log_sample,
        }
    }
}

pub struct Snapshot {
    pub zones: ZoneSet,
    pub precompiled: Precompiled,
    pub options: ServeOptions,
    /// Policies, locator and shield view; `None` when no names are steered.
    pub steering: Option<SteeringData>,
    /// Clients allowed to see decision traces over `CH TXT`.
    pub trace_allow: Vec<IpNet>,
    /// The control knobs this snapshot was compiled with.
    pub control: ControlFile,
    /// The control version being served (answered by `CH TXT serial.steerdns`).
    pub serial: u64,
    /// Fingerprint of config + control + zone serials, to compare nodes.
    pub config_hash: u64,
    /// The traffic shield (shared by every snapshot: its decisions outlive reloads).
    pub shield: Arc<Shield>,
    /// The monitors' health view for these policies (from [`crate::health::Health::attach`];
    /// empty, everything up, until the reloader attaches it).
    pub health: Arc<crate::health::Board>,
    pub shield_settings: ShieldSettings,
    /// The load file the shield polls, if any.
    pub load_file: Option<std::path::PathBuf>,
    /// `[shield.prometheus]`: a Prometheus server the shield queries for load.
    pub prometheus: Option<crate::config::prometheus::PrometheusConfig>,
    /// Milliseconds between shield decisions.
    pub shield_tick_ms: u64,
    /// Per-zone and steered-answer counters, sized for these zones and policies.
    pub counters: Arc<SnapshotCounters>,
    /// UDP response rate limiting; `None` when `[rrl]` is disabled.
    pub rrl: Option<crate::rrl::RateLimiter>,
    /// The files the zones and precompiled answers were built from, so that the next load can
    /// share them when none of those files changed; `None` when not built from files.
    pub sources: Option<Arc<load::Sources>>,
    /// DNSSEC: pre-signed steered answers and what was signed; `None` when nothing is signed.
    pub dnssec: Option<Arc<crate::dnssec::Signing>>,
    /// The certificate and key of the encrypted transports (`[server.tls]`), re-read on
    /// every load; TLS handshakes use the one of the snapshot in service.
    pub tls: Option<Arc<crate::tls::Material>>,
}

impl Snapshot {
    /// What a shield tick reads from this snapshot.
    pub fn shield_inputs(&self) -> crate::shield::live::TickInputs<'_> {
        crate::shield::live::TickInputs {
            steering: self.steering.as_ref().map(|s| (&s.policies, &s.demand)),
            settings: &self.shield_settings,
            mode: self.control.shield,
        }
    }

    /// Compiles zones and options into a servable snapshot, precompiling static answers.
    pub fn build(
        zones: Vec<Zone>,
        options: ServeOptions,
        steering: Option<SteeringData>,
        trace_allow: Vec<IpNet>,
    ) -> Snapshot {
        Snapshot::assemble(ZoneSet::new(zones), None, options, steering, trace_allow)
    }

    /// Like [`Snapshot::build`], with the zones already compiled and, when given, the
    /// precompiled answers of exactly these zones and steered names (both shared with the
    /// snapshot they were built for).
    pub fn assemble(
        zones: ZoneSet,
        precompiled: Option<Precompiled>,
        options: ServeOptions,
        steering: Option<SteeringData>,
        trace_allow: Vec<IpNet>,
    ) -> Snapshot {
        let counters =
            SnapshotCounters::register(zones.zones(), steering.as_ref().map(|s| &s.policies));
        let shared = precompiled.is_some();
        let mut snapshot = Snapshot {
            zones,
            precompiled: precompiled.unwrap_or_default(),
            options,
            steering,
            trace_allow,
            control: ControlFile::default(),
            serial: 0,
            config_hash: 0,
            shield: Arc::new(Shield::default()),
            health: Arc::new(crate::health::Board::default()),
            shield_settings: ShieldSettings::default(),
            load_file: None,
            prometheus: None,
            shield_tick_ms: 1000,
            counters,
            rrl: None,
            sources: None,
            dnssec: None,
            tls: None,
        };
        if !shared {
            snapshot.precompiled = Precompiled::build(&snapshot);
        }
        snapshot
    }

    /// A snapshot with no zones (answers REFUSED); a placeholder before the first load.
    pub fn empty() -> Snapshot {
        Snapshot::build(Vec::new(), ServeOptions::default(), None, Vec::new())
    }

    /// The fast-path entry for (name, type) with its zone's index: a precompiled response, or
    /// the steering binding of an exact steered name or of a steered wildcard covering it.
    /// With `dnssec` (the query set DO), a signed zone's answers come with their signatures
    /// and proofs; a steered wildcard then takes the general path, which adds the proof that
    /// the name itself does not exist.
    pub fn fast_path(
        &self,
        qname: &WireName,
        qtype: u16,
        dnssec: bool,
    ) -> Option<(usize, Cached<'_>)> {
        self.precompiled.get(qname, qtype, dnssec).or_else(|| {
            self.precompiled
                .wildcard(&self.zones, qname, qtype)
                .filter(|&(zone, _)| !(dnssec && self.zone_signed(zone)))
        })
    }

    /// Is the zone at this index signed?
    pub fn zone_signed(&self, zone: usize) -> bool {
        self.zones
            .zones()
            .get(zone)
            .is_some_and(|z| z.denial.is_some())
    }

    /// The steering context for one query (None when no names are steered).
    pub fn steering_for(
        &self,
        client: &Client,
        subnet: Option<&ClientSubnet>,
    ) -> Option<ClientSteering<'_>> {
        let data = self.steering.as_ref()?;
        Some(ClientSteering::new(
            data,
            &self.counters,
            &self.shield,
            &self.health,
            steer::locate(&data.locator, client, subnet),
            self.dnssec.as_deref().map(|d| &d.steered),
            steer::demand_address(data, client, subnet),
        ))
    }

    /// CHAOS names beyond version/identity: the decision trace of a steered name, for
    /// permitted clients.
    pub fn chaos_extra(
        &self,
        qname: &WireName,
        client: &Client,
        subnet: Option<&ClientSubnet>,
    ) -> Option<String> {
        if !self
            .trace_allow
            .iter()
            .any(|net| net.contains(&client.addr))
        {
            return None;
        }
        let data = self.steering.as_ref()?;
        let steering = self.steering_for(client, subnet)?;
        for qtype in [crate::dns::wire::rtype::A, crate::dns::wire::rtype::AAAA] {
            resolve(&self.zones, qname, qtype, &steering, false)?;
            if steering.asked.get().is_some() {
                break;
            }
        }
        let binding = steering.asked.get()?;
        let source = match subnet {
            Some(ecs) if ecs.source_prefix > 0 => format!("ecs {}/{}", ecs.addr, ecs.source_prefix),
            _ => "source address".to_string(),
        };
        steer::trace(
            data,
            &self.shield.view(),
            &self.health.view(),
            binding,
            steering.client(),
            &source,
        )
    }
}
