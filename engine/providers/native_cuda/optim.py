"""The fused Adam step (engine/csrc/cuda/optim.cu), used by engine/optim.py. Not a BackendOp, so
no capsule (TRUST_BOUNDARIES.md says why and which tests cover it): ADAM_STEP declares its kernel
for the source map and the compile check."""
from __future__ import annotations

from engine.errors import ShapeError
from engine.runtime.kernel_source import NativeSource
from engine.providers.native_cuda.launch import F32, U32, contiguous, grid, kernel

ADAM_STEP = NativeSource("optim.cu", ("tl_adam_step",))
_adam_kernel = kernel(ADAM_STEP.file, ADAM_STEP.forward[0])


def native_adam_step(param, grad, m, v, lr, beta1, beta2, eps, step) -> None:
    """One Adam step in place on CuPy float32 arrays of one shape, with the float32 constants
    and operation order of engine/optim.py's NumPy path (so the bits agree)."""
    n = param.size
    for name, x in (("grad", grad), ("m", m), ("v", v)):
        if x.size != n:
            raise ShapeError(f"native_adam_step: {name} has {x.size} elements, param has {n}")
    if n == 0:
        return
    grad = contiguous(grad)
    _adam_kernel(grid(n), (param, grad, m, v, U32(n), F32(lr), F32(beta1), F32(beta2),
                           F32(1 - beta1), F32(1 - beta2), F32(1 - beta1 ** step),
                           F32(1 - beta2 ** step), F32(eps)))
