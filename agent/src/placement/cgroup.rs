//! The pod UID and container id of a process, from `/proc/PID/cgroup`.
//!
//! The kubelet puts every pod in a cgroup named after its UID and the
//! container runtime every container in one named after its id, so the
//! path the kernel reports for a process names both. The layouts:
//!
//! | cgroup driver | pod | container |
//! | --- | --- | --- |
//! | systemd | `kubepods[-QOS]-pod<UID, _ for ->.slice` | `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope` |
//! | cgroupfs | `pod<UID>` | `<id>`, or `crio-<id>` |
//!
//! under `/kubepods.slice/...` (systemd) or `/kubepods/...` (cgroupfs), with
//! a QoS level (`burstable`, `besteffort`) between them for pods that are
//! not Guaranteed. cgroup v2 has one line (`0::/path`), v1 one per
//! hierarchy (`ID:controllers:/path`). A reader in a cgroup namespace of its
//! own sees paths relative to its own cgroup (`/../../kubepods-...`), so
//! the pod is found by its component, wherever it is, and the container is
//! the component right after it.
//!
//! Pure: [`parse_cgroup`] takes the file's bytes. Anything else (a path
//! outside Kubernetes, a UID or id of the wrong shape, a file over
//! [`MAX_CGROUP_BYTES`], bytes that are not UTF-8) is no placement.

use gpumon_core::cluster::{is_container_id, is_pod_uid};

/// Largest `/proc/PID/cgroup` parsed, bytes. A v1 file has a dozen lines
/// of a few hundred bytes; larger is not a kernel's.
pub const MAX_CGROUP_BYTES: usize = 16 << 10;

/// The runtimes' prefixes of a container's cgroup name.
const RUNTIME_PREFIXES: [&str; 3] = ["cri-containerd-", "crio-", "docker-"];

/// What a cgroup path says of a Kubernetes process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupIds {
    /// The pod's UID, lowercase with dashes.
    pub pod_uid: String,
    /// The container's id, 64 lowercase hex digits, when the path names it.
    pub container_id: Option<String>,
}

/// The pod and container named by a `/proc/PID/cgroup` file; `None` for a
/// process outside a Kubernetes pod. Of several lines (cgroup v1), the
/// first that names a container wins, else the first that names a pod.
pub fn parse_cgroup(bytes: &[u8]) -> Option<CgroupIds> {
    if bytes.len() > MAX_CGROUP_BYTES {
        return None;
    }
    let mut pod_only = None;
    for line in bytes.split(|&b| b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        // The path is the third field, and may itself hold ':'.
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        match parse_path(path) {
            Some(ids) if ids.container_id.is_some() => return Some(ids),
            Some(ids) => {
                pod_only.get_or_insert(ids);
            }
            None => {}
        }
    }
    pod_only
}

/// The pod component of a path and the container component after it.
fn parse_path(path: &str) -> Option<CgroupIds> {
    let mut components = path.split('/');
    let pod_uid = components.by_ref().find_map(pod_uid)?;
    let container_id = components.next().and_then(container_id);
    Some(CgroupIds {
        pod_uid,
        container_id,
    })
}

/// `kubepods-burstable-pod<uid with _>.slice` (systemd) or `pod<uid>`
/// (cgroupfs) to the UID with dashes.
fn pod_uid(component: &str) -> Option<String> {
    let uid = match component.strip_suffix(".slice") {
        Some(slice) if slice.starts_with("kubepods") => {
            let at = slice.rfind("-pod")?;
            slice[at + "-pod".len()..].replace('_', "-")
        }
        Some(_) => return None,
        None => component.strip_prefix("pod")?.to_owned(),
    };
    let uid = uid.to_ascii_lowercase();
    is_pod_uid(&uid).then_some(uid)
}

