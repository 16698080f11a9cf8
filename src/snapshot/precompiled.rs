//! Precompiled static responses: for every (name, type) whose answer does not depend on the
//! client, the complete response message (id 0, no EDNS) built at load, so the serving path
//! answers with one hash probe and one copy.

use rustc_hash::FxHashMap;

use super::Snapshot;
use crate::dns::respond::precompile;
use crate::dns::wire::{rtype, WireName, MAX_NAME_LEN};
use crate::zone::lookup::{resolve, NoSteering};

/// Past this many bytes of precompiled answers, the rest are answered by the general path.
const MAX_PRECOMPILED_BYTES: usize = 256 << 20;

#[derive(Default)]
pub struct Precompiled {
    answers: FxHashMap<Box<[u8]>, Entry>,
}

/// A precompiled response and the index of the zone that answers its name (for counters and
/// rate limiting, so the fast path needs no second zone lookup).
struct Entry {
    zone: u16,
    response: Box<[u8]>,
}

fn key_into<'b>(buf: &'b mut [u8; MAX_NAME_LEN + 2], qname: &[u8], qtype: u16) -> &'b [u8] {
    let len = qname.len();
    buf[..len].copy_from_slice(qname);
    buf[len..len + 2].copy_from_slice(&qtype.to_be_bytes());
    &buf[..len + 2]
}

impl Precompiled {
    /// The precompiled response for (name, type), with the index of its zone.
    pub fn get(&self, qname: &WireName, qtype: u16) -> Option<(usize, &[u8])> {
        if self.answers.is_empty() {
            return None;
        }
        let mut buf = [0u8; MAX_NAME_LEN + 2];
        self.answers
            .get(key_into(&mut buf, qname.as_wire(), qtype))
            .map(|e| (usize::from(e.zone), &e.response[..]))
    }

    pub fn len(&self) -> usize {
        self.answers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    pub(super) fn build(snapshot: &Snapshot) -> Precompiled {
        let mut answers = FxHashMap::default();
        let mut scratch = Vec::new();
        let mut bytes = 0usize;
        for zone in snapshot.zones.zones() {
            for (key, node) in &zone.nodes {
                if node.below_cut || key.starts_with(b"\x01*") {
                    continue;
                }
                let Some(name) = WireName::from_wire(key) else {
                    continue;
                };
                let mut types: Vec<u16> = node.rrsets.iter().map(|s| s.rtype).collect();
                types.extend([rtype::A, rtype::AAAA]);
                types.sort_unstable();
                types.dedup();
                for qtype in types {
                    if bytes > MAX_PRECOMPILED_BYTES {
                        return Precompiled { answers };
                    }
                    let Some(plan) = resolve(&snapshot.zones, &name, qtype, &NoSteering) else {
                        continue;
                    };
                    if !plan.client_independent {
                        continue;
                    }
                    let mut question = key.to_vec();
                    question.extend_from_slice(&qtype.to_be_bytes());
                    question.extend_from_slice(&1u16.to_be_bytes());
                    if let Some(response) = precompile(snapshot, &question, &plan, &mut scratch) {
                        let mut buf = [0u8; MAX_NAME_LEN + 2];
                        let k: Box<[u8]> = key_into(&mut buf, key, qtype).into();
                        bytes += response.len() + k.len();
                        let Some(zone) = snapshot
                            .zones
                            .find_index(&name)
                            .and_then(|(z, _)| u16::try_from(z).ok())
                        else {
                            continue;
                        };
                        answers.insert(k, Entry { zone, response });
                    }
                }
            }
        }
        Precompiled { answers }
    }
}
