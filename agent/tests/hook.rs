//! The hook endpoint over real sockets: a Unix socket in a temporary
//! directory and TCP on 127.0.0.1 port 0, the hub and server in this
//! process, a raw client writing JSON lines (agent/python/PROTOCOL.md).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use gpumon_agent::discovery::standalone_job;
use gpumon_agent::hook_endpoint::{
    HookAddr, HookAlert, HookAlertSeverity, HookError, HookHub, HookServer, HookSource,
    DISCONNECTED_REASON, MAX_LINE_BYTES, MAX_PENDING_ALERTS_PER_SESSION, REGISTER_WITHIN, TAIL_MS,
};
use gpumon_agent::source::GpuSource;
use gpumon_agent::{AgentConfig, AgentError, SourceSpec};
use gpumon_proto::{
    ActionKind, ActionOutcome, AgentMessage, AgentMessageV1, HookRecord, NodeAlert, PendingAction,
};
use serde_json::{json, Value};
use support::*;

const RANK3: &[u8] = include_bytes!("fixtures/environ/torchrun_rank3.environ");

fn action(id: u64, job: &str, rank: u32) -> PendingAction {
    PendingAction {
        id,
        job: job.into(),
        rank,
        kind: ActionKind::ReleaseCache,
        reason: "rank 3 will run out of memory in 4 min".into(),
    }
}

#[tokio::test]
async fn register_over_a_unix_socket_checks_the_peer_pid() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::unix(dir.path()).await;
    let mut c = server.connect().await;
    let not_me = std::process::id() + 1;
    let answer = c.call(register(not_me, "run-7", 0, None)).await;
    assert_refused(
        &answer,
        &format!("pid {not_me} is not the connecting process"),
    );
    let answer = c.register("run-7", 0).await;
    assert_ok(&answer);
    assert_eq!(answer["session"], json!(1));
    assert_eq!(
        (answer["agent"].as_str(), answer["node"].as_str()),
        (Some("agent-t"), Some("node-t"))
    );
    let sessions = server.hub.sessions();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].registration.pid, std::process::id());
    assert_eq!(server.hub.stats().refused, 1);
    server.stop().await;
}

