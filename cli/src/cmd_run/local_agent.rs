//! The node's agent, as `gpumon run` sees it: where its hook endpoint is by
//! default, whether one answers there, and starting one when none does.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use gpumon_agent::HookAddr;

/// Time allowed for a started agent to open its hook endpoint.
const READY_WITHIN: Duration = Duration::from_secs(15);

/// The per-user runtime directory: `$XDG_RUNTIME_DIR/gpumon`, else
/// `/tmp/gpumon-UID` (the same rule the Python hook uses).
pub fn runtime_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("gpumon");
    }
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    PathBuf::from(format!("/tmp/gpumon-{uid}"))
}

/// The default hook address: `unix:RUNTIME_DIR/hook.sock`.
pub fn default_addr() -> String {
    format!("unix:{}", runtime_dir().join("hook.sock").display())
}

/// True when something accepts connections at `addr`.
pub async fn answers(addr: &HookAddr) -> bool {
    if let Some(path) = addr.unix_path() {
        return tokio::net::UnixStream::connect(path).await.is_ok();
    }
    match addr.tcp_addr() {
        Some(sa) => matches!(
            tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(sa)).await,
            Ok(Ok(_))
        ),
        None => false,
    }
}

/// An agent this command started; stopped (SIGTERM, so it flushes) when done.
#[derive(Debug)]
pub struct StartedAgent {
    child: tokio::process::Child,
    pub log: PathBuf,
}

/// Starts `gpumon agent --hook-listen ADDR` with its log in the runtime
/// directory, and waits until its endpoint answers.
pub async fn start(
    addr: &HookAddr,
    coordinators: Option<&str>,
    source: Option<&str>,
) -> anyhow::Result<StartedAgent> {
    let exe = std::env::current_exe()?;
    let dir = runtime_dir();
    std::fs::create_dir_all(&dir)?;
    let log = dir.join("agent.log");
    let log_file = std::fs::File::create(&log)?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("agent").arg("--hook-listen").arg(addr.to_string());
    if let Some(c) = coordinators {
        cmd.arg("--coordinators").arg(c);
    }
    if let Some(s) = source {
        cmd.arg("--source").arg(s);
    }
    cmd.stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let deadline = tokio::time::Instant::now() + READY_WITHIN;
    loop {
        if answers(addr).await {
            return Ok(StartedAgent { child, log });
        }
        if let Some(status) = child.try_wait()? {
            let tail = tail(&log);
            anyhow::bail!(
                "the agent exited ({status}) before serving {addr}; its log ({}):\n{tail}",
                log.display()
            );
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the agent did not serve {addr} within {READY_WITHIN:?}; see {}",
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

impl StartedAgent {
    /// Asks the agent to stop (SIGTERM: it flushes its last batch), waiting a
    /// few seconds before killing it.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            super::signal(pid, "TERM");
        }
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}
