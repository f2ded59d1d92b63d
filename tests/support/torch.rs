//! Real torch jobs for the end-to-end tests: `torchrun --nproc-per-node 4`
//! running `tests/torch/ddp_train.py` on CPU (gloo), either through
//! `gpumon run` with a single coordinator and an agent serving the hook on
//! loopback that samples no GPU itself (`--source none`), or under
//! `gpumon profile` (the engine in-process). The engine runs its default
//! configuration: the point is that the defaults work on a real job.
//!
//! The jobs need a Python with torch in `GPUMON_TEST_PYTHON`;
//! `scripts/test` installs one in a cached venv and sets it. Without it the
//! tests fail and say so; `GPUMON_SKIP_TORCH_TESTS=1` skips them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::process::Child;
use tokio::sync::Mutex;

use super::{get, gpumon, leading_coordinator, wait_for, wait_for_every, Proc};

/// Ranks per job.
pub const RANKS: u32 = 4;
/// The rank made slow or hung in the DDP jobs.
pub const SLOW_RANK: u32 = 2;
/// Training time before the slow rank slows down, seconds.
pub const SLOW_AFTER_S: u64 = 20;
/// Longest time from the slowdown to its alert.
pub const ALERT_WITHIN: Duration = Duration::from_secs(30);
/// Longest time from `gpumon run` to the first training step (five Pythons
/// importing torch on two CPUs).
pub const START_WITHIN: Duration = Duration::from_secs(120);
/// Time between two reads of the API: every read takes CPU from the ranks.
pub const POLL: Duration = Duration::from_secs(1);
/// Where the script writes when the slowdown started, in the job's directory.
pub const SLOW_START_FILE: &str = "slow-start";
/// Where the output of `gpumon run`, torchrun and the ranks goes, in the
/// job's directory; its end is shown when a test fails.
pub const RUN_LOG: &str = "run.log";
/// Where the hooks save hang evidence, inside the job's directory.
pub const DUMP_DIR: &str = "dumps";
/// Steps after the slowdown in every rank's statistics before the job stops.
pub const STEPS_AFTER: u64 = 100;
/// The sections the script times.
pub const SECTIONS: [&str; 3] = ["data", "forward", "backward"];

const HOW_TO_GET_TORCH: &str = "run ./scripts/test, which installs torch in a cached venv and \
     sets GPUMON_TEST_PYTHON, or set GPUMON_TEST_PYTHON to a python that can import torch \
     (GPUMON_SKIP_TORCH_TESTS=1 skips these tests)";

/// Held by every test while its job runs: four ranks on a 2-CPU machine
/// already compete for the CPUs, and two jobs at once would make every
/// rank's times noisy.
pub static ONE_JOB_AT_A_TIME: Mutex<()> = Mutex::const_new(());

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_secs_f64()
}

/// Time left until `t`, Unix seconds (zero when past).
pub fn until(t: f64) -> Duration {
    Duration::from_secs_f64((t - unix_now()).max(0.0))
}

