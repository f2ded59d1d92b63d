"""The ``dump_evidence`` action: what a hung rank was doing, written to disk.

Unlike other actions it runs on the reporter thread as soon as a poll
answer brings it: the training thread may be the one that is hung, and
would never reach a step boundary. It writes, in the dump directory
(``GPUMON_DUMP_DIR``, else ``<tmp>/gpumon-dumps-<uid>``, made with mode
0700), ``hang-<job>-rank<R>-action<id>.fr.json``, torch's flight recorder
dump as torch writes it, when it holds entries, and
``hang-<job>-rank<R>-action<id>.stacks.txt``, every thread's Python stack:
``faulthandler``'s, then each thread's by name, at most 1 MiB.

A directory that is a symbolic link, not a directory, another user's, or
writable by group or others is refused (another user could read the
evidence or plant links). At most :data:`MAX_EVIDENCE_DUMPS` dumps are
written per process; later actions fail, so repeated actions cannot fill
the disk.
"""

import datetime
import faulthandler
import logging
import os
import re
import stat
import sys
import tempfile
import threading
import traceback
from typing import Any, Dict, List, Optional, Tuple

from ._env import Identity
from ._flight import FlightRecorder
from ._records import ack_message
from ._settings import MAX_EVIDENCE_DUMPS, MAX_FR_DUMP_BYTES, MAX_STACKS_BYTES

logger = logging.getLogger("gpumon")

#: The action kind.
KIND = "dump_evidence"
#: Longest job id in a file name, characters.
MAX_JOB_IN_NAME = 64
#: Numbered names tried when one is taken (a restarted agent reuses ids).
MAX_NAME_ATTEMPTS = 100
#: The stacks file's suffix; the flight recorder's are ``.fr.json`` and kin.
STACKS_SUFFIX = ".stacks.txt"
#: Frames rendered per thread in the Python-level part of the stacks.
MAX_FRAMES = 64

#: The end of every refusal of a dump directory.
REFUSED = "; gpumon writes no evidence there"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def default_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "gpumon-dumps-%d" % os.geteuid())


def file_stem(identity: Identity, action_id: int) -> str:
    """``hang-<job>-rank<R>-action<id>``, the job made safe for a file name."""
    job = _UNSAFE.sub("_", identity.job)[:MAX_JOB_IN_NAME] or "job"
    return "hang-%s-rank%d-action%d" % (job, identity.rank, action_id)


def prepare_dir(directory: str) -> Optional[str]:
    """Makes ``directory`` (an absolute path, mode 0700) if it is missing;
    why it is not safe to write evidence in, or ``None``."""
    try:
        os.makedirs(os.path.dirname(directory), exist_ok=True)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        return "cannot make the dump directory %s: %s" % (directory, e)
    try:
        info = os.lstat(directory)
    except OSError as e:
        return "cannot read the dump directory %s: %s" % (directory, e)
    if stat.S_ISLNK(info.st_mode):
        return "the dump directory %s is a symbolic link%s" % (directory, REFUSED)
    if not stat.S_ISDIR(info.st_mode):
        return "the dump directory %s is not a directory%s" % (directory, REFUSED)
    me = os.geteuid()
    if info.st_uid != me:
        return "the dump directory %s belongs to uid %d, not to you (uid %d)%s" % (
            directory,
            info.st_uid,
            me,
            REFUSED,
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "the dump directory %s may be written by others (mode %03o)%s" % (directory, mode, REFUSED)
    return None


class Evidence:
    """Carries out ``dump_evidence`` actions; one per process (the count is
    for the process's lifetime)."""

    def __init__(self, recorder: FlightRecorder, max_dumps: int = MAX_EVIDENCE_DUMPS):
        self._recorder = recorder
        self._max_dumps = max_dumps
        self._lock = threading.Lock()
        #: Dumps started (files created), failed ones included.
        self.written = 0

    def run(
        self,
        action: Dict[str, Any],
        identity: Identity,
        directory: Optional[str],
        step: int,
        training_thread: Optional[int],
    ) -> Dict[str, Any]:
        """Writes the evidence of ``action``; returns its ``ack``."""
        action_id = action["id"]
        with self._lock:
            if self.written >= self._max_dumps:
                return ack_message(
                    action_id,
                    False,
                    at_step=step,
                    detail="the limit of %d evidence dumps per process was reached; nothing written"
                    % self._max_dumps,
                )
            directory = os.path.abspath(directory or default_dir())
            why = prepare_dir(directory)
            if why is not None:
                logger.warning("gpumon: action %d (%s) refused: %s", action_id, KIND, why)
                return ack_message(action_id, False, at_step=step, detail=why)
            dumps = self._flight_recorder()
            written: List[str] = []
            try:
                stem, stacks = _create(directory, file_stem(identity, action_id), STACKS_SUFFIX)
                self.written += 1
                _write_stacks(stacks, action, identity, step, training_thread)
                written.append(os.path.join(directory, stem + STACKS_SUFFIX))
                for suffix, raw in dumps:
                    path = os.path.join(directory, stem + suffix)
                    _write_bytes(path, raw)
                    written.append(path)
            except OSError as e:
                detail = "writing evidence in %s failed: %s" % (directory, e)
                if written:
                    detail += " (written: %s)" % ", ".join(written)
                logger.warning("gpumon: action %d (%s) failed: %s", action_id, KIND, detail)
                return ack_message(action_id, False, at_step=step, detail=detail)
        logger.warning("gpumon: evidence of a hang written to %s (action %d)", ", ".join(written), action_id)
        # A done ack travels on with its response only: the files go there
        # (the API's and the report's `response`), and in `detail` for the log.
        files = ", ".join(written)
        return ack_message(action_id, True, at_step=step, response=files, detail=files)

    def _flight_recorder(self) -> List[Tuple[str, bytes]]:
        """``(file suffix, dump)``: ``.fr.json`` for the first backend with
        entries, ``.fr-<backend>.json`` for the others; ``-active`` before
        ``.json`` when the full dump was over the limit and only the
        collectives not completed are written."""
        out: List[Tuple[str, bytes]] = []
        for backend, raw in self._recorder.dumps():
            suffix = ".fr" if not out else ".fr-" + backend
            if len(raw) > MAX_FR_DUMP_BYTES:
                active = [r for b, r in self._recorder.dumps(only_active=True) if b == backend]
                if not active or len(active[0]) > MAX_FR_DUMP_BYTES:
                    logger.warning(
                        "gpumon: the %s flight recorder dump is over %d bytes even with only its active "
                        "entries; not written",
                        backend,
                        MAX_FR_DUMP_BYTES,
                    )
                    continue
                raw, suffix = active[0], suffix + "-active"
            elif b'"entries"' not in raw:
                continue
            out.append((suffix + ".json", raw))
        return out


def _create(directory: str, stem: str, suffix: str) -> Tuple[str, int]:
    """A new file ``stem + suffix`` (else ``stem-2``, ``stem-3``, ...):
    ``(the stem taken, its descriptor)``."""
    for attempt in range(1, MAX_NAME_ATTEMPTS + 1):
        taken = stem if attempt == 1 else "%s-%d" % (stem, attempt)
        try:
            return taken, _open_new(os.path.join(directory, taken + suffix))
        except FileExistsError:
            continue
    raise FileExistsError("no free name for %s%s in %s" % (stem, suffix, directory))


def _open_new(path: str) -> int:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags, 0o600)


