"""Logging a message once per reason, for code that may hit the same
trouble at every step (an odd tensor, a missing torch function).

The set of reasons is bounded: past :data:`MAX_REASONS` every message goes
to debug, so a stream of distinct reasons cannot grow memory or the log.
"""

import logging
import threading
from typing import Any

logger = logging.getLogger("gpumon")

#: Distinct reasons remembered by one :class:`LogOnce`.
MAX_REASONS = 64


class LogOnce:
    """Logs each ``key`` at the level asked the first time, at debug after."""

    def __init__(self) -> None:
        self._seen = set()
        self._lock = threading.Lock()

    def log(self, key: str, level: int, message: str, *args: Any, exc_info: bool = False) -> None:
        with self._lock:
            first = key not in self._seen and len(self._seen) < MAX_REASONS
            if first:
                self._seen.add(key)
        logger.log(level if first else logging.DEBUG, message, *args, exc_info=exc_info)
