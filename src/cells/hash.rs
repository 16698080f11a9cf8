//! SipHash-2-4 with a fixed key: the stable, keyed hash that ranks cells for a tenant
//! (identical on every run, build, platform and node, so every nameserver of a fleet gives a
//! tenant the same cells). Its own copy, not `policy`'s: `cells` sits below `policy`.

/// Fixed key. Changing it reshuffles every tenant's cells, so never change it.
pub(super) const KEY: (u64, u64) = (0x7374_6565_7263_656c, 0x6c73_2d73_6861_7264);

/// SipHash-2-4 of `bytes` under `key`.
pub(super) fn siphash24(key: (u64, u64), bytes: &[u8]) -> u64 {
    let mut v0 = key.0 ^ 0x736f_6d65_7073_6575;
    let mut v1 = key.1 ^ 0x646f_7261_6e64_6f6d;
    let mut v2 = key.0 ^ 0x6c79_6765_6e65_7261;
    let mut v3 = key.1 ^ 0x7465_6462_7974_6573;
    let round = |v0: &mut u64, v1: &mut u64, v2: &mut u64, v3: &mut u64| {
        *v0 = v0.wrapping_add(*v1);
        *v1 = v1.rotate_left(13) ^ *v0;
        *v0 = v0.rotate_left(32);
        *v2 = v2.wrapping_add(*v3);
        *v3 = v3.rotate_left(16) ^ *v2;
        *v0 = v0.wrapping_add(*v3);
        *v3 = v3.rotate_left(21) ^ *v0;
        *v2 = v2.wrapping_add(*v1);
        *v1 = v1.rotate_left(17) ^ *v2;
        *v2 = v2.rotate_left(32);
    };
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let m = u64::from_le_bytes(word);
        v3 ^= m;
        round(&mut v0, &mut v1, &mut v2, &mut v3);
        round(&mut v0, &mut v1, &mut v2, &mut v3);
        v0 ^= m;
    }
    let rest = chunks.remainder();
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    last[7] = bytes.len() as u8;
    let m = u64::from_le_bytes(last);
    v3 ^= m;
    round(&mut v0, &mut v1, &mut v2, &mut v3);
    round(&mut v0, &mut v1, &mut v2, &mut v3);
    v0 ^= m;
    v2 ^= 0xff;
    for _ in 0..4 {
        round(&mut v0, &mut v1, &mut v2, &mut v3);
    }
    v0 ^ v1 ^ v2 ^ v3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_vectors() {
        // The SipHash paper's test key 00 01 .. 0f; messages 00 01 .. (n-1).
        let key = (0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
        let message: Vec<u8> = (0u8..15).collect();
        assert_eq!(siphash24(key, &message), 0xa129_ca61_49be_45e5);
        assert_eq!(siphash24(key, &[]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(key, &message[..8]), 0x93f5_f579_9a93_2462);
    }
}
