//! Every supported snapshot format loads from a file written once and kept
//! (`tests/fixtures/snapshots/v{N}.bin`): a change to the state's layout that
//! would make a replica unable to read its own data dir after an upgrade
//! fails here, not in production.
//!
//! The fixtures hold one scenario: an agent with two GPUs, two ranks of
//! `job-1`, allocator and step records, a named snapshot, one action and
//! one notification, rank 1's Kubernetes placement, at log index 42 of term 3. A missing fixture is
//! written by `cargo test -p gpumon-coordinator snapshot_fixtures --
//! --ignored`; an existing one is never rewritten.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpumon_core::actions::{ActionOrigin, ActionRequest, IssueRules};
use gpumon_core::engine::straggler::StragglerParams;
use gpumon_core::engine::{AlertKind, EngineConfig, Severity, Subject};
use gpumon_core::notify::{Notice, NotifiedEntry, NotifyKey, ReceiverId, ReceiverKind};
use gpumon_core::transition::{Command, CommandV1};
use gpumon_proto::{
    ActionKind, AllocRecord, AllocStats, BytesStat, CapSource, CollectiveArrival, CollectiveWait,
    DeviceLimit, EventRecord, GpuInfo, GpuWindow, GroupWait, Hello, HookRecord, HostMemory,
    MemoryCap, PodPlacement, ProcPlacement, ProcWindow, PushBatch, PushBatchV2, RankInfo,
    StallRecord, StepRecord,
};
use openraft::{CommittedLeaderId, Membership};

use super::*;

fn fixture(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/snapshots")
        .join(format!("v{version}.bin"))
}

fn gpu(index: u32) -> GpuInfo {
    GpuInfo {
        uuid: format!("GPU-0000000{index}"),
        index,
        name: "H100".into(),
        total_bytes: 80 << 30,
    }
}

fn window(index: u32, end_ms: u64, used: u64) -> GpuWindow {
    GpuWindow {
        gpu: gpu(index),
        start_ms: end_ms - 1_000,
        end_ms,
        samples: 2,
        used_bytes: BytesStat::single(used),
        reserved_bytes: None,
        util_pct: None,
        sm_clock_mhz: None,
        power_w: None,
        procs: vec![ProcWindow {
            pid: 100 + index,
            used_bytes: BytesStat::single(used),
            rank: Some(RankInfo {
                job: "job-1".into(),
                rank: index,
                local_rank: index,
                world_size: 2,
                master_addr: None,
                master_port: None,
            }),
        }],
    }
}

fn hook_records(t_ms: u64) -> Vec<HookRecord> {
    let stats = AllocStats {
        allocated: 10 << 30,
        reserved: 12 << 30,
        ..AllocStats::default()
    };
    vec![
        HookRecord::Alloc(AllocRecord {
            limit: Some(DeviceLimit {
                device_total: Some(80 << 30),
                cap: Some(MemoryCap {
                    bytes: 40 << 30,
                    source: CapSource::MemoryFraction,
                }),
            }),
            t_ms,
            job: "job-1".into(),
            rank: 0,
            stats,
        }),
        HookRecord::Step(StepRecord {
            group: Some(0),
            t_ms,
            job: "job-1".into(),
            rank: 0,
            step: 7,
            duration_ms: 120.0,
            sections: vec![("forward".into(), 40.0), ("backward".into(), 70.0)],
            waits: vec![GroupWait {
                group: "1".into(),
                calls: 3,
                wait_ms: 9.5,
            }],
            collectives: vec![CollectiveArrival {
                group: "1".into(),
                seq: 3,
                op: "all_reduce".into(),
                entered_ms: 80.5,
                left_ms: 90.0,
                wait_ms: 9.5,
            }],
        }),
        HookRecord::Event(EventRecord {
            t_ms,
            job: "job-1".into(),
            rank: 0,
            name: "before-eval".into(),
            detail: None,
            snapshot: Some(stats),
        }),
        HookRecord::Stall(StallRecord {
            t_ms: t_ms + 1,
            job: "job-1".into(),
            rank: 0,
            step: 7,
            quiet_ms: 20_000,
            source: "flight_recorder".into(),
            waiting: Some(CollectiveWait {
                group: "0".into(),
                desc: "default_pg".into(),
                seq: 12,
                op: "all_reduce".into(),
                numel: 72,
                waited_ms: 19_000,
                timeout_ms: Some(1_800_000),
            }),
            entered: vec![("0".into(), 12)],
            marker: None,
        }),
    ]
}

/// Rank 1's pod.
fn placement() -> PodPlacement {
    PodPlacement {
        pod_uid: Some("0b5e8a1c-2d3f-4e5a-8b6c-7d8e9f0a1b2c".into()),
        pod_name: Some("trainer-1".into()),
        namespace: Some("ml".into()),
        container_id: Some("5eed".repeat(16)),
        container_name: Some("pytorch".into()),
    }
}

