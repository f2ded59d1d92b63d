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

/// Where the node's agent (a system service or a DaemonSet, as root)
/// serves the hook, by convention (deploy/systemd, deploy/k8s).
pub const NODE_AGENT_SOCKET: &str = "/run/gpumon/hook.sock";

/// The default hook address: the node's agent at [`NODE_AGENT_SOCKET`]
/// when it answers, else `unix:RUNTIME_DIR/hook.sock`.
pub async fn default_addr() -> String {
    let node = format!("unix:{NODE_AGENT_SOCKET}");
    if let Ok(addr) = node.parse::<HookAddr>() {
        if answers(&addr).await {
            return node;
        }
    }
    format!("unix:{}", runtime_dir().join("hook.sock").display())
}

/// The agent id of an agent this command starts: the host's name and the
/// user's id, so it never shares the node agent's id (whose data would
/// merge with it) and stays the same across runs of one user.
pub fn run_agent_id() -> String {
    let uid = std::fs::metadata("/proc/self").map_or(0, |m| m.uid());
    format!("{}-run-{uid}", gpumon_runtime::host::hostname())
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
    gpumon_agent::private_dir::ensure_private_dir(&dir).map_err(anyhow::Error::msg)?;
    let log = dir.join("agent.log");
    let log_file = gpumon_agent::private_dir::create_file(&log)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", log.display()))?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.arg("agent")
        .arg("--hook-listen")
        .arg(addr.to_string())
        .arg("--agent-id")
        .arg(run_agent_id())
        // The node's agent may serve /metrics on the default port already.
        .arg("--metrics-listen")
        .arg("none");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_agent_never_takes_the_node_agents_id() {
        let id = run_agent_id();
        assert_ne!(
            id,
            gpumon_runtime::host::hostname(),
            "the node agent's default id"
        );
        assert!(
            id.starts_with(&gpumon_runtime::host::hostname()) && id.contains("-run-"),
            "{id}"
        );
    }
}
