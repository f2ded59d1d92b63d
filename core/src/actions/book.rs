//! The replicated book of actions: issue, deliver, acknowledge, expire.
//!
//! Rules that hold whoever proposes (a planner on any leader, an admin):
//! a rank has at most one outstanding action of a kind (a second request
//! answers the first one's id); the planner may not issue to a rank again
//! within `min_interval_s` of its previous action; an action not finished
//! within `ttl_s` expires, and so does one whose rank has ended.
//!
//! The entries ([`ActionEntry`]) and their states are the core's own
//! (`entry.rs`); `GET /api/v1/actions` converts them to the API's.

use std::collections::{BTreeMap, BTreeSet};

pub use super::entry::{ActionEntry, ActionOrigin, ActionState, IssueOutcome};
use gpumon_proto::{ActionAck, ActionKind, ActionOutcome, PendingAction};
use serde::{Deserialize, Serialize};

/// Actions kept, finished ones included; the oldest finished go first.
pub const MAX_ACTIONS_KEPT: usize = 4096;
/// Longest reason, detail or callback response kept, bytes.
const MAX_TEXT_BYTES: usize = 1024;
/// Ranks whose last planned action time is remembered.
const MAX_RATE_ENTRIES: usize = 16_384;

/// Whether the planner's minimum interval applies to the kind: cache
/// releases, not evidence dumps (once per hang episode, `plan_dumps`).
fn rate_limited(kind: ActionKind) -> bool {
    kind == ActionKind::ReleaseCache
}

/// A request to act on one rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionRequest {
    /// What to do.
    pub kind: ActionKind,
    /// Target job.
    pub job: String,
    /// Target rank.
    pub rank: u32,
    /// Why, for the user's callback, the API and the logs.
    pub reason: String,
    /// Who asked.
    pub origin: ActionOrigin,
}

/// Timing rules, carried in the command that issues, so every replica
/// applies the proposer's values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IssueRules {
    /// An action not finished this long after it was issued expires, seconds.
    pub ttl_s: f64,
    /// The planner issues to a rank at most once per this many seconds.
    pub min_interval_s: f64,
}

impl Default for IssueRules {
    fn default() -> Self {
        Self {
            ttl_s: 120.0,
            min_interval_s: 600.0,
        }
    }
}

/// Where the target rank is, as the cluster view knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankPlace<'a> {
    /// Running on this node.
    Live {
        /// Its node.
        node: &'a str,
    },
    /// Its process has gone.
    Ended,
    /// Never seen.
    Unknown,
}

/// Counts of transitions since the book began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionCounters {
    /// Actions issued.
    pub issued: u64,
    /// Acknowledgements ignored: unknown id, already final, or from another node.
    pub acks_ignored: u64,
}

/// The book; see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionBook {
    next_id: u64,
    entries: BTreeMap<u64, ActionEntry>,
    outstanding: BTreeSet<u64>,
    last_planned: BTreeMap<(String, u32), f64>,
    counters: ActionCounters,
}

impl Default for ActionBook {
    fn default() -> Self {
        Self {
            next_id: 1,
            entries: BTreeMap::new(),
            outstanding: BTreeSet::new(),
            last_planned: BTreeMap::new(),
            counters: ActionCounters::default(),
        }
    }
}

