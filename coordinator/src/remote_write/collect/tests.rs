use std::collections::BTreeMap;

use gpumon_core::cluster::{Cluster, Limits};
use gpumon_proto::{BytesStat, GaugeStat, GpuInfo, GpuWindow, ProcWindow, PushBatch, RankInfo};

use super::*;

const GIB: u64 = 1 << 30;
const KIB: u64 = 1 << 10;

/// A sample's value for `n` KiB.
fn kib(n: u32) -> f64 {
    f64::from(n) * 1024.0
}

/// A window of `uuid` ending at `end_ms`: used rising from min to max and
/// ending between; g0 runs rank 1 of job j at 50 % utilization.
fn window(uuid: &str, end_ms: u64) -> GpuWindow {
    let g0 = uuid == "g0";
    // In KiB, as the view keeps memory figures.
    let base = end_ms % 100_000 * KIB;
    GpuWindow {
        gpu: GpuInfo {
            uuid: uuid.into(),
            index: u32::from(!g0),
            name: "A100".into(),
            total_bytes: 40 * GIB,
        },
        start_ms: end_ms - 1000,
        end_ms,
        samples: 3,
        used_bytes: BytesStat {
            min: base,
            max: base + 20 * KIB,
            last: base + 10 * KIB,
            mean: base + 10 * KIB,
        },
        reserved_bytes: None,
        util_pct: g0.then_some(GaugeStat {
            min: 40.0,
            max: 60.0,
            last: 45.0,
            mean: 50.0,
        }),
        sm_clock_mhz: None,
        power_w: None,
        procs: g0
            .then(|| ProcWindow {
                pid: 7,
                used_bytes: BytesStat::single(base),
                rank: Some(RankInfo {
                    job: "j".into(),
                    rank: 1,
                    local_rank: 0,
                    world_size: 2,
                    master_addr: None,
                    master_port: None,
                }),
            })
            .into_iter()
            .collect(),
    }
}

fn push(state: &mut Cluster, seq: u64, ends: &[u64]) {
    let windows = ends
        .iter()
        .flat_map(|&t| [window("g0", t), window("g1", t)])
        .collect();
    let applied = state.apply_push(&PushBatch {
        agent_id: "a".into(),
        incarnation: 1,
        seq,
        node: "n".into(),
        dropped_batches: 0,
        windows,
        hook: Vec::new(),
        acks: Vec::new(),
    });
    assert_eq!(applied.windows_skipped, 0);
}

fn extra() -> BTreeMap<String, String> {
    BTreeMap::from([("cluster".to_owned(), "a".to_owned())])
}

/// `(metric, uuid)` to its labels other than the name, and its samples.
type Found = BTreeMap<(String, String), (Vec<(String, String)>, Vec<(i64, f64)>)>;

fn found(taken: &Taken) -> Found {
    taken
        .series
        .iter()
        .map(|s| {
            let get = |n: &str| {
                s.labels
                    .iter()
                    .find(|l| l.name_str() == n)
                    .map(|l| l.value_str().into_owned())
                    .unwrap_or_default()
            };
            let mut labels: Vec<(String, String)> = s
                .labels
                .iter()
                .filter(|l| l.name_str() != NAME_LABEL)
                .map(|l| (l.name_str().into_owned(), l.value_str().into_owned()))
                .collect();
            labels.sort();
            let samples = s.samples.iter().map(|p| (p.timestamp, p.value)).collect();
            ((get(NAME_LABEL), get("uuid")), (labels, samples))
        })
        .collect()
}

fn samples_of(f: &Found, metric: &str, uuid: &str) -> Vec<(i64, f64)> {
    f.get(&(metric.to_owned(), uuid.to_owned()))
        .map(|(_, s)| s.clone())
        .unwrap_or_default()
}