#[tokio::test]
async fn register_is_refused_when_the_process_environment_names_another_rank() {
    // A fake /proc where this process's environment is torchrun's rank 3:
    // the test process's real environment is shared and left alone.
    let root = tempfile::tempdir().unwrap();
    let me = root.path().join(std::process::id().to_string());
    std::fs::create_dir_all(&me).unwrap();
    std::fs::write(me.join("environ"), RANK3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("unix:{}", dir.path().join("h.sock").display());
    let server = Server::start(&addr, Some(root.path())).await;
    let mut c = server.connect().await;
    let answer = c.register("someone-else", 3).await;
    assert_refused(&answer, "names rank 3 of job \"llama-7b-sft-20240611\"");
    assert_refused(&c.register("llama-7b-sft-20240611", 4).await, "not rank 4");
    assert_ok(&c.register("llama-7b-sft-20240611", 3).await);
    server.stop().await;
}

#[tokio::test]
async fn one_live_session_per_rank() {
    let server = Server::tcp().await;
    let mut a = server.connect().await;
    let mut b = server.connect().await;
    assert_ok(&a.register("run-7", 2).await);
    assert_refused(
        &b.register("run-7", 2).await,
        "already registered by session 1",
    );
    drop(a);
    server.until(|hub| hub.stats().sessions_live == 0).await;
    assert_ok(&b.register("run-7", 2).await);
    server.stop().await;
}

#[tokio::test]
async fn a_second_register_on_a_connection_updates_its_session() {
    let server = Server::tcp().await;
    let mut c = server.connect().await;
    let me = std::process::id();
    assert_eq!(
        c.call(register(me, "run-7", 1, None)).await["session"],
        json!(1)
    );
    assert_eq!(server.hub.sessions()[0].registration.device, None);
    // Once CUDA is initialised the hook knows its device.
    let device = json!({"index": 1, "uuid": "GPU-1", "name": "H100", "total_bytes": 1024});
    let answer = c.call(register(me, "run-7", 1, Some(device))).await;
    assert_eq!(answer["session"], json!(1), "{answer}");
    let sessions = server.hub.sessions();
    assert_eq!(sessions.len(), 1);
    assert_eq!(
        sessions[0]
            .registration
            .device
            .as_ref()
            .unwrap()
            .uuid
            .as_deref(),
        Some("GPU-1")
    );
    assert_refused(
        &c.register("run-7", 2).await,
        "this connection is registered as rank 1",
    );
    server.stop().await;
}

#[tokio::test]
async fn reports_count_good_and_bad_records() {
    let server = Server::tcp().await;
    assert!(server.addr.to_string().starts_with("127.0.0.1:"));
    assert_ne!(server.addr.tcp_addr().unwrap().port(), 0, "the real port");
    let mut c = server.connect().await;
    assert_refused(
        &c.call(report(vec![alloc(now_s(), 1, 2)])).await,
        "register first",
    );
    assert_refused(
        &c.call(json!({"v": 1, "op": "poll"})).await,
        "register first",
    );
    assert_ok(&c.register("run-7", 3).await);
    let t = now_s();
    let answer = c
        .call(report(vec![
            alloc(t, 1 << 30, 2 << 30),
            json!({"type": "step", "t": t, "step": 120, "duration_ms": 212.5,
                   "sections": {"data": 12.1, "forward": 80.2, "backward": 110.0}}),
            alloc(t, 3, 2),
            json!({"type": "event", "t": t, "name": "eval start", "detail": null}),
            json!({"type": "snapshot", "t": t, "name": "before", "stats": {"allocated": 1, "reserved": 2}}),
            alloc(t - 1000.0, 1, 2),
        ]))
        .await;
    assert_ok(&answer);
    assert_eq!(
        (answer["accepted"].clone(), answer["skipped"].clone()),
        (json!(4), json!(2))
    );
    let reasons: Vec<&str> = answer["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(reasons.len(), 2);
    assert_eq!(reasons[0], "record 2: allocated > reserved (3 > 2)");
    assert!(
        reasons[1].starts_with("record 5: t ") && reasons[1].contains("300 s"),
        "{}",
        reasons[1]
    );

    let (records, acks) = server.hub.take_outgoing();
    assert!(acks.is_empty());
    assert_eq!(records.len(), 4);
    assert!(records.iter().all(|r| r.subject() == ("run-7", 3)));
    let HookRecord::Step(step) = &records[1] else {
        panic!("{records:?}")
    };
    assert_eq!(step.sections[0].0, "backward");
    let HookRecord::Event(snap) = &records[3] else {
        panic!("{records:?}")
    };
    assert_eq!(snap.snapshot.unwrap().reserved, 2);
    let stats = server.hub.stats();
    assert_eq!((stats.records_accepted, stats.records_skipped), (4, 2));
    assert_eq!(stats.refused, 2);
    server.stop().await;
}

#[tokio::test]
async fn records_for_another_job_refuse_the_report() {
    let server = Server::tcp().await;
    let mut c = server.connect().await;
    assert_ok(&c.register("run-7", 3).await);
    let mut foreign = alloc(now_s(), 1, 2);
    foreign["job"] = json!("run-8");
    let answer = c.call(report(vec![alloc(now_s(), 1, 2), foreign])).await;
    assert_refused(&answer, "for another job");
    assert!(
        server.hub.take_outgoing().0.is_empty(),
        "nothing of it is kept"
    );
    // The connection stays usable.
    assert_ok(&c.call(report(vec![alloc(now_s(), 1, 2)])).await);
    server.stop().await;
}

#[tokio::test]
async fn a_wrong_version_is_refused_and_the_connection_stays() {
    let server = Server::tcp().await;
    let mut c = server.connect().await;
    let answer = c.call(json!({"v": 2, "op": "poll"})).await;
    assert_refused(&answer, "this agent speaks version 1");
    c.write(b"not json\n\n").await;
    assert_refused(&c.read().await.unwrap(), "not JSON");
    assert_ok(&c.register("run-7", 0).await);
    server.stop().await;
}

#[tokio::test]
async fn an_oversized_line_is_refused_and_the_connection_closed() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::unix(dir.path()).await;
    let mut c = server.connect().await;
    assert_ok(&c.register("run-7", 0).await);
    // One byte over, no newline: the server must read all of it to know,
    // so the write completes before it answers and closes.
    c.write(&vec![b' '; MAX_LINE_BYTES + 1]).await;
    let answer = c.read().await.expect("an error before the close");
    assert_refused(&answer, "may not exceed 1048576 bytes");
    assert_eq!(c.read().await, None, "closed");
    server.until(|hub| hub.stats().sessions_live == 0).await;
    server.stop().await;
}

#[tokio::test]
async fn poll_and_ack_cycle() {
    let server = Server::tcp().await;
    let mut c = server.connect().await;
    assert_ok(&c.register("run-7", 3).await);
    assert_eq!(
        c.call(json!({"v": 1, "op": "poll"})).await["actions"],
        json!([])
    );
    server
        .hub
        .offer_actions(vec![action(12, "run-7", 3), action(13, "run-7", 4)], 1);

    let answer = c.call(json!({"v": 1, "op": "poll"})).await;
    assert_ok(&answer);
    assert_eq!(
        answer["actions"],
        json!([{"id": 12, "kind": "release_cache", "reason": "rank 3 will run out of memory in 4 min"}])
    );
    // Not acknowledged yet: it is still there.
    assert_eq!(
        c.call(json!({"v": 1, "op": "poll"})).await["actions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let (_, acks) = server.hub.take_outgoing();
    assert_eq!(acks.len(), 1, "rank 4 has no session here");
    assert_eq!(acks[0].id, 13);
    assert_eq!(
        acks[0].outcome,
        ActionOutcome::Failed {
            reason: "no gpumon hook is connected for rank 4 of job run-7 on this node".into()
        }
    );

    let ack = json!({"v": 1, "op": "ack", "id": 12, "state": "done", "freed_bytes": 1073741824u64,
                     "at_step": 130, "response": "batch size 32 -> 24", "detail": null});
    assert_ok(&c.call(ack.clone()).await);
    assert_refused(
        &c.call(ack).await,
        "action 12 was not given to this session",
    );
    assert_refused(
        &c.call(json!({"v": 1, "op": "ack", "id": 99, "state": "failed"}))
            .await,
        "action 99 was not given",
    );
    assert_eq!(
        c.call(json!({"v": 1, "op": "poll"})).await["actions"],
        json!([])
    );

    let (_, acks) = server.hub.take_outgoing();
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].id, 12);
    assert_eq!(
        acks[0].outcome,
        ActionOutcome::Done {
            freed_bytes: 1 << 30,
            at_step: Some(130)
        }
    );
    assert_eq!(acks[0].response.as_deref(), Some("batch size 32 -> 24"));

    // The coordinator re-sends it before it has seen the ack: ignored.
    server
        .hub
        .offer_actions(vec![action(12, "run-7", 3), action(13, "run-7", 3)], 2);
    assert_eq!(
        c.call(json!({"v": 1, "op": "poll"})).await["actions"],
        json!([])
    );
    assert!(server.hub.take_outgoing().1.is_empty());
    server.stop().await;
}

fn alert(kind: &str, message: &str) -> HookAlert {
    HookAlert {
        kind: kind.into(),
        severity: HookAlertSeverity::Critical,
        message: message.into(),
        t_ms: 1_763_700_000_250,
    }
}

#[tokio::test]
async fn alerts_come_with_the_next_poll_once() {
    let server = Server::tcp().await;
    let mut c3 = server.connect().await;
    let mut c4 = server.connect().await;
    assert_ok(&c3.register("run-7", 3).await);
    assert_ok(&c4.register("run-7", 4).await);
    assert_eq!(
        c3.call(json!({"v": 1, "op": "poll"})).await["alerts"],
        json!([])
    );
    let hub = &server.hub;
    assert_eq!(hub.post_alert("run-7", None, alert("leak", "job-wide")), 2);
    assert_eq!(
        hub.post_alert("run-7", Some(3), alert("oom_risk", "rank 3")),
        1
    );
    let answer = c3.call(json!({"v": 1, "op": "poll"})).await;
    assert_eq!(
        answer,
        json!({"ok": true, "actions": [], "alerts": [
            {"kind": "leak", "severity": "critical", "job": "run-7", "rank": null,
             "message": "job-wide", "t": 1_763_700_000.25},
            {"kind": "oom_risk", "severity": "critical", "job": "run-7", "rank": 3,
             "message": "rank 3", "t": 1_763_700_000.25}]})
    );
    assert_eq!(
        c3.call(json!({"v": 1, "op": "poll"})).await["alerts"],
        json!([]),
        "delivered once"
    );
    let answer = c4.call(json!({"v": 1, "op": "poll"})).await;
    assert_eq!(answer["alerts"].as_array().unwrap().len(), 1);
    // A hook that does not poll holds a bounded queue.
    for i in 0..MAX_PENDING_ALERTS_PER_SESSION + 1 {
        hub.post_alert("run-7", Some(4), alert("straggler", &i.to_string()));
    }
    let alerts = c4.call(json!({"v": 1, "op": "poll"})).await["alerts"].clone();
    let alerts = alerts.as_array().unwrap();
    assert_eq!(alerts.len(), MAX_PENDING_ALERTS_PER_SESSION);
    assert_eq!(alerts[0]["message"], json!("1"), "the oldest went");
    assert_eq!(hub.stats().alerts_dropped, 1);
    server.stop().await;
}

/// A Python process running `script` with this repository's hook, in a
/// clean environment (no launcher variables) plus `env`, reporting to
/// `server` every 50 ms. Killed if the test ends first.
fn hooked_python(server: &Server, script: &str, env: &[(&str, &str)]) -> tokio::process::Child {
    let package = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    tokio::process::Command::new("python3")
        .args(["-c", script])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("PYTHONPATH", package)
        .env("GPUMON_AGENT", server.addr.to_string())
        .env("GPUMON_REPORT_INTERVAL", "0.05")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs (the test command installs it)")
}

/// Starts the hook with `gpumon.init()`, steps until an alert has reached
/// its callback (10 s at most), then prints what `init` returned and the
/// alerts, each with the thread and step it was delivered at.
const ALERTED_SCRIPT: &str = r#"
import json, threading, time, gpumon
seen = []
gpumon.on_alert(lambda a: seen.append(dict(a, thread=threading.current_thread().name, step=gpumon.stats()["step"])))
ok = gpumon.init()
deadline = time.monotonic() + 10
while not seen and time.monotonic() < deadline:
    gpumon.step()
    time.sleep(0.01)
gpumon.shutdown(2.0)
print(json.dumps({"init": ok, "alerts": seen}))
"#;

/// Runs [`ALERTED_SCRIPT`] with `env`; once its session is up, checks that
/// the agent registered it as rank 0 of a world of 1 in `job` (or in
/// `pid-<PID>`) and posts one alert to `rank`; returns what the script saw.
async fn alerted_python(env: &[(&str, &str)], job: Option<&str>, rank: Option<u32>) -> Value {
    let dir = tempfile::tempdir().unwrap();
    // The real /proc: the agent reads the child's real environment.
    let server = Server::start(
        &format!("unix:{}", dir.path().join("h.sock").display()),
        None,
    )
    .await;
    let child = hooked_python(&server, ALERTED_SCRIPT, env);
    let pid = child.id().unwrap();
    let job = job.map_or_else(|| standalone_job(pid), str::to_owned);
    server.until(|hub| hub.stats().sessions_live == 1).await;
    let reg = server.hub.sessions()[0].registration.clone();
    assert_eq!(
        (
            reg.pid,
            reg.job.as_str(),
            reg.rank,
            reg.local_rank,
            reg.world_size
        ),
        (pid, job.as_str(), 0, 0, 1)
    );
    let posted = alert("memory_level", "GPU memory above 90%");
    assert_eq!(server.hub.post_alert(&job, rank, posted), 1);
    let out = bounded(child.wait_with_output()).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the script failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no output; stderr: {stderr}"));
    server.stop().await;
    serde_json::from_str(line).unwrap()
}

#[tokio::test]
async fn a_plain_python_process_is_rank_0_of_its_own_job_and_gets_alerts() {
    let got = alerted_python(&[], None, None).await;
    assert_eq!(got["init"], json!(true), "{got}");
    let alerts = got["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 1, "{got}");
    let a = &alerts[0];
    assert_eq!(
        (
            &a["kind"],
            &a["severity"],
            &a["message"],
            &a["rank"],
            &a["t"]
        ),
        (
            &json!("memory_level"),
            &json!("critical"),
            &json!("GPU memory above 90%"),
            &Value::Null,
            &json!(1_763_700_000.25)
        )
    );
    assert_eq!(
        a["thread"],
        json!("MainThread"),
        "run in the training thread"
    );
    assert!(a["step"].as_u64().unwrap() >= 1, "at a step boundary: {a}");
}

#[tokio::test]
async fn gpumon_job_names_the_job_of_a_plain_python_process() {
    let got = alerted_python(&[("GPUMON_JOB", "profile-7")], Some("profile-7"), Some(0)).await;
    let alerts = got["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 1, "{got}");
    assert_eq!(
        (&alerts[0]["job"], &alerts[0]["rank"]),
        (&json!("profile-7"), &json!(0))
    );
}

/// Runs the Python `script` with the server's socket path as its argument,
/// in a clean environment, and parses the JSON it prints.
async fn python_on_socket(server: &Server, script: &str) -> Value {
    let path = server.addr.unix_path().unwrap().to_owned();
    let out = tokio::process::Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .kill_on_drop(true)
        .output();
    let out = bounded(out).await.expect("python3 runs");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// A process without launcher variables may not pass itself off as a rank
/// of a real job, whatever it writes on the socket.
#[tokio::test]
async fn a_plain_process_cannot_claim_a_real_rank() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &format!("unix:{}", dir.path().join("h.sock").display()),
        None,
    )
    .await;
    let script = r#"
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
def register(job, rank, world_size):
    claim = {"v": 1, "op": "register", "pid": os.getpid(), "job": job, "rank": rank,
             "local_rank": 0, "world_size": world_size}
    f.write(json.dumps(claim).encode() + b"\n")
    f.flush()
    return json.loads(f.readline())
me = "pid-%d" % os.getpid()
print(json.dumps([register("run-7", 3, 8), register(me, 0, 2), register(me, 0, 1)]))
"#;
    let answers = python_on_socket(&server, script).await;
    assert_refused(&answers[0], "neither launcher variables nor GPUMON_JOB");
    assert_refused(&answers[1], "rank 0 (local rank 0) of 2");
    assert_ok(&answers[2]);
    server.stop().await;
}

/// A hooked process killed with SIGKILL: once its connection closes and
/// the process is gone, the agent queues its word that the rank's process
/// exited (a `process_exit` stall report with the rank's last step), so the
/// hang detector can tell a dead rank from a stopped one without NVML.
#[tokio::test]
async fn a_hooked_process_that_is_killed_is_reported_as_exited() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &format!("unix:{}", dir.path().join("h.sock").display()),
        None,
    )
    .await;
    let script = "import time, gpumon\ngpumon.init()\nwhile True:\n    gpumon.step()\n    time.sleep(0.01)\n";
    let mut child = hooked_python(&server, script, &[]);
    let pid = child.id().unwrap();
    server
        .until(|hub| hub.sessions().iter().any(|s| s.last_step >= Some(3)))
        .await;
    child.start_kill().unwrap();
    bounded(child.wait()).await.unwrap();
    let exits = server.process_exits().await;
    assert_eq!(exits.len(), 1, "{exits:?}");
    let e = &exits[0];
    assert_eq!((e.job.as_str(), e.rank), (standalone_job(pid).as_str(), 0));
    assert!(e.step >= 3, "the rank's last step: {e:?}");
    assert!(e.waiting.is_none() && e.entered.is_empty(), "{e:?}");
    server.stop().await;
}

