//! Robust trend of a short series: Theil–Sen slope with its confidence
//! interval, and the Mann–Kendall test for a monotonic trend.
//!
//! Theil–Sen (Sen 1968) takes the median of the slopes of all pairs of points,
//! so up to ~29 % of the points can be spikes without moving it. The interval
//! comes from the same pairs: with `N` pairs and `C = z * sqrt(Var S)` where
//! `Var S` is Mann–Kendall's variance (tie-corrected), the bounds are the
//! `(N - C) / 2`-th and `(N + C) / 2 + 1`-th smallest pair slopes (Gilbert 1987,
//! §16.5). Mann–Kendall's `S` counts concordant minus discordant pairs; its
//! normal approximation gives the one-sided p-value of an *upward* trend.
//!
//! Cost: O(n²) for `n` points; the detectors keep `n` at a few dozen envelope
//! points and call this once per envelope window, not per sample.

use super::robust_stats::{from_order_key, median_in_place, normal_upper_tail, order_key};

/// A fitted robust trend; time in seconds, values in the series' unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// Theil–Sen slope, units per second.
    pub slope: f64,
    /// Lower bound of the slope's two-sided interval.
    pub slope_low: f64,
    /// Upper bound of the slope's two-sided interval.
    pub slope_high: f64,
    /// The fitted line's value at `t_ref`.
    pub level: f64,
    /// Time of the newest point, where `level` is taken.
    pub t_ref: f64,
    /// Mann–Kendall normal score (positive for an upward trend).
    pub mk_z: f64,
    /// One-sided p-value of an upward trend.
    pub p_up: f64,
    /// Largest residual above the fitted line: how far peaks rise above it.
    pub max_residual: f64,
    /// Points fitted.
    pub n: usize,
    /// Time span of the points, seconds.
    pub span_s: f64,
}

impl Trend {
    /// The fitted line's value at `t`.
    pub fn at(&self, t: f64) -> f64 {
        self.level + self.slope * (t - self.t_ref)
    }
}

/// Reusable buffers so that fitting does not allocate once warmed up.
#[derive(Debug, Default, Clone)]
pub struct TrendScratch {
    /// The pair slopes as [`order_key`]s.
    slopes: Vec<i64>,
    values: Vec<f64>,
}

/// Fits `points` (time, value) in time order. `z_interval` is the two-sided
/// normal quantile of the slope interval (1.96 for 95 %). `None` with fewer
/// than three points or no time spread.
pub fn fit(points: &[(f64, f64)], z_interval: f64, scratch: &mut TrendScratch) -> Option<Trend> {
    fit_rising(points, z_interval, f64::INFINITY, scratch)
}

/// [`fit`] for a caller that uses the trend only when it rises with a
/// one-sided p-value at most `p_max`: otherwise `None`, decided by
/// Mann–Kendall alone (the fit's own `p_up`, computed first) before the
/// pair slopes and their selection, most of a fit's cost.
pub fn fit_rising(
    points: &[(f64, f64)],
    z_interval: f64,
    p_max: f64,
    scratch: &mut TrendScratch,
) -> Option<Trend> {
    fit_rising_with_s(points, mann_kendall_s, z_interval, p_max, scratch)
}

/// [`fit_rising`] with Mann–Kendall's `S` of `points` from `s` (a caller
/// that slides a window can keep it up to date in O(n) instead of O(n²)).
pub fn fit_rising_with_s(
    points: &[(f64, f64)],
    s: impl FnOnce(&[(f64, f64)]) -> i64,
    z_interval: f64,
    p_max: f64,
    scratch: &mut TrendScratch,
) -> Option<Trend> {
    let n = points.len();
    if n < 3 {
        return None;
    }
    let span_s = points[n - 1].0 - points[0].0;
    if span_s <= 0.0 {
        return None;
    }
    let s = s(points);
    let (mk_z, sd) = mann_kendall_z(s, points, &mut scratch.values);
    let p_up = normal_upper_tail(mk_z);
    if p_up > p_max {
        return None;
    }
    pair_slopes(points, &mut scratch.slopes);
    if scratch.slopes.is_empty() {
        return None;
    }
    let pairs = scratch.slopes.len();

    let c = z_interval * sd;
    let lo_rank = ((pairs as f64 - c) / 2.0).floor().max(1.0) as usize;
    let hi_rank = ((pairs as f64 + c) / 2.0).ceil() as usize + 1;
    let [slope, slope_low, slope_high] = order_statistics(
        &mut scratch.slopes,
        lo_rank.min(pairs) - 1,
        hi_rank.clamp(1, pairs) - 1,
    );

    let t_ref = points[n - 1].0;
    scratch.values.clear();
    scratch
        .values
        .extend(points.iter().map(|&(t, y)| y - slope * (t - t_ref)));
    let level = median_in_place(&mut scratch.values)?;
    let max_residual = points
        .iter()
        .map(|&(t, y)| y - (level + slope * (t - t_ref)))
        .fold(0.0, f64::max);
    Some(Trend {
        slope,
        slope_low,
        slope_high,
        level,
        t_ref,
        mk_z,
        p_up,
        max_residual,
        n,
        span_s,
    })
}

