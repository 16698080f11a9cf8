//! DNS over QUIC (RFC 9250) on quinn: one query per bidirectional stream, framed with a
//! two-byte length like TCP, answered on the same stream, which we then finish.
//!
//! A client's address is validated before it takes anything: a first Initial from an address
//! not yet proven gets a stateless Retry (so a spoofed source can neither take someone's share
//! of connections nor make us send more than a Retry). Then the limits of [`super::Limits`]:
//! connections at once and per client, the handshake timeout, an idle timeout (also QUIC's
//! own idle timeout), a frame timeout per query, queries per connection -- and at most
//! [`MAX_STREAMS`] queries in flight per connection (QUIC stream credit). Every handshake and
//! every stream runs in its own task.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quinn::crypto::rustls::QuicServerConfig;
use quinn::{Connection, Endpoint, RecvStream, SendStream, VarInt};
use tokio::task::JoinSet;

use super::{answer_bytes, server_config, Limits};
use crate::dns::wire::{Requester, Transport};
use crate::metrics::serving::{serving, ConnectionEvent};
use crate::server::admission::{Admission, Admitted};
use crate::snapshot::SharedSnapshot;

/// RFC 9250's ALPN token.
pub const DOQ_ALPN: &[u8] = b"doq";
/// Queries (bidirectional streams) a client may have open on one connection.
pub const MAX_STREAMS: u32 = 100;

/// RFC 9250 §4.3 error codes.
const DOQ_NO_ERROR: u32 = 0x0;
const DOQ_PROTOCOL_ERROR: u32 = 0x2;

#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    #[error("TLS configuration: {0}")]
    Tls(#[from] tokio_rustls::rustls::Error),
    #[error("QUIC needs TLS 1.3: {0}")]
    Crypto(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A QUIC endpoint on `socket` (bound, non-blocking) serving DoQ with the snapshot's
/// certificate. Must be called inside the tokio runtime.
pub fn endpoint(
    socket: std::net::UdpSocket,
    snapshot: &SharedSnapshot,
    limits: &Limits,
) -> Result<Endpoint, QuicError> {
    let tls = server_config(snapshot, &[DOQ_ALPN], true)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(tls)?));
    let mut transport = quinn::TransportConfig::default();
    transport
        .max_concurrent_bidi_streams(VarInt::from_u32(MAX_STREAMS))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .datagram_receive_buffer_size(None)
        .max_idle_timeout(
            quinn::IdleTimeout::try_from(limits.connection.admission.idle_timeout).ok(),
        );
    config.transport_config(Arc::new(transport));
    let runtime = Arc::new(quinn::TokioRuntime);
    Ok(Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(config),
        socket,
        runtime,
    )?)
}

/// Accepts DoQ connections until the endpoint closes.
pub async fn serve_doq(endpoint: Endpoint, snapshot: SharedSnapshot, limits: Limits) {
    let admission = Admission::new(Transport::Quic, limits.connection.admission.clone());
    let limits = Arc::new(limits);
    loop {
        let Some(incoming) = endpoint.accept().await else {
            return;
        };
        if !incoming.remote_address_validated() && incoming.may_retry() {
            // Stateless: the client comes back with a token proving its address.
            let _ = incoming.retry();
            continue;
        }
        let client = Requester::new(incoming.remote_address().ip(), Transport::Quic);
        let Some(admitted) = admission.admit(client.addr) else {
            incoming.refuse();
            continue;
        };
        let snapshot = snapshot.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let shaken = admitted.unless_reaped(handshake(incoming, limits.handshake_timeout));
            if let Some(connection) = shaken.await.flatten() {
                serve_connection(connection, client, snapshot, &limits, &admitted).await;
            }
            drop(admitted);
        });
    }
}

async fn handshake(incoming: quinn::Incoming, limit: Duration) -> Option<Connection> {
    let failed = || serving().record_connection(Transport::Quic, ConnectionEvent::HandshakeFailed);
    let Ok(connecting) = incoming.accept() else {
        failed();
        return None;
    };
    match tokio::time::timeout(limit, connecting).await {
        Ok(Ok(connection)) => Some(connection),
        Ok(Err(e)) => {
            tracing::debug!("doq handshake failed: {e}");
            failed();
            None
        }
        Err(_) => {
            serving().record_connection(Transport::Quic, ConnectionEvent::HandshakeTimeout);
            None
        }
    }
}

/// One connection: each stream is a query, answered in a task of its own; after
/// `max_queries_per_connection` streams (or the idle timeout without one) the answers in
/// flight are given the frame timeout to finish and the connection is closed.
async fn serve_connection(
    connection: Connection,
    client: Requester,
    snapshot: SharedSnapshot,
    limits: &Limits,
    admitted: &Admitted,
) {
    let frame_timeout = limits.connection.frame_timeout;
    let mut streams = JoinSet::new();
    for _ in 0..limits.connection.max_queries_per_connection {
        if admitted.lifetime_over() {
            break;
        }
        let Ok(Ok((send, recv))) = admitted.idle(connection.accept_bi()).await else {
            break;
        };
        admitted.query_complete();
        let snapshot = snapshot.clone();
        streams.spawn(async move {
            answer_stream(send, recv, &client, &snapshot, frame_timeout).await;
        });
        while streams.try_join_next().is_some() {}
    }
    let _ = tokio::time::timeout(frame_timeout, async {
        while streams.join_next().await.is_some() {}
    })
    .await;
    connection.close(VarInt::from_u32(DOQ_NO_ERROR), b"");
}

/// Reads one query from `recv`, answers it on `send` and finishes the stream.
async fn answer_stream(
    mut send: SendStream,
    mut recv: RecvStream,
    client: &Requester,
    snapshot: &SharedSnapshot,
    frame_timeout: Duration,
) {
    let read = async {
        let mut len = [0u8; 2];
        recv.read_exact(&mut len).await.ok()?;
        let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
        recv.read_exact(&mut query).await.ok()?;
        Some(query)
    };
    let query = match tokio::time::timeout(frame_timeout, read).await {
        Ok(Some(query)) => query,
        Ok(None) => return, // the client reset or finished the stream early
        Err(_) => {
            serving().record_connection(Transport::Quic, ConnectionEvent::FrameTimeout);
            let _ = recv.stop(VarInt::from_u32(DOQ_PROTOCOL_ERROR));
            let _ = send.reset(VarInt::from_u32(DOQ_PROTOCOL_ERROR));
            return;
        }
    };
    let Some(answer) = answer_bytes(snapshot, &query, client) else {
        // Not a DNS query at all (RFC 9250 §4.3.3: a protocol error on this stream).
        let _ = send.reset(VarInt::from_u32(DOQ_PROTOCOL_ERROR));
        return;
    };
    let Ok(len) = u16::try_from(answer.len()) else {
        return;
    };
    let mut chunks = [Bytes::copy_from_slice(&len.to_be_bytes()), answer];
    let written = tokio::time::timeout(frame_timeout, send.write_all_chunks(&mut chunks)).await;
    if matches!(written, Ok(Ok(()))) && send.finish().is_ok() {
        // Wait until the client has acknowledged the answer: the connection is closed once
        // its last stream is done, and a QUIC close discards stream data still unacknowledged
        // (on a busy machine the last answer of a connection was lost that way).
        let _ = tokio::time::timeout(frame_timeout, send.stopped()).await;
    }
}
