//! What gpumon tells a user to do about memory, and when: each judgement
//! behind a recommendation, with its one threshold, shared by the engine's
//! alerts, the release planner and the profile report, so that "cache worth
//! releasing" or "a gap worth `expandable_segments`" means the same thing
//! wherever it is said.

/// Cache the caching allocator could give back now: what it reserved, less
/// what tensors hold, less the inactive split blocks it cannot return
/// (`torch.cuda.empty_cache()` frees whole unused segments only).
pub fn reclaimable_bytes(reserved: u64, allocated: u64, inactive_split: u64) -> u64 {
    reserved
        .saturating_sub(allocated)
        .saturating_sub(inactive_split)
}

/// An OOM alert advises releasing the cache when at least this share of
/// what the allocator reserved is reclaimable.
pub const RELEASE_ADVICE_SHARE: f64 = 0.10;

/// Whether `reclaimable` of `reserved` bytes is worth advising a release.
pub fn release_worth_advising(reclaimable: u64, reserved: u64) -> bool {
    reclaimable as f64 >= RELEASE_ADVICE_SHARE * reserved as f64
}

/// The report advises `expandable_segments` when, at peak, the allocator
/// held beyond its tensors at least this share of the GPU...
pub const CACHE_GAP_SHARE: f64 = 0.10;
/// ...and at least this many bytes.
pub const CACHE_GAP_MIN_BYTES: u64 = 1 << 30;

/// Whether a peak gap of `gap` bytes between reserved and allocated, on a
/// GPU of `total` bytes, is worth the allocator setting.
pub fn cache_gap_worth_a_setting(gap: u64, total: u64) -> bool {
    gap as f64 >= CACHE_GAP_SHARE * total as f64 && gap >= CACHE_GAP_MIN_BYTES
}

/// What to look for when memory leaks.
pub const LEAK_ADVICE: &str =
    "look for tensors kept across steps (losses, activations, caches held in Python lists)";

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn reclaimable_is_reserved_less_tensors_and_split_blocks_never_below_zero() {
        assert_eq!(reclaimable_bytes(10 * GIB, 6 * GIB, GIB), 3 * GIB);
        assert_eq!(reclaimable_bytes(GIB, 2 * GIB, 0), 0);
        assert_eq!(reclaimable_bytes(2 * GIB, GIB, 2 * GIB), 0);
    }

    #[test]
    fn a_tenth_of_the_reserved_is_worth_a_release_and_less_is_not() {
        assert!(release_worth_advising(GIB, 10 * GIB));
        assert!(!release_worth_advising(GIB - 1, 10 * GIB));
    }

    #[test]
    fn a_cache_gap_needs_a_tenth_of_the_gpu_and_a_gib() {
        assert!(cache_gap_worth_a_setting(8 * GIB, 80 * GIB));
        assert!(!cache_gap_worth_a_setting(8 * GIB - 1, 80 * GIB));
        assert!(!cache_gap_worth_a_setting(GIB - 1, 4 * GIB));
    }
}
