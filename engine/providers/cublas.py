"""The cublas provider: matmul (plain and batched) and linear through cuBLAS SGEMM, with
transpose flags so A^T B and A B^T read the original row-major storage: no transposed copy is
ever made, in the forward or the VJP.

Row-major trick: a row-major r x c matrix is the column-major c x r matrix X^T, so
C = op(A) op(B) (row-major, M x N) is computed as the column-major C^T = op(B)^T op(A)^T, i.e.
gemm(opB, opA, N, M, K, B, A) with each operand's own leading dimension.

Math mode is CUBLAS_DEFAULT_MATH on our own handle (set when it is created; nothing else uses
it): FP32 FMA arithmetic, never TF32 (TF32 needs CUBLAS_TF32_TENSOR_OP_MATH or a FAST_TF32
compute type, neither used here). The calls go through ctypes (engine/providers/cublas_lib.py).
The accumulation order, split-K and FMA use are the library's choice: the policy says so.
"""
from __future__ import annotations

import math

import numpy as np

from engine.capsule import KernelHandler, standard_capsule
from engine.errors import ShapeError
from engine.tape_saves import saves
from engine.types import (BackendOp as Op, Contraction, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_DEFAULT_MATH = 0
CUBLAS_POINTER_MODE_HOST = 0
INT32_MAX = 2**31 - 1
_ONE = np.ones(1, np.float32)
_ZERO = np.zeros(1, np.float32)
_ones_cache: dict[int, object] = {}
# The cuBLAS entry points each capsule calls (its provenance; engine/native_sources.py shows them).
CUBLAS_SYMBOLS: dict[Op, tuple[str, ...]] = {
    Op.matmul: ("cublasSgemm_v2", "cublasSgemmStridedBatched"),
    Op.linear: ("cublasSgemm_v2", "cublasSgemv_v2"),
}

def _workspace():
    import cupy
    from engine.providers.cublas_lib import WORKSPACE_BYTES
    return cupy.empty(WORKSPACE_BYTES, np.uint8)


def _handle():
    """(the library, our handle on the caller's stream): through ctypes on a handle of our own
    (engine/providers/cublas_lib.py), so a CUDA graph capture can hold the products."""
    import cupy
    from engine.providers.cublas_lib import library
    from engine.runtime.allocator import install
    install()
    lib = library()
    return lib, lib.handle(cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr,
                           _workspace)


def _check_int32(*extents: int) -> None:
    for e in extents:
        if e > INT32_MAX:
            raise ShapeError(f"cublas: extent {e} exceeds the int32 range of the cuBLAS API "
                             f"({INT32_MAX}); split the product")


def gemm(a, b, trans_a: bool = False, trans_b: bool = False, out=None, beta: float = 0.0):
    """op(a) @ op(b) for C-contiguous float32 CuPy arrays of rank 2, or rank 3 with one batch
    extent, read in place through transpose flags. `out` (with beta = 1) accumulates into an
    existing result; otherwise a new array is returned."""
    import cupy
    ra, ca = a.shape[-2:]
    rb, cb = b.shape[-2:]
    m, k = (ca, ra) if trans_a else (ra, ca)
    n = rb if trans_b else cb
    batch = a.shape[0] if a.ndim == 3 else 0
    if out is None:
        out = cupy.empty(((batch,) if batch else ()) + (m, n), np.float32)
    if out.size == 0:
        return out
    if k == 0:
        if beta == 0.0:
            out.fill(0)
        return out
    _check_int32(m, n, k, batch)
    if beta not in (0.0, 1.0):
        raise ValueError(f"gemm: beta must be 0 or 1, got {beta}")
    lib, handle = _handle()
    opa = CUBLAS_OP_T if trans_a else CUBLAS_OP_N
    opb = CUBLAS_OP_T if trans_b else CUBLAS_OP_N
    beta_ptr = (_ONE if beta == 1.0 else _ZERO).ctypes.data
    if batch:
        lib.sgemmStridedBatched(handle, opb, opa, n, m, k, _ONE.ctypes.data,
                                b.data.ptr, cb, rb * cb, a.data.ptr, ca, ra * ca,
                                beta_ptr, out.data.ptr, n, m * n, batch)
    else:
        lib.sgemm(handle, opb, opa, n, m, k, _ONE.ctypes.data, b.data.ptr, cb,
                  a.data.ptr, ca, beta_ptr, out.data.ptr, n)
    return out


def _matmul(a, b, trans_a=False, trans_b=False):
    return gemm(a, b, trans_a, trans_b)


@saves(0, 1)
def _matmul_vjp(inputs, output, g, trans_a=False, trans_b=False):
    """dop(A) = G op(B)^T and dop(B) = op(A)^T G, mapped back through each flag: every product
    is one GEMM over the original storage of a, b and g."""
    import cupy
    a, b = inputs
    g = g if g.flags.c_contiguous else cupy.ascontiguousarray(g)
    da = gemm(b, g, trans_b, True) if trans_a else gemm(g, b, False, not trans_b)
    db = gemm(g, a, True, trans_a) if trans_b else gemm(a, g, not trans_a, False)
    return da, db


def _linear(x, w, b):
    """x @ w^T + b: the bias is broadcast into the output and cuBLAS adds the product (beta=1)."""
    from engine.providers.native_cuda.strided import broadcast_into
    rows = math.prod(x.shape[:-1])
    out = broadcast_into(b, (rows, w.shape[0]))
    gemm(x.reshape(rows, w.shape[1]), w, False, True, out=out, beta=1.0)
    return out.reshape(x.shape[:-1] + (w.shape[0],))


def _ones(n: int):
    ones = _ones_cache.get(n)
    if ones is None:
        import cupy
        ones = _ones_cache[n] = cupy.ones(n, np.float32)
    return ones


@saves(0, 1)
def _linear_vjp(inputs, output, g):
    """(g @ w, g^T x over all leading axes, g summed over leading axes): two GEMMs and one GEMV
    (db = g^T 1), each reading g, x and w where they lie."""
    import cupy
    x, w, b = inputs
    out_f, in_f = w.shape
    g = g if g.flags.c_contiguous else cupy.ascontiguousarray(g)
    rows = math.prod(x.shape[:-1])
    g2, x2 = g.reshape(rows, out_f), x.reshape(rows, in_f)
    dx = gemm(g2, w).reshape(x.shape)
    dw = gemm(g2, x2, True, False)
    db = cupy.empty(out_f, np.float32)
    if out_f:
        if rows == 0:
            db.fill(0)
        else:
            _check_int32(rows, out_f)
            lib, handle = _handle()
            # Column-major view of g2 is out_f x rows (ld = out_f): db = g2_col @ ones(rows).
            lib.sgemv(handle, CUBLAS_OP_N, out_f, rows, _ONE.ctypes.data, g2.data.ptr, out_f,
                      _ones(rows).data.ptr, 1, _ZERO.ctypes.data, db.data.ptr, 1)
    return dx, dw, db


BLAS = NumericalPolicy(Rounding.nearest_even, Subnormals.implementation_defined,
                       Contraction.implementation_defined, Reduction.implementation_defined)
_SUMMARY = {
    Op.matmul: "cuBLAS SGEMM (strided-batched for rank 3), CUBLAS_DEFAULT_MATH: FP32 FMA "
               "arithmetic, no TF32; each output within gamma_k * sum|a_i b_i| (k = the shared "
               "extent; any order, FMA included)",
    Op.linear: "bias broadcast into the output, then cuBLAS SGEMM with beta = 1 adds x @ w^T "
               "(CUBLAS_DEFAULT_MATH, no TF32): within gamma_(k+1) * (sum|x_i w_i| + |b|)",
}


def register_all(reg) -> None:
    for op, forward, vjp in ((Op.matmul, _matmul, _matmul_vjp), (Op.linear, _linear, _linear_vjp)):
        cap = standard_capsule(
            op, Provider.cublas, Device.cuda, trust=TrustLevel.checked,
            vjp_mode=VJPMode.backend_vjp, policy=BLAS, source_file="engine/providers/cublas.py",
            native_symbol=", ".join(CUBLAS_SYMBOLS[op]), value_summary=_SUMMARY[op],
            notes="transpose flags, never a transposed copy (forward and VJP); the provider's own "
                  "cuBLAS handle (math mode CUBLAS_DEFAULT_MATH and host pointer mode set once, "
                  "no other code uses it) and workspace, called through ctypes "
                  "(engine/providers/cublas_lib.py)")
        reg.register(cap, KernelHandler(cap.name, op, Provider.cublas, Device.cuda, forward, vjp))
