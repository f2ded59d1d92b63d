//! The state every hook connection, the uplink and the hook GPU source share.
//!
//! [`HookHub`] holds the live sessions, the records and action acks waiting
//! for the next push, the actions and alerts waiting for their session's
//! `poll`, and the counters. It is an `Arc` around one `std::sync::Mutex`: every critical
//! section is a few map operations, never I/O and never across an `.await`,
//! so a blocking lock is cheaper than an async one and cannot stall a task
//! for long. The queues are bounded; past their capacity the oldest entry is
//! dropped and counted, so a coordinator outage or a chatty hook costs
//! bounded memory and never blocks a training process.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use gpumon_core::engine::hang::PROCESS_EXIT;
use gpumon_proto::{ActionAck, ActionOutcome, HookRecord, NodeAlert, PendingAction, StallRecord};
use tokio::sync::watch;

use super::alerts::{AlertQueue, HookAlert, PostedAlert};
use super::fields::cut;
use super::hub_error::HubError;
use super::records::{AllocReading, CheckedReport};
use super::relay::{hook_alert, Relayed};

/// Most live sessions (registered connections) at once.
pub const MAX_SESSIONS: usize = 1024;
/// Records kept for the next push; past it the oldest are dropped.
pub const MAX_QUEUED_RECORDS: usize = 16_384;
/// Action acks kept for the next push; past it the oldest are dropped.
pub const MAX_QUEUED_ACKS: usize = 4096;
/// Action ids remembered after they ended, so a re-sent action is ignored.
pub const MAX_FINISHED_ACTIONS: usize = 4096;
/// Actions waiting for one session's `poll`; more are failed at once.
pub const MAX_PENDING_ACTIONS_PER_SESSION: usize = 64;
/// Longest `response` or `detail` of an ack kept, bytes; longer ones are cut.
pub const MAX_ACK_TEXT_BYTES: usize = 1024;

/// Reason of the ack for an action whose process left before running it.
pub const DISCONNECTED_REASON: &str = "the training process disconnected before running it";

/// The CUDA device a hooked process uses, as it registered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookDevice {
    /// CUDA device index (as the process sees it).
    pub index: u32,
    /// NVML-style UUID (`GPU-...`), when the hook could read it.
    pub uuid: Option<String>,
    /// Product name.
    pub name: String,
    /// Device memory, bytes.
    pub total_bytes: u64,
}

/// What a `register` claims, once its fields are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The training process (in the agent's PID namespace where known).
    pub pid: u32,
    /// Job id.
    pub job: String,
    /// Global rank.
    pub rank: u32,
    /// Rank on this node.
    pub local_rank: u32,
    /// Ranks in the job.
    pub world_size: u32,
    /// The device, when CUDA is initialised.
    pub device: Option<HookDevice>,
}

/// One live session, as [`HookHub::sessions`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// Session id, unique for the agent's life.
    pub id: u64,
    /// What the process registered as.
    pub registration: Registration,
    /// When it registered, ms since the Unix epoch.
    pub connected_ms: u64,
    /// When it last reported, ms since the Unix epoch.
    pub last_report_ms: Option<u64>,
    /// Its newest `alloc` record.
    pub last_alloc: Option<AllocReading>,
    /// Its newest `alloc` record that carried both `device_used` and
    /// `device_total`.
    pub last_device: Option<AllocReading>,
    /// The number of its newest finished step.
    pub last_step: Option<u64>,
}

/// How a hooked process says an action ended (an `ack`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckReport {
    /// The action's id.
    pub id: u64,
    /// How it ended.
    pub outcome: ActionOutcome,
    /// What the user's callback answered.
    pub response: Option<String>,
}

