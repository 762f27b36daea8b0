"""apply's input checks run once per flat array (engine/ops/_dispatch.py, `_check_input`): a
tensor that passed them is not checked again while its buffer holds the same array, and the
device is compared on every call. These tests make a tensor pass first and then break it, so each
check must still be made when the remembered array no longer applies; and an output is marked
checked only when it is a contiguous float32 run (a strided one is checked at its next use)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine import ops
from engine.errors import DeviceMismatchError, LayoutError, LengthMismatchError
from engine.runtime.buffer import AnyBuffer
from engine.tensor import tensor
from engine.types import BackendOp, Device


@pytest.fixture
def used(cpu_session):
    """Two tensors of shape (2, 3) that have been through one op (so both are remembered)."""
    a, b = tensor(np.arange(6.0).reshape(2, 3)), tensor(np.ones((2, 3)))
    ops.add(a, b)
    assert a._checked is a.buffer.data and b._checked is b.buffer.data
    return a, b


def test_a_passed_tensor_is_not_checked_again_and_its_result_is_right(used):
    a, b = used
    out = ops.add(a, b)
    np.testing.assert_array_equal(out.numpy(), np.arange(6.0, dtype=np.float32).reshape(2, 3) + 1)


def test_a_buffer_swapped_for_a_short_one_is_checked_again(used):
    a, b = used
    b.buffer = AnyBuffer(b.buffer.data[:-1], b.device)
    with pytest.raises(LengthMismatchError,
                       match=r"add: input 1 buffer holds 5 elements but its shape \(2, 3\) "
                             r"needs 6"):
        ops.add(a, b)


def test_a_buffer_swapped_for_a_strided_one_is_checked_again(used):
    a, _ = used
    a.buffer = AnyBuffer(np.ones(12, np.float32)[::2], a.device)
    with pytest.raises(LayoutError, match=r"add: input 0 buffer is not one contiguous float32 "
                                          r"run \(ndim 1, strides \(8,\)"):
        ops.add(a, a)


def test_a_buffer_swapped_for_float64_data_is_checked_again(used):
    a, b = used
    a.buffer = AnyBuffer(np.ones(6, np.float64), a.device)
    with pytest.raises(LayoutError, match="dtype float64"):
        ops.sub(a, b)


def test_the_device_is_compared_on_every_call(used):
    """Same array, remembered, but the buffer now claims the other device."""
    a, b = used
    b.buffer.device = Device.cuda
    assert b._checked is b.buffer.data
    with pytest.raises(DeviceMismatchError,
                       match=r"add: input 1 lives on `cuda` but the session runs on `cpu`"):
        ops.add(a, b)


def test_a_contiguous_output_is_marked_and_a_strided_one_is_checked_at_its_next_use(cpu_session):
    out = ops.relu(tensor(np.ones(4)))
    assert out._checked is out.buffer.data
    kernel = cpu_session.kernel_for(BackendOp.relu)
    strided = dataclasses.replace(kernel.handler,
                                  forward=lambda a: np.repeat(a.reshape(-1), 2)[::2])
    cpu_session._kernels[BackendOp.relu] = dataclasses.replace(kernel, handler=strided)
    bad = ops.relu(tensor(np.ones(4)))
    assert bad._checked is None
    cpu_session._kernels[BackendOp.relu] = kernel
    with pytest.raises(LayoutError, match=r"relu: input 0 .* strides \(8,\)"):
        ops.relu(bad)


def test_the_elementwise_wrappers_name_a_non_tensor_themselves(cpu_session):
    """They are exported without tensor_checked's frame (checks_tensors) and raise its error."""
    from engine.errors import NotATensorError
    from engine.ops import elementwise
    assert ops.add is elementwise.add and ops.exp is elementwise.exp
    t = tensor(np.ones(2))
    with pytest.raises(NotATensorError, match=r"^mul: `b` is a list; ops take engine Tensors"):
        ops.mul(t, [1.0, 2.0])
    with pytest.raises(NotATensorError, match=r"^exp: `a` is a numpy\.ndarray"):
        ops.exp(np.ones(2, np.float32))


def test_a_type_error_with_tensor_arguments_is_not_renamed(cpu_session):
    from engine.errors import NotATensorError
    kernel = cpu_session.kernel_for(BackendOp.sub)

    def broken(a, b):
        raise TypeError("the handler's own TypeError")
    cpu_session._kernels[BackendOp.sub] = dataclasses.replace(
        kernel, handler=dataclasses.replace(kernel.handler, forward=broken))
    t = tensor(np.ones(2))
    with pytest.raises(TypeError, match="the handler's own TypeError") as err:
        ops.sub(t, t)
    assert not isinstance(err.value, NotATensorError)


def test_a_result_of_apply_has_every_tensor_slot_set(cpu_session):
    """apply builds its results without Tensor.__init__: a slot it missed would raise
    AttributeError at its first read."""
    from engine.tensor import Tensor
    out = ops.add(tensor(np.ones((2, 3))), tensor(np.ones((2, 3))))
    for name in Tensor.__slots__:
        if name != "__weakref__":
            getattr(out, name)
    assert out.shape == (2, 3) and out.numel == 6 and not out.requires_grad
    assert out.node is None and out.grad is None and out.view().shape == (2, 3)
