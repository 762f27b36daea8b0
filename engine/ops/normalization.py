"""layer_norm and batch_norm: one tape op each, with a local VJP rule (no chain of temporaries)."""
from __future__ import annotations

import math

import numpy as np

from engine.errors import ParameterValueError, ShapeError
from engine.ops import _checks
from engine.ops._dispatch import apply, local_vjp
from engine.ops._xp import xp_of
from engine.tape_saves import saves
from engine.tensor import Tensor
from engine.types import BackendOp as Op


def _eps(op: str, eps) -> float:
    """eps rounded to float32, as every float parameter is (docs/OPS.md); it must stay positive."""
    x = _checks.number(op, "eps", eps)
    if not x > 0 or not math.isfinite(x) or not np.float32(x) > 0 or x > _checks.FLT_MAX:
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


def normalize_vjp(x, gamma, g, eps, axes, channel_shape):
    """Shared by both norms: statistics over `axes`, affine parameters shaped `channel_shape`
    after broadcasting. Evaluated in float64 and rounded once per gradient."""
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
