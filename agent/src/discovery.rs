//! Rank discovery: which job and rank owns a GPU process, read from
//! `/proc/PID/environ`.
//!
//! Launchers hand every worker its identity in environment variables
//! (torchrun: `TORCHELASTIC_RUN_ID`, `RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
//! `MASTER_ADDR`, `MASTER_PORT`; Slurm's `srun`, Open MPI and MPICH have
//! their own, see [`parse_environ`]), so the agent can name the job and rank
//! of every process NVML reports without any change to the training
//! script. A process started without a launcher is attributed only when
//! its `GPUMON_JOB` names a job (`gpumon profile` sets it): rank 0 of a
//! world of 1. [`parse_environ`] reads one environment blob; [`RankFinder`]
//! fills [`ProcSample::rank`] for a round of samples, caching per process,
//! and keeps the Kubernetes placement of each rank's process
//! ([`crate::placement`]) for [`RankFinder::placements_for`].
//!
//! The GPU of a process is the device NVML listed it under. `LOCAL_RANK` is
//! kept for display only: with `CUDA_VISIBLE_DEVICES` remapping, MIG or
//! several jobs per node it does not name the physical device.
//!
//! Attribution fails in two common deployments, and the finder says so once
//! (a `tracing` warning, plus [`RankFinder::unattributed_reasons`]): another
//! user's processes are unreadable unless the agent runs as root, and in a
//! container without the host PID namespace NVML's (host) PIDs are not in the
//! agent's `/proc` at all.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};

use gpumon_core::limits::{prefix_within, MAX_NAME_BYTES};
use gpumon_proto::{GpuSample, GpuWindow, PodPlacement, ProcPlacement, ProcSample, RankInfo};

use crate::placement::read_placement;
use crate::procfs::{env_vars, read_bounded, MAX_ENVIRON_BYTES};

/// Where the host's process table is mounted.
pub const DEFAULT_PROC_ROOT: &str = "/proc";

/// Largest `WORLD_SIZE` believed (about a million ranks); beyond it the
/// variables are taken for garbage rather than a training job.
pub use gpumon_core::limits::MAX_WORLD_SIZE;

/// Job name when neither `TORCHELASTIC_RUN_ID` nor `MASTER_ADDR:MASTER_PORT`
/// is available.
pub const UNKNOWN_JOB: &str = "unknown-job";

/// The variable naming the job of a process started without a launcher
/// (`gpumon profile` sets it): such a process is rank 0 of a world of 1.
pub const STANDALONE_JOB_VAR: &str = "GPUMON_JOB";

/// The job of a process with neither a launcher nor `GPUMON_JOB` whose hook
/// registers anyway (an explicit `gpumon.init()` in a plain `python`): the
/// only claim the hook endpoint accepts from it. The Python hook names it
/// the same (`standalone_identity` in `gpumon/_env.py`).
pub fn standalone_job(pid: u32) -> String {
    format!("pid-{pid}")
}

/// The variables [`parse_environ`] reads; every other entry is passed over.
const KEYS: [&str; 20] = [
    "TORCHELASTIC_RUN_ID",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMIX_NAMESPACE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_LOCALID",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    STANDALONE_JOB_VAR,
];

