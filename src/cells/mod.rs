//! Cells: the platform's independently announced anycast addresses (each in practice its own
//! /24 and /48), grouped in layers — the global layer, one per frontend region, one per
//! fallback site — and each tenant's *shuffle shard*: k cells per layer.
//!
//! Owns the cell and layer types and their checks, the assignment of a tenant's shard, the
//! precomputed addresses a tenant answers with ([`TenantCells`]) and the overlap measurement.
//! Pure and a leaf: it imports nothing from the crate (no config, no policy, no sockets, no
//! clock); `config`/`policy` build a [`CellTopology`] and the tenant compiler asks it for a
//! tenant's cells once, at compile time. Nothing here runs per query.
//!
//! # Assignment: rendezvous hashing
//!
//! A tenant's shard in a layer is its k cells with the highest score
//! `SipHash-2-4(fixed key, tenant hash ‖ cell hash)`, where the cell hash covers the layer's
//! name and the cell's name (not its position or address). So:
//! - it is a pure function of (tenant name, the layer's cell names, k): identical on every node,
//!   run and build, whatever order the cells are written in;
//! - adding a cell moves exactly the tenants whose top k now include it (each swaps one cell for
//!   the new one), about `T·k/(C+1)` of `T` tenants — the minimum that gives the new cell its
//!   share; removing a cell moves exactly the tenants that had it (each gains one cell), the
//!   minimum possible. Nobody else moves (tested);
//! - layers are independent: the layer name is in every cell hash, so sharing a shard in one
//!   layer says nothing about sharing one in another.
//!
//! # Overlap: measured, not guaranteed
//!
//! With C cells and k picks there are C(C,k) shards. The Route 53 property "no two tenants
//! share more than m cells" cannot be guaranteed by a per-tenant pure function: it is a
//! constraint between tenants, and a tenant's shard would then depend on who else exists and in
//! which order they came (breaking stability: one new tenant could move others). Moreover a
//! family of k-sets with pairwise overlap ≤ m holds at most [`packing_bound`]`(C,k,m)` =
//! C(C,m+1)/C(k,m+1) shards (every (m+1)-subset of cells in at most one shard): past that many
//! tenants no assignment at all can keep the bound (16 cells, k=2, m=1: 120; 64 cells, k=4,
//! m=2: 10,416).
//!
//! What we do instead: keep the assignment pure and stable, and make overlap a number you can
//! read. Two tenants' shards in a layer of C cells overlap hypergeometrically: they share
//! exactly s cells with probability C(k,s)·C(C−k,k−s)/C(C,k) ([`expected_overlap`]); sharing all
//! k — the case where impairing one tenant's whole shard leaves another with no healthy cell —
//! has probability 1/C(C,k). [`overlap_distribution`] counts, over a set of tenants, how many
//! pairs share exactly 0, 1, …, k cells (exactly, in O(T·2^k), not over T² pairs), and the unit
//! tests check it against the expectation at 10,000 tenants. An operator who needs fewer pairs
//! above m adds cells (or raises k); nothing is refused or reassigned when tenants outnumber
//! the shards that could keep the bound.

pub mod blame;
mod hash;
pub mod impaired;

pub use self::impaired::{left_out_of, ImpairedCells, LeftOut, Reasons, Why};

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use self::hash::{siphash24, KEY};

/// Most cells a tenant takes in one layer.
pub const MAX_K: usize = 8;

/// Most cells in one layer (a shard's indices are `u16`).
pub const MAX_CELLS_PER_LAYER: usize = 4096;

/// One cell: an anycast address per family, announced on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// Unique within its layer (`g1`, `eu-west-3`); the shard is ranked by it.
    pub name: String,
    pub v4: Option<Ipv4Addr>,
    pub v6: Option<Ipv6Addr>,
}

