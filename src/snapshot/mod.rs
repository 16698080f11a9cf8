//! The snapshot: what the serving path reads through one atomic pointer ([`SharedSnapshot`]).
//!
//! Two halves. [`Compiled`] is the immutable, fully validated compilation of config + zones
//! (+ geo database, policies, control file, keys, certificate), built by [`load`]: everything
//! that can fail happens there, off the serving path, and a `Compiled` that exists is
//! servable. The runtime services it is served with — the shield, the monitors' health view,
//! the RRL buckets, the counters — outlive it and are passed in by the reloader, which builds
//! the [`Snapshot`] whole ([`Snapshot::new`], with its serial and hash) and swaps it in with a
//! single atomic store. Nothing changes a snapshot after it is built; its fields are private.

pub mod catalog;
pub mod compose;
pub mod cookies;
pub mod impaired;
pub mod load;
mod precompiled;
pub mod projection;
pub mod steer;
pub mod transfer;
pub mod zone_cache;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

pub use precompiled::{FastPathEntry, Precompiled};

use ipnet::IpNet;

use crate::config::ServerConfig;
use crate::control::ControlFile;
use crate::dns::wire::Requester;
use crate::dns::wire::{ClientSubnet, WireName};
use crate::metrics::SnapshotCounters;
use crate::policy::CompiledPolicies;
use crate::rrl::budget::{BudgetLimits, TenantBudgets};
use crate::rrl::{RateLimiter, RrlLimits};
use crate::shield::live::{Proof, Shield};
use crate::shield::step::ShieldSettings;
use crate::zone::lookup::ZoneSet;
use crate::zone::model::Zone;
use crate::zone::transfer::TransferView;
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
    /// DNS Cookies: the secret to verify and issue server cookies with; `None`: off.
    pub cookies: Option<cookies::CookieSetup>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            edns_payload: 1232,
            nsid: None,
            version: Some(format!("steerdns {}", env!("CARGO_PKG_VERSION"))),
            identity: None,
            query_log_sample: 0,
            cookies: None,
        }
    }
}

impl ServeOptions {
    /// The options `[server]` asks for: `version = ""` refuses `version.bind`, unset answers
    /// the default; `cookies` as [`cookies::load`] read them.
    pub fn from_config(
        server: &ServerConfig,
        cookies: Option<cookies::CookieSetup>,
    ) -> ServeOptions {
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
            cookies,
        }
    }
}

/// What a load compiles from the config, zones, geo database, policies and control file:
/// immutable once built, and complete — a `Compiled` that exists is servable. Built by
/// [`load`] (or [`Compiled::empty`]); the reloader wraps it in a [`Snapshot`] with the runtime
/// services it is served with.
pub struct Compiled {
    zones: ZoneSet,
    precompiled: Precompiled,
    options: ServeOptions,
    /// Policies, locator and shield view; `None` when no names are steered.
    steering: Option<SteeringData>,
    /// Clients allowed to see decision traces over `CH TXT`.
    trace_allow: Vec<IpNet>,
    /// The control knobs this snapshot was compiled with.
    control: ControlFile,
    /// What the shield thread runs with while this snapshot serves.
    shield: ShieldSetup,
    /// UDP response rate limiting; `None` when `[rrl]` is disabled.
    rrl: Option<RrlLimits>,
    /// Per-tenant response budgets under saturation; `None` when `[budgets]` is off.
    budgets: Option<BudgetLimits>,
    /// The files the zones and precompiled answers were built from, so that the next load can
    /// share them when none of those files changed; `None` when not built from files.
    sources: Option<Arc<load::Sources>>,
    /// DNSSEC: pre-signed steered answers and what was signed; `None` when nothing is signed.
    dnssec: Option<Arc<crate::dnssec::Signing>>,
    /// Zones to sign left out of this snapshot because their keys could not be read.
    dnssec_not_served: Vec<load::NotServed>,
    /// The certificate and key of the encrypted transports (`[server.tls]`), re-read on
    /// every load; TLS handshakes use the one of the snapshot in service.
    tls: Option<Arc<crate::tls::Material>>,
    /// Outgoing zone transfers (`[transfer]` and its TSIG keys); `None`: AXFR/IXFR refused.
    transfer: Option<Arc<transfer::TransferSetup>>,
    /// The static projection of the steered names into transfers, per zone (empty without
    /// `[transfer]`).
    projections: projection::Projections,
    /// Per zone (by index in `zones`): a secondary zone past its SOA expire time, answered
    /// SERVFAIL. Empty when none is.
    expired: Box<[bool]>,
    /// The differences a reload applied (by zone apex), for the IXFR journal: given, not
    /// computed again from both versions (empty for a load that built the zones).
    differences: Vec<(Box<[u8]>, crate::zone::journal::Diff)>,
    /// Phase 1 of a start from the zone cache (`load::load_first_answers`): the cache's
    /// precompiled answers and the steered names' fast path serve, the zones are not in yet
    /// (`zones` is empty). A query those do not answer is held (dropped: the resolver asks
    /// again) until the full snapshot is swapped in, never answered from the half-loaded view.
    loading: bool,
}

