"""The named errors of the CUDA-graph path that need no GPU to raise: Adam captured without its
warm-up, betas whose bias corrections never settle in float32, gpt2's device batch checked
against too wide a bound, and a cuBLAS status other than success."""
import numpy as np
import pytest

from engine.errors import GraphCaptureError
from engine.runtime.capture_state import CAPTURE


@pytest.fixture
def capturing(monkeypatch):
    monkeypatch.setattr(CAPTURE, "recording", True)
    monkeypatch.setattr(CAPTURE, "active", True)


def test_adam_captured_without_a_warm_up_is_named(capturing):
    from engine.optim import Adam
    from engine.tensor import tensor
    opt = Adam([tensor(np.ones(3, np.float32), requires_grad=True)])
    with pytest.raises(GraphCaptureError, match="Adam.step\\(\\) was captured without a warm-up"):
        opt._device_table()


def test_betas_that_never_settle_are_named():
    from engine.providers.native_cuda.optim import BiasTable
    with pytest.raises(GraphCaptureError, match=r"betas \(0\.9, 0\.999999\) do not reach 1\.0"):
        BiasTable(0.9, 0.999999, 0)


def test_gpt2_device_batch_bounds_are_checked():
    from engine.indices import CheckedIndices
    from engine.models import gpt2
    model = gpt2.GPT(gpt2.preset("tiny"), 0)
    ids = CheckedIndices(np.zeros(4, np.int64), 300)
    with pytest.raises(gpt2.GPTConfigError, match="checked below 256, got bounds 300 and 256"):
        model.loss_on_device(ids, CheckedIndices(np.zeros(4, np.int64), 256), 1, 4)


def test_a_cublas_error_status_is_named():
    from engine.providers.cublas_lib import CublasCallError, _check
    _check(0, "cublasSgemm")
    with pytest.raises(CublasCallError, match="cublasSgemm returned status 13"):
        _check(13, "cublasSgemm")
