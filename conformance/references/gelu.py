"""Reference for gelu (tanh approximation): a * sigmoid(2u), u = sqrt(2/pi) (a + 0.044715 a^3), with the
constants exact (0.044715 as the decimal, not its float32), evaluated exactly and rounded once.
VJP g * d/da = g * sigmoid(2u) (1 + 2 a sigmoid(-2u) u'), u' = sqrt(2/pi) (1 + 3 * 0.044715 a^2).

At a = +-inf the IEEE formula gives NaN for -inf (-inf * 0); the reference takes the limits instead:
gelu(+inf) = +inf, gelu(-inf) = -0, and derivative factors 1 at +inf and -0 at -inf (times g in IEEE).
"""

import numpy as np

from conformance.references._common import elementwise_ziv, f32_grad, f32_inputs, ieee64, iv_exp
from conformance.references.fast import unary

OP = "gelu"
_KAPPA = "0.044715"
_constants: dict[int, tuple] = {}


def _consts(ctx):
    # sqrt(2/pi) and kappa as intervals at the current precision, computed once per precision
    if ctx.prec not in _constants:
        _constants[ctx.prec] = (ctx.sqrt(2 / ctx.pi), ctx.mpf(_KAPPA))
    return _constants[ctx.prec]


def _u(ctx, a):
    c, k = _consts(ctx)
    return c * (a + k * a * a * a)


def _gelu(ctx, a):
    return a / (1 + iv_exp(ctx, -2 * _u(ctx, a)))


def _dgelu(ctx, a, g):
    c, k = _consts(ctx)
    u = _u(ctx, a)
    s_pos, s_neg = 1 / (1 + iv_exp(ctx, -2 * u)), 1 / (1 + iv_exp(ctx, 2 * u))
    du = c * (1 + 3 * k * a * a)
    return g * (s_pos * (1 + 2 * a * s_neg * du))


def _ieee_parts(x):
    u = np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)
    s = 1.0 / (1.0 + np.exp(-2 * u))
    return u, s


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    ieee = ieee64(lambda x: x * _ieee_parts(x)[1], a)
    ieee = np.where(np.isposinf(a), np.inf, np.where(np.isneginf(a), -0.0, ieee))
    return elementwise_ziv(_gelu, (a,), ieee, "composite", fast=unary.gelu_forward)


def vjp(inputs, grad_out):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)

    def ieee_grad(x, y):
        u, s = _ieee_parts(x)
        d = s * (1 + 2 * x * (1 - s) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x * x))
        d = np.where(np.isposinf(x), 1.0, np.where(np.isneginf(x), -0.0, d))
        return y * d

    return (elementwise_ziv(_dgelu, (a, g), ieee64(ieee_grad, a, g), "composite", fast=unary.gelu_vjp),)
