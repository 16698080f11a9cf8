//! Hot cells (issue 31, item 2: cells fail alone): whether one anycast cell's load, from the
//! feed's `cells` section, takes it out of tenants' answers.
//!
//! A cell is all or nothing (its address is in an answer or not; where every cell of a
//! tenant's shard is out, the answer falls back a layer, see `crate::cells::impaired`), so its
//! decision is a flag, guarded as a region's shed is, with the step's own rules
//! (`super::data_age`, `super::held_down`):
//! - it goes hot above the high watermark and comes back below the low one (in between it
//!   stays as it is: hysteresis);
//! - a change that reverses the last one waits for the hold-down;
//! - stale data freezes the decision; data stale for longer (or never seen) brings the cell
//!   back (normal answers), as a region's shed decays.
//!
//! - at most `max_hot_cells_per_tick` cells go hot in one tick, the hottest first ([`step_cells`]):
//!   a feed that says many cells are hot at once takes them out of answers a few at a time, as
//!   `max_step` paces a region's shed (the others wait, noted, and go on the next ticks if still
//!   hot); coming back is never capped;
//! - a feed that leaves a cell out says nothing new about it ([`reading_of`]): the cell is
//!   decided on the last reading a feed carried, aged since and never counted fresh — frozen
//!   while that is stale, back in answers once it is older than `revert_after`, the stale rules
//!   a region's data follows — rather than dropped at once.
//!
//! Part of the pure step: no I/O, the clock passed in.

use super::{data_age, held_down, DataAge, Reading, ShieldSettings};

/// One cell's decision, carried from tick to tick.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CellState {
    /// Left out of tenants' answers for its load.
    pub hot: bool,
    /// Last direction moved (+1 hot, -1 back, 0 never) and when (ms).
    pub last_direction: i8,
    pub last_move_at: u64,
    /// Its utilisation at the last fresh reading.
    pub utilisation: Option<f64>,
    pub note: CellNote,
}

/// Why a cell is in the state it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CellNote {
    #[default]
    Normal,
    /// Above the high watermark (or not yet below the low one).
    Hot,
    /// Would change, but that reverses the last change within the hold-down.
    HeldDown,
    /// Data stale: frozen.
    Stale,
    /// Data stale for long, or none: back in the answers.
    Reverting,
    /// Would go hot, but `max_hot_cells_per_tick` hotter cells went this tick.
    Capped,
}

impl CellNote {
    pub fn as_str(self) -> &'static str {
        match self {
            CellNote::Normal => "normal",
            CellNote::Hot => "hot",
            CellNote::HeldDown => "hold-down",
            CellNote::Stale => "stale (frozen)",
            CellNote::Reverting => "stale (reverting)",
            CellNote::Capped => "waiting (max_hot_cells_per_tick)",
        }
    }
}

/// The next state of a cell from its `previous` one and this tick's reading, with the reason
/// when it changed (for the change log).
pub fn step_cell(
    previous: &CellState,
    reading: Option<Reading>,
    settings: &ShieldSettings,
    now_ms: u64,
) -> (CellState, Option<String>) {
    let mut next = *previous;
    let age = reading.map(|r| r.age_ms);
    match (data_age(age, settings), reading) {
        (DataAge::Fresh, Some(reading)) => {
            let util = reading.load / reading.capacity;
            next.utilisation = Some(util);
            let wanted = if util > settings.high_watermark {
                true
            } else if util < settings.low_watermark {
                false
            } else {
                previous.hot
            };
            decide(&mut next, wanted, util, settings, now_ms)
        }
        (DataAge::Stale, _) => {
            next.note = CellNote::Stale;
            (next, None)
        }
        _ => {
            next.note = CellNote::Reverting;
            if !previous.hot {
                next.note = CellNote::Normal;
                return (next, None);
            }
            next.hot = false;
            next.last_direction = -1;
            next.last_move_at = now_ms;
            (
                next,
                Some("load data stale too long: back in answers".into()),
            )
        }
    }
}

/// The reading a cell is decided on: this feed's (`carried`), else the last one a feed
/// carried (`last`, its age counted from that feed), never younger than `stale_after` — so a
/// cell the feed leaves out is frozen while that reading is stale and comes back once it is
/// older than `revert_after`, not at once.
pub fn reading_of(
    carried: Option<Reading>,
    last: Option<Reading>,
    settings: &ShieldSettings,
) -> Option<Reading> {
    carried.or_else(|| {
        last.map(|r| Reading {
            age_ms: r.age_ms.max(settings.stale_after_ms),
            ..r
        })
    })
}

