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

use gpumon_core::cluster::{Cluster, GpuSeries};

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
    pub fn at(state: &Cluster) -> Self {
        Self {
            taken: state
                .gpu_series()
                .map(|g| (g.uuid.to_owned(), g.last_end_ms))
                .collect(),
        }
    }

    /// Starts a take of at most `budget` samples, labelled with `extra`;
    /// [`Take::step`] goes through the GPUs a part at a time.
    pub fn begin(&mut self, extra: &BTreeMap<String, String>, budget: usize) -> Take<'_> {
        let extra = extra
            .iter()
            .map(|(n, v)| Label {
                name: n.clone().into(),
                value: v.clone().into(),
            })
            .collect();
        Take {
            next: HashMap::with_capacity(self.taken.len()),
            cursors: self,
            extra,
            budget,
            resume: None,
            out: Taken::default(),
        }
    }

    /// A whole take from `state` at once (see [`Take`]).
    pub fn take(
        &mut self,
        state: &Cluster,
        extra: &BTreeMap<String, String>,
        budget: usize,
    ) -> Taken {
        let mut take = self.begin(extra, budget);
        while take.step(state, usize::MAX) {}
        take.finish()
    }
}

/// One take under way: the series of every window newer than its GPU's
/// cursor (a GPU not seen before: all its windows), at most `budget`
/// samples; past the budget whole GPUs are skipped and counted. Each step
/// may read a different state (the sender lets writers in between steps):
/// each GPU is read once, in one step.
#[derive(Debug)]
pub struct Take<'c> {
    cursors: &'c mut Cursors,
    next: HashMap<String, u64>,
    extra: Vec<Label>,
    budget: usize,
    /// The last uuid read.
    resume: Option<String>,
    out: Taken,
}

impl Take<'_> {
    /// Reads up to `gpus` more GPUs of `state`; false once every GPU has
    /// been read.
    pub fn step(&mut self, state: &Cluster, gpus: usize) -> bool {
        let mut gpus_left = state.gpu_series_after(self.resume.as_deref());
        for g in gpus_left.by_ref().take(gpus) {
            self.resume = Some(g.uuid.to_owned());
            // The old key moves over: no copy of the uuid per take.
            let (key, after) = self
                .cursors
                .taken
                .remove_entry(g.uuid)
                .unwrap_or_else(|| (g.uuid.to_owned(), 0));
            self.next.insert(key, after.max(g.last_end_ms));
            if g.last_end_ms <= after {
                continue;
            }
            let series = gpu_series(&g, after, &self.extra);
            let n: usize = series.iter().map(|s| s.samples.len()).sum();
            if self.out.samples + n > self.budget {
                self.out.skipped += n;
                continue;
            }
            self.out.samples += n;
            self.out.series.extend(series);
        }
        gpus_left.next().is_some()
    }

    /// Ends the take: the cursors move past everything read, taken or
    /// skipped, and forget GPUs that were not read (gone from the view).
    pub fn finish(self) -> Taken {
        self.cursors.taken = self.next;
        self.out
    }
}

/// The series of one GPU for its windows ending after `after`; its label
/// values are made once and shared by its series.
fn gpu_series(g: &GpuSeries<'_>, after: u64, extra: &[Label]) -> Vec<TimeSeries> {
    let mut base = vec![
        Label::new("node", g.node.to_owned()),
        Label::new("gpu", g.index.to_string()),
    ];
    if !g.uuid.is_empty() {
        base.push(Label::new("uuid", g.uuid.to_owned()));
    }
    if let Some(job) = g.job {
        base.push(Label::new("job", job.to_owned()));
    }
    if let Some(rank) = g.rank {
        base.push(Label::new("rank", rank.to_string()));
    }
    base.extend_from_slice(extra);
    let named = |name: &'static str, samples: Vec<Sample>| {
        let mut labels = Vec::with_capacity(base.len() + 1);
        labels.push(Label::new(NAME_LABEL, name.as_bytes()));
        labels.extend(base.iter().cloned());
        TimeSeries { labels, samples }
    };
    let at = |t_ms: u64, value: f64| {
        i64::try_from(t_ms)
            .ok()
            .map(|timestamp| Sample { value, timestamp })
    };
    let (mut used, mut peak) = (Vec::new(), Vec::new());
    for p in g.windows_after(after) {
        used.extend(at(p.t_ms, p.last as f64));
        peak.extend(at(p.t_ms, p.max as f64));
    }
    let mut out = vec![
        named(USED, used),
        named(PEAK, peak),
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

#[cfg(test)]
mod tests;
