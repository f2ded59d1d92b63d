//! The records of a trace, one per line.

use std::collections::BTreeMap;

pub use gpumon_proto::{CapSource, CollectiveArrival, GroupWait};
use serde::{Deserialize, Serialize};

/// One record; `t` is seconds since the trace start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum TraceRecord {
    /// One NVML sample of one device.
    Gpu(GpuRecord),
    /// A training process found on a GPU.
    Rank(RankRecord),
    /// The caching allocator's statistics of one rank.
    Alloc(AllocRecord),
    /// One finished training step of one rank.
    Step(StepRecord),
    /// A user marker.
    Event(EventRecord),
    /// A rank that has finished no step for a while (see `engine::hang`).
    Stall(StallRecord),
    /// A live settings change (see `settings`).
    Settings(SettingsRecord),
}

impl TraceRecord {
    /// Seconds since the trace start.
    pub fn t(&self) -> f64 {
        match self {
            TraceRecord::Gpu(r) => r.t,
            TraceRecord::Rank(r) => r.t,
            TraceRecord::Alloc(r) => r.t,
            TraceRecord::Step(r) => r.t,
            TraceRecord::Event(r) => r.t,
            TraceRecord::Stall(r) => r.t,
            TraceRecord::Settings(r) => r.t,
        }
    }
}

/// `gpu`: one NVML sample of one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuRecord {
    /// Seconds since the trace start.
    pub t: f64,
    /// Node name.
    pub node: String,
    /// Device index on the node.
    pub gpu: u32,
    /// NVML UUID.
    pub uuid: String,
    /// Product name.
    #[serde(default)]
    pub name: String,
    /// Capacity, bytes.
    pub total: u64,
    /// Used, bytes: for an agent's window, its peak.
    pub used: u64,
    /// For an agent's window, the least used of its samples, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_min: Option<u64>,
    /// For an agent's window, its newest sample's used, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_last: Option<u64>,
    /// Utilization, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util: Option<f64>,
    /// SM clock, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<f64>,
    /// Power, watts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    /// Compute processes.
    #[serde(default)]
    pub procs: Vec<ProcRecord>,
}

/// A process in a `gpu` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRecord {
    /// Process id.
    pub pid: u32,
    /// GPU memory it holds, bytes.
    pub used: u64,
}

/// `rank`: a training process found on a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankRecord {
    /// Seconds since the trace start.
    pub t: f64,
    /// Job id.
    pub job: String,
    /// Global rank.
    pub rank: u32,
    /// Rank on its node.
    #[serde(default)]
    pub local_rank: u32,
    /// World size.
    pub world_size: u32,
    /// Node name.
    pub node: String,
    /// Device index on the node.
    pub gpu: u32,
    /// Process id.
    #[serde(default)]
    pub pid: u32,
}

/// `alloc`: the caching allocator's statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocRecord {
    /// Seconds since the trace start.
    pub t: f64,
    /// Job id.
    pub job: String,
    /// Rank.
    pub rank: u32,
    /// Bytes in live tensors.
    pub allocated: u64,
    /// Bytes the allocator holds from the driver.
    pub reserved: u64,
    /// Peak allocated since the last reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_allocated: Option<u64>,
    /// Free bytes stranded inside split blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inactive_split: Option<u64>,
    /// `num_alloc_retries`: cache flushes to satisfy an allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_retries: Option<u64>,
    /// `num_ooms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ooms: Option<u64>,
    /// The device's memory as the process sees it, bytes (a MIG slice's
    /// size on a MIG GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_total: Option<u64>,
    /// Bytes the allocator may reserve, when a cap is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<u64>,
    /// What set the cap (with `cap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap_source: Option<CapSource>,
}

/// `step`: one finished training step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Seconds since the trace start.
    pub t: f64,
    /// Job id.
    pub job: String,
    /// Rank.
    pub rank: u32,
    /// Step number.
    pub step: u64,
    /// Wall time of the step, ms.
    pub duration_ms: f64,
    /// Per-section compute time, ms (`data`, `forward`, `backward`, ...).
    #[serde(default)]
    pub sections: BTreeMap<String, f64>,
    /// The rank's peer group: the lowest rank of the ranks it is compared
    /// with (its pipeline stage's data-parallel replicas); absent when the
    /// whole job is one group. Optional within trace version 1: a trace
    /// without it reads as before, and readers that predate it skip it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u32>,
    /// The step's collective waits per process group (see
    /// [`gpumon_proto::GroupWait`]): `[{"group": "1", "calls": 12,
    /// "wait_ms": 24.0}, ...]`. Optional within trace version 1, like
    /// `group`.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_none"
    )]
    pub waits: Vec<GroupWait>,
    /// The collectives the rank entered in the step, one by one (see
    /// [`gpumon_proto::CollectiveArrival`]): `[{"group": "1", "seq": 41,
    /// "op": "all_reduce", "entered_ms": 2.5, "left_ms": 9.0, "wait_ms":
    /// 6.5}, ...]`, times in ms after the step began. Optional within trace
    /// version 1, like `group`.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_none"
    )]
    pub collectives: Vec<CollectiveArrival>,
}

/// `null` reads as an empty list, as an absent field does.
fn null_as_none<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// `event`: a user marker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Seconds since the trace start.
    pub t: f64,
    /// Job id.
    pub job: String,
    /// Rank.
    pub rank: u32,
    /// Marker name, e.g. `eval start`.
    pub name: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `stall`: a rank whose training thread has finished no step for a while,
/// as its hook's reporter thread saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StallRecord {
    /// Seconds since the trace start.
    pub t: f64,
    /// Job id.
    pub job: String,
    /// Global rank.
    pub rank: u32,
    /// The number of the rank's last finished step.
    pub step: u64,
    /// Seconds since that step ended.
    pub quiet_s: f64,
    /// Where the sequence numbers come from: `flight_recorder`, `wrappers`
    /// or `none`.
    pub source: String,
    /// The collective the rank waits in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<WaitRecord>,
    /// The last sequence number entered per process group, most recent first.
    #[serde(default)]
    pub entered: Vec<(String, u64)>,
    /// The last `gpumon.mark` name since the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker: Option<String>,
}

/// The collective a stalled rank waits in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitRecord {
    /// Process group name (`"0"`: the default group).
    pub group: String,
    /// The group's description.
    #[serde(default)]
    pub desc: String,
    /// Sequence number in the group.
    pub seq: u64,
    /// Operation.
    pub op: String,
    /// Input elements.
    #[serde(default)]
    pub numel: u64,
    /// Seconds waited so far.
    pub waited_s: f64,
    /// The process group's timeout, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
}

/// `settings`: an admin's live settings change, at the point of the trace
/// where it took effect.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SettingsRecord {
    /// Seconds since the trace start.
    pub t: f64,
    /// The job it is for; absent: cluster-wide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// Keys set, with their values (numbers, or a severity's name).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, SettingValue>,
    /// Keys put back to what applies without an override.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reset: Vec<String>,
    /// Every override of the scope dropped (before `reset` and `set`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset_all: bool,
}

/// A setting's value in a trace: a number or a name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SettingValue {
    /// A number.
    Number(f64),
    /// A name (a severity).
    Text(String),
}

impl SettingValue {
    /// The value as the settings take it.
    pub fn text(&self) -> String {
        match self {
            SettingValue::Number(n) => n.to_string(),
            SettingValue::Text(s) => s.clone(),
        }
    }
}
