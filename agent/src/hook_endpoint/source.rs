//! GPU samples built from hook reports, for an agent that samples no GPU
//! itself (`--source none`, or NVML missing).
//!
//! Each hooked process reports its device (at `register`) and, in its
//! `alloc` records, the whole device's used and total memory
//! (`torch.cuda.mem_get_info()`). [`HookSource`] turns that into one
//! [`GpuSample`] per device per sampling round, with one process entry per
//! session on the device (its allocator's reserved bytes, its rank), so the
//! coordinator's memory windows and forecasts work on a node without NVML.
//!
//! A device is sampled only while one of its sessions has a reading at most
//! [`FRESH_MS`] old: a process that stopped reporting (hung, or stuck in a
//! long step) does not freeze the device at its last value. When the last
//! session on a device ends, the device is still sampled for [`TAIL_MS`],
//! without processes and with the departed processes' memory taken off, so
//! the coordinator sees the processes leave rather than the device vanish
//! with its old level.
//!
//! Time is the `t_ms` the agent passes to [`GpuSource::sample`]; nothing
//! here reads a clock, so tests drive it directly.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpumon_proto::{GpuInfo, GpuSample, ProcSample, RankInfo};

use super::hub::{HookDevice, HookHub, SessionInfo};
use super::records::AllocReading;
use crate::source::{GpuSource, SourceError};

/// Oldest device reading still sampled, ms.
pub const FRESH_MS: u64 = 10_000;
/// How long a device is still sampled after its last session ended, ms.
pub const TAIL_MS: u64 = 30_000;

/// A [`GpuSource`] fed by the hook sessions of a [`HookHub`]; see the module docs.
#[derive(Debug)]
pub struct HookSource {
    hub: Arc<HookHub>,
    /// Devices sampled before, by UUID.
    devices: BTreeMap<String, Known>,
}

#[derive(Debug)]
struct Known {
    gpu: GpuInfo,
    /// The reading behind the last sample with sessions: its time, the
    /// device's used bytes, the sessions' reserved bytes.
    last: Option<(u64, u64, u64)>,
    /// When the device was first found without sessions.
    tail_since: Option<u64>,
}

impl HookSource {
    /// A source over the sessions of `hub`.
    pub fn new(hub: Arc<HookHub>) -> Self {
        Self {
            hub,
            devices: BTreeMap::new(),
        }
    }

    /// The UUID of a device: its own, or `hook-NODE-INDEX` when the hook
    /// could not read one.
    fn uuid(&self, device: &HookDevice) -> String {
        device
            .uuid
            .clone()
            .unwrap_or_else(|| format!("hook-{}-{}", self.hub.node(), device.index))
    }

    /// The live sessions with a device, grouped by device UUID.
    fn by_device(&self) -> BTreeMap<String, Vec<SessionInfo>> {
        let mut groups: BTreeMap<String, Vec<SessionInfo>> = BTreeMap::new();
        for s in self.hub.sessions() {
            if let Some(device) = &s.registration.device {
                groups.entry(self.uuid(device)).or_default().push(s);
            }
        }
        groups
    }

    fn gpu_info(&self, uuid: &str, device: &HookDevice, reading: Option<&AllocReading>) -> GpuInfo {
        let total_bytes = match device.total_bytes {
            0 => reading.and_then(|r| r.device_total).unwrap_or(0),
            total => total,
        };
        GpuInfo {
            uuid: uuid.to_owned(),
            index: device.index,
            name: device.name.clone(),
            total_bytes,
        }
    }
}

fn proc_sample(s: &SessionInfo) -> ProcSample {
    let r = &s.registration;
    ProcSample {
        pid: r.pid,
        used_bytes: s.last_alloc.map_or(0, |a| a.reserved),
        rank: Some(RankInfo {
            job: r.job.clone(),
            rank: r.rank,
            local_rank: r.local_rank,
            world_size: r.world_size,
            master_addr: None,
            master_port: None,
        }),
    }
}

fn sample(t_ms: u64, gpu: GpuInfo, used_bytes: u64, procs: Vec<ProcSample>) -> GpuSample {
    GpuSample {
        t_ms,
        gpu,
        used_bytes,
        reserved_bytes: None,
        util_pct: None,
        sm_clock_mhz: None,
        power_w: None,
        procs,
    }
}

impl GpuSource for HookSource {
    fn name(&self) -> String {
        "hook".into()
    }

    /// The devices of live sessions, and those still in their tail.
    fn gpus(&self) -> Vec<GpuInfo> {
        let mut gpus: BTreeMap<String, GpuInfo> = self
            .devices
            .iter()
            .filter(|(_, k)| k.tail_since.is_some())
            .map(|(uuid, k)| (uuid.clone(), k.gpu.clone()))
            .collect();
        for (uuid, sessions) in self.by_device() {
            let s = &sessions[0];
            let device = s.registration.device.as_ref().expect("grouped by device");
            let info = self.gpu_info(&uuid, device, s.last_device.as_ref());
            gpus.insert(uuid, info);
        }
        let mut gpus: Vec<GpuInfo> = gpus.into_values().collect();
        gpus.sort_by(|a, b| a.index.cmp(&b.index).then_with(|| a.uuid.cmp(&b.uuid)));
        gpus
    }

