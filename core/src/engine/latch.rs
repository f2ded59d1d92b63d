//! Hysteresis: a condition must hold for several evaluations in a row to raise
//! an alert and fail for several in a row to clear it, so a value hovering at
//! a threshold does not flap.

use serde::{Deserialize, Serialize};

/// What an update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// Nothing changed.
    Steady,
    /// The latch turned on.
    Raised,
    /// The latch turned off.
    Cleared,
}

/// A debounced boolean.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latch {
    on: bool,
    streak: u32,
}

impl Latch {
    /// Feeds one evaluation: `raise_after` consecutive trues raise it,
    /// `clear_after` consecutive falses clear it.
    pub fn update(&mut self, condition: bool, raise_after: u32, clear_after: u32) -> Edge {
        if condition == self.on {
            self.streak = 0;
            return Edge::Steady;
        }
        self.streak += 1;
        let needed = if self.on { clear_after } else { raise_after };
        if self.streak < needed.max(1) {
            return Edge::Steady;
        }
        self.on = condition;
        self.streak = 0;
        if self.on {
            Edge::Raised
        } else {
            Edge::Cleared
        }
    }

    /// Whether the latch is on.
    pub fn is_on(&self) -> bool {
        self.on
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_after_a_streak_and_ignores_a_blip() {
        let mut l = Latch::default();
        assert_eq!(l.update(true, 3, 2), Edge::Steady);
        assert_eq!(l.update(false, 3, 2), Edge::Steady);
        assert_eq!(l.update(true, 3, 2), Edge::Steady);
        assert_eq!(l.update(true, 3, 2), Edge::Steady);
        assert_eq!(l.update(true, 3, 2), Edge::Raised);
        assert_eq!(l.update(false, 3, 2), Edge::Steady);
        assert_eq!(l.update(true, 3, 2), Edge::Steady);
        assert_eq!(l.update(false, 3, 2), Edge::Steady);
        assert_eq!(l.update(false, 3, 2), Edge::Cleared);
        assert!(!l.is_on());
    }
}