/// A problem with the cells as configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CellsError {
    #[error("layer {layer}: no cells")]
    Empty { layer: String },
    #[error("layer {layer}: {count} cells, at most {MAX_CELLS_PER_LAYER}")]
    TooMany { layer: String, count: usize },
    #[error("layer {layer}: cell {index} has no name")]
    Unnamed { layer: String, index: usize },
    #[error("layer {layer}: cell {name:?} is listed twice")]
    DuplicateName { layer: String, name: String },
    #[error("layer {layer}: cell {name:?} has no address")]
    NoAddress { layer: String, name: String },
    #[error(
        "layer {layer}: cell {name:?} has {has} but cell {first:?} has {first_has}: every cell of a layer answers the same families"
    )]
    MixedFamilies {
        layer: String,
        name: String,
        has: &'static str,
        first: String,
        first_has: &'static str,
    },
    #[error("cell {name:?} in layer {layer}: address {address} is already cell {other:?}'s in layer {other_layer}")]
    DuplicateAddress {
        layer: String,
        name: String,
        address: IpAddr,
        other_layer: String,
        other: String,
    },
    #[error("k = {k}: a tenant takes 1 to {MAX_K} cells per layer")]
    BadK { k: usize },
}

fn families(cell: &Cell) -> &'static str {
    match (cell.v4.is_some(), cell.v6.is_some()) {
        (true, true) => "IPv4 and IPv6",
        (true, false) => "IPv4 only",
        (false, true) => "IPv6 only",
        (false, false) => "no address",
    }
}

/// The cells of one layer, checked, with their rendezvous hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    name: String,
    cells: Vec<Cell>,
    /// Per cell: the hash of (layer name, cell name) that its scores are drawn from.
    salts: Vec<u64>,
}

impl Layer {
    /// A layer named `name` (`global`, `region eu-west`, `fallback fb-eu`: the name is part of
    /// every cell's hash, so two layers with the same cell names still draw independently).
    pub fn new(name: &str, cells: Vec<Cell>) -> Result<Layer, CellsError> {
        let layer = || name.to_string();
        if cells.is_empty() {
            return Err(CellsError::Empty { layer: layer() });
        }
        if cells.len() > MAX_CELLS_PER_LAYER {
            return Err(CellsError::TooMany {
                layer: layer(),
                count: cells.len(),
            });
        }
        for (index, cell) in cells.iter().enumerate() {
            if cell.name.is_empty() {
                return Err(CellsError::Unnamed {
                    layer: layer(),
                    index,
                });
            }
            if cells[..index].iter().any(|c| c.name == cell.name) {
                return Err(CellsError::DuplicateName {
                    layer: layer(),
                    name: cell.name.clone(),
                });
            }
            if cell.v4.is_none() && cell.v6.is_none() {
                return Err(CellsError::NoAddress {
                    layer: layer(),
                    name: cell.name.clone(),
                });
            }
            let first = &cells[0];
            if families(cell) != families(first) {
                return Err(CellsError::MixedFamilies {
                    layer: layer(),
                    name: cell.name.clone(),
                    has: families(cell),
                    first: first.name.clone(),
                    first_has: families(first),
                });
            }
        }
        let salts = cells
            .iter()
            .map(|c| {
                let mut bytes = Vec::with_capacity(name.len() + c.name.len() + 1);
                bytes.extend_from_slice(name.as_bytes());
                bytes.push(0xff); // no valid UTF-8 has it: (layer, cell) pairs never collide
                bytes.extend_from_slice(c.name.as_bytes());
                siphash24(KEY, &bytes)
            })
            .collect();
        Ok(Layer {
            name: name.to_string(),
            cells,
            salts,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    /// Whether the layer's cells have IPv4 (IPv6) addresses (every cell has the same).
    pub fn families(&self) -> (bool, bool) {
        self.cells
            .first()
            .map_or((false, false), |c| (c.v4.is_some(), c.v6.is_some()))
    }

    /// `tenant`'s shard: its `k` cells of this layer (all of them when the layer has fewer;
    /// `k` is clamped to 1..=[`MAX_K`]).
    pub fn shard(&self, tenant: &str, k: usize) -> Shard {
        self.shard_of(tenant_hash(tenant), k)
    }

    fn shard_of(&self, tenant: u64, k: usize) -> Shard {
        let k = k.clamp(1, MAX_K).min(self.cells.len());
        // The k best (score, index), best first; ties (never seen with 64-bit scores) go to
        // the cell written first.
        let mut best: [(u64, u16); MAX_K] = [(0, 0); MAX_K];
        let mut len = 0usize;
        for (index, salt) in self.salts.iter().enumerate() {
            let score = score(tenant, *salt);
            let index = index as u16; // at most MAX_CELLS_PER_LAYER cells
            if len == k && score <= best[k - 1].0 {
                continue;
            }
            let mut at = len.min(k - 1);
            if len < k {
                len += 1;
            }
            while at > 0 && best[at - 1].0 < score {
                best[at] = best[at - 1];
                at -= 1;
            }
            best[at] = (score, index);
        }
        let mut cells = [0u16; MAX_K];
        for (slot, (_, index)) in cells.iter_mut().zip(&best[..len]) {
            *slot = *index;
        }
        cells[..len].sort_unstable();
        Shard {
            cells,
            len: len as u8,
        }
    }
}

/// The hash a tenant's scores are drawn from.
fn tenant_hash(tenant: &str) -> u64 {
    siphash24(KEY, tenant.as_bytes())
}

/// A tenant's rendezvous score for one cell.
fn score(tenant: u64, cell: u64) -> u64 {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&tenant.to_le_bytes());
    bytes[8..].copy_from_slice(&cell.to_le_bytes());
    siphash24(KEY, &bytes)
}

/// A tenant's cells in one layer: indices into the layer's cells, ascending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    cells: [u16; MAX_K],
    len: u8,
}

impl Shard {
    pub fn cells(&self) -> &[u16] {
        &self.cells[..usize::from(self.len)]
    }

