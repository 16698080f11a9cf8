//! The compiled prefix table: a MaxMind DB flattened, once at load, into sorted range tables.
//!
//! Why not query `maxminddb` per packet: its lookup walks the tree bit by bit and decodes the
//! record (allocating for names maps). Here every network of the database becomes one entry of a
//! sorted array (`u32` starts for IPv4, `u128` for IPv6), so a lookup is one binary search and
//! two array reads, with no allocation and no locks.
//!
//! The tables cover the whole address space: networks without data (the "holes" of the search
//! tree) are entries too, with no location. That gives [`GeoTable::lookup_block`] the exact
//! prefix of the empty tree node an address falls into, which is the right ECS scope for an
//! address the database does not know.
//!
//! The search tree is walked directly from the file bytes (the format is public: nodes of two
//! 24/28/32-bit records). `maxminddb` parses the metadata and decodes each distinct record once.
//! Walking ourselves lets us decode a record once however many networks point at it, and see the
//! IPv4 alias subtrees (`::ffff:0:0/96`, `2002::/16`, `2001::/32`) that `Reader::within` skips.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;
use serde::Deserialize;

use super::GeoError;

/// Location id stored for networks of the tree that carry no data record.
const NO_LOCATION: u32 = u32::MAX;

/// Bytes at the start of the metadata section; the search tree cannot be longer than this offset.
const METADATA_MARKER: &[u8] = b"\xab\xcd\xefMaxMind.com";

/// A deduplicated location: what steering needs from a GeoIP2 Country/City record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GeoLocation {
    /// ISO 3166-1 alpha-2 code from `country.iso_code`, else `registered_country.iso_code`.
    pub country: Option<[u8; 2]>,
    /// Continent code from `continent.code` (AF, AN, AS, EU, NA, OC, SA).
    pub continent: Option<[u8; 2]>,
}

impl GeoLocation {
    /// The country code as text.
    pub fn country_str(&self) -> Option<&str> {
        self.country
            .as_ref()
            .and_then(|c| std::str::from_utf8(c).ok())
    }

    /// The continent code as text.
    pub fn continent_str(&self) -> Option<&str> {
        self.continent
            .as_ref()
            .and_then(|c| std::str::from_utf8(c).ok())
    }
}

/// A database network that has a data record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeoHit {
    /// Index into [`GeoTable::locations`].
    pub location: u32,
    /// Length of the matched database network; IPv4 addresses get IPv4 lengths (0..=32).
    pub prefix_len: u8,
}

/// The tree node an address falls into, with or without data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeoBlock {
    /// Location of the record, `None` where the database has no data.
    pub location: Option<u32>,
    /// Length of the network (for a hole: the empty network of the tree that covers the address).
    pub prefix_len: u8,
}

/// Facts about the loaded database, for status reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseInfo {
    /// `database_type` from the metadata, e.g. `GeoIP2-Country`.
    pub database_type: String,
    /// Build time from the metadata (seconds since the epoch).
    pub build_epoch: u64,
    /// 4 for an IPv4-only tree, 6 otherwise.
    pub ip_version: u16,
    /// IPv4 networks with a data record.
    pub ipv4_networks: usize,
    /// IPv6 networks with a data record (IPv4 alias ranges included).
    pub ipv6_networks: usize,
    /// Distinct locations.
    pub locations: usize,
    /// Records with a continent or a country (records without either still get a location).
    pub records_with_geo: usize,
}

/// One address family's sorted range table; `starts[0]` is 0 and the entries cover the family.
#[derive(Debug, Clone)]
struct RangeTable<A> {
    starts: Vec<A>,
    blocks: Vec<Block>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    location: u32,
    prefix_len: u8,
}

impl<A: Copy + Ord> RangeTable<A> {
    fn find(&self, addr: A) -> Option<Block> {
        let index = self
            .starts
            .partition_point(|start| *start <= addr)
            .checked_sub(1)?;
        self.blocks.get(index).copied()
    }
}

/// A whole-family range table with nothing in it.
fn empty_range_table<A: Default>() -> RangeTable<A> {
    RangeTable {
        starts: vec![A::default()],
        blocks: vec![Block {
            location: NO_LOCATION,
            prefix_len: 0,
        }],
    }
}