/// Reads a process's job and rank from its `/proc/PID/environ` blob
/// (`KEY=value` entries separated by NUL bytes), as its launcher set them.
///
/// Launchers, first match wins (the launcher of the process itself before
/// the allocation it runs in: `mpirun` inside a Slurm job leaves the
/// batch step's `SLURM_PROCID` in every rank):
///
/// | launcher | rank, world size, local rank | job |
/// | --- | --- | --- |
/// | torchrun | `RANK`, `WORLD_SIZE`, `LOCAL_RANK` | `TORCHELASTIC_RUN_ID` unless empty or `none` (torchrun's default) |
/// | Open MPI | `OMPI_COMM_WORLD_RANK`, `_SIZE`, `_LOCAL_RANK` | `PMIX_NAMESPACE` |
/// | MPICH, Intel MPI (PMI) | `PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID` | |
/// | Slurm (`srun`) | `SLURM_PROCID`, `SLURM_NTASKS` (or `SLURM_NPROCS`), `SLURM_LOCALID` | `slurm-JOBID` or `slurm-JOBID.STEP` from `SLURM_JOB_ID`, `SLURM_STEP_ID` |
///
/// A launcher matches when its rank and world size are integers with
/// `rank < world size <= MAX_WORLD_SIZE`. Without a job of its launcher's
/// own, the job is `MASTER_ADDR:MASTER_PORT` when both are set, else
/// [`UNKNOWN_JOB`]; it is truncated to [`MAX_NAME_BYTES`]. A local rank
/// absent or not below the world size is 0.
///
/// Without any launcher, a process whose `GPUMON_JOB` ([`STANDALONE_JOB_VAR`])
/// is not blank is rank 0 (local rank 0) of a world of 1 in that job,
/// trimmed and truncated like any job: a single process `gpumon profile`
/// started. A launcher's variables always win over it. Entries that are not UTF-8 or
/// have no `=` are skipped; where a key repeats the first entry wins, as
/// with `getenv` and Python's `os.environ`. A blob over
/// [`MAX_ENVIRON_BYTES`] yields `None`. The Python hook applies the same
/// rule (`gpumon/_env.py`), and both are tested against one table of cases
/// (`agent/python/tests/identity_cases.json`).
pub fn parse_environ(bytes: &[u8]) -> Option<RankInfo> {
    if bytes.len() > MAX_ENVIRON_BYTES {
        return None;
    }
    let vars = env_vars(bytes, &KEYS);
    let get = |key: &str| vars.get(key).copied();
    let named = |value: Option<&str>| {
        value
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let torchrun_job =
        named(get("TORCHELASTIC_RUN_ID")).filter(|id| !id.eq_ignore_ascii_case("none"));
    let slurm_job = named(get("SLURM_JOB_ID")).map(|id| match named(get("SLURM_STEP_ID")) {
        Some(step) => format!("slurm-{id}.{step}"),
        None => format!("slurm-{id}"),
    });
    let launchers = [
        (
            get("RANK"),
            get("WORLD_SIZE"),
            get("LOCAL_RANK"),
            torchrun_job,
        ),
        (
            get("OMPI_COMM_WORLD_RANK"),
            get("OMPI_COMM_WORLD_SIZE"),
            get("OMPI_COMM_WORLD_LOCAL_RANK"),
            named(get("PMIX_NAMESPACE")),
        ),
        (
            get("PMI_RANK"),
            get("PMI_SIZE"),
            get("MPI_LOCALRANKID"),
            None,
        ),
        (
            get("SLURM_PROCID"),
            get("SLURM_NTASKS").or(get("SLURM_NPROCS")),
            get("SLURM_LOCALID"),
            slurm_job,
        ),
    ];
    let launched = launchers.into_iter().find_map(|(rank, size, local, job)| {
        let rank = parse_u32(rank?)?;
        let size = parse_u32(size?)?;
        (size <= MAX_WORLD_SIZE && rank < size).then_some((rank, size, local, job))
    });
    let (rank, world_size, local_rank, own_job) = match launched {
        Some(found) => found,
        None => (0, 1, None, Some(named(get(STANDALONE_JOB_VAR))?)),
    };
    let local_rank = local_rank
        .and_then(parse_u32)
        .filter(|&lr| lr < world_size)
        .unwrap_or(0);
    let master_addr = get("MASTER_ADDR")
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| prefix_within(a, MAX_NAME_BYTES).to_owned());
    let master_port = get("MASTER_PORT")
        .and_then(|p| p.trim().parse::<u16>().ok())
        .filter(|&p| p != 0);

    let job = match own_job {
        Some(job) => job,
        None => match (&master_addr, master_port) {
            // Bracket IPv6 addresses so the port stays readable.
            (Some(addr), Some(port)) if addr.contains(':') && !addr.starts_with('[') => {
                format!("[{addr}]:{port}")
            }
            (Some(addr), Some(port)) => format!("{addr}:{port}"),
            _ => UNKNOWN_JOB.to_owned(),
        },
    };

    Some(RankInfo {
        job: prefix_within(&job, MAX_NAME_BYTES).to_owned(),
        rank,
        local_rank,
        world_size,
        master_addr,
        master_port,
    })
}

/// Like Python's `int()` on these variables: surrounding whitespace is fine.
fn parse_u32(s: &str) -> Option<u32> {
    s.trim().parse().ok()
}

