//! One simulated training process: its workload played through its caching
//! allocator over time, until it ends or dies of an out-of-memory error.
//!
//! The allocator has a history (reserved memory never comes down on its own),
//! so a rank keeps how far it has played its workload and advances it when a
//! later time is sampled. Going back in time changes nothing, which keeps
//! samples deterministic for any sequence of times: the state after a sequence
//! depends only on the latest time seen.
//!
//! Given a [`Tape`], a rank also reports what its in-process hook would
//! (see [`super::report`]): the allocator is played up to each reading point
//! of a step, read there, and played on, so the readings are the same
//! whichever times were sampled.

use gpumon_proto::RankInfo;

use super::allocator::{CachingAllocator, OutOfMemory};
use super::hook_reports::{
    alloc_offsets, AllocReading, Tape, OOM_EVENT, SNAPSHOTS, WARMUP_MARKER, WARMUP_STEPS,
};
use super::timing::{self, Pace};
use super::workload::Workload;

/// The most steps one sample plays through. A jump further ahead (a wall
/// clock far past `start_ms`) only plays the last ones: the staircase then
/// starts from the workload of that moment, which is what a late-started
/// agent would see anyway.
const MAX_CATCH_UP_STEPS: u64 = 20_000;
/// The most steps one sample reports hook records for: a jump further ahead
/// reports only its last steps, as a hook whose agent was away would have
/// lost the rest.
pub(crate) const MAX_REPORTED_STEPS: u64 = 32;

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
    /// Its pace: healthy, throttled (the job's straggler), or waiting for one.
    pace: Pace,
    /// Highest allocated bytes so far.
    peak_allocated: u64,
    /// Highest reserved bytes so far.
    peak_reserved: u64,
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
            peak_allocated: workload.base_bytes(),
            peak_reserved: allocator.reserved(),
            workload,
            allocator,
            played_ms: None,
            died_at_step: None,
            pace: Pace::Healthy,
        }
    }

    /// The same rank at another pace: on a throttled GPU its forward and
    /// backward passes take longer; beside one, it waits (see [`timing`]).
    pub(crate) fn pace(mut self, pace: Pace) -> Self {
        self.pace = pace;
        self
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
    /// allocator, and with a `tape`, the hook's records of the last
    /// [`MAX_REPORTED_STEPS`] steps played go on it. Earlier times than
    /// already played change nothing.
    pub(crate) fn advance(&mut self, elapsed_ms: u64, mut tape: Option<&mut Tape>) {
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
            let reported = tape
                .as_deref_mut()
                .filter(|_| last_step - step < MAX_REPORTED_STEPS);
            let played = match reported {
                Some(tape) => self.play_reported(step, from, to, tape),
                None => self.play_step(step, from, to),
            };
            if played.is_err() {
                self.died_at_step = Some(step);
                if let Some(tape) = tape.as_deref_mut() {
                    self.report_oom(step, to, tape);
                }
                return;
            }
        }
    }

    /// Plays `from..=to` ms of step `step`, stopping at each point the hook
    /// reports to read the allocator there.
    fn play_reported(
        &mut self,
        step: u64,
        mut from: u64,
        to: u64,
        tape: &mut Tape,
    ) -> Result<(), OutOfMemory> {
        let step_ms = self.workload.step_ms();
        let start_ms = tape.start_ms;
        let at_ms = |offset: u64| tape_time(start_ms, step, step_ms, offset);
        for at in alloc_offsets(step_ms) {
            if (from..=to).contains(&at) {
                self.play_step(step, from, at)?;
                from = at + 1;
                let reading = self.reading(self.workload.allocated(step, at), 0);
                tape.alloc(at_ms(at), &self.info, reading);
            }
        }
        let end = step_ms - 1;
        if from <= to {
            self.play_step(step, from, to)?;
        }
        if (from..=to).contains(&end) {
            let sections = timing::sections(
                self.workload.seed(),
                self.info.rank,
                step,
                step_ms,
                self.pace,
            );
            tape.step(at_ms(end), &self.info, step, step_ms as f64, sections);
            if let Some((_, name)) = SNAPSHOTS.iter().find(|(after, _)| step + 1 == *after) {
                let reading = self.reading(self.workload.allocated(step, end), 0);
                tape.snapshot(at_ms(end), &self.info, name, reading);
            }
            if self.info.rank == 0 && step + 1 == WARMUP_STEPS {
                let detail =
                    format!("first {WARMUP_STEPS} steps done, memory at its working level");
                tape.event(at_ms(end), &self.info, WARMUP_MARKER, &detail);
            }
        }
        Ok(())
    }

    /// The allocator as the hook reads it, with `allocated` bytes in use.
    fn reading(&mut self, allocated: u64, ooms: u64) -> AllocReading {
        let reserved = self.allocator.reserved();
        self.peak_allocated = self.peak_allocated.max(allocated);
        self.peak_reserved = self.peak_reserved.max(reserved);
        AllocReading {
            allocated: allocated.min(reserved),
            reserved,
            stranded: self.allocator.stranded(),
            peak_allocated: self.peak_allocated,
            peak_reserved: self.peak_reserved,
            ooms,
        }
    }

    /// The last words of a process that ran out of memory `to` ms into
    /// step `step`: the allocator's statistics with the OOM counted, and
    /// the error as a marker.
    fn report_oom(&mut self, step: u64, to: u64, tape: &mut Tape) {
        let t_ms = tape_time(tape.start_ms, step, self.workload.step_ms(), to);
        let in_use = self.workload.allocated(step, to);
        let reading = self.reading(in_use, 1);
        tape.alloc(t_ms, &self.info, reading);
        tape.event(
            t_ms,
            &self.info,
            OOM_EVENT,
            "CUDA out of memory (simulated): the process exits",
        );
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
        let request = w.request_bytes(to);
        self.peak_allocated = self.peak_allocated.max(need);
        self.allocator.cover(need, request)
    }
}

