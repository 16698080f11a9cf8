//! The admin HTTP endpoint (loopback by default): `GET /v1/status` for operators and the CLI,
//! `POST /v1/reload` (token required) to taste and swap in the current files; the control
//! writes and safety checks (`POST /v1/control`, `/v1/safety/check`, `/v1/safety/refusals`)
//! are in `admin::control`; the tenants' documents (`GET`/`PUT`/`DELETE /v1/tenants/{name}`) in
//! [`tenants`].
//!
//! Every request passes `guard` first: a `Host` that is not a loopback literal, `localhost`,
//! the listen address or a name in `[admin] allowed_hosts` is refused (DNS rebinding: a hostile
//! page whose name now points at 127.0.0.1); a write whose `Origin`/`Referer` names another
//! site is refused (a browser form posting here); and a write is authorized before its body is
//! read.
//!
//! Owns HTTP, authentication and the JSON shape of status. Reads the reloader and the snapshot;
//! changes nothing except by asking the reloader, the one path for changes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::fleet::origin::FleetOrigin;
use crate::metrics::supervisor::{SupervisorStatus, SupervisorView};
use crate::policy::RegionOverride;
use crate::reload::{Reloader, Status, Trigger};
use crate::shield::feed::{FeedError, MAX_FEED_BYTES};
use crate::shield::source::FeedOrigin;

pub mod cells;
pub mod connections;
mod control;
mod dashboard;
mod direct;
pub mod metrics;
pub mod tenants;
pub mod token;
pub mod transfer;

pub use token::{read_token, AdminToken};

/// Largest request body accepted (the load feed, later, is the biggest legitimate one).
pub const MAX_BODY: usize = 1 << 20;

#[derive(Clone)]
pub struct AdminState {
    pub reloader: Arc<Reloader>,
    pub token: Arc<AdminToken>,
    pub hosts: Arc<AllowedHosts>,
    /// The fleet node's control origin (`None`: single node), for the `--direct` routes.
    pub fleet: Option<Arc<FleetOrigin>>,
    /// The daemon's threads and tasks (status and metrics show them).
    pub supervisor: Arc<SupervisorStatus>,
}

/// What `Host` (and the host of a write's `Origin`/`Referer`) may name.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    /// Lower-case names and address literals (IPv6 without brackets), no trailing dot.
    names: Vec<String>,
}

impl AllowedHosts {
    /// Loopback literals and `localhost` always; the listen address unless it is unspecified;
    /// and the configured names.
    pub fn new(listen: SocketAddr, configured: &[String]) -> AllowedHosts {
        let mut names = vec!["localhost".to_string()];
        if !listen.ip().is_unspecified() {
            names.push(listen.ip().to_string());
        }
        names.extend(configured.iter().map(|n| normalize_host(n)));
        AllowedHosts { names }
    }

    /// `host` as written in a `Host` header: name or literal, optional port.
    pub fn allows(&self, host: &str) -> bool {
        let Some(name) = host_without_port(host) else {
            return false;
        };
        let name = normalize_host(name);
        if let Ok(ip) = name.parse::<std::net::IpAddr>() {
            let ip = match ip {
                std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
                v4 => v4,
            };
            if ip.is_loopback() {
                return true;
            }
            return self.names.iter().any(|n| n.parse() == Ok(ip));
        }
        self.names.contains(&name)
    }

    /// An `Origin` or `Referer` value: allowed when it is an http(s) URL whose host is.
    pub fn allows_url(&self, url: &str) -> bool {
        let Ok(uri) = url.parse::<http::Uri>() else {
            return false; // "null" and what is not a URL
        };
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return false; // file:, other schemes
        }
        match uri.authority() {
            Some(authority) if !authority.as_str().contains('@') => self.allows(authority.as_str()),
            _ => false,
        }
    }
}

fn normalize_host(name: &str) -> String {
    let name = name.trim().trim_end_matches('.');
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    name.to_ascii_lowercase()
}

