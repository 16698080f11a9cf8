//! The last-known-good cache container (issue 32, item 3): a compiled copy of what the server
//! last served, kept on local disk so that a restart can serve it at once. Owns the file format
//! and its checks, nothing else: what goes into the sections (the precompiled answers, see
//! `Precompiled::cache_sections`) and when the file is written or read belong to the callers.
//!
//! A cache is taken whole or refused whole ([`LkgRefused`]): it must be of this format, written
//! by this very binary, from inputs whose fingerprints are the ones the caller has now, and its
//! checksum must hold. Decoding is pure over bytes and never panics, whatever the bytes.
//!
//! The layout (integers little-endian):
//!
//! ```text
//! magic            8 bytes  "SDNSLKG\0"
//! format version   u32      FORMAT_VERSION
//! binary           u64 length, then UTF-8   e.g. "steerdns 0.1.0"
//! inputs           u64 count, then for each: u64 length, UTF-8 name, 32-byte SHA-256
//! sections         u64 count, then for each: u64 length, UTF-8 name, u64 length,
//!                  zero padding to a multiple of 8 bytes from the file's start, the bytes
//! checksum         16 bytes: XXH3-128 of everything before it, big-endian (canonical)
//! ```
//!
//! Section bytes start 8-aligned so that a reader maps the file ([`Map`]) and uses a section
//! in place ([`Bytes`], [`open`]): nothing is read or copied before the first answer. The
//! checksum is XXH3-128 (format 2; format 1 had a SHA-256, which over a 285 MB cache took
//! ~150 ms of a restart that must answer within 100 ms; XXH3 reads it at memory speed). It
//! guards against a torn or corrupted file, not against an attacker who can write the state
//! directory (who could as well write the config). An operator can check it by hand with the
//! `xxhash` package's tool: `head -c -16 FILE | xxh128sum` against
//! `tail -c 16 FILE | od -An -tx1 | tr -d ' \n'`.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::files::{replace_file, WriteError};

/// The file mapped into memory, and sections of it used in place.
mod map;
pub use map::{Bytes, Map};

/// The first bytes of every cache file.
const MAGIC: [u8; 8] = *b"SDNSLKG\0";

/// The container's layout version; a file of another version is refused as [`LkgRefused::Format`].
pub const FORMAT_VERSION: u32 = 2;

/// The binary that writes (and alone may read) a cache.
pub const BINARY: &str = concat!("steerdns ", env!("CARGO_PKG_VERSION"));

/// Length of a SHA-256 digest (an input's fingerprint).
const SHA256_LEN: usize = 32;

/// Length of the file's checksum (XXH3-128).
const CHECKSUM_LEN: usize = 16;

/// Section bytes start at a multiple of this many bytes from the file's start.
const SECTION_ALIGN: usize = 8;

/// A SHA-256 fingerprint of one input (a config, zone or GeoIP file).
pub type Fingerprint = [u8; SHA256_LEN];

/// The inputs a cache was built from, by name (a path, say), with their fingerprints.
pub type Inputs = BTreeMap<String, Fingerprint>;

/// The fingerprint of an input's bytes.
pub fn fingerprint(bytes: &[u8]) -> Fingerprint {
    Sha256::digest(bytes).into()
}

/// What a cache holds: the inputs it was built from and named sections of bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cache {
    /// The inputs, by name, with the fingerprints they had when the sections were built.
    pub inputs: Inputs,
    /// Named sections, in order; names are unique (a decoded cache's always are).
    pub sections: Vec<(String, Vec<u8>)>,
}

impl Cache {
    /// The bytes of the section named `name`.
    pub fn section(&self, name: &str) -> Option<&[u8]> {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, bytes)| bytes.as_slice())
    }
}

/// Why a cache file is not used (it is then rebuilt from the inputs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LkgRefused {
    /// Not a cache file, or one of another layout version.
    #[error("not a last-known-good cache of format {FORMAT_VERSION}")]
    Format,
    /// Written by another binary (another version of steerdns).
    #[error("written by {found:?}, not by {BINARY:?}")]
    OtherBinary { found: String },
    /// An input was added, removed or changed since the cache was written.
    #[error("input {input} changed since the cache was written")]
    InputsChanged { input: String },
    /// The bytes are not the ones written (a torn or corrupted file).
    #[error("checksum mismatch (corrupted or cut short)")]
    Checksum,
    /// Checksummed but not well formed, at this byte offset (or a section that does not parse).
    #[error("malformed at byte {at}")]
    Malformed { at: usize },
}

/// The file's bytes for `cache`, written by this binary.
pub fn encode(cache: &Cache) -> Vec<u8> {
    encode_as(BINARY, cache)
}

