"""The cufft capsules on the GPU (cuFFT R2C / C2R with our spectral.cu kernels): forward, VJP and
the inner-product identity against the mpmath references under the derived FFT bounds (the
harness's own check_case), power-of-two, odd and prime lengths, modes 1 and grid // 2 + 1, even
and odd grids (Nyquist or none), empty batches, grid-stride sizes; bitwise repeatability in both
deterministic modes; the plan cache; the fno1d example on CUDA against the CPU."""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H
from conformance import generators
from conformance.campaign import check_case
from engine.registry import registry
from engine.types import BackendOp as Op, RuntimeEntry as Entry

pytestmark = [pytest.mark.cuda,
              pytest.mark.capsules("cufft.rfft", "cufft.irfft", "cufft.fft_fno")]
f32 = np.float32
LENGTHS = (1, 2, 3, 7, 8, 31, 64, 97, 256, 1025, 4099)


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype(f32)


def _fno(batch, grid, width, modes):
    def draw(r):
        lead = (batch,) if batch != 1 else ()
        return (_normal(r, *lead, grid, width), _normal(r, modes, width, width),
                _normal(r, modes, width, width))
    return draw


CASES = ([(Entry.rfft, lambda r, n=n: (_normal(r, 3, n),), {}) for n in LENGTHS] +
         [(Entry.irfft, lambda r, n=n: (_normal(r, 2, n // 2 + 1, 2),), {"n": n})
          for n in LENGTHS] +
         [(Op.fft_fno, _fno(b, g, w, m), {}) for b, g, w, m in (
             (1, 1, 2, 1), (3, 2, 1, 2), (2, 7, 3, 1), (2, 7, 3, 4), (1, 8, 16, 5), (3, 8, 4, 1),
             (2, 33, 5, 17), (4, 64, 8, 12), (2, 257, 3, 129), (0, 8, 2, 3))])


@pytest.mark.parametrize("op, draw, params", CASES,
                         ids=[f"{op.label}-{i}" for i, (op, _, _) in enumerate(CASES)])
def test_cufft_capsules_pass_forward_vjp_and_identity(op, draw, params):
    inputs = tuple(np.ascontiguousarray(a) for a in draw(np.random.default_rng(len(params) + 3)))
    case = generators.Case(op, "normal", inputs, params, seed=0, index=0)
    with H.cuda_session():
        res = check_case(*registry().get(f"cufft.{op.label}"), case, {},
                         identity_rng=np.random.default_rng(2))
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [f.line() for f in res.failures[:3]]
    assert res.vjp is not None and res.vjp.identity in ("passed", "not-run")


@pytest.mark.parametrize("rows, n", [(2048, 1024), (4096, 256), (512, 4097), (2048, 256)])
def test_large_c2r_ignores_the_imaginary_dc_and_nyquist_parts(rows, n):
    # cuFFT's C2R result is undefined for a non-Hermitian input; on an H200 it ignored the DC and
    # Nyquist imaginary parts below rows * n = 2^20 and mixed them in past it (found by the next
    # test failing at 2^21): the irfft rule says they are not read, so they must not matter
    rng = np.random.default_rng(n)
    z = _normal(rng, rows, n // 2 + 1, 2)
    hermitian = z.copy()
    hermitian[:, 0, 1] = 0
    if n % 2 == 0:
        hermitian[:, n // 2, 1] = 0
    with H.cuda_session():
        h = registry().handler("cufft.irfft")
        cp = H.cupy()
        got, want = h.forward(cp.asarray(z), n=n), h.forward(cp.asarray(hermitian), n=n)
        H.assert_bitwise(got, want, "non-Hermitian input")
        ref = np.fft.irfft(z[..., 0] + 1j * z[..., 1].astype(np.float64), n=n, axis=1)
        err = np.max(np.abs(H.to_host(got) - ref)) / np.max(np.abs(ref))
        assert err < 1e-5, err   # a mixed-in imaginary part gives errors of order 1e-2


def test_grid_stride_sizes_agree_with_the_reference():
    # B*W*M = 64 * 32 * 513 work items: far more than one grid of the launch cap
    rng = np.random.default_rng(5)
    inputs = (_normal(rng, 64, 1024, 32), _normal(rng, 40, 32, 32) * f32(1 / 32),
              _normal(rng, 40, 32, 32) * f32(1 / 32))
    case = generators.Case(Op.fft_fno, "normal", inputs, {}, seed=0, index=0)
    with H.cuda_session():
        res = check_case(*registry().get("cufft.fft_fno"), case, {})
    assert not res.failures, [f.line() for f in res.failures[:3]]


def _run_twice(deterministic: bool):
    from engine import ops
    from engine.runtime.deterministic import set_deterministic_reductions
    from engine.tensor import tensor
    rng = np.random.default_rng(8)
    x, wr, wi = _normal(rng, 16, 128, 8), _normal(rng, 65, 8, 8), _normal(rng, 65, 8, 8)
    g = _normal(rng, 16, 128, 8)
    outs = []
    set_deterministic_reductions(deterministic)
    try:
        with H.cuda_session():
            for _ in range(2):
                ts = [tensor(a, requires_grad=True) for a in (x, wr, wi)]
                y = ops.fft_fno(*ts)
                ops.reduce_sum(ops.mul(y, tensor(g))).backward()
                outs.append([H.to_host(t.numpy()) for t in (y, *[t.grad for t in ts])])
    finally:
        set_deterministic_reductions(False)
    return outs


@pytest.mark.parametrize("deterministic", [False, True])
def test_forward_and_backward_repeat_bit_for_bit_in_both_modes(deterministic):
    first, second = _run_twice(deterministic)
    for a, b in zip(first, second):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_plans_are_cached_per_shape_and_released():
    from engine import ops
    from engine.providers import cufft
    from engine.tensor import tensor
    cufft.release_plans()
    with H.cuda_session():
        x = tensor(_normal(np.random.default_rng(1), 4, 96))
        a = H.to_host(ops.rfft(x).numpy())
        assert len(cufft._plans) == 1
        b = H.to_host(ops.rfft(x).numpy())
        assert len(cufft._plans) == 1 and np.array_equal(a, b)
        for n in range(2, 2 + 2 * cufft.PLAN_CACHE_SIZE):
            ops.rfft(tensor(np.ones((1, n), f32)))
        assert len(cufft._plans) == cufft.PLAN_CACHE_SIZE
        cufft.release_plans()
        assert not cufft._plans
        assert np.array_equal(H.to_host(ops.rfft(x).numpy()), a)


def test_fno1d_on_cuda_repeats_and_stays_near_the_cpu_run():
    from engine.models import fno1d
    from engine.runtime.deterministic import set_deterministic_reductions
    from engine.session import Session
    set_deterministic_reductions(True)
    try:
        a = fno1d.run(Session("cuda"), steps=20, seed=3)
        b = fno1d.run(Session("cuda"), steps=20, seed=3)
    finally:
        set_deterministic_reductions(False)
    assert a.losses == b.losses                         # bit for bit in deterministic mode
    cpu = fno1d.run(Session("cpu"), steps=20, seed=3)
    # Declared: each step's forward differs by the FFT and GEMM bounds (about 1e-6 relative)
    # and Adam's normalised steps carry such differences on; over 20 steps the losses stay within
    # 1e-3 relative of each other (a wrong kernel moves them by orders of magnitude more).
    for (s1, l1), (s2, l2) in zip(a.losses, cpu.losses):
        assert s1 == s2 and abs(l1 - l2) <= 1e-3 * l2, (s1, l1, l2)
    assert "fft_fno: cufft.fft_fno" in a.backend_report
