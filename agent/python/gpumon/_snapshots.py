"""Allocator snapshots: PyTorch's own record of the caching allocator, saved
where the user can open it (https://pytorch.org/memory_viz).

A snapshot (``torch.cuda.memory._snapshot()``) lists every segment the
allocator holds and every block in it, live or cached, and, while history
recording is on, the last allocations and frees. It is pickled exactly as
``torch.cuda.memory._dump_snapshot`` does, to
``allocator-<job>-rank<R>-<n>.pickle`` in ``GPUMON_SNAPSHOT_DIR`` (or the
current directory), and an ``allocator_snapshot`` event carries the path.

With ``GPUMON_SNAPSHOT_DIR`` set, the hook also switches history recording
on (without stack traces unless ``GPUMON_SNAPSHOT_STACKS=1``; at most
``GPUMON_SNAPSHOT_MAX_ENTRIES`` entries) and saves a snapshot by itself when
the allocator runs out of memory, through torch's out-of-memory observer.
Both wait until the script has initialised CUDA, checked at ``init`` and
then at every step boundary: ``_record_memory_history`` would initialise
CUDA itself, which the hook never does (it would pin a device before the
script chose one and break a later ``fork``), and the observer attaches
only to devices that exist by then. Allocations made before that point are
in the snapshot's segments, not in its history.
"""

import logging
import os
import pickle
import re
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ._env import Identity
from ._memory import initialised_torch
from ._once import LogOnce

logger = logging.getLogger("gpumon")

#: Where snapshots go; set, it also turns history recording on.
SNAPSHOT_DIR_VAR = "GPUMON_SNAPSHOT_DIR"
#: ``1``: record Python stack traces with the history (costs time and size).
SNAPSHOT_STACKS_VAR = "GPUMON_SNAPSHOT_STACKS"
#: Most alloc/free events kept in the history ring.
SNAPSHOT_MAX_ENTRIES_VAR = "GPUMON_SNAPSHOT_MAX_ENTRIES"
#: Default of :data:`SNAPSHOT_MAX_ENTRIES_VAR`: without stacks an entry is
#: about a hundred bytes, so the ring stays around 10 MB.
DEFAULT_MAX_ENTRIES = 100_000
#: Snapshots saved on out-of-memory errors, per process: a script that
#: catches the error and goes on must not fill the disk.
MAX_OOM_SNAPSHOTS = 3
#: Name of the event that reports a saved snapshot.
EVENT_NAME = "allocator_snapshot"
#: Name of the event that reports an out-of-memory error (what the agent
#: and ``gpumon profile`` read as "this rank ran out of GPU memory").
OOM_EVENT_NAME = "out_of_memory"
#: Out-of-memory events sent per process; later errors are only counted.
MAX_OOM_EVENTS = 16
#: Longest job id used in a file name, characters.
MAX_JOB_IN_NAME = 96
#: Numbers tried past the counter before giving up on a free file name.
MAX_NAME_ATTEMPTS = 1000

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class SnapshotSettings:
    """What the environment asks of allocator snapshots."""

    directory: Optional[str] = None
    stacks: bool = False
    max_entries: int = DEFAULT_MAX_ENTRIES

    @classmethod
    def from_env(cls, environ) -> "SnapshotSettings":
        directory = (environ.get(SNAPSHOT_DIR_VAR) or "").strip() or None
        stacks = (environ.get(SNAPSHOT_STACKS_VAR) or "").strip() not in ("", "0")
        raw = (environ.get(SNAPSHOT_MAX_ENTRIES_VAR) or "").strip()
        max_entries = DEFAULT_MAX_ENTRIES
        if raw:
            if raw.isdigit() and 0 < int(raw) <= 1 << 31:
                max_entries = int(raw)
            else:
                logger.warning(
                    "gpumon: %s=%r is not a count between 1 and 2**31; using %d",
                    SNAPSHOT_MAX_ENTRIES_VAR,
                    raw,
                    DEFAULT_MAX_ENTRIES,
                )
        return cls(directory=directory, stacks=stacks, max_entries=max_entries)


def file_name(identity: Identity, number: int) -> str:
    """``allocator-<job>-rank<R>-<n>.pickle``, the job made safe for a file name."""
    job = _UNSAFE.sub("_", identity.job)[:MAX_JOB_IN_NAME] or "job"
    return "allocator-%s-rank%d-%d.pickle" % (job, identity.rank, number)


