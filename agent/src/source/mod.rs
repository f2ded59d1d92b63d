//! Where samples come from: NVML on a real node, a simulator for demos and
//! tests, or nothing (hook data only).
//!
//! Every source implements [`GpuSource`]; the agent's loop calls
//! [`GpuSource::sample`] once per sampling interval with the time to stamp.
//! A source returns processes with `rank` filled where it knows the owner
//! (the simulator always does; NVML samples are attributed afterwards by
//! [`crate::discovery`]).

pub mod nvml;
pub mod sim;

use gpumon_proto::{GpuInfo, GpuSample, HookRecord};
use thiserror::Error;

/// A source of GPU samples.
pub trait GpuSource: Send {
    /// Short name for logs and the hello: `nvml`, `sim:leak`, `none`.
    fn name(&self) -> String;

    /// The GPUs this source sees.
    fn gpus(&self) -> Vec<GpuInfo>;

    /// Reads every GPU once, stamping samples with `t_ms` (ms since the Unix epoch).
    fn sample(&mut self, t_ms: u64) -> Result<Vec<GpuSample>, SourceError>;

    /// Hook records the source produced itself since the last call, oldest
    /// first: the simulator plays the in-process hook too; real sources
    /// produce none (hooks report through the hook endpoint).
    fn take_hook_records(&mut self) -> Vec<HookRecord> {
        Vec::new()
    }
}

/// Why a source could not sample.
#[derive(Debug, Error)]
pub enum SourceError {
    /// The NVML library could not be loaded or initialized.
    #[error("NVML is unavailable: {0}")]
    NvmlUnavailable(String),
    /// A device could not be read this time.
    #[error("reading GPU {index}: {reason}")]
    Device {
        /// Device index.
        index: u32,
        /// What failed.
        reason: String,
    },
    /// An unknown simulator scenario or bad simulator settings.
    #[error("{0}")]
    BadSimulation(String),
}

/// A source that sees no GPU: the agent then relays hook data only.
#[derive(Debug, Default)]
pub struct NoSource;

impl GpuSource for NoSource {
    fn name(&self) -> String {
        "none".into()
    }

    fn gpus(&self) -> Vec<GpuInfo> {
        Vec::new()
    }

    fn sample(&mut self, _t_ms: u64) -> Result<Vec<GpuSample>, SourceError> {
        Ok(Vec::new())
    }
}
