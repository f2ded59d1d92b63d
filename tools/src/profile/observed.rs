//! What the profile keeps beside the engine: timelines, peaks and means,
//! step and section times, and the hook's marks, read from the same window
//! sets the engine gets. The engine keeps what detection needs; a report
//! also wants the whole run's shape, so this keeps it, bounded.

use std::collections::{BTreeMap, VecDeque};

use gpumon_agent::uplink::Outgoing;
use gpumon_proto::{GpuInfo, HookRecord};

use super::report::{Mark, Quantiles};
use super::series::{PeakMean, Timeline, TIMELINE_POINTS};

/// Marks kept; later ones are counted and left out.
pub const MAX_MARKS: usize = 1_000;
/// Allocator snapshot paths kept.
pub const MAX_ALLOCATOR_SNAPSHOTS: usize = 64;
/// Recent steps whose times make the quantiles.
const RECENT_STEPS: usize = 512;
/// Section names kept per rank.
const MAX_SECTIONS: usize = 32;
/// Ranks kept.
const MAX_RANKS: usize = 4_096;
/// The hook's event naming an allocator snapshot it saved (detail: the path).
pub const ALLOCATOR_SNAPSHOT_EVENT: &str = "allocator_snapshot";
/// Hook events that say the process ran out of GPU memory.
const OOM_EVENTS: [&str; 2] = ["out_of_memory", "oom"];

/// One GPU's run.
#[derive(Debug, Clone)]
pub struct GpuSeries {
    /// What the agent knows of it.
    pub info: GpuInfo,
    /// Used memory: peak of the windows' highest samples, mean of their means.
    pub peak_used: u64,
    /// Mean used memory.
    pub used: PeakMean,
    /// `(t, [mean used, highest used])` per window.
    pub timeline: Timeline<2>,
}

/// The most recent values of a time, for quantiles.
#[derive(Debug, Clone, Default)]
pub struct Recent(VecDeque<f64>);

impl Recent {
    fn add(&mut self, v: f64) {
        if self.0.len() == RECENT_STEPS {
            self.0.pop_front();
        }
        self.0.push_back(v);
    }

    /// Median and 90th percentile, if any value.
    pub fn quantiles(&self) -> Option<Quantiles> {
        let mut v: Vec<f64> = self.0.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Some(Quantiles {
            p50: at(0.5),
            p90: at(0.9),
        })
    }
}

/// One rank's run, from its hook.
#[derive(Debug, Clone)]
pub struct RankSeries {
    /// Allocated: the allocator's own peak where it reports one.
    pub allocated: PeakMean,
    /// Reserved.
    pub reserved: PeakMean,
    /// Lowest allocated after the first step.
    pub floor_allocated: Option<u64>,
    /// OOMs the allocator counted.
    pub ooms: u64,
    /// Steps seen.
    pub steps: u64,
    /// Step times, ms.
    pub step_ms: Recent,
    /// Section times, ms per step, by name.
    pub sections: BTreeMap<String, Recent>,
    /// `(t, [allocated, reserved])`.
    pub timeline: Timeline<2>,
}

