"""Every reference op, forward and VJP, against float64 definitions: forward values within the
capsule's error model, VJPs by the inner product <v, J u> against central differences in float64."""
import math

import numpy as np
import pytest

import engine
from engine import ops
from engine.ops._xp import sum_to_shape

RNG = np.random.default_rng(1234)
F32_ULP1 = 2.0 ** -23          # one float32 ulp at 1.0, relative


def r(*shape, lo=-2.0, hi=2.0, away_from_zero=False):
    x = RNG.uniform(lo, hi, size=shape).astype(np.float32)
    if away_from_zero:
        x = np.where(np.abs(x) < 0.1, np.float32(0.5), x)
    return x


def _softmax(a, axis=-1):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _mask_softmax(a, mask):
    m = np.where(mask, a, -np.inf).max(-1, keepdims=True)
    e = np.where(mask, np.exp(a - np.where(np.isfinite(m), m, 0.0)), 0.0)
    s = e.sum(-1, keepdims=True)
    return np.where(s > 0, e / np.where(s > 0, s, 1), 0.0)


def _norm(x, gamma, beta, eps, axes, cshape):
    mu = x.mean(axis=axes, keepdims=True)
    xhat = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
    return xhat * gamma.reshape(cshape) + beta.reshape(cshape)


def _layer_norm(x, gamma, beta, eps):
    return _norm(x, gamma, beta, eps, (-1,), (1,) * (x.ndim - 1) + (-1,))


def _batch_norm(x, gamma, beta, eps):
    return _norm(x, gamma, beta, eps, (0, 2), (1, -1, 1))


def _sdpa(q, k, v, mask, scale):
    return _mask_softmax(q @ np.swapaxes(k, -1, -2) * scale, mask) @ v


SDPA_MASK = np.array([[[True, False, True], [False, False, False]],
                      [[True, True, True], [False, True, False]]])
MASK = np.array([[True, False, True, True], [False, True, True, False]])
IDX = np.array([2, 0, 2, 1])
GELU_C = math.sqrt(2 / math.pi)