fn encode_as(binary: &str, cache: &Cache) -> Vec<u8> {
    let sections: usize = cache.sections.iter().map(|(n, b)| n.len() + b.len()).sum();
    let mut out = Vec::with_capacity(sections + 64 * (cache.sections.len() + 1));
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    put_bytes(&mut out, binary.as_bytes());
    put_len(&mut out, cache.inputs.len());
    for (name, fingerprint) in &cache.inputs {
        put_bytes(&mut out, name.as_bytes());
        out.extend_from_slice(fingerprint);
    }
    put_len(&mut out, cache.sections.len());
    for (name, bytes) in &cache.sections {
        put_bytes(&mut out, name.as_bytes());
        put_len(&mut out, bytes.len());
        out.resize(out.len().next_multiple_of(SECTION_ALIGN), 0);
        out.extend_from_slice(bytes);
    }
    let checksum = checksum(&out);
    out.extend_from_slice(&checksum);
    out
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as u64).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// The checksum stored after `body`: XXH3-128, big-endian (as `xxh128sum` prints it).
fn checksum(body: &[u8]) -> [u8; CHECKSUM_LEN] {
    xxhash_rust::xxh3::xxh3_128(body).to_be_bytes()
}

/// The cache in `bytes`, if it is of this format, written by this binary, from exactly
/// `expected_inputs` (same names, same fingerprints), and intact.
pub fn decode(bytes: &[u8], expected_inputs: &Inputs) -> Result<Cache, LkgRefused> {
    let layout = decode_layout(bytes, expected_inputs)?;
    Ok(Cache {
        inputs: layout.inputs,
        sections: layout
            .sections
            .into_iter()
            .map(|(name, range)| (name, bytes.get(range).unwrap_or_default().to_vec()))
            .collect(),
    })
}

/// Does the checksum at the end of `bytes` match everything before it?
pub fn checksum_holds(bytes: &[u8]) -> bool {
    match bytes.len().checked_sub(CHECKSUM_LEN) {
        Some(end) => checksum(&bytes[..end])[..] == bytes[end..],
        None => false,
    }
}

/// Where a checked cache's sections lie in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The inputs, as in [`Cache::inputs`].
    pub inputs: Inputs,
    /// Each section's name and its bytes' range in the file (8-aligned starts).
    pub sections: Vec<(String, Range<usize>)>,
}

/// [`decode`] without copying the sections out: their ranges in `bytes`, once the format, the
/// binary, the inputs and the checksum hold.
pub fn decode_layout(bytes: &[u8], expected_inputs: &Inputs) -> Result<Layout, LkgRefused> {
    check_format(bytes)?;
    if !checksum_holds(bytes) {
        return Err(LkgRefused::Checksum);
    }
    decode_unverified(bytes, expected_inputs)
}

/// A cache file mapped and checked ([`open`]): its sections, used in place.
pub struct Opened {
    map: Arc<Map>,
    /// The inputs, as in [`Cache::inputs`].
    pub inputs: Inputs,
    sections: Vec<(String, Range<usize>)>,
}

impl Opened {
    /// The section named `name`, taken out (the next call for it answers `None`).
    pub fn take(&mut self, name: &str) -> Option<Bytes> {
        let at = self.sections.iter().position(|(n, _)| n == name)?;
        let (_, range) = self.sections.swap_remove(at);
        Some(Bytes::Mapped {
            map: self.map.clone(),
            range,
        })
    }

    /// The sections not taken yet.
    pub fn into_sections(self) -> Vec<(String, Bytes)> {
        let map = self.map;
        self.sections
            .into_iter()
            .map(|(name, range)| {
                let bytes = Bytes::Mapped {
                    map: map.clone(),
                    range,
                };
                (name, bytes)
            })
            .collect()
    }
}

/// The cache in `map` (see [`decode`] for the checks), its sections left in place.
pub fn open(map: Arc<Map>, expected_inputs: &Inputs) -> Result<Opened, LkgRefused> {
    let Layout { inputs, sections } = decode_layout(map.bytes(), expected_inputs)?;
    Ok(Opened {
        map,
        inputs,
        sections,
    })
}

