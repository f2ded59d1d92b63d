//! Envelope tracking: folds a series' samples into fixed windows and keeps
//! each window's peak and trough.
//!
//! With PyTorch's caching allocator, NVML's `used` is a staircase of reserved
//! segments and the real danger is the peak of each training step, so the
//! detectors forecast the *peaks* and judge leaks by the *troughs*; raw
//! samples are never fitted. Windows are aligned to multiples of their width
//! in trace time, so live and replay cut the same windows. A sample a little
//! older than the open window (clock skew between nodes) is folded into the
//! open window and counted, never dropped.

use serde::{Deserialize, Serialize};

/// One closed envelope window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EnvelopePoint {
    /// Middle of the window, seconds.
    pub t: f64,
    /// Highest value seen in the window.
    pub peak: f64,
    /// Lowest value seen in the window.
    pub trough: f64,
    /// The newest value of the window.
    pub last: f64,
    /// Samples folded in.
    pub samples: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct OpenWindow {
    start: f64,
    peak: f64,
    trough: f64,
    last: f64,
    last_t: f64,
    samples: u32,
}

/// Folds samples into windows of `width_s` seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    width_s: f64,
    open: Option<OpenWindow>,
    late_samples: u64,
}

impl Envelope {
    /// An envelope with windows of `width_s` seconds (at least 1 ms).
    pub fn new(width_s: f64) -> Self {
        Self {
            width_s: width_s.max(0.001),
            open: None,
            late_samples: 0,
        }
    }

    /// Adds a sample summarised by its low, high and last value (all three
    /// equal for a raw sample; an agent's window carries min, max and last).
    /// Returns the window this sample closed, if any.
    pub fn add(&mut self, t: f64, low: f64, high: f64, last: f64) -> Option<EnvelopePoint> {
        let start = (t / self.width_s).floor() * self.width_s;
        let fresh = OpenWindow {
            start,
            peak: high,
            trough: low,
            last,
            last_t: t,
            samples: 1,
        };
        let Some(open) = &mut self.open else {
            self.open = Some(fresh);
            return None;
        };
        if t < open.start + self.width_s {
            if t < open.start {
                self.late_samples += 1;
            }
            open.peak = open.peak.max(high);
            open.trough = open.trough.min(low);
            if t >= open.last_t {
                open.last = last;
                open.last_t = t;
            }
            open.samples += 1;
            return None;
        }
        let closed = self.close();
        self.open = Some(fresh);
        closed
    }

    /// Closes the open window, if any (at the end of a trace).
    pub fn close(&mut self) -> Option<EnvelopePoint> {
        self.open.take().map(|w| EnvelopePoint {
            t: w.start + self.width_s / 2.0,
            peak: w.peak,
            trough: w.trough,
            last: w.last,
            samples: w.samples,
        })
    }

    /// The newest value seen, if a window is open.
    pub fn last(&self) -> Option<f64> {
        self.open.map(|w| w.last)
    }

    /// Samples that arrived older than the open window (clock skew).
    pub fn late_samples(&self) -> u64 {
        self.late_samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_peak_and_trough_of_each_window() {
        let mut e = Envelope::new(10.0);
        let mut out = Vec::new();
        for (t, v) in [(0.0, 5.0), (3.0, 9.0), (6.0, 1.0), (9.0, 4.0), (11.0, 7.0)] {
            out.extend(e.add(t, v, v, v));
        }
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].t, out[0].peak, out[0].trough, out[0].last),
            (5.0, 9.0, 1.0, 4.0)
        );
        assert_eq!(out[0].samples, 4);
        let tail = e.close().unwrap();
        assert_eq!((tail.t, tail.peak), (15.0, 7.0));
    }

    #[test]
    fn a_late_sample_joins_the_open_window_and_is_counted() {
        let mut e = Envelope::new(10.0);
        e.add(12.0, 1.0, 1.0, 1.0);
        assert!(e.add(9.5, 50.0, 50.0, 50.0).is_none());
        assert_eq!(e.late_samples(), 1);
        let w = e.close().unwrap();
        assert_eq!((w.peak, w.last), (50.0, 1.0));
    }

    #[test]
    fn agent_windows_keep_their_own_extremes() {
        let mut e = Envelope::new(10.0);
        e.add(1.0, 2.0, 8.0, 3.0);
        e.add(4.0, 1.0, 6.0, 6.0);
        let w = e.close().unwrap();
        assert_eq!((w.peak, w.trough, w.last), (8.0, 1.0, 6.0));
    }

    #[test]
    fn a_gap_skips_empty_windows() {
        let mut e = Envelope::new(10.0);
        e.add(1.0, 1.0, 1.0, 1.0);
        let w = e.add(55.0, 2.0, 2.0, 2.0).unwrap();
        assert_eq!(w.t, 5.0);
        assert_eq!(e.close().unwrap().t, 55.0);
    }
}
