use super::*;

/// How the wait for the slowest rank shows in the sections.
#[derive(Clone, Copy)]
enum Sync {
    /// DDP: the all-reduce overlaps `backward`, which absorbs the wait.
    Ddp,
    /// A collective section of its own after `backward`.
    Collective,
    /// Only `data` and `forward` are timed; the wait is in the rest.
    Untimed,
    /// No lockstep: each rank's step takes as long as its own work.
    Independent,
}

/// A job of `world` ranks for `steps` steps. `slow(rank, step)` scales the
/// rank's forward, `data(rank, step)` adds to its data section in ms,
/// `wide(step)` scales every rank's compute.
struct Job {
    world: u32,
    steps: u64,
    sync: Sync,
    slow: Box<dyn Fn(u32, u64) -> f64>,
    data: Box<dyn Fn(u32, u64) -> f64>,
    wide: Box<dyn Fn(u64) -> f64>,
    /// Whether the record of (rank, step) is lost on its way.
    lost: Box<dyn Fn(u32, u64) -> bool>,
}

impl Job {
    fn new(world: u32, steps: u64, sync: Sync) -> Self {
        Self {
            world,
            steps,
            sync,
            slow: Box::new(|_, _| 1.0),
            data: Box::new(|_, _| 0.0),
            wide: Box::new(|_| 1.0),
            lost: Box::new(|_, _| false),
        }
    }

    fn run(&self) -> Vec<StragglerEvent> {
        let mut tr = StragglerTracker::default();
        let p = StragglerParams::default();
        let mut out = Vec::new();
        for step in 0..self.steps {
            let own: Vec<(f64, f64, f64)> = (0..self.world)
                .map(|rank| {
                    let jitter = |salt: u64| {
                        1.0 + 0.01 * (((rank as u64 * 7 + step * 13 + salt) % 5) as f64 - 2.0)
                    };
                    let wide = (self.wide)(step);
                    let data = 20.0 * jitter(1) + (self.data)(rank, step);
                    let fwd = 300.0 * jitter(2) * (self.slow)(rank, step) * wide;
                    let bwd = 600.0 * jitter(3) * wide;
                    (data, fwd, bwd)
                })
                .collect();
            let slowest = own.iter().map(|(d, f, b)| d + f + b).fold(0.0, f64::max);
            let comm = 50.0;
            for (rank, &(data, fwd, bwd)) in own.iter().enumerate() {
                let rank = rank as u32;
                let mine = data + fwd + bwd;
                let t = step as f64 + 0.001 * rank as f64;
                let (duration, secs): (f64, Vec<(&str, f64)>) = match self.sync {
                    Sync::Ddp => {
                        let d = slowest + comm;
                        (
                            d,
                            vec![
                                ("data", data),
                                ("forward", fwd),
                                ("backward", d - data - fwd),
                            ],
                        )
                    }
                    Sync::Collective => {
                        let d = slowest + comm;
                        let secs = vec![
                            ("data", data),
                            ("forward", fwd),
                            ("backward", bwd),
                            ("allreduce", d - mine),
                        ];
                        (d, secs)
                    }
                    Sync::Untimed => (slowest + comm, vec![("data", data), ("forward", fwd)]),
                    Sync::Independent => (
                        mine,
                        vec![("data", data), ("forward", fwd), ("backward", bwd)],
                    ),
                };
                if !(self.lost)(rank, step) {
                    out.extend(tr.add_step(self.world, rank, 0, step, t, duration, secs, &p));
                }
            }
        }
        out
    }
}

fn raised(events: &[StragglerEvent]) -> Vec<(u32, &str)> {
    events
        .iter()
        .filter(|e| e.edge == Edge::Raised)
        .map(|e| (e.rank, e.section.as_str()))
        .collect()
}

#[test]
fn in_lockstep_names_the_slow_rank_and_section_however_the_wait_shows() {
    for sync in [
        Sync::Ddp,
        Sync::Collective,
        Sync::Untimed,
        Sync::Independent,
    ] {
        let mut job = Job::new(8, 60, sync);
        job.slow = Box::new(|r, s| if r == 5 && s >= 20 { 1.3 } else { 1.0 });
        let events = job.run();
        assert_eq!(raised(&events), vec![(5, "forward")]);
        let e = &events[0];
        assert!((e.section_slowdown() - 1.3).abs() < 0.03, "{e:?}");
        assert!(
            (e.section_ms - e.peer_section_ms - 90.0).abs() < 9.0,
            "{e:?}"
        );
        let gate = StragglerParams::default().min_duration_s;
        assert!(
            e.t >= 20.0 + gate && e.t <= 20.0 + gate + 3.0,
            "raised at step {}",
            e.t
        );
    }
}

