//! The pod's names a process's environment gives.
//!
//! The cgroup path names a pod by its UID only. Its name, namespace and
//! container name reach the process through its environment when the pod
//! spec puts them there, with the downward API:
//!
//! ```yaml
//! env:
//!   - name: POD_NAME
//!     valueFrom: {fieldRef: {fieldPath: metadata.name}}
//!   - name: POD_NAMESPACE
//!     valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
//!   - name: GPUMON_CONTAINER
//!     value: trainer          # the container's own name
//! ```
//!
//! Kubernetes itself sets `KUBERNETES_SERVICE_HOST` in every container and
//! `HOSTNAME` to the pod's name (unless the spec sets `hostname`; with
//! `hostNetwork` it is the node's, which the caller checks). Pure:
//! [`parse_pod_env`] takes the environment blob, as
//! [`crate::discovery::parse_environ`] does.

use gpumon_core::cluster::{is_dns_label, is_dns_subdomain};

use crate::procfs::{env_vars, MAX_ENVIRON_BYTES};

/// The variables [`parse_pod_env`] reads.
const KEYS: [&str; 6] = [
    "POD_NAME",
    "POD_NAMESPACE",
    "HOSTNAME",
    "KUBERNETES_SERVICE_HOST",
    "GPUMON_CONTAINER",
    "CONTAINER_NAME",
];

/// What the environment says of the pod; names of the wrong shape (not
/// the DNS names Kubernetes gives) are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodEnv {
    /// `POD_NAME`.
    pub pod_name: Option<String>,
    /// `POD_NAMESPACE`.
    pub namespace: Option<String>,
    /// `GPUMON_CONTAINER`, else `CONTAINER_NAME`.
    pub container_name: Option<String>,
    /// `HOSTNAME`: the pod's name in most pods.
    pub hostname: Option<String>,
    /// `KUBERNETES_SERVICE_HOST` is set: the process runs in a pod.
    pub in_kubernetes: bool,
}

/// Reads the pod's names from an environment blob; a blob over
/// [`MAX_ENVIRON_BYTES`] says nothing.
pub fn parse_pod_env(bytes: &[u8]) -> PodEnv {
    if bytes.len() > MAX_ENVIRON_BYTES {
        return PodEnv::default();
    }
    let vars = env_vars(bytes, &KEYS);
    let get = |key: &str, ok: fn(&str) -> bool| {
        vars.get(key)
            .map(|v| v.trim())
            .filter(|v| ok(v))
            .map(str::to_owned)
    };
    PodEnv {
        pod_name: get("POD_NAME", is_dns_subdomain),
        namespace: get("POD_NAMESPACE", is_dns_label),
        container_name: get("GPUMON_CONTAINER", is_dns_label)
            .or_else(|| get("CONTAINER_NAME", is_dns_label)),
        hostname: get("HOSTNAME", is_dns_subdomain),
        in_kubernetes: vars
            .get("KUBERNETES_SERVICE_HOST")
            .is_some_and(|v| !v.trim().is_empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(entries: &[&str]) -> Vec<u8> {
        entries
            .iter()
            .flat_map(|e| [e.as_bytes(), b"\0"].concat())
            .collect()
    }

    #[test]
    fn a_pod_with_the_downward_api() {
        let got = parse_pod_env(&env(&[
            "PATH=/usr/bin",
            "HOSTNAME=trainer-0",
            "KUBERNETES_SERVICE_HOST=10.96.0.1",
            "POD_NAME=trainer-0",
            "POD_NAMESPACE=ml-team",
            "GPUMON_CONTAINER=pytorch",
            "CONTAINER_NAME=ignored-when-gpumon-container-is-set",
        ]));
        assert_eq!(
            got,
            PodEnv {
                pod_name: Some("trainer-0".into()),
                namespace: Some("ml-team".into()),
                container_name: Some("pytorch".into()),
                hostname: Some("trainer-0".into()),
                in_kubernetes: true,
            }
        );
    }

    #[test]
    fn a_pod_without_it_has_only_its_hostname() {
        let got = parse_pod_env(&env(&[
            "HOSTNAME=llama-sft-worker-3",
            "KUBERNETES_SERVICE_HOST=10.96.0.1",
            "CONTAINER_NAME=trainer",
        ]));
        assert_eq!(got.pod_name, None);
        assert_eq!(got.hostname.as_deref(), Some("llama-sft-worker-3"));
        assert_eq!(got.container_name.as_deref(), Some("trainer"));
        assert!(got.in_kubernetes);
    }

    #[test]
    fn outside_kubernetes_and_odd_values() {
        let got = parse_pod_env(&env(&["HOSTNAME=gpu-node-17", "POD_NAME=x"]));
        assert!(!got.in_kubernetes);
        let got = parse_pod_env(&env(&[
            "KUBERNETES_SERVICE_HOST= ",
            "POD_NAME=Not_A_Name",
            "POD_NAMESPACE=a.b",
            "GPUMON_CONTAINER=has space",
            "CONTAINER_NAME=\u{7}bell",
            "POD_NAME=second-wins-not",
        ]));
        assert_eq!(got, PodEnv::default());
        let mut huge = env(&["KUBERNETES_SERVICE_HOST=10.96.0.1", "POD_NAME=p"]);
        huge.resize(MAX_ENVIRON_BYTES + 1, b'x');
        assert_eq!(parse_pod_env(&huge), PodEnv::default());
        assert_eq!(parse_pod_env(b"\xff\xfe\0=\0POD_NAME\0"), PodEnv::default());
    }
}