/// A MaxMind database compiled into binary-searchable range tables.
#[derive(Debug, Clone)]
pub struct GeoTable {
    v4: RangeTable<u32>,
    v6: RangeTable<u128>,
    locations: Vec<GeoLocation>,
    info: DatabaseInfo,
}

/// A network of the table: start address (IPv4 in the low 32 bits), prefix length, location.
pub(crate) type TableEntry = (u128, u8, Option<u32>);

impl GeoTable {
    /// Reads and compiles a MaxMind DB file (GeoIP2/GeoLite2 Country or City, DB-IP, or any
    /// database whose records carry `country.iso_code` / `continent.code`).
    pub fn open(path: &Path) -> Result<GeoTable, GeoError> {
        // Real databases (GeoIP2/GeoLite2 City, DB-IP) are tens to hundreds of MiB.
        let bytes = crate::files::read_limited(path, 2 << 30).map_err(|source| GeoError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(&bytes, path)
    }

    /// Compiles a database held in memory; `path` is only used in error messages.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<GeoTable, GeoError> {
        let reader =
            maxminddb::Reader::from_source(bytes).map_err(|source| GeoError::Database {
                path: path.to_path_buf(),
                source,
            })?;
        let invalid = |reason: String| GeoError::InvalidDatabase {
            path: path.to_path_buf(),
            reason,
        };
        let tree = SearchTree::new(bytes, &reader.metadata).map_err(invalid)?;
        let mut records = RecordDecoder::new(&reader, path);

        let v4_root = tree.ipv4_root();
        let v4_leaves = tree.walk(v4_root, 32).map_err(invalid)?;
        let v4 = records.compile_v4(&v4_leaves)?;
        let v6 = if tree.ip_version == 6 {
            let v6_leaves = tree.walk(0, 128).map_err(invalid)?;
            records.compile_v6(&v6_leaves, &v4)?
        } else {
            // An IPv4-only tree says nothing about IPv6 addresses.
            Vec::new()
        };

        let info = DatabaseInfo {
            database_type: reader.metadata.database_type.clone(),
            build_epoch: reader.metadata.build_epoch,
            ip_version: tree.ip_version,
            ipv4_networks: count_with_data(&v4),
            ipv6_networks: count_with_data(&v6),
            locations: records.locations.len(),
            records_with_geo: records.records_with_geo,
        };
        Ok(GeoTable {
            v4: into_range_table(&v4, |start| start as u32),
            v6: if v6.is_empty() {
                empty_range_table()
            } else {
                into_range_table(&v6, |start| start)
            },
            locations: records.locations,
            info,
        })
    }

    /// A table without any data: every address is a hole covering its whole family.
    pub fn empty() -> GeoTable {
        GeoTable {
            v4: empty_range_table(),
            v6: empty_range_table(),
            locations: Vec::new(),
            info: DatabaseInfo {
                database_type: String::new(),
                build_epoch: 0,
                ip_version: 6,
                ipv4_networks: 0,
                ipv6_networks: 0,
                locations: 0,
                records_with_geo: 0,
            },
        }
    }

    /// The database network holding `ip`, if it has a data record. Allocation-free.
    pub fn lookup(&self, ip: IpAddr) -> Option<GeoHit> {
        let block = self.lookup_block(ip);
        block.location.map(|location| GeoHit {
            location,
            prefix_len: block.prefix_len,
        })
    }

    /// The tree network holding `ip`, with or without data. Allocation-free.
    pub fn lookup_block(&self, ip: IpAddr) -> GeoBlock {
        let found = match ip {
            IpAddr::V4(v4) => self.v4.find(u32::from(v4)),
            IpAddr::V6(v6) => self.v6.find(u128::from(v6)),
        };
        let block = found.unwrap_or(Block {
            location: NO_LOCATION,
            prefix_len: 0,
        });
        GeoBlock {
            location: (block.location != NO_LOCATION).then_some(block.location),
            prefix_len: block.prefix_len,
        }
    }

    /// The location with id `id`.
    pub fn location(&self, id: u32) -> Option<&GeoLocation> {
        self.locations.get(id as usize)
    }

