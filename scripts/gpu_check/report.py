"""What gpu-check found: figures and checks per phase, the JSON summary and the text table.

A check holds a measured value, the bound it must meet and whether it did.
A phase that could not be carried out fails as one check named ``ran``,
saying why, and the other phases still run.
"""

import json
import os
import platform
import time
from typing import Any, Dict, List, Optional


class Phase:
    """One phase's figures (anything JSON) and checks."""

    def __init__(self, name: str, title: str):
        self.name = name
        self.title = title
        self.figures: Dict[str, Any] = {}
        self.checks: List[Dict[str, Any]] = []
        self.started = time.time()
        self.seconds = 0.0

    def check(self, name: str, ok: bool, value: Any, bound: str, detail: str = "") -> bool:
        self.checks.append({"name": name, "ok": bool(ok), "value": value, "bound": bound, "detail": detail})
        return bool(ok)

    def at_least(self, name: str, value: Optional[float], low: float, unit: str = "", detail: str = "") -> bool:
        ok = value is not None and value >= low
        return self.check(name, ok, _round(value), ">= %s%s" % (_num(low), unit), detail)

    def at_most(self, name: str, value: Optional[float], high: float, unit: str = "", detail: str = "") -> bool:
        ok = value is not None and value <= high
        return self.check(name, ok, _round(value), "<= %s%s" % (_num(high), unit), detail)

    def within(self, name: str, value: Optional[float], low: float, high: float, unit: str = "", detail: str = "") -> bool:
        ok = value is not None and low <= value <= high
        return self.check(name, ok, _round(value), "%s..%s%s" % (_num(low), _num(high), unit), detail)

    def failed(self, why: str) -> None:
        self.check("ran", False, None, "the phase runs to its end", why)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c["ok"] for c in self.checks)

    def to_json(self) -> Dict[str, Any]:
        return {
            "title": self.title,
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "figures": self.figures,
            "checks": self.checks,
        }


def summary(phases: List[Phase], mode: str, started: float, environment: Dict[str, Any]) -> Dict[str, Any]:
    failed = ["%s: %s" % (p.name, c["name"]) for p in phases for c in p.checks if not c["ok"]]
    return {
        "gpu_check": 1,
        "mode": mode,
        "started_t": started,
        "seconds": round(time.time() - started, 1),
        "host": platform.node(),
        "environment": environment,
        "passed": not failed and bool(phases),
        "failed": failed,
        "phases": {p.name: p.to_json() for p in phases},
    }


def table(doc: Dict[str, Any]) -> str:
    """The summary as a short text table: one line per check."""
    rows = [("phase", "check", "value", "bound", "")]
    for name, phase in doc["phases"].items():
        for c in phase["checks"]:
            value = c["value"]
            text = json.dumps(value) if not isinstance(value, str) else value
            rows.append((name, c["name"], _clip(text, 40), c["bound"], "ok" if c["ok"] else "FAIL"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for r in rows:
        lines.append("  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4])
    env = doc["environment"]
    head = "gpumon gpu-check (%s) on %s: %s in %.0f s" % (
        doc["mode"],
        env.get("device", {}).get("name") or "no GPU",
        "passed" if doc["passed"] else "FAILED",
        doc["seconds"],
    )
    out = [head, ""] + lines
    for name, phase in doc["phases"].items():
        for c in phase["checks"]:
            if not c["ok"] and c["detail"]:
                out.append("%s: %s: %s" % (name, c["name"], c["detail"]))
    return "\n".join(out) + "\n"


def write(doc: Dict[str, Any], out_dir: str) -> str:
    path = os.path.join(out_dir, "summary.json")
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)
    with open(os.path.join(out_dir, "summary.txt"), "w") as f:
        f.write(table(doc))
    return path


def _round(value: Optional[float]) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    return value


def _num(x: float) -> str:
    return ("%d" % x) if float(x).is_integer() else ("%g" % x)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
