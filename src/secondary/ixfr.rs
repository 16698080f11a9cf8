//! Applying IXFR difference sequences (RFC 1995 section 4) to the copy a secondary zone holds.
//!
//! Owns the rules that make a difference apply or not: the sequences must chain from the
//! serial held to the serial the primary announced, and every record a sequence deletes must be
//! held. Anything else is a [`DiffError`], and the caller falls back to AXFR. Pure: records in,
//! records out; the result is validated like a zone file by the caller.

use hickory_proto::rr::RecordType;

use super::transfer::{Difference, Entry};

/// Why differences do not apply to the copy held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiffError {
    #[error("the differences start at serial {from}, we hold {held}")]
    SerialMismatch { held: u32, from: u32 },
    #[error("the differences do not chain: one ends at {to}, the next starts at {from}")]
    Broken { to: u32, from: u32 },
    #[error("the differences end at serial {to}, the primary announced {announced}")]
    WrongEnd { to: u32, announced: u32 },
    #[error("a difference deletes {record}, which the copy does not hold")]
    NotHeld { record: String },
    #[error("{0}")]
    Encoding(String),
}

/// The copy `held` (at serial `held_serial`) with `differences` applied, up to `serial`.
pub fn apply(
    mut held: Vec<Entry>,
    held_serial: u32,
    serial: u32,
    differences: &[Difference],
) -> Result<Vec<Entry>, DiffError> {
    let mut at = held_serial;
    for (i, difference) in differences.iter().enumerate() {
        if difference.from != at {
            return Err(match i {
                0 => DiffError::SerialMismatch {
                    held: held_serial,
                    from: difference.from,
                },
                _ => DiffError::Broken {
                    to: at,
                    from: difference.from,
                },
            });
        }
        apply_one(&mut held, difference)?;
        at = difference.to;
    }
    if at != serial {
        return Err(DiffError::WrongEnd {
            to: at,
            announced: serial,
        });
    }
    Ok(held)
}

/// One sequence: its deletions (the old SOA among them), then its additions; the new SOA goes
/// first, where a zone file has it.
fn apply_one(held: &mut Vec<Entry>, difference: &Difference) -> Result<(), DiffError> {
    for record in &difference.deleted {
        let entry = Entry::from_record(record).map_err(DiffError::Encoding)?;
        let Some(at) = held.iter().position(|h| h.same_record(&entry)) else {
            return Err(DiffError::NotHeld {
                record: format!("{} {}", entry.name, entry.rtype),
            });
        };
        held.remove(at);
    }
    for record in &difference.added {
        let entry = Entry::from_record(record).map_err(DiffError::Encoding)?;
        // Adding a record already held changes nothing (an RRset holds each RR once).
        if held.iter().any(|h| h.same_record(&entry)) {
            continue;
        }
        if entry.rtype == RecordType::SOA {
            held.insert(0, entry);
        } else {
            held.push(entry);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use hickory_proto::rr::rdata::{A, SOA};
    use hickory_proto::rr::{Name, RData, Record};

    use super::*;

    fn name(text: &str) -> Name {
        Name::from_ascii(text).expect("name")
    }

    fn soa(serial: u32) -> Record {
        let soa = SOA::new(
            name("ns1.d.test."),
            name("hm.d.test."),
            serial,
            60,
            30,
            600,
            60,
        );
        Record::from_rdata(name("d.test."), 60, RData::SOA(soa))
    }

    fn a(owner: &str, last: u8) -> Record {
        Record::from_rdata(name(owner), 60, RData::A(A(Ipv4Addr::new(192, 0, 2, last))))
    }

    fn entries(records: &[Record]) -> Vec<Entry> {
        records
            .iter()
            .map(|r| Entry::from_record(r).expect("encodes"))
            .collect()
    }

    fn difference(from: u32, to: u32, deleted: Vec<Record>, added: Vec<Record>) -> Difference {
        Difference {
            from,
            to,
            deleted: [vec![soa(from)], deleted].concat(),
            added: [vec![soa(to)], added].concat(),
        }
    }

    #[test]
    fn chained_differences_apply_and_the_new_soa_leads() {
        let held = entries(&[soa(1), a("www.d.test.", 1), a("old.d.test.", 9)]);
        let differences = [
            difference(1, 2, vec![a("WWW.d.test.", 1)], vec![a("www.d.test.", 2)]),
            difference(2, 3, vec![a("old.d.test.", 9)], vec![a("new.d.test.", 3)]),
        ];
        let result = apply(held, 1, 3, &differences).expect("applies");
        assert_eq!(
            result,
            entries(&[soa(3), a("www.d.test.", 2), a("new.d.test.", 3)])
        );
    }

    #[test]
    fn a_deletion_not_held_or_a_serial_gap_does_not_apply() {
        let held = entries(&[soa(1), a("www.d.test.", 1)]);
        let missing = [difference(1, 2, vec![a("www.d.test.", 7)], vec![])];
        assert!(matches!(
            apply(held.clone(), 1, 2, &missing),
            Err(DiffError::NotHeld { .. })
        ));
        let from_elsewhere = [difference(5, 6, vec![], vec![])];
        assert_eq!(
            apply(held.clone(), 1, 6, &from_elsewhere),
            Err(DiffError::SerialMismatch { held: 1, from: 5 })
        );
        let gap = [
            difference(1, 2, vec![], vec![]),
            difference(3, 4, vec![], vec![]),
        ];
        assert_eq!(
            apply(held.clone(), 1, 4, &gap),
            Err(DiffError::Broken { to: 2, from: 3 })
        );
        let short = [difference(1, 2, vec![], vec![])];
        assert_eq!(
            apply(held, 1, 3, &short),
            Err(DiffError::WrongEnd {
                to: 2,
                announced: 3
            })
        );
    }
}
