//! A cache file mapped read-only into memory, and sections of it used in place: the restart
//! from the last-known-good cache reads nothing up front, the kernel brings in the pages the
//! first answers touch (and the checksum), and those pages are the page cache's, shared with
//! it (they count once). Owns the mapping's lifetime, nothing about the file's contents.
//!
//! `libc::mmap` directly rather than a crate for it: `libc` is already a dependency, one
//! read-only `MAP_PRIVATE` mapping of a whole file is all that is needed, and the one unsafe
//! block stays next to the one invariant it relies on (below).
//!
//! The invariant: a mapped file is never changed in place while mapped. steerdns replaces the
//! cache by writing a new file and renaming it over the old one (`crate::files::replace_file`),
//! which leaves the mapped inode as it was; a file cut short *by hand* while a server maps it
//! would make the kernel raise SIGBUS on the next read of a page past the cut, as it does for
//! every program that maps files (NSD, LMDB, ...).

use std::fs::File;
use std::ops::{Deref, Range};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

/// A whole file's bytes: mapped read-only, or (an empty file, tests) owned.
pub struct Map {
    backing: Backing,
}

enum Backing {
    Mapped { ptr: *const u8, len: usize },
    Owned(Vec<u8>),
}

// SAFETY: the mapping is read-only memory owned by this value until it is dropped; sharing
// `&[u8]` views of it between threads is as safe as sharing a `Vec<u8>`'s.
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    /// Maps the file at `path` (its whole length) read-only.
    pub fn open(path: &Path) -> std::io::Result<Map> {
        let file = File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::FileTooLarge))?;
        if len == 0 {
            // mmap refuses a length of 0.
            return Ok(Map::owned(Vec::new()));
        }
        // SAFETY: a fresh read-only private mapping of `len` bytes of an open file descriptor;
        // the kernel picks the address. The fd may be closed afterwards (the mapping keeps the
        // file). See the module documentation for the file never changing in place.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map {
            backing: Backing::Mapped {
                ptr: ptr.cast::<u8>().cast_const(),
                len,
            },
        })
    }

    /// Bytes held in memory, as if mapped (tests, and files too small to map).
    pub fn owned(bytes: Vec<u8>) -> Map {
        Map {
            backing: Backing::Owned(bytes),
        }
    }

    /// Is this a mapping of a file (not bytes in memory)?
    pub fn is_mapped(&self) -> bool {
        matches!(self.backing, Backing::Mapped { .. })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            // SAFETY: `ptr` is the start of a live read-only mapping of `len` bytes (see
            // `open`), unmapped only when `self` is dropped, which outlives the borrow.
            Backing::Mapped { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            Backing::Owned(bytes) => bytes,
        }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        if let Backing::Mapped { ptr, len } = self.backing {
            // SAFETY: the mapping made in `open`, unmapped once; no borrow of it outlives
            // `self`.
            unsafe {
                libc::munmap(ptr.cast_mut().cast::<libc::c_void>(), len);
            }
        }
    }
}

/// Bytes used in place: owned (built by this process), or a range of a mapped file.
#[derive(Clone)]
pub enum Bytes {
    Owned(Vec<u8>),
    Mapped { map: Arc<Map>, range: Range<usize> },
}

impl Default for Bytes {
    fn default() -> Bytes {
        Bytes::Owned(Vec::new())
    }
}

impl Bytes {
    /// The bytes (a range outside the map reads as empty: never a panic).
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Owned(bytes) => bytes,
            Bytes::Mapped { map, range } => map.bytes().get(range.clone()).unwrap_or_default(),
        }
    }

    /// The bytes as a vector (mapped ones copied out).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Bytes::Owned(bytes) => bytes,
            Bytes::Mapped { .. } => self.as_slice().to_vec(),
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(bytes: Vec<u8>) -> Bytes {
        Bytes::Owned(bytes)
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bytes").field("len", &self.len()).finish()
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Bytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Bytes {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapped_file_reads_as_its_bytes_and_ranges_stay_inside() {
        let dir = std::env::temp_dir().join(format!("steerdns-map-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("file");
        let content: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).expect("write");
        let map = Arc::new(Map::open(&path).expect("maps"));
        assert!(map.is_mapped());
        assert_eq!(map.bytes(), &content[..]);
        let part = Bytes::Mapped {
            map: map.clone(),
            range: 8..16,
        };
        assert_eq!(&*part, &content[8..16]);
        let outside = Bytes::Mapped {
            map,
            range: 9_990..20_000,
        };
        assert!(outside.is_empty());
        std::fs::write(&path, b"").expect("empty");
        assert_eq!(Map::open(&path).expect("empty maps").bytes(), b"");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