/// The node's host RAM at `t_ms`: 400 of 512 GiB, past the default
/// warning level of 75 %.
fn host(t_ms: u64) -> HostMemory {
    HostMemory {
        t_ms,
        total_bytes: 512 << 30,
        used_max_bytes: 400 << 30,
    }
}

/// The scenario every fixture holds (as much of it as its format keeps).
fn scenario() -> Applied {
    // No warm-up, so that rank 0's memory outside the allocator is
    // measured from its first window (format 10 on).
    let cfg = EngineConfig {
        warmup_s: 0.0,
        ..EngineConfig::default()
    };
    let mut applied = Applied::empty(Limits::default(), &cfg);
    let node = "node-a".to_owned();
    let mut commands = vec![CommandV1::Hello(Hello {
        agent_id: node.clone(),
        incarnation: 7,
        node: node.clone(),
        agent_version: "0.1.0".into(),
        source: "sim:fixture".into(),
        gpus: vec![gpu(0), gpu(1)],
    })];
    for seq in 1..=3u64 {
        let end_ms = 1_000_000 + seq * 1_000;
        let batch = PushBatch {
            agent_id: node.clone(),
            incarnation: 7,
            seq,
            node: node.clone(),
            dropped_batches: 0,
            windows: vec![
                window(0, end_ms, (20 + seq) << 30),
                window(1, end_ms, 20 << 30),
            ],
            hook: hook_records(end_ms),
            acks: Vec::new(),
        };
        commands.push(CommandV1::PushPlaced(PushBatchV2 {
            batch,
            placements: vec![ProcPlacement {
                pid: 101,
                placement: placement(),
            }],
            host: Some(host(end_ms)),
        }));
    }
    commands.push(CommandV1::IssueActions {
        requests: vec![ActionRequest {
            kind: ActionKind::ReleaseCache,
            job: "job-1".into(),
            rank: 0,
            reason: "fixture".into(),
            origin: ActionOrigin::Admin,
        }],
        rules: IssueRules {
            ttl_s: 60.0,
            min_interval_s: 0.0,
        },
    });
    commands.push(CommandV1::Notified {
        entries: vec![NotifiedEntry {
            key: NotifyKey {
                receiver: ReceiverId::new(ReceiverKind::Webhook, "http://127.0.0.1:9/hook"),
                kind: AlertKind::OomPredicted,
                subject: Subject::Rank("job-1".into(), 0),
            },
            episode: 1,
            severity: Severity::Warning,
            notice: Notice::New,
        }],
        at_ms: 1_700_000_000_000,
    });
    for command in commands {
        applied.data.apply(Command::V1(command), false);
    }
    let log_id = LogId::new(CommittedLeaderId::new(3, 1), 42);
    applied.last_applied = Some(log_id);
    let voters = std::collections::BTreeSet::from([1u64, 2, 3]);
    let nodes: BTreeMap<u64, Node> = voters
        .iter()
        .map(|&id| (id, Node::new(format!("127.0.0.1:{}", 7070 + id))))
        .collect();
    applied.membership = StoredMembership::new(Some(log_id), Membership::new(vec![voters], nodes));
    applied
}

fn meta_of(applied: &Applied) -> Meta {
    SnapshotMeta {
        last_log_id: applied.last_applied,
        last_membership: applied.membership.clone(),
        snapshot_id: "fixture".into(),
    }
}

/// The scenario in the layout of `version`: only the current one can be
/// written (older fixtures were written by the builds that had their
/// types, and are kept).
fn encode_version(version: u32, a: &Applied) -> Vec<u8> {
    assert_eq!(
        version, CURRENT_VERSION,
        "the v{version} fixture is missing: restore it from git"
    );
    let file = SnapshotFile::V12 {
        meta: meta_of(a),
        data: encode_applied(a).unwrap(),
    };
    postcard::to_allocvec(&file).unwrap()
}

#[test]
#[ignore = "writes missing fixture files; run by hand when a format is added"]
fn snapshot_fixtures() {
    let applied = scenario();
    for version in 1..=CURRENT_VERSION {
        let path = fixture(version);
        if !path.exists() {
            std::fs::write(&path, encode_version(version, &applied)).unwrap();
        }
    }
}

fn load_fixture(version: u32) -> Loaded {
    let path = fixture(version);
    assert!(path.exists(), "{} is missing", path.display());
    load(&path, Limits::default(), &EngineConfig::default())
        .unwrap_or_else(|e| panic!("format {version}: {e}"))
        .expect("the file exists")
}

