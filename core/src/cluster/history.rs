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
//! The windows are kept in chunks of [`CHUNK`] behind reference counts. A
//! snapshot reads a copy-on-write clone of the state while pushes go on;
//! the first push to a GPU after the clone then copies only the newest,
//! partly filled chunk (1 KiB), not the whole history (24 KiB at
//! the default size). Under full ingest every GPU is pushed to while a
//! snapshot is written, so whole-history copies doubled a replica's memory
//! during every snapshot. Full chunks are never written again; the oldest is
//! dropped once all of its windows have been forgotten. A full history of
//! the default size spans 25 or 26 chunks: 1,050 or 1,092 slots for 1,024
//! windows.
//!
//! The encoding is a window in bytes ([`EncodedPoint`], field for field the
//! layout snapshots had before the history was kept in KiB), so a snapshot
//! written before this change loads (its figures rounded as above). It is
//! the core's own type: a field added to the API's [`HistoryPoint`], which
//! reads return, leaves snapshots alone.

use std::collections::VecDeque;
use std::sync::Arc;

use gpumon_proto::api::HistoryPoint;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const KIB: u64 = 1024;

/// One window as snapshots encode it: in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct EncodedPoint {
    t_ms: u64,
    min: u64,
    max: u64,
    last: u64,
    mean: u64,
}

impl From<EncodedPoint> for StoredPoint {
    fn from(p: EncodedPoint) -> Self {
        HistoryPoint {
            t_ms: p.t_ms,
            min: p.min,
            max: p.max,
            last: p.last,
            mean: p.mean,
        }
        .into()
    }
}

impl From<StoredPoint> for EncodedPoint {
    fn from(p: StoredPoint) -> Self {
        let p = HistoryPoint::from(p);
        Self {
            t_ms: p.t_ms,
            min: p.min,
            max: p.max,
            last: p.last,
            mean: p.mean,
        }
    }
}

/// One window as the view stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "EncodedPoint", into = "EncodedPoint")]
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

/// Windows per chunk (fewer when the history holds fewer). With the
/// reference counts in front, a chunk is one allocation of exactly 1 KiB,
/// a size class of common allocators: 64 windows would take 1,552 bytes,
/// which mimalloc serves from its 1,792-byte class (11 KiB more per GPU).
pub const CHUNK: usize = 42;

/// At most `cap` windows of one memory series, oldest first.
#[derive(Debug, Clone)]
pub struct History {
    cap: usize,
    /// Windows of the oldest chunk already forgotten.
    head: usize,
    len: usize,
    /// [`Self::chunk_len`] slots each; the windows held are slots
    /// `head..head + len` of them all, in order. One allocation per chunk.
    chunks: VecDeque<Arc<[StoredPoint]>>,
}

impl History {
    /// An empty history of at most `cap` windows (at least one).
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        Self {
            cap,
            head: 0,
            len: 0,
            chunks: VecDeque::new(),
        }
    }

    /// Windows per chunk.
    fn chunk_len(&self) -> usize {
        self.cap.min(CHUNK)
    }

    /// Appends a window, forgetting the oldest when full.
    pub fn push(&mut self, point: HistoryPoint) {
        let point = StoredPoint::from(point);
        let (at, per) = (self.head + self.len, self.chunk_len());
        match self.chunks.get_mut(at / per) {
            Some(newest) => Arc::make_mut(newest)[at % per] = point,
            None => self
                .chunks
                .push_back(std::iter::repeat_n(point, per).collect()),
        }
        self.len += 1;
        if self.len > self.cap {
            self.len -= 1;
            self.head += 1;
            if self.head == per {
                self.chunks.pop_front();
                self.head = 0;
            }
        }
    }

    /// The windows, oldest first, in bytes (KiB multiples).
    pub fn iter(&self) -> Points<'_> {
        Points {
            history: self,
            front: 0,
            back: self.len,
        }
    }

    /// Number of windows held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `i`th window held, oldest first (`i < len`).
    fn stored(&self, i: usize) -> StoredPoint {
        let (at, per) = (self.head + i, self.chunk_len());
        self.chunks[at / per][at % per]
    }

    /// Chunks `self` and `other` still share (not copied apart since one
    /// was cloned from the other).
    #[cfg(test)]
    fn chunks_shared_with(&self, other: &Self) -> usize {
        self.chunks
            .iter()
            .filter(|c| other.chunks.iter().any(|o| Arc::ptr_eq(c, o)))
            .count()
    }
}

