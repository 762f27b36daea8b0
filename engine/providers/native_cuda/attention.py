"""Direct attention (engine/csrc/cuda/attention.cu): the capsule native_cuda.direct_attention, a
fused reference kernel for scaled_dot_product_attention with hard masks, forward and backend VJP,
evaluated in double and rounded once. Not a profile's default (checked_cuda plans flash attention,
accurate_cuda torchlean.composed_attention: engine/profile.py); it is the independent schedule the
composed and flash paths are compared with.

Each block keeps a tile's score rows in shared memory, so the key count is bounded: one query
row's Lk doubles (forward: Lk <= 6100 at head dimension 64) or 2 Lk doubles (VJP: Lk <= 3040)
must fit in 48 KiB. Larger inputs are refused with a ShapeError that names the composed capsule.
"""
from __future__ import annotations

from engine.errors import ShapeError
from engine.providers.native_cuda.decl import F64_ONCE_CANCELLING, KernelDecl
from engine.providers.native_cuda.launch import (F32, SMEM_LIMIT, U32, contiguous, cupy, empty,
                                                 kernel, mask_bytes, zeros)
from engine.tape_saves import saves
from engine.types import BackendOp as Op

TILES = (8, 4, 2, 1)     # tile heights the kernels are instantiated for (TQ, TK)
QUERY_CHUNK = 32         # TL_QC in attention.cu

_FILE = "attention.cu"
# One instantiation per tile height, declared in ascending order.
_FWD = {t: f"tl_attn_fwd_{t}" for t in sorted(TILES)}
_ROWS = {t: f"tl_attn_bwd_rows_{t}" for t in sorted(TILES)}
_COLS = {t: f"tl_attn_bwd_cols_{t}" for t in sorted(TILES)}
_fwd = {t: kernel(_FILE, s) for t, s in _FWD.items()}
_rows = {t: kernel(_FILE, s) for t, s in _ROWS.items()}
_cols = {t: kernel(_FILE, s) for t, s in _COLS.items()}


def _dims(q, k, v) -> tuple[int, int, int, int, int]:
    batch = q.shape[0] if q.ndim == 3 else 1
    return batch, q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]


def _tile(per_row: int, fixed: int, what: str) -> int:
    for t in TILES:
        if fixed + t * per_row <= SMEM_LIMIT:
            return t
    raise ShapeError(f"native_cuda.direct_attention: {what} needs {fixed + per_row} bytes of "
                     f"shared memory per block, over the {SMEM_LIMIT} a block may take; use "
                     "torchlean.composed_attention (the profile accurate_cuda's attention) for these "
                     "sizes")


def _grid(batch: int, length: int, tile: int) -> tuple:
    return (min(batch * (-(-length // tile)), 1 << 20),)


def _forward(q, k, v, mask=None, scale=1.0):
    batch, lq, lk, d, dv = _dims(q, k, v)
    out_shape = q.shape[:-1] + (dv,)
    if lk == 0:
        return zeros(out_shape)
    out = empty(out_shape)
    if out.size == 0:
        return out
    tq = _tile(lk * 8 + d * 4, 0, f"a query row of {lk} keys")
    _fwd[tq](_grid(batch, lq, tq), (q, k, v, mask_bytes(mask), out, U32(batch), U32(lq), U32(lk),
                                    U32(d), U32(dv), F32(scale)), tq * (lk * 8 + d * 4))
    return out


@saves(0, 1, 2)
def _vjp(inputs, output, g, mask=None, scale=1.0):
    """dq from a pass over query rows (which also leaves each row's max, sum and D = sum dP p),
    then dk and dv from a pass over keys that recomputes p and dS from those statistics: no
    atomics, every sum a fixed left fold in double."""
    q, k, v = inputs
    batch, lq, lk, d, dv = _dims(q, k, v)
    if lq == 0 or lk == 0 or batch == 0:
        return zeros(q.shape), zeros(k.shape), zeros(v.shape)
    g = contiguous(g)
    m = mask_bytes(mask)
    dq, dk, dvv = empty(q.shape), empty(k.shape), empty(v.shape)
    stats = cupy().empty(batch * lq * 3, "float64")
    tq = _tile(lk * 16 + (d + dv) * 4, 0, f"the VJP of a query row of {lk} keys")
    _rows[tq](_grid(batch, lq, tq), (q, k, v, m, g, dq, stats, U32(batch), U32(lq), U32(lk),
                                     U32(d), U32(dv), F32(scale)), tq * (lk * 16 + (d + dv) * 4))
    chunk = 2 * QUERY_CHUNK * 8 + QUERY_CHUNK + 1      # p, dS and flags per key
    tk = _tile((d + dv) * 12 + chunk, 0, f"the VJP of a key of width {d} + {dv}")
    _cols[tk](_grid(batch, lk, tk), (q, k, v, m, g, stats, dk, dvv, U32(batch), U32(lq),
                                     U32(lk), U32(d), U32(dv), F32(scale)),
              tk * ((d + dv) * 12 + chunk))
    return dq, dk, dvv


def declines(inputs, params) -> str | None:
    """The declared support: both the forward's and the VJP's query-row tile fit one block's
    shared memory (the VJP's, twice the forward's per key, is the tighter bound)."""
    q, k, v = inputs
    _, _, lk, d, dv = _dims(q, k, v)
    need = lk * 16 + (d + dv) * 4
    if need > SMEM_LIMIT:
        return (f"Lk = {lk} keys need {need} bytes of shared memory per block for the VJP, over "
                f"the {SMEM_LIMIT} a block may take (the kernel refuses them with a ShapeError)")
    return None


DECL = KernelDecl(
    Op.scaled_dot_product_attention, _FILE, tuple(_FWD.values()),
    tuple(_ROWS.values()) + tuple(_COLS.values()), _forward, _vjp, f64_rows=True,
    bound=F64_ONCE_CANCELLING, name="native_cuda.direct_attention", declines=declines,
    summary="direct fused kernel: a tile of query rows per block, scores, hard-masked softmax "
            "and p v in float64, rounded once; blocked keys take no part (a NaN in their v row "
            "does not leak)",
    # (no word "atomic" here: conformance/determinism.py audits capsules whose notes say it)
    notes=("backend VJP: a pass over query rows (dq and row statistics) and a pass over keys "
           "(dk, dv), every sum a fixed fold; Lk is bounded by shared memory",))
DECLS = (DECL,)
