//! The error answers routes share, as OpenAPI responses: each a status, when
//! it happens, and the [`ApiErrorBody`] it carries.

use std::collections::BTreeMap;

use gpumon_proto::api::ApiErrorBody;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::{Content, Ref, RefOr};
use utoipa::{IntoResponses, ToSchema};

/// 400 and 503, which any read may answer.
#[derive(Debug)]
pub struct ReadErrors;

/// 400, 401, 421 and 503, which any admin request may answer.
#[derive(Debug)]
pub struct AdminErrors;

fn error(description: &str) -> RefOr<Response> {
    let schema = Ref::from_schema_name(ApiErrorBody::name());
    ResponseBuilder::new()
        .description(description)
        .content("application/json", Content::new(Some(schema)))
        .build()
        .into()
}

fn responses(list: &[(u16, &str)]) -> BTreeMap<String, RefOr<Response>> {
    list.iter()
        .map(|(status, description)| (status.to_string(), error(description)))
        .collect()
}

const BAD_REQUEST: (u16, &str) = (
    400,
    "Bad request: unknown parameter, bad value or bad job name; `message` says which.",
);
const UNAVAILABLE: (u16, &str) = (
    503,
    "No leader, or leadership could not be confirmed for a linearizable read; retry.",
);

impl IntoResponses for ReadErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        responses(&[BAD_REQUEST, UNAVAILABLE])
    }
}

impl IntoResponses for AdminErrors {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        responses(&[
            BAD_REQUEST,
            (
                401,
                "Missing or wrong admin token (Authorization: Bearer TOKEN), or not from loopback when no token is configured.",
            ),
            (421, "Only the leader does this; `leader_url` says where."),
            (503, "No leader, or the change could not be committed; retry."),
        ])
    }
}
