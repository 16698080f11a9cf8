//! The shield's side of fleet mode: the mailbox between the shield's thread and the fleet's
//! etcd task (`crate::fleet::shield`), which moves bytes and nothing else.
//!
//! The etcd task fills the inbox after every exchange with etcd (who leads, whether this node
//! does, the newest published state, load record and — for the leader — every node's report,
//! all as raw bytes with their etcd revisions) and takes the outbox (this node's report, the
//! leader's proposed state, a feed received here to share). The shield's thread reads,
//! checks and acts on what is in the inbox at its next tick ([`super::live`]), so every
//! decision about etcd contents is made in the shield, against the node's own topology, and
//! nothing here is on the serving path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// A value read from etcd: its `mod_revision` and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub revision: i64,
    pub bytes: Vec<u8>,
}

/// What the etcd task last learnt.
#[derive(Debug, Clone, Default)]
pub struct Inbox {
    /// The node holding the leader key.
    pub leader: Option<String>,
    /// This node holds it (on a live lease).
    pub leading: bool,
    /// When etcd last answered a whole exchange.
    pub contact: Option<Instant>,
    /// `<prefix>/shield/state`.
    pub state: Option<Stored>,
    /// `<prefix>/shield/load`.
    pub load: Option<Stored>,
    /// `<prefix>/shield/nodes/*` (read by the leader only): (node name, value).
    pub reports: Vec<(String, Vec<u8>)>,
    /// Why the last exchange failed, while it does.
    pub error: Option<String>,
}

/// What this node has for etcd.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outbox {
    /// This node's [`super::wire::NodeReport`], JSON.
    pub report: Option<Vec<u8>>,
    /// The leader's newest [`super::wire::PublishedState`], JSON.
    pub state: Option<Vec<u8>>,
    /// A feed received here, as a [`super::wire::LoadRecord`], JSON.
    pub load: Option<Vec<u8>>,
}

/// The mailbox. Off until [`FleetLink::enable`] (single-node mode never enables it).
#[derive(Default)]
pub struct FleetLink {
    node: OnceLock<String>,
    inbox: Mutex<Inbox>,
    outbox: Mutex<Outbox>,
    /// Wakes the etcd task when a tick has filled the outbox.
    pub filled: tokio::sync::Notify,
    /// Whether this node can decide (its snapshot steers names): one that cannot must not
    /// take the leader key, or the fleet would wait on a leader that never publishes.
    can_lead: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update is a whole assignment: a panicking writer leaves a whole value behind.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl FleetLink {
    /// Fleet mode for node `name`: the shield serves what the leader publishes from now on.
    pub fn enable(&self, name: &str) {
        let _ = self.node.set(name.to_string());
    }

    /// This node's name, in fleet mode.
    pub fn node(&self) -> Option<&str> {
        self.node.get().map(String::as_str)
    }

    /// The shield's thread, every tick: whether this node has what a leader needs.
    pub fn set_can_lead(&self, can: bool) {
        self.can_lead.store(can, Ordering::Relaxed);
    }

    pub fn can_lead(&self) -> bool {
        self.can_lead.load(Ordering::Relaxed)
    }

    pub fn inbox(&self) -> Inbox {
        lock(&self.inbox).clone()
    }

    /// The etcd task: the outcome of one exchange.
    pub fn deliver(&self, update: impl FnOnce(&mut Inbox)) {
        update(&mut lock(&self.inbox));
    }

    /// The etcd task lost etcd (or its lease): nobody can be trusted to lead from here.
    pub fn lost(&self, error: String) {
        let mut inbox = lock(&self.inbox);
        inbox.leading = false;
        inbox.error = Some(error);
    }

    /// The shield's thread: what this tick has for etcd (each part replaces the last).
    pub fn send(&self, outbox: Outbox) {
        {
            let mut current = lock(&self.outbox);
            if outbox.report.is_some() {
                current.report = outbox.report;
            }
            if outbox.state.is_some() {
                current.state = outbox.state;
            }
            if outbox.load.is_some() {
                current.load = outbox.load;
            }
        }
        self.filled.notify_one();
    }

    /// The etcd task: everything waiting to be written.
    pub fn take_outbox(&self) -> Outbox {
        std::mem::take(&mut lock(&self.outbox))
    }

    /// The etcd task: puts back the report and feed it could not write (unless newer ones
    /// are waiting). An unwritten state proposal is dropped: the leader that made it may no
    /// longer lead when etcd is back.
    pub fn put_back(&self, unsent: Outbox) {
        let mut current = lock(&self.outbox);
        current.report = current.report.take().or(unsent.report);
        current.load = current.load.take().or(unsent.load);
    }
}
