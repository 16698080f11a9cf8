//! The admin HTTP endpoint (loopback by default): `GET /v1/status` for operators and the CLI,
//! `POST /v1/reload` (token required) to taste and swap in the current files.
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

use crate::policy::RegionOverride;
use crate::reload::{Reloader, Status, Trigger};
use crate::shield::feed::{FeedError, MAX_FEED_BYTES};
use crate::shield::source::FeedOrigin;

mod dashboard;

/// Largest request body accepted (the load feed, later, is the biggest legitimate one).
pub const MAX_BODY: usize = 1 << 20;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where the admin endpoint listens; loopback by default. Port 0 picks a free port.
    pub listen: SocketAddr,
    /// File holding the token that writes (`POST`) must present as `Authorization: Bearer`.
    /// Unset or unreadable: writes are refused.
    pub token_file: Option<PathBuf>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 5380)),
            token_file: None,
        }
    }
}

#[derive(Clone)]
pub struct AdminState {
    pub reloader: Arc<Reloader>,
    pub token: Option<Arc<str>>,
}

/// Reads the token file: its first line, trimmed; `None` if unset, unreadable or empty.
pub fn read_token(path: Option<&PathBuf>) -> Option<Arc<str>> {
    let text = std::fs::read_to_string(path?).ok()?;
    let token = text.lines().next()?.trim();
    (!token.is_empty()).then(|| Arc::from(token))
}

pub fn router(state: AdminState) -> Router {
    Router::new()
        .merge(dashboard::routes())
        .route("/v1/status", get(status))
        .route("/metrics", get(metrics))
        .route("/v1/reload", post(reload))
        // A feed just over its limit reaches the handler, which refuses it with the reason and
        // counts it; far larger bodies are cut off by the transport limit.
        .route(
            "/v1/load",
            post(push_load).layer(axum::extract::DefaultBodyLimit::max(4 * MAX_FEED_BYTES)),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

pub async fn serve(listener: tokio::net::TcpListener, state: AdminState) {
    if let Err(e) = axum::serve(listener, router(state)).await {
        tracing::error!("admin endpoint stopped: {e}");
    }
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
    /// The AF_XDP path, when `[server.xdp]` is configured: attached or why not, per queue.
    #[serde(default)]
    pub xdp: Option<crate::metrics::xdp::XdpView>,
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

pub fn status_view(reloader: &Reloader) -> StatusView {
    let (snapshot, status) = reloader.snapshot_and_status();
    let mut profiles = BTreeMap::new();
    let mut regions = BTreeMap::new();
    let mut geo = None;
    if let Some(steering) = &snapshot.steering {
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
        .zones
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
        xdp: crate::metrics::xdp::view(),
    }
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
    Json(status_view(&state.reloader)).into_response()
}

/// `GET /metrics`: Prometheus text format (see [`crate::metrics`]).
async fn metrics(State(state): State<AdminState>) -> Response {
    use axum::http::header::CONTENT_TYPE;
    match crate::metrics::render(&state.reloader) {
        Ok(text) => ([(CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {e}\n"),
        )
            .into_response(),
    }
}

/// `POST /v1/reload`. The body is ignored, but taken (as [`axum::body::Bytes`]) so that
/// [`MAX_BODY`] applies: an oversized one is refused with 413 before anything else.
async fn reload(
    State(state): State<AdminState>,
    headers: HeaderMap,
    _body: axum::body::Bytes,
) -> Response {
    if let Err(refused) = authorize(&state, &headers) {
        return *refused;
    }
    let reloader = state.reloader.clone();
    let result = tokio::task::spawn_blocking(move || reloader.reload(Trigger::Api)).await;
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

/// A load feed pushed over HTTP: validated whole (refused with the reason, 400), then it is
/// the latest feed the shield decides on.
async fn push_load(
    State(state): State<AdminState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let authorized = authorize(&state, &headers);
    if body.len() > MAX_FEED_BYTES {
        let error = FeedError::TooLarge {
            size: body.len() as u64,
            limit: MAX_FEED_BYTES,
        };
        if authorized.is_ok() {
            let shield = state.reloader.shield();
            shield
                .feed
                .refuse(FeedOrigin::Http, &error, std::time::SystemTime::now());
        }
        return (StatusCode::PAYLOAD_TOO_LARGE, format!("refused: {error}\n")).into_response();
    }
    if let Err(refused) = authorized {
        return *refused;
    }
    let snapshot = state.reloader.snapshot().load();
    let Some(steering) = &snapshot.steering else {
        return (
            StatusCode::CONFLICT,
            "no topology configured: nothing to shield\n",
        )
            .into_response();
    };
    let regions: Vec<&str> = steering.policies.region_names().collect();
    let sites: Vec<&str> = steering
        .policies
        .fallback_sites()
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    let shield = state.reloader.shield();
    match shield.feed.offer(
        &body,
        FeedOrigin::Http,
        &regions,
        &sites,
        std::time::SystemTime::now(),
    ) {
        Ok(()) => (StatusCode::OK, "accepted\n").into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, format!("refused: {e}\n")).into_response(),
    }
}

/// Checks `Authorization: Bearer <token>` in constant time; `Err` is the refusal to send.
fn authorize(state: &AdminState, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let Some(expected) = &state.token else {
        return Err(Box::new(
            (
                StatusCode::FORBIDDEN,
                "writes are disabled: no admin token configured ([admin] token_file)\n",
            )
                .into_response(),
        ));
    };
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err(Box::new(
            (StatusCode::UNAUTHORIZED, "missing or wrong admin token\n").into_response(),
        ))
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
}
