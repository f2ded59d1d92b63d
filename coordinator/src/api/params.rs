//! Checks shared by the read handlers: reads that take no parameters of
//! their own refuse any but `consistency`, so a typo (`?jbo=x`) is a 400
//! rather than a silently unfiltered answer; and a job name in a path or a
//! query must be one the state could hold (non-empty, at most
//! [`MAX_NAME_BYTES`] bytes, no control characters), else 400 with a reason
//! rather than a misleading 404.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use gpumon_core::cluster::is_valid_name;
use gpumon_core::limits::MAX_NAME_BYTES;

use super::ApiError;

/// A read that takes only `?consistency=` (read by its own layer).
#[derive(Debug, Clone, Copy)]
pub struct OnlyConsistency;

impl<S: Send + Sync> FromRequestParts<S> for OnlyConsistency {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let Some(query) = parts.uri.query().filter(|q| !q.is_empty()) else {
            return Ok(Self);
        };
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
            .map_err(|e| ApiError::BadRequest(format!("bad query {query:?}: {e}")))?;
        match pairs.iter().find(|(k, _)| k != "consistency") {
            None => Ok(Self),
            Some((k, _)) => Err(ApiError::BadRequest(format!(
                "unknown parameter {k:?}: {} takes only consistency=local|linearizable",
                parts.uri.path()
            ))),
        }
    }
}

/// A job name as a client gave it, checked.
pub fn check_job_name(job: &str) -> Result<(), ApiError> {
    if !is_valid_name(job) {
        return Err(ApiError::BadRequest(format!(
            "bad job name {:?}: a job name is 1 to {MAX_NAME_BYTES} bytes without control characters",
            job.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_the_state_could_hold_pass() {
        assert!(check_job_name("llama-70b/run 3").is_ok());
        assert!(check_job_name("").is_err());
        assert!(check_job_name("a\nb").is_err());
        assert!(check_job_name(&"x".repeat(MAX_NAME_BYTES + 1)).is_err());
    }
}
