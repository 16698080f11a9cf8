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
    /// The serial served and transferred: the zone file's plus the projection revision.
    pub serial: u32,
    /// The zone file's own serial, and the steered names projected into transfers and left
    /// out of them (`snapshot::projection`).
    pub file_serial: u32,
    pub projected_names: usize,
    pub omitted_names: usize,
    /// The catalog zone (RFC 9432) this server produces: how many zones it lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalog_members: Option<usize>,
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
        let projection = snapshot.compiled().projections().zone(&zone.apex);
        let view = ZoneTransferView {
            serial: zone.serial,
            file_serial: projection.map_or(zone.serial, |p| p.file_serial),
            projected_names: projection.map_or(0, |p| p.projected),
            omitted_names: projection.map_or(0, |p| p.omitted),
            catalog_members: snapshot
                .compiled()
                .projections()
                .catalog
                .as_ref()
                .filter(|c| c.apex == zone.apex)
                .map(|c| c.projected),
            journal_depth: history.map_or(0, |h| h.depth()),
            journal_oldest_serial: history.and_then(|h| h.oldest_serial()),
            status,
        };
        zones.insert(name, view);
    }
    Some(zones)
}
