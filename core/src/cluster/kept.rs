//! What the cluster view keeps of ingest and of each GPU's processes, as
//! its own types (encoded in snapshots); the API's are converted from them
//! where they are read, so a field added to an answer leaves snapshots alone.

use gpumon_proto::api;
use serde::{Deserialize, Serialize};

/// Counters kept by the replicated state machine (identical on every
/// replica); the API's `gpumon_proto::api::IngestCounters` is converted
/// from them where read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestCounters {
    /// Batches applied.
    pub batches_applied: u64,
    /// Batches dropped as already applied.
    pub batches_duplicate: u64,
    /// Windows applied.
    pub windows_applied: u64,
    /// Windows or fields skipped as invalid (non-finite, absurd, oversized names).
    pub windows_skipped: u64,
}

/// A process on a GPU, as the cluster view keeps it; the API's
/// `gpumon_proto::api::ProcessView` is converted from it where read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessView {
    /// Process id on its node.
    pub pid: u32,
    /// GPU memory held at the end of the newest window.
    pub used_bytes: u64,
    /// Its job, when attributed.
    pub job: Option<String>,
    /// Its rank, when attributed.
    pub rank: Option<u32>,
}

impl From<IngestCounters> for api::IngestCounters {
    fn from(c: IngestCounters) -> Self {
        Self {
            batches_applied: c.batches_applied,
            batches_duplicate: c.batches_duplicate,
            windows_applied: c.windows_applied,
            windows_skipped: c.windows_skipped,
        }
    }
}

impl From<&ProcessView> for api::ProcessView {
    fn from(p: &ProcessView) -> Self {
        Self {
            pid: p.pid,
            used_bytes: p.used_bytes,
            job: p.job.clone(),
            rank: p.rank,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_figures_say_what_the_view_holds() {
        let c = IngestCounters {
            batches_applied: 1,
            batches_duplicate: 2,
            windows_applied: 3,
            windows_skipped: 4,
        };
        assert_eq!(
            serde_json::to_value(api::IngestCounters::from(c)).unwrap(),
            serde_json::to_value(c).unwrap()
        );
        let p = ProcessView {
            pid: 42,
            used_bytes: 1 << 30,
            job: Some("job".into()),
            rank: Some(3),
        };
        assert_eq!(
            serde_json::to_value(api::ProcessView::from(&p)).unwrap(),
            serde_json::to_value(&p).unwrap()
        );
    }
}
