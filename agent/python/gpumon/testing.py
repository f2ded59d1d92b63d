"""Test helpers: stand-ins for PyTorch's CUDA caching allocator and CUDA events.

For tests and demos on machines without torch or a GPU.

:class:`FakeAllocator` is deterministic and follows the caching allocator's
rules closely enough that what gpumon reads from it means the same thing as
on a real GPU; it is also a memory source for :func:`gpumon.init` (it has
``memory_stats``, ``mem_get_info``, ``empty_cache``, ``device_info`` and
``memory_limit``), and it makes snapshots in the shape of
``torch.cuda.memory._snapshot()`` and calls out-of-memory observers as
torch's allocator does.

:class:`FakeTorch` is a ``torch`` module with only the ``torch.cuda`` calls
of the hook's CUDA clock, over a :class:`FakeGpu` whose timeline the test
moves, and, given a :class:`FakeAllocator`, the snapshot calls of
``torch.cuda.memory`` and the out-of-memory observer of ``torch._C``: put it
in ``sys.modules["torch"]``. It records every call that would block the CPU
on the GPU or initialise CUDA, so a test can assert there were none.
"""

import sys
import threading
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

#: Every block size is a multiple of this (``kMinBlockSize``).
ROUND_BYTES = 512
#: Requests up to this size come from the small pool (``kSmallSize``).
SMALL_REQUEST_BYTES = 1 * MiB
#: Segment size of the small pool (``kSmallBuffer``).
SMALL_SEGMENT_BYTES = 2 * MiB
#: Segment size for large requests under :data:`MIN_LARGE_ALLOC_BYTES` (``kLargeBuffer``).
LARGE_SEGMENT_BYTES = 20 * MiB
#: Large requests from this size get a segment of their own size (``kMinLargeAlloc``).
MIN_LARGE_ALLOC_BYTES = 10 * MiB
#: ... rounded up to a multiple of this (``kRoundLarge``).
ROUND_LARGE_BYTES = 2 * MiB

_STAT_NAMES = ("allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes")


class _Block:
    __slots__ = ("segment", "offset", "size", "requested", "live")

    def __init__(self, segment: "_Segment", offset: int, size: int):
        self.segment = segment
        self.offset = offset
        self.size = size
        self.requested = 0
        self.live = False


class _Segment:
    __slots__ = ("number", "small", "size", "blocks")

    def __init__(self, number: int, small: bool, size: int):
        self.number = number
        self.small = small
        self.size = size
        self.blocks: List[_Block] = [_Block(self, 0, size)]

    def inactive_split(self) -> int:
        """Free bytes in blocks split off a segment that is partly in use."""
        if len(self.blocks) == 1:
            return 0
        return sum(b.size for b in self.blocks if not b.live)

    def unused(self) -> bool:
        return len(self.blocks) == 1 and not self.blocks[0].live


class _Stat:
    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self):
        self.current = self.peak = self.allocated = self.freed = 0

    def add(self, amount: int) -> None:
        if amount >= 0:
            self.allocated += amount
        else:
            self.freed -= amount
        self.current += amount
        if self.current > self.peak:
            self.peak = self.current


