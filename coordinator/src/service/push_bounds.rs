//! The bounds a decoded push must keep before the leader proposes it.
//!
//! Three layers share the work, each doing what only it can:
//!
//! - **here, the leader, before the log**: sizes (windows, hook records,
//!   acks per batch, no more placements than the windows have processes); the seq against the last one applied for the
//!   batch's `(agent, incarnation)` (0 is no seq, more than
//!   [`MAX_SEQ_GAP`] ahead is refused; an incarnation the state does not
//!   remember takes any seq but 0, having no history to poison); every time the batch carries
//!   (window start and end, hook record, host memory) against the leader's wall clock:
//!   at most [`MAX_FUTURE_SKEW_MS`] ahead, not before [`MIN_PUSH_TIME_MS`];
//!   a version 2 push's host memory: some RAM, no more in use than there is.
//!   A refusal is a 400 that names the field, the value and the bound, and
//!   nothing reaches the log. A seq at or below the last applied one passes
//!   untouched: it is a re-send, acknowledged as a duplicate.
//! - **the transition** (`gpumon_core::cluster`, the same on every
//!   replica, no clock): it refuses and counts the same seq gap (an entry
//!   from a log written before these checks, or two pushes racing here),
//!   and skips and counts a window that would move its own clock more than
//!   `MAX_CLOCK_LEAP_MS` ahead.
//! - **the agent** (`gpumon_agent::uplink`): a 4xx is final; it counts the
//!   refused batch, logs the reason and sends the next one.

use gpumon_core::limits::{MAX_FUTURE_SKEW_MS, MAX_SEQ_GAP, MIN_PUSH_TIME_MS};
use gpumon_proto::{HostMemory, ProcPlacement, PushBatch};

/// Most windows accepted in one push.
pub const MAX_WINDOWS_PER_PUSH: usize = 4_096;
/// Most hook records one push may carry.
pub const MAX_HOOK_RECORDS_PER_PUSH: usize = 65_536;
/// Most action acknowledgements one push may carry.
pub const MAX_ACKS_PER_PUSH: usize = 4096;

/// Why a decoded push was refused: the bound it broke, in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PushRefused {
    /// Which kind of bound.
    pub kind: Refusal,
    /// The field, its value and the bound.
    pub message: String,
}

impl PushRefused {
    pub(super) fn new(kind: Refusal, message: String) -> Self {
        Self { kind, message }
    }
}

/// The kinds of bound a push can break (the counters of refused pushes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// More windows, hook records or acks than one batch may carry.
    TooMany,
    /// A seq or a time outside what the agent's history and the leader's
    /// clock allow (`service::push_bounds`).
    OutOfBounds,
}

/// Checks the batch's sizes.
pub(super) fn check_sizes(batch: &PushBatch) -> Result<(), PushRefused> {
    if batch.windows.len() > MAX_WINDOWS_PER_PUSH {
        return Err(PushRefused::new(
            Refusal::TooMany,
            format!(
                "push has {} windows; at most {MAX_WINDOWS_PER_PUSH} are accepted in one batch",
                batch.windows.len()
            ),
        ));
    }
    if batch.hook.len() > MAX_HOOK_RECORDS_PER_PUSH || batch.acks.len() > MAX_ACKS_PER_PUSH {
        return Err(PushRefused::new(
            Refusal::TooMany,
            format!(
                "push has {} hook records and {} acks; at most {MAX_HOOK_RECORDS_PER_PUSH} and {MAX_ACKS_PER_PUSH} are accepted in one batch",
                batch.hook.len(),
                batch.acks.len()
            ),
        ));
    }
    Ok(())
}

/// Checks that a version 2 push has no more placements than its windows
/// have processes: each placement is of one of them.
pub(super) fn check_placements(
    batch: &PushBatch,
    placements: &[ProcPlacement],
) -> Result<(), PushRefused> {
    let procs: usize = batch.windows.iter().map(|w| w.procs.len()).sum();
    if placements.len() > procs {
        return Err(PushRefused::new(
            Refusal::TooMany,
            format!(
                "push has {} placements for {procs} processes; at most one per process is accepted",
                placements.len()
            ),
        ));
    }
    Ok(())
}

/// Checks the seq against `last`, the last one applied for the batch's
/// incarnation (0: its hello alone; `None`: not remembered, so any seq but
/// 0 starts it: there is no history to poison).
pub(super) fn check_seq(batch: &PushBatch, last: Option<u64>) -> Result<(), PushRefused> {
    let bound = last.map_or(u64::MAX, |last| last.saturating_add(MAX_SEQ_GAP));
    if batch.seq == 0 || batch.seq > bound {
        let last = last.unwrap_or(0);
        return Err(PushRefused::new(
            Refusal::OutOfBounds,
            format!(
                "seq {} of agent {:?} incarnation {} is out of bounds: the last applied is {last}, so it must be 1 to {bound}",
                batch.seq, batch.agent_id, batch.incarnation
            ),
        ));
    }
    Ok(())
}

/// Checks every time in the batch against `wall_ms`, the leader's clock.
pub(super) fn check_times(batch: &PushBatch, wall_ms: u64) -> Result<(), PushRefused> {
    let windows = batch.windows.iter().enumerate().flat_map(|(i, w)| {
        [
            ("windows", i, "start_ms", w.start_ms),
            ("windows", i, "end_ms", w.end_ms),
        ]
    });
    let hook = (batch.hook.iter().enumerate()).map(|(i, r)| ("hook", i, "t_ms", r.t_ms()));
    for (list, i, name, t) in windows.chain(hook) {
        check_time(&format!("{list}[{i}].{name}"), t, wall_ms)?;
    }
    Ok(())
}

/// Checks a version 2 push's host memory: its time against `wall_ms` as
/// [`check_times`] does, and its sizes (`gpumon_core::cluster::check_host`).
pub(super) fn check_host(
    batch: &PushBatch,
    host: &HostMemory,
    wall_ms: u64,
) -> Result<(), PushRefused> {
    check_time("host.t_ms", host.t_ms, wall_ms)?;
    gpumon_core::cluster::check_host(host).map_err(|e| {
        PushRefused::new(
            Refusal::OutOfBounds,
            format!("{e} (agent {:?}, node {:?})", batch.agent_id, batch.node),
        )
    })
}

/// Checks one time, named `what`, against `wall_ms`.
fn check_time(what: &str, t: u64, wall_ms: u64) -> Result<(), PushRefused> {
    let latest = wall_ms.saturating_add(MAX_FUTURE_SKEW_MS);
    if t > latest {
        return Err(PushRefused::new(
            Refusal::OutOfBounds,
            format!(
                "{what} {t} is {} ms ahead of the coordinator's clock ({wall_ms}); at most {MAX_FUTURE_SKEW_MS} ms is accepted",
                t - wall_ms
            ),
        ));
    }
    if t < MIN_PUSH_TIME_MS {
        return Err(PushRefused::new(
            Refusal::OutOfBounds,
            format!("{what} {t} is before {MIN_PUSH_TIME_MS} (2020-01-01 UTC): is the agent's clock set?"),
        ));
    }
    Ok(())
}
