"""The Python API behaves like PyTorch where users expect it to, and every misuse is a named error
(a TypeError subclass for a wrong type, a ValueError subclass for a bad value) that says what to do
(issue 11, "Python API")."""
import os
import subprocess
import sys

import numpy as np
import pytest

import engine
from engine import ops
from engine.errors import (Float32OverflowError, GradientError, NotATensorError,
                           ParameterTypeError, ParameterValueError, UnknownDeviceError)
from engine.runtime.deterministic import ENV_VAR, parse_mode


@pytest.mark.parametrize("call, where", [
    (lambda: ops.add(np.ones(2, np.float32), np.ones(2, np.float32)), "`a` is a numpy.ndarray"),
    (lambda: ops.relu([1.0, 2.0]), "`a` is a list"),
    (lambda: ops.concat([engine.tensor([1.0]), [2.0]]), "`tensors[1]` is a list"),
    (lambda: ops.matmul(engine.tensor([[1.0]]), 3.0), "`b` is a float"),
])
def test_a_non_tensor_is_a_named_type_error(cpu_session, call, where):
    with pytest.raises(NotATensorError, match=r"wrap the data with engine\.tensor") as exc:
        call()
    assert isinstance(exc.value, TypeError) and where in str(exc.value)


def test_a_session_needs_a_device_name():
    with pytest.raises(UnknownDeviceError, match=r"Session\(None\): the device must be a name"):
        engine.Session(None)


@pytest.mark.parametrize("call, error", [
    (lambda x: ops.clamp(x, 1.0, 0.0), ParameterValueError),
    (lambda x: ops.scale(x, "x"), ParameterTypeError),
    (lambda x: ops.bernoulli_mask((2,), 1.5, seed=1), ParameterValueError),
    (lambda x: ops.rand_uniform((2,), seed=-1), ParameterValueError),
    (lambda x: ops.rand_uniform((2,), seed=1.5), ParameterTypeError),
    (lambda x: ops.layer_norm(x, x, x, eps=-1.0), ParameterValueError),
])
def test_parameter_errors_are_type_or_value_errors(cpu_session, call, error):
    with pytest.raises(error) as exc:
        call(engine.tensor([1.0, 2.0]))
    assert isinstance(exc.value, TypeError if error is ParameterTypeError else ValueError)


def test_backward_follows_pytorch(cpu_session):
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(GradientError, match=r"without a seed needs a tensor of one element, "
                                            r"this one has shape \(2,\)"):
        ops.mul(x, x).backward()
    y = ops.reduce_sum(ops.mul(x, x))
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2, 4])
    with pytest.raises(GradientError, match="backward\\(\\) through a graph a second time"):
        y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2, 4])     # nothing accumulated twice
    x.zero_grad()
    z = ops.reduce_sum(ops.mul(x, x))
    z.backward(retain_graph=True)
    z.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4, 8])     # kept on purpose: accumulates
    w = ops.reshape(ops.mul(x, x), (1, 2))
    with pytest.raises(GradientError, match=r"seed has shape \(2,\), the output has shape "
                                            r"\(1, 2\)"):
        w.backward(np.ones(2, np.float32))


def test_requires_grad_must_be_a_bool(cpu_session):
    with pytest.raises(ParameterTypeError, match="requires_grad must be True or False, got str"):
        engine.tensor([1.0], requires_grad="yes")


def test_numpy_asarray_gives_the_values(cpu_session):
    t = engine.tensor([[1.0, -0.0], [2.5, 3.0]])
    a = np.asarray(t)
    assert a.dtype == np.float32 and a.shape == (2, 2) and np.signbit(a[0, 1])
    assert np.asarray(t, dtype=np.float64).dtype == np.float64


def test_tensor_creation_conversions_are_explicit(cpu_session):
    with pytest.raises(Float32OverflowError, match=r"1e\+40 is finite but beyond the float32"):
        engine.tensor(1e40)
    with pytest.raises(Float32OverflowError):
        engine.tensor([1.0, -1e39])
    assert engine.tensor(float("inf")).item() == float("inf")     # asked for: kept
    assert engine.tensor(2 ** 24 + 1).item() == 2 ** 24             # documented: nearest float32
    assert engine.tensor(2 ** 60).item() == 2.0 ** 60               # exact: a power of two
    np.testing.assert_array_equal(engine.tensor([True, False]).numpy(), [1.0, 0.0])


@pytest.mark.parametrize("text, on, warns", [
    (None, False, False), ("", False, False), ("0", False, False), (" 0", False, False),
    ("false", False, False), ("No", False, False), ("OFF", False, False),
    ("1", True, False), ("true", True, False), ("Yes", True, False), (" on ", True, False),
    ("maybe", True, True), ("2", True, True),
])
def test_the_deterministic_mode_variable(text, on, warns):
    mode, warning = parse_mode(text)
    assert mode is on and (warning is not None) is warns
    if warns:
        assert ENV_VAR in warning and "set 0 or 1" in warning


def test_deterministic_reductions_restores_the_previous_mode_even_after_an_error():
    from engine.runtime.deterministic import (deterministic_reductions,
                                              get_deterministic_reductions,
                                              set_deterministic_reductions)
    before = set_deterministic_reductions(False)
    try:
        with deterministic_reductions():
            assert get_deterministic_reductions() is True
            with deterministic_reductions(False):
                assert get_deterministic_reductions() is False
            assert get_deterministic_reductions() is True
        assert get_deterministic_reductions() is False
        with pytest.raises(KeyError):
            with deterministic_reductions():
                raise KeyError("inside")
        assert get_deterministic_reductions() is False
    finally:
        set_deterministic_reductions(before)


def test_the_variable_is_read_at_start_with_a_named_warning():
    code = "from engine.runtime.deterministic import get_deterministic_reductions as g; print(g())"
    for value, expect, warned in (("false", "False", False), ("maybe", "True", True)):
        proc = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True,
                              text=True, timeout=60, env={**os.environ, ENV_VAR: value})
        assert proc.stdout.strip() == expect
        assert (ENV_VAR in proc.stderr) is warned, proc.stderr


@pytest.mark.parametrize("command, variable, value", [
    (["engine.cli", "memory"], "TORCHLEAN_CUDA_CACHE_CAP_BYTES", "abc"),
    # the campaign alone: the variable is read as the command starts, whatever suites run
    (["conformance.cli", "run", "--capsule", "reference.abs", "--quick", "--cases", "1",
      "--suite", "campaign", "--evidence-dir", "{tmp}"], ENV_VAR, "maybe"),
])
def test_the_commands_show_a_bad_variable_as_one_warning_line(command, variable, value, tmp_path):
    """A malformed variable is named by the command, on one line, without Python's source line
    (on the CPU stub too, where the cache cap has no effect)."""
    command = [c.replace("{tmp}", str(tmp_path / "evidence")) for c in command]
    proc = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True,
                          timeout=300, env={**os.environ, variable: value})
    assert proc.returncode == 0, proc.stderr
    prog = "torchlean" if command[0] == "engine.cli" else "torchlean-conformance"
    lines = [ln for ln in proc.stderr.splitlines() if variable in ln]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: warning: {variable}={value!r}")
    assert "RuntimeWarning" not in proc.stderr and ".py:" not in proc.stderr