    fn sample(&mut self, t_ms: u64) -> Result<Vec<GpuSample>, SourceError> {
        let live = self.by_device();
        let mut out = Vec::new();
        for (uuid, sessions) in &live {
            let newest = sessions
                .iter()
                .filter_map(|s| s.last_device)
                .filter(|d| t_ms.saturating_sub(d.t_ms) <= FRESH_MS)
                .max_by_key(|d| d.t_ms);
            let device = sessions[0]
                .registration
                .device
                .as_ref()
                .expect("grouped by device");
            let gpu = self.gpu_info(uuid, device, newest.as_ref());
            let known = self.devices.entry(uuid.clone()).or_insert_with(|| Known {
                gpu: gpu.clone(),
                last: None,
                tail_since: None,
            });
            known.tail_since = None;
            known.gpu = gpu.clone();
            let Some(reading) = newest else {
                continue;
            };
            let used = reading.device_used.unwrap_or(0);
            let procs: Vec<ProcSample> = sessions.iter().map(proc_sample).collect();
            let reserved = procs.iter().map(|p| p.used_bytes).sum();
            known.last = Some((reading.t_ms, used, reserved));
            out.push(sample(t_ms, gpu, used, procs));
        }
        self.devices.retain(|uuid, known| {
            if live.contains_key(uuid) {
                return true;
            }
            let Some((reading_t, used, reserved)) = known.last else {
                return false;
            };
            let since = match known.tail_since {
                Some(since) => since,
                // Only a device that would still be sampled gets a tail: one
                // whose reading had gone stale already left the coordinator's view.
                None if t_ms.saturating_sub(reading_t) <= FRESH_MS => {
                    *known.tail_since.insert(t_ms)
                }
                None => return false,
            };
            if t_ms.saturating_sub(since) > TAIL_MS {
                return false;
            }
            out.push(sample(
                t_ms,
                known.gpu.clone(),
                used.saturating_sub(reserved),
                Vec::new(),
            ));
            true
        });
        out.sort_by(|a, b| (a.gpu.index, &a.gpu.uuid).cmp(&(b.gpu.index, &b.gpu.uuid)));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook_endpoint::hub::Registration;
    use crate::hook_endpoint::records::CheckedReport;

    const T0: u64 = 1_763_700_000_000;
    const GIB: u64 = 1 << 30;

    fn register(hub: &HookHub, rank: u32, device: Option<(u32, Option<&str>)>) -> u64 {
        let claim = Registration {
            pid: 1000 + rank,
            job: "run-7".into(),
            rank,
            local_rank: rank,
            world_size: 8,
            device: device.map(|(index, uuid)| HookDevice {
                index,
                uuid: uuid.map(str::to_owned),
                name: "NVIDIA H100".into(),
                total_bytes: 80 * GIB,
            }),
        };
        hub.register(claim, false, T0).unwrap()
    }

    fn alloc(hub: &HookHub, session: u64, t_ms: u64, reserved: u64, device_used: Option<u64>) {
        let report = CheckedReport {
            newest_alloc: Some(AllocReading {
                t_ms,
                reserved,
                device_used,
                device_total: device_used.map(|_| 80 * GIB),
            }),
            ..CheckedReport::default()
        };
        hub.report(session, report, t_ms);
    }

    #[test]
    fn one_sample_per_device_with_a_process_per_session() {
        let hub = Arc::new(HookHub::new("agent", "node-3"));
        let mut source = HookSource::new(hub.clone());
        assert_eq!(source.name(), "hook");
        let a = register(&hub, 0, Some((0, Some("GPU-a"))));
        let b = register(&hub, 1, Some((0, Some("GPU-a"))));
        let c = register(&hub, 2, Some((1, None)));
        register(&hub, 3, None); // no device yet: not sampled
        assert!(source.sample(T0).unwrap().is_empty(), "no reading yet");
        let uuids: Vec<_> = source.gpus().into_iter().map(|g| g.uuid).collect();
        assert_eq!(uuids, ["GPU-a", "hook-node-3-1"]);

        alloc(&hub, a, T0, 10 * GIB, Some(30 * GIB));
        alloc(&hub, b, T0 + 100, 12 * GIB, Some(31 * GIB));
        alloc(&hub, c, T0, 5 * GIB, None); // no device reading: not sampled
        let samples = source.sample(T0 + 500).unwrap();
        assert_eq!(samples.len(), 1, "{samples:?}");
        let s = &samples[0];
        assert_eq!(
            (s.t_ms, s.gpu.uuid.as_str(), s.gpu.total_bytes),
            (T0 + 500, "GPU-a", 80 * GIB)
        );
        assert_eq!(s.used_bytes, 31 * GIB, "the newest device reading");
        assert_eq!((s.reserved_bytes, s.util_pct), (None, None));
        let procs: Vec<_> = s.procs.iter().map(|p| (p.pid, p.used_bytes)).collect();
        assert_eq!(procs, [(1000, 10 * GIB), (1001, 12 * GIB)]);
        let rank = s.procs[1].rank.as_ref().unwrap();
        assert_eq!(
            (
                rank.job.as_str(),
                rank.rank,
                rank.local_rank,
                rank.world_size
            ),
            ("run-7", 1, 1, 8)
        );
        assert_eq!((&rank.master_addr, rank.master_port), (&None, None));

        alloc(&hub, c, T0 + 600, 5 * GIB, Some(6 * GIB));
        let samples = source.sample(T0 + 1_000).unwrap();
        assert_eq!(samples.len(), 2);
        assert_eq!(samples[1].gpu.uuid, "hook-node-3-1");
        assert_eq!(samples[1].gpu.index, 1);
    }

    #[test]
    fn stale_readings_are_not_sampled() {
        let hub = Arc::new(HookHub::new("agent", "n"));
        let mut source = HookSource::new(hub.clone());
        let a = register(&hub, 0, Some((0, Some("GPU-a"))));
        alloc(&hub, a, T0, GIB, Some(2 * GIB));
        assert_eq!(source.sample(T0 + FRESH_MS).unwrap().len(), 1);
        assert!(source.sample(T0 + FRESH_MS + 1).unwrap().is_empty());
        // Still live: the device is still known.
        assert_eq!(source.gpus().len(), 1);
        // Leaving with a stale reading: no tail.
        hub.end_session(a, T0);
        assert!(source.sample(T0 + FRESH_MS + 2).unwrap().is_empty());
        assert!(source.gpus().is_empty());
    }

    #[test]
    fn a_device_whose_sessions_left_is_sampled_empty_for_the_tail() {
        let hub = Arc::new(HookHub::new("agent", "n"));
        let mut source = HookSource::new(hub.clone());
        let a = register(&hub, 0, Some((0, Some("GPU-a"))));
        let b = register(&hub, 1, Some((0, Some("GPU-a"))));
        alloc(&hub, a, T0, 10 * GIB, Some(30 * GIB));
        alloc(&hub, b, T0, 12 * GIB, Some(30 * GIB));
        assert_eq!(source.sample(T0).unwrap()[0].procs.len(), 2);

        hub.end_session(a, T0 + 100);
        let s = source.sample(T0 + 500).unwrap();
        assert_eq!(s[0].procs.len(), 1, "one left, one stays");
        assert_eq!(s[0].used_bytes, 30 * GIB);

        hub.end_session(b, T0 + 600);
        let start = T0 + 1_000;
        for t in [start, start + TAIL_MS / 2, start + TAIL_MS] {
            let s = source.sample(t).unwrap();
            assert_eq!(s.len(), 1, "at {t}");
            assert_eq!(s[0].t_ms, t);
            assert!(s[0].procs.is_empty());
            assert_eq!(s[0].used_bytes, 18 * GIB, "30 GiB less rank 1's 12 GiB");
            assert_eq!(source.gpus().len(), 1);
        }
        assert!(source.sample(start + TAIL_MS + 1).unwrap().is_empty());
        assert!(source.gpus().is_empty());
        assert!(source.sample(start + TAIL_MS + 2).unwrap().is_empty());
    }

    #[test]
    fn a_returning_process_ends_the_tail_and_used_never_underflows() {
        let hub = Arc::new(HookHub::new("agent", "n"));
        let mut source = HookSource::new(hub.clone());
        let a = register(&hub, 0, Some((0, Some("GPU-a"))));
        alloc(&hub, a, T0, 40 * GIB, Some(30 * GIB));
        source.sample(T0).unwrap();
        hub.end_session(a, T0);
        let s = source.sample(T0 + 500).unwrap();
        assert_eq!((s[0].used_bytes, s[0].procs.len()), (0, 0), "saturating");

        let a2 = register(&hub, 0, Some((0, Some("GPU-a"))));
        alloc(&hub, a2, T0 + 900, GIB, Some(2 * GIB));
        let s = source.sample(T0 + 1_000).unwrap();
        assert_eq!((s[0].used_bytes, s[0].procs.len()), (2 * GIB, 1));
        hub.end_session(a2, T0 + 1_100);
        // A new tail starts from the new departure.
        let s = source.sample(T0 + 1_500).unwrap();
        assert_eq!((s[0].used_bytes, s[0].procs.len()), (GIB, 0));
        assert_eq!(source.sample(T0 + 1_500 + TAIL_MS).unwrap().len(), 1);
        assert!(source.sample(T0 + 1_501 + TAIL_MS).unwrap().is_empty());
    }
}
