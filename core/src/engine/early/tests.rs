use super::*;

const GIB: f64 = (1u64 << 30) as f64;
const CAPACITY: f64 = 40.0 * GIB;

/// Feeds one sample a second of `used(t)` from t = 5 s (the job's start) to
/// `until`; returns the first second a warning came out, and its forecast.
fn first_warning(used: impl Fn(f64) -> f64, until: f64) -> Option<(f64, OomForecast)> {
    let mut w = EarlyWatch::default();
    let mut scratch = TrendScratch::default();
    let (p, fp) = (EarlyParams::default(), ForecastParams::default());
    (5..until as u32).map(f64::from).find_map(|t| {
        w.add((t, 5.0), used(t), Room::of(CAPACITY), &p, &fp, &mut scratch)
            .map(|f| (t, f))
    })
}

/// Loads 23 GiB in two seconds, fills its cache for `ramp_s` more at 0.8 GiB/s,
/// then grows `leak` GiB/s.
fn job(ramp_s: f64, leak: f64) -> impl Fn(f64) -> f64 {
    move |t| {
        let t = t - 5.0;
        let load = (t / 2.0).min(1.0) * 23.0;
        let ramp = t.clamp(0.0, ramp_s) * 0.8;
        (load + ramp + leak * (t - ramp_s).max(0.0)) * GIB
    }
}

#[test]
fn a_leak_from_the_first_steps_is_told_a_minute_before_the_oom() {
    let used = job(4.0, 0.125);
    // 23 + 3.2 GiB after the ramp, then 0.125 GiB/s: full near t = 115 s.
    let oom_t = (5..400)
        .map(f64::from)
        .find(|&t| used(t) >= CAPACITY)
        .unwrap();
    let (t, f) = first_warning(&used, oom_t).expect("warned before the OOM");
    assert!(oom_t - t >= 60.0, "warned at {t} s for an OOM at {oom_t} s");
    assert!((f.predicted_oom_t - oom_t).abs() < 10.0, "{f:?}");
    assert!((f.slope_bytes_per_s / GIB - 0.125).abs() < 0.01, "{f:?}");
}

#[test]
fn a_long_steady_warm_up_that_levels_off_is_no_leak() {
    // 0.8 GiB/s for 35 s up to 51 GiB... of a larger GPU, then flat.
    let used = |t: f64| (10.0 + (t - 5.0).clamp(0.0, 35.0) * 0.8) * GIB;
    assert!(first_warning(used, 180.0).is_none());
}

#[test]
fn a_ramp_that_slows_down_before_it_levels_off_is_no_leak() {
    // Fast, then a decelerating approach to its working level.
    let used = |t: f64| {
        let t = t - 5.0;
        (20.0 + 4.0 * (t / 3.0).min(1.0) + 12.0 * (1.0 - (-t / 15.0).exp())) * GIB
    };
    assert!(first_warning(used, 180.0).is_none());
}

#[test]
fn slow_growth_with_an_oom_far_ahead_is_left_to_the_regular_forecast() {
    assert!(first_warning(job(4.0, 0.02), 180.0).is_none());
}

#[test]
fn the_watch_ends_and_forgets_its_points() {
    let mut w = EarlyWatch::default();
    let mut scratch = TrendScratch::default();
    let (p, fp) = (EarlyParams::default(), ForecastParams::default());
    for t in 5..300 {
        w.add(
            (f64::from(t), 5.0),
            GIB,
            Room::of(CAPACITY),
            &p,
            &fp,
            &mut scratch,
        );
        assert!(w.points.len() <= MAX_POINTS);
    }
    assert!(w.points.is_empty());
}

#[test]
fn s_kept_up_as_the_window_slides_is_s_computed_whole() {
    let mut seed = 9u64;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut points: Vec<(f64, f64)> = Vec::new();
    let mut sliding = SlidingS::default();
    let mut slid = 0;
    for t in 0..3000u64 {
        // Values with ties now and then, as a staircase of cached segments.
        points.push((t as f64, (next(6) * 1000) as f64 + (t / 50) as f64));
        // Mostly the last 20 points; at times a jump, a shrink or a gap.
        let len = match next(40) {
            0 => 3 + next(30) as usize,
            1 => 0,
            _ => 20,
        };
        let start = points.len().saturating_sub(len);
        let window = &points[start..];
        let before = sliding.0.as_ref().map(|(w, s)| slide(w, *s, window));
        slid += usize::from(before.flatten().is_some());
        assert_eq!(sliding.of(window), mann_kendall_s(window), "t={t}");
        if next(97) == 0 {
            // A point of the remembered window changed: computed whole.
            if let Some((w, _)) = sliding.0.as_mut() {
                if let Some(p) = w.last_mut() {
                    p.1 += 1.0;
                }
            }
        }
    }
    assert!(slid > 2000, "the window slid {slid} times");
}
