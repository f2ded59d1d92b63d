//! Live settings on a real 3-replica cluster, through `gpumon config`:
//! - a change sent to a follower reaches the leader (421 followed), commits
//!   through the log and shows on every replica, cluster-wide and for one
//!   job, with one state digest;
//! - a bad value, an unknown key, or a GPU-wide key for one job is refused
//!   with 400 naming the key and what it takes, and changes nothing;
//! - the leader's `/metrics` carries the values in effect (`gpumon_setting`);
//! - a replica killed after it took a snapshot and restarted keeps them;
//! - `reset` puts them back.

mod support;

use std::time::Duration;

use gpumon_proto::api::{ConfigBody, SettingView};
use support::cluster::Cluster;
use support::gpumon;

const ELECT_WITHIN: Duration = Duration::from_secs(15);
const APPLY_WITHIN: Duration = Duration::from_secs(30);
const TEST_WITHIN: Duration = Duration::from_secs(240);

/// `gpumon config ARGS --coordinators URLS`: exit code, stdout, stderr.
async fn config(urls: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = gpumon();
    cmd.arg("config").args(args).args(["--coordinators", urls]);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("gpumon config ends within 60 s")
        .expect("gpumon config runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn setting<'a>(body: &'a ConfigBody, key: &str) -> &'a SettingView {
    body.settings
        .iter()
        .find(|s| s.key == key)
        .unwrap_or_else(|| panic!("no {key} in {body:?}"))
}

/// Whether `body` shows `key` at `value`, from `source`.
fn shows(body: &ConfigBody, key: &str, value: &str, source: &str) -> Result<(), String> {
    let s = setting(body, key);
    if s.value.as_deref() == Some(value) && s.source == source {
        Ok(())
    } else {
        Err(format!("{key} is {:?} from {}", s.value, s.source))
    }
}

async fn read(c: &Cluster, id: u64, path: &str) -> Result<ConfigBody, String> {
    c.get_from(id, path).await.map(|(body, _)| body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_change_live_on_every_replica_survive_a_restart_and_reset() {
    tokio::time::timeout(TEST_WITHIN, live_settings())
        .await
        .expect("the test ends within its deadline");
}

async fn live_settings() {
    let mut c = Cluster::start(3, &["--snapshot-every-entries", "3"]).await;
    let all = c.ids();
    let leader = c.wait_leader(ELECT_WITHIN).await;
    let follower = *all.iter().find(|&&id| id != leader).unwrap();
    // The follower first: the command follows its 421 to the leader.
    let urls = format!("{},{}", c.url(follower), c.url(leader));

    let (code, out, err) = config(
        &urls,
        &[
            "set",
            "straggler.min_loss_ms=7",
            "memory_levels.warning_pct=70",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("cluster-wide")
            && out.contains("straggler.min_loss_ms")
            && out.contains(" 7 "),
        "{out}"
    );
    let (code, out, err) = config(&urls, &["set", "--job", "noisy", "straggler.h_sigma=9"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("for job noisy"), "{out}");

    for &id in &all {
        c.wait(APPLY_WITHIN, "the change on every replica", || async {
            let body = read(&c, id, "/api/v1/config").await?;
            shows(&body, "straggler.min_loss_ms", "7", "cluster")?;
            shows(&body, "memory_levels.warning_pct", "70", "cluster")?;
            shows(&body, "straggler.h_sigma", "10", "config")?;
            let job = read(&c, id, "/api/v1/config?job=noisy").await?;
            shows(&job, "straggler.h_sigma", "9", "job")?;
            shows(&job, "straggler.min_loss_ms", "7", "cluster")
        })
        .await;
    }

    // Refused before anything is proposed, naming the key and its bounds.
    let before: ConfigBody = c.get(leader, "/api/v1/config").await;
    let (code, out, err) = config(&urls, &["set", "straggler.h_sigma=0.5"]).await;
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("straggler.h_sigma") && err.contains("from 1 to 100"),
        "{err}"
    );
    let (code, _, err) = config(&urls, &["set", "--job", "noisy", "forecast.horizon_s=600"]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cluster-wide only"), "{err}");
    let client = gpumon_net::plain_client_builder().build().unwrap();
    let resp = client
        .post(format!("{}/api/v1/config", c.url(leader)))
        .json(&serde_json::json!({"set": {"max_jobs": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("no live setting") && text.contains("straggler.min_loss_frac"),
        "{text}"
    );
    let after: ConfigBody = c.get(leader, "/api/v1/config").await;
    assert_eq!(after, before, "a refused change changes nothing");

    // The leader exports the values in effect.
    let metrics = client
        .get(format!("{}/metrics", c.url(leader)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        r#"gpumon_setting{key="straggler.min_loss_ms",job="",source="cluster"} 7"#,
        r#"gpumon_setting{key="straggler.h_sigma",job="noisy",source="job"} 9"#,
        r#"gpumon_setting{key="forecast.horizon_s",job="",source="config"} "#,
    ] {
        assert!(metrics.contains(line), "no {line:?} in\n{metrics}");
    }

    // A follower with a snapshot holding the overrides, killed and restarted.
    let snapshot = c
        .wait(APPLY_WITHIN, "a snapshot on the follower", || async {
            let s = c.try_status(follower).await?;
            s.snapshot_index.ok_or(format!("{s:?}"))
        })
        .await;
    c.kill9(follower).await;
    c.restart(follower).await;
    let applied = c.status(leader).await.applied_index.unwrap();
    c.wait_converged(&all, applied.max(snapshot), APPLY_WITHIN)
        .await;
    let body: ConfigBody = c.get(follower, "/api/v1/config?job=noisy").await;
    shows(&body, "straggler.h_sigma", "9", "job").unwrap();
    shows(&body, "straggler.min_loss_ms", "7", "cluster").unwrap();

    // Reset: the cluster's to the configuration's, the job's to the cluster's.
    let (code, out, err) = config(&urls, &["reset", "--all"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = config(&urls, &["reset", "--job", "noisy", "straggler.h_sigma"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    for &id in &all {
        c.wait(APPLY_WITHIN, "the reset on every replica", || async {
            let body = read(&c, id, "/api/v1/config").await?;
            shows(&body, "straggler.min_loss_ms", "1", "config")?;
            if body.cluster_overrides.is_empty() && body.job_overrides.is_empty() {
                Ok(())
            } else {
                Err(format!("{body:?}"))
            }
        })
        .await;
    }
    let (code, out, err) = config(&urls, &["show"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("straggler.min_loss_ms") && l.contains("config")),
        "{out}"
    );
}
