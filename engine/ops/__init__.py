"""The ops, one attribute per BackendOp name: `engine.ops.add`, `engine.ops.matmul`, ...

Each family module holds its wrappers and local VJP rules side by side.
"""
from __future__ import annotations

from engine.ops import elementwise as _ew
from engine.ops._dispatch import LOCAL_VJP, TAPE_FLUSHES_ON_CUDA, apply, vjp_function
from engine.ops.indexing import gather, scatter_add
from engine.ops.attention import scaled_dot_product_attention
from engine.ops.linalg import linear, matmul
from engine.ops.normalization import batch_norm, layer_norm
from engine.ops.random import bernoulli_mask, rand_uniform
from engine.ops.reduction import mse_loss, reduce_mean, reduce_sum
from engine.ops.shape import broadcast, concat, permute, reshape
from engine.ops.shape import slice_ as slice  # noqa: A001 - the op is named slice
from engine.ops.softmax import hard_masked_softmax, log_softmax, softmax

add, sub, mul, scale, clamp, safe_log = _ew.add, _ew.sub, _ew.mul, _ew.scale, _ew.clamp, _ew.safe_log
max, min, abs = _ew.maximum, _ew.minimum, _ew.abs_  # noqa: A001 - the ops are named so
sqrt, relu, gelu, sigmoid, tanh, softplus = _ew.sqrt, _ew.relu, _ew.gelu, _ew.sigmoid, _ew.tanh, _ew.softplus
exp, log, sin, cos, inv = _ew.exp, _ew.log, _ew.sin, _ew.cos, _ew.inv


def broadcast_pair(a, b):
    """Turn Python numbers into tensors and broadcast both operands to their common shape."""
    import numpy as np

    from engine.tensor import Tensor, tensor
    a = a if isinstance(a, Tensor) else tensor(np.float32(a))
    b = b if isinstance(b, Tensor) else tensor(np.float32(b))
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
    for name in __all__:
        if name not in ("apply", "vjp_function", "LOCAL_VJP", "TAPE_FLUSHES_ON_CUDA"):
            g[name] = tensor_checked(g[name])


__all__ = [
    "add", "sub", "mul", "scale", "abs", "sqrt", "clamp", "max", "min", "relu", "gelu",
    "sigmoid", "tanh", "softplus", "exp", "log", "sin", "cos", "inv", "safe_log", "log_softmax",
    "softmax", "hard_masked_softmax", "reduce_sum", "reduce_mean", "reshape", "permute",
    "broadcast", "concat", "slice", "gather", "scatter_add", "matmul", "linear", "mse_loss",
    "rand_uniform", "bernoulli_mask", "layer_norm", "batch_norm", "scaled_dot_product_attention",
    "broadcast_pair", "apply", "vjp_function", "LOCAL_VJP", "TAPE_FLUSHES_ON_CUDA",
]

_wrap_public_ops()
