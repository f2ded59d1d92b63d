use gpumon_proto::{CollectiveWait, StallRecord};

use super::verdict::{judge, threshold_s, RankView, Verdict, Why};

fn stall(
    rank: u32,
    waiting: Option<(u64, &str, u64)>,
    entered: u64,
    marker: Option<&str>,
) -> StallRecord {
    StallRecord {
        t_ms: 0,
        job: "j".into(),
        rank,
        step: 41,
        quiet_ms: 70_000,
        source: "flight_recorder".into(),
        waiting: waiting.map(|(seq, op, numel)| CollectiveWait {
            group: "0".into(),
            desc: "default_pg".into(),
            seq,
            op: op.into(),
            numel,
            waited_ms: 68_000,
            timeout_ms: Some(1_800_000),
        }),
        entered: vec![("0".into(), entered)],
        marker: marker.map(str::to_owned),
    }
}

fn views(t: f64, reports: &[Option<StallRecord>]) -> Vec<RankView<'_>> {
    reports
        .iter()
        .enumerate()
        .map(|(rank, r)| RankView {
            rank: rank as u32,
            ended: false,
            last_step: Some(41),
            report: r.as_ref().map(|r| (t - 2.0, r)),
            last_heard_t: Some(t - 70.0),
        })
        .collect()
}

#[test]
fn the_threshold_is_ten_median_steps_and_at_least_a_minute() {
    assert_eq!(threshold_s(None), 60.0);
    assert_eq!(threshold_s(Some(0.3)), 60.0);
    assert_eq!(threshold_s(Some(12.0)), 120.0);
}

#[test]
fn names_the_rank_that_has_not_entered_the_collective_the_others_wait_in() {
    let reports = [
        Some(stall(0, Some((10, "all_reduce", 72)), 10, None)),
        Some(stall(1, None, 9, None)),
        Some(stall(2, Some((10, "all_reduce", 72)), 10, None)),
        Some(stall(3, Some((10, "all_reduce", 72)), 10, None)),
    ];
    let t = 1000.0;
    let Verdict::Hung(h) = judge(t, t - 70.0, Some(0.3), &views(t, &reports)) else {
        panic!("a hang");
    };
    let w = h.waited.as_ref().unwrap();
    assert_eq!(
        (w.seq, w.op.as_str(), w.waiters.clone()),
        (10, "all_reduce", vec![0, 2, 3])
    );
    assert_eq!(h.culprits.len(), 1);
    assert_eq!(
        (h.culprits[0].rank, &h.culprits[0].why),
        (1, &Why::NotEntered(Some(9)))
    );
    assert!((w.timeout_left_s.unwrap() - 1732.0).abs() < 1e-6);
    let text = super::message::describe("j", Some(4), &h);
    assert!(text.contains("rank 1 has not entered it"), "{text}");
    assert!(
        text.contains("ranks 0, 2, 3 wait in all_reduce #10"),
        "{text}"
    );
    assert!(text.contains("29 min"), "{text}");
}

#[test]
fn a_rank_that_skipped_a_collective_shows_as_a_different_call_under_its_number() {
    let reports = [
        Some(stall(0, Some((10, "all_reduce", 1)), 10, None)),
        Some(stall(1, Some((10, "all_reduce", 1)), 10, None)),
        Some(stall(2, Some((10, "all_reduce", 72)), 10, None)),
    ];
    let t = 1000.0;
    let Verdict::Hung(h) = judge(t, t - 70.0, None, &views(t, &reports)) else {
        panic!("a hang");
    };
    assert_eq!(h.culprits[0].rank, 2);
    assert!(matches!(
        h.culprits[0].why,
        Why::DifferentCall { numel: 72, .. }
    ));
}

#[test]
fn a_silent_rank_is_named_when_the_others_wait() {
    let reports = [
        Some(stall(0, Some((10, "all_reduce", 72)), 10, None)),
        None,
        Some(stall(2, Some((10, "all_reduce", 72)), 10, None)),
    ];
    let t = 1000.0;
    let Verdict::Hung(h) = judge(t, t - 70.0, None, &views(t, &reports)) else {
        panic!("a hang");
    };
    assert_eq!(h.culprits.len(), 1);
    assert_eq!(h.culprits[0].rank, 1);
    assert!(matches!(h.culprits[0].why, Why::Silent(Some(s)) if (s - 70.0).abs() < 1e-9));
}

