"""selective_scan on the CPU: hand-computed values, the recurrence against an independent float64
loop, empty shapes, the guards' messages, the VJP against finite differences and the exact mpmath
reference, and the derived bound (conformance/scan_family.py) against the sequential and the
chunked parallel order (tests/scan_orders.py emulates the GPU's)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import engine.ops as ops
from conformance.families import scan as scan_family
from conformance.error_models import BoundContext
from conformance.error_terms import HALF_SUB, U
from conformance.references import selective_scan as ref
from engine.errors import NonFiniteInputError, ShapeError
from engine.ops.scan import scan_vjp_f64
from engine.providers.reference import OPS as REF_OPS
from engine.tensor import tensor
from engine.types import BackendOp as Op
from scan_orders import chunked_forward

F32 = np.float32
FORWARD = REF_OPS[Op.selective_scan].forward
POLICY = REF_OPS[Op.selective_scan].policy


def _t(x, grad=False):
    return tensor(np.asarray(x, F32), requires_grad=grad)


def _case(rng, seq, state, token, regime="decay"):
    shape = (seq, state) if token else (state,)
    if regime == "decay":
        a = rng.uniform(-1, 1, shape)
    elif regime == "near-one":
        a = 1 - 2.0 ** -8 * rng.random(shape)
    else:   # growth, still far from overflow over the lengths used here
        a = rng.choice([-1, 1], shape) * (1 + 2.0 ** -6 * rng.random(shape))
    return (a.astype(F32), rng.standard_normal(shape).astype(F32),
            rng.standard_normal((seq, state)).astype(F32), rng.standard_normal(state).astype(F32))


def _f64_loop(A, B, X, h0):
    """The recurrence in float64, written independently of every implementation under test."""
    seq, state = X.shape
    h = np.zeros((seq, state))
    for j in range(state):
        prev = float(h0[j])
        for t in range(seq):
            a = float(A[t, j] if A.ndim == 2 else A[j])
            b = float(B[t, j] if B.ndim == 2 else B[j])
            prev = a * prev + b * float(X[t, j])
            h[t, j] = prev
    return h


def _fwd_bound(inputs):
    return scan_family.forward_bound(None, BoundContext(Op.selective_scan, inputs, {}, POLICY), U)


def _assert_within(got, exact, bound, what):
    err = np.abs(np.asarray(got, np.float64) - np.asarray(exact, np.float64))
    limit = bound + 4 * HALF_SUB     # the harness's own underflow allowance (error_models.py)
    bad = np.flatnonzero(~(err <= limit))
    assert bad.size == 0, f"{what}: {bad.size} outside the bound, first {bad[0]}: " \
                          f"err {err.reshape(-1)[bad[0]]}, bound {limit.reshape(-1)[bad[0]]}"
    return float(np.max(err / limit, initial=0.0))


# --- values ----------------------------------------------------------------------------------

@pytest.mark.capsules("reference.selective_scan")
def test_constant_coefficients_by_hand():
    # h0 = (2, 0): h[0] = (0.5*2 + 1, 2*0 - 1) = (2, -1), h[1] = (2, -3), h[2] = (2, -7)
    h = ops.selective_scan(_t([0.5, 2]), _t([1, -1]), _t(np.ones((3, 2))), _t([2, 0]))
    assert np.array_equal(h.numpy(), np.array([[2, -1], [2, -3], [2, -7]], F32))


@pytest.mark.capsules("reference.selective_scan")
def test_token_dependent_coefficients_by_hand():
    # one channel: h[0] = 3*1 + 2*1 = 5, h[1] = 0*5 + (-1)*4 = -4, h[2] = 0.25*(-4) + 1*8 = 7
    A, B, X = [[3], [0], [0.25]], [[2], [-1], [1]], [[1], [4], [8]]
    h = ops.selective_scan(_t(A), _t(B), _t(X), _t([1]))
    assert np.array_equal(h.numpy(), np.array([[5], [-4], [7]], F32))


@pytest.mark.capsules("reference.selective_scan")
@pytest.mark.parametrize("token", [False, True])
def test_reference_is_the_float32_recurrence_in_time_order(token):
    rng = np.random.default_rng(1)
    A, B, X, h0 = _case(rng, 50, 5, token)
    want = np.empty((50, 5), F32)
    for j in range(5):        # scalar float32 arithmetic, one channel at a time
        h = h0[j]
        for t in range(50):
            a, b = (A[t, j], B[t, j]) if token else (A[j], B[j])
            h = F32(F32(a * h) + F32(b * X[t, j]))
            want[t, j] = h
    got = ops.selective_scan(_t(A), _t(B), _t(X), _t(h0)).numpy()
    assert got.tobytes() == want.tobytes()


@pytest.mark.capsules("reference.selective_scan")
@pytest.mark.parametrize("token", [False, True])
@pytest.mark.parametrize("regime", ["decay", "near-one", "growth"])
def test_recurrence_against_an_independent_float64_loop(token, regime):
    rng = np.random.default_rng(2)
    inputs = _case(rng, 300, 3, token, regime)
    got = FORWARD(*inputs)
    h64 = _f64_loop(*inputs)
    # h64 is within gamma64_{2t+2} C_t of the exact value: far under the float32 bound's slack
    seq = inputs[2].shape[0]
    c = np.abs(_f64_loop(*(np.abs(x) for x in inputs)))
    h64_err = (2 * np.arange(1, seq + 1)[:, None] + 2) * 2.0 ** -53 * c * 1.01
    _assert_within(got, h64, _fwd_bound(inputs) + h64_err, "reference vs float64")


@pytest.mark.capsules("reference.selective_scan")
def test_empty_sequence_and_empty_state_give_empty_outputs():
    h = ops.selective_scan(_t(np.ones(3)), _t(np.ones(3)), _t(np.ones((0, 3))), _t(np.ones(3)))
    assert h.shape == (0, 3) and h.numpy().size == 0
    h = ops.selective_scan(_t(np.ones((4, 0))), _t(np.ones((4, 0))), _t(np.ones((4, 0))),
                           _t(np.ones(0)))
    assert h.shape == (4, 0)
    dA, dB, dX, dh0 = scan_vjp_f64(np.ones(3, F32), np.ones(3, F32), np.ones((0, 3), F32),
                                   np.full(3, 5, F32), np.ones((0, 3), F32))
    assert np.array_equal(dA, np.zeros(3)) and np.array_equal(dB, np.zeros(3))
    assert dX.shape == (0, 3) and np.array_equal(dh0, np.zeros(3))


def test_infinities_in_b_x_and_h0_propagate_by_ieee_rules():
    # X inf at t = 1: h[1] = inf; A = 0 at t = 2 makes 0 * inf = NaN, which stays
    A, B, X = [[1], [1], [0], [1]], [[1], [1], [1], [1]], [[1], [np.inf], [1], [1]]
    got = ops.selective_scan(_t(A), _t(B), _t(X), _t([0])).numpy()[:, 0]
    assert got[0] == 1 and got[1] == np.inf and np.isnan(got[2]) and np.isnan(got[3])
    want = ref.forward(tuple(np.asarray(x, F32) for x in (A, B, X, [0]))).value[:, 0]
    assert want[0] == 1 and want[1] == np.inf and np.isnan(want[2]) and np.isnan(want[3])


# --- guards ----------------------------------------------------------------------------------

def test_guards_name_what_was_given_and_expected():
    ok = _t(np.ones(3))
    with pytest.raises(ShapeError, match=r"X must be \(seq, state\), got shape \(3,\)"):
        ops.selective_scan(ok, ok, ok, ok)
    with pytest.raises(ShapeError, match=r"A and B must have one shape, got A \(3,\) and B "
                                         r"\(2, 3\)"):
        ops.selective_scan(ok, _t(np.ones((2, 3))), _t(np.ones((2, 3))), ok)
    with pytest.raises(NonFiniteInputError, match=r"A must be finite, got -inf at index \(2,\) "
                                                  r"of A \(3,\); replace or clip"):
        ops.selective_scan(_t([1, 1, -np.inf]), ok, _t(np.ones((2, 3))), ok)


# --- the derived bound: both evaluation orders, against the exact reference -----------------

@pytest.mark.parametrize("seq, state, token, regime", [
    (1, 1, False, "decay"), (31, 2, True, "near-one"), (33, 3, False, "growth"),
    (200, 2, True, "decay"), (257, 1, False, "near-one"), (300, 1, True, "growth")])
def test_both_orders_meet_the_derived_bound_against_the_exact_recurrence(seq, state, token,
                                                                          regime):
    inputs = _case(np.random.default_rng(seq), seq, state, token, regime)
    exact = ref.forward(inputs)
    bound = _fwd_bound(inputs)
    _assert_within(FORWARD(*inputs), exact.exact, bound, "sequential")
    for chunk in (1, 7, 32):
        _assert_within(chunked_forward(*inputs, chunk), exact.exact, bound, f"chunks of {chunk}")


def test_the_bound_is_not_vacuous():
    # near-one coefficients over 300 steps: the bound stays a small multiple of the worst error
    # the evaluation makes, and an error of a few ulps of C_t past it is caught
    inputs = _case(np.random.default_rng(5), 300, 2, False, "near-one")
    exact = ref.forward(inputs).exact
    bound = _fwd_bound(inputs)
    ratio = _assert_within(FORWARD(*inputs), exact, bound, "sequential")
    assert 1e-4 < ratio <= 1
    c = np.abs(_f64_loop(*(np.abs(x) for x in inputs)))
    assert np.all(bound <= 2 * (2 * 300 + 3) * U * c * 1.001)
    off = exact + 1.5 * bound
    assert np.all(np.abs(off - exact) > bound + 4 * HALF_SUB)


def test_the_bound_turns_infinite_where_an_intermediate_can_overflow():
    # A = 2^60: h[2] ~ 2^180 overflows; the rule is conservative by one step (it charges the
    # chunk product R_t = 2^120 times the largest state so far at t = 1), never late
    A = np.full(3, 2.0 ** 60, F32)
    inputs = (A, np.ones(3, F32), np.ones((4, 3), F32), np.ones(3, F32))
    b = _fwd_bound(inputs)
    assert np.all(np.isfinite(b[0])) and np.all(np.isinf(b[2:]))


def _stepwise_bound(inputs, unit, flush):
    """forward_bound's rule evaluated a step at a time over whole rows (as it was written before
    its recurrences were split from the rest): the oracle the split evaluation must equal."""
    from conformance.error_terms import OVERFLOW, TINY
    A, B, X, h0 = (np.abs(np.asarray(v, np.float64)) for v in inputs)
    seq, state = X.shape
    row = (lambda m, t: m.reshape(seq, state)[t]) if A.ndim == 2 else (lambda m, t: m)
    floor, per_step = (TINY, 5) if flush else (HALF_SUB, 3)
    out = np.zeros((seq, state))
    k, c, max_c = np.zeros(state), h0.copy(), h0.copy()
    suffix, best_end, best = np.zeros(state), np.full(state, -np.inf), np.full(state, -np.inf)
    risky = np.zeros(state, bool)
    nan_inf = lambda v: np.where(np.isnan(v), np.inf, v)
    with np.errstate(all="ignore"):
        for t in range(seq):
            at, p = row(A, t), row(B, t) * X[t]
            k = nan_inf(at * (k + 2 * c) + 2 * p)
            step_c = at * c
            c = nan_inf(step_c + p)
            max_c = nan_inf(np.maximum.reduce([max_c, c, step_c, p]))
            la = np.log2(at)
            suffix = np.maximum(0.0, suffix + la)
            best_end = la + np.maximum(0.0, best_end)
            best = np.maximum(best, best_end)
            k_max = 2.0 * (t + 1) + 1
            grow = (1 + 2 * (k_max * unit / (1 - k_max * unit))) * (1 + 2 * unit)
            r = np.exp2(np.minimum(best, 1100.0))
            risky |= (max_c * grow >= OVERFLOW) | (r * (1 + max_c) * grow >= OVERFLOW)
            under = floor * per_step * (t + 1) * np.exp2(np.minimum(suffix, 1100.0)) * \
                (1 + 2 * max_c) * (1 + unit)
            out[t] = np.where(risky, np.inf, (unit * (k + c) / (1 - k_max * unit) + under) *
                              scan_family.SLACK)
    return out


@pytest.mark.parametrize("state", [1, 3, 8, 9, 40])   # Python-float chains up to 8, NumPy past
def test_the_bound_equals_its_stepwise_evaluation_bit_for_bit(state):
    from engine.types import Subnormals
    rng = np.random.default_rng(state)
    special = np.array([0.0, np.inf, -np.inf, np.nan, 1e-45, 3e38, -1.0, 2.0 ** 70])
    for trial in range(24):
        seq, token = int(rng.choice([1, 2, 17, 300])), bool(trial % 2)
        shape = (seq, state) if token else (state,)
        arrays = [rng.standard_normal(s) * 2.0 ** rng.integers(-150, 40, s)
                  for s in (shape, shape, (seq, state), (state,))]
        if trial % 3 == 0:     # an inf, a NaN, a zero or a huge value here and there
            for a in arrays:
                hit = rng.random(a.shape) < 0.05
                a[hit] = rng.choice(special, hit.sum())
        if trial % 4 == 1:     # growth: the overflow flag turns on part way
            arrays[0] = np.sign(arrays[0]) * (1 + rng.random(shape))
        with np.errstate(all="ignore"):
            inputs = tuple(a.astype(F32) for a in arrays)
        flush = trial % 5 == 0
        policy = POLICY if not flush else \
            dataclasses.replace(POLICY, subnormals=Subnormals.flush_to_zero)
        unit = U if trial % 7 else 4 * U
        got = scan_family.forward_bound(None, BoundContext(Op.selective_scan, inputs, {}, policy),
                                        unit)
        want = _stepwise_bound(inputs, unit, flush)
        assert got.view(np.uint64).tolist() == want.view(np.uint64).tolist(), (state, trial)


# --- the VJP ---------------------------------------------------------------------------------

def _f64_scan_dot(A, B, X, h0, g):
    return float(np.sum(_f64_loop(A, B, X, h0) * g))


@pytest.mark.parametrize("token", [False, True])
def test_vjp_against_central_differences_in_float64(token):
    rng = np.random.default_rng(7)
    inputs = [x.astype(np.float64) for x in _case(rng, 12, 3, token)]
    g = rng.standard_normal((12, 3))
    grads = scan_vjp_f64(*(x.astype(F32) for x in inputs), g.astype(F32))
    step = 1e-6
    for k, x in enumerate(inputs):
        fd = np.zeros(x.shape)
        for i in np.ndindex(x.shape):
            up, dn = [v.copy() for v in inputs], [v.copy() for v in inputs]
            up[k][i] += step
            dn[k][i] -= step
            fd[i] = (_f64_scan_dot(*up, g) - _f64_scan_dot(*dn, g)) / (2 * step)
        # the objective is a polynomial of degree <= seq in each input: central differences
        # err by step^2 |f'''| (tiny here) plus 2^-53 |f| / step of float64 rounding, and the
        # gradient is rounded once to float32 (u |grad|); 1e-6 relative covers all three
        scale = np.max(np.abs(fd)) + 1
        assert np.allclose(grads[k], fd, rtol=1e-6, atol=1e-6 * scale), f"input {k}"


@pytest.mark.parametrize("seq, state, token", [(1, 2, False), (9, 3, True), (40, 2, False),
                                              (300, 1, True), (0, 2, False)])
def test_vjp_meets_its_derived_bound_against_the_exact_reference(seq, state, token):
    rng = np.random.default_rng(seq + 11)
    inputs = _case(rng, seq, state, token, "near-one")
    g = rng.standard_normal((seq, state)).astype(F32)
    got = scan_vjp_f64(*inputs, g)
    refs = ref.vjp(inputs, g)
    for i, (mine, want) in enumerate(zip(got, refs)):
        assert mine.shape == want.value.shape
        ctx = BoundContext(Op.selective_scan, inputs, {}, POLICY, g=g, input_index=i)
        bound = scan_family.vjp_bound(want, ctx, U)
        ratio = _assert_within(mine, want.exact, bound, f"gradient {i}")
        assert ratio <= 1


def test_tape_backward_runs_the_local_rule():
    rng = np.random.default_rng(13)
    A, B, X, h0 = _case(rng, 20, 4, True)
    ts = [_t(v, grad=True) for v in (A, B, X, h0)]
    h = ops.selective_scan(*ts)
    g = rng.standard_normal((20, 4)).astype(F32)
    h.backward(_t(g))
    want = scan_vjp_f64(A, B, X, h0, g)
    for t, w in zip(ts, want):
        assert t.grad.numpy().tobytes() == w.tobytes()
