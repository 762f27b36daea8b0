"""The one path every op takes: observable checks, the plan's kernel, the call, the output check,
the tape node (DESIGN.md, "The flow of one operation")."""
from __future__ import annotations

from typing import Callable

import numpy as np

from engine.autograd import Node
from engine.capsule import ExecutableKernel
from engine.errors import (DeviceMismatchError, LayoutError, LengthMismatchError,
                           OutputLengthError, ProviderMismatchError)
from engine.runtime.buffer import AnyBuffer, check_uint32, element_count
from engine.session import current_session
from engine.tensor import Tensor
from engine.types import BackendOp, VJPMode

_F32 = np.dtype(np.float32)

# op -> the local VJP rule used when the selected capsule's VJP lives on our tape.
LOCAL_VJP: dict[BackendOp, Callable] = {}


def local_vjp(op: BackendOp):
    def register(fn: Callable) -> Callable:
        LOCAL_VJP[op] = fn
        return fn
    return register


def vjp_function(kernel: ExecutableKernel) -> Callable | None:
    """The VJP that owns gradients for this kernel: the backend's, or our tape's local rule."""
    if kernel.capsule.vjp_mode is VJPMode.backend_vjp:
        return kernel.handler.vjp
    if kernel.capsule.vjp_mode is VJPMode.torchlean_tape:
        return LOCAL_VJP[kernel.capsule.op]
    return None


def apply(op: BackendOp, inputs: tuple[Tensor, ...], out_shape: tuple[int, ...],
          params: dict | None = None, kernel: ExecutableKernel | None = None) -> Tensor:
    session = current_session()
    planned = session.kernel_for(op)
    if kernel is not None and kernel.capsule.name != planned.capsule.name:
        raise ProviderMismatchError(
            f"{op.label}: asked to run `{kernel.capsule.name}` (provider "
            f"{kernel.capsule.provider.label}) but the accepted plan of profile "
            f"`{session.profile.name}` selected `{planned.capsule.name}` (provider "
            f"{planned.capsule.provider.label}); the runtime never substitutes providers")
    for i, t in enumerate(inputs):
        if t.device is not session.device:
            raise DeviceMismatchError(
                f"{op.label}: input {i} lives on `{t.device.label}` but the session runs on "
                f"`{session.device.label}`; create it in this session (no implicit copies)")
        if t.buffer.count != element_count(t.shape):
            raise LengthMismatchError(
                f"{op.label}: input {i} buffer holds {t.buffer.count} elements but its shape "
                f"{t.shape} needs {element_count(t.shape)}; rebuild the tensor from its data")
        check_uint32(t.shape, f"{op.label} input {i}")
        data = t.buffer.data
        if data.ndim != 1 or not data.flags.c_contiguous or data.dtype != _F32:
            raise LayoutError(
                f"{op.label}: input {i} buffer is not one contiguous float32 run (ndim "
                f"{data.ndim}, strides {data.strides}, dtype {data.dtype}); expected a flat "
                "contiguous float32 buffer: copy it with ascontiguousarray first")
    check_uint32(out_shape, f"{op.label} output")
    params = params or {}
    arrays = tuple(t.buffer.data.reshape(t.shape) for t in inputs)
    out = planned.handler.forward(*arrays, **params)
    # The output length is checked before the tape may store it.
    expected = element_count(out_shape)
    if getattr(out, "size", -1) != expected:
        raise OutputLengthError(
            f"{op.label}: `{planned.capsule.name}` returned {getattr(out, 'size', None)} "
            f"elements, expected {expected} for shape {tuple(out_shape)}; the kernel is wrong")
    if out.dtype != _F32:
        raise LayoutError(f"{op.label}: `{planned.capsule.name}` returned dtype {out.dtype}, "
                          "expected float32; the kernel is wrong")
    session.record(planned)
    result = Tensor(AnyBuffer(out.reshape(-1), session.device), out_shape)
    if op.needs_vjp and any(t.requires_grad for t in inputs):
        rule = vjp_function(planned)
        result.requires_grad = True
        result.node = Node(op.label, inputs,
                           lambda g, _r=rule, _a=arrays, _o=out, _p=params: _r(_a, _o, g, **_p))
    return result
