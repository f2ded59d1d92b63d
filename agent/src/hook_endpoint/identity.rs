//! Checking that a registering process is who it says it is.
//!
//! On a Unix socket the kernel tells the agent the peer's PID
//! (`SO_PEERCRED`); a `register` claiming another PID is refused. A training
//! process in a container reports its PID in its own PID namespace, which
//! differs from the kernel's answer in the agent's namespace; the claim is
//! still accepted when it is the innermost entry of the peer's `NSpid` line
//! in `/proc/PID/status`, and the session then keeps the agent's view of the
//! PID (the one NVML and `/proc` use here).
//!
//! Over loopback TCP the peer's PID is that of the process holding the
//! peer's socket, found through `/proc` ([`super::tcp_owner`]), and the same
//! rule applies (a claim for another process that holds the same socket,
//! e.g. a fork of it, stands too). When the kernel cannot name the peer (a
//! TCP peer whose process was not found: the agent may not look at it, it
//! is in a PID namespace the agent does not see, or the search hit its
//! bound; or a Unix peer in such a namespace, for which `SO_PEERCRED` gives
//! 0) there is no PID to check against.
//!
//! Where `/proc/PID/environ` is readable and names a rank (a launcher's, or
//! `GPUMON_JOB`'s rank 0), the claimed job and rank must match it (the job
//! only when the environment names one, see
//! [`crate::discovery::parse_environ`]): a hook cannot report for another
//! rank than the one its process is. A readable environment that names no
//! rank at all (a plain `python` process) allows one claim only: rank 0,
//! local rank 0, of a world of 1 in job `pid-<PID>`, with the PID the
//! process knows itself by; so such a process can never take a real job's
//! rank. An unreadable environment (another user's process for an agent
//! that is not root) leaves the claim as it is.
//!
//! A refusal names what the environment says only to the process itself
//! (its PID checked against the kernel's): a peer the kernel cannot name
//! learns that its claim does not match, never another process's job and
//! rank.

use std::path::Path;

use super::hub::Registration;
use crate::discovery::{read_rank, standalone_job, STANDALONE_JOB_VAR, UNKNOWN_JOB};
use crate::procfs::read_bounded;

/// Checks `claim` against the peer's PID (when the transport gives one) and
/// the process's environment; on success `claim.pid` is the PID in the
/// agent's namespace. `Err` is the sentence to answer.
pub(crate) fn verify(
    proc_root: &Path,
    peer_pid: Option<u32>,
    claim: &mut Registration,
) -> Result<(), IdentityError> {
    let claimed_pid = claim.pid;
    let itself = peer_pid.is_some_and(|p| p != 0);
    if let Some(peer) = peer_pid.filter(|&p| p != 0) {
        if claim.pid != peer {
            let inner = ns_pids(proc_root, peer).and_then(|pids| pids.last().copied());
            if inner != Some(claim.pid) {
                return Err(IdentityError::NotThePeer {
                    pid: claim.pid,
                    peer,
                });
            }
            claim.pid = peer;
        }
    }
    match read_rank(proc_root, claim.pid) {
        Ok(Some(env)) => {
            let job_differs = env.job != UNKNOWN_JOB && env.job != claim.job;
            if (job_differs || env.rank != claim.rank) && itself {
                return Err(IdentityError::EnvironmentNames {
                    pid: claim.pid,
                    env_rank: env.rank,
                    env_job: env.job,
                    rank: claim.rank,
                    job: claim.job.clone(),
                });
            }
            if job_differs || env.rank != claim.rank {
                return Err(IdentityError::EnvironmentDiffers {
                    pid: claim.pid,
                    rank: claim.rank,
                    job: claim.job.clone(),
                });
            }
        }
        Ok(None) => {
            // The process may know itself by another PID (its namespace's).
            let own = |pid: u32| claim.job == standalone_job(pid);
            let shape = (claim.rank, claim.local_rank, claim.world_size);
            if !(own(claimed_pid) || own(claim.pid)) || shape != (0, 0, 1) {
                return Err(IdentityError::NotStandalone {
                    pid: claim.pid,
                    own_job: standalone_job(claimed_pid),
                    rank: claim.rank,
                    local_rank: claim.local_rank,
                    world_size: claim.world_size,
                    job: claim.job.clone(),
                });
            }
        }
        Err(_) => {}
    }
    Ok(())
}

