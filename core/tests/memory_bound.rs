//! Memory per GPU of the replicated state with full histories, measured as
//! this process's resident set (Linux `/proc/self/statm`) before and after
//! filling a synthetic fleet. It fails when per-GPU memory grows past the
//! bound that BENCHMARKS.md states and the coordinator's memory figures
//! rest on (measured: 63-64 KiB per GPU at this size on the system
//! allocator once the fill's code is paged in, 56.5 KiB at 16k GPUs on the
//! binary's mimalloc with
//! `cargo bench -p gpumon-core --bench state_memory`). One test in its
//! own process, so no other test allocates meanwhile.

use gpumon_testkit::fleet;

use gpumon_core::cluster::DEFAULT_HISTORY_WINDOWS;

/// GPUs in the scaled-down fleet.
const GPUS: u32 = 256;
/// Resident bytes per GPU allowed with full default histories: the
/// measured 63-64 KiB and room for allocator noise. At this bound 65,536 GPUs
/// hold 4.75 GiB, which leaves a replica room for its log, its buffers and
/// a snapshot under the 6 GiB it is sized for (docs/operations.md).
const BOUND_PER_GPU: u64 = 76 * 1024;

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm's second field: resident pages");
    pages * 4096
}

#[test]
fn a_gpu_with_full_history_stays_within_its_memory_bound() {
    // Past the history length, so every ring is full.
    let windows = DEFAULT_HISTORY_WINDOWS as u64 + 64;
    // One agent's GPUs first, kept alive: the code the fill runs is paged
    // in then, so the pages of code first touched (a few hundred KiB of a
    // debug build, several KiB per GPU at this fleet's size) are not
    // counted as the state's memory.
    let warm = fleet::filled(fleet::GPUS_PER_AGENT, windows);
    let before = resident_bytes();
    let state = fleet::filled(GPUS, windows);
    let after = resident_bytes();
    drop(warm);
    let per_gpu = after.saturating_sub(before) / u64::from(GPUS);
    let encoded = postcard::to_allocvec(&state)
        .expect("the state encodes")
        .len() as u64;
    eprintln!(
        "{GPUS} GPUs x {windows} windows: {} KiB resident per GPU, {} KiB encoded per GPU",
        per_gpu / 1024,
        encoded / u64::from(GPUS) / 1024
    );
    assert!(
        per_gpu <= BOUND_PER_GPU,
        "{per_gpu} bytes per GPU is past the bound of {BOUND_PER_GPU}"
    );
}
