//! Running one point: `gpumon profile --json FILE --quiet ... -- CMD` as a
//! child of this same binary, in a process group of its own, its output
//! (the command's and gpumon's) into the point's log, within its time.
//!
//! Past `--point-timeout`, or when the sweep gets Ctrl-C or SIGTERM, the
//! profile process gets SIGINT (SIGTERM for SIGTERM): it stops the command
//! gently and still writes its report (see `crate::profile::signals`). If it
//! has not ended [`KILL_AFTER`] later, or on a second Ctrl-C, the whole
//! group is killed. When the point ends, whatever it left running in its
//! group is killed too, so that no stray process holds GPU memory into the
//! next point.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::measures::{Ended, Stopped};
use super::plan::PointCommand;
use crate::profile::signals::{self, Signals, Stop};

/// Time the profile process gets after SIGINT before its group is killed:
/// its own wait for the command, then SIGINT, SIGTERM and SIGKILL a grace
/// apart, and a margin to write its report.
pub const KILL_AFTER: Duration =
    Duration::from_secs(signals::OWN_CTRL_C.as_secs() + 2 * signals::GRACE.as_secs() + 10);
/// A point's log keeps at most this much output; the rest is counted.
pub const MAX_LOG_BYTES: u64 = 64 << 20;
/// Time the output pipes get to close after the point's group is gone.
const DRAIN: Duration = Duration::from_secs(5);

/// What to run for one point.
#[derive(Debug, Clone)]
pub struct Launch {
    /// This binary.
    pub exe: PathBuf,
    /// Its arguments before `--` (global flags, `profile` and its flags).
    pub profile_args: Vec<OsString>,
    /// The point's command and variables.
    pub command: PointCommand,
    /// Where its output goes.
    pub log: PathBuf,
    /// `--point-timeout`, seconds.
    pub timeout_s: u64,
}

/// The point's log file, bounded.
struct Log {
    file: std::fs::File,
    written: u64,
    dropped: u64,
}

impl Log {
    fn write(&mut self, bytes: &[u8]) {
        let room = MAX_LOG_BYTES.saturating_sub(self.written);
        let take = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if self.file.write_all(&bytes[..take]).is_ok() {
            self.written += take as u64;
        }
        self.dropped += (bytes.len() - take) as u64;
    }
}

/// Copies `from` into the log until it closes.
async fn pump(mut from: impl AsyncRead + Unpin, log: Arc<Mutex<Log>>) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if let Ok(mut log) = log.lock() {
            log.write(&buf[..n]);
        }
    }
}

/// SIGKILL to every process of the group `pgid`, through `kill(1)`.
fn kill_group(pgid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Runs the point to its end. An error is the sweep's own (it cannot start
/// its own binary, or write the log), not the point's.
pub async fn run(launch: &Launch, stops: &mut Signals) -> anyhow::Result<Ended> {
    let file = std::fs::File::create(&launch.log)
        .with_context(|| format!("cannot create {}", launch.log.display()))?;
    let log = Arc::new(Mutex::new(Log {
        file,
        written: 0,
        dropped: 0,
    }));
    let mut cmd = tokio::process::Command::new(&launch.exe);
    cmd.args(&launch.profile_args)
        .arg("--")
        .args(&launch.command.argv)
        .envs(launch.command.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", launch.exe.display()))?;
    let pid = child.id().unwrap_or(0);
    let pumps = [
        child
            .stdout
            .take()
            .map(|o| tokio::spawn(pump(o, log.clone()))),
        child
            .stderr
            .take()
            .map(|e| tokio::spawn(pump(e, log.clone()))),
    ];

    let timeout = tokio::time::Instant::now() + Duration::from_secs(launch.timeout_s);
    let mut stopped: Option<Stopped> = None;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            _ = tokio::time::sleep_until(timeout), if stopped.is_none() => {
                stopped = Some(Stopped::Timeout(launch.timeout_s));
                crate::run::signal(pid, "INT");
                kill_at = Some(tokio::time::Instant::now() + KILL_AFTER);
            }
            stop = stops.next() => {
                if matches!(stopped, Some(Stopped::Interrupted)) {
                    // Asked twice: no more waiting.
                    kill_group(pid);
                } else {
                    stopped = Some(Stopped::Interrupted);
                    let name = match stop {
                        Stop::Interrupt => "INT",
                        Stop::Terminate => "TERM",
                    };
                    crate::run::signal(pid, name);
                    kill_at.get_or_insert(tokio::time::Instant::now() + KILL_AFTER);
                }
            }
            _ = sleep_until(kill_at), if kill_at.is_some() => {
                kill_group(pid);
                kill_at = None;
            }
        }
    };
    let wall_s = (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    // The group outlives its leader while any member lives; the leader was
    // just reaped, so its id still names this group and no other.
    kill_group(pid);
    for pump in pumps.into_iter().flatten() {
        let abort = pump.abort_handle();
        if tokio::time::timeout(DRAIN, pump).await.is_err() {
            abort.abort();
        }
    }
    if let Ok(mut log) = log.lock() {
        if log.dropped > 0 {
            let note = format!(
                "\n[gpumon sweep: {} more bytes of output left out]\n",
                log.dropped
            );
            let _ = log.file.write_all(note.as_bytes());
        }
    }
    Ok(Ended {
        code: status.code(),
        signal: std::os::unix::process::ExitStatusExt::signal(&status),
        stopped,
        wall_s,
    })
}

/// Why a point failed, in a few words, from the end of its log: with
/// `gpumon_first` (the command may never have started), gpumon's own last
/// message (`gpumon: cannot run ...`), else the command's; without it, the
/// command's last line (a Python error's last line, say) only, gpumon's
/// own lines then saying no more than the exit status.
pub fn last_words(log: &Path, gpumon_first: bool) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 8 * 1024;
    let mut f = std::fs::File::open(log).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let (mut own, mut command) = (None, None);
    for l in lines {
        if l.starts_with("gpumon: ") {
            if !l.starts_with("gpumon: report in ") {
                own = Some(l);
            }
        } else {
            command = Some(l);
        }
    }
    let words = if gpumon_first {
        own.or(command)
    } else {
        command
    };
    words.map(|l| crate::text::truncate(l, 300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_words_are_gpumons_or_the_commands_as_asked() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("point-001.log");
        std::fs::write(
            &log,
            "epoch 1\ngpumon: cannot run \"trian.py\": No such file\n",
        )
        .unwrap();
        assert_eq!(
            last_words(&log, true).as_deref(),
            Some("gpumon: cannot run \"trian.py\": No such file")
        );
        std::fs::write(
            &log,
            "Traceback\nValueError: bad\n\ngpumon: report in r.json (0 alerts)\ngpumon: python3 exited with exit status: 1\n",
        )
        .unwrap();
        assert_eq!(last_words(&log, false).as_deref(), Some("ValueError: bad"));
        std::fs::write(&log, "gpumon: sh exited with exit status: 1\n").unwrap();
        assert_eq!(last_words(&log, false), None);
        assert_eq!(last_words(&dir.path().join("none.log"), true), None);
    }
}
