//! DNS over TCP (RFC 7766): two-byte length framing, several (pipelined) queries per
//! connection answered in order, an idle timeout, a cap on connections and on queries per
//! connection. Each connection owns one response buffer, reused for every query on it.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::dns::respond::{respond, Client, Transport, MAX_MESSAGE};
use crate::snapshot::SharedSnapshot;

#[derive(Debug, Clone)]
pub struct TcpLimits {
    /// Close a connection that sends nothing for this long.
    pub idle_timeout: Duration,
    /// Connections served at once; further ones wait in the kernel's accept queue.
    pub max_connections: usize,
    /// Close a connection after this many queries (clients reconnect).
    pub max_queries_per_connection: usize,
}

impl Default for TcpLimits {
    fn default() -> Self {
        TcpLimits {
            idle_timeout: Duration::from_secs(10),
            max_connections: 1024,
            max_queries_per_connection: 10_000,
        }
    }
}

/// Accepts connections until the task is dropped.
pub async fn serve(listener: TcpListener, snapshot: SharedSnapshot, limits: TcpLimits) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let limits = Arc::new(limits);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning, keep serving what we have.
                tracing::warn!("tcp accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let snapshot = snapshot.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            // Counted open until this task ends, however it ends.
            let _open = crate::metrics::serving().tcp_connection();
            let client = Client::new(peer.ip(), Transport::Tcp);
            if let Err(e) = serve_connection(stream, client, &snapshot, &limits).await {
                tracing::debug!("tcp connection from {peer}: {e}");
            }
            drop(permit);
        });
    }
}

async fn serve_connection(
    stream: TcpStream,
    client: Client,
    snapshot: &SharedSnapshot,
    limits: &TcpLimits,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::new(read_half);
    let mut writer = BufWriter::new(write_half);
    let mut query = vec![0u8; MAX_MESSAGE];
    let mut response = vec![0u8; MAX_MESSAGE + 2];
    for _ in 0..limits.max_queries_per_connection {
        let len = match read_frame_len(&mut reader, limits.idle_timeout).await? {
            Some(len) => len,
            None => break,
        };
        tokio::time::timeout(limits.idle_timeout, reader.read_exact(&mut query[..len]))
            .await
            .map_err(|_| std::io::ErrorKind::TimedOut)??;
        let answered = {
            let current = snapshot.load();
            respond(&current, &query[..len], &client, &mut response[2..])
        };
        if let Some(n) = answered {
            response[..2].copy_from_slice(&(n as u16).to_be_bytes());
            writer.write_all(&response[..n + 2]).await?;
        }
        // Flush when the client has nothing more queued, so pipelined answers go out together.
        if reader.buffer().is_empty() {
            writer.flush().await?;
        }
    }
    writer.flush().await?;
    Ok(())
}

/// Reads the two-byte length; `None` on a clean close or idle timeout.
async fn read_frame_len(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    idle: Duration,
) -> std::io::Result<Option<usize>> {
    let mut len = [0u8; 2];
    match tokio::time::timeout(idle, reader.read_exact(&mut len)).await {
        Err(_) => Ok(None),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Ok(Err(e)) => Err(e),
        Ok(Ok(_)) => Ok(Some(u16::from_be_bytes(len) as usize)),
    }
}
