"""The fused cross-entropy loss on the CPU (RuntimeEntry cross_entropy): the op equals the
composition it replaces (log_softmax + gather + reduce_mean + scale) within the derived bound,
its VJP is (g / N)(softmax - onehot), special rows behave as log_softmax's, wrong targets raise
the named errors; the mpmath reference's certified fast path agrees with its exact path; the
harness passes the reference capsule and catches wrong kernels under the derived bounds; gpt2's
loss takes the fused op."""
from __future__ import annotations


import numpy as np
import pytest

from conformance.families import reduction as D
from conformance import generators
from conformance.campaign import check_case
from conformance.references import fast
from conformance.references import get as reference
from engine import ops
from engine.errors import IndexOutOfRangeError, ParameterTypeError, ShapeError
from engine.indices import CheckedIndices
from capsule_mutants import mutant
from engine.ops import LOCAL_VJP
from engine.registry import registry
from engine.tensor import tensor
from engine.types import RuntimeEntry as Entry

pytestmark = pytest.mark.capsules("reference.cross_entropy")
f32 = np.float32
U = 2.0 ** -24


def _logits(seed, rows, classes, scale=3.0):
    return (np.random.default_rng(seed).standard_normal((rows, classes)) * scale).astype(f32)


def _case(x, targets):
    return generators.Case(Entry.cross_entropy, "normal", (np.asarray(x, f32),),
                           {"targets": np.asarray(targets, np.int64)}, seed=0, index=0)


def _exact64(x, t):
    """The loss in float64 by the textbook formula (for comparisons well above its error)."""
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return float(np.mean(lse - x[np.arange(len(t)), t]))


# --- values and gradients ------------------------------------------------------------------------

@pytest.mark.parametrize("rows, classes", [(1, 1), (3, 7), (16, 256), (5, 1025)])
def test_equals_the_composition_it_replaces(cpu_session, rows, classes):
    x = _logits(rows * classes, rows, classes)
    t = np.random.default_rng(1).integers(0, classes, rows)
    a, b = tensor(x, requires_grad=True), tensor(x, requires_grad=True)
    fused = ops.cross_entropy(a, t)
    flat = ops.reshape(ops.log_softmax(b, -1), (rows * classes,))
    composed = ops.scale(ops.reduce_mean(ops.gather(flat, 0, np.arange(rows) * classes + t)), -1.0)
    fused.backward()
    composed.backward()
    want = _exact64(x, t)
    # the fused value: within one rounding (and far under the derived bound's float64 terms) of
    # the exact loss; the composition's float32 steps may lose a few ulps more
    assert abs(float(fused.numpy()) - want) <= 2 * U * abs(want) + 2.0 ** -149
    assert abs(float(fused.numpy()) - float(composed.numpy())) <= 8 * U * max(abs(want), 1e-30)
    ga, gb = a.grad.numpy().astype(np.float64), b.grad.numpy().astype(np.float64)
    assert np.all(np.abs(ga - gb) <= 8 * U * (np.abs(gb) + 1.0 / rows / classes))


def test_vjp_is_softmax_minus_onehot_over_n(cpu_session):
    x = _logits(3, 4, 6)
    t = np.array([0, 5, 2, 2])
    a = tensor(x, requires_grad=True)
    ops.scale(ops.cross_entropy(a, t), 2.5).backward()
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    s = e / e.sum(axis=1, keepdims=True)
    s[np.arange(4), t] -= 1.0
    want = 2.5 / 4 * s
    assert np.all(np.abs(a.grad.numpy() - want) <= 2 * U * np.abs(want))
    # the target's s_t - 1 keeps its digits when the target dominates (no 1 - s cancellation)
    big = np.array([[40.0, 0.0, 0.0]], f32)
    b = tensor(big, requires_grad=True)
    loss = ops.cross_entropy(b, [0])
    loss.backward()
    tiny = 2 * np.exp(-40.0)
    assert abs(float(loss.numpy()) - tiny) <= 2 * U * tiny
    assert abs(b.grad.numpy()[0, 0] + tiny / (1 + tiny)) <= 2 * U * tiny


