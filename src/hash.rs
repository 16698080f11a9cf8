//! FNV-1a, 64 bit: the one stable hash for values that are written down and compared later
//! (control-history text hashes, load-feed and bundle hashes, the served control text's hash)
//! and for cheap spreading (probe phases, query ids, who probes what in a fleet).
//!
//! Stable across builds, platforms and versions, which std's hasher (and so
//! [`crate::files::Digest`]) is not guaranteed to be. Not for keyed or adversarial uses: the
//! per-subnet choices use [`crate::policy`]'s fixed-key SipHash.

/// Where every FNV-1a 64 hash starts (the algorithm's offset basis).
pub const FNV1A64_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// The algorithm's prime, multiplied in after each byte.
const FNV1A64_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a, 64 bit, of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_more(FNV1A64_OFFSET_BASIS, bytes)
}

/// Continues an FNV-1a hash over more bytes (a hash of many pieces, read one at a time).
pub fn fnv1a64_more(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(FNV1A64_PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_test_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn continuing_equals_hashing_the_whole() {
        assert_eq!(fnv1a64_more(fnv1a64(b"foo"), b"bar"), fnv1a64(b"foobar"));
    }
}
