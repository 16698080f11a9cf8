//! Where load feeds come from, and the one slot that holds the latest accepted feed.
//!
//! Deliverers (the watched file, `POST /v1/load`, `steerdns load push`) call
//! [`FeedSlot::offer`]; the shield loop reads [`FeedSlot::latest`] every tick. Every delivery
//! goes through the same [`parse_feed`] checks, and a refused feed never replaces the latest
//! one. A feed replaces the latest whatever its `time` (last writer wins): refusing "older"
//! feeds would let one sender with a fast clock lock every other sender out, and freshness is
//! the step's business (it sees both the feed's time and when it was received).
//!
//! Owns no decisions and never touches the serving path; the slot sits behind a mutex because
//! only the shield loop and deliverers, never DNS queries, use it.

use std::fmt;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use crate::hash::fnv1a64;
use crate::rfc3339;
use crate::shield::feed::{parse_feed, FeedError, FeedNames, LoadFeed, MAX_FEED_BYTES};

/// How a feed arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedOrigin {
    /// The load file the server watches.
    File,
    /// `POST /v1/load` (which `steerdns load push` uses too).
    Http,
    /// Any other source (a Prometheus query, a test), by name.
    Other(String),
    /// Fleet mode: the fleet's freshest feed in etcd, as `<node> (<how it reached it>)`.
    Fleet(String),
}

impl fmt::Display for FeedOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FeedOrigin::File => f.write_str("file"),
            FeedOrigin::Http => f.write_str("http"),
            FeedOrigin::Other(name) => f.write_str(name),
            FeedOrigin::Fleet(from) => write!(f, "etcd, from {from}"),
        }
    }
}

/// The last refused feed, for `steerdns status` and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedRefusal {
    /// When it was refused, RFC 3339 UTC.
    pub at: String,
    pub origin: FeedOrigin,
    /// The [`FeedError`] as an operator reads it.
    pub reason: String,
}

/// Counters of the slot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeedStats {
    pub accepted: u64,
    pub refused: u64,
    pub last_refusal: Option<FeedRefusal>,
    /// When the latest feed was received, RFC 3339 UTC.
    pub last_accepted_at: Option<String>,
}

/// The latest accepted feed, shared between deliverers and the shield loop.
#[derive(Debug, Default)]
pub struct FeedSlot {
    inner: Mutex<SlotState>,
}

#[derive(Debug, Default)]
struct SlotState {
    latest: Option<(LoadFeed, SystemTime, FeedOrigin)>,
    /// Counts accepted feeds (fleet mode shares each new one).
    generation: u64,
    stats: FeedStats,
}

impl FeedSlot {
    pub fn new() -> FeedSlot {
        FeedSlot::default()
    }

    /// Checks a feed against the configured names; if it passes it becomes the latest (received
    /// at `now`), otherwise the refusal is counted and remembered and the latest stays.
    pub fn offer(
        &self,
        bytes: &[u8],
        origin: FeedOrigin,
        names: &FeedNames<'_>,
        now: SystemTime,
    ) -> Result<(), FeedError> {
        self.offer_checked(parse_feed(bytes, names, now), origin, now)
    }

    /// Takes the outcome of a feed's checks (from [`parse_feed`] or
    /// [`crate::shield::feed::check_entries`]): a feed that passed becomes the latest, a
    /// refusal is counted and remembered and the latest stays.
    pub fn offer_checked(
        &self,
        checked: Result<LoadFeed, FeedError>,
        origin: FeedOrigin,
        now: SystemTime,
    ) -> Result<(), FeedError> {
        match checked {
            Ok(feed) => {
                let mut state = self.lock();
                state.stats.accepted += 1;
                state.stats.last_accepted_at = Some(rfc3339::format_utc(now));
                state.latest = Some((feed, now, origin));
                state.generation += 1;
                Ok(())
            }
            Err(error) => {
                self.refuse(origin, &error, now);
                Err(error)
            }
        }
    }