/// Every cell's next state ([`step_cell`] each, on `cells`: its previous state and this
/// tick's reading), with at most `max_hot_cells_per_tick` going hot this tick, the hottest
/// first; a cell held back stays as it was, noted [`CellNote::Capped`].
pub fn step_cells(
    cells: &[(CellState, Option<Reading>)],
    settings: &ShieldSettings,
    now_ms: u64,
) -> Vec<(CellState, Option<String>)> {
    let mut next: Vec<(CellState, Option<String>)> = cells
        .iter()
        .map(|(previous, reading)| step_cell(previous, *reading, settings, now_ms))
        .collect();
    let mut going: Vec<usize> = (0..cells.len())
        .filter(|&i| next[i].0.hot && !cells[i].0.hot)
        .collect();
    let hotness = |i: usize| next[i].0.utilisation.unwrap_or(0.0);
    going.sort_by(|&a, &b| hotness(b).total_cmp(&hotness(a)).then(a.cmp(&b)));
    for &i in going.iter().skip(settings.max_hot_cells_per_tick) {
        let mut held = cells[i].0;
        held.utilisation = next[i].0.utilisation;
        held.note = CellNote::Capped;
        next[i] = (held, None);
    }
    next
}

/// Moves `cell` to `wanted` unless the hold-down keeps it.
fn decide(
    cell: &mut CellState,
    wanted: bool,
    util: f64,
    settings: &ShieldSettings,
    now_ms: u64,
) -> (CellState, Option<String>) {
    let flag = |hot: bool| if hot { 1.0 } else { 0.0 };
    let last = (cell.last_direction, cell.last_move_at);
    if wanted != cell.hot && held_down(flag(cell.hot), flag(wanted), last, settings, now_ms) {
        cell.note = CellNote::HeldDown;
        return (*cell, None);
    }
    cell.note = if wanted {
        CellNote::Hot
    } else {
        CellNote::Normal
    };
    if wanted == cell.hot {
        return (*cell, None);
    }
    cell.hot = wanted;
    cell.last_direction = if wanted { 1 } else { -1 };
    cell.last_move_at = now_ms;
    let reason = if wanted {
        format!(
            "utilisation {:.0}% above the high watermark {:.0}%: left out of answers",
            util * 100.0,
            settings.high_watermark * 100.0
        )
    } else {
        format!(
            "utilisation {:.0}% below the low watermark {:.0}%: back in answers",
            util * 100.0,
            settings.low_watermark * 100.0
        )
    };
    (*cell, Some(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ShieldSettings {
        ShieldSettings {
            high_watermark: 0.8,
            low_watermark: 0.6,
            max_step: 0.1,
            hold_down_ms: 10_000,
            short_ttl: 30,
            steady_ttl: 300,
            stale_after_ms: 30_000,
            revert_after_ms: 120_000,
            allow_cross_continent: false,
            tenant_share: 0.5,
            max_hot_cells_per_tick: 2,
        }
    }

    fn at(load: f64, age_ms: u64) -> Option<Reading> {
        Some(Reading {
            load,
            capacity: 100.0,
            age_ms,
        })
    }

    /// Runs the cell through `readings`, one tick each `every` ms; the flags after each.
    fn run(readings: &[Option<Reading>], every: u64) -> Vec<bool> {
        let mut state = CellState::default();
        let mut now = 0;
        readings
            .iter()
            .map(|r| {
                now += every;
                state = step_cell(&state, *r, &settings(), now).0;
                state.hot
            })
            .collect()
    }

    #[test]
    fn hot_above_the_high_watermark_back_below_the_low_one_and_not_in_between() {
        let readings = [
            at(50.0, 0),
            at(85.0, 0),
            at(70.0, 0),
            at(59.0, 0),
            at(70.0, 0),
        ];
        assert_eq!(
            run(&readings, 20_000),
            [false, true, true, false, false],
            "the band between the watermarks changes nothing"
        );
    }

    #[test]
    fn reversing_waits_for_the_hold_down() {
        let readings = [at(85.0, 0), at(10.0, 0), at(10.0, 0), at(10.0, 0)];
        // Ticks 4 s apart: hot at 4 s, back only once 10 s have passed (at 16 s).
        assert_eq!(run(&readings, 4_000), [true, true, true, false]);
        let (held, reason) = step_cell(
            &CellState {
                hot: true,
                last_direction: 1,
                last_move_at: 0,
                ..CellState::default()
            },
            at(10.0, 0),
            &settings(),
            5_000,
        );
        assert_eq!(
            (held.hot, held.note, reason),
            (true, CellNote::HeldDown, None)
        );
    }

    #[test]
    fn stale_data_freezes_and_data_stale_for_long_brings_the_cell_back() {
        let hot = step_cell(&CellState::default(), at(95.0, 0), &settings(), 1_000).0;
        assert!(hot.hot);
        let frozen = step_cell(&hot, at(10.0, 40_000), &settings(), 60_000).0;
        assert_eq!((frozen.hot, frozen.note), (true, CellNote::Stale));
        let (back, reason) = step_cell(&frozen, at(95.0, 200_000), &settings(), 200_000);
        assert_eq!((back.hot, back.note), (false, CellNote::Reverting));
        assert!(reason.is_some_and(|r| r.contains("stale too long")));
        // No reading at all is the same as data stale for long.
        let none = step_cell(&hot, None, &settings(), 200_000).0;
        assert!(!none.hot);
    }

    #[test]
    fn at_most_max_hot_cells_per_tick_go_hot_in_one_tick_the_hottest_first() {
        let settings = settings();
        let calm = CellState::default();
        // Five cells hot at once (one below the watermark): two go this tick, the hottest.
        let cells: Vec<(CellState, Option<Reading>)> = [90.0, 99.0, 50.0, 95.0, 85.0, 92.0]
            .iter()
            .map(|load| (calm, at(*load, 0)))
            .collect();
        let first = step_cells(&cells, &settings, 20_000);
        let hot: Vec<bool> = first.iter().map(|(c, _)| c.hot).collect();
        assert_eq!(hot, [false, true, false, true, false, false]);
        assert_eq!(first[0].0.note, CellNote::Capped);
        assert!(first[0].1.is_none(), "a held cell is no change");
        assert_eq!(first[2].0.note, CellNote::Normal);
        // The next tick, the next two; then the last.
        let again = |states: &[(CellState, Option<String>)]| -> Vec<(CellState, Option<Reading>)> {
            states
                .iter()
                .zip(&cells)
                .map(|((state, _), (_, reading))| (*state, *reading))
                .collect()
        };
        let second = step_cells(&again(&first), &settings, 21_000);
        let hot: Vec<bool> = second.iter().map(|(c, _)| c.hot).collect();
        assert_eq!(hot, [true, true, false, true, false, true]);
        let third = step_cells(&again(&second), &settings, 22_000);
        assert!(third[4].0.hot && !third[2].0.hot);
        // Coming back is never capped: all back at once.
        let cool: Vec<(CellState, Option<Reading>)> = third
            .iter()
            .map(|(state, _)| (*state, at(10.0, 0)))
            .collect();
        let back = step_cells(&cool, &settings, 60_000);
        assert!(back.iter().all(|(c, _)| !c.hot), "{back:?}");
    }

    #[test]
    fn a_cell_the_feed_leaves_out_is_frozen_then_back_as_stale_data_not_at_once() {
        let settings = settings();
        let (hot, _) = step_cell(&CellState::default(), at(90.0, 0), &settings, 1_000);
        assert!(hot.hot);
        // Newer feeds without the cell: its last reading, aged since it was carried.
        let last = |age_ms| at(90.0, age_ms);
        let missing = reading_of(None, last(2_000), &settings);
        let (frozen, change) = step_cell(&hot, missing, &settings, 3_000);
        assert!(frozen.hot && change.is_none(), "not dropped at once");
        assert_eq!(frozen.note, CellNote::Stale);
        let missing = reading_of(None, last(119_000), &settings);
        assert!(step_cell(&frozen, missing, &settings, 120_000).0.hot);
        let missing = reading_of(None, last(121_000), &settings);
        let (back, change) = step_cell(&frozen, missing, &settings, 122_000);
        assert!(!back.hot && change.is_some(), "back after revert_after");
        // Never seen at all: nothing to freeze.
        assert_eq!(reading_of(None, None, &settings), None);
        // A feed that carries it decides on it.
        assert_eq!(
            reading_of(at(10.0, 0), last(50_000), &settings),
            at(10.0, 0)
        );
    }
}
