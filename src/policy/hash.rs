//! Stable hashing for per-subnet choices: SipHash-2-4 with a fixed key (identical on every run,
//! platform and node, so all nameservers of a fleet make the same choice for a subnet), and the
//! integer-only weighted rendezvous score built on it.

use std::net::IpAddr;

/// Fixed SipHash key. Changing it reshuffles every sticky choice, so never change it.
const KEY: (u64, u64) = (0x7374_6565_7264_6e73, 0x7375_626e_6574_2131);

/// Distinct inputs for distinct uses of a subnet hash, so that e.g. shedding and weighted
/// choices are independent of each other.
#[derive(Clone, Copy)]
#[repr(u8)]
pub(crate) enum Purpose {
    /// Whether a subnet is among a region's shed fraction.
    ShedBucket = 1,
    /// Which shed destination a shed subnet goes to.
    ShedDestination = 2,
    /// Weighted profile endpoint choice.
    Weighted = 3,
}

#[derive(Clone)]
struct Sip {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
}

impl Sip {
    fn new(k0: u64, k1: u64) -> Self {
        Self {
            v0: k0 ^ 0x736f_6d65_7073_6575,
            v1: k1 ^ 0x646f_7261_6e64_6f6d,
            v2: k0 ^ 0x6c79_6765_6e65_7261,
            v3: k1 ^ 0x7465_6462_7974_6573,
        }
    }

    fn round(&mut self) {
        self.v0 = self.v0.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(13) ^ self.v0;
        self.v0 = self.v0.rotate_left(32);
        self.v2 = self.v2.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(16) ^ self.v2;
        self.v0 = self.v0.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(21) ^ self.v0;
        self.v2 = self.v2.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(17) ^ self.v2;
        self.v2 = self.v2.rotate_left(32);
    }

    fn compress(&mut self, m: u64) {
        self.v3 ^= m;
        self.round();
        self.round();
        self.v0 ^= m;
    }

    fn finish(mut self) -> u64 {
        self.v2 ^= 0xff;
        for _ in 0..4 {
            self.round();
        }
        self.v0 ^ self.v1 ^ self.v2 ^ self.v3
    }
}

/// SipHash-2-4 of `data` under the key `(k0, k1)` (the reference algorithm, little-endian).
pub(crate) fn siphash24(k0: u64, k1: u64, data: &[u8]) -> u64 {
    let mut state = Sip::new(k0, k1);
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        state.compress(u64::from_le_bytes(word));
    }
    let mut last = [0u8; 8];
    let tail = chunks.remainder();
    last[..tail.len()].copy_from_slice(tail);
    // The length byte only keeps the low 8 bits, as the reference does.
    last[7] = (data.len() & 0xff) as u8;
    state.compress(u64::from_le_bytes(last));
    state.finish()
}

/// Hash of a name, used to give each endpoint a stable identity in rendezvous hashing (so that
/// adding, removing or reordering endpoints does not move other endpoints' subnets).
pub(crate) fn name_salt(profile: &str, endpoint: &str) -> u64 {
    let mut state = Sip::new(KEY.0, KEY.1);
    // Hash both names with a separator through the byte-oriented function, allocation-free.
    let a = siphash24(KEY.0, KEY.1, profile.as_bytes());
    let b = siphash24(KEY.1, KEY.0, endpoint.as_bytes());
    state.compress(a);
    state.compress(b);
    state.finish()
}

/// Stable hash of the client's subnet: `addr` masked to `prefix_v4` / `prefix_v6` bits, mixed
/// with the purpose and a salt.
pub(crate) fn subnet_hash(
    addr: IpAddr,
    prefix_v4: u8,
    prefix_v6: u8,
    purpose: Purpose,
    salt: u64,
) -> u64 {
    SubnetHasher::new(addr, prefix_v4, prefix_v6, purpose).hash(salt)
}

/// [`subnet_hash`] for one subnet and purpose and many salts (one per endpoint or shed
/// destination): the subnet is absorbed once, each salt costs a third of a whole hash.
#[derive(Clone)]
pub(crate) struct SubnetHasher {
    state: Sip,
}

impl SubnetHasher {
    pub(crate) fn new(addr: IpAddr, prefix_v4: u8, prefix_v6: u8, purpose: Purpose) -> Self {
        let (bits, family, prefix) = match addr {
            IpAddr::V4(a) => (u128::from(u32::from(a)) << 96, 4u64, prefix_v4.min(32)),
            IpAddr::V6(a) => (u128::from(a), 6u64, prefix_v6.min(128)),
        };
        let mask = if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - u32::from(prefix))
        };
        let masked = bits & mask;
        let mut state = Sip::new(KEY.0, KEY.1);
        state.compress((masked >> 64) as u64);
        state.compress(masked as u64);
        state.compress(family | (u64::from(prefix) << 8) | ((purpose as u64) << 16));
        SubnetHasher { state }
    }

    /// The subnet's hash under `salt`; equal to [`subnet_hash`] with the same inputs.
    pub(crate) fn hash(&self, salt: u64) -> u64 {
        let mut state = self.state.clone();
        state.compress(salt);
        state.finish()
    }
}

/// Maps a hash to a bucket in `0..1000`, uniformly (multiply-high rather than modulo).
pub(crate) fn permille_bucket(hash: u64) -> u16 {
    ((u128::from(hash) * 1000) >> 64) as u16
}

/// Fractional bits of the fixed-point logarithm.
const LOG_FRAC_BITS: u32 = 32;

