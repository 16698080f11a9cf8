//! The tenant table the serving path reads: every tenant name → its [`ServedTenant`],
//! split into [`SHARDS`] shards by the name's hash, each behind its own `Arc`. A change to
//! one tenant copies the shards its names fall in (a few thousand entries at a million
//! tenants) and shares every other shard with the table before; the new table is built
//! whole and swapped in with one atomic store. A lookup is one hash of the name and one
//! probe: no lock, no allocation.

use std::hash::Hasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxHasher;

use super::compile::ServedTenant;

/// Shards of the table (a power of two).
pub const SHARDS: usize = 256;

/// One name of a tenant.
#[derive(Clone)]
struct Entry {
    name: Arc<[u8]>,
    tenant: Arc<ServedTenant>,
}

#[derive(Clone, Default)]
struct Shard {
    entries: HashTable<Entry>,
}

/// Name → tenant, sharded; immutable once built.
#[derive(Clone)]
pub struct TenantTable {
    shards: Arc<[Arc<Shard>]>,
    names: usize,
}

impl Default for TenantTable {
    fn default() -> Self {
        let empty = Arc::new(Shard::default());
        TenantTable {
            shards: (0..SHARDS).map(|_| empty.clone()).collect(),
            names: 0,
        }
    }
}

/// One change to the table.
pub enum NameChange {
    /// The name is the tenant's (added or replaced).
    Set(Box<[u8]>, Arc<ServedTenant>),
    /// The name is no tenant's any more (it answers as the platform wildcard does).
    Remove(Box<[u8]>),
}

impl NameChange {
    fn name(&self) -> &[u8] {
        match self {
            NameChange::Set(name, _) | NameChange::Remove(name) => name,
        }
    }
}

fn name_hash(name: &[u8]) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write(name);
    hasher.finish()
}

/// The shard of a hash: its top bits (the table's probe uses the low ones).
fn shard_of(hash: u64) -> usize {
    (hash >> 56) as usize & (SHARDS - 1)
}

impl TenantTable {
    /// The tenant owning `name` (lower-case wire format), if any.
    #[inline]
    pub fn get(&self, name: &[u8]) -> Option<&ServedTenant> {
        if self.names == 0 {
            return None;
        }
        let hash = name_hash(name);
        let shard = self.shards.get(shard_of(hash))?;
        shard
            .entries
            .find(hash, |e| &*e.name == name)
            .map(|e| &*e.tenant)
    }

    /// Names in the table.
    pub fn len(&self) -> usize {
        self.names
    }

    pub fn is_empty(&self) -> bool {
        self.names == 0
    }

    /// This table with `changes` applied: the shards they touch are copied and changed,
    /// every other shard is shared.
    pub fn with_changes(&self, changes: Vec<NameChange>) -> TenantTable {
        let mut shards: Vec<Arc<Shard>> = self.shards.to_vec();
        let mut names = self.names;
        for change in changes {
            let hash = name_hash(change.name());
            let Some(slot) = shards.get_mut(shard_of(hash)) else {
                continue;
            };
            // The first change to a shard copies it (the old table keeps its own).
            let shard = Arc::make_mut(slot);
            let found = shard
                .entries
                .find_entry(hash, |e| *e.name == *change.name());
            match (change, found) {
                (NameChange::Set(_, tenant), Ok(mut entry)) => entry.get_mut().tenant = tenant,
                (NameChange::Set(name, tenant), Err(absent)) => {
                    let entry = Entry {
                        name: Arc::from(name),
                        tenant,
                    };
                    absent
                        .into_table()
                        .insert_unique(hash, entry, |e| name_hash(&e.name));
                    names += 1;
                }
                (NameChange::Remove(_), Ok(entry)) => {
                    entry.remove();
                    names -= 1;
                }
                (NameChange::Remove(_), Err(_)) => {}
            }
        }
        TenantTable {
            shards: shards.into(),
            names,
        }
    }

    /// Whether `other` shares shard `index` with this table (for tests and benchmarks).
    pub fn shares_shard(&self, other: &TenantTable, index: usize) -> bool {
        match (self.shards.get(index), other.shards.get(index)) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The shard a name falls in.
    pub fn shard_index(name: &[u8]) -> usize {
        shard_of(name_hash(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(label: &str) -> Box<[u8]> {
        let mut out = vec![label.len() as u8];
        out.extend_from_slice(label.as_bytes());
        out.extend_from_slice(b"\x04edge\x07example\x03net\x00");
        out.into_boxed_slice()
    }

    fn tenant(name: &str, serial: u64) -> Arc<ServedTenant> {
        Arc::new(ServedTenant::for_test(name, serial, vec![wire(name)]))
    }

    #[test]
    fn a_name_finds_its_tenant_and_others_find_none() {
        let table =
            TenantTable::default().with_changes(vec![NameChange::Set(wire("a"), tenant("a", 1))]);
        assert_eq!(table.get(&wire("a")).map(|t| t.serial), Some(1));
        assert!(table.get(&wire("b")).is_none());
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_change_copies_one_shard_and_shares_the_rest() {
        let changes = (0..10_000)
            .map(|i| {
                let name = format!("t{i}");
                NameChange::Set(wire(&name), tenant(&name, 1))
            })
            .collect();
        let before = TenantTable::default().with_changes(changes);
        let after = before.with_changes(vec![NameChange::Set(wire("t42"), tenant("t42", 2))]);
        let changed = TenantTable::shard_index(&wire("t42"));
        let shared = (0..SHARDS)
            .filter(|&i| before.shares_shard(&after, i))
            .count();
        assert_eq!(shared, SHARDS - 1);
        assert!(!before.shares_shard(&after, changed));
        assert_eq!(before.get(&wire("t42")).map(|t| t.serial), Some(1));
        assert_eq!(after.get(&wire("t42")).map(|t| t.serial), Some(2));
        assert_eq!(after.len(), 10_000);
    }

    #[test]
    fn removing_a_name_leaves_it_to_the_wildcard() {
        let table =
            TenantTable::default().with_changes(vec![NameChange::Set(wire("a"), tenant("a", 1))]);
        let table = table.with_changes(vec![
            NameChange::Remove(wire("a")),
            NameChange::Remove(wire("zz")),
        ]);
        assert!(table.get(&wire("a")).is_none());
        assert!(table.is_empty());
    }
}
