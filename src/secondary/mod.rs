//! Secondary zones (issue 33 item 4): one background thread per `[[secondary.zone]]` pulls the
//! zone from its primaries over TCP, by IXFR from the copy held (RFC 1995, [`ixfr`]) or AXFR,
//! TSIG-signed when the zone has a key, on the SOA refresh/retry timers (RFC 1035 §3.3.13) or
//! at once when a primary sends a NOTIFY (RFC 1996, [`notify`]); one per
//! `[[secondary.catalog]]` (RFC 9432, item 5) pulls the catalog and each member it lists.
//!
//! Owns the transfer loop and the per-zone transfer status. A transfer is parsed and validated
//! exactly like a zone file (it is turned into zone-file text and read back by the same parser
//! and `zone::validate`); only a valid one is written, atomically, to the zone's on-disk copy,
//! and then enters the snapshot through the one reload path ([`Reloader::reload`]) — the
//! snapshot loader reads the copies like zone files, which is also how a restart serves the
//! zone from disk before any primary answers. A bad transfer (TSIG, malformed, failing
//! validation) keeps the last good copy serving and says why (log WARN and status). Never
//! touches the serving path: NOTIFYs reach the task through [`notify::Signal`].
//!
//! A zone's TSIG key file is read again on every SIGHUP or `steerdns reload`
//! (every operator reload moves a counter each task looks at, [`crate::reload::operator_reloads`]): a good new key replaces
//! the old one (for transfers and NOTIFY), a bad one keeps the old key and is reported (log
//! WARN, `key_problem` and `last_refusal` in status).

pub mod ixfr;
pub mod notify;
pub mod transfer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hickory_proto::rr::Name;
use serde::{Deserialize, Serialize};

use crate::config::secondary::SecondaryZoneConfig;
use crate::dns::tsig::{read_key_file, Key, KeyFileError};
use crate::reload::{Reloader, Trigger};
use crate::zone::parse::{load_zone_file, parse_zone_text, ZoneProblem};
use crate::zone::validate::validate;

use transfer::{axfr, serial_newer, soa_serial, zone_text, Entry, Ixfr, Link, TransferError};

/// Refresh and retry used until a SOA is known (no copy on disk yet).
const INITIAL_RETRY: Duration = Duration::from_secs(10);
/// Timers from a SOA are clamped to this range: a SOA saying 0 must not spin the task.
const MIN_TIMER: Duration = Duration::from_secs(1);
const MAX_TIMER: Duration = Duration::from_secs(24 * 3600);
/// How often a zone's thread looks for a NOTIFY while it waits for its timer.
const NOTIFY_POLL: Duration = Duration::from_millis(100);

/// What status shows per secondary zone.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ZoneStatus {
    /// The serial being served (from the last good copy); `None`: nothing transferred yet. In
    /// `/v1/status`, the serial of the snapshot the status is made from.
    pub serial: Option<u32>,
    /// When the last transfer in ended (RFC 3339), its kind ("ixfr" or "axfr"), the serial it
    /// brought and its result ("ok", with why an IXFR became an AXFR, or why refused).
    pub last_transfer: Option<String>,
    pub last_transfer_kind: Option<String>,
    pub last_transfer_serial: Option<u32>,
    pub last_result: Option<String>,
    /// The last refused transfer or failed check, and why.
    pub last_refusal: Option<String>,
    /// When the next refresh check is due (RFC 3339).
    pub next_refresh: Option<String>,
    /// Past the SOA expire time without reaching a primary.
    pub expired: bool,
    /// When the copy served expires (RFC 3339: the last answer from a primary plus the SOA
    /// expire time) unless a primary answers before.
    pub expires_at: Option<String>,
    /// Transfers in accepted, refused (failed validation), and refresh checks that failed.
    pub transfers_ok: u64,
    pub transfers_refused: u64,
    pub checks_failed: u64,
    /// The last NOTIFY accepted (RFC 3339 and the serial it carried), the last one refused
    /// (when, from whom, why), and the counts of both.
    pub last_notify: Option<String>,
    pub last_notify_refusal: Option<String>,
    pub notifies_accepted: u64,
    pub notifies_refused: u64,
    /// The zone's key file could not be read again (when, why); the key read before is kept.
    pub key_problem: Option<String>,
    /// For a member of a consumed catalog: its `group` properties (RFC 9432 4.4.2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub catalog_groups: Vec<String>,
}

