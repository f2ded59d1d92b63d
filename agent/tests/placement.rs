//! The rank finder over a fake `/proc` laid out as a Kubernetes node's:
//! training processes in pods (cgroup v2 with the systemd driver and
//! containerd, cgroup v1 with cgroupfs), their environments, their
//! service account's `namespace` file inside their root (behind the links
//! the kubelet and the image put there), and their UTS namespaces. Each
//! rank gets the pod and container the node says, and nothing outside
//! Kubernetes gets any.

use std::os::unix::fs::symlink;
use std::path::Path;

use gpumon_agent::discovery::RankFinder;
use gpumon_core::window::WindowFolder;
use gpumon_proto::{GpuInfo, GpuSample, PodPlacement, ProcPlacement, ProcSample};

const POD_ENV: &[u8] = include_bytes!("fixtures/environ/k8s_pod_rank8.environ");
const DOWNWARD_ENV: &[u8] = include_bytes!("fixtures/environ/k8s_downward_api_rank9.environ");
const HOST_ENV: &[u8] = include_bytes!("fixtures/environ/torchrun_rank3.environ");
const NOT_TORCH_ENV: &[u8] = include_bytes!("fixtures/environ/not_torch.environ");

const UID_0: &str = "5a4c3b2d-1e0f-4a9b-8c7d-6e5f4a3b2c1d";
const UID_1: &str = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0";
const CID_0: &str = "3f9a1c7e5b2d4068a1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f3a5b7c9d0e2f4";
const CID_1: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";

const HOST_UTS: &str = "uts:[4026531838]";

struct Proc<'a> {
    pid: u32,
    environ: &'a [u8],
    cgroup: String,
    uts: &'a str,
}

fn write_proc(root: &Path, p: &Proc) {
    let dir = root.join(p.pid.to_string());
    std::fs::create_dir_all(dir.join("ns")).unwrap();
    std::fs::create_dir_all(dir.join("root")).unwrap();
    std::fs::write(dir.join("environ"), p.environ).unwrap();
    std::fs::write(dir.join("cgroup"), &p.cgroup).unwrap();
    symlink(p.uts, dir.join("ns/uts")).unwrap();
}

/// The service account volume as the kubelet writes it (`namespace` a link
/// into a timestamped directory through `..data`), under `/run`, with the
/// image's `/var/run` an absolute link to `/run`.
fn write_service_account(container_root: &Path, namespace: &str) {
    let sa = container_root.join("run/secrets/kubernetes.io/serviceaccount");
    let stamped = sa.join("..2024_06_11_10_00_00.123456789");
    std::fs::create_dir_all(&stamped).unwrap();
    std::fs::write(stamped.join("namespace"), format!("{namespace}\n")).unwrap();
    std::fs::write(stamped.join("token"), "eyJhbGciOi...").unwrap();
    symlink("..2024_06_11_10_00_00.123456789", sa.join("..data")).unwrap();
    symlink("..data/namespace", sa.join("namespace")).unwrap();
    std::fs::create_dir_all(container_root.join("var")).unwrap();
    symlink("/run", container_root.join("var/run")).unwrap();
}

fn sample(index: u32, pids: &[u32]) -> GpuSample {
    GpuSample {
        t_ms: 1_700_000_000_000,
        gpu: GpuInfo {
            uuid: format!("GPU-5c0a7d1e-0000-4000-8000-00000000000{index}"),
            index,
            name: "NVIDIA H100 80GB HBM3".into(),
            total_bytes: 80 << 30,
        },
        used_bytes: 30 << 30,
        reserved_bytes: None,
        util_pct: Some(90.0),
        sm_clock_mhz: None,
        power_w: None,
        procs: pids
            .iter()
            .map(|&pid| ProcSample {
                pid,
                used_bytes: 20 << 30,
                rank: None,
            })
            .collect(),
    }
}

/// One sampling round through the finder, folded into windows as the agent
/// does, and the placements it hands the uplink with them.
fn placements(finder: &mut RankFinder, samples: Vec<GpuSample>) -> Vec<ProcPlacement> {
    let mut samples = samples;
    finder.attribute(&mut samples);
    let mut folder = WindowFolder::new();
    samples.iter().for_each(|s| folder.add(s));
    finder.placements_for(&folder.take())
}

