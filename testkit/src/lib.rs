//! Helpers shared by the tests and benches of gpumon's crates. Nothing
//! here is part of gpumon itself: only `[dev-dependencies]` name this
//! crate (never `[dependencies]`), and it is never published.
//!
//! - [`fuzz`]: the fuzz targets' seeded PRNG, mutator and case loop, and
//!   [`fuzz::messages`], valid agent messages to mutate;
//! - [`fleet`]: a synthetic fleet filled through `Replicated::apply`, for
//!   memory tests and benches of the replicated state;
//! - [`chromium`]: headless Chromium's flags and a reader of the DOM it
//!   serializes (std only, so the `gpumon` command's own unit tests can use
//!   it).
//!
//! Helpers that start the `gpumon` binary (they need
//! `env!("CARGO_BIN_EXE_gpumon")`) stay in the top-level `tests/support/`.
//! A crate's unit tests (`#[cfg(test)]` inside its `src/`) use this crate
//! only where it does not hand them the crate's own types: this crate
//! depends on the normal build of `gpumon-core` and `gpumon-proto`, a second
//! copy beside the one under test. See docs/testing.md.

pub mod chromium;
pub mod fleet;
pub mod fuzz;