/// The host part of `host[:port]`, `[v6]:port` or a bare IPv6 literal.
fn host_without_port(value: &str) -> Option<&str> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if let Some(rest) = value.strip_prefix('[') {
        let end = rest.find(']')?;
        let after = &rest[end + 1..];
        if !(after.is_empty() || after.starts_with(':')) {
            return None;
        }
        return Some(&rest[..end]);
    }
    match value.matches(':').count() {
        0 => Some(value),
        1 => value.split(':').next(),
        _ => Some(value),
    }
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .merge(dashboard::routes())
        .merge(control::routes())
        .merge(direct::routes())
        .route("/v1/status", get(status))
        .merge(tenants::routes())
        .route("/metrics", get(metrics))
        .route("/v1/reload", post(reload))
        // A feed just over its limit reaches the handler, which refuses it with the reason and
        // counts it; far larger bodies are cut off by the transport limit.
        .route(
            "/v1/load",
            post(push_load).layer(axum::extract::DefaultBodyLimit::max(4 * MAX_FEED_BYTES)),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Runs before every handler, so before any body is read: checks `Host`, and for a write the
/// `Origin`/`Referer` and the token.
async fn guard(
    State(state): State<AdminState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::{header, Method};
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if !host.is_some_and(|h| state.hosts.allows(h)) {
        return (
            StatusCode::FORBIDDEN,
            format!(
                "Host {:?} is not allowed: use a loopback address, or add the name to \
                 [admin] allowed_hosts\n",
                host.unwrap_or("")
            ),
        )
            .into_response();
    }
    let write = !matches!(*request.method(), Method::GET | Method::HEAD);
    if write {
        for name in [header::ORIGIN, header::REFERER] {
            let Some(value) = headers.get(&name) else {
                continue;
            };
            let allowed = value.to_str().is_ok_and(|v| state.hosts.allows_url(v));
            if !allowed {
                return (
                    StatusCode::FORBIDDEN,
                    format!("cross-site write refused ({name} {value:?})\n"),
                )
                    .into_response();
            }
        }
        if let Err(refused) = authorize(&state, headers) {
            return *refused;
        }
    }
    next.run(request).await
}

/// Serves the admin API on `listener` under `limits` (see [`connections`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AdminState,
    limits: connections::ConnectionLimits,
) {
    connections::serve(listener, router(state), limits).await;
}

