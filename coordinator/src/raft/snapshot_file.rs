//! The snapshot file: versioned, because it outlives binaries.
//!
//! A file is a postcard-encoded `SnapshotFile`: the variant is the format
//! version, `meta` is openraft's snapshot metadata and `data` the postcard
//! encoding of the applied state as that version laid it out. Postcard
//! writes fields in declaration order with no names, so a field added,
//! removed or moved anywhere inside the state changes the layout: that
//! takes a new format version here, with the old one kept readable and
//! upgraded on load. `tests/fixtures/snapshots/` holds one file of each
//! supported version, and the tests below load each of them.
//!
//! | version | holds |
//! | --- | --- |
//! | 1 | the cluster view |
//! | 2 | + the detection engine |
//! | 3 | + the action book and hook data |
//! | 4 | + step times and the notify book: all the replicated data |
//! | 5 | ranks keep their Kubernetes placement, nodes their host memory; the engine's configuration gains memory levels (of GPUs and of host RAM) |
//! | 6 | the engine's configuration is TOML text (what differs from the defaults), so a new tunable takes its default in an older snapshot without a new format |
//! | 7 | the straggler detector's open steps keep each rank's peer group, and it keeps a pipeline-stage tracker |
//! | 8 | + the hang detector (each rank's latest stall report, open episodes) |
//! | 9 | the straggler detector's open steps and scores keep each rank's collective waits per process group, and it keeps a slow-link tracker per group |
//! | 10 | + each rank's memory outside the caching allocator (baseline, recent samples, alert latch) |
//! | 11 | the straggler detector keeps the collectives its open steps list one by one, and per rank how it arrived at them in its latest scored steps |
//! | 12 | + each rank's device limit (its allocator's cap, its device as it sees it) |
//!
//! Writes are atomic: a temporary file, fsync, rename, fsync of the
//! directory, so a crash mid-write leaves the previous snapshot intact.

use std::io::Write;
use std::path::{Path, PathBuf};

use gpumon_core::actions::ActionBook;
use gpumon_core::cluster::{ClusterV4, Limits};
use gpumon_core::engine::legacy::EngineV4;
use gpumon_core::engine::EngineConfig;
use gpumon_core::hook_records::HookData;
use gpumon_core::transition::{
    ReplicatedV10, ReplicatedV11, ReplicatedV4, ReplicatedV5, ReplicatedV6, ReplicatedV7,
    ReplicatedV8, ReplicatedV9,
};
use openraft::{LogId, SnapshotMeta, StoredMembership};
use serde::{Deserialize, Serialize};

use super::applied::Applied;
use decode_error::DecodeError;
pub use decode_error::SealError;

mod decode_error;

type Node = openraft::BasicNode;
type Meta = SnapshotMeta<u64, Node>;

/// Name of the snapshot file inside the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot.bin";

/// The format this binary writes.
pub const CURRENT_VERSION: u32 = 12;

/// A snapshot file of any supported version.
#[derive(Serialize, Deserialize)]
enum SnapshotFile {
    /// The cluster view only.
    V1 { meta: Meta, data: Vec<u8> },
    /// The cluster view and the detection engine.
    V2 { meta: Meta, data: Vec<u8> },
    /// The cluster view, the engine, actions and hook data.
    V3 { meta: Meta, data: Vec<u8> },
    /// All of the replicated data, ranks without their placement and the
    /// engine without memory levels.
    V4 { meta: Meta, data: Vec<u8> },
    /// All of the replicated data, the engine's configuration field by field.
    V5 { meta: Meta, data: Vec<u8> },
    /// All of the replicated data, the straggler detector before peer groups.
    V6 { meta: Meta, data: Vec<u8> },
    /// All of the replicated data but the hang detector.
    V7 { meta: Meta, data: Vec<u8> },
    /// All of the replicated data, the straggler detector before
    /// collective waits.
    V8 { meta: Meta, data: Vec<u8> },
    /// All of the replicated data but memory outside the allocator.
    V9 { meta: Meta, data: Vec<u8> },
    /// All of the replicated data, the straggler detector before
    /// collectives listed one by one.
    V10 { meta: Meta, data: Vec<u8> },
    /// All of the replicated data but device limits.
    V11 { meta: Meta, data: Vec<u8> },
    /// All of [`Applied`].
    V12 { meta: Meta, data: Vec<u8> },
}

/// [`Applied`] as formats 4 to 11 laid it out: the same parts around the
/// replicated data `R` of the format (see [`gpumon_core::transition`]'s
/// `ReplicatedV4` to `ReplicatedV11`).
#[derive(Deserialize)]
struct AppliedOf<R> {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, Node>,
    data: R,
}