/// Counters of the hook endpoint, since the hub was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HookStats {
    /// Sessions live now.
    pub sessions_live: u64,
    /// Sessions ever registered.
    pub sessions_opened: u64,
    /// Sessions ended because their process registered again on a new
    /// connection.
    pub sessions_taken_back: u64,
    /// Records accepted from reports.
    pub records_accepted: u64,
    /// Records skipped as invalid.
    pub records_skipped: u64,
    /// Accepted records dropped because the push queue was full.
    pub records_dropped: u64,
    /// Records waiting for the next push.
    pub records_queued: u64,
    /// Action acks dropped because their queue was full.
    pub acks_dropped: u64,
    /// Action acks waiting for the next push.
    pub acks_queued: u64,
    /// Requests refused (an `ok: false` answer).
    pub refused: u64,
    /// Connections closed for sending nothing past their deadline (no
    /// `register` within 10 s, or a session silent for 5 minutes).
    pub idle_closed: u64,
    /// Alerts queued for a session (one alert posted to a job of four live
    /// ranks counts four).
    pub alerts_queued: u64,
    /// Queued alerts dropped unread because their session's queue was full.
    pub alerts_dropped: u64,
    /// Alerts posted while no live session matched them.
    pub alerts_unmatched: u64,
    /// Loopback TCP connections whose process was not found (see
    /// `tcp_owner`): their claims were checked against the claimed
    /// process's environment only.
    pub tcp_peers_unknown: u64,
}

/// The hook endpoint's shared state; see the module docs.
#[derive(Debug)]
pub struct HookHub {
    agent_id: String,
    node: String,
    state: Mutex<State>,
    /// Bumped whenever sessions or the outgoing queues change, so tests and
    /// waiters can await a condition instead of sleeping.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    next_session: u64,
    sessions: BTreeMap<u64, Session>,
    by_rank: HashMap<(String, u32), u64>,
    records: VecDeque<HookRecord>,
    acks: VecDeque<ActionAck>,
    /// Action id → the session it waits for.
    pending: HashMap<u64, u64>,
    finished: VecDeque<u64>,
    finished_set: HashSet<u64>,
    relayed: Relayed,
    stats: HookStats,
}

#[derive(Debug)]
struct Session {
    info: SessionInfo,
    actions: Vec<PendingAction>,
    alerts: AlertQueue,
}

impl HookHub {
    /// An empty hub for the agent `agent_id` on `node` (both go back to
    /// the hook in the `register` answer).
    pub fn new(agent_id: &str, node: &str) -> Self {
        Self {
            agent_id: agent_id.to_owned(),
            node: node.to_owned(),
            state: Mutex::default(),
            changed: watch::Sender::new(0),
        }
    }

    /// The agent's id.
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves consistent maps
        // (every critical section is a handful of inserts), so keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that changes whenever a session opens or ends or
    /// something is queued for the uplink.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Opens a session. `Err` is the sentence to answer: another live
    /// session holds the same job and rank, or [`MAX_SESSIONS`] are open.
    ///
    /// `pid_verified`: the kernel says the claim's pid is the connecting
    /// process (a Unix socket, or a loopback TCP socket whose holder was
    /// found). Such a process takes back a session of its
    /// own pid that is still open (its old connection died without the
    /// agent seeing it close, or it forked and reconnected): the old one
    /// ends, as if its connection had closed.
    pub fn register(
        &self,
        claim: Registration,
        pid_verified: bool,
        now_ms: u64,
    ) -> Result<u64, HubError> {
        let key = (claim.job.clone(), claim.rank);
        let held = {
            let st = self.lock();
            st.by_rank
                .get(&key)
                .and_then(|id| st.sessions.get(id))
                .map(|other| (other.info.id, other.info.registration.pid))
        };
        match held {
            Some((old, pid)) if pid_verified && pid == claim.pid => {
                tracing::info!(session = old, pid, job = %claim.job, rank = claim.rank, "the hook reconnected: its old session ends");
                self.end_session(old, now_ms);
                self.lock().stats.sessions_taken_back += 1;
            }
            Some((session, _)) => {
                return Err(HubError::RankTaken {
                    rank: claim.rank,
                    job: claim.job,
                    session,
                });
            }
            None => {}
        }
        let mut st = self.lock();
        if st.sessions.len() >= MAX_SESSIONS {
            return Err(HubError::Full { max: MAX_SESSIONS });
        }
        st.next_session += 1;
        let id = st.next_session;
        st.by_rank.insert(key, id);
        let info = SessionInfo {
            id,
            registration: claim,
            connected_ms: now_ms,
            last_report_ms: None,
            last_alloc: None,
            last_device: None,
            last_step: None,
        };
        st.sessions.insert(
            id,
            Session {
                info,
                actions: Vec::new(),
                alerts: AlertQueue::default(),
            },
        );
        st.stats.sessions_opened += 1;
        drop(st);
        self.bump();
        Ok(id)
    }

