//! gpumon on a real torch job: `torchrun --nproc-per-node 4` training a
//! DistributedDataParallel (or FSDP2) model on CPU (gloo) through `gpumon run`, with a
//! single coordinator and an agent serving the hook on loopback that samples
//! no GPU itself (`--source none`). The engine runs its default
//! configuration: the point is that the defaults work on a real job.
//!
//! One rank is made slow, in its forward (real extra compute), in its data
//! loader or in `optimizer.step()`, 20 s into training
//! (`tests/torch/ddp_train.py`); a `straggler` alert must name that rank and
//! section within 30 s. The script either times its sections with gpumon
//! calls, as the README shows, or makes no timing call at all and leaves
//! them to the hook's automatic step anatomy (`--instrument none`). Under
//! FSDP2 (`fully_shard` per layer) rank 1's first layer is made slow in its
//! forward: its peers wait in their own all-gathers and reduce-scatters,
//! which the hook times apart (`comm_wait`). In a pipeline of two stages of
//! two data-parallel replicas each (explicit sends and receives, each
//! stage's gradients all-reduced in its own process group), replica 0 of
//! stage 0 made slow must be named a straggler, and stage 1 made
//! persistently heavier must be a `stage_imbalance`, not two stragglers: the
//! hook reports each rank's peer group from the process groups it uses. A
//! DDP, an FSDP and a pipeline job with no slow rank and no timing call
//! must each train 120 s without a straggler or stage alert. Before waiting for an alert, the tests
//! check the harness: every rank's sections reach the coordinator, and the
//! slowdown shows in them (the slow rank's section longer than its peers',
//! its `backward` shorter, as its peers wait for it in DDP's all-reduce).
//! Each test writes the ranks' own section medians to stderr.
//!
//! Without CUDA the hook has no device to report, and the job API lists a
//! rank only with its device: the ranks report their resident memory on a
//! stand-in `cpu` device (`CpuMemory` in the script) so the harness can read
//! their sections there. Straggler detection does not need it: it works on
//! the step records alone.
//!
//! The tests need a Python with torch in `GPUMON_TEST_PYTHON`;
//! `scripts/test` installs one in a cached venv and sets it. Without it they
//! fail and say so; `GPUMON_SKIP_TORCH_TESTS=1` skips them. They run one job
//! at a time: four ranks on a 2-CPU machine already compete for the CPUs,
//! and two jobs at once would make every rank's times noisy.

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use support::{get, gpumon, leading_coordinator, wait_for, wait_for_every, Proc};
use tokio::process::Child;
use tokio::sync::Mutex;
use tokio::time::Instant;

const RANKS: u32 = 4;
/// The rank made slow in the DDP jobs (the cases) ...
const SLOW_RANK: u32 = 2;
/// ... and in the FSDP job ...
const SLOW_FSDP_RANK: u32 = 1;
/// ... and in the pipeline job: replica 0 of stage 0 ...
const SLOW_PIPELINE_RANK: u32 = 0;
/// ... whose peers are its stage's other replica; stage 1 (ranks 2 and 3,
/// named by its lowest) is the one made heavy.
const HEAVY_STAGE: u32 = 2;
/// Training time before the slow rank slows down, seconds.
const SLOW_AFTER_S: u64 = 20;
/// Longest time from the slowdown to its alert.
const ALERT_WITHIN: Duration = Duration::from_secs(30);
/// Training time of the job with no slow rank, seconds.
const CLEAN_RUN_S: u64 = 120;
/// Longest time from `gpumon run` to the first training step (five Pythons
/// importing torch on two CPUs).
const START_WITHIN: Duration = Duration::from_secs(120);
/// Time between two reads of the API: every read takes CPU from the ranks.
const POLL: Duration = Duration::from_secs(1);
/// Where the script writes when the slowdown started, in the job's directory.
const SLOW_START_FILE: &str = "slow-start";
/// Where the output of `gpumon run`, torchrun and the ranks goes, in the
/// job's directory; its end is shown when a test fails.
const RUN_LOG: &str = "run.log";
/// Where the hooks save hang evidence, inside the job's directory.
const DUMP_DIR: &str = "dumps";
/// A hang is named within this of the rank's stop.
const HANG_WITHIN: Duration = Duration::from_secs(90);
/// Run time of the jobs with a 90 s pause in them, seconds.
const PAUSED_RUN_S: u64 = 130;
/// Steps after the slowdown in every rank's statistics before the job stops.
const STEPS_AFTER: u64 = 100;
/// The sections the script times.
const SECTIONS: [&str; 3] = ["data", "forward", "backward"];
/// How much longer than its peers' the slow rank's section must be.
const SLOW_RATIO: f64 = 1.5;

const HOW_TO_GET_TORCH: &str = "run ./scripts/test, which installs torch in a cached venv and \
     sets GPUMON_TEST_PYTHON, or set GPUMON_TEST_PYTHON to a python that can import torch \
     (GPUMON_SKIP_TORCH_TESTS=1 skips these tests)";

static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_secs_f64()
}

/// Time left until `t`, Unix seconds (zero when past).
fn until(t: f64) -> Duration {
    Duration::from_secs_f64((t - unix_now()).max(0.0))
}

