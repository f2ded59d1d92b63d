//! The NVML source: every GPU on the node, read through NVIDIA's management
//! library.
//!
//! `libnvidia-ml.so.1` is loaded at run time (by `nvml-wrapper`), not linked,
//! so one agent binary runs on GPU nodes and on nodes without a driver; on the
//! latter [`NvmlSource::new`] returns [`SourceError::NvmlUnavailable`] with a
//! reason the agent logs once before it falls back to hook data or the
//! simulator (`docs/architecture.md`, "The path of one sample" 1).
//!
//! Devices are enumerated once, at start. Per sample, only device memory is
//! mandatory: it is what the OOM forecast runs on, so a device whose memory
//! cannot be read fails the sample. Utilization, SM clock, power and the
//! process list are best effort: a metric the device does not support (or
//! that fails) becomes `None` (or an empty process list) and is logged once
//! per device and metric, never per sample.
//!
//! Processes come back with `rank: None`; [`crate::discovery::RankFinder`]
//! attributes them afterwards. The GPU a process is on is the device NVML
//! lists it under, never inferred from `LOCAL_RANK`.

use std::collections::HashSet;

use gpumon_proto::{GpuInfo, GpuSample, ProcSample};
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::{GpuSource, SourceError};

/// The library `nvml-wrapper` loads on Linux; named in error messages.
const NVML_LIB: &str = "libnvidia-ml.so.1";

/// A [`GpuSource`] reading every GPU on this node through NVML.
///
/// Holds the initialized library for its whole life (NVML is shut down when
/// it is dropped) and the device list found at construction.
#[derive(Debug)]
pub struct NvmlSource {
    nvml: Nvml,
    gpus: Vec<GpuInfo>,
    /// (device index, metric) pairs already logged as failing, so each
    /// failure is logged once rather than every 500 ms.
    warned: HashSet<(u32, Metric)>,
}

/// The best-effort metrics, for logging their failures once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Metric {
    Utilization,
    SmClock,
    Power,
    Processes,
    Memory,
}

impl Metric {
    fn as_str(self) -> &'static str {
        match self {
            Metric::Utilization => "utilization",
            Metric::SmClock => "SM clock",
            Metric::Power => "power usage",
            Metric::Processes => "running compute processes",
            Metric::Memory => "memory info (the GPU is left out of its samples)",
        }
    }
}

impl NvmlSource {
    /// Loads and initializes NVML and enumerates the node's GPUs.
    ///
    /// A device that cannot be identified (no UUID or no memory reading) is
    /// skipped with a warning; the others are still monitored.
    ///
    /// # Errors
    ///
    /// [`SourceError::NvmlUnavailable`] when the library cannot be loaded or
    /// initialized (no NVIDIA driver, driver libraries not mounted into the
    /// container, no permission on `/dev/nvidia*`) or cannot count devices.
    pub fn new() -> Result<Self, SourceError> {
        let nvml =
            Nvml::init().map_err(|e| SourceError::NvmlUnavailable(unavailable_reason(&e)))?;
        let count = nvml.device_count().map_err(|e| {
            SourceError::NvmlUnavailable(format!(
                "NVML initialized but could not count devices: {e}"
            ))
        })?;
        let mut gpus = Vec::with_capacity(count as usize);
        for index in 0..count {
            match describe(&nvml, index) {
                Ok(info) => gpus.push(info),
                Err(e) => tracing::warn!(
                    gpu = index,
                    error = %e,
                    "skipping GPU: NVML cannot identify it or read its memory"
                ),
            }
        }
        if gpus.is_empty() {
            tracing::warn!(devices = count, "NVML is loaded but reports no usable GPU");
        }
        Ok(Self {
            nvml,
            gpus,
            warned: HashSet::new(),
        })
    }
}

impl GpuSource for NvmlSource {
    fn name(&self) -> String {
        "nvml".into()
    }

    fn gpus(&self) -> Vec<GpuInfo> {
        self.gpus.clone()
    }

    fn sample(&mut self, t_ms: u64) -> Result<Vec<GpuSample>, SourceError> {
        let Self { nvml, gpus, warned } = self;
        let mut out = Vec::with_capacity(gpus.len());
        let mut first_error = None;
        for gpu in gpus.iter() {
            // By UUID rather than index: the UUID is the device's identity,
            // so a sample can never be stamped with another GPU's info.
            // A GPU that cannot be read is left out; the others still count.
            let read = nvml
                .device_by_uuid(gpu.uuid.as_str())
                .and_then(|device| device.memory_info().map(|m| (device, m)));
            let (device, memory) = match read {
                Ok(ok) => ok,
                Err(e) => {
                    note_failure(warned, gpu.index, Metric::Memory, &e);
                    first_error.get_or_insert(SourceError::Device {
                        index: gpu.index,
                        reason: format!("reading memory info: {e}"),
                    });
                    continue;
                }
            };

            let mut optional = |metric: Metric, r: Result<f32, NvmlError>| -> Option<f32> {
                r.map_err(|e| note_failure(warned, gpu.index, metric, &e))
                    .ok()
            };
            let util_pct = optional(
                Metric::Utilization,
                device.utilization_rates().map(|u| u.gpu as f32),
            );
            let sm_clock_mhz = optional(
                Metric::SmClock,
                device.clock_info(Clock::SM).map(|c| c as f32),
            );
            // NVML reports milliwatts.
            let power_w = optional(
                Metric::Power,
                device.power_usage().map(|mw| mw as f32 / 1000.0),
            );
            let procs = processes(&device).unwrap_or_else(|e| {
                note_failure(warned, gpu.index, Metric::Processes, &e);
                Vec::new()
            });

            out.push(GpuSample {
                t_ms,
                gpu: gpu.clone(),
                used_bytes: memory.used,
                // nvml-wrapper 0.13 only calls nvmlDeviceGetMemoryInfo_v2,
                // which always carries `reserved`; a driver without it fails
                // `memory_info` above instead.
                reserved_bytes: Some(memory.reserved),
                util_pct,
                sm_clock_mhz,
                power_w,
                procs,
            });
        }
        match first_error {
            Some(e) if out.is_empty() => Err(e),
            _ => Ok(out),
        }
    }
}

