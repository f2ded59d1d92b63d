//! What every gpumon process runs around the core: the TOML file layer of
//! agent and coordinator configuration, secrets and tokens read from
//! owner-only files, the one logging set-up, `/metrics` content negotiation
//! and the label-less families both collectors write, and the rule that an
//! address names this machine only. All of it touches files, the terminal or
//! the environment, which the core (`gpumon-core`) must not.
//!
//! - [`clock`]: the wall clock in milliseconds, as records and checks carry it;
//! - [`config`]: the TOML file layer of agent and coordinator configuration;
//! - [`secrets`]: secrets and tokens read from owner-only files;
//! - [`logging`]: the one tracing set-up every binary uses;
//! - [`host`]: this machine's host name, a node's default name;
//! - [`exposition`]: `/metrics` content negotiation and the classic text format;
//! - [`metric_family`]: label-less families both `/metrics` collectors write;
//! - [`loopback`]: whether an address names this machine only.
#![deny(missing_docs)]

pub mod clock;
pub mod config;
pub mod exposition;
pub mod host;
pub mod logging;
pub mod loopback;
pub mod metric_family;
pub mod secrets;