/// Why a `register` is refused for who it claims to be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IdentityError {
    /// The claimed PID is not the peer's, in any namespace.
    #[error(
        "pid {pid} is not the connecting process (the kernel says pid {peer}); register with os.getpid()"
    )]
    NotThePeer {
        /// The PID claimed.
        pid: u32,
        /// The peer's PID, as the kernel says it.
        peer: u32,
    },
    /// The process's environment names another job or rank (said to the
    /// process itself only).
    #[error(
        "the environment of pid {pid} names rank {env_rank} of job {env_job:?}, not rank {rank} of job {job:?}"
    )]
    EnvironmentNames {
        /// The process.
        pid: u32,
        /// The rank its environment names.
        env_rank: u32,
        /// The job its environment names.
        env_job: String,
        /// The rank claimed.
        rank: u32,
        /// The job claimed.
        job: String,
    },
    /// The process's environment does not name the claimed job and rank.
    #[error("the environment of pid {pid} does not name rank {rank} of job {job:?}")]
    EnvironmentDiffers {
        /// The process.
        pid: u32,
        /// The rank claimed.
        rank: u32,
        /// The job claimed.
        job: String,
    },
    /// A process without launcher variables claims more than its own job.
    #[error(
        "pid {pid} has neither launcher variables nor {STANDALONE_JOB_VAR}: it may \
         register only as rank 0 (local rank 0) of a world of 1 in job {own_job:?}, not \
         rank {rank} (local rank {local_rank}) of {world_size} in job {job:?}"
    )]
    NotStandalone {
        /// The process.
        pid: u32,
        /// The job it may register in.
        own_job: String,
        /// The rank claimed.
        rank: u32,
        /// The local rank claimed.
        local_rank: u32,
        /// The world size claimed.
        world_size: u32,
        /// The job claimed.
        job: String,
    },
}

/// The `NSpid` line of `<proc_root>/<pid>/status`: the PID in each nested
/// PID namespace, outermost first.
fn ns_pids(proc_root: &Path, pid: u32) -> Option<Vec<u32>> {
    let bytes = read_bounded(&proc_root.join(pid.to_string()).join("status"), 64 << 10).ok()?;
    parse_ns_pids(std::str::from_utf8(&bytes).ok()?)
}