    /// How many cells two shards (of the same layer) share.
    pub fn overlap(&self, other: &Shard) -> usize {
        let (mut a, mut b) = (
            self.cells().iter().peekable(),
            other.cells().iter().peekable(),
        );
        let mut shared = 0;
        while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
            match x.cmp(y) {
                std::cmp::Ordering::Less => {
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    shared += 1;
                    a.next();
                    b.next();
                }
            }
        }
        shared
    }
}

/// Which layer: the global one, a region's (topology order), a fallback site's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerRef {
    Global,
    Region(u16),
    Site(u16),
}

/// Every layer of the platform, positioned like the topology's regions and sites (a region or
/// site without cells answers with its own anycast addresses), and the default k.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellTopology {
    global: Option<Layer>,
    regions: Vec<Option<Layer>>,
    sites: Vec<Option<Layer>>,
    /// Cells for quarantined tenants only ([`CellTopology::assign_quarantined`]): no healthy
    /// tenant's shard is ever drawn from them. Not one of [`CellTopology::layers`].
    quarantine: Option<Layer>,
    k: u8,
    fingerprint: u64,
}

impl CellTopology {
    /// Checks that no address is two cells' and that `k` is 1..=[`MAX_K`].
    pub fn new(
        global: Option<Layer>,
        regions: Vec<Option<Layer>>,
        sites: Vec<Option<Layer>>,
        k: usize,
    ) -> Result<CellTopology, CellsError> {
        if !(1..=MAX_K).contains(&k) {
            return Err(CellsError::BadK { k });
        }
        let layers = || {
            global
                .iter()
                .chain(regions.iter().flatten())
                .chain(sites.iter().flatten())
        };
        let mut seen: HashMap<IpAddr, (&str, &str)> = HashMap::new();
        for layer in layers() {
            for cell in &layer.cells {
                let addresses = [cell.v4.map(IpAddr::V4), cell.v6.map(IpAddr::V6)];
                for address in addresses.into_iter().flatten() {
                    if let Some((other_layer, other)) =
                        seen.insert(address, (&layer.name, &cell.name))
                    {
                        return Err(CellsError::DuplicateAddress {
                            layer: layer.name.clone(),
                            name: cell.name.clone(),
                            address,
                            other_layer: other_layer.to_string(),
                            other: other.to_string(),
                        });
                    }
                }
            }
        }
        let mut text = format!("k={k};");
        let mut describe = |slot: &str, layer: Option<&Layer>| {
            text.push_str(slot);
            text.push('=');
            if let Some(layer) = layer {
                text.push_str(&layer.name);
                for cell in &layer.cells {
                    text.push_str(&format!(",{}/{:?}/{:?}", cell.name, cell.v4, cell.v6));
                }
            }
            text.push(';');
        };
        describe("global", global.as_ref());
        for (i, layer) in regions.iter().enumerate() {
            describe(&format!("r{i}"), layer.as_ref());
        }
        for (i, layer) in sites.iter().enumerate() {
            describe(&format!("s{i}"), layer.as_ref());
        }
        let fingerprint = siphash24(KEY, text.as_bytes());
        Ok(CellTopology {
            global,
            regions,
            sites,
            quarantine: None,
            k: k as u8,
            fingerprint,
        })
    }

