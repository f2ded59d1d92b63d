//! A memory series' bounded history, stored compactly.
//!
//! The view keeps [`DEFAULT_HISTORY_WINDOWS`](super::DEFAULT_HISTORY_WINDOWS)
//! windows for every GPU and every rank, and those two rings are most of a
//! GPU's share of a coordinator's memory. A window is stored in 24 bytes
//! instead of the API's 40: its end time as it is, and its four figures in
//! KiB as `u32` (up to 4 TiB, far above any GPU's memory). Rounding keeps
//! the envelope honest: the minimum rounds down and the maximum up, so a
//! stored peak is never below the peak seen; the last value and the mean
//! round to the nearest KiB.
//!
//! The encoding is the API's [`HistoryPoint`] in bytes, as before, so
//! snapshots keep their layout and a snapshot written before this change
//! loads (its figures rounded as above).

use gpumon_proto::api::HistoryPoint;
use serde::{Deserialize, Serialize};

use super::Ring;

const KIB: u64 = 1024;

/// One window as the view stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "HistoryPoint", into = "HistoryPoint")]
struct StoredPoint {
    t_ms: u64,
    min_kib: u32,
    max_kib: u32,
    last_kib: u32,
    mean_kib: u32,
}

fn kib_down(bytes: u64) -> u32 {
    u32::try_from(bytes / KIB).unwrap_or(u32::MAX)
}

fn kib_up(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(KIB)).unwrap_or(u32::MAX)
}

fn kib_nearest(bytes: u64) -> u32 {
    u32::try_from(bytes / KIB + u64::from(bytes % KIB >= KIB / 2)).unwrap_or(u32::MAX)
}

impl From<HistoryPoint> for StoredPoint {
    fn from(p: HistoryPoint) -> Self {
        Self {
            t_ms: p.t_ms,
            min_kib: kib_down(p.min),
            max_kib: kib_up(p.max),
            last_kib: kib_nearest(p.last),
            mean_kib: kib_nearest(p.mean),
        }
    }
}

impl From<StoredPoint> for HistoryPoint {
    fn from(p: StoredPoint) -> Self {
        Self {
            t_ms: p.t_ms,
            min: u64::from(p.min_kib) * KIB,
            max: u64::from(p.max_kib) * KIB,
            last: u64::from(p.last_kib) * KIB,
            mean: u64::from(p.mean_kib) * KIB,
        }
    }
}

/// At most `cap` windows of one memory series, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct History(Ring<StoredPoint>);

impl History {
    /// An empty history of at most `cap` windows (at least one).
    pub fn new(cap: usize) -> Self {
        Self(Ring::new(cap))
    }

    /// Appends a window, forgetting the oldest when full.
    pub fn push(&mut self, point: HistoryPoint) {
        self.0.push(point.into());
    }

    /// The windows, oldest first, in bytes (KiB multiples).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = HistoryPoint> + ExactSizeIterator + '_ {
        self.0.iter().map(|&p| p.into())
    }

    /// Number of windows held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(min: u64, max: u64, last: u64, mean: u64) -> HistoryPoint {
        HistoryPoint {
            t_ms: 1_750_000_000_123,
            min,
            max,
            last,
            mean,
        }
    }

    fn stored(p: HistoryPoint) -> HistoryPoint {
        let mut h = History::new(4);
        h.push(p);
        let back = h.iter().next().expect("one window");
        back
    }

    #[test]
    fn a_window_takes_24_bytes() {
        assert_eq!(std::mem::size_of::<StoredPoint>(), 24);
    }

    #[test]
    fn kib_multiples_come_back_exactly() {
        let gib = 1 << 30;
        let p = point(20 * gib, 70 * gib + 4096, 30 * gib, 25 * gib + 1024);
        assert_eq!(stored(p), p);
    }

    #[test]
    fn the_minimum_rounds_down_the_maximum_up_and_the_rest_to_nearest() {
        let back = stored(point(10_000, 10_000, 10_000, 10_800));
        // 10,000 bytes is 9.77 KiB; 10,800 is 10.55 KiB.
        assert_eq!(back.min, 9 * 1024);
        assert_eq!(back.max, 10 * 1024);
        assert_eq!(back.last, 10 * 1024);
        assert_eq!(back.mean, 11 * 1024);
        assert_eq!(back.t_ms, 1_750_000_000_123, "time is kept to the ms");
    }

    #[test]
    fn figures_past_4_tib_saturate_instead_of_wrapping() {
        let back = stored(point(u64::MAX, u64::MAX, u64::MAX, u64::MAX));
        assert_eq!(back.max, u64::from(u32::MAX) * 1024);
        assert_eq!(back.min, u64::from(u32::MAX) * 1024);
    }

    #[test]
    fn encodes_as_the_api_points_so_older_snapshots_load() {
        let mut old = Ring::new(8);
        let mut new = History::new(8);
        for i in 0..10u64 {
            let p = point(i << 20, (i + 1) << 20, i << 20, i << 20);
            old.push(p);
            new.push(p);
        }
        let old_bytes = postcard::to_allocvec(&old).expect("encodes");
        assert_eq!(postcard::to_allocvec(&new).expect("encodes"), old_bytes);
        let loaded: History = postcard::from_bytes(&old_bytes).expect("decodes");
        assert_eq!(loaded, new);
        assert_eq!(loaded.len(), 8);
    }
}