/// Counters of what [`RankFinder::attribute`] found, since the finder was
/// created. Each counts one process in one call (a process on two GPUs
/// counts once per call).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AttributionStats {
    /// Processes attributed to a torchrun rank.
    pub attributed_total: u64,
    /// Processes whose environment holds no valid torchrun rank (not a
    /// torchrun worker, e.g. a notebook or an inference server).
    pub not_torchrun_total: u64,
    /// Processes whose environment could not be read: permission denied.
    pub permission_denied_total: u64,
    /// Processes missing from `/proc` in two calls in a row: the agent does
    /// not see NVML's PID namespace.
    pub not_in_proc_total: u64,
    /// Processes missing from `/proc` once: most likely exited between
    /// NVML's listing and the read; not blamed on the namespace yet.
    pub vanished_total: u64,
    /// Processes whose environment could not be read for another reason.
    pub other_error_total: u64,
}

/// Why a process could not be attributed; each is warned about once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Cause {
    PermissionDenied,
    NotInProc,
    Other,
}

/// A cached lookup: the process's start time (when `stat` was readable),
/// what its environment said and, for a rank, where in Kubernetes it runs.
#[derive(Debug, Clone)]
struct CacheEntry {
    start_time: Option<u64>,
    rank: Option<RankInfo>,
    placement: Option<PodPlacement>,
}

/// Attributes NVML's GPU processes to torchrun jobs and ranks by reading
/// `<proc_root>/<pid>/environ`.
///
/// A process's environment never changes after `exec`, so results (including
/// "not a torchrun worker") are cached per pid; PIDs are reused, so the key
/// also holds the start time from `<pid>/stat` (field 22) where readable.
/// Entries for PIDs absent from a call are evicted at its end, which keeps
/// the cache as small as the set of live GPU processes. Failed reads are not
/// cached: they are retried next call.
#[derive(Debug)]
pub struct RankFinder {
    proc_root: PathBuf,
    cache: HashMap<u32, CacheEntry>,
    /// PIDs not found in `proc_root` during the previous call.
    missing_last_call: HashSet<u32>,
    /// Causes already warned about, and their messages in the order first seen.
    warned: HashSet<Cause>,
    reasons: Vec<String>,
    stats: AttributionStats,
}

impl Default for RankFinder {
    /// A finder over the host's [`DEFAULT_PROC_ROOT`].
    fn default() -> Self {
        Self::new(PathBuf::from(DEFAULT_PROC_ROOT))
    }
}

impl RankFinder {
    /// A finder reading processes under `proc_root` (normally
    /// [`DEFAULT_PROC_ROOT`]; tests pass a directory laid out like it).
    pub fn new(proc_root: PathBuf) -> Self {
        Self {
            proc_root,
            cache: HashMap::new(),
            missing_last_call: HashSet::new(),
            warned: HashSet::new(),
            reasons: Vec::new(),
            stats: AttributionStats::default(),
        }
    }

    /// Fills `rank` on every [`ProcSample`] that has none, where the
    /// process's environment names a torchrun rank; processes already
    /// attributed are left alone.
    ///
    /// Call it once per sampling round with all the round's samples: cache
    /// entries for PIDs not in this call are dropped. Never fails: a process
    /// that cannot be read stays `None`, and the cause is logged once for
    /// the finder's life (see [`Self::unattributed_reasons`]).
    pub fn attribute(&mut self, samples: &mut [GpuSample]) {
        // One lookup per pid per call, however many GPUs the process uses.
        let mut this_call: HashMap<u32, Option<RankInfo>> = HashMap::new();
        let mut missing_now = HashSet::new();
        let procs = samples
            .iter_mut()
            .flat_map(|s| s.procs.iter_mut())
            .filter(|p| p.rank.is_none());
        for proc in procs {
            let ProcSample { pid, rank, .. } = proc;
            *rank = match this_call.get(pid) {
                Some(found) => found.clone(),
                None => {
                    let found = self.lookup(*pid, &mut missing_now);
                    this_call.insert(*pid, found.clone());
                    found
                }
            };
        }
        self.cache.retain(|pid, _| this_call.contains_key(pid));
        self.missing_last_call = missing_now;
    }

    /// What has kept processes unattributed so far: one sentence per cause
    /// (permission denied, not in this PID namespace, other read errors),
    /// saying what to do, in the order first seen. Empty when every process
    /// could be read.
    pub fn unattributed_reasons(&self) -> Vec<String> {
        self.reasons.clone()
    }

    /// Counters since the finder was created.
    pub fn stats(&self) -> AttributionStats {
        self.stats
    }

