//! Records borrowed from the reader's line buffer: what [`TraceReader::next_ref`]
//! hands out without allocating.
//!
//! Each type mirrors its owned twin in `record.rs` field for field; strings
//! are `Cow`s that borrow whenever the line held them unescaped.
//!
//! [`TraceReader::next_ref`]: super::TraceReader::next_ref

use std::borrow::Cow;

use gpumon_proto::{CapSource, CollectiveArrival, DeviceLimit, GroupWait, MemoryCap};

use super::record::{
    AllocRecord, EventRecord, GpuRecord, ProcRecord, RankRecord, SettingsRecord, StallRecord,
    StepRecord, TraceRecord,
};

/// `$Owned { .. }` from the borrowed record `$r`, field for field: the
/// `copy` fields as they are, the `own` ones through `Cow::into_owned`.
macro_rules! owned {
    ($r:ident => $Owned:ident { copy: $($copy:ident),+; own: $($own:ident),+ }) => {
        $Owned {
            $($copy: $r.$copy,)+
            $($own: $r.$own.into_owned(),)+
        }
    };
}

/// `$Ref { .. }` borrowing the owned record `$r`, field for field: the
/// `copy` fields as they are, the `borrow` ones as `Cow::Borrowed`.
macro_rules! borrowed {
    ($r:ident => $Ref:ident { copy: $($copy:ident),+; borrow: $($b:ident),+ }) => {
        $Ref {
            $($copy: $r.$copy,)+
            $($b: Cow::Borrowed(&$r.$b),)+
        }
    };
}

