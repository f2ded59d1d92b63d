//! Read-only summaries of the engine's state: per device, per job and per
//! rank. Replay reports and the coordinator's API serialize these.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::forecast::{OomForecast, Risk};
use super::job::imbalance_levels;
use super::stats::median_of;
use super::tracks::Marker;
use super::Engine;

/// One device's statistics over the observations seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceSummary {
    /// Node name.
    pub node: String,
    /// Device index.
    pub gpu: u32,
    /// Device UUID.
    pub uuid: String,
    /// Device model.
    pub name: String,
    /// Capacity, bytes.
    pub total_bytes: u64,
    /// Newest used memory, bytes.
    pub used_bytes: u64,
    /// Mean used memory over all observations, bytes.
    pub avg_used_bytes: u64,
    /// Highest used memory, bytes.
    pub peak_used_bytes: u64,
    /// Mean utilization, percent.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub avg_util_pct: Option<f64>,
    /// Observations.
    pub samples: u64,
    /// First observation, seconds.
    pub first_t: f64,
    /// Newest observation, seconds.
    pub last_t: f64,
    /// OOM risk now.
    pub risk: Risk,
    /// The current OOM forecast, when memory grows.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub forecast: Option<OomForecast>,
}

/// One rank at the time of the view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankSummary {
    /// Global rank.
    pub rank: u32,
    /// Node, when known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub node: Option<String>,
    /// GPU index, when known.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu: Option<u32>,
    /// Process id.
    pub pid: u32,
    /// Its own memory now, bytes.
    pub used_bytes: u64,
    /// Its own highest memory, bytes.
    pub peak_used_bytes: u64,
    /// Allocator `allocated` now, bytes (with the hook).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub allocated_bytes: Option<u64>,
    /// Allocator `reserved` now, bytes (with the hook).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reserved_bytes: Option<u64>,
    /// Allocator `inactive_split` now, bytes (with the hook): free space
    /// inside split blocks, which `empty_cache` cannot return.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub inactive_split_bytes: Option<u64>,
    /// Allocation retries so far (with the hook).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub alloc_retries: Option<u64>,
    /// OOM risk of its GPU.
    pub risk: Risk,
    /// Its GPU's OOM forecast, when memory grows.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub forecast: Option<OomForecast>,
    /// Leak rate, bytes per second, while a leak is flagged.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub leak_bytes_per_s: Option<f64>,
    /// Flagged as leaking.
    pub leak: bool,
    /// Flagged as fragmenting.
    pub fragmentation: bool,
    /// Flagged as holding more than its peers.
    pub imbalance: bool,
    /// Flagged as a straggler.
    pub straggler: bool,
    /// How many times longer than its peers' its own work takes (its step
    /// sections less the wait for its peers; median over recent steps),
    /// once the straggler detector scored it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub slowdown: Option<f64>,
    /// Its memory level above the job's median level, bytes (negative:
    /// below), while it takes part in the imbalance comparison.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub imbalance_excess_bytes: Option<f64>,
    /// Steps reported.
    pub steps: u64,
    /// Latest step duration, ms.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub last_step_ms: Option<f64>,
    /// First seen, seconds.
    pub first_t: f64,
    /// Last seen, seconds.
    pub last_t: f64,
    /// When its process ended, seconds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ended_t: Option<f64>,
}

/// One job at the time of the view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    /// Ranks in the job.
    pub world_size: u32,
    /// First seen, seconds.
    pub first_t: f64,
    /// Last seen, seconds.
    pub last_t: f64,
    /// When its last rank ended, seconds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ended_t: Option<f64>,
    /// The job's OOM forecast: its earliest rank's.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub forecast: Option<JobForecast>,
    /// Its ranks.
    pub ranks: Vec<RankSummary>,
    /// User markers, oldest first.
    pub markers: Vec<Marker>,
}

/// A job's forecast and the rank it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobForecast {
    /// The rank expected to run out first.
    pub rank: u32,
    /// That rank's risk level after hysteresis (the forecast's own `risk` is
    /// before it); a separate name, since the forecast is flattened beside it.
    pub risk_level: Risk,
    /// Its forecast.
    #[serde(flatten)]
    pub forecast: OomForecast,
}

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
                    forecast: g.forecast,
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
        let params = &self.cfg.imbalance;
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
                alloc_retries: r.alloc.as_ref().map(|a| a.retries),
                risk: gpu.map_or(Risk::None, |g| g.risk),
                forecast: gpu.and_then(|g| g.forecast),
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
            markers: j.markers.iter().cloned().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_forecast_reads_back_from_its_json() {
        let f = JobForecast {
            rank: 3,
            risk_level: Risk::Low,
            forecast: OomForecast {
                t: 100.0,
                predicted_oom_t: 700.0,
                earliest_oom_t: 600.0,
                latest_oom_t: 900.0,
                confidence: 0.9,
                slope_bytes_per_s: 1e6,
                level_bytes: 5e10,
                margin_bytes: 1e9,
                usable_bytes: 8e10,
                risk: Risk::Warning,
            },
        };
        let json = serde_json::to_string(&f).unwrap();
        // One key per name: a duplicate would make strict parsers refuse it.
        assert_eq!(json.matches("\"risk\"").count(), 1, "{json}");
        let back: JobForecast = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f);
    }
}
