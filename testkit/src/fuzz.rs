//! The shared kit of gpumon's fuzz targets: a seeded PRNG, a mutator of
//! valid inputs and a bounded case loop. Stable Rust only (CI has no
//! nightly, so no libFuzzer): every target is an ordinary `#[test]` that
//! runs a fixed number of deterministic cases. Each crate's fuzz test
//! names it with `use gpumon_testkit::fuzz as kit;`.
//!
//! - `GPUMON_FUZZ_SCALE=K` runs K times each target's default cases (e.g.
//!   20 for a longer run by hand); `GPUMON_FUZZ_CASES=N` runs exactly N;
//! - `GPUMON_FUZZ_SEED=S` starts from another seed (default fixed, so CI is
//!   deterministic). A case that panics is named with its seed and index.
//!
//! See docs/testing.md.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

pub mod messages;

/// The seed of every target unless `GPUMON_FUZZ_SEED` says otherwise.
pub const DEFAULT_SEED: u64 = 0x6770_756d_6f6e_f022;

/// A small, fast PRNG (SplitMix64): deterministic from its seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.byte()).collect()
    }

    /// A number of bytes' worth of interest: small, on a power of two, or huge.
    pub fn interesting_u64(&mut self) -> u64 {
        let shift = self.below(64) as u32;
        match self.below(6) {
            0 => self.below(4) as u64,
            1 => u64::MAX - self.below(2) as u64,
            2 => 1u64 << shift,
            3 => (1u64 << shift).wrapping_sub(1),
            4 => u64::from(u32::MAX) + self.below(3) as u64 - 1,
            _ => self.next_u64(),
        }
    }
}

/// Tokens of JSON for [`mutate`]'s dictionary: structure, escapes that
/// decode to nothing valid, numbers beyond every type, bytes that are not
/// UTF-8. Targets add the names of their own format.
pub const JSON_TOKENS: &[&[u8]] = &[
    b"\"",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"\\uDFFF",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b" ",
    b"\r",
    b"\t",
    b"null",
    b"true",
    b"NaN",
    b"Infinity",
    b"-1",
    b"-0",
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"4294967296",
    b"0.1e1",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\x00",
];

/// [`JSON_TOKENS`] and `more`.
pub fn json_dict(more: &[&'static [u8]]) -> Vec<&'static [u8]> {
    JSON_TOKENS.iter().chain(more).copied().collect()
}

/// How many cases a target runs: `GPUMON_FUZZ_CASES`, else `default`
/// times `GPUMON_FUZZ_SCALE` (default 1).
pub fn cases(default: u64) -> u64 {
    env_u64("GPUMON_FUZZ_CASES")
        .unwrap_or_else(|| default.saturating_mul(env_u64("GPUMON_FUZZ_SCALE").unwrap_or(1)))
}

/// The seed: `GPUMON_FUZZ_SEED`, else [`DEFAULT_SEED`].
pub fn seed() -> u64 {
    env_u64("GPUMON_FUZZ_SEED").unwrap_or(DEFAULT_SEED)
}

fn env_u64(key: &str) -> Option<u64> {
    let value = std::env::var(key).ok()?;
    let value = value.trim();
    let parsed = match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => value.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{key}={value:?} is not a number")))
}

/// Runs `case` `cases(default_cases)` times, each with its own PRNG drawn
/// from the seed and the case index; a panicking case is named (target,
/// seed, index) before the panic goes on. Returns the count and the time.
pub fn run(target: &str, default_cases: u64, mut case: impl FnMut(&mut Rng)) -> (u64, Duration) {
    let seed = seed();
    let n = cases(default_cases);
    let started = Instant::now();
    for i in 0..n {
        let mut rng = Rng::new(seed ^ i.wrapping_mul(0xd134_2543_de82_ef95));
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| case(&mut rng))) {
            eprintln!(
                "fuzz target {target}: case {i} of seed {seed:#x} failed \
                 (rerun: GPUMON_FUZZ_SEED={seed:#x} GPUMON_FUZZ_CASES={})",
                i + 1
            );
            resume_unwind(panic);
        }
    }
    let took = started.elapsed();
    eprintln!("fuzz target {target}: {n} cases of seed {seed:#x} in {took:.2?}");
    (n, took)
}

