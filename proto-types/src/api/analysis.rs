//! What the detection engine makes of jobs and devices: OOM forecasts,
//! risk levels and per-rank flags, as `GET /api/v1/jobs/{job}` (`analysis`)
//! and replay reports show them.
//!
//! Times named `t` and `*_t` are seconds since the Unix epoch (trace time);
//! memory is in bytes.

use serde::{Deserialize, Serialize};

/// One device's statistics over the observations seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// Memory outside the caching allocator now, bytes: NVML's figure for
    /// the process less the allocator's `reserved` (the CUDA context, NCCL's
    /// buffers, library workspaces); the least of the last samples, with
    /// the hook and NVML both.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub outside_allocator_bytes: Option<u64>,
    /// The same after the rank's start-up (its baseline), bytes.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub outside_allocator_baseline_bytes: Option<u64>,
    /// Allocation retries so far (with the hook).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub alloc_retries: Option<u64>,
    /// The limit its memory meets first, when its hook reports what bounds
    /// it (a cap, a MIG slice): the forecast and the memory levels of its
    /// GPU use it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory_limit: Option<MemoryLimit>,
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

/// The limit a rank's memory meets first, and what counts against it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemoryLimit {
    /// Which limit.
    pub kind: LimitKind,
    /// What set it, for a cap.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cap_source: Option<crate::CapSource>,
    /// The limit, bytes.
    pub limit_bytes: u64,
    /// What counts against it now, bytes: the GPU's used memory, the
    /// rank's `reserved` for a cap, its process memory for a slice.
    pub used_bytes: u64,
    /// The limit in words.
    pub description: String,
}

/// Which limit a rank's memory meets first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// Its GPU's capacity.
    Gpu,
    /// The caching allocator's cap.
    Cap,
    /// Its device is a MIG slice of the GPU.
    MigSlice,
}

/// One job at the time of the view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// How close a forecast OOM is.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// No growth, or an OOM too far ahead to matter.
    #[default]
    None,
    /// Growing; OOM within four horizons.
    Low,
    /// OOM within the horizon: alert.
    Warning,
    /// OOM within `high_s`.
    High,
    /// OOM within `critical_s`.
    Critical,
}

/// A predicted OOM.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OomForecast {
    /// When it was computed (newest window), seconds.
    pub t: f64,
    /// Predicted OOM time, seconds.
    pub predicted_oom_t: f64,
    /// Earliest OOM time within the slope's interval.
    pub earliest_oom_t: f64,
    /// Latest OOM time within the slope's interval.
    pub latest_oom_t: f64,
    /// 0 to 1: how sure the growth is real, and how tight its interval is
    /// (see the engine's `forecast` module).
    pub confidence: f64,
    /// Growth of the peaks, bytes per second.
    pub slope_bytes_per_s: f64,
    /// The peak line now, bytes.
    pub level_bytes: f64,
    /// Headroom kept for spikes, bytes.
    pub margin_bytes: f64,
    /// Usable capacity, bytes.
    pub usable_bytes: f64,
    /// Risk level of this forecast alone (before hysteresis).
    pub risk: Risk,
}

/// A user marker (`gpumon.mark`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Marker {
    /// Trace time, seconds.
    pub t: f64,
    /// The rank that set it.
    pub rank: u32,
    /// Its name.
    pub name: String,
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
