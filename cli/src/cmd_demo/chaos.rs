//! `gpumon demo --chaos`: every so often the leader is stopped (no hand-over,
//! as in a crash), a new one takes over, and the old one comes back and
//! catches up, while the simulated agents keep pushing. Each step is a line
//! for the demo to print.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, Mutex};

use super::replicas::Replicas;

/// How long a stopped leader stays down.
const DOWN_FOR: Duration = Duration::from_secs(5);
/// Bound on waiting for an election or a catch-up before saying so.
const WAIT_AT_MOST: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

/// Runs the chaos loop until `stop` turns true.
pub async fn run(
    replicas: Arc<Mutex<Replicas>>,
    every: Duration,
    lines: mpsc::UnboundedSender<String>,
    mut stop: watch::Receiver<bool>,
) {
    let say = |s: String| {
        let _ = lines.send(s);
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Some(old) = replicas.lock().await.leader() else {
            say("chaos: no leader to stop right now".into());
            continue;
        };
        say(format!("chaos: stopping the leader, replica {old}"));
        let stopped_at = Instant::now();
        replicas.lock().await.stop(old).await;
        match wait_new_leader(&replicas, old).await {
            Some((new, term)) => say(format!(
                "failover: replica {new} leads (term {term}), {} ms after replica {old} stopped",
                stopped_at.elapsed().as_millis()
            )),
            None => say(format!("chaos: no new leader within {WAIT_AT_MOST:?}")),
        }
        tokio::select! {
            _ = tokio::time::sleep(DOWN_FOR) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if let Err(e) = replicas.lock().await.restart(old).await {
            say(format!("chaos: replica {old} failed to restart: {e}"));
            continue;
        }
        say(format!("chaos: replica {old} restarted, catching up"));
        match wait_caught_up(&replicas, old).await {
            Some(index) => say(format!("replica {old} caught up (applied index {index})")),
            None => say(format!(
                "replica {old} did not catch up within {WAIT_AT_MOST:?}"
            )),
        }
    }
}

async fn wait_new_leader(replicas: &Mutex<Replicas>, old: u64) -> Option<(u64, u64)> {
    let deadline = Instant::now() + WAIT_AT_MOST;
    while Instant::now() < deadline {
        {
            let r = replicas.lock().await;
            if let Some(new) = r.leader().filter(|l| *l != old) {
                let term = r.get(new)?.raft().metrics().borrow().current_term;
                return Some((new, term));
            }
        }
        tokio::time::sleep(POLL).await;
    }
    None
}

/// Waits until replica `id` has applied what the leader had applied when it came back.
async fn wait_caught_up(replicas: &Mutex<Replicas>, id: u64) -> Option<u64> {
    let applied = |r: &Replicas, id: u64| {
        r.get(id)
            .and_then(|c| c.raft().metrics().borrow().last_applied)
            .map(|l| l.index)
    };
    let target = {
        let r = replicas.lock().await;
        r.leader().and_then(|l| applied(&r, l))
    };
    let deadline = Instant::now() + WAIT_AT_MOST;
    while Instant::now() < deadline {
        if let Some(index) = applied(&*replicas.lock().await, id) {
            if target.is_none_or(|t| index >= t) {
                return Some(index);
            }
        }
        tokio::time::sleep(POLL).await;
    }
    None
}
