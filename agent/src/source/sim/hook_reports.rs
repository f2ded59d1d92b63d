//! What the in-process hook of a simulated rank would report: allocator
//! statistics at fixed points of every step, a step record with its section
//! times at the end of every step, a marker when warm-up is over, and the
//! allocator's out-of-memory error when the process dies of it.
//!
//! The real hook reads `torch.cuda.memory_stats()` every report interval; the
//! simulator reads its allocator model at three points of each step instead
//! (data loading, the end of forward, the end of backward), so every envelope
//! window of a step or more holds the step's trough and peak, whatever the
//! agent's sampling rate. Records are a function of the step and the point in
//! it, never of when the agent sampled: a jump and a walk to the same time
//! give the same records.
//!
//! `num_alloc_retries` is left out: the allocator model frees its cache only
//! at the device's limit, minutes into a fragmenting run, and a count that
//! stays 0 would tell the engine that a growing cache is plain caching, not
//! fragmentation (the engine then waits for retries; see
//! `gpumon_core::engine::fragmentation`).

use gpumon_proto::{AllocRecord, AllocStats, EventRecord, HookRecord, RankInfo, StepRecord};

/// Points of a step where the allocator is read, as fractions of the step:
/// data loading (activations freed), end of forward (their peak), end of
/// backward (gradients' share left).
pub(crate) const ALLOC_AT: [f64; 3] = [0.05, 0.5, 0.9];
/// Steps after which rank 0 marks the end of warm-up.
pub(crate) const WARMUP_STEPS: u64 = 5;
/// Name of the warm-up marker.
pub(crate) const WARMUP_MARKER: &str = "warmup done";
/// Every rank's named allocator snapshots (`gpumon.snapshot`), after the
/// step that ends with each: one at the end of warm-up, one a minute of
/// steps later, so a leak shows as growth between the two.
pub(crate) const SNAPSHOTS: [(u64, &str); 2] =
    [(WARMUP_STEPS, "warm"), (WARMUP_STEPS + 60, "warm+60")];
/// Name of the event a rank reports when its allocator runs out of memory.
pub(crate) const OOM_EVENT: &str = "OutOfMemoryError";

/// Where a rank's records go while it plays steps: the job's start time and
/// the records in the order they happened.
#[derive(Debug, Default)]
pub(crate) struct Tape {
    /// When step 0 started, ms since the Unix epoch.
    pub(crate) start_ms: u64,
    /// Records so far, oldest first.
    pub(crate) records: Vec<HookRecord>,
}

/// A rank's allocator as the hook reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AllocReading {
    /// Bytes in live tensors.
    pub(crate) allocated: u64,
    /// Bytes reserved from the driver.
    pub(crate) reserved: u64,
    /// Reserved but too fragmented to serve requests.
    pub(crate) stranded: u64,
    /// Highest `allocated` so far.
    pub(crate) peak_allocated: u64,
    /// Highest `reserved` so far.
    pub(crate) peak_reserved: u64,
    /// Out-of-memory errors raised.
    pub(crate) ooms: u64,
}

/// Offsets into a step of `step_ms` at which the allocator is read, ms.
pub(crate) fn alloc_offsets(step_ms: u64) -> [u64; 3] {
    ALLOC_AT.map(|f| (step_ms as f64 * f) as u64)
}

impl Tape {
    /// Appends an `alloc` record.
    pub(crate) fn alloc(&mut self, t_ms: u64, info: &RankInfo, a: AllocReading) {
        self.records.push(HookRecord::Alloc(AllocRecord {
            limit: None,
            t_ms,
            job: info.job.clone(),
            rank: info.rank,
            stats: AllocStats {
                allocated: a.allocated.min(a.reserved),
                reserved: a.reserved,
                active: None,
                inactive_split: Some(a.stranded.min(a.reserved)),
                peak_allocated: Some(a.peak_allocated),
                peak_reserved: Some(a.peak_reserved),
                alloc_retries: None,
                ooms: Some(a.ooms),
            },
        }));
    }

    /// Appends the record of step `step` (counted from 0 here, from 1 by the
    /// hook) that ended at `t_ms`.
    pub(crate) fn step(
        &mut self,
        t_ms: u64,
        info: &RankInfo,
        step: u64,
        duration_ms: f64,
        sections: Vec<(String, f64)>,
    ) {
        self.records.push(HookRecord::Step(StepRecord {
            group: None,
            waits: Default::default(),
            collectives: Vec::new(),
            t_ms,
            job: info.job.clone(),
            rank: info.rank,
            step: step + 1,
            duration_ms,
            sections,
        }));
    }

    /// Appends a named allocator snapshot.
    pub(crate) fn snapshot(&mut self, t_ms: u64, info: &RankInfo, name: &str, a: AllocReading) {
        self.alloc(t_ms, info, a);
        let Some(HookRecord::Alloc(read)) = self.records.pop() else {
            unreachable!("alloc appends an alloc record");
        };
        self.records.push(HookRecord::Event(EventRecord {
            t_ms,
            job: info.job.clone(),
            rank: info.rank,
            name: name.to_owned(),
            detail: None,
            snapshot: Some(read.stats),
        }));
    }

    /// Appends a marker.
    pub(crate) fn event(&mut self, t_ms: u64, info: &RankInfo, name: &str, detail: &str) {
        self.records.push(HookRecord::Event(EventRecord {
            t_ms,
            job: info.job.clone(),
            rank: info.rank,
            name: name.to_owned(),
            detail: Some(detail.to_owned()),
            snapshot: None,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_points_are_in_the_step_in_order() {
        for step_ms in [950, 1000, 1050] {
            let at = alloc_offsets(step_ms);
            assert!(at.windows(2).all(|w| w[0] < w[1]));
            assert!(at[2] < step_ms - 1, "before the step's end");
        }
    }

    #[test]
    fn alloc_records_never_say_allocated_above_reserved() {
        let info = RankInfo {
            job: "j".into(),
            rank: 3,
            local_rank: 3,
            world_size: 4,
            master_addr: None,
            master_port: None,
        };
        let mut tape = Tape::default();
        let reading = AllocReading {
            allocated: 10,
            reserved: 8,
            stranded: 9,
            peak_allocated: 10,
            peak_reserved: 8,
            ooms: 1,
        };
        tape.alloc(5, &info, reading);
        let HookRecord::Alloc(a) = &tape.records[0] else {
            panic!("{:?}", tape.records);
        };
        assert_eq!((a.t_ms, a.job.as_str(), a.rank), (5, "j", 3));
        assert_eq!((a.stats.allocated, a.stats.reserved), (8, 8));
        assert_eq!(a.stats.inactive_split, Some(8));
        assert_eq!(a.stats.ooms, Some(1));
    }
}