#[test]
fn every_supported_format_loads_with_what_it_holds() {
    for version in 1..=CURRENT_VERSION {
        let loaded = load_fixture(version);
        let a = &loaded.applied;
        assert_eq!(loaded.version, version);
        assert_eq!(a.last_applied.map(|l| l.index), Some(42), "v{version}");
        assert_eq!(loaded.meta.snapshot_id, "fixture");
        assert_eq!(a.membership.voter_ids().count(), 3, "v{version}");
        let view = a.cluster.cluster_view();
        assert_eq!((view.agents.len(), view.gpus), (1, 2), "v{version}");
        assert_eq!((view.live_jobs, view.live_ranks), (1, 2), "v{version}");
        assert_eq!(view.ingest.windows_applied, 6, "v{version}");

        let engine_kept = version >= 2;
        assert_eq!(a.engine.devices().len(), if engine_kept { 2 } else { 0 });
        assert_eq!(a.engine.tracks_job("job-1"), engine_kept, "v{version}");
        // Tunables a format lacks take their defaults.
        let (kept, default) = (&a.engine.config().straggler, StragglerParams::default());
        assert_eq!(
            (kept.min_loss_frac, kept.min_loss_ms, kept.min_duration_s),
            (
                default.min_loss_frac,
                default.min_loss_ms,
                default.min_duration_s
            ),
            "v{version}"
        );

        let actions_kept = version >= 3;
        let action = a.actions.entries().next();
        assert_eq!(action.is_some(), actions_kept, "v{version}");
        if let Some(action) = action {
            assert_eq!((action.job.as_str(), action.rank), ("job-1", 0));
        }
        assert_eq!(
            a.hook.snapshots().get("job-1", "before-eval").is_some(),
            actions_kept,
            "v{version}: the named snapshot"
        );

        let steps_kept = version >= 4;
        let rank_steps = a.steps.job("job-1").and_then(|ranks| ranks.get(&0));
        assert_eq!(rank_steps.is_some(), steps_kept, "v{version}");
        assert_eq!(a.notify.len(), usize::from(steps_kept), "v{version}");

        let placement_kept = version >= 5;
        let job = a.cluster.job_detail("job-1").expect("job-1");
        let placements: Vec<_> = job.ranks.iter().map(|r| r.view.placement.clone()).collect();
        let rank_1 = placement_kept.then(placement);
        assert_eq!(placements, [None, rank_1], "v{version}");

        let host_kept = version >= 5;
        assert_eq!(
            a.cluster.host("node-a").copied(),
            host_kept.then(|| host(1_003_000)),
            "v{version}"
        );
        let host_alert = a
            .engine
            .alert_book()
            .active_by_subject()
            .any(|(s, _)| *s == Subject::Host("node-a".into()));
        assert_eq!(host_alert, host_kept, "v{version}: the host's level");
        assert_eq!(
            a.engine.pending_arrivals("job-1"),
            if version >= 11 { 1 } else { 0 },
            "v{version}: the collectives rank 0 listed in its open step"
        );
        assert_eq!(
            a.engine.limit_of("job-1", 0).is_some(),
            version >= 12,
            "v{version}: rank 0's device limit"
        );
        let outside_kept = version >= 10;
        assert_eq!(
            a.engine.outside_of("job-1", 0).is_some(),
            outside_kept,
            "v{version}: rank 0's memory outside the allocator"
        );
        let levels = &a.engine.config().host_memory_levels;
        assert_eq!(
            (levels.warning_pct, levels.critical_pct),
            (75.0, 90.0),
            "v{version}: this replica's levels where the format had none"
        );
    }
}

#[test]
fn an_older_format_is_served_to_followers_in_the_current_one() {
    for version in 1..CURRENT_VERSION {
        let loaded = load_fixture(version);
        let served = decode_applied(&loaded.data).expect("current format");
        assert_eq!(served.last_applied, loaded.applied.last_applied);
        assert_eq!(
            served.cluster.cluster_view().gpus,
            loaded.applied.cluster.cluster_view().gpus
        );
    }
}

#[test]
fn the_current_format_reads_and_writes_its_fixture_byte_for_byte() {
    let bytes = std::fs::read(fixture(CURRENT_VERSION)).unwrap();
    let SnapshotFile::V12 { data, .. } = postcard::from_bytes(&bytes).unwrap() else {
        panic!("the newest fixture is not format {CURRENT_VERSION}");
    };
    let applied = decode_applied(&data).expect("decodes");
    assert!(
        encode_applied(&applied).unwrap() == data,
        "the state's layout changed: add snapshot format {} (see the module docs)",
        CURRENT_VERSION + 1
    );
}