#[test]
fn every_window_once_with_its_own_time_and_the_gpus_labels() {
    let mut state = Cluster::new(Limits::default());
    let mut cursors = Cursors::at(&state);
    push(&mut state, 1, &[101_000, 102_000]);
    let taken = cursors.take(&state, &extra(), usize::MAX);
    let f = found(&taken);
    assert_eq!(
        samples_of(&f, USED, "g0"),
        [(101_000, kib(1_010)), (102_000, kib(2_010))]
    );
    assert_eq!(
        samples_of(&f, PEAK, "g1"),
        [(101_000, kib(1_020)), (102_000, kib(2_020))]
    );
    assert_eq!(samples_of(&f, TOTAL, "g0"), [(102_000, (40 * GIB) as f64)]);
    assert_eq!(samples_of(&f, UTIL, "g0"), [(102_000, 0.5)]);
    assert!(!f.contains_key(&(UTIL.to_owned(), "g1".to_owned())));
    assert_eq!(taken.samples, 4 + 4 + 2 + 1);
    assert_eq!(taken.skipped, 0);

    let owned = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    };
    let labels = |uuid: &str| f[&(USED.to_owned(), uuid.to_owned())].0.clone();
    assert_eq!(
        labels("g0"),
        owned(&[
            ("cluster", "a"),
            ("gpu", "0"),
            ("job", "j"),
            ("node", "n"),
            ("rank", "1"),
            ("uuid", "g0"),
        ])
    );
    assert_eq!(
        labels("g1"),
        owned(&[
            ("cluster", "a"),
            ("gpu", "1"),
            ("node", "n"),
            ("uuid", "g1")
        ])
    );

    assert!(cursors.take(&state, &extra(), usize::MAX).series.is_empty());
    push(&mut state, 2, &[103_000]);
    let f = found(&cursors.take(&state, &extra(), usize::MAX));
    assert_eq!(samples_of(&f, USED, "g1"), [(103_000, kib(3_010))]);
}

#[test]
fn a_new_leader_starts_from_its_view_as_it_is() {
    let mut state = Cluster::new(Limits::default());
    push(&mut state, 1, &[101_000, 102_000]);
    let mut cursors = Cursors::at(&state);
    assert!(cursors.take(&state, &extra(), usize::MAX).series.is_empty());
    push(&mut state, 2, &[103_000]);
    let f = found(&cursors.take(&state, &extra(), usize::MAX));
    assert_eq!(samples_of(&f, USED, "g0"), [(103_000, kib(3_010))]);
}

#[test]
fn past_the_budget_whole_gpus_are_skipped_counted_and_not_taken_again() {
    let mut state = Cluster::new(Limits::default());
    let mut cursors = Cursors::default();
    push(&mut state, 1, &[101_000, 102_000]);
    // g0 has 6 samples (2 used, 2 peak, total, utilization), g1 5.
    let taken = cursors.take(&state, &extra(), 10);
    assert_eq!((taken.samples, taken.skipped), (6, 5));
    assert!(found(&taken).keys().all(|(_, uuid)| uuid == "g0"));
    assert!(cursors.take(&state, &extra(), 10).series.is_empty());
}

#[test]
fn a_take_in_parts_reads_each_gpu_once_and_a_gpu_it_passed_comes_next_time() {
    let mut state = Cluster::new(Limits::default());
    let mut cursors = Cursors::default();
    push(&mut state, 1, &[101_000]);
    let mut take = cursors.begin(&extra(), usize::MAX);
    assert!(take.step(&state, 1), "g1 is left");
    // Between parts: a GPU sorting before the part read, and g1 moves on.
    let mut late = window("a0", 102_000);
    late.gpu.index = 7;
    let applied = state.apply_push(&PushBatch {
        agent_id: "a".into(),
        incarnation: 1,
        seq: 2,
        node: "n".into(),
        dropped_batches: 0,
        windows: vec![late, window("g1", 102_000)],
        hook: Vec::new(),
        acks: Vec::new(),
    });
    assert_eq!(applied.windows_applied, 2);
    assert!(!take.step(&state, 1), "g1 was the last");
    let f = found(&take.finish());
    assert_eq!(samples_of(&f, USED, "g0"), [(101_000, kib(1_010))]);
    assert_eq!(
        samples_of(&f, USED, "g1"),
        [(101_000, kib(1_010)), (102_000, kib(2_010))]
    );
    assert!(samples_of(&f, USED, "a0").is_empty());

    let f = found(&cursors.take(&state, &extra(), usize::MAX));
    assert_eq!(samples_of(&f, USED, "a0"), [(102_000, kib(2_010))]);
    assert!(samples_of(&f, USED, "g1").is_empty(), "not twice");
}
