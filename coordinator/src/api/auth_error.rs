//! Why the authorization layer refuses a request, or the ingest route a
//! push for another agent: the text is the 401 or 403 answer's.

use std::net::IpAddr;
use std::sync::Arc;

use thiserror::Error;

/// A refused credential.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AuthError {
    /// No `Authorization` header where one is needed.
    #[error("this request needs `Authorization: Bearer <{what}>`")]
    Missing {
        /// The credential needed, e.g. `admin token`.
        what: &'static str,
    },
    /// A bearer secret that is not the one needed.
    #[error("wrong {what}")]
    Wrong {
        /// The credential needed.
        what: &'static str,
    },
    /// An admin request from another host while no admin token is set.
    #[error(
        "admin requests from {ip} need an admin token; start the coordinators with --admin-token-file"
    )]
    AdminNotLocal {
        /// The caller's address.
        ip: IpAddr,
    },
    /// An agent token bound to other agents or nodes than the message's.
    #[error(
        "this agent token may push as {} only, not as {what} {name:?}",
        .allowed.join(", ")
    )]
    OtherAgent {
        /// The agent ids and nodes the token is bound to.
        allowed: Arc<[String]>,
        /// `agent id` or `node`.
        what: &'static str,
        /// The one the message names.
        name: String,
    },
}