    /// The placement of each attributed process in `windows` that the last
    /// [`Self::attribute`] call found in Kubernetes, once per pid, by pid.
    pub fn placements_for(&self, windows: &[GpuWindow]) -> Vec<ProcPlacement> {
        let pids: std::collections::BTreeSet<u32> = windows
            .iter()
            .flat_map(|w| &w.procs)
            .filter(|p| p.rank.is_some())
            .map(|p| p.pid)
            .collect();
        pids.into_iter()
            .filter_map(|pid| {
                let placement = self.cache.get(&pid)?.placement.clone()?;
                Some(ProcPlacement { pid, placement })
            })
            .collect()
    }

    /// The rank of `pid`, from the cache or its environment.
    fn lookup(&mut self, pid: u32, missing_now: &mut HashSet<u32>) -> Option<RankInfo> {
        let dir = self.proc_root.join(pid.to_string());
        let start_time = read_start_time(&dir.join("stat"));
        let cached = self
            .cache
            .get(&pid)
            .filter(|e| e.start_time == start_time)
            .map(|e| e.rank.clone());
        let rank = match cached {
            Some(rank) => rank,
            None => {
                let path = dir.join("environ");
                match read_bounded(&path, MAX_ENVIRON_BYTES) {
                    Ok(bytes) => {
                        let rank = parse_environ(&bytes);
                        let placement = rank
                            .as_ref()
                            .and_then(|_| read_placement(&self.proc_root, pid, &bytes));
                        self.cache.insert(
                            pid,
                            CacheEntry {
                                start_time,
                                rank: rank.clone(),
                                placement,
                            },
                        );
                        rank
                    }
                    Err(e) => {
                        if e.kind() == io::ErrorKind::NotFound {
                            missing_now.insert(pid);
                        }
                        self.record_failure(pid, &path, &e);
                        return None;
                    }
                }
            }
        };
        if rank.is_some() {
            self.stats.attributed_total += 1;
        } else {
            self.stats.not_torchrun_total += 1;
        }
        rank
    }

    /// Counts a failed read of `path` (pid's environ) and warns once per cause.
    fn record_failure(&mut self, pid: u32, path: &Path, e: &io::Error) {
        let (cause, message) = match e.kind() {
            io::ErrorKind::PermissionDenied => {
                self.stats.permission_denied_total += 1;
                (
                    Cause::PermissionDenied,
                    format!(
                        "cannot read {}: permission denied; run the agent as root (with \
                         CAP_SYS_PTRACE inside a container) or as the job's user to attribute \
                         processes to torchrun ranks",
                        path.display()
                    ),
                )
            }
            // A process that exits between NVML's listing and our read is
            // missing too; only a pid missing twice in a row (NVML still
            // lists it) says we are in another PID namespace.
            io::ErrorKind::NotFound if !self.missing_last_call.contains(&pid) => {
                self.stats.vanished_total += 1;
                return;
            }
            io::ErrorKind::NotFound => {
                self.stats.not_in_proc_total += 1;
                (
                    Cause::NotInProc,
                    format!(
                        "pid {pid} reported by NVML is not visible in {}: the agent needs the \
                         host PID namespace (hostPID: true in Kubernetes, --pid=host in Docker) \
                         to attribute processes to torchrun ranks; a /proc mounted with hidepid \
                         hides other users' processes the same way",
                        self.proc_root.display()
                    ),
                )
            }
            _ => {
                self.stats.other_error_total += 1;
                (
                    Cause::Other,
                    format!(
                        "cannot read {}: {e}; such processes are not attributed to torchrun ranks",
                        path.display()
                    ),
                )
            }
        };
        if self.warned.insert(cause) {
            tracing::warn!(pid, "{message} (logged once)");
            self.reasons.push(message);
        }
    }
}

/// The torchrun rank named by the environment of process `pid`, read from
/// `<proc_root>/<pid>/environ` and parsed by [`parse_environ`]: `Ok(None)`
/// when the process is no torchrun worker.
///
/// Used by the hook endpoint to check what a connecting process claims.
///
/// # Errors
///
/// The read's error: the process is gone or not visible (`NotFound`), or
/// belongs to another user (`PermissionDenied`).
pub fn read_rank(proc_root: &Path, pid: u32) -> io::Result<Option<RankInfo>> {
    let path = proc_root.join(pid.to_string()).join("environ");
    Ok(parse_environ(&read_bounded(&path, MAX_ENVIRON_BYTES)?))
}