/// What `/v1/status` returns.
#[derive(Debug, Serialize, Deserialize)]
pub struct StatusView {
    #[serde(flatten)]
    pub control: StatusFields,
    /// Per profile, per endpoint: the weight being served (0 when disabled) and enabled flag.
    pub profiles: BTreeMap<String, BTreeMap<String, EndpointView>>,
    /// Regions with an operator override (forced answer or drain).
    pub regions: BTreeMap<String, String>,
    pub zones: Vec<ZoneView>,
    pub geo: Option<String>,
    pub shield: crate::shield::live::ShieldStatus,
    /// Fleet mode: this node's link to etcd and the control revision it serves.
    #[serde(default)]
    pub fleet: Option<crate::fleet::status::FleetLinkStatus>,
    /// The AF_XDP path, when `[server.xdp]` is configured: attached or why not, per queue.
    #[serde(default)]
    pub xdp: Option<crate::metrics::xdp::XdpView>,
    /// The encrypted transports (`[server.tls]`): listeners, certificate, counters.
    #[serde(default)]
    pub encrypted: Option<crate::metrics::encrypted::EncryptedView>,
    /// DNSSEC, when zones are signed: the signatures' window, the next re-sign or key event,
    /// and every key's state.
    #[serde(default)]
    pub dnssec: Option<DnssecView>,
    /// Endpoint monitors, when any endpoint has one: every target's state, last change, last
    /// error and latency, and each monitored endpoint's state.
    #[serde(default)]
    pub health: Option<crate::health::HealthReport>,
    /// The admin endpoint's connections: open, the cap, closed for silence or a slow head,
    /// evicted and refused (absent from servers older than the cap).
    #[serde(default)]
    pub admin_connections: Option<connections::AdminConnectionsView>,
    /// The descriptor budget the listeners share ([`crate::descriptors`]).
    #[serde(default)]
    pub descriptors: Option<crate::descriptors::DescriptorStatus>,
    /// Safety rules: the configured ids, refusals and overrides counted by rule.
    #[serde(default)]
    pub safety: crate::safety::tally::SafetyStatus,
    /// Practice drills: each one's last run and measured times, alerts, recent runs.
    #[serde(default)]
    pub drills: crate::drill::log::DrillStatus,
    /// Secondary zones (`[[secondary.zone]]`): serial, last transfer in, next refresh,
    /// expired, last refusal.
    #[serde(default)]
    pub secondary: BTreeMap<String, crate::secondary::ZoneStatus>,
    /// Zone transfers out (`[transfer]`; `None`: off): per zone its serial, journal depth,
    /// last transfer out and to whom, last refusal, NOTIFY targets and their acknowledged
    /// serials.
    #[serde(default)]
    pub transfer: Option<BTreeMap<String, transfer::ZoneTransferView>>,
    /// DNS Cookies (`[server.cookies]`; `None`: off): the secret's origin, queries by cookie
    /// verdict, and anycast answers by whether their demand counted.
    #[serde(default)]
    pub cookies: Option<CookieView>,
    /// Zones to sign that are not served because their keys could not be read, and why.
    #[serde(default)]
    pub dnssec_not_served: Vec<crate::snapshot::load::NotServed>,
    /// The daemon's supervised threads and tasks: running, started, ended unexpectedly
    /// (absent from servers older than the supervisor).
    #[serde(default)]
    pub supervisor: Option<SupervisorView>,
    /// Tenants: documents known, served, suspended, refused with the reason (absent from
    /// servers older than tenants).
    #[serde(default)]
    pub tenants: crate::reload::tenants::TenantsStatus,
    /// Cells left out of tenants' answers and the blame for them (absent while none is).
    #[serde(default)]
    pub cells: Option<cells::CellsView>,
    /// Per-tenant response budgets (`[budgets]`; absent when off): engaged or not, the load
    /// and the threshold, responses dropped and truncated over budget.
    #[serde(default)]
    pub budgets: Option<crate::rrl::budget::BudgetStatus>,
}

/// DNS Cookies and the demand they prove, as status shows them.
#[derive(Debug, Serialize, Deserialize)]
pub struct CookieView {
    /// Where the server secret is from (a file, or generated at start).
    pub secret: String,
    /// Queries with a COOKIE option since start, by verdict (`client_only`, `invalid`,
    /// `valid`).
    pub queries: BTreeMap<String, u64>,
    /// Anycast answers since start by whether the shield counted their client, and why.
    pub demand_answers: BTreeMap<String, u64>,
}

fn cookie_view(setup: &crate::snapshot::cookies::CookieSetup) -> CookieView {
    let totals = crate::metrics::serving::serving().totals();
    let queries = crate::dns::cookie::Verdict::ALL
        .iter()
        .map(|v| (v.label().to_string(), totals.cookies[v.index()]))
        .collect();
    let demand_answers = crate::metrics::serving::DEMAND_SOURCE_LABELS
        .iter()
        .zip(totals.demand_sources)
        .map(|(label, n)| (label.to_string(), n))
        .collect();
    CookieView {
        secret: setup.describe(),
        queries,
        demand_answers,
    }
}

