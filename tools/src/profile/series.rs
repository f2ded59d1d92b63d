//! A bounded timeline that keeps a long run's shape and its peaks.
//!
//! Points are appended in time order. When the timeline is full, each pair
//! of neighbours merges into one (the later time, each value's maximum), and
//! from then on that many incoming points fold into one before they are
//! kept. A run of any length thus ends with between half and all of
//! `capacity` points, evenly spaced, and no peak is lost to the thinning.

use super::report::Point;

/// Points kept at most per timeline.
pub const TIMELINE_POINTS: usize = 2_048;

/// See the module docs.
#[derive(Debug, Clone)]
pub struct Timeline<const N: usize> {
    points: Vec<Point<N>>,
    capacity: usize,
    /// Incoming points folded into each kept point.
    stride: u64,
    /// The point being folded, and how many it holds.
    open: Option<(Point<N>, u64)>,
}

impl<const N: usize> Timeline<N> {
    /// An empty timeline of at most `capacity` points (at least 2).
    pub fn new(capacity: usize) -> Self {
        Self {
            points: Vec::new(),
            capacity: capacity.max(2),
            stride: 1,
            open: None,
        }
    }

    /// Appends a point.
    pub fn push(&mut self, t: f64, values: [u64; N]) {
        let (point, n) = match self.open.take() {
            Some(((_, kept), n)) => ((t, max_of(kept, values)), n + 1),
            None => ((t, values), 1),
        };
        if n < self.stride {
            self.open = Some((point, n));
            return;
        }
        self.points.push(point);
        if self.points.len() >= self.capacity {
            self.points = self
                .points
                .chunks(2)
                .map(|pair| match pair {
                    [a, b] => (b.0, max_of(a.1, b.1)),
                    [a] => *a,
                    _ => unreachable!("chunks of two"),
                })
                .collect();
            self.stride *= 2;
        }
    }

    /// The points, the one being folded last.
    pub fn points(&self) -> Vec<Point<N>> {
        let mut out = self.points.clone();
        out.extend(self.open.map(|(p, _)| p));
        out
    }
}

fn max_of<const N: usize>(a: [u64; N], b: [u64; N]) -> [u64; N] {
    std::array::from_fn(|i| a[i].max(b[i]))
}

/// Peak and mean of a quantity.
#[derive(Debug, Clone, Copy, Default)]
pub struct PeakMean {
    peak: u64,
    sum: f64,
    n: u64,
}

impl PeakMean {
    /// Adds a value.
    pub fn add(&mut self, v: u64) {
        self.peak = self.peak.max(v);
        self.sum += v as f64;
        self.n += 1;
    }

    /// The highest value, if any.
    pub fn peak(&self) -> Option<u64> {
        (self.n > 0).then_some(self.peak)
    }

    /// The mean, if any.
    pub fn mean(&self) -> Option<u64> {
        (self.n > 0).then(|| (self.sum / self.n as f64) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_run_is_thinned_evenly_and_keeps_every_peak() {
        let mut tl = Timeline::<1>::new(8);
        for i in 0..1_000u64 {
            let v = if i == 777 { 9_999 } else { i % 10 };
            tl.push(i as f64, [v]);
        }
        let pts = tl.points();
        assert!((4..=8).contains(&pts.len()), "{} points", pts.len());
        assert!(pts.iter().any(|p| p.1[0] == 9_999), "the spike survives");
        assert!(pts.windows(2).all(|w| w[0].0 < w[1].0), "in time order");
        assert_eq!(pts.last().unwrap().0, 999.0, "ends at the newest point");
    }

    #[test]
    fn a_short_run_keeps_every_point() {
        let mut tl = Timeline::<2>::new(8);
        for i in 0..5u64 {
            tl.push(i as f64, [i, 2 * i]);
        }
        assert_eq!(
            tl.points(),
            (0..5u64)
                .map(|i| (i as f64, [i, 2 * i]))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn peak_and_mean_need_a_value() {
        let mut pm = PeakMean::default();
        assert_eq!((pm.peak(), pm.mean()), (None, None));
        pm.add(2);
        pm.add(6);
        assert_eq!((pm.peak(), pm.mean()), (Some(6), Some(4)));
    }
}
