//! How every fleet task of a node keeps its etcd session: one reconnect policy (back-off and
//! when it resets) and one set of timeouts, so the registry and control watch, the rollout
//! coordinator, the shield exchange and the health exchange behave the same when etcd goes
//! away and comes back.
//!
//! A task runs sessions in a loop: [`Reconnect::attempt`] starts one, the session calls
//! [`Attempt::connected`] once etcd has answered, and when the session ends
//! [`Reconnect::wait`] sleeps before the next. The back-off starts at [`INITIAL_BACKOFF`],
//! doubles up to [`MAX_BACKOFF`], and starts over only after a connection that stayed healthy
//! for [`HEALTHY_FOR`]: a connection that answers and then drops at once (a flapping endpoint,
//! a lease refused) keeps backing off instead of hammering etcd ten times a second.
//!
//! The parts share one etcd client, the node's [`Link`]: one connection (one HTTP/2 channel,
//! one authentication) per node instead of one per part. A part whose session ended drops the
//! client it had ([`Link::session`]), so the next session of any part connects afresh (a new
//! channel, a new auth token); parts whose sessions still run keep theirs until they end.
//!
//! Leases stay one per part on purpose: a lease is a part's proof of life. A shield or
//! coordinator part that stalls must lose its leader key while the node's registry entry and
//! probe results stay, and a part's claims must not outlive the part because another part of
//! the same node keeps a shared lease alive.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::Client;

use super::FleetError;
use crate::config::fleet::FleetConfig;

/// First wait after a session ends.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between reconnection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How long a connection must have stayed up for the back-off to start over.
pub const HEALTHY_FOR: Duration = Duration::from_secs(5);
/// Interval of the HTTP/2 pings that notice a dead peer on an idle connection.
pub const PING_EVERY: Duration = Duration::from_secs(2);

/// Bound on one etcd request (and on connecting), from `[fleet] timeout_ms`.
pub fn request_timeout(config: &FleetConfig) -> Duration {
    Duration::from_millis(config.timeout_ms.max(1))
}

/// How often a lease is renewed and leased records rewritten: a third of the TTL (two renewals
/// may fail before it expires), between 0.5 s and 5 s.
pub fn keep_every(config: &FleetConfig) -> Duration {
    Duration::from_secs(config.lease_ttl_secs)
        .div_f64(3.0)
        .clamp(Duration::from_millis(500), Duration::from_secs(5))
}

/// The node's one etcd client, shared by its fleet parts (node registry and control watch,
/// rollout coordinator, shield exchange, health exchange).
pub struct Link {
    config: FleetConfig,
    /// The client and its generation (how many were made before it), or none after a session
    /// on it ended.
    current: tokio::sync::Mutex<Option<(u64, Client)>>,
    made: AtomicU64,
}

impl Link {
    pub fn new(config: FleetConfig) -> Link {
        Link {
            config,
            current: tokio::sync::Mutex::new(None),
            made: AtomicU64::new(0),
        }
    }

    /// The `[fleet]` settings the link connects with (timeouts, lease TTL, prefix).
    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// How many clients this node has made (one at start, one more after each session that
    /// ended on it): shown in status and metrics.
    pub fn connections_made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// Runs one session of a part on the shared client (connecting first if there is none)
    /// and returns why it ended; the client it ran on is dropped from the link, so the next
    /// session connects afresh.
    pub async fn session<F, S>(&self, part: F) -> Result<std::convert::Infallible, FleetError>
    where
        F: FnOnce(Client) -> S,
        S: Future<Output = Result<std::convert::Infallible, FleetError>>,
    {
        let (generation, client) = self.client().await?;
        let ended = part(client).await;
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|(g, _)| *g == generation) {
            *current = None;
        }
        ended
    }

    async fn client(&self) -> Result<(u64, Client), FleetError> {
        // Held while connecting (bounded by the request timeout), so parts that start
        // together share the one connection made.
        let mut current = self.current.lock().await;
        if let Some((generation, client)) = current.as_ref() {
            return Ok((*generation, client.clone()));
        }
        let client = super::client::connect(&self.config).await?;
        let generation = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        *current = Some((generation, client.clone()));
        Ok((generation, client))
    }
}

/// One task's reconnect back-off.
#[derive(Debug)]
pub struct Reconnect {
    next: Duration,
}

impl Default for Reconnect {
    fn default() -> Self {
        Reconnect {
            next: INITIAL_BACKOFF,
        }
    }
}

/// One session's life, as the back-off judges it.
#[derive(Debug, Default)]
pub struct Attempt {
    connected_at: Option<Instant>,
}

impl Attempt {
    /// etcd answered: the session is up from now.
    pub fn connected(&mut self) {
        self.connected_at.get_or_insert_with(Instant::now);
    }

    fn stayed_healthy(&self) -> bool {
        self.connected_at
            .is_some_and(|at| at.elapsed() >= HEALTHY_FOR)
    }
}

impl Reconnect {
    /// Starts a session.
    pub fn attempt(&self) -> Attempt {
        Attempt::default()
    }

    /// The wait before the next session, after `ended` ended; advances the back-off.
    pub fn next_wait(&mut self, ended: &Attempt) -> Duration {
        if ended.stayed_healthy() {
            self.next = INITIAL_BACKOFF;
        }
        let wait = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        wait
    }

    /// Sleeps before the next session, after `ended` ended.
    pub async fn wait(&mut self, ended: &Attempt) {
        tokio::time::sleep(self.next_wait(ended)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backs_off_to_the_cap_while_sessions_fail() {
        let mut reconnect = Reconnect::default();
        let failed = reconnect.attempt();
        let waits: Vec<_> = (0..8).map(|_| reconnect.next_wait(&failed)).collect();
        assert_eq!(waits[0], INITIAL_BACKOFF);
        assert_eq!(waits[1], INITIAL_BACKOFF * 2);
        assert_eq!(*waits.last().unwrap(), MAX_BACKOFF);
    }

    #[test]
    fn a_connection_that_drops_at_once_does_not_reset() {
        let mut reconnect = Reconnect::default();
        let failed = reconnect.attempt();
        reconnect.next_wait(&failed);
        reconnect.next_wait(&failed);
        let mut flapped = reconnect.attempt();
        flapped.connected();
        assert_eq!(reconnect.next_wait(&flapped), INITIAL_BACKOFF * 4);
    }

    #[test]
    fn a_connection_that_stayed_healthy_resets() {
        let mut reconnect = Reconnect::default();
        let failed = reconnect.attempt();
        for _ in 0..6 {
            reconnect.next_wait(&failed);
        }
        let healthy = Attempt {
            connected_at: Instant::now().checked_sub(HEALTHY_FOR),
        };
        assert_eq!(reconnect.next_wait(&healthy), INITIAL_BACKOFF);
    }
}