    /// Replaces a live session's registration details (a second `register`
    /// on the same connection, e.g. once CUDA is initialised and the device
    /// is known). Job and rank must stay the same.
    pub fn update(&self, session: u64, claim: Registration) -> Result<(), HubError> {
        let mut st = self.lock();
        let Some(s) = st.sessions.get_mut(&session) else {
            return Err(HubError::Ended { session });
        };
        let old = &s.info.registration;
        if (old.job.as_str(), old.rank) != (claim.job.as_str(), claim.rank) {
            return Err(HubError::OtherRank {
                rank: old.rank,
                job: old.job.clone(),
            });
        }
        s.info.registration = claim;
        drop(st);
        self.bump();
        Ok(())
    }

    /// Queues a checked report's records for the next push and remembers the
    /// session's newest allocator reading.
    pub(crate) fn report(&self, session: u64, report: CheckedReport, now_ms: u64) {
        let mut guard = self.lock();
        let st = &mut *guard;
        if let Some(s) = st.sessions.get_mut(&session) {
            s.info.last_report_ms = Some(now_ms);
            if let Some(a) = report.newest_alloc {
                if s.info.last_alloc.is_none_or(|l| a.t_ms >= l.t_ms) {
                    s.info.last_alloc = Some(a);
                }
                let has_device = a.device_used.is_some() && a.device_total.is_some();
                if has_device && s.info.last_device.is_none_or(|l| a.t_ms >= l.t_ms) {
                    s.info.last_device = Some(a);
                }
            }
            let steps = report.records.iter().filter_map(|r| match r {
                HookRecord::Step(step) => Some(step.step),
                _ => None,
            });
            if let Some(newest) = steps.max() {
                s.info.last_step = Some(s.info.last_step.map_or(newest, |l| l.max(newest)));
            }
        }
        st.stats.records_accepted += report.records.len() as u64;
        st.stats.records_skipped += report.skipped;
        for record in report.records {
            st.queue_record(record);
        }
        drop(guard);
        self.bump();
    }

    /// The actions waiting for `session`, oldest first. They stay until acked.
    pub fn poll(&self, session: u64) -> Vec<PendingAction> {
        self.lock()
            .sessions
            .get(&session)
            .map(|s| s.actions.clone())
            .unwrap_or_default()
    }

    /// Posts `alert` to the live sessions of `job`: the one of `rank`, or
    /// every rank's when `rank` is `None`. Each gets it in the answer to
    /// its next `poll` (agent/python/PROTOCOL.md), and the hook hands it to
    /// the script's `gpumon.on_alert` callbacks at its next step boundary.
    /// Returns how many sessions it was queued for; 0 when none is live
    /// (nothing is kept for a session that registers later).
    pub fn post_alert(&self, job: &str, rank: Option<u32>, alert: HookAlert) -> usize {
        let posted = PostedAlert::new(job, rank, alert);
        let mut guard = self.lock();
        let st = &mut *guard;
        let mut queued = 0;
        let mut dropped = 0;
        let matching = st.sessions.values_mut().filter(|s| {
            let reg = &s.info.registration;
            reg.job == job && rank.is_none_or(|r| r == reg.rank)
        });
        for s in matching {
            queued += 1;
            dropped += u64::from(s.alerts.push(posted.clone()));
        }
        st.stats.alerts_queued += queued;
        st.stats.alerts_dropped += dropped;
        st.stats.alerts_unmatched += u64::from(queued == 0);
        drop(guard);
        tracing::debug!(%job, ?rank, sessions = queued, "alert posted to the hooks");
        queued as usize
    }

