"""bias_gelu on the CPU (RuntimeEntry): equals the composition it replaces, gelu(add(x,
broadcast(b))), bit for bit forward and dx, db within the derived bound; wrong shapes raise named
errors; empty forms; the mpmath reference's fast and exact db paths agree; the harness passes the
reference capsule and catches wrong kernels."""
from __future__ import annotations


import numpy as np
import pytest

from conformance.families import fused as B
from conformance import generators
from conformance.campaign import check_case
from conformance.references import fast
from conformance.references import get as reference
from engine import ops
from engine.errors import ShapeError
from capsule_mutants import mutant
from engine.ops import LOCAL_VJP
from engine.registry import registry
from engine.tensor import tensor
from engine.types import RuntimeEntry as Entry

pytestmark = pytest.mark.capsules("reference.bias_gelu")
f32 = np.float32
U = 2.0 ** -24


def _draw(seed, shape):
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal(shape) * 2).astype(f32),
            rng.standard_normal(shape[-1]).astype(f32))


def _case(x, b):
    return generators.Case(Entry.bias_gelu, "normal", (x, b), {}, seed=0, index=0)


class _Ctx:
    def __init__(self, x, b, g, index):
        self.inputs, self.g, self.input_index = (x, b), g, index


@pytest.mark.parametrize("shape", [(1,), (4, 5), (2, 3, 33)])
def test_equals_the_composition_it_replaces(cpu_session, shape):
    x, b = _draw(len(shape), shape)
    a, c = tensor(x, requires_grad=True), tensor(b, requires_grad=True)
    a2, c2 = tensor(x, requires_grad=True), tensor(b, requires_grad=True)
    w = tensor(np.random.default_rng(9).standard_normal(shape).astype(f32))
    fused = ops.bias_gelu(a, c)
    composed = ops.gelu(ops.add(a2, ops.broadcast(c2, shape)))
    ops.reduce_sum(ops.mul(fused, w)).backward()
    ops.reduce_sum(ops.mul(composed, w)).backward()
    assert np.array_equal(fused.numpy().view(np.uint32), composed.numpy().view(np.uint32))
    assert np.array_equal(a.grad.numpy().view(np.uint32), a2.grad.numpy().view(np.uint32))
    # db: float64 sums here, the composition's float32 tree there: both within the bound of the
    # exact column sums
    (_, rdb) = reference("bias_gelu").vjp((x, b), w.numpy())
    bound = B.vjp_bound(rdb, _Ctx(x, b, w.numpy(), 1), U) + 2.0 ** -148
    assert np.all(np.abs(c.grad.numpy() - rdb.exact) <= bound)
    rows = int(np.prod(shape[:-1]))
    assert np.all(np.abs(c2.grad.numpy() - rdb.exact) <= (rows + 2) * U * rdb.magnitude
                  + 2.0 ** -148)


@pytest.mark.parametrize("x, b, message", [
    ((2, 3), (2,), r"b must have shape \(d,\) = \(3,\) for x of shape \(2, 3\), got \(2,\); "
                   r"the bias runs along x's last axis"),
    ((2, 3), (1, 3), r"got \(1, 3\)"),
    ((), (1,), r"x must have rank >= 1 \(x \[\.\.\., d\], b \[d\]\), got a rank-0 tensor"),
])
def test_wrong_shapes_raise_named_errors(cpu_session, x, b, message):
    with pytest.raises(ShapeError, match=message):
        ops.bias_gelu(tensor(np.ones(x, f32)), tensor(np.ones(b, f32)))


def test_empty_forms(cpu_session):
    a, c = tensor(np.ones((0, 4), f32), requires_grad=True), tensor(np.ones(4, f32),
                                                                      requires_grad=True)
    y = ops.bias_gelu(a, c)
    assert y.shape == (0, 4)
    ops.reduce_sum(y).backward()
    assert np.array_equal(c.grad.numpy(), np.zeros(4, f32))
    assert ops.bias_gelu(tensor(np.ones((3, 0), f32)), tensor(np.ones(0, f32))).shape == (3, 0)


def test_special_values_take_gelus_limits(cpu_session):
    x = np.array([[np.inf, -np.inf, 1.0]], f32)
    b = np.array([0.0, 1.0, -np.inf], f32)
    y = ops.bias_gelu(tensor(x), tensor(b)).numpy()
    assert y[0, 0] == np.inf and y[0, 1] == 0.0 and np.signbit(y[0, 1]) and np.signbit(y[0, 2])


@pytest.mark.parametrize("shape", [(1, 1), (6, 4), (40, 3)])
def test_reference_db_paths_agree(shape):
    x, b = _draw(7, shape)
    g = np.random.default_rng(8).standard_normal(shape).astype(f32)
    _, db = reference("bias_gelu").vjp((x, b), g)
    with fast.exact_only():
        _, db2 = reference("bias_gelu").vjp((x, b), g)
    assert np.array_equal(db.value.view(np.uint32), db2.value.view(np.uint32))
    assert np.all(np.abs(db.exact - db2.exact) <= 2.0 ** -52 * db.magnitude)


@pytest.mark.parametrize("shape", [(3, 5), (2, 2, 7)])
def test_the_reference_capsule_passes_forward_vjp_and_identity(shape):
    x, b = _draw(11, shape)
    res = check_case(*registry().get("reference.bias_gelu"), _case(x, b), {},
                     identity_rng=np.random.default_rng(1))
    assert not res.failures and res.vjp is not None and res.vjp.identity == "passed"


def test_the_harness_catches_wrong_kernels():
    x, b = _draw(12, (5, 6))
    fwd = registry().handler("reference.bias_gelu").forward
    rule = LOCAL_VJP[Entry.bias_gelu]
    wrong = {
        "bias dropped": lambda a, c: fwd(a, np.zeros_like(c)),
        "sum in float64 before gelu": lambda a, c: fwd((a.astype(np.float64) + c).astype(f32)
                                                       * f32(1 + 2 ** -20), np.zeros_like(c)),
    }
    for why, fn in wrong.items():
        cap, handler = mutant("reference.bias_gelu", forward=fn)
        res = check_case(cap, handler, _case(x, b), {})
        assert any(f.output == "value" for f in res.failures), why

    def db_first_row_only(i, o, g):
        dx, _ = rule(i, o, g)
        return dx, dx.reshape(-1, dx.shape[-1])[0].copy()
    cap, handler = mutant("reference.bias_gelu", vjp=db_first_row_only)
    res = check_case(cap, handler, _case(x, b), {})
    assert any(f.output.startswith("grad") for f in res.failures)