/// One local user holding its share of connections (this test, as root)
/// is refused past it with a reason, and another user (a child process
/// that drops to uid 65534) still connects and registers.
#[tokio::test]
async fn one_user_cannot_take_every_users_connections() {
    use gpumon_agent::hook_endpoint::MAX_CONNECTIONS_PER_USER;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = Server::start(
        &format!("unix:{}", dir.path().join("h.sock").display()),
        None,
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS_PER_USER {
        held.push(server.connect().await);
    }
    // The share is taken once the server has accepted them all: the next
    // connection of this user is then answered with a refusal and closed.
    let mut extra = server.connect().await;
    let answer = extra.read().await.expect("a refusal");
    assert_refused(&answer, "of this user's");
    assert!(extra.read().await.is_none(), "closed");

    let script = r#"
import json, os, socket, sys
os.setgid(65534)
os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
claim = {"v": 1, "op": "register", "pid": os.getpid(), "job": "pid-%d" % os.getpid(),
         "rank": 0, "local_rank": 0, "world_size": 1}
f.write(json.dumps(claim).encode() + b"\n")
f.flush()
print(f.readline().decode())
"#;
    let answer = python_on_socket(&server, script).await;
    assert_ok(&answer);
    drop(held);
    server.stop().await;
}

#[tokio::test]
async fn a_disconnect_fails_the_pending_actions() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::unix(dir.path()).await;
    let mut c = server.connect().await;
    assert_ok(&c.register("run-7", 1).await);
    server.hub.offer_actions(vec![action(5, "run-7", 1)], 1);
    assert_eq!(
        c.call(json!({"v": 1, "op": "poll"})).await["actions"][0]["id"],
        json!(5)
    );
    drop(c);
    server.until(|hub| hub.stats().sessions_live == 0).await;
    let (_, acks) = server.hub.take_outgoing();
    assert_eq!(acks.len(), 1);
    assert_eq!(
        acks[0].outcome,
        ActionOutcome::Failed {
            reason: DISCONNECTED_REASON.into()
        }
    );
    server.stop().await;
}