fn parse_ns_pids(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    line.split_whitespace().map(|p| p.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANK3: &[u8] = include_bytes!("../../tests/fixtures/environ/torchrun_rank3.environ");
    const NO_RUN_ID: &[u8] = include_bytes!("../../tests/fixtures/environ/no_run_id.environ");

    fn claim(pid: u32, job: &str, rank: u32) -> Registration {
        Registration {
            pid,
            job: job.into(),
            rank,
            local_rank: 0,
            world_size: 16,
            device: None,
        }
    }

    fn proc_dir(root: &Path, pid: u32, environ: &[u8], status: Option<&str>) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("environ"), environ).unwrap();
        if let Some(status) = status {
            std::fs::write(dir.join("status"), status).unwrap();
        }
    }

    #[test]
    fn the_claimed_pid_must_be_the_peer() {
        let root = tempfile::tempdir().unwrap();
        proc_dir(
            root.path(),
            500,
            b"RANK=0\0WORLD_SIZE=16\0",
            Some("Name:\tpython\nNSpid:\t500\t7\n"),
        );
        let mut c = claim(500, "j", 0);
        verify(root.path(), Some(500), &mut c).unwrap();
        // Inside a container the process knows itself as 7.
        let mut c = claim(7, "j", 0);
        verify(root.path(), Some(500), &mut c).unwrap();
        assert_eq!(c.pid, 500, "the session keeps the agent's view");
        let e = verify(root.path(), Some(500), &mut claim(8, "j", 0))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("pid 8 is not the connecting process (the kernel says pid 500)"),
            "{e}"
        );
        // No status file: only the exact pid will do.
        assert!(verify(root.path(), Some(501), &mut claim(7, "j", 0)).is_err());
        // No peer pid (a TCP peer whose process was not found, or a peer
        // outside our namespace): nothing to check.
        verify(root.path(), None, &mut claim(8, "j", 0)).unwrap();
        verify(root.path(), Some(0), &mut claim(8, "j", 0)).unwrap();
    }

    #[test]
    fn the_claim_must_match_the_environment() {
        let root = tempfile::tempdir().unwrap();
        proc_dir(root.path(), 600, RANK3, None);
        verify(
            root.path(),
            Some(600),
            &mut claim(600, "llama-7b-sft-20240611", 3),
        )
        .unwrap();
        let e = verify(root.path(), Some(600), &mut claim(600, "other", 3))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "names rank 3 of job \"llama-7b-sft-20240611\", not rank 3 of job \"other\""
            ),
            "{e}"
        );
        let e = verify(
            root.path(),
            None,
            &mut claim(600, "llama-7b-sft-20240611", 2),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("does not name rank 2"), "{e}");
        // A peer the kernel cannot name is not told whose pid it is.
        let e = verify(root.path(), None, &mut claim(600, "other", 3))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("llama"), "{e}");
        // Without RUN_ID the job is MASTER_ADDR:MASTER_PORT.
        proc_dir(root.path(), 601, NO_RUN_ID, None);
        verify(
            root.path(),
            None,
            &mut claim(601, "trainer-0.trainer.default.svc:23456", 12),
        )
        .unwrap();
        // Unreadable: the claim stands.
        verify(root.path(), None, &mut claim(602, "anything", 0)).unwrap();
        // A launcher with no job of its own: the hook names the job.
        proc_dir(root.path(), 603, b"RANK=1\0WORLD_SIZE=2\0", None);
        verify(root.path(), None, &mut claim(603, "named-by-hook", 1)).unwrap();
        assert!(verify(root.path(), None, &mut claim(603, "named-by-hook", 0)).is_err());
    }

    fn alone(pid: u32, job: &str) -> Registration {
        Registration {
            world_size: 1,
            ..claim(pid, job, 0)
        }
    }

    #[test]
    fn a_process_without_a_launcher_may_only_be_itself() {
        let root = tempfile::tempdir().unwrap();
        proc_dir(
            root.path(),
            700,
            b"PATH=/usr/bin\0HOME=/root\0",
            Some("Name:\tpython\nNSpid:\t700\t9\n"),
        );
        verify(root.path(), Some(700), &mut alone(700, "pid-700")).unwrap();
        // Inside a container it knows itself as pid 9, and names its job so.
        let mut c = alone(9, "pid-9");
        verify(root.path(), Some(700), &mut c).unwrap();
        assert_eq!(c.pid, 700);
        let e = verify(root.path(), Some(700), &mut alone(700, "run-7"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("neither launcher variables nor GPUMON_JOB")
                && e.contains("job \"pid-700\", not rank 0 (local rank 0) of 1 in job \"run-7\""),
            "{e}"
        );
        assert!(verify(root.path(), Some(700), &mut alone(700, "pid-701")).is_err());
        // Rank 0 of a world of 1, nothing else.
        assert!(verify(root.path(), Some(700), &mut claim(700, "pid-700", 0)).is_err());
        let mut local = alone(700, "pid-700");
        local.local_rank = 1;
        local.world_size = 2;
        assert!(verify(root.path(), Some(700), &mut local).is_err());
    }

    #[test]
    fn gpumon_job_names_rank_0_of_its_job() {
        let root = tempfile::tempdir().unwrap();
        proc_dir(root.path(), 710, b"GPUMON_JOB=profile-1\0", None);
        verify(root.path(), Some(710), &mut alone(710, "profile-1")).unwrap();
        let e = verify(root.path(), Some(710), &mut alone(710, "pid-710"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("names rank 0 of job \"profile-1\""), "{e}");
        let e = verify(root.path(), Some(710), &mut claim(710, "profile-1", 1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not rank 1"), "{e}");
    }

    #[test]
    fn parses_nspid_lines() {
        assert_eq!(
            parse_ns_pids("Pid:\t5\nNSpid:\t5\t3\t1\n"),
            Some(vec![5, 3, 1])
        );
        assert_eq!(parse_ns_pids("Pid:\t5\n"), None);
        assert_eq!(parse_ns_pids("NSpid:\tx\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_itself_in_the_real_proc() {
        let me = std::process::id();
        let root = Path::new(crate::discovery::DEFAULT_PROC_ROOT);
        let nspid = ns_pids(root, me).unwrap();
        assert_eq!(nspid[0], me);
    }
}
