//! One record as read from a line, before it is handed out: every field any
//! record type has, strings kept as positions in the line (or in a scratch
//! arena) so that skipping a line never fights a borrow, plus the checks
//! (`sanitize`) and the hand-out as a [`RecordRef`].
//!
//! Three parsers fill [`Fields`], fastest first, each giving up on anything
//! it is not sure of so that the next one decides: `scan.rs` (the canonical
//! form `gpumon record` writes), `parse.rs` (one serde_json pass, any JSON),
//! and the careful two-pass path in `reader.rs` whose verdicts and messages
//! are the reference. A parser that does not give up agrees with the careful
//! path value for value.

use std::borrow::Cow;

use super::skip::{Skip, MAX_SETTINGS_KEYS};

use gpumon_core::limits::{MAX_DEVICE_BYTES, MAX_LABEL_BYTES};
use gpumon_core::records::{AllocRef, EventRef, GpuRef, RankRef, RecordRef, StepRef};
use gpumon_core::records::{
    CapSource, CollectiveArrival, GroupWait, ProcRecord, SettingsRecord, StallRecord, TraceRecord,
};

/// Most negative `t` believed (clock skew before the first record), seconds.
pub(super) const MIN_T: f64 = -60.0;

/// Most `sections` the fast parsers take; a longer map takes the careful
/// path, which keeps their duplicate check linear.
pub(super) const MAX_FAST_SECTIONS: usize = 32;

/// Which record type the current [`Fields`] hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Kind {
    #[default]
    Gpu,
    Rank,
    Alloc,
    Step,
    Event,
    /// Read by the careful path only (nested objects; rare).
    Stall,
    /// Read by the careful path only (rare).
    Settings,
}

/// A string of the current record: a range of the line (the string had no
/// escapes) or of the scratch arena (unescaped, or from the careful path).
#[derive(Debug, Clone, Copy)]
pub(super) enum Str {
    Line(usize, usize),
    Arena(usize, usize),
}

impl Str {
    /// Copies `text` into the arena.
    pub(super) fn copy(text: &str, arena: &mut String) -> Str {
        let start = arena.len();
        arena.push_str(text);
        Str::Arena(start, arena.len())
    }

    pub(super) fn text<'a>(self, line: &'a str, arena: &'a str) -> &'a str {
        match self {
            Str::Line(a, b) => line.get(a..b).unwrap_or_default(),
            Str::Arena(a, b) => arena.get(a..b).unwrap_or_default(),
        }
    }
}

/// Buffers reused from line to line.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    /// Strings serde_json had to unescape.
    pub arena: String,
    /// The `procs` of the current `gpu` record.
    pub procs: Vec<ProcRecord>,
    /// The `sections` of the current `step` record.
    pub sections: Vec<(Str, f64)>,
    /// The current `stall` record.
    pub stall: StallRecord,
    /// The current `settings` record.
    pub settings: SettingsRecord,
    /// The `waits` of the current `step` record.
    pub waits: Vec<GroupWait>,
    /// The `collectives` of the current `step` record.
    pub collectives: Vec<CollectiveArrival>,
}

/// Every field any record type has, as read from one line: `None` when the
/// line lacks it. `Option<Option<_>>` for the nullable ones (present, null).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Fields {
    pub(super) ty: Option<Str>,
    pub(super) t: Option<f64>,
    pub(super) node: Option<Str>,
    pub(super) gpu: Option<u32>,
    pub(super) uuid: Option<Str>,
    pub(super) name: Option<Str>,
    pub(super) total: Option<u64>,
    pub(super) used: Option<u64>,
    pub(super) used_min: Option<Option<u64>>,
    pub(super) used_last: Option<Option<u64>>,
    pub(super) util: Option<Option<f64>>,
    pub(super) sm_clock_mhz: Option<Option<f64>>,
    pub(super) power_w: Option<Option<f64>>,
    pub(super) procs: bool,
    pub(super) job: Option<Str>,
    pub(super) rank: Option<u32>,
    pub(super) local_rank: Option<u32>,
    pub(super) world_size: Option<u32>,
    pub(super) pid: Option<u32>,
    pub(super) allocated: Option<u64>,
    pub(super) reserved: Option<u64>,
    pub(super) peak_allocated: Option<Option<u64>>,
    pub(super) inactive_split: Option<Option<u64>>,
    pub(super) alloc_retries: Option<Option<u64>>,
    pub(super) ooms: Option<Option<u64>>,
    pub(super) device_total: Option<Option<u64>>,
    pub(super) cap: Option<Option<u64>>,
    pub(super) cap_source: Option<Option<CapSource>>,
    pub(super) step: Option<u64>,
    pub(super) duration_ms: Option<f64>,
    pub(super) sections: bool,
    pub(super) group: Option<Option<u32>>,
    pub(super) waits: bool,
    pub(super) collectives: bool,
    pub(super) detail: Option<Option<Str>>,
}

