//! `?consistency=local|linearizable` on reads.
//!
//! `local` (the default) answers from this replica's applied state, which may
//! trail the leader by the apply lag. `linearizable` answers with every write
//! committed before the request arrived: the leader confirms with a quorum
//! that it still leads (openraft's `ensure_linearizable`) and waits until its
//! state machine has applied up to that point; a follower forwards the read
//! to the leader (once: a forwarded read that finds no leader is a 503),
//! with the caller's credentials: the leader checks them again, so closed
//! reads stay closed through a follower.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gpumon_proto::api::Consistency;
use openraft::error::{CheckIsLeaderError, RaftError};

use super::forward::{self, FORWARDED_HEADER};
use super::{ApiContext, ApiError};

/// Time allowed to confirm leadership and catch the state machine up.
const CONFIRM_WITHIN: Duration = Duration::from_secs(5);

fn parse(query: Option<&str>) -> Result<Consistency, ApiError> {
    let Some(query) = query else {
        return Ok(Consistency::Local);
    };
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|e| ApiError::BadRequest(format!("bad query {query:?}: {e}")))?;
    match pairs.iter().find(|(k, _)| k == "consistency") {
        None => Ok(Consistency::Local),
        Some((_, v)) if v == Consistency::Local.name() => Ok(Consistency::Local),
        Some((_, v)) if v == Consistency::Linearizable.name() => Ok(Consistency::Linearizable),
        Some((_, v)) => Err(ApiError::BadRequest(format!(
            "consistency={v:?} is not known; use local (the default) or linearizable"
        ))),
    }
}

pub async fn consistency(State(state): State<ApiContext>, req: Request, next: Next) -> Response {
    match parse(req.uri().query()) {
        Ok(Consistency::Local) => return next.run(req).await,
        Ok(Consistency::Linearizable) => {}
        Err(e) => return e.into_response(),
    }
    let confirmed = tokio::time::timeout(CONFIRM_WITHIN, state.inner.raft.ensure_linearizable());
    let Ok(confirmed) = confirmed.await else {
        return ApiError::Unavailable(format!(
            "leadership not confirmed by a quorum within {CONFIRM_WITHIN:?}; retry"
        ))
        .into_response();
    };
    match confirmed {
        Ok(_) => next.run(req).await,
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
            if req.headers().contains_key(FORWARDED_HEADER) {
                return ApiError::Unavailable(
                    "a forwarded linearizable read reached a replica that is not the leader; retry"
                        .into(),
                )
                .into_response();
            }
            match f.leader_node {
                Some(leader) => {
                    let credentials = req.headers().get(AUTHORIZATION);
                    forward::get(&state, &leader.addr, req.uri(), credentials).await
                }
                None => ApiError::Unavailable(
                    "no leader is known, so no read can be linearizable now; retry".into(),
                )
                .into_response(),
            }
        }
        Err(e) => ApiError::Unavailable(format!("cannot confirm leadership: {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_consistency_parameter_among_others() {
        assert_eq!(parse(None).unwrap(), Consistency::Local);
        assert_eq!(parse(Some("job=a")).unwrap(), Consistency::Local);
        assert_eq!(
            parse(Some("job=a&consistency=linearizable")).unwrap(),
            Consistency::Linearizable
        );
        assert_eq!(
            parse(Some("consistency=local")).unwrap(),
            Consistency::Local
        );
        assert!(parse(Some("consistency=strong")).is_err());
    }
}
