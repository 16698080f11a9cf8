//! The admin endpoint's connections: accepted under `[admin] max_connections` and the
//! descriptor reserve ([`crate::descriptors`]), served with hyper's HTTP/1, and closed when they
//! hold a place without asking anything (issue 28: 200 partial-header connections stayed open
//! for 65 s, 21,000 idle ones used up every descriptor).
//!
//! A connection is either *waiting* for a request (just accepted, or kept alive after an
//! answer) or *serving* one (from a complete request head until the answer is handed to
//! hyper). While waiting it must send the first byte within `idle_timeout_secs` and, once it
//! has, the whole head within `header_timeout_ms`. A request being served is never cut: a
//! reload may take long, and a write is authorized before its body is read, so only an
//! operator holding the token can be slow there.
//!
//! When every place is taken (or the descriptor reserve is reached) a newcomer takes the place
//! of the connection that has waited longest for a request (a slow-header or idle holder), so
//! an operator's `steerdns status` gets in during a flood; only when every connection is being
//! served is the newcomer closed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::config::admin::AdminConfig;

/// How many connections and for how long (from `[admin]`).
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

impl ConnectionLimits {
    pub fn from_config(admin: &AdminConfig) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: admin.max_connections.max(1),
            header_timeout: Duration::from_millis(admin.header_timeout_ms),
            idle_timeout: Duration::from_secs(admin.idle_timeout_secs.max(1)),
        }
    }
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits::from_config(&AdminConfig::default())
    }
}

/// Why a connection was closed by us, or a newcomer not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// The first byte of a head came, the rest not within `header_timeout_ms`.
    HeaderTimeout,
    /// Nothing came within `idle_timeout_secs` while waiting for a request.
    IdleTimeout,
    /// Its place was given to a newcomer (the table or the descriptor reserve was full).
    Evicted,
}

/// The counters status and metrics show (one admin endpoint per process).
#[derive(Default)]
struct Counters {
    open: AtomicU64,
    accepted: AtomicU64,
    header_timeout: AtomicU64,
    idle_timeout: AtomicU64,
    evicted: AtomicU64,
    /// Newcomers closed at once: every place was serving a request.
    refused_full: AtomicU64,
    /// ... the same, with the descriptor reserve reached.
    refused_descriptors: AtomicU64,
    accept_errors: AtomicU64,
    max_connections: AtomicU64,
}

static COUNTERS: OnceLock<Counters> = OnceLock::new();

fn counters() -> &'static Counters {
    COUNTERS.get_or_init(Counters::default)
}

/// The admin endpoint's connections, for `/v1/status` and `/metrics`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct AdminConnectionsView {
    pub open: u64,
    pub max_connections: u64,
    pub accepted: u64,
    pub closed_header_timeout: u64,
    pub closed_idle_timeout: u64,
    pub evicted: u64,
    pub refused_full: u64,
    pub refused_descriptors: u64,
    pub accept_errors: u64,
}

pub fn view() -> AdminConnectionsView {
    let c = counters();
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    AdminConnectionsView {
        open: load(&c.open),
        max_connections: load(&c.max_connections),
        accepted: load(&c.accepted),
        closed_header_timeout: load(&c.header_timeout),
        closed_idle_timeout: load(&c.idle_timeout),
        evicted: load(&c.evicted),
        refused_full: load(&c.refused_full),
        refused_descriptors: load(&c.refused_descriptors),
        accept_errors: load(&c.accept_errors),
    }
}

/// Milliseconds on a process clock, never 0 (0 means "not yet").
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// One connection's phase, shared by its reader, its service and the accept loop.
struct Connection {
    serving: AtomicBool,
    /// When it began waiting for its next request.
    waiting_since: AtomicU64,
    /// When the first byte of the next request's head came (0: not yet).
    head_started: AtomicU64,
    evicted: AtomicBool,
    /// Wakes the watchdog: a head started (its deadline moved closer) or an eviction.
    wake: Notify,
}