/// The static facts of device `index`.
fn describe(nvml: &Nvml, index: u32) -> Result<GpuInfo, NvmlError> {
    let device = nvml.device_by_index(index)?;
    let uuid = device.uuid()?;
    let total_bytes = device.memory_info()?.total;
    // A name is nice to have, not needed to monitor the device.
    let name = device
        .name()
        .unwrap_or_else(|_| "unknown NVIDIA GPU".into());
    Ok(GpuInfo {
        uuid,
        index,
        name,
        total_bytes,
    })
}

/// The compute processes NVML lists on `device`, not yet attributed.
fn processes(device: &Device<'_>) -> Result<Vec<ProcSample>, NvmlError> {
    Ok(device
        .running_compute_processes()?
        .into_iter()
        .map(|p| ProcSample {
            pid: p.pid,
            used_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => bytes,
                // Reported under WDDM and on some vGPU setups.
                UsedGpuMemory::Unavailable => 0,
            },
            rank: None,
        })
        .collect())
}

/// Logs a best-effort metric's failure, once per device and metric.
fn note_failure(warned: &mut HashSet<(u32, Metric)>, index: u32, metric: Metric, e: &NvmlError) {
    if !warned.insert((index, metric)) {
        return;
    }
    match e {
        // Expected on some boards (e.g. no power sensor): not worth a warning.
        NvmlError::NotSupported => tracing::debug!(
            gpu = index,
            metric = metric.as_str(),
            "GPU does not support this metric; reporting it as absent"
        ),
        _ => tracing::warn!(
            gpu = index,
            metric = metric.as_str(),
            error = %e,
            "cannot read this metric; reporting it as absent (logged once)"
        ),
    }
}

/// Why NVML could not start, in words that say what to check.
fn unavailable_reason(e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound => format!(
            "{NVML_LIB} could not be loaded (no NVIDIA driver on this node, or the driver's \
             libraries are not mounted into this container?): {e}"
        ),
        NvmlError::DriverNotLoaded => format!(
            "{NVML_LIB} was found but the NVIDIA kernel driver is not loaded \
             (check `nvidia-smi`): {e}"
        ),
        NvmlError::NoPermission => format!(
            "NVML has no permission to talk to the NVIDIA driver \
             (check access to /dev/nvidiactl and /dev/nvidia*): {e}"
        ),
        NvmlError::FailedToLoadSymbol(_) | NvmlError::FunctionNotFound => format!(
            "{NVML_LIB} lacks a function gpumon needs; the NVIDIA driver is probably too old, \
             update it: {e}"
        ),
        _ => format!("NVML initialization failed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_without_driver_is_unavailable_not_a_panic() {
        match NvmlSource::new() {
            Err(e) => {
                assert!(
                    matches!(e, SourceError::NvmlUnavailable(_)),
                    "expected NvmlUnavailable, got {e:?}"
                );
                let msg = e.to_string();
                assert!(msg.contains("NVML"), "message should name NVML: {msg}");
            }
            // A machine with a driver and GPUs: the source must see them.
            Ok(mut source) => {
                assert_eq!(source.name(), "nvml");
                let gpus = source.gpus();
                assert!(!gpus.is_empty(), "NVML loaded but listed no GPU");
                let samples = source.sample(1_700_000_000_000).unwrap();
                assert_eq!(samples.len(), gpus.len());
                for (s, gpu) in samples.iter().zip(&gpus) {
                    assert_eq!(&s.gpu, gpu);
                    assert!(s.used_bytes <= gpu.total_bytes, "{s:?}");
                    assert!(s.procs.iter().all(|p| p.rank.is_none()), "{s:?}");
                }
            }
        }
    }

    #[test]
    fn unavailable_reasons_say_what_to_check() {
        let missing = unavailable_reason(&NvmlError::LibraryNotFound);
        assert!(missing.contains(NVML_LIB) && missing.contains("no NVIDIA driver"));
        assert!(unavailable_reason(&NvmlError::DriverNotLoaded).contains("kernel driver"));
        assert!(unavailable_reason(&NvmlError::NoPermission).contains("/dev/nvidiactl"));
        let old = unavailable_reason(&NvmlError::FailedToLoadSymbol("nvmlInit_v2".into()));
        assert!(old.contains("too old") && old.contains("nvmlInit_v2"));
        assert!(unavailable_reason(&NvmlError::Unknown).starts_with("NVML initialization failed"));
    }

    #[test]
    fn metric_failures_are_logged_once_per_device_and_metric() {
        let mut warned = HashSet::new();
        note_failure(&mut warned, 0, Metric::Power, &NvmlError::NotSupported);
        note_failure(&mut warned, 0, Metric::Power, &NvmlError::NotSupported);
        note_failure(&mut warned, 1, Metric::Power, &NvmlError::Unknown);
        note_failure(&mut warned, 0, Metric::SmClock, &NvmlError::Unknown);
        assert_eq!(warned.len(), 3);
    }
}
