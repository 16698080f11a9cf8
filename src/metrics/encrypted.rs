//! The encrypted transports (`[server.tls]`) as `/v1/status` and `/metrics` show them: the
//! listeners this process serves (recorded once at startup), the certificate in service (from
//! the snapshot) and each transport's connection counters (from [`mod@super::serving`]).

use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::serving::{
    serving, transport_index, ConnectionEvent, ServingTotals, ENCRYPTED, TRANSPORTS,
};
use crate::dns::wire::Transport;

/// The encrypted transports, in [`ENCRYPTED`] order.
pub const TRANSPORTS_ENCRYPTED: [Transport; 3] =
    [Transport::Tls, Transport::Https, Transport::Quic];

static LISTENERS: Mutex<Vec<ListenerView>> = Mutex::new(Vec::new());

/// Records a listener that serves (called at startup, once per bound address).
pub fn add_listener(transport: Transport, addr: SocketAddr) {
    let name = TRANSPORTS[transport_index(transport)].to_string();
    LISTENERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(ListenerView {
            transport: name,
            addr,
        });
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ListenerView {
    /// "tls" (DoT), "https" (DoH) or "quic" (DoQ).
    pub transport: String,
    pub addr: SocketAddr,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CertificateView {
    pub cert: String,
    pub key: String,
    /// The leaf's notAfter, RFC 3339 UTC.
    pub not_after: String,
    pub not_after_unix: i64,
    pub days_left: i64,
    /// Expired, not yet valid, or expiring within 30 days.
    pub warning: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TransportView {
    pub transport: String,
    pub queries: u64,
    pub connections_open: i64,
    pub connections_accepted: u64,
    pub refused_per_client: u64,
    pub handshake_failed: u64,
    pub handshake_timeout: u64,
    pub frame_timeout: u64,
    pub bad_request: u64,
    /// Closed at once with every slot taken and no holder that could be taken back.
    #[serde(default)]
    pub refused_full: u64,
    #[serde(default)]
    pub idle_timeout: u64,
    /// Taken back while idle for a newcomer (the slots were filling).
    #[serde(default)]
    pub closed_idle_to_make_room: u64,
    /// Taken back mid-query (or stuck answering) for a newcomer to full slots.
    #[serde(default)]
    pub closed_stalled_to_make_room: u64,
    #[serde(default)]
    pub closed_at_lifetime: u64,
}

/// `/v1/status`'s `encrypted` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EncryptedView {
    pub listeners: Vec<ListenerView>,
    pub certificate: Option<CertificateView>,
    pub transports: Vec<TransportView>,
}

/// The certificate as status shows it.
pub fn certificate_view(material: &crate::tls::Material, now: i64) -> CertificateView {
    CertificateView {
        cert: material.cert_path.display().to_string(),
        key: material.key_path.display().to_string(),
        not_after: crate::rfc3339::format_utc(
            UNIX_EPOCH + Duration::from_secs(u64::try_from(material.not_after).unwrap_or(0)),
        ),
        not_after_unix: material.not_after,
        days_left: material.days_left(now),
        warning: material.warning(now),
    }
}

/// Each encrypted transport's counters from a set of totals.
pub fn transport_views(totals: &ServingTotals) -> Vec<TransportView> {
    let event = |t: usize, e: ConnectionEvent| totals.encrypted_events[t][e.index()];
    TRANSPORTS_ENCRYPTED
        .iter()
        .enumerate()
        .map(|(t, transport)| TransportView {
            transport: ENCRYPTED[t].to_string(),
            queries: totals.queries[transport_index(*transport)],
            connections_open: totals.encrypted_open[t],
            connections_accepted: totals.encrypted_accepted[t],
            refused_per_client: event(t, ConnectionEvent::RefusedPerClient),
            handshake_failed: event(t, ConnectionEvent::HandshakeFailed),
            handshake_timeout: event(t, ConnectionEvent::HandshakeTimeout),
            frame_timeout: event(t, ConnectionEvent::FrameTimeout),
            bad_request: event(t, ConnectionEvent::BadRequest),
            refused_full: event(t, ConnectionEvent::RefusedFull),
            idle_timeout: event(t, ConnectionEvent::IdleTimeout),
            closed_idle_to_make_room: event(t, ConnectionEvent::Reaped),
            closed_stalled_to_make_room: event(t, ConnectionEvent::ReapedStalled),
            closed_at_lifetime: event(t, ConnectionEvent::Lifetime),
        })
        .collect()
}

/// The encrypted transports' status; `None` when none is configured.
pub fn view(material: Option<&crate::tls::Material>) -> Option<EncryptedView> {
    let listeners = LISTENERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if listeners.is_empty() && material.is_none() {
        return None;
    }
    let now = crate::tls::unix_now();
    Some(EncryptedView {
        listeners,
        certificate: material.map(|m| certificate_view(m, now)),
        transports: transport_views(&serving().totals()),
    })
}
