//! What an outgoing zone transfer (AXFR, RFC 5936) sends: every record of a compiled zone in
//! a fixed order -- the SOA first, the names in canonical order (RFC 4034 6.1) with their
//! signatures, the NSEC3 chain of a signed zone, the SOA again last -- packed into messages
//! that leave room for a TSIG record.
//!
//! Pure: it reads a [`TransferView`] and writes bytes. Steered names carry no records in the
//! model (their answers come from the policies); what a transfer carries for them is their
//! static projection, records built when the snapshot is built (`snapshot::projection`) and
//! handed in beside the zone. Who may transfer, and the sockets, are the server's.

use crate::dns::canonical::canonical_cmp;
use crate::dns::wire::{rtype, HEADER_LEN};

use super::journal::Record;
use super::model::{Chain, RRset, Zone};

/// The largest transfer message written: the TCP maximum less room for a TSIG record
/// (hmac-sha512 with a long key name stays under 400 bytes).
pub const MAX_TRANSFER_MESSAGE: usize = 65_535 - 512;

/// One record of a transfer: its owner (uncompressed wire name) and the bytes after the
/// owner (type, class, TTL, RDLENGTH, RDATA), as the model stores them.
pub type TransferRecord<'z> = (&'z [u8], &'z [u8]);

/// A zone as a transfer sends it: the compiled zone and the records projected into it (the
/// static projection of its steered names), which the zone model does not hold.
#[derive(Debug, Clone, Copy)]
pub struct TransferView<'z> {
    pub zone: &'z Zone,
    /// Projected records, sorted; none for a zone without steered names to project.
    pub projected: &'z [Record],
}

impl<'z> From<&'z Zone> for TransferView<'z> {
    /// The zone alone, nothing projected.
    fn from(zone: &'z Zone) -> TransferView<'z> {
        TransferView {
            zone,
            projected: &[],
        }
    }
}

/// Every record of a zone in transfer order: SOA, the rest, the projected records, SOA.
/// `None` when the zone has no SOA (a compiled zone always has one; the check keeps a
/// transfer from starting without).
pub fn axfr_records<'z>(view: impl Into<TransferView<'z>>) -> Option<Vec<TransferRecord<'z>>> {
    let TransferView { zone, projected } = view.into();
    let soa = zone.soa()?.records().next()?;
    let mut names: Vec<&[u8]> = zone.nodes.keys().map(|k| &k[..]).collect();
    names.sort_by(|a, b| canonical_cmp(a, b));
    let mut out = vec![(&zone.apex[..], soa)];
    for name in names {
        let Some(node) = zone.nodes.get(name) else {
            continue;
        };
        for set in &node.rrsets {
            if replaced_by_projection(projected, name, set.rtype) {
                continue;
            }
            let skip_soa = name == &zone.apex[..] && set.rtype == rtype::SOA;
            push_set(&mut out, name, set, skip_soa);
        }
    }
    out.extend(
        projected
            .iter()
            .map(|(owner, record)| (&owner[..], &record[..])),
    );
    if let Some(Chain::Nsec3(chain)) = zone.denial.as_ref().map(|d| &d.chain) {
        for (owner, set) in chain.records.iter() {
            if !replaced_by_projection(projected, owner, rtype::NSEC3) {
                push_set(&mut out, owner, set, false);
            }
        }
    }
    out.push((&zone.apex[..], soa));
    Some(out)
}

/// Whether the static set of `rtype` at `owner` gives way to the projection: the policy
/// answers A and AAAA at a steered name (the zone file's records there are only a base the
/// policy takes over), so a projected name's static A/AAAA are not transferred beside it; and
/// in a signed zone the denial record (NSEC, NSEC3) of a steered name is replaced by the one
/// re-typed to what the transfer carries there (`crate::dnssec::transfer`). `projected` is
/// sorted by owner.
pub fn replaced_by_projection(projected: &[Record], owner: &[u8], rtype: u16) -> bool {
    let start = projected.partition_point(|(o, _)| o[..] < *owner);
    let mut at_owner = projected[start..]
        .iter()
        .take_while(|(o, _)| o[..] == *owner);
    let type_of = |record: &[u8]| record.get(..2).map(|t| u16::from_be_bytes([t[0], t[1]]));
    match rtype {
        // Replaced by the projection proper (its addresses or CNAME), not by the signatures
        // and denial records that come with it.
        rtype::A | rtype::AAAA => {
            at_owner.any(|(_, r)| matches!(type_of(r), Some(rtype::A | rtype::AAAA | rtype::CNAME)))
        }
        rtype::NSEC | rtype::NSEC3 => at_owner.any(|(_, r)| type_of(r) == Some(rtype)),
        _ => false,
    }
}

/// A set's records (unless `skip_records`: the apex SOA, sent first and last) and its RRSIGs.
fn push_set<'z>(
    out: &mut Vec<TransferRecord<'z>>,
    owner: &'z [u8],
    set: &'z RRset,
    skip_records: bool,
) {
    if !skip_records {
        out.extend(set.records().map(|r| (owner, r)));
    }
    if let Some(sigs) = &set.rrsig {
        out.extend(sigs.records().map(|r| (owner, r)));
    }
}