/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`
/// (systemd), `<id>` or `crio-<id>` (cgroupfs) to the id.
fn container_id(component: &str) -> Option<String> {
    let name = component.strip_suffix(".scope").unwrap_or(component);
    let id = RUNTIME_PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    is_container_id(id).then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "1c3f2a4b-5d6e-4f70-8a9b-0c1d2e3f4a5b";
    const UID_: &str = "1c3f2a4b_5d6e_4f70_8a9b_0c1d2e3f4a5b";
    const ID: &str = "8d2f0e1c9b3a47d6a5c4e3f2b1a0998877665544332211ffeeddccbbaa001122";

    fn ids(container: bool) -> Option<CgroupIds> {
        Some(CgroupIds {
            pod_uid: UID.into(),
            container_id: container.then(|| ID.into()),
        })
    }

    fn parse(text: &str) -> Option<CgroupIds> {
        parse_cgroup(text.as_bytes())
    }

    #[test]
    fn cgroup_v2_with_the_systemd_driver_and_each_runtime() {
        for (qos, runtime) in [
            (
                "kubepods-burstable.slice/kubepods-burstable-",
                "cri-containerd-",
            ),
            ("kubepods-besteffort.slice/kubepods-besteffort-", "crio-"),
            ("kubepods-", "docker-"),
        ] {
            let line = format!("0::/kubepods.slice/{qos}pod{UID_}.slice/{runtime}{ID}.scope\n");
            assert_eq!(parse(&line), ids(true), "{line}");
        }
    }

    #[test]
    fn cgroup_v1_with_the_cgroupfs_driver() {
        let file = format!(
            "12:pids:/kubepods/burstable/pod{UID}/{ID}\n\
             11:hugetlb:/kubepods/burstable/pod{UID}/{ID}\n\
             10:memory:/kubepods/burstable/pod{UID}/{ID}\n\
             4:cpu,cpuacct:/kubepods/burstable/pod{UID}/{ID}\n\
             1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n\
             0::/\n"
        );
        assert_eq!(parse(&file), ids(true));
        // Guaranteed pods have no QoS level; CRI-O names its cgroups.
        assert_eq!(
            parse(&format!("3:memory:/kubepods/pod{UID}/crio-{ID}\n")),
            ids(true)
        );
    }

    #[test]
    fn cgroup_v1_with_the_systemd_driver_prefers_a_line_that_names_the_container() {
        let file = format!(
            "13:misc:/\n\
             12:freezer:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice\n\
             11:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{ID}.scope\n"
        );
        assert_eq!(parse(&file), ids(true));
        let pod_only = format!("0::/kubepods.slice/kubepods-pod{UID_}.slice\n");
        assert_eq!(parse(&pod_only), ids(false));
    }

    #[test]
    fn a_reader_in_its_own_cgroup_namespace_sees_relative_paths() {
        let line =
            format!("0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope\n");
        assert_eq!(parse(&line), ids(true));
        // A process in a cgroup below its container's (systemd inside it).
        let nested = format!(
            "0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope/init.scope"
        );
        assert_eq!(parse(&nested), ids(true));
    }

    #[test]
    fn uppercase_uids_are_normalised_and_unknown_container_names_are_left_out() {
        let line = format!("0::/kubepods/pod{}/sandbox", UID.to_uppercase());
        assert_eq!(parse(&line), ids(false));
        let podman = format!("0::/kubepods/pod{UID}/libpod-{ID}.scope");
        assert_eq!(parse(&podman), ids(false));
    }

    #[test]
    fn paths_outside_kubernetes_are_no_placement() {
        for file in [
            "0::/user.slice/user-1000.slice/session-3.scope\n".to_owned(),
            "0::/system.slice/gpumon-agent.service\n".to_owned(),
            format!("0::/system.slice/docker-{ID}.scope\n"),
            format!("0::/machine.slice/libpod-{ID}.scope\n"),
            "12:pids:/slurm/uid_1000/job_31337/step_0/task_0\n".to_owned(),
            // The right words, the wrong shapes.
            "0::/kubepods.slice/kubepods-podnot-a-uid.slice/x.scope\n".to_owned(),
            format!("0::/system.slice/other-pod{UID_}.slice\n"),
            format!("0::/kubepods/pod{}/{ID}\n", &UID[..35]),
            "0::/\n".to_owned(),
            String::new(),
        ] {
            assert_eq!(parse(&file), None, "{file:?}");
        }
    }

    #[test]
    fn hostile_input_is_no_placement_and_never_a_panic() {
        let good = format!("0::/kubepods/pod{UID}/{ID}\n");
        let mut huge = good.clone().into_bytes();
        huge.resize(MAX_CGROUP_BYTES + 1, b'\n');
        assert_eq!(parse_cgroup(&huge), None);
        let mut at_the_bound = good.clone().into_bytes();
        at_the_bound.resize(MAX_CGROUP_BYTES, b'\n');
        assert_eq!(parse_cgroup(&at_the_bound), ids(true));

        let mut odd = b"0::/kubepods/pod\xff\xfe/\x00\n".to_vec();
        odd.extend_from_slice(good.as_bytes());
        assert_eq!(parse_cgroup(&odd), ids(true), "a bad line is skipped");
        for bytes in [
            &b"\xff\xff\xff"[..],
            b"::::::",
            b"0::",
            b"0::/kubepods/pod",
            b"0::/kubepods.slice/kubepods-pod.slice",
            b"0::/kubepods.slice/kubepods-\xc3\xa9pod.slice",
        ] {
            assert_eq!(parse_cgroup(bytes), None, "{bytes:?}");
        }
        // Every prefix of a good file, cut anywhere, parses or not, without panicking.
        for cut in 0..good.len() {
            let _ = parse_cgroup(&good.as_bytes()[..cut]);
        }
    }
}
