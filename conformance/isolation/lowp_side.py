"""The kernel process's side of a 16-bit sweep (conformance/lowp/): load a plugin's LowpKernel
list (`lowp_load`), call one on bit patterns (`lowp_call`; an accumulating kernel's VJP answers
one array per gradient, a binary one's its two stacked), or a binary one on a shard of all pairs,
made here (`lowp_pairs`: kernel.pair_inputs), or a binary one's VJP on a shard of triples, made
here too (`lowp_triples`: kernel.triple_inputs). Bits travel both ways as uint16; the
kernel sees arrays of its format's dtype. As untrusted as the plugin: the judge checks every
answer (conformance/lowp/remote.py)."""
from __future__ import annotations

import numpy as np

PREFIX = "lowp:"     # the table's keys of 16-bit kernels, apart from capsule names
GRADIENTS_MAX = 8    # a VJP's gradients sent back, at most (an op has 3 inputs at most)


def _load(spec: str, table: dict) -> dict:
    from conformance.lowp.kernel import LowpKernel
    from conformance.plugins import PluginError, import_attribute
    try:
        obj = import_attribute(spec)
        if callable(obj) and not isinstance(obj, (list, tuple)):
            obj = obj()
    except PluginError as exc:
        return {"plugin_error": str(exc)}
    except Exception as exc:   # the plugin's own factory raised: its defect, in its words
        return {"plugin_error": f"--plugin `{spec}`: calling it raised {type(exc).__name__}: "
                                f"{exc}"[:2000]}
    if not isinstance(obj, (list, tuple)) or not obj or not all(isinstance(k, LowpKernel)
                                                                for k in obj):
        return {"plugin_error": f"--plugin `{spec}` is not a non-empty list of LowpKernel "
                                "(conformance/lowp/kernel.py); declare 16-bit unary kernels so "
                                "(docs/EXHAUSTIVE.md)"}
    from conformance.lowp.formats import FormatUnavailableError
    try:
        for k in obj:
            k.fmt.numpy_dtype()
    except FormatUnavailableError as exc:
        return {"plugin_error": f"--plugin `{spec}`: {exc}"}
    out = []
    for k in obj:
        table[PREFIX + k.name] = k
        vjp_bound = k.bound_ulps if k.vjp_bound_ulps is None else k.vjp_bound_ulps
        out.append({"name": k.name, "op": k.op, "format": k.fmt.name,
                    "bound_ulps": float(k.bound_ulps), "accumulation": str(k.accumulation),
                    "has_vjp": callable(k.vjp), "vjp_bound_ulps": float(vjp_bound)})
    return {"kernels": out}


def _call(msg: dict, table: dict) -> dict:
    from conformance.isolation.kernel_side import KernelRaised, describe_returned
    from conformance.lowp.kernel import BINARY, InputMutated
    kernel = table[PREFIX + msg["name"]]
    inputs = [np.asarray(b, dtype=np.uint16) for b in msg["inputs"]]
    part = "vjp" if msg.get("part") == "vjp" else "forward"
    try:
        out = kernel.call(*inputs, part=part)
    except InputMutated as exc:
        return {"bits": None, "mutated": str(exc)[:300]}
    except Exception as exc:
        raise KernelRaised(exc) from exc
    dtype = kernel.fmt.numpy_dtype()
    if isinstance(out, np.ndarray) and out.dtype == dtype:
        return {"bits": np.ascontiguousarray(out).view(np.uint16)}
    if part == "vjp" and isinstance(out, (tuple, list)) and kernel.op in BINARY:
        if len(out) == 2 and all(isinstance(o, np.ndarray) and o.dtype == dtype
                                 and o.shape == out[0].shape for o in out):
            return {"bits": np.stack([np.ascontiguousarray(o).view(np.uint16) for o in out])}
    elif part == "vjp" and isinstance(out, (tuple, list)):     # one gradient per input
        if 0 < len(out) <= GRADIENTS_MAX and all(isinstance(o, np.ndarray) and o.dtype == dtype
                                                 for o in out):
            return {"bits": [np.ascontiguousarray(o).view(np.uint16) for o in out]}
        return {"bits": None, "returned": f"a {type(out).__name__} of {len(out)}: " +
                ", ".join(describe_returned(o) for o in out[:GRADIENTS_MAX])}
    return {"bits": None, "returned": describe_returned(out)}


def _pairs(msg: dict, table: dict) -> dict:
    """A binary kernel on a shard of all pairs, made here from the rows (kernel.pair_inputs),
    or its VJP on a shard of triples (kernel.triple_inputs): the first call's bits and where a
    second call's differ."""
    from conformance.isolation.kernel_side import KernelRaised, describe_returned
    from conformance.lowp.kernel import InputMutated
    kernel = table[PREFIX + msg["name"]]
    try:
        if "rows" in msg:
            bits, differ, where = kernel.call_pairs(np.asarray(msg["rows"], dtype=np.uint16))
        else:
            bits, differ, where = kernel.call_triples(np.asarray(msg["mults"], dtype=np.uint16),
                                                      np.asarray(msg["adds"], dtype=np.uint16))
    except InputMutated as exc:
        return {"bits": None, "mutated": str(exc)[:300]}
    except TypeError as exc:     # bits_of: a result of another dtype
        return {"bits": None, "returned": str(exc)[:300]}
    except Exception as exc:
        raise KernelRaised(exc) from exc
    if not isinstance(bits, np.ndarray) or bits.dtype != np.uint16:
        return {"bits": None, "returned": describe_returned(bits)}
    return {"bits": bits, "differ": int(differ), "differ_at": where}


def answer(op: str, msg: dict, table: dict) -> dict:
    if op == "lowp_load":
        return _load(msg.get("plugin"), table)
    return _pairs(msg, table) if op in ("lowp_pairs", "lowp_triples") else _call(msg, table)
