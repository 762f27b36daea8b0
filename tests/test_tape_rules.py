"""The tape's local VJP rules on the CPU are unchanged by their CUDA routes
(engine/ops/_tape_cuda.py): each rule, on NumPy arrays, gives bit for bit what a frozen copy of
its NumPy formula (as it stood before the CUDA routes were added) gives; and every rule is
accounted for on CUDA, by a kernel of ours (engine.native_sources.TAPE_SOURCES), by a declared
flush (TAPE_FLUSHES_ON_CUDA) or as pure data movement."""
from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import tape_cases as C
from engine.native_sources import TAPE_SOURCES
from engine.ops import LOCAL_VJP, TAPE_FLUSHES_ON_CUDA
from engine.types import BackendOp as Op

f32 = np.float32


# --- the frozen formulas: NumPy only, copied from engine/ops/*.py before the CUDA routes ---------

def _select(a, b, g, a_wins):
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    tie = (a == b)
    half = g * f32(0.5)
    zero = np.zeros_like(g)
    ga = np.where(tie, half, np.where(a_wins, g, zero))
    gb = np.where(tie, half, np.where(a_wins, zero, g))
    ga = np.where(nan_a | nan_b, np.where(nan_a, g, zero), ga)
    gb = np.where(nan_a | nan_b, np.where(nan_b, g, zero), gb)
    return ga, gb


def _gelu(a, g):
    x = a.astype(np.float64)
    c = math.sqrt(2.0 / math.pi)
    u = c * (x + 0.044715 * x ** 3)
    t = np.tanh(u)
    d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)
    d = np.where(np.isneginf(x), -0.0, np.where(np.isposinf(x), 1.0, d))
    return ((g.astype(np.float64) * d).astype(np.float32),)


def _exp(a, g):
    g64, a64 = g.astype(np.float64), a.astype(np.float64)
    return (np.where((g64 == 0) & (a64 < np.inf), g64, g64 * np.exp(a64)).astype(np.float32),)


def _inv(a, g):
    a64 = a.astype(np.float64)
    return ((-(g.astype(np.float64) / (a64 * a64))).astype(np.float32),)


def _safe_log(a, g, eps):
    keep = a > f32(eps)
    return (np.where(keep, g / np.where(keep, a, f32(1.0)), np.zeros_like(g)),)


FROZEN = {   # op label -> f(a, b_or_None, out, g, **params)
    "add": lambda a, b, y, g: (g, g),
    "sub": lambda a, b, y, g: (g, -g),
    "mul": lambda a, b, y, g: (g * b, g * a),
    "max": lambda a, b, y, g: _select(a, b, g, a > b),
    "min": lambda a, b, y, g: _select(a, b, g, a < b),
    "scale": lambda a, b, y, g, alpha: (g * f32(alpha),),
    "abs": lambda a, b, y, g: (g * np.sign(a).astype(g.dtype),),
    "sqrt": lambda a, b, y, g: (g / (f32(2.0) * y),),
    "clamp": lambda a, b, y, g, lo, hi: (np.where((a > f32(lo)) & (a < f32(hi)), g,
                                                  np.zeros_like(g)),),
    "relu": lambda a, b, y, g: (np.where(a > 0, g, np.zeros_like(g)),),
    "gelu": lambda a, b, y, g: _gelu(a, g),
    "sigmoid": lambda a, b, y, g: (g * y * (f32(1.0) - y),),
    "tanh": lambda a, b, y, g: (g * (f32(1.0) - y * y),),
    "softplus": lambda a, b, y, g: ((g.astype(np.float64) * (1.0 / (1.0 + np.exp(
        -a.astype(np.float64))))).astype(np.float32),),
    "exp": lambda a, b, y, g: _exp(a, g),
    "log": lambda a, b, y, g: (g / a,),
    "sin": lambda a, b, y, g: ((g.astype(np.float64) * np.cos(a.astype(np.float64))).astype(
        np.float32),),
    "cos": lambda a, b, y, g: ((-g.astype(np.float64) * np.sin(a.astype(np.float64))).astype(
        np.float32),),
    "inv": lambda a, b, y, g: _inv(a, g),
    "safe_log": lambda a, b, y, g, eps: _safe_log(a, g, eps),
}


def _bits_equal(got, want) -> bool:
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))


def _cases(label):
    return C.PARAMS.get(label, [{}])