/// Whether the Theil–Sen slope of `points` is surely at most zero: more
/// than half of the pair slopes are, so the median is too. One pass over
/// the pairs with no selection, for callers that use a trend only when its
/// slope is positive; `false` does not say that it is.
pub fn slope_surely_not_positive(points: &[(f64, f64)]) -> bool {
    let (mut pairs, mut not_positive) = (0usize, 0usize);
    for (i, &(ti, yi)) in points.iter().enumerate() {
        for &(tj, yj) in &points[i + 1..] {
            let dt = tj - ti;
            if dt > 0.0 {
                pairs += 1;
                // The very quotient the fit sorts, so that a slope that
                // rounds to zero counts as the fit would see it.
                not_positive += usize::from((yj - yi) / dt <= 0.0);
            }
        }
    }
    not_positive > pairs / 2
}

/// The Theil–Sen slope alone, the very value [`fit`] gives (`None` where
/// it gives none), for a caller that needs no interval, level or test: one
/// selection among the pair slopes instead of three, and no Mann–Kendall.
pub fn slope(points: &[(f64, f64)], scratch: &mut TrendScratch) -> Option<f64> {
    let n = points.len();
    if n < 3 || points[n - 1].0 - points[0].0 <= 0.0 {
        return None;
    }
    pair_slopes(points, &mut scratch.slopes);
    let keys = &mut scratch.slopes[..];
    if keys.is_empty() {
        return None;
    }
    let mid = keys.len() / 2;
    let odd = keys.len() % 2 == 1;
    let (left, upper, _) = keys.select_nth_unstable(mid);
    Some(median_of_selected(odd, left, *upper))
}

/// The slopes of every pair of points apart in time, as [`order_key`]s,
/// into `out`.
fn pair_slopes(points: &[(f64, f64)], out: &mut Vec<i64>) {
    out.clear();
    for (i, &(ti, yi)) in points.iter().enumerate() {
        for &(tj, yj) in &points[i + 1..] {
            let dt = tj - ti;
            if dt > 0.0 {
                out.push(order_key((yj - yi) / dt));
            }
        }
    }
}

/// The median once the middle key is selected: `upper`, or for an even
/// count its mean with the largest key below it (in `left`).
fn median_of_selected(odd: bool, left: &[i64], upper: i64) -> f64 {
    match (odd, left.iter().max()) {
        (false, Some(&lower_mid)) => (from_order_key(lower_mid) + from_order_key(upper)) / 2.0,
        _ => from_order_key(upper),
    }
}

/// Mann–Kendall's normal score of `S` (continuity-corrected) and the
/// standard deviation of `S`.
fn mann_kendall_z(s: i64, points: &[(f64, f64)], values: &mut Vec<f64>) -> (f64, f64) {
    let sd = mann_kendall_variance(points, values).sqrt();
    let z = if sd == 0.0 {
        0.0
    } else if s > 0 {
        (s - 1) as f64 / sd
    } else if s < 0 {
        (s + 1) as f64 / sd
    } else {
        0.0
    };
    (z, sd)
}

/// Mann–Kendall's `S`: concordant pairs less discordant ones.
pub fn mann_kendall_s(points: &[(f64, f64)]) -> i64 {
    let mut s: i64 = 0;
    for (i, &(_, yi)) in points.iter().enumerate() {
        s += pairs_sign(yi, &points[i + 1..]);
    }
    s
}

/// The signs of `y - yi` over `later` points, summed: `yi`'s part of `S`
/// (and, negated over earlier points, what a point added after them adds).
pub fn pairs_sign(yi: f64, later: &[(f64, f64)]) -> i64 {
    later.iter().map(|&(_, yj)| sign(yj - yi)).sum()
}

fn sign(d: f64) -> i64 {
    if d > 0.0 {
        1
    } else if d < 0.0 {
        -1
    } else {
        0
    }
}

