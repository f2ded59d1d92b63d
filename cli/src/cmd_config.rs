//! `gpumon config show|set|reset [--job JOB]`: the live settings.
//!
//! `show` reads `GET /api/v1/config` from the first replica that answers;
//! `set` and `reset` send `POST /api/v1/config` to the leader, which
//! commits the change through the Raft log: every replica applies it from
//! the next window, and a `gpumon record` running at the time records it
//! for `gpumon replay`. A bad key or value is refused before anything is
//! committed, naming the key and what it takes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use gpumon_proto::api::{ConfigBody, ConfigChange, SettingInput};
use reqwest::Method;

use crate::admin_client::Admin;
use crate::api_client::encode_segment;
use crate::args::{ConfigArgs, ConfigCommand};
use gpumon_tools::failure::{usage, Failure};

/// Time allowed for one request (a change waits for its commit).
const TIMEOUT: Duration = Duration::from_secs(10);

pub async fn run(args: ConfigArgs) -> Result<(), Failure> {
    let admin = Admin::new(&args.admin, TIMEOUT)?;
    match args.what {
        ConfigCommand::Show { job, json } => {
            let path = match &job {
                Some(j) => format!("/api/v1/config?job={}", encode_segment(j)),
                None => "/api/v1/config".to_owned(),
            };
            let body: ConfigBody = admin.read(&path).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&body)?);
            } else {
                print!("{}", render(&body));
            }
            Ok(())
        }
        ConfigCommand::Set { job, pairs } => {
            let set = pairs
                .iter()
                .map(|p| parse_pair(p))
                .collect::<Result<BTreeMap<_, _>, _>>()?;
            let change = ConfigChange {
                job,
                set,
                ..ConfigChange::default()
            };
            send(&admin, &change).await
        }
        ConfigCommand::Reset { job, all, keys } => {
            let change = ConfigChange {
                job,
                reset: keys,
                reset_all: all,
                ..ConfigChange::default()
            };
            send(&admin, &change).await
        }
    }
}

async fn send(admin: &Admin, change: &ConfigChange) -> Result<(), Failure> {
    let body = serde_json::to_vec(change)?;
    let after: ConfigBody = admin
        .change(Method::POST, "/api/v1/config", Some(body))
        .await?;
    let scope = change
        .job
        .as_deref()
        .map_or("cluster-wide".to_owned(), |j| format!("for job {j}"));
    println!("changed {scope}; in effect from the next window:");
    let touched: Vec<&str> = change
        .set
        .keys()
        .map(String::as_str)
        .chain(change.reset.iter().map(String::as_str))
        .collect();
    let shown = ConfigBody {
        settings: after
            .settings
            .into_iter()
            .filter(|s| change.reset_all || touched.contains(&s.key.as_str()))
            .collect(),
        ..after
    };
    print!("{}", render(&shown));
    Ok(())
}

/// `KEY=VALUE` as the API takes it: a number where it reads as one.
fn parse_pair(pair: &str) -> Result<(String, SettingInput), Failure> {
    let (key, value) = pair
        .split_once('=')
        .filter(|(k, v)| !k.trim().is_empty() && !v.trim().is_empty())
        .ok_or_else(|| usage(format!("{pair:?} is not KEY=VALUE")))?;
    let value = value.trim();
    let input = match value.parse::<f64>() {
        Ok(n) if n.is_finite() => SettingInput::Number(n),
        _ => SettingInput::Text(value.to_owned()),
    };
    Ok((key.trim().to_owned(), input))
}

/// One line per key: value, where it comes from, what it takes.
fn render(body: &ConfigBody) -> String {
    let mut out = String::new();
    if let Some(job) = &body.job {
        let _ = writeln!(out, "job {job}");
    }
    let width = body.settings.iter().map(|s| s.key.len()).max().unwrap_or(3);
    let _ = writeln!(
        out,
        "{:<width$}  {:>10}  {:<7}  takes",
        "key", "value", "from"
    );
    for s in &body.settings {
        let value = s.value.as_deref().unwrap_or("[notify]");
        let scope = if s.scope == "cluster" {
            ", cluster-wide only"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:<width$}  {:>10}  {:<7}  {}{scope}",
            s.key, value, s.source, s.takes
        );
    }
    if body.job.is_none() && !body.job_overrides.is_empty() {
        let _ = writeln!(out, "jobs with settings of their own:");
        for (job, o) in &body.job_overrides {
            let pairs: Vec<String> = o.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(out, "  {job}: {}", pairs.join(" "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_read_numbers_as_numbers_and_names_as_text() {
        let (k, v) = parse_pair("straggler.min_loss_ms=5").unwrap();
        assert_eq!(
            (k.as_str(), v),
            ("straggler.min_loss_ms", SettingInput::Number(5.0))
        );
        let (_, v) = parse_pair("notify.min_severity = critical").unwrap();
        assert_eq!(v, SettingInput::Text("critical".into()));
        assert!(parse_pair("straggler.min_loss_ms").is_err());
        assert!(parse_pair("=5").is_err());
    }
}
