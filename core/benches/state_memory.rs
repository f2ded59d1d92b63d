//! The replicated state's memory at fleet size: a synthetic fleet
//! (`support/fleet.rs`: agents of 8 GPUs, one rank per GPU, jobs of 1,024
//! ranks) applied through `Replicated::apply` until every GPU's and every
//! rank's history is full, then this process's resident set (Linux
//! `/proc/self/status`). It is the bulk of a coordinator replica's memory at
//! that size; the replica adds its Raft log cache, HTTP buffers and, during
//! a snapshot, the entries pushes change while the snapshot is written. It
//! runs on mimalloc, as the `gpumon` binary does.
//!
//! One fleet size per run, so the figure is not the leftover of a larger one:
//!
//! `cargo bench -p gpumon-core --bench state_memory -- 16384`
//!
//! Filling 65,536 GPUs applies 68 million windows: about ten minutes of one
//! core.

use std::time::Instant;

use gpumon_core::cluster::DEFAULT_HISTORY_WINDOWS;

use gpumon_testkit::fleet;

/// The allocator the `gpumon` binary runs on, so the figure is a replica's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A `/proc/self/status` figure of this process (`VmRSS:`, `VmHWM:`), KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("/proc/self/status has no {field}"))
}

fn main() {
    // `cargo bench` passes `--bench`; the one other argument is the size.
    let gpus: u32 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(|a| a.parse().expect("the fleet size: a number of GPUs"))
        .unwrap_or(16_384);
    assert!(
        gpus % fleet::GPUS_PER_AGENT == 0 && gpus <= 65_536,
        "GPUs: a multiple of {} up to 65,536",
        fleet::GPUS_PER_AGENT
    );
    let windows = DEFAULT_HISTORY_WINDOWS as u64 + 16;
    let before = status_kib("VmRSS:");
    let start = Instant::now();
    let state = fleet::filled_with_progress(gpus, windows, |done| {
        eprintln!(
            "  {done} of {windows} windows per GPU applied ({:.0} s)",
            start.elapsed().as_secs_f64()
        );
    });
    let filled_s = start.elapsed().as_secs_f64();
    let after = status_kib("VmRSS:");
    let peak = status_kib("VmHWM:");
    let view = state.cluster.cluster_view();
    assert_eq!(view.gpus, gpus as usize, "every GPU is tracked");
    let per_gpu = (after - before) as f64 / f64::from(gpus);
    println!(
        "state_memory/{gpus}_gpus: {windows} windows per GPU applied in {filled_s:.0} s; \
         resident {:.2} GiB ({per_gpu:.1} KiB per GPU), peak {:.2} GiB",
        after as f64 / (1 << 20) as f64,
        peak as f64 / (1 << 20) as f64,
    );
}
