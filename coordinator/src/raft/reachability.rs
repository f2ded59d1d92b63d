//! Whether a peer answers, logged at a bounded rate: one line when it goes
//! away, a summary every [`SUMMARY_EVERY`] while it stays away, one line
//! when it is back; never a line per failed RPC (a replica retrying a cut
//! peer would otherwise log hundreds a minute).

use std::time::{Duration, Instant};

/// How often a peer that stays away is summarized.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// What to log after an RPC to the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Nothing.
    Quiet,
    /// It stopped answering.
    WentAway,
    /// Still away: failures since it went away, and for how long.
    StillAway { failures: u64, for_: Duration },
    /// It answers again after being away this long.
    Back { after: Duration, failures: u64 },
}

/// One peer's reachability.
#[derive(Debug, Default)]
pub struct Reachability {
    away: Option<Away>,
}

#[derive(Debug)]
struct Away {
    since: Instant,
    failures: u64,
    last_note: Instant,
}

impl Reachability {
    /// An RPC to the peer failed to reach it at `now`.
    pub fn failed(&mut self, now: Instant) -> Note {
        match &mut self.away {
            None => {
                self.away = Some(Away {
                    since: now,
                    failures: 1,
                    last_note: now,
                });
                Note::WentAway
            }
            Some(away) => {
                away.failures += 1;
                if now.duration_since(away.last_note) >= SUMMARY_EVERY {
                    away.last_note = now;
                    Note::StillAway {
                        failures: away.failures,
                        for_: now.duration_since(away.since),
                    }
                } else {
                    Note::Quiet
                }
            }
        }
    }

    /// An RPC reached the peer at `now`.
    pub fn answered(&mut self, now: Instant) -> Note {
        match self.away.take() {
            Some(away) => Note::Back {
                after: now.duration_since(away.since),
                failures: away.failures,
            },
            None => Note::Quiet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_away_for_minutes_logs_three_lines_not_thousands() {
        let start = Instant::now();
        let mut r = Reachability::default();
        let mut notes = Vec::new();
        // A failure every 100 ms for 150 s, then an answer.
        for i in 0..1500u64 {
            let note = r.failed(start + Duration::from_millis(100 * i));
            if note != Note::Quiet {
                notes.push(note);
            }
        }
        notes.push(r.answered(start + Duration::from_secs(150)));
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert_eq!(notes[0], Note::WentAway);
        assert!(
            matches!(notes[1], Note::StillAway { failures: 601, .. }),
            "{notes:?}"
        );
        assert!(
            matches!(notes[3], Note::Back { failures: 1500, .. }),
            "{notes:?}"
        );
        assert_eq!(r.answered(start + Duration::from_secs(151)), Note::Quiet);
    }
}
