//! Elections with a pre-vote round, which openraft 0.9 does not have.
//!
//! Without it, a replica cut off from the others times out again and
//! again, raising its term each time (1 to 80 in a minute); when the cut
//! heals its higher term deposes the healthy leader and the majority stops
//! committing until a new election ends. So openraft's own election timer
//! is off (`enable_elect: false`) and this task decides when to campaign,
//! on openraft's own schedule: a voter that has heard from no leader for
//! the leader lease (800 ms, while it knew a leader) and an election
//! timeout (400 to 800 ms, drawn anew each round) first asks the other
//! voters, on `POST /raft/prevote`, whether they would vote for it. A voter
//! says yes only if it has not heard from a leader for the leader lease
//! itself (within it openraft would refuse the real vote anyway), is not a
//! leader a majority still acknowledges, and the candidate's log is at
//! least as up to date as its own. Only with a
//! majority of yeses (its own included) does it call openraft's election,
//! which raises the term. A cut replica therefore never raises its term,
//! and returns as a follower. Elections themselves, votes and terms stay
//! openraft's: this only gates when one starts.
//!
//! Replicas that lost their leader at the same moment would otherwise all
//! campaign at once and split the vote (with two of five replicas down,
//! every live vote is needed). So a replica that says yes to one candidate
//! backs it for an election timeout: it says no to the others and holds
//! its own campaign meanwhile ([`Backing`]). A round ends as soon as a
//! majority said yes, without waiting for replicas that do not answer.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpumon_runtime::secrets::Secret;
use openraft::{BasicNode, LogId, RaftMetrics, ServerState};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::network::{RAFT_VERSION, RAFT_VERSION_HEADER};
use super::standing::{Contact, Standing, STEP_DOWN_AFTER};
use super::timing::ELECTION_TIMEOUT_MS;
use super::Raft;
use crate::peer_link::PeerLink;

/// How often the task looks.
const TICK: Duration = Duration::from_millis(50);
/// Time allowed for one pre-vote answer.
const PREVOTE_TIMEOUT: Duration = Duration::from_millis(300);

/// "Would you vote for me?"
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteRequest {
    /// The replica asking.
    pub candidate: u64,
    /// Its last log entry.
    pub last_log: Option<LogId<u64>>,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteResponse {
    /// Whether it would.
    pub granted: bool,
    /// Why not, when it would not.
    pub reason: String,
}

/// The candidate this replica last said yes to, and when; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Backing(Arc<Mutex<Option<(u64, Instant)>>>);

impl Backing {
    /// Says yes to `candidate` now.
    pub fn back(&self, candidate: u64) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((candidate, Instant::now()));
    }

    /// The candidate backed and how long ago, if any.
    pub fn backed(&self) -> Option<(u64, Duration)> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|(c, at)| (c, at.elapsed()))
    }
}

/// What a voter knows when asked.
#[derive(Debug, Clone, Copy)]
pub struct Voter {
    /// Its standing.
    pub standing: Standing,
    /// Time since it last heard from a leader.
    pub since_contact: Duration,
    /// Its own last log entry.
    pub last_log: Option<LogId<u64>>,
    /// The candidate it last said yes to, and how long ago.
    pub backed: Option<(u64, Duration)>,
}

/// The pre-vote rule.
pub fn decide(me: &Voter, req: &PreVoteRequest) -> PreVoteResponse {
    let no = |reason: String| PreVoteResponse {
        granted: false,
        reason,
    };
    if me.standing == Standing::Leader {
        return no("I am the leader and a majority acknowledges me".into());
    }
    if me.standing == Standing::Other && me.since_contact < STEP_DOWN_AFTER {
        return no(format!(
            "I heard from the leader {} ms ago",
            me.since_contact.as_millis()
        ));
    }
    if req.last_log < me.last_log {
        return no("my log is ahead of yours".into());
    }
    if let Some((other, ago)) = me.backed {
        if other != req.candidate && ago < Duration::from_millis(ELECTION_TIMEOUT_MS.0) {
            return no(format!("I back replica {other}'s campaign"));
        }
    }
    PreVoteResponse {
        granted: true,
        reason: String::new(),
    }
}

/// Runs elections for replica `id` until `stop`.
pub fn spawn(
    raft: Raft,
    id: u64,
    contact: Contact,
    backing: Backing,
    link: &PeerLink,
    secret: Option<Secret>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let client = link
        .client_builder()
        .timeout(PREVOTE_TIMEOUT)
        .connect_timeout(PREVOTE_TIMEOUT)
        .build()
        .expect("a client on a checked TLS config builds");
    let scheme = link.scheme();
    tokio::spawn(async move {
        let mut timeout = draw_timeout(id, 0);
        let mut last_round: Option<Instant> = None;
        let mut rounds = 0u64;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let m = raft.metrics().borrow().clone();
            let voters: BTreeSet<u64> = m.membership_config.membership().voter_ids().collect();
            if m.state == ServerState::Leader || !voters.contains(&id) {
                continue;
            }
            let quiet = contact.since();
            // While a leader was known, its lease runs first.
            let wait = if m.current_leader.is_some() {
                STEP_DOWN_AFTER + timeout
            } else {
                timeout
            };
            if quiet < wait || last_round.is_some_and(|t| t.elapsed() < timeout) {
                continue;
            }
            // Another candidate this replica backs gets its chance first.
            if backing
                .backed()
                .is_some_and(|(c, ago)| c != id && ago < timeout)
            {
                continue;
            }
            last_round = Some(Instant::now());
            rounds += 1;
            timeout = draw_timeout(id, rounds);
            // A replica campaigning backs itself: it says no to others meanwhile.
            backing.back(id);
            let last_log = raft.data_metrics().borrow().last_log;
            let req = PreVoteRequest {
                candidate: id,
                last_log,
            };
            let granted = 1 + ask_peers(&client, scheme, secret.as_ref(), &m, &req, &voters).await;
            if granted * 2 > voters.len() {
                tracing::info!(
                    id,
                    granted,
                    voters = voters.len(),
                    quiet_ms = quiet.as_millis() as u64,
                    "pre-vote won; starting an election"
                );
                if raft.trigger().elect().await.is_err() {
                    return;
                }
            } else {
                tracing::debug!(
                    id,
                    granted,
                    voters = voters.len(),
                    "pre-vote lost; not campaigning"
                );
            }
        }
    })
}

