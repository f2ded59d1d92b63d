//! A big job read in parts: which ranks get their history (the worst
//! first), histories thinned to their bucket maxima, per-node aggregates
//! and the rank x time matrix of used share. Pure functions over what the
//! API handler copied out of the view, so none of this runs under its lock;
//! times come from the data.

mod matrix;
mod nodes;
mod select;

pub use matrix::{base64, bucket_row, matrix_edges, share_cell};
pub use nodes::node_aggregates;
pub use select::{downsample_max, worst_ranks};

/// A closed range of data time, ms; either end open when `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeRange {
    /// Oldest time kept.
    pub since_ms: Option<u64>,
    /// Newest time kept.
    pub until_ms: Option<u64>,
}

impl TimeRange {
    /// Whether `t_ms` is within the range.
    pub fn contains(&self, t_ms: u64) -> bool {
        self.since_ms.is_none_or(|s| t_ms >= s) && self.until_ms.is_none_or(|u| t_ms <= u)
    }
}