/// The operator's reload count ([`crate::reload::operator_reloads`]): moved by every SIGHUP
/// and `steerdns reload`, after which each zone's task reads its key file again (at its next
/// look, within `NOTIFY_POLL`).
fn key_generation() -> u64 {
    crate::reload::operator_reloads()
}

/// The status of every secondary zone, by name (background threads write, admin reads).
#[derive(Debug, Default)]
pub struct SecondaryStatus {
    zones: Mutex<BTreeMap<String, ZoneStatus>>,
}

impl SecondaryStatus {
    /// Every zone's status, with its NOTIFY counts as the serving path left them.
    pub fn snapshot(&self) -> BTreeMap<String, ZoneStatus> {
        let mut zones = self.zones.lock().map(|z| z.clone()).unwrap_or_default();
        for (name, report) in notify::reports() {
            let status = zones.entry(name).or_default();
            status.notifies_accepted = report.accepted;
            status.notifies_refused = report.refused;
            status.last_notify = report.last_notify;
            status.last_notify_refusal = report.last_refusal;
        }
        zones
    }

    fn update(&self, zone: &str, change: impl FnOnce(&mut ZoneStatus)) {
        if let Ok(mut zones) = self.zones.lock() {
            change(zones.entry(zone.to_string()).or_default());
        }
    }
}

/// The process-wide status (one server per process).
pub fn status() -> &'static SecondaryStatus {
    static STATUS: std::sync::OnceLock<SecondaryStatus> = std::sync::OnceLock::new();
    STATUS.get_or_init(SecondaryStatus::default)
}

/// SOA timers of the copy being served.
#[derive(Debug, Clone, Copy)]
struct Timers {
    serial: u32,
    refresh: Duration,
    retry: Duration,
    expire: Duration,
}

/// The body of one zone's thread: check, transfer when newer, wait for the timer or a NOTIFY,
/// until `sleep` says stop.
pub fn run(
    zone: SecondaryZoneConfig,
    reloader: Arc<Reloader>,
) -> impl FnOnce(&dyn Fn(Duration) -> bool) {
    move |sleep| {
        let Some(mut task) = ZoneTask::new(zone) else {
            return;
        };
        loop {
            let pause = task.step(&reloader);
            if wait(sleep, pause, || task.pending()) {
                return;
            }
        }
    }
}

/// Sleeps `pause`, ended early once `notified` holds (checked every [`NOTIFY_POLL`]); true
/// when `sleep` says stop.
fn wait(sleep: &dyn Fn(Duration) -> bool, pause: Duration, notified: impl Fn() -> bool) -> bool {
    let end = Instant::now() + pause;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if notified() || left.is_zero() {
            return false;
        }
        if sleep(left.min(NOTIFY_POLL)) {
            return true;
        }
    }
}

/// The body of one catalog's thread (RFC 9432, consumer): the catalog is refreshed like a
/// secondary zone, and every member its copy lists is refreshed on its own timers (or its
/// NOTIFY) from the catalog's primaries, on this one thread, until `sleep` says stop. A member
/// that leaves the catalog stops being refreshed (and the loader stops serving it); one that
/// joins is transferred at the next pass.
pub fn run_catalog(
    catalog: SecondaryZoneConfig,
    dir: std::path::PathBuf,
    reloader: Arc<Reloader>,
) -> impl FnOnce(&dyn Fn(Duration) -> bool) {
    move |sleep| {
        let Some(mut task) = ZoneTask::new(catalog.clone()) else {
            return;
        };
        let mut catalog_due = Instant::now();
        let mut members: BTreeMap<String, (ZoneTask, Instant)> = BTreeMap::new();
        loop {
            let now = Instant::now();
            if catalog_due <= now || task.pending() {
                catalog_due = now + task.step(&reloader);
            }
            update_members(&catalog, &dir, &mut members, now);
            for (member_task, due) in members.values_mut() {
                if *due <= Instant::now() || member_task.pending() {
                    *due = Instant::now() + member_task.step(&reloader);
                }
            }
            let next = members
                .values()
                .map(|(_, due)| *due)
                .fold(catalog_due, Instant::min);
            let pause = next
                .saturating_duration_since(Instant::now())
                .max(MIN_TIMER);
            let notified = || task.pending() || members.values().any(|(m, _)| m.pending());
            if wait(sleep, pause, notified) {
                return;
            }
        }
    }
}