/// An input for a binary decoder: one time in 16 up to `max_random`
/// random bytes, else one of `seeds` mutated (see [`mutate`]).
pub fn binary_input(rng: &mut Rng, seeds: &[Vec<u8>], max_random: usize) -> Vec<u8> {
    if rng.one_in(16) {
        let len = rng.below(max_random + 1);
        rng.bytes(len)
    } else {
        let seed = &seeds[rng.below(seeds.len())];
        mutate(rng, seed, seeds, &[], &[])
    }
}

/// Damages `input` with one to four random mutations: bit flips, byte
/// overwrites (with extremes), truncation, insertion (random bytes, a
/// dictionary token, or a varint claiming a huge length), deletion,
/// duplication, and splices from `corpus`. `dict` holds tokens of the
/// format (JSON values, keys); `keep_out` bytes (e.g. `\n` for one-line
/// formats) are never introduced.
pub fn mutate(
    rng: &mut Rng,
    input: &[u8],
    corpus: &[Vec<u8>],
    dict: &[&[u8]],
    keep_out: &[u8],
) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        mutate_once(rng, &mut out, corpus, dict);
    }
    if !keep_out.is_empty() {
        for b in &mut out {
            if keep_out.contains(b) {
                *b = b' ';
            }
        }
    }
    out
}

fn mutate_once(rng: &mut Rng, out: &mut Vec<u8>, corpus: &[Vec<u8>], dict: &[&[u8]]) {
    let len = out.len();
    let at = rng.below(len + 1);
    match rng.below(11) {
        0 if len > 0 => out[at.min(len - 1)] ^= 1 << rng.below(8),
        1 if len > 0 => out[at.min(len - 1)] = rng.byte(),
        2 if len > 0 => out[at.min(len - 1)] = *rng.pick(&[0x00, 0x01, 0x7f, 0x80, 0xff]),
        3 => out.truncate(at),
        4 => {
            let n = 1 + rng.below(8);
            let extra = rng.bytes(n);
            out.splice(at..at, extra);
        }
        5 if !dict.is_empty() => {
            let token = rng.pick(dict).to_vec();
            out.splice(at..at, token);
        }
        6 => {
            let varint = varint(rng.interesting_u64());
            out.splice(at..at, varint);
        }
        7 if len > 0 => {
            let end = (at + 1 + rng.below(16)).min(len);
            out.drain(at.min(len - 1)..end);
        }
        8 if len > 0 => {
            let start = at.min(len - 1);
            let end = (start + 1 + rng.below(32)).min(len);
            let copy = out[start..end].to_vec();
            let to = rng.below(len + 1);
            out.splice(to..to, copy);
        }
        9 if !corpus.is_empty() => {
            let other = rng.pick(corpus);
            let from = rng.below(other.len());
            let end = (from + 1 + rng.below(64)).min(other.len());
            let keep = rng.below(len + 1);
            out.truncate(keep);
            out.extend_from_slice(&other[from..end]);
        }
        _ => {
            // A varint length field blown up in place: overwrite, not insert.
            let varint = varint(rng.interesting_u64());
            let end = (at + varint.len()).min(len);
            out.splice(at..end, varint);
        }
    }
}

/// `v` as a LEB128 varint, as postcard writes lengths and integers.
pub fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(10);
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// The process's peak virtual memory, bytes (`VmPeak`), where `/proc`
/// tells it: a decoder that reserves memory for a length it was only
/// told about shows here even if it never touches the pages.
pub fn vm_peak_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmPeak:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}
