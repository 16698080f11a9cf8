//! DNS over HTTPS (RFC 8484) on HTTP/2: `GET /dns-query?dns=<base64url>` and
//! `POST /dns-query` with an `application/dns-message` body. Each request's query goes to
//! the responder like any other; the answer goes back as `application/dns-message` with
//! `cache-control: private, max-age=0` (answers are per client -- steering, ECS -- so a
//! shared HTTP cache must not hand one client's answer to another).
//!
//! Anything else gets an HTTP error and is counted as a bad request: another path (404), a
//! method other than GET and POST (405), another media type (415), a body or parameter that
//! is not a DNS message (400), too large (413), or not completed within the frame timeout
//! (408). Limits: at most [`MAX_STREAMS`] requests in flight per connection, and the
//! connection limits of [`super::Limits`].

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::RecvStream;
use http::{header, Method, Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use super::{answer_bytes, handshake, server_config, Limits};
use crate::dns::wire::{Requester, Transport, MAX_MESSAGE};
use crate::metrics::serving::{serving, ConnectionEvent};
use crate::server::admission::{Admission, Admitted};
use crate::snapshot::SharedSnapshot;

/// The one path queries are served on.
pub const PATH: &str = "/dns-query";
/// The media type of a DNS message.
pub const DNS_MESSAGE: &str = "application/dns-message";
/// Requests in flight on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
pub const MAX_STREAMS: u32 = 100;

/// Accepts DoH connections until the task is dropped.
pub async fn serve_doh(
    listener: TcpListener,
    snapshot: SharedSnapshot,
    limits: Limits,
) -> Result<(), rustls::Error> {
    let acceptor = TlsAcceptor::from(server_config(&snapshot, &[b"h2"], false)?);
    let admission = Admission::new(Transport::Https, limits.connection.admission.clone());
    let limits = Arc::new(limits);
    loop {
        let (stream, peer) = super::accept(&listener).await;
        let client = Requester::new(peer.ip(), Transport::Https);
        let Some(admitted) = admission.admit(client.addr) else {
            continue;
        };
        let snapshot = snapshot.clone();
        let limits = limits.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let limit = limits.handshake_timeout;
            let shaken = handshake(&acceptor, stream, Transport::Https, limit);
            if let Some(tls) = admitted.unless_reaped(shaken).await.flatten() {
                serve_connection(tls, client, snapshot, &limits, &admitted).await;
            }
            drop(admitted);
        });
    }
}

/// One HTTP/2 connection: requests are accepted here (which also drives the connection's
/// I/O) and each is answered in a task of its own.
async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    client: Requester,
    snapshot: SharedSnapshot,
    limits: &Limits,
    admitted: &Admitted,
) {
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_STREAMS)
        .max_header_list_size(16 << 10)
        .max_send_buffer_size(MAX_MESSAGE * 2);
    let connection = tokio::time::timeout(limits.handshake_timeout, builder.handshake(io));
    let mut connection = match admitted.unless_reaped(connection).await {
        None => return,
        Some(Ok(Ok(connection))) => connection,
        Some(Ok(Err(_))) => {
            serving().record_connection(Transport::Https, ConnectionEvent::HandshakeFailed);
            return;
        }
        Some(Err(_)) => {
            serving().record_connection(Transport::Https, ConnectionEvent::HandshakeTimeout);
            return;
        }
    };
    let frame_timeout = limits.connection.frame_timeout;
    let mut served = 0;
    let mut closing = false;
    // Each wait for a request is an idle wait (the admission may end it). Once closing (the
    // queries limit or the lifetime reached), the connection is only driven until the last
    // answers are collected, within the frame timeout.
    loop {
        let next = if closing {
            tokio::time::timeout(frame_timeout, connection.accept())
                .await
                .ok()
        } else {
            admitted.idle(connection.accept()).await.ok()
        };
        let Some(Some(Ok((request, respond)))) = next else {
            break;
        };
        if closing {
            continue; // refused by h2 after GOAWAY; only drives the connection
        }
        admitted.query_complete();
        let snapshot = snapshot.clone();
        tokio::spawn(async move {
            answer(request, respond, &client, &snapshot, frame_timeout).await;
        });
        served += 1;
        if served >= limits.connection.max_queries_per_connection || admitted.lifetime_over() {
            connection.graceful_shutdown();
            closing = true;
        }
    }
}

/// Answers one request (or says why not with an HTTP status).
async fn answer(
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    client: &Requester,
    snapshot: &SharedSnapshot,
    frame_timeout: std::time::Duration,
) {
    let query = match tokio::time::timeout(frame_timeout, read_query(request)).await {
        Ok(Ok(query)) => query,
        Ok(Err(status)) => {
            serving().record_connection(Transport::Https, ConnectionEvent::BadRequest);
            return refuse(respond, status);
        }
        Err(_) => {
            serving().record_connection(Transport::Https, ConnectionEvent::FrameTimeout);
            return refuse(respond, StatusCode::REQUEST_TIMEOUT);
        }
    };
    // The responder stays silent only on what is not a DNS query at all.
    let Some(body) = answer_bytes(snapshot, &query, client) else {
        serving().record_connection(Transport::Https, ConnectionEvent::BadRequest);
        return refuse(respond, StatusCode::BAD_REQUEST);
    };
    let response = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, DNS_MESSAGE)
        .header(header::CONTENT_LENGTH, body.len())
        .header(header::CACHE_CONTROL, "private, max-age=0")
        .body(());
    let Ok(response) = response else { return };
    if let Ok(mut stream) = respond.send_response(response, false) {
        let _ = stream.send_data(body, true);
    }
}

fn refuse(mut respond: SendResponse<Bytes>, status: StatusCode) {
    if let Ok(response) = Response::builder().status(status).body(()) {
        let _ = respond.send_response(response, true);
    }
}

/// The DNS query a request carries, or the HTTP status that says why there is none.
async fn read_query(request: Request<RecvStream>) -> Result<Bytes, StatusCode> {
    let (parts, mut body) = request.into_parts();
    if parts.uri.path() != PATH {
        return Err(StatusCode::NOT_FOUND);
    }
    match parts.method {
        Method::GET => {
            let encoded = parts
                .uri
                .query()
                .unwrap_or_default()
                .split('&')
                .find_map(|pair| pair.strip_prefix("dns="))
                .ok_or(StatusCode::BAD_REQUEST)?;
            if encoded.len() > MAX_MESSAGE * 4 / 3 + 4 {
                return Err(StatusCode::URI_TOO_LONG);
            }
            // RFC 8484 §6: base64url without padding; tolerate padding all the same.
            let encoded = encoded.trim_end_matches('=');
            data_encoding::BASE64URL_NOPAD
                .decode(encoded.as_bytes())
                .map(Bytes::from)
                .map_err(|_| StatusCode::BAD_REQUEST)
        }
        Method::POST => {
            let media_type = parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split(';').next())
                .map(str::trim);
            if media_type != Some(DNS_MESSAGE) {
                return Err(StatusCode::UNSUPPORTED_MEDIA_TYPE);
            }
            let mut query = BytesMut::new();
            while let Some(chunk) = body.data().await {
                let chunk = chunk.map_err(|_| StatusCode::BAD_REQUEST)?;
                let _ = body.flow_control().release_capacity(chunk.len());
                if query.len() + chunk.len() > MAX_MESSAGE {
                    return Err(StatusCode::PAYLOAD_TOO_LARGE);
                }
                query.extend_from_slice(&chunk);
            }
            Ok(query.freeze())
        }
        _ => Err(StatusCode::METHOD_NOT_ALLOWED),
    }
}
