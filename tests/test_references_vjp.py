"""The mpmath references' VJPs against central differences of their own forwards, and the exact
path's own rigour (split from tests/test_references.py, whose helpers it uses)."""
import math
import zlib

import mpmath
import numpy as np
import pytest
from mpmath import mpf

from conformance import references
from test_references import arr, f32, fwd


# ---------------------------------------------------------------- VJPs against central differences


def _gelu64(a):
    return 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))


def _softmax64(x, axis=-1, mask=None):
    z = np.where(mask, x, -np.inf) if mask is not None else x
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


_MASK = np.array([[True, False, True, True], [False, True, True, False], [True, True, True, True]])
_IDX = np.array([2, 0, 2, 1])
_N = lambda *s: ("normal", s)  # noqa: E731
_P = lambda *s: ("positive", s)  # noqa: E731
_SMOOTH = [
    # op, input kinds, params, float64 function of the inputs
    ("add", [_N(3, 4), _N(3, 4)], {}, lambda a, b: a + b),
    ("sub", [_N(3, 4), _N(3, 4)], {}, lambda a, b: a - b),
    ("mul", [_N(3, 4), _N(3, 4)], {}, lambda a, b: a * b),
    ("max", [_N(3, 4), _N(3, 4)], {}, np.maximum),
    ("min", [_N(3, 4), _N(3, 4)], {}, np.minimum),
    ("scale", [_N(3, 4)], {"alpha": 0.3}, lambda a: float(f32(0.3)) * a),
    ("abs", [_N(3, 4)], {}, np.abs),
    ("relu", [_N(3, 4)], {}, lambda a: np.maximum(a, 0)),
    ("clamp", [_N(3, 4)], {"lo": -0.5, "hi": 0.5}, lambda a: np.clip(a, float(f32(-0.5)), float(f32(0.5)))),
    ("sqrt", [_P(3, 4)], {}, np.sqrt),
    ("gelu", [_N(3, 4)], {}, _gelu64),
    ("sigmoid", [_N(3, 4)], {}, lambda a: 1 / (1 + np.exp(-a))),
    ("tanh", [_N(3, 4)], {}, np.tanh),
    ("softplus", [_N(3, 4)], {}, lambda a: np.log1p(np.exp(a))),
    ("exp", [_N(3, 4)], {}, np.exp),
    ("log", [_P(3, 4)], {}, np.log),
    ("sin", [_N(3, 4)], {}, np.sin),
    ("cos", [_N(3, 4)], {}, np.cos),
    ("inv", [_P(3, 4)], {}, lambda a: 1 / a),
    ("safe_log", [_P(3, 4)], {}, np.log),
    ("reduce_sum", [_N(3, 4)], {"axes": (1,)}, lambda a: a.sum(axis=1)),
    ("reduce_mean", [_N(3, 4)], {"axes": None, "keepdims": True}, lambda a: a.mean(keepdims=True)),
    ("softmax", [_N(3, 4)], {"axis": 0}, lambda a: _softmax64(a, axis=0)),
    ("log_softmax", [_N(3, 4)], {}, lambda a: np.log(_softmax64(a))),
    ("hard_masked_softmax", [_N(3, 4)], {"mask": _MASK}, lambda a: _softmax64(a, mask=_MASK)),
    ("mse_loss", [_N(3, 4), _N(3, 4)], {}, lambda p, t: np.mean((p - t) ** 2)),
    ("reshape", [_N(3, 4)], {"shape": (2, 6)}, lambda a: a.reshape(2, 6)),
    ("permute", [_N(2, 3, 4)], {"perm": (1, 2, 0)}, lambda a: a.transpose(1, 2, 0)),
    ("broadcast", [_N(3, 1)], {"shape": (2, 3, 4)}, lambda a: np.broadcast_to(a, (2, 3, 4))),
    ("concat", [_N(3, 4), _N(3, 2)], {"axis": 1}, lambda a, b: np.concatenate([a, b], axis=1)),
    ("slice", [_N(3, 4)], {"axis": 1, "start": 1, "stop": 3}, lambda a: a[:, 1:3]),
    ("gather", [_N(3, 4)], {"axis": 1, "indices": _IDX}, lambda a: np.take(a, _IDX, axis=1)),
    ("scatter_add", [_N(3, 4), _N(3, 4)], {"axis": 1, "indices": _IDX},
     lambda b, s: b + np.stack([s[:, _IDX == k].sum(axis=1) for k in range(4)], axis=1)),
    ("matmul", [_N(3, 4), _N(5, 4)], {"trans_b": True}, lambda a, b: a @ b.T),
    ("matmul", [_N(2, 4, 3), _N(2, 4, 5)], {"trans_a": True}, lambda a, b: np.swapaxes(a, 1, 2) @ b),
    ("linear", [_N(2, 3, 4), _N(5, 4), _N(5)], {}, lambda x, w, b: x @ w.T + b),
]


