//! Secondary zones (issue 33 item 4): one background thread per `[[secondary.zone]]` pulls the
//! zone from its primaries by AXFR over TCP, on the SOA refresh/retry timers (RFC 1035 §3.3.13);
//! one per `[[secondary.catalog]]` (RFC 9432, item 5) pulls the catalog and each member it lists.
//!
//! Owns the transfer loop and the per-zone transfer status. A transfer is parsed and validated
//! exactly like a zone file (it is turned into zone-file text and read back by the same parser
//! and `zone::validate`); only a valid one is written, atomically, to the zone's on-disk copy,
//! and then enters the snapshot through the one reload path ([`Reloader::reload`]) — the
//! snapshot loader reads the copies like zone files, which is also how a restart serves the
//! zone from disk before any primary answers. A bad transfer keeps the last good copy serving
//! and says why (log WARN and status). Never touches the serving path.

pub mod transfer;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hickory_proto::rr::Name;
use serde::{Deserialize, Serialize};

use crate::config::secondary::SecondaryZoneConfig;
use crate::reload::{Reloader, Trigger};
use crate::zone::parse::{load_zone_file, parse_zone_text, ZoneProblem};
use crate::zone::validate::validate;

use transfer::{axfr, serial_newer, soa_serial, zone_text};

/// Refresh and retry used until a SOA is known (no copy on disk yet).
const INITIAL_RETRY: Duration = Duration::from_secs(10);
/// Timers from a SOA are clamped to this range: a SOA saying 0 must not spin the task.
const MIN_TIMER: Duration = Duration::from_secs(1);
const MAX_TIMER: Duration = Duration::from_secs(24 * 3600);

/// What status shows per secondary zone.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ZoneStatus {
    /// The serial being served (from the last good copy); `None`: nothing transferred yet.
    pub serial: Option<u32>,
    /// When the last transfer in ended (RFC 3339), its kind ("axfr") and result ("ok" or why).
    pub last_transfer: Option<String>,
    pub last_transfer_kind: Option<String>,
    pub last_result: Option<String>,
    /// The last refused transfer or failed check, and why.
    pub last_refusal: Option<String>,
    /// When the next refresh check is due (RFC 3339).
    pub next_refresh: Option<String>,
    /// Past the SOA expire time without reaching a primary.
    pub expired: bool,
    /// Transfers in accepted, refused (failed validation), and refresh checks that failed.
    pub transfers_ok: u64,
    pub transfers_refused: u64,
    pub checks_failed: u64,
}

/// The status of every secondary zone, by name (background threads write, admin reads).
#[derive(Debug, Default)]
pub struct SecondaryStatus {
    zones: Mutex<BTreeMap<String, ZoneStatus>>,
}

impl SecondaryStatus {
    pub fn snapshot(&self) -> BTreeMap<String, ZoneStatus> {
        self.zones.lock().map(|z| z.clone()).unwrap_or_default()
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

/// The body of one zone's thread: check, transfer when newer, sleep, until `sleep` says stop.
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
            if sleep(pause) {
                return;
            }
        }
    }
}

/// The body of one catalog's thread (RFC 9432, consumer): the catalog is refreshed like a
/// secondary zone, and every member its copy lists is refreshed on its own timers from the
/// catalog's primaries, on this one thread, until `sleep` says stop. A member that leaves the
/// catalog stops being refreshed (and the loader stops serving it); one that joins is
/// transferred at the next pass.
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
            if catalog_due <= now {
                catalog_due = now + task.step(&reloader);
            }
            let listed = crate::snapshot::catalog::catalog_members(&catalog);
            let listed: Vec<SecondaryZoneConfig> = listed
                .iter()
                .map(|m| catalog.member(&m.to_ascii(), &dir))
                .collect();
            members.retain(|name, _| listed.iter().any(|m| &m.name == name));
            for member in listed {
                if !members.contains_key(&member.name) {
                    if let Some(member_task) = ZoneTask::new(member.clone()) {
                        members.insert(member.name.clone(), (member_task, now));
                    }
                }
            }
            for (member_task, due) in members.values_mut() {
                if *due <= Instant::now() {
                    *due = Instant::now() + member_task.step(&reloader);
                }
            }
            let next = members
                .values()
                .map(|(_, due)| *due)
                .fold(catalog_due, Instant::min);
            if sleep(
                next.saturating_duration_since(Instant::now())
                    .max(MIN_TIMER),
            ) {
                return;
            }
        }
    }
}

