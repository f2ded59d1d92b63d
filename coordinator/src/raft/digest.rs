//! The state digest: a 64-bit FNV-1a hash of the replicated state's postcard
//! encoding, streamed (no copy of the state is made).
//!
//! The state holds only ordered maps and deterministic values, so two
//! replicas that applied the same entries encode byte-for-byte the same and
//! show the same digest; a replica rebuilt from a snapshot plus the log tail
//! must match its peers. It detects divergence, it is not a cryptographic hash.

use std::io::Write;

use serde::Serialize;

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over everything written to it.
#[derive(Debug)]
struct Fnv(u64);

impl Write for Fnv {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(PRIME);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// FNV-1a and the length of everything written to it: a snapshot's seal,
/// computed while its encoding streams by.
#[derive(Debug)]
pub struct SealWriter {
    fnv: Fnv,
    len: u64,
}

impl Default for SealWriter {
    fn default() -> Self {
        Self {
            fnv: Fnv(OFFSET),
            len: 0,
        }
    }
}

impl SealWriter {
    /// The checksum, as [`checksum`] gives it, and the length.
    pub fn finish(self) -> (String, u64) {
        (format!("{:016x}", self.fnv.0), self.len)
    }
}

impl Write for SealWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.len += buf.len() as u64;
        self.fnv.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The digest of `value`'s postcard encoding, as 16 hex digits.
pub fn digest<T: Serialize>(value: &T) -> Result<String, postcard::Error> {
    let mut fnv = Fnv(OFFSET);
    postcard::to_io(value, &mut fnv)?;
    Ok(format!("{:016x}", fnv.0))
}

/// FNV-1a of `bytes`, as 16 hex digits: the checksum sealed into a
/// snapshot's id (see `snapshot_file::seal_id`).
pub fn checksum(bytes: &[u8]) -> String {
    let mut fnv = Fnv(OFFSET);
    // Writing to an in-memory hash cannot fail.
    let _ = fnv.write_all(bytes);
    format!("{:016x}", fnv.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_agree_and_different_values_differ() {
        let a = digest(&(1u64, "rank-0", vec![1.5f64])).unwrap();
        assert_eq!(a, digest(&(1u64, "rank-0", vec![1.5f64])).unwrap());
        assert_ne!(a, digest(&(1u64, "rank-1", vec![1.5f64])).unwrap());
        assert_eq!(a.len(), 16);
    }

    #[test]
    fn matches_the_published_fnv1a_vector() {
        // FNV-1a 64 of "a" is af63dc4c8601ec8c.
        let mut f = Fnv(OFFSET);
        f.write_all(b"a").unwrap();
        assert_eq!(f.0, 0xaf63_dc4c_8601_ec8c);
    }
}
