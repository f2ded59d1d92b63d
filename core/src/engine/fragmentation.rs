//! Fragmentation: the caching allocator holds more and more memory that it
//! cannot reuse. Judged from the in-process hook's allocator statistics.
//!
//! Evidence, either of:
//! - `reserved` rising (Mann–Kendall p at most `p_max`, slope interval above
//!   zero, rise over the window at least `min_rise_frac` of capacity) while
//!   the peaks of `allocated` rise less than `flat_share` as fast *and* the
//!   gap between the two (the cache) grows significantly too: a leak with a
//!   noisy `allocated` lifts `reserved` but not the gap; when the hook
//!   reports `num_alloc_retries`, they must have grown over the window too
//!   (a cache that grows without a single failed allocation is a leak in
//!   disguise or plain caching, not fragmentation);
//! - `num_alloc_retries` climbing in at least `retry_windows` consecutive
//!   windows while the cached share `1 - allocated / reserved` is at least
//!   `min_cached_frac` (each retry is a cache flush forced by a failed
//!   allocation: the segments are there but too fragmented to use).
//!
//! Reclaimable bytes are `reserved - allocated - inactive_split`, what
//! `torch.cuda.empty_cache()` can hand back (split blocks cannot be freed).

use serde::{Deserialize, Serialize};

use super::trend::Trend;

/// Tuning of the fragmentation detector.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FragmentationParams {
    /// Windows of evidence needed for the trend test.
    pub min_points: usize,
    /// Largest Mann–Kendall p-value of `reserved`'s rise.
    pub p_max: f64,
    /// `allocated` counts as flat below this share of `reserved`'s rate.
    pub flat_share: f64,
    /// Smallest rise of `reserved` over the window, fraction of capacity.
    pub min_rise_frac: f64,
    /// Consecutive windows with new allocation retries that count as evidence.
    pub retry_windows: u32,
    /// Smallest cached share of `reserved` for the retry evidence.
    pub min_cached_frac: f64,
    /// Consecutive positive evaluations before alerting.
    pub raise_after: u32,
    /// Consecutive negative evaluations before clearing.
    pub clear_after: u32,
}

impl Default for FragmentationParams {
    fn default() -> Self {
        Self {
            min_points: 6,
            p_max: 0.001,
            flat_share: 0.25,
            min_rise_frac: 0.01,
            retry_windows: 3,
            min_cached_frac: 0.05,
            raise_after: 2,
            clear_after: 6,
        }
    }
}

/// What the detector sees of one rank's allocator.
#[derive(Debug, Clone, Copy)]
pub struct AllocatorView<'a> {
    /// Trend of `reserved`'s window peaks.
    pub reserved: Option<&'a Trend>,
    /// Trend of `allocated`'s window peaks.
    pub allocated: Option<&'a Trend>,
    /// Trend of the gap between `reserved`'s and `allocated`'s window peaks.
    pub gap: Option<&'a Trend>,
    /// Whether `num_alloc_retries` is reported, and if so whether it grew
    /// over the trend window.
    pub retries_grew: Option<bool>,
    /// Consecutive windows in which `num_alloc_retries` grew.
    pub retry_streak: u32,
    /// Latest `reserved`, bytes.
    pub reserved_bytes: f64,
    /// Latest `allocated`, bytes.
    pub allocated_bytes: f64,
    /// Latest `inactive_split`, bytes (0 when not reported).
    pub inactive_split_bytes: f64,
}

impl AllocatorView<'_> {
    /// Bytes `empty_cache()` could release.
    pub fn reclaimable_bytes(&self) -> f64 {
        (self.reserved_bytes - self.allocated_bytes - self.inactive_split_bytes).max(0.0)
    }
}

/// True when the allocator shows fragmentation.
pub fn is_fragmenting(v: &AllocatorView<'_>, capacity: f64, p: &FragmentationParams) -> bool {
    let growing_cache = v.reserved.is_some_and(|r| {
        let alloc_flat = v
            .allocated
            .is_none_or(|a| a.slope <= p.flat_share * r.slope);
        r.n >= p.min_points
            && r.p_up <= p.p_max
            && r.slope_low > 0.0
            && r.slope * r.span_s >= p.min_rise_frac * capacity
            && alloc_flat
            && v.gap
                .is_some_and(|g| g.p_up <= p.p_max && g.slope_low > 0.0 && g.n >= p.min_points)
            && v.retries_grew != Some(false)
    });
    let cached_frac = if v.reserved_bytes > 0.0 {
        1.0 - v.allocated_bytes / v.reserved_bytes
    } else {
        0.0
    };
    let retrying = v.retry_streak >= p.retry_windows && cached_frac >= p.min_cached_frac;
    growing_cache || retrying
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::trend::{fit, TrendScratch};

    const GIB: f64 = (1u64 << 30) as f64;

    fn trend(f: impl Fn(f64) -> f64) -> Trend {
        let pts: Vec<_> = (0..12)
            .map(|i| (i as f64 * 10.0, f(i as f64 * 10.0)))
            .collect();
        fit(&pts, 1.96, &mut TrendScratch::default()).unwrap()
    }

    fn view<'a>(reserved: &'a Trend, allocated: &'a Trend, retry_streak: u32) -> AllocatorView<'a> {
        AllocatorView {
            reserved: Some(reserved),
            allocated: Some(allocated),
            gap: Some(reserved),
            retries_grew: Some(retry_streak > 0),
            retry_streak,
            reserved_bytes: 30.0 * GIB,
            allocated_bytes: 24.0 * GIB,
            inactive_split_bytes: GIB,
        }
    }

    #[test]
    fn reserved_growing_over_flat_allocated_fragments() {
        let r = trend(|t| 28.0 * GIB + 50e6 * t);
        let a = trend(|_| 24.0 * GIB);
        let p = FragmentationParams::default();
        assert!(is_fragmenting(&view(&r, &a, 1), 40.0 * GIB, &p));
        assert_eq!(view(&r, &a, 0).reclaimable_bytes(), 5.0 * GIB);
        let unknown_retries = AllocatorView {
            retries_grew: None,
            ..view(&r, &a, 0)
        };
        assert!(is_fragmenting(&unknown_retries, 40.0 * GIB, &p));
        assert!(
            !is_fragmenting(&view(&r, &a, 0), 40.0 * GIB, &p),
            "no retry at all"
        );
    }

    #[test]
    fn reserved_growing_with_allocated_is_growth_not_fragmentation() {
        let r = trend(|t| 28.0 * GIB + 50e6 * t);
        let a = trend(|t| 24.0 * GIB + 50e6 * t);
        assert!(!is_fragmenting(
            &view(&r, &a, 0),
            40.0 * GIB,
            &FragmentationParams::default()
        ));
    }

    #[test]
    fn climbing_retries_with_a_large_cache_fragment() {
        let flat = trend(|_| 28.0 * GIB);
        let p = FragmentationParams::default();
        assert!(!is_fragmenting(&view(&flat, &flat, 2), 40.0 * GIB, &p));
        assert!(is_fragmenting(&view(&flat, &flat, 3), 40.0 * GIB, &p));
    }
}
