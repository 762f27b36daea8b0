"""The fast float32 softmax / log_softmax capsules on the CPU: which kernel a row takes, which
capsule each profile plans, the declared bounds beside PyTorch's measured error, and the
derivation of tl_softmax_f32.cuh checked on an emulation of its float32 arithmetic (NumPy float32
operations are IEEE round-to-nearest; expf is emulated 1-2 ulp off the exact value, within
libdevice's documented 2 ulp)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import softmax_checks as S
from engine.profile import ACCURATE_CUDA, CHECKED_CUDA
from engine.providers.native_cuda import softmax
from engine.registry import registry
from engine.types import BackendOp as Op

EVIDENCE = Path(__file__).resolve().parent.parent / "evidence" / "h200"
F32 = np.float32


@pytest.mark.parametrize("op", [Op.softmax, Op.log_softmax])
def test_rows_take_the_narrowest_register_variant_then_the_float64_kernel(op):
    kern = softmax.FAST_FORWARD[op]
    prefix = f"tl_{op.label}_f32"
    want = {1: "_w2", 64: "_w2", 65: "_w8", 256: "_w8", 257: "_w32", 1024: "_w32", 1025: "_b8",
            2048: "_b8", 2049: "_b16", 4096: "_b16", 4097: "_b32", 8192: "_b32"}
    for n, suffix in want.items():   # a misaligned array: the scalar forms at every n
        assert kern.pick(n, 1, aligned=False) == prefix + suffix, n
        if n % 4 or n <= 64:             # aligned, but no float4 form for this n
            assert kern.pick(n, 1) == prefix + suffix, n
    for n, inner in ((8193, 1), (50257, 1), (5, 3), (1024, 2), (1028, 4)):   # float64 kernel
        assert kern.pick(n, inner) == f"tl_{op.label}_fwd", (n, inner)
    # n % 4 == 0 over 64 entries, aligned: the float4 forms; rows of up to 64 stay on _w2
    vec = {68: "_wv2", 256: "_wv2", 260: "_wv8", 1024: "_wv8", 1028: "_bv2", 2048: "_bv2",
           2052: "_bv4", 4096: "_bv4", 4100: "_bv8", 8192: "_bv8"}
    scalar = ((64, "_w2"), (256, "_w8"), (1024, "_w32"), (2048, "_b8"), (4096, "_b16"),
              (8192, "_b32"))
    for n, suffix in vec.items():
        assert kern.pick(n, 1) == prefix + suffix, n
        odd = next(s for most, s in scalar if n - 2 <= most)   # n - 2: not a multiple of 4
        assert kern.pick(n - 2, 1) == prefix + odd, n
    assert kern.pick(64, 1) == prefix + "_w2" and kern.pick(8196, 1) == f"tl_{op.label}_fwd"
    decl = next(d for d in softmax.DECLS if d.op is op and d.variant is None)
    assert set(decl.forward_symbols) == {kern.pick(n, 1, a) for n in (*want, *vec, 8193)
                                         for a in (True, False)}


def test_checked_cuda_plans_the_fast_capsules_and_accurate_cuda_the_float64_ones():
    ops = [Op.softmax, Op.log_softmax, Op.hard_masked_softmax]
    fast = CHECKED_CUDA.plan(ops, registry()).selected
    accurate = ACCURATE_CUDA.plan(ops, registry()).selected
    for op in (Op.softmax, Op.log_softmax):
        assert fast[op].name == f"native_cuda.{op.label}"
        assert accurate[op].name == f"native_cuda.{op.label}.accurate"
    assert fast[Op.hard_masked_softmax].name == accurate[Op.hard_masked_softmax].name


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_fast_bound_is_no_looser_than_pytorchs_measured_error(op):
    """PyTorch's kernel on the H200 campaign's inputs (evidence/h200/aten.<op>.json: its worst
    error as a ratio to the bound it was judged under, our plain capsule's, times that bound's
    ulps: its error in ulps): ours declares no more."""
    record = json.loads((EVIDENCE / f"aten.{op}.json").read_text())
    judged_under = record["error_model"]["forward"]["composite"]["ulps"]
    torch_ulps = record["stats"]["forward"]["worst_ratio_failing"] * judged_under
    assert judged_under in (1.0, S.declared_ulps(f"native_cuda.{op}"))
    assert S.declared_ulps(f"native_cuda.{op}") <= torch_ulps
    assert S.declared_ulps(f"native_cuda.{op}.accurate") == 1.0


# --- an emulation of tl_softmax_f32.cuh's arithmetic (one row; G threads, K entries each) -----

def _fma(a, b, c):
    return F32(np.float64(a) * np.float64(b) + np.float64(c))   # a*b exact in float64


def _two_sum(a, b):
    s = F32(a + b)
    bb = F32(s - a)
    return s, F32(F32(a - F32(s - bb)) + F32(b - bb))


def _expf(d, rng):
    """exp(d) rounded away from the exact value and moved one more ulp the same way (random
    direction): more than 1 and at most 2 ulp off, as libdevice's expf may be; exp(0) = 1."""
    if d == 0:
        return F32(1.0)
    with np.errstate(all="ignore"):
        exact = np.exp(np.float64(d))
        toward = F32(np.inf) if rng.random() < 0.5 else F32(0)
        e = F32(exact)
        if (np.float64(e) - exact) * (np.float64(toward) - exact) <= 0:   # on the other side
            e = np.nextafter(e, toward)
        return np.nextafter(e, toward)


