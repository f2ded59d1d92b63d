//! Taking from the cluster view the windows it got since the last send, as
//! per-GPU series. Pure: the same view and cursors give the same series.
//!
//! Per GPU, with labels `node`, `gpu` (its index), `uuid`, `job` and
//! `rank` (while its newest window names them unambiguously, see
//! [`GpuSeries`]) and the extra labels:
//! - [`USED`]: each window's last sample, at the window's end;
//! - [`PEAK`]: each window's highest sample, at the window's end;
//! - [`TOTAL`] and [`UTIL`]: the newest window's capacity and mean
//!   utilization, at its end, once per send (the view keeps no history of
//!   either).
//!
//! A cursor per GPU holds the end of the newest window taken; windows end
//! in increasing order along a GPU's history, so nothing is taken twice.

use std::collections::{BTreeMap, HashMap};

use gpumon_common::cluster::{ClusterState, GpuSeries};

use super::encode::NAME_LABEL;
use super::proto::{Label, Sample, TimeSeries};

/// GPU memory in use, the window's last sample.
pub const USED: &str = "gpumon_gpu_memory_used_bytes";
/// GPU memory in use, the window's highest sample.
pub const PEAK: &str = "gpumon_gpu_memory_peak_bytes";
/// GPU memory capacity.
pub const TOTAL: &str = "gpumon_gpu_memory_total_bytes";
/// GPU utilization, 0 to 1.
pub const UTIL: &str = "gpumon_gpu_utilization_ratio";

/// What one take found.
#[derive(Debug, Default)]
pub struct Taken {
    /// The series, not yet normalized.
    pub series: Vec<TimeSeries>,
    /// Samples in them.
    pub samples: usize,
    /// Samples passed over because the take reached its budget.
    pub skipped: usize,
}

/// Per GPU uuid, the end of the newest window taken, ms.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cursors {
    taken: HashMap<String, u64>,
}

impl Cursors {
    /// Counts every window `state` holds as taken: a new leader starts from
    /// its view as it is (see the module docs of `remote_write`).
    pub fn at(state: &ClusterState) -> Self {
        Self {
            taken: state
                .gpu_series()
                .map(|g| (g.uuid.to_owned(), g.last_end_ms))
                .collect(),
        }
    }

    /// The series of every window newer than its GPU's cursor (a GPU not
    /// seen before: all its windows), at most `budget` samples; moves the
    /// cursors past everything looked at, taken or skipped, and forgets
    /// GPUs the view no longer holds.
    pub fn take(
        &mut self,
        state: &ClusterState,
        extra: &BTreeMap<String, String>,
        budget: usize,
    ) -> Taken {
        let mut out = Taken::default();
        let mut next = HashMap::with_capacity(self.taken.len());
        for g in state.gpu_series() {
            let after = self.taken.get(g.uuid).copied().unwrap_or(0);
            next.insert(g.uuid.to_owned(), after.max(g.last_end_ms));
            if g.last_end_ms <= after {
                continue;
            }
            let series = gpu_series(&g, after, extra);
            let n: usize = series.iter().map(|s| s.samples.len()).sum();
            if out.samples + n > budget {
                out.skipped += n;
                continue;
            }
            out.samples += n;
            out.series.extend(series);
        }
        self.taken = next;
        out
    }
}

/// The four series of one GPU for its windows ending after `after`.
fn gpu_series(g: &GpuSeries<'_>, after: u64, extra: &BTreeMap<String, String>) -> Vec<TimeSeries> {
    let mut base = vec![label("node", g.node), label("gpu", &g.index.to_string())];
    if !g.uuid.is_empty() {
        base.push(label("uuid", g.uuid));
    }
    if let Some(job) = g.job {
        base.push(label("job", job));
    }
    if let Some(rank) = g.rank {
        base.push(label("rank", &rank.to_string()));
    }
    base.extend(extra.iter().map(|(n, v)| label(n, v)));
    let named = |name: &str, samples: Vec<Sample>| {
        let mut labels = Vec::with_capacity(base.len() + 1);
        labels.push(label(NAME_LABEL, name));
        labels.extend(base.iter().cloned());
        TimeSeries { labels, samples }
    };
    let windows: Vec<_> = g.windows_after(after).collect();
    let at = |t_ms: u64, value: f64| {
        i64::try_from(t_ms)
            .ok()
            .map(|timestamp| Sample { value, timestamp })
    };
    let used = windows.iter().filter_map(|p| at(p.t_ms, p.last as f64));
    let peak = windows.iter().filter_map(|p| at(p.t_ms, p.max as f64));
    let mut out = vec![
        named(USED, used.collect()),
        named(PEAK, peak.collect()),
        named(
            TOTAL,
            at(g.last_end_ms, g.total_bytes as f64)
                .into_iter()
                .collect(),
        ),
    ];
    if let Some(util) = g.util_pct {
        let ratio = at(g.last_end_ms, f64::from(util) / 100.0);
        out.push(named(UTIL, ratio.into_iter().collect()));
    }
    out.retain(|s| !s.samples.is_empty());
    out
}

fn label(name: &str, value: &str) -> Label {
    Label {
        name: name.to_owned(),
        value: value.to_owned(),
    }
}

#[cfg(test)]
mod tests;
