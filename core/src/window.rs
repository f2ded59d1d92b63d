//! Folding raw samples into windows.
//!
//! The agent samples fast (default every 500 ms) and pushes slow (a window,
//! default 2 s). A window keeps min, max, last and mean of every series so the
//! peak envelope survives: a 300 ms spike to 79 GiB is still in `max` after the
//! fold, and OOM happens at the peak.

use std::collections::BTreeMap;

use gpumon_proto::{BytesStat, GaugeStat, GpuInfo, GpuSample, GpuWindow, ProcWindow, RankInfo};

/// Accumulates samples per GPU until [`WindowFolder::take`] closes the window.
#[derive(Debug, Default)]
pub struct WindowFolder {
    gpus: BTreeMap<String, GpuAcc>,
}

impl WindowFolder {
    /// An empty folder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one sample to its GPU's open window.
    pub fn add(&mut self, sample: &GpuSample) {
        let acc = self
            .gpus
            .entry(sample.gpu.uuid.clone())
            .or_insert_with(|| GpuAcc::new(sample));
        acc.add(sample);
    }

    /// Number of samples waiting in open windows.
    pub fn pending_samples(&self) -> usize {
        self.gpus.values().map(|g| g.samples as usize).sum()
    }

    /// Closes every open window and returns them, ordered by GPU index.
    pub fn take(&mut self) -> Vec<GpuWindow> {
        let mut out: Vec<GpuWindow> = std::mem::take(&mut self.gpus)
            .into_values()
            .map(GpuAcc::finish)
            .collect();
        out.sort_by(|a, b| {
            a.gpu
                .index
                .cmp(&b.gpu.index)
                .then_with(|| a.gpu.uuid.cmp(&b.gpu.uuid))
        });
        out
    }
}

#[derive(Debug)]
struct GpuAcc {
    gpu: GpuInfo,
    start_ms: u64,
    end_ms: u64,
    samples: u32,
    used: BytesAcc,
    reserved: Option<u64>,
    util: GaugeAcc,
    clock: GaugeAcc,
    power: GaugeAcc,
    procs: BTreeMap<u32, ProcAcc>,
}

impl GpuAcc {
    fn new(first: &GpuSample) -> Self {
        Self {
            gpu: first.gpu.clone(),
            start_ms: first.t_ms,
            end_ms: first.t_ms,
            samples: 0,
            used: BytesAcc::default(),
            reserved: None,
            util: GaugeAcc::default(),
            clock: GaugeAcc::default(),
            power: GaugeAcc::default(),
            procs: BTreeMap::new(),
        }
    }

    fn add(&mut self, s: &GpuSample) {
        self.gpu = s.gpu.clone();
        self.start_ms = self.start_ms.min(s.t_ms);
        self.end_ms = self.end_ms.max(s.t_ms);
        self.samples += 1;
        self.used.add(s.used_bytes);
        self.reserved = s.reserved_bytes.or(self.reserved);
        self.util.add(s.util_pct);
        self.clock.add(s.sm_clock_mhz);
        self.power.add(s.power_w);
        for p in &s.procs {
            let acc = self.procs.entry(p.pid).or_default();
            acc.used.add(p.used_bytes);
            if p.rank.is_some() {
                acc.rank.clone_from(&p.rank);
            }
        }
    }

