//! A count kept beside a bounded map so that a bound costs no scan per
//! record: derived from the map, never serialized (the snapshot layout stays
//! the map's), counted again on first use after a restore, and always equal
//! to another, as it says nothing the map does not: its holders keep it as
//! a [`NotState`](crate::not_state::NotState).

/// The count; `None` until counted.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DerivedCount(Option<usize>);

impl DerivedCount {
    /// The count, from `count` when not known yet.
    pub(crate) fn get_or(&self, count: impl FnOnce() -> usize) -> usize {
        self.0.unwrap_or_else(count)
    }

    /// The count is now `n`.
    pub(crate) fn set(&mut self, n: usize) {
        self.0 = Some(n);
    }

    /// The count must be taken again.
    pub(crate) fn forget(&mut self) {
        self.0 = None;
    }
}