/// The DNSSEC state of the snapshot being served.
#[derive(Debug, Serialize, Deserialize)]
pub struct DnssecView {
    pub signed_at: String,
    /// When every zone's signatures are valid (RFC 3339): the latest inception and the
    /// earliest expiration (zones may have their own validity and refresh).
    pub signatures_from: String,
    pub signatures_until: String,
    /// When the server signs again by itself: the next refresh or key event.
    pub next_event: Option<String>,
    /// Pre-signed steered answers.
    pub steered_variants: usize,
    pub zones: Vec<DnssecZoneView>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct DnssecZoneView {
    pub zone: String,
    /// This zone's signatures' inception and expiration (RFC 3339; empty from servers older
    /// than per-zone settings).
    #[serde(default)]
    pub signatures_from: String,
    #[serde(default)]
    pub signatures_until: String,
    /// RRsets signed and NSEC records in the chain.
    pub rrsets: usize,
    pub nsec: usize,
    pub keys: Vec<DnssecKeyView>,
    /// The zone's keys are not of its configured algorithm: they are kept (and rolled over
    /// to keys of their own algorithm) and this says so (`None`: they are).
    #[serde(default)]
    pub algorithm_note: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct DnssecKeyView {
    pub tag: u16,
    pub role: String,
    pub algorithm: u8,
    /// created, published, active, retired or removed (at the time it was signed).
    pub state: String,
    /// The key's next event ("activate at 2026-…").
    pub next_event: Option<String>,
}

fn unix_rfc3339(secs: u64) -> String {
    crate::rfc3339::format_utc(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// The status of what `signing` signed.
pub fn dnssec_view(signing: &crate::dnssec::Signing) -> DnssecView {
    let at = signing.signed_at;
    let valid = signing.valid_everywhere();
    let zones = signing
        .zones
        .iter()
        .map(|(zone, signed)| DnssecZoneView {
            zone: zone.clone(),
            signatures_from: unix_rfc3339(signed.window.inception.into()),
            signatures_until: unix_rfc3339(signed.window.expiration.into()),
            rrsets: signed.rrsets,
            nsec: signed.nsec,
            keys: signing
                .keys
                .iter()
                .filter(|k| k.zone == *zone)
                .map(|k| DnssecKeyView {
                    tag: k.tag,
                    role: k.role.as_str().to_string(),
                    algorithm: k.algorithm,
                    state: k.timing.state(at).to_string(),
                    next_event: k
                        .timing
                        .next_event(at)
                        .map(|(when, what)| format!("{what} at {}", unix_rfc3339(when))),
                })
                .collect(),
            algorithm_note: signed.algorithm_note.clone(),
        })
        .collect();
    DnssecView {
        signed_at: unix_rfc3339(at),
        signatures_from: valid.map_or_else(String::new, |(from, _)| unix_rfc3339(from.into())),
        signatures_until: valid.map_or_else(String::new, |(_, until)| unix_rfc3339(until.into())),
        next_event: signing.next_event().map(unix_rfc3339),
        steered_variants: signing.steered.variants,
        zones,
    }
}

/// The control-plane fields of [`Status`], in a form that also deserializes (for the CLI).
#[derive(Debug, Serialize, Deserialize)]
pub struct StatusFields {
    pub serial: u64,
    pub config_hash: String,
    pub loaded_at: String,
    pub loaded_by: String,
    pub control_file: Option<PathBuf>,
    pub history_dir: Option<PathBuf>,
    pub reloads_accepted: u64,
    pub reloads_refused: u64,
    pub last_reload_ms: f64,
    pub last_refusal: Option<RefusalView>,
    pub warnings: Vec<String>,
    /// The taster (absent from servers older than it).
    #[serde(default)]
    pub taster: crate::taster::TasterStatus,
    /// Times the control file was looked at for a change (events and backstop polls).
    #[serde(default)]
    pub control_checks: u64,
    /// With `[fleet.rollout]`: the config/zone/GeoIP bundles.
    #[serde(default)]
    pub bundle: Option<crate::reload::BundleStatus>,
    /// How this process's first load went (absent from servers older than it).
    #[serde(default)]
    pub startup: crate::reload::StartupStatus,
    /// Where the snapshot served took its zones from: built (and why not as a difference),
    /// shared, the zone cache, or a difference applied (absent from servers older than it).
    #[serde(default)]
    pub zones_from: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RefusalView {
    pub at: String,
    pub trigger: String,
    pub reasons: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct EndpointView {
    /// Weighted profiles only: the weight served (0 when disabled).
    pub weight: Option<u32>,
    pub enabled: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ZoneView {
    pub origin: String,
    pub serial: u32,
}

impl From<Status> for StatusFields {
    fn from(s: Status) -> Self {
        StatusFields {
            serial: s.serial,
            config_hash: s.config_hash,
            loaded_at: s.loaded_at,
            loaded_by: s.loaded_by.to_string(),
            control_file: s.control_file,
            history_dir: s.history_dir,
            reloads_accepted: s.reloads_accepted,
            reloads_refused: s.reloads_refused,
            last_reload_ms: s.last_reload_ms,
            last_refusal: s.last_refusal.map(|r| RefusalView {
                at: r.at,
                trigger: r.trigger.to_string(),
                reasons: r.reasons,
            }),
            warnings: s.warnings,
            taster: s.taster,
            control_checks: s.control_checks,
            bundle: s.bundle,
            startup: s.startup,
            zones_from: s.zones_from,
        }
    }
}

/// Per profile, per endpoint: the weight (weighted profiles only; geo and failover endpoints
/// have none) and whether it is enabled. Shared by `/v1/status` and `steerdns weight show`.
pub fn profile_views(
    policies: &crate::policy::CompiledPolicies,
) -> BTreeMap<String, BTreeMap<String, EndpointView>> {
    let mut profiles = BTreeMap::new();
    for (i, (profile, endpoints)) in policies.endpoint_states().into_iter().enumerate() {
        let weighted = u16::try_from(i)
            .ok()
            .and_then(|i| policies.profile_kind(crate::policy::ProfileId(i)))
            == Some(crate::policy::ProfileKindTag::Weighted);
        let endpoints = endpoints
            .into_iter()
            .map(|(name, weight, enabled)| {
                let weight = weighted.then_some(weight);
                (name, EndpointView { weight, enabled })
            })
            .collect();
        profiles.insert(profile, endpoints);
    }
    profiles
}

/// What `/v1/status` shows; `fleet` is the node's fleet origin (`None`: single node).
/// The budgets of the snapshot in service, with the process's load.
pub fn budget_status(
    snapshot: &crate::snapshot::Snapshot,
) -> Option<crate::rrl::budget::BudgetStatus> {
    let budgets = snapshot.budgets()?;
    Some(crate::rrl::budget::load().status(budgets.limits()))
}

pub fn status_view(
    reloader: &Reloader,
    fleet: Option<&FleetOrigin>,
    supervisor: &SupervisorStatus,
) -> StatusView {
    // The fleet link first: the reloader publishes a refusal before the origin names the
    // revision refused, so a link that names one is never paired with an older status.
    let fleet = fleet.map(FleetOrigin::link);
    let (snapshot, status) = reloader.snapshot_and_status();
    let mut profiles = BTreeMap::new();
    let mut regions = BTreeMap::new();
    let mut geo = None;
    if let Some(steering) = snapshot.steering() {
        let policies = &steering.policies;
        profiles = profile_views(policies);
        for (i, name) in policies.region_names().enumerate() {
            let text = match policies.region_override(i as u16) {
                RegionOverride::None => continue,
                RegionOverride::Forced(d) => format!("forced {}", destination_name(policies, d)),
                RegionOverride::Drained(d) => {
                    format!("drained to {}", destination_name(policies, d))
                }
            };
            regions.insert(name.to_string(), text);
        }
        geo = Some(match steering.locator.degraded() {
            Some(reason) => format!("degraded: {reason}"),
            None => "ok".to_string(),
        });
    }
    let zones = snapshot
        .zones()
        .zones()
        .iter()
        .map(|z| ZoneView {
            origin: z.origin.to_string(),
            serial: z.serial,
        })
        .collect();
    StatusView {
        control: status.into(),
        profiles,
        regions,
        zones,
        geo,
        shield: reloader.shield().status(),
        fleet,
        xdp: crate::metrics::xdp::view(),
        encrypted: crate::metrics::encrypted::view(snapshot.tls()),
        dnssec: snapshot.dnssec().map(dnssec_view),
        health: reloader.health().report(snapshot.policies()),
        cookies: snapshot.options().cookies.as_ref().map(cookie_view),
        dnssec_not_served: snapshot.dnssec_not_served().to_vec(),
        admin_connections: Some(connections::view()),
        descriptors: Some(crate::descriptors::status()),
        safety: crate::safety::tally::status(),
        drills: crate::drill::log::status(),
        secondary: secondary_view(&snapshot),
        transfer: transfer::view(&snapshot),
        tenants: reloader.tenants().status(),
        cells: cells::view(
            snapshot.policies(),
            &cells::LiveCells::of(&snapshot),
            reloader.tenants(),
        ),
        budgets: budget_status(&snapshot),
        supervisor: Some(supervisor.view()),
    }
}

/// The secondary zones' status, each with the serial of the snapshot this status is made
/// from: the transfer task records its serial just after the swap, and status must never show
/// a serial the answers do not (or the other way round).
fn secondary_view(
    snapshot: &crate::snapshot::Snapshot,
) -> BTreeMap<String, crate::secondary::ZoneStatus> {
    let mut zones = crate::secondary::status().snapshot();
    for (name, status) in zones.iter_mut() {
        status.serial = snapshot
            .zones()
            .zones()
            .iter()
            .find(|z| {
                z.origin
                    .to_ascii()
                    .trim_end_matches('.')
                    .eq_ignore_ascii_case(name)
            })
            .map(|z| z.serial);
    }
    zones
}

fn destination_name(
    policies: &crate::policy::CompiledPolicies,
    d: crate::policy::Destination,
) -> String {
    use crate::policy::Destination;
    match d {
        Destination::Global => "global".into(),
        Destination::Region(r) => policies
            .regions()
            .get(r as usize)
            .map_or("?".into(), |x| x.name.clone()),
        Destination::Fallback(s) => policies
            .fallback_sites()
            .get(s as usize)
            .map_or("?".into(), |x| x.name.clone()),
    }
}

async fn status(State(state): State<AdminState>) -> Response {
    // Reads what the reloader published: never waits for a reload in progress (which holds
    // the reloader's lock across the history's fsyncs), so it can run on an async worker.
    Json(status_view(
        &state.reloader,
        state.fleet.as_deref(),
        &state.supervisor,
    ))
    .into_response()
}

/// `GET /metrics`: Prometheus text format (see [`crate::metrics`]).
async fn metrics(State(state): State<AdminState>) -> Response {
    use axum::http::header::CONTENT_TYPE;
    match metrics::render(&state.reloader, state.fleet.as_deref(), &state.supervisor) {
        Ok(text) => ([(CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {e}\n"),
        )
            .into_response(),
    }
}

/// `POST /v1/reload` (authorized by [`guard`]). The body is ignored, but taken (as
/// [`axum::body::Bytes`]) so that [`MAX_BODY`] applies: an oversized one is refused with 413.
/// The token file is re-read too (a replaced file rotates the token).
async fn reload(State(state): State<AdminState>, _body: axum::body::Bytes) -> Response {
    let reloader = state.reloader.clone();
    let token = state.token.clone();
    let result = tokio::task::spawn_blocking(move || {
        let result = reloader.reload(Trigger::Api);
        token.reread();
        result
    })
    .await;
    match result {
        Ok(Ok(accepted)) => (
            StatusCode::OK,
            Json(serde_json::json!({"accepted": accepted})),
        )
            .into_response(),
        Ok(Err(reasons)) => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({"refused": reasons})),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reload task failed: {e}\n"),
        )
            .into_response(),
    }
}

/// A load feed pushed over HTTP (authorized by [`guard`]): validated whole (refused with the
/// reason, 400), then it is the latest feed the shield decides on.
async fn push_load(State(state): State<AdminState>, body: axum::body::Bytes) -> Response {
    if body.len() > MAX_FEED_BYTES {
        let error = FeedError::TooLarge {
            size: body.len() as u64,
            limit: MAX_FEED_BYTES,
        };
        let shield = state.reloader.shield();
        shield
            .feed
            .refuse(FeedOrigin::Http, &error, std::time::SystemTime::now());
        return (StatusCode::PAYLOAD_TOO_LARGE, format!("refused: {error}\n")).into_response();
    }
    let snapshot = state.reloader.snapshot().load();
    let Some(steering) = snapshot.steering() else {
        return (
            StatusCode::CONFLICT,
            "no topology configured: nothing to shield\n",
        )
            .into_response();
    };
    let known = crate::shield::live::KnownNames::of(&steering.policies);
    let shield = state.reloader.shield();
    match shield.feed.offer(
        &body,
        FeedOrigin::Http,
        &known.names(),
        std::time::SystemTime::now(),
    ) {
        Ok(()) => (StatusCode::OK, "accepted\n").into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("refused: {e}\n")).into_response(),
    }
}

/// Checks `Authorization: Bearer <token>` in constant time; `Err` is the refusal to send.
fn authorize(state: &AdminState, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    match state.token.check(presented) {
        Ok(()) => Ok(()),
        Err(token::TokenCheck::Disabled(reason)) => Err(Box::new(
            (
                StatusCode::FORBIDDEN,
                format!("writes are disabled: {reason}\n"),
            )
                .into_response(),
        )),
        Err(token::TokenCheck::Wrong) => Err(Box::new(
            (StatusCode::UNAUTHORIZED, "missing or wrong admin token\n").into_response(),
        )),
    }
}

/// Compares without an early exit, so timing does not reveal how much of a token matched.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() ^ b.len()) as u8 | u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xFF);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_exactly() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn hosts_allowed_are_loopback_localhost_listen_and_configured() {
        let hosts = AllowedHosts::new(
            "127.0.0.1:5380".parse().unwrap(),
            &["Admin.Example.NET.".to_string()],
        );
        for ok in [
            "127.0.0.1:5380",
            "127.0.0.1",
            "127.1.2.3:80",
            "[::1]:5380",
            "::1",
            "[::ffff:127.0.0.1]:5380",
            "localhost:5380",
            "LOCALHOST",
            "admin.example.net:5380",
            "admin.example.net.",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example",
            "evil.example:5380",
            "localhost.evil.example",
            "192.0.2.1:5380",
            "[::1",
            "[::1]x",
            "127.0.0.1.evil.example",
        ] {
            assert!(!hosts.allows(bad), "{bad}");
        }
        assert!(hosts.allows_url("http://127.0.0.1:5380"));
        assert!(hosts.allows_url("http://localhost:5380/dashboard?x=1"));
        assert!(hosts.allows_url("HTTP://LOCALHOST:5380"));
        for bad in [
            "null",
            "http://evil.example",
            "https://evil.example/http://127.0.0.1",
            "http://127.0.0.1@evil.example/",
            "http://evil.example#@127.0.0.1",
            "HTTP://evil.example",
            "file:///etc",
        ] {
            assert!(!hosts.allows_url(bad), "{bad}");
        }
        let public = AllowedHosts::new("192.0.2.7:5380".parse().unwrap(), &[]);
        assert!(public.allows("192.0.2.7:5380"));
        assert!(!public.allows("192.0.2.8:5380"));
    }
}