#[test]
fn each_rank_gets_the_pod_and_container_its_node_and_container_say() {
    let proc = tempfile::tempdir().unwrap();
    let root = proc.path();
    std::fs::create_dir_all(root.join("1/ns")).unwrap();
    symlink(HOST_UTS, root.join("1/ns/uts")).unwrap();
    let uid_ = UID_0.replace('-', "_");
    let procs = [
        // A pod with no downward API: the name is its hostname, the
        // namespace its service account's.
        Proc {
            pid: 4242,
            environ: POD_ENV,
            cgroup: format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{CID_0}.scope\n"
            ),
            uts: "uts:[4026532401]",
        },
        // A hostNetwork pod (the node's UTS namespace and hostname) that
        // hands its names down; no service account mounted.
        Proc {
            pid: 4243,
            environ: DOWNWARD_ENV,
            cgroup: format!(
                "12:pids:/kubepods/burstable/pod{UID_1}/{CID_1}\n1:name=systemd:/kubepods/burstable/pod{UID_1}/{CID_1}\n0::/\n"
            ),
            uts: HOST_UTS,
        },
        // A torchrun rank on the host itself.
        Proc {
            pid: 5000,
            environ: HOST_ENV,
            cgroup: "0::/user.slice/user-1000.slice/session-4.scope\n".into(),
            uts: HOST_UTS,
        },
        // Something else in a pod: not a rank, so no placement either.
        Proc {
            pid: 6000,
            environ: NOT_TORCH_ENV,
            cgroup: format!("0::/kubepods.slice/kubepods-pod{uid_}.slice/cri-containerd-{CID_0}.scope\n"),
            uts: "uts:[4026532401]",
        },
    ];
    for p in &procs {
        write_proc(root, p);
    }
    write_service_account(&root.join("4242/root"), "ml-research");

    let mut finder = RankFinder::new(root.to_path_buf());
    let got = placements(
        &mut finder,
        vec![
            sample(0, &[4242, 6000]),
            sample(1, &[4243]),
            sample(2, &[5000]),
        ],
    );
    assert_eq!(
        got,
        vec![
            ProcPlacement {
                pid: 4242,
                placement: PodPlacement {
                    pod_uid: Some(UID_0.into()),
                    pod_name: Some("llama-sft-worker-0".into()),
                    namespace: Some("ml-research".into()),
                    container_id: Some(CID_0.into()),
                    container_name: None,
                },
            },
            ProcPlacement {
                pid: 4243,
                placement: PodPlacement {
                    pod_uid: Some(UID_1.into()),
                    pod_name: Some("llama-sft-worker-1".into()),
                    namespace: Some("ml-research".into()),
                    container_id: Some(CID_1.into()),
                    container_name: Some("pytorch".into()),
                },
            },
        ]
    );
    let stats = finder.stats();
    assert_eq!((stats.attributed_total, stats.not_torchrun_total), (3, 1));
}

#[test]
fn a_host_network_pod_without_pod_name_has_no_name_and_the_service_account_wins() {
    let proc = tempfile::tempdir().unwrap();
    let root = proc.path();
    std::fs::create_dir_all(root.join("1/ns")).unwrap();
    symlink(HOST_UTS, root.join("1/ns/uts")).unwrap();
    // The downward API's environment without POD_NAME, in the host's UTS
    // namespace: its HOSTNAME is the node's, not the pod's.
    let environ: Vec<u8> = DOWNWARD_ENV
        .split(|b| *b == 0)
        .filter(|e| !e.starts_with(b"POD_NAME="))
        .flat_map(|e| [e, b"\0"].concat())
        .collect();
    write_proc(
        root,
        &Proc {
            pid: 77,
            environ: &environ,
            cgroup: format!("0::/kubepods/pod{UID_1}/{CID_1}\n"),
            uts: HOST_UTS,
        },
    );
    // The service account's file names the namespace the pod really is in.
    write_service_account(&root.join("77/root"), "prod");
    let mut finder = RankFinder::new(root.to_path_buf());
    let got = placements(&mut finder, vec![sample(0, &[77])]);
    let placement = &got[0].placement;
    assert_eq!(placement.pod_name, None);
    assert_eq!(placement.namespace.as_deref(), Some("prod"));
    assert_eq!(placement.pod_uid.as_deref(), Some(UID_1));
}

#[test]
fn a_placement_lives_as_long_as_its_process_in_the_finder() {
    let proc = tempfile::tempdir().unwrap();
    let root = proc.path();
    write_proc(
        root,
        &Proc {
            pid: 4242,
            environ: POD_ENV,
            cgroup: format!("0::/kubepods/pod{UID_0}/{CID_0}\n"),
            uts: "uts:[4026532401]",
        },
    );
    let mut finder = RankFinder::new(root.to_path_buf());
    let first = placements(&mut finder, vec![sample(0, &[4242])]);
    assert_eq!(first.len(), 1);
    // pid 1 is not visible here: the hostname is taken as the pod's.
    assert_eq!(
        first[0].placement.pod_name.as_deref(),
        Some("llama-sft-worker-0")
    );
    // The process left; its pid's placement goes with it.
    assert!(placements(&mut finder, vec![sample(0, &[])]).is_empty());
    std::fs::write(
        root.join("4242/cgroup"),
        "0::/user.slice/user-0.slice/session-1.scope\n",
    )
    .unwrap();
    let again = placements(&mut finder, vec![sample(0, &[4242])]);
    assert_eq!(again[0].placement.pod_uid, None, "read afresh");
}