def test_special_rows_follow_log_softmax(cpu_session):
    x = np.array([[1.0, np.nan, 0.0], [0.0, 1.0, 2.0]], f32)
    assert np.isnan(ops.cross_entropy(tensor(x), [0, 1]).numpy())
    x = np.array([[-np.inf, 1.0, 0.0], [0.0, 1.0, 2.0]], f32)
    assert ops.cross_entropy(tensor(x), [0, 1]).numpy() == np.inf
    a = tensor(np.array([[-np.inf, 3.0], [-np.inf, -np.inf]], f32), requires_grad=True)
    loss = ops.cross_entropy(a, [1, 0])      # row 1 is all -inf: a NaN row
    assert np.isnan(loss.numpy())
    loss.backward()
    g = a.grad.numpy()
    assert np.all(np.isnan(g[1])) and g[0, 1] == 0.0 and g[0, 0] == 0.0
    only = tensor(np.array([[-np.inf, 5.0]], f32))
    assert ops.cross_entropy(only, [1]).numpy() == 0.0        # the only finite class is the target


# --- named errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("logits, targets, error, message", [
    ((2, 3), [0, 3], IndexOutOfRangeError, r"target 3 is outside \[0, 3\) for logits with 3 "
                                           r"classes; pass class indices in range"),
    ((2, 3), [-2, 0], IndexOutOfRangeError, r"target -2 is outside \[0, 3\)"),
    ((2, 3), np.array([0.0, 1.0]), ParameterTypeError,
     r"targets must be integer class indices, got dtype float64; pass one int per row"),
    ((2, 3), [0], ShapeError, r"1 targets for 2 rows of logits; give one target class per row"),
    ((2, 3), [[0], [1]], ShapeError, r"targets must be 1-D \(one class per row\), got shape "
                                     r"\(2, 1\)"),
    ((6,), [0], ShapeError, r"takes logits \[N, C\] \(rank 2\), got shape \(6,\); reshape"),
    ((0, 3), [], ShapeError, r"needs at least one row and one class, got logits shape \(0, 3\)"),
])
def test_wrong_inputs_raise_named_errors(cpu_session, logits, targets, error, message):
    with pytest.raises(error, match=message):
        ops.cross_entropy(tensor(np.ones(logits, f32)), targets)


def test_checked_targets_are_checked_by_their_bound(cpu_session):
    ok = CheckedIndices(np.array([0, 2], np.int64), 3)
    assert np.isfinite(ops.cross_entropy(tensor(np.ones((2, 3), f32)), ok).numpy())
    wide = CheckedIndices(np.array([0, 2], np.int64), 4)
    with pytest.raises(IndexOutOfRangeError, match=r"targets are checked below 4, which may "
                                                   r"reach past the 3 classes"):
        ops.cross_entropy(tensor(np.ones((2, 3), f32)), wide)


# --- the reference, the bounds and the harness ---------------------------------------------------

REF_CASES = [
    (_logits(5, 3, 9), [0, 8, 4]),
    (_logits(6, 40, 300, scale=0.5), np.random.default_rng(2).integers(0, 300, 40)),
    (np.array([[30.0, -30.0, 0.0], [0.0, 0.0, 0.0]], f32), [0, 2]),         # a tiny loss term
    (np.array([[-np.inf, 2.0, 1.0], [1.0, 1.0, -np.inf]], f32), [1, 0]),    # -inf entries, ties
    (np.array([[7.0]], f32), [0]),                                          # one class: +0
    (np.array([[1e38, -1e38, 0.0]], f32), [1]),                             # a huge loss
]