/// `-log2(h / 2^64)` in fixed point with [`LOG_FRAC_BITS`] fractional bits, integer-only so the
/// result is bit-identical on every platform. `h = 0` is treated as 1.
fn neg_log2_unit(h: u64) -> u64 {
    let h = h.max(1);
    let msb = 63 - h.leading_zeros();
    // Normalise to [1, 2) in Q1.63 and extract fractional bits by repeated squaring. `y` stays
    // below 2^64 (a square in [1, 4) is halved when it reaches 2), so one 64x64->128 multiply
    // per bit does; the carry out of bit 64 is the next fractional bit.
    let mut y: u64 = h << (63 - msb);
    let mut frac: u64 = 0;
    for _ in 0..LOG_FRAC_BITS {
        let square = (u128::from(y) * u128::from(y)) >> 63;
        let carry = (square >> 64) as u32;
        y = (square >> carry) as u64;
        frac = (frac << 1) | u64::from(carry);
    }
    let log2_h = (u64::from(msb) << LOG_FRAC_BITS) | frac;
    (64u64 << LOG_FRAC_BITS) - log2_h
}

/// A weighted rendezvous score: the endpoint with the smallest `score` wins, and it wins with
/// probability weight / total weight. Compare with [`RendezvousScore::beats`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct RendezvousScore {
    neg_log: u64,
    weight: u32,
}

impl RendezvousScore {
    /// Score of an endpoint with `weight > 0` for a hash drawn uniformly.
    pub(crate) fn new(hash: u64, weight: u32) -> Self {
        Self {
            neg_log: neg_log2_unit(hash),
            weight,
        }
    }

    /// `neg_log / weight < other.neg_log / other.weight`, compared exactly by cross-multiplying.
    pub(crate) fn beats(&self, other: &Self) -> bool {
        u128::from(self.neg_log) * u128::from(other.weight)
            < u128::from(other.neg_log) * u128::from(self.weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_matches_reference_vector() {
        // From the SipHash paper (Aumasson & Bernstein), appendix A: key 00..0f, message 00..0e.
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let msg: Vec<u8> = (0u8..15).collect();
        assert_eq!(siphash24(k0, k1, &msg), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn neg_log2_is_accurate() {
        for (h, expected) in [
            (1u64 << 63, 1.0f64),
            (1u64 << 62, 2.0),
            (3u64 << 62, -(0.75f64).log2()),
            (
                12_345_678_901u64,
                -(12_345_678_901f64 / 2f64.powi(64)).log2(),
            ),
        ] {
            let got = neg_log2_unit(h) as f64 / 2f64.powi(LOG_FRAC_BITS as i32);
            assert!((got - expected).abs() < 1e-6, "h={h}: {got} vs {expected}");
        }
    }

    /// The first implementation (u128 throughout), kept to prove the faster one bit-identical:
    /// every node of a fleet, old or new, must score a subnet the same.
    fn neg_log2_unit_reference(h: u64) -> u64 {
        let h = h.max(1);
        let msb = 63 - h.leading_zeros();
        let mut y: u128 = u128::from(h) << (63 - msb);
        let mut frac: u64 = 0;
        for _ in 0..LOG_FRAC_BITS {
            y = (y * y) >> 63;
            frac <<= 1;
            if y >= 1u128 << 64 {
                y >>= 1;
                frac |= 1;
            }
        }
        let log2_h = (u64::from(msb) << LOG_FRAC_BITS) | frac;
        (64u64 << LOG_FRAC_BITS) - log2_h
    }

    #[test]
    fn neg_log2_is_bit_identical_to_the_reference() {
        let mut h = 0x9e37_79b9_7f4a_7c15u64;
        let edges = [
            0,
            1,
            2,
            3,
            u64::MAX,
            u64::MAX - 1,
            1 << 63,
            (1 << 63) - 1,
            1 << 32,
        ];
        for x in edges.into_iter().chain((0..200_000).map(|_| {
            h = siphash24(1, 2, &h.to_le_bytes());
            // Spread over every magnitude, not just the top bits.
            h >> (h % 64)
        })) {
            assert_eq!(neg_log2_unit(x), neg_log2_unit_reference(x), "h = {x:#x}");
        }
    }

    #[test]
    fn subnet_hasher_equals_subnet_hash() {
        for addr in ["10.1.2.3", "2001:db8::1", "::ffff:1.2.3.4", "0.0.0.0"] {
            let addr: IpAddr = addr.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
            for purpose in [
                Purpose::ShedBucket,
                Purpose::ShedDestination,
                Purpose::Weighted,
            ] {
                let hasher = SubnetHasher::new(addr, 24, 56, purpose);
                for salt in [0, 1, 7, u64::MAX, 1 << 32] {
                    assert_eq!(hasher.hash(salt), subnet_hash(addr, 24, 56, purpose, salt));
                }
            }
        }
    }

    #[test]
    fn subnet_hash_ignores_host_bits_only() {
        let a: IpAddr = "10.1.2.3".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let b: IpAddr = "10.1.2.200".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let c: IpAddr = "10.1.3.3".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let h = |x| subnet_hash(x, 24, 56, Purpose::Weighted, 7);
        assert_eq!(h(a), h(b));
        assert_ne!(h(a), h(c));
        assert_ne!(
            subnet_hash(a, 24, 56, Purpose::Weighted, 7),
            subnet_hash(a, 24, 56, Purpose::ShedBucket, 7)
        );
    }
}
