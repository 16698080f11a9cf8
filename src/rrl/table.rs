//! The token buckets: a fixed-size table of `AtomicU64`, one bucket per slot, indexed by a keyed
//! hash of the rate-limiting key. Two keys that land in one slot share its bucket (as in Knot):
//! a collision can only make limiting stricter, never let a flood through, and it needs no lock,
//! no probing and no allocation after the table is built.
//!
//! A bucket packs the time it was last touched (milliseconds, wrapping `u32`) in the high half
//! and the tokens left (in thousandths of a response) in the low half, so one compare-and-swap
//! updates both. Tokens refill at `rate` responses per second up to `burst`; a response costs
//! one token.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Token units per response: refill works in thousandths, so a rate of 1/s refills 1 unit/ms.
const UNIT: u64 = 1000;
/// Compare-and-swap attempts before a bucket under contention counts as limited (many threads
/// hitting one bucket at once is itself a flood on that key).
const ATTEMPTS: usize = 4;
/// A wrapping time difference larger than this is "in the past": another thread stored a
/// slightly newer time after we read the clock.
const BACKWARDS: u32 = u32::MAX / 2;

/// The refill parameters of every bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Responses per second refilled.
    pub per_second: u32,
    /// Most responses a full bucket allows at once.
    pub burst: u32,
}

/// The bucket table, with the hash key that places keys in it (random per table, so nobody
/// outside can aim two keys at one bucket).
pub struct Table {
    buckets: Box<[AtomicU64]>,
    mask: usize,
    hasher: std::collections::hash_map::RandomState,
}

impl Table {
    /// The number of buckets a table asked for `size` has: rounded up to a power of two
    /// (at least 1).
    pub fn len_for(size: usize) -> usize {
        size.max(1).next_power_of_two()
    }

