use super::*;

fn set(job: Option<&str>, pairs: &[(&str, &str)]) -> SettingsChange {
    SettingsChange {
        job: job.map(str::to_owned),
        set: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..SettingsChange::default()
    }
}

#[test]
fn a_cluster_wide_value_applies_to_every_job_and_a_jobs_own_wins_for_it() {
    let mut s = Settings::new(EngineConfig::default());
    let default_ms = EngineConfig::default().straggler.min_loss_ms;
    s.apply(&set(None, &[("straggler.min_loss_ms", "7")]))
        .unwrap();
    s.apply(&set(Some("noisy"), &[("straggler.min_loss_ms", "50")]))
        .unwrap();
    assert_eq!(s.effective().straggler.min_loss_ms, 7.0);
    assert_eq!(s.for_job("other").straggler.min_loss_ms, 7.0);
    assert_eq!(s.for_job("noisy").straggler.min_loss_ms, 50.0);
    assert_eq!(s.base().straggler.min_loss_ms, default_ms);

    let reset = SettingsChange {
        job: Some("noisy".into()),
        reset: vec!["straggler.min_loss_ms".into()],
        ..SettingsChange::default()
    };
    s.apply(&reset).unwrap();
    assert_eq!(s.for_job("noisy").straggler.min_loss_ms, 7.0);
    assert!(
        s.job_overrides().is_empty(),
        "a job with no override left is dropped"
    );
    let all = SettingsChange {
        reset_all: true,
        ..SettingsChange::default()
    };
    s.apply(&all).unwrap();
    assert_eq!(s.effective().straggler.min_loss_ms, default_ms);
}

#[test]
fn a_bad_change_is_refused_whole_naming_the_key() {
    let mut s = Settings::new(EngineConfig::default());
    let before = s.clone();
    let bad = set(
        None,
        &[("straggler.min_loss_ms", "5"), ("straggler.h_sigma", "0.5")],
    );
    let err = s.apply(&bad).unwrap_err().to_string();
    assert!(
        err.contains("straggler.h_sigma") && err.contains("from 1 to 100"),
        "{err}"
    );
    assert_eq!(s, before, "nothing of a refused change applies");

    let err = s
        .apply(&set(None, &[("max_jobs", "1")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no live setting \"max_jobs\""), "{err}");
    let err = s
        .apply(&set(Some("j"), &[("forecast.horizon_s", "600")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cluster-wide only"), "{err}");
    let err = s
        .apply(&set(None, &[("memory_levels.warning_pct", "99")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("memory_levels"), "{err}");
    assert_eq!(s, before);
}

#[test]
fn jobs_with_settings_of_their_own_are_bounded() {
    let mut s = Settings::new(EngineConfig::default());
    for i in 0..MAX_JOBS_WITH_SETTINGS {
        s.apply(&set(Some(&format!("j{i}")), &[("straggler.h_sigma", "9")]))
            .unwrap();
    }
    let err = s
        .apply(&set(Some("one-more"), &[("straggler.h_sigma", "9")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("256 jobs already"), "{err}");
    s.apply(&set(Some("j0"), &[("straggler.h_sigma", "8")]))
        .expect("a job that has settings may change them");
}

#[test]
fn overrides_survive_the_snapshot_encoding_and_none_leaves_it_as_before() {
    #[derive(Serialize, Deserialize)]
    struct Holder(#[serde(with = "as_toml")] Settings);
    let plain = Settings::new(EngineConfig::default());
    let bytes = postcard::to_allocvec(&Holder(plain.clone())).unwrap();
    assert_eq!(
        bytes,
        postcard::to_allocvec(&"").unwrap(),
        "defaults take no bytes"
    );

    let mut s = plain;
    s.apply(&set(
        None,
        &[
            ("forecast.horizon_s", "1200"),
            ("notify.min_severity", "high"),
        ],
    ))
    .unwrap();
    s.apply(&set(Some("a b"), &[("straggler.min_loss_frac", "0.2")]))
        .unwrap();
    let bytes = postcard::to_allocvec(&Holder(s.clone())).unwrap();
    let back: Holder = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(back.0, s);
    assert_eq!(back.0.for_job("a b").straggler.min_loss_frac, 0.2);
    assert_eq!(back.0.notify().min_severity, Some(Severity::High));
}

#[test]
fn values_show_what_applies_where() {
    let mut s = Settings::new(EngineConfig::default());
    let key = keys::key("straggler.min_loss_ms").unwrap();
    let default_ms = EngineConfig::default().straggler.min_loss_ms;
    assert_eq!(s.value(key, None), Some(Value::Number(default_ms)));
    s.apply(&set(Some("j"), &[("straggler.min_loss_ms", "12")]))
        .unwrap();
    assert_eq!(s.value(key, Some("j")), Some(Value::Number(12.0)));
    assert_eq!(s.value(key, None), Some(Value::Number(default_ms)));
    let sev = keys::key("notify.min_severity").unwrap();
    assert_eq!(
        s.value(sev, None),
        None,
        "the notifier's own configuration applies"
    );
}
