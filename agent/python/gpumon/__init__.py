"""gpumon's in-process hook: allocator statistics, steps and actions for the local agent.

Call :func:`init` once in every training process (``gpumon run`` and
``gpumon profile`` do it for you), then, optionally, mark what the agent
cannot see from outside::

    import gpumon

    gpumon.init()                      # reads RANK, WORLD_SIZE, ...; rank 0 of 1 in a plain python
    gpumon.watch(model)                # times the "forward" section
    gpumon.on_alert(lambda a: print(a["severity"], a["message"]))
    gpumon.analyze_model(model, optimizer)   # bytes by module and dtype, NaN/Inf counts
    for batch in loader:
        with gpumon.section("data"):
            batch = batch.cuda()
        loss = model(batch)
        with gpumon.section("backward"):
            loss.backward()
        optimizer.step()               # a step boundary (global optimizer hook)
        if step % 100 == 0:
            gpumon.check_finite(model)     # counts NaN/Inf, reports them when any

Every function here never raises into the training loop (except
``TypeError`` for arguments of the wrong type); when the hook is off they
send nothing. One daemon thread does all the I/O; actions the agent sends
(release the allocator's cache) and its alerts reach the training thread at
the next step boundary. For hung jobs that thread also reports when the
training thread has finished no step for a while (a ``stall`` record, saying
which collective it waits in) and writes the evidence the agent asks for
(``dump_evidence``) itself, without waiting for a boundary.
See ``README.md`` beside this package for the details, and ``PROTOCOL.md``
for the wire format.
"""

from typing import Any, Callable, Dict, Optional

from . import testing
from ._memory import TorchMemorySource
from ._runtime import RUNTIME as _RUNTIME
from ._settings import HOOK_VERSION as __version__
from ._torch_hooks import WatchHandle

__all__ = [
    "init",
    "step",
    "section",
    "watch",
    "mark",
    "snapshot",
    "on_action",
    "on_alert",
    "analyze_model",
    "check_finite",
    "save_allocator_snapshot",
    "shutdown",
    "stats",
    "TorchMemorySource",
    "WatchHandle",
    "testing",
    "__version__",
]


def init(memory_source: Any = None, agent: Optional[str] = None) -> bool:
    """Starts the hook in this process; returns whether it is active.

    Reads the rank from the launcher's variables (torchrun's ``RANK``,
    ``LOCAL_RANK``, ``WORLD_SIZE`` and job id ``TORCHELASTIC_RUN_ID``, else
    ``MASTER_ADDR:MASTER_PORT``; Open MPI's, MPICH's or Slurm's). Without a
    launcher the process is rank 0 of a world of 1, in the job that
    ``GPUMON_JOB`` names, else in job ``pid-<PID>``. Connects to the agent at
    ``agent`` (``"unix:PATH"`` or loopback ``"HOST:PORT"``), else
    ``GPUMON_AGENT``, else the default socket, from one daemon thread that
    reports every ``GPUMON_REPORT_INTERVAL`` seconds (default 1).
    ``memory_source`` defaults to :class:`TorchMemorySource` when torch is
    installed (see :mod:`gpumon._memory` for the interface). With
    ``GPUMON_SNAPSHOT_DIR`` set it also records the allocator's history for
    :func:`save_allocator_snapshot` and saves a snapshot on an out-of-memory
    error, once the script has initialised CUDA.

    It returns ``False`` (with one log line) only when the agent's address
    is not usable, when a parent process already reports this rank, or when
    something unexpected fails; it never raises but ``TypeError``. Calling
    it again is harmless: no second thread starts, and a given
    ``memory_source`` replaces the current one.
    """
    return _RUNTIME.init(memory_source=memory_source, agent=agent)


def step() -> None:
    """Marks a step boundary by hand.

    The first call switches off the automatic boundary of the optimizer hook,
    so a step is never counted twice. Steps count from 1; a step lasts from
    the previous boundary (the first: from the first section, else from
    :func:`init`). Pending actions run here.
    """
    _RUNTIME.step()


def section(name: str) -> Any:
    """A context manager that adds the time spent inside to section ``name``
    of the current step (summed when entered several times).

    Once the script has initialised CUDA, the time is the GPU's, from CUDA
    events read a few steps later without waiting; before that, or without a
    GPU, it is ``perf_counter``'s. Each step record says which (``clock``).
    """
    return _RUNTIME.section(name)


def watch(model: Any) -> WatchHandle:
    """Times every forward of ``model`` (a ``torch.nn.Module``) as the
    ``"forward"`` section; returns a handle whose ``remove()`` stops it.
    Watch the top-level model only: nested watched modules are counted once."""
    return _RUNTIME.watch(model)


def mark(name: str, detail: Any = None) -> None:
    """Sends an ``event`` record (e.g. ``"eval start"``) with optional detail text.

    ``name`` is also remembered until the next step boundary: a ``stall``
    record sent meanwhile names it as the rank's ``marker``."""
    _RUNTIME.mark(name, detail)


