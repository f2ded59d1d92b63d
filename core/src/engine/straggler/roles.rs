//! Which part of a step carries the wait for the slowest rank.
//!
//! In synchronous training every rank leaves a collective together, so the
//! time a fast rank spends waiting for a slow one lands in whatever part of
//! the step holds the collective:
//!
//! - a section of its own when the job times one (`allreduce`, `comm`,
//!   `reduce_scatter`, ...: FSDP, ZeRO, explicit collectives);
//! - otherwise `backward`, because DDP overlaps its gradient all-reduce with
//!   the backward pass and the last bucket's wait ends it;
//! - otherwise the untimed rest of the step (duration minus the sections).
//!
//! Every other section is the rank's own work ("busy" time). A straggler's
//! busy time is longer than its peers' and its wait shorter by about as much.

/// Words that mark a section as a collective (matched inside the lowercase
/// name, ignoring `_`, `-` and spaces).
const COLLECTIVE_WORDS: [&str; 10] = [
    "allreduce",
    "reducescatter",
    "allgather",
    "alltoall",
    "broadcast",
    "collective",
    "comm",
    "barrier",
    "sync",
    "wait",
];

/// The section DDP hides its all-reduce in.
pub const BACKWARD: &str = "backward";

/// Whether a section name stands for a collective or an explicit wait.
pub fn is_collective(name: &str) -> bool {
    let folded: String = name
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .flat_map(char::to_lowercase)
        .collect();
    COLLECTIVE_WORDS.iter().any(|w| folded.contains(w))
}

/// Where a job's steps carry the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitIn {
    /// The sections whose bit is set (collectives).
    Sections(u32),
    /// One section (`backward`), by index.
    Section(usize),
    /// The rest of the step, outside every section.
    Remainder,
}

impl WaitIn {
    /// Decides from the job's section names (in index order).
    pub fn of<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut collectives = 0u32;
        let mut backward = None;
        for (i, name) in names.into_iter().enumerate().take(32) {
            if is_collective(name) {
                collectives |= 1 << i;
            } else if name == BACKWARD {
                backward = Some(i);
            }
        }
        match (collectives, backward) {
            (0, Some(i)) => Self::Section(i),
            (0, None) => Self::Remainder,
            (mask, _) => Self::Sections(mask),
        }
    }

    /// Whether section `i` carries the wait.
    pub fn holds(self, i: usize) -> bool {
        match self {
            Self::Sections(mask) => i < 32 && mask & (1 << i) != 0,
            Self::Section(j) => i == j,
            Self::Remainder => false,
        }
    }

    /// How to name it for people.
    pub fn describe(self, names: &[String]) -> String {
        match self {
            Self::Sections(mask) => {
                let held: Vec<&str> = names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i < 32 && mask & (1 << i) != 0)
                    .map(|(_, n)| n.as_str())
                    .collect();
                held.join(" and ")
            }
            Self::Section(i) => names.get(i).cloned().unwrap_or_default(),
            Self::Remainder => "the rest of the step".to_owned(),
        }
    }
}

/// [`WaitIn::of`] a tracker's section names, remembered while their count
/// stays the same (names are only ever appended), so a scored step does not
/// fold every name again. Not state: its tracker holds it as a `NotState`,
/// not serialized and equal to any other.
#[derive(Debug, Clone, Default)]
pub struct WaitInCache(Option<(usize, WaitIn)>);

impl WaitInCache {
    /// Where the steps of a job with these sections carry the wait.
    pub fn get(&mut self, names: &[String]) -> WaitIn {
        match self.0 {
            Some((n, wait_in)) if n == names.len() => wait_in,
            _ => {
                let wait_in = WaitIn::of(names.iter().map(String::as_str));
                self.0 = Some((names.len(), wait_in));
                wait_in
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectives_are_known_by_their_usual_names() {
        for name in [
            "allreduce",
            "all_reduce",
            "AllGather",
            "reduce-scatter",
            "comm",
            "grad_sync",
        ] {
            assert!(is_collective(name), "{name}");
        }
        for name in ["forward", "backward", "data", "optimizer", "loss"] {
            assert!(!is_collective(name), "{name}");
        }
    }

    #[test]
    fn a_collective_section_wins_over_backward_and_backward_over_the_remainder() {
        let names = ["data", "forward", "backward", "allreduce"];
        assert_eq!(WaitIn::of(names), WaitIn::Sections(1 << 3));
        assert_eq!(
            WaitIn::of(["data", "forward", "backward"]),
            WaitIn::Section(2)
        );
        assert_eq!(WaitIn::of(["data", "forward"]), WaitIn::Remainder);
    }
}
