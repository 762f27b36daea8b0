"""The reference provider: every op in NumPy on float32 storage, the living definition the other
providers and the harness are checked against. Capsule policies say what NumPy really does here.

Transcendentals and composites are evaluated in float64 and rounded once to float32: the float64
result is within a few float64 ulps of the exact value, so after the single rounding the error
stays under 0.5 float32 ulp plus 2^-28 ulp; the capsules declare 1 ulp.
"""
from __future__ import annotations

import numpy as np

from dataclasses import dataclass
from typing import Callable

from engine import convolution, pool_windows
from engine.heads_layout import causal_mask, merge_heads, split_heads
from engine.capsule import KernelHandler, standard_capsule
from engine.runtime.philox import unit_uniform
from engine.types import (BackendOp as Op, Contraction, DeclaredBound, Device, NumericalPolicy,
                          Provider, Reduction, Rounding, RuntimeEntry as Entry, Subnormals,
                          TrustLevel, VJPMode)

F32 = np.float32

# --- forward implementations (signatures: docs/OPS.md) ------------------------------------------


def _f64(fn):
    """Evaluate `fn` on float64 copies of the inputs and round the result once to float32."""
    def run(*arrays, **params):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*(a.astype(np.float64) for a in arrays), **params)).astype(F32)
    return run


def _quiet(fn):
    def run(*arrays, **params):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*arrays, **params), dtype=F32)
    return run


def _max(a, b):
    out = np.where(b > a, b, a)
    return np.where(np.isnan(a) | np.isnan(b), np.float32(np.nan), out)


def _min(a, b):
    out = np.where(b < a, b, a)
    return np.where(np.isnan(a) | np.isnan(b), np.float32(np.nan), out)


def _relu(a):
    # a > 0 keeps a; everything else, -0.0 included, becomes +0.0; NaN propagates.
    return np.where(a > 0, a, np.where(np.isnan(a), a, F32(0.0)))


def _clamp(a, lo, hi):
    # min(max(a, lo), hi) with docs/OPS.md's ties: a equal to a bound stays a (so clamp(-0, lo=0)
    # is -0); numpy.maximum/minimum may return either zero. NaN propagates.
    lo, hi = F32(lo), F32(hi)
    m = np.where(a < lo, lo, a)
    return np.where(m > hi, hi, m).astype(F32)


_GELU_C = np.sqrt(2.0 / np.pi)


def _gelu64(a):
    u = _GELU_C * (a + 0.044715 * a ** 3)
    out = a / (1.0 + np.exp(-2.0 * u))   # = 0.5 a (1 + tanh(u)), without cancellation
    return np.where(np.isneginf(a), -0.0, out)   # the limit at -inf, not inf/inf


def _softplus64(a):
    return np.log1p(np.exp(-np.abs(a))) + np.maximum(a, 0.0)


def _safe_log64(a, eps=1e-12):
    return np.log(np.maximum(a, np.float64(F32(eps))))


# The softmax family follows the IEEE evaluation of its formula: a NaN or +inf entry makes its row
# NaN. `initial=-inf` lets a zero-length axis give an empty result instead of an error.

