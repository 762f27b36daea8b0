"""The harness proves itself: planted-bug capsules must be flagged, each for the right reason, and
correct capsules with other valid orders (reversed, pairwise, FMA, float64 accumulation) must pass
across 5 seeds."""
import warnings
from fractions import Fraction

import numpy as np
import pytest

from conformance.campaign import Settings, run_campaign
from conformance.orders import left_fold
from conformance.rounding import round_ratio_to_f32
from engine.capsule import KernelHandler, standard_capsule
from engine.providers.reference import BLAS, EXACT, F64_ONCE, ROUNDED, TREE, tree_sum
from engine.types import (BackendOp as Op, Contraction, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

F32 = np.float32
ANY_ORDER = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                            Contraction.implementation_defined, Reduction.implementation_defined)
LEFT_FUSED = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                             Contraction.fused, Reduction.fixed_left)
LEFT = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                       Contraction.separate, Reduction.fixed_left)


def capsule(op, name, forward, policy, vjp=None, declared=None):
    mode = VJPMode.backend_vjp if vjp else VJPMode.torchlean_tape
    cap = standard_capsule(op, Provider.custom_chip, Device.cpu, trust=TrustLevel.fuzzed,
                           vjp_mode=mode, policy=policy, source_file="tests/test_mutations.py",
                           name=name, declared_bound=declared)
    return cap, KernelHandler(name, op, Provider.custom_chip, Device.cpu, forward, vjp)


def campaign(cap_handler, seed=0, cases=3):
    cap, handler = cap_handler
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run_campaign(cap, handler, Settings(cases=cases, seed=seed, identity_cases=1,
                                                   counterexamples=1))


def _reduced(a, axes, keepdims):
    nd = a.ndim
    red = tuple(range(nd)) if axes is None else tuple(sorted(x % nd for x in axes))
    keep = [d for d in range(nd) if d not in red]
    moved = np.transpose(a, keep + list(red)).reshape([a.shape[d] for d in keep] + [-1])
    shape = tuple(1 if d in red else a.shape[d] for d in range(nd)) if keepdims else \
        tuple(a.shape[d] for d in keep)
    return moved, shape


def sum_vjp(inputs, out, g, axes=None, keepdims=False):
    """g broadcast back over the reduced axes. The tests carry their own rule so that they judge
    the forward order alone (the engine's local rule is checked by the reference campaign)."""
    a = inputs[0]
    red = range(a.ndim) if axes is None else [x % a.ndim for x in axes]
    kept = tuple(1 if d in red else s for d, s in enumerate(a.shape))
    return (np.array(np.broadcast_to(np.reshape(g, kept), a.shape), dtype=F32),)


# --- planted bugs ---------------------------------------------------------------------------------

def add_truncating(a, b):
    exact = a.astype(np.float64) + b.astype(np.float64)
    r = exact.astype(F32)
    with np.errstate(all="ignore"):
        away = np.abs(r.astype(np.float64)) > np.abs(exact)
        return np.where(away & np.isfinite(exact), np.nextafter(r, F32(0)), r).astype(F32)


def sum_dropping_last(a, axes=None, keepdims=False):
    moved, shape = _reduced(a, axes, keepdims)
    return tree_sum(moved[..., :-1], (moved.ndim - 1,)).reshape(shape)


def matmul_float16(a, b, trans_a=False, trans_b=False):
    a = (np.swapaxes(a, -1, -2) if trans_a else a).astype(np.float16)
    b = (np.swapaxes(b, -1, -2) if trans_b else b).astype(np.float16)
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], dtype=np.float16)
    with np.errstate(all="ignore"):
        for k in range(a.shape[-1]):
            acc = (acc + a[..., :, k:k + 1] * b[..., k:k + 1, :]).astype(np.float16)
    return acc.astype(F32)


def mul_flushing(a, b):
    with np.errstate(all="ignore"):
        r = a * b
    tiny = (r != 0) & (np.abs(r) < F32(2.0 ** -126))
    return np.where(tiny, np.copysign(F32(0), r), r).astype(F32)