/// Brings `members` to what the catalog's copy lists: new ones due `now`, gone ones dropped
/// (and their NOTIFYs refused again).
fn update_members(
    catalog: &SecondaryZoneConfig,
    dir: &Path,
    members: &mut BTreeMap<String, (ZoneTask, Instant)>,
    now: Instant,
) {
    let listed = crate::snapshot::catalog::catalog_member_zones(catalog, dir);
    members.retain(|name, (member, _)| {
        let kept = listed.iter().any(|m| &m.name == name);
        if !kept {
            notify::unregister(&member.origin);
        }
        kept
    });
    for member in listed {
        if !members.contains_key(&member.name) {
            if let Some(member_task) = ZoneTask::new(member.clone()) {
                members.insert(member.name.clone(), (member_task, now));
            }
        }
    }
}

/// One secondary zone's refresh state: its config and TSIG key, the timers of the copy served,
/// when a primary last answered, and where NOTIFYs for it are left.
struct ZoneTask {
    zone: SecondaryZoneConfig,
    origin: Name,
    /// The zone's key once read (`None` also while `key_file` cannot be read).
    key: Option<Key>,
    timers: Option<Timers>,
    last_contact: SystemTime,
    /// Past the SOA expire time without a primary answering; kept across a restart (the
    /// marker says so) until one answers, since the restart does not make the copy fresher.
    expired: bool,
    signal: Arc<notify::Signal>,
    /// The [`key_generation`] the key was last read at.
    key_generation: u64,
}

impl ZoneTask {
    fn new(zone: SecondaryZoneConfig) -> Option<ZoneTask> {
        let Some(origin) = zone.origin() else {
            tracing::warn!("secondary zone {:?}: not a domain name", zone.name);
            return None;
        };
        let timers = copy_timers(&zone.copy_path(), &origin);
        let started = SystemTime::now();
        // Expired before a restart: still SERVFAIL (the load read the marker) until a
        // primary answers.
        let expired = zone.expired_marker().exists();
        status().update(&zone.name, |s| {
            s.serial = timers.map(|t| t.serial);
            s.expired = expired;
            s.expires_at = expiry(started, timers);
            s.catalog_groups = zone.catalog_groups.clone();
        });
        // A zone with a key is registered for NOTIFY only once its key is read: until then
        // nothing could check a NOTIFY's signature.
        let signal = match zone.key_file {
            None => notify::register(&zone.name, &origin, &zone.primaries, None),
            Some(_) => Arc::default(),
        };
        Some(ZoneTask {
            zone,
            origin,
            key: None,
            timers,
            last_contact: started,
            expired,
            signal,
            key_generation: key_generation(),
        })
    }

    /// A NOTIFY waits, or the key file is to be read again.
    fn pending(&self) -> bool {
        self.signal.pending() || self.keys_stale()
    }

    fn keys_stale(&self) -> bool {
        self.key.is_some() && self.key_generation != key_generation()
    }

