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
use gpumon_proto::api::{AddMember, ApiErrorBody, RaftStatus};
use reqwest::{Method, StatusCode};

use gpumon_common::secrets::read_secret;

use crate::args::{ClusterArgs, ClusterCommand};
use crate::{usage, Failure};

/// Leader hints followed before giving up.
const MAX_HOPS: usize = 3;
/// Time allowed for one membership change (a new replica must catch up first).
const CHANGE_TIMEOUT: Duration = Duration::from_secs(150);

pub async fn run(args: ClusterArgs) -> Result<(), Failure> {
    let urls: Vec<String> = args
        .coordinators
        .iter()
        .map(|u| u.trim().trim_end_matches('/').to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    if urls.is_empty() {
        return Err(usage("--coordinators is empty"));
    }
    let token = match (&args.admin_token_file, &args.admin_token) {
        (Some(path), _) => Some(read_secret(path).map_err(usage)?.expose().to_owned()),
        (None, token) => token.clone(),
    };
    let tls = args.tls.resolve((None, None, None)).map_err(usage)?;
    let client = gpumon_net::client_builder(&tls)?
        .timeout(CHANGE_TIMEOUT)
        .connect_timeout(Duration::from_secs(2))
        .build()?;
    let admin = Admin {
        client: &client,
        token: token.as_deref(),
    };
    match args.what {
        ClusterCommand::Status { json } => status(&admin, &urls, json).await,
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
            let s = admin
                .change(&urls, Method::POST, "/api/v1/cluster/members", Some(body))
                .await?;
            let what = if learner { "learner" } else { "voter" };
            println!("added replica {id} at {addr} as a {what}");
            print!("{}", members_line(&s));
            Ok(())
        }
        ClusterCommand::Remove { id } => {
            let s = admin
                .change(
                    &urls,
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

/// A membership change sent to the leader, following hints.
struct Admin<'a> {
    client: &'a reqwest::Client,
    token: Option<&'a str>,
}

impl Admin<'_> {
    async fn change(
        &self,
        urls: &[String],
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<RaftStatus, Failure> {
        let mut last_error = None;
        let mut targets: Vec<String> = urls.to_vec();
        let mut hops = 0;
        while let Some(base) = targets.first().cloned() {
            targets.remove(0);
            let url = format!("{base}{path}");
            let mut req = self.client.request(method.clone(), &url);
            if let Some(token) = self.token {
                req = req.bearer_auth(token);
            }
            if let Some(b) = &body {
                req = req
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(b.clone());
            }
            let resp = match req.send().await {
                Ok(r) => r,
                Err(e) => {
                    last_error = Some(anyhow!("cannot reach {url}: {e}"));
                    continue;
                }
            };
            let code = resp.status();
            if code.is_success() {
                return Ok(resp
                    .json()
                    .await
                    .with_context(|| format!("{url} answered unexpected JSON"))?);
            }
            let text = resp.text().await.unwrap_or_default();
            let err: Option<ApiErrorBody> = serde_json::from_str(&text).ok();
            let message = err.as_ref().map_or(text.clone(), |e| e.message.clone());
            match code {
                StatusCode::MISDIRECTED_REQUEST => {
                    if let Some(leader) = err.and_then(|e| e.leader_url) {
                        hops += 1;
                        if hops > MAX_HOPS {
                            return Err(anyhow!(
                                "leader hints went round in circles; last: {leader}"
                            )
                            .into());
                        }
                        targets.insert(0, leader);
                    }
                    last_error = Some(anyhow!("{url}: {message}"));
                }
                StatusCode::SERVICE_UNAVAILABLE => last_error = Some(anyhow!("{url}: {message}")),
                StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND | StatusCode::CONFLICT => {
                    return Err(usage(format!("{url}: {message}")))
                }
                _ => return Err(anyhow!("{url} answered {code}: {message}").into()),
            }
        }
        Err(last_error
            .unwrap_or_else(|| anyhow!("no coordinator answered"))
            .into())
    }
}

async fn fetch_status(admin: &Admin<'_>, base: &str) -> anyhow::Result<RaftStatus> {
    let url = format!("{base}/api/v1/raft");
    let mut req = admin.client.get(&url);
    if let Some(token) = admin.token {
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

async fn status(admin: &Admin<'_>, urls: &[String], json: bool) -> Result<(), Failure> {
    let mut first = None;
    let mut errors = Vec::new();
    let mut scheme = "http";
    for url in urls {
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
