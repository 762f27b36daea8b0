"""The native-cuda provider: our own kernels in engine/csrc/cuda/*.cu, launched through CuPy.

Capsules are plain data and register without CuPy; handlers import it on first call. Handlers
receive C-contiguous float32 CuPy arrays of their logical shapes (engine/ops/_dispatch.py has
checked shapes, lengths and UInt32 extents) and return new arrays; only reshape returns a view.
Numerical policies follow the compile flags in engine/runtime/loader.py.OPTIONS and each kernel's
real reduction order (see the policy constants below).
"""
from __future__ import annotations

import math

import numpy as np

from engine.capsule import KernelHandler, standard_capsule
from engine.errors import ShapeError
from engine.native_sources import ADAM_STEP, SOURCES
from engine.runtime import loader
from engine.runtime.deterministic import get_deterministic_reductions
from engine.types import (BackendOp as Op, Contraction, DeclaredBound, Device, NumericalPolicy,
                          Provider, Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

BLOCK = 256
MAX_RANK = 32            # TL_MAX_RANK in shape.cu
ROW_SEGMENT = 8192       # elements per block in row reductions and mse_loss
COL_TARGET = 1 << 18     # threads a column reduction aims to keep busy
_U32, _F32, _F64, _I32 = np.uint32, np.float32, np.float64, np.int32

_cp = None               # cupy, imported by the first handler call
_max_blocks = 0


def _cupy():
    global _cp, _max_blocks
    if _cp is None:
        import cupy
        from engine.runtime.allocator import install
        install()
        _max_blocks = cupy.cuda.Device().attributes["MultiProcessorCount"] * 8
        _cp = cupy
    return _cp


class _Kernel:
    """A kernel of one .cu file, compiled on first launch, launched with BLOCK threads."""
    __slots__ = ("file", "symbol", "fn")

    def __init__(self, file: str, symbol: str) -> None:
        self.file, self.symbol, self.fn = file, symbol, None

    def __call__(self, grid: tuple, args: tuple) -> None:
        fn = self.fn
        if fn is None:
            _cupy()
            fn = self.fn = loader.kernel(self.file, self.symbol)
        fn(grid, (BLOCK,), args)


_KERNELS: dict[str, _Kernel] = {}


def _k(file: str, symbol: str) -> _Kernel:
    key = f"{file}:{symbol}"
    if key not in _KERNELS:
        _KERNELS[key] = _Kernel(file, symbol)
    return _KERNELS[key]


def _grid(work: int) -> tuple:
    """Blocks for a grid-stride loop over `work` items (work >= 1)."""
    cap = _max_blocks
    if not cap:
        _cupy()
        cap = _max_blocks
    blocks = (work + BLOCK - 1) // BLOCK
    return (blocks if blocks < cap else cap,)


def _empty(shape):
    return (_cp or _cupy()).empty(shape, _F32)


def _zeros(shape):
    return (_cp or _cupy()).zeros(shape, _F32)


def _contiguous(x):
    return x if x.flags.c_contiguous else _cupy().ascontiguousarray(x)


def _copy(x):
    """A new contiguous array with x's bits (one device-to-device copy)."""
    out = _empty(x.shape)
    if x.size:
        out.data.copy_from_device_async(_contiguous(x).data, x.nbytes)
    return out


# --- elementwise -------------------------------------------------------------------------------

def _ew_grid(n: int) -> tuple:
    return _grid((n + 3) >> 2)   # the elementwise kernels move four floats per iteration


def _unary(fwd: str, bwd: str | None, params: tuple[str, ...] = ()):
    kf = _k("elementwise.cu", fwd)
    kb = _k("elementwise.cu", bwd) if bwd else None

    def extra(p) -> tuple:
        return tuple(_F32(p[name]) for name in params) if params else ()

    def forward(a, **p):
        out = _empty(a.shape)
        n = a.size
        if n:
            kf(_ew_grid(n), (a, out, _U32(n)) + extra(p))
        return out

    def vjp(inputs, output, g, **p):
        (a,) = inputs
        g = _contiguous(g)
        ga = _empty(a.shape)
        n = a.size
        if n:
            kb(_ew_grid(n), (a, g, ga, _U32(n)) + extra(p))
        return (ga,)

    return forward, vjp


def _binary(fwd: str):
    kf = _k("elementwise.cu", fwd)

    def forward(a, b):
        out = _empty(a.shape)
        n = a.size
        if n:
            kf(_ew_grid(n), (a, b, out, _U32(n)))
        return out

    return forward


def _binary_vjp(bwd: str):
    kb = _k("elementwise.cu", bwd)

    def vjp(inputs, output, g):
        a, b = inputs
        g = _contiguous(g)
        ga, gb = _empty(a.shape), _empty(a.shape)
        n = a.size
        if n:
            kb(_grid(n), (a, b, g, ga, gb, _U32(n)))
        return ga, gb

    return vjp


def _add_vjp(inputs, output, g):
    return g, g


_neg_kernel = _k("elementwise.cu", "tl_neg")
_scale_kernel = _k("elementwise.cu", "tl_scale_fwd")


def _sub_vjp(inputs, output, g):
    g = _contiguous(g)
    neg = _empty(g.shape)
    if g.size:
        _neg_kernel(_ew_grid(g.size), (g, neg, _U32(g.size)))
    return g, neg


def _scale_vjp(inputs, output, g, alpha):
    g = _contiguous(g)
    out = _empty(g.shape)
    if g.size:
        _scale_kernel(_ew_grid(g.size), (g, out, _U32(g.size), _F32(alpha)))
    return (out,)


# --- strided copies: broadcast, permute, slice, concat -------------------------------------

_copy_kernel = _k("shape.cu", "tl_strided_copy")
_place_kernel = _k("shape.cu", "tl_strided_place")
_meta_cache: dict[tuple, object] = {}


def _strides(shape) -> list[int]:
    out, step = [], 1
    for s in reversed(shape):
        out.append(step)
        step *= s
    return out[::-1]


def _canonical(dims, strides) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Drop unit axes and merge an axis into the one before it when the outer stride steps
    exactly over it; the visit order is unchanged."""
    out_d: list[int] = []
    out_s: list[int] = []
    for d, s in zip(dims, strides):
        if d == 1:
            continue
        if out_d and out_s[-1] == s * d:
            out_d[-1] *= d
            out_s[-1] = s
        else:
            out_d.append(d)
            out_s.append(s)
    return tuple(out_d), tuple(out_s)


def _meta(dims, strides):
    key = (dims, strides)
    meta = _meta_cache.get(key)
    if meta is None:
        if len(_meta_cache) > 4096:
            _meta_cache.clear()
        host = np.array(dims + strides if dims else (0,), dtype=np.uint32)
        meta = _meta_cache[key] = _cupy().asarray(host)
    return meta


def _strided(kernel, src, out, dims, strides, base: int, n: int) -> None:
    dims, strides = _canonical(dims, strides)
    if len(dims) > MAX_RANK:
        raise ShapeError(f"native_cuda: a strided copy of rank {len(dims)} after merging axes "
                         f"exceeds the supported rank {MAX_RANK}; reshape to fewer axes first")
    if n:
        kernel(_grid(n), (src, out, _U32(n), _meta(dims, strides), _U32(len(dims)), _U32(base)))


def _broadcast_into(a, shape):
    """a broadcast to `shape` as a new contiguous array."""
    lead = len(shape) - a.ndim
    src = _strides(a.shape)
    strides = [0] * lead + [0 if a.shape[i] == 1 else src[i] for i in range(a.ndim)]
    out = _empty(shape)
    _strided(_copy_kernel, a, out, tuple(shape), tuple(strides), 0, out.size)
    return out


def _broadcast(a, shape):
    return _broadcast_into(a, tuple(shape))


def _broadcast_vjp(inputs, output, g, shape):
    (a,) = inputs
    lead = len(shape) - a.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(a.shape)
                                      if s == 1 and shape[lead + i] != 1)
    return (_sum(_contiguous(g), axes).reshape(a.shape),)


def _permute(a, perm):
    src = _strides(a.shape)
    out = _empty(tuple(a.shape[p] for p in perm))
    _strided(_copy_kernel, a, out, out.shape, tuple(src[p] for p in perm), 0, out.size)
    return out


def _permute_vjp(inputs, output, g, perm):
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return (_permute(_contiguous(g), tuple(inverse)),)


def _slice(a, axis, start, stop):
    src = _strides(a.shape)
    shape = a.shape[:axis] + (stop - start,) + a.shape[axis + 1:]
    out = _empty(shape)
    _strided(_copy_kernel, a, out, shape, tuple(src), start * src[axis], out.size)
    return out


def _slice_vjp(inputs, output, g, axis, start, stop):
    (a,) = inputs
    full = _zeros(a.shape)
    dst = _strides(a.shape)
    _strided(_place_kernel, _contiguous(g), full, g.shape, tuple(dst), start * dst[axis], g.size)
    return (full,)


def _concat(*arrays, axis):
    shape = list(arrays[0].shape)
    shape[axis] = sum(x.shape[axis] for x in arrays)
    out = _empty(tuple(shape))
    dst = _strides(shape)
    at = 0
    for x in arrays:
        _strided(_place_kernel, x, out, x.shape, tuple(dst), at * dst[axis], x.size)
        at += x.shape[axis]
    return out


def _concat_vjp(inputs, output, g, axis):
    g = _contiguous(g)
    src = _strides(g.shape)
    grads, at = [], 0
    for x in inputs:
        gx = _empty(x.shape)
        _strided(_copy_kernel, g, gx, x.shape, tuple(src), at * src[axis], x.size)
        grads.append(gx)
        at += x.shape[axis]
    return tuple(grads)


def _reshape(a, shape):
    return a.reshape(shape)   # a view: no kernel runs


def _reshape_vjp(inputs, output, g, shape):
    return (g.reshape(inputs[0].shape),)


# --- reductions -----------------------------------------------------------------------------

_rows_kernel = _k("reduce.cu", "tl_reduce_rows")
_cols_kernel = _k("reduce.cu", "tl_reduce_cols")
_div32_kernel = _k("reduce.cu", "tl_div_f32")
_div64_kernel = _k("reduce.cu", "tl_div_f64")


def _sum_pass(x, outer: int, r: int, inner: int, det: bool):
    """Flat sums of x viewed as [outer][r][inner] over r (r >= 1): a flat array of outer*inner.

    Chunk counts depend on the shape alone. Default mode adds chunk partials with atomics; in
    deterministic mode the partials go to a buffer that a second pass sums in a fixed order.
    """
    if inner == 1 and r >= BLOCK:
        chunks = -(-r // ROW_SEGMENT)
        seg = -(-r // chunks)
        if chunks == 1:
            out = _empty(outer)
            _rows_kernel((outer,), (x, out, _U32(r), _U32(1), _U32(seg), _I32(0)))
            return out
        if not det:
            out = _zeros(outer)
            _rows_kernel((outer * chunks,), (x, out, _U32(r), _U32(chunks), _U32(seg), _I32(1)))
            return out
        part = _empty(outer * chunks)
        _rows_kernel((outer * chunks,), (x, part, _U32(r), _U32(chunks), _U32(seg), _I32(0)))
        return _sum_pass(part, outer, chunks, 1, det)
    cols = outer * inner
    chunks = 1
    if cols < COL_TARGET:
        chunks = max(1, min(-(-COL_TARGET // cols), -(-r // 32), 65535))
    seg = -(-r // chunks)
    chunks = -(-r // seg)
    grid = (_grid(cols)[0], chunks)
    if chunks == 1:
        out = _empty(cols)
        _cols_kernel(grid, (x, out, _U32(outer), _U32(r), _U32(inner), _U32(1), _U32(seg), _I32(0)))
        return out
    if not det:
        out = _zeros(cols)
        _cols_kernel(grid, (x, out, _U32(outer), _U32(r), _U32(inner), _U32(chunks), _U32(seg),
                            _I32(1)))
        return out
    part = _empty(outer * chunks * inner)
    _cols_kernel(grid, (x, part, _U32(outer), _U32(r), _U32(inner), _U32(chunks), _U32(seg),
                        _I32(0)))
    return _sum_pass(part, outer, chunks, inner, det)


def _sum(a, axes) -> object:
    """Sum of a over `axes` (sorted, non-negative) as a flat array of the kept extents."""
    red = set(axes)
    kept = [s for d, s in enumerate(a.shape) if d not in red]
    count = math.prod(a.shape[d] for d in red)
    if math.prod(kept) == 0:
        return _empty(math.prod(kept))
    if count == 0:
        return _zeros(math.prod(kept))
    groups: list[list] = []             # [extent, reduced?], unit axes dropped, runs merged
    for d, s in enumerate(a.shape):
        if s == 1:
            continue
        if groups and groups[-1][1] == (d in red):
            groups[-1][0] *= s
        else:
            groups.append([s, d in red])
    x = a.reshape(-1)
    if not any(r for _, r in groups):
        return _copy(x)
    det = get_deterministic_reductions()
    while any(r for _, r in groups):
        j = max(i for i, (_, r) in enumerate(groups) if r)
        outer = math.prod(e for e, _ in groups[:j])
        inner = math.prod(e for e, _ in groups[j + 1:])
        x = _sum_pass(x, outer, groups[j][0], inner, det)
        del groups[j]
        if 0 < j < len(groups) and not groups[j - 1][1] and not groups[j][1]:
            groups[j - 1][0] *= groups.pop(j)[0]
    return x


def _norm_axes(ndim: int, axes) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    return tuple(sorted({ax % ndim for ax in axes})) if ndim else ()


def _out_shape(shape, axes, keepdims) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else s for d, s in enumerate(shape))
    return tuple(s for d, s in enumerate(shape) if d not in axes)


def _reduce_sum(a, axes=None, keepdims=False):
    ax = _norm_axes(a.ndim, axes)
    return _sum(a, ax).reshape(_out_shape(a.shape, ax, keepdims))


def _divide(x, count: int):
    """x / count elementwise, as IEEE float division when count is exact in float."""
    out = _empty(x.shape)
    if x.size:
        if count <= 1 << 24:
            _div32_kernel(_grid(x.size), (x, out, _U32(x.size), _F32(count)))
        else:
            _div64_kernel(_grid(x.size), (x, out, _U32(x.size), _F64(count)))
    return out


def _reduce_mean(a, axes=None, keepdims=False):
    ax = _norm_axes(a.ndim, axes)
    count = math.prod(a.shape[d] for d in ax)
    shape = _out_shape(a.shape, ax, keepdims)
    if count == 0:
        return _cupy().full(shape, np.nan, _F32)
    s = _sum(a, ax)
    if s.size:
        (_div32_kernel if count <= 1 << 24 else _div64_kernel)(
            _grid(s.size), (s, s, _U32(s.size), (_F32 if count <= 1 << 24 else _F64)(count)))
    return s.reshape(shape)


def _expand(g, shape, axes):
    kept = tuple(1 if d in axes else s for d, s in enumerate(shape))
    return _broadcast_into(_contiguous(g).reshape(kept), shape)


def _reduce_sum_vjp(inputs, output, g, axes=None, keepdims=False):
    a = inputs[0]
    return (_expand(g, a.shape, _norm_axes(a.ndim, axes)),)


def _reduce_mean_vjp(inputs, output, g, axes=None, keepdims=False):
    a = inputs[0]
    ax = _norm_axes(a.ndim, axes)
    count = math.prod(a.shape[d] for d in ax)
    if count == 0:
        return (_zeros(a.shape),)
    return (_expand(_divide(_contiguous(g), count), a.shape, ax),)


# --- mse_loss -------------------------------------------------------------------------------

_mse_partial = _k("loss.cu", "tl_mse_partial")
_sum_partials = _k("loss.cu", "tl_sum_partials")
_mse_finish = _k("loss.cu", "tl_mse_finish")
_mse_bwd = _k("loss.cu", "tl_mse_bwd")


def _mse_loss(pred, target):
    n = pred.size
    if n == 0:
        return _cupy().full((), np.nan, _F32)
    blocks = -(-n // ROW_SEGMENT)
    if blocks == 1:
        out = _empty(1)
        _mse_partial((1,), (pred, target, out, _U32(n), _U32(ROW_SEGMENT), _I32(0)))
    elif not get_deterministic_reductions():
        out = _zeros(1)
        _mse_partial((blocks,), (pred, target, out, _U32(n), _U32(ROW_SEGMENT), _I32(1)))
    else:
        part = _empty(blocks)
        _mse_partial((blocks,), (pred, target, part, _U32(n), _U32(ROW_SEGMENT), _I32(0)))
        out = _empty(1)
        _sum_partials((1,), (part, out, _U32(blocks)))
    _mse_finish((1,), (out, _F64(n)))
    return out.reshape(())


def _mse_loss_vjp(inputs, output, g):
    pred, target = inputs
    gp, gt = _empty(pred.shape), _empty(pred.shape)
    n = pred.size
    if n:
        _mse_bwd(_grid(n), (pred, target, _contiguous(g), gp, gt, _U32(n), _F64(n)))
    return gp, gt


# --- gather / scatter_add -------------------------------------------------------------------

_gather_kernel = _k("index.cu", "tl_gather")
_scatter_atomic = _k("index.cu", "tl_scatter_add_atomic")
_scatter_ordered = _k("index.cu", "tl_scatter_add_ordered")


def _device_indices(indices):
    cp = _cupy()
    if isinstance(indices, cp.ndarray) and indices.dtype == np.int64:
        return _contiguous(indices)
    return cp.asarray(np.asarray(indices if not isinstance(indices, cp.ndarray)
                                 else indices.get(), dtype=np.int64))


def _axis_view(shape, axis):
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _gather(a, axis, indices):
    idx = _device_indices(indices)
    outer, extent, inner = _axis_view(a.shape, axis)
    m = int(idx.size)
    out = _empty(a.shape[:axis] + (m,) + a.shape[axis + 1:])
    if out.size:
        _gather_kernel(_grid(out.size), (a, idx, out, _U32(outer), _U32(extent), _U32(m),
                                         _U32(inner)))
    return out


def _scatter_into(out, src, axis, idx):
    """Add src into out (in place) at positions idx along axis: atomics, or a left fold in index
    order per column in deterministic mode."""
    outer, extent, inner = _axis_view(out.shape, axis)
    m = int(idx.size)
    if src.size == 0:
        return out
    if get_deterministic_reductions():
        _scatter_ordered(_grid(outer * inner), (out, src, idx, _U32(outer), _U32(extent),
                                                _U32(m), _U32(inner)))
    else:
        _scatter_atomic(_grid(src.size), (out, src, idx, _U32(outer), _U32(extent), _U32(m),
                                          _U32(inner)))
    return out


def _gather_vjp(inputs, output, g, axis, indices):
    (a,) = inputs
    return (_scatter_into(_zeros(a.shape), _contiguous(g), axis, _device_indices(indices)),)


def _scatter_add(base, src, axis, indices):
    return _scatter_into(_copy(base), src, axis, _device_indices(indices))


def _scatter_add_vjp(inputs, output, g, axis, indices):
    g = _contiguous(g)
    return g, _gather(g, axis, indices)


# --- random ---------------------------------------------------------------------------------

_uniform_kernel = _k("random.cu", "tl_philox_uniform")
_bernoulli_kernel = _k("random.cu", "tl_bernoulli_mask")


def _key(seed: int) -> tuple:
    seed = int(seed)
    return _U32(seed & 0xFFFFFFFF), _U32((seed >> 32) & 0xFFFFFFFF)


def _rand_uniform(shape, seed):
    out = _empty(tuple(shape))
    if out.size:
        _uniform_kernel(_grid(out.size), (out, _U32(out.size)) + _key(seed))
    return out


def _bernoulli_mask(shape, p, seed):
    out = _empty(tuple(shape))
    if out.size:
        _bernoulli_kernel(_grid(out.size), (out, _U32(out.size)) + _key(seed) + (_F32(p),))
    return out


# --- Adam (used by engine/optim.py; not a BackendOp) -----------------------------------------

_adam_kernel = _k(ADAM_STEP.file, ADAM_STEP.forward[0])


def native_adam_step(param, grad, m, v, lr, beta1, beta2, eps, step) -> None:
    """One Adam step in place on CuPy float32 arrays of one shape, with the float32 constants
    and operation order of engine/optim.py's NumPy path (so the bits agree)."""
    n = param.size
    for name, x in (("grad", grad), ("m", m), ("v", v)):
        if x.size != n:
            raise ShapeError(f"native_adam_step: {name} has {x.size} elements, param has {n}")
    if n == 0:
        return
    grad = _contiguous(grad)
    _adam_kernel(_grid(n), (param, grad, m, v, _U32(n), _F32(lr), _F32(beta1), _F32(beta2),
                            _F32(1 - beta1), _F32(1 - beta2), _F32(1 - beta1 ** step),
                            _F32(1 - beta2 ** step), _F32(eps)))


# --- capsules -------------------------------------------------------------------------------

_RN, _GU = Rounding.nearest_even, Subnormals.gradual_underflow
EXACT = NumericalPolicy(_RN, _GU, Contraction.not_applicable, Reduction.not_applicable)
ROUNDED = NumericalPolicy(_RN, _GU, Contraction.separate, Reduction.not_applicable)
ATOMIC_SUM = NumericalPolicy(_RN, _GU, Contraction.separate, Reduction.implementation_defined)

_FLAGS = " ".join(loader.OPTIONS)
_GUIDE = ("CUDA C++ Programming Guide, Mathematical Functions appendix, single-precision table: "
          "maximum ulp error against the correctly rounded result, full range")
_F64_VJP = ("VJP evaluated in float64 from the input and rounded once: within 1 ulp of the "
            "rounded exact g * f'(a)")
LIBDEVICE_ULPS = {Op.exp: 2.0, Op.log: 1.0, Op.sin: 2.0, Op.cos: 2.0, Op.tanh: 2.0,
                  Op.safe_log: 1.0}
_LIBDEVICE_NAME = {Op.exp: "expf", Op.log: "logf", Op.sin: "sinf", Op.cos: "cosf",
                   Op.tanh: "tanhf", Op.safe_log: "logf"}
_F64_ONCE = DeclaredBound(1.0, "evaluated in float64 with libdevice's double functions (a few "
                               "float64 ulps each, amplified at most |2u| <= 710 times through "
                               "exp) and rounded once to float32: under 0.5 + 2^-18 float32 ulp "
                               "of the exact value")

_UNARY = {   # op: (forward symbol, backward symbol, float params)
    Op.abs: ("tl_abs_fwd", "tl_abs_bwd", ()), Op.sqrt: ("tl_sqrt_fwd", "tl_sqrt_bwd", ()),
    Op.relu: ("tl_relu_fwd", "tl_relu_bwd", ()), Op.inv: ("tl_inv_fwd", "tl_inv_bwd", ()),
    Op.exp: ("tl_exp_fwd", "tl_exp_bwd", ()), Op.log: ("tl_log_fwd", "tl_log_bwd", ()),
    Op.sin: ("tl_sin_fwd", "tl_sin_bwd", ()), Op.cos: ("tl_cos_fwd", "tl_cos_bwd", ()),
    Op.tanh: ("tl_tanh_fwd", "tl_tanh_bwd", ()),
    Op.sigmoid: ("tl_sigmoid_fwd", "tl_sigmoid_bwd", ()),
    Op.softplus: ("tl_softplus_fwd", "tl_softplus_bwd", ()),
    Op.gelu: ("tl_gelu_fwd", "tl_gelu_bwd", ()),
    Op.clamp: ("tl_clamp_fwd", "tl_clamp_bwd", ("lo", "hi")),
    Op.safe_log: ("tl_safe_log_fwd", "tl_safe_log_bwd", ("eps",)),
}


def _handlers() -> dict[Op, tuple]:
    table: dict[Op, tuple] = {}
    for op, (fwd, bwd, params) in _UNARY.items():
        table[op] = _unary(fwd, bwd, params)
    for op, fwd, bwd in ((Op.mul, "tl_mul_fwd", "tl_mul_bwd"), (Op.max, "tl_max_fwd", "tl_max_bwd"),
                         (Op.min, "tl_min_fwd", "tl_min_bwd")):
        table[op] = (_binary(fwd), _binary_vjp(bwd))
    scale_fwd, _ = _unary("tl_scale_fwd", None, ("alpha",))
    table.update({
        Op.add: (_binary("tl_add_fwd"), _add_vjp),
        Op.sub: (_binary("tl_sub_fwd"), _sub_vjp),
        Op.scale: (scale_fwd, _scale_vjp),
        Op.reduce_sum: (_reduce_sum, _reduce_sum_vjp),
        Op.reduce_mean: (_reduce_mean, _reduce_mean_vjp),
        Op.broadcast: (_broadcast, _broadcast_vjp),
        Op.reshape: (_reshape, _reshape_vjp),
        Op.permute: (_permute, _permute_vjp),
        Op.concat: (_concat, _concat_vjp),
        Op.slice: (_slice, _slice_vjp),
        Op.gather: (_gather, _gather_vjp),
        Op.scatter_add: (_scatter_add, _scatter_add_vjp),
        Op.mse_loss: (_mse_loss, _mse_loss_vjp),
        Op.rand_uniform: (_rand_uniform, None),
        Op.bernoulli_mask: (_bernoulli_mask, None),
    })
    return table


def _policy(op: Op) -> NumericalPolicy:
    if op in (Op.reduce_sum, Op.reduce_mean, Op.mse_loss, Op.scatter_add, Op.gather,
              Op.broadcast):
        return ATOMIC_SUM     # default mode accumulates with atomics (gather/broadcast: the VJP)
    if op in (Op.max, Op.min, Op.abs, Op.clamp, Op.relu, Op.reshape, Op.permute, Op.concat,
              Op.slice, Op.rand_uniform, Op.bernoulli_mask):
        return EXACT
    return ROUNDED


_SUMMARIES = {
    Op.reduce_sum: "float32 sums; chunk partials added with atomicAdd (order unspecified) in "
                   "default mode, a fixed two-level tree in deterministic mode; within "
                   "gamma_n * sum|x|",
    Op.reduce_mean: "reduce_sum's sum, then one division by the count (IEEE float division for "
                    "counts up to 2^24, float64 quotient rounded once above)",
    Op.mse_loss: "d = p - t and d*d each rounded in float32, summed as reduce_sum does, divided "
                 "once by n: within gamma_(n+2) * sum (p - t)^2 plus the final division",
    Op.scatter_add: "float32 adds into a copy of base: atomicAdd for duplicates in default mode, "
                    "a left fold in index order per column in deterministic mode (bitwise equal "
                    "to numpy.add.at)",
    Op.add: "IEEE float32 addition (one correctly rounded operation)",
    Op.sub: "IEEE float32 subtraction",
    Op.mul: "IEEE float32 multiplication",
    Op.scale: "alpha rounded to float32, one IEEE multiplication",
    Op.sqrt: "sqrtf under --prec-sqrt=true: correctly rounded",
    Op.inv: "1.0f / a under --prec-div=true: correctly rounded",
    Op.reshape: "a view of the same buffer: no kernel runs",
}


def _notes(op: Op) -> str:
    parts = [f"compiled with {_FLAGS}"]
    if op in LIBDEVICE_ULPS or op in (Op.sigmoid, Op.softplus, Op.gelu, Op.sqrt, Op.inv):
        parts.append(_F64_VJP)
    if op in (Op.reduce_sum, Op.reduce_mean, Op.mse_loss, Op.scatter_add, Op.gather, Op.broadcast):
        parts.append("deterministic mode (TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS) replaces every "
                     "atomic accumulation with a fixed-order kernel: bitwise repeatable")
    return "; ".join(parts)


def _declared_bound(op: Op) -> DeclaredBound | None:
    if op in LIBDEVICE_ULPS:
        fn = _LIBDEVICE_NAME[op]
        return DeclaredBound(LIBDEVICE_ULPS[op], f"libdevice {fn}: {int(LIBDEVICE_ULPS[op])} ulp "
                             f"({_GUIDE}); not fast-math (no __{fn[:-1]}f intrinsic); libdevice's "
                             "internal FMAs are part of that bound")
    if op in (Op.sigmoid, Op.softplus, Op.gelu):
        return _F64_ONCE
    return None


def register_all(reg) -> None:
    for op, (forward, vjp) in _handlers().items():
        src = SOURCES[op]
        vjp_mode = VJPMode.backend_vjp if op.needs_vjp else VJPMode.none
        cap = standard_capsule(
            op, Provider.native_cuda, Device.cuda, trust=TrustLevel.checked, vjp_mode=vjp_mode,
            policy=_policy(op), source_file=src.path, native_symbol=src.symbols,
            value_summary=_SUMMARIES.get(op, ""), declared_bound=_declared_bound(op),
            notes=_notes(op))
        reg.register(cap, KernelHandler(cap.name, op, Provider.native_cuda, Device.cuda,
                                        forward, vjp))
