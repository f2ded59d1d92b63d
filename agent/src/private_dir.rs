//! Directories that hold a hook socket or a user's runtime files, checked
//! before use.
//!
//! `/tmp` is shared by every local user, so `/tmp/gpumon-UID` can exist
//! before its user first runs gpumon: made by another user, it would let
//! them replace the hook's socket (and receive every rank's records and
//! hand out actions) or point the files written there somewhere else. So a
//! directory gpumon keeps files in is created `0700`, and an existing one is
//! used only when it is a real directory (not a symbolic link) owned by the
//! user (or by root, for a socket directory of the root agent), that no
//! other user may write in (a sticky world-writable directory such as
//! `/tmp` itself is fine for a socket: others cannot remove what is ours).
//! Otherwise the error names the path, its owner and what to do. Files in
//! such a directory are opened without following a symbolic link
//! ([`create_file`]).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Sticky bit: in a world-writable directory, only an entry's owner may
/// remove or rename it.
const STICKY: u32 = 0o1000;

/// Creates `dir` (and missing parents) `0700` unless it exists, then checks
/// it as [`check_dir`] does with `may_be_root_owned` false: it must be the
/// current user's and no one else's to write in.
pub fn ensure_private_dir(dir: &Path) -> Result<(), DirError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| DirError::Create {
            dir: dir.to_owned(),
            source,
        })?;
    check_dir(dir, false)
}

/// Checks a directory gpumon is about to keep a socket or files in: a real
/// directory, owned by the current user (or by root when
/// `may_be_root_owned`), not writable by others unless sticky, nor by its
/// group when it is the user's own.
pub fn check_dir(dir: &Path, may_be_root_owned: bool) -> Result<(), DirError> {
    let owned = || dir.to_owned();
    let meta = std::fs::symlink_metadata(dir).map_err(|source| DirError::Read {
        dir: owned(),
        source,
    })?;
    if meta.file_type().is_symlink() {
        return Err(DirError::Symlink { dir: owned() });
    }
    if !meta.is_dir() {
        return Err(DirError::NotDir { dir: owned() });
    }
    let me = rustix::process::geteuid().as_raw();
    let owner = meta.uid();
    if owner != me && !(may_be_root_owned && owner == 0) {
        return Err(DirError::Owner {
            dir: owned(),
            owner,
            me,
        });
    }
    let mode = meta.mode() & 0o7777;
    let others_write = mode & 0o002 != 0 && mode & STICKY == 0;
    let group_write = owner == me && owner != 0 && mode & 0o020 != 0 && mode & STICKY == 0;
    if others_write || group_write {
        return Err(DirError::Writable { dir: owned(), mode });
    }
    Ok(())
}

/// Why a directory may not hold gpumon's socket or files.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// It could not be created.
    #[error("cannot create {}: {source}", .dir.display())]
    Create {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Its metadata could not be read.
    #[error("cannot read {}: {source}", .dir.display())]
    Read {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is a symbolic link.
    #[error(
        "{} is a symbolic link; gpumon keeps its socket and files only in a real directory of yours: remove it",
        .dir.display()
    )]
    Symlink {
        /// The path.
        dir: PathBuf,
    },
    /// It is not a directory.
    #[error("{} is not a directory", .dir.display())]
    NotDir {
        /// The path.
        dir: PathBuf,
    },
    /// Another user owns it.
    #[error(
        "{} belongs to uid {owner}, not to you (uid {me}): another user may have made it to take gpumon's socket; remove it, or set XDG_RUNTIME_DIR to a directory of yours",
        .dir.display()
    )]
    Owner {
        /// The directory.
        dir: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// The current user's uid.
        me: u32,
    },
    /// Others may write in it.
    #[error(
        "{} may be written by other users (mode {mode:o}); run: chmod 700 {}",
        .dir.display(),
        .dir.display()
    )]
    Writable {
        /// The directory.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// Creates (or truncates) the file `path` in a private directory, mode
/// `0600`, refusing to follow a symbolic link in its place (`ELOOP`): a
/// link planted there cannot make gpumon truncate or write another file.
pub fn create_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_missing_directory_is_made_0700_and_then_accepted() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gpumon-1000");
        ensure_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        ensure_private_dir(&dir).unwrap();
    }

    #[test]
    fn a_symlink_or_a_directory_others_may_write_is_refused_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let link = tmp.path().join("gpumon-1000");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let err = ensure_private_dir(&link).unwrap_err().to_string();
        assert!(
            err.contains("symbolic link") && err.contains("gpumon-1000"),
            "{err}"
        );

        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = ensure_private_dir(&open).unwrap_err().to_string();
        assert!(
            err.contains("mode 777") && err.contains("chmod 700"),
            "{err}"
        );

        // World-writable but sticky, as /tmp: fine for a socket.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(check_dir(&open, true).is_ok());
    }

    #[test]
    fn a_directory_of_another_user_is_refused_naming_its_owner() {
        let tmp = tempfile::tempdir().unwrap();
        let theirs = tmp.path().join("gpumon-1000");
        std::fs::create_dir(&theirs).unwrap();
        // Only root can give a directory away; the suite runs as root.
        if rustix::process::geteuid().as_raw() != 0 {
            return;
        }
        std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).unwrap();
        let err = ensure_private_dir(&theirs).unwrap_err().to_string();
        assert!(err.contains("belongs to uid 4242"), "{err}");
    }

    #[test]
    fn a_file_is_not_opened_through_a_symbolic_link() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("victim");
        std::fs::write(&target, "keep me").unwrap();
        let link = tmp.path().join("agent.log");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_file(&link).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
        let real = tmp.path().join("real.log");
        std::io::Write::write_all(&mut create_file(&real).unwrap(), b"x").unwrap();
        let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