/// Written past libtest's capture, so that a passing run's log shows it too.
pub fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The Python to run the job with, or `None` (said on stderr) when the
/// tests are skipped. Panics, saying what to do, when there is none.
pub fn torch_python(test: &str) -> Option<PathBuf> {
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
pub struct RankTimes {
    pub step: u64,
    /// Smoothed ms per section.
    pub sections: BTreeMap<String, f64>,
}

impl RankTimes {
    pub fn ms(&self, section: &str) -> f64 {
        self.sections.get(section).copied().unwrap_or(f64::NAN)
    }
}

pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

pub fn show(times: &BTreeMap<u32, RankTimes>) -> String {
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

pub fn alert_lines(alerts: &[Value]) -> String {
    let lines: Vec<String> = alerts
        .iter()
        .map(|a| format!("t={} {}", a["t"], a["message"].as_str().unwrap_or("?")))
        .collect();
    format!("[{}]", lines.join(" | "))
}

/// A coordinator, an agent serving the hook, and `gpumon run -- torchrun
/// ... ddp_train.py` in its own process group; everything is killed on drop.
pub struct Job {
    pub name: String,
    pub url: String,
    pub dir: PathBuf,
    run: Child,
    _coordinator: Proc,
    _agent: Proc,
    _tmp: tempfile::TempDir,
}

impl Job {
    /// Starts the job `name` with the training script's `args`.
    pub async fn start(name: &str, python: &Path, args: &[String]) -> Self {
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
    pub async fn times(&self) -> Result<BTreeMap<u32, RankTimes>, String> {
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
    pub async fn straggler_alerts(&self) -> Result<Vec<Value>, String> {
        self.alerts_of("straggler").await
    }

    /// The first of the job's alerts of `kind` that `wanted` accepts, by
    /// `deadline` (Unix s); fails showing the alerts and section times.
    pub async fn wait_for_alert(
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
    pub async fn alerts_of(&self, kind: &str) -> Result<Vec<Value>, String> {
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
    pub async fn slowdown_start(&self) -> f64 {
        slowdown_start(&self.dir).await
    }

    /// The job's end by itself, within `within`.
    pub async fn wait_end(&mut self, within: Duration) -> ExitStatus {
        tokio::time::timeout(within, self.run.wait())
            .await
            .unwrap_or_else(|_| panic!("{} still running after {within:?}", self.name))
            .expect("gpumon run can be waited for")
    }

    /// SIGTERM to `gpumon run` and torchrun (which stops its workers), then
    /// SIGKILL after 30 s.
    pub async fn stop(&mut self) {
        self.signal("TERM");
        if tokio::time::timeout(Duration::from_secs(30), self.run.wait())
            .await
            .is_err()
        {
            self.signal("KILL");
            let _ = self.run.wait().await;
        }
    }

    pub fn signal(&self, name: &str) {
        signal_group(self.run.id(), name);
    }

    /// What rank `rank`'s script last wrote about its section times.
    pub fn rank_stats(&self, rank: u32) -> Result<Value, String> {
        let path = self.dir.join(format!("rank-{rank}.json"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Every rank's script has timed [`STEPS_AFTER`] steps after the slowdown.
    pub async fn steps_after_slowdown(&self) {
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
    pub fn rank_medians(&self) -> String {
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
            show_log_tail(&self.name, &self.dir);
        }
    }
}

/// When the slow rank of the job in `dir` slowed down (or stopped), Unix
/// seconds, as the script wrote it.
pub async fn slowdown_start(dir: &Path) -> f64 {
    let within = START_WITHIN + Duration::from_secs(SLOW_AFTER_S);
    wait_for_every(POLL, within, "the slowdown to start", || async {
        let text = std::fs::read_to_string(dir.join(SLOW_START_FILE)).map_err(|e| e.to_string())?;
        text.trim()
            .parse::<f64>()
            .map_err(|e| format!("{text:?}: {e}"))
    })
    .await
}

/// Writes the end of the job's [`RUN_LOG`] to stderr (a test failed).
fn show_log_tail(name: &str, dir: &Path) {
    let log = std::fs::read_to_string(dir.join(RUN_LOG)).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(40)..].join("\n");
    report(&format!("{name}: the end of {RUN_LOG}:\n{tail}"));
}

/// Sends SIGNAL `name` to the process group led by `pid`.
fn signal_group(pid: Option<u32>, name: &str) {
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .args([&format!("-{name}"), "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
    }
}

/// Where `gpumon profile` writes its report, in the job's directory.
pub const PROFILE_REPORT: &str = "report.json";

/// `gpumon profile -- torchrun ... ddp_train.py` in a directory of its own:
/// the engine in-process, no agent or coordinator. The report is written
/// when the job ends or the profile is interrupted; everything is killed
/// on drop.
pub struct ProfileRun {
    pub name: String,
    pub dir: PathBuf,
    child: Child,
    _tmp: tempfile::TempDir,
}

impl ProfileRun {
    /// Starts the job `name` with the training script's `args`.
    pub fn start(name: &str, python: &Path, args: &[String]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        let mut cmd = gpumon();
        cmd.current_dir(&dir).args([
            "profile",
            "--source",
            "none",
            "--interval-ms",
            "100",
            "--json",
            PROFILE_REPORT,
            "--",
        ]);
        torchrun_ddp_train(&mut cmd, python, &dir, name, args);
        let child = cmd.spawn().expect("gpumon profile starts");
        Self {
            name: name.to_owned(),
            dir,
            child,
            _tmp: tmp,
        }
    }

    /// When the slow rank slowed down (or stopped), Unix seconds.
    pub async fn slowdown_start(&self) -> f64 {
        slowdown_start(&self.dir).await
    }

    /// Interrupts the profile (Ctrl-C) and returns its report.
    pub async fn interrupt(&mut self) -> Value {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status();
        }
        let within = Duration::from_secs(60);
        if tokio::time::timeout(within, self.child.wait())
            .await
            .is_err()
        {
            panic!(
                "{}: gpumon profile did not end within {within:?} of SIGINT",
                self.name
            );
        }
        self.read_report()
    }

    /// The job's end by itself, within `within`, and the report.
    pub async fn wait_end(&mut self, within: Duration) -> (ExitStatus, Value) {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} still running after {within:?}", self.name))
            .expect("gpumon profile can be waited for");
        (status, self.read_report())
    }

    fn read_report(&self) -> Value {
        let path = self.dir.join(PROFILE_REPORT);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: the report {}: {e}", self.name, path.display()));
        serde_json::from_str(&text).expect("the report is JSON")
    }
}

impl Drop for ProfileRun {
    fn drop(&mut self) {
        signal_group(self.child.id(), "KILL");
        if std::thread::panicking() {
            show_log_tail(&self.name, &self.dir);
        }
    }
}

/// The report's entries in `list` (`alerts`, `actions`) of `kind`.
pub fn report_entries(report: &Value, list: &str, kind: &str) -> Vec<Value> {
    report[list]
        .as_array()
        .map(|a| a.iter().filter(|e| e["kind"] == kind).cloned().collect())
        .unwrap_or_default()
}

/// SIGKILLs every process whose command line mentions `dir` (the job's
/// workers name files in it), stopped ones included: a stopped rank
/// ignores SIGTERM and would outlive torchrun.
pub fn kill_processes_mentioning(dir: &Path) {
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

/// Appends `torchrun ... ddp_train.py ARGS` (4 ranks on this host, rendezvous
/// `id`) to `cmd` (a `gpumon` command ending in `--`), writing the slowdown's
/// start and the run's log into `dir` and the hooks' evidence into its
/// [`DUMP_DIR`], in a process group of its own so that a kill reaches
/// torchrun too (the workers, in sessions of their own, exit when it goes).
pub fn torchrun_ddp_train(
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
