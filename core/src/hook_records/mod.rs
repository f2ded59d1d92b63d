//! What the coordinator keeps of the in-process hooks' reports, beside the
//! engine: named allocator snapshots per job, and counts of what was applied
//! or skipped. [`HookData::apply`] feeds each valid record to the engine
//! (allocator statistics, steps, markers) and keeps snapshots; like the rest
//! of the state machine it is deterministic and bounded.

mod memory_snapshots;
mod snapshot_diff;
mod steps;
mod validate;

use gpumon_proto::HookRecord;
use serde::{Deserialize, Serialize};

pub use memory_snapshots::{
    MemorySnapshotBook, MemorySnapshotSet, SnapshotBounds, MAX_MEMORY_SNAPSHOTS_PER_JOB,
    MAX_MEMORY_SNAPSHOT_ENTRIES, MAX_MEMORY_SNAPSHOT_JOBS,
};
pub use snapshot_diff::{compare_snapshots, named_snapshot, stats_delta};
pub use steps::{RankSteps, SectionTime, StepBounds, StepTimes, MAX_SECTIONS_PER_RANK};
pub use validate::{check_record, InvalidRecord};

use crate::engine::straggler::Comms;
use crate::engine::Engine;
use crate::records::from_window::alloc_ref;

/// Counts of hook records and acknowledgements the state applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookCounters {
    /// Records applied.
    pub records_applied: u64,
    /// Records skipped as invalid.
    pub records_skipped: u64,
}

/// The hook data kept by the state machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HookData {
    snapshots: MemorySnapshotBook,
    counters: HookCounters,
}

impl HookData {
    /// Named snapshots by job.
    pub fn snapshots(&self) -> &MemorySnapshotBook {
        &self.snapshots
    }

    /// Forgets the named snapshots of the jobs `keep` says no to.
    pub fn retain_jobs(&mut self, keep: impl FnMut(&str) -> bool) {
        self.snapshots.retain_jobs(keep);
    }

    /// What was applied and skipped.
    pub fn counters(&self) -> HookCounters {
        self.counters
    }

    /// Applies a pushed batch's hook records, oldest first.
    pub fn apply(&mut self, engine: &mut Engine, records: &[HookRecord]) {
        let cfg = engine.config();
        let bounds = SnapshotBounds::for_limits(cfg.max_jobs, cfg.max_ranks_per_job);
        for record in records {
            if check_record(record).is_err() {
                self.counters.records_skipped += 1;
                continue;
            }
            self.counters.records_applied += 1;
            let t = record.t_ms() as f64 / 1000.0;
            match record {
                // The engine reads a hook's allocator statistics as their
                // trace record: one mapping of them, the one the stream writes.
                HookRecord::Alloc(a) => engine.observe_alloc(&alloc_ref(a)),
                HookRecord::Step(s) => engine.observe_waited_step(
                    t,
                    &s.job,
                    s.rank,
                    s.step,
                    s.duration_ms,
                    s.sections.iter().map(|(name, ms)| (name.as_str(), *ms)),
                    s.group,
                    Comms {
                        waits: &s.waits,
                        collectives: &s.collectives,
                    },
                ),
                HookRecord::Event(e) => match &e.snapshot {
                    Some(stats) => {
                        if !self
                            .snapshots
                            .record(bounds, t, &e.job, e.rank, &e.name, stats)
                        {
                            // Refused at the book's bound: skipped, not applied.
                            self.counters.records_applied -= 1;
                            self.counters.records_skipped += 1;
                        }
                    }
                    None => engine.observe_event(t, &e.job, e.rank, &e.name),
                },
                // Judged beside the engine (`engine::hang`).
                HookRecord::Stall(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;
    use gpumon_proto::{AllocRecord, AllocStats, EventRecord, StepRecord};

    fn alloc(t_ms: u64, allocated: u64, reserved: u64) -> HookRecord {
        HookRecord::Alloc(AllocRecord {
            limit: None,
            t_ms,
            job: "j".into(),
            rank: 1,
            stats: AllocStats {
                allocated,
                reserved,
                ..AllocStats::default()
            },
        })
    }

    #[test]
    fn feeds_the_engine_keeps_snapshots_and_skips_bad_records() {
        let mut engine = Engine::new(EngineConfig::default());
        let mut hook = HookData::default();
        let records = vec![
            alloc(1_000, 10, 20),
            alloc(2_000, 30, 20),
            HookRecord::Step(StepRecord {
                group: None,
                waits: Default::default(),
                collectives: Vec::new(),
                t_ms: 2_500,
                job: "j".into(),
                rank: 1,
                step: 1,
                duration_ms: 100.0,
                sections: vec![("forward".into(), 40.0)],
            }),
            HookRecord::Event(EventRecord {
                t_ms: 3_000,
                job: "j".into(),
                rank: 1,
                name: "eval start".into(),
                detail: None,
                snapshot: None,
            }),
            HookRecord::Event(EventRecord {
                t_ms: 3_000,
                job: "j".into(),
                rank: 1,
                name: "before".into(),
                detail: None,
                snapshot: Some(AllocStats {
                    allocated: 5,
                    reserved: 8,
                    ..AllocStats::default()
                }),
            }),
        ];
        hook.apply(&mut engine, &records);
        assert_eq!(hook.counters().records_applied, 4);
        assert_eq!(hook.counters().records_skipped, 1, "allocated > reserved");
        let job = engine
            .job("j")
            .expect("the job exists from hook data alone");
        assert_eq!(job.ranks[0].allocated_bytes, Some(10));
        assert_eq!(job.ranks[0].steps, 1);
        assert_eq!(job.markers.len(), 1);
        assert_eq!(job.markers[0].name, "eval start");
        let set = hook.snapshots().get("j", "before").unwrap();
        assert_eq!(set.ranks[&1].1.reserved, 8);
    }
}
