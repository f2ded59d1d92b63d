//! Small robust statistics shared by the detectors: median, MAD and the normal
//! distribution's tail, all on caller-provided scratch space so the hot path
//! does not allocate.

/// Working space that is not part of a detector's state: its holders keep
/// it as a [`NotState`](crate::not_state::NotState), so snapshots and state
/// comparisons ignore it.
pub type Scratch = Vec<f64>;

/// `x` as an integer in `f64::total_cmp`'s order: sorting or selecting
/// among these compares integers, not floats converted twice per
/// comparison, and picks the very same values.
pub(super) fn order_key(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ ((((bits >> 63) as u64) >> 1) as i64)
}

/// The `f64` whose [`order_key`] is `key`.
pub(super) fn from_order_key(key: i64) -> f64 {
    f64::from_bits((key ^ ((((key >> 63) as u64) >> 1) as i64)) as u64)
}

/// Values [`median_in_place`] sorts on the stack, as integers.
const SMALL: usize = 32;

/// Median of `values` (reordered in place); `None` when empty.
pub fn median_in_place(values: &mut [f64]) -> Option<f64> {
    let n = values.len();
    if n == 0 {
        return None;
    }
    // The detectors' medians are mostly of a few ranks or recent steps.
    if n <= SMALL && values.iter().all(|v| v.is_finite()) {
        return Some(small_median(values));
    }
    let mid = n / 2;
    let (_, upper, _) = values.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *upper;
    if n % 2 == 1 {
        return Some(upper);
    }
    let lower = values[..mid]
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    Some((lower + upper) / 2.0)
}

/// The median of at most [`SMALL`] finite values, the very value the
/// selection below gives: sorted as integers on the stack (the largest of
/// the lower half in `f64::max`'s sense and in `total_cmp`'s differ only
/// between -0 and +0, whose mean with the upper middle is the same).
fn small_median(values: &[f64]) -> f64 {
    let n = values.len();
    let mut keys = [0i64; SMALL];
    let keys = &mut keys[..n];
    for (k, &v) in keys.iter_mut().zip(values) {
        *k = order_key(v);
    }
    keys.sort_unstable();
    let upper = from_order_key(keys[n / 2]);
    if n % 2 == 1 {
        upper
    } else {
        (from_order_key(keys[n / 2 - 1]) + upper) / 2.0
    }
}

/// Median of an iterator, using `scratch` as working space.
pub fn median_of(values: impl IntoIterator<Item = f64>, scratch: &mut Vec<f64>) -> Option<f64> {
    scratch.clear();
    scratch.extend(values);
    median_in_place(scratch)
}

/// Median absolute deviation around `center`, scaled by 1.4826 so that it
/// estimates the standard deviation of normal data.
pub fn scaled_mad(
    values: impl IntoIterator<Item = f64>,
    center: f64,
    scratch: &mut Vec<f64>,
) -> Option<f64> {
    median_of(values.into_iter().map(|v| (v - center).abs()), scratch).map(|m| 1.4826 * m)
}

/// Upper tail of the standard normal distribution, P(Z > z).
///
/// Abramowitz & Stegun 7.1.26 for erfc, absolute error below 1.5e-7.
pub fn normal_upper_tail(z: f64) -> f64 {
    if z.is_nan() {
        return 1.0;
    }
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        erfc / 2.0
    } else {
        1.0 - erfc / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_lengths() {
        assert_eq!(median_in_place(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_in_place(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median_in_place(&mut []), None);
    }

    #[test]
    fn a_few_finite_values_have_the_median_the_selection_gives_to_the_bit() {
        let mut seed = 5u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        let pool = [
            0.0,
            -0.0,
            1.5,
            -1.5,
            2.0,
            1e-300,
            -7.25,
            3.0e12,
            f64::MIN_POSITIVE,
        ];
        for case in 0..20_000 {
            let n = 1 + case % SMALL;
            let values: Vec<f64> = (0..n)
                .map(|_| match next() % 3 {
                    0 => pool[(next() % pool.len() as u64) as usize],
                    _ => (next() as f64 - 2e9) / 1e3,
                })
                .collect();
            // The selection's answer, as before the integer sort.
            let mut selected = values.clone();
            let mid = n / 2;
            let (_, upper, _) = selected.select_nth_unstable_by(mid, f64::total_cmp);
            let upper = *upper;
            let expected = if n % 2 == 1 {
                upper
            } else {
                (selected[..mid]
                    .iter()
                    .copied()
                    .fold(f64::NEG_INFINITY, f64::max)
                    + upper)
                    / 2.0
            };
            let got = median_in_place(&mut values.clone()).unwrap();
            assert_eq!(got.to_bits(), expected.to_bits(), "{values:?}");
        }
    }

    #[test]
    fn mad_ignores_a_single_outlier() {
        let mut scratch = Vec::new();
        let values = [10.0, 10.5, 9.5, 10.0, 1000.0];
        let m = median_of(values, &mut scratch).unwrap();
        let mad = scaled_mad(values, m, &mut scratch).unwrap();
        assert_eq!(m, 10.0);
        assert!(mad < 1.0, "{mad}");
    }

    #[test]
    fn normal_tail_matches_known_quantiles() {
        assert!((normal_upper_tail(0.0) - 0.5).abs() < 1e-6);
        assert!((normal_upper_tail(1.959_964) - 0.025).abs() < 1e-5);
        assert!((normal_upper_tail(-1.644_854) - 0.95).abs() < 1e-5);
        assert!((normal_upper_tail(3.090_232) - 0.001).abs() < 1e-5);
    }
}
