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
