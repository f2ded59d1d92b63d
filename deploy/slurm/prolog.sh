#!/bin/sh
# gpumon's Slurm prolog: makes sure this node's gpumon agent runs before a
# job starts on it. slurmd runs it as root on every node of the job, e.g.
#   slurm.conf:  Prolog=/etc/slurm/prolog.d/*   (install as 50-gpumon.sh)
#
# Monitoring must never cost a job: a prolog that fails drains the node, so
# this script always exits 0. When the agent cannot be started it says so in
# the system log (tag gpumon-prolog) and the job runs unmonitored.
#
# It sets nothing in the job's environment (a prolog cannot) and reads no
# job input beyond SLURM_JOB_ID, for its log lines.
#
# GPUMON_AGENT_UNIT names the agent's systemd unit (deploy/systemd/);
# GPUMON_PROLOG_TIMEOUT bounds the start, in seconds (default 15).

unit="${GPUMON_AGENT_UNIT:-gpumon-agent.service}"
limit="${GPUMON_PROLOG_TIMEOUT:-15}"
job="${SLURM_JOB_ID:-unknown}"

say() {
    logger -t gpumon-prolog -- "$*" 2>/dev/null || printf 'gpumon-prolog: %s\n' "$*" >&2
}

if ! command -v systemctl >/dev/null 2>&1; then
    say "job $job: no systemctl on this node; start the gpumon agent another way"
    exit 0
fi

if systemctl is-active --quiet "$unit"; then
    exit 0
fi

say "job $job: $unit is not running; starting it"
if timeout "$limit" systemctl start "$unit"; then
    say "job $job: started $unit"
else
    say "job $job: could not start $unit within ${limit}s; the job runs without gpumon (see: journalctl -u $unit)"
fi
exit 0
