"""Memory sources: where the hook reads the caching allocator's statistics.

A memory source is any object with these methods (duck-typed; the
:class:`gpumon.testing.FakeAllocator` is one):

- ``memory_stats() -> dict`` with ``torch.cuda.memory_stats()``'s keys
  (empty when nothing is known yet);
- ``mem_get_info() -> (free_bytes, total_bytes)`` or ``None``;
- ``empty_cache()``: give cached, unused memory back to the driver;
- ``device_info() -> {"index", "uuid", "name", "total_bytes"}`` or ``None``;
- optionally ``observe() -> bool``: called from the training thread until it
  returns true, so the source can learn which device that thread uses;
- optionally ``memory_limit() -> (cap_bytes, source)`` or ``None``: what the
  allocator may reserve at most when that is less than the device holds, and
  what set it (``"memory_fraction"``, ``"alloc_conf"`` or ``"allocator"``,
  see :data:`gpumon._records.CAP_SOURCES`). It is sent as the ``alloc``
  record's ``cap`` and ``cap_source``, so that the monitor forecasts an
  out-of-memory error against the process's real limit rather than the
  GPU's capacity. A failing ``memory_limit`` loses the cap, not the record.

:class:`TorchMemorySource` never initialises CUDA itself: initialising it
from the hook would pin the process to a device before the script chose one,
and would break a later ``fork``. It reports nothing until the process has
initialised CUDA, and reads the device the training thread has made current
(``torch.cuda.set_device``), because CUDA's current device is per thread and
the reporter thread's would always be 0.

Its cap is torch's per-process memory fraction
(``set_per_process_memory_fraction``, or ``per_process_memory_fraction`` in
``PYTORCH_CUDA_ALLOC_CONF``, see :func:`alloc_conf`): an allocation fails
when the reserved bytes plus the new segment would pass ``fraction *
total``, ``total`` being the device's memory as ``cudaMemGetInfo`` reports
it.
"""

import importlib.util
import logging
import os
import sys
from typing import Any, Dict, Optional, Tuple

from ._records import alloc_fields

logger = logging.getLogger("gpumon")


class TorchMemorySource:
    """Reads ``torch.cuda``'s caching allocator for one device.

    ``device`` is an index, ``"cuda:N"`` or a ``torch.device``; by default it
    is the training thread's current device, learnt at the first step
    boundary (or :func:`gpumon.snapshot`) after CUDA is initialised.
    """

    def __init__(self, device: Any = None):
        self._device = None if device is None else _device_index(device)

    @property
    def device(self) -> Optional[int]:
        """The device index read, once known."""
        return self._device

    def observe(self) -> bool:
        """Training thread: learns its current device; true once known."""
        if self._device is not None:
            return True
        torch = initialised_torch()
        if torch is None:
            return False
        self._device = int(torch.cuda.current_device())
        return True

    def memory_stats(self) -> Dict[str, Any]:
        torch = initialised_torch()
        if torch is None or self._device is None:
            return {}
        return torch.cuda.memory_stats(self._device)

    def mem_get_info(self) -> Optional[Tuple[int, int]]:
        torch = initialised_torch()
        if torch is None or self._device is None:
            return None
        free, total = torch.cuda.mem_get_info(self._device)
        return int(free), int(total)

    def empty_cache(self) -> None:
        torch = initialised_torch()
        if torch is not None:
            torch.cuda.empty_cache()

    def device_info(self) -> Optional[Dict[str, Any]]:
        torch = initialised_torch()
        if torch is None or self._device is None:
            return None
        props = torch.cuda.get_device_properties(self._device)
        return {
            "index": self._device,
            "uuid": format_uuid(getattr(props, "uuid", None)),
            "name": getattr(props, "name", None),
            "total_bytes": int(props.total_memory),
        }

    def memory_limit(self) -> Optional[Tuple[int, str]]:
        """``(cap_bytes, source)`` when a memory fraction under 1 is in force.

        The fraction is ``torch.cuda.get_per_process_memory_fraction``'s; it
        came from ``PYTORCH_CUDA_ALLOC_CONF`` (``"alloc_conf"``) when that
        names the same fraction, else from ``set_per_process_memory_fraction``
        (``"memory_fraction"``). A torch without the getter is read from the
        variable alone: a torch that could not honour the setting refuses it
        at its first allocation.
        """
        torch = initialised_torch()
        if torch is None or self._device is None:
            return None
        configured = alloc_conf_fraction(alloc_conf())
        get = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        if get is not None:
            fraction = float(get(self._device))
            source = "alloc_conf" if fraction == configured else "memory_fraction"
        elif configured is not None:
            fraction, source = configured, "alloc_conf"
        else:
            return None
        if not 0.0 <= fraction < 1.0:
            return None
        _, total = torch.cuda.mem_get_info(self._device)
        return int(fraction * int(total)), source