/// Field 22 of `/proc/PID/stat`: the process's start time, in clock ticks
/// since boot. `None` when unreadable or malformed.
fn read_start_time(stat: &Path) -> Option<u64> {
    let bytes = read_bounded(stat, 4096).ok()?;
    parse_start_time(std::str::from_utf8(&bytes).ok()?)
}

/// Parses field 22 out of a `stat` line. The command name (field 2) is in
/// parentheses and may itself hold spaces and parentheses, so fields are
/// counted from the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name, so field 22 is the 20th.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_proto::GpuInfo;

    const RANK3: &[u8] = include_bytes!("../tests/fixtures/environ/torchrun_rank3.environ");
    const NO_RUN_ID: &[u8] = include_bytes!("../tests/fixtures/environ/no_run_id.environ");
    const NOT_TORCH: &[u8] = include_bytes!("../tests/fixtures/environ/not_torch.environ");
    const GARBAGE: &[u8] = include_bytes!("../tests/fixtures/environ/garbage.environ");

    fn env(entries: &[&str]) -> Vec<u8> {
        entries
            .iter()
            .flat_map(|e| [e.as_bytes(), b"\0"])
            .flatten()
            .copied()
            .collect()
    }

    #[test]
    fn torchrun_worker() {
        let info = parse_environ(RANK3).unwrap();
        assert_eq!(
            info,
            RankInfo {
                job: "llama-7b-sft-20240611".into(),
                rank: 3,
                local_rank: 3,
                world_size: 8,
                master_addr: Some("10.0.3.17".into()),
                master_port: Some(29500),
            }
        );
    }

    #[test]
    fn without_run_id_the_job_is_the_master_address() {
        let info = parse_environ(NO_RUN_ID).unwrap();
        assert_eq!(info.job, "trainer-0.trainer.default.svc:23456");
        assert_eq!((info.rank, info.local_rank, info.world_size), (12, 4, 16));
    }

    #[test]
    fn not_a_torchrun_process() {
        assert_eq!(parse_environ(NOT_TORCH), None);
        assert_eq!(parse_environ(b""), None);
    }

    #[test]
    fn garbage_entries_are_skipped_and_the_first_duplicate_wins() {
        let info = parse_environ(GARBAGE).unwrap();
        // RANK=1 comes before RANK=0; TORCHELASTIC_RUN_ID=none is torchrun's default.
        assert_eq!(info.rank, 1);
        assert_eq!(info.world_size, 2);
        assert_eq!(info.local_rank, 1);
        assert_eq!(info.job, "127.0.0.1:29400");
    }

    #[test]
    fn rank_and_world_size_must_be_sane() {
        for bad in [
            env(&["RANK=8", "WORLD_SIZE=8"]),
            env(&["RANK=0", "WORLD_SIZE=0"]),
            env(&["RANK=-1", "WORLD_SIZE=8"]),
            env(&["RANK=three", "WORLD_SIZE=8"]),
            env(&["RANK=0"]),
            env(&["WORLD_SIZE=8"]),
            env(&["RANK=0", "WORLD_SIZE=4294967295"]),
            env(&["RANK=0", "WORLD_SIZE=99999999999"]),
        ] {
            assert_eq!(
                parse_environ(&bad),
                None,
                "{:?}",
                String::from_utf8_lossy(&bad)
            );
        }
    }

    #[test]
    fn defaults_when_optional_variables_are_missing_or_odd() {
        let info = parse_environ(&env(&["RANK= 2 ", "WORLD_SIZE=4"])).unwrap();
        assert_eq!(info.job, UNKNOWN_JOB);
        assert_eq!((info.rank, info.local_rank), (2, 0));
        assert_eq!((info.master_addr, info.master_port), (None, None));

        let info = parse_environ(&env(&[
            "RANK=1",
            "WORLD_SIZE=4",
            "LOCAL_RANK=x",
            "MASTER_ADDR=10.0.0.1",
            "MASTER_PORT=99999",
            "TORCHELASTIC_RUN_ID=",
        ]))
        .unwrap();
        assert_eq!(info.local_rank, 0);
        assert_eq!(info.master_port, None);
        // An address without a port does not make a job name.
        assert_eq!(info.job, UNKNOWN_JOB);
    }

    #[test]
    fn ipv6_master_address_is_bracketed() {
        let info = parse_environ(&env(&[
            "RANK=0",
            "WORLD_SIZE=2",
            "MASTER_ADDR=fd00::17",
            "MASTER_PORT=29500",
        ]))
        .unwrap();
        assert_eq!(info.job, "[fd00::17]:29500");
    }

    #[test]
    fn long_job_names_are_cut_on_a_char_boundary() {
        // 'é' is two bytes: 1 + 2 * 200 bytes, so byte 256 falls inside a char.
        let id = format!("j{}", "é".repeat(200));
        let info = parse_environ(&env(&[
            &format!("TORCHELASTIC_RUN_ID={id}"),
            "RANK=0",
            "WORLD_SIZE=1",
        ]))
        .unwrap();
        assert_eq!(info.job.len(), 255);
        assert!(id.starts_with(&info.job));
    }

    #[test]
    fn oversized_blob_is_ignored() {
        let mut blob = RANK3.to_vec();
        blob.extend(std::iter::repeat_n(b'x', MAX_ENVIRON_BYTES));
        assert_eq!(parse_environ(&blob), None);
    }

    #[test]
    fn read_rank_reads_a_process_environment_under_a_proc_root() {
        let root = tempfile::tempdir().unwrap();
        write_proc(root.path(), 4242, RANK3, None);
        write_proc(root.path(), 4243, NOT_TORCH, None);
        let info = read_rank(root.path(), 4242).unwrap().unwrap();
        assert_eq!((info.job.as_str(), info.rank), ("llama-7b-sft-20240611", 3));
        assert_eq!(read_rank(root.path(), 4243).unwrap(), None);
        let e = read_rank(root.path(), 4244).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn start_time_is_field_22_even_with_odd_command_names() {
        let line = stat_line(4242, "pt main) (x", 987654);
        assert_eq!(parse_start_time(&line), Some(987654));
        assert_eq!(parse_start_time("4242 (python"), None);
        assert_eq!(parse_start_time("4242 (python) S 1 2"), None);
    }

    /// The rank the finder reads for a real `sleep` started with `env`
    /// (and only that), through the real `/proc`.
    #[cfg(target_os = "linux")]
    fn rank_of_a_real_process(env: &[(&str, &str)]) -> RankInfo {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env_clear()
            .envs(env.iter().copied())
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(
            read_start_time(&Path::new(DEFAULT_PROC_ROOT).join(format!("{pid}/stat"))).is_some()
        );
        // Until the child has exec'd, /proc shows the parent's environment.
        let (key, value) = env[0];
        let marker = format!("{key}={value}");
        let environ = Path::new(DEFAULT_PROC_ROOT).join(format!("{pid}/environ"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !std::fs::read(&environ)
            .unwrap_or_default()
            .split(|b| *b == 0)
            .any(|entry| entry == marker.as_bytes())
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never exec'd"
            );
            std::thread::yield_now();
        }
        let mut finder = RankFinder::default();
        let mut samples = vec![sample(0, &[pid])];
        finder.attribute(&mut samples);
        child.kill().unwrap();
        child.wait().unwrap();
        samples[0].procs[0].rank.clone().expect("attributed")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_a_real_process_from_the_real_proc() {
        let rank = rank_of_a_real_process(&[
            ("TORCHELASTIC_RUN_ID", "real-proc-test"),
            ("RANK", "5"),
            ("WORLD_SIZE", "6"),
        ]);
        assert_eq!(
            (rank.job.as_str(), rank.rank, rank.world_size),
            ("real-proc-test", 5, 6)
        );
    }

    /// A process as `srun` starts it in a Slurm job (no torchrun).
    #[cfg(target_os = "linux")]
    #[test]
    fn reads_a_real_process_started_by_srun() {
        let rank = rank_of_a_real_process(&[
            ("SLURM_JOB_ID", "31337"),
            ("SLURM_STEP_ID", "2"),
            ("SLURM_PROCID", "13"),
            ("SLURM_NTASKS", "32"),
            ("SLURM_LOCALID", "5"),
            ("SLURM_NODEID", "1"),
        ]);
        assert_eq!(
            (
                rank.job.as_str(),
                rank.rank,
                rank.local_rank,
                rank.world_size
            ),
            ("slurm-31337.2", 13, 5, 32)
        );
    }

    /// The table the Python hook is tested against too.
    #[test]
    fn every_launcher_case_reads_as_the_hook_reads_it() {
        let table: serde_json::Value =
            serde_json::from_str(include_str!("../python/tests/identity_cases.json")).unwrap();
        let cases = table["cases"].as_array().unwrap();
        assert!(cases.len() >= 10);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let env = env(&case["env"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>());
            let got = parse_environ(&env).map(|r| {
                serde_json::json!({
                    "job": r.job, "rank": r.rank, "local_rank": r.local_rank, "world_size": r.world_size,
                })
            });
            let want = Some(case["expect"].clone()).filter(|v| !v.is_null());
            assert_eq!(got, want, "{name}");
        }
    }

    // ---- RankFinder over a fake /proc ----

    fn stat_line(pid: u32, comm: &str, start: u64) -> String {
        // Fields 3..=21, then starttime (22), then a few more, as the kernel writes them.
        format!(
            "{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 51234 0 12 0 840 311 0 0 20 0 42 0 \
             {start} 25769803776 1048576 18446744073709551615 1 1 0 0 0 0 16386 16781312 0 0 0 \
             17 3 0 0 0 0 0\n"
        )
    }

    #[track_caller]
    fn write_proc(root: &Path, pid: u32, environ: &[u8], start: Option<u64>) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("environ"), environ).unwrap();
        if let Some(start) = start {
            std::fs::write(dir.join("stat"), stat_line(pid, "python", start)).unwrap();
        }
    }

    fn sample(index: u32, pids: &[u32]) -> GpuSample {
        GpuSample {
            t_ms: 1_700_000_000_000,
            gpu: GpuInfo {
                uuid: format!("GPU-0000000{index}-aaaa-bbbb-cccc-ddddeeeeffff"),
                index,
                name: "NVIDIA H100 80GB HBM3".into(),
                total_bytes: 80 << 30,
            },
            used_bytes: 10 << 30,
            reserved_bytes: Some(512 << 20),
            util_pct: Some(97.0),
            sm_clock_mhz: Some(1980.0),
            power_w: Some(650.0),
            procs: pids
                .iter()
                .map(|&pid| ProcSample {
                    pid,
                    used_bytes: 9 << 30,
                    rank: None,
                })
                .collect(),
        }
    }

    fn ranks(samples: &[GpuSample]) -> Vec<Option<u32>> {
        samples
            .iter()
            .flat_map(|s| &s.procs)
            .map(|p| p.rank.as_ref().map(|r| r.rank))
            .collect()
    }

    #[test]
    fn attributes_processes_by_the_gpu_nvml_lists_them_under() {
        let root = tempfile::tempdir().unwrap();
        write_proc(root.path(), 100, RANK3, Some(5000));
        write_proc(root.path(), 200, NOT_TORCH, Some(5001));
        let mut finder = RankFinder::new(root.path().to_path_buf());
        // Rank 3 (LOCAL_RANK=3) sits on GPU 5 here: the GPU stays NVML's.
        let mut samples = vec![sample(5, &[100]), sample(6, &[200, 100])];
        finder.attribute(&mut samples);
        assert_eq!(ranks(&samples), [Some(3), None, Some(3)]);
        assert_eq!(samples[0].gpu.index, 5);
        assert_eq!(
            samples[0].procs[0].rank.as_ref().unwrap().job,
            "llama-7b-sft-20240611"
        );
        assert!(finder.unattributed_reasons().is_empty());
        let stats = finder.stats();
        assert_eq!((stats.attributed_total, stats.not_torchrun_total), (1, 1));
    }

    #[test]
    fn already_attributed_processes_are_left_alone() {
        let root = tempfile::tempdir().unwrap();
        let mut finder = RankFinder::new(root.path().to_path_buf());
        let mut samples = vec![sample(0, &[7])];
        let known = parse_environ(NO_RUN_ID);
        samples[0].procs[0].rank = known.clone();
        finder.attribute(&mut samples);
        finder.attribute(&mut samples);
        assert_eq!(samples[0].procs[0].rank, known);
        assert_eq!(finder.stats(), AttributionStats::default());
    }

    #[test]
    fn pid_missing_from_proc_blames_the_pid_namespace_once_it_persists() {
        let root = tempfile::tempdir().unwrap();
        write_proc(root.path(), 100, RANK3, Some(5000));
        let mut finder = RankFinder::new(root.path().to_path_buf());

        // First miss: the process may just have exited.
        let mut samples = vec![sample(0, &[100, 31337])];
        finder.attribute(&mut samples);
        assert_eq!(ranks(&samples), [Some(3), None]);
        assert!(finder.unattributed_reasons().is_empty());
        assert_eq!(finder.stats().vanished_total, 1);

        // NVML still lists it: we do not see its PID namespace.
        for _ in 0..3 {
            let mut samples = vec![sample(0, &[100, 31337]), sample(1, &[31338])];
            finder.attribute(&mut samples);
            assert_eq!(ranks(&samples), [Some(3), None, None]);
        }
        let reasons = finder.unattributed_reasons();
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert!(reasons[0].contains("pid 31337"), "{}", reasons[0]);
        assert!(reasons[0].contains("host PID namespace"), "{}", reasons[0]);
        assert!(reasons[0].contains("hostPID: true"), "{}", reasons[0]);
        let stats = finder.stats();
        // 31337 three times, 31338 twice after its first (vanished) miss.
        assert_eq!((stats.vanished_total, stats.not_in_proc_total), (2, 5));
    }

    #[test]
    fn permission_denied_is_explained_once() {
        let root = tempfile::tempdir().unwrap();
        let mut finder = RankFinder::new(root.path().to_path_buf());
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        let path = root.path().join("4242/environ");
        finder.record_failure(4242, &path, &denied);
        finder.record_failure(4243, &path, &denied);
        finder.record_failure(4244, &path, &io::Error::other("I/O error"));
        let reasons = finder.unattributed_reasons();
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert!(
            reasons[0].contains("4242/environ: permission denied"),
            "{}",
            reasons[0]
        );
        assert!(
            reasons[0].contains("run the agent as root"),
            "{}",
            reasons[0]
        );
        assert!(reasons[1].contains("I/O error"), "{}", reasons[1]);
        assert_eq!(finder.stats().permission_denied_total, 2);
        assert_eq!(finder.stats().other_error_total, 1);
    }

    #[test]
    fn results_are_cached_per_pid_and_start_time() {
        let root = tempfile::tempdir().unwrap();
        write_proc(root.path(), 100, RANK3, Some(5000));
        let mut finder = RankFinder::new(root.path().to_path_buf());
        let mut samples = vec![sample(0, &[100])];
        finder.attribute(&mut samples);
        assert_eq!(ranks(&samples), [Some(3)]);

        // Same process (same start time): the environment is not read again.
        std::fs::write(root.path().join("100/environ"), NO_RUN_ID).unwrap();
        let mut samples = vec![sample(0, &[100])];
        finder.attribute(&mut samples);
        assert_eq!(ranks(&samples), [Some(3)]);

        // The pid was reused by a new process: read again.
        write_proc(root.path(), 100, NO_RUN_ID, Some(9000));
        let mut samples = vec![sample(0, &[100])];
        finder.attribute(&mut samples);
        assert_eq!(ranks(&samples), [Some(12)]);
    }

    #[test]
    fn without_stat_the_cache_key_is_the_pid() {
        let root = tempfile::tempdir().unwrap();
        write_proc(root.path(), 100, RANK3, None);
        let mut finder = RankFinder::new(root.path().to_path_buf());
        let mut samples = vec![sample(0, &[100])];
        finder.attribute(&mut samples);
        std::fs::write(root.path().join("100/environ"), NO_RUN_ID).unwrap();
        let mut samples = vec![sample(0, &[100])];
        finder.attribute(&mut samples);
        assert_eq!(ranks(&samples), [Some(3)]);
    }

    #[test]
    fn cache_forgets_pids_absent_from_the_last_call() {
        let root = tempfile::tempdir().unwrap();
        write_proc(root.path(), 100, RANK3, Some(5000));
        write_proc(root.path(), 200, NOT_TORCH, Some(5001));
        let mut finder = RankFinder::new(root.path().to_path_buf());
        finder.attribute(&mut [sample(0, &[100, 200])]);
        assert_eq!(finder.cache.len(), 2);
        finder.attribute(&mut [sample(0, &[100])]);
        assert_eq!(finder.cache.keys().copied().collect::<Vec<_>>(), [100]);

        // 100 left and came back with another environment but the same
        // start time (no stat change): evicted, so it is read afresh.
        finder.attribute(&mut [sample(0, &[200])]);
        std::fs::write(root.path().join("100/environ"), NO_RUN_ID).unwrap();
        let mut samples = vec![sample(0, &[100])];
        finder.attribute(&mut samples);
        assert_eq!(ranks(&samples), [Some(12)]);
        finder.attribute(&mut []);
        assert!(finder.cache.is_empty());
    }
}
