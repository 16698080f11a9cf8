//! Precompiled answers: for every (name, type) whose answer does not depend on the client, the
//! complete response message (id 0, no EDNS) built at load, so the serving path answers with
//! one hash probe and one copy. Steered names get an entry too, naming their steering binding:
//! the same probe then leads straight to the policy, without the general lookup.

use rustc_hash::FxHashMap;

use super::Snapshot;
use crate::dns::respond::precompile;
use crate::dns::wire::{rtype, WireName, MAX_NAME_LEN};
use crate::zone::lookup::{resolve, NoSteering};
use crate::zone::model::Node;

/// Past this many bytes of precompiled answers, the rest are answered by the general path.
const MAX_PRECOMPILED_BYTES: usize = 256 << 20;

#[derive(Default)]
pub struct Precompiled {
    answers: FxHashMap<Box<[u8]>, Entry>,
}

/// What the fast path holds for one (name, type), with the index of the zone that answers the
/// name (for counters and rate limiting, so the fast path needs no second zone lookup).
struct Entry {
    zone: u16,
    answer: Stored,
}

enum Stored {
    Response(Box<[u8]>),
    Steered(u32),
}

/// A fast-path hit.
#[derive(Clone, Copy, Debug)]
pub enum Cached<'a> {
    /// The complete static response (id 0, no EDNS, lower-cased question).
    Response(&'a [u8]),
    /// An A or AAAA query at a name bound to this steering binding, reached directly (no
    /// wildcard, CNAME or zone cut in between): the policy's decision is the answer.
    Steered(u32),
}

fn key_into<'b>(buf: &'b mut [u8; MAX_NAME_LEN + 2], qname: &[u8], qtype: u16) -> &'b [u8] {
    let len = qname.len();
    buf[..len].copy_from_slice(qname);
    buf[len..len + 2].copy_from_slice(&qtype.to_be_bytes());
    &buf[..len + 2]
}

impl Precompiled {
    /// The fast-path entry for (name, type), with the index of its zone.
    pub fn get(&self, qname: &WireName, qtype: u16) -> Option<(usize, Cached<'_>)> {
        if self.answers.is_empty() {
            return None;
        }
        let mut buf = [0u8; MAX_NAME_LEN + 2];
        self.answers
            .get(key_into(&mut buf, qname.as_wire(), qtype))
            .map(|e| {
                let cached = match &e.answer {
                    Stored::Response(response) => Cached::Response(response),
                    Stored::Steered(binding) => Cached::Steered(*binding),
                };
                (usize::from(e.zone), cached)
            })
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
        for (index, zone) in snapshot.zones.zones().iter().enumerate() {
            for (key, node) in &zone.nodes {
                if node.below_cut || key.starts_with(b"\x01*") {
                    continue;
                }
                let Some(name) = WireName::from_wire(key) else {
                    continue;
                };
                // A name inside a more specific zone we also serve is answered by that zone.
                let Some(zone_index) = snapshot
                    .zones
                    .find_index(&name)
                    .filter(|&(z, _)| z == index)
                    .and_then(|(z, _)| u16::try_from(z).ok())
                else {
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
                    let mut buf = [0u8; MAX_NAME_LEN + 2];
                    let mut entry_key = || -> Box<[u8]> { key_into(&mut buf, key, qtype).into() };
                    if let Some(binding) = steered_binding(snapshot, node, qtype) {
                        let k = entry_key();
                        bytes += k.len();
                        let answer = Stored::Steered(binding);
                        answers.insert(
                            k,
                            Entry {
                                zone: zone_index,
                                answer,
                            },
                        );
                        continue;
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
                        let k = entry_key();
                        bytes += response.len() + k.len();
                        let answer = Stored::Response(response);
                        answers.insert(
                            k,
                            Entry {
                                zone: zone_index,
                                answer,
                            },
                        );
                    }
                }
            }
        }
        Precompiled { answers }
    }
}

/// The steering binding that answers `qtype` at `node` on the fast path: A and AAAA at a
/// steered name that is not a delegation (whose answer would be a referral) and whose policy
/// answers with addresses only (a CNAME chain needs the general lookup; trying the fast path
/// first would evaluate the policy twice).
fn steered_binding(snapshot: &Snapshot, node: &Node, qtype: u16) -> Option<u32> {
    if node.is_cut || !matches!(qtype, rtype::A | rtype::AAAA) {
        return None;
    }
    let binding = node.steer?;
    let policies = snapshot.policies()?;
    let steered = policies.steered().get(binding as usize)?;
    (!policies.may_answer_cname(steered.root)).then_some(binding)
}
