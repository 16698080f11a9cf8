//! What an incremental zone transfer (IXFR, RFC 1995) sends: the client's serial read from its
//! query, and the answer chosen from the zone and its journal history -- one SOA when the
//! client is current, the differences since its serial when the history reaches back that
//! far, else the whole zone AXFR style (RFC 1995 section 4).
//!
//! Pure: reads a [`TransferView`] (a zone and its projected records), a [`History`] and message bytes. Serial order is RFC 1982's
//! ([`serial_newer`]).

use crate::dns::wire::{rtype, HEADER_LEN};

use super::journal::{serial_newer, Diff, History};
use super::transfer::{axfr_records, TransferRecord, TransferView};

/// Which answer an IXFR got (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IxfrKind {
    /// The client's serial is not older than ours: the current SOA alone.
    UpToDate,
    /// The differences from the client's serial to ours.
    Incremental,
    /// The history does not reach the client's serial: every record, AXFR style.
    Full,
}

impl IxfrKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IxfrKind::UpToDate => "ixfr_current",
            IxfrKind::Incremental => "ixfr",
            IxfrKind::Full => "ixfr_full",
        }
    }
}

/// The records answering an IXFR from a client at `client_serial`, and which kind of answer
/// they are. `None` when the zone has no SOA.
pub fn ixfr_records<'z>(
    view: impl Into<TransferView<'z>>,
    history: Option<&'z History>,
    client_serial: u32,
) -> Option<(IxfrKind, Vec<TransferRecord<'z>>)> {
    let view = view.into();
    let zone = view.zone;
    let soa = zone.soa()?.records().next()?;
    let current = (&zone.apex[..], soa);
    if !serial_newer(zone.serial, client_serial) {
        return Some((IxfrKind::UpToDate, vec![current]));
    }
    let reaching = history
        .and_then(|h| h.since(client_serial))
        .filter(|diffs| diffs.last().is_some_and(|d| d.to_serial == zone.serial));
    if let Some(diffs) = reaching {
        if let Some(records) = incremental(current, &diffs) {
            return Some((IxfrKind::Incremental, records));
        }
    }
    Some((IxfrKind::Full, axfr_records(view)?))
}

/// The current SOA, then per difference the old SOA, the deleted records, the new SOA and the
/// added records, then the current SOA again. `None` when a difference lacks an SOA.
fn incremental<'z>(
    current: TransferRecord<'z>,
    diffs: &[&'z Diff],
) -> Option<Vec<TransferRecord<'z>>> {
    let size: usize = diffs.iter().map(|d| d.size() + 2).sum();
    let mut out = Vec::with_capacity(size + 2);
    out.push(current);
    for diff in diffs {
        let (old_owner, old_soa) = diff.old_soa.as_ref()?;
        let (new_owner, new_soa) = diff.new_soa.as_ref()?;
        out.push((&old_owner[..], &old_soa[..]));
        out.extend(diff.deleted.iter().map(|(o, r)| (&o[..], &r[..])));
        out.push((&new_owner[..], &new_soa[..]));
        out.extend(diff.added.iter().map(|(o, r)| (&o[..], &r[..])));
    }
    out.push(current);
    Some(out)
}

/// The serial of the SOA a client put in the authority section of its IXFR query (RFC 1995
/// section 3); `None` when there is none or it cannot be read.
pub fn client_serial(msg: &[u8]) -> Option<u32> {
    let count =
        |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*msg.get(i)?, *msg.get(i + 1)?])) };
    if count(4)? != 1 || count(6)? != 0 || count(8)? == 0 {
        return None;
    }
    let mut pos = skip_name(msg, HEADER_LEN)? + 4;
    pos = skip_name(msg, pos)?;
    if count(pos)? != rtype::SOA {
        return None;
    }
    let rdlen = usize::from(count(pos + 8)?);
    let rdata = pos + 10;
    let after_names = skip_name(msg, skip_name(msg, rdata)?)?;
    if after_names + 20 > rdata + rdlen || msg.len() < rdata + rdlen {
        return None;
    }
    let serial = msg.get(after_names..after_names + 4)?;
    Some(u32::from_be_bytes([
        serial[0], serial[1], serial[2], serial[3],
    ]))
}

