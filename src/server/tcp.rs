//! DNS over TCP (RFC 7766): two-byte length framing, several (pipelined) queries per
//! connection answered in order, a cap on queries per connection. Each connection owns one
//! response buffer, reused for every query on it.
//!
//! Who gets a connection slot and when it is taken back -- per client prefix, lifetime, idle
//! time shrinking as slots fill, the worst holder of a full table -- is
//! [`super::admission`]'s, shared with the encrypted transports; here each connection tells it
//! what it is doing (idle, reading a query, answering). Here: a query once started must be
//! complete within `frame_timeout`, a client that stops reading our answers is let go after
//! the idle time allowed, and answers are flushed as soon as the client has no complete query
//! queued (the start of the next one does not hold them back). TCP answers are never rate
//! limited: the handshake proves the source. Zone transfer requests are answered by
//! [`super::xfr_out`] when `[transfer]` is set.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
    BufWriter,
};
use tokio::net::{TcpListener, TcpStream};

use super::admission::{Admission, AdmissionLimits, Admitted};
use super::respond_or_notify;
use crate::config::TcpConfig;
use crate::dns::wire::{Requester, Transport, MAX_MESSAGE};
use crate::metrics::serving::ConnectionEvent;
use crate::snapshot::SharedSnapshot;

#[derive(Debug, Clone)]
pub struct TcpLimits {
    /// Who may hold a slot and for how long (see [`super::admission`]).
    pub admission: AdmissionLimits,
    /// Once the first byte of a query arrived, the rest (length and message) must arrive
    /// within this time.
    pub frame_timeout: Duration,
    /// Close a connection after this many queries (clients reconnect).
    pub max_queries_per_connection: usize,
}

/// A duration of whole seconds, at least one.
pub(crate) fn secs(s: u64) -> Duration {
    Duration::from_secs(s.max(1))
}

impl TcpLimits {
    /// The limits of `[server.tcp]` (timeouts of at least a second).
    pub fn from_config(tcp: &TcpConfig) -> TcpLimits {
        TcpLimits {
            admission: AdmissionLimits {
                max_connections: tcp.max_connections,
                max_connections_per_client: tcp.max_connections_per_client,
                client_prefix_v4: tcp.client_prefix_v4,
                client_prefix_v6: tcp.client_prefix_v6,
                idle_timeout: secs(tcp.idle_timeout_secs),
                busy_idle_timeout: Duration::from_millis(tcp.busy_idle_timeout_ms),
                max_connection_lifetime: secs(tcp.max_connection_lifetime_secs),
            },
            frame_timeout: secs(tcp.frame_timeout_secs),
            max_queries_per_connection: tcp.max_queries_per_connection,
        }
    }
}

impl Default for TcpLimits {
    /// The limits of a config without `[server.tcp]`.
    fn default() -> Self {
        TcpLimits::from_config(&TcpConfig::default())
    }
}

/// Accepts connections until the task is dropped.
pub async fn serve(listener: TcpListener, snapshot: SharedSnapshot, limits: TcpLimits) {
    let admission = Admission::new(Transport::Tcp, limits.admission.clone());
    let limits = Arc::new(limits);
    loop {
        let (stream, peer) = accept(&listener).await;
        let client = Requester::new(peer.ip(), Transport::Tcp);
        let Some(admitted) = admission.admit(client.addr) else {
            // Closed at once: this client already holds its share, or no slot was to be had.
            drop(stream);
            continue;
        };
        let snapshot = snapshot.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            if let Err(e) = serve_stream(stream, client, &snapshot, &limits, &admitted).await {
                tracing::debug!("tcp connection from {peer}: {e}");
            }
            drop(admitted);
        });
    }
}

