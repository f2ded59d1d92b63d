//! The engine in-process: each window set the sampler hands over (its
//! windows, hook records, placements and host RAM) becomes the push
//! command a coordinator would have committed, applied through the
//! replicas' own transition ([`Replicated::apply`]). No replica, no Raft,
//! no port: the same validation, bounds and detectors as a cluster, host
//! RAM levels included.

use gpumon_agent::uplink::Outgoing;
use gpumon_common::cluster::Limits;
use gpumon_common::engine::EngineConfig;
use gpumon_common::transition::{Command, CommandV1, Replicated};
use gpumon_proto::{Hello, PushBatch, PushBatchV2};

use super::observed::Observed;

/// See the module docs.
#[derive(Debug)]
pub struct Embedded {
    state: Replicated,
    hello: Hello,
    seq: u64,
    observed: Observed,
}

impl Embedded {
    /// A fresh engine that has seen the agent's hello.
    pub fn new(engine: &EngineConfig, hello: Hello) -> Self {
        let mut state = Replicated::new(Limits::default(), engine);
        state.apply(Command::V1(CommandV1::Hello(hello.clone())), false);
        Self {
            state,
            hello,
            seq: 0,
            observed: Observed::default(),
        }
    }

    /// Applies one window set.
    pub fn apply(&mut self, out: Outgoing) {
        self.observed.add(&out);
        self.seq += 1;
        let batch = PushBatch {
            agent_id: self.hello.agent_id.clone(),
            incarnation: self.hello.incarnation,
            seq: self.seq,
            node: self.hello.node.clone(),
            dropped_batches: 0,
            windows: out.windows,
            hook: out.hook,
            acks: out.acks,
        };
        let command = CommandV1::for_push(PushBatchV2 {
            batch,
            placements: out.placements,
            host: out.host,
        });
        self.state.apply(Command::V1(command), false);
    }

    /// The replicated state.
    pub fn state(&self) -> &Replicated {
        &self.state
    }

    /// What the profile kept beside the engine.
    pub fn observed(&self) -> &Observed {
        &self.observed
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.hello.node
    }
}