/// An election timeout in the configured range, different per replica and
/// round so that replicas do not campaign in step.
fn draw_timeout(id: u64, round: u64) -> Duration {
    let (min, max) = ELECTION_TIMEOUT_MS;
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 31;
    Duration::from_millis(min + x % (max - min + 1))
}

/// Asks every other voter at once; the number that said yes.
async fn ask_peers(
    client: &reqwest::Client,
    scheme: &str,
    secret: Option<&Secret>,
    m: &RaftMetrics<u64, BasicNode>,
    req: &PreVoteRequest,
    voters: &BTreeSet<u64>,
) -> usize {
    let membership = m.membership_config.membership();
    let Ok(body) = postcard::to_allocvec(req) else {
        return 0;
    };
    let mut asks = tokio::task::JoinSet::new();
    for node in voters
        .iter()
        .filter(|v| **v != req.candidate)
        .filter_map(|v| membership.get_node(v))
    {
        let mut request = client
            .post(format!("{scheme}://{}/raft/prevote", node.addr))
            .header(RAFT_VERSION_HEADER, RAFT_VERSION)
            .body(body.clone());
        if let Some(s) = secret {
            request = request.bearer_auth(s.expose());
        }
        asks.spawn(async move {
            let bytes = request.send().await.ok()?.bytes().await.ok()?;
            let answer: PreVoteResponse = postcard::from_bytes(&bytes).ok()?;
            Some(answer.granted)
        });
    }
    let mut granted = 0;
    while let Some(answer) = asks.join_next().await {
        if matches!(answer, Ok(Some(true))) {
            granted += 1;
            // A majority with this replica's own yes: no need to wait for
            // replicas that do not answer.
            if (granted + 1) * 2 > voters.len() {
                asks.abort_all();
                break;
            }
        }
    }
    granted
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn log(term: u64, index: u64) -> Option<LogId<u64>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    fn ask(last_log: Option<LogId<u64>>) -> PreVoteRequest {
        PreVoteRequest {
            candidate: 2,
            last_log,
        }
    }

    #[test]
    fn a_voter_that_hears_its_leader_or_leads_says_no_and_one_that_lost_it_says_yes() {
        let follower = |ms| Voter {
            standing: Standing::Other,
            since_contact: Duration::from_millis(ms),
            last_log: log(1, 10),
            backed: None,
        };
        assert!(!decide(&follower(100), &ask(log(1, 10))).granted);
        assert!(
            !decide(&follower(700), &ask(log(1, 10))).granted,
            "within the lease"
        );
        assert!(decide(&follower(1_000), &ask(log(1, 10))).granted);
        // A candidate behind in the log is refused even by a lost follower.
        let behind = decide(&follower(1_000), &ask(log(1, 9)));
        assert!(
            !behind.granted && behind.reason.contains("log"),
            "{behind:?}"
        );
        assert!(
            decide(&follower(1_000), &ask(log(2, 3))).granted,
            "a later term is ahead"
        );

        let leader = Voter {
            standing: Standing::Leader,
            since_contact: Duration::from_secs(60),
            last_log: log(1, 10),
            backed: None,
        };
        assert!(!decide(&leader, &ask(log(1, 10))).granted);
        let cut_leader = Voter {
            standing: Standing::SteppedDown(Duration::from_secs(2)),
            ..leader
        };
        assert!(decide(&cut_leader, &ask(log(1, 10))).granted);
    }

    #[test]
    fn a_voter_backs_one_candidate_for_an_election_timeout() {
        let backing = |candidate, ms| Voter {
            standing: Standing::Other,
            since_contact: Duration::from_secs(5),
            last_log: log(1, 10),
            backed: Some((candidate, Duration::from_millis(ms))),
        };
        // ask() is from replica 2.
        assert!(
            decide(&backing(2, 100), &ask(log(1, 10))).granted,
            "the one it backs"
        );
        let other = decide(&backing(3, 100), &ask(log(1, 10)));
        assert!(
            !other.granted && other.reason.contains("replica 3"),
            "{other:?}"
        );
        assert!(
            decide(&backing(3, 1_000), &ask(log(1, 10))).granted,
            "backing expired"
        );
    }

    #[test]
    fn timeouts_stay_in_range_and_differ_between_replicas() {
        let (min, max) = ELECTION_TIMEOUT_MS;
        let drawn: BTreeSet<Duration> = (1..=5)
            .flat_map(|id| (0..20).map(move |r| draw_timeout(id, r)))
            .collect();
        assert!(drawn
            .iter()
            .all(|d| (min..=max).contains(&(d.as_millis() as u64))));
        assert!(drawn.len() > 20, "too few distinct timeouts: {drawn:?}");
        assert_ne!(draw_timeout(1, 0), draw_timeout(2, 0));
    }
}
