"""Sizes and non-finite values of tensors, for ``analyze_model`` and
``check_finite``.

Sizing reads metadata only: elements times element size for a dense tensor,
the stored parts (values and indices) of a sparse one, so a sparse tensor's
elements are the values it stores.

Checking for NaN and Inf costs one reduction per floating tensor, its L2
norm: through ``torch._foreach_norm`` where torch has it (one multi-tensor
kernel per device and dtype, as ``clip_grad_norm_`` does), else
``torch.linalg.vector_norm``. A NaN anywhere makes the norm NaN and an Inf
makes it Inf, so a finite norm proves the tensor finite. The norms are
stacked per device and copied to the host once per device: the only waits
for the GPU. Only a tensor whose norm is not finite is counted exactly
(``isnan().sum()``, ``isinf().sum()``); a norm that overflowed on large
finite values costs that count and finds nothing. Meta tensors hold no
values and are counted as unchecked.
"""

from typing import Any, Dict, List, Optional, Tuple

#: The parts a sparse tensor stores, by layout.
_SPARSE_PARTS = {
    "sparse_coo": ("_indices", "_values"),
    "sparse_csr": ("crow_indices", "col_indices", "values"),
    "sparse_bsr": ("crow_indices", "col_indices", "values"),
    "sparse_csc": ("ccol_indices", "row_indices", "values"),
    "sparse_bsc": ("ccol_indices", "row_indices", "values"),
}

Usage = Dict[str, int]
#: ``(nan, inf)`` counts of one tensor, or ``None`` when it could not be checked.
Count = Optional[Tuple[int, int]]


def usage() -> Usage:
    """An empty tally of tensors, elements and bytes."""
    return {"tensors": 0, "elements": 0, "bytes": 0}


def add(tally: Usage, elements: int, nbytes: int) -> None:
    tally["tensors"] += 1
    tally["elements"] += elements
    tally["bytes"] += nbytes


def layout_name(t: Any) -> str:
    return str(t.layout).replace("torch.", "")


def dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def size_of(t: Any) -> Tuple[int, int]:
    """``(elements, bytes)`` that ``t`` holds; raises for a layout it cannot size."""
    layout = layout_name(t)
    if layout == "strided":
        elements = int(t.numel())
        return elements, elements * int(t.element_size())
    parts = _SPARSE_PARTS.get(layout)
    if parts is None:
        raise ValueError("cannot size a tensor of layout %s" % layout)
    tensors = [getattr(t, part)() for part in parts]
    nbytes = sum(int(p.numel()) * int(p.element_size()) for p in tensors)
    return int(tensors[-1].numel()), nbytes


def storage_key(t: Any) -> tuple:
    """Equal for two tensors that are the same memory (tied weights, even as
    distinct ``Parameter`` objects), so each is counted once."""
    try:
        pointer = t.untyped_storage().data_ptr()
    except Exception:  # sparse, meta or a tensor subclass without storage
        pointer = 0
    if pointer:
        return (str(t.device), pointer, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
    return ("object", id(t))


def count_nonfinite(torch: Any, tensors: List[Any]) -> List[Count]:
    """``(nan, inf)`` of every tensor, ``None`` where unchecked (see the module
    docs for the cost). Call under ``torch.no_grad()``."""
    results: List[Count] = [(0, 0)] * len(tensors)
    groups: Dict[tuple, List[Tuple[int, Any]]] = {}
    for i, t in enumerate(tensors):
        try:
            values = _values(torch, t)
        except Exception:  # an odd subclass or layout
            values = None
        if values is None:
            results[i] = None
        elif values.numel() > 0 and (values.dtype.is_floating_point or values.dtype.is_complex):
            if values.dtype.is_complex:
                values = torch.view_as_real(values)
            groups.setdefault((values.device, values.dtype), []).append((i, values))
    by_device: Dict[Any, List[Tuple[int, Any, Any]]] = {}
    for (device, _dtype), members in groups.items():
        for (i, values), norm in zip(members, _norms(torch, [v for _, v in members])):
            if norm is None:
                results[i] = None
            else:
                by_device.setdefault(device, []).append((i, values, norm))
    for entries in by_device.values():
        try:
            norms = torch.stack([norm.reshape(()).float() for _, _, norm in entries])
            finite = torch.isfinite(norms).tolist()
        except Exception:  # e.g. tensors of a fake or lazy device
            finite = [None] * len(entries)
        for (i, values, _), ok in zip(entries, finite):
            if ok is None:
                results[i] = None
            elif not ok:
                results[i] = (int(torch.isnan(values).sum()), int(torch.isinf(values).sum()))
    return results


def _values(torch: Any, t: Any) -> Any:
    """The tensor holding ``t``'s values, ``None`` when they cannot be read."""
    if not isinstance(t, torch.Tensor) or getattr(t, "is_meta", False):
        return None
    layout = layout_name(t)
    if layout == "strided":
        return t
    if layout == "sparse_coo":
        return t._values()
    if layout in _SPARSE_PARTS:
        return t.values()
    return None


def _norms(torch: Any, values: List[Any]) -> List[Any]:
    """The L2 norm of each tensor (one device and dtype), ``None`` where it failed."""
    foreach = getattr(torch, "_foreach_norm", None)
    if foreach is not None:
        try:
            return list(foreach(values, 2.0))
        except Exception:
            pass  # some dtypes or devices lack the fused kernel
    norms = []
    for v in values:
        try:
            norms.append(torch.linalg.vector_norm(v, 2.0))
        except Exception:
            norms.append(None)
    return norms
