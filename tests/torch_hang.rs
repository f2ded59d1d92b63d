//! Hung jobs in a real torch job: `torchrun --nproc-per-node 4` training a
//! DistributedDataParallel model on CPU (gloo) with no gpumon call in the
//! script, whose rank 2 stops 20 s in: it sleeps for good before its
//! backward, skips an all-reduce its peers enter (a real deadlock), or
//! stops its whole process (SIGSTOP). A critical `hang` must name rank 2
//! within 90 s, and ranks 0, 1 and 3 must save their threads' stacks. A job
//! whose every rank pauses 90 s with no marker, and one whose rank 0
//! evaluates 90 s after `gpumon.mark("eval")`, must raise none.
//!
//! Every case runs twice at once, on the same machine: under `gpumon run`
//! with an agent and a coordinator (read through the API) and under
//! `gpumon profile` (read from its report). The rule is judged on data
//! time over a minute of quiet, so two jobs sharing the CPUs cannot make it
//! pass or fail; running them side by side halves the suite's time.
//!
//! A SIGKILLed peer is no case here: gloo fails the others' collectives at
//! once ("Connection reset by peer"), so on CPU a dead rank ends the job.
//! Under NCCL the others wait, and the engine names the rank whose process
//! NVML or the agent saw exit (`engine/hang/tests.rs`, `agent/tests/hook.rs`).
//! The harness is `tests/support/torch.rs`.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::torch::*;
use support::{get, wait_for_every};
use tokio::time::Instant;

/// A hang is named within this of the rank's stop.
const HANG_WITHIN: Duration = Duration::from_secs(90);
/// Run time of the jobs with a 90 s pause in them, seconds.
const PAUSED_RUN_S: u64 = 130;
/// The ranks that wait for rank 2 and save their evidence.
const WAITERS: [u64; 3] = [0, 1, 3];

/// The job's actions of `kind`, as `GET /api/v1/actions` lists them.
async fn actions_of(job: &Job, kind: &str) -> Result<Vec<Value>, String> {
    let body: Value = get(&format!("{}/api/v1/actions?job={}", job.url, job.name))
        .await
        .map_err(|e| e.to_string())?;
    let actions = body["actions"].as_array().ok_or("no actions list")?;
    Ok(actions
        .iter()
        .filter(|a| a["kind"] == kind)
        .cloned()
        .collect())
}

/// `ddp_train.py`'s arguments for a 4-rank DDP job whose rank 2 hangs
/// ([`SLOW_AFTER_S`] in) the way `--hang MODE` says.
fn hang_args(mode: &str) -> Vec<String> {
    let slow_after = SLOW_AFTER_S.to_string();
    [
        "--duration-s",
        "600",
        "--instrument",
        "none",
        "--slow-rank",
        "2",
        "--slow-after-s",
        &slow_after,
        "--hang",
        mode,
    ]
    .map(String::from)
    .to_vec()
}

/// Runs a job whose rank 2 hangs the way `--hang MODE` says under `gpumon
/// run` and under `gpumon profile` at once, and checks both.
async fn hang_is_named(test: &str, mode: &str, phrases: &[&str]) {
    let Some(python) = torch_python(test) else {
        return;
    };
    let _alone = ONE_JOB_AT_A_TIME.lock().await;
    let began = Instant::now();
    let args = hang_args(mode);
    let (run, profile) = tokio::join!(
        hang_under_run(&python, mode, &args, phrases),
        hang_under_profile(&python, mode, &args, phrases)
    );
    report(&format!(
        "{test}: under gpumon run: {run}\n{test}: under gpumon profile: {profile}\n{test}: {:.0} s",
        began.elapsed().as_secs_f64()
    ));
}

/// Checks a hang alert about the job's stop at `start` (Unix s): critical,
/// naming rank 2 within [`HANG_WITHIN`], with `phrases` in its message;
/// returns how it reads.
fn check_hang(alert: &Value, start: f64, phrases: &[&str]) -> String {
    assert_eq!(alert["rank"], SLOW_RANK, "{alert}");
    assert_eq!(alert["severity"], "critical", "{alert}");
    let message = alert["message"].as_str().unwrap_or("");
    for phrase in phrases {
        assert!(
            message.contains(phrase),
            "{phrase:?} in the hang: {message}"
        );
    }
    let after = alert["t"].as_f64().unwrap_or(f64::NAN) - start;
    assert!(
        after <= HANG_WITHIN.as_secs_f64(),
        "named {after:.0} s after the stop: {message}"
    );
    format!("hang {after:.1} s after rank 2 stopped: {message}")
}

