//! The notifier's own HTTP client: POSTs JSON over HTTP/1.1 to webhook,
//! Slack and Alertmanager receivers, on plain TCP (`http://`) or TLS
//! (`https://`) through the same pooled client.
//!
//! Why not the workspace's reqwest: it is built without TLS, and turning
//! TLS on there would put it into every reqwest client of the workspace
//! (feature unification) and, with rustls' default provider, a C build of
//! aws-lc. This is hyper-util's legacy client with hyper-rustls on rustls'
//! `ring` provider, handed to rustls explicitly: nothing is installed
//! process-wide and nothing depends on which providers other crates enable.
//!
//! Trust: Mozilla's root set compiled in from `webpki-roots`, so every
//! coordinator verifies a receiver the same way whatever its host has (or
//! lacks, as slim containers do) in its CA store. The price: a receiver
//! whose certificate chains only to a private CA fails every attempt with a
//! certificate error (use an http:// relay for those).
//!
//! Bounds and behaviour: one deadline covers connecting, the TLS handshake,
//! the request and the response head; of the response body at most
//! [`MAX_RESPONSE_BODY`] bytes are read, within the same deadline and only
//! so the connection can be reused. Redirects are not followed (a 3xx is the
//! answer). Credentials in the URL become a Basic `Authorization` header.
//! Proxy variables (`HTTPS_PROXY`...) are not honoured: receivers are
//! reached directly, and the notifier warns at start when they are set.
//! Errors never carry the URL: a Slack webhook URL is a secret.

mod basic_auth;
#[cfg(test)]
mod tests;

use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

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
#[derive(Clone)]
pub struct NotifyClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl fmt::Debug for NotifyClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NotifyClient")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl NotifyClient {
    /// A client that trusts the compiled-in roots and gives each request
    /// `timeout` from start to response head.
    pub fn new(timeout: Duration) -> Result<Self, rustls::Error> {
        Self::build(timeout, Vec::new())
    }

    /// As [`NotifyClient::new`], also trusting `extra_roots`.
    fn build(
        timeout: Duration,
        extra_roots: Vec<CertificateDer<'static>>,
    ) -> Result<Self, rustls::Error> {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for cert in extra_roots {
            roots.add(cert)?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE)
            .build(connector);
        Ok(Self { client, timeout })
    }

    /// POSTs `body` as `application/json` to `url` and returns the answer's
    /// status, whatever it is.
    pub async fn post_json(&self, url: &str, body: Vec<u8>) -> Result<StatusCode, SendError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let (uri, auth) = target(url)?;
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(ACCEPT, HeaderValue::from_static("*/*"))
            .header(
                USER_AGENT,
                HeaderValue::from_static(concat!("gpumon/", env!("CARGO_PKG_VERSION"))),
            );
        if let Some(auth) = auth {
            request = request.header(AUTHORIZATION, auth);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| SendError::BadUrl)?;
        let response = tokio::time::timeout_at(deadline, self.client.request(request))
            .await
            .map_err(|_| SendError::Timeout)?
            .map_err(|e| classify(&e))?;
        let status = response.status();
        // The status is the answer; the body is read (boundedly) only so the
        // connection can go back to the pool, and its fate does not matter.
        let body = Limited::new(response.into_body(), MAX_RESPONSE_BODY);
        let _ = tokio::time::timeout_at(deadline, body.collect()).await;
        Ok(status)
    }
}

/// Proxy variables of the environment that this client does not honour
/// (reqwest did): the names of those set, for a warning at start.
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
pub fn target(url: &str) -> Result<(Uri, Option<HeaderValue>), SendError> {
    let mut url = reqwest::Url::parse(url).map_err(|_| SendError::BadUrl)?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(SendError::BadUrl);
    }
    let auth = basic_auth::header(&url);
    url.set_fragment(None);
    url.set_username("").map_err(|_| SendError::BadUrl)?;
    url.set_password(None).map_err(|_| SendError::BadUrl)?;
    let uri = url.as_str().parse::<Uri>().map_err(|_| SendError::BadUrl)?;
    Ok((uri, auth))
}

/// Sorts a client error into [`SendError`], described by its innermost
/// cause (hyper's, rustls' and the OS's messages name no URL).
fn classify(e: &hyper_util::client::legacy::Error) -> SendError {
    let chain = chain(e);
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
