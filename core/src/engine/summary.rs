//! Read-only summaries of the engine's state: per device, per job and per
//! rank. Replay reports and the coordinator's API serialize these; the types
//! are the API's own, from `gpumon_proto::api`.

use std::collections::BTreeMap;

pub use gpumon_proto::api::{DeviceSummary, JobForecast, JobSummary, RankSummary};

use super::forecast::Risk;
use super::job::imbalance_levels;
use super::robust_stats::median_of;
use super::Engine;

impl Engine {
    /// Every device, by node then index.
    pub fn devices(&self) -> Vec<DeviceSummary> {
        let mut out = Vec::new();
        for (node, gpus) in self.gpu_tracks() {
            for (&gpu, g) in gpus {
                out.push(DeviceSummary {
                    node: node.clone(),
                    gpu,
                    uuid: g.uuid.clone(),
                    name: g.name.clone(),
                    total_bytes: g.total,
                    used_bytes: g.used_last,
                    avg_used_bytes: (g.used_sum / g.samples.max(1) as f64) as u64,
                    peak_used_bytes: g.used_peak,
                    avg_util_pct: (g.util_samples > 0).then(|| g.util_sum / g.util_samples as f64),
                    samples: g.samples,
                    first_t: g.first_t,
                    last_t: g.last_t,
                    risk: g.risk,
                    forecast: g.forecast.map(Into::into),
                });
            }
        }
        out
    }

    /// Every job tracked, live and ended.
    pub fn jobs(&self) -> BTreeMap<String, JobSummary> {
        self.jobs
            .keys()
            .filter_map(|name| Some((name.clone(), self.job(name)?)))
            .collect()
    }

    /// One job, if tracked.
    pub fn job(&self, name: &str) -> Option<JobSummary> {
        let j = self.jobs.get(name)?;
        let mut scratch = Vec::new();
        let params = &self.cfg.for_job(name).imbalance;
        let levels = imbalance_levels(self.gpu_tracks(), j, params.level_points, &mut scratch);
        let median = (levels.len() >= params.min_ranks.max(3))
            .then(|| median_of(levels.iter().map(|l| l.1), &mut scratch))
            .flatten();
        let mut ranks = Vec::with_capacity(j.ranks.len());
        for (&rank, r) in &j.ranks {
            let gpu = r
                .node
                .as_deref()
                .and_then(|n| self.gpu_tracks().get(n))
                .and_then(|n| n.get(&r.gpu?))
                .filter(|g| g.ranks.iter().any(|(jn, k, _)| jn == name && *k == rank));
            let outside = self.outside_of(name, rank);
            ranks.push(RankSummary {
                rank,
                node: r.node.clone(),
                gpu: r.gpu,
                pid: r.pid,
                used_bytes: r.used_last,
                peak_used_bytes: r.used_peak,
                allocated_bytes: r.alloc.as_ref().map(|a| a.allocated_last),
                reserved_bytes: r.alloc.as_ref().map(|a| a.reserved_last),
                inactive_split_bytes: r.alloc.as_ref().map(|a| a.inactive_split),
                outside_allocator_bytes: outside.and_then(|o| o.level()),
                outside_allocator_baseline_bytes: outside.and_then(|o| o.baseline()),
                alloc_retries: r.alloc.as_ref().map(|a| a.retries),
                memory_limit: self.rank_ceiling(name, rank).as_ref().map(Into::into),
                risk: gpu.map_or(Risk::None, |g| g.risk),
                forecast: gpu.and_then(|g| g.forecast).map(Into::into),
                leak_bytes_per_s: r.leak_rate.filter(|_| r.leak.is_on()),
                leak: r.leak.is_on(),
                fragmentation: r.fragmentation.is_on(),
                imbalance: r.imbalance.is_on(),
                straggler: j.straggler.is_straggling(rank),
                slowdown: j.straggler.slowdown(rank),
                imbalance_excess_bytes: median.and_then(|m| {
                    let level = levels.iter().find(|l| l.0 == rank)?.1;
                    Some(level - m)
                }),
                steps: r.steps,
                last_step_ms: r.last_step_ms,
                first_t: r.first_t,
                last_t: r.last_t,
                ended_t: r.ended_t,
            });
        }
        let forecast = ranks
            .iter()
            .filter(|r| r.ended_t.is_none())
            .filter_map(|r| r.forecast.map(|f| (r.rank, r.risk, f)))
            .min_by(|a, b| a.2.predicted_oom_t.total_cmp(&b.2.predicted_oom_t))
            .map(|(rank, risk_level, forecast)| JobForecast {
                rank,
                risk_level,
                forecast,
            });
        Some(JobSummary {
            world_size: j.world_size,
            first_t: j.first_t,
            last_t: j.last_t,
            ended_t: j.ended_t,
            forecast,
            ranks,
            markers: j.markers.iter().map(Into::into).collect(),
        })
    }
}
