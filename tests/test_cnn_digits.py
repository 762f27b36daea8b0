"""The cnn_digits example: it learns the digits on every device, reproducibly, and its errors are
named. The accuracy floor (90% held out) is the issue's; the CPU/CUDA agreement bounds are declared
below with their reasons."""
import json

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="cnn_digits reads sklearn.datasets.load_digits")

from engine.cli import main  # noqa: E402
from engine.models import cnn_digits  # noqa: E402


def _session(device):
    from engine.profile import maintained_for_device
    from engine.session import Session
    from engine.types import Device
    d = Device.parse(device)
    return Session(d, maintained_for_device(d))


@pytest.fixture(scope="module")
def cpu_run():
    return cnn_digits.run(_session("cpu"))


def test_the_split_is_fixed_by_the_seed_and_disjoint():
    xa, ya, xt, yt = cnn_digits.dataset(2026)
    xb, yb, _, _ = cnn_digits.dataset(2026)
    assert xa.shape == (1438, 1, 8, 8) and xt.shape == (359, 1, 8, 8)
    assert np.array_equal(xa, xb) and np.array_equal(ya, yb)
    assert xa.dtype == np.float32 and 0.0 <= xa.min() and xa.max() == 1.0
    # no image of the held-out fifth is in the training set (the digits have no duplicates
    # across the split for this seed; a leak would inflate the held-out accuracy)
    train = {x.tobytes() for x in xa}
    assert not any(x.tobytes() in train for x in xt)
    assert not np.array_equal(cnn_digits.dataset(7)[1], ya)


def test_it_reaches_90_percent_held_out_on_the_cpu(cpu_run):
    assert cpu_run.test_accuracy >= 0.90, cpu_run.test_accuracy
    assert cpu_run.train_accuracy >= cpu_run.test_accuracy - 0.05
    assert len(cpu_run.losses) == 300
    assert cpu_run.losses[-1] < cpu_run.losses[0] / 5, (cpu_run.losses[0], cpu_run.losses[-1])
    # chance is 10 classes: the first loss is near log(10)
    assert abs(cpu_run.losses[0] - np.log(10)) < 0.5


def test_same_seed_same_losses_bit_for_bit_and_another_seed_differs(cpu_run):
    again = cnn_digits.run(_session("cpu"), steps=20)
    assert again.losses == cpu_run.losses[:20]
    other = cnn_digits.run(_session("cpu"), steps=3, seed=7)
    assert other.losses != cpu_run.losses[:3]


def test_the_command_prints_and_logs(tmp_path, capsys):
    log = tmp_path / "digits.json"
    assert main(["cnn_digits", "--steps", "30", "--log", str(log), "--show-backend"]) == 0
    out = capsys.readouterr().out
    record = json.loads(log.read_text())
    assert record["steps"] == 30 and len(record["losses"]) == 30
    assert f"step   25  loss {record['losses'][25]:.9g}" in out
    assert f"held-out accuracy {record['test_accuracy']:.4f}" in out
    for op in ("conv", "max_pool", "avg_pool", "relu", "log_softmax"):
        assert f"{op}: reference.{op}\n" in out


@pytest.mark.parametrize("args, message", [
    (["cnn_digits", "--steps", "0"], "--steps must be at least 1, got 0"),
    (["cnn_digits", "--device", "tpu"], "device `tpu` has no maintained runtime profile"),
    (["cnn_digits", "--log", "/tmp"], "--log /tmp is a directory; pass a file path"),
])
def test_bad_arguments_are_named_errors(args, message, capsys):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_a_missing_scikit_learn_is_a_named_error(monkeypatch, capsys):
    import builtins
    real_import = builtins.__import__

    def no_sklearn(name, *a, **k):
        if name.startswith("sklearn"):
            raise ImportError("No module named 'sklearn'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    assert main(["cnn_digits", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "cnn_digits needs scikit-learn" in err and "pip install" in err


@pytest.mark.cuda
def test_on_cuda_it_reaches_90_percent_and_repeats_bitwise_in_deterministic_mode(cpu_run):
    from engine.runtime.deterministic import deterministic_reductions
    with deterministic_reductions():
        a = cnn_digits.run(_session("cuda"))
        b = cnn_digits.run(_session("cuda"), steps=40)
    assert a.test_accuracy >= 0.90, a.test_accuracy
    assert b.losses == a.losses[:40]
    # Declared agreement with the CPU: the first loss is one forward pass whose sums run in other
    # orders (reference: float64 accumulation rounded once; CUDA: float32 fixed order), a few
    # float32 ulps apart through five layers: 1e-5 relative is far above that and far below any
    # indexing error. Training then amplifies such differences chaotically, so only the accuracy
    # is compared afterwards, within two held-out images (2/359).
    assert abs(a.losses[0] - cpu_run.losses[0]) <= 1e-5 * cpu_run.losses[0]
    assert abs(a.test_accuracy - cpu_run.test_accuracy) <= 2 / 359 + 1e-12