#[test]
fn a_written_snapshot_loads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SNAPSHOT_FILE);
    let applied = scenario();
    write(
        &path,
        &meta_of(&applied),
        &encode_applied(&applied).unwrap(),
    )
    .unwrap();
    let loaded = load(&path, Limits::default(), &EngineConfig::default())
        .unwrap()
        .unwrap();
    assert_eq!(loaded.version, CURRENT_VERSION);
    assert_eq!(loaded.applied.last_applied, applied.last_applied);
    assert!(!path.with_extension("bin.tmp").exists());
}

#[test]
fn unreadable_files_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SNAPSHOT_FILE);
    let whole = std::fs::read(fixture(CURRENT_VERSION)).unwrap();
    let mut unknown_version = whole.clone();
    unknown_version[0] = 12;
    for (what, bytes) in [
        ("truncated", &whole[..whole.len() / 2]),
        ("unknown version", &unknown_version[..]),
        ("empty", &[][..]),
    ] {
        std::fs::write(&path, bytes).unwrap();
        let err = load(&path, Limits::default(), &EngineConfig::default())
            .expect_err(what)
            .to_string();
        assert!(err.contains(&path.display().to_string()), "{what}: {err}");
    }
    std::fs::remove_file(&path).unwrap();
    assert!(load(&path, Limits::default(), &EngineConfig::default())
        .unwrap()
        .is_none());
}

#[test]
fn a_sealed_snapshot_is_checked_before_it_is_read() {
    let applied = scenario();
    let data = encode_applied(&applied).unwrap();
    let id = seal_id("3-1-42-0", &data);
    assert!(id.starts_with("3-1-42-0.v12."), "{id}");
    assert_eq!(check_sealed(&id, &data), Ok(()));
    assert_eq!(
        check_sealed("3-1-42-0", &data),
        Ok(()),
        "an unsealed id of an older build"
    );

    let mut damaged = data.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    let err = check_sealed(&id, &damaged).unwrap_err().to_string();
    assert!(err.contains("damaged"), "{err}");
    let other_format = id.replace(".v12.", ".v13.");
    let err = check_sealed(&other_format, &data).unwrap_err().to_string();
    assert!(err.contains("format 13"), "{err}");

    // A damaged snapshot file is refused at start, naming the file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SNAPSHOT_FILE);
    let mut meta = meta_of(&applied);
    meta.snapshot_id = id;
    write(&path, &meta, &damaged).unwrap();
    let err = load(&path, Limits::default(), &EngineConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("damaged") && err.contains(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn a_format_4_file_sealed_by_its_build_loads_and_a_damaged_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SNAPSHOT_FILE);
    let bytes = std::fs::read(fixture(4)).unwrap();
    let SnapshotFile::V4 { mut meta, data } = postcard::from_bytes(&bytes).unwrap() else {
        panic!("fixture v4 is not format 4");
    };
    // What a format-4 build wrote: its id sealed `.v4.` with the data's checksum.
    let sum = crate::raft::digest::checksum(&data);
    meta.snapshot_id = format!("3-1-42-0.v4.{sum}");
    let file = SnapshotFile::V4 {
        meta: meta.clone(),
        data: data.clone(),
    };
    std::fs::write(&path, postcard::to_allocvec(&file).unwrap()).unwrap();
    let loaded = load(&path, Limits::default(), &EngineConfig::default())
        .unwrap()
        .unwrap();
    assert_eq!(loaded.version, 4);
    assert_eq!(loaded.applied.cluster.cluster_view().live_ranks, 2);

    let mut damaged = data;
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    let file = SnapshotFile::V4 {
        meta,
        data: damaged,
    };
    std::fs::write(&path, postcard::to_allocvec(&file).unwrap()).unwrap();
    let err = load(&path, Limits::default(), &EngineConfig::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("damaged"), "{err}");
}

#[test]
fn a_streamed_snapshot_file_is_byte_for_byte_the_encoded_one() {
    let dir = tempfile::tempdir().unwrap();
    let applied = scenario();
    let data = encode_applied(&applied).unwrap();
    let (checksum, len) = seal_of(&applied).unwrap();
    assert_eq!(
        (checksum.as_str(), len),
        (
            super::super::digest::checksum(&data).as_str(),
            data.len() as u64
        )
    );
    let mut meta = meta_of(&applied);
    meta.snapshot_id = seal_id_with("3-1-42-0", &checksum);
    assert_eq!(meta.snapshot_id, seal_id("3-1-42-0", &data));
    let (held, streamed) = (dir.path().join("held.bin"), dir.path().join("streamed.bin"));
    write(&held, &meta, &data).unwrap();
    write_encoding(&streamed, &meta, &applied, len).unwrap();
    assert!(std::fs::read(&held).unwrap() == std::fs::read(&streamed).unwrap());
    let (read_meta, read_data) = read_current(&streamed).unwrap();
    assert_eq!(read_meta.snapshot_id, meta.snapshot_id);
    assert!(read_data == data);
}
