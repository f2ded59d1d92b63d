//! A cache kept beside the replicated state that is not part of it: working
//! space, a result remembered to skip a recomputation, a count derived from
//! a map. Two holders that agree on their state agree on everything, so
//! [`NotState`] compares equal to any other, and a replica restored from a
//! snapshot (which starts it empty) still equals the one that wrote it.
//!
//! It has no serde implementation on purpose: a field of this type must be
//! `#[serde(skip)]` (deserialized as `Default`), which keeps it out of every
//! snapshot's bytes, and forgetting the attribute does not compile.

use std::ops::{Deref, DerefMut};

/// `T`, held as a cache: `Default`, `Clone` and `Debug` as `T`'s, and equal
/// to any other `NotState<T>`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NotState<T>(pub T);

impl<T> PartialEq for NotState<T> {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl<T> Deref for NotState<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for NotState<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}
