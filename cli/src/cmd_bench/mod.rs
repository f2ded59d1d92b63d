//! `gpumon bench`: load generators against a running cluster (being written).

use clap::{Args, Subcommand};

use crate::Failure;

/// `gpumon bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: BenchCommand,
}

/// What to benchmark.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Simulated agents push windows to a running cluster.
    Ingest(IngestArgs),
}

/// `gpumon bench ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {}

pub async fn run(args: BenchArgs) -> Result<(), Failure> {
    let BenchCommand::Ingest(_) = args.what;
    Err(crate::usage("gpumon bench ingest is not available in this build yet"))
}