/// Accepts the next connection. On failure (EMFILE and friends) it backs off instead of
/// spinning, counts every failure and logs the first and then one in a hundred.
pub(crate) async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) if keeps_descriptor_reserve() => return accepted,
            Ok(_) => continue, // closed at once: see `keeps_descriptor_reserve`
            Err(e) => {
                let failures = crate::metrics::serving().record_tcp_accept_error();
                if failures == 1 || failures.is_multiple_of(100) {
                    tracing::warn!("tcp accept failed ({failures} so far): {e}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Whether a DNS connection may be taken without eating into the descriptors kept for files
/// and the admin endpoint ([`crate::descriptors`]; a refusal is counted there).
fn keeps_descriptor_reserve() -> bool {
    crate::descriptors::dns_may_take()
}

/// Serves RFC 7766 framed queries on a byte stream -- a TCP connection, or a TLS session on
/// one (DoT): answered in order, flushed when the client has no complete query queued.
pub(crate) async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    client: Requester,
    snapshot: &SharedSnapshot,
    limits: &TcpLimits,
    admitted: &Admitted,
) -> std::io::Result<()> {
    // Reads and writes both buffered, on one stream (a TLS session cannot be split without a
    // lock); the reader's buffer says whether the client has more queued.
    let mut reader = BufReader::new(BufWriter::new(stream));
    let mut buffers = Buffers {
        query: vec![0u8; MAX_MESSAGE],
        response: vec![0u8; MAX_MESSAGE + 2],
    };
    for _ in 0..limits.max_queries_per_connection {
        if admitted.lifetime_over() || !wait_for_first_byte(&mut reader, admitted).await? {
            break;
        }
        let answered = answer_one(
            &mut reader,
            &mut buffers,
            &client,
            snapshot,
            limits,
            admitted,
        );
        match admitted.unless_reaped(answered).await {
            Some(done) => done?,
            // Taken back for a newcomer (the admission counted why): closed at once.
            None => return Ok(()),
        }
    }
    // Flushes, then closes our side (for TLS: close_notify first).
    let shutdown = within(admitted.idle_allowed(), reader.shutdown());
    admitted.unless_reaped(shutdown).await.unwrap_or(Ok(()))
}

/// A connection's query and response buffers, reused for every query on it.
struct Buffers {
    query: Vec<u8>,
    response: Vec<u8>,
}

/// Reads the query whose first byte has arrived (within the frame timeout, else counted and
/// an error), answers it, and flushes unless a complete query is queued behind it.
async fn answer_one<S: AsyncRead + AsyncWrite + Unpin>(
    reader: &mut BufReader<BufWriter<S>>,
    buffers: &mut Buffers,
    client: &Requester,
    snapshot: &SharedSnapshot,
    limits: &TcpLimits,
    admitted: &Admitted,
) -> std::io::Result<()> {
    let frame = read_frame(reader, &mut buffers.query);
    let Ok(len) = tokio::time::timeout(limits.frame_timeout, frame).await else {
        crate::metrics::serving()
            .record_connection(client.transport, ConnectionEvent::FrameTimeout);
        return Err(std::io::ErrorKind::TimedOut.into());
    };
    let len = len?;
    admitted.query_complete();
    let transfer = {
        let current = snapshot.load();
        super::xfr_out::is_transfer(&current, &buffers.query[..len])
            .then(|| arc_swap::Guard::into_inner(current))
    };
    if let Some(current) = transfer {
        // Zone transfers (RFC 5936, 1995, 9103): built on a blocking thread, written here.
        let query = buffers.query[..len].to_vec();
        let outgoing = super::xfr_out::answer(current, query, *client).await;
        let idle = admitted.idle_allowed();
        for message in &outgoing.messages {
            let len = (message.len() as u16).to_be_bytes();
            within(idle, reader.write_all(&len)).await?;
            within(idle, reader.write_all(message)).await?;
        }
        return within(idle, reader.flush()).await;
    }
    let answered = {
        let current = snapshot.load();
        respond_or_notify(
            &current,
            &buffers.query[..len],
            client,
            &mut buffers.response[2..],
        )
    };
    // A client that does not read its answers is let go after the idle time allowed.
    let idle = admitted.idle_allowed();
    if let Some(n) = answered {
        buffers.response[..2].copy_from_slice(&(n as u16).to_be_bytes());
        within(idle, reader.write_all(&buffers.response[..n + 2])).await?;
    }
    // Pipelined answers go out together, but only while a complete query is queued behind:
    // the start of one still arriving must not hold back the answers already made.
    if !starts_with_a_whole_frame(reader.buffer()) {
        within(idle, reader.flush()).await?;
    }
    Ok(())
}

/// Whether `buffered` starts with a whole length-prefixed message.
fn starts_with_a_whole_frame(buffered: &[u8]) -> bool {
    match buffered {
        [high, low, message @ ..] => {
            message.len() >= usize::from(u16::from_be_bytes([*high, *low]))
        }
        _ => false,
    }
}

/// Waits while idle until the client sends something; `false` on a clean close, or when the
/// admission ended the wait (silent too long, taken back for a newcomer, lifetime over).
async fn wait_for_first_byte<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    admitted: &Admitted,
) -> std::io::Result<bool> {
    match admitted.idle(reader.fill_buf()).await {
        Err(_) => Ok(false),
        Ok(Ok(buffered)) => Ok(!buffered.is_empty()),
        Ok(Err(e)) => Err(e),
    }
}

/// Reads one length-prefixed message into `query`; returns its length.
async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    query: &mut [u8],
) -> std::io::Result<usize> {
    let mut len = [0u8; 2];
    reader.read_exact(&mut len).await?;
    let len = usize::from(u16::from_be_bytes(len));
    let body = query
        .get_mut(..len)
        .ok_or(std::io::ErrorKind::InvalidData)?;
    reader.read_exact(body).await?;
    Ok(len)
}

/// A write that must finish within `limit` (a client that does not read is let go).
async fn within<T>(
    limit: Duration,
    io: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(limit, io)
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}