def snapshot(name: str) -> Optional[Dict[str, Any]]:
    """Sends a ``snapshot`` record with the allocator's statistics read now,
    in the calling thread; returns those statistics (``None`` if unknown)."""
    return _RUNTIME.snapshot(name)


def on_action(fn: Callable[[Dict[str, Any]], Any]) -> Callable[[Dict[str, Any]], Any]:
    """Registers ``fn(action)``, called with ``{"id", "kind", "reason"}`` at the
    step boundary where an action is about to run, before it runs.

    What ``fn`` returns (if not ``None``) is sent as text in the action's
    acknowledgement; exceptions are logged and ignored. Usable as a decorator.
    """
    return _RUNTIME.on_action(fn)


def on_alert(fn: Callable[[Dict[str, Any]], Any]) -> Callable[[Dict[str, Any]], Any]:
    """Registers ``fn(alert)``, called in the training thread at the next step
    boundary after the agent sends an alert about this job or rank (in a
    cluster, the coordinators' alerts about this node; under ``gpumon
    profile``, its engine's), once per alert and severity.

    ``alert`` has ``kind`` (e.g. ``"memory_level"``, ``"oom_predicted"``,
    ``"leak"``, ``"straggler"``), ``severity`` (``"critical"``,
    ``"warning"`` or ``"info"``), ``message``, ``job``, ``rank`` (``None``
    when it is about the whole job, the node's host RAM or a GPU with no
    known rank) and ``t`` (seconds since the epoch).
    What ``fn`` returns is ignored; exceptions are logged and ignored. At
    most 64 alerts wait for a boundary (the oldest are dropped and counted
    in :func:`stats`). Usable as a decorator.
    """
    return _RUNTIME.on_alert(fn)


def analyze_model(model: Any, optimizer: Any = None) -> Dict[str, Any]:
    """What ``model`` (a ``torch.nn.Module``) and ``optimizer`` hold, and
    reports a summary as an ``event`` named ``model``.

    Returns element and byte counts (``{"tensors", "elements", "bytes"}``) of
    ``params`` (split into ``trainable`` and ``frozen``), ``grads`` and
    ``optimizer_state``; ``total_bytes``; the same by top-level module
    (``by_module``: the model's named children, ``"(root)"`` for parameters
    set on the model itself) and by dtype (``by_dtype``); and ``nonfinite``:
    NaN and Inf counts in parameters and gradients, with the tensors holding
    any. Tied or shared tensors count once. Meta and sparse tensors are
    sized from their metadata and parts; what cannot be read is counted in
    ``skipped`` or ``nonfinite["unchecked"]`` and logged once. Raises only
    ``TypeError`` for a ``model`` without ``named_parameters`` or an
    ``optimizer`` without ``state``.
    """
    return _RUNTIME.analyze_model(model, optimizer)


def check_finite(model: Any) -> Dict[str, Any]:
    """Counts NaN and Inf values in the parameters and gradients of ``model``;
    cheap enough to call every few steps.

    One reduction per tensor (its norm, fused per device and dtype where
    torch can) and one read per device; exact counts only for tensors that
    hold any. Returns ``{"params": {"nan", "inf"}, "grads": {"nan", "inf"},
    "tensors", "where", "unchecked"}`` and reports an ``event`` named
    ``nonfinite`` when it found any. Raises only ``TypeError``, for a
    ``model`` without ``named_parameters``.
    """
    return _RUNTIME.check_finite(model)


def save_allocator_snapshot(path: Any = None) -> Optional[str]:
    """Saves PyTorch's allocator snapshot (``torch.cuda.memory._snapshot()``,
    pickled as ``_dump_snapshot`` does; open it at pytorch.org/memory_viz).

    Writes to ``path``, else to a new ``allocator-<job>-rank<R>-<n>.pickle``
    in ``GPUMON_SNAPSHOT_DIR`` (or the current directory); returns where, and
    reports an ``event`` named ``allocator_snapshot`` with the path. Returns
    ``None`` and logs why (once) when the process has no CUDA memory to
    show: no torch, no CUDA, or CUDA not initialised yet. Raises only
    ``TypeError`` for a ``path`` that is not a string or path.
    """
    return _RUNTIME.save_allocator_snapshot(path)


def shutdown(timeout_s: Optional[float] = None) -> None:
    """Sends what is queued and stops the reporter thread (waits at most
    ``timeout_s``, default 1 s). Registered with ``atexit`` by :func:`init`."""
    _RUNTIME.shutdown(timeout_s)


def stats() -> Dict[str, Any]:
    """The hook's own counters: steps, queued and dropped records, reports sent,
    the clock in use (``"cuda"`` or ``"cpu"``), steps waiting for the GPU, the
    step records sent on each clock (``steps_cuda``, ``steps_cpu``: a step
    whose events the GPU had not reached while too many steps waited goes
    out on the CPU clock), the ``stall`` records built (``stalls_reported``),
    whether the rank is stalled now (``stalled``), the evidence dumps
    written (``evidence_dumps``), ..."""
    return _RUNTIME.stats()
