//! Jobs and GPUs that go silent are forgotten.
//!
//! A job's track ends when NVML sees its processes leave their GPUs. A job
//! whose node stops reporting (a reboot, an agent that died), a hook-only
//! job whose process was killed, or a forged one never gets there: it would
//! hold one of the engine's `max_jobs` places for good, and once they are
//! all taken no new job is tracked (no leak, forecast or straggler alert
//! names it). A GPU whose node went away likewise holds one of `max_gpus`.
//!
//! So once a minute of data time the engine forgets every job and GPU it
//! has heard nothing of for `silent_s` (any record: a window, allocator
//! statistics, a step), and resolves their open alerts; a job that speaks
//! again later starts a fresh track. A hung job is not silent: NVML still
//! sees its processes every window. Time comes from the data, so every
//! replica, and `gpumon replay` of their log, forget the same things.

use super::alerts::Subject;
use super::Engine;

/// Data time between two sweeps, seconds.
pub const SWEEP_EVERY_S: f64 = 60.0;

impl Engine {
    /// Sweeps when data time `now` has crossed a minute since `before`.
    pub(super) fn sweep_if_due(&mut self, before: f64, now: f64) {
        let silent_s = self.cfg.silent_s;
        if silent_s <= 0.0 || !before.is_finite() {
            return;
        }
        if (now / SWEEP_EVERY_S).floor() > (before / SWEEP_EVERY_S).floor() {
            self.forget_silent(now, now - silent_s);
        }
    }

    /// Forgets the jobs and GPUs last heard of before `cutoff`.
    fn forget_silent(&mut self, now: f64, cutoff: f64) {
        let silent_jobs: Vec<String> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.ended_t.is_none())
            .filter(|(_, j)| {
                let last = j.ranks.values().map(|r| r.last_t).fold(j.last_t, f64::max);
                last < cutoff
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in silent_jobs {
            if let Some(job) = self.jobs.remove(&name) {
                self.outside.remove(&name);
                self.limits.remove(&name);
                self.forgot_jobs = true;
                self.ranks.forget();
                for &rank in job.ranks.keys() {
                    self.alerts
                        .resolve_subject(&Subject::Rank(name.clone(), rank), now);
                }
            }
        }
        let mut silent_gpus = Vec::new();
        for (node, gpus) in &self.nodes {
            for (&index, track) in gpus {
                if track.last_t < cutoff {
                    silent_gpus.push((node.clone(), index));
                }
            }
        }
        for (node, index) in silent_gpus {
            let gpus = self.nodes.get_mut(&node);
            if gpus.and_then(|g| g.remove(&index)).is_some() {
                self.gpu_count = self.gpu_count.saturating_sub(1);
                self.alerts
                    .resolve_subject(&Subject::Gpu(node.clone(), index), now);
            }
            if self.nodes.get(&node).is_some_and(|g| g.is_empty()) {
                self.nodes.remove(&node);
            }
        }
    }
}
