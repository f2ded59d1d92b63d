//! How a command fails, and the exit code each failure maps to: 2 for bad
//! usage or configuration, 1 for a failure at run time, and the code of the
//! command `gpumon run` ran. Every command returns [`Failure`]; `main`
//! prints it and exits.

/// An error with the exit code it maps to.
#[derive(Debug)]
pub enum Failure {
    /// Bad usage or configuration: exit 2.
    Usage(anyhow::Error),
    /// Runtime failure: exit 1.
    Runtime(anyhow::Error),
    /// A command `gpumon run` ran failed: exit with its code, say why.
    Exit(u8, String),
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Runtime(e.into())
    }
}

/// Shorthand for a usage error.
pub fn usage(msg: impl std::fmt::Display) -> Failure {
    Failure::Usage(anyhow::anyhow!("{msg}"))
}
