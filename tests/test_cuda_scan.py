"""native_cuda.selective_scan on the GPU: the sequential kernel equals the reference provider bit
for bit, the chunked parallel scan equals its NumPy emulation (tests/scan_orders.py) bit for bit,
and both meet the derived bound (conformance/families/scan.py) against a float64 recurrence (whose own
error, gamma64_{2t+2} C_t, is added: both are within their bounds of the exact value). The VJP:
the sequential path equals the engine's NumPy float64 rule in value, the parallel one is within
twice the derived VJP bound of it (each is within one bound of the exact gradient). Every path
repeats bit for bit in both deterministic modes (no atomics: the modes give the same bits)."""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H
from scan_orders import chunked_forward

pytestmark = pytest.mark.cuda

F32 = np.float32
SEQS = (1, 31, 32, 33, 1000, 4096)
STATES = (1, 7, 1024)


def _case(seq, state, token, seed=0):
    rng = np.random.default_rng(seed + 31 * seq + state + (7 if token else 0))
    shape = (seq, state) if token else (state,)
    a = rng.choice([-1, 1], shape) * (1 - 2.0 ** -7 * rng.random(shape))   # |A| near 1
    return (a.astype(F32), rng.standard_normal(shape).astype(F32),
            rng.standard_normal((seq, state)).astype(F32), rng.standard_normal(state).astype(F32))


def _f64(A, B, X, h0):
    seq, state = X.shape
    rows = seq if A.ndim == 2 else 1
    a, b = A.reshape(rows, state).astype(np.float64), B.reshape(rows, state).astype(np.float64)
    h, out = h0.astype(np.float64), np.empty((seq, state))
    for t in range(seq):
        r = t if A.ndim == 2 else 0
        h = a[r] * h + b[r] * X[t]
        out[t] = h
    return out


def _bound(inputs):
    from conformance.families import scan as scan_family
    from conformance.error_models import BoundContext
    from conformance.error_terms import HALF_SUB, U
    from engine.providers.reference import OPS
    from engine.types import BackendOp as Op
    ctx = BoundContext(Op.selective_scan, inputs, {}, OPS[Op.selective_scan].policy)
    seq = inputs[2].shape[0]
    c = _f64(*(np.abs(x) for x in inputs))
    own = (2 * np.arange(1, seq + 1)[:, None] + 2) * 2.0 ** -53 * c * 1.01   # the float64 loop's
    return scan_family.forward_bound(None, ctx, U) + own + 4 * HALF_SUB


def _native():
    from engine.providers.native_cuda import scan
    return scan


@pytest.mark.capsules("native_cuda.selective_scan")
@pytest.mark.parametrize("token", [False, True])
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("seq", SEQS)
def test_forward_both_paths(seq, state, token):
    cp, scan = H.cupy(), _native()
    inputs = _case(seq, state, token)
    dev = tuple(cp.asarray(x) for x in inputs)
    seq_out = scan.scan_forward(*dev, parallel=False)
    par_out = scan.scan_forward(*dev, parallel=True)
    H.assert_bitwise(seq_out, H.reference_forward("selective_scan")(*inputs), "sequential")
    H.assert_bitwise(par_out, chunked_forward(*inputs, scan.CHUNK), "parallel")
    bound, h64 = _bound(inputs), _f64(*inputs)
    for name, out in (("sequential", seq_out), ("parallel", par_out)):
        err = np.abs(H.to_host(out).astype(np.float64) - h64)
        assert np.all(err <= bound), f"{name}: worst err/bound {np.max(err / bound)}"
    # the handler takes the declared path: parallel from PARALLEL_MIN_SEQ steps on
    auto = scan.scan_forward(*dev)
    H.assert_bitwise(auto, H.to_host(par_out if seq >= scan.PARALLEL_MIN_SEQ else seq_out),
                     "auto path")


def _vjp_tolerance(inputs, g, want):
    from conformance.families import scan as scan_family
    from conformance.error_models import BoundContext
    from conformance.error_terms import U
    from conformance.references._common import Reference
    from engine.providers.reference import OPS
    from engine.types import BackendOp as Op
    out = []
    for i, w in enumerate(want):
        w64 = np.abs(w.astype(np.float64)) * (1 + 4 * U)   # at least |exact| within the bound
        ref = Reference(w.astype(F32), w64, kind="composite")
        ctx = BoundContext(Op.selective_scan, inputs, {}, OPS[Op.selective_scan].policy, g=g,
                           input_index=i)
        out.append(2 * scan_family.vjp_bound(ref, ctx, U))
    return out