def relu_keeping_negative_zero(a):
    return np.where((a > 0) | np.isnan(a), a, np.where(a == 0, a, F32(0))).astype(F32)


def masked_softmax_sentinel(a, mask, axis=-1):
    x = np.where(mask, a.astype(np.float64), -1000.0)
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return (e / np.sum(e, axis=axis, keepdims=True)).astype(F32)


def sub_vjp_wrong_sign(inputs, out, g):
    return g, g          # the second input's gradient should be -g


def broadcast_wrong_axis(a, shape):
    """Reads source axis d with the output index of the next output axis."""
    out_idx = np.indices(shape)
    nd, lead = len(shape), len(shape) - a.ndim
    sel = []
    for d in range(a.ndim):
        o = lead + d
        src = out_idx[(o + 1) % nd] if a.shape[d] != 1 else np.zeros(shape, dtype=np.int64)
        sel.append(src % a.shape[d] if a.shape[d] else src)
    return np.ascontiguousarray(a[tuple(sel)] if a.ndim else np.broadcast_to(a, shape))


def sum_nondeterministic(a, axes=None, keepdims=False):
    moved, shape = _reduced(a, axes, keepdims)
    perm = np.random.default_rng().permutation(moved.shape[-1])   # a new order on every call
    return tree_sum(moved[..., perm], (moved.ndim - 1,)).reshape(shape)


