//! The rise/fall state machine of one monitored target: pure, no clocks, no I/O.
//!
//! - `Unknown` (startup = "unknown") is served as up; the first result decides (up or down).
//! - `Up` goes down after `fall` consecutive failures; a success resets the count.
//! - `Down` comes up after `rise` consecutive successes; a failure resets the count.
//!
//! So one slow or failed reply never flips an up target when `fall` > 1.

use crate::policy::monitor::Startup;

/// A target's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No result yet (startup = "unknown"); served as up.
    Unknown,
    Up,
    Down,
}

impl State {
    /// Whether endpoints on this target are served.
    pub fn serves(self) -> bool {
        self != State::Down
    }

    pub fn as_str(self) -> &'static str {
        match self {
            State::Unknown => "unknown",
            State::Up => "up",
            State::Down => "down",
        }
    }
}

/// Rise/fall counting for one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    state: State,
    fall: u32,
    rise: u32,
    /// Consecutive results against the current state (failures while up, successes while down).
    streak: u32,
}

impl Machine {
    pub fn new(startup: Startup, fall: u32, rise: u32) -> Machine {
        Machine {
            state: match startup {
                Startup::Up => State::Up,
                Startup::Down => State::Down,
                Startup::Unknown => State::Unknown,
            },
            fall: fall.max(1),
            rise: rise.max(1),
            streak: 0,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Consecutive results against the current state so far.
    pub fn streak(&self) -> u32 {
        self.streak
    }

    /// Feeds one check result; returns the new state if it changed.
    pub fn observe(&mut self, ok: bool) -> Option<State> {
        let next = match (self.state, ok) {
            (State::Unknown, true) => Some(State::Up),
            (State::Unknown, false) => Some(State::Down),
            (State::Up, true) | (State::Down, false) => {
                self.streak = 0;
                None
            }
            (State::Up, false) => {
                self.streak += 1;
                (self.streak >= self.fall).then_some(State::Down)
            }
            (State::Down, true) => {
                self.streak += 1;
                (self.streak >= self.rise).then_some(State::Up)
            }
        };
        if let Some(state) = next {
            self.state = state;
            self.streak = 0;
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(machine: &mut Machine, results: &[bool]) -> Vec<State> {
        results
            .iter()
            .map(|&ok| {
                machine.observe(ok);
                machine.state()
            })
            .collect()
    }

    #[test]
    fn up_falls_after_fall_consecutive_failures_only() {
        let mut m = Machine::new(Startup::Up, 2, 3);
        use State::*;
        assert_eq!(
            feed(&mut m, &[false, true, false, true, false, false]),
            [Up, Up, Up, Up, Up, Down],
            "one failure between successes never flips"
        );
    }

    #[test]
    fn down_rises_after_rise_consecutive_successes_only() {
        let mut m = Machine::new(Startup::Down, 2, 3);
        use State::*;
        assert_eq!(
            feed(&mut m, &[true, true, false, true, true, true, false]),
            [Down, Down, Down, Down, Down, Up, Up]
        );
    }

    #[test]
    fn unknown_is_served_and_the_first_result_decides() {
        for (first, want) in [(true, State::Up), (false, State::Down)] {
            let mut m = Machine::new(Startup::Unknown, 3, 3);
            assert!(m.state().serves());
            assert_eq!(m.observe(first), Some(want));
        }
        assert!(!Machine::new(Startup::Down, 1, 1).state().serves());
    }

    #[test]
    fn fall_and_rise_of_one_flip_at_once() {
        let mut m = Machine::new(Startup::Up, 1, 1);
        assert_eq!(m.observe(false), Some(State::Down));
        assert_eq!(m.observe(true), Some(State::Up));
        assert_eq!(m.observe(true), None);
    }
}
