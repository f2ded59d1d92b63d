"""The GPU a gpu-check workload runs on: a real one through torch, or the hook's stand-ins.

Every workload (``workload.py``) is written once against :class:`Device`.
:class:`CudaDevice` is PyTorch on CUDA device 0; :class:`FakeDevice` is the
hook's own stand-ins from :mod:`gpumon.testing` (a caching-allocator model,
a device whose stream runs in real time, CUDA events on it) installed as
``sys.modules["torch"]``, so ``--dry-run`` runs the same steps, sections,
leaks and actions on a machine with no GPU and no torch.

Units of work: :meth:`Device.work` queues ``units`` matrix products of the
device's working size (a fake unit is :data:`FAKE_UNIT_MS` of device time).
"""

import os
import sys
import time
from typing import Any, Dict, List, Optional

MiB = 1 << 20
GiB = 1 << 30

#: Device time of one unit of work on the fake device, ms.
FAKE_UNIT_MS = 1.0
#: The fake device's size and what its CUDA context takes.
FAKE_TOTAL_BYTES = 4 * GiB
FAKE_CONTEXT_BYTES = 256 * MiB


class DeviceOutOfMemory(Exception):
    """The device could not serve an allocation (torch's ``OutOfMemoryError``
    or the fake allocator's ``MemoryError``)."""


class CudaDevice:
    """CUDA device 0 through torch; the hook reads torch's own allocator."""

    kind = "cuda"

    def __init__(self, matrix: int = 8192):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch %s sees no CUDA device" % torch.__version__)
        self.torch = torch
        #: What a step or an allocation raises when the device is full.
        self.out_of_memory = (torch.cuda.OutOfMemoryError, DeviceOutOfMemory)
        torch.cuda.set_device(0)
        self.device = torch.device("cuda", 0)
        self._a = torch.randn(matrix, matrix, device=self.device, dtype=torch.bfloat16)
        self._b = torch.randn(matrix, matrix, device=self.device, dtype=torch.bfloat16)
        self._c = torch.empty(matrix, matrix, device=self.device, dtype=torch.bfloat16)

    def memory_source(self) -> Any:
        """What ``gpumon.init`` should read; ``None``: torch's allocator (the default)."""
        return None

    def work(self, units: int) -> None:
        for _ in range(units):
            self.torch.mm(self._a, self._b, out=self._c)

    def alloc(self, nbytes: int) -> Any:
        try:
            return self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device)
        except self.torch.cuda.OutOfMemoryError as e:
            raise DeviceOutOfMemory(str(e).splitlines()[0]) from None

    def free(self, handle: Any) -> None:
        """Drops the workload's reference; the caching allocator keeps the block."""

    def memory_stats(self) -> Dict[str, Any]:
        return self.torch.cuda.memory_stats(self.device)

    def mem_get_info(self):
        return self.torch.cuda.mem_get_info(self.device)

    def empty_cache(self) -> None:
        self.torch.cuda.empty_cache()

    def set_memory_fraction(self, fraction: float) -> None:
        """Caps the caching allocator at ``fraction`` of the device (torch's
        ``set_per_process_memory_fraction``)."""
        self.torch.cuda.set_per_process_memory_fraction(float(fraction), self.device)

    def cap_readable(self) -> bool:
        """Whether this torch has ``get_per_process_memory_fraction``, which
        the hook reads the cap from (without it the hook sees only a cap set
        in ``PYTORCH_CUDA_ALLOC_CONF``)."""
        return hasattr(self.torch.cuda, "get_per_process_memory_fraction")

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def clock_ms(self) -> float:
        """The clock a synchronized measurement reads: the host's."""
        return time.perf_counter() * 1000.0

    def describe(self) -> Dict[str, Any]:
        props = self.torch.cuda.get_device_properties(self.device)
        return {
            "name": props.name,
            "total_bytes": int(props.total_memory),
            "torch": self.torch.__version__,
            "cuda": self.torch.version.cuda,
        }


class FakeDevice:
    """The hook's stand-ins: :class:`gpumon.testing.FakeAllocator` for memory,
    :class:`gpumon.testing.FakeTorch` (events on a :class:`FakeGpu`) as torch.

    The fake stream runs in real time: work is queued, the CPU sleeps as long
    as the work lasts, and the device clock moves by as much, so an event
    recorded after the work completes when the work would have.
    """

    kind = "fake"

    def __init__(self, total_bytes: int = FAKE_TOTAL_BYTES):
        from gpumon.testing import FakeAllocator, FakeGpu, FakeTorch

        self.allocator = FakeAllocator(total_bytes=total_bytes, context_bytes=FAKE_CONTEXT_BYTES)
        self.gpu = FakeGpu()
        self.torch = FakeTorch(self.gpu, allocator=self.allocator)
        self.out_of_memory = (MemoryError, DeviceOutOfMemory)
        sys.modules["torch"] = self.torch
        self._handles: List[int] = []

    def memory_source(self) -> Any:
        return self.allocator

    def work(self, units: int) -> None:
        ms = units * FAKE_UNIT_MS
        self.gpu.launch(ms)
        time.sleep(ms / 1000.0)
        self.gpu.advance(ms)

    def alloc(self, nbytes: int) -> Any:
        try:
            return self.allocator.alloc(int(nbytes))
        except MemoryError as e:
            raise DeviceOutOfMemory(str(e)) from None

    def free(self, handle: Any) -> None:
        self.allocator.free(handle)

    def memory_stats(self) -> Dict[str, Any]:
        return self.allocator.memory_stats()

    def mem_get_info(self):
        return self.allocator.mem_get_info()

    def empty_cache(self) -> None:
        self.allocator.empty_cache()

    def set_memory_fraction(self, fraction: float) -> None:
        """Caps the fake allocator at ``fraction`` of the device, as torch's
        ``set_per_process_memory_fraction`` caps its own."""
        self.allocator.set_per_process_memory_fraction(float(fraction))

    def cap_readable(self) -> bool:
        """The hook reads the fake allocator's cap (its ``memory_limit``)."""
        return hasattr(self.allocator, "memory_limit")

    def synchronize(self) -> None:
        self.gpu.finish()

    def clock_ms(self) -> float:
        """The clock a synchronized measurement reads: the fake device's, which
        the host's sleeps only approximate."""
        return self.gpu.now_ms

    def describe(self) -> Dict[str, Any]:
        return {"name": self.allocator.name, "total_bytes": self.allocator.total_bytes, "torch": None, "cuda": None}


def open_device(dry_run: bool, **kwargs: Any):
    """The device of this run: :class:`FakeDevice` under ``--dry-run``, else :class:`CudaDevice`."""
    return FakeDevice() if dry_run else CudaDevice(**kwargs)


def local_rank() -> int:
    try:
        return int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        return 0


def elapsed_ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000.0


def percentile(values: List[float], q: float) -> Optional[float]:
    """The ``q`` quantile (0..1) by nearest rank; ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return ordered[index]
