//! How big a sweep may be: its parameters, their names and values, its
//! points and its `--env` flags. The grid and the plan enforce them; the
//! errors name them.

/// Parameters at most.
pub const MAX_PARAMS: usize = 4;
/// Points in the grid at most.
pub const MAX_POINTS: usize = 256;
/// Characters of a parameter's name at most.
pub const MAX_NAME_CHARS: usize = 64;
/// Characters of one value at most.
pub const MAX_VALUE_CHARS: usize = 256;
/// `--env` variables at most.
pub const MAX_ENV: usize = 32;
