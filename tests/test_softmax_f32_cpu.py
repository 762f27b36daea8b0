"""The fast float32 softmax / log_softmax capsules on the CPU: which kernel a row takes, which
capsule each profile plans, the declared bounds beside PyTorch's measured error, and why
log_softmax's tiny-T pass is scaled. The kernels' arithmetic runs from the real source in
tests/test_softmax_f32_emulated.py."""
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


def test_an_unscaled_log_softmax_sum_would_break_the_bound():
    """log_softmax's second pass scales its terms by e^64 for a reason: summed unscaled (each
    exp(-100) a subnormal rounded on its grid), T misses the max entry's -log1p(T) by far more
    than 6 ulp."""
    row = np.concatenate([[0.0], np.full(8191, -100.0)]).astype(F32)
    terms = np.full(8191, F32(np.exp(-100.0)))          # correctly rounded, subnormal
    t = float(np.sum(terms.astype(np.float64)))
    y0 = -np.log1p(t)
    exact = S.exact("log_softmax", row[None, :])[0, 0]
    assert abs(y0 - exact) > 100 * np.spacing(F32(abs(exact)))
