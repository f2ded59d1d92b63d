//! A small client of the coordinator's read API, shared by `gpumon status`
//! and `gpumon top`: one call gathers the cluster, the jobs, each job's
//! analysis and the active alerts.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, Context};
use gpumon_proto::api::{Alert, AlertsBody, ClusterView, JobSummary, JobWithAnalysis, JobsView};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Longest wait for one response.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A coordinator's API.
#[derive(Debug, Clone)]
pub struct ApiClient {
    base: String,
    http: reqwest::Client,
}

/// Everything `status` and `top` show, read at one moment.
#[derive(Debug, Serialize)]
pub struct ClusterSnapshot {
    /// Agents, counts and the replica's Raft view.
    pub cluster: ClusterView,
    /// Jobs and their ranks' placement and memory.
    pub jobs: JobsView,
    /// Per job: the engine's forecasts and flags per rank.
    pub analysis: BTreeMap<String, JobSummary>,
    /// Active alert episodes, oldest first.
    pub alerts: Vec<Alert>,
}

impl ApiClient {
    /// A client of the coordinator at `base` (e.g. `http://127.0.0.1:7070`),
    /// verifying an https one per `tls`.
    pub fn new(base: &str, tls: &gpumon_net::ClientTls) -> anyhow::Result<Self> {
        let url = reqwest::Url::parse(base)
            .with_context(|| format!("--coordinator {base:?} is not a URL"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(anyhow!(
                "--coordinator {base:?} must be an http:// or https:// URL"
            ));
        }
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            http: gpumon_net::client_builder(tls)?.timeout(TIMEOUT).build()?,
        })
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path` as JSON.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        let url = format!("{}{path}", self.base);
        self.get_if_found(path)
            .await?
            .ok_or_else(|| anyhow!("{url} answered 404 Not Found"))
    }

    /// `GET path` as JSON; `None` when it answers 404.
    pub async fn get_if_found<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<Option<T>> {
        let url = format!("{}{path}", self.base);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .with_context(|| format!("cannot reach {url}"))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(anyhow!("{url} answered {status}: {body}"));
        }
        resp.json()
            .await
            .map(Some)
            .with_context(|| format!("{url} did not answer with the expected JSON"))
    }

    /// The cluster, its jobs with their analysis, and the active alerts.
    pub async fn snapshot(&self) -> anyhow::Result<ClusterSnapshot> {
        let cluster: ClusterView = self.get("/api/v1/cluster").await?;
        let jobs: JobsView = self.get("/api/v1/jobs").await?;
        let mut analysis = BTreeMap::new();
        for job in &jobs.jobs {
            let path = format!("/api/v1/jobs/{}", encode_segment(&job.job));
            // `None`: forgotten between the two reads; shown without analysis.
            let detail: Option<JobWithAnalysis> = self.get_if_found(&path).await?;
            if let Some(a) = detail.and_then(|d| d.analysis) {
                analysis.insert(job.job.clone(), a);
            }
        }
        let alerts: AlertsBody = self.get("/api/v1/alerts?active=true").await?;
        Ok(ClusterSnapshot {
            cluster,
            jobs,
            analysis,
            alerts: alerts.alerts,
        })
    }
}

/// Percent-encodes a path segment (job names are user input).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_are_encoded_as_one_path_segment() {
        assert_eq!(encode_segment("llama-70b_run.3"), "llama-70b_run.3");
        assert_eq!(encode_segment("a/b c?%"), "a%2Fb%20c%3F%25");
    }

    #[test]
    fn a_coordinator_that_is_not_an_http_url_is_refused() {
        assert!(ApiClient::new("127.0.0.1:7070", &Default::default()).is_err());
        assert!(ApiClient::new("ftp://x", &Default::default()).is_err());
        assert!(ApiClient::new("http://127.0.0.1:7070/", &Default::default()).is_ok());
    }
}