/// Equal when they hold the same windows and bound; how the windows are
/// chunked does not matter.
impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        self.cap == other.cap && self.len == other.len && self.iter().eq(other.iter())
    }
}

/// The windows of a [`History`], oldest first.
#[derive(Debug, Clone)]
pub struct Points<'a> {
    history: &'a History,
    front: usize,
    back: usize,
}

impl Iterator for Points<'_> {
    type Item = HistoryPoint;

    fn next(&mut self) -> Option<HistoryPoint> {
        (self.front < self.back).then(|| {
            self.front += 1;
            self.history.stored(self.front - 1).into()
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Points<'_> {
    fn next_back(&mut self) -> Option<HistoryPoint> {
        (self.front < self.back).then(|| {
            self.back -= 1;
            self.history.stored(self.back).into()
        })
    }
}

impl ExactSizeIterator for Points<'_> {}

/// Encoded as the bounded ring it used to be: `{cap, items}`, the items as
/// the API's points.
impl Serialize for History {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        struct Items<'a>(&'a History);
        impl Serialize for Items<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq(self.0.iter())
            }
        }
        let mut ring = serializer.serialize_struct("Ring", 2)?;
        ring.serialize_field("cap", &self.cap)?;
        ring.serialize_field("items", &Items(self))?;
        ring.end()
    }
}

impl<'de> Deserialize<'de> for History {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename = "Ring")]
        struct Encoded {
            cap: usize,
            items: Vec<HistoryPoint>,
        }
        let encoded = Encoded::deserialize(deserializer)?;
        let mut history = History::new(encoded.cap);
        for point in encoded.items {
            history.push(point);
        }
        Ok(history)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Ring;
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
    fn a_window_takes_24_bytes_and_a_chunk_1_kib() {
        assert_eq!(std::mem::size_of::<StoredPoint>(), 24);
        let counts = 2 * std::mem::size_of::<usize>();
        assert_eq!(CHUNK * std::mem::size_of::<StoredPoint>() + counts, 1024);
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

    fn kib_point(i: u64) -> HistoryPoint {
        let kib = 1024;
        point(i * kib, (i + 3) * kib, (i + 1) * kib, (i + 2) * kib)
    }

    #[test]
    fn keeps_the_newest_cap_windows_in_order_across_chunk_edges() {
        for cap in [1, 2, 3, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, 1024] {
            let mut history = History::new(cap);
            let mut model = Ring::new(cap);
            for i in 0..(3 * cap as u64 + 2 * CHUNK as u64 + 7) {
                let mut p = kib_point(i);
                p.t_ms = i;
                history.push(p);
                model.push(p);
                assert_eq!(history.len(), model.len(), "cap {cap} after {i}");
            }
            assert!(history.iter().eq(model.iter().copied()), "cap {cap}");
            assert!(
                history.iter().rev().eq(model.iter().rev().copied()),
                "cap {cap}, newest first"
            );
            assert_eq!(
                postcard::to_allocvec(&history).unwrap(),
                postcard::to_allocvec(&model).unwrap(),
                "cap {cap}: encoded as the ring"
            );
            assert!(
                history.chunks.len() <= cap.div_ceil(history.chunk_len()) + 1,
                "cap {cap}: forgotten chunks are dropped"
            );
        }
    }

    #[test]
    fn a_push_after_a_clone_copies_only_the_newest_chunk() {
        let mut live = History::new(1024);
        for i in 0..1000 {
            live.push(kib_point(i));
        }
        let copy = live.clone();
        let chunks = live.chunks.len();
        assert_eq!(live.chunks_shared_with(&copy), chunks);

        live.push(kib_point(1000));
        assert_eq!(live.chunks_shared_with(&copy), chunks - 1);
        for i in 1001..1100 {
            live.push(kib_point(i));
        }
        assert!(live.chunks_shared_with(&copy) >= chunks - 3);
        assert_eq!(copy.len(), 1000, "the clone keeps what it held");
        assert!(copy.iter().eq((0..1000).map(kib_point)));
        assert!(live.iter().eq((1100 - 1024..1100).map(kib_point)));
    }

    #[test]
    fn loads_items_past_its_bound_keeping_the_newest() {
        let points: Vec<HistoryPoint> = (0..10).map(kib_point).collect();
        let bytes = postcard::to_allocvec(&(4usize, &points)).unwrap();
        let loaded: History = postcard::from_bytes(&bytes).unwrap();
        assert!(loaded.iter().eq((6..10).map(kib_point)));
    }
}