/// The time `offset` ms into step `step`, ms since the Unix epoch.
fn tape_time(start_ms: u64, step: u64, step_ms: u64, offset: u64) -> u64 {
    start_ms
        .saturating_add(step.saturating_mul(step_ms))
        .saturating_add(offset)
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
        a.advance(10_000, None);
        let used = a.used_bytes();
        a.advance(3_000, None);
        a.advance(10_000, None);
        assert_eq!(a.used_bytes(), used);
    }

    #[test]
    fn playing_in_one_jump_or_in_small_steps_ends_alike() {
        let mut jump = rank(Anomalies::default());
        let mut walk = rank(Anomalies::default());
        jump.advance(60_000, None);
        for t in (0..=60_000).step_by(250) {
            walk.advance(t, None);
        }
        assert_eq!(jump.used_bytes(), walk.used_bytes());
    }

    #[test]
    fn a_huge_jump_is_bounded_and_kills_a_leaker() {
        let mut healthy = rank(Anomalies::default());
        healthy.advance(u64::MAX, None);
        assert!(healthy.alive());
        assert!(healthy.used_bytes() <= 79 * GIB);
        let mut leaky = rank(Anomalies {
            leak: true,
            ..Anomalies::default()
        });
        leaky.advance(u64::MAX, None);
        assert!(!leaky.alive());
        assert!(leaky.used_bytes() <= 79 * GIB);
    }

    fn steps_of(records: &[gpumon_proto::HookRecord]) -> Vec<u64> {
        records
            .iter()
            .filter_map(|r| match r {
                gpumon_proto::HookRecord::Step(s) => Some(s.step),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_jump_and_a_walk_report_the_same_last_steps() {
        let mut jump = rank(Anomalies::default());
        let mut walk = rank(Anomalies::default());
        let (mut jumped, mut walked) = (Tape::default(), Tape::default());
        jump.advance(60_000, Some(&mut jumped));
        for t in (0..=60_000).step_by(250) {
            walk.advance(t, Some(&mut walked));
        }
        // Going back reports nothing new.
        walk.advance(30_000, Some(&mut walked));
        let walked_steps = steps_of(&walked.records);
        let step_ms = walk.workload.step_ms();
        assert_eq!(walked_steps, (1..=60_000 / step_ms).collect::<Vec<_>>());
        let first = jumped.records[0].t_ms();
        let tail: Vec<_> = walked
            .records
            .iter()
            .filter(|r| r.t_ms() >= first)
            .collect();
        assert_eq!(tail.len(), jumped.records.len());
        for (i, (w, j)) in tail.into_iter().zip(&jumped.records).enumerate() {
            assert_eq!(w, j, "record {i}");
        }
        assert_eq!(
            steps_of(&jumped.records).len() as u64,
            MAX_REPORTED_STEPS - 1
        );
    }

    #[test]
    fn a_leaker_reports_its_oom_before_it_dies() {
        let mut leaky = rank(Anomalies {
            leak: true,
            ..Anomalies::default()
        });
        let mut tape = Tape {
            start_ms: 1_000,
            records: Vec::new(),
        };
        let mut t = 0;
        while leaky.alive() {
            t += 500;
            leaky.advance(t, Some(&mut tape));
            assert!(t < 3_600_000, "the leaker never died");
        }
        let n = tape.records.len();
        let gpumon_proto::HookRecord::Alloc(last_alloc) = &tape.records[n - 2] else {
            panic!("{:?}", &tape.records[n - 2..]);
        };
        assert_eq!(last_alloc.stats.ooms, Some(1));
        assert!(
            matches!(&tape.records[n - 1], gpumon_proto::HookRecord::Event(e) if e.name == OOM_EVENT)
        );
        for r in &tape.records[..n - 2] {
            if let gpumon_proto::HookRecord::Alloc(a) = r {
                assert_eq!(a.stats.ooms, Some(0));
                assert!(a.stats.allocated <= a.stats.reserved, "{a:?}");
            }
        }
        // Dead: nothing more.
        leaky.advance(t + 10_000, Some(&mut tape));
        assert_eq!(tape.records.len(), n);
    }
}