impl Connection {
    fn new() -> Connection {
        Connection {
            serving: AtomicBool::new(false),
            waiting_since: AtomicU64::new(now_ms()),
            head_started: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    fn read_some(&self) {
        if !self.serving.load(Ordering::Relaxed) && self.head_started.load(Ordering::Relaxed) == 0 {
            self.head_started.store(now_ms(), Ordering::Relaxed);
            self.wake.notify_one();
        }
    }

    fn request_started(&self) {
        self.serving.store(true, Ordering::Relaxed);
        self.head_started.store(0, Ordering::Relaxed);
    }

    fn request_answered(&self) {
        self.waiting_since.store(now_ms(), Ordering::Relaxed);
        self.serving.store(false, Ordering::Relaxed);
    }

    /// When the connection is due to be closed, and why (`None`: it is serving a request).
    fn deadline(&self, limits: &ConnectionLimits) -> Option<(u64, Closed)> {
        if self.serving.load(Ordering::Relaxed) {
            return None;
        }
        match self.head_started.load(Ordering::Relaxed) {
            0 => {
                let since = self.waiting_since.load(Ordering::Relaxed);
                Some((
                    since + limits.idle_timeout.as_millis() as u64,
                    Closed::IdleTimeout,
                ))
            }
            started => Some((
                started + limits.header_timeout.as_millis() as u64,
                Closed::HeaderTimeout,
            )),
        }
    }

    /// Waits until the connection is to be closed by us, and says why.
    async fn watchdog(&self, limits: &ConnectionLimits) -> Closed {
        loop {
            if self.evicted.load(Ordering::Relaxed) {
                return Closed::Evicted;
            }
            match self.deadline(limits) {
                Some((at, why)) if now_ms() >= at => return why,
                Some((at, _)) => {
                    let wait = Duration::from_millis(at - now_ms());
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.wake.notified() => {}
                    }
                }
                // Serving: look again when the watchdog is woken or a while later.
                None => {
                    tokio::select! {
                        () = tokio::time::sleep(limits.header_timeout) => {}
                        () = self.wake.notified() => {}
                    }
                }
            }
        }
    }
}

/// The open connections (a lock is fine: the admin endpoint, not the serving path).
struct Table {
    connections: Mutex<Vec<Arc<Connection>>>,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Connection>>> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes room for a newcomer: `Ok` when there is a place (after evicting the connection
    /// that has waited longest for a request if needed), `Err` with the counter to bump.
    fn admit(&self, limits: &ConnectionLimits) -> Result<Arc<Connection>, &'static AtomicU64> {
        let mut table = self.lock();
        let descriptors_ok = crate::descriptors::admin_may_take();
        if table.len() >= limits.max_connections || !descriptors_ok {
            let oldest = table
                .iter()
                .enumerate()
                .filter(|(_, c)| !c.serving.load(Ordering::Relaxed))
                .min_by_key(|(_, c)| c.waiting_since.load(Ordering::Relaxed))
                .map(|(i, _)| i);
            let Some(oldest) = oldest else {
                return Err(if descriptors_ok {
                    &counters().refused_full
                } else {
                    &counters().refused_descriptors
                });
            };
            let victim = table.swap_remove(oldest);
            victim.evicted.store(true, Ordering::Relaxed);
            victim.wake.notify_one();
        }
        let connection = Arc::new(Connection::new());
        table.push(connection.clone());
        Ok(connection)
    }

    fn remove(&self, connection: &Arc<Connection>) {
        self.lock().retain(|c| !Arc::ptr_eq(c, connection));
    }
}

/// Serves `router` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, router: axum::Router, limits: ConnectionLimits) {
    let limits = Arc::new(limits);
    counters()
        .max_connections
        .store(limits.max_connections as u64, Ordering::Relaxed);
    let table = Arc::new(Table {
        connections: Mutex::new(Vec::new()),
    });
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                let failures = counters().accept_errors.fetch_add(1, Ordering::Relaxed) + 1;
                if failures == 1 || failures.is_multiple_of(100) {
                    tracing::warn!("admin accept failed ({failures} so far): {e}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let connection = match table.admit(&limits) {
            Ok(connection) => connection,
            Err(refused) => {
                refused.fetch_add(1, Ordering::Relaxed);
                continue; // the stream closes here
            }
        };
        counters().accepted.fetch_add(1, Ordering::Relaxed);
        let descriptor = crate::descriptors::AdminDescriptor::take();
        let (table, limits, router) = (table.clone(), limits.clone(), router.clone());
        tokio::spawn(async move {
            counters().open.fetch_add(1, Ordering::Relaxed);
            serve_connection(stream, &connection, router, &limits).await;
            table.remove(&connection);
            counters().open.fetch_sub(1, Ordering::Relaxed);
            drop(descriptor);
        });
    }
}