impl Default for RankSeries {
    fn default() -> Self {
        Self {
            allocated: PeakMean::default(),
            reserved: PeakMean::default(),
            floor_allocated: None,
            ooms: 0,
            steps: 0,
            step_ms: Recent::default(),
            sections: BTreeMap::new(),
            timeline: Timeline::new(TIMELINE_POINTS),
        }
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Observed {
    /// GPUs by index (one node).
    pub gpus: BTreeMap<u32, GpuSeries>,
    /// Ranks by job and rank.
    pub ranks: BTreeMap<(String, u32), RankSeries>,
    /// Marks, oldest first.
    pub marks: Vec<Mark>,
    /// Marks left out beyond [`MAX_MARKS`].
    pub marks_dropped: u64,
    /// Allocator snapshots the hook saved.
    pub allocator_snapshots: Vec<String>,
    /// The first out-of-memory the hooks reported, for people.
    pub oom: Option<String>,
    /// Windows seen.
    pub windows: u64,
    /// Hook records seen.
    pub hook_records: u64,
}

impl Observed {
    /// Folds one window set in.
    pub fn add(&mut self, out: &Outgoing) {
        for w in &out.windows {
            self.windows += 1;
            let g = self.gpus.entry(w.gpu.index).or_insert_with(|| GpuSeries {
                info: w.gpu.clone(),
                peak_used: 0,
                used: PeakMean::default(),
                timeline: Timeline::new(TIMELINE_POINTS),
            });
            g.info = w.gpu.clone();
            g.peak_used = g.peak_used.max(w.used_bytes.max);
            g.used.add(w.used_bytes.mean);
            g.timeline
                .push(ms_to_s(w.end_ms), [w.used_bytes.mean, w.used_bytes.max]);
        }
        for r in &out.hook {
            self.hook_records += 1;
            self.add_record(r);
        }
    }

    fn rank(&mut self, job: &str, rank: u32) -> Option<&mut RankSeries> {
        let key = (job.to_owned(), rank);
        if !self.ranks.contains_key(&key) && self.ranks.len() >= MAX_RANKS {
            return None;
        }
        Some(self.ranks.entry(key).or_default())
    }

    fn add_record(&mut self, record: &HookRecord) {
        match record {
            HookRecord::Alloc(a) => {
                let s = &a.stats;
                let job = a.job.clone();
                let Some(r) = self.rank(&a.job, a.rank) else {
                    return;
                };
                r.allocated
                    .add(s.peak_allocated.unwrap_or(0).max(s.allocated));
                r.reserved.add(s.peak_reserved.unwrap_or(0).max(s.reserved));
                if r.steps > 0 {
                    r.floor_allocated = Some(
                        r.floor_allocated
                            .map_or(s.allocated, |f| f.min(s.allocated)),
                    );
                }
                r.timeline.push(ms_to_s(a.t_ms), [s.allocated, s.reserved]);
                let ooms = s.ooms.unwrap_or(0);
                if ooms > r.ooms {
                    r.ooms = ooms;
                    self.oom.get_or_insert_with(|| {
                        format!(
                            "rank {} of {job}: the allocator counted {ooms} out-of-memory error(s)",
                            a.rank
                        )
                    });
                }
            }
            HookRecord::Step(s) => {
                let Some(r) = self.rank(&s.job, s.rank) else {
                    return;
                };
                r.steps += 1;
                r.step_ms.add(s.duration_ms);
                for (name, ms) in &s.sections {
                    if r.sections.len() < MAX_SECTIONS || r.sections.contains_key(name) {
                        r.sections.entry(name.clone()).or_default().add(*ms);
                    }
                }
            }
            HookRecord::Event(e) => {
                if e.name == ALLOCATOR_SNAPSHOT_EVENT {
                    if let Some(path) = &e.detail {
                        if self.allocator_snapshots.len() < MAX_ALLOCATOR_SNAPSHOTS {
                            self.allocator_snapshots.push(path.clone());
                        }
                    }
                }
                if OOM_EVENTS.contains(&e.name.as_str()) {
                    self.oom.get_or_insert_with(|| {
                        format!(
                            "rank {} of {} reported an out-of-memory error",
                            e.rank, e.job
                        )
                    });
                }
                if self.marks.len() >= MAX_MARKS {
                    self.marks_dropped += 1;
                    return;
                }
                self.marks.push(Mark {
                    t: ms_to_s(e.t_ms),
                    job: e.job.clone(),
                    rank: e.rank,
                    name: e.name.clone(),
                    detail: e.detail.clone(),
                    snapshot: e.snapshot.as_ref().map(|s| [s.allocated, s.reserved]),
                });
            }
            // A stall is judged by the engine (the `hang` alert); the
            // report shows that alert and the evidence dumps' actions.
            HookRecord::Stall(_) => {}
        }
    }
}

/// Milliseconds since the epoch as seconds.
pub fn ms_to_s(ms: u64) -> f64 {
    ms as f64 / 1000.0
}
