"""layer_norm and batch_norm: one tape op each, with a local VJP rule (no chain of temporaries);
add_layer_norm, a pre-norm block's residual add and layer norm as one tape op (section 5.3.7)."""
from __future__ import annotations

import math

import numpy as np

from engine.errors import ParameterValueError, ShapeError
from engine.float32 import FLT_MAX
from engine.ops import _checks
from engine.autograd import split
from engine.ops._dispatch import apply, local_vjp
from engine.ops._xp import xp_of
from engine.tape_saves import saves
from engine.tensor import Tensor
from engine.types import BackendOp as Op, RuntimeEntry as Entry


def _eps(op: str, eps) -> float:
    """eps rounded to float32, as every float parameter is (docs/OPS.md); it must stay positive."""
    x = _checks.number(op, "eps", eps)
    if not x > 0 or not math.isfinite(x) or not np.float32(x) > 0 or x > FLT_MAX:
        raise ParameterValueError(f"{op}: eps must be a positive finite number that float32 can "
                                  f"hold, got {eps!r}")
    return float(np.float32(eps))


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    if x.ndim < 1 or gamma.shape != (x.shape[-1],) or beta.shape != (x.shape[-1],):
        raise ShapeError(f"layer_norm: wants x [..., d], gamma [d], beta [d]; got {x.shape}, "
                         f"{gamma.shape}, {beta.shape}")
    return apply(Op.layer_norm, (x, gamma, beta), x.shape, {"eps": _eps("layer_norm", eps)})


def batch_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    if x.ndim < 2 or gamma.shape != (x.shape[1],) or beta.shape != (x.shape[1],):
        raise ShapeError(f"batch_norm: wants x [N, C, ...], gamma [C], beta [C]; got {x.shape}, "
                         f"{gamma.shape}, {beta.shape}")
    return apply(Op.batch_norm, (x, gamma, beta), x.shape, {"eps": _eps("batch_norm", eps)})


def add_layer_norm(x: Tensor, r: Tensor, gamma: Tensor, beta: Tensor,
                   eps: float = 1e-5) -> tuple[Tensor, Tensor]:
    """(s, y) = (x + r, layer_norm(x + r, gamma, beta, eps)) for x, r [..., d]: the composition
    add -> layer_norm exactly (s rounded to float32 as add stores it, then normalised), as one
    op: one pass over x and r that writes s and y, where the two ops read s back. The op's output
    is [s, y] stacked ([2, ..., d]); s and y are views of it, each its own edge of the tape."""
    if x.ndim < 1 or r.shape != x.shape or gamma.shape != (x.shape[-1],) or \
            beta.shape != (x.shape[-1],):
        raise ShapeError(f"add_layer_norm: wants x [..., d], r of x's shape, gamma [d], beta [d]; "
                         f"got {x.shape}, {r.shape}, {gamma.shape}, {beta.shape}")
    out = apply(Entry.add_layer_norm, (x, r, gamma, beta), (2,) + x.shape,
                {"eps": _eps("add_layer_norm", eps)})
    return split(out, 2)


def normalize_vjp(x, gamma, g, eps, axes, channel_shape, plus=None):
    """Shared by both norms: statistics over `axes`, affine parameters shaped `channel_shape`
    after broadcasting. Evaluated in float64 and rounded once per gradient; `plus` (x's shape) is
    added to dx in float64 before its rounding (add_layer_norm's cotangent of the sum)."""
    xp = xp_of(g)
    x64, g64 = x.astype(xp.float64), g.astype(xp.float64)
    gam = gamma.astype(xp.float64).reshape(channel_shape)
    mu = x64.mean(axis=axes, keepdims=True)
    rstd = 1.0 / xp.sqrt(((x64 - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
    xhat = (x64 - mu) * rstd
    dxhat = g64 * gam
    dx = rstd * (dxhat - dxhat.mean(axis=axes, keepdims=True)
                 - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True))
    other = tuple(d for d in range(x.ndim) if channel_shape[d] == 1)
    dgamma = (g64 * xhat).sum(axis=other).reshape(gamma.shape)
    dbeta = g64.sum(axis=other).reshape(gamma.shape)
    if plus is not None:
        dx = dx + plus.astype(xp.float64)
    f32 = xp.float32
    return dx.astype(f32), dgamma.astype(f32), dbeta.astype(f32)


@local_vjp(Op.layer_norm)
@saves(0, 1)
def _layer_norm_vjp(inputs, out, g, eps):
    x, gamma, _ = inputs
    shape = (1,) * (x.ndim - 1) + (x.shape[-1],)
    return normalize_vjp(x, gamma, g, eps, (x.ndim - 1,), shape)


@local_vjp(Op.batch_norm)
@saves(0, 1)
def _batch_norm_vjp(inputs, out, g, eps):
    x, gamma, _ = inputs
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    axes = (0,) + tuple(range(2, x.ndim))
    return normalize_vjp(x, gamma, g, eps, axes, shape)


@local_vjp(Entry.add_layer_norm)
@saves(2, output=True)
def _add_layer_norm_vjp(inputs, out, g, eps):
    """g: the cotangent of [s, y], stacked or as the tape's Parts (None for a part no gradient
    reached: zero). dx = dr = gs + layer_norm's dx at s for gy, in float64, rounded once."""
    gamma = inputs[2]
    s = out[0]
    gs, gy = g[0], g[1]
    if gy is None:
        gy = xp_of(s).zeros(s.shape, s.dtype)
    shape = (1,) * (s.ndim - 1) + (s.shape[-1],)
    dx, dgamma, dbeta = normalize_vjp(s, gamma, gy, eps, (s.ndim - 1,), shape, plus=gs)
    return dx, dx, dgamma, dbeta
