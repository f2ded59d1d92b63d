//! The one tracing setup for every gpumon binary.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs a stderr logger. `GPUMON_LOG` (tracing's filter syntax) overrides
/// `default_filter`, e.g. `GPUMON_LOG=gpumon_agent=debug`. Calling it twice is harmless.
pub fn init(default_filter: &str) {
    let filter =
        EnvFilter::try_from_env("GPUMON_LOG").unwrap_or_else(|_| EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