#[test]
fn the_peers_wait_is_named_with_how_much_shorter_the_stragglers_is() {
    let mut job = Job::new(8, 60, Sync::Ddp);
    job.slow = Box::new(|r, s| if r == 5 && s >= 20 { 1.3 } else { 1.0 });
    let e = &job.run()[0];
    assert_eq!(e.wait_in, "backward");
    assert!((e.wait_deficit_ms - 90.0).abs() < 12.0, "{e:?}");
    let mut job = Job::new(8, 60, Sync::Collective);
    job.slow = Box::new(|r, s| if r == 5 && s >= 20 { 1.3 } else { 1.0 });
    assert_eq!(job.run()[0].wait_in, "allreduce");
    let mut job = Job::new(8, 60, Sync::Untimed);
    job.slow = Box::new(|r, s| if r == 5 && s >= 20 { 1.3 } else { 1.0 });
    assert_eq!(job.run()[0].wait_in, "the rest of the step");
}

#[test]
fn a_slow_data_loader_is_named_as_such() {
    let mut job = Job::new(16, 60, Sync::Ddp);
    job.data = Box::new(|r, s| if r == 11 && s >= 20 { 400.0 } else { 0.0 });
    let events = job.run();
    assert_eq!(raised(&events), vec![(11, "data")]);
    let gate = StragglerParams::default().min_duration_s;
    assert!(events[0].t <= 20.0 + gate + 2.0, "{:?}", events[0]);
}

#[test]
fn a_small_straggler_is_found_given_steps() {
    // 12 % on a forward of 300 ms: the job waits 36 ms of a ~1 s step.
    let mut job = Job::new(16, 80, Sync::Ddp);
    job.slow = Box::new(|r, s| if r == 3 && s >= 10 { 1.12 } else { 1.0 });
    assert_eq!(raised(&job.run()), vec![(3, "forward")]);
}

#[test]
fn thirty_two_ranks_with_lost_records_still_name_the_straggler() {
    for sync in [Sync::Ddp, Sync::Collective] {
        let mut job = Job::new(32, 80, sync);
        job.slow = Box::new(|r, s| if r == 17 && s >= 20 { 1.3 } else { 1.0 });
        // About one record in ten never arrives.
        job.lost = Box::new(|r, s| (u64::from(r) * 2_654_435_761 + s * 40_503) % 10 == 0);
        assert_eq!(raised(&job.run()), vec![(17, "forward")]);
    }
}

#[test]
fn a_job_wide_slowdown_is_no_straggler() {
    for sync in [Sync::Ddp, Sync::Collective, Sync::Untimed] {
        let mut job = Job::new(8, 80, sync);
        job.wide = Box::new(|s| if (30..50).contains(&s) { 1.6 } else { 1.0 });
        let events = job.run();
        assert!(events.is_empty(), "{events:?}");
    }
}