@pytest.mark.parametrize("op, kinds, params, fn", _SMOOTH, ids=[f"{c[0]}-{i}" for i, c in enumerate(_SMOOTH)])
def test_vjp_inner_product_matches_central_differences(op, kinds, params, fn):
    rng = np.random.default_rng(zlib.crc32(op.encode()))  # str hash() differs per process

    def draw(kind, shape):
        x = rng.uniform(0.5, 2.0, shape) if kind == "positive" else rng.standard_normal(shape)
        if kind == "normal":  # keep clear of kinks (0, the clamp bounds, max/min ties)
            x = np.where(np.abs(x) < 0.1, x + 0.3, x)
            x = np.where(np.abs(np.abs(x) - 0.5) < 0.05, x * 1.2, x)
        return x.astype(np.float32)

    xs = [draw(kind, shape) for kind, shape in kinds]
    us = [rng.standard_normal(x.shape) for x in xs]
    out = references.get(op).forward(tuple(xs), **params)
    v = rng.standard_normal(out.value.shape).astype(np.float32)
    grads = references.get(op).vjp(tuple(xs), v, **params)
    h = 1e-6
    plus = fn(*[x.astype(np.float64) + h * u for x, u in zip(xs, us)])
    minus = fn(*[x.astype(np.float64) - h * u for x, u in zip(xs, us)])
    jvp = (np.asarray(plus) - np.asarray(minus)) / (2 * h)
    lhs = float(np.sum(v.astype(np.float64) * jvp))
    rhs = sum(float(np.sum(gr.exact * u)) for gr, u in zip(grads, us))
    assert math.isclose(lhs, rhs, rel_tol=1e-6, abs_tol=1e-7), (lhs, rhs)
    # and the forward reference agrees with the float64 function to float32 accuracy
    np.testing.assert_allclose(out.exact, fn(*[x.astype(np.float64) for x in xs]), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- the exact path's own rigour


def test_iv_exp_encloses_tiny_arguments_so_tanh_exact_is_the_nearest_double():
    # mpmath's iv.exp rounds a fixed-point approximation in the asked direction: at 80 bits exp(x) for
    # this x comes out as the point 1 + x, missing x^2/2; iv_exp widens it into a true enclosure
    from mpmath import iv

    from conformance.references import fast
    from conformance.references._common import iv_exp
    from conformance.rounding import iv_precision, round_mpf_to_f64

    x = 2 * float(f32(4.8444445e-16))
    with mpmath.workprec(400):
        true = mpmath.exp(mpf(x))
    with iv_precision(80):
        e = iv_exp(iv, iv.mpf(x))
    assert e.a <= true <= e.b
    a = arr(-4.8444445e-16, 3e-20, -1e-30)
    with mpmath.workprec(400):
        want = [round_mpf_to_f64(mpmath.tanh(mpf(float(v)))) for v in a]
    with fast.exact_only():
        slow = fwd("tanh", a)
    assert slow.exact.tolist() == want and fwd("tanh", a).exact.tolist() == want
