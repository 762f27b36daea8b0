"""torchlean.composed_attention: scaled_dot_product_attention as TorchLean composes it on CUDA,
the attention of the profile accurate_cuda (engine/profile.py; checked_cuda plans flash attention).

Forward: S = q k^T through cuBLAS strided-batched SGEMM with a transpose flag (no transposed
copy of k), the native hard-masked softmax row kernel on scale * S (engine/csrc/cuda/softmax.cu,
float64 inside, P rounded once to float32), then out = P v through cuBLAS. A blocked key's inf
or NaN in v would leak through the GEMM as 0 * inf = NaN; tl_attn_fixup recomputes exactly
those outputs over the participating keys. The VJP is the tape rule `_sdpa_vjp` of
engine/ops/attention.py (vjp = torchlean-tape): the capsule owns no backward code.
"""
from __future__ import annotations

from engine.capsule import KernelHandler, standard_capsule
from engine.native_sources import COMPOSED_ATTENTION, COMPOSED_CUBLAS_SYMBOLS
from engine.types import (BackendOp as Op, Contraction, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

NAME = "torchlean.composed_attention"


def _forward(q, k, v, mask=None, scale=1.0):
    from engine.providers.cublas import gemm
    from engine.providers.native_cuda import launch
    from engine.providers.native_cuda.softmax import masked_softmax_rows
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    batch = q.shape[0] if q.ndim == 3 else 1
    out_shape = q.shape[:-1] + (dv,)
    if lk == 0:
        return launch.zeros(out_shape)   # no key participates: every row is blocked
    if batch * lq * dv == 0:
        return launch.empty(out_shape)
    m = launch.mask_bytes(mask)
    p = masked_softmax_rows(gemm(q, k, trans_b=True), m, scale)
    out = gemm(p, v)
    if m is not None:
        launch.kernel("attention.cu", "tl_attn_fixup")(
            launch.grid(out.size), (out, p, v, m, launch.U32(batch), launch.U32(lq),
                                    launch.U32(lk), launch.U32(dv)))
    return out


NUMERICAL_POLICY = NumericalPolicy(Rounding.nearest_even, Subnormals.implementation_defined,
                         Contraction.implementation_defined, Reduction.implementation_defined)


def register_all(reg) -> None:
    symbols = ", ".join(COMPOSED_CUBLAS_SYMBOLS + tuple(
        f"{file}:{symbol}" for file, symbol in COMPOSED_ATTENTION.kernels()))
    cap = standard_capsule(
        Op.scaled_dot_product_attention, Provider.torchlean, Device.cuda,
        trust=TrustLevel.checked, vjp_mode=VJPMode.torchlean_tape, policy=NUMERICAL_POLICY,
        source_file="engine/providers/composed.py", native_symbol=symbols, name=NAME,
        value_summary="cuBLAS SGEMM q k^T (transpose flag; CUBLAS_DEFAULT_MATH, no TF32), the "
                      "native hard-masked softmax of scale * S (float64 inside, rounded once), "
                      "cuBLAS SGEMM P v; outputs a blocked key's non-finite v made NaN are "
                      "recomputed over participants; error within the harness's derived float32 "
                      "bound (no declared bound)",
        notes="VJP: the tape rule _sdpa_vjp (engine/ops/attention.py) on CuPy arrays; the "
              "products are cuBLAS (subnormals, contraction and order are the library's)")
    reg.register(cap, KernelHandler(NAME, Op.scaled_dot_product_attention, Provider.torchlean,
                                    Device.cuda, _forward))