#[test]
fn pauses_are_not_hangs() {
    let t = 1000.0;
    let busy = [
        Some(stall(0, None, 10, None)),
        Some(stall(1, None, 10, None)),
    ];
    assert!(matches!(
        judge(t, t - 90.0, Some(0.3), &views(t, &busy)),
        Verdict::Paused(_)
    ));
    let marked = [
        Some(stall(0, None, 10, Some("eval"))),
        Some(stall(1, Some((11, "barrier", 1)), 11, None)),
    ];
    assert!(matches!(
        judge(t, t - 90.0, Some(0.3), &views(t, &marked)),
        Verdict::Paused(_)
    ));
    let waiting = [
        Some(stall(0, None, 10, None)),
        Some(stall(1, Some((11, "barrier", 1)), 11, None)),
    ];
    assert!(matches!(
        judge(t, t - 30.0, Some(0.3), &views(t, &waiting)),
        Verdict::Running
    ));
    assert!(matches!(
        judge(t, t - 90.0, Some(0.3), &views(t, &waiting)),
        Verdict::Hung(_)
    ));
}

#[test]
fn stall_reports_past_the_bound_are_counted_not_kept() {
    use super::HangWatch;
    use crate::actions::ActionBook;
    use crate::engine::{Engine, EngineConfig};
    use gpumon_proto::{HookRecord, StepRecord};

    const MAX: usize = 5;
    let ranks = MAX as u32 + 3;
    let mut engine = Engine::new(EngineConfig::default());
    let mut watch = HangWatch::with_max_reports(MAX);
    let book = ActionBook::default();
    let records: Vec<HookRecord> = (0..ranks)
        .map(|rank| {
            HookRecord::Step(StepRecord {
                t_ms: 1_000,
                job: "big".into(),
                rank,
                step: 1,
                duration_ms: 100.0,
                sections: Vec::new(),
                group: None,
                waits: Default::default(),
                collectives: Vec::new(),
            })
        })
        .collect();
    for r in &records {
        if let HookRecord::Step(s) = r {
            engine.observe_step(1.0, &s.job, s.rank, 1, 100.0, [], None);
        }
    }
    watch.observe(&mut engine, "n", &records, &book);
    let stalls: Vec<HookRecord> = (0..ranks)
        .map(|rank| {
            let mut s = stall(rank, None, 1, None);
            s.job = "big".into();
            s.t_ms = 20_000;
            HookRecord::Stall(s)
        })
        .collect();
    watch.observe(&mut engine, "n", &stalls, &book);
    assert_eq!(watch.clone().reports, MAX);
    // A step clears its rank's report and makes room.
    watch.observe(&mut engine, "n", &records[..1], &book);
    assert_eq!(watch.reports, MAX - 1);
    watch.observe(&mut engine, "n", &stalls[MAX + 2..], &book);
    assert_eq!(watch.reports, MAX);
    assert_eq!(watch.reports_refused(), 3);
    assert_eq!(watch.reports, MAX);
    assert_eq!(watch.reports_refused(), 3);
}

#[test]
fn a_rank_whose_process_exited_is_named_while_the_others_wait() {
    // What NCCL does when a rank is SIGKILLed: the others wait on (gloo
    // errors out instead); NVML saw the process leave its GPU.
    let reports = [
        Some(stall(0, Some((10, "all_reduce", 72)), 10, None)),
        None,
        Some(stall(2, Some((10, "all_reduce", 72)), 10, None)),
    ];
    let t = 1000.0;
    let mut v = views(t, &reports);
    v[1].ended = true;
    let Verdict::Hung(h) = judge(t, t - 70.0, None, &v) else {
        panic!("a hang");
    };
    assert_eq!(h.live, 2);
    assert_eq!(h.culprits.len(), 1);
    assert_eq!((h.culprits[0].rank, &h.culprits[0].why), (1, &Why::Exited));
    let text = super::message::describe("j", Some(3), &h);
    assert!(text.contains("rank 1's process has exited"), "{text}");
}

/// A watch over a 3-rank job "j" whose ranks stepped (step 41) at 1 s.
struct Job {
    engine: crate::engine::Engine,
    watch: super::HangWatch,
    book: crate::actions::ActionBook,
}

impl Job {
    fn new() -> Self {
        let mut job = Self {
            engine: crate::engine::Engine::new(crate::engine::EngineConfig::default()),
            watch: super::HangWatch::default(),
            book: crate::actions::ActionBook::default(),
        };
        for rank in 0..3 {
            job.step(rank, 1_000, 41);
        }
        job
    }