#[tokio::test]
async fn the_hook_source_samples_hook_devices_and_their_tail() {
    let server = Server::tcp().await;
    let mut source = HookSource::new(server.hub.clone());
    let mut c = server.connect().await;
    let device = json!({"index": 2, "uuid": null, "name": "NVIDIA H100 80GB HBM3", "total_bytes": 80u64 << 30});
    assert_ok(
        &c.call(register(std::process::id(), "run-7", 5, Some(device)))
            .await,
    );
    let t = now_s();
    let t_ms = (t * 1000.0).round() as u64;
    let mut record = alloc(t, 8 << 30, 10 << 30);
    record["device_used"] = json!(12u64 << 30);
    record["device_total"] = json!(80u64 << 30);
    assert_ok(&c.call(report(vec![record])).await);

    let samples = source.sample(t_ms + 500).unwrap();
    assert_eq!(samples.len(), 1);
    let s = &samples[0];
    assert_eq!(s.gpu.uuid, "hook-node-t-2");
    assert_eq!((s.gpu.index, s.gpu.total_bytes), (2, 80 << 30));
    assert_eq!(s.used_bytes, 12 << 30);
    assert_eq!(s.procs.len(), 1);
    assert_eq!(
        (s.procs[0].pid, s.procs[0].used_bytes),
        (std::process::id(), 10 << 30)
    );
    assert_eq!(
        s.procs[0].rank.as_ref().map(|r| (r.job.as_str(), r.rank)),
        Some(("run-7", 5))
    );
    assert_eq!(source.gpus().len(), 1);

    drop(c);
    server.until(|hub| hub.stats().sessions_live == 0).await;
    let start = t_ms + 1_000;
    for at in [start, start + TAIL_MS] {
        let s = source.sample(at).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].used_bytes, s[0].procs.len()),
            (2 << 30, 0),
            "at +{}",
            at - start
        );
    }
    assert!(source.sample(start + TAIL_MS + 1).unwrap().is_empty());
    assert!(source.gpus().is_empty());
    server.stop().await;
}

