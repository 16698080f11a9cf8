//! The encrypted transports (`[server.tls]`): DNS over TLS (RFC 7858, here), over HTTPS
//! ([`https`], RFC 8484) and over QUIC ([`quic`], RFC 9250). Each terminates its transport
//! and hands the query's wire bytes to [`crate::answer::respond`] with the snapshot in
//! service -- the same answers, ECS, steering and counters as UDP and TCP, labelled by
//! transport; like TCP they are never rate limited (the handshake proves the source).
//!
//! Owned here: the accept loops and their limits. Who gets a slot and for how long is
//! [`crate::server::admission`]'s, the same mechanism as TCP's with each transport's own
//! numbers: `max_connections` at once (a newcomer to full slots takes back the worst holder,
//! never waits), `max_connections_per_client` per client prefix, idle time shrinking as slots
//! fill (a handshake in progress counts as idle), a lifetime. Here: a
//! handshake timeout, a frame timeout and `max_queries_per_connection`. Every handshake runs
//! in its own task, so a client that stalls one holds nothing but its own slot; none of it
//! shares a thread or a socket with the UDP workers.
//!
//! The certificate comes from the snapshot at each handshake ([`CertResolver`]): a reload
//! that read a new certificate and key (validated during the load) puts them in service with
//! the rest of the snapshot; a refused reload keeps the old ones.

pub mod https;
pub mod quic;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::admission::{Admission, AdmissionLimits};
use super::tcp::{accept, secs, serve_stream, TcpLimits};
use crate::answer::respond;
use crate::config::{TcpConfig, TlsConfig};
use crate::dns::wire::{Requester, Transport, MAX_MESSAGE};
use crate::metrics::serving::{serving, ConnectionEvent};
use crate::snapshot::SharedSnapshot;

/// The limits of one encrypted transport: TCP's per-connection limits and a handshake timeout.
#[derive(Debug, Clone)]
pub struct Limits {
    pub connection: TcpLimits,
    pub handshake_timeout: Duration,
}

impl Limits {
    /// The limits of `[server.tls]` (timeouts of at least a second); a client is a prefix of
    /// `[server.tcp]`'s lengths, as on TCP.
    pub fn from_config(tls: &TlsConfig, tcp: &TcpConfig) -> Limits {
        Limits {
            connection: TcpLimits {
                admission: AdmissionLimits {
                    max_connections: tls.max_connections,
                    max_connections_per_client: tls.max_connections_per_client,
                    client_prefix_v4: tcp.client_prefix_v4,
                    client_prefix_v6: tcp.client_prefix_v6,
                    idle_timeout: secs(tls.idle_timeout_secs),
                    busy_idle_timeout: Duration::from_millis(tls.busy_idle_timeout_ms),
                    max_connection_lifetime: secs(tls.max_connection_lifetime_secs),
                },
                frame_timeout: secs(tls.frame_timeout_secs),
                max_queries_per_connection: tls.max_queries_per_connection,
            },
            handshake_timeout: secs(tls.handshake_timeout_secs),
        }
    }
}

/// Hands rustls the certificate of the snapshot in service, at every handshake.
pub struct CertResolver {
    snapshot: SharedSnapshot,
}

impl std::fmt::Debug for CertResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CertResolver (the snapshot's certificate)")
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.snapshot.load().tls().map(|m| m.certified.clone())
    }
}

/// A rustls server configuration (ring provider) offering `alpn`; TLS 1.3 only with `tls13`
/// (QUIC), else TLS 1.2 and 1.3.
pub fn server_config(
    snapshot: &SharedSnapshot,
    alpn: &[&[u8]],
    tls13: bool,
) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if tls13 {
        &[&rustls::version::TLS13]
    } else {
        rustls::DEFAULT_VERSIONS
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(CertResolver {
            snapshot: snapshot.clone(),
        }));
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

thread_local! {
    /// One response buffer per runtime thread: the responder writes here and the answer is
    /// copied out at its size (HTTP/2 and QUIC take owned bytes).
    static RESPONSE: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; MAX_MESSAGE]);
}

/// Answers `query` with the snapshot in service; `None` when the responder stays silent (not
/// a DNS query at all).
pub(crate) fn answer_bytes(
    snapshot: &SharedSnapshot,
    query: &[u8],
    client: &Requester,
) -> Option<bytes::Bytes> {
    RESPONSE.with(|buffer| {
        let mut buffer = buffer.try_borrow_mut().ok()?;
        let current = snapshot.load();
        let n = respond(&current, query, client, &mut buffer)?;
        Some(bytes::Bytes::copy_from_slice(buffer.get(..n)?))
    })
}

/// Runs a TLS handshake within the handshake timeout; failures and timeouts are counted.
pub(crate) async fn handshake(
    acceptor: &TlsAcceptor,
    stream: tokio::net::TcpStream,
    transport: Transport,
    limit: Duration,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    let _ = stream.set_nodelay(true);
    match tokio::time::timeout(limit, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(e)) => {
            tracing::debug!("{transport:?} handshake failed: {e}");
            serving().record_connection(transport, ConnectionEvent::HandshakeFailed);
            None
        }
        Err(_) => {
            serving().record_connection(transport, ConnectionEvent::HandshakeTimeout);
            None
        }
    }
}

/// DNS over TLS: accepts connections until the task is dropped; each is a TLS session
/// carrying RFC 7766 framed queries, served like a TCP connection.
pub async fn serve_dot(
    listener: TcpListener,
    snapshot: SharedSnapshot,
    limits: Limits,
) -> Result<(), rustls::Error> {
    let acceptor = TlsAcceptor::from(server_config(&snapshot, &[b"dot"], false)?);
    let admission = Admission::new(Transport::Tls, limits.connection.admission.clone());
    let limits = Arc::new(limits);
    loop {
        let (stream, peer) = accept(&listener).await;
        let client = Requester::new(peer.ip(), Transport::Tls);
        let Some(admitted) = admission.admit(client.addr) else {
            continue;
        };
        let snapshot = snapshot.clone();
        let limits = limits.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let limit = limits.handshake_timeout;
            let shaken =
                admitted.unless_reaped(handshake(&acceptor, stream, Transport::Tls, limit));
            if let Some(tls) = shaken.await.flatten() {
                let served = serve_stream(tls, client, &snapshot, &limits.connection, &admitted);
                if let Err(e) = served.await {
                    tracing::debug!("dot connection from {peer}: {e}");
                }
            }
            drop(admitted);
        });
    }
}
