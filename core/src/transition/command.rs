//! The commands of the replicated log and what applying one returns.
//!
//! The log outlives binaries, so [`Command`] is versioned and its postcard
//! encoding is a compatibility promise: add variants at the end of
//! [`CommandV1`] or start a `V2`, never reorder.

use gpumon_proto::{Hello, PushBatch, PushBatchV2};
use serde::{Deserialize, Serialize};

use crate::actions::{ActionRequest, IssueOutcome, IssueRules};
use crate::notify::NotifiedEntry;
use crate::settings::SettingsChange;

/// One entry of the replicated log. Versioned: the log outlives binaries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Log format version 1.
    V1(CommandV1),
}

/// The commands of log format version 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CommandV1 {
    /// An agent said hello.
    Hello(Hello),
    /// An agent pushed windows, hook records and action acknowledgements.
    Push(PushBatch),
    /// Issue actions (the leader's planner or an admin), with the
    /// proposer's timing rules.
    IssueActions {
        /// One request per rank.
        requests: Vec<ActionRequest>,
        /// Expiry and rate limit.
        rules: IssueRules,
    },
    /// The agent on `node` pulled these actions (the leader hands them out
    /// in its reply to that agent's push).
    DeliverActions {
        /// The agent's node.
        node: String,
        /// The actions handed out.
        ids: Vec<u64>,
    },
    /// The leader's notifier sent these notifications (receivers accepted
    /// them) at `at_ms` of the leader's wall clock, carried here so every
    /// replica records the same instant.
    Notified {
        /// What was sent, per receiver and alert key.
        entries: Vec<NotifiedEntry>,
        /// The leader's clock, ms since the Unix epoch.
        at_ms: u64,
    },
    /// Forget what has been quiet for `stale_after_ms` of data time (the
    /// leader proposes it on a timer; see `cluster::expiry`).
    Expire {
        /// How long an agent, GPU or ended job may stay quiet.
        stale_after_ms: u64,
    },
    /// An agent pushed windows with the Kubernetes placement of their
    /// processes and the node's host memory (protocol version 2). The
    /// leader proposes it only for a push that carries either,
    /// [`CommandV1::Push`] otherwise ([`CommandV1::for_push`]).
    PushPlaced(PushBatchV2),
    /// Agents' pushes that reached the leader together, proposed as one
    /// entry so Raft's cost per entry is paid once for all of them. Applied
    /// in order, each exactly as an entry of its own; [`CommandResult::each`]
    /// holds their results in the same order. Holds only
    /// [`CommandV1::Push`] and [`CommandV1::PushPlaced`] (anything else in
    /// it is skipped, with a default result), at most
    /// [`MAX_PUSHES_PER_BATCH`].
    Batch(Vec<CommandV1>),
    /// An admin changed the live settings (`settings`): checked before it
    /// was proposed and again where it is applied, which refuses it whole
    /// when it does not fit the state it meets.
    Settings(SettingsChange),
}

/// Most pushes the leader puts in one [`CommandV1::Batch`].
pub const MAX_PUSHES_PER_BATCH: usize = 256;

impl CommandV1 {
    /// The command for a push, as a leader proposes it:
    /// [`CommandV1::PushPlaced`] when it carries placements or host memory,
    /// [`CommandV1::Push`] otherwise, so the log holds the newer command
    /// only where it is needed.
    pub fn for_push(pushed: PushBatchV2) -> Self {
        if pushed.placements.is_empty() && pushed.host.is_none() {
            Self::Push(pushed.batch)
        } else {
            Self::PushPlaced(pushed)
        }
    }
}

/// What applying a command did, returned to the proposer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CommandResult {
    /// The batch had been applied before.
    pub duplicate: bool,
    /// The batch's seq ran too far past its incarnation's last one
    /// ([`crate::limits::MAX_SEQ_GAP`]); nothing of it was applied.
    #[serde(default)]
    pub refused: bool,
    /// Windows applied.
    pub windows_applied: u32,
    /// Windows skipped as invalid.
    pub windows_skipped: u32,
    /// What became of each request of an `IssueActions`, in order.
    pub issued: Vec<IssueOutcome>,
    /// The result of each push of a [`CommandV1::Batch`], in order.
    #[serde(default)]
    pub each: Vec<CommandResult>,
    /// Why a [`CommandV1::Settings`] change was refused, if it was.
    #[serde(default)]
    pub settings_refused: Option<String>,
}