/// One connection, until the client closes it, hyper ends it, or the watchdog says to.
async fn serve_connection(
    stream: TcpStream,
    connection: &Arc<Connection>,
    router: axum::Router,
    limits: &ConnectionLimits,
) {
    let io = TokioIo::new(Watched {
        stream,
        connection: connection.clone(),
    });
    let service = Tracked {
        inner: TowerToHyperService::new(router),
        connection: connection.clone(),
    };
    let http = hyper::server::conn::http1::Builder::new()
        .header_read_timeout(None) // ours: see `Connection::deadline`
        .serve_connection(io, service);
    tokio::select! {
        result = http => {
            if let Err(e) = result {
                tracing::debug!("admin connection: {e}");
            }
        }
        why = connection.watchdog(limits) => {
            let c = counters();
            match why {
                Closed::HeaderTimeout => &c.header_timeout,
                Closed::IdleTimeout => &c.idle_timeout,
                Closed::Evicted => &c.evicted,
            }
            .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The stream, telling its connection when bytes of a request head arrive.
struct Watched {
    stream: TcpStream,
    connection: Arc<Connection>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.connection.read_some();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// The router, marking its connection serving from a complete head until the answer.
struct Tracked {
    inner: TowerToHyperService<axum::Router>,
    connection: Arc<Connection>,
}

type Answer = <TowerToHyperService<axum::Router> as hyper::service::Service<
    http::Request<Incoming>,
>>::Response;
type Failure =
    <TowerToHyperService<axum::Router> as hyper::service::Service<http::Request<Incoming>>>::Error;

impl hyper::service::Service<http::Request<Incoming>> for Tracked {
    type Response = Answer;
    type Error = Failure;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Failure>> + Send>>;

    fn call(&self, request: http::Request<Incoming>) -> Self::Future {
        self.connection.request_started();
        let answer = self.inner.call(request);
        let connection = self.connection.clone();
        Box::pin(async move {
            let answer = answer.await;
            connection.request_answered();
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table {
            connections: Mutex::new(Vec::new()),
        }
    }

    #[test]
    fn a_full_table_evicts_the_longest_waiting_and_refuses_when_all_serve() {
        let limits = ConnectionLimits {
            max_connections: 2,
            ..ConnectionLimits::default()
        };
        let table = table();
        let first = table.admit(&limits).expect("a place");
        let second = table.admit(&limits).expect("a place");
        first.waiting_since.store(1, Ordering::Relaxed); // waited longest
        let third = table.admit(&limits).expect("a place, the first one's");
        assert!(first.evicted.load(Ordering::Relaxed));
        assert!(!second.evicted.load(Ordering::Relaxed));
        assert_eq!(table.lock().len(), 2);
        // Every place serving a request: the newcomer is refused, nobody is cut off.
        second.request_started();
        third.request_started();
        let refused = table.admit(&limits).err().expect("refused");
        assert!(std::ptr::eq(refused, &counters().refused_full));
        assert!(!second.evicted.load(Ordering::Relaxed) && !third.evicted.load(Ordering::Relaxed));
        // Answered, the longest waiting of them gives way again.
        third.request_answered();
        table.admit(&limits).expect("third's place");
        assert!(third.evicted.load(Ordering::Relaxed));
    }

    #[test]
    fn a_waiting_connection_is_due_after_idle_and_a_started_head_after_the_header_timeout() {
        let limits = ConnectionLimits {
            max_connections: 1,
            header_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_secs(2),
        };
        let c = Connection::new();
        let since = c.waiting_since.load(Ordering::Relaxed);
        assert_eq!(
            c.deadline(&limits),
            Some((since + 2000, Closed::IdleTimeout))
        );
        c.read_some();
        let started = c.head_started.load(Ordering::Relaxed);
        assert_eq!(
            c.deadline(&limits),
            Some((started + 300, Closed::HeaderTimeout))
        );
        c.request_started();
        assert_eq!(
            c.deadline(&limits),
            None,
            "a request being served is never cut"
        );
        c.read_some(); // body bytes do not start a head
        assert_eq!(c.head_started.load(Ordering::Relaxed), 0);
        c.request_answered();
        assert_eq!(
            c.deadline(&limits).map(|(_, why)| why),
            Some(Closed::IdleTimeout)
        );
    }
}
