//! What agents push, as trace records: the one mapping from a pushed window
//! (and its node) to `rank` and `gpu` records, and from a hook record to an
//! `alloc`, `step` or `event` record. The coordinator's stream writes these
//! and `gpumon record` copies them into a trace file, so a recorded trace
//! replays as the coordinator's engine saw the windows live
//! ([`crate::engine::Engine::observe_window`]): `used` is the window's peak,
//! `used_min` and `used_last` its least and newest sample (left out when
//! they equal the peak, which is what a reader assumes then).
//!
//! `t` here is absolute: the window's end or the record's time, in seconds
//! since the Unix epoch; `gpumon record` rebases it to the trace's start.

use std::borrow::Cow;

use gpumon_proto::{GaugeStat, GpuWindow, HookRecord};

use super::record::{
    EventRecord, GpuRecord, ProcRecord, RankRecord, StallRecord, StepRecord, TraceRecord,
    WaitRecord,
};
use super::record_ref::{AllocRef, RecordRef};

/// A `rank` record for each process of the window with a known job and rank.
pub fn rank_records<'a>(node: &'a str, w: &'a GpuWindow) -> impl Iterator<Item = RankRecord> + 'a {
    let t = w.end_ms as f64 / 1000.0;
    w.procs.iter().filter_map(move |p| {
        let r = p.rank.as_ref()?;
        Some(RankRecord {
            t,
            job: r.job.clone(),
            rank: r.rank,
            local_rank: r.local_rank,
            world_size: r.world_size,
            node: node.to_owned(),
            gpu: w.gpu.index,
            pid: p.pid,
        })
    })
}

/// The window's `gpu` record: memory from its peak, least and newest
/// sample, per process its peak; `util`, `sm_clock_mhz` and `power_w` its
/// means.
pub fn gpu_record(node: &str, w: &GpuWindow) -> GpuRecord {
    let used = w.used_bytes.max;
    let unless_peak = |v: u64| (v != used).then_some(v);
    GpuRecord {
        t: w.end_ms as f64 / 1000.0,
        node: node.to_owned(),
        gpu: w.gpu.index,
        uuid: w.gpu.uuid.clone(),
        name: w.gpu.name.clone(),
        total: w.gpu.total_bytes,
        used,
        used_min: unless_peak(w.used_bytes.min),
        used_last: unless_peak(w.used_bytes.last),
        util: mean(w.util_pct.as_ref()),
        sm_clock_mhz: mean(w.sm_clock_mhz.as_ref()),
        power_w: mean(w.power_w.as_ref()),
        procs: w
            .procs
            .iter()
            .map(|p| ProcRecord {
                pid: p.pid,
                used: p.used_bytes.max,
            })
            .collect(),
    }
}

/// A gauge's window mean as the f32's shortest decimal (`42.7`, not
/// `42.70000076293945`, which `f64::from` gives); none when not finite.
fn mean(g: Option<&GaugeStat>) -> Option<f64> {
    let m = g?.mean;
    if !m.is_finite() {
        return None;
    }
    Some(m.to_string().parse().unwrap_or(f64::from(m)))
}

/// A hook's allocator statistics as the trace's `alloc` record, borrowed.
pub fn alloc_ref(a: &gpumon_proto::AllocRecord) -> AllocRef<'_> {
    AllocRef {
        t: a.t_ms as f64 / 1000.0,
        job: Cow::Borrowed(&a.job),
        rank: a.rank,
        allocated: a.stats.allocated,
        reserved: a.stats.reserved,
        peak_allocated: a.stats.peak_allocated,
        inactive_split: a.stats.inactive_split,
        alloc_retries: a.stats.alloc_retries,
        ooms: a.stats.ooms,
        device_total: a.limit.and_then(|l| l.device_total),
        cap: a.limit.and_then(|l| l.cap).map(|c| c.bytes),
        cap_source: a.limit.and_then(|l| l.cap).map(|c| c.source),
    }
}

/// A hook record as its trace record; a named snapshot has no trace form
/// and is left out.
pub fn hook_record(r: &HookRecord) -> Option<TraceRecord> {
    let t = r.t_ms() as f64 / 1000.0;
    Some(match r {
        HookRecord::Alloc(a) => RecordRef::Alloc(alloc_ref(a)).to_owned(),
        HookRecord::Step(s) => TraceRecord::Step(StepRecord {
            group: s.group,
            waits: s.waits.clone(),
            collectives: s.collectives.clone(),
            t,
            job: s.job.clone(),
            rank: s.rank,
            step: s.step,
            duration_ms: s.duration_ms,
            sections: s.sections.iter().cloned().collect(),
        }),
        HookRecord::Event(e) if e.snapshot.is_none() => TraceRecord::Event(EventRecord {
            t,
            job: e.job.clone(),
            rank: e.rank,
            name: e.name.clone(),
            detail: e.detail.clone(),
        }),
        HookRecord::Event(_) => return None,
        HookRecord::Stall(s) => TraceRecord::Stall(StallRecord {
            t,
            job: s.job.clone(),
            rank: s.rank,
            step: s.step,
            quiet_s: s.quiet_ms as f64 / 1000.0,
            source: s.source.clone(),
            waiting: s.waiting.as_ref().map(|w| WaitRecord {
                group: w.group.clone(),
                desc: w.desc.clone(),
                seq: w.seq,
                op: w.op.clone(),
                numel: w.numel,
                waited_s: w.waited_ms as f64 / 1000.0,
                timeout_s: w.timeout_ms.map(|ms| ms as f64 / 1000.0),
            }),
            entered: s.entered.clone(),
            marker: s.marker.clone(),
        }),
    })
}
