//! The bounds every gpumon process applies to what it is sent, written once.
//!
//! The agent checks its hooks' records and its own discovery against these,
//! the coordinator's state checks pushed windows and records against the
//! same numbers, and the trace reader believes no more bytes than they do.
//! The Python hook mirrors the record limits in `gpumon/_settings.py`; the
//! agent's tests parse that file and fail when a number differs.
//!
//! Two kinds of names with two limits, on purpose: an identity (job, node,
//! agent, GPU) may be up to [`MAX_NAME_BYTES`] (256, a torchrun run id or a
//! `MASTER_ADDR:PORT` fits), a label the user writes in a training script
//! (marker, snapshot, section) up to [`MAX_LABEL_BYTES`] (128): labels go
//! into every alert and dashboard row that names them.
//!
//! A rank's Kubernetes placement has the shapes Kubernetes gives it: a pod
//! name of up to [`MAX_POD_NAME_BYTES`], namespace and container names of
//! up to [`MAX_DNS_LABEL_BYTES`], a pod UID of [`POD_UID_BYTES`] and a
//! container id of [`CONTAINER_ID_BYTES`] (`cluster::check_placement`).
//!
//! Sections, three bounds on purpose: a step record may carry up to
//! [`MAX_SECTIONS`] (32, what the hook and agent have always accepted); the
//! coordinator keeps the times of at most 16 section names per rank
//! ([`crate::hook_records::MAX_SECTIONS_PER_RANK`], which `/metrics` shows in
//! full); the straggler detector compares at most 8 names per job
//! ([`crate::engine::straggler::MAX_SECTIONS`]). The later ones bound
//! state, not input, so a record is never refused for them.

/// Longest job, node, agent or GPU name, bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest pod name, bytes: a Kubernetes object name (a DNS subdomain).
pub const MAX_POD_NAME_BYTES: usize = 253;
/// Longest namespace or container name, bytes: a DNS label.
pub const MAX_DNS_LABEL_BYTES: usize = 63;
/// Length of a pod UID with its dashes, bytes.
pub const POD_UID_BYTES: usize = 36;
/// Length of a container id (containerd, CRI-O, Docker), hex digits.
pub const CONTAINER_ID_BYTES: usize = 64;
/// Longest marker, snapshot or section name in a hook record, bytes.
pub const MAX_LABEL_BYTES: usize = 128;
/// Longest free-text detail of a marker, bytes.
pub const MAX_DETAIL_BYTES: usize = 1024;
/// Most sections in one step record.
pub const MAX_SECTIONS: usize = 32;
/// Most process groups in one step record's collective waits (the hook
/// sends its 8 longest).
pub const MAX_WAIT_GROUPS: usize = 8;
/// Most collective calls believed in one process group in one step.
pub const MAX_WAIT_CALLS: u32 = 1 << 20;
/// Largest world size believed (about a million ranks); a rank is below it.
pub const MAX_WORLD_SIZE: u32 = 1 << 20;
/// Largest device capacity or allocator byte count believed (1 PiB).
pub const MAX_DEVICE_BYTES: u64 = 1 << 50;
/// Longest step or section believed, ms (one day).
pub const MAX_STEP_MS: f64 = 86_400_000.0;

/// Furthest a pushed batch's `seq` may run ahead of the last seq applied for
/// its `(agent, incarnation)`. An agent's seqs count what it sent, so its
/// next one is the last applied plus one; the slack, four times the
/// agent's default buffer (`max_buffered_batches`, 1024), covers agents
/// from before that rule, whose dropped batches used up seqs, through
/// several full buffers of outage. A forged seq can shadow at most this
/// many of the real agent's batches (about two hours at 2 s windows)
/// instead of all of them.
pub const MAX_SEQ_GAP: u64 = 4_096;
/// Furthest a pushed time (window start and end, hook record) may lie
/// ahead of the leader's wall clock, ms. Five minutes is far beyond any
/// NTP-kept host's skew and short enough that a window from the future
/// cannot make every other agent look stale for long.
pub const MAX_FUTURE_SKEW_MS: u64 = 5 * 60_000;
/// Earliest pushed time believed, ms since the Unix epoch (2020-01-01
/// UTC): an agent before it has no clock set.
pub const MIN_PUSH_TIME_MS: u64 = 1_577_836_800_000;
/// Furthest one window may move the cluster's clock (newest applied window
/// end) ahead, ms. The state reads no wall clock, so this is how far a
/// window from a log written before the leader checked times can push
/// "now": a window further ahead is skipped and counted, and moves the
/// clock by this much only, so a cluster whose agents all stopped for a
/// while still catches up, a few windows at a time.
pub const MAX_CLOCK_LEAP_MS: u64 = 10 * 60_000;

/// The longest prefix of `s` within `max` bytes that ends on a character
/// boundary: how a text over its limit is cut.
pub fn prefix_within(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::prefix_within;

    #[test]
    fn a_prefix_ends_on_a_character_boundary() {
        assert_eq!(prefix_within("abc", 5), "abc");
        assert_eq!(prefix_within("abc", 2), "ab");
        assert_eq!(prefix_within("aé", 2), "a", "é is two bytes");
        assert_eq!(prefix_within("é", 0), "");
    }
}
