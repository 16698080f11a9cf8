//! The encrypted transports (`[server.tls]`): DNS over TLS (RFC 7858, here), over HTTPS
//! ([`https`], RFC 8484) and over QUIC ([`quic`], RFC 9250). Each terminates its transport
//! and hands the query's wire bytes to [`crate::answer::respond`] with the snapshot in
//! service -- the same answers, ECS, steering and counters as UDP and TCP, labelled by
//! transport; like TCP they are never rate limited (the handshake proves the source).
//!
//! Owned here: the accept loops and their limits. Per transport, `max_connections` at once
//! (further ones wait in the kernel's backlog), `max_connections_per_client` per client (an
//! IPv4 address or an IPv6 /64; further ones are closed at once), a handshake timeout, an
//! idle timeout, a frame timeout and `max_queries_per_connection`. Every handshake runs in
//! its own task, so a client that stalls one holds nothing but its own slot; none of it
//! shares a thread or a socket with the UDP workers.
//!
//! The certificate comes from the snapshot at each handshake ([`CertResolver`]): a reload
//! that read a new certificate and key (validated during the load) puts them in service with
//! the rest of the snapshot; a refused reload keeps the old ones.

pub mod https;
pub mod quic;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::tcp::{accept, serve_stream, ClientConnections, TcpLimits};
use crate::answer::respond;
use crate::config::TlsConfig;
use crate::dns::wire::{Client, Transport, MAX_MESSAGE};
use crate::metrics::serving::{serving, EncryptedEvent};
use crate::snapshot::SharedSnapshot;

/// The limits of one encrypted transport: TCP's per-connection limits and a handshake timeout.
#[derive(Debug, Clone)]
pub struct Limits {
    pub connection: TcpLimits,
    pub handshake_timeout: Duration,
}

impl Limits {
    /// The limits of `[server.tls]` (timeouts of at least a second).
    pub fn from_config(tls: &TlsConfig) -> Limits {
        let secs = |s: u64| Duration::from_secs(s.max(1));
        Limits {
            connection: TcpLimits {
                idle_timeout: secs(tls.idle_timeout_secs),
                max_connections: tls.max_connections,
                max_connections_per_client: tls.max_connections_per_client,
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

/// Whose share of connections a connection from `addr` counts against: the address for IPv4,
/// the /64 for IPv6 (one host commonly holds a whole /64).
pub fn client_key(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

/// Counts open connections per client, and all of them, for one listener.
pub(crate) struct Admission {
    slots: Arc<Semaphore>,
    per_client: Arc<ClientConnections>,
    transport: Transport,
}

/// A connection's place: released (and counted closed) when dropped.
pub(crate) struct Admitted {
    _slot: tokio::sync::OwnedSemaphorePermit,
    _share: super::tcp::ClientConnection,
    _open: crate::metrics::serving::EncryptedConnection<'static>,
}

impl Admission {
    pub(crate) fn new(transport: Transport, limits: &TcpLimits) -> Admission {
        Admission {
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            per_client: Arc::new(ClientConnections::new(limits.max_connections_per_client)),
            transport,
        }
    }

    /// Waits for a free slot (connections wait in the kernel's backlog meanwhile).
    pub(crate) async fn slot(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.slots.clone().acquire_owned().await.ok()
    }

    /// Admits a connection from `client` into `slot`, or `None` (counted) when the client
    /// already holds its share.
    pub(crate) fn admit(
        &self,
        slot: tokio::sync::OwnedSemaphorePermit,
        client: &Client,
    ) -> Option<Admitted> {
        let Some(share) = self.per_client.open(client_key(client.addr)) else {
            serving().record_encrypted(self.transport, EncryptedEvent::RefusedPerClient);
            return None;
        };
        Some(Admitted {
            _slot: slot,
            _share: share,
            _open: serving().encrypted_connection(self.transport),
        })
    }
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
    client: &Client,
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
            serving().record_encrypted(transport, EncryptedEvent::HandshakeFailed);
            None
        }
        Err(_) => {
            serving().record_encrypted(transport, EncryptedEvent::HandshakeTimeout);
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
    let admission = Admission::new(Transport::Tls, &limits.connection);
    let limits = Arc::new(limits);
    loop {
        let Some(slot) = admission.slot().await else {
            return Ok(());
        };
        let (stream, peer) = accept(&listener).await;
        let client = Client::new(peer.ip(), Transport::Tls);
        let Some(admitted) = admission.admit(slot, &client) else {
            continue;
        };
        let snapshot = snapshot.clone();
        let limits = limits.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let limit = limits.handshake_timeout;
            if let Some(tls) = handshake(&acceptor, stream, Transport::Tls, limit).await {
                if let Err(e) = serve_stream(tls, client, &snapshot, &limits.connection).await {
                    tracing::debug!("dot connection from {peer}: {e}");
                }
            }
            drop(admitted);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_share_their_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key(c));
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(client_key(v4), v4);
    }
}
