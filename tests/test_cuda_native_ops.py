"""Every native-cuda capsule's forward and VJP against the reference provider, on random inputs,
with tolerances derived from the policies: exact and correctly rounded ops bit for bit,
transcendentals within their declared ulp bound (+1 for the reference's own rounding), sums within
gamma_n * sum|x|."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import cuda_helpers as H

pytestmark = pytest.mark.cuda

SHAPE = (37, 29)   # 1073 elements: not a multiple of 4, so the vector loop and the tail both run


def _normal(r, scale=3.0, shape=SHAPE):
    return (r.standard_normal(shape) * scale).astype(np.float32)


def _positive(r, shape=SHAPE):
    return np.exp(r.uniform(-20, 20, shape)).astype(np.float32)


def _away_from_zero(r, shape=SHAPE):
    x = r.uniform(0.05, 50, shape) * r.choice([-1, 1], shape)
    return x.astype(np.float32)


@dataclass
class Case:
    inputs: Callable                    # rng -> tuple of float32 arrays
    params: dict = field(default_factory=dict)
    fwd_ulps: float | None = None       # None: bit for bit
    vjp_ulps: float | None = None       # None: bit for bit
    vjp_abs: float = 0.0                # extra absolute allowance, in units of u * |g|
    why: str = ""


def _declared(op):
    from engine.registry import registry
    bound = registry().get(f"native_cuda.{op}")[0].value_contract.declared_bound
    return bound.ulps + 1   # + the reference's own rounding (F64_ONCE: within 1 ulp)


ELEMENTWISE = {
    "add": Case(lambda r: (_normal(r), _normal(r))),
    "sub": Case(lambda r: (_normal(r), _normal(r))),
    "mul": Case(lambda r: (_normal(r), _normal(r))),
    "max": Case(lambda r: (_normal(r), _normal(r))),
    "min": Case(lambda r: (_normal(r), _normal(r))),
    "scale": Case(lambda r: (_normal(r),), {"alpha": 0.1}),
    "abs": Case(lambda r: (_normal(r),)),
    "sqrt": Case(lambda r: (_positive(r),), vjp_ulps=3, why="reference VJP g/(2*out): 2 roundings "
                 "after out's; ours float64 rounded once"),
    "clamp": Case(lambda r: (_normal(r),), {"lo": -1.0, "hi": 1.5}),
    "relu": Case(lambda r: (_normal(r),)),
    "inv": Case(lambda r: (_away_from_zero(r),), vjp_ulps=4,
                why="reference VJP -(g*out*out): three roundings; ours one"),
    "log": Case(lambda r: (_positive(r),), fwd_ulps="declared"),
    "safe_log": Case(lambda r: (np.where(r.random(SHAPE) < 0.2, 0.0, _positive(r))
                                .astype(np.float32),), {"eps": 1e-12}, fwd_ulps="declared"),
    "exp": Case(lambda r: (r.uniform(-80, 80, SHAPE).astype(np.float32),), fwd_ulps="declared",
                vjp_ulps=3, why="reference VJP g*out after out's rounding"),
    "sin": Case(lambda r: (r.uniform(-100, 100, SHAPE).astype(np.float32),),
                fwd_ulps="declared", vjp_ulps=2),
    "cos": Case(lambda r: (r.uniform(-100, 100, SHAPE).astype(np.float32),),
                fwd_ulps="declared", vjp_ulps=2),
    "tanh": Case(lambda r: (_normal(r),), fwd_ulps="declared", vjp_ulps=2, vjp_abs=4,
                 why="reference VJP g*(1-out^2) cancels near |out| = 1"),
    "sigmoid": Case(lambda r: (_normal(r, 8.0),), fwd_ulps="declared", vjp_ulps=2, vjp_abs=4,
                    why="reference VJP g*out*(1-out) cancels near out = 1"),
    "softplus": Case(lambda r: (_normal(r, 8.0),), fwd_ulps="declared", vjp_ulps=2),
    "gelu": Case(lambda r: (r.uniform(-12, 12, SHAPE).astype(np.float32),), fwd_ulps="declared",
                 vjp_ulps=2, vjp_abs=4, why="reference VJP uses 1+tanh(u), which cancels for "
                 "u << 0"),
}


def _run(op, case, seed=7):
    cp = H.cupy()
    r = np.random.default_rng(seed)
    host = case.inputs(r)
    dev = tuple(cp.asarray(x) for x in host)
    handler = H.native_handler(op)
    out = handler.forward(*dev, **case.params)
    want = H.reference_forward(op)(*host, **case.params)
    g = _normal(r, 1.0, want.shape)
    got_vjp = handler.vjp(dev, out, cp.asarray(g), **case.params)
    want_vjp = H.reference_vjp(op)(host, want, g, **case.params)
    return host, out, want, g, got_vjp, want_vjp


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op", sorted(ELEMENTWISE))
def test_elementwise_forward_and_vjp(op):
    case = ELEMENTWISE[op]
    host, out, want, g, got_vjp, want_vjp = _run(op, case)
    if case.fwd_ulps is None:
        H.assert_bitwise(out, want, f"{op} forward")
    else:
        H.assert_ulps(out, want, _declared(op), f"{op} forward")
    assert len(got_vjp) == len(host)
    for i, (gv, wv) in enumerate(zip(got_vjp, want_vjp)):
        what = f"{op} VJP input {i}"
        if case.vjp_ulps is None:
            H.assert_bitwise(gv, wv, what)
        else:
            H.assert_ulps(gv, wv, case.vjp_ulps, what,
                          abs_floor=case.vjp_abs * H.U * np.abs(g) if case.vjp_abs else None)


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, 3.0,
                     -3.0, 1e-40, 3.4e38, -3.4e38, 1.0, -1.0], np.float32)


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op", ["add", "sub", "mul", "max", "min", "abs", "relu", "sqrt", "inv",
                                "scale", "clamp"])
def test_exact_and_rounded_ops_on_special_values_and_subnormals(op):
    """Signed zeros, infinities, NaN and subnormals: bit for bit (gradual underflow kept)."""
    cp = H.cupy()
    a = np.repeat(SPECIALS, SPECIALS.size)
    b = np.tile(SPECIALS, SPECIALS.size)
    case = ELEMENTWISE[op]
    arrays = (a, b)[:len(case.inputs(np.random.default_rng(0)))]
    if op == "clamp":   # numpy's SIMD max/min may pick either zero on +-0 ties; keep off the bounds
        arrays = (np.where(a == 0, np.float32(0.5), a),)
    with np.errstate(all="ignore"):
        want = H.reference_forward(op)(*arrays, **case.params)
    got = H.native_handler(op).forward(*(cp.asarray(x) for x in arrays), **case.params)
    H.assert_bitwise(got, want, f"{op} on special values")


@pytest.mark.capsules("native_cuda.mul")
def test_subnormal_products_are_not_flushed():
    cp = H.cupy()
    a = np.full(64, 1e-20, np.float32)
    got = H.native_handler("mul").forward(cp.asarray(a), cp.asarray(a)).get()
    assert np.all(got > 0) and np.all(got < np.finfo(np.float32).tiny)   # 1e-40 is subnormal


@pytest.mark.capsules("native_cuda.add", "native_cuda.exp")
def test_misaligned_inputs_take_the_scalar_path():
    cp = H.cupy()
    r = np.random.default_rng(3)
    base = cp.asarray(_normal(r, shape=(1027,)))
    a, b = base[1:], base[:-1]            # contiguous, but 4 bytes off a 16-byte boundary
    assert a.data.ptr % 16 != 0
    got = H.native_handler("add").forward(a, b)
    H.assert_bitwise(got, a.get() + b.get(), "add on misaligned views")
    got = H.native_handler("exp").forward(a)
    H.assert_ulps(got, H.reference_forward("exp")(a.get()), _declared("exp"), "exp misaligned")


# --- reductions, shape ops, indexing, loss, random -------------------------------------------

REDUCE_CASES = [
    ((37, 29), None, False), ((37, 29), (0,), False), ((37, 29), (1,), True),
    ((6, 5, 7), (0, 2), False), ((6, 1, 7), (1,), False), ((4096, 3), (0,), False),
    ((3, 70001), (1,), True), ((1 << 20,), None, False), ((2, 0, 3), (1,), False), ((), None, False),
    # the gpt2 bias-gradient column sums (float4 path, several chunks) and a 3-D column case
    ((4096, 256), (0,), False), ((8192, 768), (0,), False), ((5, 333, 12), (1,), False),
]


@pytest.mark.capsules("native_cuda.reduce_sum", "native_cuda.reduce_mean")
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
@pytest.mark.parametrize("shape, axes, keepdims", REDUCE_CASES)
def test_reduce_sum_and_mean(shape, axes, keepdims, deterministic):
    from engine.runtime.deterministic import set_deterministic_reductions
    cp = H.cupy()
    r = np.random.default_rng(11)
    x = _normal(r, 1.0, shape)
    params = {"axes": axes, "keepdims": keepdims}
    red = tuple(range(len(shape))) if axes is None else axes
    count = math.prod(shape[d] for d in red)
    abs_sum = np.abs(x.astype(np.float64)).sum(axis=red, keepdims=keepdims)
    previous = set_deterministic_reductions(deterministic)
    try:
        for op in ("reduce_sum", "reduce_mean"):
            handler = H.native_handler(op)
            out = handler.forward(cp.asarray(x), **params)
            want = H.reference_forward(op)(x, **params)
            assert out.shape == want.shape
            if op == "reduce_sum":
                H.assert_sum_bound(out, want, abs_sum, count, f"{op}{shape} axes={axes}")
            elif count:
                H.assert_sum_bound(out, want, abs_sum / count, count, f"{op}{shape} axes={axes}")
            else:
                assert np.all(np.isnan(out.get()))
            g = _normal(r, 1.0, want.shape)
            (gx,) = handler.vjp((cp.asarray(x),), out, cp.asarray(g), **params)
            (wx,) = H.reference_vjp(op)((x,), want, g, **params)
            # (numpy.ascontiguousarray in the reference rule turns a rank-0 gradient into (1,))
            H.assert_bitwise(gx, np.reshape(wx, x.shape), f"{op} VJP {shape} axes={axes}")
    finally:
        set_deterministic_reductions(previous)


@pytest.mark.capsules("native_cuda.reduce_sum")
def test_reduction_over_unit_axes_is_a_bitwise_copy():
    cp = H.cupy()
    x = np.array([[-0.0], [1e-45], [np.inf]], np.float32)
    out = H.native_handler("reduce_sum").forward(cp.asarray(x), axes=(1,), keepdims=False)
    H.assert_bitwise(out, x[:, 0], "sum over an extent-1 axis")


@pytest.mark.capsules("native_cuda.broadcast")
@pytest.mark.parametrize("src, dst", [((5,), (3, 5)), ((3, 1), (3, 4)), ((1, 4, 1), (2, 4, 3)),
                                      ((), (2, 3)), ((7, 1, 5), (7, 6, 5)), ((1,), (100000,))])
def test_broadcast_forward_exact_and_vjp_sum(src, dst):
    cp = H.cupy()
    r = np.random.default_rng(5)
    x = _normal(r, 1.0, src)
    h = H.native_handler("broadcast")
    out = h.forward(cp.asarray(x), shape=dst)
    H.assert_bitwise(out, H.reference_forward("broadcast")(x, shape=dst), f"broadcast {src}")
    g = _normal(r, 1.0, dst)
    (gx,) = h.vjp((cp.asarray(x),), out, cp.asarray(g), shape=dst)
    (wx,) = H.reference_vjp("broadcast")((x,), None, g, shape=dst)
    lead = len(dst) - len(src)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(src) if s == 1 and
                                      dst[lead + i] != 1)
    copies = math.prod(dst[a] for a in axes)
    abs_sum = np.abs(g.astype(np.float64)).sum(axis=axes).reshape(src) if axes else np.abs(g)
    H.assert_sum_bound(gx, wx, abs_sum, copies, f"broadcast VJP {src}->{dst}")


@pytest.mark.parametrize("op, shapes, params", [
    ("permute", [(3, 4, 5)], {"perm": (2, 0, 1)}),
    ("permute", [(2, 3, 4, 5, 6)], {"perm": (4, 3, 2, 1, 0)}),
    ("permute", [(64, 33)], {"perm": (1, 0)}),
    ("concat", [(3, 4), (3, 2), (3, 7)], {"axis": 1}),
    ("concat", [(2, 4), (5, 4)], {"axis": 0}),
    ("slice", [(6, 9, 4)], {"axis": 1, "start": 2, "stop": 7}),
    ("slice", [(10,)], {"axis": 0, "start": 3, "stop": 3}),
    ("reshape", [(4, 6)], {"shape": (2, 3, 4)}),
    ("gather", [(5, 7, 3)], {"axis": 1, "indices": np.array([6, 0, 6, 2, 6])}),
    ("gather", [(9, 4)], {"axis": 0, "indices": np.array([], np.int64)}),
    ("scatter_add", [(5, 7, 3), (5, 4, 3)], {"axis": 1, "indices": np.array([1, 1, 5, 1])}),
])
@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
def test_shape_and_index_ops(op, shapes, params, deterministic):
    """Data movement is exact both ways; accumulations (gather's VJP, scatter_add) are bit for
    bit in deterministic mode (a left fold in index order, as numpy.add.at) and within
    gamma_k sum|terms| with atomics."""
    from engine.runtime.deterministic import set_deterministic_reductions
    cp = H.cupy()
    r = np.random.default_rng(9)
    host = tuple(_normal(r, 1.0, s) for s in shapes)
    handler = H.native_handler(op)
    previous = set_deterministic_reductions(deterministic)
    try:
        out = handler.forward(*(cp.asarray(x) for x in host), **params)
        want = H.reference_forward(op)(*host, **params)
        terms = len(params.get("indices", ())) + 1        # at most this many adds per element
        if op == "scatter_add" and not deterministic:
            abs_terms = H.reference_forward(op)(*(np.abs(x) for x in host), **params)
            H.assert_sum_bound(out, want, abs_terms, terms, f"{op} forward (atomic adds)")
        else:
            H.assert_bitwise(out, want, f"{op} forward")
        g = _normal(r, 1.0, want.shape)
        got = handler.vjp(tuple(cp.asarray(x) for x in host), out, cp.asarray(g), **params)
        ref = H.reference_vjp(op)(host, want, g, **params)
        for i, (gv, wv) in enumerate(zip(got, ref)):
            if op == "gather" and not deterministic:
                (abs_terms,) = H.reference_vjp(op)(host, want, np.abs(g), **params)
                H.assert_sum_bound(gv, wv, abs_terms, terms, f"{op} VJP (atomic adds)")
            else:
                H.assert_bitwise(gv, wv, f"{op} VJP input {i}")
    finally:
        set_deterministic_reductions(previous)


@pytest.mark.capsules("native_cuda.reshape")
def test_reshape_is_a_view():
    cp = H.cupy()
    x = cp.arange(12, dtype=cp.float32)
    out = H.native_handler("reshape").forward(x, shape=(3, 4))
    assert out.data.ptr == x.data.ptr and out.shape == (3, 4)


@pytest.mark.capsules("native_cuda.mse_loss")
@pytest.mark.parametrize("n", [1, 1000, 100003])
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
def test_mse_loss(n, deterministic):
    from engine.runtime.deterministic import set_deterministic_reductions
    cp = H.cupy()
    r = np.random.default_rng(n)
    p, t = _normal(r, 1.0, (n,)), _normal(r, 1.0, (n,))
    h = H.native_handler("mse_loss")
    previous = set_deterministic_reductions(deterministic)
    try:
        out = h.forward(cp.asarray(p), cp.asarray(t))
    finally:
        set_deterministic_reductions(previous)
    want = H.reference_forward("mse_loss")(p, t)
    assert out.shape == ()
    d2 = ((p.astype(np.float64) - t) ** 2).sum() / n
    H.assert_sum_bound(out, want, d2, n + 2, "mse_loss forward")
    g = np.array(0.7, np.float32)
    gp, gt = h.vjp((cp.asarray(p), cp.asarray(t)), out, cp.asarray(g))
    wp, wt = H.reference_vjp("mse_loss")((p, t), want, g)
    H.assert_ulps(gp, wp, 4, "mse_loss VJP pred")
    H.assert_ulps(gt, wt, 4, "mse_loss VJP target")
    H.assert_bitwise(gt, -gp.get(), "mse_loss VJP target is the exact negation")


@pytest.mark.capsules("native_cuda.rand_uniform", "native_cuda.bernoulli_mask")
@pytest.mark.parametrize("seed", [0, 1, 2026, 2**32 + 7, 2**64 - 1])
def test_random_bits_equal_the_cpu_reference(seed):
    cp = H.cupy()
    shape = (33, 65)
    got = H.native_handler("rand_uniform").forward(shape=shape, seed=seed)
    H.assert_bitwise(got, H.reference_forward("rand_uniform")(shape=shape, seed=seed),
                     f"rand_uniform seed={seed}")
    for p in (0.0, 0.3, 0.5, 1.0):
        got = H.native_handler("bernoulli_mask").forward(shape=shape, p=p, seed=seed)
        H.assert_bitwise(got, H.reference_forward("bernoulli_mask")(shape=shape, p=p, seed=seed),
                         f"bernoulli_mask p={p} seed={seed}")
    assert float(cp.mean(H.native_handler("rand_uniform").forward(shape=(1 << 16,), seed=seed))) \
        == pytest.approx(0.5, abs=0.01)


@pytest.mark.capsules("native_cuda.rand_uniform")
def test_philox_known_answers():
    """Random123's known-answer vectors for philox4x32-10."""
    from engine.runtime import loader
    cp = H.cupy()
    k = loader.kernel("random.cu", "tl_philox_words")
    out = cp.zeros(4, cp.uint32)
    u32 = np.uint32
    k((1,), (32,), (out, u32(1), u32(0), u32(0), u32(0), u32(0), u32(0), u32(0)))
    assert [hex(int(w)) for w in out.get()] == ["0x6627e8d5", "0xe169c58d", "0xbc57ac4c",
                                                "0x9b00dbd8"]
    k((1,), (32,), (out, u32(1), u32(0x243F6A88), u32(0x85A308D3), u32(0x13198A2E),
                    u32(0x03707344), u32(0xA4093822), u32(0x299F31D0)))
    assert [hex(int(w)) for w in out.get()] == ["0xd16cfe09", "0x94fdcceb", "0x5001e420",
                                                "0x24126ea1"]


def test_native_adam_step_equals_the_numpy_path_bit_for_bit():
    from engine.optim import Adam
    from engine.providers.native_cuda import native_adam_step
    from engine.runtime.buffer import AnyBuffer
    from engine.session import Session, use_session
    from engine.tensor import Tensor, tensor
    cp = H.cupy()
    r = np.random.default_rng(1)
    p0 = _normal(r, 1.0, (1001,))
    grads = [_normal(r, 1.0, (1001,)) for _ in range(3)]
    with use_session(Session("cpu")):
        p = tensor(p0, requires_grad=True)
        opt = Adam([p], lr=1e-2)
        for g in grads:
            p.grad = Tensor(AnyBuffer(g.copy(), p.device), p.shape)
            opt.step()
        want = p.numpy()
    dp, dm, dv = cp.asarray(p0), cp.zeros(1001, cp.float32), cp.zeros(1001, cp.float32)
    for t, g in enumerate(grads, 1):
        native_adam_step(dp, cp.asarray(g), dm, dv, 1e-2, 0.9, 0.999, 1e-8, t)
    H.assert_bitwise(dp, want, "Adam parameters after 3 steps")


# --- regressions the H200 conformance campaign found -----------------------------------------

def _bits(words):
    return np.array(words, np.uint32).view(np.float32)


@pytest.mark.capsules("native_cuda.gelu")
def test_gelu_limits_at_the_infinities():
    """docs/OPS.md: gelu(-inf) = -0 and gelu(+inf) = +inf; the VJP factor is -0 at -inf and 1 at
    +inf (the formula gives -inf * 0 = NaN there). Bit for bit against the reference."""
    cp = H.cupy()
    a = np.array([-np.inf, np.inf, np.nan, -1e30, 1e30, -3.4e38, 0.0, -0.0], np.float32)
    h = H.native_handler("gelu")
    out = h.forward(cp.asarray(a))
    H.assert_bitwise(out, H.reference_forward("gelu")(a), "gelu at specials")
    assert out.get()[0] == 0 and np.signbit(out.get()[0]) and out.get()[1] == np.inf
    for sign in (1.0, -1.0):
        g = np.full(a.shape, sign * 0.85, np.float32)
        (ga,) = h.vjp((cp.asarray(a),), out, cp.asarray(g))
        (wa,) = H.reference_vjp("gelu")((a,), None, g)
        H.assert_bitwise(ga, wa, f"gelu VJP at specials, g sign {sign}")


@pytest.mark.capsules("native_cuda.exp")
def test_exp_vjp_zero_cotangent_overflow_and_nan():
    """g * exp(a) in double: g = 0 with a finite a (even where exp overflows double) is an exact
    zero of g's sign, a = +inf or NaN gives NaN (the campaign's shrunk case: a = 0x4f011dd7)."""
    cp = H.cupy()
    a = np.concatenate([_bits([0x4F011DD7]), np.array([100, -np.inf, np.inf, np.nan, 1e9, 80],
                                                       np.float32)])
    g = np.array([0.0, -0.0, 0.0, 0.0, 0.0, 1.0, -1.0], np.float32)
    (ga,) = H.native_handler("exp").vjp((cp.asarray(a),), None, cp.asarray(g))
    (wa,) = H.reference_vjp("exp")((a,), None, g)
    H.assert_bitwise(ga, wa, "exp VJP specials")
    got = ga.get()
    assert got[0] == 0 and not np.signbit(got[0]) and np.signbit(got[1]) and np.isnan(got[3])


@pytest.mark.capsules("native_cuda.inv", "native_cuda.mse_loss")
def test_inv_and_mse_vjps_are_evaluated_in_double():
    """inv: -g / a^2 with a subnormal (1/a alone overflows float32); mse_loss: p - t near
    FLT_MAX (overflows float32). Both rounded once, bit for bit against the reference rules."""
    cp = H.cupy()
    a = np.array([1e-45, -1e-40, 1e-20, 3e38, -0.0], np.float32)
    g = np.array([1e-30, 1.0, 1.0, 1.0, 1.0], np.float32)
    (ga,) = H.native_handler("inv").vjp((cp.asarray(a),), None, cp.asarray(g))
    H.assert_bitwise(ga, H.reference_vjp("inv")((a,), None, g)[0], "inv VJP")
    p = np.array([3e38, -3e38, 1.0], np.float32)
    t = np.array([-3e38, 3e38, 2.0], np.float32)
    gout = np.array(0.5, np.float32)
    got = H.native_handler("mse_loss").vjp((cp.asarray(p), cp.asarray(t)), None, cp.asarray(gout))
    want = H.reference_vjp("mse_loss")((p, t), None, gout)
    for gv, wv in zip(got, want):
        H.assert_bitwise(gv, wv, "mse_loss VJP near FLT_MAX")
    assert np.all(np.isfinite(got[0].get()))


@pytest.mark.capsules("native_cuda.broadcast")
def test_broadcast_keeps_the_sign_of_a_rank0_negative_zero():
    """The campaign's case: broadcast(-0.0 of shape (), (12,)). The copy kernel moves bits, so
    every element is -0. (The campaign's +0 came from its upload: cupy.asarray of a 0-d array
    fills through ndarray.fill, which memsets any value == 0 to +0; a 1-element upload reshaped
    to () keeps the bits, as engine.runtime uploads do.)"""
    import engine
    from engine import ops
    cp = H.cupy()
    x = cp.asarray(np.array([-0.0], np.float32)).reshape(())
    assert x.get().view(np.uint32) == 0x80000000
    out = H.native_handler("broadcast").forward(x, shape=(12,))
    H.assert_bitwise(out, np.full(12, -0.0, np.float32), "broadcast of rank-0 -0.0")
    with H.cuda_session():
        t = ops.broadcast(engine.tensor(np.float32(-0.0)), (3, 4))
        H.assert_bitwise(t.numpy(), np.full((3, 4), -0.0, np.float32), "ops.broadcast on cuda")


@pytest.mark.capsules("native_cuda.reduce_sum")
def test_column_sums_do_not_depend_on_alignment():
    """Deterministic mode: the same values summed over axis 0 from a 16-byte-aligned buffer
    (tl_reduce_cols' float4 path) and from a view one float past it (the scalar path) give the
    same bits (reduce.cu: the same adds in the same order)."""
    from engine.runtime.deterministic import set_deterministic_reductions
    cp = H.cupy()
    r = np.random.default_rng(5)
    vals = (r.standard_normal((4096, 256)) * np.exp2(r.integers(-20, 20, (4096, 256)))
            ).astype(np.float32)
    buf = cp.empty(vals.size + 1, cp.float32)
    shifted = buf[1:].reshape(vals.shape)
    shifted[...] = cp.asarray(vals)
    assert shifted.data.ptr % 16 == 4
    previous = set_deterministic_reductions(True)
    try:
        h = H.native_handler("reduce_sum")
        aligned = h.forward(cp.asarray(vals), axes=(0,), keepdims=False)
        H.assert_bitwise(h.forward(shifted, axes=(0,), keepdims=False), aligned.get(),
                         "axis-0 sum, misaligned view vs aligned")
    finally:
        set_deterministic_reductions(previous)


@pytest.mark.capsules("native_cuda.reduce_sum")
@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
def test_sums_of_negative_zeros_stay_negative_zero(deterministic):
    """Atomic targets start at -0.0 (the IEEE additive identity), so chunked sums of -0 terms
    are -0 in both modes: reduce_sum over 100000 elements, broadcast's VJP over 70000 copies."""
    from engine.runtime.deterministic import set_deterministic_reductions
    cp = H.cupy()
    previous = set_deterministic_reductions(deterministic)
    try:
        z = cp.asarray(np.full(100000, -0.0, np.float32))
        out = H.native_handler("reduce_sum").forward(z, axes=None, keepdims=False)
        H.assert_bitwise(out, np.array(-0.0, np.float32), "sum of -0s")
        x = cp.asarray(np.array([1.0], np.float32)).reshape(())
        (gx,) = H.native_handler("broadcast").vjp((x,), None, z[:70000], shape=(70000,))
        H.assert_bitwise(gx, np.array(-0.0, np.float32), "broadcast VJP of -0s")
    finally:
        set_deterministic_reductions(previous)


@pytest.mark.parametrize("deterministic", [False, True], ids=["atomic", "deterministic"])
def test_scatter_add_subnormals_follow_the_declared_policy(deterministic):
    """The campaign's shrunk case: duplicate indices adding subnormals. Deterministic mode (plain
    adds, a left fold in index order) keeps them: bit for bit numpy.add.at. Default mode's float
    atomicAdd may flush subnormal inputs and results: each element is within one flushed term
    per add (2^-126 each) of the exact sum, which is what subnormal=implementation-defined
    declares."""
    from engine.registry import registry
    from engine.runtime.deterministic import set_deterministic_reductions
    from engine.types import Subnormals
    cp = H.cupy()
    cap = registry().get("native_cuda.scatter_add")[0]
    assert cap.numerical_policy.subnormals is Subnormals.implementation_defined
    base = _bits([0x80000001, 0x000C6E10, 0x9179B2DE, 0x0017168E, 0x0033EB30, 0xBD1DE388,
                  0x80800000])
    src = _bits([0x80000001, 0x007FFFFF, 0x3F800000])
    params = {"axis": 0, "indices": np.array([6, 6, 3])}
    want = H.reference_forward("scatter_add")(base, src, **params)
    previous = set_deterministic_reductions(deterministic)
    try:
        got = H.native_handler("scatter_add").forward(cp.asarray(base), cp.asarray(src), **params)
    finally:
        set_deterministic_reductions(previous)
    if deterministic:
        H.assert_bitwise(got, want, "scatter_add with subnormals, deterministic")
    else:
        err = np.abs(got.get().astype(np.float64) - want.astype(np.float64))
        assert np.all(err <= 3 * 2.0 ** -126), err
