//! Every gpumon type that crosses a process boundary, and the wire codec.
//!
//! - [`sample`]: raw NVML-style samples and the per-GPU windows agents push;
//! - [`hook`]: what the in-process hook reports and the action acknowledgements;
//! - [`placement`]: the Kubernetes pod and container of a process;
//! - [`uplink`]: the versioned agent → coordinator messages and the replies;
//! - [`api`]: every JSON body of the coordinator's HTTP API (with the
//!   `openapi` feature, their OpenAPI schemas);
//! - [`wire`]: the postcard codec with size limits and version checks.
//!
//! postcard is not self-describing, so every top-level message is an enum whose
//! variant *is* the protocol version (`V1(..)`); [`wire::decode`] reads that
//! variant first and answers [`wire::DecodeError::UnsupportedVersion`] for one it
//! does not know, before it tries to decode the body.
//!
//! ```
//! use gpumon_proto::{wire, AgentMessage, AgentMessageV1, Hello};
//! let msg = AgentMessage::V1(AgentMessageV1::Hello(Hello {
//!     agent_id: "node-0".into(),
//!     incarnation: 7,
//!     node: "node-0".into(),
//!     agent_version: "0.1.0".into(),
//!     source: "sim".into(),
//!     gpus: vec![],
//! }));
//! let bytes = wire::encode(&msg);
//! let back: AgentMessage = wire::decode(&bytes, 1 << 20).unwrap();
//! assert_eq!(back, msg);
//! ```
#![deny(missing_docs)]

pub mod api;
pub mod hook;
pub mod placement;
pub mod sample;
pub mod uplink;
pub mod wire;

pub use hook::{
    ActionAck, ActionOutcome, AllocRecord, AllocStats, CapSource, CollectiveArrival,
    CollectiveWait, DeviceLimit, EventRecord, GroupWait, HookRecord, MemoryCap, StallRecord,
    StepRecord, MAX_STEP_COLLECTIVES, P2P_WAITS,
};
pub use placement::{PodPlacement, ProcPlacement};
pub use sample::{
    BytesStat, GaugeStat, GpuInfo, GpuSample, GpuWindow, HostMemory, ProcSample, ProcWindow,
    RankInfo,
};
pub use uplink::{
    ActionKind, AgentMessage, AgentMessageV1, AgentMessageV2, CoordinatorReply, CoordinatorReplyV1,
    CoordinatorReplyV2, Hello, NodeAlert, PendingAction, PushBatch, PushBatchV2, PushOutcome,
    MAX_NODE_ALERTS, MAX_NODE_ALERT_KIND_BYTES, MAX_NODE_ALERT_MESSAGE_BYTES,
};

/// The newest protocol version this build speaks on the agent uplink.
pub const PROTOCOL_VERSION: u32 = 7;
