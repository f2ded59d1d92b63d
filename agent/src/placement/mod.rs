//! Where in Kubernetes a GPU process runs: its pod and container, read
//! beside its rank.
//!
//! | field | from |
//! | --- | --- |
//! | pod UID, container id | `/proc/PID/cgroup` ([`cgroup`]) |
//! | namespace | the service account's `namespace` file in the container (`/var/run/secrets/kubernetes.io/serviceaccount/namespace` under `/proc/PID/root`), else `POD_NAMESPACE` |
//! | pod name | `POD_NAME`, else `HOSTNAME` when `KUBERNETES_SERVICE_HOST` is set and the process has a UTS namespace of its own (with `hostNetwork` the hostname is the node's) |
//! | container name | `GPUMON_CONTAINER`, else `CONTAINER_NAME` |
//!
//! The environment variables are the process's ([`pod_env`]). A process
//! with neither a pod in its cgroup path nor `KUBERNETES_SERVICE_HOST` has
//! no placement. The kernel writes the cgroup path, so the UID and id are
//! what the node says; the names come from the container's own files and
//! environment, and are only what the container claims.
//!
//! Reading another container's files needs what reading its environment
//! needs (root in the host PID namespace). The container's symbolic links
//! are followed as the container would follow them, within its root
//! ([`read_in_root`]: the service account's files are links, and `/var/run`
//! often is one to `/run`, which the host's path walk would take to the
//! agent's own `/run`), and the file is opened without following a last
//! link and without blocking, so a FIFO in its place cannot stall the agent.

pub mod cgroup;
pub mod pod_env;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use gpumon_core::cluster::is_dns_label;
use gpumon_proto::PodPlacement;
use rustix::fs::{Mode, OFlags};

use crate::procfs::read_bounded;
use cgroup::{parse_cgroup, MAX_CGROUP_BYTES};
use pod_env::parse_pod_env;

/// The service account's namespace file, inside the container.
pub const NAMESPACE_FILE: &str = "var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Most symbolic links followed resolving one path (the kernel's limit).
const MAX_LINKS: usize = 40;

/// The placement of process `pid` under `proc_root`, given its environment
/// blob (already read for its rank). `None` outside Kubernetes or when
/// nothing is known.
pub fn read_placement(proc_root: &Path, pid: u32, environ: &[u8]) -> Option<PodPlacement> {
    let dir = proc_root.join(pid.to_string());
    let ids = read_bounded(&dir.join("cgroup"), MAX_CGROUP_BYTES)
        .ok()
        .and_then(|bytes| parse_cgroup(&bytes));
    let env = parse_pod_env(environ);
    if ids.is_none() && !env.in_kubernetes {
        return None;
    }
    let namespace = read_in_root(&dir.join("root"), NAMESPACE_FILE, 256)
        .and_then(|bytes| {
            let text = String::from_utf8(bytes).ok()?;
            let name = text.trim();
            is_dns_label(name).then(|| name.to_owned())
        })
        .or(env.namespace);
    let pod_name = env.pod_name.or_else(|| {
        let own_hostname = env.in_kubernetes && !shares_host_uts(proc_root, pid);
        env.hostname.filter(|_| own_hostname)
    });
    let (pod_uid, container_id) = ids.map_or((None, None), |i| (Some(i.pod_uid), i.container_id));
    let placement = PodPlacement {
        pod_uid,
        pod_name,
        namespace,
        container_id,
        container_name: env.container_name,
    };
    (!placement.is_empty()).then_some(placement)
}

/// True when `pid` is in the UTS namespace of pid 1 (the host's, with the
/// host PID namespace): its hostname is the node's. Unknown is false.
fn shares_host_uts(proc_root: &Path, pid: u32) -> bool {
    let uts = |p: &str| std::fs::read_link(proc_root.join(p).join("ns/uts")).ok();
    match (uts(&pid.to_string()), uts("1")) {
        (Some(own), Some(host)) => own == host,
        _ => false,
    }
}

/// Reads at most `limit` bytes of the regular file at `path` inside `root`
/// (a process's `/proc/PID/root`), resolving symbolic links as a process
/// with that root would: an absolute target starts again at `root`, `..`
/// stops there. `None` when it is missing, not a regular file, longer
/// than `limit`, or behind more than `MAX_LINKS` links.
pub fn read_in_root(root: &Path, path: &str, limit: usize) -> Option<Vec<u8>> {
    let resolved = resolve_in_root(root, path)?;
    // No following a link swapped in since, no waiting on a FIFO.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = File::from(rustix::fs::open(&resolved, flags, Mode::empty()).ok()?);
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() <= limit).then_some(bytes)
}

/// `path` inside `root` with every symbolic link on the way resolved
/// within `root`; the last component may be anything but a link.
fn resolve_in_root(root: &Path, path: &str) -> Option<PathBuf> {
    let mut done: Vec<String> = Vec::new();
    let mut todo: Vec<String> = path.split('/').rev().map(str::to_owned).collect();
    let mut links = 0;
    while let Some(component) = todo.pop() {
        match component.as_str() {
            "" | "." => continue,
            ".." => {
                done.pop();
                continue;
            }
            _ => {}
        }
        let here: PathBuf = root.join(done.iter().collect::<PathBuf>()).join(&component);
        if !std::fs::symlink_metadata(&here)
            .ok()?
            .file_type()
            .is_symlink()
        {
            done.push(component);
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return None;
        }
        let target = std::fs::read_link(&here).ok()?;
        let target = target.to_str()?;
        if target.starts_with('/') {
            done.clear();
        }
        todo.extend(target.split('/').rev().map(str::to_owned));
    }
    Some(root.join(done.iter().collect::<PathBuf>()))
}

#[cfg(test)]
mod tests;
