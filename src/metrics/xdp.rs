//! Counters and state of the AF_XDP path (`[server.xdp]`): whether it is attached (and if not,
//! why), how, and per receive queue what was received, sent, dropped and how often a ring was
//! full. Written by the XDP workers with relaxed atomic adds; read by `/v1/status` and
//! `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

/// One receive queue's counters, owned by its worker.
#[derive(Debug, Default)]
pub struct QueueCounters {
    /// Frames taken from the RX ring.
    pub rx: AtomicU64,
    /// Replies put on the TX ring.
    pub tx: AtomicU64,
    /// Frames not answered (malformed, not a query, rate-limited to silence, no room to send).
    pub dropped: AtomicU64,
    /// Times the TX ring had no room for a reply (the reply was dropped).
    pub tx_ring_full: AtomicU64,
    /// TX kicks (sendto syscalls) made: tx / tx_kicks is the replies each carried.
    pub tx_kicks: AtomicU64,
    /// Kernel: frames dropped because our RX ring was full (we did not keep up).
    pub rx_ring_full: AtomicU64,
    /// Kernel: frames dropped because the fill ring had no frame to receive into.
    pub fill_ring_empty: AtomicU64,
    /// Kernel: other receive drops.
    pub kernel_rx_dropped: AtomicU64,
}

impl QueueCounters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// The XDP path as `/v1/status` shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct XdpView {
    pub interface: String,
    /// "native" or "generic" when attached.
    pub attach: Option<String>,
    /// "zero-copy" or "copy" when attached.
    pub copy_mode: Option<String>,
    pub ports: Vec<u16>,
    /// Why XDP is not serving (the server then serves on its sockets only).
    pub error: Option<String>,
    pub queues: Vec<QueueView>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct QueueView {
    pub queue: u32,
    pub rx: u64,
    pub tx: u64,
    pub dropped: u64,
    pub tx_ring_full: u64,
    /// TX kicks (syscalls); `tx / tx_kicks` replies per kick.
    #[serde(default)]
    pub tx_kicks: u64,
    pub rx_ring_full: u64,
    pub fill_ring_empty: u64,
    pub kernel_rx_dropped: u64,
}

/// What the XDP starter recorded: the static part of the view plus each queue's counters.
struct Registered {
    view: XdpView,
    queues: Vec<(u32, Arc<QueueCounters>)>,
}

static XDP: Mutex<Option<Registered>> = Mutex::new(None);

/// Records the XDP path's state (called once at startup, off the serving path).
pub fn register(view: XdpView, queues: Vec<(u32, Arc<QueueCounters>)>) {
    *XDP.lock().unwrap_or_else(PoisonError::into_inner) = Some(Registered { view, queues });
}

/// The current view, or `None` when no `[server.xdp]` is configured.
pub fn view() -> Option<XdpView> {
    let guard = XDP.lock().unwrap_or_else(PoisonError::into_inner);
    let registered = guard.as_ref()?;
    let mut view = registered.view.clone();
    let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
    view.queues = registered
        .queues
        .iter()
        .map(|(queue, c)| QueueView {
            queue: *queue,
            rx: read(&c.rx),
            tx: read(&c.tx),
            dropped: read(&c.dropped),
            tx_ring_full: read(&c.tx_ring_full),
            tx_kicks: read(&c.tx_kicks),
            rx_ring_full: read(&c.rx_ring_full),
            fill_ring_empty: read(&c.fill_ring_empty),
            kernel_rx_dropped: read(&c.kernel_rx_dropped),
        })
        .collect();
    Some(view)
}