    fn step(&mut self, rank: u32, t_ms: u64, n: u64) {
        use gpumon_proto::{HookRecord, StepRecord};
        let t = t_ms as f64 / 1000.0;
        self.engine.observe_step(t, "j", rank, n, 100.0, [], None);
        let record = HookRecord::Step(StepRecord {
            t_ms,
            job: "j".into(),
            rank,
            step: n,
            duration_ms: 100.0,
            sections: Vec::new(),
            group: None,
            waits: Default::default(),
            collectives: Vec::new(),
        });
        self.observe(vec![record]);
    }

    fn observe(&mut self, records: Vec<gpumon_proto::HookRecord>) {
        let (engine, book) = (&mut self.engine, &self.book);
        self.watch.observe(engine, "n", &records, book);
    }

    /// The stall of `rank` at `t_ms`: waiting in all-reduce #10 of group 0,
    /// or (`waits` false) past it.
    fn stall(rank: u32, t_ms: u64, waits: bool) -> gpumon_proto::HookRecord {
        let mut s = if waits {
            stall(rank, Some((10, "all_reduce", 72)), 10, None)
        } else {
            stall(rank, None, 9, None)
        };
        s.t_ms = t_ms;
        gpumon_proto::HookRecord::Stall(s)
    }

    fn exit(rank: u32, t_ms: u64) -> gpumon_proto::HookRecord {
        let mut s = stall(rank, None, 10, None);
        s.source = super::PROCESS_EXIT.into();
        s.t_ms = t_ms;
        gpumon_proto::HookRecord::Stall(s)
    }

    /// The hang alerts, resolved or not.
    fn hangs(&self) -> Vec<crate::engine::Alert> {
        use crate::engine::alerts::AlertKind;
        self.engine
            .alerts()
            .filter(|a| a.kind == AlertKind::Hang)
            .cloned()
            .collect()
    }
}

#[test]
fn an_agents_word_that_a_process_exited_names_its_rank_and_a_new_step_takes_it_back() {
    let mut job = Job::new();
    job.observe(vec![
        Job::exit(1, 3_000),
        Job::stall(0, 75_000, true),
        Job::stall(2, 75_000, true),
    ]);
    let hangs = job.hangs();
    assert_eq!(hangs.len(), 1, "{hangs:?}");
    assert_eq!(hangs[0].rank, Some(1));
    assert!(
        hangs[0].message.contains("rank 1's process has exited"),
        "{}",
        hangs[0].message
    );
    // The rank's process restarted: its step resolves the hang, and the
    // exit no longer counts when the job stalls again.
    job.step(1, 80_000, 42);
    assert!(job.hangs().iter().all(|a| a.resolved_t.is_some()));
    job.observe(vec![
        Job::stall(0, 160_000, true),
        Job::stall(2, 160_000, true),
    ]);
    let hangs = job.hangs();
    let open: Vec<_> = hangs.iter().filter(|a| a.resolved_t.is_none()).collect();
    assert_eq!(open.len(), 1, "{hangs:?}");
    assert!(!open[0].message.contains("exited"), "{}", open[0].message);
}

/// Once a hang is named, ranks that exit are the job being torn down: the
/// alert keeps its diagnosis (rank 2 has not entered the collective) and
/// resolves when the last rank is gone.
#[test]
fn ranks_that_exit_after_a_hang_is_named_leave_its_diagnosis_alone() {
    let mut job = Job::new();
    job.observe(vec![
        Job::stall(0, 50_000, true),
        Job::stall(1, 50_000, true),
        Job::stall(2, 50_000, false),
    ]);
    assert!(job.hangs().is_empty(), "quiet for 49 s only");
    job.observe(vec![Job::stall(0, 75_000, true)]);
    let named = job.hangs();
    assert_eq!(named.len(), 1, "{named:?}");
    assert_eq!(named[0].rank, Some(2));
    assert!(
        named[0].message.contains("rank 2 has not entered it"),
        "{}",
        named[0].message
    );
    job.observe(vec![Job::exit(0, 90_000), Job::stall(1, 95_000, true)]);
    let torn = job.hangs();
    assert_eq!(torn.len(), 1);
    assert_eq!(torn[0].message, named[0].message, "the diagnosis stays");
    assert!(torn[0].resolved_t.is_none());
    job.observe(vec![Job::exit(1, 100_000), Job::exit(2, 100_000)]);
    assert!(job.hangs()[0].resolved_t.is_some(), "every rank is gone");
}