/// What a fast parser made of a line.
#[derive(Debug)]
pub(super) enum Verdict<'a> {
    /// A record of this type with every required field.
    Record(Kind),
    /// A well-formed record of a type this build does not know.
    Unknown(&'a str),
    /// A well-formed object without `type`.
    NoType,
}

/// What the fields of a line make, once a fast parser filled them; `None`
/// when a required field is missing (the careful path then names it).
pub(super) fn verdict<'a>(
    line: &'a str,
    fields: &Fields,
    scratch: &'a Scratch,
) -> Option<Verdict<'a>> {
    let Some(ty) = fields.ty else {
        return Some(Verdict::NoType);
    };
    let kind = match ty.text(line, &scratch.arena) {
        "gpu" => Kind::Gpu,
        "rank" => Kind::Rank,
        "alloc" => Kind::Alloc,
        "step" => Kind::Step,
        "event" => Kind::Event,
        // The fast parsers do not read its nested objects: the careful path does.
        "stall" | "settings" => return None,
        other => return Some(Verdict::Unknown(other)),
    };
    fields.has_required(kind).then_some(Verdict::Record(kind))
}

impl Fields {
    /// Empties the fields and the scratch buffers for the next line.
    pub(super) fn clear(&mut self, scratch: &mut Scratch) {
        *self = Fields::default();
        scratch.arena.clear();
        scratch.procs.clear();
        scratch.sections.clear();
        scratch.waits.clear();
        scratch.collectives.clear();
    }

    /// Whether every field without a default in the owned record is present.
    fn has_required(&self, kind: Kind) -> bool {
        let f = self;
        f.t.is_some()
            && match kind {
                Kind::Gpu => {
                    f.node.is_some()
                        && f.gpu.is_some()
                        && f.uuid.is_some()
                        && f.total.is_some()
                        && f.used.is_some()
                }
                Kind::Rank => {
                    f.job.is_some()
                        && f.rank.is_some()
                        && f.world_size.is_some()
                        && f.node.is_some()
                        && f.gpu.is_some()
                }
                Kind::Alloc => {
                    f.job.is_some()
                        && f.rank.is_some()
                        && f.allocated.is_some()
                        && f.reserved.is_some()
                }
                Kind::Step => {
                    f.job.is_some()
                        && f.rank.is_some()
                        && f.step.is_some()
                        && f.duration_ms.is_some()
                }
                Kind::Event => f.job.is_some() && f.rank.is_some() && f.name.is_some(),
                Kind::Stall | Kind::Settings => true,
            }
    }