/// One secondary zone's refresh state: its config, the timers of the copy served, and when a
/// primary last answered.
struct ZoneTask {
    zone: SecondaryZoneConfig,
    origin: Name,
    timers: Option<Timers>,
    last_contact: SystemTime,
}

impl ZoneTask {
    fn new(zone: SecondaryZoneConfig) -> Option<ZoneTask> {
        let Some(origin) = zone.origin() else {
            tracing::warn!("secondary zone {:?}: not a domain name", zone.name);
            return None;
        };
        let timers = copy_timers(&zone.copy_path(), &origin);
        status().update(&zone.name, |s| s.serial = timers.map(|t| t.serial));
        Some(ZoneTask {
            zone,
            origin,
            timers,
            last_contact: SystemTime::now(),
        })
    }

    /// One refresh, its outcome recorded in status; how long to wait before the next.
    fn step(&mut self, reloader: &Reloader) -> Duration {
        let zone = &self.zone;
        let pause = match refresh_once(zone, &self.origin, self.timers, reloader) {
            Ok(fresh) => {
                self.timers = fresh.or(self.timers);
                self.last_contact = SystemTime::now();
                status().update(&zone.name, |s| s.expired = false);
                self.timers.map_or(INITIAL_RETRY, |t| t.refresh)
            }
            Err(reason) => {
                tracing::warn!("secondary zone {}: {reason}", zone.name);
                let last_contact = self.last_contact;
                let expired = self
                    .timers
                    .is_some_and(|t| last_contact.elapsed().unwrap_or_default() > t.expire);
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
                self.timers.map_or(INITIAL_RETRY, |t| t.retry)
            }
        };
        let next = SystemTime::now() + pause;
        status().update(&zone.name, |s| {
            s.next_refresh = Some(crate::rfc3339::format_utc(next))
        });
        pause
    }
}

/// One refresh: ask each primary for its serial, transfer from the first one that has a newer
/// zone. `Ok(Some)`: a new copy is serving; `Ok(None)`: up to date.
fn refresh_once(
    zone: &SecondaryZoneConfig,
    origin: &Name,
    timers: Option<Timers>,
    reloader: &Reloader,
) -> Result<Option<Timers>, String> {
    let timeout = Duration::from_secs(zone.timeout_secs.max(1));
    let mut failures = Vec::new();
    for &primary in &zone.primaries {
        let serial = match soa_serial(primary, origin, timeout) {
            Ok(serial) => serial,
            Err(e) => {
                failures.push(e.to_string());
                continue;
            }
        };
        if timers.is_some_and(|t| !serial_newer(serial, t.serial)) {
            return Ok(None);
        }
        match transfer_from(zone, origin, primary, timeout, reloader) {
            Ok(fresh) => return Ok(Some(fresh)),
            Err(e) => failures.push(e),
        }
    }
    Err(failures.join("; "))
}

/// AXFR from `primary`, validated, written to the copy and reloaded.
fn transfer_from(
    zone: &SecondaryZoneConfig,
    origin: &Name,
    primary: std::net::SocketAddr,
    timeout: Duration,
    reloader: &Reloader,
) -> Result<Timers, String> {
    let records = axfr(primary, origin, timeout).map_err(|e| e.to_string())?;
    let text = zone_text(&records)?;
    let path = zone.copy_path();
    let result = check_text(&text, &path, origin);
    let now = crate::rfc3339::format_utc(SystemTime::now());
    status().update(&zone.name, |s| {
        s.last_transfer = Some(now.clone());
        s.last_transfer_kind = Some("axfr".to_string());
        match &result {
            Ok(_) => s.transfers_ok += 1,
            Err(_) => s.transfers_refused += 1,
        }
        s.last_result = Some(match &result {
            Ok(_) => "ok".to_string(),
            Err(e) => format!("refused: {e}"),
        });
    });
    let timers = result
        .map_err(|e| format!("transfer from {primary} refused, keeping the last good copy: {e}"))?;
    write_copy(&path, &text)?;
    reloader.reload(Trigger::Secondary).map_err(|problems| {
        format!("reload after the transfer refused: {}", problems.join("; "))
    })?;
    tracing::info!(
        "secondary zone {}: serial {} from {primary}",
        zone.name,
        timers.serial
    );
    status().update(&zone.name, |s| s.serial = Some(timers.serial));
    Ok(timers)
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