    /// This topology with `layer` as its quarantine cells; refused when one of their
    /// addresses is another cell's.
    pub fn with_quarantine(self, layer: Layer) -> Result<CellTopology, CellsError> {
        for (_, other) in self.layers() {
            for cell in &layer.cells {
                for theirs in &other.cells {
                    let same = |a: Option<IpAddr>, b: Option<IpAddr>| a.is_some() && a == b;
                    let address = [
                        (cell.v4.map(IpAddr::V4), theirs.v4.map(IpAddr::V4)),
                        (cell.v6.map(IpAddr::V6), theirs.v6.map(IpAddr::V6)),
                    ]
                    .into_iter()
                    .find(|(a, b)| same(*a, *b))
                    .and_then(|(a, _)| a);
                    if let Some(address) = address {
                        return Err(CellsError::DuplicateAddress {
                            layer: layer.name.clone(),
                            name: cell.name.clone(),
                            address,
                            other_layer: other.name.clone(),
                            other: theirs.name.clone(),
                        });
                    }
                }
            }
        }
        let mut text = String::from("quarantine");
        for cell in &layer.cells {
            text.push_str(&format!(",{}/{:?}/{:?}", cell.name, cell.v4, cell.v6));
        }
        let fingerprint = self.fingerprint ^ siphash24(KEY, text.as_bytes());
        Ok(CellTopology {
            quarantine: Some(layer),
            fingerprint,
            ..self
        })
    }

    /// The quarantine cells, when there are any.
    pub fn quarantine(&self) -> Option<&Layer> {
        self.quarantine.as_ref()
    }

    /// A quarantined `tenant`'s cells: its shard of the quarantine cells (`k` of them,
    /// `None`: the default), in every layer alike, so that wherever its clients are sent its
    /// answers carry quarantine cells only. `None` without quarantine cells.
    pub fn assign_quarantined(&self, tenant: &str, k: Option<usize>) -> Option<TenantCells> {
        let layer = self.quarantine.as_ref()?;
        let k = k.unwrap_or(self.k());
        let shard = layer.shard_of(tenant_hash(tenant), k);
        let cells = Arc::new(LayerCells::of(layer, &shard));
        let slots = 1 + self.regions.len() + self.sites.len();
        Some(TenantCells {
            fingerprint: self.fingerprint,
            regions: self.regions.len() as u16,
            k: k.clamp(1, MAX_K) as u8,
            quarantined: true,
            layers: vec![Some(cells); slots].into_boxed_slice(),
        })
    }

    /// The default k (`[topology.cells] k`).
    pub fn k(&self) -> usize {
        usize::from(self.k)
    }

    /// A stable hash of every layer, cell, address and k: what a [`TenantCells`] was computed
    /// against (one computed for another topology is not served).
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    pub fn layer(&self, at: LayerRef) -> Option<&Layer> {
        match at {
            LayerRef::Global => self.global.as_ref(),
            LayerRef::Region(r) => self.regions.get(usize::from(r))?.as_ref(),
            LayerRef::Site(s) => self.sites.get(usize::from(s))?.as_ref(),
        }
    }

