//! The local hook endpoint: where the in-process Python hook of each
//! training process reports allocator statistics, steps and events, and
//! picks up actions (`docs/architecture.md`, "Processes"; the wire contract
//! is `agent/python/PROTOCOL.md`).
//!
//! - [`HookAddr`] (`addr`): where to listen, a Unix socket or loopback TCP only;
//! - [`HookServer`] (`server`): binds, accepts, one task per connection
//!   (`connection`), JSON lines with bounded reads;
//! - `protocol` and `records`: parsing and checking requests and records,
//!   pure functions; `identity`: checking a registering process against the
//!   kernel's peer PID and its `/proc` environment; `tcp_owner`: the
//!   process behind a loopback TCP peer, from `/proc/net/tcp` and
//!   `/proc/*/fd`;
//! - [`HookHub`] (`hub`): sessions, the bounded queues of records and action
//!   acks for the uplink, the actions waiting for each session, counters;
//! - [`HookAlert`] (`alerts`): alerts posted to a job or rank
//!   ([`HookHub::post_alert`]), kept per session until its next `poll`;
//!   `relay`: the coordinators' alerts about this node, posted once per
//!   severity ([`HookHub::relay_alerts`]);
//! - [`HookSource`] (`source`): GPU samples built from hook reports, for an
//!   agent that samples no GPU itself.
//!
//! The hub is shared by the connections (which fill it), the uplink (which
//! drains it into every push and feeds it the coordinators' actions) and
//! the hook source; that is the whole coupling between them.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use gpumon_agent::hook_endpoint::{HookAddr, HookHub, HookServer};
//! let hub = Arc::new(HookHub::new("node-0", "node-0"));
//! let addr: HookAddr = "unix:/run/gpumon/hook.sock".parse()?;
//! let server = HookServer::bind(&addr, hub.clone()).await?;
//! tokio::spawn(server.serve(std::future::pending()));
//! let (records, acks) = hub.take_outgoing();
//! # Ok(()) }
//! ```

mod addr;
mod alerts;
mod connection;
mod exit;
mod field_error;
mod fields;
mod hub;
mod hub_error;
mod identity;
mod protocol;
mod protocol_error;
mod record_error;
mod records;
mod relay;
mod server;
mod source;
mod stall;
mod tcp_owner;

pub use addr::{HookAddr, HookAddrError, MAX_UNIX_PATH_BYTES};
pub use alerts::{
    HookAlert, HookAlertSeverity, PostedAlert, MAX_ALERT_KIND_BYTES, MAX_ALERT_MESSAGE_BYTES,
    MAX_PENDING_ALERTS_PER_SESSION,
};
pub use connection::{REGISTER_WITHIN, SESSION_IDLE, WARN_INTERVAL_MS};
pub use hub::{
    AckReport, HookDevice, HookHub, HookStats, Registration, SessionInfo, DISCONNECTED_REASON,
    MAX_ACK_TEXT_BYTES, MAX_FINISHED_ACTIONS, MAX_PENDING_ACTIONS_PER_SESSION, MAX_QUEUED_ACKS,
    MAX_QUEUED_RECORDS, MAX_SESSIONS,
};
pub use hub_error::HubError;
pub use protocol::{HOOK_PROTOCOL_VERSION, MAX_LINE_BYTES};
pub use records::{AllocReading, MAX_CLOCK_SKEW_MS, MAX_REASONS, MAX_RECORDS_PER_REPORT};
pub use relay::MAX_RELAYED_ALERTS;
pub use server::{
    socket_modes, HookError, HookServer, HookServerOptions, MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_USER,
};
pub use source::{HookSource, FRESH_MS, TAIL_MS};
pub use tcp_owner::{MAX_FD_ENTRIES, MAX_TABLE_BYTES};
