//! Where in Kubernetes a process runs: its pod and container.
//!
//! The agent reads it beside a rank's identity (the pod UID and container
//! id from `/proc/PID/cgroup`, the names from the container's own files and
//! environment) and sends it in protocol version 2 pushes
//! ([`crate::PushBatchV2`]); the coordinator keeps it on the rank and shows
//! it in the API and on `/metrics`. Every field is optional: outside
//! Kubernetes there is no placement at all, and inside it some names are
//! only known when the pod spec hands them to the container.

use serde::{Deserialize, Serialize};

/// The pod and container a process runs in; absent fields are unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PodPlacement {
    /// The pod's UID, lowercase with dashes, from the cgroup path.
    pub pod_uid: Option<String>,
    /// The pod's name (`POD_NAME`, or `HOSTNAME` inside Kubernetes).
    pub pod_name: Option<String>,
    /// The pod's namespace (the service account's `namespace` file, or
    /// `POD_NAMESPACE`).
    pub namespace: Option<String>,
    /// The container's runtime id (64 hex digits), from the cgroup path.
    pub container_id: Option<String>,
    /// The container's name (`GPUMON_CONTAINER` or `CONTAINER_NAME`).
    pub container_name: Option<String>,
}

impl PodPlacement {
    /// True when no field is known.
    pub fn is_empty(&self) -> bool {
        self.pod_uid.is_none()
            && self.pod_name.is_none()
            && self.namespace.is_none()
            && self.container_id.is_none()
            && self.container_name.is_none()
    }
}

/// The placement of one process of a push, by its pid on the agent's node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcPlacement {
    /// Process id, as in the batch's windows.
    pub pid: u32,
    /// Where it runs.
    pub placement: PodPlacement,
}
