"""The one path every op takes: observable checks, the plan's kernel, the call, the output check,
the tape node (DESIGN.md, "The flow of one operation")."""
from __future__ import annotations

from math import prod as _prod
from typing import Callable

import numpy as np

from engine.autograd import record
from engine.capsule import ExecutableKernel
from engine.errors import (DeviceMismatchError, LayoutError, LengthMismatchError,
                           OutputLengthError, ProviderMismatchError)
from engine.runtime.buffer import UINT32_MAX, AnyBuffer, check_uint32, element_count
from engine.runtime.capture_state import CAPTURE, note_op
from engine.session import _current, current_session
from engine.tensor import Tensor
from engine.types import BackendOp, RuntimeEntry, VJPMode

_F32 = np.dtype(np.float32)
_new_tensor = object.__new__

# op -> the local VJP rule used when the selected capsule's VJP lives on our tape.
LOCAL_VJP: dict[BackendOp, Callable] = {}
TAPE_KERNELS: dict[BackendOp, tuple[str, ...]] = {}   # op -> kernels its rule runs on CUDA

_CUPY_FTZ = "CuPy compiles its own kernels with -ftz=true"
_AS_F64 = (f"its CuPy astype(float64) of float32 operands and astype(float32) of the float64 "
           f"gradient ({_CUPY_FTZ}: cvt.ftz flushes subnormal inputs and results)")
_SGEMM = ("cupy.matmul runs cuBLAS SGEMM, whose subnormal handling NVIDIA does not document "
          "(the cublas capsules declare subnormal=implementation-defined)")

# op -> why its local VJP rule, run on CuPy arrays, may flush float32 subnormals to zero. Every
# other rule keeps gradual underflow on CUDA: the elementwise rules, reduce_mean's division and
# mse_loss run engine/csrc/cuda/tape.cu, gather's scatter runs index.cu's ordered fold (both
# compiled with --ftz=false), and reshape, permute, concat, slice, reduce_sum and scatter_add only
# move data (views, copies, zeros, take; no float arithmetic or comparison).
TAPE_FLUSHES_ON_CUDA: dict[BackendOp | RuntimeEntry, str] = {
    BackendOp.broadcast: f"sum_to_shape sums over the broadcast axes with cupy.sum ({_CUPY_FTZ}: "
                         "subnormal terms and partial sums flush)",
    BackendOp.softmax: f"_softmax_grad: {_AS_F64}",
    BackendOp.log_softmax: f"_log_softmax_vjp: {_AS_F64}",
    BackendOp.hard_masked_softmax: f"_softmax_grad: {_AS_F64}",
    BackendOp.layer_norm: f"normalize_vjp: {_AS_F64}",
    BackendOp.batch_norm: f"normalize_vjp: {_AS_F64}",
    RuntimeEntry.add_layer_norm: f"normalize_vjp: {_AS_F64}",
    BackendOp.scaled_dot_product_attention: (
        "float32 CuPy arithmetic throughout (scores * scale, exp(masked - max), e / total, "
        f"p * (dp - sum(dp p)), ds * scale; {_CUPY_FTZ}) and {_SGEMM}"),
    RuntimeEntry.attention_heads: (
        "the scaled_dot_product_attention rule on the permuted operands: float32 CuPy "
        f"arithmetic throughout ({_CUPY_FTZ}) and {_SGEMM}"),
    BackendOp.matmul: _SGEMM,
    BackendOp.linear: f"db = cupy.sum(g, axis=0) ({_CUPY_FTZ}: subnormal terms and partial sums "
                      f"flush); dx and dw: {_SGEMM}",
}


def local_vjp(op: BackendOp, tape: tuple[str, ...] = ()):
    """Register `op`'s local VJP rule; `tape` names the kernels of ours it launches on CUDA
    (engine/csrc/cuda/tape.cu symbols, or `other.cu:symbol`): engine/native_sources.py's
    TAPE_SOURCES is their view, and a tape capsule's build fingerprint hashes those files."""
    def register(fn: Callable) -> Callable:
        LOCAL_VJP[op] = fn
        if tape:
            TAPE_KERNELS[op] = tuple(tape)
        return fn
    return register


_BACKEND_VJP, _TAPE_VJP = VJPMode.backend_vjp, VJPMode.torchlean_tape   # read once (tape path)


def vjp_function(kernel: ExecutableKernel) -> Callable | None:
    """The VJP that owns gradients for this kernel: the backend's, or our tape's local rule."""
    capsule = kernel.capsule
    mode = capsule.vjp_mode
    if mode is _BACKEND_VJP:
        return kernel.handler.vjp
    if mode is _TAPE_VJP:
        return LOCAL_VJP[capsule.op]
    return None