    /// Every layer with cells, with where it is.
    pub fn layers(&self) -> impl Iterator<Item = (LayerRef, &Layer)> + '_ {
        let global = self.global.iter().map(|l| (LayerRef::Global, l));
        let regions = self
            .regions
            .iter()
            .enumerate()
            .filter_map(|(i, l)| Some((LayerRef::Region(i as u16), l.as_ref()?)));
        let sites = self
            .sites
            .iter()
            .enumerate()
            .filter_map(|(i, l)| Some((LayerRef::Site(i as u16), l.as_ref()?)));
        global.chain(regions).chain(sites)
    }

    /// Where layer `at` sits in a [`TenantCells`]' spans.
    fn slot(&self, at: LayerRef) -> Option<usize> {
        match at {
            LayerRef::Global => Some(0),
            LayerRef::Region(r) => {
                (usize::from(r) < self.regions.len()).then(|| 1 + usize::from(r))
            }
            LayerRef::Site(s) => {
                (usize::from(s) < self.sites.len()).then(|| 1 + self.regions.len() + usize::from(s))
            }
        }
    }

    /// `tenant`'s cells in every layer with `k` per layer (`None`: the default), as the
    /// addresses it answers with. Computed once per tenant, at compile time; allocates (a
    /// [`CellInterner`] then shares each layer's addresses with every tenant that has them).
    pub fn assign(&self, tenant: &str, k: Option<usize>) -> TenantCells {
        let k = k.unwrap_or(self.k());
        let hash = tenant_hash(tenant);
        let slots = 1 + self.regions.len() + self.sites.len();
        let mut layers = vec![None; slots];
        for (at, layer) in self.layers() {
            let Some(slot) = self.slot(at) else { continue };
            let shard = layer.shard_of(hash, k);
            layers[slot] = Some(Arc::new(LayerCells::of(layer, &shard)));
        }
        TenantCells {
            fingerprint: self.fingerprint,
            regions: self.regions.len() as u16,
            k: k.clamp(1, MAX_K) as u8,
            quarantined: false,
            layers: layers.into_boxed_slice(),
        }
    }
}

/// A tenant's cells in one layer, as the addresses its answers carry there: shared by every
/// tenant with the same cells in that layer ([`CellInterner`]). A shard spans every layer,
/// so whole shards are nearly all distinct (their number is the product of each layer's
/// choices), while each layer has only a handful of distinct k-subsets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LayerCells {
    v4: Box<[Ipv4Addr]>,
    v6: Box<[Ipv6Addr]>,
}

impl LayerCells {
    fn of(layer: &Layer, shard: &Shard) -> LayerCells {
        let cells = shard.cells().iter().map(|&i| &layer.cells[usize::from(i)]);
        LayerCells {
            v4: cells.clone().flat_map(|c| c.v4).collect(),
            v6: cells.flat_map(|c| c.v6).collect(),
        }
    }

    /// These addresses as bytes: u8 counts, then the IPv4 and the IPv6 addresses.
    pub fn to_bytes(&self, out: &mut Vec<u8>) {
        out.push(self.v4.len() as u8);
        out.push(self.v6.len() as u8);
        for addr in &self.v4 {
            out.extend_from_slice(&addr.octets());
        }
        for addr in &self.v6 {
            out.extend_from_slice(&addr.octets());
        }
    }

    /// Addresses read back from [`Self::to_bytes`], and the bytes they took; `None` when the
    /// bytes are short, or more than [`MAX_K`] cells' worth.
    pub fn from_bytes(bytes: &[u8]) -> Option<(LayerCells, usize)> {
        let (&v4_len, &v6_len) = (bytes.first()?, bytes.get(1)?);
        let (v4_len, v6_len) = (usize::from(v4_len), usize::from(v6_len));
        if v4_len > 2 * MAX_K || v6_len > 2 * MAX_K {
            return None;
        }
        let v4_bytes = bytes.get(2..2 + 4 * v4_len)?;
        let v6_bytes = bytes.get(2 + 4 * v4_len..2 + 4 * v4_len + 16 * v6_len)?;
        let v4 = v4_bytes
            .chunks_exact(4)
            .map(|b| Ipv4Addr::new(b[0], b[1], b[2], b[3]))
            .collect();
        let v6 = v6_bytes
            .chunks_exact(16)
            .map(|b| {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(b);
                Ipv6Addr::from(octets)
            })
            .collect();
        Some((LayerCells { v4, v6 }, 2 + 4 * v4_len + 16 * v6_len))
    }
}

/// A tenant's shard in every layer, as addresses: what its anycast answers carry. Built at
/// compile time ([`CellTopology::assign`]); reading it ([`TenantCells::layer`]) is two slice
/// borrows, no allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantCells {
    fingerprint: u64,
    regions: u16,
    /// The cells per layer asked for (a layer with fewer gives all of its own).
    k: u8,
    /// On the quarantine cells ([`CellTopology::assign_quarantined`]).
    quarantined: bool,
    /// Per layer (global, then each region, then each site): its addresses there, `None`
    /// where the layer has no cells.
    layers: Box<[Option<Arc<LayerCells>>]>,
}