@pytest.mark.parametrize("label", C.UNARY + C.BINARY)
def test_each_elementwise_rule_gives_todays_numpy_bits(label):
    rule = LOCAL_VJP[Op.parse(label)]
    for seed in (0, 1, 2):
        a, b = C.pair(100 * seed + 7)
        y, g = C.mixed(100 * seed + 9), C.mixed(100 * seed + 11)
        inputs = (a, b) if label in C.BINARY else (a,)
        for params in _cases(label):
            with np.errstate(all="ignore"):
                got = rule(inputs, y, g, **params)
                want = FROZEN[label](a, b if label in C.BINARY else None, y, g, **params)
            assert len(got) == len(want)
            for i, (x, w) in enumerate(zip(got, want)):
                assert _bits_equal(x, w), f"{label} {params} gradient {i} changed (seed {seed})"


def test_gelu_slope_is_the_rule_formula():
    from engine.ops.elementwise import gelu_slope
    x = C.mixed(5).astype(np.float64)
    t = np.tanh(x)
    c = math.sqrt(2.0 / math.pi)
    with np.errstate(all="ignore"):
        want = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x)
        assert np.array_equal(gelu_slope(x, t), want, equal_nan=True)


def test_reduce_mean_mse_and_gather_rules_give_todays_numpy_bits():
    g = C.mixed(21, 60).reshape(3, 4, 5)
    a = C.mixed(22, 60).reshape(3, 4, 5)
    (got,) = LOCAL_VJP[Op.reduce_mean]((a,), None, g.sum(axis=1), axes=(1,), keepdims=False)
    with np.errstate(all="ignore"):
        want = np.broadcast_to(g.sum(axis=1)[:, None, :], a.shape) / f32(4)
    assert _bits_equal(got, want)
    p, t, g0 = C.mixed(23, 500), C.mixed(24, 500), np.asarray(C.mixed(25, 1)[0])
    with np.errstate(all="ignore"):
        dp, dt = LOCAL_VJP[Op.mse_loss]((p, t), None, g0)
        d = ((p.astype(np.float64) - t.astype(np.float64)) * (
            2.0 * g0.astype(np.float64) / 500)).astype(np.float32)
    assert _bits_equal(dp, d) and _bits_equal(dt, -d)
    idx = np.array([2, 0, 2, 2, 1, 0], dtype=np.int64)
    gg = C.mixed(26, 3 * 6 * 5).reshape(3, 6, 5)
    (got,) = LOCAL_VJP[Op.gather]((a,), None, gg, axis=1, indices=idx)
    want = np.zeros(a.shape, np.float32)
    with np.errstate(all="ignore"):
        np.add.at(want, (slice(None), idx, slice(None)), gg)
    assert _bits_equal(got, want)


# --- every rule is accounted for on CUDA ----------------------------------------------------------

DATA_MOVEMENT = {Op.reshape, Op.permute, Op.concat, Op.slice, Op.reduce_sum, Op.scatter_add}
NO_ARITHMETIC = {Op.add}


def test_every_tape_rule_is_routed_declared_or_pure_data_movement():
    routed, declared = set(TAPE_SOURCES), set(TAPE_FLUSHES_ON_CUDA)
    assert not routed & declared, sorted(o.label for o in routed & declared)
    assert not (routed | declared) & (DATA_MOVEMENT | NO_ARITHMETIC)
    accounted = routed | declared | DATA_MOVEMENT | NO_ARITHMETIC
    rules = {op for op in LOCAL_VJP}
    assert rules == accounted, (sorted(o.label for o in rules - accounted),
                                sorted(o.label for o in accounted - rules))


def test_each_routed_rule_names_its_kernel_and_keeps_its_numpy_formula():
    for op, src in TAPE_SOURCES.items():
        text = inspect.getsource(LOCAL_VJP[op])
        assert "on_device(g)" in text, op.label
        for file, symbol in src.kernels():
            named = symbol if file == "tape.cu" else symbol.removeprefix("tl_")
            assert named in text, f"{op.label}'s rule does not name {symbol}"
        numpy_part = text.split("on_device(g)", 1)[1]
        assert "return" in numpy_part.split("\n", 2)[2], f"{op.label} lost its NumPy formula"


def test_each_declared_flush_says_which_call_flushes():
    for op, why in TAPE_FLUSHES_ON_CUDA.items():
        assert op in LOCAL_VJP, op.label
        assert ("-ftz=true" in why) or ("cuBLAS" in why), (op.label, why)
