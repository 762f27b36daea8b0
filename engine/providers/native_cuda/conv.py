"""conv and conv_transpose (engine/csrc/cuda/conv.cu). Forward: the tiled 2-D implicit GEMM for
rank 2, the generic N-D kernel otherwise (both the same fixed left fold from the bias, so they
agree bit for bit); conv_transpose's forward is conv's dInput gather with the bias. VJP: dInput
by gather (one thread per element, fixed order), dKernel and dBias in chunk partials whose count
depends on the shape alone: default mode adds them with float atomicAdd into -0 (order
unspecified; PTX flushes subnormals there), deterministic mode writes them to a buffer that a
second pass sums in chunk order (bitwise repeatable)."""
from __future__ import annotations

import functools
import math

import numpy as np

from engine.convolution import Geometry, conv_extent, conv_geometry, transpose_geometry
from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import (U32, contiguous, cupy, empty, grid, kernel,
                                                 negative_zeros)
from engine.runtime.deterministic import get_deterministic_reductions
from engine.types import BackendOp as Op, Reduction

FILE = "conv.cu"
GEO_LEN = 56                  # TL_GEO_LEN in conv.cu
CHUNK_TERMS = 256             # positions a dKernel / dBias chunk sums at least: short serial
                              # folds, so small shapes still fill the GPU
MIN_CHUNKS = 128              # chunks the dKernel splits its positions into, where they are many
                              # (blocks enough for a few waves of the tiled 2-D dKernel)
GRID_Z_MAX = 65535
THREAD_TARGET = 1 << 16       # threads the chunked reductions aim to keep busy
TILE_M, TILE_N = 64, 128      # both tiled 2-D kernels' block tile (TL_BM, TL_FN)
NARROW_N = 64                 # tl_conv2d_fwd_tiled_n64's pixels per block
WIDE_MIN_BLOCKS = 264         # about two resident blocks per SM of an H200 (132 SMs): a forward
                              # grid of fewer 128-pixel blocks takes the 64-pixel variant
OFFSET_MAX = 1 << 29          # the tiled kernels' int row / column offsets stay within this
GRID_Y_MAX = 65535
U64 = np.uint64

_fwd_nd = kernel(FILE, "tl_conv_fwd_nd")
_dx_nd = kernel(FILE, "tl_conv_dx_nd")
_dw_chunks = kernel(FILE, "tl_conv_dw_chunks")
_db_chunks = kernel(FILE, "tl_conv_db_chunks")
_sum_chunks = kernel(FILE, "tl_conv_sum_chunks")
_fwd_2d = kernel(FILE, "tl_conv2d_fwd_tiled")
_fwd_2d_n64 = kernel(FILE, "tl_conv2d_fwd_tiled_n64")
_neg_zeros = kernel(FILE, "tl_conv_neg_zeros")
_dw_2d = kernel(FILE, "tl_conv2d_dw_tiled")

# Geometry records on the device, uploaded once per geometry: a repeated shape (a training step,
# a captured CUDA graph replaying it) launches without a host-to-device copy.
_geo_cache: dict[Geometry, object] = {}
GEO_CACHE_MAX = 256


def _geo_array(geo: Geometry):
    """conv.cu's geometry record on the device, uploaded once per geometry."""
    dev = _geo_cache.get(geo)
    if dev is not None:
        return dev
    host = np.zeros(GEO_LEN, np.int64)
    r = geo.rank
    host[:5] = (r, geo.n, geo.c_in, geo.c_out, geo.groups)
    for start, values in ((5, geo.inp), (13, geo.out), (21, geo.k), (29, geo.stride),
                          (37, geo.padding), (45, geo.dilation)):
        host[start:start + r] = values
    host[53:56] = (math.prod(geo.inp), math.prod(geo.out), math.prod(geo.k))
    if len(_geo_cache) >= GEO_CACHE_MAX:
        _geo_cache.clear()
    dev = _geo_cache[geo] = cupy().asarray(host)
    return dev


def _bias(b):
    return None if b is None else contiguous(b)