/// A [`TenantCells`] as numbers, for a cache that keeps each distinct [`LayerCells`] once
/// in a table: everything but the addresses, and per layer its entry in that table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellsRecord {
    pub fingerprint: u64,
    pub regions: u16,
    pub k: u8,
    pub quarantined: bool,
    /// Per layer: the table entry (`None`: no cells there).
    pub layers: Vec<Option<u32>>,
}

impl TenantCells {
    /// The [`CellTopology::fingerprint`] this was computed against.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The cells per layer it was given (its document's `cells`, else the platform's k).
    pub fn k(&self) -> usize {
        usize::from(self.k)
    }

    /// Whether these are quarantine cells (the same in every layer).
    pub fn is_quarantined(&self) -> bool {
        self.quarantined
    }

    /// Its record, each layer's addresses numbered by `number` (the cache's table).
    pub fn record<'s>(&'s self, mut number: impl FnMut(&'s LayerCells) -> u32) -> CellsRecord {
        CellsRecord {
            fingerprint: self.fingerprint,
            regions: self.regions,
            k: self.k,
            quarantined: self.quarantined,
            layers: self
                .layers
                .iter()
                .map(|l| l.as_deref().map(&mut number))
                .collect(),
        }
    }

    /// Cells from a record and the table its numbers are entries of; `None` when the record
    /// cannot be cells (k out of range, fewer layers than regions, an entry outside the table).
    pub fn from_record(record: &CellsRecord, table: &[Arc<LayerCells>]) -> Option<TenantCells> {
        if !(1..=MAX_K as u8).contains(&record.k)
            || record.layers.len() < 1 + usize::from(record.regions)
        {
            return None;
        }
        let layers = record
            .layers
            .iter()
            .map(|entry| match entry {
                None => Some(None),
                Some(n) => table.get(usize::try_from(*n).ok()?).cloned().map(Some),
            })
            .collect::<Option<Box<[_]>>>()?;
        Some(TenantCells {
            fingerprint: record.fingerprint,
            regions: record.regions,
            k: record.k,
            quarantined: record.quarantined,
            layers,
        })
    }

    /// The tenant's addresses in layer `at`; `None` when the layer has no cells (the answer
    /// is then the platform's own for that destination).
    pub fn layer(&self, at: LayerRef) -> Option<(&[Ipv4Addr], &[Ipv6Addr])> {
        let slot = match at {
            LayerRef::Global => 0,
            LayerRef::Region(r) if r < self.regions => 1 + usize::from(r),
            LayerRef::Region(_) => return None,
            LayerRef::Site(s) => 1 + usize::from(self.regions) + usize::from(s),
        };
        let cells = self.layers.get(slot)?.as_deref()?;
        if cells.v4.is_empty() && cells.v6.is_empty() {
            return None;
        }
        Some((&cells.v4, &cells.v6))
    }
}

/// Equal layer cells shared: with a handful of cells per layer there are few distinct
/// k-subsets in each, so a million tenants' shards point at a few hundred [`LayerCells`]
/// instead of holding a million copies of their addresses.
#[derive(Default)]
pub struct CellInterner(HashMap<Arc<LayerCells>, ()>);

impl CellInterner {
    /// `cells` with every layer's addresses shared.
    pub fn intern(&mut self, cells: TenantCells) -> Arc<TenantCells> {
        Arc::new(self.shared(cells))
    }

    /// `cells` with every layer's addresses shared: the same value when they already are.
    pub fn share(&mut self, cells: Arc<TenantCells>) -> Arc<TenantCells> {
        let all_shared = cells.layers.iter().flatten().all(|layer| {
            self.0
                .get_key_value(layer)
                .is_some_and(|(kept, _)| Arc::ptr_eq(kept, layer))
        });
        if all_shared {
            return cells;
        }
        Arc::new(self.shared(TenantCells::clone(&cells)))
    }

    /// Keeps `layer` as the shared copy of its addresses unless one is kept already.
    pub fn keep(&mut self, layer: Arc<LayerCells>) -> Arc<LayerCells> {
        match self.0.get_key_value(&layer) {
            Some((kept, _)) => kept.clone(),
            None => {
                self.0.insert(layer.clone(), ());
                layer
            }
        }
    }

