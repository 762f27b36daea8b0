"""The ops, one attribute per BackendOp name: `engine.ops.add`, `engine.ops.matmul`, ...

Each family module holds its wrappers and local VJP rules side by side.
"""
from __future__ import annotations

from engine.ops import (attention, attention_heads, elementwise, fused, indexing, linalg,
                        normalization, random, pooling, reduction, scan, shape, softmax, spectral)
from engine.ops import conv as _conv_family
from engine.ops._dispatch import LOCAL_VJP, TAPE_FLUSHES_ON_CUDA, apply, vjp_function
from engine.types import BackendOp, RuntimeEntry

# Every BackendOp that has a wrapper is exported under its name from the family module that defines
# it, so a new op is a wrapper in its family module and nothing here (BackendOp also names ops not
# built yet: those have none). Four wrappers carry another name in their module because the op's
# name is a Python builtin.
_FAMILIES = (elementwise, shape, reduction, indexing, linalg, softmax, normalization, attention,
             random, spectral, scan, pooling, _conv_family, fused, attention_heads)
_SPELLED = {"max": "maximum", "min": "minimum", "abs": "abs_", "slice": "slice_"}


def _export_ops() -> list[str]:
    names = []
    for op in BackendOp:
        attr = _SPELLED.get(op.label, op.label)
        found = [m for m in _FAMILIES if callable(getattr(m, attr, None))]
        if not found:
            continue
        if len(found) > 1:
            raise ImportError(f"op `{op.label}` needs exactly one wrapper `{attr}` in the family "
                              f"modules of engine/ops/; found it in {[m.__name__ for m in found]}")
        globals()[op.label] = getattr(found[0], attr)
        names.append(op.label)
    return names


def broadcast_pair(a, b):
    """Turn Python numbers into tensors and broadcast both operands to their common shape."""
    import numpy as np

    from engine.errors import ParameterTypeError
    from engine.tensor import Tensor, is_operand, tensor
    for name, value in (("a", a), ("b", b)):
        if not is_operand(value):
            raise ParameterTypeError(f"broadcast_pair: `{name}` is a {type(value).__name__}; "
                                     "pass a Tensor, a real number or a NumPy array of them")
    # tensor() rounds as np.float32 did, but names a finite value beyond float32 (t * 1e300
    # multiplied by inf) and an integer beyond int64.
    a = a if isinstance(a, Tensor) else tensor(a)
    b = b if isinstance(b, Tensor) else tensor(b)
    if a.shape == b.shape:
        return a, b
    try:
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        from engine.errors import ShapeError
        raise ShapeError(f"shapes {a.shape} and {b.shape} do not broadcast together") from None
    return (a if a.shape == shape else broadcast(a, shape),
            b if b.shape == shape else broadcast(b, shape))


def _wrap_public_ops() -> None:
    from engine.ops._public import tensor_checked
    g = globals()
    for name in OP_NAMES + ["broadcast_pair"] + list(CONV_2D):
        g[name] = tensor_checked(g[name])


# The runtime entry points (engine.types.RuntimeEntry: the packed rfft and irfft) are exported
# the same way, after the ops: they are not BackendOps, but have wrappers and capsules like them.
def _export_entries() -> list[str]:
    names = []
    for entry in RuntimeEntry:
        found = [m for m in _FAMILIES if callable(getattr(m, entry.label, None))]
        if found:
            globals()[entry.label] = getattr(found[0], entry.label)
            names.append(entry.label)
    return names


ENTRY_NAMES = _export_entries()
OP_NAMES = _export_ops() + ENTRY_NAMES   # the built ops in BackendOp's order, then the entries
# TorchLean's 2-D convolution entry points: thin wrappers over conv / conv_transpose (same op)
CONV_2D = {"conv2d": _conv_family.conv2d, "conv_transpose2d": _conv_family.conv_transpose2d}
globals().update(CONV_2D)
__all__ = OP_NAMES + ["broadcast_pair", "apply", "vjp_function", "LOCAL_VJP",
                      "TAPE_FLUSHES_ON_CUDA", "ENTRY_NAMES"] + list(CONV_2D)

_wrap_public_ops()
