//! Host RAM, read from `/proc/meminfo` at every sample tick and folded per
//! window into the highest use and the total ([`HostMemory`]), which the
//! uplink pushes beside the GPU windows. `gpumon profile` reads the same
//! file through [`read_meminfo`] for its report.

use std::path::{Path, PathBuf};

use gpumon_proto::HostMemory;

/// Bytes read at most from one /proc file.
pub const MAX_PROC_FILE_BYTES: u64 = 64 * 1024;

/// Where the agent reads host RAM by default.
pub const MEMINFO: &str = "/proc/meminfo";

/// One reading of host RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostRam {
    /// `MemTotal`.
    pub total: u64,
    /// In use: `MemTotal` less `MemAvailable`.
    pub used: u64,
}

/// Reads at most [`MAX_PROC_FILE_BYTES`] of a text file; `None` when it
/// cannot be read.
pub fn read_bounded(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_PROC_FILE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// `MemTotal` and `MemAvailable` of /proc/meminfo, in bytes (available
/// capped at the total); `None` when either is missing or not a number.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| rest.trim().strip_suffix("kB"))
            .and_then(|kb| kb.trim().parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
    };
    let total = field("MemTotal")?;
    Some((total, field("MemAvailable")?.min(total)))
}

/// Reads host RAM from a meminfo file; `None` when it cannot be read or
/// parsed, or says there is no RAM.
pub fn read_meminfo(path: &Path) -> Option<HostRam> {
    let (total, available) = parse_meminfo(&read_bounded(path)?)?;
    (total > 0).then_some(HostRam {
        total,
        used: total - available,
    })
}

/// Folds the readings of one window: the highest use, the newest total
/// and time.
#[derive(Debug)]
pub struct HostFolder {
    meminfo: PathBuf,
    window: Option<HostMemory>,
    /// Whether the last read failed (to log a failure once).
    failing: bool,
}

impl HostFolder {
    /// A folder reading `meminfo` (normally [`MEMINFO`]).
    pub fn new(meminfo: PathBuf) -> Self {
        Self {
            meminfo,
            window: None,
            failing: false,
        }
    }

    /// Reads host RAM once, at `now_ms`; a failure is logged once until a
    /// read succeeds again, and leaves the window as it was.
    pub fn sample(&mut self, now_ms: u64) {
        let Some(ram) = read_meminfo(&self.meminfo) else {
            if !self.failing {
                tracing::warn!(path = %self.meminfo.display(), "cannot read host RAM; pushes go without it until it can");
            }
            self.failing = true;
            return;
        };
        self.failing = false;
        self.add(now_ms, ram);
    }

    /// Folds one reading in.
    pub fn add(&mut self, t_ms: u64, ram: HostRam) {
        let w = self.window.get_or_insert(HostMemory {
            t_ms,
            total_bytes: ram.total,
            used_max_bytes: 0,
        });
        w.t_ms = w.t_ms.max(t_ms);
        w.total_bytes = ram.total;
        w.used_max_bytes = w.used_max_bytes.max(ram.used).min(ram.total);
    }

    /// The window's reading, and a new window; `None` when nothing was read.
    pub fn take(&mut self) -> Option<HostMemory> {
        self.window.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_is_read_and_odd_text_is_none() {
        let meminfo =
            "MemTotal:       65536000 kB\nMemFree:  100 kB\nMemAvailable:   16384000 kB\n";
        assert_eq!(
            parse_meminfo(meminfo),
            Some((65_536_000 * 1024, 16_384_000 * 1024))
        );
        assert_eq!(parse_meminfo("MemTotal: 12 kB\n"), None);
        assert_eq!(parse_meminfo("MemTotal: x kB\nMemAvailable: 1 kB"), None);
        assert_eq!(
            parse_meminfo("MemTotal: 12\nMemAvailable: 1 kB"),
            None,
            "no unit"
        );
        assert_eq!(
            parse_meminfo("MemTotal: 10 kB\nMemAvailable: 50 kB"),
            Some((10_240, 10_240)),
            "available is capped at the total"
        );
        let huge = format!("MemTotal: {} kB\nMemAvailable: 0 kB", u64::MAX);
        assert_eq!(parse_meminfo(&huge), Some((u64::MAX, 0)), "saturates");
    }

    #[test]
    fn a_window_keeps_its_highest_use_and_newest_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meminfo");
        let mut f = HostFolder::new(path.clone());
        f.sample(1);
        assert_eq!(f.take(), None, "no file, no reading");
        let write = |avail_kb: u64| {
            std::fs::write(
                &path,
                format!("MemTotal: 1000 kB\nMemAvailable: {avail_kb} kB\n"),
            )
            .unwrap()
        };
        write(700);
        f.sample(10);
        write(200);
        f.sample(20);
        write(900);
        f.sample(30);
        assert_eq!(
            f.take(),
            Some(HostMemory {
                t_ms: 30,
                total_bytes: 1000 * 1024,
                used_max_bytes: 800 * 1024
            })
        );
        assert_eq!(f.take(), None, "the next window starts empty");
        std::fs::write(&path, "MemTotal: 0 kB\nMemAvailable: 0 kB\n").unwrap();
        f.sample(40);
        assert_eq!(f.take(), None, "no RAM is no reading");
    }

    #[test]
    fn this_machine_can_be_read() {
        let ram = read_meminfo(Path::new(MEMINFO)).expect("/proc/meminfo");
        assert!(ram.total > 0 && ram.used <= ram.total);
    }
}