    /// Posts the alerts a coordinator sent about this node (see `relay`):
    /// to its rank, to its job's ranks when it names a job alone, or, about
    /// the node itself (its host, a GPU with no rank known), to every live
    /// job; each to each job once per severity, once a live session got
    /// it. Returns how many (alert, job) postings reached a session.
    pub fn relay_alerts(&self, alerts: &[NodeAlert]) -> usize {
        let news: Vec<(&NodeAlert, String)> = {
            let st = self.lock();
            let jobs: BTreeSet<&str> = st
                .sessions
                .values()
                .map(|s| s.info.registration.job.as_str())
                .collect();
            alerts
                .iter()
                .flat_map(|a| match &a.job {
                    Some(job) => vec![(a, job.clone())],
                    None => jobs.iter().map(|j| (a, (*j).to_owned())).collect(),
                })
                .filter(|(a, job)| st.relayed.is_news(a, job))
                .collect()
        };
        let mut reached = 0;
        for (a, job) in news {
            let rank = a.job.as_ref().and(a.rank);
            if self.post_alert(&job, rank, hook_alert(a)) > 0 {
                self.lock().relayed.posted(a, &job);
                reached += 1;
            }
        }
        reached
    }

    /// Takes the alerts waiting for `session`, oldest first (each is
    /// delivered once).
    pub fn take_alerts(&self, session: u64) -> Vec<PostedAlert> {
        self.lock()
            .sessions
            .get_mut(&session)
            .map(|s| s.alerts.take())
            .unwrap_or_default()
    }

    /// Ends the action `ack.id` of `session` and queues its ack. `Err` (the
    /// sentence to answer) when the session was not given that action.
    pub fn ack(&self, session: u64, ack: AckReport, now_ms: u64) -> Result<(), HubError> {
        let mut st = self.lock();
        let pos = st
            .sessions
            .get(&session)
            .and_then(|s| s.actions.iter().position(|a| a.id == ack.id));
        let Some(pos) = pos else {
            return Err(HubError::UnknownAction { id: ack.id });
        };
        if let Some(s) = st.sessions.get_mut(&session) {
            s.actions.remove(pos);
        }
        let AckReport {
            id,
            outcome,
            response,
        } = ack;
        st.end_action(ActionAck {
            id,
            t_ms: now_ms,
            outcome,
            response: response.map(|r| cut(r, MAX_ACK_TEXT_BYTES)),
        });
        drop(st);
        self.bump();
        Ok(())
    }

    /// Ends a session (its connection closed): frees its rank and fails
    /// its pending actions; returns what it was. Ending an unknown session
    /// does nothing.
    pub fn end_session(&self, session: u64, now_ms: u64) -> Option<SessionInfo> {
        let mut st = self.lock();
        let s = st.sessions.remove(&session)?;
        let reg = &s.info.registration;
        st.by_rank.remove(&(reg.job.clone(), reg.rank));
        for action in s.actions {
            st.end_action(failed(action.id, now_ms, DISCONNECTED_REASON.to_owned()));
        }
        drop(st);
        self.bump();
        Some(s.info)
    }

    /// Queues the agent's word that the process behind an ended session
    /// has exited: a stall report of source `process_exit`, so that the
    /// hang detector knows the rank's process is gone where no NVML sees
    /// it (a job on CPUs).
    pub fn process_exited(&self, ended: &SessionInfo, now_ms: u64) {
        let reg = &ended.registration;
        let record = HookRecord::Stall(StallRecord {
            t_ms: now_ms,
            job: reg.job.clone(),
            rank: reg.rank,
            step: ended.last_step.unwrap_or(0),
            quiet_ms: 0,
            source: PROCESS_EXIT.to_owned(),
            waiting: None,
            entered: Vec::new(),
            marker: None,
        });
        self.lock().queue_record(record);
        self.bump();
    }

    /// Takes actions from a coordinator's reply. Each action not already
    /// pending or recently ended is queued for the live session holding its
    /// job and rank; without one, it is failed at once (the ack goes out
    /// with the next push).
    pub fn offer_actions(&self, actions: Vec<PendingAction>, now_ms: u64) {
        if actions.is_empty() {
            return;
        }
        let mut st = self.lock();
        for action in actions {
            if st.pending.contains_key(&action.id) || st.finished_set.contains(&action.id) {
                continue;
            }
            let holder = st.by_rank.get(&(action.job.clone(), action.rank)).copied();
            let session = holder.and_then(|id| st.sessions.get_mut(&id));
            match session {
                Some(s) if s.actions.len() < MAX_PENDING_ACTIONS_PER_SESSION => {
                    tracing::debug!(action = action.id, session = s.info.id, job = %action.job, rank = action.rank, kind = action.kind.name(), "action queued for the hook");
                    let id = (action.id, s.info.id);
                    s.actions.push(action);
                    st.pending.insert(id.0, id.1);
                }
                Some(_) => {
                    let reason = format!(
                        "rank {} of job {} already has {MAX_PENDING_ACTIONS_PER_SESSION} actions waiting",
                        action.rank, action.job
                    );
                    st.end_action(failed(action.id, now_ms, reason));
                }
                None => {
                    let reason = format!(
                        "no gpumon hook is connected for rank {} of job {} on this node",
                        action.rank, action.job
                    );
                    tracing::debug!(action = action.id, job = %action.job, rank = action.rank, "no hook session for an action; failing it");
                    st.end_action(failed(action.id, now_ms, reason));
                }
            }
        }
        drop(st);
        self.bump();
    }

