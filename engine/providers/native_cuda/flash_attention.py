"""Flash attention (engine/csrc/cuda/flash_attention.cu): the capsule native_cuda.flash_attention,
scaled_dot_product_attention with hard masks as a tiled online softmax in float32
(FlashAttention-2's schedule), forward and backend VJP. The chapter cites FlashAttention's theorem
that the tiled computation equals ordinary attention; what tiling changes is the rounding, which
conformance/derived_flash.py bounds.

Forward: one block per (batch entry, 64 query rows), key tiles of 64 through shared memory, scores
and p v in registers, a running max and sum per row rescaled by expf(m_old - m_new). With a mask,
a summary pass (tl_flash_tiles) flags each 64 x 64 tile none / all / mixed participating, so a
causal mask's blocked tiles are skipped and its full tiles read no mask byte.

VJP (no atomics, every output owned by one block, bitwise repeatable): a pass recomputing each
row's max m, 1 / l (the forward's bits: same code) and D = g . out (the forward output given), a
pass over key tiles for dk and dv, and one over query tiles for dq, each recomputing
P = expf(s - m) (1 / l) and dS = P (dP - D).

Supported: d, dv <= 128 (kernels for 32, 64 and 128, the smaller widths padded with zeros), any
Lq and Lk (no shared-memory bound on Lk: that is the point over direct attention).
"""
from __future__ import annotations

from engine.capsule import FLASH
from engine.errors import ShapeError
from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import (F32, U32, contiguous, cupy, empty, kernel,
                                                 mask_bytes, zeros)
from engine.tape_saves import saves
from engine.types import BackendOp as Op, Contraction, Reduction

TILE = 64                 # FL_T: query rows and keys per tile
LD = 68                   # FL_LD: leading dimension of a transposed tile
WIDTHS = (32, 64, 128)    # the head dimensions the kernels are instantiated for
MAX_WIDTH = WIDTHS[-1]

_FILE = "flash_attention.cu"
_TILES = "tl_flash_tiles"
_FWD = {w: f"tl_flash_fwd_{w}" for w in WIDTHS}
_DKDV = {w: f"tl_flash_dkdv_{w}" for w in WIDTHS}
_DQ = {w: f"tl_flash_dq_{w}" for w in WIDTHS}
_tiles = kernel(_FILE, _TILES)
_fwd = {w: kernel(_FILE, s) for w, s in _FWD.items()}
_dkdv = {w: kernel(_FILE, s) for w, s in _DKDV.items()}
_dq = {w: kernel(_FILE, s) for w, s in _DQ.items()}


def _dims(q, k, v) -> tuple[int, int, int, int, int]:
    batch = q.shape[0] if q.ndim == 3 else 1
    return batch, q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]


def width(d: int, dv: int) -> int | None:
    """The kernel width for head dimensions d and dv (both padded to it), None above 128."""
    return next((w for w in WIDTHS if max(d, dv) <= w), None)


def shared_bytes(kind: str, w: int) -> int:
    """Dynamic shared memory of one block (flash_attention.cu's layouts): fwd, dkdv or dq."""
    dt = max(w, TILE)
    floats = {"fwd": 2 * dt * LD + TILE * LD + TILE * (w + 4),
              "dkdv": 4 * dt * LD + 2 * TILE * (w + 4),
              "dq": 4 * dt * LD + TILE * (w + 4)}[kind]
    return floats * 4 + TILE * TILE   # + the tile's participation flags (bytes)


def _width_or_raise(d: int, dv: int) -> int:
    w = width(d, dv)
    if w is None:
        raise ShapeError(f"native_cuda.flash_attention: head dimensions d = {d}, dv = {dv}; the "
                         f"kernels support d and dv up to {MAX_WIDTH}; use "
                         "torchlean.composed_attention (the checked CUDA default) for these sizes")
    return w