def _softmax64(a, axis=-1):
    m = np.max(a, axis=axis, keepdims=True, initial=-np.inf)
    e = np.exp(a - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax64(a, axis=-1):
    if a.shape[axis] == 0:
        return a.copy()
    m = np.max(a, axis=axis, keepdims=True, initial=-np.inf)
    e = np.exp(a - m)
    # log(sum e) = log1p(rest), rest = the sum without one max entry: 1 + rest would lose a rest
    # under 2^-53, and with it the subnormal log_softmax of the max entry.
    first_max = np.arange(a.shape[axis]).reshape([-1 if d == axis % a.ndim else 1
                                                  for d in range(a.ndim)]) == \
        np.expand_dims(np.argmax(a, axis=axis), axis)
    # The max's own term is exp(0) = 1 exactly, so e - 1 adds nothing, but keeps a NaN (+inf max).
    rest = np.sum(np.where(first_max, e - 1.0, e), axis=axis, keepdims=True)
    return a - m - np.log1p(rest)


def _hard_masked_softmax64(a, mask, axis=-1):
    mask = np.asarray(mask, dtype=bool)
    blocked_row = ~np.any(mask, axis=axis, keepdims=True)
    masked = np.where(mask, a, -np.inf)
    m = np.max(masked, axis=axis, keepdims=True, initial=-np.inf)
    m = np.where(blocked_row, 0.0, m)              # only a fully blocked row has max -inf
    e = np.where(mask, np.exp(masked - m), 0.0)   # blocked: exactly zero numerator
    s = np.sum(e, axis=axis, keepdims=True)
    with np.errstate(all="ignore"):
        return np.where(blocked_row, 0.0, np.where(mask, e / s, 0.0))   # blocked row: zeros


def _mse64(pred, target):
    d = pred - target
    return np.mean(d * d) if d.size else np.float64(np.nan)


def _normalize64(x, gamma, beta, eps, axes, channel_shape):
    eps = float(F32(eps))    # docs/OPS.md: float parameters are rounded to float32 before use
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma.reshape(channel_shape) + beta.reshape(channel_shape)


def _layer_norm64(x, gamma, beta, eps=1e-5):
    return _normalize64(x, gamma, beta, eps, (x.ndim - 1,), (1,) * (x.ndim - 1) + (x.shape[-1],))


def add_layer_norm(x, r, gamma, beta, eps=1e-5):
    """[s, y] stacked: s = x + r (float32 add, correctly rounded), y = layer_norm(s) in float64,
    rounded once: add's and layer_norm's references composed."""
    with np.errstate(all="ignore"):
        s = (x + r).astype(F32)
    return np.stack([s, _f64(_layer_norm64)(s, gamma, beta, eps=eps)])


def _batch_norm64(x, gamma, beta, eps=1e-5):
    return _normalize64(x, gamma, beta, eps, (0,) + tuple(range(2, x.ndim)),
                        (1, x.shape[1]) + (1,) * (x.ndim - 2))


def _sdpa64(q, k, v, mask=None, scale=1.0):
    # the scale as every float32 kernel sees it (docs/OPS.md rounds float parameters to float32):
    # in float64 a large score times the unrounded scale moves the weights by up to 2^-25
    # relatively per unit of score (the full campaign found 85 ulp at scores near 10^3)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * float(np.float32(scale))
    mask = np.ones(s.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    p = _hard_masked_softmax64(s, mask)
    if np.all(np.isfinite(v)):
        return np.matmul(p, v)
    # Blocked keys take no part at all: a NaN or inf in their v row must not leak through 0 * v.
    terms = np.where(mask[..., :, :, None], p[..., :, :, None] * v[..., None, :, :], 0.0)
    return terms.sum(axis=-2)


def tree_sum(a: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Sum over `axes` in a fixed pairwise tree, in float32: at each level element i is added to
    element i + h (h = ceil(n/2)); depth ceil(log2 n). The order is part of the capsule's policy."""
    keep = [d for d in range(a.ndim) if d not in axes]
    # the reduced extent is explicit: -1 cannot be inferred when a kept axis is empty
    terms = int(np.prod([a.shape[d] for d in axes], dtype=np.int64))
    x = np.transpose(a, keep + list(axes)).reshape([a.shape[d] for d in keep] + [terms])
    if x.shape[-1] == 0:
        return np.zeros(x.shape[:-1], dtype=F32)
    while x.shape[-1] > 1:
        n = x.shape[-1]
        h = (n + 1) // 2
        head = x[..., :h].copy()
        head[..., : n - h] += x[..., h:]
        x = head
    return x[..., 0].astype(F32, copy=False)


def _axes(ndim, axes):
    return tuple(range(ndim)) if axes is None else tuple(sorted(ax % ndim for ax in axes))


def _reduce_sum(a, axes=None, keepdims=False):
    ax = _axes(a.ndim, axes)
    out = tree_sum(a, ax)
    return out.reshape([1 if d in ax else a.shape[d] for d in range(a.ndim)]) if keepdims else out


def _reduce_mean(a, axes=None, keepdims=False):
    ax = _axes(a.ndim, axes)
    n = int(np.prod([a.shape[d] for d in ax])) if ax else 1
    with np.errstate(all="ignore"):
        return np.asarray(_reduce_sum(a, axes, keepdims) / F32(n) if n else
                          _reduce_sum(a, axes, keepdims) * F32(np.nan), dtype=F32)


def _matmul(a, b, trans_a=False, trans_b=False):
    a = np.swapaxes(a, -1, -2) if trans_a else a
    b = np.swapaxes(b, -1, -2) if trans_b else b
    return np.matmul(a, b)


def _linear(x, w, b):
    return np.matmul(x, w.T) + b


def _scatter_add(base, src, axis, indices):
    out = base.copy()
    idx = [slice(None)] * base.ndim
    idx[axis] = np.asarray(indices, dtype=np.int64)
    np.add.at(out, tuple(idx), src)
    return out


def _slice(a, axis, start, stop):
    idx = [slice(None)] * a.ndim
    idx[axis] = slice(start, stop)
    return a[tuple(idx)].copy()


def _rand_uniform(shape, seed):
    return unit_uniform(int(np.prod(shape)), seed).reshape(shape)


def _bernoulli_mask(shape, p, seed):
    return (_rand_uniform(shape, seed) < F32(p)).astype(F32)


def _rfft(x):
    z = np.fft.rfft(x.astype(np.float64), axis=1)
    return np.stack([z.real, z.imag], axis=-1)


def _irfft(z, n):
    c = z[..., 0].astype(np.float64) + 1j * z[..., 1].astype(np.float64)
    return np.fft.irfft(c, n=n, axis=1)


def _fft_fno(x, w_re, w_im):
    x3 = x.reshape((-1,) + x.shape[-2:]).astype(np.float64)
    grid, modes = x3.shape[1], w_re.shape[0]
    xk = np.fft.rfft(x3, axis=1)[:, :modes]
    w = w_re.astype(np.float64) + 1j * w_im.astype(np.float64)
    z = np.zeros((x3.shape[0], grid // 2 + 1, x3.shape[2]), np.complex128)
    z[:, :modes] = np.einsum("bkc,kco->bko", xk, w)
    return np.fft.irfft(z, n=grid, axis=1).reshape(x.shape)


def _selective_scan(A, B, X, h0):
    """h[t] = A[t] h[t-1] + B[t] X[t] in float32, in time order, each product and the sum rounded
    separately: TorchLean's one-thread-per-channel kernel, step for step."""
    seq, state = X.shape
    token = A.ndim == 2
    rows = seq if token else 1     # explicit: reshape(-1, 0) cannot infer it for state 0
    a, b = A.reshape(rows, state), B.reshape(rows, state)
    out = np.empty((seq, state), F32)
    h = h0.astype(F32, copy=True)
    for t in range(seq):
        r = t if token else 0
        h = a[r] * h + b[r] * X[t]
        out[t] = h
    return out


# --- numerical policies: what NumPy on this CPU really does --------------------------------------

_R, _G = Rounding.nearest_even, Subnormals.gradual_underflow
EXACT = NumericalPolicy(_R, _G, Contraction.not_applicable, Reduction.not_applicable)
ROUNDED = EXACT   # one IEEE operation per element, correctly rounded by the FPU
TREE = NumericalPolicy(_R, _G, Contraction.separate, Reduction.fixed_tree)
LEFT = NumericalPolicy(_R, _G, Contraction.separate, Reduction.fixed_left)
BLAS = NumericalPolicy(_R, Subnormals.implementation_defined, Contraction.implementation_defined,
                       Reduction.implementation_defined)
# NumPy's pocketfft in float64 (its order and FMA use are the library's), rounded once to float32:
# within the FFT error model of conformance/families/spectral.py (the float64 error is ~2^-29 of it).
FFT64 = NumericalPolicy(_R, _G, Contraction.implementation_defined,
                        Reduction.implementation_defined)
_FFT64_SUMMARY = ("numpy.fft (pocketfft) in float64 on float64 copies of the inputs, the mode mix "
                  "in float64, rounded once to float32")
F64_ONCE = DeclaredBound(1.0, "evaluated in float64 (each step within a few float64 ulps) and "
                              "rounded once to float32: under 0.5 + 2^-28 float32 ulp")
# Outputs that are sums of signed terms can cancel: the float64 evaluation error is then relative
# to the sum of |terms| (under 2^-45 of it, given float32 inputs), not to the result.
F64_ONCE_CANCELLING = DeclaredBound(
    1.0, "evaluated in float64 and rounded once; a cancelling sum carries float64 error relative "
         "to its sum of |terms|, far under one u = 2^-24 of it", magnitude_units=1.0)


# conv and conv_transpose: every output is a dot product (plus the bias) accumulated in float64
# (NumPy einsum: order and FMA use are the library's; float32 products are exact in float64 and no
# float64 partial sum can overflow or lose a float32 subnormal) and rounded once to float32.
CONV_F64 = NumericalPolicy(_R, _G, Contraction.implementation_defined,
                           Reduction.implementation_defined)
CONV_SUMMARY = ("dot products over (input channel, kernel taps) plus the bias, accumulated in "
                "float64 and rounded once to float32; out-of-range taps contribute no term")


def cross_entropy64(x, targets):
    """mean_r (log1p(T_r) + (m_r - x_r[t_r])) in float64: m the row's max, T the sum of
    exp(x - m) without the first max entry's 1 (log_softmax's form); a row with a NaN or +inf
    entry, or all -inf, is NaN; a target at -inf gives +inf."""
    n = x.shape[0]
    rows, t = np.arange(n), np.asarray(targets, np.int64).reshape(-1)
    m = np.max(x, axis=1)
    d = x - m[:, None]
    e = np.exp(d)
    e[rows, np.argmax(x, axis=1)] = 0.0
    loss = np.log1p(e.sum(axis=1)) - d[rows, t]
    nan_row = np.isnan(x).any(axis=1) | np.isposinf(x).any(axis=1) | np.isneginf(x).all(axis=1)
    return np.where(nan_row, np.nan, loss).sum() / n


def bias_gelu(x, b):
    """gelu(float32(x + b)) in float64 (the gelu op's formula), rounded once to float32."""
    with np.errstate(all="ignore"):
        return _gelu64((x + b).astype(np.float64)).astype(F32)


def attention_heads(q, k, v, heads=1, causal=True, scale=1.0):
    """scaled_dot_product_attention's reference forward per (batch entry, head) on the permuted
    [B*H, T, D] copies with the causal triangle (or no mask), permuted back: the composition's
    values bit for bit."""
    b, t = q.shape[0], q.shape[1]
    mask = causal_mask(np, b * heads, t) if causal else None
    out = OPS[Op.scaled_dot_product_attention].forward(
        *(split_heads(x, heads) for x in (q, k, v)), mask=mask, scale=scale)
    return merge_heads(out, b, heads)


XENT_F64 = NumericalPolicy(_R, _G, Contraction.implementation_defined,
                           Reduction.implementation_defined)


@dataclass(frozen=True)
class RefOp:
    """One op of the reference provider: its NumPy forward, where its VJP comes from (the tape's
    local rule, engine/ops/<family>.py, or none), the policy NumPy follows and the capsule's
    value summary and declared bound."""
    forward: Callable
    policy: NumericalPolicy
    vjp: VJPMode = VJPMode.torchlean_tape
    summary: str = ""
    bound: DeclaredBound | None = None


def _exact(fn) -> RefOp:
    return RefOp(fn, EXACT)


def _rounded(fn) -> RefOp:
    return RefOp(fn, ROUNDED)


def _float64(fn, bound: DeclaredBound = F64_ONCE) -> RefOp:
    return RefOp(_f64(fn), ROUNDED, summary="evaluated in float64 and rounded once to float32",
                 bound=bound)


OPS: dict[Op | Entry, RefOp] = {
    Op.add: _rounded(_quiet(np.add)), Op.sub: _rounded(_quiet(np.subtract)),
    Op.mul: _rounded(_quiet(np.multiply)),
    Op.max: _exact(_max), Op.min: _exact(_min),
    Op.scale: _rounded(_quiet(lambda a, alpha: F32(alpha) * a)),
    Op.abs: _exact(_quiet(np.abs)), Op.sqrt: _rounded(_quiet(np.sqrt)),
    Op.clamp: _exact(_quiet(_clamp)),
    Op.relu: _exact(_relu), Op.inv: _rounded(_quiet(lambda a: F32(1.0) / a)),
    Op.gelu: _float64(_gelu64), Op.sigmoid: _float64(lambda a: 1.0 / (1.0 + np.exp(-a))),
    Op.tanh: _float64(np.tanh), Op.softplus: _float64(_softplus64), Op.exp: _float64(np.exp),
    Op.log: _float64(np.log), Op.sin: _float64(np.sin), Op.cos: _float64(np.cos),
    Op.safe_log: _float64(_safe_log64),
    # Constants of the graph: nothing flows back through a random draw.
    Op.rand_uniform: RefOp(_rand_uniform, EXACT, vjp=VJPMode.none),
    Op.bernoulli_mask: RefOp(_bernoulli_mask, EXACT, vjp=VJPMode.none),
    Op.reduce_sum: RefOp(_quiet(_reduce_sum), TREE,
                         summary="sum in the fixed pairwise tree of `tree_sum`, float32 adds"),
    Op.reduce_mean: RefOp(_reduce_mean, TREE,
                          summary="tree_sum, then one correctly rounded division by the count"),
    Op.softmax: _float64(_softmax64), Op.log_softmax: _float64(_log_softmax64),
    Op.hard_masked_softmax: _float64(_hard_masked_softmax64), Op.mse_loss: _float64(_mse64),
    Op.reshape: _exact(lambda a, shape: a.reshape(shape).copy()),
    # .copy() rather than ascontiguousarray, which turns a rank-0 array into rank 1.
    Op.permute: _exact(lambda a, perm: np.transpose(a, perm).copy()),
    Op.broadcast: _exact(lambda a, shape: np.broadcast_to(a, shape).copy()),
    Op.concat: _exact(lambda *arrays, axis: np.concatenate(arrays, axis=axis)),
    Op.slice: _exact(_slice),
    Op.gather: _exact(lambda a, axis, indices: np.take(a, np.asarray(indices, np.int64),
                                                       axis=axis)),
    Op.scatter_add: RefOp(_quiet(_scatter_add), LEFT,
                          summary="numpy.add.at: duplicate indices accumulate in index order, "
                                  "float32 adds"),
    Op.matmul: RefOp(_quiet(_matmul), BLAS,
                     summary="numpy.matmul (BLAS sgemm: accumulation order and FMA use are the "
                             "library's)"),
    Op.linear: RefOp(_quiet(_linear), BLAS,
                     summary="numpy.matmul (BLAS) then one float32 add of the bias"),
    Op.layer_norm: _float64(_layer_norm64, F64_ONCE_CANCELLING),
    Op.batch_norm: _float64(_batch_norm64, F64_ONCE_CANCELLING),
    Op.scaled_dot_product_attention: _float64(_sdpa64, F64_ONCE_CANCELLING),
    # The spectral family (engine/ops/spectral.py): NumPy's float64 FFT, rounded once.
    Op.fft_fno: RefOp(_quiet(_fft_fno), FFT64, summary=_FFT64_SUMMARY),
    # the runtime entry points (engine.types.RuntimeEntry): capsules like the ops' own
    Entry.rfft: RefOp(_quiet(_rfft), FFT64, summary=_FFT64_SUMMARY),
    Entry.irfft: RefOp(_quiet(_irfft), FFT64, summary=_FFT64_SUMMARY),
    # no declared bound: conformance/families/reduction.py derives it (float64 rows, rounded once)
    Entry.bias_gelu: RefOp(bias_gelu, XENT_F64,
                           summary="the float32 sum x + b, then gelu in float64 (the gelu op's "
                                   "formula), rounded once; VJP g gelu'(s) in float64, db its "
                                   "float64 sum over the leading axes, each rounded once"),
    Entry.add_layer_norm: RefOp(add_layer_norm, ROUNDED,
                                summary="the float32 sum x + r (correctly rounded), then "
                                        "layer_norm's reference at it (float64, rounded once), "
                                        "stacked [s, y]; VJP in float64, rounded once",
                                bound=F64_ONCE_CANCELLING),
    Entry.attention_heads: RefOp(attention_heads, ROUNDED,
                                 summary="scaled_dot_product_attention's reference (float64, "
                                         "rounded once) per (batch entry, head) of the packed "
                                         "[B, T, H*D] layout, causal triangle or no mask",
                                 bound=F64_ONCE_CANCELLING),
    Entry.cross_entropy: RefOp(_f64(cross_entropy64), XENT_F64,
                               summary="per row log1p(sum exp(x - max) without the max's 1) + "
                                       "(max - x_target) in float64, NumPy's sum of the rows "
                                       "divided by N, rounded once to float32"),
    # no declared bound: conformance/families/scan.py derives the scan's (sequential float32 order)
    Op.selective_scan: RefOp(_quiet(_selective_scan), LEFT,
                             summary="float32 recurrence in time order, one channel at a time "
                                     "(TorchLean's order); VJP in float64, rounded once"),
    # Pooling (engine/pool_windows.py): max selects a bit pattern; avg sums the window in float64
    # and divides once; smooth max is its log-sum-exp in float64; each rounded once to float32.
    Op.max_pool: RefOp(pool_windows.max_pool, EXACT,
                       summary="selects the first NaN, else the first maximum, of each window "
                               "(padding -inf); VJP sums in float64, rounded once"),
    Op.avg_pool: RefOp(pool_windows.avg_pool, ROUNDED,
                       summary="window sum in float64 (padding 0), one division by the window "
                               "size, rounded once to float32"),
    Op.smooth_max_pool: RefOp(pool_windows.smooth_max_pool, ROUNDED,
                              summary="pivot + log(sum exp(beta (v - pivot))) / beta in float64 "
                                      "(padding 0), rounded once to float32",
                              bound=F64_ONCE_CANCELLING),
    **{op: RefOp(fn, CONV_F64, summary=CONV_SUMMARY) for op, fn in (
        (Op.conv, convolution.forward_f32), (Op.conv_transpose, convolution.transpose_f32))},
}

FORWARD = {op: entry.forward for op, entry in OPS.items()}   # a view: op -> NumPy forward


def register_all(reg) -> None:
    for op, entry in OPS.items():
        fn = entry.forward
        cap = standard_capsule(
            op, Provider.reference, Device.cpu, trust=TrustLevel.checked, vjp_mode=entry.vjp,
            policy=entry.policy, source_file="engine/providers/reference.py",
            native_symbol=getattr(fn, "__name__", op.label), value_summary=entry.summary,
            declared_bound=entry.bound)
        reg.register(cap, KernelHandler(cap.name, op, Provider.reference, Device.cpu, fn))