/// Written past libtest's capture, so that a passing run's log shows it too.
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The Python to run the job with, or `None` (said on stderr) when the
/// tests are skipped. Panics, saying what to do, when there is none.
fn torch_python(test: &str) -> Option<PathBuf> {
    if std::env::var("GPUMON_SKIP_TORCH_TESTS").as_deref() == Ok("1") {
        report(&format!("{test}: SKIPPED: GPUMON_SKIP_TORCH_TESTS=1"));
        return None;
    }
    static CHECKED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match CHECKED.get_or_init(find_torch_python) {
        Ok(python) => Some(python.clone()),
        Err(e) => panic!("{e}"),
    }
}

fn find_torch_python() -> Result<PathBuf, String> {
    let python = std::env::var_os("GPUMON_TEST_PYTHON")
        .map(PathBuf::from)
        .ok_or_else(|| format!("GPUMON_TEST_PYTHON is not set: {HOW_TO_GET_TORCH}"))?;
    let out = std::process::Command::new(&python)
        .args(["-c", "import torch"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}: {HOW_TO_GET_TORCH}", python.display()))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.lines().last().unwrap_or("no error message");
        return Err(format!(
            "{} cannot import torch ({why}): {HOW_TO_GET_TORCH}",
            python.display()
        ));
    }
    Ok(python)
}

/// One rank's latest smoothed times, as the coordinator shows them.
#[derive(Debug)]
struct RankTimes {
    step: u64,
    /// Smoothed ms per section.
    sections: BTreeMap<String, f64>,
}

