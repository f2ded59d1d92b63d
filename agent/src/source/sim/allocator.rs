//! A model of PyTorch's CUDA caching allocator, coarse enough to be cheap and
//! faithful enough that NVML's view of a simulated rank looks real.
//!
//! NVML never sees what a training process *allocates*; it sees what the
//! caching allocator *reserved* from the driver (plus the CUDA context). The
//! allocator keeps freed blocks cached instead of returning them, so reserved
//! memory is a staircase that covers the high-water mark of allocated memory
//! and never comes down on its own, while allocated memory saw-tooths beneath
//! it every step (`docs/detection.md`, "Facts it rests on"). This module
//! keeps that staircase:
//!
//! - a request that no cached block can serve makes a new segment, sized the
//!   way PyTorch sizes them (`c10/cuda/CUDACachingAllocator.cpp`): 2 MiB for
//!   requests up to 1 MiB, 20 MiB below 10 MiB, the request rounded up to
//!   2 MiB above that;
//! - memory can be *stranded*: reserved, free, but split into pieces no later
//!   request fits (fragmentation), so it does not count towards covering
//!   allocations;
//! - when a new segment would not fit on the device, the allocator frees every
//!   cached block and retries (PyTorch's `num_alloc_retries`); if even that
//!   does not cover what is in use, the process is out of memory.

/// Allocation granularity of large segments, bytes.
const ROUND_LARGE: u64 = 2 << 20;
/// Segment size for small requests (up to [`SMALL_REQUEST`]), bytes.
const SMALL_SEGMENT: u64 = 2 << 20;
/// Largest request served from the small pool, bytes.
const SMALL_REQUEST: u64 = 1 << 20;
/// Segment size for medium requests (below [`MEDIUM_REQUEST`]), bytes.
const MEDIUM_SEGMENT: u64 = 20 << 20;
/// Smallest request that gets a segment of its own size, bytes.
const MEDIUM_REQUEST: u64 = 10 << 20;

/// Why the allocator could not serve a request: the process dies of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OutOfMemory;

/// One process's caching allocator, in bytes.
#[derive(Debug, Clone)]
pub(crate) struct CachingAllocator {
    /// Bytes held in segments obtained from the driver (`cudaMalloc`).
    reserved: u64,
    /// Part of `reserved` that is free but too fragmented to serve requests.
    stranded: u64,
    /// The most the process may reserve: device capacity left after the
    /// driver and the CUDA context.
    limit: u64,
}

impl CachingAllocator {
    /// An allocator that already holds `initial` bytes (weights and optimizer
    /// state, loaded before the first step), rounded up to segment granularity
    /// and capped at `limit`.
    pub(crate) fn new(initial: u64, limit: u64) -> Self {
        Self {
            reserved: round_up(initial, ROUND_LARGE).min(limit),
            stranded: 0,
            limit,
        }
    }

    /// Bytes reserved from the driver: what NVML counts for the process,
    /// less its CUDA context.
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Reserved bytes that are free but too fragmented to serve a request:
    /// what PyTorch reports as `inactive_split_bytes`.
    pub(crate) fn stranded(&self) -> u64 {
        self.stranded
    }

    /// Makes room for `in_use` bytes allocated at once, the missing part
    /// requested in blocks of `request` bytes. Grows by whole segments; when
    /// growing would pass the limit, frees the cache and retries; fails when
    /// `in_use` itself does not fit.
    pub(crate) fn cover(&mut self, in_use: u64, request: u64) -> Result<(), OutOfMemory> {
        let usable = self.reserved - self.stranded;
        if in_use <= usable {
            return Ok(());
        }
        let segment = segment_size(request);
        let grow = round_up(in_use - usable, segment);
        match self.reserved.checked_add(grow) {
            Some(r) if r <= self.limit => {
                self.reserved = r;
                Ok(())
            }
            _ => self.free_cache_and_retry(in_use),
        }
    }

    /// Reserves a segment for an odd-sized `request` that no cached block
    /// fits and, once the request is freed, leaves it stranded: reserved grows
    /// while allocated does not. `in_use` is what is allocated meanwhile.
    pub(crate) fn strand(&mut self, request: u64, in_use: u64) -> Result<(), OutOfMemory> {
        let segment = round_up(request, segment_size(request));
        match self.reserved.checked_add(segment) {
            Some(r) if r <= self.limit => {
                self.reserved = r;
                self.stranded = self.stranded.saturating_add(segment);
                Ok(())
            }
            _ => self.free_cache_and_retry(in_use),
        }
    }