@pytest.mark.parametrize("x, t", REF_CASES)
def test_reference_fast_path_agrees_with_the_exact_path(x, t):
    mod = reference("cross_entropy")
    g = np.asarray(f32(-1.25))
    fwd, (dx,) = mod.forward((x,), targets=t), mod.vjp((x,), g, targets=t)
    with fast.exact_only():
        fwd2, (dx2,) = mod.forward((x,), targets=t), mod.vjp((x,), g, targets=t)
    assert np.array_equal(np.atleast_1d(fwd.value).view(np.uint32),
                          np.atleast_1d(fwd2.value).view(np.uint32))
    assert np.array_equal(dx.value.view(np.uint32), dx2.value.view(np.uint32))
    assert fwd.value == f32(_exact64(x, np.asarray(t))) or abs(
        float(fwd.value) - _exact64(x, np.asarray(t))) <= U * abs(float(fwd.exact))


def test_derived_bounds_are_a_rounding_plus_float64_terms():
    x = _logits(7, 64, 256)
    ref = reference("cross_entropy").forward((x,), targets=np.zeros(64, np.int64))

    class Ctx:
        inputs = (x,)
    b = D.xent_forward_bound(ref, Ctx, U)
    assert U * abs(ref.exact) < b < (U + 2.0 ** -40) * 1.01 * abs(ref.exact)


@pytest.mark.parametrize("x, t", REF_CASES[:3])
def test_the_reference_capsule_passes_forward_vjp_and_identity(x, t):
    res = check_case(*registry().get("reference.cross_entropy"), _case(x, t), {},
                     identity_rng=np.random.default_rng(1))
    assert not res.failures and res.vjp is not None and res.vjp.identity == "passed"


def test_the_harness_catches_wrong_kernels():
    x, t = _logits(9, 6, 33), np.random.default_rng(3).integers(0, 33, 6)
    fwd = registry().handler("reference.cross_entropy").forward
    rule = LOCAL_VJP[Entry.cross_entropy]
    wrong_forward = {
        "two ulps high": lambda a, targets: np.nextafter(np.nextafter(
            fwd(a, targets=targets), f32(np.inf)), f32(np.inf)),
        "sum, not mean": lambda a, targets: (fwd(a, targets=targets) * f32(a.shape[0])),
        "the first row's target": lambda a, targets: fwd(a, targets=np.full_like(targets,
                                                                                 targets[0])),
    }
    for why, fn in wrong_forward.items():
        cap, handler = mutant("reference.cross_entropy", forward=fn)
        res = check_case(cap, handler, _case(x, t), {})
        assert any(f.output == "value" for f in res.failures), why

    def no_onehot(i, o, g, targets):
        (dx,) = rule(i, o, g, targets=targets)
        dx = dx.copy()
        dx[np.arange(dx.shape[0]), targets] += f32(float(g) / dx.shape[0])
        return (dx,)
    cap, handler = mutant("reference.cross_entropy", vjp=no_onehot)
    res = check_case(cap, handler, _case(x, t), {})
    assert any(f.output.startswith("grad") for f in res.failures)


# --- gpt2 ---------------------------------------------------------------------------------------

def test_gpt2_loss_is_the_fused_op_within_the_old_losses_bound(cpu_session):
    from engine.models import gpt2
    model = gpt2.GPT(gpt2.preset("tiny"), 3)
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, 256, (2, 16))
    targets = rng.integers(0, 256, (2, 16))
    fused = float(model.loss(tokens, targets).numpy())
    assert cpu_session.dispatched[Entry.cross_entropy].name == "reference.cross_entropy"
    logits = model(tokens)
    want = _exact64(logits.numpy(), targets.reshape(-1))
    # the fused op: within one rounding of the exact loss
    assert abs(fused - want) <= 2 * U * abs(want)
    # the old composition: log_softmax within 1 ulp per term (2u relative, reference.log_softmax's
    # declared bound), the tree sum of n same-signed terms gamma_n, the division u
    n = logits.shape[0]
    flat = ops.reshape(ops.log_softmax(logits, -1), (n * 256,))
    old = float(ops.scale(ops.reduce_mean(ops.gather(flat, 0, np.arange(n) * 256 +
                                                     targets.reshape(-1))), -1.0).numpy())
    assert abs(fused - old) <= (n + 6) * U * abs(old), (fused, old)
