//! How fast the Raft group moves: the heartbeat, the election timeout, how
//! much one AppendEntries carries and how long a snapshot chunk may take.
//! The node hands these to openraft; the pre-vote round
//! ([`super::election`]) and a leader's step-down ([`super::standing`]) time
//! themselves by the same election timeout.

/// Leader heartbeat period, ms.
pub const HEARTBEAT_MS: u64 = 100;
/// Entries one AppendEntries call carries at most (openraft's default: 300).
pub const MAX_ENTRIES_PER_APPEND: u64 = 16;
/// Election timeout range, ms: a dead leader is replaced within about a second.
pub const ELECTION_TIMEOUT_MS: (u64, u64) = (400, 800);
/// Time allowed to send one snapshot chunk and, for the last, to install the
/// whole snapshot on the peer (decode and swap in), ms.
pub const SNAPSHOT_CHUNK_TIMEOUT_MS: u64 = 10_000;