/// [`Applied`] as format 3 laid it out, before step times.
#[derive(Deserialize)]
struct AppliedV3 {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, Node>,
    state: ClusterV4,
    engine: EngineV4,
    actions: ActionBook,
    hook: HookData,
}

/// [`Applied`] as format 2 laid it out, before actions and hook data.
#[derive(Deserialize)]
struct AppliedV2 {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, Node>,
    state: ClusterV4,
    engine: EngineV4,
}

/// [`Applied`] as format 1 laid it out, before the engine existed.
#[derive(Deserialize)]
struct AppliedV1 {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, Node>,
    state: ClusterV4,
}

/// A snapshot read from disk, upgraded to the current format.
#[derive(Debug)]
pub struct Loaded {
    /// The state it holds.
    pub applied: Applied,
    /// Its metadata.
    pub meta: Meta,
    /// The state encoded in the current format, to serve to followers.
    pub data: Vec<u8>,
    /// The format the file was in.
    pub version: u32,
}

/// Why the snapshot file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("cannot load snapshot {path}: {reason}")]
pub struct LoadSnapshotError {
    path: PathBuf,
    reason: String,
}

/// Reads the snapshot file at `path`; `None` when there is none. Older
/// formats are upgraded: what they lack starts empty, from `limits` and
/// `engine_config`.
pub fn load(
    path: &Path,
    limits: Limits,
    engine_config: &EngineConfig,
) -> Result<Option<Loaded>, LoadSnapshotError> {
    let fail = |reason: String| LoadSnapshotError {
        path: path.to_owned(),
        reason,
    };
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(e.to_string())),
    };
    let file: SnapshotFile =
        postcard::from_bytes(&bytes).map_err(|e| fail(format!("does not decode: {e}")))?;
    let Decoded {
        applied,
        meta,
        version,
        current,
    } = decode(file, path, limits, engine_config).map_err(|e| fail(e.to_string()))?;
    // A file in the current format is served as it is; an older one in the
    // current format's encoding.
    let data = match current {
        Some(data) => data,
        None => postcard::to_allocvec(&applied).map_err(|e| fail(e.to_string()))?,
    };
    Ok(Some(Loaded {
        applied,
        meta,
        data,
        version,
    }))
}

/// A snapshot file decoded, its state in the current format.
struct Decoded {
    applied: Applied,
    meta: Meta,
    /// The format the file was in.
    version: u32,
    /// The file's data when it is in the current format, to serve as it is.
    current: Option<Vec<u8>>,
}

