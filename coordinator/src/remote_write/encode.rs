//! From series to request bodies, by the rules of remote-write 1.0: each
//! series' labels sorted by name with `__name__` first, one series per
//! label set (series with the same labels are merged), its samples in time
//! order with one per timestamp (a receiver refuses two values at one
//! time), then cut into requests of at most `max_samples` samples, each a
//! protobuf `WriteRequest` compressed with snappy's block format (not the
//! framed one).

use std::collections::BTreeMap;

use prost::Message;

use super::proto::{Label, Sample, TimeSeries, WriteRequest};

/// Name of the label holding the metric name.
pub const NAME_LABEL: &str = "__name__";

/// One request, ready to POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    /// The snappy-compressed `WriteRequest`.
    pub bytes: Vec<u8>,
    /// Samples it carries.
    pub samples: usize,
}

/// Sorts, merges and orders `series` (see the module docs); the series come
/// out ordered by their labels.
pub fn normalize(series: Vec<TimeSeries>) -> Vec<TimeSeries> {
    let mut merged: BTreeMap<Vec<Label>, Vec<Sample>> = BTreeMap::new();
    for TimeSeries {
        mut labels,
        samples,
    } in series
    {
        let key = |l: &Label| (l.name != NAME_LABEL.as_bytes(), l.name.clone());
        labels.sort_by_key(key);
        merged.entry(labels).or_default().extend(samples);
    }
    merged
        .into_iter()
        .map(|(labels, mut samples)| {
            // Stable: of samples at one time, the one given last stays.
            samples.sort_by_key(|s| s.timestamp);
            let mut kept: Vec<Sample> = Vec::with_capacity(samples.len());
            for s in samples {
                match kept.last_mut() {
                    Some(last) if last.timestamp == s.timestamp => *last = s,
                    _ => kept.push(s),
                }
            }
            TimeSeries {
                labels,
                samples: kept,
            }
        })
        .collect()
}

/// Cuts normalized series into requests of at most `max_samples` samples
/// (at least 1), in order: a series longer than the room left continues in
/// the next request, so its samples still reach the receiver oldest first.
pub fn split(series: Vec<TimeSeries>, max_samples: usize) -> Vec<WriteRequest> {
    let max_samples = max_samples.max(1);
    let mut requests = Vec::new();
    let mut current = WriteRequest::default();
    let mut room = max_samples;
    for mut s in series {
        while !s.samples.is_empty() {
            let take = room.min(s.samples.len());
            let rest = s.samples.split_off(take);
            current.timeseries.push(TimeSeries {
                labels: s.labels.clone(),
                samples: std::mem::replace(&mut s.samples, rest),
            });
            room -= take;
            if room == 0 {
                requests.push(std::mem::take(&mut current));
                room = max_samples;
            }
        }
    }
    if !current.timeseries.is_empty() {
        requests.push(current);
    }
    requests
}

/// The body of `request`: protobuf, then snappy's block format.
pub fn compress(request: &WriteRequest) -> Result<Body, snap::Error> {
    let samples = request.timeseries.iter().map(|s| s.samples.len()).sum();
    let bytes = snap::raw::Encoder::new().compress_vec(&request.encode_to_vec())?;
    Ok(Body { bytes, samples })
}

