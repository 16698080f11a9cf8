//! The tenants' last-known-good cache: every tenant served, in compiled form, in one file, so
//! that a restart serves a million tenants before it reads a single document (then looks at
//! the folder in the background for what changed while it was down).
//!
//! Owns the format, which is pure bytes in and out (the reloader writes and reads the file):
//! a header (magic, format, the binary's version, the platform's key, the instant up to which
//! the folder was looked at), then every distinct layer's cells once (the addresses of one
//! layer's k-subset: a million tenants have a few hundred; read back, tenants with the same
//! cells in a layer share one copy), then each plain tenant as its compiled parts (its shard
//! as a record: each layer's cells by number in that table), each tenant with a profile of its own
//! as its text (compiled again at load: it nests the platform's profiles),
//! the tenants whose newest document was refused (read again at start), and a checksum of
//! everything before it (FxHash, eight bytes a step: a million tenants are some 60 MB, and
//! the check is against a damaged file, not against someone who can write the state folder). A cache that does not match in any way is refused whole
//! with the reason; it is never half used.

use super::compile::{PlainParts, ServedTenant};
use super::document::TenantState;
use crate::cells::{CellsRecord, LayerCells, TenantCells};
use std::collections::HashMap;
use std::hash::Hasher;
use std::sync::Arc;

use rustc_hash::FxHasher;

const MAGIC: &[u8; 8] = b"SDNSTNT\x04";

/// What a cache must match to be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    /// The binary that wrote it (its version: another build may compile tenants differently).
    pub binary: String,
    /// A fingerprint of what plain tenants are compiled against (the platform's wildcards).
    pub platform: u64,
}

/// A tenant with a profile of its own, as cached: compiled again at load.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnProfileTenant {
    pub name: String,
    pub serial: u64,
    pub since: u32,
    pub text: String,
}

/// What a cache holds.
pub struct Cached {
    /// Nanoseconds since the Unix epoch up to which every document was looked at: a file not
    /// modified since is the one cached.
    pub looked_at_until: u64,
    pub plain: Vec<ServedTenant>,
    /// Every distinct layer's cells the plain tenants hold (shared with them).
    pub layers: Vec<Arc<LayerCells>>,
    pub own: Vec<OwnProfileTenant>,
    /// Tenants whose newest document was refused: their file is read again at start.
    pub reread: Vec<String>,
}

/// Why a cache is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheRefused {
    #[error("not a tenant cache, or of another format")]
    Format,
    #[error("written by {0}, not by this binary")]
    OtherBinary(String),
    #[error("written for another platform (its wildcards changed)")]
    OtherPlatform,
    #[error("checksum mismatch: the file is damaged")]
    Checksum,
    #[error("truncated or malformed at byte {0}")]
    Malformed(usize),
}

/// The cache's bytes.
pub fn encode<'a>(
    key: &CacheKey,
    looked_at_until: u64,
    tenants: impl Iterator<Item = &'a ServedTenant>,
    reread: impl Iterator<Item = &'a str>,
) -> Vec<u8> {
    let mut plain = Vec::with_capacity(1 << 16);
    let mut own = Vec::new();
    let mut layers: HashMap<&LayerCells, u32> = HashMap::new();
    let mut layer_bytes = Vec::new();
    let mut count = 0u64;
    for tenant in tenants {
        if let Some(text) = tenant.own_profile_text() {
            own.push((tenant, text));
            continue;
        }
        let out = &mut plain;
        put_bytes(out, tenant.name().as_bytes());
        out.extend_from_slice(&tenant.serial.to_le_bytes());
        out.extend_from_slice(&tenant.fingerprint.to_le_bytes());
        out.extend_from_slice(&u64::from(tenant.since).to_le_bytes());
        out.push(match tenant.state {
            TenantState::Active => 0,
            TenantState::Suspended => 1,
            // Read back only with its (quarantine) cells.
            TenantState::Quarantined => 2,
        });
        match tenant.ttl {
            Some(ttl) => {
                out.push(1);
                out.extend_from_slice(&ttl.to_le_bytes());
            }
            None => out.push(0),
        }
        put_bytes(out, tenant.names_wire());
        match tenant.compiled_cells() {
            None => out.push(0),
            Some(cells) => {
                out.push(1);
                let record = cells.record(|layer| {
                    let next = layers.len() as u32;
                    *layers.entry(layer).or_insert_with(|| {
                        layer.to_bytes(&mut layer_bytes);
                        next
                    })
                });
                put_record(out, &record);
            }
        }
        out.push(tenant.cells_asked().unwrap_or(0));
        count += 1;
    }
    let mut out = Vec::with_capacity(plain.len() + layer_bytes.len() + 64);
    out.extend_from_slice(MAGIC);
    put_bytes(&mut out, key.binary.as_bytes());
    out.extend_from_slice(&key.platform.to_le_bytes());
    out.extend_from_slice(&looked_at_until.to_le_bytes());
    out.extend_from_slice(&(layers.len() as u64).to_le_bytes());
    out.extend_from_slice(&layer_bytes);
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&plain);
    out.extend_from_slice(&(own.len() as u64).to_le_bytes());
    for (tenant, text) in own {
        put_bytes(&mut out, tenant.name().as_bytes());
        out.extend_from_slice(&tenant.serial.to_le_bytes());
        out.extend_from_slice(&u64::from(tenant.since).to_le_bytes());
        put_bytes(&mut out, text.as_bytes());
    }
    let reread: Vec<&str> = reread.collect();
    out.extend_from_slice(&(reread.len() as u64).to_le_bytes());
    for name in reread {
        put_bytes(&mut out, name.as_bytes());
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// A layer without cells in a shard's record.
const NO_LAYER: u32 = u32::MAX;

/// A shard's record: fingerprint u64, regions u16, k u8, quarantined u8, the number of layers
/// u16, then each layer's entry in the table u32 ([`NO_LAYER`]: none).
fn put_record(out: &mut Vec<u8>, record: &CellsRecord) {
    out.extend_from_slice(&record.fingerprint.to_le_bytes());
    out.extend_from_slice(&record.regions.to_le_bytes());
    out.push(record.k);
    out.push(u8::from(record.quarantined));
    out.extend_from_slice(&(record.layers.len() as u16).to_le_bytes());
    for layer in &record.layers {
        out.extend_from_slice(&layer.unwrap_or(NO_LAYER).to_le_bytes());
    }
}

fn checksum(bytes: &[u8]) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write(bytes);
    hasher.write_usize(bytes.len());
    hasher.finish()
}

