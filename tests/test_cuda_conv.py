"""conv and conv_transpose on the GPU: native forward and VJP against the exact references under
the harness's derived bound (error_models), the tiled 2-D forward against the N-D kernel bit for
bit (and both against a float32 left fold in NumPy: the declared order), tiling edges (channel
and pixel counts off the 64 x 64 tile, K off the 16-step), batch, groups, dilation, rank 1..8,
empty shapes, both reduction modes (deterministic: bitwise repeat), and the engine path."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cuda_helpers as H

pytestmark = pytest.mark.cuda

F32 = np.float32

# (batch, C_in, C_out, groups, spatial, kernel, stride, padding, dilation, bias)
CASES = [
    (2, 3, 5, 1, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1), True),
    (1, 3, 65, 1, (17, 33), (3, 3), (1, 1), (1, 1), (1, 1), True),      # 65 channels, 561 pixels
    (3, 4, 66, 2, (13, 7), (3, 2), (2, 1), (1, 0), (1, 2), True),       # groups of 33 channels
    (1, 6, 6, 6, (10, 9), (3, 3), (1, 1), (1, 1), (2, 2), False),       # depthwise, dilated
    (None, 5, 3, 1, (8, 8), (5, 5), (3, 3), (4, 4), (1, 1), True),      # padding at the limit
    (2, 2, 3, 1, (31,), (3,), (4,), (1,), (1,), True),                  # stride above k
    (1, 2, 4, 2, (5, 4, 6), (2, 2, 3), (1, 2, 1), (1, 0, 2), (1, 1, 1), True),
    (1, 1, 2, 1, (2, 3, 2, 2, 2), (2, 2, 1, 2, 1), (1,) * 5, (0, 1, 0, 1, 0), (1,) * 5, True),
    (1, 1, 1, 1, (2,) * 8, (1, 2) * 4, (1,) * 8, (0,) * 8, (1,) * 8, True),
    (0, 2, 3, 1, (5, 5), (3, 3), (1, 1), (1, 1), (1, 1), True),         # batch 0
    (1, 2, 2, 1, (2,), (5,), (1,), (0,), (1,), True),                   # an empty output
]
IDS = [f"c{i}-r{len(c[4])}" for i, c in enumerate(CASES)]


def _arrays(rng, case, transpose):
    batch, ci, co, g, spatial, k, s, p, d, bias = case
    if transpose:
        ci, co = co, ci
    lead = () if batch is None else (batch,)
    x = rng.standard_normal(lead + (ci,) + spatial).astype(F32)
    w = rng.standard_normal(((ci, co // g) if transpose else (co, ci // g)) + k).astype(F32)
    arrays = (x, w) + ((rng.standard_normal(co).astype(F32),) if bias else ())
    return arrays, {"stride": s, "padding": p, "dilation": d, "groups": g}


def _capsule(op):
    from engine.registry import registry
    return registry().get(f"native_cuda.{op}")[0]


def _judge(op, inputs, params, got, refs, vjp):
    """Every output within the capsule's derived error model (the campaign's judgement)."""
    from conformance import error_models as E
    cap = _capsule(op)
    for i, (ref, out) in enumerate(zip(refs, got)):
        model = (E.vjp_model if vjp else E.forward_model)(cap, ref.kind)
        ctx = E.BoundContext(cap.op, inputs, params, cap.numerical_policy, input_index=i)
        verdict = E.compare(model, ref, H.to_host(out), ctx)
        assert verdict.passed, f"{op} {'vjp' if vjp else 'forward'} output {i}: " \
                               f"{verdict.reasons()}"


def _dev(arrays):
    cp = H.cupy()
    return tuple(cp.asarray(a) for a in arrays)


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op", ["conv", "conv_transpose"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_native_forward_and_vjp_within_the_derived_bound(op, case):
    from conformance import references
    from engine.runtime import set_deterministic_reductions
    rng = np.random.default_rng(2 * CASES.index(case) + (op == "conv_transpose"))
    arrays, params = _arrays(rng, case, op == "conv_transpose")
    h = H.native_handler(op)
    ref = references.get(op)
    y = h.forward(*_dev(arrays), **params)
    _judge(op, arrays, params, (y,), (ref.forward(arrays, **params),), False)
    g = rng.standard_normal(y.shape).astype(F32)
    want = ref.vjp(arrays, g, **params)
    for mode in (False, True):
        previous = set_deterministic_reductions(mode)
        try:
            grads = h.vjp(_dev(arrays), y, H.cupy().asarray(g), **params)
        finally:
            set_deterministic_reductions(previous)
        assert len(grads) == len(arrays)
        _judge(op, arrays, params, grads, want, True)


def _fold_f32(x, w, b, params):
    """The declared order in NumPy float32: acc = b (or -0), then acc = acc + x * w over
    (input channel, taps row-major), skipped out-of-range taps; x [N, C_in, *inp]."""
    from conformance.references._conv import forward_taps
    from engine.convolution import conv_geometry
    geo, _ = conv_geometry(x.shape, w.shape, **params)
    cg, og = geo.c_in // geo.groups, geo.c_out // geo.groups
    idx, ok = forward_taps(geo)
    xf = x.reshape(geo.n, geo.c_in, -1)
    wf = w.reshape(geo.c_out, cg, -1)
    y = np.empty((geo.n, geo.c_out, idx.shape[0]), F32)
    for co in range(geo.c_out):
        acc = np.full((geo.n, idx.shape[0]), F32(-0.0) if b is None else b[co], F32)
        for c in range(cg):
            ci = (co // og) * cg + c
            for t in range(idx.shape[1]):
                term = (xf[:, ci, idx[:, t]] * wf[co, c, t]).astype(F32)
                acc = np.where(ok[None, :, t], (acc + term).astype(F32), acc)
        y[:, co] = acc
    return y.reshape((geo.n, geo.c_out) + geo.out)


@pytest.mark.capsules("native_cuda.conv", "native_cuda.conv_transpose")
@pytest.mark.parametrize("case", [c for c in CASES if len(c[4]) == 2 and c[0] != 0],
                         ids=[i for i, c in zip(IDS, CASES) if len(c[4]) == 2 and c[0] != 0])
def test_tiled_2d_forward_equals_the_nd_kernel_and_the_declared_fold_bit_for_bit(case):
    from engine.convolution import conv_geometry
    from engine.providers.native_cuda import conv as N
    rng = np.random.default_rng(11)
    arrays, params = _arrays(rng, case, False)
    x, w = arrays[0], arrays[1]
    b = arrays[2] if len(arrays) == 3 else None
    geo, batched = conv_geometry(x.shape, w.shape, **params)
    shape = (geo.n, geo.c_out) + geo.out
    dx, dw = _dev((x.reshape((geo.n,) + x.shape[-3:]), w))
    db = None if b is None else _dev((b,))[0]
    tiled = N.conv_forward(geo, dx, dw, db, shape)
    nd = N.conv_forward(geo, dx, dw, db, shape, tiled=False)
    H.assert_bitwise(tiled, nd.get(), "tiled 2-D vs N-D forward")
    H.assert_bitwise(nd, _fold_f32(x.reshape((geo.n,) + x.shape[-3:]), w, b, params),
                     "N-D forward vs the float32 left fold")
    # dInput (and conv_transpose's forward, which adds a bias over C_in): at stride 1 the tiled
    # forward on the flipped kernel, else the gather; the same bits either way
    cp = H.cupy()
    gy = cp.asarray(rng.standard_normal(shape).astype(F32))
    xs = (geo.n, geo.c_in) + geo.inp
    for bias in (None, cp.asarray(rng.standard_normal(geo.c_in).astype(F32))):
        fast = N.conv_input_grad(geo, gy, dw, bias, xs)
        gather = N.conv_input_grad(geo, gy, dw, bias, xs, tiled=False)
        H.assert_bitwise(fast, gather.get(), "dInput: tiled on the flipped kernel vs gather")
    # dKernel: the tiled split-K GEMM and the generic chunks, in both modes
    from engine.runtime import set_deterministic_reductions
    dxs = cp.asarray(x.reshape(xs))
    for mode in (True, False):
        previous = set_deterministic_reductions(mode)
        try:
            fast = N.conv_kernel_grad(geo, gy, dxs, w.shape).get()
            slow = N.conv_kernel_grad(geo, gy, dxs, w.shape, tiled=False).get()
        finally:
            set_deterministic_reductions(previous)
        if mode:
            H.assert_bitwise(fast, slow, "dKernel: tiled vs generic chunks (deterministic)")
        else:   # atomics: both sums of the same terms within gamma_n sum|terms| of the exact
            from engine.convolution import kernel_grad64
            mag = kernel_grad64(geo, np.abs(gy.get().astype(np.float64)),
                                np.abs(x.reshape(xs).astype(np.float64)))
            n = geo.n * math.prod(geo.out)
            d = np.abs(fast.astype(np.float64) - slow)
            assert np.all(d <= 2 * H.gamma(n) * mag + 2 * n * 2.0 ** -126)


@pytest.mark.capsules("native_cuda.conv")
@pytest.mark.parametrize("shape", [(4, 64, 64, 30, 30), (3, 96, 130, 19, 23), (1, 17, 70, 57, 9)])
def test_large_2d_tiles_agree_with_the_nd_kernel_and_float64(shape):
    """Several tiles in both directions and K = 9 C_in, off the 16-step at C_in = 17."""
    from engine.convolution import conv_geometry, forward64
    from engine.providers.native_cuda import conv as N
    n, ci, co, h, wd = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((n, ci, h, wd)).astype(F32)
    w = rng.standard_normal((co, ci, 3, 3)).astype(F32)
    b = rng.standard_normal(co).astype(F32)
    params = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    geo, _ = conv_geometry(x.shape, w.shape, **params)
    out_shape = (n, co) + geo.out
    dx, dw, db = _dev((x, w, b))
    tiled = N.conv_forward(geo, dx, dw, db, out_shape)
    H.assert_bitwise(tiled, N.conv_forward(geo, dx, dw, db, out_shape, tiled=False).get(),
                     "tiled vs N-D")
    want = forward64(geo, x, w, b)
    mag = forward64(geo, np.abs(x), np.abs(w), np.abs(b))
    k = ci * 9 + 1
    err = np.abs(tiled.get().astype(np.float64) - want)
    assert np.all(err <= H.gamma(k) * mag * (1 + 2 * H.U) + k * 2.0 ** -150)
    # dKernel over several column and channel tiles and chunks: tiled vs generic, bit for bit
    from engine.runtime import set_deterministic_reductions
    gy = H.cupy().asarray(rng.standard_normal(out_shape).astype(F32))
    previous = set_deterministic_reductions(True)
    try:
        fast = N.conv_kernel_grad(geo, gy, dx, w.shape)
        H.assert_bitwise(fast, N.conv_kernel_grad(geo, gy, dx, w.shape, tiled=False).get(),
                         "dKernel: tiled vs generic chunks")
    finally:
        set_deterministic_reductions(previous)


@pytest.mark.capsules("native_cuda.conv")
@pytest.mark.parametrize("wide", [True, False])
def test_both_forward_tile_widths_equal_the_nd_kernels_bit_for_bit(wide, monkeypatch):
    """tl_conv2d_fwd_tiled (128-pixel tiles) and tl_conv2d_fwd_tiled_n64, forced either way,
    forward and flip mode (dInput), with a bias, several tiles, K = 9 * 17 off the 16-step."""
    from engine.convolution import conv_geometry
    from engine.providers.native_cuda import conv as N
    monkeypatch.setattr(N, "WIDE_MIN_BLOCKS", 0 if wide else 1 << 30)
    cp = H.cupy()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 17, 13, 11)).astype(F32)
    w = rng.standard_normal((70, 17, 3, 3)).astype(F32)
    b = rng.standard_normal(70).astype(F32)
    params = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    geo, _ = conv_geometry(x.shape, w.shape, **params)
    dx, dw, db = _dev((x, w, b))
    shape = (2, 70) + geo.out
    H.assert_bitwise(N.conv_forward(geo, dx, dw, db, shape),
                     N.conv_forward(geo, dx, dw, db, shape, tiled=False).get(), "forward")
    gy = cp.asarray(rng.standard_normal(shape).astype(F32))
    bx = cp.asarray(rng.standard_normal(17).astype(F32))
    H.assert_bitwise(N.conv_input_grad(geo, gy, dw, bx, x.shape),
                     N.conv_input_grad(geo, gy, dw, bx, x.shape, tiled=False).get(), "dInput")


@pytest.mark.capsules("native_cuda.{op}")
@pytest.mark.parametrize("op", ["conv", "conv_transpose"])
def test_deterministic_backward_repeats_bit_for_bit_and_default_mode_agrees(op):
    """N = 8, 16 -> 16, 24 x 24, k 3: dKernel sums 4608 positions per element over 5 chunks."""
    check_deterministic_backward(op, 8)


def check_deterministic_backward(op, n):
    """Deterministic mode repeats dx, dw, db bit for bit; default mode gives dx's bits and dw, db
    within twice the any-order bound of them (N = n, 16 -> 16, 24 x 24, k 3, padding 1)."""
    from engine.runtime import set_deterministic_reductions
    cp = H.cupy()
    rng = np.random.default_rng(9)
    x = rng.standard_normal((n, 16, 24, 24)).astype(F32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(F32)
    b = rng.standard_normal(16).astype(F32)
    params = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    h = H.native_handler(op)
    inputs = _dev((x, w, b))
    y = h.forward(*inputs, **params)
    g = cp.asarray(rng.standard_normal(y.shape).astype(F32))
    runs = {}
    for mode in (True, False):
        previous = set_deterministic_reductions(mode)
        try:
            runs[mode] = [[a.get() for a in h.vjp(inputs, y, g, **params)] for _ in range(4)]
        finally:
            set_deterministic_reductions(previous)
    for again in runs[True][1:]:
        for a, first, name in zip(again, runs[True][0], ("dx", "dw", "db")):
            H.assert_bitwise(a, first, f"{op} {name}, deterministic repeat")
    # dx is a gather in both modes: the same bits; dw and db within twice the any-order bound
    # (each mode's sum within gamma_n sum|terms| of the exact; default mode's atomics may flush)
    from engine import convolution as C
    gh = np.abs(g.get().astype(np.float64))
    xa = np.abs(x.astype(np.float64))
    if op == "conv":
        geo, _ = C.conv_geometry(x.shape, w.shape, **params)
        mags = (C.kernel_grad64(geo, gh, xa), C.bias_grad64(gh, 16))
    else:
        geo, _ = C.transpose_geometry(x.shape, w.shape, **params)
        mags = (C.kernel_grad64(geo, xa, gh), C.bias_grad64(gh, 16))
    H.assert_bitwise(runs[False][0][0], runs[True][0][0], f"{op} dx, default vs deterministic")
    terms = n * 24 * 24
    for i, name, mag in ((1, "dw", mags[0]), (2, "db", mags[1])):
        d = np.abs(runs[False][0][i].astype(np.float64) - runs[True][0][i])
        bound = 2 * H.gamma(terms) * mag + 2 * terms * 2.0 ** -126
        assert np.all(d <= bound), f"{op} {name}: the modes disagree beyond the bound"


@pytest.mark.capsules("native_cuda.conv", "native_cuda.conv_transpose")
def test_engine_path_runs_forward_and_backward_on_cuda_and_matches_the_cpu_tape():
    from engine import ops
    from engine.tensor import tensor
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 10, 10)).astype(F32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(F32)
    b = rng.standard_normal(4).astype(F32)
    results = {}
    for device in ("cpu", "cuda"):
        from engine.session import Session, use_session
        with use_session(Session(device)):
            ts = [tensor(a, requires_grad=True) for a in (x, w, b)]
            y = ops.conv2d(*ts, stride=1, padding=1)
            # w (4, 3, 3, 3) read as a conv_transpose kernel [C_in 4, C_out 3, 3, 3]: back to 3
            z = ops.conv_transpose2d(y, tensor(w), padding=1)
            ops.reduce_sum(ops.mul(z, z)).backward()
            results[device] = [z.numpy()] + [t.grad.numpy() for t in ts]
    # TorchLean's own CUDA test method (CPU tape against CUDA tape on small examples), with a
    # declared tolerance: float32 folds of at most 37 terms per conv output and 200 per kernel
    # gradient (k u < 2^-12 of sum|terms|) against float64 rounded once; 1e-4 of the largest
    # magnitude leaves room for the cancellation in z * z's gradients
    for got, want, name in zip(results["cuda"], results["cpu"], ("z", "dx", "dw", "db")):
        scale = np.abs(want).max() + 1
        assert np.allclose(got, want, rtol=1e-4, atol=1e-4 * scale), name


def test_tape_rule_on_device_arrays_runs_our_kernels():
    import engine.ops  # noqa: F401  (registers the local rules)
    from engine.ops._dispatch import LOCAL_VJP
    from engine.types import BackendOp as Op
    rng = np.random.default_rng(2)
    arrays, params = _arrays(rng, CASES[2], False)
    h = H.native_handler("conv")
    inputs = _dev(arrays)
    y = h.forward(*inputs, **params)
    g = H.cupy().asarray(rng.standard_normal(y.shape).astype(F32))
    rule = LOCAL_VJP[Op.conv](inputs, y, g, **params)
    for a, b_, name in zip(rule, h.vjp(inputs, y, g, **params), ("dx", "dw", "db")):
        assert type(a).__module__.startswith("cupy"), name
        if name == "dx":
            H.assert_bitwise(a, b_.get(), name)