/// What the shield thread ([`crate::reload::shield`]) reads from the snapshot in service.
#[derive(Debug, Clone)]
pub struct ShieldSetup {
    pub settings: ShieldSettings,
    /// The load file the shield polls, if any.
    pub load_file: Option<std::path::PathBuf>,
    /// `[shield.prometheus]`: a Prometheus server the shield queries for load.
    pub prometheus: Option<crate::config::prometheus::PrometheusConfig>,
    /// Milliseconds between shield decisions.
    pub tick_ms: u64,
}

impl Default for ShieldSetup {
    fn default() -> Self {
        ShieldSetup {
            settings: ShieldSettings::default(),
            load_file: None,
            prometheus: None,
            tick_ms: 1000,
        }
    }
}

impl Compiled {
    /// `zones` served with `options`, nothing steered (for tests and fuzzing).
    pub fn build(zones: Vec<crate::zone::model::Zone>, options: ServeOptions) -> Compiled {
        let zones = ZoneSet::new(zones);
        Compiled {
            precompiled: Precompiled::build(&zones, None, &options),
            zones,
            options,
            steering: None,
            trace_allow: Vec::new(),
            control: ControlFile::default(),
            shield: ShieldSetup::default(),
            rrl: None,
            budgets: None,
            sources: None,
            dnssec: None,
            dnssec_not_served: Vec::new(),
            tls: None,
            transfer: None,
            projections: projection::Projections::default(),
            expired: Box::default(),
            differences: Vec::new(),
            loading: false,
        }
    }

    /// This compilation with outgoing transfers on (for tests and fuzzing; a load reads
    /// `[transfer]` itself).
    pub fn with_transfer(self, setup: transfer::TransferSetup) -> Compiled {
        Compiled {
            transfer: Some(Arc::new(setup)),
            ..self
        }
    }

    /// No zones (answers REFUSED); a placeholder before the first load.
    pub fn empty() -> Compiled {
        Compiled::build(Vec::new(), ServeOptions::default())
    }

    pub fn zones(&self) -> &ZoneSet {
        &self.zones
    }

    /// Whether zone `index` of [`Compiled::zones`] is a secondary zone past its expire time.
    #[inline]
    pub fn zone_expired(&self, index: usize) -> bool {
        self.expired.get(index).copied().unwrap_or(false)
    }

    /// Phase 1 of a start from the zone cache: zones still loading (see [`Compiled::loading`]).
    #[inline]
    pub fn is_loading(&self) -> bool {
        self.loading
    }

    /// The origins of the zones answered SERVFAIL for being past expire.
    pub fn expired_zones(&self) -> impl Iterator<Item = &crate::zone::model::Zone> {
        self.zones
            .zones()
            .iter()
            .zip(self.expired.iter())
            .filter(|(_, expired)| **expired)
            .map(|(zone, _)| zone)
    }

    /// The precompiled answers (static responses and steered bindings by name and type).
    pub fn precompiled(&self) -> &Precompiled {
        &self.precompiled
    }

    pub fn options(&self) -> &ServeOptions {
        &self.options
    }

    /// Policies, locator and shield view; `None` when no names are steered.
    pub fn steering(&self) -> Option<&SteeringData> {
        self.steering.as_ref()
    }

    /// The compiled policies; `None` when no names are steered.
    pub fn policies(&self) -> Option<&CompiledPolicies> {
        self.steering.as_ref().map(|s| &s.policies)
    }

    /// The control knobs this snapshot was compiled with.
    pub fn control(&self) -> &ControlFile {
        &self.control
    }

    pub fn shield_setup(&self) -> &ShieldSetup {
        &self.shield
    }