/// Length-prefixed bytes (u32 little-endian).
fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Reads `bytes` back, if they are a whole cache written for `key`.
pub fn decode(bytes: &[u8], key: &CacheKey) -> Result<Cached, CacheRefused> {
    if bytes.len() < MAGIC.len() + 8 || !bytes.starts_with(MAGIC) {
        return Err(CacheRefused::Format);
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    let mut reader = Reader {
        bytes: body,
        at: MAGIC.len(),
    };
    let binary = String::from_utf8_lossy(reader.bytes()?).into_owned();
    if binary != key.binary {
        return Err(CacheRefused::OtherBinary(binary));
    }
    if checksum(body).to_le_bytes() != sum {
        return Err(CacheRefused::Checksum);
    }
    if reader.u64()? != key.platform {
        return Err(CacheRefused::OtherPlatform);
    }
    let looked_at_until = reader.u64()?;
    let count = reader.count()?;
    let mut layers = Vec::with_capacity(count);
    for _ in 0..count {
        let at = reader.at;
        let (cells, len) =
            LayerCells::from_bytes(reader.rest()).ok_or(CacheRefused::Malformed(at))?;
        reader.take(len)?;
        layers.push(Arc::new(cells));
    }
    let count = reader.count()?;
    let mut plain = Vec::with_capacity(count);
    for _ in 0..count {
        let at = reader.at;
        let name = reader.text()?;
        let parts = PlainParts {
            name,
            serial: reader.u64()?,
            fingerprint: reader.u64()?,
            since: reader.since()?,
            state: match reader.u8()? {
                0 => TenantState::Active,
                1 => TenantState::Suspended,
                2 => TenantState::Quarantined,
                _ => return Err(CacheRefused::Malformed(at)),
            },
            ttl: match reader.u8()? {
                0 => None,
                1 => Some(reader.u32()?),
                _ => return Err(CacheRefused::Malformed(at)),
            },
            names: reader.bytes()?,
            cells: match reader.u8()? {
                0 => None,
                1 => {
                    let record = reader.record()?;
                    let cells = TenantCells::from_record(&record, &layers)
                        .ok_or(CacheRefused::Malformed(at))?;
                    Some(Arc::new(cells))
                }
                _ => return Err(CacheRefused::Malformed(at)),
            },
            cells_asked: match reader.u8()? {
                0 => None,
                k => Some(k),
            },
        };
        // A quarantined tenant is served from its quarantine cells, never without them.
        let quarantined_bare = parts.state == TenantState::Quarantined
            && !parts.cells.as_ref().is_some_and(|c| c.is_quarantined());
        if quarantined_bare {
            return Err(CacheRefused::Malformed(at));
        }
        plain.push(ServedTenant::plain(parts).ok_or(CacheRefused::Malformed(at))?);
    }
    let count = reader.count()?;
    let mut own = Vec::with_capacity(count);
    for _ in 0..count {
        own.push(OwnProfileTenant {
            name: reader.text()?.to_string(),
            serial: reader.u64()?,
            since: reader.since()?,
            text: reader.text()?.to_string(),
        });
    }
    let count = reader.count()?;
    let mut reread = Vec::with_capacity(count);
    for _ in 0..count {
        reread.push(reader.text()?.to_string());
    }
    if reader.at != body.len() {
        return Err(CacheRefused::Malformed(reader.at));
    }
    Ok(Cached {
        looked_at_until,
        plain,
        layers,
        own,
        reread,
    })
}

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn rest(&self) -> &'b [u8] {
        self.bytes.get(self.at..).unwrap_or_default()
    }

    fn take(&mut self, n: usize) -> Result<&'b [u8], CacheRefused> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(CacheRefused::Malformed(self.at))?;
        let taken = self
            .bytes
            .get(self.at..end)
            .ok_or(CacheRefused::Malformed(self.at))?;
        self.at = end;
        Ok(taken)
    }

    fn u8(&mut self) -> Result<u8, CacheRefused> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, CacheRefused> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, CacheRefused> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    /// Seconds since the Unix epoch (a u32 in a u64).
    fn since(&mut self) -> Result<u32, CacheRefused> {
        let at = self.at;
        u32::try_from(self.u64()?).map_err(|_| CacheRefused::Malformed(at))
    }

    /// A count of entries, bounded by the bytes left (each entry takes at least 4).
    fn count(&mut self) -> Result<usize, CacheRefused> {
        let at = self.at;
        let n = usize::try_from(self.u64()?).map_err(|_| CacheRefused::Malformed(at))?;
        if n > (self.bytes.len() - self.at) / 4 {
            return Err(CacheRefused::Malformed(at));
        }
        Ok(n)
    }

    fn u16(&mut self) -> Result<u16, CacheRefused> {
        let mut b = [0u8; 2];
        b.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(b))
    }

    /// A shard's record ([`put_record`]).
    fn record(&mut self) -> Result<CellsRecord, CacheRefused> {
        let fingerprint = self.u64()?;
        let regions = self.u16()?;
        let k = self.u8()?;
        let at = self.at;
        let quarantined = match self.u8()? {
            0 => false,
            1 => true,
            _ => return Err(CacheRefused::Malformed(at)),
        };
        let count = usize::from(self.u16()?);
        let mut layers = Vec::with_capacity(count);
        for _ in 0..count {
            layers.push(match self.u32()? {
                NO_LAYER => None,
                n => Some(n),
            });
        }
        Ok(CellsRecord {
            fingerprint,
            regions,
            k,
            quarantined,
            layers,
        })
    }

    fn bytes(&mut self) -> Result<&'b [u8], CacheRefused> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn text(&mut self) -> Result<&'b str, CacheRefused> {
        let at = self.at;
        std::str::from_utf8(self.bytes()?).map_err(|_| CacheRefused::Malformed(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(label: &str) -> Vec<u8> {
        let mut out = vec![label.len() as u8];
        out.extend_from_slice(label.as_bytes());
        out.extend_from_slice(b"\x04edge\x07example\x03net\x00");
        out
    }

    fn key() -> CacheKey {
        CacheKey {
            binary: "steerdns 0.1.0".into(),
            platform: 7,
        }
    }

    fn tenant(i: u64) -> ServedTenant {
        let name = format!("t{i}");
        let names = [wire(&format!("t{i}")), wire(&format!("w{i}"))].concat();
        ServedTenant::plain(PlainParts {
            name: &name,
            serial: i,
            fingerprint: i * 31,
            since: 1_700_000_000 + i as u32,
            state: if i.is_multiple_of(2) {
                TenantState::Active
            } else {
                TenantState::Suspended
            },
            ttl: i.is_multiple_of(3).then_some(60),
            names: &names,
            cells: None,
            cells_asked: None,
        })
        .unwrap_or_else(|| panic!("tenant {i} is well formed"))
    }

    #[test]
    fn a_cache_reads_back_what_was_written() {
        let tenants: Vec<_> = (0..100).map(tenant).collect();
        let bytes = encode(&key(), 42, tenants.iter(), ["bad"].into_iter());
        let cached = decode(&bytes, &key()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cached.looked_at_until, 42);
        assert_eq!(cached.reread, vec!["bad".to_string()]);
        assert_eq!(cached.plain.len(), 100);
        for (a, b) in tenants.iter().zip(&cached.plain) {
            assert_eq!(
                (
                    a.name(),
                    a.serial,
                    a.fingerprint,
                    a.since,
                    a.state,
                    a.ttl,
                    a.names_wire()
                ),
                (
                    b.name(),
                    b.serial,
                    b.fingerprint,
                    b.since,
                    b.state,
                    b.ttl,
                    b.names_wire()
                )
            );
        }
    }

    #[test]
    fn another_binary_or_platform_is_refused() {
        let bytes = encode(&key(), 0, [tenant(1)].iter(), std::iter::empty());
        let other = CacheKey {
            binary: "steerdns 9".into(),
            ..key()
        };
        assert!(matches!(
            decode(&bytes, &other),
            Err(CacheRefused::OtherBinary(_))
        ));
        let other = CacheKey {
            platform: 8,
            ..key()
        };
        assert_eq!(
            decode(&bytes, &other).err(),
            Some(CacheRefused::OtherPlatform)
        );
    }

    #[test]
    fn every_truncation_and_flipped_byte_is_refused_never_a_panic() {
        let tenants: Vec<_> = (0..3).map(tenant).collect();
        let bytes = encode(&key(), 0, tenants.iter(), ["x"].into_iter());
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len], &key()).is_err(), "truncated to {len}");
        }
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(decode(&bad, &key()).is_err(), "byte {at} flipped");
        }
    }
}