def _emulate(op: str, row: np.ndarray, rng, g: int = 32) -> np.ndarray:
    n = row.size
    m = F32(np.max(row))
    dh = np.empty(n, F32)
    dl = np.empty(n, F32)
    for j in range(n):
        dh[j], dl[j] = _two_sum(row[j], F32(-m))
    parts = []
    if op == "softmax":
        eh = np.array([_expf(d, rng) for d in dh], F32)
        for t in range(g):
            part, corr = 0.0, F32(0)
            for j in range(t, n, g):
                part += np.float64(eh[j])
                corr = _fma(eh[j], dl[j], corr)
            parts.append(part + np.float64(corr))
        r = 1.0 / sum(parts)   # the group's fixed-order double sum: any order is within 2^-49
        rh = F32(r)
        rl = F32(r - np.float64(rh))
        return np.array([_fma(eh[j], rh, F32(eh[j] * _fma(dl[j], rh, rl))) for j in range(n)],
                        F32)
    jm = int(np.argmax(row))
    for t in range(g):
        part, corr = 0.0, F32(0)
        for j in range(t, n, g):
            ah = F32(dh[j] + F32(64))
            al = F32(F32(dh[j] - F32(ah - F32(64))) + dl[j])
            if j != jm and dh[j] > -200:
                e = _expf(ah, rng)
                part += np.float64(e)
                corr = _fma(e, al, corr)
        parts.append(part + np.float64(corr))
    big_l = np.log1p(sum(parts) * float.fromhex("0x1.969d47321e4ccp-93"))   # e^-64
    lh = F32(big_l)
    ll = F32(big_l - np.float64(lh))
    out = np.empty(n, F32)
    for j in range(n):
        p, q = _two_sum(dh[j], F32(-lh))
        out[j] = F32(p + F32(q + F32(dl[j] - ll)))
    return out


def _rows(rng):
    yield np.concatenate([[0.0], np.full(200, -100.0)]).astype(F32)    # subnormal terms
    yield np.concatenate([[0.0], np.full(300, -95.0)]).astype(F32)
    yield np.concatenate([[0.0], rng.uniform(-104, 0, 299)]).astype(F32)
    yield (np.where(rng.random(257) < 0.5, -1, 1) * 10.0 ** rng.uniform(-4, 2, 257)).astype(F32)
    yield (1000 + rng.uniform(-30, 0, 100)).astype(F32)
    yield rng.standard_normal(64).astype(F32) * F32(6)
    yield np.linspace(-88, -103.9, 50).astype(F32)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_emulated_float32_algorithm_is_within_its_derived_bound(op):
    """The derivation's claim |got - exact| <= (B - 0.5) ulp(exact) on rows that break a naive
    float32 version: x - max inexact, subnormal and many tiny terms (an unscaled sum of n
    subnormal exp(-100) would miss log_softmax's max entry by hundreds of ulps)."""
    rng = np.random.default_rng(17)
    worst = 0.0
    for row in _rows(rng):
        got = _emulate(op, row, rng)
        worst = max(worst, S.assert_forward(f"native_cuda.{op}", got, row,
                                            f"emulated {op} n={row.size}"))
    assert worst > 0.5   # the emulated expf's 1-2 ulp really reach the outputs


def test_an_unscaled_log_softmax_sum_would_break_the_bound():
    """The scaling by e^64 is needed: the same emulation with unscaled terms (each exp(-100) a
    subnormal rounded on its grid) misses the max entry's -log1p(T) by far more than 6 ulp."""
    row = np.concatenate([[0.0], np.full(8191, -100.0)]).astype(F32)
    terms = np.full(8191, F32(np.exp(-100.0)))          # correctly rounded, subnormal
    t = float(np.sum(terms.astype(np.float64)))
    y0 = -np.log1p(t)
    exact = S.exact("log_softmax", row[None, :])[0, 0]
    assert abs(y0 - exact) > 100 * np.spacing(F32(abs(exact)))
