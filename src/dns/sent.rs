//! What a response says, as its writer knows it ([`Sent`]): the one summary that the rate
//! limiter, the shield's demand counting, the counters and the query log read, so that none of
//! them reads the response's bytes back.

use super::wire::{flag, rcode};

/// A response written into a buffer: its length and what it says. Built by the writer that
/// set the bytes (and changed with them by [`Sent::slipped`] and friends), never parsed back
/// out of them, except for a precompiled response ([`Sent::of_precompiled`]), whose header
/// the same writers set when the answers were built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// Bytes written.
    pub len: usize,
    /// The full rcode (extended ones too: BADVERS, BADCOOKIE).
    pub rcode: u16,
    /// TC set: the client asks again over TCP.
    pub truncated: bool,
    /// Records in the answer section.
    pub answers: bool,
    /// A referral: not authoritative, with records in the authority section.
    pub referral: bool,
}

impl Sent {
    /// A response with no records (an error, an empty answer, a slip).
    #[inline]
    pub fn empty(len: usize, rcode: u16) -> Sent {
        Sent {
            len,
            rcode,
            truncated: false,
            answers: false,
            referral: false,
        }
    }

    /// A precompiled response of `len` bytes, from its header (`response`'s first 12 bytes,
    /// written at load by the same writers); its rcode is never an extended one.
    #[inline]
    pub fn of_precompiled(response: &[u8], len: usize) -> Sent {
        // One bounds check for the header, not one per field.
        let Some(header) = response.get(..12) else {
            return Sent::empty(len, 0);
        };
        let count = |at: usize| u16::from_be_bytes([header[at], header[at + 1]]);
        let flags = count(2);
        Sent {
            len,
            rcode: flags & 0x000F,
            truncated: flags & flag::TC != 0,
            answers: count(6) > 0,
            referral: flags & flag::AA == 0 && count(8) > 0,
        }
    }

    /// The same response cut to its header and question (`len` bytes) with TC set: a slip.
    #[inline]
    pub fn slipped(self, len: usize) -> Sent {
        Sent {
            len,
            truncated: true,
            answers: false,
            referral: false,
            ..self
        }
    }

    /// A BADCOOKIE slip of `len` bytes (`truncated` when there was no room for OPT).
    #[inline]
    pub fn bad_cookie(len: usize, truncated: bool) -> Sent {
        Sent {
            truncated,
            ..Sent::empty(len, rcode::BADCOOKIE)
        }
    }
}