    /// Counts a feed refused before it could be offered (unreadable file, body too large for
    /// the HTTP endpoint, …).
    pub fn refuse(&self, origin: FeedOrigin, error: &FeedError, now: SystemTime) {
        // Debug-quoted: the reason can echo text from the sender (field names, file contents).
        tracing::warn!(%origin, reason = ?error.to_string(), "load feed refused");
        let mut state = self.lock();
        state.stats.refused += 1;
        state.stats.last_refusal = Some(FeedRefusal {
            at: rfc3339::format_utc(now),
            origin,
            reason: error.to_string(),
        });
    }

    /// The latest accepted feed, when it was received, and how it came.
    pub fn latest(&self) -> Option<(LoadFeed, SystemTime, FeedOrigin)> {
        self.lock().latest.clone()
    }

    /// [`FeedSlot::latest`] with a number that changes with every accepted feed.
    pub fn latest_numbered(&self) -> (u64, Option<(LoadFeed, SystemTime, FeedOrigin)>) {
        let state = self.lock();
        (state.generation, state.latest.clone())
    }

    pub fn stats(&self) -> FeedStats {
        self.lock().stats.clone()
    }

    /// A poisoned lock only means a deliverer panicked mid-update; every update is a single
    /// assignment of checked values, so the state is still whole.
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A place load comes from. Files and HTTP pushes are the built-in ones (pushes need no poller:
/// the admin endpoint offers to the slot directly); a Prometheus query source can be added
/// later behind this trait.
pub trait LoadSource: Send {
    /// For logs and status, e.g. `file /etc/steerdns/load.json`.
    fn name(&self) -> String;
    /// Called every shield tick: fetch what is new, if anything, and offer it to `slot`.
    fn poll(&mut self, slot: &FeedSlot, names: &FeedNames<'_>, now: SystemTime);
    /// In fleet mode, polled by the shield leader only (one node asks a shared monitoring
    /// system, and shares what it got through etcd) rather than by every node.
    fn leader_only(&self) -> bool {
        false
    }
}

/// A load file rewritten in place or replaced by a monitoring system.
///
/// Every poll reads the file (at most [`MAX_FEED_BYTES`] + 1 bytes) and offers it only when
/// its length, modification time or content hash changed, so an unchanged file is offered once.
/// The content is read every time rather than trusting the modification time alone because
/// some filesystems keep it to the second, and a same-length rewrite within that second would
/// otherwise go unseen. A missing file is no feed (not an error); a file that exists but cannot
/// be read is a refusal, counted once until its problem changes.
#[derive(Debug)]
pub struct FileSource {
    path: PathBuf,
    last_seen: Seen,
}

/// What the previous poll found, so each state change is acted on once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Nothing,
    Missing,
    Content {
        len: u64,
        modified: Option<SystemTime>,
        hash: u64,
    },
    Unreadable(String),
}

/// One read of the load file.
struct FileRead {
    /// At most one byte past [`MAX_FEED_BYTES`].
    bytes: Vec<u8>,
    /// The file's length when opened.
    len: u64,
    modified: Option<SystemTime>,
}

impl FileSource {
    pub fn new(path: impl Into<PathBuf>) -> FileSource {
        FileSource {
            path: path.into(),
            last_seen: Seen::Nothing,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file, at most one byte past the limit (enough to know it is too large).
    fn read(&self) -> Result<Option<FileRead>, std::io::Error> {
        // O_NONBLOCK: a named pipe in place of the file must not block the shield's thread.
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let metadata = file.metadata()?;
        if metadata.is_dir() {
            return Err(std::io::Error::other("is a directory"));
        }
        if !metadata.is_file() {
            return Err(std::io::Error::other("is not a regular file"));
        }
        let mut bytes = Vec::new();
        file.take(MAX_FEED_BYTES as u64 + 1)
            .read_to_end(&mut bytes)?;
        Ok(Some(FileRead {
            bytes,
            len: metadata.len(),
            modified: metadata.modified().ok(),
        }))
    }

    fn unreadable(&mut self, slot: &FeedSlot, reason: String, now: SystemTime) {
        let seen = Seen::Unreadable(reason.clone());
        if self.last_seen != seen {
            let error = FeedError::Unreadable {
                what: format!("load file {}", self.path.display()),
                reason,
            };
            slot.refuse(FeedOrigin::File, &error, now);
            self.last_seen = seen;
        }
    }
}

impl LoadSource for FileSource {
    fn name(&self) -> String {
        format!("file {}", self.path.display())
    }

    fn poll(&mut self, slot: &FeedSlot, names: &FeedNames<'_>, now: SystemTime) {
        let read = match self.read() {
            Ok(Some(read)) => read,
            Ok(None) => {
                if matches!(self.last_seen, Seen::Content { .. }) {
                    tracing::warn!(path = %self.path.display(), "load file disappeared; the last feed stays until it goes stale");
                }
                self.last_seen = Seen::Missing;
                return;
            }
            Err(e) => return self.unreadable(slot, e.to_string(), now),
        };
        let seen = Seen::Content {
            len: read.len,
            modified: read.modified,
            hash: fnv1a64(&read.bytes),
        };
        if seen == self.last_seen {
            return;
        }
        self.last_seen = seen;
        if read.bytes.len() > MAX_FEED_BYTES {
            // Said with the file's real size: only the first bytes past the limit were read.
            let error = FeedError::TooLarge {
                size: read.len.max(read.bytes.len() as u64),
                limit: MAX_FEED_BYTES,
            };
            return slot.refuse(FeedOrigin::File, &error, now);
        }
        // A refusal is counted and logged by the slot; the file is offered again once it changes.
        let _ = slot.offer(&read.bytes, FeedOrigin::File, names, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::time::Duration;

    const REGIONS: &[&str] = &["eu-west", "na-east"];
    const SITES: &[&str] = &["fb-eu"];
    const KNOWN: FeedNames<'static> = FeedNames {
        regions: REGIONS,
        sites: SITES,
        cells: &[],
    };
    /// 2026-11-30T10:00:00Z.
    const T0: u64 = 1_796_032_800;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + secs)
    }

    fn feed(load: u32) -> String {
        format!(
            r#"{{"time": "2026-11-30T10:00:00Z", "regions": {{"eu-west": {{"load": {load}, "capacity": 1000}}}}}}"#
        )
    }

    fn latest_load(slot: &FeedSlot) -> Option<f64> {
        slot.latest()
            .map(|(feed, _, _)| feed.regions["eu-west"].load)
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("steerdns-feed-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_accepted_feed_becomes_the_latest_with_its_receipt() {
        let slot = FeedSlot::new();
        assert_eq!(slot.latest(), None);
        assert_eq!(slot.stats(), FeedStats::default());
        slot.offer(feed(950).as_bytes(), FeedOrigin::Http, &KNOWN, at(2))
            .unwrap();
        let (latest, received, origin) = slot.latest().unwrap();
        assert_eq!(latest.regions["eu-west"].load, 950.0);
        assert_eq!(received, at(2));
        assert_eq!(origin, FeedOrigin::Http);
        slot.offer(feed(700).as_bytes(), FeedOrigin::File, &KNOWN, at(3))
            .unwrap();
        assert_eq!(latest_load(&slot), Some(700.0));
        let stats = slot.stats();
        assert_eq!((stats.accepted, stats.refused), (2, 0));
        assert_eq!(
            stats.last_accepted_at.as_deref(),
            Some("2026-11-30T10:00:03Z")
        );
        assert_eq!(stats.last_refusal, None);
    }

    #[test]
    fn a_refusal_keeps_the_previous_feed_and_says_why() {
        let slot = FeedSlot::new();
        slot.offer(feed(950).as_bytes(), FeedOrigin::Http, &KNOWN, at(0))
            .unwrap();
        let bad = r#"{"time": "2026-11-30T10:00:00Z", "regions": {"eu-west": {"load": 1, "capacity": 0}}}"#;
        let origin = FeedOrigin::Other("prometheus".into());
        let error = slot
            .offer(bad.as_bytes(), origin.clone(), &KNOWN, at(5))
            .unwrap_err();
        assert_eq!(latest_load(&slot), Some(950.0));
        let stats = slot.stats();
        assert_eq!((stats.accepted, stats.refused), (1, 1));
        assert_eq!(
            stats.last_accepted_at.as_deref(),
            Some("2026-11-30T10:00:00Z")
        );
        assert_eq!(
            stats.last_refusal,
            Some(FeedRefusal {
                at: "2026-11-30T10:00:05Z".into(),
                origin,
                reason: error.to_string(),
            })
        );
        assert_eq!(
            error.to_string(),
            "regions.eu-west.capacity: must be > 0 (got 0)"
        );
    }

    #[test]
    fn a_feed_replaces_the_latest_whatever_its_time() {
        let slot = FeedSlot::new();
        let later = feed(100).replace("10:00:00Z", "10:00:30Z");
        slot.offer(later.as_bytes(), FeedOrigin::Http, &KNOWN, at(30))
            .unwrap();
        slot.offer(feed(200).as_bytes(), FeedOrigin::File, &KNOWN, at(31))
            .unwrap();
        let (latest, received, origin) = slot.latest().unwrap();
        assert_eq!(
            (latest.time, received, origin),
            (at(0), at(31), FeedOrigin::File)
        );
    }

    #[test]
    fn origins_display_for_operators() {
        assert_eq!(FeedOrigin::File.to_string(), "file");
        assert_eq!(FeedOrigin::Http.to_string(), "http");
        assert_eq!(
            FeedOrigin::Other("prometheus".into()).to_string(),
            "prometheus"
        );
    }

    #[test]
    fn the_slot_is_shared_across_threads() {
        let slot = std::sync::Arc::new(FeedSlot::new());
        let pushers: Vec<_> = (0..4)
            .map(|i| {
                let slot = slot.clone();
                std::thread::spawn(move || {
                    for n in 0..25 {
                        let text = if n % 5 == 0 {
                            "junk".to_string()
                        } else {
                            feed(i * 100 + n)
                        };
                        let _ = slot.offer(text.as_bytes(), FeedOrigin::Http, &KNOWN, at(1));
                    }
                })
            })
            .collect();
        for pusher in pushers {
            pusher.join().unwrap();
        }
        let stats = slot.stats();
        assert_eq!((stats.accepted, stats.refused), (80, 20));
        assert!(latest_load(&slot).is_some());
    }

    #[test]
    fn file_source_picks_up_a_new_file_and_ignores_an_unchanged_one() {
        let dir = temp_dir("pickup");
        let path = dir.join("load.json");
        let slot = FeedSlot::new();
        let mut source = FileSource::new(&path);
        assert_eq!(source.name(), format!("file {}", path.display()));

        // No file yet: no feed, and no refusal either.
        source.poll(&slot, &KNOWN, at(0));
        assert_eq!(slot.latest(), None);
        assert_eq!(slot.stats(), FeedStats::default());

        fs::write(&path, feed(950)).unwrap();
        source.poll(&slot, &KNOWN, at(1));
        assert_eq!(latest_load(&slot), Some(950.0));
        let (_, received, origin) = slot.latest().unwrap();
        assert_eq!((received, origin), (at(1), FeedOrigin::File));

        // Unchanged: not offered again (the received time stays).
        source.poll(&slot, &KNOWN, at(2));
        source.poll(&slot, &KNOWN, at(3));
        assert_eq!(slot.latest().unwrap().1, at(1));
        assert_eq!(slot.stats().accepted, 1);

        // Rewritten with the same length: still seen (content hash).
        fs::write(&path, feed(951)).unwrap();
        source.poll(&slot, &KNOWN, at(4));
        assert_eq!(latest_load(&slot), Some(951.0));
        assert_eq!(slot.stats().accepted, 2);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_source_refuses_a_half_written_file_once_and_keeps_the_previous_feed() {
        let dir = temp_dir("half");
        let path = dir.join("load.json");
        let slot = FeedSlot::new();
        let mut source = FileSource::new(&path);
        fs::write(&path, feed(950)).unwrap();
        source.poll(&slot, &KNOWN, at(0));

        let whole = feed(400);
        fs::write(&path, &whole[..whole.len() / 2]).unwrap();
        source.poll(&slot, &KNOWN, at(1));
        source.poll(&slot, &KNOWN, at(2));
        assert_eq!(latest_load(&slot), Some(950.0));
        let stats = slot.stats();
        assert_eq!(
            (stats.accepted, stats.refused),
            (1, 1),
            "refused once, not every tick"
        );
        let refusal = stats.last_refusal.unwrap();
        assert_eq!(refusal.origin, FeedOrigin::File);
        assert!(
            refusal.reason.starts_with("load feed does not parse"),
            "{}",
            refusal.reason
        );

        // The writer finishes: the complete feed is taken.
        fs::write(&path, &whole).unwrap();
        source.poll(&slot, &KNOWN, at(3));
        assert_eq!(latest_load(&slot), Some(400.0));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_source_keeps_the_last_feed_when_the_file_is_deleted() {
        let dir = temp_dir("deleted");
        let path = dir.join("load.json");
        let slot = FeedSlot::new();
        let mut source = FileSource::new(&path);
        fs::write(&path, feed(950)).unwrap();
        source.poll(&slot, &KNOWN, at(0));
        fs::remove_file(&path).unwrap();
        source.poll(&slot, &KNOWN, at(1));
        source.poll(&slot, &KNOWN, at(2));
        assert_eq!(latest_load(&slot), Some(950.0));
        assert_eq!(
            slot.latest().unwrap().1,
            at(0),
            "goes stale by its received time"
        );
        assert_eq!(slot.stats().refused, 0);

        // Back again, even with the same content: a fresh delivery.
        fs::write(&path, feed(950)).unwrap();
        source.poll(&slot, &KNOWN, at(3));
        assert_eq!(slot.latest().unwrap().1, at(3));
        assert_eq!(slot.stats().accepted, 2);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_source_refuses_an_unreadable_path_once() {
        let dir = temp_dir("unreadable");
        let path = dir.join("load.json");
        let slot = FeedSlot::new();
        let mut source = FileSource::new(&path);
        fs::write(&path, feed(950)).unwrap();
        source.poll(&slot, &KNOWN, at(0));
        // Replaced by a directory: it exists but cannot be read as a feed.
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        source.poll(&slot, &KNOWN, at(1));
        source.poll(&slot, &KNOWN, at(2));
        let stats = slot.stats();
        assert_eq!(stats.refused, 1);
        let reason = stats.last_refusal.unwrap().reason;
        assert_eq!(
            reason,
            format!("load file {}: cannot read: is a directory", path.display())
        );
        assert_eq!(latest_load(&slot), Some(950.0));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn file_source_refuses_an_oversized_file_with_its_real_size() {
        let dir = temp_dir("oversized");
        let path = dir.join("load.json");
        let slot = FeedSlot::new();
        let mut source = FileSource::new(&path);
        let mut text = feed(950).into_bytes();
        text.resize(3 * MAX_FEED_BYTES, b' ');
        fs::write(&path, &text).unwrap();
        source.poll(&slot, &KNOWN, at(0));
        source.poll(&slot, &KNOWN, at(1));
        let stats = slot.stats();
        assert_eq!((stats.accepted, stats.refused), (0, 1));
        assert_eq!(
            stats.last_refusal.unwrap().reason,
            FeedError::TooLarge {
                size: 3 * MAX_FEED_BYTES as u64,
                limit: MAX_FEED_BYTES
            }
            .to_string()
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
