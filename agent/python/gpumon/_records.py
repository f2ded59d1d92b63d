"""The wire shapes of PROTOCOL.md: records, reports, register and ack messages.

The training thread queues cheap tuples; the reporter thread turns them into
the dicts built here, clipped to the agent's limits (names 128 bytes, details
1024 bytes, 32 sections) so that no record is refused for its size, and packs
them into ``report`` lines of at most 1024 records and well under 1 MiB.
"""

import json
import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._env import Identity, truncate_utf8
from ._settings import (
    HOOK_VERSION,
    MAX_DETAIL_BYTES,
    MAX_DEVICE_BYTES,
    MAX_LABEL_BYTES,
    MAX_REPORT_BYTES,
    MAX_SECTIONS,
    MAX_STEP_COLLECTIVES,
    MAX_STEP_WAITS,
    PROTOCOL_VERSION,
)

# Record field <- key of torch.cuda.memory_stats(). The first two are required.
ALLOC_FIELDS = (
    ("allocated", "allocated_bytes.all.current"),
    ("reserved", "reserved_bytes.all.current"),
    ("active", "active_bytes.all.current"),
    ("inactive_split", "inactive_split_bytes.all.current"),
    ("peak_allocated", "allocated_bytes.all.peak"),
    ("peak_reserved", "reserved_bytes.all.peak"),
    ("alloc_retries", "num_alloc_retries"),
    ("ooms", "num_ooms"),
)

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


#: ``cap_source`` values: what set the allocator's cap.
CAP_SOURCES = ("memory_fraction", "alloc_conf", "allocator")


def alloc_fields(
    stats: Optional[Mapping[str, Any]],
    mem_info: Optional[Tuple[int, int]] = None,
    limit: Optional[Tuple[int, str]] = None,
) -> Optional[Dict[str, Any]]:
    """The fields of an ``alloc`` record, from ``memory_stats()``,
    ``mem_get_info()`` and ``memory_limit()``; ``None`` when the stats lack
    allocated or reserved (as before CUDA is initialised)."""
    if not stats:
        return None
    fields = {}
    for field, key in ALLOC_FIELDS:
        value = _byte_count(stats.get(key))
        if value is not None:
            fields[field] = value
    if "allocated" not in fields or "reserved" not in fields:
        return None
    if mem_info is not None:
        try:
            free, total = mem_info
        except (TypeError, ValueError):
            free = total = None
        free, total = _byte_count(free), _byte_count(total)
        if free is not None and total is not None and 0 < total <= MAX_DEVICE_BYTES:
            fields["device_used"] = max(0, total - free)
            fields["device_total"] = total
    cap = cap_fields(limit, fields.get("device_total"))
    if cap is not None:
        fields.update(cap)
    return fields


def cap_fields(limit: Any, device_total: Optional[int] = None) -> Optional[Dict[str, Any]]:
    """``{"cap", "cap_source"}`` from a ``memory_limit()`` answer, or ``None``.

    The cap is cut to ``device_total`` (the allocator cannot reserve more
    than the device holds); a cap that is not a byte count from 1 to
    :data:`MAX_DEVICE_BYTES` after that, or a source that is not one of
    :data:`CAP_SOURCES`, sends neither field.
    """
    try:
        cap, source = limit
    except (TypeError, ValueError):
        return None
    cap = _byte_count(cap)
    if cap is None or source not in CAP_SOURCES:
        return None
    if device_total is not None:
        cap = min(cap, device_total)
    if not 0 < cap <= MAX_DEVICE_BYTES:
        return None
    return {"cap": cap, "cap_source": source}


def reserved_bytes(stats: Optional[Mapping[str, Any]]) -> int:
    """``reserved_bytes.all.current`` of a ``memory_stats()`` dict, 0 if absent."""
    if not stats:
        return 0
    return _byte_count(stats.get("reserved_bytes.all.current")) or 0


def clip_name(name: str) -> str:
    return truncate_utf8(name, MAX_LABEL_BYTES)


def clean_label(name: Any) -> Optional[str]:
    """``name`` as the agent takes a label: cut to 128 bytes, control
    characters as spaces; ``None`` when it is not a string or is empty."""
    if not isinstance(name, str) or not name:
        return None
    return "".join(c if c.isprintable() else " " for c in clip_name(name))


def clip_detail(detail: Optional[str]) -> Optional[str]:
    return None if detail is None else truncate_utf8(detail, MAX_DETAIL_BYTES)


def to_record(item: tuple) -> Optional[Dict[str, Any]]:
    """The record for a tuple queued by the training thread (see ``_runtime``).

    ``("step", t, step, duration_ms, sections, clock[, group[, waits[,
    collectives]]])`` (``clock`` is ``"cuda"`` or ``"cpu"``; ``group`` the
    rank's peer group, see ``_peers``, or ``None``; ``waits`` ``{group name:
    [calls, ms]}`` or ``None``, and ``collectives`` ``[[group name, number,
    op, entered_ms, left_ms, wait_ms], ...]``, see ``_waits``), ``("event", t, name, detail)`` or ``("snapshot", t, name,
    fields_or_None)``.
    """
    kind = item[0]
    if kind == "step":
        _, t, step, duration_ms, sections, clock = item[:6]
        record = {
            "type": "step",
            "t": t,
            "step": step,
            "duration_ms": _finite_ms(duration_ms),
            "sections": _clip_sections(sections),
            "clock": clock,
        }
        if len(item) > 6 and item[6] is not None:
            record["group"] = item[6]
        waits = step_waits(item[7]) if len(item) > 7 else None
        if waits:
            record["waits"] = waits
        listed = step_collectives(item[8]) if len(item) > 8 else None
        if listed:
            record["collectives"] = listed
        return record
    if kind == "event":
        _, t, name, detail = item
        return {"type": "event", "t": t, "name": clip_name(name), "detail": clip_detail(detail)}
    if kind == "snapshot":
        _, t, name, fields = item
        return {"type": "snapshot", "t": t, "name": clip_name(name), "stats": fields}
    return None