fn clip(text: &str) -> String {
    if text.len() <= MAX_TEXT_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

impl ActionBook {
    /// Every kept action, oldest first.
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &ActionEntry> {
        self.entries.values()
    }

    /// One action.
    pub fn get(&self, id: u64) -> Option<&ActionEntry> {
        self.entries.get(&id)
    }

    /// Transition counters.
    pub fn counters(&self) -> ActionCounters {
        self.counters
    }

    /// Kept actions per state.
    pub fn count_by_state(&self) -> BTreeMap<ActionState, u64> {
        let mut out: BTreeMap<ActionState, u64> =
            ActionState::ALL.iter().map(|s| (*s, 0)).collect();
        for e in self.entries.values() {
            *out.entry(e.state).or_default() += 1;
        }
        out
    }

    /// The outstanding action of this kind on this rank.
    fn outstanding_on_rank(&self, kind: ActionKind, job: &str, rank: u32) -> Option<u64> {
        self.outstanding.iter().copied().find(|id| {
            self.entries
                .get(id)
                .is_some_and(|e| e.kind == kind && e.rank == rank && e.job == job)
        })
    }

    /// Whether the planner may issue `kind` to this rank at `t`.
    pub fn may_plan(
        &self,
        kind: ActionKind,
        job: &str,
        rank: u32,
        t: f64,
        rules: &IssueRules,
    ) -> bool {
        self.outstanding_on_rank(kind, job, rank).is_none()
            && (!rate_limited(kind)
                || self
                    .last_planned
                    .get(&(job.to_owned(), rank))
                    .is_none_or(|last| t >= last + rules.min_interval_s))
    }

    /// Issues one request at data time `t`.
    pub fn issue(
        &mut self,
        t: f64,
        req: &ActionRequest,
        rules: &IssueRules,
        place: RankPlace<'_>,
    ) -> IssueOutcome {
        let node = match place {
            RankPlace::Unknown => return IssueOutcome::UnknownRank,
            RankPlace::Live { node } => Some(node.to_owned()),
            RankPlace::Ended => None,
        };
        if let Some(id) = self.outstanding_on_rank(req.kind, &req.job, req.rank) {
            return IssueOutcome::Existing { id };
        }
        let key = (req.job.clone(), req.rank);
        if req.origin == ActionOrigin::Planner && rate_limited(req.kind) {
            if let Some(last) = self.last_planned.get(&key) {
                if t < last + rules.min_interval_s {
                    return IssueOutcome::RateLimited {
                        next_t: last + rules.min_interval_s,
                    };
                }
            }
        }
        if !self.make_room() {
            return IssueOutcome::Full;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.counters.issued += 1;
        let ended = node.is_none();
        let mut entry = ActionEntry {
            id,
            kind: req.kind,
            job: req.job.clone(),
            rank: req.rank,
            origin: req.origin,
            reason: clip(&req.reason),
            state: ActionState::Planned,
            node,
            planned_t: t,
            expires_t: t + rules.ttl_s.max(0.0),
            delivered_t: None,
            finished_t: None,
            freed_bytes: None,
            at_step: None,
            detail: None,
            response: None,
        };
        if ended {
            entry.state = ActionState::Expired;
            entry.finished_t = Some(t);
            entry.detail = Some(format!("rank {} of {} has ended", req.rank, req.job));
        } else {
            self.outstanding.insert(id);
            if req.origin == ActionOrigin::Planner && rate_limited(req.kind) {
                self.last_planned.insert(key, t);
                self.trim_rate_entries();
            }
        }
        self.entries.insert(id, entry);
        if ended {
            IssueOutcome::Expired { id }
        } else {
            IssueOutcome::Issued { id }
        }
    }

    /// Drops the oldest finished action when the book is full; false when
    /// every slot is outstanding.
    fn make_room(&mut self) -> bool {
        while self.entries.len() >= MAX_ACTIONS_KEPT {
            let oldest_final = self
                .entries
                .iter()
                .find(|(_, e)| e.state.is_final())
                .map(|(id, _)| *id);
            match oldest_final {
                Some(id) => {
                    self.entries.remove(&id);
                }
                None => return false,
            }
        }
        true
    }

    fn trim_rate_entries(&mut self) {
        while self.last_planned.len() > MAX_RATE_ENTRIES {
            let oldest = self
                .last_planned
                .iter()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.last_planned.remove(&k);
                }
                None => break,
            }
        }
    }

    /// The outstanding actions an agent on `node` should hand to its processes.
    pub fn outstanding_on(&self, node: &str) -> Vec<&ActionEntry> {
        self.outstanding
            .iter()
            .filter_map(|id| self.entries.get(id))
            .filter(|e| e.node.as_deref() == Some(node))
            .collect()
    }

    /// The outstanding actions on `node` as its hooks get them, and the ids
    /// of those not handed out yet (whose delivery is to be recorded).
    pub fn hand_out(&self, node: &str) -> (Vec<u64>, Vec<PendingAction>) {
        let out = self.outstanding_on(node);
        let planned = out
            .iter()
            .filter(|a| a.state == ActionState::Planned)
            .map(|a| a.id)
            .collect();
        let pending = out
            .iter()
            .map(|a| PendingAction {
                id: a.id,
                job: a.job.clone(),
                rank: a.rank,
                kind: a.kind,
                reason: a.reason.clone(),
            })
            .collect();
        (planned, pending)
    }

    /// True when some action waits for an agent on `node` to pull it.
    pub fn has_planned_on(&self, node: &str) -> bool {
        self.outstanding_on(node)
            .iter()
            .any(|e| e.state == ActionState::Planned)
    }

    /// Records that the agent on `node` pulled these actions; returns how
    /// many moved from planned to delivered.
    pub fn deliver(&mut self, node: &str, ids: &[u64], t: f64) -> usize {
        let mut moved = 0;
        for id in ids {
            if let Some(e) = self.entries.get_mut(id) {
                if e.state == ActionState::Planned && e.node.as_deref() == Some(node) {
                    e.state = ActionState::Delivered;
                    e.delivered_t = Some(t);
                    moved += 1;
                }
            }
        }
        moved
    }

    /// Applies an agent's acknowledgement; false (and counted) when ignored.
    pub fn ack(&mut self, node: &str, ack: &ActionAck, t: f64) -> bool {
        let Some(e) = self.entries.get_mut(&ack.id) else {
            self.counters.acks_ignored += 1;
            return false;
        };
        if e.state.is_final() || e.node.as_deref() != Some(node) {
            self.counters.acks_ignored += 1;
            return false;
        }
        e.delivered_t.get_or_insert(t);
        e.finished_t = Some(t);
        e.response = ack.response.as_deref().map(clip);
        match &ack.outcome {
            ActionOutcome::Done {
                freed_bytes,
                at_step,
            } => {
                e.state = ActionState::Done;
                e.freed_bytes = Some(*freed_bytes);
                e.at_step = *at_step;
            }
            ActionOutcome::Failed { reason } => {
                e.state = ActionState::Failed;
                e.detail = Some(clip(reason));
            }
        }
        self.outstanding.remove(&ack.id);
        true
    }

    /// Expires outstanding actions past their deadline at `t` or whose rank
    /// has ended; returns how many.
    pub fn expire<'a>(&mut self, t: f64, place_of: impl Fn(&str, u32) -> RankPlace<'a>) -> usize {
        let mut gone = Vec::new();
        for id in &self.outstanding {
            let Some(e) = self.entries.get(id) else {
                gone.push((*id, None));
                continue;
            };
            if t > e.expires_t {
                gone.push((*id, Some("not carried out in time".to_owned())));
            } else if matches!(
                place_of(&e.job, e.rank),
                RankPlace::Ended | RankPlace::Unknown
            ) {
                gone.push((*id, Some(format!("rank {} of {} has ended", e.rank, e.job))));
            }
        }
        let n = gone.len();
        for (id, why) in gone {
            self.outstanding.remove(&id);
            if let (Some(e), Some(why)) = (self.entries.get_mut(&id), why) {
                e.state = ActionState::Expired;
                e.finished_t = Some(t);
                e.detail = Some(why);
            }
        }
        n
    }

    /// True when nothing is outstanding (apply can skip expiry checks).
    pub fn nothing_outstanding(&self) -> bool {
        self.outstanding.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(rank: u32, origin: ActionOrigin) -> ActionRequest {
        ActionRequest {
            kind: ActionKind::ReleaseCache,
            job: "j".into(),
            rank,
            reason: "test".into(),
            origin,
        }
    }

    const LIVE: RankPlace<'static> = RankPlace::Live { node: "n0" };

    fn done(id: u64, freed: u64) -> ActionAck {
        ActionAck {
            id,
            t_ms: 0,
            outcome: ActionOutcome::Done {
                freed_bytes: freed,
                at_step: Some(7),
            },
            response: Some("ok".into()),
        }
    }

    #[test]
    fn an_action_goes_planned_delivered_done() {
        let mut b = ActionBook::default();
        let rules = IssueRules::default();
        let IssueOutcome::Issued { id } = b.issue(10.0, &req(1, ActionOrigin::Admin), &rules, LIVE)
        else {
            panic!("not issued")
        };
        assert_eq!(b.outstanding_on("n0").len(), 1);
        assert!(
            b.outstanding_on("n1").is_empty(),
            "only the rank's node gets it"
        );
        assert!(b.has_planned_on("n0"));
        assert_eq!(
            b.deliver("n1", &[id], 11.0),
            0,
            "another node cannot pull it"
        );
        assert_eq!(b.deliver("n0", &[id], 11.0), 1);
        assert!(!b.has_planned_on("n0"));
        assert!(b.ack("n0", &done(id, 1 << 30), 12.0));
        let e = b.get(id).unwrap();
        assert_eq!(e.state, ActionState::Done);
        assert_eq!(e.freed_bytes, Some(1 << 30));
        assert_eq!(e.at_step, Some(7));
        assert_eq!(e.response.as_deref(), Some("ok"));
        assert!(
            !b.ack("n0", &done(id, 5), 13.0),
            "a second ack changes nothing"
        );
        assert_eq!(b.get(id).unwrap().freed_bytes, Some(1 << 30));
        assert_eq!(b.counters().acks_ignored, 1);
        assert!(b.nothing_outstanding());
    }

    #[test]
    fn one_outstanding_action_per_rank_and_the_planner_is_rate_limited() {
        let mut b = ActionBook::default();
        let rules = IssueRules {
            ttl_s: 60.0,
            min_interval_s: 300.0,
        };
        let IssueOutcome::Issued { id } =
            b.issue(0.0, &req(2, ActionOrigin::Planner), &rules, LIVE)
        else {
            panic!()
        };
        assert_eq!(
            b.issue(1.0, &req(2, ActionOrigin::Planner), &rules, LIVE),
            IssueOutcome::Existing { id },
            "a new leader proposing again gets the same action"
        );
        assert_eq!(
            b.issue(1.0, &req(2, ActionOrigin::Admin), &rules, LIVE),
            IssueOutcome::Existing { id }
        );
        assert!(b.ack("n0", &done(id, 1), 5.0));
        assert!(!b.may_plan(ActionKind::ReleaseCache, "j", 2, 100.0, &rules));
        assert_eq!(
            b.issue(100.0, &req(2, ActionOrigin::Planner), &rules, LIVE),
            IssueOutcome::RateLimited { next_t: 300.0 }
        );
        assert!(
            matches!(
                b.issue(100.0, &req(2, ActionOrigin::Admin), &rules, LIVE),
                IssueOutcome::Issued { .. }
            ),
            "an admin is not rate-limited once nothing is outstanding"
        );
        assert!(matches!(
            b.issue(100.0, &req(3, ActionOrigin::Planner), &rules, LIVE),
            IssueOutcome::Issued { .. }
        ));
    }

    #[test]
    fn actions_expire_after_the_ttl_or_when_the_rank_ends() {
        let mut b = ActionBook::default();
        let rules = IssueRules {
            ttl_s: 60.0,
            min_interval_s: 0.0,
        };
        let IssueOutcome::Issued { id: a } =
            b.issue(0.0, &req(0, ActionOrigin::Admin), &rules, LIVE)
        else {
            panic!()
        };
        let IssueOutcome::Issued { id: c } =
            b.issue(0.0, &req(1, ActionOrigin::Admin), &rules, LIVE)
        else {
            panic!()
        };
        let place = |_: &str, rank: u32| if rank == 1 { RankPlace::Ended } else { LIVE };
        assert_eq!(b.expire(30.0, place), 1);
        assert_eq!(b.get(c).unwrap().state, ActionState::Expired);
        assert!(b
            .get(c)
            .unwrap()
            .detail
            .as_deref()
            .unwrap()
            .contains("ended"));
        assert_eq!(b.get(a).unwrap().state, ActionState::Planned);
        assert_eq!(b.expire(61.0, place), 1);
        assert_eq!(b.get(a).unwrap().state, ActionState::Expired);
        assert!(
            !b.ack("n0", &done(a, 1), 62.0),
            "a late ack does not revive it"
        );
        assert_eq!(
            b.issue(70.0, &req(1, ActionOrigin::Admin), &rules, RankPlace::Ended),
            IssueOutcome::Expired { id: 3 },
            "an action for a rank that has gone expires at once"
        );
        assert_eq!(
            b.issue(
                70.0,
                &req(9, ActionOrigin::Admin),
                &rules,
                RankPlace::Unknown
            ),
            IssueOutcome::UnknownRank
        );
        let counts = b.count_by_state();
        assert_eq!(counts[&ActionState::Expired], 3);
        assert_eq!(counts[&ActionState::Done], 0);
    }

    #[test]
    fn the_book_is_bounded_and_keeps_outstanding_actions() {
        let mut b = ActionBook::default();
        let rules = IssueRules::default();
        for rank in 0..MAX_ACTIONS_KEPT as u32 {
            let IssueOutcome::Issued { id } =
                b.issue(0.0, &req(rank, ActionOrigin::Admin), &rules, LIVE)
            else {
                panic!()
            };
            if rank > 0 {
                b.ack("n0", &done(id, 1), 1.0);
            }
        }
        assert!(matches!(
            b.issue(2.0, &req(99_999, ActionOrigin::Admin), &rules, LIVE),
            IssueOutcome::Issued { .. }
        ));
        assert_eq!(b.entries().count(), MAX_ACTIONS_KEPT);
        assert!(b.get(1).is_some(), "the outstanding action is kept");
        assert!(b.get(2).is_none(), "the oldest finished one went");
    }

    #[test]
    fn texts_are_clipped_on_a_char_boundary() {
        let long = "é".repeat(MAX_TEXT_BYTES);
        let c = clip(&long);
        assert!(c.len() <= MAX_TEXT_BYTES && c.chars().all(|ch| ch == 'é'));
    }
}
