"""Limits and timings of the hook, written once.

The limits mirror the agent's (see ``PROTOCOL.md``): a report the agent would
refuse is never built. They are written once in Rust (``core/src/limits.rs``
and the agent's hook endpoint); the agent's test ``python_limits`` reads this
file and fails when a number here differs. The timings have documented defaults; the user knobs
are the report interval (``GPUMON_REPORT_INTERVAL``), the clock that times
sections and steps (``GPUMON_SECTION_CLOCK``) and where evidence of a hang is
written (``GPUMON_DUMP_DIR``). Tests build a :class:`Settings` by hand to
shorten the retry timings and the stall thresholds instead of sleeping.
"""

import logging
import math
from dataclasses import dataclass
from typing import Optional

logger = logging.getLogger("gpumon")

#: Version of the hook protocol spoken (``"v"`` in every request).
PROTOCOL_VERSION = 1
#: Version of this package, sent in ``register``.
HOOK_VERSION = "0.1.0"

#: Most records in one ``report`` (the agent's limit).
MAX_RECORDS_PER_REPORT = 1024
#: Longest line either side may send, bytes (the agent's limit).
MAX_LINE_BYTES = 1 << 20
#: Largest ``report`` line the hook builds, bytes: well under the line limit.
MAX_REPORT_BYTES = 768 * 1024
#: Records the training thread may queue between two reports; past it the
#: oldest are dropped and counted.
QUEUE_MAXLEN = 4096
#: Action acknowledgements waiting to be sent (actions are rare).
ACK_QUEUE_MAXLEN = 1024
#: Actions waiting for the training thread's next step boundary; past it a
#: new one is failed at once (an agent hands out a few per rank at most).
ACTION_QUEUE_MAXLEN = 64
#: Longest marker, snapshot or section name, bytes (the agent's limit);
#: longer ones are cut.
MAX_LABEL_BYTES = 128
#: Longest event detail or action response, bytes (the agent's limit).
MAX_DETAIL_BYTES = 1024
#: Most sections in one step record (the agent's limit).
MAX_SECTIONS = 32
#: Most bytes of a device or of a cap on it the agent takes (1 PiB).
MAX_DEVICE_BYTES = 1 << 50
#: Records older than this are not sent: the agent refuses ``t`` more than
#: 300 s from its clock, and a margin covers the time in flight.
MAX_RECORD_AGE_S = 290.0

#: Default seconds between two reports (``GPUMON_REPORT_INTERVAL``).
DEFAULT_REPORT_INTERVAL_S = 1.0
#: Shortest report interval accepted, seconds.
MIN_REPORT_INTERVAL_S = 0.01
#: Longest report interval accepted, seconds: the agent closes a session
#: that sends nothing for five times this (``SESSION_IDLE``).
MAX_REPORT_INTERVAL_S = 60.0
#: Timeout of every socket operation, seconds: a stuck agent never hangs us.
IO_TIMEOUT_S = 2.0
#: First wait before reconnecting to an unreachable agent, seconds.
RETRY_INITIAL_S = 1.0
#: Longest wait between two reconnection attempts, seconds.
RETRY_MAX_S = 30.0
#: How long :func:`gpumon.shutdown` waits for the last report, seconds.
SHUTDOWN_TIMEOUT_S = 1.0

#: Values of ``GPUMON_SECTION_CLOCK``: ``auto`` times with CUDA events once
#: the script has initialised CUDA, ``cuda`` does the same and warns while it
#: cannot, ``cpu`` always reads ``perf_counter``.
SECTION_CLOCKS = ("auto", "cuda", "cpu")
#: Steps whose CUDA events may wait for the GPU; past it the oldest is sent
#: with its CPU-clock times. A GPU-bound loop that never waits for the GPU
#: runs ahead of it until CUDA's launch queue is full (about a thousand
#: launches), so a step of a few dozen kernels can be tens of steps ahead:
#: with 8, nearly every step of such a loop went out on the CPU clock (seen
#: on an H100 by ``scripts/gpu-check``). A step holds one event, two per
#: timed section entry.
MAX_PENDING_STEPS = 128
#: Timed section entries per step on the CUDA clock; past it the step is
#: sent with its CPU-clock times.
MAX_EVENT_PAIRS_PER_STEP = 64
#: Finished CUDA events kept for reuse.
EVENT_POOL_MAX = 256