/// Packs `records` into answer messages for the query `id` whose question section is
/// `question` (name, type, class): QR and AA set, the question in the first message only,
/// names uncompressed, each message at most `max_len` bytes. `None` when one record alone
/// does not fit.
pub fn pack_messages(
    id: u16,
    question: &[u8],
    records: &[TransferRecord<'_>],
    max_len: usize,
) -> Option<Vec<Vec<u8>>> {
    let mut messages = Vec::new();
    let mut current = start_message(id, Some(question));
    let mut count: u16 = 0;
    for (owner, record) in records {
        let len = owner.len() + record.len();
        if current.len() + len > max_len || count == u16::MAX {
            if count == 0 {
                return None;
            }
            finish(&mut current, count);
            messages.push(std::mem::replace(&mut current, start_message(id, None)));
            count = 0;
            if current.len() + len > max_len {
                return None;
            }
        }
        current.extend_from_slice(owner);
        current.extend_from_slice(record);
        count += 1;
    }
    finish(&mut current, count);
    messages.push(current);
    Some(messages)
}

fn start_message(id: u16, question: Option<&[u8]>) -> Vec<u8> {
    let mut m = Vec::with_capacity(16 * 1024);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0x84, 0x00]); // QR, AA; opcode QUERY, NOERROR
    m.extend_from_slice(&u16::from(question.is_some()).to_be_bytes());
    m.extend_from_slice(&[0; 6]);
    debug_assert_eq!(m.len(), HEADER_LEN);
    if let Some(q) = question {
        m.extend_from_slice(q);
    }
    m
}

fn finish(message: &mut [u8], answers: u16) {
    message[6..8].copy_from_slice(&answers.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::Message;
    use hickory_proto::rr::RecordType;

    use super::*;
    use crate::zone::model::example_zone;

    const ZONE: &str = "$TTL 300\n@ SOA ns1 hostmaster 7 3600 600 86400 300\n@ NS ns1\nns1 A 192.0.2.1\nwww A 192.0.2.2\nwww AAAA 2001:db8::2\na.b.deep TXT \"hello\"\n";

    const QUESTION: &[u8] = b"\x07example\x03com\x00\x00\xfc\x00\x01";

    #[test]
    fn the_soa_opens_and_closes_and_every_record_is_sent_once() {
        let zone = example_zone(ZONE);
        let records = axfr_records(&zone).expect("has an SOA");
        let messages = pack_messages(9, QUESTION, &records, MAX_TRANSFER_MESSAGE).expect("fits");
        assert_eq!(messages.len(), 1);
        let parsed = Message::from_vec(&messages[0]).expect("a valid message");
        assert_eq!(parsed.id, 9);
        let types: Vec<RecordType> = parsed.answers.iter().map(|r| r.record_type()).collect();
        assert_eq!(types.first(), Some(&RecordType::SOA));
        assert_eq!(types.last(), Some(&RecordType::SOA));
        assert_eq!(types.len(), 7, "{types:?}");
        assert_eq!(types.iter().filter(|t| **t == RecordType::SOA).count(), 2);
    }

    #[test]
    fn small_messages_split_the_stream_and_keep_the_question_in_the_first() {
        let zone = example_zone(ZONE);
        let records = axfr_records(&zone).expect("has an SOA");
        let messages = pack_messages(9, QUESTION, &records, 120).expect("fits");
        assert!(messages.len() > 2, "{}", messages.len());
        let mut total = 0;
        for (i, m) in messages.iter().enumerate() {
            assert!(m.len() <= 120);
            let parsed = Message::from_vec(m).expect("a valid message");
            assert_eq!(parsed.queries.len(), usize::from(i == 0));
            total += parsed.answers.len();
        }
        assert_eq!(total, records.len());
        assert_eq!(pack_messages(9, QUESTION, &records, 40), None);
    }

    #[test]
    fn only_projected_addresses_replace_the_zone_files_and_only_a_denial_record_its_own() {
        let owner: Box<[u8]> = Box::from(&b"\x02gw\x07example\x03com\x00"[..]);
        let record = |rt: u16| -> Record {
            let mut bytes = rt.to_be_bytes().to_vec();
            bytes.extend_from_slice(&[0, 1, 0, 0, 0, 60, 0, 0]);
            (owner.clone(), bytes.into_boxed_slice())
        };
        // An omitted name in a signed zone: only its re-typed NSEC (and its RRSIG).
        let omitted = vec![record(rtype::RRSIG), record(rtype::NSEC)];
        assert!(!replaced_by_projection(&omitted, &owner, rtype::A));
        assert!(replaced_by_projection(&omitted, &owner, rtype::NSEC));
        assert!(!replaced_by_projection(&omitted, &owner, rtype::NSEC3));
        // A projected name: its addresses replace the zone file's.
        let projected = vec![record(rtype::CNAME)];
        assert!(replaced_by_projection(&projected, &owner, rtype::AAAA));
        assert!(!replaced_by_projection(&projected, &owner, rtype::TXT));
        assert!(!replaced_by_projection(&projected, b"\x01x\x00", rtype::A));
    }
}