/// One record borrowed from the line it was read from; `t` is seconds since
/// the trace start. [`RecordRef::to_owned`] turns it into a [`TraceRecord`].
#[derive(Debug, Clone, PartialEq)]
pub enum RecordRef<'a> {
    /// One NVML sample of one device.
    Gpu(GpuRef<'a>),
    /// A training process found on a GPU.
    Rank(RankRef<'a>),
    /// The caching allocator's statistics of one rank.
    Alloc(AllocRef<'a>),
    /// One finished training step of one rank.
    Step(StepRef<'a>),
    /// A user marker.
    Event(EventRef<'a>),
    /// A stalled rank (rare: kept whole).
    Stall(Cow<'a, StallRecord>),
    /// A live settings change (rare: kept whole).
    Settings(Cow<'a, SettingsRecord>),
}

/// `gpu`: one NVML sample of one device, borrowed.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRef<'a> {
    /// Seconds since the trace start.
    pub t: f64,
    /// Node name.
    pub node: Cow<'a, str>,
    /// Device index on the node.
    pub gpu: u32,
    /// NVML UUID.
    pub uuid: Cow<'a, str>,
    /// Product name; empty when the record has none.
    pub name: Cow<'a, str>,
    /// Capacity, bytes.
    pub total: u64,
    /// Used, bytes: for an agent's window, its peak.
    pub used: u64,
    /// For an agent's window, the least used of its samples, bytes.
    pub used_min: Option<u64>,
    /// For an agent's window, its newest sample's used, bytes.
    pub used_last: Option<u64>,
    /// Utilization, percent.
    pub util: Option<f64>,
    /// SM clock, MHz.
    pub sm_clock_mhz: Option<f64>,
    /// Power, watts.
    pub power_w: Option<f64>,
    /// Compute processes (borrowed from the reader's buffer).
    pub procs: Cow<'a, [ProcRecord]>,
}

/// `rank`: a training process found on a GPU, borrowed.
#[derive(Debug, Clone, PartialEq)]
pub struct RankRef<'a> {
    /// Seconds since the trace start.
    pub t: f64,
    /// Job id.
    pub job: Cow<'a, str>,
    /// Global rank.
    pub rank: u32,
    /// Rank on its node (0 when the record has none).
    pub local_rank: u32,
    /// World size.
    pub world_size: u32,
    /// Node name.
    pub node: Cow<'a, str>,
    /// Device index on the node.
    pub gpu: u32,
    /// Process id (0 when the record has none).
    pub pid: u32,
}

/// `alloc`: the caching allocator's statistics, borrowed.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocRef<'a> {
    /// Seconds since the trace start.
    pub t: f64,
    /// Job id.
    pub job: Cow<'a, str>,
    /// Rank.
    pub rank: u32,
    /// Bytes in live tensors.
    pub allocated: u64,
    /// Bytes the allocator holds from the driver.
    pub reserved: u64,
    /// Peak allocated since the last reset, bytes.
    pub peak_allocated: Option<u64>,
    /// Free bytes stranded inside split blocks.
    pub inactive_split: Option<u64>,
    /// `num_alloc_retries`: cache flushes to satisfy an allocation.
    pub alloc_retries: Option<u64>,
    /// `num_ooms`.
    pub ooms: Option<u64>,
    /// The device's memory as the process sees it, bytes.
    pub device_total: Option<u64>,
    /// Bytes the allocator may reserve, when a cap is set.
    pub cap: Option<u64>,
    /// What set the cap.
    pub cap_source: Option<CapSource>,
}

impl AllocRef<'_> {
    /// What bounds the process's memory, when the record says: its device
    /// as it sees it and the allocator's cap (a cap without its source, or
    /// a source without its cap, is no cap).
    pub fn limit(&self) -> Option<DeviceLimit> {
        let cap = match (self.cap, self.cap_source) {
            (Some(bytes), Some(source)) => Some(MemoryCap { bytes, source }),
            _ => None,
        };
        (self.device_total.is_some() || cap.is_some()).then_some(DeviceLimit {
            device_total: self.device_total,
            cap,
        })
    }
}

/// `step`: one finished training step, borrowed.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRef<'a> {
    /// Seconds since the trace start.
    pub t: f64,
    /// Job id.
    pub job: Cow<'a, str>,
    /// Rank.
    pub rank: u32,
    /// Step number.
    pub step: u64,
    /// Wall time of the step, ms.
    pub duration_ms: f64,
    /// Per-section compute time, ms, as (name, ms) pairs: names are unique;
    /// the order is the line's (or by name when the reader had to take its
    /// careful path), so look sections up by name, e.g. with [`StepRef::section`].
    pub sections: Vec<(Cow<'a, str>, f64)>,
    /// The rank's peer group (see [`StepRecord::group`]).
    pub group: Option<u32>,
    /// Its collective waits per process group (see [`StepRecord::waits`]).
    pub waits: Vec<GroupWait>,
    /// The collectives it entered, one by one (see [`StepRecord::collectives`]).
    pub collectives: Vec<CollectiveArrival>,
}

/// `event`: a user marker, borrowed.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRef<'a> {
    /// Seconds since the trace start.
    pub t: f64,
    /// Job id.
    pub job: Cow<'a, str>,
    /// Rank.
    pub rank: u32,
    /// Marker name, e.g. `eval start`.
    pub name: Cow<'a, str>,
    /// Free text.
    pub detail: Option<Cow<'a, str>>,
}

impl StepRef<'_> {
    /// The time of section `name`, ms, if the step reported it.
    pub fn section(&self, name: &str) -> Option<f64> {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, ms)| ms)
    }
}

