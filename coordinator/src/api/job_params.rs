//! The query parameters of `GET /api/v1/jobs/{job}` and
//! `GET /api/v1/jobs/{job}/summary`, read and checked: a value out of its
//! bounds, a time that is not a finite epoch or a range that ends before it
//! starts is a 400 that says which, never a silently different answer.

use gpumon_core::job_scale::TimeRange;
use gpumon_proto::api::job_scale::{
    DEFAULT_MATRIX_COLUMNS, MAX_MATRIX_COLUMNS, MAX_POINTS, MAX_TOP_RANKS,
};
use gpumon_proto::api::{JobQuery, JobSummaryQuery, RestLines};

use super::ApiError;

/// Latest time accepted, seconds since the epoch (the year 5138): far past
/// any data, well inside what milliseconds in a `u64` hold.
const MAX_EPOCH_S: f64 = 1e11;

/// `GET /api/v1/jobs/{job}`'s parameters; `None` when none but
/// `consistency` were given (the full answer, as it always was).
#[derive(Debug, Clone, PartialEq)]
pub struct JobParams {
    pub range: TimeRange,
    /// `ranks=top:K`.
    pub top: Option<usize>,
    pub rest: RestLines,
    pub points: Option<usize>,
    pub node: Option<String>,
}

/// `GET /api/v1/jobs/{job}/summary`'s parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SummaryParams {
    pub range: TimeRange,
    pub columns: u32,
}

fn decode<T: serde::de::DeserializeOwned + Default>(
    raw: Option<&str>,
    known: &str,
) -> Result<T, ApiError> {
    match raw {
        None | Some("") => Ok(T::default()),
        Some(q) => serde_urlencoded::from_str(q).map_err(|e| {
            ApiError::BadRequest(format!(
                "bad query {q:?}: {e}; known parameters: {known}, consistency=local|linearizable"
            ))
        }),
    }
}

/// Reads `GET /api/v1/jobs/{job}`'s query.
pub fn job_params(raw: Option<&str>) -> Result<Option<JobParams>, ApiError> {
    let q: JobQuery = decode(
        raw,
        "since=SECONDS, until=SECONDS, ranks=all|top:K, rest=lines|none, points=N, node=NAME",
    )?;
    let plain = JobQuery {
        consistency: q.consistency,
        ..JobQuery::default()
    };
    if q == plain {
        return Ok(None);
    }
    let top = match q.ranks.as_deref() {
        None | Some("all") => None,
        Some(v) => Some(parse_top(v)?),
    };
    if q.rest.is_some() && top.is_none() {
        return Err(ApiError::BadRequest(
            "rest= applies to ranks=top:K only: give ranks=top:K too".into(),
        ));
    }
    let points = match q.points {
        None => None,
        Some(n @ 1..=MAX_POINTS) => Some(n as usize),
        Some(n) => {
            return Err(ApiError::BadRequest(format!(
                "points={n} is out of bounds: 1 to {MAX_POINTS}"
            )))
        }
    };
    if let Some(node) = &q.node {
        if !gpumon_core::cluster::is_valid_name(node) {
            return Err(ApiError::BadRequest(format!(
                "bad node name {:?}",
                node.chars().take(64).collect::<String>()
            )));
        }
    }
    Ok(Some(JobParams {
        range: time_range(q.since, q.until)?,
        top,
        rest: q.rest.unwrap_or_default(),
        points,
        node: q.node,
    }))
}

/// Reads `GET /api/v1/jobs/{job}/summary`'s query.
pub fn summary_params(raw: Option<&str>) -> Result<SummaryParams, ApiError> {
    let q: JobSummaryQuery = decode(raw, "since=SECONDS, until=SECONDS, columns=N")?;
    let columns = match q.columns {
        None => DEFAULT_MATRIX_COLUMNS,
        Some(n @ 1..=MAX_MATRIX_COLUMNS) => n,
        Some(n) => {
            return Err(ApiError::BadRequest(format!(
                "columns={n} is out of bounds: 1 to {MAX_MATRIX_COLUMNS}"
            )))
        }
    };
    Ok(SummaryParams {
        range: time_range(q.since, q.until)?,
        columns,
    })
}

fn parse_top(v: &str) -> Result<usize, ApiError> {
    let bad = || {
        ApiError::BadRequest(format!(
            "ranks={v:?}: give all or top:K with K from 1 to {MAX_TOP_RANKS}"
        ))
    };
    let k: u32 = v
        .strip_prefix("top:")
        .and_then(|k| k.parse().ok())
        .ok_or_else(bad)?;
    if !(1..=MAX_TOP_RANKS).contains(&k) {
        return Err(bad());
    }
    Ok(k as usize)
}

/// `since`..`until` in seconds as milliseconds, both ends kept.
fn time_range(since: Option<f64>, until: Option<f64>) -> Result<TimeRange, ApiError> {
    let ms = |name: &str, s: Option<f64>, round: fn(f64) -> f64| match s {
        None => Ok(None),
        Some(s) if s.is_finite() && (0.0..=MAX_EPOCH_S).contains(&s) => {
            Ok(Some(round(s * 1000.0) as u64))
        }
        Some(s) => Err(ApiError::BadRequest(format!(
            "{name}={s} is not a time: give seconds since the Unix epoch, 0 to {MAX_EPOCH_S}"
        ))),
    };
    let range = TimeRange {
        since_ms: ms("since", since, f64::floor)?,
        until_ms: ms("until", until, f64::ceil)?,
    };
    if let (Some(a), Some(b)) = (range.since_ms, range.until_ms) {
        if a > b {
            return Err(ApiError::BadRequest(format!(
                "since={} is after until={}",
                since.unwrap_or_default(),
                until.unwrap_or_default()
            )));
        }
    }
    Ok(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bad(q: &str) -> String {
        match job_params(Some(q)) {
            Err(ApiError::BadRequest(m)) => m,
            other => panic!("{q}: expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn no_parameters_mean_the_full_answer() {
        assert_eq!(job_params(None).unwrap(), None);
        assert_eq!(job_params(Some("consistency=linearizable")).unwrap(), None);
    }

    #[test]
    fn values_are_read_and_bounded() {
        let p = job_params(Some("ranks=top:32&points=300&since=1.5&until=2&rest=none"))
            .unwrap()
            .unwrap();
        assert_eq!(p.top, Some(32));
        assert_eq!(p.points, Some(300));
        assert_eq!(p.rest, RestLines::None);
        assert_eq!(
            (p.range.since_ms, p.range.until_ms),
            (Some(1500), Some(2000))
        );
        assert!(bad("ranks=top:0").contains("top:K"));
        assert!(bad("ranks=top:1001").contains("1000"));
        assert!(bad("ranks=worst").contains("top:K"));
        assert!(bad("points=0").contains("points=0"));
        assert!(bad("points=2001").contains("2000"));
        assert!(bad("since=NaN").contains("since"));
        assert!(bad("since=-1").contains("since"));
        assert!(bad("since=20&until=10").contains("after"));
        assert!(bad("rest=none").contains("top:K"));
        assert!(bad("top=3").contains("unknown field"));
        assert!(summary_params(Some("columns=241")).is_err());
        assert_eq!(
            summary_params(None).unwrap().columns,
            DEFAULT_MATRIX_COLUMNS
        );
    }
}
