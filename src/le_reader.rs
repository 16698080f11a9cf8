//! A bounds-checked reader of little-endian fields over a byte slice, for the last-known-good
//! caches' sections: every read names the offset where it failed ([`Malformed`]) instead of
//! panicking, whatever the bytes. Imports nothing; the layouts belong to the callers.

/// A read past the end (or a field the caller found invalid), at this byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed at byte {at}")]
pub struct Malformed {
    pub at: usize,
}

/// Reads fields in order from `bytes`, starting at offset 0.
pub struct LeReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> LeReader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        LeReader { bytes, at: 0 }
    }

    /// The offset of the next field.
    pub fn at(&self) -> usize {
        self.at
    }

    /// [`Malformed`] at the next field.
    pub fn malformed(&self) -> Malformed {
        Malformed { at: self.at }
    }

    /// Bytes not read yet (a bound for counts: each item takes at least a byte).
    pub fn left(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// `Ok` when every byte was read.
    pub fn finish(&self) -> Result<(), Malformed> {
        if self.left() == 0 {
            Ok(())
        } else {
            Err(self.malformed())
        }
    }

    pub fn take(&mut self, len: usize) -> Result<&'a [u8], Malformed> {
        let end = self.at.checked_add(len).ok_or(self.malformed())?;
        let taken = self.bytes.get(self.at..end).ok_or(self.malformed())?;
        self.at = end;
        Ok(taken)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let at = self.at;
        self.take(N)?.try_into().map_err(|_| Malformed { at })
    }

    pub fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, Malformed> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn u32(&mut self) -> Result<u32, Malformed> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, Malformed> {
        self.array().map(u64::from_le_bytes)
    }
}
