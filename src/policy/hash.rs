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

/// The masked prefix bits of `addr` (left-aligned, IPv4 in the top 32 bits), its family
/// and the prefix length.
#[inline]
fn masked_prefix(addr: IpAddr, prefix_v4: u8, prefix_v6: u8) -> (u128, u64, u8) {
    let (bits, family, prefix) = match addr {
        IpAddr::V4(a) => (u128::from(u32::from(a)) << 96, 4u64, prefix_v4.min(32)),
        IpAddr::V6(a) => (u128::from(a), 6u64, prefix_v6.min(128)),
    };
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix))
    };
    (bits & mask, family, prefix)
}

/// A fast, unkeyed mix of `addr`'s prefix (MurmurHash3's 64-bit finaliser over both halves
/// and the family): for spreading prefixes over a local table, never for a sticky choice.
#[inline]
pub(crate) fn prefix_mix(addr: IpAddr, prefix_v4: u8, prefix_v6: u8) -> u64 {
    let (masked, family, _) = masked_prefix(addr, prefix_v4, prefix_v6);
    let fmix = |mut k: u64| {
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        k ^ (k >> 33)
    };
    fmix(fmix((masked >> 64) as u64 ^ family) ^ masked as u64)
}

/// [`subnet_hash`] for one subnet and purpose and many salts (one per endpoint or shed
/// destination): the subnet is absorbed once, each salt costs a third of a whole hash.
#[derive(Clone)]
pub(crate) struct SubnetHasher {
    state: Sip,
}

impl SubnetHasher {
    pub(crate) fn new(addr: IpAddr, prefix_v4: u8, prefix_v6: u8, purpose: Purpose) -> Self {
        let (masked, family, prefix) = masked_prefix(addr, prefix_v4, prefix_v6);
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
#[cfg(test)]
fn neg_log2_unit(h: u64) -> u64 {
    let mut log = NegLog2::new(h);
    while log.refine() {}
    log.bounds().1
}

/// `-log2(h / 2^64)` computed a fractional bit at a time (the bits come out most significant
/// first and never change), so that a comparison can stop as soon as it is decided.
#[derive(Clone, Copy, Debug)]
struct NegLog2 {
    /// The normalised hash raised to 2^bits, in Q1.63 (always below 2^64).
    y: u64,
    msb: u32,
    /// The fractional bits of log2(h) found so far.
    frac: u64,
    bits: u32,
}

impl NegLog2 {
    fn new(h: u64) -> Self {
        let h = h.max(1);
        let msb = 63 - h.leading_zeros();
        NegLog2 {
            y: h << (63 - msb),
            msb,
            frac: 0,
            bits: 0,
        }
    }

    /// Finds the next fractional bit by squaring; false once all are known. A square in [1, 4)
    /// is halved when it reaches 2, so `y` stays below 2^64 and one 64x64->128 multiply does;
    /// the carry out of bit 64 is the bit.
    fn refine(&mut self) -> bool {
        if self.bits == LOG_FRAC_BITS {
            return false;
        }
        let square = (u128::from(self.y) * u128::from(self.y)) >> 63;
        let carry = (square >> 64) as u32;
        self.y = (square >> carry) as u64;
        self.frac = (self.frac << 1) | u64::from(carry);
        self.bits += 1;
        true
    }

    /// The smallest and largest value the full result can have, given the bits found so far
    /// (equal once all are known).
    fn bounds(&self) -> (u64, u64) {
        let unknown = LOG_FRAC_BITS - self.bits;
        let log2_low = (u64::from(self.msb) << LOG_FRAC_BITS) | (self.frac << unknown);
        let log2_high = log2_low | ((1u64 << unknown) - 1);
        let full = 64u64 << LOG_FRAC_BITS;
        (full - log2_high, full - log2_low)
    }
}

/// A weighted rendezvous score: the endpoint with the smallest `-log2(h) / weight` wins, and
/// it wins with probability weight / total weight. Compare with [`RendezvousScore::beats`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct RendezvousScore {
    neg_log: NegLog2,
    weight: u32,
}

impl RendezvousScore {
    /// Score of an endpoint with `weight > 0` for a hash drawn uniformly.
    pub(crate) fn new(hash: u64, weight: u32) -> Self {
        Self {
            neg_log: NegLog2::new(hash),
            weight,
        }
    }

