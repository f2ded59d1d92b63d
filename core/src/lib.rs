//! gpumon's core: everything the agent, the coordinator's replicas and
//! replay decide, as pure, deterministic code. No I/O, no clock and no
//! logging set-up: time comes only from the data, so every replica and every
//! replay of the log computes the same state. The dependency list holds it
//! to that (no tokio, no file or network crate, no tracing subscriber), and
//! `tests/purity.rs` fails if library code names the standard library's
//! clock, files, network, environment, processes or threads.
//!
//! - [`window`]: folds raw GPU samples into the windows agents push;
//! - [`cluster`]: the cluster view (agents, nodes, GPUs, jobs, ranks, bounded
//!   histories) that the transition applies pushes to;
//! - [`hook_records`]: what the state keeps of the in-process hooks' records
//!   (named memory snapshots, step times) and the one check every record
//!   passes;
//! - [`engine`]: the detection engine (OOM forecast, leak, fragmentation,
//!   imbalance, straggler, hang) that live and replay both run;
//! - [`step_verdict`]: where a training step's time goes, and what bounds it;
//! - [`actions`]: the planner of cache releases and their replicated book;
//! - [`advice`]: what to recommend about memory, and when: one threshold per
//!   judgement, for the engine, the planner and the profile report;
//! - [`notify`]: the replicated book of notifications sent and what is due;
//! - [`settings`]: the settings that change live, through the log;
//! - [`job_scale`]: the per-job figures that stay cheap at any job size;
//! - [`records`]: what a trace line holds, and the mapping from pushes to it;
//! - [`transition`]: the one state transition, `apply(state, command)`,
//!   that replicas and replay both run;
//! - [`limits`]: the bounds on names, records and bytes that every process applies;
//! - [`shared`]: copy-on-write entries that make cloning the state cheap;
//! - [`units`]: byte and time formatting.
//!
//! Reading and writing trace files and replaying them is `gpumon-trace`;
//! configuration files, secrets, logging and `/metrics` exposition are
//! `gpumon-runtime`'s.
//!
//! ```
//! use gpumon_core::cluster::{Cluster, Limits};
//! let state = Cluster::new(Limits::default());
//! assert_eq!(state.cluster_view().gpus, 0);
//! ```
#![deny(missing_docs)]

pub mod actions;
pub mod advice;
pub mod cluster;
mod derived_count;
pub mod engine;
pub mod hook_records;
pub mod job_scale;
pub mod limits;
mod not_state;
pub mod notify;
pub mod records;
pub mod settings;
pub mod shared;
pub mod step_verdict;
pub mod transition;
pub mod units;
pub mod window;