/// [`decode_layout`] without the checksum: every structural check, none of the trust.
fn decode_unverified(bytes: &[u8], expected_inputs: &Inputs) -> Result<Layout, LkgRefused> {
    check_format(bytes)?;
    let header = MAGIC.len() + 4;
    let body = &bytes[..bytes.len() - CHECKSUM_LEN];
    let mut reader = Reader {
        bytes: body,
        at: header,
    };
    let binary = reader.text()?;
    if binary != BINARY {
        return Err(LkgRefused::OtherBinary {
            found: binary.to_string(),
        });
    }
    let mut inputs = Inputs::new();
    for _ in 0..reader.len()? {
        let at = reader.at;
        let name = reader.text()?;
        let fingerprint: Fingerprint = reader
            .take(SHA256_LEN)?
            .try_into()
            .map_err(|_| LkgRefused::Malformed { at: reader.at })?;
        if inputs.insert(name.to_string(), fingerprint).is_some() {
            return Err(LkgRefused::Malformed { at });
        }
    }
    if let Some(input) = changed_input(&inputs, expected_inputs) {
        return Err(LkgRefused::InputsChanged { input });
    }
    let count = reader.len()?;
    let mut sections: Vec<(String, Range<usize>)> = Vec::new();
    for _ in 0..count {
        let at = reader.at;
        let name = reader.text()?;
        if sections.iter().any(|(n, _)| n == name) {
            return Err(LkgRefused::Malformed { at });
        }
        let len = reader.len()?;
        let padding = reader.at.next_multiple_of(SECTION_ALIGN) - reader.at;
        if reader.take(padding)?.iter().any(|&b| b != 0) {
            return Err(LkgRefused::Malformed { at: reader.at });
        }
        let start = reader.at;
        reader.take(len)?;
        sections.push((name.to_string(), start..reader.at));
    }
    if reader.at != body.len() {
        return Err(LkgRefused::Malformed { at: reader.at });
    }
    Ok(Layout { inputs, sections })
}

/// The magic number and the format version, with room for the checksum.
fn check_format(bytes: &[u8]) -> Result<(), LkgRefused> {
    let header = MAGIC.len() + 4;
    if bytes.len() < header + CHECKSUM_LEN
        || bytes.get(..MAGIC.len()) != Some(&MAGIC[..])
        || bytes.get(MAGIC.len()..header) != Some(&FORMAT_VERSION.to_le_bytes()[..])
    {
        return Err(LkgRefused::Format);
    }
    Ok(())
}

/// The first input (by name) that is in one list and not the other, or in both with other
/// fingerprints.
fn changed_input(found: &Inputs, expected: &Inputs) -> Option<String> {
    let differs = |name: &String| found.get(name) != expected.get(name);
    found
        .keys()
        .chain(expected.keys())
        .filter(|name| differs(name))
        .min()
        .cloned()
}

/// Writes `cache` to `path` atomically (readers and a crash see the old file or the new one).
pub fn write(path: &Path, cache: &Cache) -> Result<(), WriteError> {
    replace_file(path, &encode(cache))
}

