//! What the engine is fed: borrowed views of trace records (replay) or of
//! the windows agents push (live), so neither path allocates to feed it.

use crate::records::ProcRecord;

/// One GPU observation: a raw NVML sample (`used_low == used_high == used`)
/// or an agent's window (min, max and last of its samples).
#[derive(Debug, Clone, Copy)]
pub struct GpuObs<'a> {
    /// Trace time, seconds (the window's end for an agent window).
    pub t: f64,
    /// Node name.
    pub node: &'a str,
    /// Device index on the node.
    pub gpu: u32,
    /// Device UUID.
    pub uuid: &'a str,
    /// Device model.
    pub name: &'a str,
    /// Capacity, bytes.
    pub total: u64,
    /// Lowest used memory in the observation, bytes.
    pub used_low: u64,
    /// Highest used memory in the observation, bytes.
    pub used_high: u64,
    /// Newest used memory, bytes.
    pub used: u64,
    /// Utilization, percent.
    pub util: Option<f64>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Option<f64>,
    /// Power draw, watts.
    pub power_w: Option<f64>,
    /// Per-process used memory (peak over the observation).
    pub procs: &'a [ProcRecord],
}

/// A training process found on a GPU.
#[derive(Debug, Clone, Copy)]
pub struct RankObs<'a> {
    /// Trace time, seconds.
    pub t: f64,
    /// Job id (torchrun's run id).
    pub job: &'a str,
    /// Global rank.
    pub rank: u32,
    /// Rank on its node.
    pub local_rank: u32,
    /// Ranks in the job.
    pub world_size: u32,
    /// Node name.
    pub node: &'a str,
    /// Device index on the node.
    pub gpu: u32,
    /// Process id.
    pub pid: u32,
}

/// The caching allocator's statistics from the in-process hook: the trace's
/// `alloc` record, borrowed (live, a hook record is read through it too; see
/// [`crate::records::from_window::alloc_ref`]).
pub type AllocObs<'a> = crate::records::AllocRef<'a>;