    /// Reads the key file again (a reload asked): a good key replaces the one held, a bad
    /// file keeps it and is reported.
    fn reread_key(&mut self) {
        self.key_generation = key_generation();
        let name = self.zone.name.clone();
        match load_key(&self.zone) {
            Ok(Some(key)) => {
                let zone = &self.zone;
                self.signal =
                    notify::register(&zone.name, &self.origin, &zone.primaries, Some(key.clone()));
                tracing::info!("secondary zone {name}: TSIG key {} read again", key.name);
                self.key = Some(key);
                status().update(&name, |s| s.key_problem = None);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("secondary zone {name}: {e}; the key read before is kept");
                let problem = format!(
                    "{}: {e} (the key read before is kept)",
                    crate::rfc3339::format_utc(SystemTime::now())
                );
                status().update(&name, |s| {
                    s.key_problem = Some(problem.clone());
                    s.last_refusal = Some(problem);
                });
            }
        }
    }

    /// Reads the zone's key if it has one and it is not read yet (a key file fixed later is
    /// picked up at the next refresh), and registers it for NOTIFY.
    fn ensure_key(&mut self) -> Result<(), String> {
        if self.keys_stale() {
            self.reread_key();
        }
        if self.key.is_some() {
            return Ok(());
        }
        let Some(key) = load_key(&self.zone).map_err(|e| e.to_string())? else {
            return Ok(());
        };
        let zone = &self.zone;
        self.signal =
            notify::register(&zone.name, &self.origin, &zone.primaries, Some(key.clone()));
        self.key = Some(key);
        self.key_generation = key_generation();
        status().update(&zone.name, |s| s.key_problem = None);
        Ok(())
    }

    /// One refresh, its outcome recorded in status; how long to wait before the next.
    fn step(&mut self, reloader: &Reloader) -> Duration {
        if self.signal.take() {
            tracing::info!("secondary zone {}: NOTIFY, checking now", self.zone.name);
        }
        let result = self.ensure_key().and_then(|()| {
            let link = Link {
                key: self.key.as_ref(),
                timeout: Duration::from_secs(self.zone.timeout_secs.max(1)),
            };
            refresh_once(&self.zone, &self.origin, self.timers, link, reloader)
        });
        let pause = match result {
            Ok(fresh) => {
                self.timers = fresh.or(self.timers);
                self.last_contact = SystemTime::now();
                self.expired = false;
                let expires_at = expiry(self.last_contact, self.timers);
                status().update(&self.zone.name, |s| {
                    s.expired = false;
                    s.expires_at = expires_at;
                });
                self.serve_expired(reloader);
                self.timers.map_or(INITIAL_RETRY, |t| t.refresh)
            }
            Err(reason) => self.failed(&reason, reloader),
        };
        let next = SystemTime::now() + pause;
        status().update(&self.zone.name, |s| {
            s.next_refresh = Some(crate::rfc3339::format_utc(next))
        });
        pause
    }

    /// A refresh that failed: logged, in status, expiry checked; the retry time.
    fn failed(&mut self, reason: &str, reloader: &Reloader) -> Duration {
        let zone = &self.zone;
        tracing::warn!("secondary zone {}: {reason}", zone.name);
        let last_contact = self.last_contact;
        let expired = self.expired
            || self
                .timers
                .is_some_and(|t| last_contact.elapsed().unwrap_or_default() > t.expire);
        self.expired = expired;
        if expired {
            tracing::warn!("secondary zone {}: past its SOA expire time", zone.name);
        }
        status().update(&zone.name, |s| {
            s.last_refusal = Some(format!(
                "{}: {reason}",
                crate::rfc3339::format_utc(SystemTime::now())
            ));
            s.expired = expired;
            s.checks_failed += 1;
        });
        self.serve_expired(reloader);
        self.timers.map_or(INITIAL_RETRY, |t| t.retry)
    }

