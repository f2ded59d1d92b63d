//! Helpers for end-to-end tests: real `gpumon` processes on loopback that
//! are killed when their guard drops, and bounded waiting.

#![allow(dead_code)]

pub mod browser;
pub use gpumon_testkit::chromium;
pub mod cluster;
pub mod devtools;
pub mod fleet;
pub mod netns;
pub mod pusher;
pub mod tls;
pub mod torch;

use std::process::Stdio;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

/// The `gpumon` binary under test.
pub fn gpumon() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpumon"));
    cmd.env("GPUMON_LOG", "warn").kill_on_drop(true);
    cmd
}

/// Runs `cmd` to its end (within `within`); its exit code and stderr.
pub async fn finish(mut cmd: Command, within: Duration) -> (Option<i32>, String) {
    let out = tokio::time::timeout(within, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{cmd:?} did not end within {within:?}"))
        .expect("the command runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `target/test-artifacts`, beside the target's `tmp` folder: screenshots
/// and such, kept for people to look at.
pub fn artifacts_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target dir")
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `gpumon profile` (and `sweep`) flags for tests on the fake GPU: its
/// memory through the hook, no NVML, sampled every 100 ms in 500 ms windows.
pub const HOOK_SAMPLING: [&str; 6] = [
    "--source",
    "none",
    "--interval-ms",
    "100",
    "--window-ms",
    "500",
];

/// `cmd` as rank 0 of a torchrun job of one named `job` (torchrun's
/// variables set by hand), its caches and sockets under `dir`, without the
/// caller's PYTHONPATH.
pub fn rank0_alone<'a>(cmd: &'a mut Command, job: &str, dir: &std::path::Path) -> &'a mut Command {
    cmd.env("RANK", "0")
        .env("LOCAL_RANK", "0")
        .env("WORLD_SIZE", "1")
        .env("TORCHELASTIC_RUN_ID", job)
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29500")
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("XDG_RUNTIME_DIR", dir.join("run"))
        .env_remove("PYTHONPATH")
}

/// A child process with its stdout lines; killed on drop.
pub struct Proc {
    pub child: Child,
    pub lines: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl Proc {
    /// Starts `cmd` with stdout piped and stderr inherited (visible on failure).
    #[track_caller]
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("gpumon starts");
        let stdout = child.stdout.take().expect("piped stdout");
        Self {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    /// The next stdout line, within `within`.
    pub async fn next_line(&mut self, within: Duration) -> String {
        tokio::time::timeout(within, self.lines.next_line())
            .await
            .expect("a stdout line in time")
            .expect("stdout readable")
            .expect("process still running")
    }

    /// The first `http://…` URL in the next stdout line.
    pub async fn url_line(&mut self) -> String {
        let line = self.next_line(Duration::from_secs(20)).await;
        let start = line
            .find("http://")
            .unwrap_or_else(|| panic!("no URL in {line:?}"));
        line[start..].split_whitespace().next().unwrap().to_owned()
    }

    /// SIGINT (what Ctrl-C sends), then the exit status within `within`.
    pub async fn interrupt(mut self, within: Duration) -> std::process::ExitStatus {
        let pid = self.child.id().expect("still running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        tokio::time::timeout(within, self.child.wait())
            .await
            .expect("exits after SIGINT")
            .unwrap()
    }

    /// SIGKILL, and wait for the exit.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

/// GET a JSON document.
pub async fn get<T: DeserializeOwned>(url: &str) -> reqwest::Result<T> {
    gpumon_net::plain_client_builder()
        .build()
        .unwrap()
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await
}

/// Polls `probe` every 100 ms until it gives `Some`, panicking with `what`
/// and the last value seen after `within`.
pub async fn wait_for<T, F, Fut>(within: Duration, what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    wait_for_every(Duration::from_millis(100), within, what, probe).await
}

/// [`wait_for`], polling every `every` (for probes that cost the machine
/// under test something).
pub async fn wait_for_every<T, F, Fut>(
    every: Duration,
    within: Duration,
    what: &str,
    mut probe: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + within;
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

/// `gpumon coordinator` as a single replica (id 1) on a free loopback port
/// over `data_dir`; add flags before spawning.
pub fn coordinator_cmd(data_dir: &std::path::Path) -> Command {
    let mut cmd = gpumon();
    cmd.args([
        "coordinator",
        "--id",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
    ])
    .arg(data_dir);
    cmd
}

/// Starts a single-replica `gpumon coordinator` on a free loopback port over
/// `data_dir` and waits until it leads; returns it and its URL.
pub async fn leading_coordinator(data_dir: &std::path::Path) -> (Proc, String) {
    let mut proc = Proc::spawn(coordinator_cmd(data_dir));
    let url = proc.url_line().await;
    wait_for(Duration::from_secs(20), "a leader", || async {
        let s: gpumon_proto::api::RaftStatus = get(&format!("{url}/api/v1/raft"))
            .await
            .map_err(|e| e.to_string())?;
        match s.leader {
            Some(_) => Ok(()),
            None => Err(format!("{s:?}")),
        }
    })
    .await;
    (proc, url)
}

/// `VmRSS` and `VmHWM` of a process, bytes.
pub fn resident(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}