/// The median and the `lo`-th and `hi`-th smallest values (0-based, `lo` at
/// or below the middle, `hi` at or above it), by selection instead of a full
/// sort: O(n) rather than O(n log n) on the pair slopes, the fit's main cost.
/// `keys` are [`order_key`]s; the statistics are the values they stand for.
fn order_statistics(keys: &mut [i64], lo: usize, hi: usize) -> [f64; 3] {
    let n = keys.len();
    let mid = n / 2;
    let (left, upper, right) = keys.select_nth_unstable(mid);
    let upper = *upper;
    let median = median_of_selected(n % 2 == 1, left, upper);
    let low = match lo.cmp(&mid) {
        std::cmp::Ordering::Less => *left.select_nth_unstable(lo).1,
        _ => upper,
    };
    let high = match hi.cmp(&mid) {
        std::cmp::Ordering::Greater => *right.select_nth_unstable(hi - mid - 1).1,
        _ => upper,
    };
    [median, from_order_key(low), from_order_key(high)]
}

/// Var(S) with the correction for tied values, which a staircase of cached
/// allocator segments produces in plenty.
fn mann_kendall_variance(points: &[(f64, f64)], values: &mut Vec<f64>) -> f64 {
    let n = points.len() as f64;
    let mut var = n * (n - 1.0) * (2.0 * n + 5.0);
    values.clear();
    values.extend(points.iter().map(|p| p.1));
    values.sort_unstable_by(f64::total_cmp);
    let mut i = 0;
    while i < values.len() {
        let mut j = i + 1;
        while j < values.len() && values[j] == values[i] {
            j += 1;
        }
        let t = (j - i) as f64;
        if t > 1.0 {
            var -= t * (t - 1.0) * (2.0 * t + 5.0);
        }
        i = j;
    }
    (var / 18.0).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(n: usize, f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        (0..n)
            .map(|i| (i as f64 * 10.0, f(i as f64 * 10.0)))
            .collect()
    }

    #[test]
    fn recovers_a_linear_slope_and_is_significant() {
        let pts = series(20, |t| 100.0 + 2.0 * t);
        let tr = fit(&pts, 1.96, &mut TrendScratch::default()).unwrap();
        assert!((tr.slope - 2.0).abs() < 1e-9);
        assert!(tr.p_up < 1e-6);
        assert!((tr.at(190.0) - 480.0).abs() < 1e-6);
    }

    #[test]
    fn a_flat_series_has_no_trend() {
        let pts = series(20, |_| 5.0);
        let tr = fit(&pts, 1.96, &mut TrendScratch::default()).unwrap();
        assert_eq!(tr.slope, 0.0);
        assert_eq!(tr.mk_z, 0.0);
        assert!(tr.p_up > 0.49);
    }

    #[test]
    fn spikes_do_not_move_the_slope() {
        let mut pts = series(21, |t| 50.0 + 0.5 * t);
        pts[5].1 += 1000.0;
        pts[15].1 += 1000.0;
        let tr = fit(&pts, 1.96, &mut TrendScratch::default()).unwrap();
        assert!((tr.slope - 0.5).abs() < 0.05, "{}", tr.slope);
        assert!(tr.max_residual > 900.0);
    }

    #[test]
    fn interval_brackets_the_slope_and_widens_with_noise() {
        let noisy = series(30, |t| t + 40.0 * ((t * 7.3).sin()));
        let clean = series(30, |t| t);
        let mut scratch = TrendScratch::default();
        let n = fit(&noisy, 1.96, &mut scratch).unwrap();
        let c = fit(&clean, 1.96, &mut scratch).unwrap();
        assert!(n.slope_low <= n.slope && n.slope <= n.slope_high);
        assert!(n.slope_high - n.slope_low > c.slope_high - c.slope_low);
    }

    #[test]
    fn a_falling_series_is_not_an_upward_trend() {
        let pts = series(15, |t| 1000.0 - t);
        let tr = fit(&pts, 1.96, &mut TrendScratch::default()).unwrap();
        assert!(tr.slope < 0.0);
        assert!(tr.p_up > 0.99);
    }

    #[test]
    fn selection_matches_a_full_sort() {
        let keys = |v: &[f64]| v.iter().copied().map(order_key).collect::<Vec<i64>>();
        let values: Vec<f64> = (0..101).map(|i| ((i * 37) % 101) as f64 - 50.5).collect();
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(
            order_statistics(&mut keys(&values), 10, 90),
            [sorted[50], sorted[10], sorted[90]]
        );
        let even: Vec<f64> = (0..10).rev().map(f64::from).collect();
        assert_eq!(order_statistics(&mut keys(&even), 0, 9), [4.5, 0.0, 9.0]);
    }

    #[test]
    fn order_keys_sort_as_total_cmp_and_give_the_values_back() {
        let mut values = vec![
            -f64::INFINITY,
            -1e300,
            -2.5,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            3.0,
            1e300,
            f64::INFINITY,
        ];
        values.reverse();
        let mut by_key = values.clone();
        by_key.sort_by_key(|&v| order_key(v));
        let mut by_total = values.clone();
        by_total.sort_by(f64::total_cmp);
        assert_eq!(
            by_key.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            by_total.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        for v in values {
            assert_eq!(from_order_key(order_key(v)).to_bits(), v.to_bits());
        }
    }

    #[test]
    fn fit_rising_is_the_fit_or_none_above_p_max() {
        let mut scratch = TrendScratch::default();
        for pts in [
            series(20, |t| 100.0 + 2.0 * t),
            series(15, |t| 1000.0 - t),
            series(30, |t| t + 40.0 * ((t * 7.3).sin())),
            series(12, |t| (t / 30.0).floor()),
            series(20, |_| 5.0),
        ] {
            let whole = fit(&pts, 1.96, &mut scratch).unwrap();
            for p_max in [0.0, 0.001, 0.5, 1.0] {
                let rising = fit_rising(&pts, 1.96, p_max, &mut scratch);
                assert_eq!(rising, (whole.p_up <= p_max).then_some(whole));
            }
        }
        assert!(fit_rising(&[(1.0, 1.0); 5], 1.96, 1.0, &mut scratch).is_none());
    }

    #[test]
    fn a_slope_surely_not_positive_is_never_positive_and_a_rise_is_never_ruled_out() {
        let mut scratch = TrendScratch::default();
        let mut seed = 7u64;
        let mut noise = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 40) as f64 / (1u64 << 24) as f64 - 0.5
        };
        let (mut ruled_out, mut kept) = (0, 0);
        for case in 0..2000 {
            let n = 3 + case % 28;
            let drift = [-1.0, -0.01, 0.0, 0.01, 1.0][case % 5];
            let mut pts: Vec<(f64, f64)> = (0..n)
                .map(|i| (i as f64 * 10.0, (drift * i as f64 + noise()).round()))
                .collect();
            if case % 7 == 0 {
                pts[n / 2].0 = pts[n / 2 - 1].0;
            }
            let surely = slope_surely_not_positive(&pts);
            let slope = fit(&pts, 1.96, &mut scratch).map(|t| t.slope);
            if surely {
                ruled_out += 1;
                assert!(slope.is_none_or(|s| s <= 0.0), "{pts:?}: {slope:?}");
            } else {
                kept += 1;
            }
        }
        assert!(ruled_out > 500 && kept > 300, "{ruled_out} {kept}");
        assert!(!slope_surely_not_positive(&series(20, |t| 100.0 + 2.0 * t)));
        assert!(slope_surely_not_positive(&series(20, |t| 100.0 - 2.0 * t)));
        assert!(slope_surely_not_positive(&series(20, |_| 5.0)));
    }

    #[test]
    fn the_slope_alone_is_the_fits_slope_to_the_bit() {
        let mut scratch = TrendScratch::default();
        let mut seed = 11u64;
        for case in 0..3000 {
            let n = case % 25;
            let mut pts: Vec<(f64, f64)> = (0..n)
                .map(|i| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let noise = (seed >> 44) as f64;
                    (
                        i as f64 * [1.0, 10.0, 0.5][case % 3],
                        noise + (case % 7) as f64 * i as f64,
                    )
                })
                .collect();
            if case % 11 == 0 && n > 1 {
                pts[1].0 = pts[0].0;
            }
            if case % 13 == 0 {
                pts.iter_mut().for_each(|p| p.0 = 4.0);
            }
            let whole = fit(&pts, 1.96, &mut scratch).map(|t| t.slope.to_bits());
            assert_eq!(
                slope(&pts, &mut scratch).map(f64::to_bits),
                whole,
                "{pts:?}"
            );
        }
    }

    #[test]
    fn too_few_points_fit_nothing() {
        assert!(fit(
            &[(0.0, 1.0), (1.0, 2.0)],
            1.96,
            &mut TrendScratch::default()
        )
        .is_none());
        assert!(fit(&[(1.0, 1.0); 5], 1.96, &mut TrendScratch::default()).is_none());
    }
}