# name -> (inputs, params, float64 definition of the forward, kind)
# kind: exact (bitwise), rounded (bitwise vs float64 result rounded once), ulp (<= 1 ulp of the
# float64 result, the declared bound), sum (gamma_k * sum|terms|, k = number of terms)
CASES = {
    "add": ((r(3, 4), r(3, 4)), {}, lambda a, b: a + b, "rounded"),
    "sub": ((r(3, 4), r(3, 4)), {}, lambda a, b: a - b, "rounded"),
    "mul": ((r(3, 4), r(3, 4)), {}, lambda a, b: a * b, "rounded"),
    "max": ((r(3, 4), r(3, 4)), {}, np.maximum, "exact"),
    "min": ((r(3, 4), r(3, 4)), {}, np.minimum, "exact"),
    "scale": ((r(5),), {"alpha": 0.37}, lambda a, alpha: np.float64(np.float32(alpha)) * a, "rounded"),
    "abs": ((r(6, away_from_zero=True),), {}, np.abs, "exact"),
    "sqrt": ((r(6, lo=0.1, hi=9.0),), {}, np.sqrt, "rounded"),
    "clamp": ((r(8),), {"lo": -0.5, "hi": 0.75}, lambda a, lo, hi: np.clip(a, lo, hi), "exact"),
    "relu": ((r(8, away_from_zero=True),), {}, lambda a: np.maximum(a, 0), "exact"),
    "gelu": ((r(8),), {}, lambda a: 0.5 * a * (1 + np.tanh(GELU_C * (a + 0.044715 * a ** 3))), "ulp"),
    "sigmoid": ((r(8),), {}, lambda a: 1 / (1 + np.exp(-a)), "ulp"),
    "tanh": ((r(8),), {}, np.tanh, "ulp"),
    "softplus": ((r(8),), {}, lambda a: np.log1p(np.exp(a)), "ulp"),
    "exp": ((r(8),), {}, np.exp, "ulp"),
    "log": ((r(8, lo=0.1, hi=5),), {}, np.log, "ulp"),
    "sin": ((r(8),), {}, np.sin, "ulp"),
    "cos": ((r(8),), {}, np.cos, "ulp"),
    "inv": ((r(8, away_from_zero=True),), {}, lambda a: 1 / a, "rounded"),
    "safe_log": ((r(8, lo=0.1, hi=5),), {"eps": 1e-3}, lambda a, eps: np.log(np.maximum(a, eps)), "ulp"),
    "softmax": ((r(3, 5),), {"axis": -1}, _softmax, "ulp"),
    "log_softmax": ((r(3, 5),), {"axis": 0}, lambda a, axis: np.log(_softmax(a, axis)), "ulp"),
    "hard_masked_softmax": ((r(2, 4),), {"mask": MASK}, lambda a, mask: _mask_softmax(a, mask), "ulp"),
    "reduce_sum": ((r(4, 5, 3),), {"axes": (0, 2)}, lambda a, axes: a.sum(axis=axes), "sum"),
    "reduce_mean": ((r(4, 5),), {"axes": (1,)}, lambda a, axes: a.mean(axis=axes), "sum"),
    "mse_loss": ((r(3, 4), r(3, 4)), {}, lambda p, t: np.mean((p - t) ** 2), "ulp"),
    "reshape": ((r(2, 6),), {"shape": (3, 4)}, lambda a, shape: a.reshape(shape), "exact"),
    "permute": ((r(2, 3, 4),), {"perm": (2, 0, 1)}, lambda a, perm: a.transpose(perm), "exact"),
    "broadcast": ((r(3, 1),), {"shape": (2, 3, 4)}, lambda a, shape: np.broadcast_to(a, shape), "exact"),
    "slice": ((r(4, 6),), {"axis": 1, "start": 1, "stop": 4}, lambda a, axis, start, stop: a[:, 1:4], "exact"),
    "gather": ((r(3, 4),), {"axis": 0, "indices": IDX[:3]}, lambda a, axis, indices: a[indices], "exact"),
    "matmul": ((r(3, 4), r(4, 2)), {}, lambda a, b: a @ b, "sum"),
    "linear": ((r(2, 3, 4), r(5, 4), r(5)), {}, lambda x, w, b: x @ w.T + b, "sum"),
    # Sums of signed terms that can cancel: 1 ulp plus u times the sum of |terms| (the bound the
    # capsule declares).
    "layer_norm": ((r(3, 5), r(5), r(5)), {"eps": 1e-5}, _layer_norm, "cancel"),
    "batch_norm": ((r(4, 3, 2), r(3), r(3)), {"eps": 1e-5}, _batch_norm, "cancel"),
    "scaled_dot_product_attention": ((r(2, 2, 4), r(2, 3, 4), r(2, 3, 5)),
                                     {"mask": SDPA_MASK, "scale": 0.5}, _sdpa, "cancel"),
}


def _magnitude(name, inputs, params):
    x = [a.astype(np.float64) for a in inputs]
    if name == "scaled_dot_product_attention":
        p = _mask_softmax(x[0] @ np.swapaxes(x[1], -1, -2) * params["scale"], params["mask"])
        return p @ np.abs(x[2])
    f = _layer_norm if name == "layer_norm" else _batch_norm
    return np.abs(f(x[0], x[1], np.zeros_like(x[2]), params["eps"])) + np.abs(
        f(x[0], np.zeros_like(x[1]), x[2], params["eps"]))


def _call(name, inputs, params, requires_grad=False):
    tensors = [engine.tensor(x, requires_grad=requires_grad) for x in inputs]
    fn = getattr(ops, name)
    if name == "gather":
        return tensors, fn(tensors[0], params["axis"], params["indices"])
    if name == "slice":
        return tensors, fn(tensors[0], **params)
    return tensors, fn(*tensors, **params)