    /// The files the zones were built from; `None` when not built from files.
    pub fn sources(&self) -> Option<&Arc<load::Sources>> {
        self.sources.as_ref()
    }

    /// DNSSEC: pre-signed steered answers and what was signed; `None` when nothing is signed.
    pub fn dnssec(&self) -> Option<&crate::dnssec::Signing> {
        self.dnssec.as_deref()
    }

    /// The encrypted transports' certificate and key; `None` without `[server.tls]`.
    pub fn tls(&self) -> Option<&crate::tls::Material> {
        self.tls.as_deref()
    }

    /// Outgoing zone transfers; `None` without `[transfer]`.
    pub fn transfer(&self) -> Option<&transfer::TransferSetup> {
        self.transfer.as_deref()
    }

    /// The static projection of the steered names into transfers, per zone.
    pub fn projections(&self) -> &projection::Projections {
        &self.projections
    }

    /// The difference a reload applied to the zone with this apex, if it was applied as one.
    pub fn difference(&self, apex: &[u8]) -> Option<&crate::zone::journal::Diff> {
        self.differences
            .iter()
            .find(|(a, _)| a[..] == *apex)
            .map(|(_, d)| d)
    }

    /// `zone` as a transfer sends it: with its projected records.
    pub fn transfer_view<'z>(&'z self, zone: &'z Zone) -> TransferView<'z> {
        TransferView {
            zone,
            projected: self.projections.records(&zone.apex),
        }
    }
}

/// The runtime services a snapshot points to: state that serving writes and that outlives
/// the snapshot (the shield's decisions, the monitors' health, the RRL buckets, the counters'
/// registered totals).
struct Services {
    /// The traffic shield (shared by every snapshot: its decisions outlive reloads).
    shield: Arc<Shield>,
    /// The monitors' health view for these policies (from [`crate::health::Health::attach`]).
    health: Arc<crate::health::Board>,
    /// UDP response rate limiting; `None` when `[rrl]` is disabled.
    rrl: Option<RateLimiter>,
    /// Per-tenant budgets; `None` when `[budgets]` is off.
    budgets: Option<TenantBudgets>,
    /// Per-zone and steered-answer counters, sized for these zones and policies.
    counters: Arc<SnapshotCounters>,
    /// The tenant table (shared by every snapshot: a tenant change swaps a new table in
    /// here without building a snapshot).
    tenants: SharedTenants,
}

/// The tenant table the serving path loads for a name that may be a tenant's; the
/// reloader stores a new one for each accepted tenant change.
pub type SharedTenants = Arc<TenantSlot>;

/// Where the tenant table is swapped, with whether it holds any name: on a server without
/// tenants a query that may be a tenant's costs one atomic load instead of an `ArcSwap`
/// guard taken and dropped (~80 instructions per steered answer, callgrind).
#[derive(Default)]
pub struct TenantSlot {
    table: ArcSwap<crate::tenant::TenantTable>,
    any: AtomicBool,
}

impl TenantSlot {
    /// The table in service, kept (for building the next one from it).
    pub fn load_full(&self) -> Arc<crate::tenant::TenantTable> {
        self.table.load_full()
    }

    /// The table in service (empty or not).
    pub fn load(&self) -> arc_swap::Guard<Arc<crate::tenant::TenantTable>> {
        self.table.load()
    }

    /// The table in service if it holds any name (the serving path's probe).
    #[inline]
    pub fn load_if_any(&self) -> Option<arc_swap::Guard<Arc<crate::tenant::TenantTable>>> {
        self.any.load(Ordering::Acquire).then(|| self.table.load())
    }

    /// Swaps `table` in. The flag follows the table: a reader that still sees the old flag
    /// loads the new table, which answers for itself.
    pub fn store(&self, table: Arc<crate::tenant::TenantTable>) {
        let any = !table.is_empty();
        self.table.store(table);
        self.any.store(any, Ordering::Release);
    }
}

/// What a [`Compiled`] is served with: the runtime services and the version it serves as.
pub struct Serving<'a> {
    pub shield: Arc<Shield>,
    pub health: Arc<crate::health::Board>,
    /// The snapshot served until now, whose RRL buckets carry over (so that a reload during
    /// a flood does not hand every key a fresh burst).
    pub previous: Option<&'a Snapshot>,
    /// The control version being served (answered by `CH TXT serial.steerdns`).
    pub serial: u64,
    /// Fingerprint of config + control + zone serials, to compare nodes.
    pub config_hash: u64,
    /// The control version is a fleet node's local override (sent with `--direct`, not yet
    /// in etcd): `CH TXT serial.steerdns` says so.
    pub local_override: bool,
    /// The tenant table served with it.
    pub tenants: SharedTenants,
}