/// An agent running as a user keeps its socket to that user; one running
/// as root (the usual node agent) lets every user's jobs connect, and a
/// process of another user really can.
#[tokio::test]
async fn the_socket_is_the_users_or_everyones_for_root_and_removed_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = dir.path().join("run/gpumon/hook.sock");
    let server = Server::start(&format!("unix:{}", sock.display()), None).await;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let euid = rustix::process::geteuid().as_raw();
    let (socket_mode, dir_mode) = gpumon_agent::hook_endpoint::socket_modes(euid);
    assert_eq!(mode(&sock), socket_mode);
    assert_eq!(mode(sock.parent().unwrap()), dir_mode);
    if euid == 0 {
        assert_eq!(socket_mode, 0o666, "root serves every user");
        let connect = format!(
            "import socket; s = socket.socket(socket.AF_UNIX); s.connect({:?}); print('connected')",
            sock.display().to_string()
        );
        let out = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                &connect,
            ])
            .output()
            .expect("setpriv (util-linux) and /usr/bin/python3 run");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("connected"),
            "user nobody could not connect: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        assert_eq!(socket_mode & 0o077, 0, "a user's socket is private");
    }
    server.stop().await;
    assert!(!sock.exists(), "removed at shutdown");
}

#[tokio::test]
async fn refuses_to_listen_off_loopback() {
    for bad in [
        "0.0.0.0:7071",
        "10.1.2.3:7071",
        "[::]:7071",
        "example.com:7071",
    ] {
        let e = bad.parse::<HookAddr>().unwrap_err();
        assert!(e.to_string().contains("not loopback"), "{bad}: {e}");
    }
    assert!(HookAddr::tcp("0.0.0.0:1".parse().unwrap()).is_err());
}