    /// A table of `size` buckets, rounded up to a power of two (at least 1).
    pub fn new(size: usize) -> Table {
        let size = Table::len_for(size);
        Table {
            buckets: (0..size).map(|_| AtomicU64::new(0)).collect(),
            mask: size - 1,
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// The table of `size` buckets a new snapshot's limiter charges: `previous` (the one served
    /// until now) when it has that size, so that a reload during a flood hands no key a fresh
    /// burst; a fresh one otherwise.
    pub fn carried(size: usize, previous: Option<&Arc<Table>>) -> Arc<Table> {
        match previous {
            Some(previous) if previous.len() == Table::len_for(size) => previous.clone(),
            _ => Arc::new(Table::new(size)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// The slot of a key; `key` feeds the hasher (it must not allocate).
    pub fn slot(&self, key: impl FnOnce(&mut dyn Hasher)) -> usize {
        let mut hasher = self.hasher.build_hasher();
        key(&mut hasher);
        (hasher.finish() as usize) & self.mask
    }

    /// Takes one token from bucket `slot` at time `now_ms`: `true` if there was one (send the
    /// response), `false` if the key is over its rate.
    pub fn take(&self, slot: usize, now_ms: u32, rate: Rate) -> bool {
        let Some(bucket) = self.buckets.get(slot) else {
            return true;
        };
        let mut old = bucket.load(Ordering::Relaxed);
        for _ in 0..ATTEMPTS {
            let (allowed, new) = step(old, now_ms, rate);
            match bucket.compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return allowed,
                Err(current) => old = current,
            }
        }
        false
    }
}

/// One bucket transition: refill for the time since it was last touched, then spend a token if
/// there is one. Returns whether the response may go out, and the new bucket value.
fn step(old: u64, now_ms: u32, rate: Rate) -> (bool, u64) {
    let full = u64::from(rate.burst) * UNIT;
    let (tokens, now_ms) = if old == 0 {
        // Never touched: starts full.
        (full, now_ms)
    } else {
        let (last, tokens) = unpack(old);
        let elapsed = now_ms.wrapping_sub(last);
        // Another thread stored a newer time: no refill, and the bucket's time stays the
        // newer one (storing ours would hand the next caller the same milliseconds again).
        let (elapsed, now_ms) = if elapsed > BACKWARDS {
            (0, last)
        } else {
            (elapsed, now_ms)
        };
        let refill = u64::from(elapsed) * u64::from(rate.per_second);
        ((u64::from(tokens) + refill).min(full), now_ms)
    };
    let (allowed, left) = if tokens >= UNIT {
        (true, tokens - UNIT)
    } else {
        (false, tokens)
    };
    (allowed, pack(now_ms, left))
}

fn pack(time_ms: u32, tokens: u64) -> u64 {
    // `tokens` never exceeds burst * UNIT, which the config keeps below 2^32; the `max(1)`
    // keeps a bucket that was touched from ever reading as "never touched" (0).
    (u64::from(time_ms) << 32 | tokens.min(u64::from(u32::MAX))).max(1)
}

fn unpack(bucket: u64) -> (u32, u32) {
    ((bucket >> 32) as u32, bucket as u32)
}

/// Feeds a byte slice to a `dyn Hasher` (the `Hash` impl for slices needs a sized hasher).
pub fn hash_bytes(hasher: &mut dyn Hasher, bytes: &[u8]) {
    hasher.write(bytes);
}

/// Feeds any `Hash` value to a `dyn Hasher`.
pub fn hash_value(hasher: &mut dyn Hasher, value: impl Hash) {
    struct Dyn<'a>(&'a mut dyn Hasher);
    impl Hasher for Dyn<'_> {
        fn finish(&self) -> u64 {
            self.0.finish()
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.write(bytes);
        }
    }
    value.hash(&mut Dyn(hasher));
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Rate = Rate {
        per_second: 10,
        burst: 5,
    };

    fn allowed_in(table: &Table, slot: usize, now_ms: u32, tries: usize) -> usize {
        (0..tries)
            .filter(|_| table.take(slot, now_ms, RATE))
            .count()
    }

    #[test]
    fn a_fresh_bucket_allows_the_burst_then_limits() {
        let table = Table::new(16);
        assert_eq!(allowed_in(&table, 3, 1_000, 20), 5);
        assert!(!table.take(3, 1_000, RATE));
        // Another bucket is untouched.
        assert_eq!(allowed_in(&table, 4, 1_000, 20), 5);
    }

    #[test]
    fn tokens_refill_at_the_rate_and_stop_at_the_burst() {
        let table = Table::new(16);
        assert_eq!(allowed_in(&table, 0, 10_000, 5), 5);
        // 10/s: one token every 100 ms.
        assert!(!table.take(0, 10_099, RATE));
        assert!(table.take(0, 10_100, RATE));
        assert!(!table.take(0, 10_100, RATE));
        // 350 ms later: 3.5 tokens, so three responses.
        assert_eq!(allowed_in(&table, 0, 10_450, 10), 3);
        // The half token left over still counts: 50 ms more makes it whole.
        assert!(table.take(0, 10_500, RATE));
        // A long quiet spell refills to the burst, not beyond.
        assert_eq!(allowed_in(&table, 0, 60_000, 100), 5);
    }

    #[test]
    fn a_sustained_flood_gets_exactly_the_rate() {
        let table = Table::new(1);
        let mut allowed = 0;
        // 1000 queries a second for 10 s, one every millisecond.
        for ms in 0..10_000u32 {
            allowed += usize::from(table.take(0, 50_000 + ms, RATE));
        }
        // The burst, then 10/s for the 9.999 s that follow.
        assert_eq!(allowed, 5 + 99);
    }

    #[test]
    fn the_clock_wrapping_or_a_slightly_older_reading_is_harmless() {
        let table = Table::new(1);
        assert_eq!(allowed_in(&table, 0, u32::MAX - 50, 5), 5);
        // 250 ms later, across the wrap: 2.5 tokens.
        assert_eq!(allowed_in(&table, 0, 199, 10), 2);
        // A thread that read the clock 5 ms earlier than the last update gets no refill
        // (not a huge one).
        assert!(!table.take(0, 194, RATE));
        assert!(table.take(0, 300, RATE));
    }

    #[test]
    fn buckets_are_chosen_by_the_key() {
        let table = Table::new(1000);
        assert_eq!(table.len(), 1024);
        let a = table.slot(|h| hash_bytes(h, b"key a"));
        assert_eq!(a, table.slot(|h| hash_bytes(h, b"key a")));
        let distinct: std::collections::HashSet<usize> = (0u32..64)
            .map(|i| table.slot(|h| hash_value(h, i)))
            .collect();
        assert!(distinct.len() > 32, "keys spread over the table");
    }
}