    /// Makes what is served follow `self.expired`: the zone's expired marker written (every
    /// load then answers the zone SERVFAIL) or removed, and a reload, only when that changes.
    fn serve_expired(&self, reloader: &Reloader) {
        let expired = self.expired;
        let marker = self.zone.expired_marker();
        if marker.exists() == expired {
            return;
        }
        let written = if expired {
            std::fs::write(&marker, b"past its SOA expire time: answered SERVFAIL\n")
        } else {
            std::fs::remove_file(&marker)
        };
        if let Err(e) = written {
            tracing::error!(
                "secondary zone {}: {}: {e}; the zone is served as before",
                self.zone.name,
                marker.display()
            );
            return;
        }
        let what = if expired { "SERVFAIL" } else { "served again" };
        match reloader.reload(Trigger::Secondary) {
            Ok(_) => tracing::warn!("secondary zone {}: {what}", self.zone.name),
            Err(problems) => tracing::error!(
                "secondary zone {}: reload after expiry changed refused: {}",
                self.zone.name,
                problems.join("; ")
            ),
        }
    }
}

/// When a copy with `timers`, last confirmed at `contact`, expires (RFC 3339).
fn expiry(contact: SystemTime, timers: Option<Timers>) -> Option<String> {
    timers.map(|t| crate::rfc3339::format_utc(contact + t.expire))
}

/// Why a secondary zone's TSIG key was not read.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error(transparent)]
    File(#[from] KeyFileError),
    #[error("TSIG key file {path}: no key named {name}")]
    Missing { path: PathBuf, name: String },
    #[error("TSIG key file {path} holds {count} keys: say which with `key`")]
    Ambiguous { path: PathBuf, count: usize },
    #[error("`key = {name:?}` without a `key_file` to read it from")]
    NoFile { name: String },
}

/// The zone's TSIG key: the one `key` names in `key_file`, or the file's only key.
pub fn load_key(zone: &SecondaryZoneConfig) -> Result<Option<Key>, KeyError> {
    let Some(path) = &zone.key_file else {
        return match &zone.key {
            Some(name) => Err(KeyError::NoFile { name: name.clone() }),
            None => Ok(None),
        };
    };
    let mut keys = read_key_file(path)?;
    let wanted = zone.key.as_deref().map(|k| k.trim_end_matches('.'));
    let index = match wanted {
        Some(name) => keys.iter().position(|k| k.name.eq_ignore_ascii_case(name)),
        None if keys.len() == 1 => Some(0),
        None => {
            return Err(KeyError::Ambiguous {
                path: path.clone(),
                count: keys.len(),
            })
        }
    };
    let index = index.ok_or_else(|| KeyError::Missing {
        path: path.clone(),
        name: wanted.unwrap_or_default().to_string(),
    })?;
    Ok(Some(keys.swap_remove(index)))
}

/// One refresh: ask each primary for its serial, transfer from the first one that has a newer
/// zone. `Ok(Some)`: a new copy is serving; `Ok(None)`: up to date.
fn refresh_once(
    zone: &SecondaryZoneConfig,
    origin: &Name,
    timers: Option<Timers>,
    link: Link<'_>,
    reloader: &Reloader,
) -> Result<Option<Timers>, String> {
    let mut failures = Vec::new();
    for &primary in &zone.primaries {
        let serial = match soa_serial(primary, origin, link) {
            Ok(serial) => serial,
            Err(e) => {
                failures.push(e.to_string());
                continue;
            }
        };
        if timers.is_some_and(|t| !serial_newer(serial, t.serial)) {
            return Ok(None);
        }
        match transfer_from(zone, origin, primary, link, timers, reloader) {
            Ok(fresh) => return Ok(Some(fresh)),
            Err(e) => failures.push(e),
        }
    }
    Err(failures.join("; "))
}

/// A new version as zone text, how it came and, for an AXFR that replaced an IXFR, why.
struct Fetched {
    kind: &'static str,
    text: String,
    timers: Result<Timers, String>,
    note: Option<String>,
}

