//! Reading a process's `/proc` files with a bound: at most a limit and one
//! byte more, so an oversized file is seen without reading it all, and the
//! `KEY=value` entries of an environment blob. Rank discovery, pod placement
//! and the hook's identity check all read processes this way.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Largest environment blob [`crate::discovery::parse_environ`] accepts, bytes (1 MiB).
///
/// Linux caps a process's arguments plus environment at a quarter of its stack
/// limit, in practice a few MiB at most, and real environments are a few KiB;
/// anything larger is not worth parsing every sampling round.
pub const MAX_ENVIRON_BYTES: usize = 1 << 20;

/// Reads at most `limit + 1` bytes of `path`, so an oversized file is
/// detectable without reading all of it.
pub(crate) fn read_bounded(path: &Path, limit: usize) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?
        .take(limit as u64 + 1)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The values of `keys` in an environment blob (`KEY=value` entries
/// separated by NUL bytes). Entries that are not UTF-8 or have no `=` are
/// skipped; where a key repeats the first entry wins, as with `getenv`.
pub(crate) fn env_vars<'a>(bytes: &'a [u8], keys: &[&str]) -> HashMap<&'a str, &'a str> {
    let mut vars = HashMap::new();
    for entry in bytes.split(|&b| b == 0) {
        let Ok(entry) = std::str::from_utf8(entry) else {
            continue;
        };
        let Some((key, value)) = entry.split_once('=') else {
            continue;
        };
        if keys.contains(&key) {
            vars.entry(key).or_insert(value);
        }
    }
    vars
}