def _sum_bound(name, inputs, params, exact):
    """gamma_k * sum |terms| per output element (Higham), k the number of terms summed."""
    u = 2.0 ** -24
    if name in ("reduce_sum", "reduce_mean"):
        a = inputs[0].astype(np.float64)
        k = math.prod(a.shape[d] for d in params["axes"]) + (1 if name == "reduce_mean" else 0)
        mag = np.abs(a).sum(axis=params["axes"])
        mag = mag / (k - 1) if name == "reduce_mean" else mag
    elif name == "matmul":
        a, b = (x.astype(np.float64) for x in inputs)
        k, mag = a.shape[-1], np.abs(a) @ np.abs(b)
    else:
        x, w, b = (v.astype(np.float64) for v in inputs)
        k, mag = x.shape[-1] + 1, np.abs(x) @ np.abs(w).T + np.abs(b)
    return k * u / (1 - k * u) * mag + np.abs(exact) * u


@pytest.mark.capsules("reference.{name}")
@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_against_float64(cpu_session, name):
    inputs, params, f64, kind = CASES[name]
    _, out = _call(name, inputs, params)
    got = out.numpy()
    exact = np.asarray(f64(*(x.astype(np.float64) for x in inputs), **params))
    assert got.shape == exact.shape and got.dtype == np.float32
    if kind in ("exact", "rounded"):
        # Each op here is a single IEEE operation on float32 values, exact in float64, so one
        # rounding of the float64 result is the correctly rounded answer: bits must agree.
        np.testing.assert_array_equal(got.view(np.uint32), exact.astype(np.float32).view(np.uint32))
    elif kind == "ulp":
        ulp = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
        assert np.all(np.abs(got - exact) <= 1.0 * ulp), (got, exact)
    elif kind == "cancel":
        ulp = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
        bound = ulp + 2.0 ** -24 * _magnitude(name, inputs, params)
        assert np.all(np.abs(got - exact) <= bound), (got, exact)
    else:
        assert np.all(np.abs(got - exact) <= _sum_bound(name, inputs, params, exact))


@pytest.mark.capsules("reference.{name}")
@pytest.mark.parametrize("name", sorted(CASES))
def test_vjp_inner_product_against_central_differences(cpu_session, name):
    """<v, J u> from central differences of the float64 definition equals <VJP(v), u>."""
    inputs, params, f64, _ = CASES[name]
    tensors, out = _call(name, inputs, params, requires_grad=True)
    v = RNG.standard_normal(out.shape).astype(np.float32)
    out.backward(v)
    us = [RNG.standard_normal(x.shape) for x in inputs]
    h = 1e-6
    plus = f64(*(x + h * u for x, u in zip(inputs, us)), **params)
    minus = f64(*(x - h * u for x, u in zip(inputs, us)), **params)
    jvp = (np.asarray(plus) - np.asarray(minus)) / (2 * h)
    lhs = float(np.sum(v.astype(np.float64) * jvp))
    rhs = float(sum(np.sum(t.grad.numpy().astype(np.float64) * u) for t, u in zip(tensors, us)))
    scale = float(np.sum(np.abs(v) * np.abs(jvp))) + 1e-12
    # float32 gradients carry a few roundings per element (relative 2^-22 each); central
    # differences of a smooth float64 function at h=1e-6 are good to ~1e-9: 1e-5 covers both.
    assert abs(lhs - rhs) <= 1e-5 * scale, (lhs, rhs)