/// The job with an agent and a coordinator: a critical `hang` names rank 2
/// within [`HANG_WITHIN`] of its stop, and ranks 0, 1 and 3 saved their
/// threads' stacks into the job's dump directory.
async fn hang_under_run(python: &Path, mode: &str, args: &[String], phrases: &[&str]) -> String {
    let mut job = Job::start(&format!("torch-ddp-hang-{mode}"), python, args).await;
    let start = job.slowdown_start().await;
    let deadline = start + HANG_WITHIN.as_secs_f64();
    let alert = job
        .wait_for_alert("hang", deadline, "a hang naming rank 2", |a| {
            a["rank"] == SLOW_RANK
        })
        .await;
    let said = check_hang(&alert, start, phrases);
    let what = "evidence from ranks 0, 1 and 3";
    let dumps = wait_for_every(POLL, until(deadline + 30.0), what, || async {
        let done: Vec<Value> = actions_of(&job, "dump_evidence")
            .await?
            .into_iter()
            .filter(|a| a["state"] == "done")
            .collect();
        let ranks: Vec<u64> = done.iter().filter_map(|a| a["rank"].as_u64()).collect();
        if WAITERS.iter().all(|r| ranks.contains(r)) {
            Ok(done)
        } else {
            Err(format!("dump_evidence actions done for ranks {ranks:?}"))
        }
    })
    .await;
    for d in &dumps {
        check_stacks(d, &job.dir.join(DUMP_DIR));
    }
    kill_processes_mentioning(&job.dir);
    job.stop().await;
    said
}

/// The job under `gpumon profile`: the report, written when the profile is
/// interrupted once ranks 0, 1 and 3 saved their stacks, holds the hang
/// naming rank 2 and the evidence dumps issued to ranks 0, 1 and 3.
async fn hang_under_profile(
    python: &Path,
    mode: &str,
    args: &[String],
    phrases: &[&str],
) -> String {
    let mut job = ProfileRun::start(&format!("profile-hang-{mode}"), python, args);
    let start = job.slowdown_start().await;
    let dumps = job.dir.join(DUMP_DIR);
    let stacks_saved = || -> usize {
        std::fs::read_dir(&dumps).map_or(0, |d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".stacks.txt"))
                .count()
        })
    };
    wait_for_every(
        POLL,
        until(start + HANG_WITHIN.as_secs_f64() + 30.0),
        "3 ranks' stacks saved",
        || async {
            match stacks_saved() {
                n if n >= WAITERS.len() => Ok(()),
                n => Err(format!("{n} stacks files in {}", dumps.display())),
            }
        },
    )
    .await;
    let r = job.interrupt().await;
    kill_processes_mentioning(&job.dir);
    let hangs = report_entries(&r, "alerts", "hang");
    let hang = hangs
        .iter()
        .find(|a| a["rank"] == SLOW_RANK)
        .unwrap_or_else(|| panic!("no hang naming rank 2 in the report: {}", r["alerts"]));
    let said = check_hang(hang, start, phrases);
    // Issued to every waiting rank; those whose acks were in before the
    // interrupt name their files (the files themselves are counted above).
    let issued = report_entries(&r, "actions", "dump_evidence");
    let ranks: Vec<u64> = issued.iter().filter_map(|a| a["rank"].as_u64()).collect();
    assert!(
        WAITERS.iter().all(|r| ranks.contains(r)),
        "dumps issued to ranks {ranks:?}"
    );
    for d in issued.iter().filter(|a| a["state"] == "done") {
        check_stacks(d, &dumps);
    }
    said
}

/// A done `dump_evidence` action's stacks file (its `response` names the
/// files): in `dir`, with the main thread's stack.
fn check_stacks(action: &Value, dir: &Path) {
    let detail = action["response"].as_str().unwrap_or("");
    let stacks = detail
        .split(", ")
        .find(|p| p.ends_with(".stacks.txt"))
        .unwrap_or_else(|| panic!("rank {}: no stacks file in {detail:?}", action["rank"]));
    let text = std::fs::read_to_string(stacks).unwrap_or_else(|e| panic!("{stacks}: {e}"));
    assert!(
        text.contains("MainThread"),
        "{stacks} holds every thread's stack: {text:.400}"
    );
    assert!(
        Path::new(stacks).starts_with(dir),
        "{stacks} is in {}",
        dir.display()
    );
}

