//! A lock-free log-linear latency histogram.
//!
//! Many agents record into one histogram at once, so recording is one
//! atomic add on a fixed array: no lock, no allocation, bounded memory
//! however long the run. Values are microseconds. Below [`SUB_BUCKETS`] µs
//! every value has its own bucket; above, each power of two is split into
//! [`SUB_BUCKETS`] equal buckets, so a bucket is at most 1/128 of its lower
//! bound wide and the midpoint a percentile reports is within 0.4 % of any
//! value in it (the HdrHistogram layout, with 7 significant bits).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Sub-buckets per power of two (7 significant bits).
const SUB_BITS: u32 = 7;
const SUB_BUCKETS: u64 = 1 << SUB_BITS;
/// Largest exponent tracked: values from 2^40 µs (about 12 days) share the top bucket.
const MAX_EXP: u32 = 40;
const BUCKETS: usize = (SUB_BUCKETS + (MAX_EXP - SUB_BITS + 1) as u64 * SUB_BUCKETS) as usize;

/// Bucket index of a value in µs.
fn bucket(us: u64) -> usize {
    if us < SUB_BUCKETS {
        return us as usize;
    }
    let exp = (63 - us.leading_zeros()).min(MAX_EXP);
    if exp == MAX_EXP && us >= 1 << (MAX_EXP + 1) {
        return BUCKETS - 1;
    }
    let sub = (us >> (exp - SUB_BITS)) & (SUB_BUCKETS - 1);
    (SUB_BUCKETS + u64::from(exp - SUB_BITS) * SUB_BUCKETS + sub) as usize
}

/// Lowest value (µs) of a bucket and its width.
fn bucket_range(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB_BUCKETS {
        return (i, 1);
    }
    let exp = (i - SUB_BUCKETS) / SUB_BUCKETS + u64::from(SUB_BITS);
    let sub = (i - SUB_BUCKETS) % SUB_BUCKETS;
    let width = 1u64 << (exp - u64::from(SUB_BITS));
    ((1 << exp) + sub * width, width)
}

/// The shared, concurrently recorded histogram.
#[derive(Debug)]
pub struct Histogram {
    counts: Box<[AtomicU64]>,
    min_us: AtomicU64,
    max_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            min_us: AtomicU64::new(u64::MAX),
            max_us: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one latency.
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.counts[bucket(us)].fetch_add(1, Relaxed);
        self.min_us.fetch_min(us, Relaxed);
        self.max_us.fetch_max(us, Relaxed);
    }

    /// A copy of the counts so far.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            counts: self.counts.iter().map(|c| c.load(Relaxed)).collect(),
            min_us: self.min_us.load(Relaxed),
            max_us: self.max_us.load(Relaxed),
        }
    }

    /// The counts so far, leaving the histogram empty (for per-interval figures).
    pub fn take(&self) -> Snapshot {
        Snapshot {
            counts: self.counts.iter().map(|c| c.swap(0, Relaxed)).collect(),
            min_us: self.min_us.swap(u64::MAX, Relaxed),
            max_us: self.max_us.swap(0, Relaxed),
        }
    }
}

/// A histogram's counts at one moment, for percentiles.
#[derive(Debug, Clone)]
pub struct Snapshot {
    counts: Vec<u64>,
    min_us: u64,
    max_us: u64,
}

impl Snapshot {
    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The largest value recorded, exact; `None` when empty.
    pub fn max(&self) -> Option<Duration> {
        (self.count() > 0).then(|| Duration::from_micros(self.max_us))
    }

    /// The `q`-quantile (0 < q <= 1) by the nearest-rank method: the smallest
    /// value with at least `q` of all values at or below it, to within 0.4 %.
    /// `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, width) = bucket_range(i);
                // The bucket's midpoint, within the exact extremes.
                let mid = low + (width - 1) / 2;
                let v = mid.clamp(self.min_us.min(self.max_us), self.max_us);
                return Some(Duration::from_micros(v));
            }
        }
        self.max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    #[test]
    fn buckets_cover_values_and_stay_narrow() {
        for us in (0..5_000).chain([1 << 20, (1 << 33) + 12_345, (1 << 40) - 1]) {
            let (low, width) = bucket_range(bucket(us));
            assert!(low <= us && us < low + width, "{us} in [{low}, +{width})");
            assert!(
                width == 1 || width * 128 <= low,
                "{us}: width {width} too wide"
            );
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_match_a_sorted_vector_within_one_percent() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..20 {
            let h = Histogram::default();
            let n = 1 + (next() % 20_000) as usize;
            // Log-uniform-ish latencies from 1 µs to about 30 s, plus a few ties.
            let mut values: Vec<u64> = (0..n)
                .map(|_| {
                    let exp = next() % 25;
                    (1 << exp) + next() % (1 << exp)
                })
                .collect();
            for &v in &values {
                h.record(Duration::from_micros(v));
            }
            values.sort_unstable();
            let s = h.snapshot();
            assert_eq!(s.count(), n as u64);
            for q in [0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0] {
                let exact = nearest_rank(&values, q) as f64;
                let got = s.quantile(q).unwrap().as_micros() as f64;
                assert!(
                    (got - exact).abs() <= exact * 0.01,
                    "round {round}, n {n}, q {q}: {got} vs {exact}"
                );
            }
            assert_eq!(s.max().unwrap().as_micros() as u64, *values.last().unwrap());
        }
    }

    #[test]
    fn empty_has_no_percentiles_and_take_resets() {
        let h = Histogram::default();
        assert_eq!(h.snapshot().quantile(0.5), None);
        assert_eq!(h.snapshot().max(), None);
        h.record(Duration::from_millis(3));
        let s = h.take();
        assert_eq!(s.count(), 1);
        assert_eq!(s.quantile(0.99), Some(Duration::from_millis(3)));
        assert_eq!(h.snapshot().count(), 0);
    }
}
