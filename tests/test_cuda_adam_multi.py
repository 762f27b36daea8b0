"""The multi-tensor Adam / AdamW step on the GPU (engine/providers/native_cuda/optim_multi.py):
bit for bit the per-parameter kernels' results (tl_adam_step after CuPy's decay multiply) and
the NumPy path's, with the step count from host scalars and from the device bias table; the
address table rewritten only where addresses changed; a capture without a warm-up named.
(Replayed graphs equal eager steps: tests/test_cuda_graphs.py, which now runs this step.)"""
import numpy as np
import pytest

from cuda_helpers import assert_bitwise, cupy, to_host
from engine.errors import GraphCaptureError, ShapeError
from engine.optim import Adam, AdamW
from engine.runtime.buffer import AnyBuffer
from engine.runtime.capture_state import CAPTURE
from engine.session import Session, use_session
from engine.tensor import Tensor, tensor

pytestmark = pytest.mark.cuda

# Sizes around the 4096-element chunk, an empty parameter and small ones; decay mixed.
SIZES = (0, 1, 4095, 4096, 4097, 10000, 3, 300)
DECAY = (True, False, True, True, False, True, True, False)


def _values(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 1.0, n).astype(np.float32)


def _run(device: str, cls, multi: bool, steps: int = 4, **kw):
    """`steps` steps of `cls` over SIZES; every step new gradient arrays, and in step 2 the
    parameter 5 has none. Returns the parameters, m and v on the host."""
    with use_session(Session(device)):
        params = [tensor(_values(i, n), requires_grad=True) for i, n in enumerate(SIZES)]
        if cls is AdamW:
            kw.setdefault("decay", list(DECAY))
            kw.setdefault("weight_decay", 0.1)
        opt = cls(params, lr=1e-2, multi_tensor=multi, **kw)
        for s in range(steps):
            for i, p in enumerate(params):
                g = _values(100 * s + i, p.shape[0])
                data = cupy().asarray(g) if device == "cuda" else g
                p.grad = None if (s == 2 and i == 5) else Tensor(AnyBuffer(data, p.device),
                                                                 p.shape)
            opt.step()
        return ([to_host(p.buffer.data) for p in params], [to_host(m) for m in opt.m],
                [to_host(v) for v in opt.v], opt)


@pytest.mark.parametrize("cls", [Adam, AdamW])
def test_multi_tensor_equals_the_per_parameter_kernels_and_numpy_bit_for_bit(cls):
    multi = _run("cuda", cls, True)
    single = _run("cuda", cls, False)
    host = _run("cpu", cls, False)
    assert multi[3]._multi is not None and single[3]._multi is None
    for k, name in enumerate(("param", "m", "v")):
        for i in range(len(SIZES)):
            assert_bitwise(multi[k][i], single[k][i], f"{cls.__name__} {name} {i}: per-parameter")
            assert_bitwise(multi[k][i], host[k][i], f"{cls.__name__} {name} {i}: NumPy")


def test_the_device_bias_table_gives_the_same_bits(monkeypatch):
    # recording (a graph's warm-up, not its capture): both paths read the corrections from the
    # device BiasTable, tl_adam_multi_table against tl_adam_step_table
    monkeypatch.setattr(CAPTURE, "recording", True)
    monkeypatch.setattr(CAPTURE, "ops", {})
    multi = _run("cuda", AdamW, True)
    single = _run("cuda", AdamW, False)
    assert multi[3]._table is not None and multi[3].device_step() == 4
    for k in range(3):
        for i in range(len(SIZES)):
            assert_bitwise(multi[k][i], single[k][i], f"table path {k} {i}")


def test_only_changed_address_windows_are_rewritten():
    # 70 parameters: 280 addresses in windows of 64; the gradients (70 .. 139) fall in windows
    # 1 and 2, so after the first step (all 5 windows) a step with new gradients rewrites 2.
    with use_session(Session("cuda")):
        params = [tensor(np.ones(3, np.float32), requires_grad=True) for _ in range(70)]
        opt = Adam(params, lr=1e-3)
        launches, held = [], []      # held: earlier gradients stay live, so no address repeats
        for s in range(3):
            for p in params:
                p.grad = Tensor(AnyBuffer(cupy().full(3, s + 1.0, np.float32), p.device), p.shape)
                held.append(p.grad)
            opt.step()
            launches.append(opt._multi.launches)
        opt.step()                                   # the same gradient arrays: no rewrite
        assert launches == [5, 7, 9] and opt._multi.launches == 9


def test_a_capture_without_a_warm_up_is_named(monkeypatch):
    with use_session(Session("cuda")):
        p = tensor(np.ones(3, np.float32), requires_grad=True)
        p.grad = Tensor(AnyBuffer(cupy().ones(3, np.float32), p.device), p.shape)
        opt = AdamW([p])
        monkeypatch.setattr(CAPTURE, "recording", True)
        monkeypatch.setattr(CAPTURE, "active", True)
        with pytest.raises(GraphCaptureError, match="multi-tensor table is uploaded then"):
            opt.step()


def test_a_gradient_of_another_size_is_named():
    with use_session(Session("cuda")):
        p = tensor(np.ones(3, np.float32), requires_grad=True)
        opt = Adam([p])
        p.grad = Tensor(AnyBuffer(cupy().ones(4, np.float32), p.device), (4,))
        with pytest.raises(ShapeError, match="parameter 0's grad has 4 elements, the parameter "
                                             "has 3"):
            opt.step()
