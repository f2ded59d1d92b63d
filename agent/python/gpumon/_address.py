"""Where the local agent listens: parsing ``unix:PATH`` / ``HOST:PORT``.

The address comes from ``init(agent=...)``, else ``GPUMON_AGENT``, else the
default of ``PROTOCOL.md``: ``unix:$XDG_RUNTIME_DIR/gpumon/hook.sock`` when
``XDG_RUNTIME_DIR`` is set, else ``unix:/tmp/gpumon-$UID/hook.sock``.

TCP addresses must be loopback, as the agent only listens there: the hook
never sends a job's details off the node.
"""

import ipaddress
import os
from dataclasses import dataclass
from typing import Mapping, Optional


@dataclass(frozen=True)
class AgentAddress:
    """A Unix socket path, or a loopback host and TCP port."""

    path: Optional[str] = None
    host: Optional[str] = None
    port: int = 0

    @property
    def is_unix(self) -> bool:
        return self.path is not None

    def __str__(self) -> str:
        if self.path is not None:
            return "unix:" + self.path
        if ":" in (self.host or ""):
            return "[%s]:%d" % (self.host, self.port)
        return "%s:%d" % (self.host, self.port)


def parse_address(text: str) -> AgentAddress:
    """Parses ``unix:PATH`` or ``HOST:PORT``; raises ``ValueError`` saying why."""
    if not isinstance(text, str):
        raise TypeError("agent address must be a str, not %s" % type(text).__name__)
    text = text.strip()
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if not path:
            raise ValueError("agent address %r has an empty socket path" % text)
        if "\0" in path:
            raise ValueError("agent address %r holds a NUL byte" % text)
        return AgentAddress(path=path)
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError("agent address %r is neither unix:PATH nor HOST:PORT" % text)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ValueError("agent address %r has no valid port (1-65535)" % text)
    if not _is_loopback(host):
        raise ValueError(
            "agent address %r is not on loopback; the agent listens only on "
            "127.0.0.1, ::1 or localhost" % text
        )
    return AgentAddress(host=host, port=port)


def default_address(environ: Mapping[str, str]) -> AgentAddress:
    """The address used when neither ``agent=`` nor ``GPUMON_AGENT`` is given."""
    runtime_dir = environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return AgentAddress(path=os.path.join(runtime_dir, "gpumon", "hook.sock"))
    return AgentAddress(path="/tmp/gpumon-%d/hook.sock" % os.getuid())


def resolve_address(agent: Optional[str], environ: Mapping[str, str]) -> AgentAddress:
    """``agent`` if given, else ``GPUMON_AGENT`` if set, else the default."""
    if agent is not None:
        return parse_address(agent)
    from_env = environ.get("GPUMON_AGENT")
    if from_env and from_env.strip():
        return parse_address(from_env)
    return default_address(environ)


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
