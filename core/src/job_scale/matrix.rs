//! The rank x time matrix: bucket edges over a time span, one row of
//! bucket maxima per rank as bytes, and the base64 text they travel as
//! (a third of the size of a JSON array of numbers, and quick to decode in
//! a browser).

use gpumon_proto::api::job_scale::{CELL_EMPTY, CELL_FULL};
use gpumon_proto::api::HistoryPoint;

/// `columns + 1` edges, ms, cutting `[start_ms, end_ms]` into `columns`
/// buckets: bucket `c` is `edges[c] <= t < edges[c + 1]`, the last one
/// including `end_ms`. A span of zero is widened to 1 ms.
pub fn matrix_edges(start_ms: u64, end_ms: u64, columns: u32) -> Vec<u64> {
    let columns = u64::from(columns.max(1));
    let span = end_ms.saturating_sub(start_ms).max(1);
    (0..=columns)
        .map(|c| start_ms + (u128::from(span) * u128::from(c)).div_ceil(u128::from(columns)) as u64)
        .collect()
}

/// A used share as a cell: `round(used / total * 250)`, at most 250;
/// [`CELL_EMPTY`] without a known capacity.
pub fn share_cell(used: u64, total: u64) -> u8 {
    if total == 0 {
        return CELL_EMPTY;
    }
    let share = (used as f64 / total as f64).min(1.0);
    (share * f64::from(CELL_FULL)).round() as u8
}

/// One rank's row: per bucket of `edges_ms`, the highest window maximum
/// within it as a cell, [`CELL_EMPTY`] where none.
pub fn bucket_row(
    history: impl Iterator<Item = HistoryPoint>,
    total_bytes: u64,
    edges_ms: &[u64],
) -> Vec<u8> {
    let columns = edges_ms.len().saturating_sub(1);
    let mut row = vec![CELL_EMPTY; columns];
    let (Some(&start), Some(&end)) = (edges_ms.first(), edges_ms.last()) else {
        return row;
    };
    for p in history {
        if p.t_ms < start || p.t_ms > end {
            continue;
        }
        // The first edge above t, less one: t's bucket (the last takes `end`).
        let c = edges_ms.partition_point(|&e| e <= p.t_ms).saturating_sub(1);
        let c = c.min(columns - 1);
        let cell = share_cell(p.max, total_bytes);
        if row[c] == CELL_EMPTY || (cell != CELL_EMPTY && cell > row[c]) {
            row[c] = cell;
        }
    }
    row
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (RFC 4648 section 4).
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t_ms: u64, max: u64) -> HistoryPoint {
        HistoryPoint {
            t_ms,
            min: 0,
            max,
            last: max,
            mean: max,
        }
    }

    #[test]
    fn edges_cover_the_span_in_equal_buckets() {
        let e = matrix_edges(1_000, 2_000, 4);
        assert_eq!(e, vec![1_000, 1_250, 1_500, 1_750, 2_000]);
        assert_eq!(matrix_edges(5, 5, 2).len(), 3);
    }

    #[test]
    fn a_row_holds_each_buckets_highest_share_and_marks_empty_ones() {
        let edges = matrix_edges(0, 400, 4);
        let h = [
            point(0, 10),
            point(50, 60),
            point(120, 30),
            point(400, 100),
            point(401, 100),
        ];
        let row = bucket_row(h.into_iter(), 100, &edges);
        assert_eq!(row, vec![150, 75, CELL_EMPTY, 250]);
    }

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
    }
}
