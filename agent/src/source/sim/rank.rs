//! One simulated training process: its workload played through its caching
//! allocator over time, until it ends or dies of an out-of-memory error.
//!
//! The allocator has a history (reserved memory never comes down on its own),
//! so a rank keeps how far it has played its workload and advances it when a
//! later time is sampled. Going back in time changes nothing, which keeps
//! samples deterministic for any sequence of times: the state after a sequence
//! depends only on the latest time seen.

use gpumon_proto::RankInfo;

use super::allocator::{CachingAllocator, OutOfMemory};
use super::workload::Workload;

/// The most steps one sample plays through. A jump further ahead (a wall
/// clock far past `start_ms`) only plays the last ones: the staircase then
/// starts from the workload of that moment, which is what a late-started
/// agent would see anyway.
const MAX_CATCH_UP_STEPS: u64 = 20_000;

/// One rank of the simulated job.
#[derive(Debug, Clone)]
pub(crate) struct SimRank {
    /// Job and rank, as discovery would read them from the environment.
    pub(crate) info: RankInfo,
    /// Fake process id.
    pub(crate) pid: u32,
    /// CUDA context and kernels, bytes: NVML counts them on top of reserved.
    context_bytes: u64,
    /// What the process allocates.
    workload: Workload,
    /// Its caching allocator.
    allocator: CachingAllocator,
    /// Time since step 0 played so far, ms; `None` before the first sample.
    played_ms: Option<u64>,
    /// The step in which the process ran out of memory and died.
    died_at_step: Option<u64>,
}

impl SimRank {
    /// A rank about to start step 0 on a GPU where it may reserve at most
    /// `capacity_bytes`, its context included.
    pub(crate) fn new(
        info: RankInfo,
        pid: u32,
        context_bytes: u64,
        workload: Workload,
        capacity_bytes: u64,
    ) -> Self {
        let limit = capacity_bytes.saturating_sub(context_bytes);
        let allocator = CachingAllocator::new(workload.base_bytes(), limit);
        Self {
            info,
            pid,
            context_bytes,
            workload,
            allocator,
            played_ms: None,
            died_at_step: None,
        }
    }

    /// Whether the process is still running.
    pub(crate) fn alive(&self) -> bool {
        self.died_at_step.is_none()
    }

    /// Device memory the process holds, bytes (NVML's per-process `used`):
    /// reserved plus the CUDA context.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.allocator.reserved().saturating_add(self.context_bytes)
    }

    /// Bytes allocated by tensors `elapsed_ms` after step 0 began.
    #[cfg(test)]
    pub(crate) fn allocated_bytes(&self, elapsed_ms: u64) -> u64 {
        let step_ms = self.workload.step_ms();
        self.workload
            .allocated(elapsed_ms / step_ms, elapsed_ms % step_ms)
    }

    /// Plays the workload up to `elapsed_ms` after step 0 began: every
    /// allocation and stranded segment since the last call goes through the
    /// allocator. Earlier times than already played change nothing.
    pub(crate) fn advance(&mut self, elapsed_ms: u64) {
        if !self.alive() {
            return;
        }
        let step_ms = self.workload.step_ms();
        let mut from_ms = match self.played_ms {
            Some(played) if played >= elapsed_ms => return,
            Some(played) => played + 1,
            None => 0,
        };
        let last_step = elapsed_ms / step_ms;
        if last_step - from_ms / step_ms > MAX_CATCH_UP_STEPS {
            from_ms = (last_step - MAX_CATCH_UP_STEPS) * step_ms;
        }
        self.played_ms = Some(elapsed_ms);
        for step in from_ms / step_ms..=last_step {
            let step_start = step * step_ms;
            let from = from_ms.saturating_sub(step_start);
            let to = if step == last_step {
                elapsed_ms - step_start
            } else {
                step_ms - 1
            };
            if self.play_step(step, from, to).is_err() {
                self.died_at_step = Some(step);
                return;
            }
        }
    }

    /// Plays `from..=to` ms of step `step` through the allocator.
    fn play_step(&mut self, step: u64, from: u64, to: u64) -> Result<(), OutOfMemory> {
        let w = &self.workload;
        if let Some((at, bytes)) = w.fragment(step) {
            if (from..=to).contains(&at) {
                let in_use = w.allocated(step, at);
                self.allocator.strand(bytes, in_use)?;
            }
        }
        let need = w.high_water(step, to);
        self.allocator.cover(need, w.request_bytes(to))
    }
}

#[cfg(test)]
mod tests {
    use super::super::workload::{Anomalies, JobParams};
    use super::*;

    const GIB: u64 = 1 << 30;

    fn rank(anomalies: Anomalies) -> SimRank {
        let info = RankInfo {
            job: "j".into(),
            rank: 2,
            local_rank: 2,
            world_size: 4,
            master_addr: None,
            master_port: None,
        };
        let workload = Workload::new(1, 2, &JobParams::new(1), anomalies);
        SimRank::new(info, 10_002, 500 << 20, workload, 79 * GIB)
    }

    #[test]
    fn going_back_in_time_changes_nothing() {
        let mut a = rank(Anomalies::default());
        a.advance(10_000);
        let used = a.used_bytes();
        a.advance(3_000);
        a.advance(10_000);
        assert_eq!(a.used_bytes(), used);
    }

    #[test]
    fn playing_in_one_jump_or_in_small_steps_ends_alike() {
        let mut jump = rank(Anomalies::default());
        let mut walk = rank(Anomalies::default());
        jump.advance(60_000);
        for t in (0..=60_000).step_by(250) {
            walk.advance(t);
        }
        assert_eq!(jump.used_bytes(), walk.used_bytes());
    }

    #[test]
    fn a_huge_jump_is_bounded_and_kills_a_leaker() {
        let mut healthy = rank(Anomalies::default());
        healthy.advance(u64::MAX);
        assert!(healthy.alive());
        assert!(healthy.used_bytes() <= 79 * GIB);
        let mut leaky = rank(Anomalies {
            leak: true,
            ..Anomalies::default()
        });
        leaky.advance(u64::MAX);
        assert!(!leaky.alive());
        assert!(leaky.used_bytes() <= 79 * GIB);
    }
}
