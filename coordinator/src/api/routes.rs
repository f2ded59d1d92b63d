//! The route table: every route the coordinator serves, declared once.
//! [`super::router`] builds the axum router from it and nothing else, and
//! the OpenAPI test compares its documented part with the generated
//! document (`openapi`), so a route cannot be served undocumented nor
//! documented without being served.

use axum::extract::DefaultBodyLimit;
use axum::routing::{on, MethodFilter, MethodRouter};

use super::auth::Access;
use super::{
    actions, alerts, config, dashboard, health, ingest, job_scale, members, memory_snapshots,
    metrics, openapi, raft_rpc, raft_status, read, stream, ApiContext,
};

/// Which layers a route sits behind, and whether the API document shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Documented, behind the `?consistency=` layer (see `consistency`).
    Consistent,
    /// Documented, with no shared layer.
    Api,
    /// Raft RPC between replicas: postcard, body-limited, internal.
    RaftRpc,
    /// The dashboard's page and files (documented in the README).
    Dashboard,
}

#[cfg(test)]
impl Group {
    /// Whether the OpenAPI document describes routes of this group.
    pub fn documented(self) -> bool {
        matches!(self, Group::Consistent | Group::Api)
    }
}

/// An HTTP method the API uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `GET`.
    Get,
    /// `POST`.
    Post,
    /// `DELETE`.
    Delete,
}

impl Verb {
    /// Its name as OpenAPI writes it: `get`, `post`, `delete`.
    #[cfg(test)]
    pub fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Post => "post",
            Verb::Delete => "delete",
        }
    }

    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Post => MethodFilter::POST,
            Verb::Delete => MethodFilter::DELETE,
        }
    }
}

/// One method on one path.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// The method.
    pub verb: Verb,
    /// The path, in axum's syntax (`{job}`), which is also OpenAPI's.
    pub path: &'static str,
    /// Its layers and whether it is documented.
    pub group: Group,
    /// Who may call it (see `auth`).
    pub access: Access,
    /// The handler for `verb`, with the route's own layers.
    handler: fn(MethodFilter) -> MethodRouter<ApiContext>,
}

impl Route {
    /// The handler, answering the route's method only.
    pub fn method_router(&self) -> MethodRouter<ApiContext> {
        (self.handler)(self.verb.filter())
    }
}

const fn route(
    verb: Verb,
    path: &'static str,
    (group, access): (Group, Access),
    handler: fn(MethodFilter) -> MethodRouter<ApiContext>,
) -> Route {
    Route {
        verb,
        path,
        group,
        access,
        handler,
    }
}

use Access::{Admin, Agent, Open, Peer, Read};
use Group::{Api, Consistent, Dashboard, RaftRpc};
use Verb::{Delete, Get, Post};

/// Every route.
pub const ROUTES: &[Route] = &[
    route(Get, "/api/v1/cluster", (Consistent, Read), |m| {
        on(m, read::cluster)
    }),
    route(Get, "/api/v1/nodes", (Consistent, Read), |m| {
        on(m, read::nodes)
    }),
    route(Get, "/api/v1/jobs", (Consistent, Read), |m| {
        on(m, read::jobs)
    }),
    route(Get, "/api/v1/jobs/{job}", (Consistent, Read), |m| {
        on(m, read::job)
    }),
    route(Get, "/api/v1/jobs/{job}/summary", (Consistent, Read), |m| {
        on(m, job_scale::summary)
    }),
    route(
        Get,
        "/api/v1/jobs/{job}/snapshots",
        (Consistent, Read),
        |m| on(m, memory_snapshots::snapshots),
    ),
    route(Get, "/api/v1/actions", (Consistent, Read), |m| {
        on(m, actions::list)
    }),
    route(Post, "/api/v1/actions", (Consistent, Admin), |m| {
        on(m, actions::issue)
    }),
    route(Get, "/api/v1/alerts", (Consistent, Read), |m| {
        on(m, alerts::alerts)
    }),
    route(Get, "/api/v1/config", (Consistent, Read), |m| {
        on(m, config::show)
    }),
    route(Post, "/api/v1/config", (Consistent, Admin), |m| {
        on(m, config::change)
    }),
    route(Get, "/api/v1/raft", (Consistent, Read), |m| {
        on(m, raft_status::raft_status)
    }),
    route(Post, "/api/v1/ingest", (Api, Agent), |m| {
        on(m, ingest::ingest).layer(DefaultBodyLimit::disable())
    }),
    route(Post, "/api/v1/cluster/members", (Api, Admin), |m| {
        on(m, members::add)
    }),
    route(Delete, "/api/v1/cluster/members/{id}", (Api, Admin), |m| {
        on(m, members::remove)
    }),
    route(Get, "/api/v1/stream", (Api, Read), |m| {
        on(m, stream::stream)
    }),
    route(Get, "/api/v1/openapi.json", (Api, Open), |m| {
        on(m, openapi::openapi)
    }),
    route(Get, "/metrics", (Api, Read), |m| on(m, metrics::metrics)),
    route(Get, "/healthz", (Api, Open), |m| on(m, health::healthz)),
    route(Get, "/readyz", (Api, Open), |m| on(m, health::readyz)),
    route(Get, "/", (Dashboard, Open), |m| on(m, dashboard::index)),
    route(Get, "/assets/{*path}", (Dashboard, Open), |m| {
        on(m, dashboard::asset)
    }),
    route(Post, "/raft/append", (RaftRpc, Peer), |m| {
        on(m, raft_rpc::append)
    }),
    route(Post, "/raft/vote", (RaftRpc, Peer), |m| {
        on(m, raft_rpc::vote)
    }),
    route(Post, "/raft/prevote", (RaftRpc, Peer), |m| {
        on(m, raft_rpc::prevote)
    }),
    route(Post, "/raft/snapshot", (RaftRpc, Peer), |m| {
        on(m, raft_rpc::snapshot)
    }),
];