class FakeAllocator:
    """A deterministic model of PyTorch's CUDA caching allocator (one device, one stream).

    For tests on machines without torch or a GPU. What it keeps from the real one:

    - sizes round up to 512 bytes;
    - requests up to 1 MiB are served from 2 MiB segments (the small pool);
      larger ones from 20 MiB segments when under 10 MiB, else from a segment
      of their own size rounded up to 2 MiB (the large pool);
    - a free block is reused, best fit, by a later request of its pool that
      fits, and split when the rest is worth keeping (at least 512 bytes in
      the small pool, over 1 MiB in the large one); the free rest of a split
      segment counts as ``inactive_split``;
    - freed blocks stay cached: ``reserved`` does not drop until
      :meth:`empty_cache` releases the segments that hold no live block;
    - :meth:`set_per_process_memory_fraction` caps ``reserved`` at
      ``int(fraction * total_bytes)``, as torch caps it at that share of
      ``cudaMemGetInfo``'s total; :meth:`memory_limit` reports the cap;
    - when a new segment does not fit in the device or under the cap, the
      cache is released and ``num_alloc_retries`` counts it; if it still
      does not fit, ``num_ooms`` counts it, the out-of-memory observers are
      called (outside the allocator's lock, as torch calls them) and
      ``MemoryError("CUDA out of memory (fake)")`` is raised.

    The device holds ``total_bytes``, of which ``context_bytes`` are taken by
    the CUDA context, so ``mem_get_info()`` reports ``used = reserved +
    context_bytes``. All methods are thread-safe.
    """

    def __init__(
        self,
        total_bytes: int = 80 * GiB,
        context_bytes: int = 512 * MiB,
        index: int = 0,
        uuid: str = "GPU-00000000-0000-4000-8000-000000000000",
        name: str = "Fake GPU (gpumon.testing)",
    ):
        if total_bytes <= 0 or context_bytes < 0 or context_bytes >= total_bytes:
            raise ValueError("need total_bytes > context_bytes >= 0")
        self.total_bytes = int(total_bytes)
        self.context_bytes = int(context_bytes)
        self.index = int(index)
        self.uuid = uuid
        self.name = name
        self._lock = threading.Lock()
        self._segments: List[_Segment] = []
        self._handles: Dict[int, Optional[_Block]] = {}
        self._next_handle = 1
        self._next_segment = 0
        self._stats = {name: _Stat() for name in _STAT_NAMES}
        self._segment_count = _Stat()
        self._allocation_count = _Stat()
        self._retries = 0
        self._ooms = 0
        self._oom_observers: List[Callable[[int, int, int, int], Any]] = []
        self._fraction = 1.0
        self.empty_cache_calls = 0

    # -- allocating ----------------------------------------------------------

    def alloc(self, nbytes: int) -> int:
        """Allocates ``nbytes``; returns a handle for :meth:`free`.

        Raises ``MemoryError`` when the device is full even after the cache
        was released.
        """
        if isinstance(nbytes, bool) or not isinstance(nbytes, int):
            raise TypeError("nbytes must be an int")
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        with self._lock:
            handle = self._next_handle
            self._next_handle += 1
            if nbytes == 0:  # like torch: no block behind an empty tensor
                self._handles[handle] = None
                return handle
            size = -(-nbytes // ROUND_BYTES) * ROUND_BYTES
            small = size <= SMALL_REQUEST_BYTES
            block = self._best_fit(small, size)
            try:
                if block is None:
                    block = self._new_segment(small, size)
            except MemoryError as e:
                oom = e
                observers = list(self._oom_observers)
                in_use = self._stats["reserved_bytes"].current + self.context_bytes
            else:
                self._take(block, size, nbytes)
                self._handles[handle] = block
                return handle
        for observer in observers:
            observer(self.index, size, in_use, max(0, self.total_bytes - in_use))
        raise oom

    def attach_out_of_memory_observer(self, observer: Callable[[int, int, int, int], Any]) -> None:
        """Calls ``observer(device, alloc_bytes, device_in_use, device_free)``
        on every out-of-memory error, like ``torch._C._cuda_attach_out_of_memory_observer``."""
        with self._lock:
            self._oom_observers.append(observer)

    def free(self, handle: int) -> None:
        """Frees an allocation; its memory stays cached (reserved)."""
        with self._lock:
            try:
                block = self._handles.pop(handle)
            except KeyError:
                raise ValueError("unknown or already freed handle %r" % (handle,)) from None
            if block is None:
                return
            segment = segment_before = block.segment
            split_before = segment_before.inactive_split()
            block.live = False
            self._stats["allocated_bytes"].add(-block.size)
            self._stats["active_bytes"].add(-block.size)
            self._stats["requested_bytes"].add(-block.requested)
            self._allocation_count.add(-1)
            block.requested = 0
            self._merge(segment, block)
            self._stats["inactive_split_bytes"].add(segment.inactive_split() - split_before)

    def empty_cache(self) -> None:
        """Releases every segment that holds no live block (``reserved`` drops)."""
        with self._lock:
            self.empty_cache_calls += 1
            self._release_cached()

    def set_per_process_memory_fraction(self, fraction: float) -> None:
        """Caps ``reserved`` at ``int(fraction * total_bytes)``, like
        ``torch.cuda.set_per_process_memory_fraction`` (1 lifts the cap).

        What is reserved already stays; later segments must fit under it.
        """
        if not isinstance(fraction, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError("Invalid fraction value: %r. Allowed range: 0~1" % (fraction,))
        with self._lock:
            self._fraction = fraction

    def get_per_process_memory_fraction(self) -> float:
        """The fraction in force, like ``torch.cuda.get_per_process_memory_fraction``."""
        return self._fraction

    def memory_limit(self) -> Optional[Tuple[int, str]]:
        """``(cap_bytes, "memory_fraction")`` while a fraction under 1 is set."""
        cap = self._cap()
        return None if cap is None else (cap, "memory_fraction")

    # -- reading ------------------------------------------------------------

    def memory_stats(self) -> Dict[str, int]:
        """Like ``torch.cuda.memory_stats()`` (the ``all`` pool keys)."""
        with self._lock:
            stats = {}
            for name, stat in self._stats.items():
                for field in ("current", "peak", "allocated", "freed"):
                    stats["%s.all.%s" % (name, field)] = getattr(stat, field)
            for name, stat in (("segment", self._segment_count), ("allocation", self._allocation_count)):
                for field in ("current", "peak", "allocated", "freed"):
                    stats["%s.all.%s" % (name, field)] = getattr(stat, field)
            stats["num_alloc_retries"] = self._retries
            stats["num_ooms"] = self._ooms
            return stats

    def mem_get_info(self) -> Tuple[int, int]:
        """``(free, total)`` of the device, like ``torch.cuda.mem_get_info()``."""
        with self._lock:
            used = self._stats["reserved_bytes"].current + self.context_bytes
            return max(0, self.total_bytes - used), self.total_bytes

    def device_info(self) -> Dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "name": self.name, "total_bytes": self.total_bytes}

    def reset_peak_memory_stats(self) -> None:
        """Peaks back to the current values, like ``torch.cuda.reset_peak_memory_stats()``."""
        with self._lock:
            for stat in list(self._stats.values()) + [self._segment_count, self._allocation_count]:
                stat.peak = stat.current

    @property
    def allocated(self) -> int:
        return self._stats["allocated_bytes"].current

    @property
    def reserved(self) -> int:
        return self._stats["reserved_bytes"].current

    @property
    def inactive_split(self) -> int:
        return self._stats["inactive_split_bytes"].current

    def segment_sizes(self) -> List[int]:
        """Sizes of the segments held, in creation order."""
        with self._lock:
            return [s.size for s in self._segments]

    def snapshot(self) -> Dict[str, Any]:
        """The segments and their blocks in the shape of
        ``torch.cuda.memory._snapshot()`` (no history: ``device_traces`` is empty)."""
        with self._lock:
            segments = []
            for segment in self._segments:
                base = (segment.number + 1) << 32
                live = [b for b in segment.blocks if b.live]
                blocks = [
                    {
                        "address": base + b.offset,
                        "size": b.size,
                        "requested_size": b.requested,
                        "state": "active_allocated" if b.live else "inactive",
                    }
                    for b in segment.blocks
                ]
                segments.append(
                    {
                        "device": self.index,
                        "address": base,
                        "stream": 0,
                        "segment_type": "small" if segment.small else "large",
                        "total_size": segment.size,
                        "allocated_size": sum(b.size for b in live),
                        "active_size": sum(b.size for b in live),
                        "requested_size": sum(b.requested for b in live),
                        "blocks": blocks,
                    }
                )
            return {"segments": segments, "device_traces": [[]]}

    # -- internals (lock held) ------------------------------------------------

    def _best_fit(self, small: bool, size: int) -> Optional[_Block]:
        best = None
        for segment in self._segments:
            if segment.small != small:
                continue
            for block in segment.blocks:
                if block.live or block.size < size:
                    continue
                if best is None or block.size < best.size:
                    best = block
        return best

    def _new_segment(self, small: bool, size: int) -> _Block:
        if small:
            segment_size = SMALL_SEGMENT_BYTES
        elif size < MIN_LARGE_ALLOC_BYTES:
            segment_size = LARGE_SEGMENT_BYTES
        else:
            segment_size = -(-size // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES
        if not self._fits(segment_size):
            # torch: free the cache and try cudaMalloc once more, counting a retry.
            self._release_cached()
            self._retries += 1
            if not self._fits(segment_size):
                self._ooms += 1
                cap = self._cap()
                raise MemoryError(
                    "CUDA out of memory (fake): tried to allocate %d bytes; %d reserved, %d total%s"
                    % (
                        size,
                        self._stats["reserved_bytes"].current,
                        self.total_bytes,
                        "" if cap is None else ", %d allowed by the memory fraction" % cap,
                    )
                )
        segment = _Segment(self._next_segment, small, segment_size)
        self._next_segment += 1
        self._segments.append(segment)
        self._stats["reserved_bytes"].add(segment_size)
        self._segment_count.add(1)
        return segment.blocks[0]

    def _fits(self, segment_size: int) -> bool:
        reserved = self._stats["reserved_bytes"].current
        cap = self._cap()
        if cap is not None and reserved + segment_size > cap:
            return False
        return reserved + self.context_bytes + segment_size <= self.total_bytes

    def _cap(self) -> Optional[int]:
        fraction = self._fraction
        return int(fraction * self.total_bytes) if fraction < 1.0 else None

    def _take(self, block: _Block, size: int, requested: int) -> None:
        segment = block.segment
        split_before = segment.inactive_split()
        rest = block.size - size
        worth_splitting = rest >= ROUND_BYTES if segment.small else rest > SMALL_REQUEST_BYTES
        if worth_splitting:
            tail = _Block(segment, block.offset + size, rest)
            block.size = size
            segment.blocks.insert(segment.blocks.index(block) + 1, tail)
        block.live = True
        block.requested = requested
        self._stats["allocated_bytes"].add(block.size)
        self._stats["active_bytes"].add(block.size)
        self._stats["requested_bytes"].add(requested)
        self._allocation_count.add(1)
        self._stats["inactive_split_bytes"].add(segment.inactive_split() - split_before)

    def _merge(self, segment: _Segment, block: _Block) -> None:
        blocks = segment.blocks
        i = blocks.index(block)
        if i + 1 < len(blocks) and not blocks[i + 1].live:
            block.size += blocks.pop(i + 1).size
        if i > 0 and not blocks[i - 1].live:
            previous = blocks[i - 1]
            previous.size += block.size
            blocks.pop(i)

    def _release_cached(self) -> None:
        kept = []
        for segment in self._segments:
            if segment.unused():
                self._stats["reserved_bytes"].add(-segment.size)
                self._segment_count.add(-1)
            else:
                kept.append(segment)
        self._segments = kept


class FakeGpu:
    """One device running one stream, on a clock the test moves (ms).

    :meth:`launch` queues work behind what is queued already; the device
    runs it only as :meth:`advance` or :meth:`finish` move its clock. So an
    event recorded after some work completes later than it was recorded, as
    on a real GPU. A call that would block the CPU until the GPU catches up
    (``synchronize``, ``elapsed_time`` on an event that has not completed),
    initialise CUDA, or record an event during a graph capture is appended
    to :attr:`violations` and raises ``RuntimeError``, like real CUDA errors.
    The hook swallows the exception, so tests assert ``violations == []``.
    """

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.tail_ms = 0.0
        self.capturing = False
        self.violations: List[str] = []
        self.events_created = 0
        self.records = 0
        self.queries = 0
        self.elapsed = 0
        self.capture_checks = 0

    def launch(self, ms: float) -> None:
        """Queues ``ms`` of work on the stream."""
        self.tail_ms = max(self.tail_ms, self.now_ms) + ms

    def advance(self, ms: float) -> None:
        """Lets the device run for ``ms``."""
        self.now_ms += ms

    def finish(self) -> None:
        """Lets the device run everything queued."""
        self.now_ms = max(self.now_ms, self.tail_ms)

    def violation(self, what: str) -> None:
        self.violations.append(what)
        raise RuntimeError("fake CUDA: " + what)


class FakeEvent:
    """``torch.cuda.Event`` on a :class:`FakeGpu`."""

    def __init__(self, gpu: FakeGpu, enable_timing: bool = False):
        gpu.events_created += 1
        self._gpu = gpu
        self._timing = enable_timing
        #: Where the stream was when it was last recorded (device ms), or None.
        self.at_ms: Optional[float] = None

    def record(self, stream: Any = None) -> None:
        gpu = self._gpu
        if gpu.capturing:
            gpu.violation("Event.record() during a CUDA graph capture")
        gpu.records += 1
        self.at_ms = max(gpu.tail_ms, gpu.now_ms)

    def query(self) -> bool:
        gpu = self._gpu
        gpu.queries += 1
        return self.at_ms is None or gpu.now_ms >= self.at_ms

    def elapsed_time(self, end: "FakeEvent") -> float:
        gpu = self._gpu
        gpu.elapsed += 1
        if not (self._timing and end._timing):
            gpu.violation("elapsed_time() on an event made without enable_timing")
        for event in (self, end):
            if event.at_ms is None or gpu.now_ms < event.at_ms:
                gpu.violation("elapsed_time() on an event that has not completed (it blocks)")
        return end.at_ms - self.at_ms

    def synchronize(self) -> None:
        self._gpu.violation("Event.synchronize() blocks")


class FakeCuda:
    """The part of ``torch.cuda`` that the hook's CUDA clock may touch."""

    def __init__(self, gpu: FakeGpu, initialized: bool = True, available: bool = True):
        self.gpu = gpu
        self.initialized = initialized
        self.available = available
        #: ``torch.cuda.memory``, when :class:`FakeTorch` has an allocator.
        self.memory: Optional["FakeCudaMemory"] = None

    def Event(self, enable_timing: bool = False, **_flags: bool) -> FakeEvent:  # noqa: N802 (torch's name)
        return FakeEvent(self.gpu, enable_timing)

    def is_available(self) -> bool:
        return self.available

    def is_initialized(self) -> bool:
        return self.initialized

    def is_current_stream_capturing(self) -> bool:
        self.gpu.capture_checks += 1
        return self.gpu.capturing

    def synchronize(self, device: Any = None) -> None:
        self.gpu.violation("torch.cuda.synchronize() blocks")

    def init(self) -> None:
        self.gpu.violation("torch.cuda.init() initialises CUDA")

    def _lazy_init(self) -> None:
        self.gpu.violation("torch.cuda._lazy_init() initialises CUDA")


class FakeCudaMemory:
    """``torch.cuda.memory``'s snapshot calls over a :class:`FakeAllocator`.

    ``history`` lists the arguments of every ``_record_memory_history``
    call; like the real one, a call before CUDA is initialised initialises
    it, which is a violation here.
    """

    def __init__(self, cuda: "FakeCuda", allocator: FakeAllocator):
        self._cuda = cuda
        self.allocator = allocator
        self.history: List[Dict[str, Any]] = []
        self.snapshots = 0

    def _record_memory_history(
        self,
        enabled: Optional[str] = "all",
        context: Optional[str] = "all",
        stacks: str = "all",
        max_entries: int = sys.maxsize,
        **_more: Any,
    ) -> None:
        if not self._cuda.initialized:
            self._cuda.gpu.violation("_record_memory_history() initialises CUDA")
        call = {"enabled": enabled, "context": context, "stacks": stacks, "max_entries": max_entries}
        self.history.append(call)

    def _snapshot(self, device: Any = None) -> Dict[str, Any]:
        self.snapshots += 1
        return self.allocator.snapshot()


class FakeTorch(types.ModuleType):
    """A ``torch`` module with :class:`FakeCuda` as ``cuda``, for ``sys.modules["torch"]``.

    Given ``allocator``, ``cuda.memory`` is a :class:`FakeCudaMemory` over
    it and ``_C._cuda_attach_out_of_memory_observer`` attaches to it.
    """

    def __init__(
        self,
        gpu: Optional[FakeGpu] = None,
        initialized: bool = True,
        available: bool = True,
        allocator: Optional[FakeAllocator] = None,
    ):
        super().__init__("torch")
        self.gpu = gpu if gpu is not None else FakeGpu()
        self.cuda = FakeCuda(self.gpu, initialized, available)
        if allocator is not None:
            self.cuda.memory = FakeCudaMemory(self.cuda, allocator)
            self._C = types.SimpleNamespace(
                _cuda_attach_out_of_memory_observer=allocator.attach_out_of_memory_observer
            )