def _write_bytes(path: str, raw: bytes) -> None:
    fd = _open_new(path)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)


def _write_stacks(
    fd: int, action: Dict[str, Any], identity: Identity, step: int, training_thread: Optional[int]
) -> None:
    """faulthandler's dump of every thread, then each thread's Python stack
    by name, cut at :data:`MAX_STACKS_BYTES`."""
    with os.fdopen(fd, "wb") as f:
        head = "gpumon evidence: process %d, rank %d of job %r, action %d (%s), %s, last step %d\n" % (
            os.getpid(),
            identity.rank,
            identity.job,
            action["id"],
            action.get("reason") or "no reason given",
            datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            step,
        )
        f.write(head.encode("utf-8", "replace") + b"\n== faulthandler ==\n")
        f.flush()
        try:
            faulthandler.dump_traceback(f, all_threads=True)
        except Exception as e:
            f.write(("faulthandler failed: %r\n" % e).encode())
        f.flush()
        cut = b"\n[cut at %d bytes]\n" % MAX_STACKS_BYTES
        size = os.fstat(f.fileno()).st_size
        if size > MAX_STACKS_BYTES - len(cut):
            size = max(0, MAX_STACKS_BYTES - len(cut))
            os.ftruncate(f.fileno(), size)
            f.seek(size)
            f.write(cut[: MAX_STACKS_BYTES - size])
            return
        room = MAX_STACKS_BYTES - size
        text = ("\n== threads ==\n" + render_threads(training_thread)).encode("utf-8", "replace")
        if len(text) > room:
            text = text[: room - len(cut)] + cut
        f.write(text)


def render_threads(training_thread: Optional[int]) -> str:
    """Each thread's name and Python stack (most recent call last, the
    innermost :data:`MAX_FRAMES` frames), the training thread first."""
    frames = sys._current_frames()
    try:
        threads = {t.ident: t for t in threading.enumerate()}
        order = sorted(frames, key=lambda ident: (ident != training_thread, ident))
        lines: List[str] = []
        for ident in order:
            thread = threads.get(ident)
            about = [
                "ident %d" % ident,
                "native id %s" % getattr(thread, "native_id", None),
                "daemon" if thread is not None and thread.daemon else "not daemon",
            ]
            if ident == training_thread:
                about.append("the training thread")
            name = thread.name if thread is not None else "(not started by threading)"
            lines.append("Thread %r (%s):\n" % (name, ", ".join(about)))
            lines.extend(traceback.format_stack(frames[ident], limit=MAX_FRAMES))
            lines.append("\n")
        return "".join(lines)
    finally:
        del frames