impl RankTimes {
    fn ms(&self, section: &str) -> f64 {
        self.sections.get(section).copied().unwrap_or(f64::NAN)
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

fn show(times: &BTreeMap<u32, RankTimes>) -> String {
    times
        .iter()
        .map(|(rank, t)| {
            let sections: Vec<String> = SECTIONS
                .iter()
                .map(|s| format!("{s} {:.1}", t.ms(s)))
                .collect();
            format!("rank {rank} step {}: {}", t.step, sections.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every rank has reported steps with every section.
fn all_ranks_report_sections(times: &BTreeMap<u32, RankTimes>) -> Result<(), String> {
    let complete = (0..RANKS).all(|rank| {
        times
            .get(&rank)
            .is_some_and(|t| SECTIONS.iter().all(|s| t.ms(s) > 0.0))
    });
    if complete {
        Ok(())
    } else {
        Err(format!(
            "not every rank reports {SECTIONS:?}: {}",
            show(times)
        ))
    }
}

/// Where a job's ranks wait for a slow peer, as the hook reports it: DDP's
/// all-reduce in `backward`; FSDP's all-gathers and reduce-scatters, timed
/// apart, in `comm_wait`.
fn wait_section(parallel: &str) -> &'static str {
    if parallel == "fsdp" || parallel == "pipeline" {
        "comm_wait"
    } else {
        "backward"
    }
}

/// `rank`'s `section` takes [`SLOW_RATIO`] times its peers' median, and its
/// wait less than theirs (they wait for it).
fn slowdown_shows(
    times: &BTreeMap<u32, RankTimes>,
    rank: u32,
    section: &str,
    wait: &str,
) -> Result<(), String> {
    all_ranks_report_sections(times)?;
    let peers = |s: &str| {
        median(
            times
                .iter()
                .filter(|(r, _)| **r != rank)
                .map(|(_, t)| t.ms(s))
                .collect(),
        )
    };
    let slow = &times[&rank];
    if slow.ms(section) >= SLOW_RATIO * peers(section) && slow.ms(wait) < peers(wait) {
        Ok(())
    } else {
        Err(format!(
            "rank {rank}'s {section} is not {SLOW_RATIO}x its peers' with a shorter {wait}: {}",
            show(times)
        ))
    }
}

/// A straggler alert for `rank` in `section`, alive after `since` (Unix s).
fn names(alert: &Value, rank: u32, section: &str, since: f64) -> bool {
    alert["rank"] == rank
        && alert["section"] == section
        && alert["updated_t"].as_f64().is_some_and(|t| t >= since)
        && alert["resolved_t"].as_f64().is_none_or(|t| t >= since)
}

fn alert_lines(alerts: &[Value]) -> String {
    let lines: Vec<String> = alerts
        .iter()
        .map(|a| format!("t={} {}", a["t"], a["message"].as_str().unwrap_or("?")))
        .collect();
    format!("[{}]", lines.join(" | "))
}

/// A coordinator, an agent serving the hook, and `gpumon run -- torchrun
/// ... ddp_train.py` in its own process group; everything is killed on drop.
struct Job {
    name: String,
    url: String,
    dir: PathBuf,
    run: Child,
    _coordinator: Proc,
    _agent: Proc,
    _tmp: tempfile::TempDir,
}

impl Job {
    /// Starts the job `name` with the training script's `args`.
    async fn start(name: &str, python: &Path, args: &[String]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        let (coordinator, url) = leading_coordinator(&dir.join("data")).await;
        let socket = dir.join("hook.sock");
        let hook = format!("unix:{}", socket.display());
        let mut cmd = gpumon();
        cmd.args(["agent", "--source", "none", "--node-name", "node-torch"])
            .args(["--coordinators", &url, "--hook-listen", &hook])
            .args(["--sample-interval-ms", "100", "--window-ms", "500"])
            .args(["--metrics-listen", "none"]);
        let agent = Proc::spawn(cmd);
        wait_for(Duration::from_secs(20), "the hook socket", || async {
            std::os::unix::net::UnixStream::connect(&socket)
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .await;
        let mut cmd = gpumon();
        cmd.args(["run", "--agent", &hook, "--"]);
        torchrun_ddp_train(&mut cmd, python, &dir, name, args);
        cmd.arg("--stats-dir").arg(&dir);
        let run = cmd.spawn().expect("gpumon run starts");
        Self {
            name: name.to_owned(),
            url,
            dir,
            run,
            _coordinator: coordinator,
            _agent: agent,
            _tmp: tmp,
        }
    }

    /// Every rank's latest times from `GET /api/v1/jobs/JOB`.
    async fn times(&self) -> Result<BTreeMap<u32, RankTimes>, String> {
        let job: Value = get(&format!("{}/api/v1/jobs/{}", self.url, self.name))
            .await
            .map_err(|e| e.to_string())?;
        let steps = job["steps"].as_object().ok_or("no steps yet")?;
        let mut times = BTreeMap::new();
        for (rank, s) in steps {
            let sections = s["sections"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(name, t)| Some((name.clone(), t["mean_ms"].as_f64()?)))
                        .collect()
                })
                .unwrap_or_default();
            let rank = rank.parse().map_err(|e| format!("rank {rank:?}: {e}"))?;
            let step = s["step"].as_u64().unwrap_or(0);
            times.insert(rank, RankTimes { step, sections });
        }
        Ok(times)
    }

    /// The job's straggler alerts, resolved or not.
    async fn straggler_alerts(&self) -> Result<Vec<Value>, String> {
        self.alerts_of("straggler").await
    }

    /// The first of the job's alerts of `kind` that `wanted` accepts, by
    /// `deadline` (Unix s); fails showing the alerts and section times.
    async fn wait_for_alert(
        &self,
        kind: &str,
        deadline: f64,
        what: &str,
        wanted: impl Fn(&Value) -> bool,
    ) -> Value {
        wait_for_every(POLL, until(deadline), what, || async {
            let alerts = self.alerts_of(kind).await?;
            match alerts.iter().find(|a| wanted(a)) {
                Some(a) => Ok(a.clone()),
                None => Err(format!(
                    "alerts {}; section times {}",
                    alert_lines(&alerts),
                    self.times().await.map(|t| show(&t)).unwrap_or_else(|e| e)
                )),
            }
        })
        .await
    }

    /// The job's alerts of `kind`, resolved or not.
    async fn alerts_of(&self, kind: &str) -> Result<Vec<Value>, String> {
        let body: Value = get(&format!("{}/api/v1/alerts?job={}", self.url, self.name))
            .await
            .map_err(|e| e.to_string())?;
        let alerts = body["alerts"].as_array().ok_or("no alerts list")?;
        Ok(alerts
            .iter()
            .filter(|a| a["kind"] == kind)
            .cloned()
            .collect())
    }

    /// When the slow rank slowed down, Unix seconds.
    async fn slowdown_start(&self) -> f64 {
        let within = START_WITHIN + Duration::from_secs(SLOW_AFTER_S);
        wait_for_every(POLL, within, "the slowdown to start", || async {
            let text = std::fs::read_to_string(self.dir.join(SLOW_START_FILE))
                .map_err(|e| e.to_string())?;
            text.trim()
                .parse::<f64>()
                .map_err(|e| format!("{text:?}: {e}"))
        })
        .await
    }

    /// The job's end by itself, within `within`.
    async fn wait_end(&mut self, within: Duration) -> ExitStatus {
        tokio::time::timeout(within, self.run.wait())
            .await
            .unwrap_or_else(|_| panic!("{} still running after {within:?}", self.name))
            .expect("gpumon run can be waited for")
    }

    /// SIGTERM to `gpumon run` and torchrun (which stops its workers), then
    /// SIGKILL after 30 s.
    async fn stop(&mut self) {
        self.signal("TERM");
        if tokio::time::timeout(Duration::from_secs(30), self.run.wait())
            .await
            .is_err()
        {
            self.signal("KILL");
            let _ = self.run.wait().await;
        }
    }

    fn signal(&self, name: &str) {
        if let Some(pid) = self.run.id() {
            let _ = std::process::Command::new("kill")
                .args([&format!("-{name}"), "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
    }

    /// What rank `rank`'s script last wrote about its section times.
    fn rank_stats(&self, rank: u32) -> Result<Value, String> {
        let path = self.dir.join(format!("rank-{rank}.json"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Every rank's script has timed [`STEPS_AFTER`] steps after the slowdown.
    async fn steps_after_slowdown(&self) {
        let what = format!("{STEPS_AFTER} steps after the slowdown on every rank");
        wait_for_every(POLL, ALERT_WITHIN, &what, || async {
            for rank in 0..RANKS {
                let stats = self.rank_stats(rank)?;
                if stats["after"]["n"].as_u64().unwrap_or(0) < STEPS_AFTER {
                    return Err(format!("rank {rank}: {stats}"));
                }
            }
            Ok(())
        })
        .await;
    }

    /// The ranks' own section medians before and after the slowdown.
    fn rank_medians(&self) -> String {
        let mut lines = Vec::new();
        for rank in 0..RANKS {
            let stats = match self.rank_stats(rank) {
                Ok(stats) => stats,
                Err(e) => {
                    lines.push(format!("  rank {rank}: {e}"));
                    continue;
                }
            };
            let cells: Vec<String> = SECTIONS
                .iter()
                .chain(&["step"])
                .map(
                    |s| match (stats["before"][s].as_f64(), stats["after"][s].as_f64()) {
                        (Some(b), Some(a)) => format!("{s} {b:.1} -> {a:.1}"),
                        (Some(b), None) => format!("{s} {b:.1}"),
                        _ => format!("{s} -"),
                    },
                )
                .collect();
            lines.push(format!("  rank {rank}: {}", cells.join(", ")));
        }
        lines.join("\n")
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.signal("KILL");
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.join(RUN_LOG)).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(40)..].join("\n");
            report(&format!("{}: the end of {RUN_LOG}:\n{tail}", self.name));
        }
    }
}

/// The slow rank of a DDP job, slow in `section` from 20 s in, is named
/// within 30 s. `instrument`: `script` (the script times its sections with
/// gpumon calls) or `none` (no gpumon timing call: the hook's automatic
/// anatomy).
async fn slow_rank_is_named(test: &str, section: &str, instrument: &str) {
    slow_rank_of_is_named(test, section, instrument, "ddp", SLOW_RANK).await;
}

/// [`slow_rank_is_named`] for rank `slow_rank` of a `parallel` job (`ddp`,
/// `fsdp` or `pipeline`; in a pipeline no stage alert may come either).
async fn slow_rank_of_is_named(
    test: &str,
    section: &str,
    instrument: &str,
    parallel: &str,
    slow_rank: u32,
) {
    let Some(python) = torch_python(test) else {
        return;
    };
    let _alone = ONE_JOB_AT_A_TIME.lock().await;
    let began = Instant::now();
    let name = format!("torch-{parallel}-slow-{section}-{instrument}");
    let args: Vec<String> = [
        "--parallel",
        parallel,
        "--duration-s",
        &(SLOW_AFTER_S + 2 * ALERT_WITHIN.as_secs()).to_string(),
        "--slow-rank",
        &slow_rank.to_string(),
        "--slow-in",
        section,
        "--slow-after-s",
        &SLOW_AFTER_S.to_string(),
        "--instrument",
        instrument,
        // Two CPUs for four ranks blunt one extra pass of a pipeline stage's
        // two layers: three make the slowdown plain.
        "--slow-repeats",
        if parallel == "pipeline" { "3" } else { "1" },
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut job = Job::start(&name, &python, &args).await;
    let start = job.slowdown_start().await;
    let deadline = start + ALERT_WITHIN.as_secs_f64();

    wait_for_every(
        POLL,
        until(deadline),
        "the slowdown in the coordinator's section times",
        || async {
            let wait = wait_section(parallel);
            slowdown_shows(&job.times().await?, slow_rank, section, wait)
        },
    )
    .await;
    let what = format!("a straggler alert naming rank {slow_rank} and {section}");
    let alert = job
        .wait_for_alert("straggler", deadline, &what, |a| {
            names(a, slow_rank, section, start)
        })
        .await;
    let after = alert["t"].as_f64().unwrap_or(f64::NAN) - start;
    job.steps_after_slowdown().await;
    let stage_alerts = job.alerts_of("stage_imbalance").await.unwrap();
    job.stop().await;
    assert!(
        stage_alerts.is_empty(),
        "one slow replica makes no stage heavy: {}",
        alert_lines(&stage_alerts)
    );
    if parallel == "pipeline" {
        let message = alert["message"].as_str().unwrap_or("");
        assert!(
            message.contains("(rank 1, in its pipeline stage)"),
            "the peers named are its stage's other replica: {message}"
        );
    }
    report(&format!(
        "{test}: alert {after:.1} s after the slowdown: {}\n{name}: section medians (ms) before -> after the slowdown of rank {slow_rank}:\n{}\n{test}: {:.0} s",
        alert["message"].as_str().unwrap_or("?"),
        job.rank_medians(),
        began.elapsed().as_secs_f64()
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rank_slow_in_forward_is_named_within_30_s() {
    slow_rank_is_named(
        "a_rank_slow_in_forward_is_named_within_30_s",
        "forward",
        "script",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rank_slow_in_its_data_loader_is_named_within_30_s() {
    slow_rank_is_named(
        "a_rank_slow_in_its_data_loader_is_named_within_30_s",
        "data",
        "script",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_rank_slow_in_forward_is_named_within_30_s() {
    slow_rank_is_named(
        "with_no_gpumon_call_a_rank_slow_in_forward_is_named_within_30_s",
        "forward",
        "none",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_rank_slow_in_its_data_loader_is_named_within_30_s() {
    slow_rank_is_named(
        "with_no_gpumon_call_a_rank_slow_in_its_data_loader_is_named_within_30_s",
        "data",
        "none",
    )
    .await;
}

/// The extra work runs after the gradient all-reduce, so the peers wait for
/// it in the next step's backward: only the optimizer section shows it.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_rank_slow_in_its_optimizer_step_is_named_within_30_s() {
    slow_rank_is_named(
        "with_no_gpumon_call_a_rank_slow_in_its_optimizer_step_is_named_within_30_s",
        "optimizer",
        "none",
    )
    .await;
}

/// FSDP2 per layer: rank 1's first layer does extra work in its forward,
/// and its peers wait in the next all-gather (forward) or reduce-scatter
/// (backward), which the hook times apart as `comm_wait`.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_an_fsdp_rank_slow_in_forward_is_named_within_30_s() {
    slow_rank_of_is_named(
        "with_no_gpumon_call_an_fsdp_rank_slow_in_forward_is_named_within_30_s",
        "forward",
        "none",
        "fsdp",
        SLOW_FSDP_RANK,
    )
    .await;
}

/// A pipeline of two stages of two replicas: rank 0 (replica 0 of stage 0)
/// does extra work in its forward; its stage's other replica waits for it
/// in the gradient all-reduce, and stage 1's replica 0 in its receive.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_slow_replica_of_a_pipeline_stage_is_named_within_30_s() {
    slow_rank_of_is_named(
        "with_no_gpumon_call_a_slow_replica_of_a_pipeline_stage_is_named_within_30_s",
        "forward",
        "none",
        "pipeline",
        SLOW_PIPELINE_RANK,
    )
    .await;
}

/// The same pipeline with stage 1 made heavier (both its replicas) 20 s in:
/// a `stage_imbalance` naming stage 1 within 30 s, and no straggler.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_heavier_pipeline_stage_is_a_stage_imbalance_not_a_straggler() {
    let test = "with_no_gpumon_call_a_heavier_pipeline_stage_is_a_stage_imbalance_not_a_straggler";
    let Some(python) = torch_python(test) else {
        return;
    };
    let _alone = ONE_JOB_AT_A_TIME.lock().await;
    let began = Instant::now();
    let args: Vec<String> = [
        "--parallel",
        "pipeline",
        "--duration-s",
        &(SLOW_AFTER_S + 2 * ALERT_WITHIN.as_secs()).to_string(),
        "--slow-rank",
        &HEAVY_STAGE.to_string(),
        "--slow-in",
        "stage",
        "--slow-repeats",
        "6",
        "--slow-after-s",
        &SLOW_AFTER_S.to_string(),
        "--instrument",
        "none",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut job = Job::start("torch-pipeline-heavy-stage", &python, &args).await;
    let start = job.slowdown_start().await;
    let deadline = start + ALERT_WITHIN.as_secs_f64();
    let alert = job
        .wait_for_alert(
            "stage_imbalance",
            deadline,
            "a stage_imbalance alert naming stage 1",
            |a| a["rank"] == HEAVY_STAGE && a["updated_t"].as_f64().is_some_and(|t| t >= start),
        )
        .await;
    let after = alert["t"].as_f64().unwrap_or(f64::NAN) - start;
    job.steps_after_slowdown().await;
    let stragglers = job.straggler_alerts().await.unwrap();
    job.stop().await;
    report(&format!(
        "{test}: alert {after:.1} s after stage 1 grew heavier: {}\n{test}: section medians (ms) before -> after:\n{}\n{test}: {:.0} s",
        alert["message"].as_str().unwrap_or("?"),
        job.rank_medians(),
        began.elapsed().as_secs_f64()
    ));
    let message = alert["message"].as_str().unwrap_or("");
    assert!(message.contains("ranks 2, 3"), "{message}");
    assert!(
        stragglers.is_empty(),
        "a heavy stage is no straggler: {}",
        alert_lines(&stragglers)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pipeline_job_with_no_slow_rank_trains_120_s_without_a_straggler_or_stage_alert() {
    clean_run_has_no_alert(
        "a_pipeline_job_with_no_slow_rank_trains_120_s_without_a_straggler_or_stage_alert",
        "pipeline",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_with_no_slow_rank_trains_120_s_without_a_straggler_alert() {
    clean_run_has_no_alert(
        "a_job_with_no_slow_rank_trains_120_s_without_a_straggler_alert",
        "ddp",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_fsdp_job_with_no_slow_rank_trains_120_s_without_a_straggler_alert() {
    clean_run_has_no_alert(
        "an_fsdp_job_with_no_slow_rank_trains_120_s_without_a_straggler_alert",
        "fsdp",
    )
    .await;
}

/// A `parallel` job with no slow rank and no gpumon timing call trains
/// [`CLEAN_RUN_S`] with no straggler alert.
async fn clean_run_has_no_alert(test: &str, parallel: &str) {
    let Some(python) = torch_python(test) else {
        return;
    };
    let _alone = ONE_JOB_AT_A_TIME.lock().await;
    let began = Instant::now();
    // No gpumon timing call: the automatic anatomy must not see a straggler either.
    let args: Vec<String> = [
        "--parallel",
        parallel,
        "--duration-s",
        &CLEAN_RUN_S.to_string(),
        "--instrument",
        "none",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut job = Job::start(&format!("torch-{parallel}-clean"), &python, &args).await;
    let status = job
        .wait_end(START_WITHIN + Duration::from_secs(CLEAN_RUN_S + 60))
        .await;
    assert!(status.success(), "the job ends by itself: {status}");

    let times = job.times().await.unwrap();
    all_ranks_report_sections(&times).unwrap();
    for (rank, t) in &times {
        assert!(t.step >= 100, "rank {rank} reported only {} steps", t.step);
    }
    let mut alerts = job.straggler_alerts().await.unwrap();
    alerts.extend(job.alerts_of("stage_imbalance").await.unwrap());
    report(&format!(
        "{test}: section medians (ms), whole run:\n{}\n{test}: {:.0} s",
        job.rank_medians(),
        began.elapsed().as_secs_f64()
    ));
    assert!(
        alerts.is_empty(),
        "no rank is slow, yet: {}; section times {}",
        alert_lines(&alerts),
        show(&times)
    );
}

/// Appends `torchrun ... ddp_train.py ARGS` (4 ranks on this host, rendezvous
/// `id`) to `cmd` (a `gpumon` command ending in `--`), writing the slowdown's
/// start and the run's log into `dir` and the hooks' evidence into its
/// [`DUMP_DIR`], in a process group of its own so that a kill reaches
/// torchrun too (the workers, in sessions of their own, exit when it goes).
fn torchrun_ddp_train(
    cmd: &mut tokio::process::Command,
    python: &Path,
    dir: &Path,
    id: &str,
    args: &[String],
) {
    let log = std::fs::File::create(dir.join(RUN_LOG)).unwrap();
    cmd.arg(python)
        .args(["-m", "torch.distributed.run", "--nnodes", "1"])
        .args(["--nproc-per-node", &RANKS.to_string()])
        .args(["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0"])
        .args(["--rdzv-id", id])
        .arg(repo().join("tests/torch/ddp_train.py"))
        .arg("--slow-start-file")
        .arg(dir.join(SLOW_START_FILE))
        .args(args)
        .env("GLOO_SOCKET_IFNAME", "lo")
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("GPUMON_DUMP_DIR", dir.join(DUMP_DIR))
        .env_remove("PYTHONPATH")
        .process_group(0)
        .stdout(log.try_clone().unwrap())
        .stderr(log);
}

/// The job's actions of `kind`, as `GET /api/v1/actions` lists them.
async fn actions_of(job: &Job, kind: &str) -> Result<Vec<Value>, String> {
    let body: Value = get(&format!("{}/api/v1/actions?job={}", job.url, job.name))
        .await
        .map_err(|e| e.to_string())?;
    let actions = body["actions"].as_array().ok_or("no actions list")?;
    Ok(actions
        .iter()
        .filter(|a| a["kind"] == kind)
        .cloned()
        .collect())
}

/// Starts a job whose rank 2 hangs 20 s in (`ddp_train.py --hang MODE`),
/// waits for the slow rank's stop, and checks
/// that a critical `hang` names rank 2 within [`HANG_WITHIN`] with
/// `phrases` in its message, and that ranks 0, 1 and 3 saved their
/// threads' stacks into the job's dump directory.
async fn hang_is_named(test: &str, mode: &str, phrases: &[&str]) {
    let Some(python) = torch_python(test) else {
        return;
    };
    let _alone = ONE_JOB_AT_A_TIME.lock().await;
    let began = Instant::now();
    let args = hang_args(mode);
    let mut job = Job::start(&format!("torch-ddp-hang-{mode}"), &python, &args).await;
    let start = job.slowdown_start().await;
    let deadline = start + HANG_WITHIN.as_secs_f64();
    let alert = job
        .wait_for_alert("hang", deadline, "a hang naming rank 2", |a| {
            a["rank"] == SLOW_RANK && a["severity"] == "critical"
        })
        .await;
    let message = alert["message"].as_str().unwrap_or("").to_owned();
    for phrase in phrases {
        assert!(
            message.contains(phrase),
            "{phrase:?} in the hang: {message}"
        );
    }
    let after = alert["t"].as_f64().unwrap_or(f64::NAN) - start;
    let what = "evidence from ranks 0, 1 and 3";
    let dumps = wait_for_every(POLL, until(deadline + 30.0), what, || async {
        let done: Vec<Value> = actions_of(&job, "dump_evidence")
            .await?
            .into_iter()
            .filter(|a| a["state"] == "done")
            .collect();
        let ranks: Vec<u64> = done.iter().filter_map(|a| a["rank"].as_u64()).collect();
        if [0, 1, 3].iter().all(|r| ranks.contains(r)) {
            Ok(done)
        } else {
            Err(format!("dump_evidence actions done for ranks {ranks:?}"))
        }
    })
    .await;
    for d in &dumps {
        check_stacks(d, &job.dir.join(DUMP_DIR));
    }
    // A stopped rank ignores SIGTERM and would outlive torchrun.
    kill_processes_mentioning(&job.dir);
    job.stop().await;
    report(&format!(
        "{test}: hang {after:.1} s after rank 2 stopped: {message}\n{test}: {:.0} s",
        began.elapsed().as_secs_f64()
    ));
}

/// `ddp_train.py`'s arguments for a 4-rank DDP job whose rank 2 hangs
/// ([`SLOW_AFTER_S`] in) the way `--hang MODE` says.
fn hang_args(mode: &str) -> Vec<String> {
    let slow_after = SLOW_AFTER_S.to_string();
    [
        "--duration-s",
        "600",
        "--instrument",
        "none",
        "--slow-rank",
        "2",
        "--slow-after-s",
        &slow_after,
        "--hang",
        mode,
    ]
    .map(String::from)
    .to_vec()
}

/// SIGKILLs every process whose command line mentions `dir` (the job's
/// workers name files in it), stopped ones included.
fn kill_processes_mentioning(dir: &Path) {
    let needle = dir.display().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.filter_map(Result::ok) {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&needle) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A done `dump_evidence` action's stacks file (its `response` names the
/// files): in `dir`, with the main thread's stack.
fn check_stacks(action: &Value, dir: &Path) {
    let detail = action["response"].as_str().unwrap_or("");
    let stacks = detail
        .split(", ")
        .find(|p| p.ends_with(".stacks.txt"))
        .unwrap_or_else(|| panic!("rank {}: no stacks file in {detail:?}", action["rank"]));
    let text = std::fs::read_to_string(stacks).unwrap_or_else(|e| panic!("{stacks}: {e}"));
    assert!(
        text.contains("MainThread"),
        "{stacks} holds every thread's stack: {text:.400}"
    );
    assert!(
        Path::new(stacks).starts_with(dir),
        "{stacks} is in {}",
        dir.display()
    );
}

/// Starts `name` with `args` (a pause that is no hang), lets it end by
/// itself, and checks that it paused and raised no `hang` and asked for no
/// evidence.
async fn pause_is_not_a_hang(test: &str, name: &str, args: &[&str]) {
    let Some(python) = torch_python(test) else {
        return;
    };
    let _alone = ONE_JOB_AT_A_TIME.lock().await;
    let began = Instant::now();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let mut job = Job::start(name, &python, &args).await;
    let status = job
        .wait_end(START_WITHIN + Duration::from_secs(PAUSED_RUN_S + 60))
        .await;
    assert!(status.success(), "the job ends by itself: {status}");
    assert!(job.dir.join(SLOW_START_FILE).exists(), "the job paused");
    let hangs = job.alerts_of("hang").await.unwrap();
    let dumps = actions_of(&job, "dump_evidence").await.unwrap();
    report(&format!("{test}: {:.0} s", began.elapsed().as_secs_f64()));
    assert!(
        hangs.is_empty(),
        "a pause is no hang: {}",
        alert_lines(&hangs)
    );
    assert!(dumps.is_empty(), "no evidence asked for: {dumps:?}");
}

/// Rank 2 of a 4-rank DDP job sleeps for good before its backward, 20 s
/// in; its peers wait in their backward's all-reduce. With no gpumon call
/// in the script, a critical `hang` names rank 2 as the one that has not
/// entered the collective within 90 s, and every live rank that waits
/// saves its flight recorder and its threads' stacks.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_rank_asleep_before_its_backward_is_named_in_a_hang_within_90_s() {
    hang_is_named(
        "with_no_gpumon_call_a_rank_asleep_before_its_backward_is_named_in_a_hang_within_90_s",
        "sleep",
        &[
            "rank 2 has not entered it",
            "ranks 0, 1, 3 wait in all_reduce",
        ],
    )
    .await;
}

/// Every rank all-reduces its loss in a process group of its own after
/// each step; from 20 s in rank 2 skips it and goes on to the next step,
/// where it waits in the gradient all-reduce of the default group while its
/// peers wait in the loss's: a real deadlock, named within 90 s.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_rank_that_skips_an_all_reduce_is_named_in_a_hang_within_90_s() {
    hang_is_named(
        "with_no_gpumon_call_a_rank_that_skips_an_all_reduce_is_named_in_a_hang_within_90_s",
        "skip",
        &[
            "rank 2 waits in all_reduce",
            "of process group 0",
            "ranks 0, 1, 3 wait in all_reduce",
        ],
    )
    .await;
}

/// Rank 2 stops its whole process (SIGSTOP) before its backward, 20 s in:
/// its hook stops with it, and its peers wait in their all-reduce. Named
/// within 90 s as the rank that reports nothing. (A SIGKILLed peer makes
/// gloo fail the others' collectives at once, "Connection reset by peer",
/// so on CPU a dead rank ends the job; under NCCL the others wait, and the
/// engine names the rank whose process NVML saw exit: `hang/tests.rs`.)
#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_stopped_rank_is_named_in_a_hang_within_90_s() {
    hang_is_named(
        "with_no_gpumon_call_a_stopped_rank_is_named_in_a_hang_within_90_s",
        "stop",
        &[
            "rank 2 has reported nothing",
            "ranks 0, 1, 3 wait in all_reduce",
        ],
    )
    .await;
}

/// Every rank of a DDP job sleeps 90 s before the same step (an unmarked
/// checkpoint every rank writes): no rank waits in a collective, so the
/// job is paused, not hung.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_wide_unmarked_90_s_pause_is_not_a_hang() {
    pause_is_not_a_hang(
        "a_job_wide_unmarked_90_s_pause_is_not_a_hang",
        "torch-ddp-pause",
        &[
            "--duration-s",
            &PAUSED_RUN_S.to_string(),
            "--instrument",
            "none",
            "--pause-at-step",
            "50",
            "--pause-s",
            "90",
        ],
    )
    .await;
}

/// Rank 0 marks an evaluation (`gpumon.mark("eval")`, the script's one
/// gpumon call) and evaluates for 90 s while its peers wait for it in their
/// next backward: a planned pause, not a hang.
#[tokio::test(flavor = "multi_thread")]
async fn a_90_s_evaluation_of_one_rank_marked_by_the_script_is_not_a_hang() {
    pause_is_not_a_hang(
        "a_90_s_evaluation_of_one_rank_marked_by_the_script_is_not_a_hang",
        "torch-ddp-eval",
        &[
            "--duration-s",
            &PAUSED_RUN_S.to_string(),
            "--instrument",
            "none",
            "--pause-at-step",
            "50",
            "--pause-s",
            "90",
            "--pause-rank",
            "0",
            "--pause-marker",
            "eval",
        ],
    )
    .await;
}

/// The sleeping rank of the first test under `gpumon profile` (the engine
/// in-process, no agent or coordinator): the report, written when the
/// profile is interrupted, holds the hang naming rank 2 and the evidence
/// dumps of ranks 0, 1 and 3 with their files.
#[tokio::test(flavor = "multi_thread")]
async fn under_gpumon_profile_a_rank_asleep_is_named_in_a_hang_with_its_peers_evidence() {
    let test = "under_gpumon_profile_a_rank_asleep_is_named_in_a_hang_with_its_peers_evidence";
    let Some(python) = torch_python(test) else {
        return;
    };
    let _alone = ONE_JOB_AT_A_TIME.lock().await;
    let began = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let dumps = dir.join(DUMP_DIR);
    let mut cmd = gpumon();
    cmd.current_dir(dir).args([
        "profile",
        "--source",
        "none",
        "--interval-ms",
        "100",
        "--json",
        "report.json",
        "--",
    ]);
    let args = hang_args("sleep");
    torchrun_ddp_train(&mut cmd, &python, dir, "profile-hang", &args);
    cmd.kill_on_drop(true);
    let mut child = cmd.spawn().expect("gpumon profile starts");
    let start = wait_for_every(
        POLL,
        START_WITHIN + Duration::from_secs(SLOW_AFTER_S),
        "the rank to stop",
        || async {
            let text =
                std::fs::read_to_string(dir.join(SLOW_START_FILE)).map_err(|e| e.to_string())?;
            text.trim()
                .parse::<f64>()
                .map_err(|e| format!("{text:?}: {e}"))
        },
    )
    .await;
    let stacks_saved = || -> usize {
        std::fs::read_dir(&dumps).map_or(0, |d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".stacks.txt"))
                .count()
        })
    };
    wait_for_every(
        POLL,
        until(start + HANG_WITHIN.as_secs_f64() + 30.0),
        "3 ranks' stacks saved",
        || async {
            match stacks_saved() {
                n if n >= 3 => Ok(()),
                n => Err(format!("{n} stacks files in {}", dumps.display())),
            }
        },
    )
    .await;
    let pid = child.id().unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    let ended = tokio::time::timeout(Duration::from_secs(60), child.wait()).await;
    if ended.is_err() {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status();
        panic!("gpumon profile did not end within 60 s of SIGINT");
    }
    let text = std::fs::read_to_string(dir.join("report.json")).expect("the report is written");
    let r: Value = serde_json::from_str(&text).expect("the report is JSON");
    let hang = r["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "hang")
        .unwrap_or_else(|| panic!("no hang in the report: {}", r["alerts"]));
    assert_eq!(hang["rank"], SLOW_RANK, "{hang}");
    let after = hang["t"].as_f64().unwrap_or(f64::NAN) - start;
    assert!(
        after <= HANG_WITHIN.as_secs_f64(),
        "named {after:.0} s after the stop"
    );
    // Issued to every waiting rank; those whose acks were in before the
    // interrupt name their files (the files themselves are checked above).
    let dumps_issued: Vec<&Value> = r["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "dump_evidence")
        .collect();
    let ranks: Vec<u64> = dumps_issued
        .iter()
        .filter_map(|a| a["rank"].as_u64())
        .collect();
    assert!(
        [0, 1, 3].iter().all(|r| ranks.contains(r)),
        "dumps issued to ranks {ranks:?}"
    );
    for d in dumps_issued.iter().filter(|a| a["state"] == "done") {
        check_stacks(d, &dumps);
    }
    report(&format!(
        "{test}: hang {after:.1} s after rank 2 stopped: {}\n{test}: {:.0} s",
        hang["message"].as_str().unwrap_or("?"),
        began.elapsed().as_secs_f64()
    ));
}
