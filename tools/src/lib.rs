//! What `gpumon` does on one machine, or against a cluster from outside,
//! as a library: `gpumon profile` (one training command under a private
//! agent and engine, to a JSON and HTML report), `sweep` (profile over a
//! grid of parameters), `compare` (two reports or sweeps, with a verdict to
//! gate CI on), `run` (a command with the hook injected and an agent
//! beside it) and `bench` (load generators against a running cluster).
//! The `gpumon` binary parses arguments and calls these; the decisions are
//! the core's (`gpumon_core`: the engine, the transition, the advice), run
//! here as the coordinator runs them.
//!
//! - [`profile`], [`sweep`], [`compare`], [`run`], [`bench`](mod@bench): one module a command;
//! - [`args`]: their arguments;
//! - [`failure`]: how a command fails, and the exit code of each failure;
//! - [`shutdown`]: waiting for SIGINT or SIGTERM;
//! - [`text`]: cutting text for a terminal.

pub mod args;
pub mod bench;
pub mod compare;
pub mod failure;
pub mod profile;
pub mod run;
pub mod shutdown;
pub mod sweep;
pub mod text;