    /// All distinct locations; a location id indexes this slice.
    pub fn locations(&self) -> &[GeoLocation] {
        &self.locations
    }

    /// Metadata and counts of the compiled database.
    pub fn info(&self) -> &DatabaseInfo {
        &self.info
    }

    /// The IPv4 networks in address order (starts in the low 32 bits), holes included.
    pub(crate) fn v4_entries(&self) -> Vec<TableEntry> {
        entries_of(&self.v4, u128::from)
    }

    /// The IPv6 networks in address order, holes included.
    pub(crate) fn v6_entries(&self) -> Vec<TableEntry> {
        entries_of(&self.v6, |start| start)
    }
}

fn entries_of<A: Copy>(table: &RangeTable<A>, widen: impl Fn(A) -> u128) -> Vec<TableEntry> {
    table
        .starts
        .iter()
        .zip(&table.blocks)
        .map(|(start, block)| {
            let location = (block.location != NO_LOCATION).then_some(block.location);
            (widen(*start), block.prefix_len, location)
        })
        .collect()
}

fn count_with_data(entries: &[Block128]) -> usize {
    entries
        .iter()
        .filter(|e| e.block.location != NO_LOCATION)
        .count()
}

fn into_range_table<A>(entries: &[Block128], narrow: impl Fn(u128) -> A) -> RangeTable<A> {
    RangeTable {
        starts: entries.iter().map(|e| narrow(e.start)).collect(),
        blocks: entries.iter().map(|e| e.block).collect(),
    }
}

/// A compiled network before it is split into the per-family arrays.
#[derive(Debug, Clone, Copy)]
struct Block128 {
    start: u128,
    block: Block,
}

/// What the walk finds at the end of a path through the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeafKind {
    /// No data for this network.
    Empty,
    /// The raw record value (greater than the node count) pointing into the data section.
    Data(u32),
    /// The path reaches the IPv4 subtree: the next 32 bits are an IPv4 address.
    Ipv4Alias,
}

#[derive(Debug, Clone, Copy)]
struct Leaf {
    start: u128,
    prefix_len: u8,
    kind: LeafKind,
}

/// Read-only view of the binary search tree at the start of a MaxMind DB file.
struct SearchTree<'a> {
    bytes: &'a [u8],
    node_count: u32,
    record_size: u16,
    ip_version: u16,
}

impl<'a> SearchTree<'a> {
    fn new(bytes: &'a [u8], metadata: &maxminddb::Metadata) -> Result<Self, String> {
        let record_size = metadata.record_size;
        if !matches!(record_size, 24 | 28 | 32) {
            return Err(format!(
                "unsupported record size {record_size} (expected 24, 28 or 32)"
            ));
        }
        if !matches!(metadata.ip_version, 4 | 6) {
            return Err(format!("unsupported ip_version {}", metadata.ip_version));
        }
        let tree_len = u64::from(metadata.node_count) * u64::from(record_size) / 4;
        let metadata_start = find_last(bytes, METADATA_MARKER).unwrap_or(bytes.len());
        if tree_len > metadata_start as u64 {
            return Err(format!(
                "node_count {} does not fit in the file ({} bytes)",
                metadata.node_count,
                bytes.len()
            ));
        }
        Ok(SearchTree {
            bytes,
            node_count: metadata.node_count,
            record_size,
            ip_version: metadata.ip_version,
        })
    }

    /// One of the two records of `node` (side 0 = bit 0 = left).
    fn record(&self, node: u32, side: u8) -> Result<u32, String> {
        let node_bytes = usize::from(self.record_size) / 4;
        let offset = node as usize * node_bytes;
        let raw = self
            .bytes
            .get(offset..offset + node_bytes)
            .ok_or_else(|| format!("search tree node {node} lies outside the file"))?;
        let be = |b: &[u8]| {
            b.iter()
                .fold(0u32, |acc, byte| (acc << 8) | u32::from(*byte))
        };
        Ok(match (self.record_size, side) {
            (24, 0) => be(&raw[0..3]),
            (24, _) => be(&raw[3..6]),
            // 28-bit records share the middle byte: its high nibble extends the left record.
            (28, 0) => (u32::from(raw[3] & 0xf0) << 20) | be(&raw[0..3]),
            (28, _) => (u32::from(raw[3] & 0x0f) << 24) | be(&raw[4..7]),
            (_, 0) => be(&raw[0..4]),
            (_, _) => be(&raw[4..8]),
        })
    }

