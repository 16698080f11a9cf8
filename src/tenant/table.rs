//! The tenant tables, immutable once built and shared between versions: the one the serving
//! path reads (every tenant name → its [`ServedTenant`]) and the registry's index of served
//! tenants by tenant name. Each is split into [`SHARDS`] shards by the key's hash, each shard
//! behind its own `Arc`: a change copies the shards its keys fall in (a few thousand entries
//! at a million tenants) and shares every other shard with the table before; the new table
//! is built whole and swapped in with one atomic store. A lookup is one hash and one probe:
//! no lock, no allocation. An entry is a pointer and an offset: the key bytes live in the
//! tenant itself, so a million one-name tenants cost the tenants and 16 bytes a slot.

use std::hash::Hasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::FxHasher;

use super::compile::ServedTenant;

/// Shards of a table (a power of two).
pub const SHARDS: usize = 256;

/// What a sharded table holds: something with a key.
trait Keyed: Clone {
    fn key_is(&self, key: &[u8]) -> bool;
    fn key(&self) -> &[u8];
}

/// One name of a tenant: the tenant and where the name sits in its name list.
#[derive(Clone)]
struct NameEntry {
    tenant: Arc<ServedTenant>,
    at: u16,
}

impl Keyed for NameEntry {
    #[inline]
    fn key_is(&self, key: &[u8]) -> bool {
        self.tenant.name_at_is(self.at, key)
    }
    fn key(&self) -> &[u8] {
        self.tenant.name_at(self.at)
    }
}

/// A served tenant, keyed by its tenant name.
#[derive(Clone)]
struct ByTenant(Arc<ServedTenant>);

impl Keyed for ByTenant {
    fn key_is(&self, key: &[u8]) -> bool {
        self.0.name().as_bytes() == key
    }
    fn key(&self) -> &[u8] {
        self.0.name().as_bytes()
    }
}

/// Key → entry, sharded, copy-on-write by shard.
#[derive(Clone)]
struct Sharded<T> {
    shards: Arc<[Arc<HashTable<T>>]>,
    len: usize,
}

impl<T: Keyed> Default for Sharded<T> {
    fn default() -> Self {
        let empty = Arc::new(HashTable::new());
        Sharded {
            shards: (0..SHARDS).map(|_| empty.clone()).collect(),
            len: 0,
        }
    }
}

fn key_hash(key: &[u8]) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write(key);
    hasher.finish()
}

/// The shard of a hash: its top bits (the table's probe uses the low ones).
fn shard_of(hash: u64) -> usize {
    (hash >> 56) as usize & (SHARDS - 1)
}

/// One change to a sharded table: set (insert or replace) the entry, or remove a key.
enum Edit<T> {
    Set(T),
    Remove(Box<[u8]>),
}

impl<T: Keyed> Sharded<T> {
    #[inline]
    fn get(&self, key: &[u8]) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        let hash = key_hash(key);
        self.shards
            .get(shard_of(hash))?
            .find(hash, |e| e.key_is(key))
    }

    /// This table with `edits` applied: the shards they touch are copied and changed (the
    /// first edit of a shard copies it; the old table keeps its own), every other is shared.
    /// A large batch (a cold start's million entries) is applied on every core, a range of
    /// shards each: shards are independent tables, so this needs no lock.
    fn with(&self, edits: impl IntoIterator<Item = Edit<T>>) -> Sharded<T>
    where
        T: Send + Sync,
    {
        let mut by_shard: Vec<Vec<(u64, Edit<T>)>> = (0..SHARDS).map(|_| Vec::new()).collect();
        let mut total = 0usize;
        for edit in edits {
            let key = match &edit {
                Edit::Set(entry) => entry.key(),
                Edit::Remove(key) => key,
            };
            let hash = key_hash(key);
            if let Some(edits) = by_shard.get_mut(shard_of(hash)) {
                edits.push((hash, edit));
                total += 1;
            }
        }
        let mut shards: Vec<Arc<HashTable<T>>> = self.shards.to_vec();
        let threads = if total >= PARALLEL_FROM {
            std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS))
        } else {
            1
        };
        let added: isize = if threads > 1 {
            let per_thread = SHARDS.div_ceil(threads);
            std::thread::scope(|scope| {
                let workers: Vec<_> = shards
                    .chunks_mut(per_thread)
                    .zip(by_shard.chunks_mut(per_thread))
                    .map(|(slots, edits)| scope.spawn(move || apply_to_shards(slots, edits)))
                    .collect();
                workers
                    .into_iter()
                    .map(|w| {
                        w.join()
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                    })
                    .sum()
            })
        } else {
            apply_to_shards(&mut shards, &mut by_shard)
        };
        Sharded {
            shards: shards.into(),
            len: self.len.saturating_add_signed(added),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.shards.iter().flat_map(|shard| shard.iter())
    }
}

