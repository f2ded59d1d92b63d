//! The hook package embedded in the binary, written out once per version
//! and content to a cache directory that `gpumon run` puts on PYTHONPATH.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/python_files.rs"));

/// FNV-1a over every path and content: the directory name changes whenever
/// the package does, so a stale copy is never used.
fn content_hash() -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    for (path, text) in FILES {
        h.write(path.as_bytes());
        h.write(&[0]);
        h.write(text.as_bytes());
    }
    h.finish()
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Where per-user cached files go: `$XDG_CACHE_HOME/gpumon`, `~/.cache/gpumon`,
/// else the per-user runtime directory.
fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("gpumon");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".cache/gpumon");
    }
    super::local_agent::runtime_dir()
}

/// [`cache_root`], checked private when it is the shared runtime directory
/// (under `/tmp`, where another user could have made it).
fn checked_cache_root() -> std::io::Result<PathBuf> {
    let root = cache_root();
    if root == super::local_agent::runtime_dir() {
        gpumon_agent::private_dir::ensure_private_dir(&root)
            .map_err(|why| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why))?;
    }
    Ok(root)
}

/// Writes the package under the cache (once) and returns the directory to
/// put on PYTHONPATH (it holds `gpumon/`).
pub fn materialize() -> std::io::Result<PathBuf> {
    let dir = checked_cache_root()?.join(format!(
        "python-{}-{:016x}",
        env!("CARGO_PKG_VERSION"),
        content_hash()
    ));
    if dir.join("gpumon/__init__.py").is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(dir.parent().unwrap_or(Path::new(".")))?;
    // Written beside, then renamed: a concurrent `gpumon run` never sees half a package.
    let tmp = tempdir_beside(&dir)?;
    for (rel, text) in FILES {
        let path = tmp.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
    }
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Someone else finished first: theirs is identical.
        Err(_) if dir.join("gpumon/__init__.py").is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(e),
    }
}

fn tempdir_beside(dir: &Path) -> std::io::Result<PathBuf> {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("python");
    for attempt in 0..100u32 {
        let tmp = dir.with_file_name(format!(".{name}.{}.{attempt}", std::process::id()));
        match std::fs::create_dir(&tmp) {
            Ok(()) => return Ok(tmp),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("cannot create a temporary directory"))
}

/// The PYTHONPATH for the training command: the package, its injector
/// (a `sitecustomize` that calls `gpumon.init()` under torchrun), then
/// whatever the user had.
pub fn pythonpath(package_root: &Path, existing: Option<&std::ffi::OsStr>) -> std::ffi::OsString {
    let mut parts = vec![package_root.to_owned(), package_root.join("gpumon/_inject")];
    if let Some(existing) = existing.filter(|e| !e.is_empty()) {
        parts.extend(std::env::split_paths(existing));
    }
    std::env::join_paths(parts).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embeds_the_package_and_its_injector() {
        let paths: Vec<&str> = FILES.iter().map(|(p, _)| *p).collect();
        assert!(paths.contains(&"gpumon/__init__.py"), "{paths:?}");
        assert!(
            paths.contains(&"gpumon/_inject/sitecustomize.py"),
            "{paths:?}"
        );
    }

    #[test]
    fn keeps_the_users_pythonpath_after_ours() {
        let p = pythonpath(Path::new("/c/py"), Some(std::ffi::OsStr::new("/u/a:/u/b")));
        assert_eq!(p, "/c/py:/c/py/gpumon/_inject:/u/a:/u/b");
        assert_eq!(
            pythonpath(Path::new("/c/py"), None),
            "/c/py:/c/py/gpumon/_inject"
        );
    }
}