/// The new version from `primary`, validated, written to the copy and reloaded.
fn transfer_from(
    zone: &SecondaryZoneConfig,
    origin: &Name,
    primary: std::net::SocketAddr,
    link: Link<'_>,
    held: Option<Timers>,
    reloader: &Reloader,
) -> Result<Timers, String> {
    let path = zone.copy_path();
    let fetched = fetch(&path, origin, primary, link, held).map_err(|e| e.to_string())?;
    record_transfer(&zone.name, &fetched);
    let timers = fetched
        .timers
        .map_err(|e| format!("transfer from {primary} refused, keeping the last good copy: {e}"))?;
    write_copy(&path, &fetched.text)?;
    reloader.reload(Trigger::Secondary).map_err(|problems| {
        format!("reload after the transfer refused: {}", problems.join("; "))
    })?;
    tracing::info!(
        "secondary zone {}: serial {} from {primary} by {}",
        zone.name,
        timers.serial,
        fetched.kind
    );
    status().update(&zone.name, |s| s.serial = Some(timers.serial));
    Ok(timers)
}

fn record_transfer(zone: &str, fetched: &Fetched) {
    let now = crate::rfc3339::format_utc(SystemTime::now());
    status().update(zone, |s| {
        s.last_transfer = Some(now.clone());
        s.last_transfer_kind = Some(fetched.kind.to_string());
        match &fetched.timers {
            Ok(timers) => {
                s.transfers_ok += 1;
                s.last_transfer_serial = Some(timers.serial);
                s.last_result = Some(match &fetched.note {
                    Some(note) => format!("ok ({note})"),
                    None => "ok".to_string(),
                });
            }
            Err(e) => {
                s.transfers_refused += 1;
                s.last_result = Some(format!("refused: {e}"));
            }
        }
    });
}

/// The new version: by IXFR from the copy held when there is one, by AXFR when there is none,
/// when the IXFR fails or the primary answers it with the whole zone, or when its differences
/// do not apply or their result is not a valid zone (why, in `note`). A TSIG failure ends the
/// attempt: nothing unverified is used.
fn fetch(
    path: &Path,
    origin: &Name,
    primary: std::net::SocketAddr,
    link: Link<'_>,
    held: Option<Timers>,
) -> Result<Fetched, TransferError> {
    let note = match held {
        None => None,
        Some(held) => match incremental(path, origin, primary, link, held)? {
            Incremental::Applied(text) => {
                let timers = check_text(&text, path, origin);
                match timers {
                    Ok(_) => return Ok(fetched("ixfr", text, timers, None)),
                    Err(e) => Some(format!("the IXFR result is no valid zone: {e}")),
                }
            }
            Incremental::Full(records) => {
                let text = zone_text(&records).map_err(|e| protocol(primary, e))?;
                let timers = check_text(&text, path, origin);
                let note = "the primary answered the IXFR with the whole zone".to_string();
                return Ok(fetched("axfr", text, timers, Some(note)));
            }
            Incremental::Fallback(why) => Some(why),
        },
    };
    if let Some(why) = &note {
        tracing::info!("secondary zone {origin}: AXFR from {primary}: {why}");
    }
    let text = zone_text(&axfr(primary, origin, link)?).map_err(|e| protocol(primary, e))?;
    let timers = check_text(&text, path, origin);
    Ok(fetched(
        "axfr",
        text,
        timers,
        note.map(|n| format!("AXFR: {n}")),
    ))
}

fn fetched(
    kind: &'static str,
    text: String,
    timers: Result<Timers, String>,
    note: Option<String>,
) -> Fetched {
    Fetched {
        kind,
        text,
        timers,
        note,
    }
}

fn protocol(primary: std::net::SocketAddr, message: String) -> TransferError {
    TransferError::Protocol { primary, message }
}

/// What an IXFR attempt gave.
enum Incremental {
    /// The differences applied to the copy: the new version's zone text (not yet validated).
    Applied(String),
    /// The primary sent the whole zone.
    Full(Vec<hickory_proto::rr::Record>),
    /// Nothing usable (why): an AXFR is needed.
    Fallback(String),
}

