"""The hook's state in one process: ``init``, the training-thread calls, ``shutdown``.

The training thread only ever does cheap things here: read the clock, append
a tuple to a bounded deque, check a flag. Everything else (sampling, socket
I/O, retries) happens in the reporter thread (``_reporter``). At a step
boundary with actions pending, the actions run here, in the training thread,
because ``empty_cache`` must not race the script's own allocations; their
acks go back through a deque. Alerts from the agent reach the ``on_alert``
callbacks at the same point (``_alerts``).

A process without launcher variables is rank 0 of a world of 1 in the job
``GPUMON_JOB`` names, else in job ``pid-<PID>`` (``_env``). Model analysis
(``_model``) and allocator snapshots (``_snapshots``) report through the
same queue as markers.

Sections and steps are timed with ``perf_counter`` and, once the script has
initialised CUDA, also with CUDA events (``_timing``): a step's record then
waits, in the timeline, until the GPU has run past its events. On the CPU
clock, the time the training thread blocks in collectives (``_collectives``)
is taken out of the sections it fell in and reported as ``comm_wait``,
and per process group as the step's ``waits`` (``_waits``).

For hung jobs the training thread also leaves, at each boundary, when the
step ended and how long it took, and the wrappers which collective it is in
(``_stall.CollectiveLog``); the reporter thread reads them to report a
stall, and dumps evidence (``_evidence``) without waiting for a boundary.
``init`` turns torch's flight recorder on first (``_flight``).
"""

import atexit
import collections
import logging
import os
import sys
import threading
import time
import weakref
from time import perf_counter
from typing import Any, Callable, Dict, List, MutableMapping, Optional, Set

from . import _collectives, _flight, _torch_hooks
from ._peers import PeerGroups, Where
from ._anatomy import DISCOVERY_STEPS, Anatomy
from ._actions import run_action
from ._address import resolve_address
from . import _model
from ._alerts import AlertInbox
from ._env import Identity, read_identity, standalone_identity
from ._evidence import KIND as EVIDENCE_KIND
from ._evidence import Evidence
from ._flight import FlightRecorder
from ._memory import check_source, default_memory_source, read_alloc_fields
from ._records import ack_message
from ._reporter import Reporter
from ._settings import ACK_QUEUE_MAXLEN, ACTION_QUEUE_MAXLEN, QUEUE_MAXLEN, STALL_STEPS, Settings
from ._snapshots import EVENT_NAME as SNAPSHOT_EVENT
from ._snapshots import OOM_EVENT_NAME
from ._snapshots import AllocatorSnapshots, SnapshotSettings
from ._stall import CollectiveLog, Progress, StallWatch, group_of
from ._timing import CudaTimeline, cuda_clock
from ._waits import GroupWaits, StepCollectives

logger = logging.getLogger("gpumon")

#: Names of explicit sections remembered (they are never timed automatically).
MAX_EXPLICIT_NAMES = 64
#: Nested explicit sections followed at most (for the collective waits inside).
MAX_OPEN_SECTIONS = 16

#: Set by an active hook to ``PID:RANK:JOB``. A process that inherits it with
#: the same job and rank but another PID is a helper of that rank (a DataLoader
#: or compile worker, a subprocess) and stays quiet instead of competing for
#: the rank's session.
OWNER_VAR = "GPUMON_HOOK_OWNER"


class _Section:
    """``with gpumon.section(name):`` adds the time inside to the step's ``name``."""

    __slots__ = ("_runtime", "_name", "_t0", "_event")

    def __init__(self, runtime: "Runtime", name: str):
        self._runtime = runtime
        self._name = name
        self._t0 = None
        self._event = None

    def __enter__(self) -> "_Section":
        runtime = self._runtime
        if runtime._step == 0 and not runtime._first_section_seen:
            runtime._first_section_started()
        runtime._explicit_open += 1
        if len(runtime._open_names) < MAX_OPEN_SECTIONS:
            runtime._open_names.append(self._name)
        runtime._explicit(self._name)
        timeline = runtime._timeline
        self._event = timeline.mark() if timeline is not None else None
        self._t0 = perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        t0 = self._t0
        runtime = self._runtime
        if runtime._explicit_open > 0:
            runtime._explicit_open -= 1
        names = runtime._open_names
        if names and names[-1] == self._name:
            names.pop()
        if t0 is not None and runtime._active:
            sections = runtime._sections
            name = self._name
            sections[name] = sections.get(name, 0.0) + (perf_counter() - t0) * 1000.0
            timeline = runtime._timeline
            if timeline is not None:
                timeline.pair(name, self._event)
        return None


