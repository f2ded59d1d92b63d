//! Jobs and their ranks: `GET /api/v1/jobs` and `GET /api/v1/jobs/{job}`,
//! the cluster view's placement and memory history of each rank, with the
//! engine's analysis and the hook's step times beside it.
//!
//! Times named `*_ms` are milliseconds since the Unix epoch as stamped by the
//! agents; `t` and `*_t` are seconds. Memory is in bytes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::analysis::JobSummary;
use crate::placement::PodPlacement;

/// `GET /api/v1/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobsView {
    /// Every job known, live ones first, then by id.
    pub jobs: Vec<JobView>,
}

/// One job and its ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobView {
    /// Job id.
    pub job: String,
    /// `WORLD_SIZE` as the ranks report it.
    pub world_size: u32,
    /// Ranks seen, by rank.
    pub ranks: Vec<RankView>,
    /// Whether any rank is alive.
    pub live: bool,
}

/// One rank's latest state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RankView {
    /// Job id.
    pub job: String,
    /// Global rank.
    pub rank: u32,
    /// Rank on its node.
    pub local_rank: u32,
    /// Node name.
    pub node: String,
    /// GPU index on that node (from NVML's PID→UUID mapping).
    pub gpu: u32,
    /// GPU UUID.
    pub gpu_uuid: String,
    /// Process id.
    pub pid: u32,
    /// Memory the rank's process holds now, bytes.
    pub used_bytes: u64,
    /// Highest memory the rank's process held, bytes.
    pub peak_used_bytes: u64,
    /// The GPU's capacity, bytes.
    pub total_bytes: u64,
    /// Memory in use on the whole GPU now, bytes (other processes included).
    pub gpu_used_bytes: u64,
    /// First time seen, ms.
    pub first_seen_ms: u64,
    /// Newest window that showed it, ms.
    pub last_seen_ms: u64,
    /// When it left its GPU (process gone), ms; `None` while alive.
    pub ended_ms: Option<u64>,
    /// Alive by its last window, but no agent on its node has been heard
    /// from for 30 s of data time: the rank may be gone with its node.
    #[serde(default)]
    pub lost: bool,
    /// The Kubernetes pod and container of the rank's process, where the
    /// agent found them; `None` outside Kubernetes.
    #[serde(default)]
    pub placement: Option<PodPlacement>,
}

/// `GET /api/v1/jobs/{job}`: a job with each rank's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobDetail {
    /// Job id.
    pub job: String,
    /// `WORLD_SIZE`.
    pub world_size: u32,
    /// Whether any rank is alive.
    pub live: bool,
    /// Ranks with history.
    pub ranks: Vec<RankDetail>,
}

/// One rank with its memory history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RankDetail {
    /// Latest state.
    #[serde(flatten)]
    pub view: RankView,
    /// Window-by-window memory of the rank's process, oldest first (bounded).
    pub history: Vec<HistoryPoint>,
}

/// One window of a memory series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryPoint {
    /// Window end, ms.
    pub t_ms: u64,
    /// Lowest value in the window, bytes.
    pub min: u64,
    /// Highest value in the window, bytes.
    pub max: u64,
    /// Last value, bytes.
    pub last: u64,
    /// Mean, bytes.
    pub mean: u64,
}

/// `GET /api/v1/jobs/{job}`'s answer: the job's view and, beside it, what
/// the detection engine makes of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobWithAnalysis {
    /// The cluster view of the job.
    #[serde(flatten)]
    pub detail: JobDetail,
    /// Forecasts and flags per rank; absent until the engine saw the job.
    pub analysis: Option<JobSummary>,
    /// Latest and smoothed step and section times per rank (with the hook).
    pub steps: BTreeMap<u32, RankSteps>,
    /// Where the job's step goes (the median of its ranks' smoothed step
    /// and section times) and what bounds it; absent without sections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_verdict: Option<super::StepVerdict>,
    /// The same per rank, from its own smoothed times.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub step_verdicts: BTreeMap<u32, super::StepVerdict>,
    /// With any parameter but `consistency`: how many ranks match (the
    /// job's, or the node's with `node=`); `ranks`, `analysis` and `steps`
    /// then hold the chosen ones only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks_total: Option<u32>,
    /// With `ranks=top:K`: the ranks left out, a compact line each, in rank
    /// order (absent with `rest=none`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others: Option<Vec<super::job_scale::RankLine>>,
}

/// One rank's latest step and smoothed times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RankSteps {
    /// Latest step number.
    pub step: u64,
    /// When it finished, seconds since the Unix epoch.
    pub t: f64,
    /// Its duration, ms.
    pub duration_ms: f64,
    /// Smoothed step duration, ms.
    pub mean_duration_ms: f64,
    /// Per section, by name.
    pub sections: BTreeMap<String, SectionTime>,
}

/// One section's times, milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SectionTime {
    /// In the latest step that had it.
    pub last_ms: f64,
    /// Smoothed over recent steps.
    pub mean_ms: f64,
}