    /// The node where IPv4 lookups start: the end of the 96 zero bits of `::/96` in an IPv6
    /// tree (the same rule `maxminddb` applies), the root in an IPv4 tree.
    fn ipv4_root(&self) -> u32 {
        if self.ip_version == 4 {
            return 0;
        }
        let mut node = 0;
        for _ in 0..96 {
            if node >= self.node_count {
                break;
            }
            match self.record(node, 0) {
                Ok(next) => node = next,
                Err(_) => return self.node_count,
            }
        }
        node
    }

    /// All leaves under `root`, in address order, for a family of `bits` bits.
    ///
    /// In the IPv6 walk a record pointing back at the IPv4 root is reported as an alias and
    /// not descended into: the caller mirrors the IPv4 table there. Each node may be visited
    /// once per walk; a tree that shares other subtrees or loops is refused rather than walked
    /// exponentially.
    fn walk(&self, root: u32, bits: u8) -> Result<Vec<Leaf>, String> {
        let ipv4_root = if bits == 128 && self.ip_version == 6 {
            Some(self.ipv4_root()).filter(|node| *node < self.node_count)
        } else {
            None
        };
        let mut leaves = Vec::new();
        let mut stack = vec![(root, 0u128, 0u8)];
        let mut visits: u64 = 0;
        while let Some((node, start, depth)) = stack.pop() {
            let kind = if Some(node) == ipv4_root && depth <= 96 {
                Some(LeafKind::Ipv4Alias)
            } else if node == self.node_count {
                Some(LeafKind::Empty)
            } else if node > self.node_count {
                Some(LeafKind::Data(node))
            } else {
                None
            };
            if let Some(kind) = kind {
                leaves.push(Leaf {
                    start,
                    prefix_len: depth,
                    kind,
                });
                continue;
            }
            if depth >= bits {
                return Err(format!(
                    "search tree is deeper than {bits} bits at {}",
                    format_start(start, bits)
                ));
            }
            visits += 1;
            if visits > u64::from(self.node_count) {
                return Err("search tree shares subtrees or loops (more visits than nodes)".into());
            }
            let right_start = start | (1u128 << (bits - 1 - depth));
            // Push right first so the left (lower addresses) comes out first.
            stack.push((self.record(node, 1)?, right_start, depth + 1));
            stack.push((self.record(node, 0)?, start, depth + 1));
        }
        Ok(leaves)
    }
}

fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .rposition(|window| window == needle)
}

fn format_start(start: u128, bits: u8) -> String {
    if bits == 32 {
        Ipv4Addr::from(start as u32).to_string()
    } else {
        Ipv6Addr::from(start).to_string()
    }
}

/// The part of a GeoIP2 Country/City record steering uses; other fields are skipped.
#[derive(Deserialize)]
struct CountryRecord<'a> {
    #[serde(borrow, default)]
    country: Option<IsoCode<'a>>,
    #[serde(borrow, default)]
    registered_country: Option<IsoCode<'a>>,
    #[serde(borrow, default)]
    continent: Option<ContinentCode<'a>>,
}

#[derive(Deserialize)]
struct IsoCode<'a> {
    #[serde(borrow, default)]
    iso_code: Option<&'a str>,
}

#[derive(Deserialize)]
struct ContinentCode<'a> {
    #[serde(borrow, default)]
    code: Option<&'a str>,
}

