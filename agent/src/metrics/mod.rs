//! The agent's own `/metrics`: node-level series for Prometheus.
//!
//! What it serves: every GPU's memory, utilization, SM clock and power, and
//! every process's memory (with its job and rank when attributed) from the newest window;
//! samples taken, windows built, pushes by outcome, the uplink's buffer and
//! drops, the hook endpoint's sessions and records, the time of the last
//! acknowledged push, and the build. The sampler and the uplink count into
//! [`AgentMetrics`] and [`crate::uplink::UplinkStats`] (atomics, a short
//! mutex for the newest windows); a scrape-time collector reads them.
//!
//! The endpoint listens on `--metrics-listen` (default
//! [`crate::config::DEFAULT_METRICS_LISTEN`]). It is a side service: when
//! the address cannot be bound (another agent on the same host has it) the
//! agent logs a warning and keeps monitoring without it. Answers are
//! OpenMetrics text, or the classic text format for a client whose `Accept`
//! prefers `text/plain` ([`gpumon_runtime::exposition`]).

mod collector;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use gpumon_proto::GpuWindow;
use gpumon_runtime::exposition::Format;
use prometheus_client::registry::Registry;
use tokio::sync::oneshot;

use crate::hook_endpoint::HookHub;
use crate::uplink::UplinkStats;

/// GPUs whose newest window is kept for `/metrics`; more are left out.
pub const MAX_GPUS: usize = 256;

/// Counters of the sampler, shared with the metrics endpoint.
#[derive(Debug, Default)]
pub struct AgentMetrics {
    /// GPU samples taken.
    pub samples: AtomicU64,
    /// Sampling rounds that failed.
    pub sample_errors: AtomicU64,
    /// Windows built (one per GPU per window).
    pub windows: AtomicU64,
    /// Window sets dropped because the uplink was behind.
    pub window_sets_dropped: AtomicU64,
    /// The newest window of each GPU, by index.
    latest: Mutex<BTreeMap<u32, GpuWindow>>,
}

impl AgentMetrics {
    /// Counts a sampling round of `n` GPU samples.
    pub fn sampled(&self, n: usize) {
        self.samples.fetch_add(n as u64, Relaxed);
    }

    /// Counts a failed sampling round.
    pub fn sample_failed(&self) {
        self.sample_errors.fetch_add(1, Relaxed);
    }

    /// Counts windows built and keeps each GPU's newest.
    pub fn built(&self, windows: &[GpuWindow]) {
        self.windows.fetch_add(windows.len() as u64, Relaxed);
        let mut latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        for w in windows {
            if latest.len() < MAX_GPUS || latest.contains_key(&w.gpu.index) {
                latest.insert(w.gpu.index, w.clone());
            }
        }
    }

    /// Counts a window set the uplink had no room for.
    pub fn window_set_dropped(&self) {
        self.window_sets_dropped.fetch_add(1, Relaxed);
    }

    /// The newest window of each GPU.
    fn latest(&self) -> Vec<GpuWindow> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        latest.values().cloned().collect()
    }
}

/// What the endpoint reads.
#[derive(Debug, Clone)]
pub(crate) struct Sources {
    pub node: String,
    pub agent_id: String,
    pub agent: Arc<AgentMetrics>,
    pub uplink: Arc<UplinkStats>,
    pub hub: Option<Arc<HookHub>>,
}

/// The running endpoint; [`MetricsServer::stop`] ends it.
#[derive(Debug)]
pub(crate) struct MetricsServer {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Binds `addr` and serves; `None` (with a warning) when it cannot bind.
    pub async fn start(addr: SocketAddr, sources: Sources) -> Option<MetricsServer> {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(address = %addr, error = %e, "cannot serve /metrics on this address; the agent keeps monitoring without it (--metrics-listen IP:PORT picks another, none turns it off)");
                return None;
            }
        };
        let local = listener.local_addr().unwrap_or(addr);
        tracing::info!(address = %local, "metrics endpoint listening at http://{local}/metrics");
        let app = Router::new()
            .route("/metrics", get(metrics))
            .fallback(|| async { (StatusCode::NOT_FOUND, "only /metrics is served here\n") })
            .with_state(Arc::new(sources));
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "metrics endpoint stopped");
            }
        });
        Some(MetricsServer { stop, task })
    }

    /// Stops serving and waits for open scrapes to finish.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

async fn metrics(State(sources): State<Arc<Sources>>, headers: HeaderMap) -> Response {
    let format = Format::from_accept(headers.get(ACCEPT).and_then(|v| v.to_str().ok()));
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector::NodeCollector::new(sources)));
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &registry) {
        Ok(()) => (
            [(
                CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            )],
            format.render(text),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the metrics: {e}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumon_proto::{BytesStat, GpuInfo};

    fn window(index: u32, used: u64) -> GpuWindow {
        GpuWindow {
            gpu: GpuInfo {
                uuid: format!("GPU-{index}"),
                index,
                name: "sim".into(),
                total_bytes: 1 << 30,
            },
            start_ms: 0,
            end_ms: 1,
            samples: 1,
            used_bytes: BytesStat::single(used),
            reserved_bytes: None,
            util_pct: None,
            sm_clock_mhz: None,
            power_w: None,
            procs: Vec::new(),
        }
    }

    #[test]
    fn keeps_each_gpus_newest_window_within_the_bound() {
        let m = AgentMetrics::default();
        m.built(&[window(0, 1), window(1, 2)]);
        m.built(&[window(0, 5)]);
        let used: Vec<u64> = m.latest().iter().map(|w| w.used_bytes.last).collect();
        assert_eq!(used, vec![5, 2]);
        assert_eq!(m.windows.load(Relaxed), 3);
        let many: Vec<GpuWindow> = (0..MAX_GPUS as u32 + 10).map(|i| window(i, 1)).collect();
        m.built(&many);
        assert_eq!(m.latest().len(), MAX_GPUS);
    }
}