    /// Drains the records and acks waiting for the next push, oldest first.
    pub fn take_outgoing(&self) -> (Vec<HookRecord>, Vec<ActionAck>) {
        let mut st = self.lock();
        (st.records.drain(..).collect(), st.acks.drain(..).collect())
    }

    /// Counts a refused request.
    pub(crate) fn count_refused(&self) {
        self.lock().stats.refused += 1;
    }

    /// Counts a connection closed for idling past its deadline.
    pub(crate) fn count_idle_closed(&self) {
        self.lock().stats.idle_closed += 1;
    }

    /// Counts a loopback TCP connection whose process was not found.
    pub(crate) fn count_tcp_peer_unknown(&self) {
        self.lock().stats.tcp_peers_unknown += 1;
    }

    /// The live sessions, by id.
    pub fn sessions(&self) -> Vec<SessionInfo> {
        self.lock()
            .sessions
            .values()
            .map(|s| s.info.clone())
            .collect()
    }

    /// The counters now.
    pub fn stats(&self) -> HookStats {
        let st = self.lock();
        HookStats {
            sessions_live: st.sessions.len() as u64,
            records_queued: st.records.len() as u64,
            acks_queued: st.acks.len() as u64,
            ..st.stats
        }
    }
}

impl State {
    /// Queues a record for the next push, dropping the oldest (counted)
    /// when [`MAX_QUEUED_RECORDS`] wait already.
    fn queue_record(&mut self, record: HookRecord) {
        if self.records.len() >= MAX_QUEUED_RECORDS {
            self.records.pop_front();
            self.stats.records_dropped += 1;
        }
        self.records.push_back(record);
    }

    /// Records that an action ended and queues its ack.
    fn end_action(&mut self, ack: ActionAck) {
        self.pending.remove(&ack.id);
        if self.finished_set.insert(ack.id) {
            self.finished.push_back(ack.id);
            while self.finished.len() > MAX_FINISHED_ACTIONS {
                if let Some(old) = self.finished.pop_front() {
                    self.finished_set.remove(&old);
                }
            }
        }
        if self.acks.len() >= MAX_QUEUED_ACKS {
            self.acks.pop_front();
            self.stats.acks_dropped += 1;
        }
        self.acks.push_back(ack);
    }
}

