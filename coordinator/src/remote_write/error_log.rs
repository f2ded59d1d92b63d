//! Which failures to log: each distinct one once, then again at most every
//! [`REPEAT_AFTER`] while it keeps happening, with how many times it was
//! passed over; at most [`MAX_REMEMBERED`] remembered (the one logged
//! longest ago is forgotten first), so a receiver that answers with ever
//! new messages cannot grow this or flood the log.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Time before a failure already logged is logged again.
pub const REPEAT_AFTER: Duration = Duration::from_secs(600);
/// Distinct failures remembered.
pub const MAX_REMEMBERED: usize = 64;
/// Longest part of a receiver's answer quoted, bytes.
pub const MAX_QUOTED: usize = 256;

/// Failures seen: when each was last logged and how often passed over since.
#[derive(Debug, Default)]
pub struct ErrorLog {
    seen: HashMap<String, (Instant, u64)>,
}

impl ErrorLog {
    /// `Some(times passed over since last logged)` when `what` is to be
    /// logged now.
    pub fn note(&mut self, what: &str, now: Instant) -> Option<u64> {
        if let Some((logged, skipped)) = self.seen.get_mut(what) {
            if now.duration_since(*logged) < REPEAT_AFTER {
                *skipped += 1;
                return None;
            }
            let passed = std::mem::take(skipped);
            *logged = now;
            return Some(passed);
        }
        if self.seen.len() >= MAX_REMEMBERED {
            let oldest = self
                .seen
                .iter()
                .min_by_key(|(_, (logged, _))| *logged)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.seen.remove(&k);
            }
        }
        self.seen.insert(what.to_owned(), (now, 0));
        Some(0)
    }
}

/// The start of a receiver's answer, as text fit for a log line.
pub fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX_QUOTED)]);
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_once_then_again_after_a_while_with_a_count() {
        let mut log = ErrorLog::default();
        let t0 = Instant::now();
        assert_eq!(log.note("400: bad", t0), Some(0));
        assert_eq!(log.note("400: bad", t0 + Duration::from_secs(1)), None);
        assert_eq!(log.note("400: other", t0), Some(0));
        assert_eq!(log.note("400: bad", t0 + Duration::from_secs(2)), None);
        assert_eq!(log.note("400: bad", t0 + REPEAT_AFTER), Some(2));
    }

    #[test]
    fn remembers_a_bounded_number_forgetting_the_oldest() {
        let mut log = ErrorLog::default();
        let t0 = Instant::now();
        for i in 0..=MAX_REMEMBERED {
            let at = t0 + Duration::from_millis(i as u64);
            assert_eq!(log.note(&format!("e{i}"), at), Some(0));
        }
        assert_eq!(log.seen.len(), MAX_REMEMBERED);
        assert_eq!(
            log.note("e0", t0 + Duration::from_secs(1)),
            Some(0),
            "forgotten"
        );
        assert_eq!(log.note("e2", t0 + Duration::from_secs(1)), None, "kept");
    }

    #[test]
    fn quotes_are_bounded_and_on_one_line() {
        assert_eq!(quote(b"out of order\nsample\n"), "out of order sample");
        assert_eq!(quote(&[b'x'; 1000]).len(), MAX_QUOTED);
        assert_eq!(quote(&[0xff, b'a']), "\u{fffd}a");
    }
}