/// The offset just past a (possibly compressed) name at `pos`.
fn skip_name(msg: &[u8], mut pos: usize) -> Option<usize> {
    loop {
        let len = *msg.get(pos)?;
        match len {
            0 => return Some(pos + 1),
            l if l & 0xC0 == 0xC0 => return msg.get(pos + 1).map(|_| pos + 2),
            l if l < 64 => pos += 1 + usize::from(l),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::journal::Journal;
    use crate::zone::model::{example_zone, Zone};

    fn text(serial: u32, www: &str) -> String {
        format!(
            "$TTL 300\n@ SOA ns1 hostmaster {serial} 3600 600 86400 300\n@ NS ns1\n\
             ns1 A 192.0.2.1\nwww A {www}\n"
        )
    }

    fn serial_of(record: &TransferRecord<'_>) -> u32 {
        let (_, r) = record;
        let rdata = &r[10..];
        let end = skip_name(rdata, skip_name(rdata, 0).expect("mname")).expect("rname");
        u32::from_be_bytes(rdata[end..end + 4].try_into().expect("serial"))
    }

    #[test]
    fn current_incremental_and_full_answers_are_chosen_by_the_clients_serial() {
        let v1 = example_zone(&text(1, "192.0.2.2"));
        let v2 = example_zone(&text(2, "192.0.2.3"));
        let v3 = example_zone(&text(3, "192.0.2.4"));
        let journal = Journal::new(5)
            .after_reload(&v1, &v2)
            .after_reload(&v2, &v3);
        let history = journal.zone(&v3.apex);

        let (kind, records) = ixfr_records(&v3, history, 3).expect("soa");
        assert_eq!((kind, records.len()), (IxfrKind::UpToDate, 1));
        // A client ahead of us (RFC 1982) is current too.
        let (kind, _) = ixfr_records(&v3, history, 4).expect("soa");
        assert_eq!(kind, IxfrKind::UpToDate);

        let (kind, records) = ixfr_records(&v3, history, 1).expect("soa");
        assert_eq!(kind, IxfrKind::Incremental);
        let serials: Vec<u32> = records
            .iter()
            .filter(|(_, r)| r[..2] == rtype::SOA.to_be_bytes())
            .map(serial_of)
            .collect();
        assert_eq!(serials, [3, 1, 2, 2, 3, 3]);
        // Each difference deletes one A and adds one: 6 SOAs + 4 records.
        assert_eq!(records.len(), 10);

        let (kind, records) = ixfr_records(&v3, history, 2).expect("soa");
        assert_eq!((kind, records.len()), (IxfrKind::Incremental, 6));

        // Older than the history reaches, or no history at all: the whole zone.
        let (kind, records) = ixfr_records(&v3, history, 0).expect("soa");
        assert_eq!(kind, IxfrKind::Full);
        assert_eq!(records.len(), axfr_records(&v3).expect("soa").len());
        let (kind, _) = ixfr_records(&v3, None, 2).expect("soa");
        assert_eq!(kind, IxfrKind::Full);
    }

    #[test]
    fn a_serial_wrap_is_newer_by_rfc_1982() {
        let old = example_zone(&text(u32::MAX, "192.0.2.2"));
        let new = example_zone(&text(5, "192.0.2.3"));
        let journal = Journal::new(5).after_reload(&old, &new);
        let (kind, _) = ixfr_records(&new, journal.zone(&new.apex), u32::MAX).expect("soa");
        assert_eq!(kind, IxfrKind::Incremental);
    }

    #[test]
    fn the_journal_is_bounded_and_reaches_only_its_depth() {
        let zones: Vec<Zone> = (1..=5)
            .map(|s| example_zone(&text(s, &format!("192.0.2.{s}"))))
            .collect();
        let mut journal = Journal::new(2);
        for pair in zones.windows(2) {
            journal = journal.after_reload(&pair[0], &pair[1]);
        }
        let last = &zones[4];
        let history = journal.zone(&last.apex);
        assert_eq!(history.map(|h| h.depth()), Some(2));
        assert_eq!(
            ixfr_records(last, history, 3).map(|a| a.0),
            Some(IxfrKind::Incremental)
        );
        assert_eq!(
            ixfr_records(last, history, 2).map(|a| a.0),
            Some(IxfrKind::Full)
        );
    }

    #[test]
    fn the_clients_serial_is_read_from_the_authority_soa() {
        // dig example.com IXFR=7: question, then the SOA in authority with compressed names.
        let mut msg = vec![0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0];
        msg.extend_from_slice(b"\x07example\x03com\x00\x00\xfb\x00\x01");
        msg.extend_from_slice(&[0xC0, 12, 0, 6, 0, 1, 0, 0, 0, 0, 0, 24]);
        msg.extend_from_slice(&[0xC0, 12, 0xC0, 12]);
        for field in [7u32, 0, 0, 0, 0] {
            msg.extend_from_slice(&field.to_be_bytes());
        }
        assert_eq!(client_serial(&msg), Some(7));
        assert_eq!(client_serial(&msg[..msg.len() - 1]), None);
        msg[9] = 0; // no authority record
        assert_eq!(client_serial(&msg), None);
    }
}
