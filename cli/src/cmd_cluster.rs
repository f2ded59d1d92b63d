//! `gpumon cluster status|add|remove`: the coordinators' Raft membership.
//!
//! `status` asks the first replica that answers for the member list, then
//! every member for its own figures, and prints one line per replica (an
//! unreachable one is shown as such). `add` and `remove` go to the leader:
//! a follower answers 421 with the leader's URL and the command follows it.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{anyhow, Context};
use gpumon_coordinator::peers::check_addr;
use gpumon_proto::api::{AddMember, RaftStatus};
use reqwest::Method;

use crate::admin_client::Admin;
use crate::args::{ClusterArgs, ClusterCommand};
use gpumon_tools::failure::{usage, Failure};
/// Time allowed for one membership change (a new replica must catch up first).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(150);

pub async fn run(args: ClusterArgs) -> Result<(), Failure> {
    let admin = Admin::new(&args.admin, CHANGE_TIMEOUT)?;
    match args.what {
        ClusterCommand::Status { json } => status(&admin, json).await,
        ClusterCommand::Add { member, learner } => {
            let (id, addr) = member
                .split_once('=')
                .ok_or_else(|| usage(format!("{member:?} is not ID=HOST:PORT")))?;
            let id: u64 = id
                .parse()
                .ok()
                .filter(|id| *id > 0)
                .ok_or_else(|| usage(format!("{id:?} is not a positive Raft id")))?;
            check_addr(addr).map_err(usage)?;
            let body = serde_json::to_vec(&AddMember {
                id,
                addr: addr.to_owned(),
                learner,
            })?;
            let s: RaftStatus = admin
                .change(Method::POST, "/api/v1/cluster/members", Some(body))
                .await?;
            let what = if learner { "learner" } else { "voter" };
            println!("added replica {id} at {addr} as a {what}");
            print!("{}", members_line(&s));
            Ok(())
        }
        ClusterCommand::Remove { id } => {
            let s: RaftStatus = admin
                .change(
                    Method::DELETE,
                    &format!("/api/v1/cluster/members/{id}"),
                    None,
                )
                .await?;
            println!("removed replica {id}");
            print!("{}", members_line(&s));
            Ok(())
        }
    }
}

async fn fetch_status(admin: &Admin, base: &str) -> anyhow::Result<RaftStatus> {
    let url = format!("{base}/api/v1/raft");
    let mut req = admin.client.get(&url);
    if let Some(token) = &admin.token {
        req = req.bearer_auth(token);
    }
    let resp = req
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    if !resp.status().is_success() {
        return Err(anyhow!("{url} answered {}", resp.status()));
    }
    resp.json()
        .await
        .with_context(|| format!("{url} answered unexpected JSON"))
}

async fn status(admin: &Admin, json: bool) -> Result<(), Failure> {
    let mut first = None;
    let mut errors = Vec::new();
    let mut scheme = "http";
    for url in &admin.urls {
        match fetch_status(admin, url).await {
            Ok(s) => {
                first = Some(s);
                // Replicas of one cluster speak one scheme.
                scheme = if url.starts_with("https://") {
                    "https"
                } else {
                    "http"
                };
                break;
            }
            Err(e) => errors.push(format!("{e:#}")),
        }
    }
    let Some(first) = first else {
        return Err(anyhow!("no coordinator answered: {}", errors.join("; ")).into());
    };
    let mut rows = Vec::new();
    for m in first.voters.iter().chain(&first.learners) {
        let got = if m.id == first.id {
            Ok(first.clone())
        } else {
            fetch_status(admin, &format!("{scheme}://{}", m.addr)).await
        };
        rows.push((m.id, m.addr.clone(), got));
    }
    if json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|(id, addr, got)| match got {
                Ok(s) => serde_json::to_value(s).unwrap_or_default(),
                Err(e) => serde_json::json!({"id": id, "addr": addr, "error": format!("{e:#}")}),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", render(&first, &rows));
    }
    Ok(())
}

type Row = (u64, String, anyhow::Result<RaftStatus>);

fn render(first: &RaftStatus, rows: &[Row]) -> String {
    let mut out = String::new();
    // Replication lag is the leader's view; fall back to the first answer.
    let first = rows
        .iter()
        .filter_map(|(_, _, got)| got.as_ref().ok())
        .find(|s| s.role == "leader")
        .unwrap_or(first);
    let _ = writeln!(
        out,
        "{:>4}  {:<22} {:<9} {:>5} {:>7} {:>9} {:>9} {:>6} {:>9}  digest",
        "id", "address", "role", "term", "leader", "commit", "applied", "lag", "snapshot"
    );
    let opt = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    for (id, addr, got) in rows {
        match got {
            Ok(s) => {
                let lag = first
                    .replication
                    .iter()
                    .find(|r| r.id == *id)
                    .map_or("-".to_owned(), |r| r.lag.to_string());
                let _ = writeln!(
                    out,
                    "{:>4}  {:<22} {:<9} {:>5} {:>7} {:>9} {:>9} {:>6} {:>9}  {}",
                    id,
                    addr,
                    s.role,
                    s.term,
                    opt(s.leader),
                    opt(s.commit_index),
                    opt(s.applied_index),
                    lag,
                    opt(s.snapshot_index),
                    s.state_digest
                );
            }
            Err(e) => {
                let _ = writeln!(out, "{id:>4}  {addr:<22} unreachable: {e:#}");
            }
        }
    }
    out
}

fn members_line(s: &RaftStatus) -> String {
    let list = |ms: &[gpumon_proto::api::RaftMember]| {
        ms.iter()
            .map(|m| format!("{}={}", m.id, m.addr))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut line = format!("voters: {}", list(&s.voters));
    if !s.learners.is_empty() {
        let _ = write!(line, "; learners: {}", list(&s.learners));
    }
    line.push('\n');
    line
}
