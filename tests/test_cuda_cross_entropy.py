"""native_cuda.cross_entropy on the GPU (engine/csrc/cuda/xent.cu, tl_xent_*): forward and VJP
pass the harness's own check (mpmath reference, derived bounds of conformance/families/reduction.py,
repeatability, the inner-product identity) over row and class extents across the warp, block and
grid boundaries and gpt2's shape; special rows as log_softmax's; bits repeat run to run; the op
runs inside a CUDA graph from CheckedIndices targets; gpt2's tiny loss on CUDA stays within the
old composition's bound of it."""
import numpy as np
import pytest

import cuda_helpers as H
from conformance import generators
from conformance.campaign import check_case
from engine import graphs, ops
from engine.indices import CheckedIndices
from engine.registry import registry
from engine.session import Session, use_session
from engine.tensor import tensor
from engine.types import RuntimeEntry as Entry

pytestmark = [pytest.mark.cuda, pytest.mark.capsules("native_cuda.cross_entropy")]
f32 = np.float32
U = 2.0 ** -24

# (rows, classes): one class, odd sizes, gpt2's 256 classes, rows and classes across the warp
# (32), block (8 rows of 256 threads) and 65536-block boundaries
SHAPES = [(1, 1), (3, 7), (7, 33), (128, 256), (9, 257), (2, 4097), (1, 65537), (4097, 2),
          (70000, 3), (33, 1025)]


def _case(x, t):
    return generators.Case(Entry.cross_entropy, "normal", (np.asarray(x, f32),),
                           {"targets": np.asarray(t, np.int64)}, seed=0, index=0)


def _draw(rows, classes, seed, scale=3.0):
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal((rows, classes)) * scale).astype(f32),
            rng.integers(0, classes, rows).astype(np.int64))


@pytest.mark.parametrize("rows, classes", SHAPES)
def test_native_passes_the_harness_check(rows, classes):
    x, t = _draw(rows, classes, rows * 7 + classes)
    res = check_case(*registry().get("native_cuda.cross_entropy"), _case(x, t), {},
                     identity_rng=np.random.default_rng(1))
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [(f.output, f.reason) for f in res.failures]
    assert res.vjp is not None and res.vjp.identity == "passed"


SPECIAL = [
    (np.array([[1.0, np.nan, 0.0], [0.0, 1.0, 2.0]], f32), [0, 1]),       # a NaN row
    (np.array([[-np.inf, 1.0, 0.0], [0.0, 1.0, 2.0]], f32), [0, 1]),      # target at -inf: +inf
    (np.array([[-np.inf, -np.inf], [0.0, 1.0]], f32), [0, 1]),            # all -inf: NaN
    (np.array([[-np.inf, 5.0, -np.inf]], f32), [1]),                      # the only class: +0
    (np.array([[40.0, 0.0, 0.0], [0.0, -80.0, 3.0]], f32), [0, 2]),       # tiny losses
    (np.array([[3e38, -3e38, 0.0]], f32), [1]),                           # overflows to +inf
    (np.array([[2.0, 2.0, 2.0, 1.0]], f32), [2]),                         # a tie with the max
]


@pytest.mark.parametrize("x, t", SPECIAL)
def test_special_rows_pass_the_harness_check(x, t):
    res = check_case(*registry().get("native_cuda.cross_entropy"), _case(x, t), {})
    assert res.harness_error is None, res.harness_error
    assert not res.failures, [(f.output, f.reason) for f in res.failures]


def test_forward_and_vjp_repeat_bit_for_bit():
    cp = H.cupy()
    h = H.native_handler("cross_entropy")
    x, t = _draw(4096, 256, 5)
    dx, dt = cp.asarray(x), cp.asarray(t)
    g = cp.asarray(f32(0.75))
    first = (h.forward(dx, targets=dt).get(), h.vjp((dx,), None, g, targets=dt)[0].get())
    for _ in range(3):
        H.assert_bitwise(h.forward(dx, targets=dt), first[0], "cross_entropy forward")
        H.assert_bitwise(h.vjp((dx,), None, g, targets=dt)[0], first[1], "cross_entropy VJP")


def test_replayed_graph_equals_the_eager_step():
    # CheckedIndices targets: nothing uploaded inside the capture
    x, t = _draw(64, 256, 8)
    with use_session(Session("cuda")):
        targets = CheckedIndices.upload(t, 256, "targets")

        def step(logits):
            return ops.cross_entropy(logits, targets)
        eager = H.to_host(step(tensor(x)).numpy())
        g = graphs.capture(step, (x,))
        replayed = H.to_host(g.replay(x).buffer.data)
        g.close()
    H.assert_bitwise(replayed.reshape(()), eager.reshape(()), "replayed loss")


def test_gpt2_tiny_loss_stays_within_the_old_compositions_bound():
    from engine.models import gpt2
    rng = np.random.default_rng(4)
    tokens, targets = rng.integers(0, 256, (4, 32)), rng.integers(0, 256, (4, 32))
    with use_session(Session("cuda")) as session:
        model = gpt2.GPT(gpt2.preset("tiny"), 3)
        fused = float(H.to_host(model.loss(tokens, targets).numpy()))
        assert session.dispatched[Entry.cross_entropy].name == "native_cuda.cross_entropy"
        logits = model(tokens)
        n = logits.shape[0]
        flat = ops.reshape(ops.log_softmax(logits, -1), (n * 256,))
        picks = np.arange(n) * 256 + targets.reshape(-1)
        old = float(H.to_host(ops.scale(ops.reduce_mean(ops.gather(flat, 0, picks)),
                                        -1.0).numpy()))
    # old: each log_softmax term within 6 ulp (12u relative: tl_softmax_f32.cuh), the sum of n
    # same-signed terms gamma_n, the division u: (n + 14) u |L|; the fused one within ~u |L|
    assert abs(fused - old) <= (n + 16) * U * abs(old), (fused, old)