/// Decodes a file's state; an older format is upgraded, and what it lacks
/// starts empty, from `limits` and `engine_config`. The error is the reason
/// the file cannot be loaded.
fn decode(
    file: SnapshotFile,
    path: &Path,
    limits: Limits,
    engine_config: &EngineConfig,
) -> Result<Decoded, DecodeError> {
    let mut applied = Applied::empty(limits, engine_config);
    let decode_err =
        |version: u32| move |source: postcard::Error| DecodeError::Data { version, source };
    let (meta, version) = match file {
        SnapshotFile::V1 { meta, data } => {
            let old: AppliedV1 = postcard::from_bytes(&data).map_err(decode_err(1))?;
            tracing::warn!(path = %path.display(),
                "snapshot format 1 has no detector state; detectors start afresh");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            applied.data.cluster = old.state.into();
            (meta, 1)
        }
        SnapshotFile::V2 { meta, data } => {
            let old: AppliedV2 = postcard::from_bytes(&data).map_err(decode_err(2))?;
            tracing::warn!(path = %path.display(),
                "snapshot format 2 has no action book; actions start afresh");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            applied.data.cluster = old.state.into();
            applied.data.engine = old.engine.upgrade(engine_config);
            (meta, 2)
        }
        SnapshotFile::V3 { meta, data } => {
            let old: AppliedV3 = postcard::from_bytes(&data).map_err(decode_err(3))?;
            tracing::info!(path = %path.display(),
                "snapshot format 3 has no step times; they fill in from the next steps");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            let data = &mut applied.data;
            (data.cluster, data.engine) = (old.state.into(), old.engine.upgrade(engine_config));
            (data.actions, data.hook) = (old.actions, old.hook);
            (meta, 3)
        }
        SnapshotFile::V4 { meta, data } => {
            let old: AppliedOf<ReplicatedV4> = open_sealed(&meta, &data, 4)?;
            tracing::info!(path = %path.display(),
                "snapshot format 4 has no rank placements (they fill in from the next pushes), no host memory (it fills in likewise) and no memory levels (they come from this replica's [engine.memory_levels] and [engine.host_memory_levels])");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            applied.data = old.data.upgrade(engine_config);
            (meta, 4)
        }
        SnapshotFile::V5 { meta, data } => {
            let old: AppliedOf<ReplicatedV5> = open_sealed(&meta, &data, 5)?;
            tracing::info!(path = %path.display(),
                "snapshot format 5 lacks the straggler detector's loss floor and shortest episode: they come from this replica's [engine.straggler], as does max_pending_steps");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            applied.data = old.data.upgrade(engine_config);
            (meta, 5)
        }
        SnapshotFile::V6 { meta, data } => {
            let old: AppliedOf<ReplicatedV6> = open_sealed(&meta, &data, 6)?;
            tracing::info!(path = %path.display(),
                "snapshot format 6 has no peer groups: open steps are scored as one group, and pipeline stages are told apart from the next steps");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            applied.data = old.data.upgrade();
            (meta, 6)
        }
        SnapshotFile::V7 { meta, data } => {
            let old: AppliedOf<ReplicatedV7> = open_sealed(&meta, &data, 7)?;
            tracing::info!(path = %path.display(),
                "snapshot format 7 has no hang detector: stall reports count from the next pushes");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            applied.data = old.data.upgrade();
            (meta, 7)
        }
        SnapshotFile::V8 { meta, data } => {
            let old: AppliedOf<ReplicatedV8> = open_sealed(&meta, &data, 8)?;
            tracing::info!(path = %path.display(),
                "snapshot format 8 has no collective waits: they fill in from the next steps");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            applied.data = old.data.upgrade();
            (meta, 8)
        }
        SnapshotFile::V9 { meta, data } => {
            let old: AppliedOf<ReplicatedV9> = open_sealed(&meta, &data, 9)?;
            tracing::info!(path = %path.display(),
                "snapshot format 9 has no memory outside the allocator: it is measured from the next windows");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            applied.data = old.data.upgrade();
            (meta, 9)
        }
        SnapshotFile::V10 { meta, data } => {
            let old: AppliedOf<ReplicatedV10> = open_sealed(&meta, &data, 10)?;
            tracing::info!(path = %path.display(),
                "snapshot format 10 has no collectives listed one by one: they fill in from the next steps");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            applied.data = old.data.upgrade();
            (meta, 10)
        }
        SnapshotFile::V11 { meta, data } => {
            let old: AppliedOf<ReplicatedV11> = open_sealed(&meta, &data, 11)?;
            tracing::info!(path = %path.display(),
                "snapshot format 11 has no device limits: they fill in from the next allocator records");
            (applied.last_applied, applied.membership) = (old.last_applied, old.membership);
            applied.data = old.data.upgrade();
            (meta, 11)
        }
        SnapshotFile::V12 { meta, data } => {
            check_sealed(&meta.snapshot_id, &data)?;
            let applied = decode_applied(&data).map_err(decode_err(12))?;
            return Ok(Decoded {
                applied,
                meta,
                version: 12,
                current: Some(data),
            });
        }
    };
    Ok(Decoded {
        applied,
        meta,
        version,
        current: None,
    })
}

/// The data of a format 4 to 11 file, its seal checked.
fn open_sealed<R: serde::de::DeserializeOwned>(
    meta: &Meta,
    data: &[u8],
    version: u32,
) -> Result<AppliedOf<R>, DecodeError> {
    check_seal(&meta.snapshot_id, data, version)?;
    postcard::from_bytes(data).map_err(|source| DecodeError::Data { version, source })
}

/// A snapshot id sealed with the format and a checksum of `data`:
/// `BASE.v9.HEX`. A follower checks both before it installs the snapshot
/// ([`check_sealed`]), and a replica before it loads its file.
pub fn seal_id(base: &str, data: &[u8]) -> String {
    seal_id_with(base, &super::digest::checksum(data))
}

/// [`seal_id`] from a checksum computed already ([`seal_of`]).
pub fn seal_id_with(base: &str, checksum: &str) -> String {
    format!("{base}.v{CURRENT_VERSION}.{checksum}")
}

/// Checks a sealed id against `data`: the format this build reads and the
/// checksum. An id without a seal (written by an older build) passes.
pub fn check_sealed(id: &str, data: &[u8]) -> Result<(), SealError> {
    check_seal(id, data, CURRENT_VERSION)
}

