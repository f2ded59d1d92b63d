//! Notifications from the Raft leader to real HTTP receivers on loopback:
//! an axum server that records what it is sent (and can fail or hang), and
//! a real Alertmanager (Debian's `prometheus-alertmanager`).
//!
//! The data: four ranks of job-x, rank 2 leaking 20 MiB/s, so the engine
//! raises `oom_predicted` and `leak` on rank 2 after ten minutes of data
//! (pushed in well under a second: time comes from the data); then rank 2's
//! process goes away and both resolve. Waits are polls with deadlines; a
//! check that something does *not* happen watches a window of several
//! notifier rounds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod support;
use support::{leak_batch_with, push, start_with, T0_MS};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use gpumon_coordinator::notify::{NotifyConfig, Receiver};
use gpumon_coordinator::{Coordinator, CoordinatorConfig, Formation};
use gpumon_core::notify::ReceiverKind;
use openraft::ServerState;
use serde_json::Value;
use tokio::time::Instant;

/// Batches until rank 2's alerts fire (600 s of data).
const FIRING_BATCHES: u64 = 20;
/// Bound on every wait for something to arrive.
const WAIT: Duration = Duration::from_secs(30);
/// Notifier round in these tests, ms.
const ROUND_MS: u64 = 100;
/// What a check that nothing more arrives watches: ten rounds.
const QUIET: Duration = Duration::from_millis(10 * ROUND_MS);

// ---- data ----------------------------------------------------------------

/// Pushes ten minutes of the leak: rank 2's alerts fire.
async fn fire(url: &str) {
    for seq in 1..=FIRING_BATCHES {
        push(url, &leak_batch_with(seq, false)).await;
    }
}

/// Pushes two minutes without rank 2: its alerts resolve.
async fn resolve(url: &str) {
    for seq in FIRING_BATCHES + 1..=FIRING_BATCHES + 4 {
        push(url, &leak_batch_with(seq, true)).await;
    }
}

// ---- a recording receiver --------------------------------------------------

/// How the receiver answers.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// 200 to everything.
    Ok,
    /// 500 to the first `n` requests, then 200.
    FailFirst(usize),
    /// Never answers.
    Hang,
}

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Got {
    path: String,
    body: Value,
    at: Instant,
    accepted: bool,
}

#[derive(Debug)]
struct Shared {
    mode: Mode,
    got: Mutex<Vec<Got>>,
}

