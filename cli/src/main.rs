//! `gpumon`: the one binary. It parses arguments, merges configuration
//! (file < environment < flags), calls the library crates and maps errors to
//! exit codes: 0 success, 1 runtime failure, 2 bad usage or configuration;
//! `gpumon run` exits with its command's code.

mod admin_client;
mod api_client;
mod args;
mod client_settings;
mod cmd_agent;
mod cmd_cluster;
mod cmd_config;
mod cmd_coordinator;
mod cmd_demo;
mod cmd_record;
mod cmd_replay;
mod cmd_snapshots;
mod cmd_status;
mod cmd_top;
mod remote_write_config;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use gpumon_tools::failure::Failure;
use gpumon_tools::{bench, compare, profile, run, sweep};

/// mimalloc instead of the system's allocator: a replica allocates and frees
/// a few small strings and vectors per window it decodes and applies, and
/// under load glibc's malloc and free (their consolidation of free chunks
/// above all) took about a third of the leader's CPU (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_log = match &cli.command {
        // The demo stops replicas on purpose: peers' connection errors and the
        // agents' retries are expected there, so only its own lines show.
        Command::Demo(_) => "warn,openraft=off,gpumon_agent::uplink=error",
        Command::Status(_)
        | Command::Top(_)
        | Command::Replay(_)
        | Command::Record(_)
        | Command::Bench(_)
        | Command::Cluster(_)
        | Command::Config(_)
        | Command::Profile(_)
        | Command::Snapshots(_)
        | Command::Sweep(_)
        | Command::Compare(_) => "warn",
        // A cut peer fails every RPC, and openraft logs each failure twice;
        // the coordinator logs it going away, staying away and coming back
        // itself (raft::reachability).
        _ => "info,openraft=warn,openraft::replication=off,openraft::engine::handler::replication_handler=error",
    };
    gpumon_runtime::logging::init(default_log);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gpumon: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Agent(a) => cmd_agent::run(a, cli.config.as_deref()).await,
            Command::Coordinator(c) => cmd_coordinator::run(*c, cli.config.as_deref()).await,
            Command::Status(s) => cmd_status::run(s, cli.config.as_deref()).await,
            Command::Top(t) => cmd_top::run(t, cli.config.as_deref()).await,
            Command::Demo(d) => cmd_demo::run(d).await,
            Command::Replay(r) => cmd_replay::run(r, cli.config.as_deref()),
            Command::Record(r) => cmd_record::run(r, cli.config.as_deref()).await,
            Command::Bench(b) => bench::run(b).await,
            Command::Cluster(c) => cmd_cluster::run(c).await,
            Command::Config(c) => cmd_config::run(c).await,
            Command::Run(r) => run::run(r).await,
            Command::Profile(p) => profile::run(p, cli.config.as_deref()).await,
            Command::Snapshots(s) => cmd_snapshots::run(s, cli.config.as_deref()).await,
            Command::Sweep(s) => sweep::run(s, cli.config.as_deref()).await,
            Command::Compare(c) => compare::run(c),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(e)) => {
            eprintln!("gpumon: {e:#}");
            ExitCode::from(2)
        }
        Err(Failure::Runtime(e)) => {
            eprintln!("gpumon: {e:#}");
            ExitCode::from(1)
        }
        Err(Failure::Exit(code, why)) => {
            eprintln!("gpumon: {why}");
            ExitCode::from(code)
        }
    }
}