@pytest.mark.capsules("native_cuda.selective_scan")
@pytest.mark.parametrize("token", [False, True])
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("seq", SEQS)
def test_vjp_both_paths(seq, state, token):
    from engine.ops.scan import scan_vjp_f64
    cp, scan = H.cupy(), _native()
    inputs = _case(seq, state, token)
    g = np.random.default_rng(seq * state).standard_normal((seq, state)).astype(F32)
    dev = tuple(cp.asarray(x) for x in inputs)
    want = scan_vjp_f64(*inputs, g)
    seq_grads = scan.scan_vjp(dev, None, cp.asarray(g), parallel=False)
    par_grads = scan.scan_vjp(dev, None, cp.asarray(g), parallel=True)
    tol = _vjp_tolerance(inputs, g, want)
    for i, (s, p, w, t) in enumerate(zip(seq_grads, par_grads, want, tol)):
        H.assert_ulps(s, w, 0, f"sequential gradient {i}")   # equal in value (+0 = -0)
        err = np.abs(H.to_host(p).astype(np.float64) - w.astype(np.float64))
        assert np.all(err <= t), f"parallel gradient {i}: worst err/tol {np.max(err / t)}"


@pytest.mark.capsules("native_cuda.selective_scan")
@pytest.mark.parametrize("parallel", [False, True])
def test_every_path_repeats_bit_for_bit_in_both_modes(parallel):
    from engine.runtime.deterministic import (get_deterministic_reductions,
                                              set_deterministic_reductions)
    cp, scan = H.cupy(), _native()
    inputs = _case(4096, 1024, False, seed=5)
    dev = tuple(cp.asarray(x) for x in inputs)
    g = cp.asarray(np.random.default_rng(9).standard_normal((4096, 1024)).astype(F32))
    before = get_deterministic_reductions()
    runs = []
    try:
        for mode in (False, True, False, True):
            set_deterministic_reductions(mode)
            h = scan.scan_forward(*dev, parallel=parallel)
            runs.append([H.to_host(h)] + [H.to_host(x) for x in
                                          scan.scan_vjp(dev, h, g, parallel=parallel)])
    finally:
        set_deterministic_reductions(before)
    for again in runs[1:]:
        for a, b in zip(runs[0], again):
            H.assert_bitwise(b, a, "repeat")


@pytest.mark.capsules("native_cuda.selective_scan")
@pytest.mark.parametrize("token", [False, True])
def test_tape_on_cuda_runs_the_native_vjp_and_the_local_rule_runs_our_kernels(token):
    import engine.ops as ops
    from engine.ops._dispatch import LOCAL_VJP
    from engine.tensor import tensor
    from engine.types import BackendOp as Op
    cp, scan = H.cupy(), _native()
    inputs = _case(300, 33, token, seed=3)
    g = np.random.default_rng(4).standard_normal((300, 33)).astype(F32)
    with H.cuda_session():
        ts = [tensor(x, requires_grad=True) for x in inputs]
        h = ops.selective_scan(*ts)
        h.backward(tensor(g))
        grads = [t.grad.numpy() for t in ts]
    dev = tuple(cp.asarray(x) for x in inputs)
    want = scan.scan_vjp(dev, None, cp.asarray(g))
    local = LOCAL_VJP[Op.selective_scan](dev, None, cp.asarray(g))
    for got, w, loc in zip(grads, want, local):
        H.assert_bitwise(got, H.to_host(w), "tape")
        H.assert_bitwise(loc, H.to_host(w), "local rule on CUDA")


@pytest.mark.capsules("native_cuda.selective_scan")
def test_empty_shapes_and_ieee_specials_on_cuda():
    cp, scan = H.cupy(), _native()
    for A, B, X, h0 in [(np.ones(3), np.ones(3), np.ones((0, 3)), np.ones(3)),
                        (np.ones((4, 0)), np.ones((4, 0)), np.ones((4, 0)), np.ones(0))]:
        dev = tuple(cp.asarray(np.asarray(x, F32)) for x in (A, B, X, h0))
        assert scan.scan_forward(*dev).shape == X.shape
        grads = scan.scan_vjp(dev, None, cp.zeros(X.shape, F32))
        assert [x.shape for x in grads] == [A.shape, B.shape, X.shape, h0.shape]
        assert not np.any(H.to_host(grads[3])) and not np.any(H.to_host(grads[0]))
    A, B, X = [[1], [1], [0], [1]], [[1], [1], [1], [1]], [[1], [np.inf], [1], [1]]
    host = tuple(np.asarray(x, F32) for x in (A, B, X, [0]))
    dev = tuple(cp.asarray(x) for x in host)
    for parallel in (False, True):
        got = H.to_host(scan.scan_forward(*dev, parallel=parallel))
        H.assert_bitwise(got, H.reference_forward("selective_scan")(*host), "specials")


@pytest.mark.capsules("native_cuda.selective_scan")
@pytest.mark.parametrize("token", [False, True])
def test_the_parallel_path_propagates_specials_as_its_emulation_does(token):
    # infinities and NaNs in B, X and h0 over 300 steps (ten chunks): the chunk maps, carries and
    # rescans meet them in the emulated order, so the NaN and infinity positions match bit for bit
    cp, scan = H.cupy(), _native()
    A, B, X, h0 = _case(300, 9, token, seed=8)
    rng = np.random.default_rng(8)
    for arr in (B, X, h0):
        flat = arr.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = rng.choice([np.inf, -np.inf, np.nan], 3)
    host = (A, B, X, h0)
    dev = tuple(cp.asarray(x) for x in host)
    H.assert_bitwise(scan.scan_forward(*dev, parallel=True), chunked_forward(*host, scan.CHUNK),
                     "parallel specials")