/// IXFR from the copy held at `path` (serial `held.serial`).
fn incremental(
    path: &Path,
    origin: &Name,
    primary: std::net::SocketAddr,
    link: Link<'_>,
    held: Timers,
) -> Result<Incremental, TransferError> {
    let Ok(copy) = load_zone_file(path, origin) else {
        return Ok(Incremental::Fallback(
            "no readable copy to apply differences to".into(),
        ));
    };
    let Some(soa) = copy
        .records
        .iter()
        .find(|r| r.rtype == hickory_proto::rr::RecordType::SOA)
    else {
        return Ok(Incremental::Fallback("the copy has no SOA".into()));
    };
    let answer = match transfer::ixfr(primary, origin, (soa.ttl, &soa.rdata), link) {
        Ok(answer) => answer,
        // A bad signature ends the attempt: an AXFR from the same primary gets no trust from it.
        Err(e @ TransferError::Tsig { .. }) => return Err(e),
        // A primary without IXFR (NOTIMP, REFUSED, a closed connection, a stream it cannot
        // finish): ask AXFR.
        Err(e) => return Ok(Incremental::Fallback(format!("IXFR failed: {e}"))),
    };
    let (serial, differences) = match answer {
        Ixfr::Full(records) => return Ok(Incremental::Full(records)),
        Ixfr::SoaOnly(serial) => {
            let why = format!("the primary answered the IXFR with its SOA alone (serial {serial})");
            return Ok(Incremental::Fallback(why));
        }
        Ixfr::Differences {
            serial,
            differences,
        } => (serial, differences),
    };
    let entries: Vec<Entry> = copy
        .records
        .into_iter()
        .map(|r| Entry {
            name: r.name,
            ttl: r.ttl,
            rtype: r.rtype,
            rdata: r.rdata,
        })
        .collect();
    Ok(
        match ixfr::apply(entries, held.serial, serial, &differences) {
            Ok(applied) => Incremental::Applied(transfer::entries_text(&applied)),
            Err(e) => Incremental::Fallback(format!("the IXFR does not apply: {e}")),
        },
    )
}

/// Parses and validates transferred text like a zone file; the SOA timers when it passes.
fn check_text(text: &str, path: &Path, origin: &Name) -> Result<Timers, String> {
    let parsed = parse_zone_text(text, path, origin).map_err(|p| first_errors(&p))?;
    let problems = validate(&parsed);
    if problems.iter().any(ZoneProblem::is_error) {
        return Err(first_errors(&problems));
    }
    soa_timers(
        parsed
            .records
            .iter()
            .find_map(|r| (r.rtype == hickory_proto::rr::RecordType::SOA).then_some(&r.rdata)),
    )
    .ok_or_else(|| "no SOA record".to_string())
}

fn first_errors(problems: &[ZoneProblem]) -> String {
    let errors: Vec<String> = problems
        .iter()
        .filter(|p| p.is_error())
        .take(3)
        .map(|p| p.message.clone())
        .collect();
    errors.join("; ")
}

/// The SOA timers in SOA RDATA (wire, uncompressed).
fn soa_timers(rdata: Option<&Vec<u8>>) -> Option<Timers> {
    use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
    let rdata = rdata?;
    let mut decoder = BinDecoder::new(rdata);
    Name::read(&mut decoder).ok()?;
    Name::read(&mut decoder).ok()?;
    let rest = decoder.read_slice(20).ok()?.unverified();
    let number = |i: usize| u32::from_be_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
    let clamp = |secs: u32| Duration::from_secs(u64::from(secs)).clamp(MIN_TIMER, MAX_TIMER);
    Some(Timers {
        serial: number(0),
        refresh: clamp(number(4)),
        retry: clamp(number(8)),
        expire: Duration::from_secs(u64::from(number(12))),
    })
}

/// The timers of the copy on disk, if there is a good one.
fn copy_timers(path: &Path, origin: &Name) -> Option<Timers> {
    if !path.is_file() {
        return None;
    }
    let parsed = load_zone_file(path, origin).ok()?;
    let timers = soa_timers(
        parsed
            .records
            .iter()
            .find_map(|r| (r.rtype == hickory_proto::rr::RecordType::SOA).then_some(&r.rdata)),
    )?;
    Some(timers)
}

fn write_copy(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("{}: cannot create the directory: {e}", dir.display()))?;
    }
    crate::files::replace_file(path, text.as_bytes()).map_err(|e| e.to_string())
}