impl RecordRef<'_> {
    /// Seconds since the trace start.
    pub fn t(&self) -> f64 {
        match self {
            RecordRef::Gpu(r) => r.t,
            RecordRef::Rank(r) => r.t,
            RecordRef::Alloc(r) => r.t,
            RecordRef::Step(r) => r.t,
            RecordRef::Event(r) => r.t,
            RecordRef::Stall(r) => r.t,
            RecordRef::Settings(r) => r.t,
        }
    }

    /// The record's `type` as written in the trace: `gpu`, `rank`, `alloc`,
    /// `step`, `event`, `stall` or `settings`.
    pub fn type_name(&self) -> &'static str {
        match self {
            RecordRef::Gpu(_) => "gpu",
            RecordRef::Rank(_) => "rank",
            RecordRef::Alloc(_) => "alloc",
            RecordRef::Step(_) => "step",
            RecordRef::Event(_) => "event",
            RecordRef::Stall(_) => "stall",
            RecordRef::Settings(_) => "settings",
        }
    }

    /// An owned copy (allocates every string).
    pub fn to_owned(&self) -> TraceRecord {
        self.clone().into_owned()
    }

    /// Turns the record into an owned one, reusing strings that are already owned.
    pub fn into_owned(self) -> TraceRecord {
        match self {
            RecordRef::Gpu(r) => TraceRecord::Gpu(owned!(r => GpuRecord {
                copy: t, gpu, total, used, used_min, used_last, util, sm_clock_mhz, power_w;
                own: node, uuid, name, procs
            })),
            RecordRef::Rank(r) => TraceRecord::Rank(owned!(r => RankRecord {
                copy: t, rank, local_rank, world_size, gpu, pid;
                own: job, node
            })),
            RecordRef::Alloc(r) => TraceRecord::Alloc(owned!(r => AllocRecord {
                copy: t, rank, allocated, reserved, peak_allocated, inactive_split, alloc_retries, ooms,
                    device_total, cap, cap_source;
                own: job
            })),
            RecordRef::Step(r) => TraceRecord::Step(StepRecord {
                group: r.group,
                waits: r.waits,
                collectives: r.collectives,
                t: r.t,
                job: r.job.into_owned(),
                rank: r.rank,
                step: r.step,
                duration_ms: r.duration_ms,
                sections: r
                    .sections
                    .into_iter()
                    .map(|(name, ms)| (name.into_owned(), ms))
                    .collect(),
            }),
            RecordRef::Event(r) => TraceRecord::Event(EventRecord {
                t: r.t,
                job: r.job.into_owned(),
                rank: r.rank,
                name: r.name.into_owned(),
                detail: r.detail.map(Cow::into_owned),
            }),
            RecordRef::Stall(r) => TraceRecord::Stall(r.into_owned()),
            RecordRef::Settings(r) => TraceRecord::Settings(r.into_owned()),
        }
    }
}

impl<'a> From<&'a TraceRecord> for RecordRef<'a> {
    /// Borrows an owned record, e.g. to feed one consumer from both a live
    /// source and a trace.
    fn from(record: &'a TraceRecord) -> Self {
        match record {
            TraceRecord::Gpu(r) => RecordRef::Gpu(borrowed!(r => GpuRef {
                copy: t, gpu, total, used, used_min, used_last, util, sm_clock_mhz, power_w;
                borrow: node, uuid, name, procs
            })),
            TraceRecord::Rank(r) => RecordRef::Rank(borrowed!(r => RankRef {
                copy: t, rank, local_rank, world_size, gpu, pid;
                borrow: job, node
            })),
            TraceRecord::Alloc(r) => RecordRef::Alloc(borrowed!(r => AllocRef {
                copy: t, rank, allocated, reserved, peak_allocated, inactive_split, alloc_retries, ooms,
                    device_total, cap, cap_source;
                borrow: job
            })),
            TraceRecord::Step(r) => RecordRef::Step(StepRef {
                group: r.group,
                waits: r.waits.clone(),
                collectives: r.collectives.clone(),
                t: r.t,
                job: Cow::Borrowed(&r.job),
                rank: r.rank,
                step: r.step,
                duration_ms: r.duration_ms,
                sections: r
                    .sections
                    .iter()
                    .map(|(name, &ms)| (Cow::Borrowed(name.as_str()), ms))
                    .collect(),
            }),
            TraceRecord::Event(r) => RecordRef::Event(EventRef {
                t: r.t,
                job: Cow::Borrowed(&r.job),
                rank: r.rank,
                name: Cow::Borrowed(&r.name),
                detail: r.detail.as_deref().map(Cow::Borrowed),
            }),
            TraceRecord::Stall(r) => RecordRef::Stall(Cow::Borrowed(r)),
            TraceRecord::Settings(r) => RecordRef::Settings(Cow::Borrowed(r)),
        }
    }
}