@functools.lru_cache(maxsize=512)
def _tiled_2d(geo: Geometry):
    """(channel tiles per group, the U32 dims the tiled 2-D kernels take) for `geo`, or None
    where they do not apply: rank 2, the grid's y extent, and their int offsets (every
    o s - p + t d within +-OFFSET_MAX, H W < 2^31, the kernel row C_in/groups kh kw < 2^31).
    Cached: a training step asks for the same few geometries (host time per call)."""
    if geo.rank != 2:
        return None
    ctiles = -(-(geo.c_out // geo.groups) // TILE_M)
    (h, wd), (oh, ow), (kh, kw) = geo.inp, geo.out, geo.k
    reach = max(max(o * s + p, (k - 1) * d, n) for o, s, p, k, d, n in
                zip(geo.out, geo.stride, geo.padding, geo.k, geo.dilation, geo.inp))
    if (ctiles * geo.groups > GRID_Y_MAX or reach >= OFFSET_MAX or h * wd >= 1 << 31
            or (geo.c_in // geo.groups) * kh * kw >= 1 << 31):
        return None
    dims = (geo.n, geo.c_in, h, wd, geo.c_out, oh, ow, kh, kw, *geo.stride, *geo.padding,
            *geo.dilation, geo.groups, ctiles)
    return ctiles, tuple(U32(v) for v in dims)


@functools.lru_cache(maxsize=512)
def _fwd_2d_plans(geo: Geometry):
    """((grid, dims) of tl_conv2d_fwd_tiled, the same of tl_conv2d_fwd_tiled_n64) for `geo`, or
    None (see _tiled_2d)."""
    tiled = _tiled_2d(geo)
    if tiled is None:
        return None
    npix, ytiles = geo.n * math.prod(geo.out), tiled[0] * geo.groups
    return ((-(-npix // TILE_N), ytiles), tiled[1]), ((-(-npix // NARROW_N), ytiles), tiled[1])


def _tiled_forward(geo: Geometry, args: tuple, flip: tuple) -> bool:
    """Launch the tiled forward of `geo` on args (x, w, b, y) if it applies (True), else False:
    the 64-pixel variant where the 128-pixel grid would have under WIDE_MIN_BLOCKS blocks."""
    plans = _fwd_2d_plans(geo)
    if plans is None:
        return False
    (blocks, dims), (narrow, _) = plans
    if blocks[0] * blocks[1] < WIDE_MIN_BLOCKS:
        _fwd_2d_n64(narrow, args + dims + flip)
    else:
        _fwd_2d(blocks, args + dims + flip)
    return True


def conv_forward(geo: Geometry, x, w, b, shape, tiled: bool = True):
    """y = conv(x, w) + b into a new array of `shape` (x's data in [N, C_in, *inp] order); rank 2
    takes the tiled kernel unless `tiled` is False (the tests compare the two paths)."""
    y = empty(shape)
    if y.size == 0:
        return y
    x, w, b = contiguous(x), contiguous(w), _bias(b)
    if not (tiled and _tiled_forward(geo, (x, w, b, y), _NO_FLIP)):
        _fwd_nd(grid(y.size), (x, w, b, y, _geo_array(geo), U32(y.size)))
    return y


_NO_FLIP, _FLIP = (U32(0),), (U32(1),)   # tl_conv2d_fwd_tiled's last argument


@functools.lru_cache(maxsize=512)
def flipped(geo: Geometry) -> Geometry | None:
    """At stride 1 the adjoint of conv is a forward conv of gy with the flipped, transposed
    kernel and padding d (k - 1) - p: its Geometry, or None where that does not hold (a stride
    above 1, a padding beyond d (k - 1), an extent the forward rule does not give back)."""
    if any(s != 1 for s in geo.stride):
        return None
    pad = tuple(d * (k - 1) - p for k, p, d in zip(geo.k, geo.padding, geo.dilation))
    if any(p < 0 for p in pad):
        return None
    out = tuple(conv_extent(n, k, 1, p, d) for n, k, p, d in
                zip(geo.out, geo.k, pad, geo.dilation))
    if out != geo.inp:
        return None
    return Geometry(geo.n, geo.c_out, geo.c_in, geo.groups, geo.out, geo.inp, geo.k,
                    geo.stride, pad, geo.dilation)


def conv_input_grad(geo: Geometry, gy, w, b, shape, tiled: bool = True):
    """The adjoint of conv applied to gy, plus b over the input channels: a new array. Rank 2 at
    stride 1 runs the tiled forward on the flipped kernel (the same fold, bit for bit), reading
    w in its flip mode."""
    dx = empty(shape)
    if dx.size == 0:
        return dx
    flip = flipped(geo) if tiled and geo.rank == 2 else None
    # the flip mode reads w transposed and flipped: no flipped copy
    if flip is not None and _tiled_forward(flip, (contiguous(gy), contiguous(w), _bias(b), dx),
                                           _FLIP):
        return dx
    _dx_nd(grid(dx.size), (contiguous(gy), contiguous(w), _bias(b), dx, _geo_array(geo),
                           U32(dx.size)))
    return dx


@functools.lru_cache(maxsize=512)
def _chunking(elems: int, positions: int) -> tuple[int, int]:
    """(chunks, span): chunks of at least CHUNK_TERMS positions, at least MIN_CHUNKS of them (the
    tiled 2-D dKernel's blocks) or enough to keep about THREAD_TARGET threads busy, at most
    GRID_Z_MAX; a function of the shape alone (deterministic mode and the agreement of the tiled
    and the generic dKernel rely on it)."""
    want = max(MIN_CHUNKS, -(-THREAD_TARGET // max(elems, 1)))
    chunks = max(1, min(want, -(-positions // CHUNK_TERMS), (1 << 31) // max(elems, 1),
                        GRID_Z_MAX))
    span = -(-positions // chunks) if positions else 1
    return -(-positions // span) if positions else 1, span


def _chunked(launch, elems: int, positions: int, shape, acc=None):
    """Run a chunked reduction into a new array of `shape` (elems elements) in the mode set;
    default mode adds into `acc` where given (-0 filled, see _accumulators)."""
    chunks, span = _chunking(elems, positions)
    if not get_deterministic_reductions():
        out = negative_zeros(shape) if acc is None else acc
        launch(out, chunks, span, 1)
        return out
    out = empty(shape)
    if chunks == 1:
        launch(out, 1, span, 0)
        return out
    part = empty((chunks, elems))
    launch(part, chunks, span, 0)
    _sum_chunks(grid(elems), (part, out, U32(elems), U32(chunks)))
    return out


def _accumulators(w_shape, channels: int):
    """Default mode: new -0 filled arrays for dKernel (w_shape) and dBias (channels; 0: none)
    from one launch (host time: one fill per VJP, not one per gradient); deterministic mode, or
    sizes past the fill's UInt32 count: (None, None), each gradient then allocates its own."""
    if get_deterministic_reductions():
        return None, None
    nw, nb = math.prod(w_shape), channels
    if nw + nb >= 1 << 31:
        return None, None
    dw, db = empty(w_shape), (empty((nb,)) if nb else None)
    if nw + nb:
        _neg_zeros(grid(nw + nb), (dw, U32(nw), db, U32(nb)))
    return dw, db


def conv_kernel_grad(geo: Geometry, gy, x, w_shape, tiled: bool = True, acc=None):
    """dw = sum over N and output positions of gy * x (taps in range), a new array (default
    mode: `acc` where given, see _chunked); rank 2 takes the tiled split-K kernel unless `tiled`
    is False (the same chunks and bits)."""
    elems = math.prod(w_shape)
    if elems == 0:
        return empty(w_shape)
    gy, x = contiguous(gy), contiguous(x)
    positions = geo.n * math.prod(geo.out)
    plan = _tiled_2d(geo) if tiled else None
    if plan is not None:
        mtiles, dims = plan
        cols = (geo.c_in // geo.groups) * math.prod(geo.k)
        blocks = (-(-cols // TILE_N), mtiles * geo.groups)

        def launch(out, chunks, span, atomic):
            _dw_2d(blocks + (chunks,), (gy, x, out) + dims + (U64(span), np.int32(atomic)))
        return _chunked(launch, elems, positions, w_shape, acc)
    dev = _geo_array(geo)

    def launch(out, chunks, span, atomic):
        _dw_chunks(grid(elems * chunks), (gy, x, out, dev, U32(elems), U32(chunks), U64(span),
                                          np.int32(atomic)))
    return _chunked(launch, elems, positions, w_shape, acc)


def bias_grad(gy, n: int, channels: int, spatial: int, acc=None):
    """db[c] = sum of gy [N, C, S] over N and S, a new array (default mode: `acc` where
    given)."""
    if channels == 0:
        return empty((0,))
    gy = contiguous(gy)

    def launch(out, chunks, span, atomic):
        _db_chunks(grid(channels * chunks), (gy, out, U32(channels), U32(spatial), U32(n),
                                             U32(chunks), U64(span), np.int32(atomic)))
    return _chunked(launch, channels, n * spatial, (channels,), acc)


# --- handlers ----------------------------------------------------------------------------------

def _conv(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    geo, batched = conv_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    lead = x.shape[:1] if batched else ()
    return conv_forward(geo, x, w, b, lead + (geo.c_out,) + geo.out)


def conv_vjp(inputs, output, g, stride=1, padding=0, dilation=1, groups=1):
    x, w = inputs[0], inputs[1]
    geo, _ = conv_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    bias = len(inputs) == 3
    acc_w, acc_b = _accumulators(w.shape, geo.c_out if bias else 0)
    grads = (conv_input_grad(geo, g, w, None, x.shape),
             conv_kernel_grad(geo, g, x, w.shape, acc=acc_w))
    if bias:
        grads += (bias_grad(g, geo.n, geo.c_out, math.prod(geo.out), acc_b),)
    return grads


def _conv_transpose(x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    geo, batched = transpose_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    lead = x.shape[:1] if batched else ()
    return conv_input_grad(geo, x, w, b, lead + (geo.c_in,) + geo.inp)


def conv_transpose_vjp(inputs, output, g, stride=1, padding=0, dilation=1, groups=1):
    x, w = inputs[0], inputs[1]
    geo, _ = transpose_geometry(x.shape, w.shape, stride, padding, dilation, groups)
    # conv_transpose's g is the adjoint conv's input; its x is that conv's output
    bias = len(inputs) == 3
    acc_w, acc_b = _accumulators(w.shape, geo.c_in if bias else 0)
    grads = (conv_forward(geo, g, w, None, x.shape),
             conv_kernel_grad(geo, x, g, w.shape, acc=acc_w))
    if bias:
        grads += (bias_grad(g, geo.n, geo.c_in, math.prod(geo.inp), acc_b),)
    return grads


_ORDER = ("every output is a float32 left fold from the bias (-0 without one) over (input "
          "channel, kernel taps row-major), taps outside the input skipped; the tiled 2-D "
          "implicit GEMM and the N-D kernel follow that order and agree bit for bit")
_BACKWARD = ("dInput gathers per input element in a fixed order (rank 2 at stride 1: the tiled "
             "forward reading the kernel flipped, the same fold bit for bit); dKernel (rank 2: a tiled "
             "split-K GEMM over the same chunks, bit for bit) and dBias sum chunk "
             "partials whose count depends on the shape alone: atomicAdd in default mode, a "
             "second pass in chunk order in deterministic mode")
_REDUCTIONS = dict(reduction=Reduction.implementation_defined, atomics=True)

DECLS = (
    KernelDecl(Op.conv, FILE, ("tl_conv2d_fwd_tiled", "tl_conv2d_fwd_tiled_n64", "tl_conv_fwd_nd"),
               ("tl_conv_dx_nd", "tl_conv2d_fwd_tiled", "tl_conv2d_fwd_tiled_n64",
                "tl_conv_dw_chunks", "tl_conv2d_dw_tiled", "tl_conv_db_chunks",
                "tl_conv_sum_chunks", "tl_conv_neg_zeros"),
               _conv, conv_vjp, **_REDUCTIONS,
               summary="direct convolution, rank 1..8, stride, padding, dilation, groups: " + _ORDER,
               notes=(_BACKWARD,)),
    KernelDecl(Op.conv_transpose, FILE, ("tl_conv_dx_nd", "tl_conv2d_fwd_tiled",
                                         "tl_conv2d_fwd_tiled_n64"),
               ("tl_conv2d_fwd_tiled", "tl_conv2d_fwd_tiled_n64", "tl_conv_fwd_nd",
                "tl_conv_dw_chunks", "tl_conv2d_dw_tiled", "tl_conv_db_chunks",
                "tl_conv_sum_chunks", "tl_conv_neg_zeros"),
               _conv_transpose, conv_transpose_vjp, **_REDUCTIONS,
               summary="the adjoint of conv (no output padding) plus the bias, by gather: one "
                       "thread per output element, a float32 left fold from the bias over "
                       "(input channel, kernel taps in reverse row-major order); rank 2 at "
                       "stride 1 runs the tiled forward reading the kernel flipped, bit for bit "
                       "the same",
               notes=("dInput is conv's forward (the tiled 2-D kernel for rank 2); " + _BACKWARD,)),
)