    /// PyTorch's retry after a failed `cudaMalloc`: release every free cached
    /// block (`emptyCache`), keep the segments that hold live blocks, then
    /// allocate what is missing.
    fn free_cache_and_retry(&mut self, in_use: u64) -> Result<(), OutOfMemory> {
        self.stranded = 0;
        self.reserved = round_up(in_use, ROUND_LARGE);
        if self.reserved <= self.limit {
            Ok(())
        } else {
            self.reserved = self.limit;
            Err(OutOfMemory)
        }
    }
}

/// The segment PyTorch's caching allocator creates for a request of
/// `request` bytes that no cached block can serve.
pub(crate) fn segment_size(request: u64) -> u64 {
    if request <= SMALL_REQUEST {
        SMALL_SEGMENT
    } else if request < MEDIUM_REQUEST {
        MEDIUM_SEGMENT
    } else {
        round_up(request, ROUND_LARGE)
    }
}

/// `x` rounded up to a multiple of `to` (`to` > 0), saturating.
pub(crate) fn round_up(x: u64, to: u64) -> u64 {
    match x % to {
        0 => x,
        r => x.saturating_add(to - r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn segments_are_sized_like_pytorchs() {
        assert_eq!(segment_size(512), 2 * MIB);
        assert_eq!(segment_size(MIB), 2 * MIB);
        assert_eq!(segment_size(MIB + 1), 20 * MIB);
        assert_eq!(segment_size(10 * MIB), 10 * MIB);
        assert_eq!(segment_size(511 * MIB + 1), 512 * MIB);
        assert_eq!(round_up(u64::MAX - 1, 2 * MIB), u64::MAX);
    }

    #[test]
    fn reserved_staircases_over_the_high_water_and_never_shrinks() {
        let mut a = CachingAllocator::new(30 * GIB + 1, 70 * GIB);
        assert_eq!(a.reserved(), 30 * GIB + 2 * MIB);
        let mut last = a.reserved();
        for (i, in_use) in [31, 40, 32, 45, 30, 44].into_iter().enumerate() {
            a.cover(in_use * GIB, 512 * MIB).unwrap();
            assert!(a.reserved() >= in_use * GIB, "step {i}");
            assert!(a.reserved() >= last, "step {i}");
            // Whole 512 MiB segments on top of the initial reservation.
            assert_eq!((a.reserved() - 30 * GIB - 2 * MIB) % (512 * MIB), 0);
            last = a.reserved();
        }
        assert!(a.reserved() < 45 * GIB + 512 * MIB);
    }

    #[test]
    fn stranded_memory_grows_reserved_but_serves_nothing() {
        let mut a = CachingAllocator::new(10 * GIB, 70 * GIB);
        a.strand(300 * MIB, 10 * GIB).unwrap();
        assert_eq!(a.reserved(), 10 * GIB + 300 * MIB);
        assert_eq!(a.stranded(), 300 * MIB);
        // 10 GiB + 100 MiB in use needs a new segment: the stranded 300 MiB
        // do not serve it.
        a.cover(10 * GIB + 100 * MIB, 512 * MIB).unwrap();
        assert_eq!(a.reserved(), 10 * GIB + 812 * MIB);
    }

    #[test]
    fn near_the_limit_the_cache_is_freed_then_memory_runs_out() {
        let mut a = CachingAllocator::new(10 * GIB, 12 * GIB);
        for _ in 0..6 {
            a.strand(300 * MIB, 10 * GIB).unwrap();
        }
        // The seventh stranded segment does not fit: cache freed, retried.
        a.strand(300 * MIB, 10 * GIB).unwrap();
        assert_eq!(a.reserved(), 10 * GIB);
        assert_eq!(a.stranded(), 0);
        a.cover(11 * GIB + 1, 2 * GIB).unwrap();
        assert!(a.reserved() <= 12 * GIB);
        assert_eq!(a.cover(12 * GIB + 1, 512 * MIB), Err(OutOfMemory));
        assert!(a.reserved() <= 12 * GIB);
    }
}