/// Reads the container's fields in order; every failure is [`LkgRefused::Malformed`] at the
/// offset where the field starts.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], LkgRefused> {
        let malformed = LkgRefused::Malformed { at: self.at };
        let end = self.at.checked_add(len).ok_or(malformed.clone())?;
        let taken = self.bytes.get(self.at..end).ok_or(malformed)?;
        self.at = end;
        Ok(taken)
    }

    /// A u64 length or count, which must fit in what is left of the file (so that a huge
    /// count cannot make a loop or an allocation run long).
    fn len(&mut self) -> Result<usize, LkgRefused> {
        let at = self.at;
        let raw = self.take(8)?;
        let len = raw
            .try_into()
            .map(u64::from_le_bytes)
            .ok()
            .and_then(|len| usize::try_from(len).ok())
            .filter(|&len| len <= self.bytes.len() - self.at);
        len.ok_or(LkgRefused::Malformed { at })
    }

    fn text(&mut self) -> Result<&'a str, LkgRefused> {
        let at = self.at;
        let len = self.len()?;
        std::str::from_utf8(self.take(len)?).map_err(|_| LkgRefused::Malformed { at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        [
            ("steerdns.toml", &b"[server]\n"[..]),
            ("zones/example.com.zone", b"@ 60 IN SOA ns1 h 1 2 3 4 5\n"),
        ]
        .into_iter()
        .map(|(name, bytes)| (name.to_string(), fingerprint(bytes)))
        .collect()
    }

    fn small() -> Cache {
        Cache {
            inputs: inputs(),
            sections: vec![
                ("precompiled.plain.bytes".to_string(), b"abc".to_vec()),
                ("empty".to_string(), Vec::new()),
                ("slots".to_string(), (0u8..21).collect()),
            ],
        }
    }

    /// `bytes` with the checksum recomputed over all but its last 32 bytes.
    fn rechecksummed(mut bytes: Vec<u8>) -> Vec<u8> {
        let body = bytes.len() - CHECKSUM_LEN;
        let sum = checksum(&bytes[..body]);
        bytes[body..].copy_from_slice(&sum);
        bytes
    }

    #[test]
    fn lkg_round_trips() {
        let cache = small();
        let bytes = encode(&cache);
        assert_eq!(decode(&bytes, &inputs()), Ok(cache.clone()));
        assert_eq!(cache.section("precompiled.plain.bytes"), Some(&b"abc"[..]));
        assert_eq!(cache.section("missing"), None);
        let empty = Cache::default();
        assert_eq!(decode(&encode(&empty), &Inputs::new()), Ok(empty));
    }

    #[test]
    fn lkg_sections_start_aligned_and_the_checksum_is_xxh3_128_of_the_rest() {
        let cache = small();
        let bytes = encode(&cache);
        let (body, sum) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
        assert_eq!(&checksum(body)[..], sum);
        // As `xxh128sum` prints it: the 128-bit value, most significant byte first.
        assert_eq!(
            u128::from_be_bytes(sum.try_into().expect("16 bytes")),
            xxhash_rust::xxh3::xxh3_128(body)
        );
        let slots: Vec<u8> = (0u8..21).collect();
        let at = bytes
            .windows(slots.len())
            .position(|w| w == slots.as_slice())
            .expect("section present");
        assert_eq!(at % SECTION_ALIGN, 0);
    }

    #[test]
    fn lkg_refuses_every_truncation_and_every_flipped_byte() {
        let bytes = encode(&small());
        for len in 0..bytes.len() {
            assert!(
                decode(&bytes[..len], &inputs()).is_err(),
                "cut to {len} bytes"
            );
        }
        for at in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut corrupt = bytes.clone();
                corrupt[at] ^= flip;
                let refused = decode(&corrupt, &inputs());
                assert!(refused.is_err(), "byte {at} ^ {flip:#x}");
                if at >= MAGIC.len() + 4 {
                    assert_eq!(refused, Err(LkgRefused::Checksum), "byte {at}");
                }
            }
        }
    }

    #[test]
    fn lkg_refuses_another_format_binary_or_inputs() {
        let mut bytes = encode(&small());
        // The format before this one (SHA-256 checksum) is refused, as any other.
        bytes[MAGIC.len()] = 1;
        assert_eq!(decode(&bytes, &inputs()), Err(LkgRefused::Format));
        bytes[MAGIC.len()] = 3;
        assert_eq!(decode(&bytes, &inputs()), Err(LkgRefused::Format));
        assert_eq!(decode(b"hello", &inputs()), Err(LkgRefused::Format));

        let other = encode_as("steerdns 0.0.9", &small());
        assert_eq!(
            decode(&other, &inputs()),
            Err(LkgRefused::OtherBinary {
                found: "steerdns 0.0.9".to_string()
            })
        );

        let bytes = encode(&small());
        let mut changed = inputs();
        changed.insert("zones/example.com.zone".to_string(), fingerprint(b"edited"));
        assert_eq!(
            decode(&bytes, &changed),
            Err(LkgRefused::InputsChanged {
                input: "zones/example.com.zone".to_string()
            })
        );
        let mut added = inputs();
        added.insert("geoip/example.mmdb".to_string(), fingerprint(b""));
        assert_eq!(
            decode(&bytes, &added),
            Err(LkgRefused::InputsChanged {
                input: "geoip/example.mmdb".to_string()
            })
        );
        let mut removed = inputs();
        removed.remove("steerdns.toml");
        assert_eq!(
            decode(&bytes, &removed),
            Err(LkgRefused::InputsChanged {
                input: "steerdns.toml".to_string()
            })
        );
    }

    #[test]
    fn lkg_refuses_checksummed_nonsense_without_allocating_it() {
        // A section count of u64::MAX behind a valid checksum: refused at once.
        let mut bytes = encode(&Cache::default());
        let count_at = bytes.len() - CHECKSUM_LEN - 8;
        bytes[count_at..count_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let bytes = rechecksummed(bytes);
        assert_eq!(
            decode(&bytes, &Inputs::new()),
            Err(LkgRefused::Malformed { at: count_at })
        );
        // Trailing bytes after the last section.
        let mut bytes = encode(&small());
        bytes.splice(bytes.len() - CHECKSUM_LEN..bytes.len() - CHECKSUM_LEN, [0]);
        assert!(matches!(
            decode(&rechecksummed(bytes), &inputs()),
            Err(LkgRefused::Malformed { .. })
        ));
        // Two sections of one name.
        let twice = Cache {
            inputs: Inputs::new(),
            sections: vec![("a".to_string(), vec![1]), ("a".to_string(), vec![2])],
        };
        assert!(matches!(
            decode(&encode(&twice), &Inputs::new()),
            Err(LkgRefused::Malformed { .. })
        ));
    }

    #[test]
    fn lkg_write_replaces_the_file() {
        let dir = std::env::temp_dir().join(format!("steerdns-lkg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("lkg.cache");
        write(&path, &Cache::default()).expect("first write");
        write(&path, &small()).expect("second write");
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(decode(&bytes, &inputs()), Ok(small()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
