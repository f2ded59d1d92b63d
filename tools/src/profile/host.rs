//! Host RAM and the resident memory of the command's process tree, read
//! from /proc: what a training run costs the machine outside the GPU
//! (data loader workers, pinned buffers, a model loaded on the CPU first),
//! for the report's host section. Host RAM is read as the agent reads it
//! (`gpumon_agent::host`); its levels are the engine's, from the host
//! memory the profile's sampler hands over with each window.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use gpumon_agent::host::{read_bounded, read_meminfo};

/// Processes walked at most per sample.
const MAX_PROCESSES: usize = 65_536;

/// One reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostSample {
    /// Host RAM.
    pub total: u64,
    /// In use: total less available.
    pub used: u64,
    /// Resident memory of the root process and its descendants.
    pub tree_rss: u64,
}

/// Reads [`HostSample`]s for the tree under one process.
#[derive(Debug)]
pub struct HostSampler {
    proc_root: PathBuf,
    root_pid: u32,
}

impl HostSampler {
    /// A sampler of `/proc` for the tree under `root_pid`.
    pub fn new(root_pid: u32) -> Self {
        Self::with_proc(PathBuf::from("/proc"), root_pid)
    }

    /// A sampler of another proc tree (tests).
    pub fn with_proc(proc_root: PathBuf, root_pid: u32) -> Self {
        Self {
            proc_root,
            root_pid,
        }
    }

    /// Reads one sample; `None` when /proc/meminfo cannot be read.
    pub fn sample(&self) -> Option<HostSample> {
        let ram = read_meminfo(&self.proc_root.join("meminfo"))?;
        Some(HostSample {
            total: ram.total,
            used: ram.used,
            tree_rss: self.tree_rss(),
        })
    }

    fn tree_rss(&self) -> u64 {
        let Ok(entries) = std::fs::read_dir(&self.proc_root) else {
            return 0;
        };
        let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for entry in entries.flatten().take(MAX_PROCESSES) {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(ppid) =
                read_bounded(&entry.path().join("stat")).and_then(|s| parse_ppid(&s))
            {
                children.entry(ppid).or_default().push(pid);
            }
        }
        let mut seen = BTreeSet::new();
        let mut todo = vec![self.root_pid];
        let mut rss = 0u64;
        while let Some(pid) = todo.pop() {
            if !seen.insert(pid) {
                continue;
            }
            let status = read_bounded(&self.proc_root.join(pid.to_string()).join("status"));
            if let Some(bytes) = status.as_deref().and_then(parse_status_rss) {
                rss = rss.saturating_add(bytes);
            }
            todo.extend(children.get(&pid).into_iter().flatten());
        }
        rss
    }
}

/// The parent pid in /proc/PID/stat: the fourth field, counted after the
/// command name's closing parenthesis (the name may hold spaces and ')').
pub fn parse_ppid(stat: &str) -> Option<u32> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Resident memory in bytes: `VmRSS` of /proc/PID/status (absent for
/// kernel threads and zombies).
pub fn parse_status_rss(status: &str) -> Option<u64> {
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    Some(kb.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_status_are_read_and_odd_text_is_none() {
        assert_eq!(parse_ppid("42 (python3 a) b)) S 7 42 42 0"), Some(7));
        assert_eq!(parse_ppid("garbage"), None);
        assert_eq!(
            parse_status_rss("Name: x\nVmRSS:\t  250 kB\n"),
            Some(250 * 1024)
        );
        assert_eq!(parse_status_rss("Name: kthreadd\n"), None);
    }

    #[test]
    fn the_tree_sums_the_root_and_its_descendants_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(
            p.join("meminfo"),
            "MemTotal: 1000 kB\nMemAvailable: 250 kB\n",
        )
        .unwrap();
        // 10 is the command; 11 its child, 12 a grandchild; 20 a stranger.
        for (pid, ppid, kb) in [(10, 1, 3), (11, 10, 5), (12, 11, 7), (20, 1, 1000)] {
            let d = p.join(pid.to_string());
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("stat"), format!("{pid} (x) S {ppid} 0 0")).unwrap();
            std::fs::write(d.join("status"), format!("Name: x\nVmRSS: {kb} kB\n")).unwrap();
        }
        let s = HostSampler::with_proc(p.to_owned(), 10).sample().unwrap();
        assert_eq!(
            s,
            HostSample {
                total: 1_024_000,
                used: 768_000,
                tree_rss: 15 * 1024
            }
        );
    }

    #[test]
    fn this_machine_can_be_sampled() {
        let s = HostSampler::new(std::process::id())
            .sample()
            .expect("/proc/meminfo");
        assert!(s.total > 0 && s.used <= s.total);
        assert!(s.tree_rss > 0, "this test process is resident");
    }
}
