"""The CUDA clock: section and step times from CUDA events, never waiting for the GPU.

CUDA launches are asynchronous, so ``perf_counter`` around a section measures
how long the CPU took to queue its kernels, not how long the GPU ran them.
Once the script has initialised CUDA, the hook records a timing event on the
current stream at each section's entry and exit and at each step boundary.
Waiting for those events (``synchronize``, or ``elapsed_time`` on one that has
not completed) would stall the training loop. So, as Megatron's and NVIDIA
resiliency-ext's straggler detectors do, a step's events are only ``query()``-ed
at later step boundaries, and its record is sent, in step order, once all of
them have completed. At most :data:`MAX_PENDING_STEPS` steps wait; past that
the oldest is sent with the CPU-clock times taken alongside, marked ``cpu``.
Events come from a bounded pool and go back to it once their step is sent.

Torch is never imported and CUDA never initialised here: :func:`cuda_clock`
only returns a ``torch.cuda`` that the script has imported and initialised.
Everything here runs in the training thread.
"""

import collections
from typing import Any, Callable, Dict, List, Optional, Tuple

from ._memory import initialised_torch
from ._settings import EVENT_POOL_MAX, MAX_EVENT_PAIRS_PER_STEP, MAX_PENDING_STEPS


def cuda_clock() -> Any:
    """``torch.cuda`` when the script has imported torch and initialised CUDA, else ``None``.

    ``is_initialized()`` is asked before ``is_available()``, which may start
    the CUDA driver in a process that has not used it.
    """
    torch = initialised_torch()
    if torch is None:
        return None
    try:
        return torch.cuda if torch.cuda.is_available() else None
    except Exception:
        return None


class _Step:
    """A step on the CUDA clock: its events, and the CPU-clock times taken alongside."""

    __slots__ = ("number", "t", "cpu_ms", "sections", "start", "end", "pairs", "cpu_only")

    def __init__(self) -> None:
        self.pairs: List[Tuple[str, Any, Any]] = []
        self.reset(None)

    def reset(self, start: Any) -> None:
        self.number = 0
        self.t = 0.0
        self.cpu_ms = 0.0
        self.sections: Optional[Dict[str, float]] = None
        self.start = start
        self.end = None
        self.pairs.clear()
        self.cpu_only = start is None

    def close(self, number: int, t: float, cpu_ms: float, sections: Dict[str, float], end: Any) -> None:
        self.number = number
        self.t = t
        self.cpu_ms = cpu_ms
        self.sections = sections
        self.end = end
        if end is None:
            self.cpu_only = True


class CudaTimeline:
    """The CUDA clock of one hook.

    ``emit(item)`` queues a sent step's record tuple. An error from torch
    sets :attr:`broken` (the exception) instead of raising; the runtime then
    calls :meth:`abandon` and goes back to the CPU clock. The current step
    starts when the timeline is made.
    """

    def __init__(self, cuda: Any, emit: Callable[[tuple], None]):
        self._new_event = cuda.Event
        self._capturing = getattr(cuda, "is_current_stream_capturing", None)
        self._emit = emit
        self._pool: List[Any] = []
        self._spare: List[_Step] = []
        self._pending: "collections.deque[_Step]" = collections.deque()
        self.broken: Optional[BaseException] = None
        self._current = _Step()
        self._current.reset(self.mark())

    @property
    def pending_steps(self) -> int:
        return len(self._pending)

    def mark(self) -> Any:
        """A timing event recorded now on the current stream; ``None`` during
        a CUDA graph capture (an event would spoil it) or after an error."""
        try:
            capturing = self._capturing
            if capturing is not None and capturing():
                return None
            pool = self._pool
            event = pool.pop() if pool else self._new_event(enable_timing=True)
            event.record()
            return event
        except Exception as e:
            self.broken = e
            return None

    def pair(self, name: str, start: Any) -> None:
        """Section ``name``, which began at event ``start``, ends now, in the current step."""
        end = self.mark()
        step = self._current
        if start is None or end is None or len(step.pairs) >= MAX_EVENT_PAIRS_PER_STEP:
            step.cpu_only = True
            self._release(start)
            self._release(end)
        else:
            step.pairs.append((name, start, end))

    def boundary(self, number: int, t: float, cpu_ms: float, sections: Dict[str, float]) -> bool:
        """Ends the current step and sends the steps that are done; false once broken."""
        end = self.mark()
        step = self._current
        step.close(number, t, cpu_ms, sections, end)
        self._pending.append(step)
        following = self._spare.pop() if self._spare else _Step()
        following.reset(end)
        self._current = following
        self._drain(MAX_PENDING_STEPS)
        return self.broken is None

    def flush(self) -> None:
        """At shutdown: sends every pending step, on the CUDA clock when its
        events have completed by now (one query each), else on the CPU clock."""
        self._drain(0)

    def abandon(self) -> None:
        """Sends every pending step with its CPU-clock times, asking the GPU nothing."""
        pending = self._pending
        while pending:
            self._send(pending.popleft(), None)

    def _drain(self, limit: int) -> None:
        """Sends, in order, the oldest steps whose events have all completed;
        while more than ``limit`` wait, the oldest goes on the CPU clock."""
        pending = self._pending
        while pending:
            step = pending[0]
            times = self._gpu_times(step)
            if times is None and not step.cpu_only and len(pending) <= limit:
                return
            pending.popleft()
            self._send(step, times)

    def _gpu_times(self, step: _Step) -> Optional[Tuple[float, List[float]]]:
        """``(duration_ms, [ms of each pair])`` once every event of ``step`` has
        completed, else ``None``. ``elapsed_time`` is only called then: on an
        event still in flight it would block until the GPU got there."""
        if step.cpu_only:
            return None
        try:
            if not (step.end.query() and step.start.query()):
                return None
            pairs = step.pairs
            for _, start, end in pairs:
                if not (start.query() and end.query()):
                    return None
            return step.start.elapsed_time(step.end), [start.elapsed_time(end) for _, start, end in pairs]
        except Exception as e:
            self.broken = e
            return None

    def _send(self, step: _Step, times: Optional[Tuple[float, List[float]]]) -> None:
        sections = step.sections
        if times is None:
            duration_ms, clock = step.cpu_ms, "cpu"
        else:
            duration_ms, pair_ms = times
            clock = "cuda"
            for name in sections:
                sections[name] = 0.0
            for (name, _, _), ms in zip(step.pairs, pair_ms):
                sections[name] = sections.get(name, 0.0) + ms
        self._emit(("step", step.t, step.number, duration_ms, sections, clock))
        self._recycle(step)

    def _recycle(self, step: _Step) -> None:
        # The step's end event is the next step's start: that one releases it.
        pool = self._pool
        if len(pool) + 2 * len(step.pairs) < EVENT_POOL_MAX:
            if step.start is not None:
                pool.append(step.start)
            for _, start, end in step.pairs:
                pool.append(start)
                pool.append(end)
        self._spare.append(step)

    def _release(self, event: Any) -> None:
        if event is not None and len(self._pool) < EVENT_POOL_MAX:
            self._pool.append(event)