/// Below this many edits a batch is applied on the calling thread (starting threads costs
/// more than a change of a few thousand names).
const PARALLEL_FROM: usize = 50_000;

/// Most threads a batch is applied on.
const MAX_THREADS: usize = 8;

/// Applies each shard's edits to it (`slots[i]` gets `edits[i]`); returns the entries added
/// less those removed.
fn apply_to_shards<T: Keyed>(
    slots: &mut [Arc<HashTable<T>>],
    edits: &mut [Vec<(u64, Edit<T>)>],
) -> isize {
    slots
        .iter_mut()
        .zip(edits.iter_mut())
        .filter(|(_, edits)| !edits.is_empty())
        .map(|(slot, edits)| apply_to_shard(Arc::make_mut(slot), std::mem::take(edits)))
        .sum()
}

fn apply_to_shard<T: Keyed>(shard: &mut HashTable<T>, edits: Vec<(u64, Edit<T>)>) -> isize {
    // Room first, so that a million entries loaded at once never rehash a shard.
    let sets = edits
        .iter()
        .filter(|(_, e)| matches!(e, Edit::Set(_)))
        .count();
    shard.reserve(sets, |e| key_hash(e.key()));
    let mut added = 0isize;
    for (hash, edit) in edits {
        let key = match &edit {
            Edit::Set(entry) => entry.key(),
            Edit::Remove(key) => key,
        };
        let found = shard.find_entry(hash, |e| e.key_is(key));
        match (edit, found) {
            (Edit::Set(entry), Ok(mut slot)) => *slot.get_mut() = entry,
            (Edit::Set(entry), Err(absent)) => {
                absent
                    .into_table()
                    .insert_unique(hash, entry, |e| key_hash(e.key()));
                added += 1;
            }
            (Edit::Remove(_), Ok(slot)) => {
                slot.remove();
                added -= 1;
            }
            (Edit::Remove(_), Err(_)) => {}
        }
    }
    added
}

/// Name → tenant, sharded; immutable once built.
#[derive(Clone, Default)]
pub struct TenantTable {
    names: Sharded<NameEntry>,
}

/// One change to the name table.
pub enum NameChange {
    /// The name at this offset of the tenant's list is the tenant's (added or replaced).
    Set(Arc<ServedTenant>, u16),
    /// The name is no tenant's any more (it answers as the platform wildcard does).
    Remove(Box<[u8]>),
}

impl NameChange {
    /// Every name of `tenant` set to it.
    pub fn all_of(tenant: &Arc<ServedTenant>) -> impl Iterator<Item = NameChange> + '_ {
        tenant
            .names()
            .map(|(at, _)| NameChange::Set(tenant.clone(), at))
    }
}

impl TenantTable {
    /// The tenant owning `name` (lower-case wire format), if any.
    #[inline]
    pub fn get(&self, name: &[u8]) -> Option<&ServedTenant> {
        self.names.get(name).map(|e| &*e.tenant)
    }

    /// The tenant owning `name`, shared.
    pub fn owner(&self, name: &[u8]) -> Option<&Arc<ServedTenant>> {
        self.names.get(name).map(|e| &e.tenant)
    }

    /// Names in the table.
    pub fn len(&self) -> usize {
        self.names.len
    }

    pub fn is_empty(&self) -> bool {
        self.names.len == 0
    }

    /// This table with `changes` applied: the shards they touch are copied and changed,
    /// every other shard is shared.
    pub fn with_changes(&self, changes: impl IntoIterator<Item = NameChange>) -> TenantTable {
        let edits = changes.into_iter().map(|change| match change {
            NameChange::Set(tenant, at) => Edit::Set(NameEntry { tenant, at }),
            NameChange::Remove(name) => Edit::Remove(name),
        });
        TenantTable {
            names: self.names.with(edits),
        }
    }

    /// Whether `other` shares shard `index` with this table (for tests and benchmarks).
    pub fn shares_shard(&self, other: &TenantTable, index: usize) -> bool {
        match (self.names.shards.get(index), other.names.shards.get(index)) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The shard a name falls in.
    pub fn shard_index(name: &[u8]) -> usize {
        shard_of(key_hash(name))
    }
}

/// Served tenants by tenant name, sharded like the name table; immutable once built.
#[derive(Clone, Default)]
pub struct TenantIndex {
    tenants: Sharded<ByTenant>,
}

impl TenantIndex {
    pub fn get(&self, name: &str) -> Option<&Arc<ServedTenant>> {
        self.tenants.get(name.as_bytes()).map(|t| &t.0)
    }

