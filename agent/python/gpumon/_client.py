"""One JSON-lines connection to the agent: send a request, read its answer.

Only the reporter thread uses it. Every socket operation has a timeout, so a
stuck agent costs at most that long; any failure is an :class:`OSError`
(including :class:`ProtocolError`), after which the caller drops the
connection and reconnects later.
"""

import json
import os
import socket
import stat
from typing import Any, Dict, Optional

from ._address import AgentAddress
from ._settings import MAX_LINE_BYTES


class ProtocolError(OSError):
    """The agent answered something that is not a valid response line."""


class AgentConnection:
    """A connected socket to the agent, speaking one request per line."""

    def __init__(self, address: AgentAddress, timeout_s: float):
        self._address = address
        self._buffer = bytearray()
        if address.is_unix:
            unsafe = unsafe_socket_dir(address.path)
            if unsafe is not None:
                raise PermissionError(unsafe)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout_s)
                sock.connect(address.path)
            except BaseException:
                sock.close()
                raise
        else:
            sock = socket.create_connection((address.host, address.port), timeout=timeout_s)
            sock.settimeout(timeout_s)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self._sock = sock

    def request(self, message: Dict[str, Any]) -> Dict[str, Any]:
        """Sends ``message`` as one line and returns the answer."""
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        return self.request_line(line.encode("utf-8") + b"\n")

    def request_line(self, line: bytes) -> Dict[str, Any]:
        """Sends an encoded request line (ending in ``\\n``) and returns the answer."""
        if len(line) > MAX_LINE_BYTES:
            raise ProtocolError("request of %d bytes exceeds the 1 MiB line limit" % len(line))
        self._sock.sendall(line)
        answer = self._read_line()
        try:
            response = json.loads(answer.decode("utf-8"))
        except ValueError as e:
            raise ProtocolError("agent sent a line that is not JSON: %s" % e) from None
        if not isinstance(response, dict) or not isinstance(response.get("ok"), bool):
            raise ProtocolError('agent sent a response without a boolean "ok"')
        return response

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass

    def _read_line(self) -> bytes:
        buffer = self._buffer
        searched = 0
        while True:
            end = buffer.find(b"\n", searched)
            if end >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                return line
            searched = len(buffer)
            if searched > MAX_LINE_BYTES:
                raise ProtocolError("agent sent a line over the 1 MiB limit")
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ConnectionError("the agent closed the connection")
            buffer += chunk


def unsafe_socket_dir(path: str) -> Optional[str]:
    """Why the directory of the agent's socket at ``path`` is not to be
    trusted, or ``None``: a symbolic link, a directory of another user (root
    excepted: the node's agent), or one others may write in without the
    sticky bit. In ``/tmp`` another user could make ``/tmp/gpumon-UID``
    first and listen there, receiving this process's records and sending it
    actions; the agent refuses such a directory too."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        info = os.lstat(directory)
    except OSError:
        return None  # nothing there: the connection fails on its own
    if stat.S_ISLNK(info.st_mode):
        return "%s is a symbolic link: gpumon does not connect to a socket there" % directory
    me = os.geteuid()
    if info.st_uid not in (me, 0):
        return "%s belongs to uid %d, not to you (uid %d) or root: gpumon does not connect to a socket there" % (
            directory,
            info.st_uid,
            me,
        )
    if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
        return "%s may be written by every user: gpumon does not connect to a socket there" % directory
    return None
