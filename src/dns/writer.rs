//! Writing a response into a caller-owned buffer, with name compression.
//!
//! No allocation: compression targets live in a small fixed table, and names are compared by
//! reading them back out of the buffer. Record data is pre-encoded at load time; this module only
//! places owner names (compressed) and copies the rest.

use arrayvec::ArrayVec;

use super::wire::{HEADER_LEN, MAX_NAME_LEN};

/// Ran out of room in the output buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow;

const MAX_POINTER_TARGET: usize = 0x3FFF;

pub struct Writer<'b> {
    buf: &'b mut [u8],
    pos: usize,
    /// Offsets of names (and each of their suffixes) already in the message.
    targets: ArrayVec<u16, 96>,
}

impl<'b> Writer<'b> {
    /// Starts a message: the 12-byte header is reserved and zeroed.
    pub fn new(buf: &'b mut [u8]) -> Result<Self, Overflow> {
        let header = buf.get_mut(..HEADER_LEN).ok_or(Overflow)?;
        header.fill(0);
        Ok(Writer {
            buf,
            pos: HEADER_LEN,
            targets: ArrayVec::new(),
        })
    }

    pub fn len(&self) -> usize {
        self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.pos]
    }

    pub fn set_u16(&mut self, at: usize, value: u16) {
        self.buf[at..at + 2].copy_from_slice(&value.to_be_bytes());
    }

    pub fn get_u16(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.buf[at], self.buf[at + 1]])
    }

    /// Forgets everything after `len` (used to drop records that did not fit).
    pub fn truncate(&mut self, len: usize) {
        self.pos = len.min(self.pos);
        let keep = self.pos;
        self.targets.retain(|t| (*t as usize) < keep);
    }

    pub fn put(&mut self, bytes: &[u8]) -> Result<(), Overflow> {
        let end = self.pos + bytes.len();
        self.buf
            .get_mut(self.pos..end)
            .ok_or(Overflow)?
            .copy_from_slice(bytes);
        self.pos = end;
        Ok(())
    }

    /// Reserves `len` bytes at the end and returns them to be filled in place.
    pub fn reserve(&mut self, len: usize) -> Result<&mut [u8], Overflow> {
        let start = self.pos;
        let end = start + len;
        if end > self.buf.len() {
            return Err(Overflow);
        }
        self.pos = end;
        Ok(&mut self.buf[start..end])
    }

    pub fn put_u16(&mut self, v: u16) -> Result<(), Overflow> {
        self.put(&v.to_be_bytes())
    }

    pub fn put_u32(&mut self, v: u32) -> Result<(), Overflow> {
        self.put(&v.to_be_bytes())
    }

    /// Writes the question exactly as the client sent it (letter case preserved) and registers
    /// its name for compression.
    pub fn put_question(&mut self, question: &[u8]) -> Result<(), Overflow> {
        let start = self.pos;
        self.put(question)?;
        self.remember_labels(start, &question[..question.len().saturating_sub(4)]);
        Ok(())
    }

    /// Writes an uncompressed wire name, pointing at an earlier copy of its longest suffix.
    pub fn put_name(&mut self, name: &[u8]) -> Result<(), Overflow> {
        let mut offset = 0;
        while let Some(&len) = name.get(offset) {
            if len == 0 {
                return self.put(&[0]);
            }
            let suffix = &name[offset..];
            if let Some(target) = self.find(suffix) {
                return self.put_u16(0xC000 | target);
            }
            let here = self.pos;
            self.put(&name[offset..offset + 1 + len as usize])?;
            if here <= MAX_POINTER_TARGET && !self.targets.is_full() {
                self.targets.push(here as u16);
            }
            offset += 1 + len as usize;
        }
        self.put(&[0])
    }

    /// A pointer to the question name (offset 12), for answers owned by the name asked.
    pub fn put_question_pointer(&mut self) -> Result<(), Overflow> {
        self.put_u16(0xC000 | HEADER_LEN as u16)
    }

    fn remember_labels(&mut self, start: usize, name: &[u8]) {
        let mut offset = 0;
        while let Some(&len) = name.get(offset) {
            if len == 0 || len > 63 {
                break;
            }
            let at = start + offset;
            if at <= MAX_POINTER_TARGET && !self.targets.is_full() {
                self.targets.push(at as u16);
            }
            offset += 1 + len as usize;
        }
    }

    fn find(&self, suffix: &[u8]) -> Option<u16> {
        self.targets
            .iter()
            .copied()
            .find(|&t| name_at_equals(&self.buf[..self.pos], t as usize, suffix))
    }
}

/// Does the (possibly compressed) name at `at` in `msg` equal `wire`, ignoring ASCII case?
fn name_at_equals(msg: &[u8], mut at: usize, wire: &[u8]) -> bool {
    let mut offset = 0;
    for _ in 0..MAX_NAME_LEN {
        let Some(&len) = msg.get(at) else {
            return false;
        };
        if len >= 0xC0 {
            let Some(&low) = msg.get(at + 1) else {
                return false;
            };
            at = (((len & 0x3F) as usize) << 8) | low as usize;
            continue;
        }
        if wire.get(offset) != Some(&len) {
            return false;
        }
        if len == 0 {
            return true;
        }
        let end = offset + 1 + len as usize;
        let (Some(ours), Some(theirs)) = (
            msg.get(at + 1..at + 1 + len as usize),
            wire.get(offset + 1..end),
        ) else {
            return false;
        };
        if !ours.eq_ignore_ascii_case(theirs) {
            return false;
        }
        offset = end;
        at += 1 + len as usize;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compresses_against_question_and_earlier_names() {
        let mut buf = [0u8; 512];
        let mut w = Writer::new(&mut buf).unwrap();
        w.put_question(b"\x03WWW\x07example\x03com\x00\x00\x01\x00\x01")
            .unwrap();
        let before = w.len();
        w.put_name(b"\x04mail\x07example\x03com\x00").unwrap();
        // "mail" literally, then a pointer to "example.com" inside the question (offset 16).
        assert_eq!(&w.bytes()[before..], b"\x04mail\xc0\x10");
        let before = w.len();
        w.put_name(b"\x04MAIL\x07example\x03com\x00").unwrap();
        assert_eq!(&w.bytes()[before..], &[0xC0, before as u8 - 7][..]);
        let before = w.len();
        w.put_name(b"\x00").unwrap();
        assert_eq!(&w.bytes()[before..], b"\x00");
    }

    #[test]
    fn overflow_is_reported_not_panicked() {
        let mut buf = [0u8; 14];
        let mut w = Writer::new(&mut buf).unwrap();
        assert_eq!(w.put(b"abc"), Err(Overflow));
        assert!(Writer::new(&mut [0u8; 4]).is_err());
    }
}
