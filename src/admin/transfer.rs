//! The `transfer` block of `/v1/status` and the transfer series of `/metrics`: per zone
//! served while `[transfer]` is on, its serial and journal depth (from the snapshot in
//! service) with what [`crate::metrics::transfer`] recorded (last transfer out and to whom,
//! last refusal, each configured NOTIFY target and the serial it last acknowledged).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::metrics::transfer::{transfer_status, ZoneTransferStatus};
use crate::server::xfr_out::zone_name;
use crate::snapshot::Snapshot;

/// One zone's transfer status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ZoneTransferView {
    pub serial: u32,
    /// Differences kept for IXFR, and the serial the oldest starts from.
    pub journal_depth: usize,
    pub journal_oldest_serial: Option<u32>,
    #[serde(flatten)]
    pub status: ZoneTransferStatus,
}

/// Every zone served, by name; `None` without `[transfer]`.
pub fn view(snapshot: &Snapshot) -> Option<BTreeMap<String, ZoneTransferView>> {
    let setup = snapshot.transfer()?;
    let mut recorded = transfer_status().report().zones;
    let mut zones = BTreeMap::new();
    for zone in snapshot.zones().zones() {
        let name = zone_name(zone);
        let history = snapshot.journal().zone(&zone.apex);
        let mut status = recorded.remove(&name).unwrap_or_default();
        for target in setup.zone(&name).iter().flat_map(|z| &z.notify) {
            status.notify.entry(target.addr.to_string()).or_default();
        }
        let view = ZoneTransferView {
            serial: zone.serial,
            journal_depth: history.map_or(0, |h| h.depth()),
            journal_oldest_serial: history.and_then(|h| h.oldest_serial()),
            status,
        };
        zones.insert(name, view);
    }
    Some(zones)
}
