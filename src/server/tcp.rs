//! DNS over TCP (RFC 7766): two-byte length framing, several (pipelined) queries per
//! connection answered in order, an idle timeout, a cap on connections and on queries per
//! connection. Each connection owns one response buffer, reused for every query on it.
//!
//! Slow and hostile clients (slowloris): one client address may hold only
//! `max_connections_per_client` of the `max_connections` slots; a query once started must be
//! complete within `frame_timeout`; a client that stops reading our answers is closed after
//! `idle_timeout`. TCP answers are never rate limited: the handshake proves the source.

use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
    BufWriter,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::answer::respond;
use crate::config::TcpConfig;
use crate::dns::wire::{Client, Transport, MAX_MESSAGE};
use crate::metrics::serving::EncryptedEvent;
use crate::snapshot::SharedSnapshot;

#[derive(Debug, Clone)]
pub struct TcpLimits {
    /// Close a connection that sends nothing for this long (or does not read our answers).
    pub idle_timeout: Duration,
    /// Connections served at once; further ones wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Connections one client address may hold; further ones are closed as soon as accepted.
    pub max_connections_per_client: usize,
    /// Once the first byte of a query arrived, the rest (length and message) must arrive
    /// within this time.
    pub frame_timeout: Duration,
    /// Close a connection after this many queries (clients reconnect).
    pub max_queries_per_connection: usize,
}

impl TcpLimits {
    /// The limits of `[server.tcp]` (timeouts of at least a second).
    pub fn from_config(tcp: &TcpConfig) -> TcpLimits {
        TcpLimits {
            idle_timeout: Duration::from_secs(tcp.idle_timeout_secs.max(1)),
            max_connections: tcp.max_connections,
            max_connections_per_client: tcp.max_connections_per_client,
            frame_timeout: Duration::from_secs(tcp.frame_timeout_secs.max(1)),
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

/// Slots in the per-client connection table. Addresses are hashed into it; two that share a
/// slot share a cap (rare with this many slots, and never more permissive than the cap).
const CLIENT_SLOTS: usize = 1 << 14;

/// Open connections per client address, in a fixed table of atomic counters (no lock, nothing
/// allocated per connection).
pub struct ClientConnections {
    counts: Box<[AtomicU32]>,
    cap: u32,
    hasher: std::collections::hash_map::RandomState,
}

impl ClientConnections {
    pub fn new(cap: usize) -> ClientConnections {
        ClientConnections {
            counts: (0..CLIENT_SLOTS).map(|_| AtomicU32::new(0)).collect(),
            cap: u32::try_from(cap).unwrap_or(u32::MAX),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    /// Counts a connection from `addr`, or `None` if it already has `cap` open. The count
    /// drops when the returned guard does.
    pub fn open(self: &Arc<Self>, addr: IpAddr) -> Option<ClientConnection> {
        let slot = (self.hasher.hash_one(addr) as usize) % self.counts.len();
        let count = self.counts.get(slot)?;
        let was = count.fetch_add(1, Ordering::Relaxed);
        if was >= self.cap {
            count.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(ClientConnection {
            table: self.clone(),
            slot,
        })
    }
}

/// One open connection of a client, uncounted on drop.
pub struct ClientConnection {
    table: Arc<ClientConnections>,
    slot: usize,
}

impl Drop for ClientConnection {
    fn drop(&mut self) {
        if let Some(count) = self.table.counts.get(self.slot) {
            count.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Accepts connections until the task is dropped.
pub async fn serve(listener: TcpListener, snapshot: SharedSnapshot, limits: TcpLimits) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let per_client = Arc::new(ClientConnections::new(limits.max_connections_per_client));
    let limits = Arc::new(limits);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = accept(&listener).await;
        let client = Client::new(peer.ip(), Transport::Tcp);
        let Some(share) = per_client.open(client.addr) else {
            // Closed at once, freeing the slot: this client already holds its share.
            crate::metrics::serving().record_tcp_refused_per_client();
            drop(stream);
            continue;
        };
        let snapshot = snapshot.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            // Counted open until this task ends, however it ends.
            let _open = crate::metrics::serving().tcp_connection();
            if let Err(e) = serve_connection(stream, client, &snapshot, &limits).await {
                tracing::debug!("tcp connection from {peer}: {e}");
            }
            drop(share);
            drop(permit);
        });
    }
}

/// Accepts the next connection. On failure (EMFILE and friends) it backs off instead of
/// spinning, counts every failure and logs the first and then one in a hundred.
pub(crate) async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
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

async fn serve_connection(
    stream: TcpStream,
    client: Client,
    snapshot: &SharedSnapshot,
    limits: &TcpLimits,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    serve_stream(stream, client, snapshot, limits).await
}

/// Serves RFC 7766 framed queries on a byte stream -- a TCP connection, or a TLS session on
/// one (DoT): answered in order, flushed when the client has nothing more queued.
pub(crate) async fn serve_stream<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    client: Client,
    snapshot: &SharedSnapshot,
    limits: &TcpLimits,
) -> std::io::Result<()> {
    // Reads and writes both buffered, on one stream (a TLS session cannot be split without a
    // lock); the reader's buffer says whether the client has more queued.
    let mut reader = BufReader::new(BufWriter::new(stream));
    let mut query = vec![0u8; MAX_MESSAGE];
    let mut response = vec![0u8; MAX_MESSAGE + 2];
    let idle = limits.idle_timeout;
    for _ in 0..limits.max_queries_per_connection {
        if !wait_for_first_byte(&mut reader, idle).await? {
            break;
        }
        let frame = read_frame(&mut reader, &mut query);
        let len = match tokio::time::timeout(limits.frame_timeout, frame).await {
            Ok(read) => read?,
            Err(_) => {
                match client.transport {
                    Transport::Tcp => crate::metrics::serving().record_tcp_frame_timeout(),
                    t => {
                        crate::metrics::serving().record_encrypted(t, EncryptedEvent::FrameTimeout)
                    }
                }
                return Err(std::io::ErrorKind::TimedOut.into());
            }
        };
        let answered = {
            let current = snapshot.load();
            respond(&current, &query[..len], &client, &mut response[2..])
        };
        if let Some(n) = answered {
            response[..2].copy_from_slice(&(n as u16).to_be_bytes());
            within(idle, reader.write_all(&response[..n + 2])).await?;
        }
        // Flush when the client has nothing more queued, so pipelined answers go out together.
        if reader.buffer().is_empty() {
            within(idle, reader.flush()).await?;
        }
    }
    // Flushes, then closes our side (for TLS: close_notify first).
    within(idle, reader.shutdown()).await?;
    Ok(())
}

/// Waits (up to `idle`) until the client sends something; `false` on a clean close or when it
/// stayed silent.
async fn wait_for_first_byte<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    idle: Duration,
) -> std::io::Result<bool> {
    match tokio::time::timeout(idle, reader.fill_buf()).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_gets_its_share_and_gets_it_back() {
        let table = Arc::new(ClientConnections::new(2));
        let a: IpAddr = [192, 0, 2, 1].into();
        let first = table.open(a);
        let second = table.open(a);
        assert!(first.is_some() && second.is_some());
        assert!(
            table.open(a).is_none(),
            "a third connection from one address"
        );
        // Other addresses have their own share (unless one happens to hash into a's slot).
        let others = (2..=5u8)
            .filter(|h| table.open([192, 0, 2, *h].into()).is_some())
            .count();
        assert!(others >= 3, "{others} of 4 other addresses could connect");
        drop(first);
        assert!(
            table.open(a).is_some(),
            "a closed connection frees its place"
        );
    }
}
