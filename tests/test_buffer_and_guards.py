"""AnyBuffer.validate, the UInt32 checks and the wrappers' parameter checks."""
import numpy as np
import pytest

import engine
from engine import ops
from engine.errors import (DTypeError, GradientError, IndexOutOfRangeError, LengthMismatchError,
                           OutputLengthError, ParameterTypeError, ParameterValueError,
                           ShapeError, UInt32OverflowError)
from engine.runtime.buffer import AnyBuffer, check_uint32


def test_validate_names_both_counts():
    with pytest.raises(LengthMismatchError, match=r"output seed: got 5 elements, expected 6 for "
                                                  r"shape \(2, 3\)"):
        AnyBuffer.validate(np.zeros(5, np.float32), (2, 3), "output seed")
    with pytest.raises(DTypeError, match="got dtype float64, expected float32"):
        AnyBuffer.validate(np.zeros(6), (2, 3), "supplied gradient")
    assert AnyBuffer.validate(np.zeros((3, 2), np.float32), (2, 3), "x").shape == (6,)


def test_backward_seed_of_wrong_length(cpu_session):
    x = engine.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = ops.exp(x)
    with pytest.raises(LengthMismatchError, match="backward\\(\\) output seed: got 2 elements, "
                                                  "expected 3"):
        y.backward(np.ones(2, np.float32))


def test_backward_without_parameters(cpu_session):
    with pytest.raises(GradientError, match="does not depend on any tensor with requires_grad"):
        ops.exp(engine.tensor([1.0])).backward()


def test_supplied_gradient_of_wrong_length_is_caught(cpu_session, monkeypatch):
    from engine.ops._dispatch import LOCAL_VJP
    from engine.types import BackendOp
    monkeypatch.setitem(LOCAL_VJP, BackendOp.exp, lambda i, o, g: (g[:1],))
    x = engine.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(LengthMismatchError, match="gradient of `exp` input: got 1 elements, "
                                                  "expected 2"):
        ops.exp(x).backward(np.ones(2, np.float32))


def test_uint32_limits():
    check_uint32((2**32 - 1,), "x")
    with pytest.raises(UInt32OverflowError, match="axis 0 has extent 4294967296"):
        check_uint32((2**32,), "x")
    with pytest.raises(UInt32OverflowError, match="holds 4294967296 elements"):
        check_uint32((2**16, 2**16), "x")
    with pytest.raises(UInt32OverflowError):
        ops.rand_uniform((2**16, 2**16), seed=1)


def test_output_of_the_wrong_length_is_caught_before_the_tape(cpu_session):
    import dataclasses
    from engine.types import BackendOp
    kernel = cpu_session.kernel_for(BackendOp.relu)
    bad = dataclasses.replace(kernel.handler, forward=lambda a: a.reshape(-1)[:-1])
    cpu_session._kernels[BackendOp.relu] = dataclasses.replace(kernel, handler=bad)
    with pytest.raises(OutputLengthError, match="returned 3 elements, expected 4 for shape "
                                                r"\(2, 2\); the kernel is wrong"):
        ops.relu(engine.tensor(np.ones((2, 2))))


@pytest.mark.parametrize("call, error, message", [
    (lambda a, b: ops.add(a, b), ShapeError, r"operand shapes \(2, 3\) and \(3,\) differ"),
    (lambda a, b: ops.reduce_sum(a, axes=(2,)), ShapeError, "axis 2 is out of range for rank 2"),
    (lambda a, b: ops.reduce_sum(a, axes=(1, -1)), ShapeError, "repeat an axis"),
    (lambda a, b: ops.reshape(a, (4, 2)), ShapeError, "cannot view 6 elements"),
    (lambda a, b: ops.reshape(a, (-1, 3)), ShapeError, "negative extent"),
    (lambda a, b: ops.permute(a, (0, 0)), ShapeError, "not a permutation of range"),
    (lambda a, b: ops.broadcast(a, (3, 3)), ShapeError, r"does not broadcast to \(3, 3\)"),
    (lambda a, b: ops.concat([a, b], axis=0), ShapeError, "incompatible with"),
    (lambda a, b: ops.concat([], axis=0), ShapeError, "needs at least one tensor"),
    (lambda a, b: ops.slice(a, 1, 2, 5), ShapeError, r"\[2, 5\) is not a range within \[0, 3\]"),
    (lambda a, b: ops.gather(a, 1, [0, 3]), IndexOutOfRangeError, r"index 3 is outside \[0, 3\)"),
    (lambda a, b: ops.gather(a, 1, [[0]]), ShapeError, "1-D sequence of ints"),
    (lambda a, b: ops.gather(a, 1, [-1]), IndexOutOfRangeError, "index -1"),
    (lambda a, b: ops.scatter_add(a, a, 1, [0]), ShapeError, r"src shape \(2, 3\) should be "
                                                             r"\(2, 1\)"),
    (lambda a, b: ops.matmul(a, a), ShapeError, "inner extents differ"),
    (lambda a, b: ops.matmul(a, b), ShapeError, "two rank-2 or two rank-3"),
    (lambda a, b: ops.linear(a, a, b), ShapeError, "disagree"),
    (lambda a, b: ops.mse_loss(a, b), ShapeError, "pred shape"),
    (lambda a, b: ops.clamp(a, 1.0, 0.0), ParameterValueError, "lo=1.0 is above hi=0.0"),
    (lambda a, b: ops.scale(a, "2"), ParameterTypeError, "alpha must be a real number, got str"),
    (lambda a, b: ops.safe_log(a, 0.0), ParameterValueError, "eps must be positive"),
    (lambda a, b: ops.softmax(a, axis=5), ShapeError, "axis 5 is out of range"),
    (lambda a, b: ops.hard_masked_softmax(a, np.ones((2, 3))), ShapeError, "mask must be boolean"),
    (lambda a, b: ops.hard_masked_softmax(a, np.ones((3,), bool)), ShapeError, "mask shape"),
    (lambda a, b: ops.bernoulli_mask((2,), 1.5, 0), ParameterValueError, "p must be a probability"),
    (lambda a, b: ops.rand_uniform((2,), -1), ParameterValueError, "seed must be a whole number"),
    (lambda a, b: ops.rand_uniform((2,), "7"), ParameterTypeError, "seed must be a whole number"),
    (lambda a, b: a + engine.tensor(np.ones((4,))), ShapeError, "do not broadcast together"),
])
def test_wrapper_checks(cpu_session, call, error, message):
    a = engine.tensor(np.ones((2, 3)))
    b = engine.tensor(np.ones((3,)))
    with pytest.raises(error, match=message):
        call(a, b)


def test_operators_insert_broadcast(cpu_session):
    a = engine.tensor(np.ones((2, 3)))
    out = (a + engine.tensor([1.0, 2.0, 3.0])) * 2.0 - 1.0
    np.testing.assert_array_equal(out.numpy(), [[3, 5, 7], [3, 5, 7]])
    assert "broadcast" in {op.label for op in cpu_session.dispatched}


def test_tensor_rejects_non_numbers():
    with pytest.raises(DTypeError, match="takes real numbers"):
        engine.tensor(["a"])


def test_backward_seed_keeps_a_negative_zero_and_accepts_device_arrays(cpu_session):
    x = engine.tensor(np.float32(2.0), requires_grad=True)
    ops.scale(x, 3.0).backward(np.float32(-0.0))
    assert x.grad.numpy() == 0 and np.signbit(x.grad.numpy())