/// Two ASCII letters, upper-cased; anything else is treated as absent.
fn two_letter_code(code: Option<&str>) -> Option<[u8; 2]> {
    match code?.as_bytes() {
        [a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => {
            Some([a.to_ascii_uppercase(), b.to_ascii_uppercase()])
        }
        _ => None,
    }
}

/// Decodes each distinct data record once and deduplicates locations.
struct RecordDecoder<'r, 'b> {
    reader: &'r maxminddb::Reader<&'b [u8]>,
    path: PathBuf,
    by_record: FxHashMap<u32, u32>,
    by_location: FxHashMap<GeoLocation, u32>,
    locations: Vec<GeoLocation>,
    records_with_geo: usize,
}

impl<'r, 'b> RecordDecoder<'r, 'b> {
    fn new(reader: &'r maxminddb::Reader<&'b [u8]>, path: &Path) -> Self {
        RecordDecoder {
            reader,
            path: path.to_path_buf(),
            by_record: FxHashMap::default(),
            by_location: FxHashMap::default(),
            locations: Vec::new(),
            records_with_geo: 0,
        }
    }

    fn invalid(&self, reason: String) -> GeoError {
        GeoError::InvalidDatabase {
            path: self.path.clone(),
            reason,
        }
    }

    /// Location id of the record `record` that the network `network`/`prefix_len` points at.
    fn location_of(
        &mut self,
        record: u32,
        network: IpAddr,
        prefix_len: u8,
    ) -> Result<u32, GeoError> {
        if let Some(id) = self.by_record.get(&record) {
            return Ok(*id);
        }
        // maxminddb has no public "decode at offset", so decode through a lookup of the
        // network's first address, which reaches the same record.
        let (decoded, found_len) = self
            .reader
            .lookup_prefix::<CountryRecord>(network)
            .map_err(|e| self.invalid(format!("record of {network}/{prefix_len}: {e}")))?;
        let record_value = decoded.ok_or_else(|| {
            self.invalid(format!(
                "{network}/{prefix_len} has a record in the tree walk but not in a lookup"
            ))
        })?;
        if found_len != usize::from(prefix_len) {
            return Err(self.invalid(format!(
                "tree walk found {network}/{prefix_len} but a lookup found /{found_len}"
            )));
        }
        let location = GeoLocation {
            country: two_letter_code(
                record_value
                    .country
                    .and_then(|c| c.iso_code)
                    .or(record_value.registered_country.and_then(|c| c.iso_code)),
            ),
            continent: two_letter_code(record_value.continent.and_then(|c| c.code)),
        };
        if location != GeoLocation::default() {
            self.records_with_geo += 1;
        }
        let next_id = self.locations.len() as u32;
        let id = *self.by_location.entry(location).or_insert(next_id);
        if id == next_id {
            self.locations.push(location);
        }
        self.by_record.insert(record, id);
        Ok(id)
    }

    fn block_of(&mut self, leaf: &Leaf, network: IpAddr) -> Result<Block, GeoError> {
        let location = match leaf.kind {
            LeafKind::Data(record) => self.location_of(record, network, leaf.prefix_len)?,
            LeafKind::Empty | LeafKind::Ipv4Alias => NO_LOCATION,
        };
        Ok(Block {
            location,
            prefix_len: leaf.prefix_len,
        })
    }

    fn compile_v4(&mut self, leaves: &[Leaf]) -> Result<Vec<Block128>, GeoError> {
        leaves
            .iter()
            .map(|leaf| {
                let network = IpAddr::V4(Ipv4Addr::from(leaf.start as u32));
                Ok(Block128 {
                    start: leaf.start,
                    block: self.block_of(leaf, network)?,
                })
            })
            .collect()
    }

    /// The IPv6 table; each IPv4 alias leaf at depth `d` is replaced by the IPv4 table shifted
    /// into the 32 bits after `d`, as `maxminddb` would answer there.
    fn compile_v6(&mut self, leaves: &[Leaf], v4: &[Block128]) -> Result<Vec<Block128>, GeoError> {
        let mut out = Vec::with_capacity(leaves.len());
        for leaf in leaves {
            if leaf.kind == LeafKind::Ipv4Alias {
                let shift = 96 - u32::from(leaf.prefix_len);
                out.extend(v4.iter().map(|entry| Block128 {
                    start: leaf.start | (entry.start << shift),
                    block: Block {
                        location: entry.block.location,
                        prefix_len: leaf.prefix_len + entry.block.prefix_len,
                    },
                }));
                continue;
            }
            let network = IpAddr::V6(Ipv6Addr::from(leaf.start));
            out.push(Block128 {
                start: leaf.start,
                block: self.block_of(leaf, network)?,
            });
        }
        Ok(out)
    }
}
