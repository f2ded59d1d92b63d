//! The coordinator's outbound HTTP client: the notifier POSTs JSON over
//! HTTP/1.1 to webhook, Slack and Alertmanager receivers with it, and the
//! remote-write sender its protobuf bodies, on plain TCP (`http://`) or TLS
//! (`https://`), through the workspace's one HTTP client library
//! (`gpumon_net`: reqwest on rustls with the `ring` provider).
//!
//! Trust: Mozilla's root set compiled in, so every coordinator verifies a
//! receiver the same way whatever its host has (or lacks, as slim
//! containers do) in its CA store; `[notify] ca_file` trusts a private CA
//! instead.
//!
//! Bounds and behaviour: one deadline covers connecting, the TLS handshake,
//! the request and the response; of the response body at most
//! [`MAX_RESPONSE_BODY`] bytes are read, only so the connection can be
//! reused. Redirects are not followed (a 3xx is the answer). Credentials in
//! the URL become a Basic `Authorization` header. Proxy variables
//! (`HTTPS_PROXY`...) are not honoured: receivers are reached directly, and
//! the notifier warns at start when they are set. Errors never carry the
//! URL: a Slack webhook URL is a secret.

mod basic_auth;

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use gpumon_net::{ClientTls, TlsError};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{StatusCode, Url};

/// Most bytes of a response body read (and then dropped).
pub const MAX_RESPONSE_BODY: usize = 64 * 1024;
/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);
/// Deepest error chain looked through when describing a failure.
const MAX_CHAIN: usize = 16;

/// Why a POST got no answer. The messages name no URL.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The URL is not an absolute http(s) URL a request can be made of.
    #[error("not a usable http(s) URL")]
    BadUrl,
    /// No answer within the deadline.
    #[error("timed out")]
    Timeout,
    /// No connection (DNS, TCP).
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The TLS handshake failed, e.g. an untrusted or mismatched certificate.
    #[error("TLS: {0}")]
    Tls(String),
    /// The connection broke or the answer was not HTTP.
    #[error("request failed: {0}")]
    Request(String),
}

/// A pooled HTTP/1.1 client, http and https, with a per-request deadline.
/// Cheap to clone (clones share the pool).
#[derive(Debug, Clone)]
pub struct OutboundClient {
    client: reqwest::Client,
}

impl OutboundClient {
    /// A client that verifies receivers per `tls` and gives each request
    /// `timeout` from start to the end of its answer.
    pub fn new(timeout: Duration, tls: &ClientTls) -> Result<Self, TlsError> {
        let client = gpumon_net::client_builder(tls)?
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .http1_only()
            .tcp_nodelay(true)
            .pool_idle_timeout(POOL_IDLE)
            .user_agent(concat!("gpumon/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| TlsError::Pem {
                path: tls.ca_file.clone().unwrap_or_default(),
                reason: format!("cannot build the notifier's client: {}", e.without_url()),
            })?;
        Ok(Self { client })
    }

    /// POSTs `body` as `application/json` to `url` and returns the answer's
    /// status, whatever it is.
    pub async fn post_json(&self, url: &str, body: Vec<u8>) -> Result<StatusCode, SendError> {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(self.post(url, headers, body).await?.status)
    }

    /// POSTs `body` with `headers` to `url` and returns the answer: its
    /// status, whatever it is, and the start of its body. Credentials in
    /// the URL become Basic auth unless `headers` has an `Authorization`.
    pub async fn post(
        &self,
        url: &str,
        mut headers: HeaderMap,
        body: Vec<u8>,
    ) -> Result<Answer, SendError> {
        let (url, auth) = target(url)?;
        if let Some(auth) = auth {
            headers.entry(AUTHORIZATION).or_insert(auth);
        }
        headers
            .entry(ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        let mut response = self
            .client
            .post(url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(classify)?;
        let status = response.status();
        // The body is read (boundedly) so the connection can go back to
        // the pool; its start may explain a refusal.
        let mut start = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = MAX_RESPONSE_BODY - start.len();
            start.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if start.len() >= MAX_RESPONSE_BODY {
                break;
            }
        }
        Ok(Answer {
            status,
            body: start,
        })
    }
}

/// A receiver's answer to a POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Its status.
    pub status: StatusCode,
    /// The start of its body, at most [`MAX_RESPONSE_BODY`] bytes.
    pub body: Vec<u8>,
}

/// Proxy variables of the environment that this client does not honour
/// (the client is built with `no_proxy`): the names of those set, for a
/// warning at start.
pub fn ignored_proxy_vars() -> Vec<&'static str> {
    [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .into_iter()
    .filter(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
    .collect()
}

/// The request URI for `url` (without credentials or fragment) and the
/// Basic `Authorization` its credentials make, if it has any.
pub fn target(url: &str) -> Result<(Url, Option<HeaderValue>), SendError> {
    let mut url = Url::parse(url).map_err(|_| SendError::BadUrl)?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(SendError::BadUrl);
    }
    let auth = basic_auth::header(&url);
    url.set_fragment(None);
    url.set_username("").map_err(|_| SendError::BadUrl)?;
    url.set_password(None).map_err(|_| SendError::BadUrl)?;
    Ok((url, auth))
}

/// Sorts a client error into [`SendError`], described by its innermost
/// cause (hyper's, rustls' and the OS's messages name no URL; reqwest's
/// own is taken without its URL).
fn classify(e: reqwest::Error) -> SendError {
    let e = e.without_url();
    if e.is_timeout() {
        return SendError::Timeout;
    }
    let chain = chain(&e);
    if let Some(tls) = chain.iter().find_map(|c| c.downcast_ref::<rustls::Error>()) {
        return SendError::Tls(tls.to_string());
    }
    let cause = chain.last().map(ToString::to_string).unwrap_or_default();
    if e.is_connect() {
        SendError::Connect(cause)
    } else {
        SendError::Request(cause)
    }
}

/// `e` and the errors behind it, outermost first, looking inside
/// `io::Error`s too (their `source` skips the error they wrap).
fn chain<'a>(e: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut out = Vec::new();
    let mut next = Some(e);
    while let Some(current) = next {
        if out.len() == MAX_CHAIN {
            break;
        }
        out.push(current);
        next = match current
            .downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn StdError + 'static)),
            None => current.source(),
        };
    }
    out
}

#[cfg(test)]
mod tests;