/// The unit the serving path reads: compiled data plus the runtime services it is served
/// with, built whole by [`Snapshot::new`] and never changed after.
pub struct Snapshot {
    compiled: Compiled,
    services: Services,
    serial: u64,
    config_hash: u64,
    local_override: bool,
    /// The IXFR journal: the differences between the versions of each zone served so far
    /// (carried from the snapshot before; empty without `[transfer]`).
    journal: crate::zone::journal::Journal,
}

impl Snapshot {
    /// `compiled`, served with `serving`'s services as `serving.serial`.
    pub fn new(compiled: Compiled, serving: Serving<'_>) -> Snapshot {
        let previous_rrl = serving.previous.and_then(|p| p.services.rrl.as_ref());
        let previous_budgets = serving.previous.and_then(|p| p.services.budgets.as_ref());
        let services = Services {
            shield: serving.shield,
            health: serving.health,
            rrl: compiled
                .rrl
                .as_ref()
                .map(|limits| RateLimiter::new(limits, previous_rrl)),
            budgets: compiled
                .budgets
                .as_ref()
                .map(|limits| TenantBudgets::new(limits, previous_budgets)),
            counters: SnapshotCounters::register(compiled.zones.zones(), compiled.policies()),
            tenants: serving.tenants,
        };
        let journal = match &compiled.transfer {
            None => crate::zone::journal::Journal::default(),
            Some(setup) => transfer::next_journal(
                setup.config.journal_depth,
                serving.previous.map(|p| (&p.journal, p.compiled())),
                &compiled,
            ),
        };
        Snapshot {
            journal,
            compiled,
            services,
            serial: serving.serial,
            config_hash: serving.config_hash,
            local_override: serving.local_override,
        }
    }

    /// `compiled` served on its own: a shield of its own, everything healthy, fresh RRL
    /// buckets, the serial its control file names (for checks, tests and benchmarks).
    pub fn standalone(compiled: Compiled) -> Snapshot {
        let serial = compiled.control.serial.unwrap_or(0);
        Snapshot::new(
            compiled,
            Serving {
                shield: Arc::new(Shield::default()),
                health: Arc::new(crate::health::Board::default()),
                previous: None,
                serial,
                config_hash: 0,
                local_override: false,
                tenants: SharedTenants::default(),
            },
        )
    }

    /// A snapshot with no zones (answers REFUSED); a placeholder before the first load.
    pub fn empty() -> Snapshot {
        Snapshot::standalone(Compiled::empty())
    }

    /// What was compiled (zones, policies, options, sources, signing, TLS material).
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// Whether zone `index` is a secondary zone past its expire time (answered SERVFAIL).
    #[inline]
    pub fn zone_expired(&self, index: usize) -> bool {
        self.compiled.zone_expired(index)
    }

    /// Phase 1 of a start from the zone cache: only the precompiled answers and the steered
    /// fast path answer; every other query is held (see `Compiled::loading`).
    #[inline]
    pub fn is_loading(&self) -> bool {
        self.compiled.loading
    }

    #[inline]
    pub fn zones(&self) -> &ZoneSet {
        &self.compiled.zones
    }

    #[inline]
    pub fn options(&self) -> &ServeOptions {
        &self.compiled.options
    }

    /// Policies, locator and shield view; `None` when no names are steered.
    #[inline]
    pub fn steering(&self) -> Option<&SteeringData> {
        self.compiled.steering.as_ref()
    }

    /// The compiled policies; `None` when no names are steered.
    pub fn policies(&self) -> Option<&CompiledPolicies> {
        self.compiled.policies()
    }

    /// The control knobs this snapshot was compiled with.
    pub fn control(&self) -> &ControlFile {
        &self.compiled.control
    }

    /// DNSSEC: pre-signed steered answers and what was signed; `None` when nothing is signed.
    pub fn dnssec(&self) -> Option<&crate::dnssec::Signing> {
        self.compiled.dnssec()
    }

    /// Zones to sign that are not served because their keys could not be read.
    pub fn dnssec_not_served(&self) -> &[load::NotServed] {
        &self.compiled.dnssec_not_served
    }

