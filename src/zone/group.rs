//! Grouping records by owner name without a map entry (and allocation) per name: the owners'
//! lower-cased wire names go into one byte arena, an index of small integers finds them, and a
//! counting sort puts each owner's items together (in their original order).

use std::hash::Hasher;

use hashbrown::HashTable;
use rustc_hash::FxHasher;

/// Items grouped by key: owners in order of first appearance, items in input order within
/// each owner.
pub struct Grouped {
    /// The keys, back to back.
    keys: Vec<u8>,
    groups: Vec<Group>,
    /// Item indices, owner by owner.
    order: Vec<u32>,
    index: HashTable<u32>,
}

#[derive(Clone, Copy)]
struct Group {
    key_at: u32,
    key_len: u32,
    first: u32,
    count: u32,
}

pub fn key_hash(key: &[u8]) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write(key);
    hasher.finish()
}

fn group_key<'k>(keys: &'k [u8], group: &Group) -> &'k [u8] {
    let at = group.key_at as usize;
    keys.get(at..at + group.key_len as usize)
        .unwrap_or_default()
}

impl Grouped {
    /// Groups `count` items; `key(i, out)` appends item `i`'s key to `out`.
    pub fn new(count: usize, mut key: impl FnMut(usize, &mut Vec<u8>)) -> Grouped {
        let mut keys = Vec::new();
        let mut groups: Vec<Group> = Vec::new();
        // Most owners have one record: room for all of them avoids growing the table.
        let mut index: HashTable<u32> = HashTable::with_capacity(count);
        let mut group_of: Vec<u32> = Vec::with_capacity(count);
        for i in 0..count {
            let at = keys.len();
            key(i, &mut keys);
            let new_key = keys.get(at..).unwrap_or_default();
            let hash = key_hash(new_key);
            let found = index
                .find(hash, |&g| group_key(&keys, &groups[g as usize]) == new_key)
                .copied();
            let g = match found {
                Some(g) => {
                    keys.truncate(at);
                    g
                }
                None => {
                    let g = groups.len() as u32;
                    groups.push(Group {
                        key_at: at as u32,
                        key_len: (keys.len() - at) as u32,
                        first: 0,
                        count: 0,
                    });
                    index.insert_unique(hash, g, |&g| {
                        key_hash(group_key(&keys, &groups[g as usize]))
                    });
                    g
                }
            };
            groups[g as usize].count += 1;
            group_of.push(g);
        }
        let mut next = 0u32;
        for group in &mut groups {
            group.first = next;
            next += group.count;
        }
        let mut fill: Vec<u32> = groups.iter().map(|g| g.first).collect();
        let mut order = vec![0u32; count];
        for (i, &g) in group_of.iter().enumerate() {
            let slot = &mut fill[g as usize];
            order[*slot as usize] = i as u32;
            *slot += 1;
        }
        Grouped {
            keys,
            groups,
            order,
            index,
        }
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Each key with the indices of its items.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u32])> {
        self.groups
            .iter()
            .map(|g| (group_key(&self.keys, g), self.members(g)))
    }

    fn members(&self, group: &Group) -> &[u32] {
        let first = group.first as usize;
        self.order
            .get(first..first + group.count as usize)
            .unwrap_or_default()
    }

    /// The indices of the items with this key.
    pub fn get(&self, key: &[u8]) -> Option<&[u32]> {
        let range = self.range(key)?;
        self.order.get(range)
    }

    /// Where the items with this key sit in the grouped order (the concatenation of
    /// [`Grouped::iter`]'s index slices).
    pub fn range(&self, key: &[u8]) -> Option<std::ops::Range<usize>> {
        let g = self.index.find(key_hash(key), |&g| {
            group_key(&self.keys, &self.groups[g as usize]) == key
        })?;
        let group = &self.groups[*g as usize];
        Some(group.first as usize..(group.first + group.count) as usize)
    }
}

/// Appends the lower-cased uncompressed wire form of `name` to `out`.
pub fn push_wire_key(out: &mut Vec<u8>, name: &hickory_proto::rr::Name) {
    for label in name.iter() {
        out.push(label.len() as u8);
        out.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    out.push(0);
}

/// `key` and each of its ancestors (uncompressed wire names), longest first, down to the root.
pub fn ancestors(key: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(key);
    std::iter::from_fn(move || {
        let current = rest?;
        let len = usize::from(*current.first()?);
        rest = (len > 0).then(|| current.get(1 + len..)).flatten();
        Some(current)
    })
}

/// Labels in an uncompressed wire name (the root has none; a leading `*` counts).
pub fn label_count(key: &[u8]) -> usize {
    ancestors(key).count().saturating_sub(1)
}
