"""native_cuda.bias_gelu on the GPU (engine/csrc/cuda/bias_gelu.cu): forward and VJP pass the
harness's own check (mpmath reference, conformance/derived_bias_gelu.py's bounds, repeatability,
the inner-product identity) over row and column extents across the block and chunk boundaries,
gpt2's MLP width and special values; bits repeat run to run; the fused op agrees with the
composition gelu(add(x, broadcast(b))) on CUDA within both bounds."""
import numpy as np
import pytest

import cuda_helpers as H
from conformance import generators
from conformance.campaign import check_case
from engine import ops
from engine.registry import registry
from engine.session import Session, use_session
from engine.tensor import tensor
from engine.types import RuntimeEntry as Entry

pytestmark = [pytest.mark.cuda, pytest.mark.capsules("native_cuda.bias_gelu")]
f32 = np.float32

# (rows, d): one element, odd sizes, columns across the 256-thread block, rows across the 64
# chunks of the VJP, gpt2-124m's MLP width 3072, one long column
SHAPES = [(1, 1), (3, 7), (2, 257), (63, 5), (65, 3), (1000, 33), (16, 3072), (70000, 1),
          (1, 65537)]


def _case(x, b):
    return generators.Case(Entry.bias_gelu, "normal", (x, b), {}, seed=0, index=0)


@pytest.mark.parametrize("rows, d", SHAPES)
def test_native_passes_the_harness_check(rows, d):
    rng = np.random.default_rng(rows * 31 + d)
    x = (rng.standard_normal((rows, d)) * 3).astype(f32)
    b = rng.standard_normal(d).astype(f32)
    res = check_case(*registry().get("native_cuda.bias_gelu"), _case(x, b), {},
                     identity_rng=np.random.default_rng(1))
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [(f.output, f.reason) for f in res.failures]
    assert res.vjp is not None and res.vjp.identity in ("passed", "skipped-nonsmooth")


def test_special_values_pass_the_harness_check():
    x = np.array([[np.inf, -np.inf, 1.0, np.nan, -0.7518, 3e38],
                  [0.0, -0.0, 1e-45, -20.0, 20.0, -3e38]], f32)
    b = np.array([0.0, 1.0, -np.inf, 0.0, 0.0, 3e38], f32)
    res = check_case(*registry().get("native_cuda.bias_gelu"), _case(x, b), {})
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [(f.output, f.reason) for f in res.failures]


def test_forward_and_vjp_repeat_bit_for_bit():
    cp = H.cupy()
    h = H.native_handler("bias_gelu")
    rng = np.random.default_rng(5)
    x, b = cp.asarray(rng.standard_normal((4096, 512)).astype(f32)), \
        cp.asarray(rng.standard_normal(512).astype(f32))
    g = cp.asarray(rng.standard_normal((4096, 512)).astype(f32))
    first = (h.forward(x, b).get(), *(a.get() for a in h.vjp((x, b), None, g)))
    for _ in range(3):
        got = (h.forward(x, b), *h.vjp((x, b), None, g))
        for w, o, name in zip(first, got, ("y", "dx", "db")):
            H.assert_bitwise(o, w, f"bias_gelu {name}")


def test_fused_agrees_with_the_composition_on_cuda():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((64, 96)) * 2).astype(f32)
    b = rng.standard_normal(96).astype(f32)
    w = rng.standard_normal((64, 96)).astype(f32)
    with use_session(Session("cuda")):
        a, c = tensor(x, requires_grad=True), tensor(b, requires_grad=True)
        a2, c2 = tensor(x, requires_grad=True), tensor(b, requires_grad=True)
        fused = ops.bias_gelu(a, c)
        composed = ops.gelu(ops.add(a2, ops.broadcast(c2, x.shape)))
        ops.reduce_sum(ops.mul(fused, tensor(w))).backward()
        ops.reduce_sum(ops.mul(composed, tensor(w))).backward()
        y1, y2 = H.to_host(fused.numpy()), H.to_host(composed.numpy())
        d1, d2 = H.to_host(a.grad.numpy()), H.to_host(a2.grad.numpy())
        b1, b2 = H.to_host(c.grad.numpy()), H.to_host(c2.grad.numpy())
    # the plain gelu capsule is a float32 kernel within 2 ulp (its declared bound); the fused one
    # within one rounding: 3 ulp apart at most. dx: the plain VJP's error is absolute near gelu's
    # stationary point (derived.py's gelu VJP rule, 10u M_d |g| with M_d < 30 for |s| < 8): 4 ulp
    # or 2^-15 |g|. db: those errors summed over the 64 rows, plus the float32 column sum's
    # gamma_66 of sum |dx| (|gelu'| < 1.2)
    H.assert_ulps(y1, y2, 3, "bias_gelu vs gelu(add)")
    absw = np.abs(w.astype(np.float64))
    assert np.all(np.abs(d1 - d2) <= 4 * 2.0 ** -23 * np.abs(d2) + 2.0 ** -15 * absw)
    assert np.all(np.abs(b1 - b2) <= (66 * 2.0 ** -24 * 1.2 + 2.0 ** -15) * absw.sum(axis=0))