# The ops of the first catalogue, each with a hand-written case here; an op added later is covered
# by the campaign over every reference capsule (test_reference_campaign.py) and its own tests, so
# adding one touches no existing test (docs/ADDING_AN_OP.md).
FIRST_CATALOGUE = frozenset(
    "add sub mul scale abs sqrt clamp max min relu gelu sigmoid tanh softplus exp log sin cos inv "
    "safe_log log_softmax softmax hard_masked_softmax reduce_sum reduce_mean reshape permute "
    "broadcast concat slice gather scatter_add matmul linear mse_loss rand_uniform bernoulli_mask "
    "layer_norm batch_norm scaled_dot_product_attention".split())


def test_every_reference_op_has_a_forward_case():
    from engine.registry import registry
    have = {c.op.label for c in registry().capsules() if c.provider.label == "reference"}
    covered = set(CASES) | {"concat", "scatter_add", "rand_uniform", "bernoulli_mask"}
    assert covered == FIRST_CATALOGUE <= have


@pytest.mark.capsules("reference.concat")
def test_concat_forward_and_vjp(cpu_session):
    a, b = engine.tensor(r(2, 3), requires_grad=True), engine.tensor(r(2, 1), requires_grad=True)
    out = ops.concat([a, b], axis=1)
    np.testing.assert_array_equal(out.numpy(), np.concatenate([a.numpy(), b.numpy()], axis=1))
    g = r(2, 4)
    out.backward(g)
    np.testing.assert_array_equal(a.grad.numpy(), g[:, :3])
    np.testing.assert_array_equal(b.grad.numpy(), g[:, 3:])


@pytest.mark.capsules("reference.scatter_add")
def test_scatter_add_duplicates_accumulate_and_vjp(cpu_session):
    base = engine.tensor(np.zeros((3, 2)), requires_grad=True)
    src = engine.tensor([[1, 2], [3, 4], [5, 6], [7, 8]], requires_grad=True)
    out = ops.scatter_add(base, src, 0, IDX)
    np.testing.assert_array_equal(out.numpy(), [[3, 4], [7, 8], [6, 8]])
    g = r(3, 2)
    out.backward(g)
    np.testing.assert_array_equal(base.grad.numpy(), g)
    np.testing.assert_array_equal(src.grad.numpy(), g[IDX])


@pytest.mark.capsules("reference.gather")
def test_gather_vjp_accumulates_duplicates(cpu_session):
    a = engine.tensor(r(3, 2), requires_grad=True)
    out = ops.gather(a, 0, [2, 2, 0])
    out.backward(np.ones((3, 2), np.float32))
    np.testing.assert_array_equal(a.grad.numpy(), [[1, 1], [0, 0], [2, 2]])


@pytest.mark.capsules("reference.relu", "reference.sqrt", "reference.abs", "reference.max")
def test_special_values(cpu_session):
    x = engine.tensor(np.array([-0.0, 0.0, np.nan, -np.inf, np.inf], np.float32))
    relu = ops.relu(x).numpy()
    assert relu[0] == 0 and not np.signbit(relu[0])          # relu(-0) = +0
    assert np.isnan(relu[2]) and relu[3] == 0 and relu[4] == np.inf
    assert np.signbit(ops.sqrt(engine.tensor([-0.0])).numpy()[0])   # sqrt(-0) = -0
    assert not np.signbit(ops.abs(engine.tensor([-0.0])).numpy()[0])
    m = ops.max(engine.tensor([1.0, np.nan]), engine.tensor([np.nan, 2.0])).numpy()
    assert np.isnan(m).all()


@pytest.mark.capsules("reference.max", "reference.min")
def test_max_min_ties_split_the_gradient(cpu_session):
    a = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = engine.tensor([1.0, 5.0, 0.0], requires_grad=True)
    ops.max(a, b).backward(np.array([2.0, 2.0, 2.0], np.float32))
    np.testing.assert_array_equal(a.grad.numpy(), [1.0, 0.0, 2.0])
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 2.0, 0.0])


