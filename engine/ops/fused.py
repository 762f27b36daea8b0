"""Fused ops (section 5.3.7): one tape op with its own local VJP where the model would otherwise
build a chain of temporaries. bias_gelu(x, b) = gelu(x + b), the add of a bias broadcast over
the leading axes followed by gelu, is the composition add -> gelu exactly: the sum is rounded
to float32 first (as add stores it), then gelu. (The fused cross-entropy loss stands beside
mse_loss in reduction.py.)"""
from __future__ import annotations

import math

import numpy as np

from engine.errors import ShapeError
from engine.ops._dispatch import apply, local_vjp
from engine.ops._tape_cuda import on_device
from engine.ops.elementwise import gelu_slope
from engine.registry import device_rule
from engine.tensor import Tensor
from engine.types import RuntimeEntry as Entry

_C = math.sqrt(2.0 / math.pi)


def bias_gelu(x: Tensor, b: Tensor) -> Tensor:
    """gelu(x + b) for x [..., d] (rank >= 1) and b [d]: the shape of x."""
    if x.ndim == 0:
        raise ShapeError("bias_gelu: x must have rank >= 1 (x [..., d], b [d]), got a rank-0 "
                         "tensor")
    if b.shape != (x.shape[-1],):
        raise ShapeError(f"bias_gelu: b must have shape (d,) = ({x.shape[-1]},) for x of shape "
                         f"{x.shape}, got {b.shape}; the bias runs along x's last axis")
    return apply(Entry.bias_gelu, (x, b), x.shape)


def bias_gelu_slope64(x, b):
    """(s, d): s = float32(x + b) as float64, d = gelu'(s) by the gelu rule's float64 formula
    (its limits at the infinities: -0 at -inf, 1 at +inf)."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = (x + b).astype(np.float64)      # float32 add: the composition's rounded sum
        t = np.tanh(_C * (s + 0.044715 * s ** 3))
        d = gelu_slope(s, t)
    return s, np.where(np.isneginf(s), -0.0, np.where(np.isposinf(s), 1.0, d))


@local_vjp(Entry.bias_gelu, tape=("bias_gelu.cu:tl_bias_gelu_bwd", "bias_gelu.cu:tl_bias_gelu_db"))
def _bias_gelu_vjp(inputs, out, g):
    # A native capsule's VJP is its own handler's (backend_vjp: the float32 kernels after
    # native_cuda.bias_gelu's forward, the float64 ones after native_cuda.bias_gelu.accurate's);
    # this rule serves the tape capsules, whose formula (float64, rounded once) is the accurate
    # variant's: on CUDA its kernels, tl_bias_gelu_bwd and tl_bias_gelu_db (lent by the
    # native-cuda provider through the registry: ops never import a provider).
    if on_device(g):
        return device_rule(Entry.bias_gelu)(inputs, out, g)
    x, b = inputs
    _, d = bias_gelu_slope64(x, b)
    with np.errstate(invalid="ignore", over="ignore"):
        dx64 = g.astype(np.float64) * d
    # db: the float64 terms summed over the leading axes, rounded once
    rows = math.prod(x.shape[:-1])          # explicit: reshape(-1, 0) cannot infer it
    return dx64.astype(np.float32), dx64.reshape(rows, x.shape[-1]).sum(axis=0).astype(np.float32)
