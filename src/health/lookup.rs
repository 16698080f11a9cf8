//! Name lookups for probe targets, bounded. The system resolver (`getaddrinfo`) blocks a thread
//! and cannot be cancelled: when it hangs, a probe's timeout frees the probe but not the
//! thread, and every interval started another one (issue 28: they piled up on the shared
//! blocking pool, up to tokio's 512, which `POST /v1/reload` needs too). Here:
//!
//! - at most [`MAX_LOOKUPS`] lookups run at once, whatever the resolver does: each holds a
//!   permit from start to its own end (not the probe's), and a probe that finds none free fails
//!   at once, saying so;
//! - probes of one name share its lookup in flight (a hung name holds one thread, not one per
//!   interval), and wait for it only as long as their own timeout;
//! - an answer is kept for [`CACHE_FOR`], so steady probing does not look names up at all.
//!
//! Address literals are never looked up.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Semaphore};

/// Most lookups in flight at once, so most blocking threads probe lookups ever hold.
pub const MAX_LOOKUPS: usize = 4;

/// How long a name's addresses are used before it is looked up again (a backend that moves
/// is probed at its new address within this time).
pub const CACHE_FOR: Duration = Duration::from_secs(15);

/// Names kept at most (distinct monitored names are few; this only bounds a misuse).
const MAX_NAMES: usize = 1024;

type Outcome = Result<Arc<[IpAddr]>, String>;

/// What a blocking lookup is: a name in, its addresses (or why not) out.
pub type LookupFn = dyn Fn(&str) -> Outcome + Send + Sync;

enum Entry {
    /// A lookup in flight: its outcome arrives on this channel.
    Pending(watch::Receiver<Option<Outcome>>),
    Cached {
        addrs: Arc<[IpAddr]>,
        until: Instant,
    },
}

pub struct Lookups {
    lookup: Arc<LookupFn>,
    permits: Arc<Semaphore>,
    names: Arc<Mutex<HashMap<String, Entry>>>,
}