@pytest.mark.capsules("reference.hard_masked_softmax")
def test_hard_masked_softmax_regressions(cpu_session):
    out = ops.hard_masked_softmax(engine.tensor([[1000.0, -1000.0, 3.0, 4.0]]),
                                  np.array([[False, True, False, False]]))
    np.testing.assert_array_equal(out.numpy(), [[0.0, 1.0, 0.0, 0.0]])
    blocked = ops.hard_masked_softmax(engine.tensor([[1.0, 2.0]]), np.array([[False, False]]))
    np.testing.assert_array_equal(blocked.numpy(), [[0.0, 0.0]])
    # An allowed logit of -5000 beside a blocked one: the allowed entry takes all the mass.
    low = ops.hard_masked_softmax(engine.tensor([[-5000.0, -1000.0]]), np.array([[True, False]]))
    np.testing.assert_array_equal(low.numpy(), [[1.0, 0.0]])


@pytest.mark.capsules("reference.reduce_sum")
def test_reduce_sum_fixed_tree_order(cpu_session):
    from engine.providers.reference import tree_sum
    x = np.array([1e8, 1.0, -1e8, 1.0, 3.0], np.float32)
    # Tree: level 1 pairs (0,3),(1,4),(2): [1e8+1, 4, -1e8] -> level 2: [(1e8+1)+(-1e8), 4]
    level1 = [np.float32(1e8) + np.float32(1.0), np.float32(4.0), np.float32(-1e8)]
    level2 = [level1[0] + level1[2], level1[1]]
    assert tree_sum(x, (0,)) == level2[0] + level2[1]
    assert ops.reduce_sum(engine.tensor(x)).item() == float(level2[0] + level2[1])
    assert ops.reduce_sum(engine.tensor(np.zeros((0, 3)))).numpy() == 0.0


@pytest.mark.capsules("reference.matmul")
def test_matmul_transpose_flags_and_batched(cpu_session):
    a, b = r(2, 3, 4), r(2, 5, 4)
    out = ops.matmul(engine.tensor(a), engine.tensor(b), trans_b=True).numpy()
    np.testing.assert_allclose(out, a @ b.transpose(0, 2, 1), rtol=1e-6, atol=1e-6)
    at = engine.tensor(a.transpose(0, 2, 1).copy(), requires_grad=True)
    bt = engine.tensor(b, requires_grad=True)
    y = ops.matmul(at, bt, trans_a=True, trans_b=True)
    g = RNG.standard_normal(y.shape).astype(np.float32)
    y.backward(g)
    # y = A^T' B^T': dA' = (G B')^T... compared with float64 directly
    A, B, G = a.astype(np.float64), b.astype(np.float64), g.astype(np.float64)
    np.testing.assert_allclose(at.grad.numpy(), (G @ B).transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bt.grad.numpy(), G.transpose(0, 2, 1) @ A, rtol=1e-5, atol=1e-5)


@pytest.mark.capsules("reference.rand_uniform", "reference.bernoulli_mask")
def test_random_ops_reproducible_by_seed(cpu_session):
    a = ops.rand_uniform((1000,), seed=7).numpy()
    assert np.array_equal(a, ops.rand_uniform((1000,), seed=7).numpy())
    assert not np.array_equal(a, ops.rand_uniform((1000,), seed=8).numpy())
    assert a.min() >= 0 and a.max() < 1 and abs(a.mean() - 0.5) < 0.05
    # Philox4x32-10 known answer (Random123 kat_vectors): counter 0, key 0 -> word 0x6627e8d5.
    assert a.dtype == np.float32
    assert ops.rand_uniform((1,), seed=0).item() == (0x6627e8d5 >> 8) * 2.0 ** -24
    m = ops.bernoulli_mask((1000,), 0.3, seed=7).numpy()
    np.testing.assert_array_equal(m, (a < np.float32(0.3)).astype(np.float32))


def test_sum_to_shape():
    g = np.ones((2, 3, 4), np.float32)
    np.testing.assert_array_equal(sum_to_shape(g, (3, 1)), np.full((3, 1), 8.0))