    /// The encrypted transports' certificate and key; `None` without `[server.tls]`.
    pub fn tls(&self) -> Option<&crate::tls::Material> {
        self.compiled.tls()
    }

    /// Outgoing zone transfers; `None` without `[transfer]`.
    pub fn transfer(&self) -> Option<&transfer::TransferSetup> {
        self.compiled.transfer()
    }

    /// `zone` as a transfer sends it: with its projected records.
    pub fn transfer_view<'z>(&'z self, zone: &'z Zone) -> TransferView<'z> {
        self.compiled.transfer_view(zone)
    }

    /// The IXFR journal of the zones served.
    pub fn journal(&self) -> &crate::zone::journal::Journal {
        &self.journal
    }

    /// The control version being served (answered by `CH TXT serial.steerdns`).
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// Fingerprint of config + control + zone serials, to compare nodes.
    pub fn config_hash(&self) -> u64 {
        self.config_hash
    }

    /// Whether the control version is a fleet node's local override (not yet in etcd).
    pub fn local_override(&self) -> bool {
        self.local_override
    }

    /// The traffic shield this snapshot reads decisions from.
    pub fn shield(&self) -> &Arc<Shield> {
        &self.services.shield
    }

    /// The monitors' health view for these policies.
    pub fn health(&self) -> &Arc<crate::health::Board> {
        &self.services.health
    }

    /// UDP response rate limiting; `None` when `[rrl]` is disabled.
    #[inline]
    pub fn rrl(&self) -> Option<&RateLimiter> {
        self.services.rrl.as_ref()
    }

    /// Per-tenant response budgets; `None` when `[budgets]` is off.
    #[inline]
    pub fn budgets(&self) -> Option<&TenantBudgets> {
        self.services.budgets.as_ref()
    }

    /// Per-zone and steered-answer counters, sized for these zones and policies.
    #[inline]
    pub fn counters(&self) -> &SnapshotCounters {
        &self.services.counters
    }

    /// The tenant table served with this snapshot.
    #[inline]
    pub fn tenants(&self) -> &SharedTenants {
        &self.services.tenants
    }

    /// This snapshot with no precompiled answers: every query takes the general path.
    #[cfg(test)]
    pub(crate) fn without_precompiled(self) -> Snapshot {
        Snapshot {
            compiled: Compiled {
                precompiled: Precompiled::default(),
                ..self.compiled
            },
            ..self
        }
    }

    /// What a shield tick reads from this snapshot.
    pub fn shield_inputs(&self) -> crate::shield::live::TickInputs<'_> {
        crate::shield::live::TickInputs {
            steering: self.steering().map(|s| (&s.policies, &s.demand)),
            settings: &self.compiled.shield.settings,
            mode: self.compiled.control.shield,
        }
    }

    /// The fast-path entry for (name, type) with its zone's index: a precompiled response, or
    /// the steering binding of an exact steered name or of a steered wildcard covering it.
    /// With `dnssec` (the query set DO), a signed zone's static answers come with their
    /// signatures and proofs; a steered wildcard's entry is the same either way (the answer
    /// path adds its signature and the proof that the name itself does not exist).
    pub fn fast_path(
        &self,
        qname: &WireName,
        qtype: u16,
        dnssec: bool,
    ) -> Option<(usize, FastPathEntry<'_>)> {
        let compiled = &self.compiled;
        compiled
            .precompiled
            .get(qname, qtype, dnssec)
            .or_else(|| compiled.precompiled.wildcard(&compiled.zones, qname, qtype))
    }

    /// The steering context for one query from `client` (with `subnet`, its ECS option, and
    /// `proven`, how its source address is proven); `None` when no names are steered.
    /// Cheap: the client is located only when a steered name is decided.
    pub fn steering_for<'s>(
        &'s self,
        client: &Requester,
        subnet: Option<&ClientSubnet>,
        proven: Option<Proof>,
    ) -> Option<ClientSteering<'s>> {
        let data = self.compiled.steering.as_ref()?;
        Some(ClientSteering::new(
            data,
            &self.services.counters,
            &self.services.shield,
            &self.services.health,
            steer::Asker {
                source: client.addr,
                subnet,
                proven,
            },
            self.compiled.dnssec.as_deref().map(|d| &d.steered),
        ))
    }

    /// May `addr` see decision traces over `CH TXT`?
    pub fn may_trace(&self, addr: IpAddr) -> bool {
        self.compiled
            .trace_allow
            .iter()
            .any(|net| net.contains(&addr))
    }
}
