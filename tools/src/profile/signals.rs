//! Stopping the command when gpumon is asked to stop.
//!
//! Ctrl-C on a terminal reaches the whole foreground process group, so the
//! command has its own SIGINT already: gpumon gives it a moment to end by
//! itself, and only then passes SIGINT on (a `kill -INT` sent to gpumon
//! alone). SIGINT rather than SIGTERM: Python turns it into
//! KeyboardInterrupt and runs its exit handlers, so the hook sends what it
//! holds. SIGTERM to gpumon is passed on at once. A command still running
//! [`GRACE`] later is killed.

use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

/// Time a command gets to end after a signal, before the next step.
pub const GRACE: Duration = Duration::from_secs(15);
/// Time a command gets to end on its own after Ctrl-C.
pub const OWN_CTRL_C: Duration = Duration::from_secs(1);

/// A signal gpumon received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

/// Listeners for SIGINT and SIGTERM, made once for the whole run (a signal
/// that arrives while no listener exists is lost).
#[derive(Debug)]
pub struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Starts listening.
    pub(crate) fn new() -> Self {
        Self {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    /// The next signal.
    pub async fn next(&mut self) -> Stop {
        let int = async {
            match self.int.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        let term = async {
            match self.term.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = int => Stop::Interrupt,
            _ = term => Stop::Terminate,
        }
    }
}

/// What to do to the command next, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Send SIGINT.
    Interrupt,
    /// Send SIGTERM.
    Terminate,
    /// Send SIGKILL.
    Kill,
}

/// The first step after gpumon received `stop`: what to send now (if
/// anything), then what to send after how long.
pub fn first_step(stop: Stop) -> (Option<&'static str>, Next, Duration) {
    match stop {
        Stop::Interrupt => (None, Next::Interrupt, OWN_CTRL_C),
        Stop::Terminate => (Some("TERM"), Next::Kill, GRACE),
    }
}

/// The step after `next` was due: the signal to send, then what follows.
pub fn after(next: Next) -> (&'static str, Option<(Next, Duration)>) {
    match next {
        Next::Interrupt => ("INT", Some((Next::Terminate, GRACE))),
        Next::Terminate => ("TERM", Some((Next::Kill, GRACE))),
        Next::Kill => ("KILL", None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_c_waits_for_the_command_then_interrupts_terminates_and_kills() {
        assert_eq!(
            first_step(Stop::Interrupt),
            (None, Next::Interrupt, OWN_CTRL_C)
        );
        assert_eq!(
            after(Next::Interrupt),
            ("INT", Some((Next::Terminate, GRACE)))
        );
        assert_eq!(after(Next::Terminate), ("TERM", Some((Next::Kill, GRACE))));
        assert_eq!(after(Next::Kill), ("KILL", None));
        assert_eq!(
            first_step(Stop::Terminate),
            (Some("TERM"), Next::Kill, GRACE)
        );
    }
}