    /// `neg_log / weight < other.neg_log / other.weight` for the full 32-bit-fraction values,
    /// compared exactly by cross-multiplying — but refining each logarithm only until the
    /// bounds decide (a few bits, mostly, instead of 32 squarings per endpoint).
    pub(crate) fn beats(&mut self, other: &mut Self) -> bool {
        let (w_self, w_other) = (u128::from(self.weight), u128::from(other.weight));
        loop {
            let (self_low, self_high) = self.neg_log.bounds();
            let (other_low, other_high) = other.neg_log.bounds();
            if u128::from(self_high) * w_other < u128::from(other_low) * w_self {
                return true;
            }
            if u128::from(self_low) * w_other >= u128::from(other_high) * w_self {
                return false;
            }
            // Undecided: learn a bit of whichever knows fewer (both known decides above).
            let (fewer, more) = if self.neg_log.bits <= other.neg_log.bits {
                (&mut self.neg_log, &mut other.neg_log)
            } else {
                (&mut other.neg_log, &mut self.neg_log)
            };
            if !(fewer.refine() || more.refine()) {
                return false;
            }
        }
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
    fn prefix_mix_keys_a_prefix_and_spreads_prefixes() {
        let v4 = |a, b, c, d| IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d));
        // The same /24 is one key; the host bits do not count.
        assert_eq!(
            prefix_mix(v4(10, 1, 2, 3), 24, 56),
            prefix_mix(v4(10, 1, 2, 200), 24, 56)
        );
        // 65,536 neighbouring /24s: no two share a key, and their low bits (the bit map's
        // index) fill a 2^16 table about as uniform hashing would (~63% distinct).
        let keys: std::collections::HashSet<u64> = (0..=u16::MAX)
            .map(|i| prefix_mix(v4(10, (i >> 8) as u8, i as u8, 1), 24, 56))
            .collect();
        assert_eq!(keys.len(), 65_536);
        let slots: std::collections::HashSet<u64> = keys.iter().map(|k| k & 0xffff).collect();
        assert!((39_000..44_000).contains(&slots.len()), "{}", slots.len());
        // An IPv4 prefix and the IPv6 prefix with the same leading bits differ.
        let v6: IpAddr = "0a01:0200::1"
            .parse()
            .unwrap_or(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST));
        assert_ne!(prefix_mix(v4(10, 1, 2, 0), 24, 24), prefix_mix(v6, 24, 24));
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

    /// The full-precision comparison the lazy one must always agree with.
    fn beats_reference(a: (u64, u32), b: (u64, u32)) -> bool {
        u128::from(neg_log2_unit_reference(a.0)) * u128::from(b.1)
            < u128::from(neg_log2_unit_reference(b.0)) * u128::from(a.1)
    }

    #[test]
    fn lazy_comparison_equals_the_full_one() {
        let mut h = 0x0123_4567_89ab_cdefu64;
        let mut next = || {
            h = siphash24(3, 4, &h.to_le_bytes());
            h
        };
        let weights = [1u32, 2, 9, 10, 90, 100, 1000, u32::MAX];
        for i in 0..100_000u32 {
            let (x, y) = (next(), next());
            // Some near-ties: equal hashes, hashes one apart, equal logs with other weights.
            let y = match i % 10 {
                0 => x,
                1 => x.wrapping_add(1),
                2 => x >> 1,
                _ => y,
            };
            let (wa, wb) = (weights[i as usize % 8], weights[(i as usize / 8) % 8]);
            let (mut a, mut b) = (RendezvousScore::new(x, wa), RendezvousScore::new(y, wb));
            assert_eq!(
                a.beats(&mut b),
                beats_reference((x, wa), (y, wb)),
                "{x:#x}/{wa} vs {y:#x}/{wb}"
            );
        }
        for x in [0, 1, u64::MAX] {
            for y in [0, 1, u64::MAX] {
                let (mut a, mut b) = (RendezvousScore::new(x, 3), RendezvousScore::new(y, 3));
                assert_eq!(a.beats(&mut b), beats_reference((x, 3), (y, 3)));
            }
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
