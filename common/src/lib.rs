//! What the gpumon agent, coordinator and replay share: pure and deterministic.
//!
//! - [`window`]: folds raw GPU samples into the windows agents push;
//! - [`cluster`]: the cluster view (agents, nodes, GPUs, jobs, ranks, bounded
//!   histories) that the transition applies pushes to: time comes only from
//!   the data, never from a clock, so every replica computes the same state;
//! - [`hook_records`]: what the state keeps of the in-process hooks' records
//!   (named memory snapshots, step times) and the one check every record
//!   passes;
//! - [`engine`]: the detection engine (OOM forecast, leak, fragmentation,
//!   imbalance, straggler) that live and replay both run;
//! - [`step_verdict`]: where a training step's time goes, and what bounds it;
//! - [`notify`]: the replicated book of notifications sent and what is due;
//! - [`limits`]: the bounds on names, records and bytes that every process applies;
//! - [`config`]: the TOML file layer of agent and coordinator configuration;
//! - [`secrets`]: secrets and tokens read from owner-only files;
//! - [`settings`]: the settings that change live, through the log;
//! - [`net`]: whether an address names this machine only;
//! - [`units`]: byte and time formatting;
//! - [`logging`]: the one tracing setup every binary uses;
//! - [`transition`]: the one state transition, `apply(state, command)`,
//!   that replicas and replay both run;
//! - [`replay`]: a trace through that transition, and its report;
//! - [`sharding`]: jobs hashed to several Raft groups and an agent's push
//!   split between them (a design and its simulation: docs/sharding.md);
//! - [`trace`]: reading and writing gpumon trace v1 files;
//! - [`exposition`]: `/metrics` content negotiation and the classic text format;
//! - [`metric_family`]: label-less families both `/metrics` collectors write.
//!
//! ```
//! use gpumon_common::cluster::{ClusterState, Limits};
//! let state = ClusterState::new(Limits::default());
//! assert_eq!(state.cluster_view().gpus, 0);
//! ```
#![deny(missing_docs)]

pub mod actions;
pub mod cluster;
pub mod config;
mod derived_count;
pub mod engine;
pub mod exposition;
pub mod hook_records;
pub mod job_scale;
pub mod limits;
pub mod logging;
pub mod metric_family;
pub mod net;
pub mod notify;
pub mod replay;
pub mod secrets;
pub mod settings;
pub mod sharding;
pub mod shared;
pub mod step_verdict;
pub mod trace;
pub mod transition;
pub mod units;
pub mod window;
