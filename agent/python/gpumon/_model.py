"""``gpumon.analyze_model`` and ``gpumon.check_finite``: what a model holds in
parameters, gradients and optimizer state, and whether any of it is NaN or Inf.

Tensors are attributed to the model's top-level modules (its named
children; parameters directly on the model go under ``(root)``, optimizer
state of parameters outside the model under ``(not in the model)``) and
counted once however often they are shared. Sizes come from metadata;
non-finite values cost one reduction per tensor (``_tensors``). Both
functions return what they could read: a tensor they cannot size or check
is counted in ``skipped`` or ``unchecked`` and the reason logged once.

The summaries below are the details of the ``model`` and ``nonfinite``
events: compact JSON cut to the agent's 1024-byte detail limit by leaving
out the smallest modules (or tensors) first.
"""

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any, Dict, List, Tuple

from ._once import LogOnce
from ._settings import MAX_DETAIL_BYTES
from ._tensors import add, count_nonfinite, dtype_name, size_of, storage_key, usage

logger = logging.getLogger("gpumon")

#: Where the parameters set directly on the model go.
ROOT = "(root)"
#: Where optimizer state goes whose parameter is not in the model.
OUTSIDE = "(not in the model)"
#: Tensors with NaN or Inf values listed by name.
MAX_WHERE = 16
#: Longest module or tensor name in an event detail, characters.
MAX_NAME_IN_DETAIL = 64

_LOG = LogOnce()
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def analyze(model: Any, optimizer: Any = None) -> Dict[str, Any]:
    """See :func:`gpumon.analyze_model`; raises only ``TypeError`` for
    arguments that are not a module or an optimizer."""
    named = _named_parameters(model)
    if optimizer is not None and not isinstance(getattr(optimizer, "state", None), Mapping):
        raise TypeError(
            "optimizer must be a torch.optim.Optimizer (with .state), not %s" % type(optimizer).__name__
        )
    kinds = ("params", "grads", "optimizer_state")
    result: Dict[str, Any] = {kind: usage() for kind in kinds}
    result.update(trainable=usage(), frozen=usage(), total_bytes=0, skipped=0)
    modules: Dict[str, Dict[str, Any]] = {}
    dtypes: Dict[str, Dict[str, Any]] = {}
    result["by_module"], result["by_dtype"] = modules, dtypes
    torch = sys.modules.get("torch")
    for child in _children(model):
        _entry(modules, child)
    seen: set = set()
    params: List[Tuple[str, Any]] = []
    grads: List[Tuple[str, Any]] = []
    top_of: Dict[int, str] = {}

    def count(kind: str, top: str, t: Any) -> bool:
        """Tallies ``t`` once; false when seen before or not sizeable."""
        key = storage_key(t)
        if key in seen:
            return False
        seen.add(key)
        try:
            elements, nbytes = size_of(t)
        except Exception as e:
            result["skipped"] += 1
            _LOG.log("size:" + type(e).__name__, logging.WARNING, "gpumon: cannot size a tensor: %s", e)
            return False
        for tally in (result[kind], _entry(modules, top)[kind], _entry(dtypes, dtype_name(t.dtype))[kind]):
            add(tally, elements, nbytes)
        result["total_bytes"] += nbytes
        _entry(modules, top)["bytes"] += nbytes
        _entry(dtypes, dtype_name(t.dtype))["bytes"] += nbytes
        if kind == "params":
            add(result["trainable" if getattr(t, "requires_grad", False) else "frozen"], elements, nbytes)
        return True

    for name, p in named:
        top = name.split(".", 1)[0] if "." in name else ROOT
        top_of.setdefault(id(p), top)
        if count("params", top, p):
            params.append((name, p))
        grad = getattr(p, "grad", None)
        if grad is not None and count("grads", top, grad):
            grads.append((name, grad))
    if optimizer is not None:
        for param, state in list(optimizer.state.items()):
            if not isinstance(state, Mapping):
                continue
            for value in list(state.values()):
                if torch is not None and isinstance(value, torch.Tensor):
                    count("optimizer_state", top_of.get(id(param), OUTSIDE), value)
    result["nonfinite"] = nonfinite(torch, params, grads)
    return result


def check(model: Any) -> Dict[str, Any]:
    """See :func:`gpumon.check_finite`."""
    named = _named_parameters(model)
    seen: set = set()
    params: List[Tuple[str, Any]] = []
    grads: List[Tuple[str, Any]] = []
    for name, p in named:
        for tensor, into in ((p, params), (getattr(p, "grad", None), grads)):
            if tensor is None:
                continue
            key = storage_key(tensor)
            if key not in seen:
                seen.add(key)
                into.append((name, tensor))
    return nonfinite(sys.modules.get("torch"), params, grads)