def step_waits(waits: Optional[Mapping[str, Any]]) -> List[List[Any]]:
    """A step record's ``waits``: ``[name, calls, ms]`` of the
    :data:`MAX_STEP_WAITS` groups waited in longest, sorted by name."""
    rows = []
    for name, (calls, ms) in (waits or {}).items():
        rows.append([clip_name(name), max(0, int(calls)), _wait_ms(ms)])
    rows.sort(key=lambda row: (-row[2], row[0]))
    return sorted(rows[:MAX_STEP_WAITS], key=lambda row: row[0])


def step_collectives(listed: Optional[List[list]]) -> List[List[Any]]:
    """A step record's ``collectives``: at most :data:`MAX_STEP_COLLECTIVES`
    ``[group, number, op, entered_ms, left_ms, wait_ms]``, names cut to the
    label limit, times finite and left no earlier than entered."""
    rows = []
    names: Dict[str, str] = {}
    for name, seq, op, entered, left, ms in (listed or [])[:MAX_STEP_COLLECTIVES]:
        group = names.get(name)
        if group is None:
            group = names[name] = clip_name(name)
        kind = names.get(op)
        if kind is None:
            kind = names[op] = clip_name(op)
        entered = _wait_ms(entered)
        rows.append([group, seq, kind, entered, max(entered, _wait_ms(left)), _wait_ms(ms)])
    return rows


def alloc_record(t: float, fields: Dict[str, int]) -> Dict[str, Any]:
    record = {"type": "alloc", "t": t}
    record.update(fields)
    return record


def register_message(pid: int, identity: Identity, device: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return {
        "v": PROTOCOL_VERSION,
        "op": "register",
        "pid": pid,
        "job": identity.job,
        "rank": identity.rank,
        "local_rank": identity.local_rank,
        "world_size": identity.world_size,
        "hook_version": HOOK_VERSION,
        "device": clean_device(device),
    }


def poll_message() -> Dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "op": "poll"}


def ack_message(
    action_id: int,
    done: bool,
    freed_bytes: Optional[int] = None,
    at_step: Optional[int] = None,
    response: Optional[str] = None,
    detail: Optional[str] = None,
) -> Dict[str, Any]:
    """An ``ack``; ``freed_bytes`` is sent for ``done`` only (``null`` otherwise)."""
    return {
        "v": PROTOCOL_VERSION,
        "op": "ack",
        "id": action_id,
        "state": "done" if done else "failed",
        "freed_bytes": max(0, int(freed_bytes or 0)) if done else None,
        "at_step": at_step,
        "response": clip_detail(response),
        "detail": clip_detail(detail),
    }


def clean_device(device: Any) -> Optional[Dict[str, Any]]:
    """``device`` with the four protocol fields, or ``None`` if it is unusable."""
    if not isinstance(device, Mapping):
        return None
    index = device.get("index")
    total = _byte_count(device.get("total_bytes"))
    if not isinstance(index, int) or isinstance(index, bool) or index < 0 or total is None:
        return None
    uuid = device.get("uuid")
    name = device.get("name")
    return {
        "index": index,
        "uuid": clip_name(uuid) if isinstance(uuid, str) and uuid else None,
        "name": clip_name(name) if isinstance(name, str) and name else None,
        "total_bytes": total,
    }


def encode_record(record: Dict[str, Any]) -> Optional[bytes]:
    """``record`` as compact JSON, or ``None`` when it cannot be encoded or
    would not fit in a report on its own."""
    try:
        raw = _ENCODER.encode(record).encode("utf-8")
    except (TypeError, ValueError):
        return None
    return raw if len(raw) + len(REPORT_HEAD) + 3 <= MAX_REPORT_BYTES else None


#: Start of every ``report`` line; the encoded records follow.
REPORT_HEAD = b'{"v":%d,"op":"report","records":[' % PROTOCOL_VERSION


def report_line(encoded: List[bytes]) -> bytes:
    """A ``report`` line carrying already-encoded records."""
    return REPORT_HEAD + b",".join(encoded) + b"]}\n"


def _byte_count(value: Any) -> Optional[int]:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _finite_ms(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        return 0.0
    return round(value, 4)


def _wait_ms(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        return 0.0
    return round(value, 3)


def _clip_sections(sections: Mapping[str, float]) -> Dict[str, float]:
    clipped = {}
    for name, ms in sections.items():
        if len(clipped) >= MAX_SECTIONS:
            break
        key = clip_name(name)
        clipped[key] = clipped.get(key, 0.0) + _finite_ms(ms)
    return clipped
