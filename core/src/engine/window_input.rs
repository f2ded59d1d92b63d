//! The live path: an agent's window (min, max and last of its samples) fed
//! to the engine, the way the coordinator's state machine does it.

use gpumon_proto::GpuWindow;

use super::input::{GpuObs, RankObs};
use super::Engine;
use crate::records::ProcRecord;

impl Engine {
    /// Feeds one window that the cluster view applied. Times are the agent's
    /// epoch milliseconds, in seconds.
    pub fn observe_window(&mut self, node: &str, w: &GpuWindow) {
        let t = w.end_ms as f64 / 1000.0;
        for p in &w.procs {
            if let Some(r) = &p.rank {
                self.observe_rank(&RankObs {
                    t,
                    job: &r.job,
                    rank: r.rank,
                    local_rank: r.local_rank,
                    world_size: r.world_size,
                    node,
                    gpu: w.gpu.index,
                    pid: p.pid,
                });
            }
        }
        let procs: Vec<ProcRecord> = w
            .procs
            .iter()
            .map(|p| ProcRecord {
                pid: p.pid,
                used: p.used_bytes.max,
            })
            .collect();
        self.observe_gpu(&GpuObs {
            t,
            node,
            gpu: w.gpu.index,
            uuid: &w.gpu.uuid,
            name: &w.gpu.name,
            total: w.gpu.total_bytes,
            used_low: w.used_bytes.min,
            used_high: w.used_bytes.max,
            used: w.used_bytes.last,
            util: w.util_pct.map(|g| f64::from(g.mean)),
            sm_clock_mhz: w.sm_clock_mhz.map(|g| f64::from(g.mean)),
            power_w: w.power_w.map(|g| f64::from(g.mean)),
            procs: &procs,
        });
    }
}
