"""The derived loss bound of the quickstart MLP holds on the CPU (so it can be trusted across
devices) and is tight enough to mean something; on CUDA the two devices' losses meet it."""
import numpy as np
import pytest

from conformance.quickstart_bound import compare_devices, exact_loss, loss_error_bound
from engine.models import quickstart_mlp
from engine.session import Session


def test_cpu_losses_are_within_the_derived_bound_of_the_exact_loss():
    x, y = quickstart_mlp.dataset()
    checked = []

    def record(step, model, loss):
        params = quickstart_mlp.parameters_host(model)
        bound = loss_error_bound(*params, x, y)
        err = abs(loss - exact_loss(*params, x, y))
        checked.append((step, err, bound))
        assert err <= bound, (step, err, bound)
    quickstart_mlp.run(Session("cpu"), steps=60, seed=2026, on_step=record)
    assert len(checked) == 60
    # The bound is a few float32 roundings of the loss, not a vacuous number.
    for step, err, bound in checked:
        assert bound < 1e-5


def test_the_bound_catches_a_loss_computed_in_float16():
    x, y = quickstart_mlp.dataset()
    params = quickstart_mlp.parameters_host(quickstart_mlp.nn.Sequential(
        quickstart_mlp.nn.Linear(2, 8, 2026), quickstart_mlp.nn.ReLU(),
        quickstart_mlp.nn.Linear(8, 1, 2028)))
    w1, b1, w2, b2 = (p.astype(np.float16) for p in params)
    xh = x.astype(np.float16)
    o = np.maximum(xh @ w1.T + b1, 0) @ w2.T + b2
    sloppy = float(np.mean((o - y.astype(np.float16)) ** 2, dtype=np.float16))
    assert abs(sloppy - exact_loss(*params, x, y)) > loss_error_bound(*params, x, y)


@pytest.mark.cuda
def test_cuda_and_cpu_losses_agree_within_the_derived_bound():
    rows = compare_devices(steps=2, seed=2026)
    for r in rows:
        assert r["ok"], r
