//! What outgoing zone transfers and NOTIFYs did, per zone: the last transfer out and to whom,
//! the last refusal and why, each NOTIFY target's last acknowledged serial, and the counts
//! behind `steerdns_transfers_out_total{zone,kind,result}` and
//! `steerdns_notify_total{zone,target,result}`.
//!
//! Written by the transfer and NOTIFY tasks (never by the serving path), read by the admin
//! endpoint's status and scrape. One process-wide value behind a mutex, held only to copy.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// One NOTIFY target of a zone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NotifyTargetStatus {
    /// The serial last sent to it.
    pub sent_serial: Option<u32>,
    /// The serial of the last NOTIFY it answered.
    pub acked_serial: Option<u32>,
    pub last_ack: Option<String>,
    /// Why the last NOTIFY was not acknowledged (no answer after the retries, an error rcode).
    pub last_error: Option<String>,
}

/// One zone's transfers out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ZoneTransferStatus {
    /// When the last transfer out was sent, to which client, which kind, at which serial.
    pub last_transfer: Option<String>,
    pub last_transfer_to: Option<String>,
    pub last_transfer_kind: Option<String>,
    pub last_transfer_serial: Option<u32>,
    /// The last refused request: `<client>: <reason> (<time>)`.
    pub last_refusal: Option<String>,
    /// NOTIFY targets (`addr:port`).
    pub notify: BTreeMap<String, NotifyTargetStatus>,
}

#[derive(Default)]
struct Inner {
    zones: BTreeMap<String, ZoneTransferStatus>,
    /// (zone, kind, result) → count.
    transfers: BTreeMap<(String, &'static str, &'static str), u64>,
    /// (zone, target, result) → count.
    notifies: BTreeMap<(String, String, &'static str), u64>,
}

/// Outgoing transfers and NOTIFYs of every zone.
#[derive(Default)]
pub struct TransferStatus {
    inner: Mutex<Inner>,
}

/// A copy for status and the scrape.
#[derive(Debug, Clone, Default)]
pub struct TransferReport {
    pub zones: BTreeMap<String, ZoneTransferStatus>,
    pub transfers: Vec<(String, &'static str, &'static str, u64)>,
    pub notifies: Vec<(String, String, &'static str, u64)>,
}

impl TransferStatus {
    fn with(&self, change: impl FnOnce(&mut Inner)) {
        if let Ok(mut inner) = self.inner.lock() {
            change(&mut inner);
        }
    }

    /// A transfer out of `zone` to `client` was sent (`kind`: axfr, ixfr, ixfr_full,
    /// ixfr_current), the zone at `serial`.
    pub fn sent(&self, zone: &str, client: &str, kind: &'static str, serial: u32) {
        let now = crate::rfc3339::format_utc(SystemTime::now());
        self.with(|inner| {
            *inner
                .transfers
                .entry((zone.to_string(), kind, "ok"))
                .or_default() += 1;
            let status = inner.zones.entry(zone.to_string()).or_default();
            status.last_transfer = Some(now);
            status.last_transfer_to = Some(client.to_string());
            status.last_transfer_kind = Some(kind.to_string());
            status.last_transfer_serial = Some(serial);
        });
    }

    /// A request for `zone` (`-` when not a zone served) was refused for `reason`.
    pub fn refused(&self, zone: &str, client: &str, kind: &'static str, reason: &'static str) {
        let now = crate::rfc3339::format_utc(SystemTime::now());
        self.with(|inner| {
            *inner
                .transfers
                .entry((zone.to_string(), kind, reason))
                .or_default() += 1;
            let status = inner.zones.entry(zone.to_string()).or_default();
            status.last_refusal = Some(format!("{client}: {reason} ({now})"));
        });
    }

    /// A NOTIFY of `zone` at `serial` was sent to `target`.
    pub fn notify_sent(&self, zone: &str, target: &str, serial: u32) {
        self.with(|inner| {
            let status = inner.zones.entry(zone.to_string()).or_default();
            status
                .notify
                .entry(target.to_string())
                .or_default()
                .sent_serial = Some(serial);
        });
    }

    /// What became of a NOTIFY: `Ok` acknowledged, `Err(result)` given up (`timeout`, or the
    /// rcode the target answered with).
    pub fn notify_done(
        &self,
        zone: &str,
        target: &str,
        serial: u32,
        result: Result<(), &'static str>,
    ) {
        let now = crate::rfc3339::format_utc(SystemTime::now());
        self.with(|inner| {
            let label = match result {
                Ok(()) => "acked",
                Err(reason) => reason,
            };
            *inner
                .notifies
                .entry((zone.to_string(), target.to_string(), label))
                .or_default() += 1;
            let status = inner.zones.entry(zone.to_string()).or_default();
            let target = status.notify.entry(target.to_string()).or_default();
            match result {
                Ok(()) => {
                    target.acked_serial = Some(serial);
                    target.last_ack = Some(now);
                    target.last_error = None;
                }
                Err(reason) => {
                    target.last_error = Some(format!("serial {serial}: {reason} ({now})"))
                }
            }
        });
    }

    /// A copy of everything.
    pub fn report(&self) -> TransferReport {
        let Ok(inner) = self.inner.lock() else {
            return TransferReport::default();
        };
        TransferReport {
            zones: inner.zones.clone(),
            transfers: inner
                .transfers
                .iter()
                .map(|((z, k, r), n)| (z.clone(), *k, *r, *n))
                .collect(),
            notifies: inner
                .notifies
                .iter()
                .map(|((z, t, r), n)| (z.clone(), t.clone(), *r, *n))
                .collect(),
        }
    }
}

/// The process-wide status (one server per process).
pub fn transfer_status() -> &'static TransferStatus {
    static STATUS: std::sync::OnceLock<TransferStatus> = std::sync::OnceLock::new();
    STATUS.get_or_init(TransferStatus::default)
}