MUTANTS = {
    # name: (op, forward, policy, vjp, declared, the reason it must be flagged for, allowed)
    "add-truncates": (Op.add, add_truncating, ROUNDED, None, None, "not-correctly-rounded",
                      {"not-correctly-rounded", "inf-mismatch"}),   # FLT_MAX for an overflow
    "sum-drops-last-term": (Op.reduce_sum, sum_dropping_last, TREE, sum_vjp, None, "exceeds-bound",
                            {"exceeds-bound", "order-mismatch", "inf-mismatch", "nan-mismatch",
                             "flushed-subnormal"}),
    "matmul-float16-accumulator": (Op.matmul, matmul_float16, BLAS, None, None, "exceeds-bound",
                                   {"exceeds-bound", "inf-mismatch", "nan-mismatch"}),
    "mul-flushes-subnormals": (Op.mul, mul_flushing, ROUNDED, None, None, "flushed-subnormal",
                               {"flushed-subnormal"}),
    "relu-negative-zero": (Op.relu, relu_keeping_negative_zero, EXACT, None, None, "signed-zero",
                           {"signed-zero"}),
    "masked-softmax-finite-sentinel": (Op.hard_masked_softmax, masked_softmax_sentinel, ROUNDED,
                                       None, F64_ONCE, "exceeds-bound",
                                       {"exceeds-bound", "nan-mismatch", "inf-mismatch",
                                        "vjp-exceeds-bound", "vjp-nan-mismatch",
                                        "vjp-inf-mismatch", "vjp-identity", "raised"}),
    "sub-vjp-wrong-sign": (Op.sub, lambda a, b: np.subtract(a, b), ROUNDED, sub_vjp_wrong_sign,
                           None, "vjp-not-bitwise", {"vjp-not-bitwise"}),
    "broadcast-wrong-axis": (Op.broadcast, broadcast_wrong_axis, EXACT, None, None,
                             "not-bitwise", {"not-bitwise", "signed-zero", "nan-mismatch",
                                             "inf-mismatch"}),
    "nondeterministic-sum-claims-fixed-order": (Op.reduce_sum, sum_nondeterministic, TREE, sum_vjp,
                                                None, "not-repeatable",
                                                {"not-repeatable", "order-mismatch"}),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_planted_bug_is_flagged_for_the_right_reason(name):
    op, forward, policy, vjp, declared, reason, allowed = MUTANTS[name]
    result = campaign(capsule(op, f"mutant.{name}", forward, policy, vjp, declared))
    reasons = set(result["failure_reasons"])
    assert result["status"] == "failed"
    assert reason in reasons, reasons
    assert reasons <= allowed, f"flagged for unexpected reasons: {reasons - allowed}"
    ce = result["counterexamples"][0]["failures"][0]
    assert ce["reason"] in allowed


# --- correct capsules with other valid orders -------------------------------------------------

def sum_reversed(a, axes=None, keepdims=False):
    moved, shape = _reduced(a, axes, keepdims)
    return left_fold(moved[..., ::-1]).reshape(shape)


def sum_pairwise(a, axes=None, keepdims=False):
    moved, shape = _reduced(a, axes, keepdims)
    with np.errstate(all="ignore"):
        return np.sum(moved, axis=-1, dtype=F32).reshape(shape)   # NumPy's pairwise summation


def sum_left(a, axes=None, keepdims=False):
    moved, shape = _reduced(a, axes, keepdims)
    acc = moved[..., 0].copy() if moved.shape[-1] else np.zeros(moved.shape[:-1], F32)
    with np.errstate(all="ignore"):
        for j in range(1, moved.shape[-1]):
            acc = (acc + moved[..., j]).astype(F32)
    return acc.reshape(shape)


def _fma_exact(acc, x, y):
    """acc + x * y rounded once, with exact rationals (an FMA by definition)."""
    if not (np.isfinite(acc) and np.isfinite(x) and np.isfinite(y)):
        with np.errstate(all="ignore"):
            return F32(np.float64(acc) + np.float64(x) * np.float64(y))
    r = Fraction(float(acc)) + Fraction(float(x)) * Fraction(float(y))
    neg_zero = r == 0 and np.signbit(acc) and np.signbit(F32(x) * F32(y))
    return round_ratio_to_f32(r.numerator, r.denominator, bool(neg_zero))


def matmul_fma_left(a, b, trans_a=False, trans_b=False):
    a = np.swapaxes(a, -1, -2) if trans_a else a
    b = np.swapaxes(b, -1, -2) if trans_b else b
    out = np.zeros(a.shape[:-1] + b.shape[-1:], dtype=F32)
    for idx in np.ndindex(out.shape):
        *batch, i, j = idx
        row, col = a[tuple(batch) + (i,)], b[tuple(batch) + (slice(None), j)]
        if row.size == 0:
            continue
        with np.errstate(all="ignore"):
            acc = F32(row[0] * col[0])
        for k in range(1, row.size):
            acc = _fma_exact(acc, row[k], col[k])
        out[idx] = acc
    return out


def matmul_float64(a, b, trans_a=False, trans_b=False):
    a = np.swapaxes(a, -1, -2) if trans_a else a
    b = np.swapaxes(b, -1, -2) if trans_b else b
    with np.errstate(all="ignore"):
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(F32)


CORRECT = {
    "reversed-sum": (Op.reduce_sum, sum_reversed, ANY_ORDER, sum_vjp),
    "pairwise-sum": (Op.reduce_sum, sum_pairwise, ANY_ORDER, sum_vjp),
    "left-fold-sum-claiming-fixed-left": (Op.reduce_sum, sum_left, LEFT, sum_vjp),
    "fma-matmul-claiming-fixed-left-fused": (Op.matmul, matmul_fma_left, LEFT_FUSED, None),
    "float64-accumulating-matmul": (Op.matmul, matmul_float64, ANY_ORDER, None),
}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_alternative_orders_pass(name, seed):
    op, forward, policy, vjp = CORRECT[name]
    result = campaign(capsule(op, f"correct.{name}", forward, policy, vjp), seed=seed, cases=2)
    assert result["status"] == "passed", result["failure_reasons"]
    assert result["cases"]["total"] > 0
    if policy.reduction is Reduction.fixed_left:
        assert result["observed"]["fixed_order_checks"] == result["cases"]["total"]