/// [`check_sealed`] for data in format `expected`.
fn check_seal(id: &str, data: &[u8], expected: u32) -> Result<(), SealError> {
    let mut parts = id.rsplitn(3, '.');
    let (Some(sum), Some(version), Some(_)) = (parts.next(), parts.next(), parts.next()) else {
        return Ok(());
    };
    let Some(version) = version
        .strip_prefix('v')
        .and_then(|v| v.parse::<u32>().ok())
    else {
        return Ok(());
    };
    if version != expected {
        return Err(SealError::OtherFormat {
            id: id.to_owned(),
            version,
            expected,
        });
    }
    let got = super::digest::checksum(data);
    if got != sum {
        return Err(SealError::Damaged {
            id: id.to_owned(),
            got,
            sum: sum.to_owned(),
        });
    }
    Ok(())
}

/// Decodes the data of a current-format snapshot (a file's, or one a
/// leader sent).
pub fn decode_applied(data: &[u8]) -> Result<Applied, postcard::Error> {
    postcard::from_bytes(data)
}

/// Encodes the applied state as current-format snapshot data.
pub fn encode_applied(applied: &Applied) -> Result<Vec<u8>, postcard::Error> {
    postcard::to_allocvec(applied)
}

/// Writes a current-format snapshot file at `path` atomically, streaming:
/// no copy of `data` is made.
pub fn write(path: &Path, meta: &Meta, data: &[u8]) -> std::io::Result<()> {
    write_atomically(path, |w| {
        postcard::to_io(&SnapshotHeaderRef::V12 { meta }, &mut *w)
            .map_err(std::io::Error::other)?;
        postcard::to_io(&(data.len() as u64), &mut *w).map_err(std::io::Error::other)?;
        w.write_all(data)
    })
}

/// [`SnapshotFile::V12`] borrowed, up to its data: the variant and the
/// metadata. Postcard writes the data, a byte string, as its length and
/// its bytes, which [`write`] and [`write_encoding`] append.
#[derive(Serialize)]
enum SnapshotHeaderRef<'a> {
    #[allow(dead_code)]
    V1,
    #[allow(dead_code)]
    V2,
    #[allow(dead_code)]
    V3,
    #[allow(dead_code)]
    V4,
    #[allow(dead_code)]
    V5,
    #[allow(dead_code)]
    V6,
    #[allow(dead_code)]
    V7,
    #[allow(dead_code)]
    V8,
    #[allow(dead_code)]
    V9,
    #[allow(dead_code)]
    V10,
    #[allow(dead_code)]
    V11,
    V12 {
        meta: &'a Meta,
    },
}

/// The checksum and length of `applied`'s encoding, computed as it streams
/// by: no byte of it is kept.
pub fn seal_of(applied: &Applied) -> Result<(String, u64), postcard::Error> {
    let mut w = super::digest::SealWriter::default();
    postcard::to_io(applied, &mut w)?;
    Ok(w.finish())
}

/// Writes the snapshot file of `applied`, whose encoding is `len` bytes
/// long (from [`seal_of`]), atomically and without holding the encoding in
/// memory: byte for byte what [`write()`] writes for the encoded data.
pub fn write_encoding(
    path: &Path,
    meta: &Meta,
    applied: &Applied,
    len: u64,
) -> std::io::Result<()> {
    write_atomically(path, |w| {
        postcard::to_io(&SnapshotHeaderRef::V12 { meta }, &mut *w)
            .map_err(std::io::Error::other)?;
        postcard::to_io(&len, &mut *w).map_err(std::io::Error::other)?;
        postcard::to_io(applied, w)
            .map(drop)
            .map_err(std::io::Error::other)
    })
}

/// Writes through `fill` into a temporary file beside `path`, fsyncs it,
/// renames it over `path` and fsyncs the directory, so a crash mid-write
/// leaves the previous file intact.
fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = path.with_extension("bin.tmp");
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
        fill(&mut w)?;
        w.flush()?;
        w.get_ref().sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The metadata and data of the current-format snapshot file at `path`,
/// to send to a follower.
pub fn read_current(path: &Path) -> std::io::Result<(Meta, Vec<u8>)> {
    let bytes = std::fs::read(path)?;
    match postcard::from_bytes::<SnapshotFile>(&bytes) {
        Ok(SnapshotFile::V12 { meta, data }) => Ok((meta, data)),
        Ok(_) => Err(std::io::Error::other(format!(
            "{} is not in format {CURRENT_VERSION}",
            path.display()
        ))),
        Err(e) => Err(std::io::Error::other(format!("{}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests;