class AllocatorSnapshots:
    """Saving snapshots, and the recording and OOM observer behind them.

    ``saved(path)`` is called after each save and ``oom(detail)`` on each
    out-of-memory error the observer sees, up to :data:`MAX_OOM_EVENTS`
    (the runtime queues the events there). Every method returns or logs;
    none raises.
    """

    def __init__(self, saved: Callable[[str], None], oom: Optional[Callable[[str], None]] = None):
        self._saved = saved
        self._oom = oom
        self._ooms = 0
        self._settings = SnapshotSettings()
        self._identity: Optional[Identity] = None
        self._lock = threading.Lock()
        self._number = 0
        self._oom_saves = 0
        self._log = LogOnce()
        #: True while recording waits for the script to initialise CUDA.
        self.waiting = False

    def configure(self, settings: SnapshotSettings, identity: Identity) -> None:
        """Takes the settings; recording starts at the first :meth:`probe`
        that finds CUDA initialised."""
        self._settings = settings
        self._identity = identity
        self.waiting = settings.directory is not None

    def probe(self) -> None:
        """Training thread: once CUDA is initialised, starts recording and
        attaches the OOM observer (once)."""
        torch = initialised_torch()
        if torch is None:
            return
        self.waiting = False
        try:
            self._record_history(torch)
        except Exception as e:
            self._log.log("history", logging.WARNING, "gpumon: cannot record the allocator's history: %s", e)
        try:
            _attach_oom_observer(torch, self)
        except Exception as e:
            self._log.log("observer", logging.WARNING, "gpumon: cannot watch for out-of-memory errors: %s", e)

    def _record_history(self, torch: Any) -> None:
        record = getattr(getattr(torch.cuda, "memory", None), "_record_memory_history", None)
        if record is None:
            raise RuntimeError("this torch has no torch.cuda.memory._record_memory_history")
        settings = self._settings
        try:
            record(
                enabled="all",
                context="all" if settings.stacks else None,
                stacks="python",
                max_entries=settings.max_entries,
            )
        except TypeError:
            # torch 2.0: record_memory_history(enabled: bool, ...).
            record(
                True,
                record_context=settings.stacks,
                trace_alloc_max_entries=settings.max_entries,
                trace_alloc_record_context=settings.stacks,
            )
        logger.info(
            "gpumon: recording the allocator's last %d allocations (%s); snapshots go to %s",
            settings.max_entries,
            "with Python stacks" if settings.stacks else "no stacks",
            settings.directory,
        )

    def save(self, path: Optional[str], identity: Identity, settings: SnapshotSettings) -> Optional[str]:
        """Saves a snapshot to ``path`` (else a new file named by
        :func:`file_name` in the settings' directory or the current one);
        returns where, or ``None`` after logging why (once per reason)."""
        torch = sys.modules.get("torch")
        why = _why_not(torch)
        if why is not None:
            self._log.log("why:" + why, logging.WARNING, "gpumon: no allocator snapshot: %s", why)
            return None
        try:
            snapshot = torch.cuda.memory._snapshot()
        except Exception as e:
            self._log.log("read", logging.WARNING, "gpumon: reading the allocator snapshot failed: %s", e)
            return None
        try:
            where = self._write(snapshot, path, identity, settings)
        except OSError as e:
            self._log.log("write", logging.WARNING, "gpumon: writing the allocator snapshot failed: %s", e)
            return None
        self._saved(where)
        return where

    def _write(
        self, snapshot: Any, path: Optional[str], identity: Identity, settings: SnapshotSettings
    ) -> str:
        if path is not None:
            with open(path, "wb") as f:
                pickle.dump(snapshot, f)
            return path
        directory = settings.directory or os.getcwd()
        os.makedirs(directory, exist_ok=True)
        with self._lock:
            for _ in range(MAX_NAME_ATTEMPTS):
                self._number += 1
                where = os.path.join(directory, file_name(identity, self._number))
                try:
                    fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    continue
                break
            else:
                raise FileExistsError("no free snapshot file name in %s" % directory)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(snapshot, f)
        except BaseException:
            _remove(where)
            raise
        return where

    def on_oom(self, device: Any, alloc: Any, device_allocated: Any, device_free: Any) -> None:
        """torch's out-of-memory observer: saves one snapshot (at most
        :data:`MAX_OOM_SNAPSHOTS` per process)."""
        identity = self._identity
        if identity is None:
            return
        with self._lock:
            self._ooms += 1
            tell = self._ooms <= MAX_OOM_EVENTS
        if tell and self._oom is not None:
            self._oom("device %s: asked for %s bytes, %s free" % (device, alloc, device_free))
        with self._lock:
            if self._oom_saves >= MAX_OOM_SNAPSHOTS:
                return
            self._oom_saves += 1
            last = self._oom_saves == MAX_OOM_SNAPSHOTS
        where = self.save(None, identity, self._settings)
        if where is not None:
            logger.warning(
                "gpumon: CUDA out of memory on device %s (asked for %s bytes, %s free); "
                "allocator snapshot saved to %s%s",
                device,
                alloc,
                device_free,
                where,
                " (the last one saved for an out-of-memory error)" if last else "",
            )


def _why_not(torch: Any) -> Optional[str]:
    """Why no snapshot can be read now, or ``None``."""
    if torch is None:
        return "torch is not imported in this process"
    if initialised_torch() is None:
        try:
            available = bool(torch.cuda.is_available())
        except Exception:
            available = False
        if not available:
            return "CUDA is not available in this process"
        return "this process has not initialised CUDA yet (nothing is on a GPU)"
    if getattr(getattr(torch.cuda, "memory", None), "_snapshot", None) is None:
        return "this torch has no torch.cuda.memory._snapshot"
    return None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# torch keeps every observer attached for the life of the process: attach
# one, which calls whichever AllocatorSnapshots is current.
_observer_target: Optional[AllocatorSnapshots] = None
_attached_with: Any = None


def _attach_oom_observer(torch: Any, target: AllocatorSnapshots) -> None:
    global _observer_target, _attached_with
    _observer_target = target
    attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        raise RuntimeError("this torch has no torch._C._cuda_attach_out_of_memory_observer")
    if attach is not _attached_with:
        attach(_observe_oom)
        _attached_with = attach


def _observe_oom(device: Any, alloc: Any, device_allocated: Any, device_free: Any) -> None:
    target = _observer_target
    if target is None:
        return
    try:
        target.on_oom(device, alloc, device_allocated, device_free)
    except Exception:  # never into the allocator
        logger.debug("gpumon: the out-of-memory observer failed", exc_info=True)