/// An HTTP receiver on a loopback port; stops on drop.
#[derive(Debug)]
struct Recorder {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(State(s): State<Arc<Shared>>, uri: Uri, body: Bytes) -> StatusCode {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let accepted = {
        let mut got = s.got.lock().unwrap();
        let accepted = match s.mode {
            Mode::Ok => true,
            Mode::FailFirst(n) => got.len() >= n,
            Mode::Hang => false,
        };
        got.push(Got {
            path: uri.path().to_owned(),
            body,
            at: Instant::now(),
            accepted,
        });
        accepted
    };
    if let Mode::Hang = s.mode {
        std::future::pending::<()>().await;
    }
    if accepted {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

impl Recorder {
    async fn start(mode: Mode) -> Self {
        let shared = Arc::new(Shared {
            mode,
            got: Mutex::new(Vec::new()),
        });
        let app = axum::Router::new()
            .fallback(record)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { addr, shared, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn got(&self) -> Vec<Got> {
        self.shared.got.lock().unwrap().clone()
    }

    /// Accepted requests to `path`.
    fn accepted(&self, path: &str) -> Vec<Got> {
        self.got()
            .into_iter()
            .filter(|g| g.accepted && g.path == path)
            .collect()
    }

    /// Waits until `done` holds for the accepted requests to `path`.
    async fn wait_for(&self, path: &str, what: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let deadline = Instant::now() + WAIT;
        loop {
            let got = self.accepted(path);
            if done(&got) {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {WAIT:?}; {path} got {:#?}",
                got.iter().map(|g| &g.body).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `(kind, notice)` of each generic webhook body.
fn notices(got: &[Got]) -> Vec<(String, String)> {
    got.iter()
        .map(|g| {
            (
                g.body["kind"].as_str().unwrap_or("?").to_owned(),
                g.body["notice"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect()
}

/// Each message as `kind notice severity`, sorted; a message sent twice
/// shows up twice.
fn messages(got: &[Got]) -> Vec<String> {
    let mut out: Vec<String> = got
        .iter()
        .map(|g| {
            format!(
                "{} {} {}",
                g.body["kind"], g.body["notice"], g.body["severity"]
            )
        })
        .collect();
    out.sort();
    out
}

/// Asserts no message came twice.
#[track_caller]
fn assert_distinct(got: &[Got], why: &str) {
    let all = messages(got);
    let mut distinct = all.clone();
    distinct.dedup();
    assert_eq!(distinct, all, "{why}");
}

fn count(got: &[Got], notice: &str) -> usize {
    notices(got).iter().filter(|(_, n)| n == notice).count()
}

/// The Slack header's text, which names firing or resolved.
fn slack_header(g: &Got) -> String {
    g.body["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The notifier tuned for tests: fast rounds and retries.
fn notify(receivers: Vec<Receiver>) -> NotifyConfig {
    NotifyConfig {
        receivers,
        interval_ms: ROUND_MS,
        backoff_initial_ms: 50,
        backoff_max_ms: 400,
        dashboard_url: Some("http://dash.test:7070".into()),
        ..NotifyConfig::default()
    }
}

async fn alerts(url: &str) -> Vec<Value> {
    let v: Value = support::get_json(format!("{url}/api/v1/alerts")).await;
    v["alerts"].as_array().unwrap().clone()
}

/// The kinds of rank 2's alerts, checked to be what the data should raise.
async fn fired_kinds(url: &str) -> Vec<String> {
    let mut kinds: Vec<String> = alerts(url)
        .await
        .iter()
        .filter(|a| a["rank"] == 2)
        .map(|a| a["kind"].as_str().unwrap().to_owned())
        .collect();
    kinds.sort();
    kinds.dedup();
    assert!(kinds.contains(&"oom_predicted".to_owned()), "{kinds:?}");
    kinds
}

// ---- tests -------------------------------------------------------------------

#[tokio::test]
async fn slack_and_webhook_get_firing_repeats_after_the_interval_and_one_resolve() {
    let rx = Recorder::start(Mode::Ok).await;
    let repeat = Duration::from_millis(1500);
    let dir = tempfile::tempdir().unwrap();
    let c = start_with(dir.path(), |c| {
        c.notify = notify(vec![
            Receiver::new(ReceiverKind::Webhook, rx.url("/hook")),
            Receiver::new(ReceiverKind::Slack, rx.url("/slack")),
        ]);
        c.notify.repeat_interval_ms = repeat.as_millis() as u64;
    })
    .await;
    let url = c.api_url();
    fire(&url).await;
    let kinds = fired_kinds(&url).await;
    let n = kinds.len();

    // The generic webhook: one `new` per alert, with the alert and a forecast.
    let hook = rx
        .wait_for("/hook", "a webhook per alert", |g| count(g, "new") == n)
        .await;
    let oom = hook
        .iter()
        .find(|g| g.body["kind"] == "oom_predicted")
        .unwrap();
    let b = &oom.body;
    assert_eq!(b["version"], 1);
    assert_eq!(b["status"], "firing");
    assert_eq!(
        (b["job"].as_str(), b["rank"].as_u64()),
        (Some("job-x"), Some(2))
    );
    assert_eq!(b["dashboard_url"], "http://dash.test:7070/#/jobs/job-x");
    assert_eq!(b["alert"]["kind"], "oom_predicted");
    assert!(
        b["since"].as_str().unwrap().starts_with("2023-11-14T"),
        "{b}"
    );
    assert!(b["forecast"]["seconds_left"].as_f64().unwrap() > 0.0, "{b}");
    assert!(b["forecast"]["predicted_oom_t"].as_f64().unwrap() > (T0_MS / 1000) as f64);

    // Slack: Block Kit with the fields people read and a dashboard button.
    let slack = rx
        .wait_for("/slack", "a Slack message per alert", |g| g.len() >= n)
        .await;
    let msg = slack
        .iter()
        .find(|g| slack_header(g).contains("OOM predicted"))
        .expect("an OOM message");
    let blocks = msg.body["blocks"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "header");
    assert!(slack_header(msg).contains("job-x rank 2"), "{}", msg.body);
    let fields: BTreeMap<String, String> = blocks
        .iter()
        .filter_map(|b| b["fields"].as_array())
        .flatten()
        .filter_map(|f| {
            let (name, value) = f["text"].as_str()?.split_once('\n')?;
            Some((name.trim_matches('*').to_owned(), value.to_owned()))
        })
        .collect();
    for name in ["Job", "Rank", "What", "Since", "Forecast", "Recommendation"] {
        assert!(fields.contains_key(name), "no {name} field: {fields:?}");
    }
    assert_eq!(fields["Job"], "job-x");
    assert_eq!(fields["Rank"], "2");
    assert!(fields["What"].contains("OOM predicted"), "{fields:?}");
    assert!(fields["Since"].starts_with("2023-11-14T"), "{fields:?}");
    assert!(fields["Forecast"].starts_with("OOM in"), "{fields:?}");
    let button = blocks
        .iter()
        .filter_map(|b| b["elements"].as_array())
        .flatten()
        .find(|e| e["type"] == "button")
        .expect("a dashboard button");
    assert_eq!(button["url"], "http://dash.test:7070/#/jobs/job-x");
    assert!(msg.body["text"].as_str().unwrap().contains("job-x"));

    // Still firing: repeated, but never before the interval.
    let hook = rx
        .wait_for("/hook", "a repeat per alert", |g| count(g, "repeat") >= n)
        .await;
    for kind in &kinds {
        let of_kind: Vec<&Got> = hook
            .iter()
            .filter(|g| g.body["kind"] == kind.as_str())
            .collect();
        for pair in of_kind.windows(2) {
            if pair[1].body["notice"] != "repeat" {
                continue; // an escalation goes out at once
            }
            // The leader's clock measured the interval from when it
            // recorded the previous one, after this receiver had it.
            let gap = pair[1].at - pair[0].at;
            assert!(
                gap + Duration::from_millis(2 * ROUND_MS) >= repeat,
                "{kind} repeated after {gap:?}, interval {repeat:?}"
            );
        }
    }

    // Resolved: one resolve per alert and receiver, never a second.
    resolve(&url).await;
    rx.wait_for("/hook", "a resolve per alert", |g| count(g, "resolve") == n)
        .await;
    rx.wait_for("/slack", "a Slack resolve per alert", |g| {
        g.iter()
            .filter(|m| slack_header(m).contains("Resolved"))
            .count()
            == n
    })
    .await;
    tokio::time::sleep(repeat + QUIET).await;
    let hook = rx.accepted("/hook");
    assert_eq!(count(&hook, "resolve"), n, "{:?}", notices(&hook));
    let last_resolve = hook
        .iter()
        .rposition(|g| g.body["notice"] == "resolve")
        .unwrap();
    assert!(
        hook[last_resolve + 1..].is_empty(),
        "nothing after the resolves: {:?}",
        notices(&hook[last_resolve + 1..])
    );
    let stats = c.notify_stats().get(ReceiverKind::Slack);
    assert_eq!(stats.sent as usize, rx.accepted("/slack").len());
    c.shutdown().await;
}

#[tokio::test]
async fn a_job_muted_below_critical_by_a_live_setting_announces_only_critical_alerts() {
    let rx = Recorder::start(Mode::Ok).await;
    let dir = tempfile::tempdir().unwrap();
    let c = start_with(dir.path(), |c| {
        c.notify = notify(vec![Receiver::new(ReceiverKind::Webhook, rx.url("/hook"))]);
    })
    .await;
    let url = c.api_url();
    let client = gpumon_net::plain_client_builder().build().unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let resp = client
            .post(format!("{url}/api/v1/config"))
            .json(&serde_json::json!({"job": "job-x", "set": {"notify.min_severity": "critical"}}))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.text().await.unwrap();
        match status.as_u16() {
            200 => break,
            // Not elected yet.
            421 if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            _ => panic!("{status}: {body}"),
        }
    }
    fire(&url).await;
    fired_kinds(&url).await;
    let fired = alerts(&url).await;
    let critical = fired.iter().filter(|a| a["severity"] == "critical").count();
    assert!(
        fired.len() > critical,
        "the data raises alerts below critical: {fired:?}"
    );
    if critical > 0 {
        rx.wait_for("/hook", "the critical alerts", |g| {
            count(g, "new") == critical
        })
        .await;
    }
    // Several notifier rounds: nothing below critical arrives.
    tokio::time::sleep(QUIET).await;
    let hook = rx.accepted("/hook");
    assert_eq!(count(&hook, "new"), critical, "{:?}", notices(&hook));
    assert!(
        hook.iter().all(|g| g.body["severity"] == "critical"),
        "{:?}",
        notices(&hook)
    );
    c.shutdown().await;
}

#[tokio::test]
async fn a_receiver_failing_twice_gets_each_notification_exactly_once() {
    let rx = Recorder::start(Mode::FailFirst(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let c = start_with(dir.path(), |c| {
        c.notify = notify(vec![Receiver::new(ReceiverKind::Webhook, rx.url("/hook"))]);
    })
    .await;
    let url = c.api_url();
    fire(&url).await;
    let n = fired_kinds(&url).await.len();
    rx.wait_for("/hook", "every alert delivered", |g| count(g, "new") == n)
        .await;
    tokio::time::sleep(QUIET).await;
    let hook = rx.accepted("/hook");
    assert_distinct(&hook, "each notification is delivered once");
    assert_eq!(rx.got().len(), hook.len() + 2, "two refused attempts");
    let stats = c.notify_stats().get(ReceiverKind::Webhook);
    assert_eq!(
        (stats.sent, stats.retried, stats.failed),
        (hook.len() as u64, 2, 0)
    );
    // The same counts in /metrics, per receiver kind.
    let text = support::get_text(format!("{url}/metrics")).await;
    for (name, want) in [
        ("gpumon_notifications_sent_total", hook.len()),
        ("gpumon_notification_retries_total", 2),
        ("gpumon_notifications_failed_total", 0),
    ] {
        let line = format!("{name}{{receiver=\"webhook\"}} {want}");
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    c.shutdown().await;
}

#[tokio::test]
async fn a_receiver_that_never_answers_does_not_slow_ingest() {
    let rx = Recorder::start(Mode::Hang).await;
    let dir = tempfile::tempdir().unwrap();
    let timeout = Duration::from_secs(3);
    let c = start_with(dir.path(), |c| {
        c.notify = notify(vec![Receiver::new(ReceiverKind::Webhook, rx.url("/hook"))]);
        c.notify.timeout_ms = timeout.as_millis() as u64;
    })
    .await;
    let url = c.api_url();
    fire(&url).await;
    let deadline = Instant::now() + WAIT;
    while rx.got().is_empty() {
        assert!(Instant::now() < deadline, "the receiver was never called");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A notification hangs now; pushes keep committing promptly, each well
    // within the time one POST may take.
    for seq in FIRING_BATCHES + 1..=FIRING_BATCHES + 10 {
        let started = Instant::now();
        push(&url, &leak_batch_with(seq, false)).await;
        let took = started.elapsed();
        assert!(
            took < timeout / 3,
            "push {seq} took {took:?} while a receiver hangs"
        );
    }
    let deadline = Instant::now() + WAIT;
    while c.notify_stats().get(ReceiverKind::Webhook).retried == 0 {
        assert!(Instant::now() < deadline, "the hung POST never timed out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(c.notify_stats().get(ReceiverKind::Webhook).sent, 0);
    c.shutdown().await;
}

// ---- a three-replica cluster in this process --------------------------------

/// Three replicas with the same receivers; `None` where stopped.
struct Trio {
    configs: Vec<CoordinatorConfig>,
    nodes: Vec<Option<Coordinator>>,
    _dir: tempfile::TempDir,
}

impl Trio {
    async fn start(receivers: Vec<Receiver>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let listeners: Vec<_> = (0..3)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let peers: BTreeMap<u64, String> = (1..)
            .zip(&listeners)
            .map(|(id, l)| (id, l.local_addr().unwrap().to_string()))
            .collect();
        drop(listeners);
        let configs: Vec<CoordinatorConfig> = peers
            .iter()
            .map(|(id, addr)| {
                let mut c = CoordinatorConfig::new(*id, dir.path().join(id.to_string()));
                c.listen = addr.clone();
                c.formation = Formation::Peers(peers.clone());
                c.notify = notify(receivers.clone());
                c
            })
            .collect();
        let mut nodes = Vec::new();
        for c in &configs {
            nodes.push(Some(Coordinator::start(c.clone()).await.unwrap()));
        }
        Self {
            configs,
            nodes,
            _dir: dir,
        }
    }

    /// The running leader's index, once one is elected and every running
    /// replica follows it (a fresh cluster can change leader once or twice
    /// while its replicas start; the checks here need the settled one).
    async fn leader(&self) -> usize {
        let deadline = Instant::now() + WAIT;
        loop {
            let found = self.nodes.iter().position(|n| {
                n.as_ref()
                    .is_some_and(|c| c.raft().metrics().borrow().state == ServerState::Leader)
            });
            let settled = found.filter(|&i| {
                let id = self.configs[i].id;
                self.nodes
                    .iter()
                    .flatten()
                    .all(|c| c.raft().metrics().borrow().current_leader == Some(id))
            });
            if let Some(i) = settled {
                return i;
            }
            assert!(Instant::now() < deadline, "no leader within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn url(&self, i: usize) -> String {
        format!("http://{}", self.configs[i].listen)
    }

    fn get(&self, i: usize) -> &Coordinator {
        self.nodes[i].as_ref().unwrap()
    }

    async fn stop(&mut self, i: usize) {
        if let Some(c) = self.nodes[i].take() {
            c.shutdown().await;
        }
    }

    async fn shutdown(mut self) {
        for i in 0..self.nodes.len() {
            self.stop(i).await;
        }
    }
}

#[tokio::test]
async fn only_the_leader_sends_and_a_new_leader_neither_repeats_nor_loses() {
    let rx = Recorder::start(Mode::Ok).await;
    let mut trio = Trio::start(vec![Receiver::new(ReceiverKind::Webhook, rx.url("/hook"))]).await;
    let first = trio.leader().await;
    let url = trio.url(first);
    fire(&url).await;
    let n = fired_kinds(&url).await.len();
    rx.wait_for("/hook", "one notification per alert", |g| {
        count(g, "new") == n
    })
    .await;
    // Recorded through Raft (committed) before the leader goes.
    let deadline = Instant::now() + WAIT;
    let recorded = || {
        trio.get(first)
            .notify_stats()
            .get(ReceiverKind::Webhook)
            .recorded
    };
    while recorded() < rx.accepted("/hook").len() as u64 {
        assert!(Instant::now() < deadline, "not recorded within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(QUIET).await;
    // Had a follower sent too, the same message would come twice.
    let before = rx.accepted("/hook");
    assert_distinct(&before, "followers do not send");
    assert_eq!(count(&before, "new"), n);
    for i in (0..3).filter(|i| *i != first) {
        assert_eq!(
            trio.get(i).notify_stats().get(ReceiverKind::Webhook).sent,
            0
        );
    }

    // The leader stops; the new one has the book and repeats nothing.
    trio.stop(first).await;
    let second = trio.leader().await;
    assert_ne!(second, first);
    tokio::time::sleep(QUIET).await;
    let hook = rx.accepted("/hook");
    assert_eq!(
        hook.len(),
        before.len(),
        "the new leader repeated what the old one recorded: {:?}",
        notices(&hook)
    );

    // What the old leader never sent, the new one does: the resolves.
    resolve(&trio.url(second)).await;
    let hook = rx
        .wait_for("/hook", "resolves from the new leader", |g| {
            count(g, "resolve") == n
        })
        .await;
    assert_eq!(hook.len(), before.len() + n, "{:?}", notices(&hook));
    assert_eq!(
        trio.get(second)
            .notify_stats()
            .get(ReceiverKind::Webhook)
            .sent,
        n as u64
    );
    trio.shutdown().await;
}

// ---- a real Alertmanager ------------------------------------------------------

const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

/// An Alertmanager process on a loopback port, clustering off; killed on drop.
struct Alertmanager {
    url: String,
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Alertmanager {
    async fn start() -> Self {
        assert!(
            std::path::Path::new(ALERTMANAGER).exists(),
            "{ALERTMANAGER} is missing: apt-get install -y prometheus-alertmanager"
        );
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("am.yml");
        std::fs::write(
            &config,
            "route:\n  receiver: 'null'\nreceivers:\n  - name: 'null'\n",
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.path().join("am.log")).unwrap();
        let child = tokio::process::Command::new(ALERTMANAGER)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.path={}", dir.path().display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("alertmanager starts");
        let am = Self {
            url: format!("http://127.0.0.1:{port}"),
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let ready = support::http()
                .get(format!("{}/-/ready", am.url))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return am;
            }
            assert!(
                Instant::now() < deadline,
                "alertmanager not ready within {WAIT:?}: {}",
                std::fs::read_to_string(am._dir.path().join("am.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// gpumon's alerts as Alertmanager lists them (active ones).
    async fn alerts(&self) -> Vec<Value> {
        let v: Value = support::get_json(format!(
            "{}/api/v2/alerts?filter=source%3D%22gpumon%22",
            self.url
        ))
        .await;
        v.as_array().unwrap().clone()
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let alerts = self.alerts().await;
            if done(&alerts) {
                return alerts;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not within {WAIT:?}; alertmanager has {alerts:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn alertmanager_shows_the_alert_firing_then_resolved() {
    let am = Alertmanager::start().await;
    let dir = tempfile::tempdir().unwrap();
    let c = start_with(dir.path(), |c| {
        c.notify = notify(vec![Receiver::new(
            ReceiverKind::Alertmanager,
            am.url.clone(),
        )]);
    })
    .await;
    let url = c.api_url();
    fire(&url).await;
    let n = fired_kinds(&url).await.len();
    let firing = am
        .wait_for("gpumon's alerts firing", |a| a.len() == n)
        .await;
    let oom = firing
        .iter()
        .find(|a| a["labels"]["alertname"] == "GpumonOomPredicted")
        .expect("the OOM alert");
    let labels = &oom["labels"];
    assert_eq!(labels["job"], "job-x");
    assert_eq!(labels["rank"], "2");
    assert_eq!(labels["kind"], "oom_predicted");
    assert_eq!(labels["source"], "gpumon");
    assert!(labels["severity"].is_string());
    assert_eq!(oom["status"]["state"], "active");
    assert_eq!(
        oom["annotations"]["dashboard"],
        "http://dash.test:7070/#/jobs/job-x"
    );
    assert!(
        oom["startsAt"].as_str().unwrap().starts_with("2023-11-14T"),
        "{oom}"
    );

    resolve(&url).await;
    am.wait_for(
        "gpumon's alerts resolved (gone from the active list)",
        |a| a.is_empty(),
    )
    .await;
    let stats = c.notify_stats().get(ReceiverKind::Alertmanager);
    assert_eq!(stats.failed, 0);
    assert!(stats.sent >= 2 * n as u64, "{stats:?}");
    c.shutdown().await;
}
