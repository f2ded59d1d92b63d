#!/bin/sh
# gpumon's Slurm epilog: slurmd runs it as root on every node of a job once
# the job has ended, e.g.
#   slurm.conf:  Epilog=/etc/slurm/epilog.d/*   (install as 50-gpumon.sh)
#
# The agent needs no message here: it samples the node's processes every
# 500 ms, and a rank whose processes are gone ends in the cluster view by
# itself. So the epilog only leaves a line in the system log (tag
# gpumon-epilog) with the job id and whether the agent was still running,
# which helps to line up a job's end with gpumon's view of it. It leaves the
# agent running for the next job, and like the prolog it always exits 0: an
# epilog that fails drains the node.

unit="${GPUMON_AGENT_UNIT:-gpumon-agent.service}"
job="${SLURM_JOB_ID:-unknown}"

say() {
    logger -t gpumon-epilog -- "$*" 2>/dev/null || printf 'gpumon-epilog: %s\n' "$*" >&2
}

if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$unit"; then
    say "job $job ended; $unit is running"
else
    say "job $job ended; $unit is not running, so this node may not have been monitored to the job's end"
fi
exit 0