    pub fn len(&self) -> usize {
        self.tenants.len
    }

    pub fn is_empty(&self) -> bool {
        self.tenants.len == 0
    }

    /// Every served tenant, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ServedTenant>> + '_ {
        self.tenants.iter().map(|t| &t.0)
    }

    /// This index with `served` set and `removed` taken out, sharing the untouched shards.
    pub fn with_changes(
        &self,
        served: impl IntoIterator<Item = Arc<ServedTenant>>,
        removed: impl IntoIterator<Item = String>,
    ) -> TenantIndex {
        let edits = served.into_iter().map(|t| Edit::Set(ByTenant(t))).chain(
            removed
                .into_iter()
                .map(|n| Edit::Remove(n.into_bytes().into_boxed_slice())),
        );
        TenantIndex {
            tenants: self.tenants.with(edits),
        }
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
        let a = tenant("a", 1);
        let table = TenantTable::default().with_changes(NameChange::all_of(&a));
        assert_eq!(table.get(&wire("a")).map(|t| t.serial), Some(1));
        assert!(table.get(&wire("b")).is_none());
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_change_copies_one_shard_and_shares_the_rest() {
        let tenants: Vec<_> = (0..10_000).map(|i| tenant(&format!("t{i}"), 1)).collect();
        let before =
            TenantTable::default().with_changes(tenants.iter().flat_map(NameChange::all_of));
        let t42 = tenant("t42", 2);
        let after = before.with_changes(NameChange::all_of(&t42));
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
        let a = tenant("a", 1);
        let table = TenantTable::default().with_changes(NameChange::all_of(&a));
        let table = table.with_changes(vec![
            NameChange::Remove(wire("a")),
            NameChange::Remove(wire("zz")),
        ]);
        assert!(table.get(&wire("a")).is_none());
        assert!(table.is_empty());
    }

    #[test]
    fn a_tenant_with_several_names_is_found_by_each() {
        let t = Arc::new(ServedTenant::for_test(
            "m",
            3,
            vec![wire("m1"), wire("m22"), wire("m333")],
        ));
        let table = TenantTable::default().with_changes(NameChange::all_of(&t));
        assert_eq!(table.len(), 3);
        for label in ["m1", "m22", "m333"] {
            assert_eq!(table.get(&wire(label)).map(|t| t.name()), Some("m"));
        }
        assert!(table.get(&wire("m2")).is_none());
        assert_eq!(
            t.display_names(),
            vec![
                "m1.edge.example.net.",
                "m22.edge.example.net.",
                "m333.edge.example.net."
            ]
        );
    }

    #[test]
    fn the_index_finds_tenants_by_name_and_shares_untouched_shards() {
        let tenants: Vec<_> = (0..1000).map(|i| tenant(&format!("t{i}"), 1)).collect();
        let before = TenantIndex::default().with_changes(tenants, Vec::new());
        let after = before.with_changes(vec![tenant("t7", 2)], vec!["t8".to_string()]);
        assert_eq!(before.get("t7").map(|t| t.serial), Some(1));
        assert_eq!(after.get("t7").map(|t| t.serial), Some(2));
        assert!(after.get("t8").is_none());
        assert_eq!(after.len(), 999);
        assert_eq!(after.iter().count(), 999);
    }

    #[test]
    fn a_batch_large_enough_for_threads_builds_the_same_table() {
        let n = PARALLEL_FROM + 10_000;
        let tenants: Vec<_> = (0..n).map(|i| tenant(&format!("t{i}"), 1)).collect();
        let table =
            TenantTable::default().with_changes(tenants.iter().flat_map(NameChange::all_of));
        assert_eq!(table.len(), n);
        assert!((0..n).all(|i| table.get(&wire(&format!("t{i}"))).is_some()));
        // One batch that removes the first half and replaces the second: both on threads.
        let removals = (0..n / 2).map(|i| NameChange::Remove(wire(&format!("t{i}"))));
        let replaced: Vec<_> = (n / 2..n).map(|i| tenant(&format!("t{i}"), 2)).collect();
        let sets = replaced.iter().flat_map(NameChange::all_of);
        let after = table.with_changes(removals.chain(sets));
        assert_eq!(after.len(), n - n / 2);
        assert!(after.get(&wire("t0")).is_none());
        assert_eq!(
            after.get(&wire(&format!("t{}", n - 1))).map(|t| t.serial),
            Some(2)
        );
        assert_eq!(table.get(&wire("t0")).map(|t| t.serial), Some(1));
    }
}
