//! Reading operator files safely: only regular files, never more than a stated size. A named
//! pipe, a device (`/dev/zero`), a directory or a huge file named by a config, zone, control or
//! load file must produce a clear error — not block a reload forever or eat the memory.
//!
//! Owns that, and the other file I/O helpers: replacing a file atomically ([`replace_file`]) and
//! flushing to disk in the background (`flush_in_background`). Every file steerdns reads from
//! an operator goes through here.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

mod durable;
mod replace;

pub(crate) use durable::flush_in_background;
pub(crate) use replace::{parent_dir, replace_file_unflushed, resolve_symlink};
pub use replace::{replace_file, replace_private_file, WriteError};

/// Largest config, control or load-feed file (they are small by nature).
pub const SMALL_FILE_LIMIT: u64 = 16 << 20;

/// Reads a regular file of at most `limit` bytes.
pub fn read_limited(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (we refuse it right after).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a regular file ({})", kind_of(&metadata)),
        ));
    }
    if metadata.len() > limit {
        return Err(too_large(metadata.len(), limit));
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    // A file that grows while we read it is cut at the limit and refused.
    File::take(file, limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64, limit));
    }
    Ok(bytes)
}

/// What a file held when it was read, to tell later whether it still holds the same bytes.
/// (Also compared across processes of the same binary: the taster and the server.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Digest {
    len: u64,
    hash: u64,
}

impl Digest {
    /// As stored in a last-known-good cache (length, then hash; little-endian).
    pub fn to_le_bytes(self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.len.to_le_bytes());
        out[8..].copy_from_slice(&self.hash.to_le_bytes());
        out
    }

    /// The inverse of [`Self::to_le_bytes`].
    pub fn from_le_bytes(bytes: [u8; 16]) -> Digest {
        let [len, hash] = [&bytes[..8], &bytes[8..]].map(|half| {
            let mut word = [0; 8];
            word.copy_from_slice(half);
            u64::from_le_bytes(word)
        });
        Digest { len, hash }
    }
}

/// The [`Digest`] of `bytes` (length and SipHash-1-3; compared only within one process).
pub fn digest(bytes: &[u8]) -> Digest {
    use std::hash::Hasher;
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(bytes);
    Digest {
        len: bytes.len() as u64,
        hash: hasher.finish(),
    }
}

/// Like [`read_limited`], as UTF-8 text.
pub fn read_text_limited(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_limited(path, limit)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8 text: {e}")))
}

fn too_large(len: u64, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{len} bytes is larger than the limit of {limit}"),
    )
}

fn kind_of(metadata: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = metadata.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a named pipe"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_pipes_devices_directories_and_big_files() {
        let dir = std::env::temp_dir().join(format!("steerdns-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_limited(&fifo, 10).unwrap_err().to_string();
        assert!(err.contains("named pipe"), "{err}");
        let err = read_limited(Path::new("/dev/zero"), 10)
            .unwrap_err()
            .to_string();
        assert!(err.contains("device"), "{err}");
        let err = read_limited(&dir, 10).unwrap_err().to_string();
        assert!(err.contains("directory"), "{err}");
        let big = dir.join("big");
        std::fs::write(&big, vec![b'x'; 11]).unwrap();
        let err = read_limited(&big, 10).unwrap_err().to_string();
        assert!(err.contains("larger than the limit"), "{err}");
        assert_eq!(read_limited(&big, 11).unwrap().len(), 11);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