def nonfinite(torch: Any, params: List[Tuple[str, Any]], grads: List[Tuple[str, Any]]) -> Dict[str, Any]:
    """NaN and Inf counts of ``params`` and ``grads`` (name, tensor), with the
    first :data:`MAX_WHERE` tensors holding any."""
    out: Dict[str, Any] = {
        "params": {"nan": 0, "inf": 0},
        "grads": {"nan": 0, "inf": 0},
        "where": [],
        "tensors": 0,
        "unchecked": 0,
    }
    tagged = [("params", "param", n, t) for n, t in params] + [("grads", "grad", n, t) for n, t in grads]
    if not tagged:
        return out
    if torch is None:
        out["unchecked"] = len(tagged)
        return out
    try:
        with torch.no_grad():
            counts = count_nonfinite(torch, [t for _, _, _, t in tagged])
    except Exception as e:
        _LOG.log("check", logging.WARNING, "gpumon: checking tensors for NaN and Inf failed: %s", e)
        out["unchecked"] = len(tagged)
        return out
    for (kind, of, name, _), found in zip(tagged, counts):
        if found is None:
            out["unchecked"] += 1
            continue
        nan, inf = found
        out[kind]["nan"] += nan
        out[kind]["inf"] += inf
        if nan or inf:
            out["tensors"] += 1
            if len(out["where"]) < MAX_WHERE:
                out["where"].append({"name": name, "of": of, "nan": nan, "inf": inf})
    if out["unchecked"]:
        _LOG.log(
            "unchecked",
            logging.INFO,
            "gpumon: %d tensors could not be checked for NaN and Inf (meta or odd layouts)",
            out["unchecked"],
        )
    return out


def model_detail(result: Dict[str, Any]) -> str:
    """The ``model`` event's detail: totals, non-finite counts, the dtypes and
    the largest modules, within :data:`MAX_DETAIL_BYTES`."""
    pair = lambda u: [u["elements"], u["bytes"]]  # noqa: E731
    nf = result["nonfinite"]
    modules = sorted(result["by_module"].items(), key=lambda kv: (-kv[1]["bytes"], kv[0]))
    summary: Dict[str, Any] = {
        "bytes": result["total_bytes"],
        "params": pair(result["params"]),
        "grads": pair(result["grads"]),
        "optimizer_state": pair(result["optimizer_state"]),
        "trainable": pair(result["trainable"]),
        "frozen": pair(result["frozen"]),
        "nonfinite": {k: [nf[k]["nan"], nf[k]["inf"]] for k in ("params", "grads")},
        "dtypes": {name: entry["bytes"] for name, entry in sorted(result["by_dtype"].items())},
        "modules_total": len(modules),
        "modules": [[name[:MAX_NAME_IN_DETAIL], entry["bytes"]] for name, entry in modules],
    }
    return _fit(summary, ("modules", "dtypes"))


def nonfinite_detail(result: Dict[str, Any]) -> str:
    """The ``nonfinite`` event's detail: counts and the tensors holding them."""
    summary = {
        "params": [result["params"]["nan"], result["params"]["inf"]],
        "grads": [result["grads"]["nan"], result["grads"]["inf"]],
        "tensors": result["tensors"],
        "where": [[w["name"][:MAX_NAME_IN_DETAIL], w["of"], w["nan"], w["inf"]] for w in result["where"]],
    }
    return _fit(summary, ("where",))


def _fit(summary: Dict[str, Any], shrinkable: Tuple[str, ...]) -> str:
    """``summary`` as JSON, leaving out the last entries of the ``shrinkable``
    lists or maps, in that order, until it fits."""
    for key in shrinkable:
        while len(_ENCODE(summary).encode("utf-8")) > MAX_DETAIL_BYTES and summary[key]:
            value = summary[key]
            if isinstance(value, list):
                value.pop()
            else:
                value.pop(next(reversed(value)))
    return _ENCODE(summary)


def _named_parameters(model: Any) -> List[Tuple[str, Any]]:
    named = getattr(model, "named_parameters", None)
    if not callable(named):
        raise TypeError("need a torch.nn.Module (named_parameters), not %s" % type(model).__name__)
    try:
        return list(named())
    except Exception as e:
        _LOG.log("params", logging.WARNING, "gpumon: listing the model's parameters failed: %s", e)
        return []


def _children(model: Any) -> List[str]:
    try:
        return [name for name, _ in model.named_children()]
    except Exception:
        return []


def _entry(table: Dict[str, Dict[str, Any]], name: str) -> Dict[str, Any]:
    entry = table.get(name)
    if entry is None:
        entry = table[name] = {"params": usage(), "grads": usage(), "optimizer_state": usage(), "bytes": 0}
    return entry
