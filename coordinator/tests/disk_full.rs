//! A disk that fills up: on a small file system of its own (a tmpfs, so the
//! test needs root, as CI has), a replica refuses writes with 507 naming
//! the data directory once less than its floor is free, says it is not
//! ready, and takes writes again by itself when space returns.

mod support;

use std::path::Path;
use std::process::Command;

use gpumon_proto::api::ApiErrorBody;
use gpumon_proto::{wire, AgentMessage, AgentMessageV1, Hello};

const MIB: u64 = 1 << 20;

fn hello(agent: u32) -> AgentMessage {
    AgentMessage::V1(AgentMessageV1::Hello(Hello {
        agent_id: format!("agent-{agent}"),
        incarnation: 1,
        node: format!("node-{agent}"),
        agent_version: "test".into(),
        source: "none".into(),
        gpus: Vec::new(),
    }))
}

/// A tmpfs of `mib` MiB at `at`, unmounted on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &Path, mib: u64) -> Self {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(at)
            .status()
            .expect("mount runs");
        assert!(
            ok.success(),
            "mounting a tmpfs needs root (CI runs as root)"
        );
        Self(at.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_with_507_and_they_resume_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let _fs = Tmpfs::mount(dir.path(), 32);
    let data = dir.path().join("data");
    let c = support::start_with(&data, |c| c.min_free_bytes = 12 * MIB).await;
    let url = c.api_url();
    support::push(&url, &hello(0)).await;

    // Fill the file system until less than the floor is free.
    let free = rustix::fs::statvfs(dir.path())
        .map(|s| s.f_bavail * s.f_frsize)
        .unwrap();
    let ballast = dir.path().join("ballast");
    std::fs::write(&ballast, vec![0u8; (free - 8 * MIB) as usize]).unwrap();

    let client = gpumon_net::plain_client_builder().build().unwrap();
    let push = |agent| {
        client
            .post(format!("{url}/api/v1/ingest"))
            .body(wire::encode(&hello(agent)))
            .send()
    };
    let resp = push(1).await.unwrap();
    assert_eq!(resp.status(), 507);
    let body: ApiErrorBody = resp.json().await.unwrap();
    assert!(
        body.message.contains(&data.display().to_string()),
        "{body:?}"
    );
    let ready = support::http()
        .get(format!("{url}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    assert_eq!(
        support::http()
            .get(format!("{url}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200,
        "full is not dead: no restart needed"
    );

    std::fs::remove_file(&ballast).unwrap();
    assert_eq!(
        push(2).await.unwrap().status(),
        200,
        "writes resume by themselves"
    );
    assert_eq!(
        support::http()
            .get(format!("{url}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    c.shutdown().await;
}

/// A webhook receiver on loopback that holds its first request until
/// released, then answers 200 to everything; counts what it got.
struct HeldReceiver {
    url: String,
    got: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    release: std::sync::Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl HeldReceiver {
    async fn start() -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let got = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let (g, r) = (got.clone(), release.clone());
        let app = axum::Router::new().fallback(move || {
            let (g, r) = (g.clone(), r.clone());
            async move {
                if g.fetch_add(1, Ordering::SeqCst) == 0 {
                    r.notified().await;
                }
                axum::http::StatusCode::OK
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            got,
            release,
            task,
        }
    }

    fn got(&self) -> usize {
        self.got.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for HeldReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits, at most 30 s, until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within 30 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The leader's own writes take the same path as a client's: a notification
/// it sent while the disk filled is not recorded (the storage check refuses
/// the record, as it refuses a push), and while the disk stays full the
/// notifier sends nothing more; once space returns it sends the unrecorded
/// one again, once, and records it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_with_a_full_disk_neither_records_nor_keeps_sending_notifications() {
    use gpumon_coordinator::notify::{NotifyConfig, Receiver};
    use gpumon_core::notify::ReceiverKind;
    let rx = HeldReceiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let _fs = Tmpfs::mount(dir.path(), 32);
    let data = dir.path().join("data");
    let receivers = vec![Receiver::new(ReceiverKind::Webhook, rx.url.clone())];
    let c = support::start_with(&data, |c| {
        c.min_free_bytes = 12 * MIB;
        c.notify = NotifyConfig {
            receivers,
            interval_ms: 100,
            backoff_initial_ms: 50,
            backoff_max_ms: 200,
            ..NotifyConfig::default()
        };
    })
    .await;
    let url = c.api_url();
    for seq in 1..=20 {
        support::push(&url, &support::leak_batch(seq)).await;
    }
    until("the first notification arrives (and is held)", || {
        rx.got() >= 1
    })
    .await;
    let stats = || c.notify_stats().get(ReceiverKind::Webhook);
    assert_eq!(stats().recorded, 0);

    let free = rustix::fs::statvfs(dir.path())
        .map(|s| s.f_bavail * s.f_frsize)
        .unwrap();
    let ballast = dir.path().join("ballast");
    std::fs::write(&ballast, vec![0u8; (free - 8 * MIB) as usize]).unwrap();
    let held = rx.got();
    rx.release.notify_one();
    until("the sent notification is refused its record", || {
        stats().unrecorded >= 1
    })
    .await;
    // Twenty rounds with the disk full: nothing more goes out.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(rx.got(), held, "a leader that cannot record sent again");
    assert_eq!(stats().recorded, 0);

    std::fs::remove_file(&ballast).unwrap();
    // Each send is then recorded, or was refused its record once.
    until("notifications are sent again and recorded", || {
        let s = stats();
        s.recorded >= 1 && rx.got() as u64 == s.recorded + s.unrecorded
    })
    .await;
    c.shutdown().await;
}