#[tokio::test]
async fn a_live_socket_is_not_taken_over_but_a_stale_one_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("hook.sock");
    let addr: HookAddr = format!("unix:{}", sock.display()).parse().unwrap();

    let first = Server::start(&addr.to_string(), None).await;
    let e = HookServer::bind(&addr, Arc::new(HookHub::new("b", "b")))
        .await
        .unwrap_err();
    assert!(matches!(e, HookError::InUse { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("another process is already listening"),
        "{e}"
    );
    // The live server still answers.
    assert_ok(&first.connect().await.register_as_myself().await);
    first.stop().await;

    // A socket file nothing listens on (an agent that died): replaced.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let second = Server::start(&addr.to_string(), None).await;
    assert_ok(&second.connect().await.register_as_myself().await);
    second.stop().await;

    // Something else at the path is never removed.
    std::fs::write(&sock, b"data").unwrap();
    let e = HookServer::bind(&addr, Arc::new(HookHub::new("c", "c")))
        .await
        .unwrap_err();
    assert!(matches!(e, HookError::NotASocket { .. }), "{e}");
    assert_eq!(std::fs::read(&sock).unwrap(), b"data");
}

#[tokio::test]
async fn the_agent_refuses_to_start_on_a_live_hook_socket() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::unix(dir.path()).await;
    let mut config = AgentConfig::new("node-t");
    config.source = SourceSpec::None;
    config.hook_listen = Some(server.addr.clone());
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let e = bounded(gpumon_agent::run(config, stopped))
        .await
        .unwrap_err();
    assert!(
        matches!(e, AgentError::Hook(HookError::InUse { .. })),
        "{e}"
    );
    assert!(e.to_string().contains(&server.addr.to_string()), "{e}");
    server.stop().await;
}