    fn finish(self) -> GpuWindow {
        GpuWindow {
            gpu: self.gpu,
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            samples: self.samples,
            used_bytes: self.used.finish(),
            reserved_bytes: self.reserved,
            util_pct: self.util.finish(),
            sm_clock_mhz: self.clock.finish(),
            power_w: self.power.finish(),
            procs: self
                .procs
                .into_iter()
                .map(|(pid, p)| ProcWindow {
                    pid,
                    used_bytes: p.used.finish(),
                    rank: p.rank,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Default)]
struct ProcAcc {
    used: BytesAcc,
    rank: Option<RankInfo>,
}

/// Least, greatest and newest of a series, and how many readings.
#[derive(Debug, Default)]
struct Span<T> {
    min: T,
    max: T,
    last: T,
    n: u64,
}

impl<T: Copy + PartialOrd> Span<T> {
    fn add(&mut self, v: T) {
        if self.n == 0 || v < self.min {
            self.min = v;
        }
        if self.n == 0 || v > self.max {
            self.max = v;
        }
        self.last = v;
        self.n += 1;
    }
}

#[derive(Debug, Default)]
struct BytesAcc {
    span: Span<u64>,
    sum: u128,
}

impl BytesAcc {
    fn add(&mut self, v: u64) {
        self.span.add(v);
        self.sum += u128::from(v);
    }

    fn finish(&self) -> BytesStat {
        let Span { min, max, last, n } = self.span;
        BytesStat {
            min,
            max,
            last,
            mean: self.sum.checked_div(u128::from(n)).unwrap_or(0) as u64,
        }
    }
}

/// Skips missing and non-finite readings, so one bad reading cannot poison a window.
#[derive(Debug, Default)]
struct GaugeAcc {
    span: Span<f32>,
    sum: f64,
}

impl GaugeAcc {
    fn add(&mut self, v: Option<f32>) {
        let Some(v) = v.filter(|v| v.is_finite()) else {
            return;
        };
        self.span.add(v);
        self.sum += f64::from(v);
    }

    fn finish(&self) -> Option<GaugeStat> {
        let Span { min, max, last, n } = self.span;
        (n > 0).then(|| GaugeStat {
            min,
            max,
            last,
            mean: (self.sum / n as f64) as f32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_proto::ProcSample;

    fn sample(
        t_ms: u64,
        index: u32,
        used: u64,
        util: Option<f32>,
        procs: Vec<ProcSample>,
    ) -> GpuSample {
        GpuSample {
            t_ms,
            gpu: GpuInfo {
                uuid: format!("GPU-{index}"),
                index,
                name: "H100".into(),
                total_bytes: 80,
            },
            used_bytes: used,
            reserved_bytes: None,
            util_pct: util,
            sm_clock_mhz: None,
            power_w: None,
            procs,
        }
    }

    #[test]
    fn keeps_the_peak_envelope_of_a_short_spike() {
        let mut f = WindowFolder::new();
        for (t, used) in [(0, 10), (500, 70), (1000, 12), (1500, 11)] {
            f.add(&sample(t, 0, used, None, vec![]));
        }
        let w = f.take();
        assert_eq!(w.len(), 1);
        assert_eq!(
            w[0].used_bytes,
            BytesStat {
                min: 10,
                max: 70,
                last: 11,
                mean: 25
            }
        );
        assert_eq!((w[0].start_ms, w[0].end_ms, w[0].samples), (0, 1500, 4));
        assert!(f.take().is_empty(), "take closes the window");
    }

    #[test]
    fn skips_non_finite_gauges_and_orders_gpus_by_index() {
        let mut f = WindowFolder::new();
        f.add(&sample(0, 1, 5, Some(f32::NAN), vec![]));
        f.add(&sample(0, 0, 5, Some(40.0), vec![]));
        f.add(&sample(500, 0, 5, Some(60.0), vec![]));
        let w = f.take();
        assert_eq!(
            w.iter().map(|w| w.gpu.index).collect::<Vec<_>>(),
            vec![0, 1]
        );
        assert_eq!(w[0].util_pct.map(|g| g.mean), Some(50.0));
        assert_eq!(w[1].util_pct, None);
    }

    #[test]
    fn folds_processes_by_pid_and_keeps_their_rank() {
        let rank = RankInfo {
            job: "j".into(),
            rank: 1,
            local_rank: 1,
            world_size: 2,
            master_addr: None,
            master_port: None,
        };
        let mut f = WindowFolder::new();
        f.add(&sample(
            0,
            0,
            5,
            None,
            vec![ProcSample {
                pid: 7,
                used_bytes: 3,
                rank: None,
            }],
        ));
        f.add(&sample(
            500,
            0,
            5,
            None,
            vec![ProcSample {
                pid: 7,
                used_bytes: 9,
                rank: Some(rank.clone()),
            }],
        ));
        let w = f.take();
        assert_eq!(w[0].procs.len(), 1);
        assert_eq!(w[0].procs[0].used_bytes.max, 9);
        assert_eq!(w[0].procs[0].rank, Some(rank));
    }
}
