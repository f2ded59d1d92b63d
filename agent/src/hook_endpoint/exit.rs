//! Whether the process behind an ended hook session has exited.
//!
//! On a GPU, NVML tells the engine when a rank's process leaves its device.
//! A job on CPUs has no such witness, yet the hang detector must tell a
//! rank whose process is gone from one that is stopped or hung. When the
//! connection of a session the kernel vouched for (a Unix socket peer, or
//! a loopback TCP peer whose process was found) closes, the agent looks at `/proc` for a while: the socket closes as the
//! process starts to exit, a moment before it is a zombie. Once it is gone
//! or a zombie, the hub queues a `process_exit` report for the rank.
//!
//! A session of a TCP peer whose process was not found is not watched: its
//! PID is the process's word, not the kernel's. At most [`MAX_WATCHES`] sessions are watched at once, so a
//! flood of short connections costs nothing more.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use super::hub::{HookHub, SessionInfo};
use gpumon_runtime::clock::wall_ms;

/// Time between two looks at `/proc`.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Looks at `/proc` per ended session before giving up (the process lives on).
pub const CHECKS: u32 = 30;

/// Ended sessions watched at once.
pub const MAX_WATCHES: usize = 256;

/// Watches for the exit of `pid` (the ended session's process, in the
/// agent's PID namespace) in the background and tells `hub` once it is
/// gone. Does nothing outside a Tokio runtime or past [`MAX_WATCHES`].
pub(crate) fn watch(
    hub: Arc<HookHub>,
    proc_root: PathBuf,
    watches: Arc<AtomicUsize>,
    pid: u32,
    ended: SessionInfo,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if watches.fetch_add(1, Relaxed) >= MAX_WATCHES {
        watches.fetch_sub(1, Relaxed);
        return;
    }
    runtime.spawn(async move {
        for _ in 0..CHECKS {
            if gone(&proc_root, pid) {
                hub.process_exited(&ended, wall_ms());
                break;
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
        watches.fetch_sub(1, Relaxed);
    });
}

/// `pid` has no entry under `proc_root`, or is a zombie (`Z`) or dead (`X`).
pub(crate) fn gone(proc_root: &Path, pid: u32) -> bool {
    let stat = proc_root.join(pid.to_string()).join("stat");
    match std::fs::read_to_string(stat) {
        Ok(text) => text
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X'),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_entry(root: &Path, pid: u32, stat: &str) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stat"), stat).unwrap();
    }

    #[test]
    fn a_zombie_or_a_missing_entry_is_gone_a_running_or_stopped_process_is_not() {
        let root = tempfile::tempdir().unwrap();
        proc_entry(root.path(), 10, "10 (python3) R 1 10 10 0 -1");
        proc_entry(root.path(), 11, "11 (a) b) Z 1 11 11 0 -1");
        proc_entry(root.path(), 12, "12 (python3) T 1 12 12 0 -1");
        proc_entry(root.path(), 13, "13 (python3) X 1 13 13 0 -1");
        assert!(!gone(root.path(), 10));
        assert!(
            gone(root.path(), 11),
            "a name holding ') ' is read from its last ')'"
        );
        assert!(!gone(root.path(), 12), "a stopped process lives");
        assert!(gone(root.path(), 13));
        assert!(gone(root.path(), 14));
        assert!(!gone(Path::new("/proc"), std::process::id()));
    }
}