/// The whole path: a hook's records and a hook-built GPU window reach a
/// (fake) coordinator in pushes, an action in the coordinator's reply
/// reaches the hook's poll, and its ack comes back in a later push.
/// An alert about the host, as a coordinator sends it about the node.
fn host_alert() -> NodeAlert {
    NodeAlert {
        id: 501,
        kind: "memory_level".into(),
        severity: gpumon_proto::api::Severity::Warning,
        message: "host RAM on node-e is 80.0 % used".into(),
        job: None,
        rank: None,
        t_ms: 1_700_000_000_000,
    }
}

#[tokio::test]
async fn the_agent_relays_hook_records_actions_acks_host_memory_and_alerts() {
    // The agent checks the claim against this process's real environment.
    let me = own_claim();
    let (job, rank) = (me.job.clone(), me.rank);
    let mut alerting = false;
    let (url, mut pushes) = fake_coordinator(move |msg| {
        // Answer the first push carrying hook records with an action; from
        // then on, every reply names the host's alert.
        let records = pushed(msg).is_some_and(|p| !p.batch.hook.is_empty());
        let actions = match (records, alerting) {
            (true, false) => vec![action(77, &job, rank)],
            _ => Vec::new(),
        };
        alerting |= records;
        let alerts = if alerting {
            vec![host_alert()]
        } else {
            Vec::new()
        };
        (actions, alerts)
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("hook.sock");
    let mut config = AgentConfig::new("node-e");
    config.coordinators = vec![url];
    config.source = SourceSpec::None;
    config.sample_interval = Duration::from_millis(20);
    config.window = Duration::from_millis(100);
    config.hook_listen = Some(format!("unix:{}", sock.display()).parse().unwrap());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(gpumon_agent::run(config.clone(), stopped));

    let hello = bounded(pushes.recv()).await.unwrap();
    let AgentMessage::V1(AgentMessageV1::Hello(hello)) = hello else {
        panic!("{hello:?}")
    };
    assert_eq!(hello.source, "hook");
    // The agent binds before it says hello.
    let mut c = Client::connect(config.hook_listen.as_ref().unwrap()).await;
    let device = json!({"index": 0, "uuid": "GPU-e2e", "name": "H100", "total_bytes": 80u64 << 30});
    assert_ok(&c.call(me.register(Some(device))).await);
    let mut record = alloc(now_s(), 1 << 30, 2 << 30);
    record["device_used"] = json!(3u64 << 30);
    record["device_total"] = json!(80u64 << 30);
    assert_ok(&c.call(report(vec![record])).await);

    // Pushes until one carries the record; windows of the hook device
    // follow. Every push carries this host's RAM, so it is version 2; the
    // one with the record, which names its device, version 7.
    let mut saw_record = false;
    let mut saw_window = false;
    while !(saw_record && saw_window) {
        let msg = bounded(pushes.recv()).await.unwrap();
        let Some(p) = pushed(&msg) else { continue };
        let host = p.host.expect("host memory in every push");
        assert!(host.total_bytes > 0 && host.used_max_bytes <= host.total_bytes);
        let mine = p
            .batch
            .hook
            .iter()
            .any(|r| r.subject() == (me.job.as_str(), me.rank));
        let version = if mine { 7 } else { 2 };
        assert_eq!(msg.version(), version, "{msg:?}");
        saw_record |= mine;
        saw_window |= p
            .batch
            .windows
            .iter()
            .any(|w| w.gpu.uuid == "GPU-e2e" && w.used_bytes.max == 3 << 30);
    }
    // The reply to the record's push carried the action and the host's
    // alert; the uplink hands them to the hub before it sends its next
    // message: wait for that one.
    bounded(pushes.recv()).await.unwrap();
    let answer = c.call(json!({"v": 1, "op": "poll"})).await;
    assert_eq!(answer["actions"][0]["id"], json!(77), "{answer}");
    let alerts = answer["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 1, "{answer}");
    assert_eq!(
        (
            &alerts[0]["kind"],
            &alerts[0]["severity"],
            &alerts[0]["job"]
        ),
        (&json!("memory_level"), &json!("warning"), &json!(me.job)),
        "the host's alert, posted to the job of every session"
    );
    assert_eq!(alerts[0]["rank"], Value::Null);
    assert_eq!(alerts[0]["message"], json!(host_alert().message));
    // Later replies name it again; the hook hears it once.
    bounded(pushes.recv()).await.unwrap();
    bounded(pushes.recv()).await.unwrap();
    let answer = c.call(json!({"v": 1, "op": "poll"})).await;
    assert_eq!(answer["alerts"], json!([]), "{answer}");
    let ack = json!({"v": 1, "op": "ack", "id": 77, "state": "done", "freed_bytes": 5});
    assert_ok(&c.call(ack).await);
    loop {
        let msg = bounded(pushes.recv()).await.unwrap();
        if let Some(p) = pushed(&msg) {
            if let Some(a) = p.batch.acks.iter().find(|a| a.id == 77) {
                assert_eq!(
                    a.outcome,
                    ActionOutcome::Done {
                        freed_bytes: 5,
                        at_step: None
                    }
                );
                break;
            }
        }
    }
    stop.send(true).unwrap();
    bounded(agent).await.unwrap().unwrap();
    assert!(!sock.exists(), "the socket goes with the agent");
}

/// Connections that never register are closed after `REGISTER_WITHIN`, so
/// idle connections cannot hold the agent's connection slots (and lock
/// every job on the node out); a session that registered stays.
#[tokio::test]
async fn idle_connections_are_closed_at_their_deadline_and_sessions_stay() {
    let server = Server::tcp().await;
    let mut session = server.connect().await;
    assert_ok(&session.register("run-7", 1).await);
    let idle: Vec<tokio::net::TcpStream> = {
        let mut idle = Vec::new();
        for _ in 0..64 {
            idle.push(
                tokio::net::TcpStream::connect(server.addr.tcp_addr().unwrap())
                    .await
                    .unwrap(),
            );
        }
        idle
    };
    // Each idle connection is closed by the agent: its read sees the end.
    for mut stream in idle {
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(REGISTER_WITHIN * 3, async {
            tokio::io::AsyncReadExt::read(&mut stream, &mut buf).await
        })
        .await
        .expect("closed within the deadline, with room for a busy machine");
        assert_eq!(read.unwrap(), 0, "closed without an answer");
    }
    server.until(|hub| hub.stats().idle_closed == 64).await;
    assert_eq!(server.hub.stats().sessions_live, 1);
    assert_ok(&session.register("run-7", 1).await);
    server.stop().await;
}
