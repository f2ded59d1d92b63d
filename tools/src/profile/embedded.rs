//! The engine in-process: each window set the sampler hands over (its
//! windows, hook records, placements and host RAM) becomes the push
//! command a coordinator would have committed, applied through the
//! replicas' own transition ([`Replicated::apply`]). No replica, no Raft,
//! no port: the same validation, bounds and detectors as a cluster, host
//! RAM levels included.

use gpumon_agent::uplink::Outgoing;
use gpumon_core::actions::{plan_dumps, IssueRules};
use gpumon_core::cluster::Limits;
use gpumon_core::engine::EngineConfig;
use gpumon_core::transition::{Command, CommandV1, Replicated};
use gpumon_proto::{Hello, PendingAction, PushBatch, PushBatchV2};

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

    /// Plans what a leader would (the evidence dumps of a hung job; cache
    /// releases stay a cluster's), issues and delivers it through the same
    /// commands, and returns the actions now outstanding on this node for
    /// its hooks (each hands the hub one it has seen before again; the hub
    /// keeps it once).
    pub fn take_actions(&mut self) -> Vec<PendingAction> {
        let rules = IssueRules::default();
        let t = self.state.now_t();
        let requests = plan_dumps(&self.state.hangs, &self.state.actions, t, &rules);
        if !requests.is_empty() {
            let issue = CommandV1::IssueActions { requests, rules };
            self.state.apply(Command::V1(issue), false);
        }
        let node = self.hello.node.clone();
        let (planned, pending) = self.state.actions.hand_out(&node);
        if !planned.is_empty() {
            let deliver = CommandV1::DeliverActions { node, ids: planned };
            self.state.apply(Command::V1(deliver), false);
        }
        pending
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