    /// Loads a record the careful path parsed; returns its type.
    pub(super) fn load(&mut self, record: TraceRecord, scratch: &mut Scratch) -> Kind {
        self.clear(scratch);
        let f = self;
        let arena = &mut scratch.arena;
        match record {
            TraceRecord::Gpu(r) => {
                f.t = Some(r.t);
                f.node = Some(Str::copy(&r.node, arena));
                f.gpu = Some(r.gpu);
                f.uuid = Some(Str::copy(&r.uuid, arena));
                f.name = Some(Str::copy(&r.name, arena));
                f.total = Some(r.total);
                f.used = Some(r.used);
                f.used_min = Some(r.used_min);
                f.used_last = Some(r.used_last);
                f.util = Some(r.util);
                f.sm_clock_mhz = Some(r.sm_clock_mhz);
                f.power_w = Some(r.power_w);
                f.procs = true;
                scratch.procs = r.procs;
                Kind::Gpu
            }
            TraceRecord::Rank(r) => {
                f.t = Some(r.t);
                f.job = Some(Str::copy(&r.job, arena));
                f.rank = Some(r.rank);
                f.local_rank = Some(r.local_rank);
                f.world_size = Some(r.world_size);
                f.node = Some(Str::copy(&r.node, arena));
                f.gpu = Some(r.gpu);
                f.pid = Some(r.pid);
                Kind::Rank
            }
            TraceRecord::Alloc(r) => {
                f.t = Some(r.t);
                f.job = Some(Str::copy(&r.job, arena));
                f.rank = Some(r.rank);
                f.allocated = Some(r.allocated);
                f.reserved = Some(r.reserved);
                f.peak_allocated = Some(r.peak_allocated);
                f.inactive_split = Some(r.inactive_split);
                f.alloc_retries = Some(r.alloc_retries);
                f.ooms = Some(r.ooms);
                f.device_total = Some(r.device_total);
                f.cap = Some(r.cap);
                f.cap_source = Some(r.cap_source);
                Kind::Alloc
            }
            TraceRecord::Step(r) => {
                f.t = Some(r.t);
                f.job = Some(Str::copy(&r.job, arena));
                f.rank = Some(r.rank);
                f.step = Some(r.step);
                f.duration_ms = Some(r.duration_ms);
                f.sections = true;
                f.group = Some(r.group);
                f.waits = !r.waits.is_empty();
                scratch.waits = r.waits;
                f.collectives = !r.collectives.is_empty();
                scratch.collectives = r.collectives;
                for (name, ms) in r.sections {
                    let name = Str::copy(&name, arena);
                    scratch.sections.push((name, ms));
                }
                Kind::Step
            }
            TraceRecord::Event(r) => {
                f.t = Some(r.t);
                f.job = Some(Str::copy(&r.job, arena));
                f.rank = Some(r.rank);
                f.name = Some(Str::copy(&r.name, arena));
                f.detail = Some(r.detail.map(|d| Str::copy(&d, arena)));
                Kind::Event
            }
            TraceRecord::Stall(r) => {
                f.t = Some(r.t);
                f.rank = Some(r.rank);
                scratch.stall = r;
                Kind::Stall
            }
            TraceRecord::Settings(r) => {
                f.t = Some(r.t);
                scratch.settings = r;
                Kind::Settings
            }
        }
    }

    /// Drops an alloc record's limit figures that cannot be: a device or a
    /// cap of no bytes or over 1 PiB, a cap over its device, and a cap
    /// without its source or a source without its cap.
    fn drop_impossible_limit(&mut self) {
        let plausible =
            |v: Option<Option<u64>>| Some(v.flatten().filter(|&b| b > 0 && b <= MAX_DEVICE_BYTES));
        self.device_total = plausible(self.device_total);
        let device = self.device_total.flatten().unwrap_or(MAX_DEVICE_BYTES);
        let cap = plausible(self.cap).flatten().filter(|&b| b <= device);
        let source = self.cap_source.flatten();
        let (cap, source) = match (cap, source) {
            (Some(c), Some(s)) => (Some(c), Some(s)),
            _ => (None, None),
        };
        (self.cap, self.cap_source) = (Some(cap), Some(source));
    }

    /// Rejects impossible records and drops impossible optional gauges, with
    /// the rules and messages the owned reader always had.
    pub(super) fn sanitize(&mut self, kind: Kind, scratch: &mut Scratch) -> Result<(), Skip> {
        let f = self;
        let t = f.t.unwrap_or(f64::NAN);
        if !t.is_finite() || t < MIN_T {
            return Err(Skip::Time { t });
        }
        let finite =
            |v: Option<Option<f64>>| Some(v.flatten().filter(|v| v.is_finite() && *v >= 0.0));
        match kind {
            Kind::Gpu => {
                let (total, used) = (f.total.unwrap_or(0), f.used.unwrap_or(0));
                if total == 0 || total > MAX_DEVICE_BYTES {
                    return Err(Skip::GpuTotal { total });
                }
                if used > total {
                    return Err(Skip::GpuUsed { used, total });
                }
                let within = |v: Option<Option<u64>>| Some(v.flatten().filter(|v| *v <= used));
                f.used_min = within(f.used_min);
                f.used_last = within(f.used_last);
                f.util = finite(f.util);
                f.sm_clock_mhz = finite(f.sm_clock_mhz);
                f.power_w = finite(f.power_w);
                scratch.procs.retain(|p| p.used <= total);
            }
            Kind::Alloc => {
                let (allocated, reserved) = (f.allocated.unwrap_or(0), f.reserved.unwrap_or(0));
                if reserved > MAX_DEVICE_BYTES || allocated > reserved {
                    return Err(Skip::Alloc {
                        allocated,
                        reserved,
                    });
                }
                f.drop_impossible_limit();
            }
            Kind::Step => {
                let duration_ms = f.duration_ms.unwrap_or(f64::NAN);
                if !duration_ms.is_finite() || duration_ms < 0.0 {
                    return Err(Skip::StepDuration { duration_ms });
                }
                scratch
                    .sections
                    .retain(|(_, ms)| ms.is_finite() && *ms >= 0.0);
            }
            Kind::Rank => {
                let (rank, world_size) = (f.rank.unwrap_or(0), f.world_size.unwrap_or(0));
                if rank >= world_size {
                    return Err(Skip::Rank { rank, world_size });
                }
            }
            Kind::Event => {}
            Kind::Settings => {
                let s = &scratch.settings;
                let keys = s.set.len() + s.reset.len();
                let longest = s.set.keys().chain(&s.reset).map(String::len).max();
                if keys > MAX_SETTINGS_KEYS || longest.unwrap_or(0) > MAX_LABEL_BYTES {
                    return Err(Skip::Settings {
                        keys,
                        longest: longest.unwrap_or(0),
                    });
                }
            }
            Kind::Stall => {
                let s = &scratch.stall;
                let waited = s.waiting.as_ref().map_or(0.0, |w| w.waited_s);
                if !(s.quiet_s.is_finite()
                    && s.quiet_s >= 0.0
                    && waited.is_finite()
                    && waited >= 0.0)
                {
                    return Err(Skip::Stall {
                        quiet_s: s.quiet_s,
                        waited_s: waited,
                    });
                }
            }
        }
        Ok(())
    }