fn failed(id: u64, t_ms: u64, reason: String) -> ActionAck {
    ActionAck {
        id,
        t_ms,
        outcome: ActionOutcome::Failed { reason },
        response: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::alerts::{HookAlertSeverity, MAX_PENDING_ALERTS_PER_SESSION};
    use super::super::relay::tests::alert as node_alert;
    use super::*;
    use gpumon_proto::api::Severity;
    use gpumon_proto::{ActionKind, AllocRecord, AllocStats};

    fn claim(job: &str, rank: u32) -> Registration {
        Registration {
            pid: 100 + rank,
            job: job.into(),
            rank,
            local_rank: rank,
            world_size: 8,
            device: None,
        }
    }

    fn action(id: u64, job: &str, rank: u32) -> PendingAction {
        PendingAction {
            id,
            job: job.into(),
            rank,
            kind: ActionKind::ReleaseCache,
            reason: "near OOM".into(),
        }
    }

    fn record(t_ms: u64) -> HookRecord {
        HookRecord::Alloc(AllocRecord {
            limit: None,
            t_ms,
            job: "j".into(),
            rank: 0,
            stats: AllocStats::default(),
        })
    }

    #[test]
    fn one_session_per_rank_and_a_session_cap() {
        let hub = HookHub::new("a", "n");
        let s = hub.register(claim("j", 0), false, 1).unwrap();
        let e = hub
            .register(claim("j", 0), false, 2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("already registered by session 1;") && !e.contains("100"),
            "{e}"
        );
        hub.register(claim("j", 1), false, 2).unwrap();
        hub.end_session(s, 3);
        hub.register(claim("j", 0), false, 4).unwrap();
        for r in 2..MAX_SESSIONS as u32 {
            hub.register(claim("k", r), false, 5).unwrap();
        }
        assert_eq!(hub.stats().sessions_live, MAX_SESSIONS as u64);
        let e = hub
            .register(claim("k", 0), false, 6)
            .unwrap_err()
            .to_string();
        assert!(e.contains("maximum of 1024 sessions"), "{e}");
    }

    #[test]
    fn a_process_the_kernel_vouches_for_takes_its_own_session_back() {
        let hub = HookHub::new("a", "n");
        let old = hub.register(claim("j", 0), true, 1).unwrap();
        hub.offer_actions(vec![action(7, "j", 0)], 1);
        // The same pid on a new connection, verified: the old session ends.
        let new = hub.register(claim("j", 0), true, 2).unwrap();
        assert_ne!(old, new);
        let live: Vec<u64> = hub.sessions().iter().map(|s| s.id).collect();
        assert_eq!(live, vec![new]);
        assert_eq!(hub.stats().sessions_taken_back, 1);
        // Another pid, or the same one unverified (a TCP peer whose process was not found), is still refused.
        let mut other = claim("j", 0);
        other.pid = 999;
        assert!(hub.register(other, true, 3).is_err());
        assert!(hub.register(claim("j", 0), false, 3).is_err());
    }

    #[test]
    fn updating_a_session_keeps_its_rank() {
        let hub = HookHub::new("a", "n");
        let s = hub.register(claim("j", 0), false, 1).unwrap();
        let mut with_device = claim("j", 0);
        with_device.device = Some(HookDevice {
            index: 0,
            uuid: None,
            name: "GPU".into(),
            total_bytes: 1,
        });
        hub.update(s, with_device.clone()).unwrap();
        assert_eq!(hub.sessions()[0].registration, with_device);
        let e = hub.update(s, claim("j", 1)).unwrap_err().to_string();
        assert!(e.contains("registered as rank 0"), "{e}");
    }

    #[test]
    fn queues_drop_the_oldest_and_count() {
        let hub = HookHub::new("a", "n");
        let s = hub.register(claim("j", 0), false, 1).unwrap();
        let report = CheckedReport {
            records: (0..MAX_QUEUED_RECORDS as u64 + 3).map(record).collect(),
            skipped: 2,
            ..CheckedReport::default()
        };
        hub.report(s, report, 9);
        let stats = hub.stats();
        assert_eq!(stats.records_dropped, 3);
        assert_eq!(stats.records_skipped, 2);
        assert_eq!(stats.records_queued, MAX_QUEUED_RECORDS as u64);
        let (records, acks) = hub.take_outgoing();
        assert_eq!(records[0].t_ms(), 3, "the oldest went");
        assert!(acks.is_empty());
        assert_eq!(hub.take_outgoing().0.len(), 0, "drained");
        assert_eq!(hub.sessions()[0].last_report_ms, Some(9));

        hub.offer_actions(
            (0..MAX_QUEUED_ACKS as u64 + 1)
                .map(|i| action(i, "x", 0))
                .collect(),
            1,
        );
        let stats = hub.stats();
        assert_eq!(
            (stats.acks_queued, stats.acks_dropped),
            (MAX_QUEUED_ACKS as u64, 1)
        );
    }

    #[test]
    fn actions_wait_for_their_session_and_end_once() {
        let hub = HookHub::new("a", "n");
        let s = hub.register(claim("j", 0), false, 1).unwrap();
        hub.offer_actions(vec![action(1, "j", 0), action(2, "j", 9)], 10);
        assert_eq!(hub.poll(s).iter().map(|a| a.id).collect::<Vec<_>>(), [1]);
        let (_, acks) = hub.take_outgoing();
        assert_eq!(acks.len(), 1);
        assert_eq!(acks[0].id, 2);
        assert_eq!(
            acks[0].outcome,
            ActionOutcome::Failed {
                reason: "no gpumon hook is connected for rank 9 of job j on this node".into()
            }
        );
        // Re-sent while pending or after it ended: ignored.
        hub.offer_actions(vec![action(1, "j", 0), action(2, "j", 0)], 11);
        assert_eq!(hub.poll(s).len(), 1);
        let done = AckReport {
            id: 1,
            outcome: ActionOutcome::Done {
                freed_bytes: 5,
                at_step: Some(7),
            },
            response: Some("r".repeat(MAX_ACK_TEXT_BYTES + 10)),
        };
        hub.ack(s, done.clone(), 12).unwrap();
        assert!(hub
            .ack(s, done, 13)
            .unwrap_err()
            .to_string()
            .contains("action 1 was not given"));
        assert!(hub.poll(s).is_empty());
        hub.offer_actions(vec![action(1, "j", 0)], 14);
        assert!(hub.poll(s).is_empty(), "an acked action is not re-queued");
        let (_, acks) = hub.take_outgoing();
        assert_eq!(acks.len(), 1);
        assert_eq!(acks[0].t_ms, 12);
        assert_eq!(acks[0].response.as_ref().unwrap().len(), MAX_ACK_TEXT_BYTES);
    }

    #[test]
    fn a_flood_of_actions_for_one_rank_is_bounded() {
        let hub = HookHub::new("a", "n");
        let s = hub.register(claim("j", 0), false, 1).unwrap();
        let n = MAX_PENDING_ACTIONS_PER_SESSION as u64 + 2;
        hub.offer_actions((0..n).map(|i| action(i, "j", 0)).collect(), 1);
        assert_eq!(hub.poll(s).len(), MAX_PENDING_ACTIONS_PER_SESSION);
        assert_eq!(hub.take_outgoing().1.len(), 2);
    }

    #[test]
    fn finished_ids_are_forgotten_past_the_bound() {
        let hub = HookHub::new("a", "n");
        let n = MAX_FINISHED_ACTIONS as u64 + 1;
        hub.offer_actions((0..n).map(|i| action(i, "x", 0)).collect(), 1);
        hub.take_outgoing();
        let s = hub.register(claim("x", 0), false, 1).unwrap();
        hub.offer_actions(vec![action(0, "x", 0), action(1, "x", 0)], 2);
        assert_eq!(hub.poll(s).iter().map(|a| a.id).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn ending_a_session_fails_its_actions() {
        let hub = HookHub::new("a", "n");
        let s = hub.register(claim("j", 0), false, 1).unwrap();
        hub.offer_actions(vec![action(4, "j", 0)], 2);
        let mut changes = hub.subscribe();
        changes.mark_unchanged();
        hub.end_session(s, 3);
        assert!(changes.has_changed().unwrap());
        hub.end_session(s, 4);
        let (_, acks) = hub.take_outgoing();
        assert_eq!(
            acks,
            [ActionAck {
                id: 4,
                t_ms: 3,
                outcome: ActionOutcome::Failed {
                    reason: DISCONNECTED_REASON.into()
                },
                response: None,
            }]
        );
        assert_eq!(hub.stats().sessions_live, 0);
    }

    fn alert(kind: &str) -> HookAlert {
        HookAlert {
            kind: kind.into(),
            severity: HookAlertSeverity::Warning,
            message: format!("{kind} seen"),
            t_ms: 5_000,
        }
    }

    #[test]
    fn relayed_alerts_reach_their_rank_their_job_or_every_job_once_per_severity() {
        let hub = HookHub::new("a", "n");
        let session = |job: &str, rank: u32| hub.register(claim(job, rank), false, 1).unwrap();
        let (j0, k0) = (session("j", 0), session("k", 0));
        let on_rank = NodeAlert {
            job: Some("j".into()),
            rank: Some(1),
            ..node_alert(7, Severity::Warning)
        };
        let on_job = NodeAlert {
            job: Some("k".into()),
            ..node_alert(8, Severity::High)
        };
        let on_host = node_alert(9, Severity::Critical);
        let reply = [on_rank.clone(), on_job.clone(), on_host.clone()];
        // Rank 1 of j is not live: its alert waits for a later reply.
        assert_eq!(
            hub.relay_alerts(&reply),
            3,
            "the job's and the host's (twice)"
        );
        let heard = |s: u64| -> Vec<(String, Option<u32>, &'static str)> {
            hub.take_alerts(s)
                .into_iter()
                .map(|p| (p.job, p.rank, p.alert.severity.as_str()))
                .collect()
        };
        assert_eq!(
            heard(j0),
            [("j".to_owned(), None, "critical")],
            "the host's, posted to its job"
        );
        assert_eq!(
            heard(k0),
            [
                ("k".to_owned(), None, "warning"),
                ("k".to_owned(), None, "critical")
            ]
        );
        // Rank 1 registers; the next reply repeats the same alerts: it
        // hears its own and the host's, nobody else hears anything again.
        let j1 = session("j", 1);
        assert_eq!(hub.relay_alerts(&reply), 1, "the rank's, at last");
        assert_eq!(heard(j1), [("j".to_owned(), Some(1), "warning")]);
        assert!(heard(j0).is_empty() && heard(k0).is_empty());
        // A job that starts later still hears of the host.
        let m0 = session("m", 0);
        assert_eq!(hub.relay_alerts(&reply), 1);
        assert_eq!(heard(m0), [("m".to_owned(), None, "critical")]);
        // A severity that changed is posted again.
        let worse = NodeAlert {
            severity: Severity::Critical,
            ..on_rank
        };
        assert_eq!(hub.relay_alerts(&[worse, on_job, on_host]), 1);
        assert_eq!(heard(j1), [("j".to_owned(), Some(1), "critical")]);
        assert!(heard(j0).is_empty() && heard(k0).is_empty() && heard(m0).is_empty());
    }

    fn kinds(alerts: &[PostedAlert]) -> Vec<&str> {
        alerts.iter().map(|a| a.alert.kind.as_str()).collect()
    }

    #[test]
    fn alerts_reach_the_sessions_they_are_posted_to_once() {
        let hub = HookHub::new("a", "n");
        let r0 = hub.register(claim("j", 0), false, 1).unwrap();
        let r1 = hub.register(claim("j", 1), false, 1).unwrap();
        let other = hub.register(claim("k", 0), false, 1).unwrap();
        assert_eq!(hub.post_alert("j", None, alert("leak")), 2);
        assert_eq!(hub.post_alert("j", Some(1), alert("straggler")), 1);
        assert_eq!(hub.post_alert("j", Some(7), alert("oom_risk")), 0);
        assert_eq!(hub.post_alert("nobody", None, alert("oom_risk")), 0);
        let taken = hub.take_alerts(r1);
        assert_eq!(kinds(&taken), ["leak", "straggler"]);
        assert_eq!(
            (taken[0].job.as_str(), taken[0].rank, taken[1].rank),
            ("j", None, Some(1))
        );
        assert_eq!(kinds(&hub.take_alerts(r0)), ["leak"]);
        assert!(hub.take_alerts(r0).is_empty(), "delivered once");
        assert!(hub.take_alerts(other).is_empty());
        assert!(
            hub.take_alerts(999).is_empty(),
            "an unknown session has none"
        );
        let stats = hub.stats();
        assert_eq!(
            (
                stats.alerts_queued,
                stats.alerts_unmatched,
                stats.alerts_dropped
            ),
            (3, 2, 0)
        );
    }

    #[test]
    fn a_session_that_does_not_poll_keeps_only_the_newest_alerts() {
        let hub = HookHub::new("a", "n");
        let s = hub.register(claim("j", 0), false, 1).unwrap();
        let n = MAX_PENDING_ALERTS_PER_SESSION + 3;
        for i in 0..n {
            hub.post_alert("j", Some(0), alert(&format!("k{i}")));
        }
        let taken = hub.take_alerts(s);
        assert_eq!(taken.len(), MAX_PENDING_ALERTS_PER_SESSION);
        assert_eq!(taken[0].alert.kind, "k3", "the oldest three went");
        assert_eq!(hub.stats().alerts_dropped, 3);
        // A session's alerts end with it; a later session starts empty.
        hub.post_alert("j", None, alert("leak"));
        hub.end_session(s, 2);
        let again = hub.register(claim("j", 0), false, 3).unwrap();
        assert!(hub.take_alerts(again).is_empty());
    }
}