/// Normalizes, splits and compresses: the requests to send, in order.
pub fn bodies(series: Vec<TimeSeries>, max_samples: usize) -> Result<Vec<Body>, snap::Error> {
    split(normalize(series), max_samples)
        .iter()
        .map(compress)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(name: &str, value: &str) -> Label {
        Label {
            name: name.to_owned().into(),
            value: value.to_owned().into(),
        }
    }

    fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> TimeSeries {
        TimeSeries {
            labels: labels.iter().map(|(n, v)| label(n, v)).collect(),
            samples: samples
                .iter()
                .map(|&(timestamp, value)| Sample { value, timestamp })
                .collect(),
        }
    }

    fn decode(body: &Body) -> WriteRequest {
        let raw = snap::raw::Decoder::new()
            .decompress_vec(&body.bytes)
            .expect("snappy block format");
        WriteRequest::decode(raw.as_slice()).expect("a WriteRequest")
    }

    fn times(s: &TimeSeries) -> Vec<i64> {
        s.samples.iter().map(|s| s.timestamp).collect()
    }

    #[test]
    fn labels_are_sorted_with_the_name_first_and_equal_sets_merge() {
        let out = normalize(vec![
            series(
                &[("uuid", "g1"), ("node", "n"), ("__name__", "m")],
                &[(3, 3.0), (1, 1.0)],
            ),
            series(
                &[("__name__", "m"), ("node", "n"), ("uuid", "g0")],
                &[(1, 9.0)],
            ),
            series(
                &[("node", "n"), ("__name__", "m"), ("uuid", "g1")],
                &[(2, 2.0)],
            ),
        ]);
        assert_eq!(out.len(), 2, "g1's two series are one");
        for s in &out {
            let names: Vec<_> = s.labels.iter().map(|l| l.name_str()).collect();
            assert_eq!(names, ["__name__", "node", "uuid"]);
        }
        assert_eq!(out[0].labels[2].value_str(), "g0");
        assert_eq!(out[1].labels[2].value_str(), "g1");
        assert_eq!(times(&out[1]), [1, 2, 3], "merged in time order");
    }

    #[test]
    fn one_sample_per_timestamp_the_last_given() {
        let out = normalize(vec![
            series(&[("__name__", "m")], &[(5, 1.0), (4, 0.5)]),
            series(&[("__name__", "m")], &[(5, 2.0)]),
        ]);
        let values: Vec<(i64, f64)> = out[0]
            .samples
            .iter()
            .map(|s| (s.timestamp, s.value))
            .collect();
        assert_eq!(values, [(4, 0.5), (5, 2.0)]);
    }

    #[test]
    fn requests_hold_at_most_the_bound_and_keep_each_series_in_order() {
        let long: Vec<(i64, f64)> = (0..7).map(|t| (t, t as f64)).collect();
        let input = normalize(vec![
            series(&[("__name__", "a")], &long),
            series(&[("__name__", "b")], &[(0, 0.0), (1, 1.0)]),
        ]);
        let requests = split(input, 3);
        let shape: Vec<Vec<(String, Vec<i64>)>> = requests
            .iter()
            .map(|r| {
                r.timeseries
                    .iter()
                    .map(|s| (s.labels[0].value_str().into_owned(), times(s)))
                    .collect()
            })
            .collect();
        let part = |name: &str, t: &[i64]| (name.to_owned(), t.to_vec());
        assert_eq!(
            shape,
            [
                vec![part("a", &[0, 1, 2])],
                vec![part("a", &[3, 4, 5])],
                vec![part("a", &[6]), part("b", &[0, 1])],
            ]
        );
        assert!(split(Vec::new(), 3).is_empty());
    }

    #[test]
    fn a_body_is_a_snappy_block_of_the_write_request() {
        let input = vec![
            series(
                &[("node", "n"), ("__name__", "gpumon_x")],
                &[(1_700_000_000_000, 42.5), (1_700_000_002_000, 43.0)],
            ),
            series(&[("__name__", "gpumon_y")], &[(1_700_000_000_000, -1.0)]),
        ];
        let out = bodies(input.clone(), 2).unwrap();
        assert_eq!(out.iter().map(|b| b.samples).collect::<Vec<_>>(), [2, 1]);
        let mut decoded: Vec<TimeSeries> = out.iter().flat_map(|b| decode(b).timeseries).collect();
        decoded.sort_by(|a, b| a.labels.cmp(&b.labels));
        assert_eq!(decoded, normalize(input));
        assert_eq!(decoded[0].labels[0], label("__name__", "gpumon_x"));
    }
}