/// Runs `name`, a job whose ranks pause 90 s at step 50 as `pause` says
/// further (which rank, after which marker), under `gpumon run` and under
/// `gpumon profile` at once, lets both end by themselves, and checks that
/// each paused and raised no `hang` and asked for no evidence.
async fn pause_is_not_a_hang(test: &str, name: &str, pause: &[&str]) {
    let Some(python) = torch_python(test) else {
        return;
    };
    let _alone = ONE_JOB_AT_A_TIME.lock().await;
    let began = Instant::now();
    let run_s = PAUSED_RUN_S.to_string();
    let common = [
        "--duration-s",
        &run_s,
        "--instrument",
        "none",
        "--pause-at-step",
        "50",
        "--pause-s",
        "90",
    ];
    let args: Vec<String> = common.iter().chain(pause).map(|s| s.to_string()).collect();
    let within = START_WITHIN + Duration::from_secs(PAUSED_RUN_S + 60);
    let under_run = async {
        let mut job = Job::start(name, &python, &args).await;
        let status = job.wait_end(within).await;
        assert!(status.success(), "the job ends by itself: {status}");
        assert!(job.dir.join(SLOW_START_FILE).exists(), "the job paused");
        let hangs = job.alerts_of("hang").await.unwrap();
        assert!(
            hangs.is_empty(),
            "a pause is no hang (gpumon run): {}",
            alert_lines(&hangs)
        );
        let dumps = actions_of(&job, "dump_evidence").await.unwrap();
        assert!(dumps.is_empty(), "no evidence asked for: {dumps:?}");
    };
    let under_profile = async {
        let mut job = ProfileRun::start(&format!("profile-{name}"), &python, &args);
        let (status, r) = job.wait_end(within).await;
        assert!(status.success(), "the job ends by itself: {status}");
        assert!(job.dir.join(SLOW_START_FILE).exists(), "the job paused");
        let hangs = report_entries(&r, "alerts", "hang");
        assert!(
            hangs.is_empty(),
            "a pause is no hang (gpumon profile): {}",
            alert_lines(&hangs)
        );
        let dumps = report_entries(&r, "actions", "dump_evidence");
        assert!(dumps.is_empty(), "no evidence asked for: {dumps:?}");
    };
    tokio::join!(under_run, under_profile);
    report(&format!("{test}: {:.0} s", began.elapsed().as_secs_f64()));
}

/// Rank 2 of a 4-rank DDP job sleeps for good before its backward, 20 s
/// in; its peers wait in their backward's all-reduce. With no gpumon call
/// in the script, a critical `hang` names rank 2 as the one that has not
/// entered the collective within 90 s, and every live rank that waits
/// saves its flight recorder and its threads' stacks.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_rank_asleep_before_its_backward_is_named_in_a_hang_within_90_s() {
    hang_is_named(
        "with_no_gpumon_call_a_rank_asleep_before_its_backward_is_named_in_a_hang_within_90_s",
        "sleep",
        &[
            "rank 2 has not entered it",
            "ranks 0, 1, 3 wait in all_reduce",
        ],
    )
    .await;
}

/// Every rank all-reduces its loss in a process group of its own after
/// each step; from 20 s in rank 2 skips it and goes on to the next step,
/// where it waits in the gradient all-reduce of the default group while its
/// peers wait in the loss's: a real deadlock, named within 90 s.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_rank_that_skips_an_all_reduce_is_named_in_a_hang_within_90_s() {
    hang_is_named(
        "with_no_gpumon_call_a_rank_that_skips_an_all_reduce_is_named_in_a_hang_within_90_s",
        "skip",
        &[
            "rank 2 waits in all_reduce",
            "of process group 0",
            "ranks 0, 1, 3 wait in all_reduce",
        ],
    )
    .await;
}

/// Rank 2 stops its whole process (SIGSTOP) before its backward, 20 s in:
/// its hook stops with it, and its peers wait in their all-reduce. Named
/// within 90 s as the rank that reports nothing.
#[tokio::test(flavor = "multi_thread")]
async fn with_no_gpumon_call_a_stopped_rank_is_named_in_a_hang_within_90_s() {
    hang_is_named(
        "with_no_gpumon_call_a_stopped_rank_is_named_in_a_hang_within_90_s",
        "stop",
        &[
            "rank 2 has reported nothing",
            "ranks 0, 1, 3 wait in all_reduce",
        ],
    )
    .await;
}

/// Every rank of a DDP job sleeps 90 s before the same step (an unmarked
/// checkpoint every rank writes): no rank waits in a collective, so the
/// job is paused, not hung.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_wide_unmarked_90_s_pause_is_not_a_hang() {
    pause_is_not_a_hang(
        "a_job_wide_unmarked_90_s_pause_is_not_a_hang",
        "torch-ddp-pause",
        &[],
    )
    .await;
}

/// Rank 0 marks an evaluation (`gpumon.mark("eval")`, the script's one
/// gpumon call) and evaluates for 90 s while its peers wait for it in their
/// next backward: a planned pause, not a hang.
#[tokio::test(flavor = "multi_thread")]
async fn a_90_s_evaluation_of_one_rank_marked_by_the_script_is_not_a_hang() {
    pause_is_not_a_hang(
        "a_90_s_evaluation_of_one_rank_marked_by_the_script_is_not_a_hang",
        "torch-ddp-eval",
        &["--pause-rank", "0", "--pause-marker", "eval"],
    )
    .await;
}