    /// Hands the record out, borrowing `line` and the scratch buffers.
    pub(super) fn record<'a>(
        &self,
        kind: Kind,
        line: &'a str,
        scratch: &'a Scratch,
    ) -> RecordRef<'a> {
        let arena = scratch.arena.as_str();
        let s = |v: Option<Str>| Cow::Borrowed(v.map_or("", |v| v.text(line, arena)));
        let f = self;
        let t = f.t.unwrap_or_default();
        let job = s(f.job);
        let rank = f.rank.unwrap_or_default();
        match kind {
            Kind::Gpu => RecordRef::Gpu(GpuRef {
                t,
                node: s(f.node),
                gpu: f.gpu.unwrap_or_default(),
                uuid: s(f.uuid),
                name: s(f.name),
                total: f.total.unwrap_or_default(),
                used: f.used.unwrap_or_default(),
                used_min: f.used_min.flatten(),
                used_last: f.used_last.flatten(),
                util: f.util.flatten(),
                sm_clock_mhz: f.sm_clock_mhz.flatten(),
                power_w: f.power_w.flatten(),
                procs: Cow::Borrowed(&scratch.procs),
            }),
            Kind::Rank => RecordRef::Rank(RankRef {
                t,
                job,
                rank,
                local_rank: f.local_rank.unwrap_or_default(),
                world_size: f.world_size.unwrap_or_default(),
                node: s(f.node),
                gpu: f.gpu.unwrap_or_default(),
                pid: f.pid.unwrap_or_default(),
            }),
            Kind::Alloc => RecordRef::Alloc(AllocRef {
                t,
                job,
                rank,
                allocated: f.allocated.unwrap_or_default(),
                reserved: f.reserved.unwrap_or_default(),
                peak_allocated: f.peak_allocated.flatten(),
                inactive_split: f.inactive_split.flatten(),
                alloc_retries: f.alloc_retries.flatten(),
                ooms: f.ooms.flatten(),
                device_total: f.device_total.flatten(),
                cap: f.cap.flatten(),
                cap_source: f.cap_source.flatten(),
            }),
            Kind::Step => RecordRef::Step(StepRef {
                t,
                job,
                rank,
                step: f.step.unwrap_or_default(),
                duration_ms: f.duration_ms.unwrap_or_default(),
                group: f.group.flatten(),
                waits: if f.waits {
                    scratch.waits.clone()
                } else {
                    Vec::new()
                },
                collectives: if f.collectives {
                    scratch.collectives.clone()
                } else {
                    Vec::new()
                },
                sections: scratch
                    .sections
                    .iter()
                    .map(|&(name, ms)| (Cow::Borrowed(name.text(line, arena)), ms))
                    .collect(),
            }),
            Kind::Event => RecordRef::Event(EventRef {
                t,
                job,
                rank,
                name: s(f.name),
                detail: f
                    .detail
                    .flatten()
                    .map(|d| Cow::Borrowed(d.text(line, arena))),
            }),
            Kind::Stall => RecordRef::Stall(Cow::Borrowed(&scratch.stall)),
            Kind::Settings => RecordRef::Settings(Cow::Borrowed(&scratch.settings)),
        }
    }
}
