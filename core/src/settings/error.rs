//! Why a live settings change is refused: the key, the value or the scope
//! it names, or the configuration it would make. The text is what the
//! admin reads (the API's answer, the log's refusal).

use thiserror::Error;

use super::{KEYS, MAX_JOBS_WITH_SETTINGS};
use crate::engine::memory_level::LevelsError;
use crate::limits::MAX_NAME_BYTES;

/// A refused settings change.
#[derive(Debug, Error)]
pub enum SettingsError {
    /// The job's name is empty, too long or holds control characters.
    #[error("job {job:?}: a job name is 1 to {MAX_NAME_BYTES} bytes, no control characters")]
    JobName {
        /// The name given.
        job: String,
    },
    /// More keys than a change may name.
    #[error("at most {max} keys in one change")]
    TooManyKeys {
        /// The most a change may name.
        max: usize,
    },
    /// No key has this name.
    #[error("no live setting {name:?}; the keys are {}", key_names())]
    UnknownKey {
        /// The name given.
        name: String,
    },
    /// The key is set cluster-wide only, and the change was for a job.
    #[error("{name} judges GPUs or nodes, not one job's ranks: it is set cluster-wide only")]
    ClusterOnly {
        /// The key.
        name: String,
    },
    /// The text is not a value the key takes.
    #[error("{name} = {text:?}: takes {bounds}")]
    Value {
        /// The key.
        name: &'static str,
        /// The text given.
        text: String,
        /// What the key takes.
        bounds: String,
    },
    /// One more job with settings of its own would pass the bound.
    #[error(
        "{MAX_JOBS_WITH_SETTINGS} jobs already have settings of their own; reset one first (gpumon config reset --job JOB --all)"
    )]
    TooManyJobs,
    /// The GPU memory levels would not hold together.
    #[error("memory_levels: {0}")]
    MemoryLevels(LevelsError),
    /// The host memory levels would not hold together.
    #[error("host_memory_levels: {0}")]
    HostMemoryLevels(LevelsError),
    /// The forecast's thresholds would be out of order.
    #[error(
        "forecast.critical_s ({critical_s}) <= forecast.high_s ({high_s}) <= forecast.horizon_s ({horizon_s}) must hold"
    )]
    ForecastOrder {
        /// `forecast.critical_s`.
        critical_s: f64,
        /// `forecast.high_s`.
        high_s: f64,
        /// `forecast.horizon_s`.
        horizon_s: f64,
    },
    /// An engine key's name has no section (never, for the known keys).
    #[error("a key has a section")]
    NoSection,
    /// The engine's configuration has no such section.
    #[error("no [engine.{section}]")]
    UnknownSection {
        /// The section named.
        section: String,
    },
    /// The configuration did not encode as TOML.
    #[error("{0}")]
    Encode(#[from] toml::ser::Error),
    /// The configuration with the overrides did not decode from TOML.
    #[error("{0}")]
    Decode(#[from] toml::de::Error),
}

/// Every key's name, as the error for an unknown one lists them.
fn key_names() -> String {
    let names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
    names.join(", ")
}
