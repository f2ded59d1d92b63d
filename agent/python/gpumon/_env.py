"""Who this process is in its job, read from its launcher's variables.

The agent finds the same answer in ``/proc/PID/environ`` and refuses a
``register`` that claims another job or rank, so this module follows the
agent's rule (``parse_environ`` in ``agent/src/discovery.rs``) to the
letter; both are tested against one table (``tests/identity_cases.json``).

Launchers, first match wins (the process's own launcher before the
allocation it runs in):

- torchrun: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``; job
  ``TORCHELASTIC_RUN_ID`` unless empty or ``none`` (torchrun's default);
- Open MPI: ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK``; job
  ``PMIX_NAMESPACE``;
- MPICH, Intel MPI: ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``;
- Slurm's ``srun``: ``SLURM_PROCID``, ``SLURM_NTASKS`` (or
  ``SLURM_NPROCS``), ``SLURM_LOCALID``; job ``slurm-JOBID`` or
  ``slurm-JOBID.STEP`` from ``SLURM_JOB_ID`` and ``SLURM_STEP_ID``.

A launcher matches when its rank and world size are unsigned integers with
``rank < world size <= 2**20``. Without a job of its launcher's own, the
job is ``MASTER_ADDR:MASTER_PORT`` (an IPv6 address in brackets) when both
are set, else ``unknown-job``; it is cut to 256 bytes. A local rank absent
or not below the world size is 0.

Without any launcher, a process whose ``GPUMON_JOB`` is not blank is rank 0
(local rank 0) of a world of 1 in that job, trimmed and cut like any job
(``gpumon profile`` sets it). With neither, :func:`read_identity` finds no
identity; :func:`gpumon.init` then uses :func:`standalone_identity`, job
``pid-<PID>``, the only claim the agent accepts from such a process.
"""

import re
from dataclasses import dataclass
from typing import Mapping, Optional

#: Largest ``WORLD_SIZE`` believed (the agent's limit).
MAX_WORLD_SIZE = 1 << 20
#: Longest job id, bytes (the agent's limit; its test ``python_limits``
#: checks this number).
MAX_JOB_BYTES = 256
#: Job id when neither a run id nor the master's address is known.
UNKNOWN_JOB = "unknown-job"
#: Names the job of a process started without a launcher.
STANDALONE_JOB_VAR = "GPUMON_JOB"

# Rust's `str::parse::<u32>()` after `trim()`: an optional plus, then digits.
_UNSIGNED = re.compile(r"\+?[0-9]+")


@dataclass(frozen=True)
class Identity:
    """This process's place in its job."""

    job: str
    rank: int
    local_rank: int
    world_size: int


def read_identity(environ: Mapping[str, str]) -> Optional[Identity]:
    """This process's identity in ``environ``: its launcher's, else its
    ``GPUMON_JOB``'s; ``None`` when it has neither."""
    torchrun_job = _named(_get(environ, "TORCHELASTIC_RUN_ID"))
    if torchrun_job is not None and torchrun_job.isascii() and torchrun_job.lower() == "none":
        torchrun_job = None
    slurm_job = _named(_get(environ, "SLURM_JOB_ID"))
    if slurm_job is not None:
        step = _named(_get(environ, "SLURM_STEP_ID"))
        slurm_job = "slurm-%s.%s" % (slurm_job, step) if step is not None else "slurm-" + slurm_job
    slurm_size = _get(environ, "SLURM_NTASKS")
    if slurm_size is None:
        slurm_size = _get(environ, "SLURM_NPROCS")
    launchers = [
        (_get(environ, "RANK"), _get(environ, "WORLD_SIZE"), _get(environ, "LOCAL_RANK"), torchrun_job),
        (
            _get(environ, "OMPI_COMM_WORLD_RANK"),
            _get(environ, "OMPI_COMM_WORLD_SIZE"),
            _get(environ, "OMPI_COMM_WORLD_LOCAL_RANK"),
            _named(_get(environ, "PMIX_NAMESPACE")),
        ),
        (_get(environ, "PMI_RANK"), _get(environ, "PMI_SIZE"), _get(environ, "MPI_LOCALRANKID"), None),
        (_get(environ, "SLURM_PROCID"), slurm_size, _get(environ, "SLURM_LOCALID"), slurm_job),
    ]
    for rank_text, size_text, local_text, own_job in launchers:
        rank = _unsigned(rank_text, 0xFFFFFFFF)
        world_size = _unsigned(size_text, 0xFFFFFFFF)
        if rank is None or world_size is None:
            continue
        if world_size > MAX_WORLD_SIZE or rank >= world_size:
            continue
        local_rank = _unsigned(local_text, 0xFFFFFFFF)
        if local_rank is None or local_rank >= world_size:
            local_rank = 0
        job = own_job if own_job is not None else master_job(environ)
        return Identity(
            job=truncate_utf8(job, MAX_JOB_BYTES),
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
        )
    standalone_job = _named(_get(environ, STANDALONE_JOB_VAR))
    if standalone_job is not None:
        return Identity(job=truncate_utf8(standalone_job, MAX_JOB_BYTES), rank=0, local_rank=0, world_size=1)
    return None


def standalone_identity(pid: int) -> Identity:
    """Process ``pid`` on its own, with neither a launcher nor ``GPUMON_JOB``:
    rank 0 of a world of 1 in job ``pid-<PID>``."""
    return Identity(job="pid-%d" % pid, rank=0, local_rank=0, world_size=1)


def job_id(environ: Mapping[str, str]) -> str:
    """A torchrun worker's job id: its run id, else the master's address."""
    run_id = _named(_get(environ, "TORCHELASTIC_RUN_ID"))
    if run_id is not None and not (run_id.isascii() and run_id.lower() == "none"):
        return truncate_utf8(run_id, MAX_JOB_BYTES)
    return master_job(environ)


def master_job(environ: Mapping[str, str]) -> str:
    """``MASTER_ADDR:MASTER_PORT`` when both are set, else ``unknown-job``."""
    addr = truncate_utf8((_get(environ, "MASTER_ADDR") or "").strip(), MAX_JOB_BYTES)
    port = _unsigned(_get(environ, "MASTER_PORT"), 0xFFFF)
    if addr and port:
        if ":" in addr and not addr.startswith("["):
            addr = "[" + addr + "]"
        return truncate_utf8("%s:%d" % (addr, port), MAX_JOB_BYTES)
    return UNKNOWN_JOB


def _named(value: Optional[str]) -> Optional[str]:
    """``value`` stripped, or ``None`` when absent or blank."""
    if value is None:
        return None
    value = value.strip()
    return value or None


def truncate_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 form fits in ``max_bytes``."""
    raw = text.encode("utf-8", "replace")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", "ignore")


def _get(environ: Mapping[str, str], key: str) -> Optional[str]:
    """``environ[key]``, or ``None`` when absent or not valid UTF-8.

    The agent skips entries that are not UTF-8; Python decodes them with
    surrogate escapes, so such a value is treated as absent here too.
    """
    value = environ.get(key)
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def _unsigned(value: Optional[str], maximum: int) -> Optional[int]:
    if value is None:
        return None
    value = value.strip()
    if not _UNSIGNED.fullmatch(value):
        return None
    number = int(value)
    return number if number <= maximum else None