    fn shared(&mut self, cells: TenantCells) -> TenantCells {
        let layers = cells
            .layers
            .iter()
            .map(|layer| layer.as_ref().map(|l| self.keep(l.clone())))
            .collect();
        TenantCells { layers, ..cells }
    }
}

/// How many pairs of tenants share exactly s cells of a layer, for s = 0..=k.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlapDistribution {
    /// Tenants measured.
    pub tenants: usize,
    /// `pairs[s]`: pairs sharing exactly `s` cells.
    pub pairs: Vec<u64>,
}

impl OverlapDistribution {
    /// All pairs: T(T−1)/2.
    pub fn total_pairs(&self) -> u64 {
        self.pairs.iter().sum()
    }

    /// The most cells any two tenants share.
    pub fn max_overlap(&self) -> usize {
        self.pairs.iter().rposition(|&n| n > 0).unwrap_or(0)
    }

    /// Pairs sharing more than `m` cells (the ones a Route 53-style bound m would forbid).
    pub fn pairs_above(&self, m: usize) -> u64 {
        self.pairs.iter().skip(m + 1).sum()
    }
}

/// The overlap distribution of a set of shards of one layer, exactly, without looking at every
/// pair: for each j, `A_j` = Σ over j-subsets S of cells of C(tenants whose shard contains S, 2)
/// = Σ over pairs of C(overlap, j); binomial inversion gives the pairs with overlap exactly s:
/// N_s = Σ_{j≥s} (−1)^{j−s} C(j,s) A_j. Cost O(T·2^k).
pub fn overlap_distribution(shards: &[Shard]) -> OverlapDistribution {
    let k = shards.iter().map(|s| s.cells().len()).max().unwrap_or(0);
    let mut counts: HashMap<(u8, [u16; MAX_K]), u64> = HashMap::new();
    for shard in shards {
        let cells = shard.cells();
        for mask in 1u32..(1 << cells.len()) {
            let mut key = [0u16; MAX_K];
            let mut len = 0u8;
            for (bit, &cell) in cells.iter().enumerate() {
                if mask & (1 << bit) != 0 {
                    key[usize::from(len)] = cell;
                    len += 1;
                }
            }
            *counts.entry((len, key)).or_default() += 1;
        }
    }
    let t = shards.len() as i128;
    let mut a = vec![0i128; k + 1];
    a[0] = t * (t - 1) / 2;
    for ((len, _), n) in counts {
        let n = i128::from(n);
        a[usize::from(len)] += n * (n - 1) / 2;
    }
    let pairs = (0..=k)
        .map(|s| {
            let n: i128 = (s..=k)
                .map(|j| {
                    let sign = if (j - s) % 2 == 0 { 1 } else { -1 };
                    sign * choose(j as u64, s as u64) as i128 * a[j]
                })
                .sum();
            n.max(0) as u64
        })
        .collect();
    OverlapDistribution {
        tenants: shards.len(),
        pairs,
    }
}

/// C(n, r), saturating.
pub fn choose(n: u64, r: u64) -> u128 {
    if r > n {
        return 0;
    }
    let r = r.min(n - r);
    let mut out: u128 = 1;
    for i in 0..r {
        out = out.saturating_mul(u128::from(n - i)) / u128::from(i + 1);
    }
    out
}

/// For two tenants with `k` random cells each of `cells`: the probability that they share
/// exactly s cells, s = 0..=k (hypergeometric).
pub fn expected_overlap(cells: usize, k: usize) -> Vec<f64> {
    let (c, k) = (cells as u64, k as u64);
    let all = choose(c, k) as f64;
    (0..=k)
        .map(|s| (choose(k, s) * choose(c - k, k - s)) as f64 / all)
        .collect()
}

/// The most k-subsets of `cells` with pairwise overlap ≤ `m` (an upper bound: each (m+1)-subset
/// of cells lies in at most one of them, and each holds C(k, m+1)). With more tenants than this,
/// no assignment whatever keeps every pair within m.
pub fn packing_bound(cells: usize, k: usize, m: usize) -> u128 {
    if m >= k {
        return choose(cells as u64, k as u64);
    }
    choose(cells as u64, (m + 1) as u64) / choose(k as u64, (m + 1) as u64)
}

#[cfg(test)]
mod tests;