def alloc_conf() -> Optional[str]:
    """The caching allocator's settings as torch's CUDA allocator reads
    them: ``PYTORCH_CUDA_ALLOC_CONF``, else (when unset) ``PYTORCH_ALLOC_CONF``."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    return conf if conf is not None else os.environ.get("PYTORCH_ALLOC_CONF")


def alloc_conf_fraction(conf: Optional[str]) -> Optional[float]:
    """``per_process_memory_fraction`` of a ``PYTORCH_CUDA_ALLOC_CONF`` value.

    ``None`` when it is absent or unusable (not a number in (0, 1]); the
    last one wins, as in torch's parser. Whitespace around keys and values
    is ignored, and so are malformed pairs.
    """
    fraction = None
    for pair in (conf or "").split(","):
        key, colon, value = pair.partition(":")
        if not colon or key.strip() != "per_process_memory_fraction":
            continue
        try:
            parsed = float(value.strip())
        except ValueError:
            continue
        if 0.0 < parsed <= 1.0:
            fraction = parsed
    return fraction


def default_memory_source() -> Optional[TorchMemorySource]:
    """A :class:`TorchMemorySource` when torch is importable, else ``None``.

    Torch is not imported here (see the module docstring): whether CUDA is
    available is known once the script has initialised it.
    """
    if "torch" in sys.modules:
        return TorchMemorySource()
    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    return TorchMemorySource() if found else None


def read_alloc_fields(source: Any) -> Optional[Dict[str, Any]]:
    """The ``alloc`` fields of ``source`` now, or ``None`` (may raise, but
    not for a failing ``memory_limit``)."""
    if source is None:
        return None
    stats = source.memory_stats()
    if not stats:
        return None
    info = None
    get_info = getattr(source, "mem_get_info", None)
    if get_info is not None:
        info = get_info()
    return alloc_fields(stats, info, read_limit(source))


def read_limit(source: Any) -> Optional[Tuple[int, str]]:
    """``source.memory_limit()``, or ``None`` when absent or failing."""
    get = getattr(source, "memory_limit", None)
    if get is None:
        return None
    try:
        return get()
    except Exception as e:  # a broken cap must not cost the record
        logger.debug("gpumon: reading the memory limit failed: %s", e)
        return None


def read_device(source: Any) -> Optional[Dict[str, Any]]:
    """``source.device_info()``, or ``None`` when absent or failing."""
    get = getattr(source, "device_info", None)
    if get is None:
        return None
    try:
        return get()
    except Exception as e:  # a broken source must not stop registration
        logger.debug("gpumon: reading the device failed: %s", e)
        return None


def check_source(source: Any) -> None:
    """Raises ``TypeError`` unless ``source`` looks like a memory source."""
    for method in ("memory_stats", "empty_cache"):
        if not callable(getattr(source, method, None)):
            raise TypeError("memory_source needs a callable %s() (got %s)" % (method, type(source).__name__))


def format_uuid(uuid: Any) -> Optional[str]:
    """A device UUID as NVML writes it: ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``.

    Accepts torch's ``_CUuuid`` (its ``bytes``), 16 raw bytes, or a string
    with or without dashes and the ``GPU-`` prefix. Anything else that is
    not empty is returned as text, unchanged.
    """
    if uuid is None:
        return None
    raw = getattr(uuid, "bytes", uuid)
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) != 16:
            return None
        digits = bytes(raw).hex()
    else:
        text = str(uuid).strip()
        digits = text[4:] if text[:4].upper() == "GPU-" else text
        digits = digits.replace("-", "").lower()
        if len(digits) != 32 or any(c not in "0123456789abcdef" for c in digits):
            return text or None
    return "GPU-%s-%s-%s-%s-%s" % (
        digits[0:8],
        digits[8:12],
        digits[12:16],
        digits[16:20],
        digits[20:32],
    )


def initialised_torch() -> Any:
    """The torch module once fully imported and CUDA initialised, else ``None``."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    spec = getattr(torch, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return None
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        return None
    try:
        return torch if cuda.is_initialized() else None
    except Exception:
        return None


def _device_index(device: Any) -> int:
    if isinstance(device, bool):
        raise TypeError("device must be an index, 'cuda:N' or a torch.device")
    if isinstance(device, int):
        if device < 0:
            raise ValueError("device index must be >= 0")
        return device
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind != "cuda" or not index.isdigit():
            raise ValueError("device %r is not 'cuda:N'" % device)
        return int(index)
    index = getattr(device, "index", None)
    if isinstance(index, int) and getattr(device, "type", "cuda") == "cuda":
        return index
    raise TypeError("device must be an index, 'cuda:N' or a torch.device with an index")