def _input_problem(op: BackendOp, i: int, t: Tensor, session) -> None:
    """Raise the named error for the first check input `i` fails (the slow, descriptive path)."""
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
    raise LayoutError(
        f"{op.label}: input {i} buffer is not one contiguous float32 run (ndim "
        f"{data.ndim}, strides {data.strides}, dtype {data.dtype}); expected a flat "
        "contiguous float32 buffer: copy it with ascontiguousarray first")


def _check_input(op: BackendOp, inputs: tuple, t: Tensor, session) -> None:
    """Every check of DESIGN.md's list on one input, as cheap comparisons (a failure goes to the
    descriptive path); on success the flat array is remembered on the tensor, so a tensor used
    again is not checked again while its buffer holds that array (an array's size, rank, strides
    and dtype are fixed for its life: the engine never assigns them in place). The device is
    compared on every call (apply), since the session may change between calls.
    An axis can only exceed UInt32 when the count does or is zero. (dtype: float32's descriptor is
    a singleton, so `is` decides the common case.)"""
    buf = t.buffer
    data = buf.data
    n = t.numel
    dtype = data.dtype
    if (buf.device is not session.device or data.size != n or n > UINT32_MAX
            or (n == 0 and t.shape and max(t.shape) > UINT32_MAX)
            or data.ndim != 1 or (n > 1 and data.strides[0] != 4)
            or (dtype is not _F32 and dtype != _F32)):
        # the input's position, found only on this path (a tensor passed twice: its first)
        _input_problem(op, next(i for i, u in enumerate(inputs) if u is t), t, session)
    t._checked = data


def apply(op: BackendOp, inputs: tuple[Tensor, ...], out_shape: tuple[int, ...],
          params: dict | None = None, kernel: ExecutableKernel | None = None) -> Tensor:
    session = _current[-1] if _current else current_session()
    planned = session.kernel_for(op)
    if kernel is not None and kernel.capsule.name != planned.capsule.name:
        raise ProviderMismatchError(
            f"{op.label}: asked to run `{kernel.capsule.name}` (provider "
            f"{kernel.capsule.provider.label}) but the accepted plan of profile "
            f"`{session.profile.name}` selected `{planned.capsule.name}` (provider "
            f"{planned.capsule.provider.label}); the runtime never substitutes providers")
    if CAPTURE.recording:
        note_op(op, planned.capsule.name)
    device = session.device
    arrays = []
    for t in inputs:
        buf = t.buffer
        data = buf.data
        if t._checked is not data or buf.device is not device:
            _check_input(op, inputs, t, session)
        view = t._view   # Tensor.view() inlined: the shaped view cached for this flat array
        arrays.append(view[1] if view is not None and view[0] is data else t.view())
    if inputs and out_shape is inputs[0].shape:   # the elementwise ops: input 0's checked count
        n_out = inputs[0].numel
    else:
        n_out = _prod(out_shape)
        if n_out > UINT32_MAX or (n_out == 0 and out_shape and max(out_shape) > UINT32_MAX):
            check_uint32(out_shape, f"{op.label} output")
    out = planned.handler.forward(*arrays, **params) if params else \
        planned.handler.forward(*arrays)
    # The output length is checked before the tape may store it.
    try:
        size = out.size
    except AttributeError:   # not an array at all
        size = None
    if size != n_out:
        raise OutputLengthError(
            f"{op.label}: `{planned.capsule.name}` returned {size} elements, expected {n_out} "
            f"for shape {tuple(out_shape)}; the kernel is wrong")
    dtype = out.dtype
    if dtype is not _F32 and dtype != _F32:
        raise LayoutError(f"{op.label}: `{planned.capsule.name}` returned dtype {out.dtype}, "
                          "expected float32; the kernel is wrong")
    dispatched = session.dispatched
    if op not in dispatched:
        dispatched[op] = planned.capsule
    if out.ndim == 1:   # size n_out checked: a rank-1 out_shape is then out's own shape
        flat, view = out, (out if len(out_shape) == 1 else None)
    else:
        flat = out.reshape(-1)
        view = out if out.shape == out_shape else None
    # Tensor.__init__ without its checks (shape and count were checked against the output) and
    # without a call: every slot of Tensor is set here (tests/test_dispatch_checked.py).
    result = _new_tensor(Tensor)
    result.buffer = AnyBuffer(flat, device, 4 * n_out)   # nbytes: 4 per float32 element
    result.shape, result.numel = out_shape, n_out
    result.requires_grad, result.node, result.grad = False, None, None
    result._view = (flat, view) if view is not None else None
    # The output passes the input checks here already (float32, n_out fits UInt32, the
    # session's device, flat) when it is one contiguous run: its next op need not repeat them.
    result._checked = flat if n_out < 2 or flat.strides[0] == 4 else None
    for t in inputs:
        if t.requires_grad:
            if op.needs_vjp:
                result.requires_grad = True
                result.node = record(op.label, inputs, arrays, out, vjp_function(planned),
                                     params or {}, session)
            break
    return result
