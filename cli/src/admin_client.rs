//! Admin requests to the coordinators (`gpumon cluster`, `gpumon config`):
//! the first replica that answers serves reads; writes go to the leader,
//! following a follower's 421 with the leader's URL.

use std::time::Duration;

use anyhow::{anyhow, Context};
use gpumon_proto::api::ApiErrorBody;
use gpumon_runtime::secrets::read_secret;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;

use crate::args::AdminArgs;
use gpumon_tools::failure::{usage, Failure};

/// Leader hints followed before giving up.
const MAX_HOPS: usize = 3;

/// The coordinators, a client and the admin token.
pub struct Admin {
    pub urls: Vec<String>,
    pub client: reqwest::Client,
    pub token: Option<String>,
}

impl Admin {
    /// From the command line; `timeout` bounds one request.
    pub fn new(args: &AdminArgs, timeout: Duration) -> Result<Self, Failure> {
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
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        Ok(Self {
            urls,
            client,
            token,
        })
    }

    /// `GET path` from the first replica that answers.
    pub async fn read<T: DeserializeOwned>(&self, path: &str) -> Result<T, Failure> {
        let mut errors = Vec::new();
        for base in &self.urls {
            match self
                .request(Method::GET, &format!("{base}{path}"), None)
                .await
            {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err((code, message))) if code == StatusCode::BAD_REQUEST => {
                    return Err(usage(format!("{base}{path}: {message}")))
                }
                Ok(Err((code, message))) => {
                    errors.push(format!("{base} answered {code}: {message}"))
                }
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
        Err(anyhow!("no coordinator answered: {}", errors.join("; ")).into())
    }

    /// A write sent to the leader, following hints.
    pub async fn change<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, Failure> {
        let mut last_error = None;
        let mut targets: Vec<String> = self.urls.clone();
        let mut hops = 0;
        while let Some(base) = targets.first().cloned() {
            targets.remove(0);
            let url = format!("{base}{path}");
            let (code, text) = match self.request(method.clone(), &url, body.clone()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(answer)) => answer,
                Err(e) => {
                    last_error = Some(e);
                    continue;
                }
            };
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

    /// One request: the parsed answer, or the status and body of a refusal,
    /// or why there was no answer.
    async fn request<T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Result<T, (StatusCode, String)>> {
        let mut req = self.client.request(method, url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(b) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach {url}"))?;
        let code = resp.status();
        if code.is_success() {
            return Ok(Ok(resp
                .json()
                .await
                .with_context(|| format!("{url} answered unexpected JSON"))?));
        }
        Ok(Err((code, resp.text().await.unwrap_or_default())))
    }
}
