//! Where a training step's time goes, and what bounds it: the verdict the
//! profile report and `GET /api/v1/jobs/{job}` give per job and per rank
//! (computed by `gpumon_core::step_verdict`).

use serde::{Deserialize, Serialize};

/// What bounds the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum StepBound {
    /// Waiting for the next batch (`data`) is a large share of the step.
    Input,
    /// Forward, backward and the optimizer take the step: the device (or
    /// the CPU doing its work) is the limit.
    Compute,
    /// Waiting in collectives (`comm_wait`) is a large share.
    Communication,
    /// Time outside every timed section (Python between calls, logging,
    /// host-device syncs) is a large share.
    Host,
}

/// One part of the step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepPart {
    /// The section's name (`data`, `forward`, `backward`, `optimizer`,
    /// `comm_wait`, a script's own), or `untimed`: the step outside them.
    pub name: String,
    /// Milliseconds per step.
    pub ms: f64,
    /// Share of the step, 0 to 1.
    pub share: f64,
}

/// The verdict on one step (a rank's, or a job's median rank).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepVerdict {
    /// The step, milliseconds.
    pub step_ms: f64,
    /// Its parts, largest first.
    pub parts: Vec<StepPart>,
    /// What bounds it.
    pub bound: StepBound,
    /// The numbers behind the verdict, for people.
    pub evidence: String,
    /// The next thing to try.
    pub next: String,
}