def _tiles_of(n: int) -> int:
    return -(-n // TILE)


def _flags(m, batch: int, lq: int, lk: int):
    """The tile summary of a mask (uint8 [B, ceil(Lq/64), ceil(Lk/64)]), None without a mask."""
    if m is None:
        return None
    n = batch * _tiles_of(lq) * _tiles_of(lk)
    flags = cupy().empty(n, "uint8")
    _tiles((min(n, 1 << 20),), (m, flags, U32(batch), U32(lq), U32(lk)))
    return flags


def _args(batch, lq, lk, d, dv, scale) -> tuple:
    return (U32(batch), U32(lq), U32(lk), U32(d), U32(dv), F32(scale))


def _forward(q, k, v, mask=None, scale=1.0):
    batch, lq, lk, d, dv = _dims(q, k, v)
    out_shape = q.shape[:-1] + (dv,)
    if lk == 0:
        return zeros(out_shape)   # no key participates: every row is blocked
    out = empty(out_shape)
    if out.size == 0:
        return out
    w = _width_or_raise(d, dv)
    m = mask_bytes(mask)
    flags = _flags(m, batch, lq, lk)
    _fwd[w]((batch * _tiles_of(lq),), (q, k, v, m, flags, out, None, None)
            + _args(batch, lq, lk, d, dv, scale), shared_bytes("fwd", w))
    return out


@saves(0, 1, 2, output=True)
def _vjp(inputs, output, g, mask=None, scale=1.0):
    """Row statistics (m, 1 / l, D = g . out) from a pass of the forward kernel that skips p v,
    then dk and dv from a pass over key tiles and dq from a pass over query tiles."""
    q, k, v = inputs
    batch, lq, lk, d, dv = _dims(q, k, v)
    if lq == 0 or lk == 0 or batch == 0:
        return zeros(q.shape), zeros(k.shape), zeros(v.shape)
    w = _width_or_raise(d, dv)
    g, out = contiguous(g), contiguous(output)
    m = mask_bytes(mask)
    flags = _flags(m, batch, lq, lk)
    stats = cupy().empty(batch * lq * 3, "float32")
    args = _args(batch, lq, lk, d, dv, scale)
    _fwd[w]((batch * _tiles_of(lq),), (q, k, v, m, flags, out, stats, g) + args,
            shared_bytes("fwd", w))
    dq, dk, dvv = empty(q.shape), empty(k.shape), empty(v.shape)
    _dkdv[w]((batch * _tiles_of(lk),), (q, k, v, m, flags, g, stats, dk, dvv) + args,
             shared_bytes("dkdv", w))
    _dq[w]((batch * _tiles_of(lq),), (q, k, v, m, flags, g, stats, dq) + args,
           shared_bytes("dq", w))
    return dq, dk, dvv


def declines(inputs, params) -> str | None:
    """The declared support: head dimensions d and dv up to 128 (any Lq, Lk)."""
    q, k, v = inputs
    _, _, _, d, dv = _dims(q, k, v)
    if width(d, dv) is None:
        return (f"head dimensions d = {d}, dv = {dv}: the flash kernels are instantiated for d "
                f"and dv up to {MAX_WIDTH} (the kernel refuses larger ones with a ShapeError)")
    return None


DECL = KernelDecl(
    Op.scaled_dot_product_attention, _FILE, (_TILES, *_FWD.values()),
    tuple(_DKDV.values()) + tuple(_DQ.values()), _forward, _vjp,
    reduction=Reduction.fixed_left, contraction=Contraction.fused,
    name="native_cuda.flash_attention", variant=FLASH, declines=declines,
    summary="tiled online-softmax attention in float32 (FlashAttention-2 schedule): 64 x 64 "
            "tiles through shared memory, scores and p v in registers as fmaf left folds, a "
            "running max and sum per row rescaled by expf(m_old - m_new), out = O / l; hard "
            "masks decide participation (blocked entries never enter an operation: a NaN in "
            "a blocked key's v row does not leak); no atomics; error within the harness's "
            "derived flash bound (conformance/derived_flash.py)",
    # (the notes avoid the word "atom...": conformance/determinism.py audits capsules naming it)
    notes=("float32 online softmax (libdevice expf, explicit fmaf contractions); backend VJP "
           "recomputes P from each row's max and 1 / l and D = g . out, then a pass over key "
           "tiles (dk, dv) and one over query tiles (dq): every output written by one thread "
           "of one block, every sum a fixed order, bitwise repeatable",))
DECLS = (DECL,)
