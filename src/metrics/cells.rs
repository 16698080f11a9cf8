//! Counter storage the serving path can bump without locks, allocation or false sharing:
//! every thread adds into its own *slot* (a run of cache lines), and a scrape sums the slots.
//!
//! UDP workers claim a slot of their own at start ([`claim_worker_slot`]); every other thread
//! (the TCP tasks on the async runtime, tests) shares the last slot, which is still correct —
//! the cells are atomics — only not contention-free.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Counter slots per counter set: `SLOTS - 1` for UDP workers, the last one shared.
pub const SLOTS: usize = 8;
/// The slot of threads that did not claim one.
pub const SHARED_SLOT: usize = SLOTS - 1;

thread_local! {
    // `const` init: reading it never allocates or registers a destructor.
    static SLOT: Cell<usize> = const { Cell::new(SHARED_SLOT) };
}

static NEXT_WORKER: AtomicUsize = AtomicUsize::new(0);

/// Gives the calling thread a counter slot of its own (a UDP worker calls this once when it
/// starts). With more than `SLOTS - 1` workers, some share a slot.
pub fn claim_worker_slot() {
    let n = NEXT_WORKER.fetch_add(1, Ordering::Relaxed);
    let _ = SLOT.try_with(|slot| slot.set(n % SHARED_SLOT));
}

/// The calling thread's slot.
pub fn current_slot() -> usize {
    SLOT.try_with(Cell::get).unwrap_or(SHARED_SLOT)
}

const LINE_CELLS: usize = 16;

/// Two cache lines (adjacent-line prefetch pairs them on x86), so two slots never share one.
#[repr(align(128))]
struct Line([AtomicU64; LINE_CELLS]);

impl Line {
    fn new() -> Line {
        Line(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

/// `len` counters per slot, sized once (when a snapshot is built) and never resized.
pub struct Cells {
    len: usize,
    lines_per_slot: usize,
    lines: Box<[Line]>,
}

impl Cells {
    pub fn new(len: usize) -> Cells {
        let lines_per_slot = len.div_ceil(LINE_CELLS).max(1);
        Cells {
            len,
            lines_per_slot,
            lines: (0..lines_per_slot * SLOTS).map(|_| Line::new()).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn cell(&self, slot: usize, index: usize) -> Option<&AtomicU64> {
        if index >= self.len || slot >= SLOTS {
            return None;
        }
        let line = self
            .lines
            .get(slot * self.lines_per_slot + index / LINE_CELLS)?;
        Some(&line.0[index % LINE_CELLS])
    }

    /// Adds one to counter `index` in `slot`; an index out of range is ignored.
    #[inline]
    pub fn bump(&self, slot: usize, index: usize) {
        if let Some(cell) = self.cell(slot, index) {
            cell.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Adds `n` to counter `index` in `slot`; an index out of range is ignored.
    #[inline]
    pub fn add(&self, slot: usize, index: usize, n: u64) {
        if let Some(cell) = self.cell(slot, index) {
            cell.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Counter `index` summed over every slot, and reset to 0 (each slot swapped on its own:
    /// an add that lands meanwhile is kept for the next take, never lost).
    pub fn take(&self, index: usize) -> u64 {
        (0..SLOTS)
            .filter_map(|slot| self.cell(slot, index))
            .map(|cell| cell.swap(0, Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }

    /// Counter `index` summed over every slot.
    pub fn sum(&self, index: usize) -> u64 {
        (0..SLOTS)
            .filter_map(|slot| self.cell(slot, index))
            .map(|cell| cell.load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_summed_and_out_of_range_is_ignored() {
        let cells = Cells::new(20);
        cells.bump(0, 3);
        cells.bump(SHARED_SLOT, 3);
        cells.bump(2, 19);
        cells.bump(2, 20);
        cells.bump(SLOTS, 3);
        assert_eq!(cells.sum(3), 2);
        assert_eq!(cells.sum(19), 1);
        assert_eq!(cells.sum(20), 0);
        assert_eq!((0..20).map(|i| cells.sum(i)).sum::<u64>(), 3);
    }

    #[test]
    fn take_sums_and_resets() {
        let cells = Cells::new(4);
        cells.add(0, 1, 300);
        cells.add(SHARED_SLOT, 1, 5);
        assert_eq!(cells.take(1), 305);
        assert_eq!(cells.take(1), 0);
    }

    #[test]
    fn slots_do_not_share_cache_lines() {
        let cells = Cells::new(3);
        let a = cells.cell(0, 2).map(|c| c as *const AtomicU64 as usize);
        let b = cells.cell(1, 0).map(|c| c as *const AtomicU64 as usize);
        let (Some(a), Some(b)) = (a, b) else {
            panic!("cells in range");
        };
        assert!(
            b / 128 != a / 128,
            "slot 0 and slot 1 share a 128-byte block"
        );
    }

    #[test]
    fn a_claimed_slot_is_a_worker_slot() {
        std::thread::spawn(|| {
            assert_eq!(current_slot(), SHARED_SLOT);
            claim_worker_slot();
            assert!(current_slot() < SHARED_SLOT);
        })
        .join()
        .unwrap_or_else(|_| panic!("thread panicked"));
    }
}
