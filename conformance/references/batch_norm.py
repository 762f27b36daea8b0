"""Reference for batch_norm (training mode, no running statistics): x [N, C, ...], gamma [C], beta [C];
per channel c, the statistics run over N and the spatial axes (n = N * prod(spatial) values, biased
variance, eps rounded to float32 first) and y = (x - mean_c) / sqrt(var_c + eps) * gamma_c + beta_c.
Evaluated exactly by layer_norm's normalisation core on the channel-major layout [C, n] and rounded
once (kind 'composite'); magnitudes, signed zeros and special values as there:
- forward: |xhat gamma_c| + |beta_c|, terms n;
- dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = g gamma_c, means over the channel's
  n values: rstd (|dxhat| + mean|dxhat| + |xhat| mean|dxhat xhat|), terms n;
- dgamma_c = sum g xhat: sum |g xhat|; dbeta_c = sum g: sum |g|; terms n.
"""

import math

import numpy as np

from conformance.references._common import Reference, ReferenceInputError, f32_grad, f32_inputs
from conformance.references.layer_norm import normalize_forward, normalize_vjp

OP = "batch_norm"


def _checked(inputs):
    x, gamma, beta = f32_inputs(inputs, 3, OP)
    if x.ndim < 2 or gamma.shape != (x.shape[1],) or beta.shape != (x.shape[1],):
        raise ReferenceInputError(
            f"batch_norm needs x [N, C, ...], gamma [C], beta [C]; got {x.shape}, {gamma.shape}, {beta.shape}")
    c = x.shape[1]
    moved = np.moveaxis(x, 1, 0)
    rows = np.ascontiguousarray(moved).reshape(c, math.prod(moved.shape[1:]))

    def back(y):
        return np.ascontiguousarray(np.moveaxis(np.asarray(y).reshape(moved.shape), 0, 1))

    return x, gamma, beta, rows, back


def forward(inputs, *, eps=1e-5):
    x, gamma, beta, rows, back = _checked(inputs)
    gam = np.broadcast_to(gamma[:, None], rows.shape)
    bet = np.broadcast_to(beta[:, None], rows.shape)
    out = normalize_forward(rows, gam, bet, eps)
    value, exact, magnitude = out
    return Reference(back(value), back(exact), back(magnitude), rows.shape[1], "composite", out.slow)


def vjp(inputs, grad_out, *, eps=1e-5):
    x, gamma, beta, rows, back = _checked(inputs)
    g = f32_grad(grad_out, x.shape, OP)
    g_rows = np.ascontiguousarray(np.moveaxis(g, 1, 0)).reshape(rows.shape)
    gam = np.broadcast_to(gamma[:, None], rows.shape)
    labels = np.broadcast_to(np.arange(rows.shape[0])[:, None], rows.shape)
    dx, dg, db = normalize_vjp(rows, gam, g_rows, eps, labels, rows.shape[0])
    n = rows.shape[1]
    return (Reference(back(dx[0]), back(dx[1]), back(dx[2]), n, "composite", dx.slow),
            Reference(*dg, n, "composite"), Reference(*db, n, "composite"))