class _NoSection:
    """The section of an inactive hook: does nothing."""

    __slots__ = ()

    def __enter__(self) -> "_NoSection":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_SECTION = _NoSection()


class Runtime:
    """One hook: the module-level functions of :mod:`gpumon` use a single instance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = False
        #: The automatic sections, once torch's optimizer module is imported.
        self._anatomy: Optional[Anatomy] = None
        #: What ``_collectives`` wrapped (nothing before the anatomy installs).
        self._collectives: List[str] = []
        #: Which ranks do the same work as this one (the wrappers' calls say).
        self._peers = PeerGroups()
        self._identity: Optional[Identity] = None
        self._reporter: Optional[Reporter] = None
        self._source: Any = None
        self._observe: Optional[Callable[[], bool]] = None
        self._records: "collections.deque[tuple]" = collections.deque(maxlen=QUEUE_MAXLEN)
        self._acks: "collections.deque[Dict[str, Any]]" = collections.deque(maxlen=ACK_QUEUE_MAXLEN)
        self._actions: "collections.deque[Dict[str, Any]]" = collections.deque()
        self._actions_pending = False
        self._callbacks: List[Callable[[Dict[str, Any]], Any]] = []
        self._alerts = AlertInbox()
        self._snapshots = AllocatorSnapshots(self._snapshot_saved, self._out_of_memory)
        self._snapshot_settings = SnapshotSettings()
        self._dropped = 0
        self._settings = Settings()
        self._clock_warned = False
        self._recorder = FlightRecorder()
        #: Evidence dumps, counted for the life of the process.
        self._evidence = Evidence(self._recorder)
        self._stall: Optional[StallWatch] = None
        self._reset_steps()
        self._manual = False
        self._primary_optimizer: Any = None
        self._exit_registered = False

    # -- lifecycle -------------------------------------------------------------

    def init(
        self,
        memory_source: Any = None,
        agent: Optional[str] = None,
        *,
        environ: Optional[MutableMapping[str, str]] = None,
        settings: Optional[Settings] = None,
    ) -> bool:
        """See :func:`gpumon.init`. ``environ`` and ``settings`` are for tests."""
        if agent is not None and not isinstance(agent, str):
            raise TypeError("agent must be a str like 'unix:/path' or '127.0.0.1:7000'")
        if memory_source is not None:
            check_source(memory_source)
        with self._lock:
            if self._active:
                if memory_source is not None:
                    self._set_source(memory_source)
                return True
            try:
                return self._start(memory_source, agent, os.environ if environ is None else environ, settings)
            except Exception:
                logger.warning("gpumon: init failed; training goes on without the hook", exc_info=True)
                return False

    def _start(
        self,
        memory_source: Any,
        agent: Optional[str],
        environ: MutableMapping[str, str],
        settings: Optional[Settings],
    ) -> bool:
        identity = read_identity(environ)
        if identity is None:
            identity = standalone_identity(os.getpid())
            logger.info(
                "gpumon: no launcher variables (RANK, WORLD_SIZE, ...) nor GPUMON_JOB; "
                "reporting as rank 0 of a world of 1 in job %r",
                identity.job,
            )
        owner = _owner(environ.get(OWNER_VAR))
        if owner is not None and owner[0] != os.getpid() and owner[1:] == (identity.rank, identity.job):
            logger.info(
                "gpumon: process %d already reports rank %d of job %r; this child of it stays quiet",
                owner[0],
                identity.rank,
                identity.job,
            )
            return False
        try:
            address = resolve_address(agent, environ)
        except ValueError as e:
            logger.warning("gpumon: %s; the hook stays off", e)
            return False
        if _flight.enable(environ):
            logger.debug("gpumon: torch's flight recorder is on (%s)", _flight.BUFFER_VARS[0])
        settings = settings or Settings.from_env(environ)
        self._settings = settings
        self._identity = identity
        self._set_source(memory_source if memory_source is not None else default_memory_source())
        self._records.clear()
        self._acks.clear()
        self._actions.clear()
        self._actions_pending = False
        self._alerts.clear()
        self._dropped = 0
        self._reset_steps()
        self._stall = StallWatch(self._progress, lambda: self._collective_log, settings, self._recorder)
        self._reporter = Reporter(
            address=address,
            identity=identity,
            settings=settings,
            get_source=lambda: self._source,
            records=self._records,
            acks=self._acks,
            deliver=self._deliver_action,
            dropped=lambda: self._dropped,
            deliver_alerts=self._alerts.deliver,
            stall=self._stall,
            run_here={EVIDENCE_KIND: self._dump_evidence},
        )
        self._reporter.start()
        self._active = True
        then = self._install_anatomy if settings.anatomy else None
        try:
            _torch_hooks.install_optimizer_hook(_optimizer_step_hook, then=then)
        except Exception:
            logger.warning(
                "gpumon: could not hook optimizer.step(); call gpumon.step() by hand", exc_info=True
            )
        if not self._exit_registered:
            self._exit_registered = True
            atexit.register(self.shutdown)
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=self._after_fork_in_child)
        self._snapshot_settings = SnapshotSettings.from_env(environ)
        self._snapshots.configure(self._snapshot_settings, identity)
        if self._snapshots.waiting:
            self._snapshots.probe()
        environ[OWNER_VAR] = "%d:%d:%s" % (os.getpid(), identity.rank, identity.job)
        logger.info(
            "gpumon: reporting rank %d of job %r to the agent at %s",
            identity.rank,
            identity.job,
            address,
        )
        return True

    def shutdown(self, timeout_s: Optional[float] = None) -> None:
        """See :func:`gpumon.shutdown`."""
        with self._lock:
            reporter, self._reporter = self._reporter, None
            self._active = False
            timeline, self._timeline = self._timeline, None
        if timeline is not None:
            try:
                timeline.flush()
            except Exception:
                logger.debug("gpumon: sending the steps timed on the GPU failed", exc_info=True)
        if reporter is None:
            return
        if timeout_s is None:
            timeout_s = self._settings.shutdown_timeout_s
        try:
            reporter.stop(timeout_s)
        except Exception:
            logger.debug("gpumon: shutdown failed", exc_info=True)

    def _after_fork_in_child(self) -> None:
        # The reporter thread did not survive the fork; the parent reports.
        # The inherited copy of its connection is closed here, not left to
        # the garbage collector: a DataLoader worker would otherwise hold
        # the parent's session open after the parent died.
        self._lock = threading.Lock()
        self._active = False
        reporter, self._reporter = self._reporter, None
        if reporter is not None:
            try:
                reporter.close_inherited()
            except Exception:
                pass
        self._timeline = None
        self._records.clear()
        self._acks.clear()
        self._actions.clear()
        self._actions_pending = False
        self._alerts.clear()

    def _set_source(self, source: Any) -> None:
        self._source = source
        observe = getattr(source, "observe", None)
        self._observe = observe if callable(observe) else None

    @property
    def active(self) -> bool:
        return self._active

    # -- steps and sections (training thread) ----------------------------------

    def _reset_steps(self) -> None:
        self._step = 0
        self._step_start = perf_counter()
        #: ``(step, perf_counter)`` of the last step's end, set at once.
        self._ended = (0, self._step_start)
        #: Durations of the last steps, ms.
        self._recent_ms: "collections.deque[float]" = collections.deque(maxlen=STALL_STEPS)
        #: The last ``mark`` since the last step, for a ``stall`` record.
        self._marker: Optional[str] = None
        #: The wrapped collective calls of the training thread.
        self._collective_log = CollectiveLog()
        self._first_section_seen = False
        self._sections: Dict[str, float] = {}
        self._forward_depth = 0
        self._forward_t0 = 0.0
        self._forward_event: Any = None
        self._timeline: Optional[CudaTimeline] = None
        self._clock_probe = self._settings.section_clock != "cpu"
        #: Step records queued, by the clock that timed them.
        self._steps_by_clock: Dict[str, int] = {}
        #: The automatic section open now: ``(name, t0, event)``.
        self._auto: Optional[tuple] = None
        #: The thread that ends steps (the training thread), once one has.
        self._train_thread: Optional[int] = None
        #: Explicit sections open now, and the names the script times itself.
        self._explicit_open = 0
        self._explicit_names: Set[str] = set()
        #: Explicit sections open now, innermost last.
        self._open_names: List[str] = []
        #: Collective waits of this step: nesting, start, total ms and the
        #: ms inside each section open meanwhile.
        self._comm_depth = 0
        self._comm_t0 = 0.0
        self._comm_ms = 0.0
        self._comm_in: Dict[str, float] = {}
        #: The same waits per process group, and the group name of the call
        #: timed now (``None``: not counted there).
        self._waits = GroupWaits()
        self._comm_group: Optional[str] = None
        #: This step's collectives one by one, and the entry the call timed
        #: now counts toward (``None``: not listed).
        self._step_collectives = StepCollectives()
        self._arrival: Optional[list] = None
        #: The model is wrapped in DDP: its wait is in backward, unseen here.
        self._ddp = False

    def _first_section_started(self) -> None:
        if self._active:
            self._first_section_seen = True
            if self._clock_probe:
                self._probe_clock()
            self._step_start = perf_counter()

    def step(self) -> None:
        """See :func:`gpumon.step`."""
        self._manual = True
        if self._active:
            self._boundary()

    def _boundary(self) -> None:
        try:
            now = perf_counter()
            step = self._step + 1
            self._step = step
            started = self._step_start
            duration_ms = (now - started) * 1000.0
            self._step_start = now
            self._ended = (step, now)
            self._recent_ms.append(duration_ms)
            self._marker = None
            sections = self._sections
            self._sections = {}
            self._forward_depth = 0
            self._auto = None
            self._explicit_open = 0
            self._open_names.clear()
            waits = self._take_waits()
            listed = self._step_collectives.take(started) if self._timeline is None else None
            if self._comm_ms:
                self._take_out_comm(sections)
            if self._peers.open:
                self._peers.boundary()
            self._train_thread = threading.get_ident()
            if self._anatomy is not None:
                self._anatomy.on_boundary()
                if not self._collectives and step <= DISCOVERY_STEPS:
                    self._install_collectives()
            self._end_step(step, time.time(), duration_ms, sections, waits, listed)
            if self._observe is not None:
                self._observe_device()
            if self._actions_pending:
                self._run_actions(step)
            if self._alerts.pending:
                self._alerts.run()
            if self._snapshots.waiting:
                self._snapshots.probe()
        except Exception:
            logger.warning("gpumon: step boundary failed", exc_info=True)

    def _end_step(
        self,
        step: int,
        t: float,
        duration_ms: float,
        sections: Dict[str, float],
        waits: Optional[Dict[str, list]] = None,
        collectives: Optional[List[list]] = None,
    ) -> None:
        """Queues the step's record, or hands it to the CUDA clock, which
        queues it once the GPU has run past the step's events."""
        timeline = self._timeline
        if timeline is None:
            item: tuple = ("step", t, step, duration_ms, sections, "cpu")
            if collectives:
                item += (waits, collectives)
            elif waits:
                item += (waits,)
            self._queue(item)
            if self._clock_probe:
                self._probe_clock()
        elif not timeline.boundary(step, t, duration_ms, sections):
            self._drop_timeline(timeline)

    def _probe_clock(self) -> None:
        """Starts the CUDA clock once the script has initialised CUDA.

        Asked at the first section or boundary, then at every boundary until
        then, so the first steps of a script that initialises CUDA inside its
        loop are on the CPU clock and the following ones on the GPU's.
        """
        cuda = cuda_clock()
        if cuda is None:
            if self._settings.section_clock == "cuda" and not self._clock_warned:
                self._clock_warned = True
                logger.warning(
                    "gpumon: GPUMON_SECTION_CLOCK=cuda, but this process has not initialised CUDA "
                    "(yet); timing on the CPU clock until it has"
                )
            return
        self._clock_probe = False
        timeline = CudaTimeline(cuda, self._queue)
        if timeline.broken is not None:
            logger.warning("gpumon: cannot record CUDA events (%s); timing on the CPU clock", timeline.broken)
            return
        self._timeline = timeline
        logger.debug("gpumon: timing sections and steps with CUDA events")

    def _drop_timeline(self, timeline: CudaTimeline) -> None:
        self._timeline = None
        timeline.abandon()
        logger.warning(
            "gpumon: timing with CUDA events failed (%s); timing on the CPU clock from now on",
            timeline.broken,
        )

    def _optimizer_step(self, optimizer: Any) -> None:
        if not self._active or self._manual:
            return
        primary = self._primary_optimizer
        current = primary() if primary is not None else None
        if current is None:
            try:
                self._primary_optimizer = weakref.ref(optimizer)
            except TypeError:
                self._primary_optimizer = lambda: optimizer
        elif current is not optimizer:
            return
        self._boundary()

    def section(self, name: str) -> Any:
        """See :func:`gpumon.section`."""
        if not isinstance(name, str):
            raise TypeError("section name must be a str, not %s" % type(name).__name__)
        if not self._active:
            return _NO_SECTION
        return _Section(self, name)

    def watch(self, module: Any) -> _torch_hooks.WatchHandle:
        """See :func:`gpumon.watch`."""
        handle = _torch_hooks.watch_module(module, self._forward_enter, self._forward_exit)
        self._explicit("forward")
        self._note_model(module)
        return handle

    # -- automatic sections (``_anatomy``) ---------------------------------------------

    def _install_anatomy(self, optimizer_module: Any) -> None:
        if self._anatomy is None:
            self._anatomy = Anatomy(self._auto_enter, self._auto_exit, self._note_model)
            self._anatomy.install(optimizer_module)
            self._install_collectives()
            if "forward" in self._explicit_names:
                self._anatomy.forward_off()
            logger.debug("gpumon: automatic sections: %s", ", ".join(self._anatomy.installed) or "none")

    def _explicit(self, name: str) -> None:
        """The script times ``name`` itself: never automatically from now on."""
        names = self._explicit_names
        if name not in names and len(names) < MAX_EXPLICIT_NAMES:
            names.add(name)
            if name == "forward" and self._anatomy is not None:
                self._anatomy.forward_off()

    def _auto_enter(self, name: str) -> bool:
        """Opens automatic section ``name``; false (nothing timed) while the hook
        is off, another automatic or any explicit section is open, the script
        times ``name`` itself, or the call comes from a thread other than the
        one that ends steps (a prefetch or evaluation thread)."""
        if not self._active or self._auto is not None or self._explicit_open or name in self._explicit_names:
            return False
        train = self._train_thread
        if train is not None and threading.get_ident() != train:
            return False
        if self._step == 0 and not self._first_section_seen:
            self._first_section_started()
        timeline = self._timeline
        self._auto = (name, perf_counter(), timeline.mark() if timeline is not None else None)
        return True

    def _install_collectives(self) -> None:
        """Wraps torch.distributed's collectives, once it is imported (tried
        again at the first step boundaries when it was not yet)."""
        try:
            self._collectives = _collectives.install(self._comm_enter, self._comm_exit, self._peers)
        except Exception as e:
            logger.info("gpumon: collective waits are not timed: %s", e)

    def _comm_enter(
        self, where: Optional[Where] = None, args: tuple = (), kwargs: Optional[Dict[str, Any]] = None
    ) -> bool:
        """A collective call begins in the training thread: true when timed.
        The outermost is noted in the collective log, when ``where`` says what
        it is."""
        if not self._active:
            return False
        train = self._train_thread
        if train is not None and threading.get_ident() != train:
            return False
        depth = self._comm_depth
        self._comm_depth = depth + 1
        if depth == 0:
            t0 = self._comm_t0 = perf_counter()
            self._comm_group = None
            self._arrival = None
            if where is not None:
                self._note_call(where, args, kwargs or {}, t0)
        return True

    def _note_call(self, where: Where, args: tuple, kwargs: Dict[str, Any], t0: float) -> None:
        """The outermost call begun at ``t0``, in the collective log, and the
        group its wait counts in."""
        op = where.name
        try:
            group = group_of(op, where, args, kwargs)
            log = self._collective_log
            log.enter(op, group, t0)
            name = self._comm_group = self._waits.name(*log.attributed(op, group))
            current = log.current
            seq = current[2] if current is not None else None
            self._arrival = self._step_collectives.enter(name, seq, op, t0)
        except Exception:
            logger.debug("gpumon: a collective call was not noted", exc_info=True)

    def _comm_exit(self) -> None:
        depth = self._comm_depth - 1
        self._comm_depth = depth if depth > 0 else 0
        if depth != 0:
            return
        self._collective_log.leave()
        t1 = perf_counter()
        ms = (t1 - self._comm_t0) * 1000.0
        if self._arrival is not None:
            StepCollectives.leave(self._arrival, t1, ms)
            self._arrival = None
        self._comm_ms += ms
        if self._comm_group is not None:
            self._waits.add(self._comm_group, ms)
        inside = self._comm_in
        names = set(self._open_names)
        if self._forward_depth > 0:
            names.add("forward")
        if self._auto is not None:
            names.add(self._auto[0])
        for name in names:
            inside[name] = inside.get(name, 0.0) + ms

    def _take_out_comm(self, sections: Dict[str, float]) -> None:
        """Moves the step's collective waits out of its sections into
        ``comm_wait`` (CPU clock only; never under DDP)."""
        if self._timeline is None and not self._ddp:
            for name, ms in self._comm_in.items():
                if name in sections:
                    sections[name] = max(0.0, sections[name] - ms)
            sections[_collectives.SECTION] = sections.get(_collectives.SECTION, 0.0) + self._comm_ms
        self._comm_ms = 0.0
        self._comm_in = {}

    def _take_waits(self) -> Optional[Dict[str, list]]:
        """The step's collective waits per process group, ``{name: [calls,
        ms]}``, on the CPU clock (under DDP too); ``None`` when no call was
        timed or the step is on the CUDA clock."""
        waits = self._waits.take()
        return waits if waits and self._timeline is None else None

    def _note_model(self, module: Any) -> None:
        """An outermost or watched module: DDP hides its wait in backward."""
        if self._ddp:
            return
        ddp = getattr(sys.modules.get("torch.nn.parallel.distributed"), "DistributedDataParallel", None)
        if ddp is not None and isinstance(module, ddp):
            self._ddp = True
            # Its gradient all-reduce runs in C++, unseen by the wrappers:
            # its process group is this rank's replicas.
            self._peers.add_group(getattr(module, "process_group", None))

    def _auto_exit(self, name: str) -> None:
        auto = self._auto
        if auto is None or auto[0] != name:
            return
        self._auto = None
        if self._active:
            sections = self._sections
            sections[name] = sections.get(name, 0.0) + (perf_counter() - auto[1]) * 1000.0
            timeline = self._timeline
            if timeline is not None:
                timeline.pair(name, auto[2])

    def _forward_enter(self) -> None:
        if not self._active:
            return
        depth = self._forward_depth
        self._forward_depth = depth + 1
        if depth == 0:
            if self._step == 0 and not self._first_section_seen:
                self._first_section_started()
            timeline = self._timeline
            self._forward_event = timeline.mark() if timeline is not None else None
            self._forward_t0 = perf_counter()

    def _forward_exit(self) -> None:
        if not self._active or self._forward_depth <= 0:
            return
        self._forward_depth -= 1
        if self._forward_depth == 0:
            sections = self._sections
            sections["forward"] = sections.get("forward", 0.0) + (perf_counter() - self._forward_t0) * 1000.0
            timeline = self._timeline
            if timeline is not None:
                timeline.pair("forward", self._forward_event)

    # -- markers ------------------------------------------------------------------

    def mark(self, name: str, detail: Any = None) -> None:
        """See :func:`gpumon.mark`."""
        if not isinstance(name, str):
            raise TypeError("mark name must be a str, not %s" % type(name).__name__)
        if not self._active:
            return
        self._marker = name
        self._event(name, detail)

    def _event(self, name: str, detail: Any = None) -> None:
        """An ``event`` record of the hook's own (not a marker of the script)."""
        if not self._active:
            return
        if detail is not None and not isinstance(detail, str):
            detail = _text(detail)
        self._queue(("event", time.time(), name, detail))

    def snapshot(self, name: str) -> Optional[Dict[str, Any]]:
        """See :func:`gpumon.snapshot`."""
        if not isinstance(name, str):
            raise TypeError("snapshot name must be a str, not %s" % type(name).__name__)
        if not self._active:
            return None
        fields = None
        try:
            if self._observe is not None:
                self._observe_device()
            fields = read_alloc_fields(self._source)
        except Exception as e:
            logger.warning("gpumon: reading memory stats for snapshot %r failed: %s", name, e)
        self._queue(("snapshot", time.time(), name, fields))
        return dict(fields) if fields is not None else None

    def _queue(self, item: tuple) -> None:
        if item[0] == "step":
            self._steps_by_clock[item[5]] = self._steps_by_clock.get(item[5], 0) + 1
            group = self._peers.key
            if group is not None or len(item) > 6:
                item = item[:6] + (group,) + item[6:]
        records = self._records
        if len(records) == QUEUE_MAXLEN:
            self._dropped += 1
        records.append(item)

    def _observe_device(self) -> None:
        try:
            if self._observe():
                self._observe = None
        except Exception as e:
            self._observe = None
            logger.warning("gpumon: finding the training thread's CUDA device failed: %s", e)

    # -- actions --------------------------------------------------------------------

    def on_action(self, fn: Callable[[Dict[str, Any]], Any]) -> Callable[[Dict[str, Any]], Any]:
        """See :func:`gpumon.on_action`."""
        if not callable(fn):
            raise TypeError("on_action needs a callable, not %s" % type(fn).__name__)
        self._callbacks.append(fn)
        return fn

    def _deliver_action(self, action: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """Reporter thread: queues an action for the next step boundary, or,
        with :data:`ACTION_QUEUE_MAXLEN` waiting already (a training thread
        that reaches no boundary), answers the ack that fails it."""
        if len(self._actions) >= ACTION_QUEUE_MAXLEN:
            detail = "%d actions already wait for the training thread's next step" % len(self._actions)
            return ack_message(action["id"], False, detail=detail)
        self._actions.append(action)
        self._actions_pending = True
        return None

    def _run_actions(self, step: int) -> None:
        self._actions_pending = False
        ran = False
        while True:
            try:
                action = self._actions.popleft()
            except IndexError:
                break
            ran = True
            try:
                ack = run_action(action, step, self._callbacks, self._source)
            except Exception as e:  # run_action does not raise; belt and braces
                ack = ack_message(action["id"], False, at_step=step, detail="%s: %s" % (type(e).__name__, e))
            self._acks.append(ack)
        reporter = self._reporter
        if ran and reporter is not None:
            reporter.wake()

    def _dump_evidence(self, action: Dict[str, Any]) -> Dict[str, Any]:
        """Reporter thread: a ``dump_evidence`` action, carried out at once."""
        identity = self._identity or standalone_identity(os.getpid())
        return self._evidence.run(action, identity, self._settings.dump_dir, self._step, self._train_thread)

    def _progress(self) -> Progress:
        """Reporter thread: what the training thread has done (``_stall``)."""
        return Progress(ended=self._ended, recent_ms=tuple(self._recent_ms), marker=self._marker)

    def on_alert(self, fn: Callable[[Dict[str, Any]], Any]) -> Callable[[Dict[str, Any]], Any]:
        """See :func:`gpumon.on_alert`."""
        if not callable(fn):
            raise TypeError("on_alert needs a callable, not %s" % type(fn).__name__)
        self._alerts.add_callback(fn)
        return fn

    # -- the model and the allocator --------------------------------------------------

    def analyze_model(self, model: Any, optimizer: Any = None) -> Dict[str, Any]:
        """See :func:`gpumon.analyze_model`."""
        result = _model.analyze(model, optimizer)
        self._event("model", _model.model_detail(result))
        return result

    def check_finite(self, model: Any) -> Dict[str, Any]:
        """See :func:`gpumon.check_finite`."""
        result = _model.check(model)
        if result["tensors"]:
            self._event("nonfinite", _model.nonfinite_detail(result))
        return result

    def save_allocator_snapshot(self, path: Any = None) -> Optional[str]:
        """See :func:`gpumon.save_allocator_snapshot`."""
        if path is not None:
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError("path must be a str or os.PathLike, not %s" % type(path).__name__)
            path = os.fspath(path)
        identity = self._identity if self._active else None
        settings = self._snapshot_settings if self._active else SnapshotSettings.from_env(os.environ)
        if identity is None:
            identity = read_identity(os.environ) or standalone_identity(os.getpid())
        return self._snapshots.save(path, identity, settings)

    def _snapshot_saved(self, path: str) -> None:
        self._event(SNAPSHOT_EVENT, path)

    def _out_of_memory(self, detail: str) -> None:
        self._event(OOM_EVENT_NAME, detail)

    # -- introspection ----------------------------------------------------------------

    def stats(self) -> Dict[str, Any]:
        """See :func:`gpumon.stats`."""
        reporter = self._reporter
        timeline = self._timeline
        stall = self._stall
        out: Dict[str, Any] = {
            "active": self._active,
            "step": self._step,
            "clock": "cpu" if timeline is None else "cuda",
            "pending_steps": 0 if timeline is None else timeline.pending_steps,
            "steps_cuda": self._steps_by_clock.get("cuda", 0),
            "steps_cpu": self._steps_by_clock.get("cpu", 0),
            "queued": len(self._records),
            "dropped": self._dropped,
            "connected": bool(reporter is not None and reporter.connected),
            "alerts_received": self._alerts.received,
            "alerts_dropped": self._alerts.dropped,
            "collectives_timed": len(self._collectives),
            "ddp": self._ddp,
            "peer_group": self._peers.key,
            "stalls_reported": stall.reported if stall is not None else 0,
            "stalled": bool(stall is not None and stall.stalled),
            "evidence_dumps": self._evidence.written,
        }
        if reporter is not None:
            out.update(reporter.counters)
        return out


def _owner(value: Optional[str]) -> Optional[tuple]:
    """``(pid, rank, job)`` from ``GPUMON_HOOK_OWNER``, or ``None``."""
    if not value:
        return None
    parts = value.split(":", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1]), parts[2]


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return "<unprintable %s>" % type(value).__name__


#: The process's hook, used by the functions of :mod:`gpumon`.
RUNTIME = Runtime()


def _optimizer_step_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    """The global optimizer step post hook: the end of the automatic
    ``optimizer`` section, and a step boundary of :data:`RUNTIME`."""
    try:
        RUNTIME._auto_exit("optimizer")
        RUNTIME._optimizer_step(optimizer)
    except Exception:
        logger.debug("gpumon: optimizer hook failed", exc_info=True)
