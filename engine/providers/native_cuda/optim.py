"""The fused Adam step (engine/csrc/cuda/optim.cu), used by engine/optim.py. Not a BackendOp, so
no capsule (TRUST_BOUNDARIES.md says why and which tests cover it): ADAM_STEP declares its kernel
for the source map and the compile check."""
from __future__ import annotations

from engine.errors import ShapeError
from engine.runtime.kernel_source import NativeSource
from engine.providers.native_cuda.launch import F32, U32, contiguous, grid, kernel

ADAM_STEP = NativeSource("optim.cu", ("tl_adam_step", "tl_adam_step_table", "tl_adam_advance",
                                     "tl_adam_multi", "tl_adam_multi_table", "tl_adam_set_ptrs"))
_adam_kernel = kernel(ADAM_STEP.file, "tl_adam_step")
_adam_table_kernel = kernel(ADAM_STEP.file, "tl_adam_step_table")
_adam_advance = kernel(ADAM_STEP.file, "tl_adam_advance")
TABLE_MOST = 1 << 21     # bias-correction steps a device table may hold


def _checked_size(param, grad, m, v) -> int:
    n = param.size
    for name, x in (("grad", grad), ("m", m), ("v", v)):
        if x.size != n:
            raise ShapeError(f"native_adam_step: {name} has {x.size} elements, param has {n}")
    return n


def native_adam_step(param, grad, m, v, lr, beta1, beta2, eps, step) -> None:
    """One Adam step in place on CuPy float32 arrays of one shape, with the float32 constants
    and operation order of engine/optim.py's NumPy path (so the bits agree)."""
    n = _checked_size(param, grad, m, v)
    if n == 0:
        return
    grad = contiguous(grad)
    _adam_kernel(grid(n), (param, grad, m, v, U32(n), F32(lr), F32(beta1), F32(beta2),
                           F32(1 - beta1), F32(1 - beta2), F32(1 - beta1 ** step),
                           F32(1 - beta2 ** step), F32(eps)))


class BiasTable:
    """Adam's bias corrections f32(1 - beta^t) for t = 0 .. last on the device, computed on the
    host exactly as native_adam_step computes them, and the step count t on the device: what a
    CUDA graph replay of an optimizer step reads instead of Python scalars. `last` is the first t
    where both corrections are 1.0f (every later step uses that entry, which is then exact)."""

    def __init__(self, beta1: float, beta2: float, t: int) -> None:
        import numpy as np
        from engine.providers.native_cuda.launch import cupy
        last = 0
        rows = [(1.0, 1.0)]
        while not (np.float32(1 - beta1 ** last) == 1.0 and np.float32(1 - beta2 ** last) == 1.0):
            last += 1
            if last > TABLE_MOST:
                from engine.errors import GraphCaptureError
                raise GraphCaptureError(
                    f"Adam's bias corrections for betas ({beta1}, {beta2}) do not reach 1.0 in "
                    f"float32 within {TABLE_MOST} steps, so no device table holds them; use "
                    "betas below 1 - 1e-5, or train without CUDA graphs")
            rows.append((np.float32(1 - beta1 ** last), np.float32(1 - beta2 ** last)))
        cp = cupy()
        self.last = last
        self.bc = cp.asarray(np.array(rows, dtype=np.float32).reshape(-1))
        self.step = cp.asarray(np.array([t], dtype=np.uint32))

    def advance(self) -> None:
        _adam_advance((1,), (self.step,))

    def device_step(self) -> int:
        return int(self.step.get()[0])


def native_adam_step_table(param, grad, m, v, lr, beta1, beta2, eps, table: BiasTable) -> None:
    """native_adam_step with the bias corrections read from `table` at its device step."""
    n = _checked_size(param, grad, m, v)
    if n == 0:
        return
    grad = contiguous(grad)
    _adam_table_kernel(grid(n), (param, grad, m, v, U32(n), F32(lr), F32(beta1), F32(beta2),
                                 F32(1 - beta1), F32(1 - beta2), table.bc, table.step,
                                 U32(table.last), F32(eps)))
