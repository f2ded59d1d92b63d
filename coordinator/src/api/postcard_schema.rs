//! The schema of a binary body: a postcard-encoded message
//! (`gpumon_proto::wire`), which OpenAPI can only call bytes.

use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// A postcard-encoded message of `gpumon_proto` (see `gpumon_proto::wire`).
#[derive(Debug)]
pub struct Postcard;

impl PartialSchema for Postcard {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .description(Some(
                "postcard bytes of a versioned gpumon_proto message (see gpumon_proto::wire)",
            ))
            .into()
    }
}

impl ToSchema for Postcard {}
