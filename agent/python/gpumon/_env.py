"""Who this process is in its torchrun job, read from torchrun's variables.

The agent finds the same answer in ``/proc/PID/environ`` and refuses a
``register`` that claims another job or rank, so this module follows the
agent's rule (``agent/src/discovery.rs``) to the letter:

- ``RANK`` and ``WORLD_SIZE`` must be unsigned integers with
  ``RANK < WORLD_SIZE <= 2**20``; otherwise this is not a torchrun worker.
- ``LOCAL_RANK`` defaults to 0 when absent or invalid.
- The job is ``TORCHELASTIC_RUN_ID`` when it is set, not empty and not
  ``none`` (torchrun's default id, which names nothing); else
  ``MASTER_ADDR:MASTER_PORT`` (an IPv6 address in brackets) when both are
  set; else ``unknown-job``. It is cut to 256 bytes.
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
    """The torchrun identity in ``environ``, or ``None`` outside torchrun."""
    rank = _unsigned(_get(environ, "RANK"), 0xFFFFFFFF)
    world_size = _unsigned(_get(environ, "WORLD_SIZE"), 0xFFFFFFFF)
    if rank is None or world_size is None:
        return None
    if world_size > MAX_WORLD_SIZE or rank >= world_size:
        return None
    local_rank = _unsigned(_get(environ, "LOCAL_RANK"), 0xFFFFFFFF)
    if local_rank is None or local_rank >= world_size:
        local_rank = 0
    return Identity(
        job=job_id(environ),
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
    )


def job_id(environ: Mapping[str, str]) -> str:
    """The job id, by the rule in this module's docstring."""
    run_id = (_get(environ, "TORCHELASTIC_RUN_ID") or "").strip()
    if run_id and not (run_id.isascii() and run_id.lower() == "none"):
        return truncate_utf8(run_id, MAX_JOB_BYTES)
    addr = truncate_utf8((_get(environ, "MASTER_ADDR") or "").strip(), MAX_JOB_BYTES)
    port = _unsigned(_get(environ, "MASTER_PORT"), 0xFFFF)
    if addr and port:
        if ":" in addr and not addr.startswith("["):
            addr = "[" + addr + "]"
        return truncate_utf8("%s:%d" % (addr, port), MAX_JOB_BYTES)
    return UNKNOWN_JOB


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