#: A rank that has finished a step and none since for this long, seconds, at
#: least, is stalled (``_stall``) ...
STALL_MIN_S = 15.0
#: ... or for this many times the median of its last steps, if longer.
STALL_STEP_FACTOR = 3.0
#: Steps whose durations give that median.
STALL_STEPS = 16
#: Seconds between two ``stall`` records while a stall lasts.
STALL_REPEAT_S = 10.0
#: Process groups named in a ``stall`` record's ``entered``, the most recent.
MAX_STALL_GROUPS = 16
#: Longest quiet, wait or timeout a ``stall`` record carries, seconds (the
#: agent's limit: 30 days); longer ones are cut, a longer timeout is ``null``.
MAX_STALL_S = 2_592_000.0
#: Process groups the collective wrappers count calls in.
MAX_TRACKED_GROUPS = 64
#: Process groups a step record's ``waits`` names, those waited in longest.
MAX_STEP_WAITS = 8
#: Collectives a step record lists one by one (``collectives``), its first.
MAX_STEP_COLLECTIVES = 32
#: ``TORCH_FR_BUFFER_SIZE`` the hook sets when nobody did: torch's flight
#: recorder then keeps the last this many collectives of each backend.
FLIGHT_RECORDER_ENTRIES = 2000
#: Largest flight recorder dump parsed or written, bytes.
MAX_FR_DUMP_BYTES = 16 << 20
#: Longest wait for one flight recorder dump, seconds; past it the hook
#: stops asking (a dump stuck in the communication library).
FR_DUMP_TIMEOUT_S = 5.0
#: Evidence dumps (``dump_evidence`` actions) carried out per process.
MAX_EVIDENCE_DUMPS = 4
#: Largest stacks file of an evidence dump, bytes.
MAX_STACKS_BYTES = 1 << 20


@dataclass(frozen=True)
class Settings:
    """Timings (in seconds) and the section clock of one hook instance."""

    report_interval_s: float = DEFAULT_REPORT_INTERVAL_S
    io_timeout_s: float = IO_TIMEOUT_S
    retry_initial_s: float = RETRY_INITIAL_S
    retry_max_s: float = RETRY_MAX_S
    shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S
    #: One of :data:`SECTION_CLOCKS`.
    section_clock: str = "auto"
    #: Time the step's data, forward, backward and optimizer by itself
    #: (``_anatomy``); ``GPUMON_ANATOMY=0`` turns it off.
    anatomy: bool = True
    #: Stall thresholds: see :data:`STALL_MIN_S` and the constants after it.
    stall_min_s: float = STALL_MIN_S
    stall_step_factor: float = STALL_STEP_FACTOR
    stall_repeat_s: float = STALL_REPEAT_S
    #: Where ``dump_evidence`` writes (``GPUMON_DUMP_DIR``); ``None``: a
    #: per-user directory in the temporary directory (``_evidence``).
    dump_dir: Optional[str] = None

    @classmethod
    def from_env(cls, environ) -> "Settings":
        """Defaults, with ``GPUMON_REPORT_INTERVAL`` (seconds),
        ``GPUMON_SECTION_CLOCK``, ``GPUMON_ANATOMY`` and ``GPUMON_DUMP_DIR``
        when they are valid."""
        return cls(
            report_interval_s=_report_interval(environ),
            section_clock=_section_clock(environ),
            anatomy=environ.get("GPUMON_ANATOMY", "").strip().lower() not in ("0", "off", "false", "no"),
            dump_dir=(environ.get("GPUMON_DUMP_DIR") or "").strip() or None,
        )


def _report_interval(environ) -> float:
    raw = environ.get("GPUMON_REPORT_INTERVAL")
    if raw is None or not raw.strip():
        return DEFAULT_REPORT_INTERVAL_S
    try:
        interval = float(raw)
    except ValueError:
        interval = float("nan")
    if not math.isfinite(interval) or interval <= 0:
        logger.warning(
            "gpumon: GPUMON_REPORT_INTERVAL=%r is not a positive number of seconds; using %.1f",
            raw,
            DEFAULT_REPORT_INTERVAL_S,
        )
        return DEFAULT_REPORT_INTERVAL_S
    if interval > MAX_REPORT_INTERVAL_S:
        logger.warning(
            "gpumon: GPUMON_REPORT_INTERVAL=%r is over the agent's limit; using %.0f s",
            raw,
            MAX_REPORT_INTERVAL_S,
        )
        return MAX_REPORT_INTERVAL_S
    return max(interval, MIN_REPORT_INTERVAL_S)


def _section_clock(environ) -> str:
    raw = environ.get("GPUMON_SECTION_CLOCK")
    if raw is None or not raw.strip():
        return "auto"
    clock = raw.strip().lower()
    if clock not in SECTION_CLOCKS:
        logger.warning("gpumon: GPUMON_SECTION_CLOCK=%r is not auto, cuda or cpu; using auto", raw)
        return "auto"
    return clock