impl Lookups {
    /// At most `max` lookups with `lookup` at once.
    pub fn new(max: usize, lookup: Arc<LookupFn>) -> Lookups {
        Lookups {
            lookup,
            permits: Arc::new(Semaphore::new(max)),
            names: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The system resolver's, shared by every probe of the process.
    pub fn system() -> &'static Lookups {
        static SYSTEM: OnceLock<Lookups> = OnceLock::new();
        SYSTEM.get_or_init(|| Lookups::new(MAX_LOOKUPS, Arc::new(system_lookup)))
    }

    /// Lookups in flight now.
    pub fn in_flight(&self) -> usize {
        MAX_LOOKUPS.saturating_sub(self.permits.available_permits())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `host`'s addresses with `port`: a literal as it is, a name from the cache, from the
    /// lookup in flight for it, or from a new lookup if a permit is free.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
        if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let mut pending = self.pending_or_cached(host)?;
        let outcome = loop {
            if let Some(outcome) = pending.borrow_and_update().clone() {
                break outcome;
            }
            if pending.changed().await.is_err() {
                break Err("the lookup ended without an answer".to_owned());
            }
        };
        let addrs = outcome.map_err(|e| format!("resolving {host}: {e}"))?;
        if addrs.is_empty() {
            return Err(format!("resolving {host}: no address"));
        }
        Ok(addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
    }

    /// The channel `host`'s outcome arrives on: already filled from the cache, the lookup in
    /// flight's, or a new lookup's. `Err`: every permit is taken.
    fn pending_or_cached(&self, host: &str) -> Result<watch::Receiver<Option<Outcome>>, String> {
        let mut names = self.lock();
        match names.get(host) {
            Some(Entry::Cached { addrs, until }) if *until > Instant::now() => {
                return Ok(watch::channel(Some(Ok(addrs.clone()))).1);
            }
            Some(Entry::Pending(rx)) => return Ok(rx.clone()),
            _ => {}
        }
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return Err(format!(
                "resolving {host}: {MAX_LOOKUPS} name lookups already in flight (the system \
                 resolver is slow or hangs); not starting another"
            ));
        };
        if names.len() >= MAX_NAMES {
            let now = Instant::now();
            names.retain(|_, e| matches!(e, Entry::Cached { until, .. } if *until > now));
        }
        let (tx, rx) = watch::channel(None);
        names.insert(host.to_owned(), Entry::Pending(rx.clone()));
        let (lookup, table, name) = (self.lookup.clone(), self.names.clone(), host.to_owned());
        tokio::task::spawn_blocking(move || {
            let outcome = lookup(&name);
            drop(permit);
            let mut names = table.lock().unwrap_or_else(|p| p.into_inner());
            match &outcome {
                Ok(addrs) => names.insert(
                    name,
                    Entry::Cached {
                        addrs: addrs.clone(),
                        until: Instant::now() + CACHE_FOR,
                    },
                ),
                Err(_) => names.remove(&name),
            };
            let _ = tx.send(Some(outcome));
        });
        Ok(rx)
    }
}

/// `getaddrinfo` through the standard library (blocks this thread).
fn system_lookup(host: &str) -> Outcome {
    use std::net::ToSocketAddrs;
    let addrs: Vec<IpAddr> = (host, 0)
        .to_socket_addrs()
        .map_err(|e| e.to_string())?
        .map(|a| a.ip())
        .collect();
    Ok(addrs.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A resolver that hangs until released, counting the lookups it was asked for.
    struct Hanging {
        started: AtomicUsize,
        release: Mutex<bool>,
        released: std::sync::Condvar,
    }

    impl Hanging {
        fn lookups(self: &Arc<Self>) -> Lookups {
            let me = self.clone();
            Lookups::new(
                MAX_LOOKUPS,
                Arc::new(move |_: &str| {
                    me.started.fetch_add(1, Ordering::SeqCst);
                    let mut go = me.release.lock().unwrap();
                    while !*go {
                        go = me.released.wait(go).unwrap();
                    }
                    Ok(Arc::from([IpAddr::from([192, 0, 2, 1])]))
                }),
            )
        }

        fn release(&self) {
            *self.release.lock().unwrap() = true;
            self.released.notify_all();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hanging_resolver_holds_at_most_max_lookups_threads() {
        let hanging = Arc::new(Hanging {
            started: AtomicUsize::new(0),
            release: Mutex::new(false),
            released: std::sync::Condvar::new(),
        });
        let lookups = hanging.lookups();
        // Ten rounds of probes of 20 names, each given up after 20 ms, as a probe timeout does.
        let mut busy = 0;
        for _ in 0..10 {
            for n in 0..20 {
                let name = format!("backend-{n}.example.net");
                let probe = lookups.resolve(&name, 80);
                match tokio::time::timeout(Duration::from_millis(20), probe).await {
                    Err(_) => {} // timed out waiting: the lookup hangs on
                    Ok(Err(e)) if e.contains("already in flight") => busy += 1,
                    Ok(other) => panic!("{name}: {other:?}"),
                }
            }
        }
        // The first MAX_LOOKUPS names each started one lookup; nothing else did.
        assert_eq!(hanging.started.load(Ordering::SeqCst), MAX_LOOKUPS);
        assert_eq!(lookups.in_flight(), MAX_LOOKUPS);
        assert_eq!(
            busy,
            10 * (20 - MAX_LOOKUPS),
            "the others were refused at once"
        );
        // Released, the answers are cached: no new lookup for a name that answered.
        hanging.release();
        let addrs = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Ok(addrs) = lookups.resolve("backend-0.example.net", 53).await {
                    return addrs;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the released lookup answers");
        assert_eq!(addrs, vec![SocketAddr::from(([192, 0, 2, 1], 53))]);
        assert_eq!(hanging.started.load(Ordering::SeqCst), MAX_LOOKUPS);
        // Literals are never looked up.
        let literal = lookups.resolve("[2001:db8::1]", 443).await.unwrap();
        assert_eq!(literal, vec!["[2001:db8::1]:443".parse().unwrap()]);
        assert_eq!(hanging.started.load(Ordering::SeqCst), MAX_LOOKUPS);
    }
}
