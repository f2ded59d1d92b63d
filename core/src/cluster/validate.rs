//! Checks on incoming windows: anything absurd is skipped and counted, never applied.

use gpumon_proto::GpuWindow;
use thiserror::Error;

use crate::limits::{MAX_DEVICE_BYTES, MAX_NAME_BYTES, MAX_WORLD_SIZE};

/// Most processes accepted on one GPU in one window.
pub const MAX_PROCS_PER_GPU: usize = 256;

/// Why a window was skipped.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum InvalidWindow {
    /// A name is empty or too long.
    #[error("{field} is empty or longer than {MAX_NAME_BYTES} bytes")]
    BadName {
        /// Which name.
        field: &'static str,
    },
    /// Capacity zero or beyond belief.
    #[error("total_bytes {0} is zero or above 1 PiB")]
    BadCapacity(u64),
    /// Used memory above capacity, or min > max.
    #[error("used_bytes {0:?} is inconsistent with total_bytes {1}")]
    BadUsed(gpumon_proto::BytesStat, u64),
    /// The window ends before it starts.
    #[error("window ends at {end_ms} before it starts at {start_ms}")]
    BadTimes {
        /// Start.
        start_ms: u64,
        /// End.
        end_ms: u64,
    },
    /// Too many processes.
    #[error("{0} processes on one GPU (at most {MAX_PROCS_PER_GPU})")]
    TooManyProcs(usize),
    /// A rank that cannot be (rank >= world size, absurd world size).
    #[error("rank {rank} of world size {world_size} is impossible")]
    BadRank {
        /// Rank.
        rank: u32,
        /// World size.
        world_size: u32,
    },
}

/// Whether the state could hold this name (job, node, GPU uuid): 1 to
/// [`MAX_NAME_BYTES`] bytes, no control characters.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_BYTES && !name.chars().any(char::is_control)
}

pub(crate) fn check_name(field: &'static str, name: &str) -> Result<(), InvalidWindow> {
    if !is_valid_name(name) {
        return Err(InvalidWindow::BadName { field });
    }
    Ok(())
}

/// Checks one window; gauges that are not finite are not an error here (the
/// state ignores them), everything that would corrupt the view is.
pub fn check_window(w: &GpuWindow) -> Result<(), InvalidWindow> {
    check_name("gpu uuid", &w.gpu.uuid)?;
    if w.gpu.name.len() > MAX_NAME_BYTES {
        return Err(InvalidWindow::BadName { field: "gpu name" });
    }
    let total = w.gpu.total_bytes;
    if total == 0 || total > MAX_DEVICE_BYTES {
        return Err(InvalidWindow::BadCapacity(total));
    }
    let used = w.used_bytes;
    if used.min > used.max || used.max > total || used.last > used.max || used.last < used.min {
        return Err(InvalidWindow::BadUsed(used, total));
    }
    if w.end_ms < w.start_ms {
        return Err(InvalidWindow::BadTimes {
            start_ms: w.start_ms,
            end_ms: w.end_ms,
        });
    }
    if w.procs.len() > MAX_PROCS_PER_GPU {
        return Err(InvalidWindow::TooManyProcs(w.procs.len()));
    }
    for p in &w.procs {
        if p.used_bytes.max > total || p.used_bytes.min > p.used_bytes.max {
            return Err(InvalidWindow::BadUsed(p.used_bytes, total));
        }
        if let Some(r) = &p.rank {
            check_name("job", &r.job)?;
            if r.rank >= r.world_size || r.world_size > MAX_WORLD_SIZE {
                return Err(InvalidWindow::BadRank {
                    rank: r.rank,
                    world_size: r.world_size,
                });
            }
        }
    }
    Ok(())
}
