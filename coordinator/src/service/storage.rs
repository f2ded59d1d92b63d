//! Room on the disk: a write is refused (507) while the data directory's
//! file system has less than `min_free_bytes` free, before the Raft log
//! could fail on a full disk and stop the replica. Nothing needs to be
//! restarted: the next write after space returns goes through.

use std::path::{Path, PathBuf};

use super::ServiceError;

/// Default free space a replica keeps on its data directory's file system.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;

/// The data directory and the room it must keep.
#[derive(Debug, Clone)]
pub struct StorageGuard {
    dir: PathBuf,
    min_free_bytes: u64,
}

impl StorageGuard {
    /// Guards `dir`, keeping `min_free_bytes` free (zero: never refuses).
    pub fn new(dir: &Path, min_free_bytes: u64) -> Self {
        Self {
            dir: dir.to_owned(),
            min_free_bytes,
        }
    }

    /// Refuses while the disk is too full to take a write.
    pub fn check(&self) -> Result<(), ServiceError> {
        if self.min_free_bytes == 0 {
            return Ok(());
        }
        let free = free_bytes(&self.dir).map_err(|e| {
            ServiceError::InsufficientStorage(format!(
                "cannot tell the free space of {}: {e}",
                self.dir.display()
            ))
        })?;
        if free < self.min_free_bytes {
            return Err(ServiceError::InsufficientStorage(format!(
                "the data directory {} has {} bytes free, under the {} this replica keeps; writes resume once space is freed",
                self.dir.display(),
                free,
                self.min_free_bytes
            )));
        }
        Ok(())
    }
}

/// Bytes an unprivileged writer may still use on `dir`'s file system.
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let s = rustix::fs::statvfs(dir)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_when_the_floor_is_above_the_free_space_and_names_the_dir() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_bytes(dir.path()).unwrap();
        assert!(free > 0);
        assert_eq!(StorageGuard::new(dir.path(), 1).check(), Ok(()));
        assert_eq!(StorageGuard::new(dir.path(), 0).check(), Ok(()));
        let err = StorageGuard::new(dir.path(), u64::MAX).check().unwrap_err();
        let ServiceError::InsufficientStorage(why) = err else {
            panic!("{err:?}");
        };
        assert!(why.contains(&dir.path().display().to_string()), "{why}");
    }
}