#[test]
fn isolated_slow_steps_are_ignored() {
    let mut job = Job::new(8, 80, Sync::Ddp);
    job.slow = Box::new(|r, s| if r == 2 && s % 10 == 0 { 3.0 } else { 1.0 });
    let events = job.run();
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn clears_when_the_rank_recovers() {
    let mut job = Job::new(4, 80, Sync::Ddp);
    job.slow = Box::new(|r, s| {
        if r == 1 && (10..40).contains(&s) {
            1.5
        } else {
            1.0
        }
    });
    let edges: Vec<_> = job
        .run()
        .iter()
        .filter(|e| e.edge != Edge::Steady)
        .map(|e| (e.rank, e.edge))
        .collect();
    assert_eq!(edges, vec![(1, Edge::Raised), (1, Edge::Cleared)]);
}

#[test]
fn a_firing_rank_is_named_by_the_section_that_costs_most_now() {
    // Rank 1 is slow in forward from step 10; from step 60 its forward is
    // back to normal and its data loader slow instead: the open episode
    // follows, without a second raise.
    let mut job = Job::new(8, 120, Sync::Ddp);
    job.slow = Box::new(|r, s| {
        if r == 1 && (10..60).contains(&s) {
            1.6
        } else {
            1.0
        }
    });
    job.data = Box::new(|r, s| if r == 1 && s >= 60 { 400.0 } else { 0.0 });
    let events = job.run();
    assert_eq!(raised(&events), vec![(1, "forward")]);
    let last = events.iter().rev().find(|e| e.rank == 1).unwrap();
    assert_eq!(last.edge, Edge::Steady, "still firing, explained again");
    assert_eq!(last.section, "data");
}

/// One rank's step record: 20 ms of data, `forward_ms`, 30 ms of backward,
/// in a step of about a second (the rest is the optimizer's, untimed).
fn record(
    tr: &mut StragglerTracker,
    world: u32,
    rank: u32,
    step: u64,
    forward_ms: f64,
) -> Vec<StragglerEvent> {
    let sections = [("data", 20.0), ("forward", forward_ms), ("backward", 30.0)];
    let p = StragglerParams::default();
    tr.add_step(
        world,
        rank,
        0,
        step,
        step as f64,
        1000.0 + forward_ms,
        sections,
        &p,
    )
}

#[test]
fn a_rank_that_reports_a_step_twice_is_one_row_and_its_later_record_wins() {
    let mut tr = StragglerTracker::default();
    record(&mut tr, 3, 0, 1, 90.0);
    record(&mut tr, 3, 0, 1, 10.0);
    record(&mut tr, 3, 1, 1, 10.0);
    // Two ranks of three: the step is still open, with one row per rank.
    let rows = &tr.pending[&1];
    assert_eq!(rows.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(rows[0].duration_ms, 1010.0, "the later record of rank 0");
    record(&mut tr, 3, 2, 1, 10.0);
    assert!(tr.pending.is_empty(), "scored once all three reported");
    assert_eq!(tr.scored_steps, 1);
}

#[test]
fn a_tracker_restored_from_a_snapshot_mid_step_goes_on_as_the_original() {
    let world = 64;
    let mut original = StragglerTracker::default();
    for step in 1..=40 {
        for rank in 0..world {
            let forward = if rank == 7 && step > 10 { 30.0 } else { 10.0 };
            record(&mut original, world, rank, step, forward);
        }
    }
    // Half of step 41 (and a repeated record) before the snapshot, the rest after.
    for rank in 0..world / 2 {
        record(&mut original, world, rank, 41, 10.0);
    }
    record(&mut original, world, 3, 41, 12.0);
    let bytes = postcard::to_allocvec(&original).unwrap();
    let mut restored: StragglerTracker = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(restored, original);
    let rest = std::iter::once(5).chain((world / 2..world).rev());
    for rank in rest {
        let a = record(&mut original, world, rank, 41, 10.0);
        let b = record(&mut restored, world, rank, 41, 10.0);
        assert_eq!(a, b, "rank {rank}");
    }
    assert!(original.pending.is_empty() && restored.pending.is_empty());
    assert_eq!(restored, original);
    assert_eq!(
        postcard::to_allocvec(&restored).unwrap(),
        postcard::to_allocvec(&original).unwrap()
    );
    assert!(original.is_straggling(7));
}

#[test]
fn a_rank_slow_for_less_than_the_gate_is_no_straggler() {
    let gate = StragglerParams::default().min_duration_s;
    // Steps of about a second: a burst of half the gate passes unnamed,
    // the same slowdown held for twice the gate is named.
    let slow_for = |steps: u64| {
        let mut job = Job::new(8, 80, Sync::Ddp);
        job.slow = Box::new(move |r, s| {
            if r == 2 && (20..20 + steps).contains(&s) {
                1.5
            } else {
                1.0
            }
        });
        job.run()
    };
    let events = slow_for((gate / 2.0) as u64);
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(raised(&slow_for((2.0 * gate) as u64)), vec![(2, "forward")]);
}

/// A job with no jitter at all, DDP-shaped: every step lasts `step_ms`,
/// `forward` is half of it, and `slow_rank`'s forward takes `extra_ms`
/// more. The raised alerts.
fn regular_job(step_ms: f64, extra_ms: f64, steps: u64) -> Vec<(u32, String)> {
    let (world, slow_rank) = (8, 3);
    let p = StragglerParams::default();
    let mut tr = StragglerTracker::default();
    let mut raised = Vec::new();
    for step in 0..steps {
        for rank in 0..world {
            let forward = step_ms / 2.0 + if rank == slow_rank { extra_ms } else { 0.0 };
            let sections = [("forward", forward), ("backward", step_ms - forward)];
            let t = step as f64 * step_ms / 1000.0;
            for e in tr.add_step(world, rank, 0, step, t, step_ms, sections, &p) {
                if e.edge == Edge::Raised {
                    raised.push((e.rank, e.section));
                }
            }
        }
    }
    raised
}

#[test]
fn a_loss_below_the_floor_is_no_straggler_however_regular_the_job() {
    let p = StragglerParams::default();
    assert_eq!((p.min_loss_frac, p.min_loss_ms), (0.01, 1.0));
    // Long enough for the sum to reach its threshold many times over.
    let steps = |step_ms: f64| (20.0 * p.min_duration_s * 1000.0 / step_ms) as u64;
    // 0.6 % of a 1 s step: under the 1 % floor.
    assert_eq!(regular_job(1000.0, 6.0, steps(1000.0)), vec![]);
    // 1.6 % of a 50 ms step is 0.8 ms: under the 1 ms floor.
    assert_eq!(regular_job(50.0, 0.8, steps(50.0)), vec![]);
    // Above both floors, the same jobs name the rank.
    let named = vec![(3, "forward".to_owned())];
    assert_eq!(regular_job(1000.0, 15.0, steps(1000.0)), named);
    assert_eq!(regular_job(50.0, 1.5, steps(50.0)), named);
}

#[test]
fn ranks_that_report_in_batches_of_many_short_steps_lose_no_step() {
    // Each rank's hook sends a second of 20 ms steps at once, rank after
    // rank: a step's last row comes 50 steps after its first.
    let (world, batch, steps) = (4u32, 50u64, 1000u64);
    let p = StragglerParams::default();
    let mut tr = StragglerTracker::default();
    let mut raised = Vec::new();
    for first in (0..steps).step_by(batch as usize) {
        for rank in 0..world {
            for step in first..first + batch {
                let forward = if rank == 1 && step >= 200 { 14.0 } else { 10.0 };
                let sections = [("forward", forward), ("backward", 20.0 - forward)];
                let t = step as f64 * 0.02;
                let events = tr.add_step(world, rank, 0, step, t, 20.0, sections, &p);
                raised.extend(
                    events
                        .into_iter()
                        .filter(|e| e.edge == Edge::Raised)
                        .map(|e| (e.rank, e.t)),
                );
            }
        }
    }
    assert_eq!(tr.dropped_steps(), 0);
    assert_eq!(tr.scored_steps, steps);
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert_eq!(raised[0].0, 1);
}

#[test]
fn a_large_job_keeps_fewer_steps_open() {
    // 32,768 ranks: two open steps (PENDING_ROWS rows), not 128.
    let world = 32_768u32;
    let p = StragglerParams::default();
    let mut tr = StragglerTracker::default();
    for step in 0..10u64 {
        tr.add_step(
            world,
            0,
            0,
            step,
            step as f64,
            1000.0,
            [("forward", 10.0)],
            &p,
        );
    }
    assert_eq!(tr.pending.len(), 2);
    assert!(tr.pending.values().map(Vec::len).sum::<usize>() <= PENDING_ROWS);
}

#[test]
fn a_two_rank_job_names_its_straggler_whose_excess_is_no_noise() {
    // With two ranks each is the other's reference: after the slowdown
    // half of all deviations are the straggler's excess and half its
    // peer's deficit. Taken as noise, they would hide it.
    let p = StragglerParams {
        min_ranks: 2,
        ..StragglerParams::default()
    };
    // Steps of 25 ms: the gate's 10 s are 400 steps, enough for the noise
    // estimate (512 steps of two ranks) to be mostly post-slowdown.
    let mut tr = StragglerTracker::default();
    let mut raised = Vec::new();
    for step in 0..2400u64 {
        let forward: Vec<f64> = (0..2u32)
            .map(|rank| {
                let slow = if rank == 1 && step >= 800 { 1.3 } else { 1.0 };
                8.0 * slow * (1.0 + 0.02 * jitter_of(rank, step))
            })
            .collect();
        let step_ms = forward.iter().cloned().fold(0.0, f64::max) + 17.0;
        for rank in 0..2u32 {
            let f = forward[rank as usize];
            let sections = [
                ("data", 1.0),
                ("forward", f),
                ("backward", step_ms - 1.0 - f),
            ];
            let t = step as f64 * 0.025;
            for e in tr.add_step(2, rank, 0, step, t, step_ms, sections, &p) {
                if e.edge == Edge::Raised {
                    raised.push((e.rank, e.section, e.t));
                }
            }
        }
    }
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert_eq!((raised[0].0, raised[0].1.as_str()), (1, "forward"));
    assert!(raised[0].2 <= 20.0 + p.min_duration_s + 5.0, "{raised:?}");
}

/// Deterministic noise in [-1, 1] per (rank, step).
fn jitter_of(rank: u32, step: u64) -> f64 {
    let mut x = (u64::from(rank) << 32 | step).wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((x ^ (x >> 31)) % 2001) as f64 / 1000.0 - 1.0
}

/// A pipeline of two stages of two data-parallel replicas each, one
/// microbatch per step (ranks 0 and 1 are stage 0, ranks 2 and 3 stage 1;
/// replica r is ranks r and r + 2). `work(rank, step)` scales a rank's
/// forward and backward. Each rank reports its stage's group when `groups`.
/// Returns the straggler events and the stage events.
fn pipeline(
    work: impl Fn(u32, u64) -> f64,
    groups: bool,
) -> (Vec<StragglerEvent>, Vec<stages::StageEvent>) {
    let mut tr = StragglerTracker::default();
    let p = StragglerParams::default();
    let (mut stragglers, mut stage_events) = (Vec::new(), Vec::new());
    for step in 0..90u64 {
        let own: Vec<(f64, f64)> = (0..4u32)
            .map(|rank| {
                let jitter = |salt: u64| {
                    1.0 + 0.01 * (((u64::from(rank) * 7 + step * 13 + salt) % 5) as f64 - 2.0)
                };
                let scale = work(rank, step);
                (100.0 * scale * jitter(1), 200.0 * scale * jitter(2))
            })
            .collect();
        // Each replica's chain runs stage 0's forward, stage 1's forward
        // and backward, then stage 0's backward; the gradient all-reduce
        // of each stage ends the step together.
        let chain = |r: usize| own[r].0 + own[r + 2].0 + own[r + 2].1 + own[r].1;
        let duration = chain(0).max(chain(1)) + 10.0;
        for rank in 0..4u32 {
            let (fwd, bwd) = own[rank as usize];
            let sections = [
                ("forward", fwd),
                ("backward", bwd),
                ("comm_wait", duration - fwd - bwd),
            ];
            let group = if groups { rank / 2 * 2 } else { 0 };
            let t = step as f64 + 0.001 * f64::from(rank);
            stragglers.extend(tr.add_step(4, rank, group, step, t, duration, sections, &p));
            stage_events.extend(tr.take_stage_events());
        }
    }
    (stragglers, stage_events)
}

#[test]
fn a_heavier_pipeline_stage_is_a_stage_imbalance_not_two_stragglers() {
    let heavy_stage_1 = |rank: u32, step: u64| if rank >= 2 && step >= 20 { 1.4 } else { 1.0 };
    let (stragglers, stages) = pipeline(heavy_stage_1, true);
    assert!(stragglers.is_empty(), "{stragglers:?}");
    let raised: Vec<_> = stages.iter().filter(|e| e.edge == Edge::Raised).collect();
    assert_eq!(raised.len(), 1, "{stages:?}");
    let e = raised[0];
    assert_eq!((e.stage, e.ranks.as_slice()), (2, &[2, 3][..]));
    // 300 ms of work against 420 ms: the others wait about 120 ms more.
    assert!((e.work_ms - 420.0).abs() < 15.0, "{e:?}");
    assert!((e.others_ms - 300.0).abs() < 15.0, "{e:?}");
    assert!((e.wait_ms - 120.0).abs() < 20.0, "{e:?}");
    assert!(
        e.t >= 30.0 && e.t <= 45.0,
        "raised after the 10 s gate: {e:?}"
    );

    // Compared as one group, the heavy stage's two ranks would be named.
    let (as_one_group, _) = pipeline(heavy_stage_1, false);
    assert!(!raised_ranks(&as_one_group).is_empty());
}

#[test]
fn a_slow_replica_of_a_pipeline_stage_is_a_straggler_not_a_stage() {
    let slow_rank_0 = |rank: u32, step: u64| if rank == 0 && step >= 20 { 1.4 } else { 1.0 };
    let (stragglers, stages) = pipeline(slow_rank_0, true);
    assert_eq!(raised_ranks(&stragglers), vec![0]);
    assert!(stages.is_empty(), "{stages:?}");
    let raised = stragglers.iter().find(|e| e.edge == Edge::Raised).unwrap();
    assert_eq!(
        raised.peers,
        vec![1],
        "named with its stage's other replica"
    );
}

#[test]
fn a_balanced_pipeline_raises_nothing() {
    let (stragglers, stages) = pipeline(|_, _| 1.0, true);
    assert!(
        stragglers.is_empty() && stages.is_empty(),
        "{stragglers:?} {stages:?}"
    );
}

#[test]
fn a_stage_imbalance_clears_when_the_stages_even_out() {
    let for_a_while = |rank: u32, step: u64| {
        if rank >= 2 && (10..50).contains(&step) {
            1.4
        } else {
            1.0
        }
    };
    let (_, stages) = pipeline(for_a_while, true);
    let edges: Vec<Edge> = stages.iter().map(|e| e.edge).collect();
    assert_eq!(edges, vec![Edge::Raised, Edge::Cleared], "{stages:?}");
}

fn raised_ranks(events: &[StragglerEvent]) -> Vec<u32> {
    let mut ranks: Vec<u32> = events
        .iter()
        .filter(|e| e.edge == Edge::Raised)
        .map(|e| e.rank)
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

/// A job of 4 ranks in one peer group whose collectives all go through
/// process group "1" at the end of each step: each rank arrives when its
/// own work is done, and every member leaves `transfer(step)` ms after the
/// last arrives. Every tenth step they also meet in a world all-reduce
/// (group "0", a loss log or a stop check) with a 1 ms transfer. `work(rank, step)` scales a
/// rank's forward. Returns the straggler and link events of 300 steps of
/// about 100 ms.
fn collective_job(
    work: impl Fn(u32, u64) -> f64,
    transfer: impl Fn(u64) -> f64,
) -> (Vec<StragglerEvent>, Vec<links::LinkEvent>) {
    let mut tr = StragglerTracker::default();
    let p = StragglerParams::default();
    let (mut stragglers, mut links) = (Vec::new(), Vec::new());
    for step in 0..300u64 {
        let own: Vec<(f64, f64)> = (0..4u32)
            .map(|rank| {
                let jitter = |salt: u64| {
                    1.0 + 0.01 * (((u64::from(rank) * 7 + step * 13 + salt) % 5) as f64 - 2.0)
                };
                (30.0 * work(rank, step) * jitter(1), 60.0 * jitter(2))
            })
            .collect();
        let last = own.iter().map(|(f, b)| f + b).fold(0.0, f64::max);
        let end = last + transfer(step);
        for rank in 0..4u32 {
            let (fwd, bwd) = own[rank as usize];
            let wait = end - fwd - bwd;
            let sections = [
                ("forward", fwd),
                ("backward", bwd),
                ("comm_wait", wait + 1.0),
            ];
            let mut waits = vec![GroupWait {
                group: "1".into(),
                calls: 8,
                wait_ms: wait,
            }];
            if step % 10 == 0 {
                waits.push(GroupWait {
                    group: "0".into(),
                    calls: 1,
                    wait_ms: wait - transfer(step) + 1.0,
                });
            }
            // Group 1's eight collectives, spread over the rank's own work;
            // each ends when its last member arrives, plus the transfer.
            let enters = |r: usize, k: u64| (own[r].0 + own[r].1) * (k + 1) as f64 / 8.0;
            let collectives: Vec<CollectiveArrival> = (0..8u64)
                .map(|k| {
                    let ends = (0..4).map(|r| enters(r, k)).fold(0.0, f64::max) + 0.5;
                    CollectiveArrival {
                        group: "1".into(),
                        seq: step * 8 + k + 1,
                        op: "all_gather_into_tensor".into(),
                        entered_ms: enters(rank as usize, k),
                        left_ms: ends,
                        wait_ms: ends - enters(rank as usize, k),
                    }
                })
                .collect();
            // Each rank's clock is `rank` ms ahead.
            let t = step as f64 * 0.1 + 0.001 * f64::from(rank);
            let duration = end + 1.0;
            let comms = Comms {
                waits: &waits,
                collectives: &collectives,
            };
            stragglers
                .extend(tr.add_waited_step(4, rank, 0, step, t, duration, sections, comms, &p));
            links.extend(tr.take_link_events());
        }
    }
    (stragglers, links)
}

#[test]
fn a_groups_collectives_slower_for_every_member_are_a_slow_link_not_a_straggler() {
    let (stragglers, links) =
        collective_job(|_, _| 1.0, |step| if step >= 100 { 25.0 } else { 5.0 });
    assert!(stragglers.is_empty(), "{stragglers:?}");
    let raised: Vec<_> = links.iter().filter(|e| e.edge == Edge::Raised).collect();
    assert_eq!(raised.len(), 1, "{links:?}");
    let e = raised[0];
    assert_eq!(
        (e.group.as_str(), e.ranks.as_slice()),
        ("1", &[0, 1, 2, 3][..])
    );
    assert!((e.baseline_floor_ms - 5.0).abs() < 1.0, "{e:?}");
    assert!((e.floor_ms - 25.0).abs() < 1.0, "{e:?}");
    assert!((e.busy_ms - e.baseline_busy_ms).abs() < 2.0, "{e:?}");
    // Raised after the 10 s gate, not before the link slowed.
    assert!(e.t >= 10.0 + 10.0 && e.t <= 10.0 + 15.0, "{e:?}");
}

#[test]
fn a_slow_link_clears_when_the_link_is_back() {
    let (_, links) = collective_job(
        |_, _| 1.0,
        |step| {
            if (100..200).contains(&step) {
                25.0
            } else {
                5.0
            }
        },
    );
    let edges: Vec<Edge> = links.iter().map(|e| e.edge).collect();
    assert_eq!(edges, vec![Edge::Raised, Edge::Cleared], "{links:?}");
}

#[test]
fn a_straggler_is_named_with_the_process_group_its_peers_wait_in_and_is_no_slow_link() {
    let slow_rank_2 = |rank: u32, step: u64| if rank == 2 && step >= 100 { 1.8 } else { 1.0 };
    let (stragglers, links) = collective_job(slow_rank_2, |_| 5.0);
    assert!(
        links.is_empty(),
        "the last to arrive waits no longer: {links:?}"
    );
    assert_eq!(raised_ranks(&stragglers), vec![2]);
    let e = stragglers.iter().find(|e| e.edge == Edge::Raised).unwrap();
    // The world group, met every tenth step, costs no step much.
    let [(group, ms)] = e.groups.as_slice() else {
        panic!("only group 1 carries the wait every step: {e:?}")
    };
    // Its forward takes 24 ms longer; the others wait that much for it in "1".
    assert_eq!(group, "1");
    assert!((ms - 24.0).abs() < 3.0, "{e:?}");
    // It arrived last at every one of group 1's collectives, later the
    // further into its work (3 to 24 ms, 13.5 ms the median).
    let [a] = e.arrivals.as_slice() else {
        panic!("one group's arrivals: {e:?}")
    };
    assert_eq!(a.group, "1");
    assert!(a.decided >= 8 && a.last == a.decided, "{a:?}");
    assert_eq!(a.late_share, 1.0, "{a:?}");
    assert!((a.late_ms - 13.5).abs() < 2.0, "{a:?}");
}

#[test]
fn every_rank_slower_is_neither_a_straggler_nor_a_slow_link() {
    let (stragglers, links) =
        collective_job(|_, step| if step >= 100 { 1.8 } else { 1.0 }, |_| 5.0);
    assert!(
        stragglers.is_empty() && links.is_empty(),
        "{stragglers:?} {links:?}"
    );
}
