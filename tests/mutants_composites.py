"""Planted bugs of issue 35's classes 6 and 7, and honest alternatives, as plain NumPy kernels (the
mutation suite, tests/test_mutations_composites.py, runs them on the CPU; test_cuda_mutations.py's
`on_gpu` wraps any of them for the GPU: they take and return host arrays and keep no state).

Class 6, small outputs of composites: each bug is a formula that is exact in real arithmetic and
accurate in the op's bulk, but loses the tiny result of a regime the bulk never reaches (a loss near
0, softplus and sigmoid far below 0, the log-probability of a dominating entry, gelu's negative
tail). Each evaluates in float64 and rounds once, like the reference, so that it is wrong only
there; mse's expanded square runs in float32 (in float64 its three terms are exact near 0, the
float32 kernel's cancellation is the bug). Class 7, masks past the first tile: bugs that only a causal or masked case longer than one
64-row tile with a partial last tile shows, a length-1 softmax fast path, and an attention that
uses the float64 scale the harness passes where the contract says the float32-rounded one."""
from __future__ import annotations

import math

import numpy as np

from engine.heads_layout import causal_mask, merge_heads, split_heads
from engine.providers.reference import OPS as REFERENCE, _hard_masked_softmax64
from engine.types import BackendOp as Op
from mutants import masked_softmax_f32

F32 = np.float32
TILE = 64                 # the query-row tile of the flash kernels (flash_attention.cu's FL_T)


def _f64(fn):
    """fn on float64 copies of the array inputs, rounded once to float32 (warnings silenced)."""
    def run(*arrays, **params):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*(np.asarray(a, np.float64) for a in arrays), **params)).astype(F32)
    run.__name__ = fn.__name__
    return run


# --- class 6: small outputs --------------------------------------------------------------------

def _xent_log_one_plus(x, targets):
    """The reference's rows with log(1 + T) for log1p(T): a confident row's loss (T below 2^-53,
    the target the max by 37 or more) becomes 0, and from margins of about 20 on its relative
    error 2^-53 / T passes a float32 ulp."""
    n = x.shape[0]
    rows, t = np.arange(n), np.asarray(targets, np.int64).reshape(-1)
    m = np.max(x, axis=1)
    d = x - m[:, None]
    e = np.exp(d)
    e[rows, np.argmax(x, axis=1)] = 0.0
    loss = np.log(1.0 + e.sum(axis=1)) - d[rows, t]
    nan_row = np.isnan(x).any(axis=1) | np.isposinf(x).any(axis=1) | np.isneginf(x).all(axis=1)
    return np.where(nan_row, np.nan, loss).sum() / n


xent_log_one_plus = _f64(_xent_log_one_plus)


def _xent_logsumexp_with_the_max(x, targets):
    """m + log(sum_j exp(x_j - m)) - x_t: the sum holds the max's own 1, so a confident row's
    log-sum-exp is log(1 + T) rounded as in xent_log_one_plus (no log1p can recover T)."""
    n = x.shape[0]
    rows, t = np.arange(n), np.asarray(targets, np.int64).reshape(-1)
    m = np.max(x, axis=1)
    lse = np.log(np.sum(np.exp(x - m[:, None]), axis=1))
    loss = lse + (m - x[rows, t])
    nan_row = np.isnan(x).any(axis=1) | np.isposinf(x).any(axis=1) | np.isneginf(x).all(axis=1)
    return np.where(nan_row, np.nan, loss).sum() / n


xent_logsumexp_with_the_max = _f64(_xent_logsumexp_with_the_max)


def _softplus_log_one_plus_exp(a):
    """log(1 + exp(a)) below 30 (a guard above, where log1p(exp(-a)) + a is the same to float32):
    far below 0 exp(a) is lost in 1 + exp(a) (0 from a = -37 on, where softplus is exp(a))."""
    return np.where(a > 30, a, np.log(1.0 + np.exp(np.minimum(a, 30.0))))


softplus_log_one_plus_exp = _f64(_softplus_log_one_plus_exp)


def _sigmoid_by_reflection(a):
    """1 - 1/(1 + exp(a)): the same function, but far below 0 the subtraction cancels (0 from
    a = -37 on, where sigmoid is exp(a))."""
    with np.errstate(all="ignore"):
        return np.where(np.isnan(a), a, 1.0 - 1.0 / (1.0 + np.exp(a)))


sigmoid_by_reflection = _f64(_sigmoid_by_reflection)


def _log_softmax_as_log_of_softmax(a, axis=-1):
    """log(softmax(a)): the dominating entry's probability 1/(1 + T) rounds to 1 (its -T lost
    once T is below 2^-53), and a far entry's probability underflows to 0 (log: -inf)."""
    if a.shape[axis] == 0:
        return a.copy()
    m = np.max(a, axis=axis, keepdims=True)
    e = np.exp(a - m)
    return np.log(e / np.sum(e, axis=axis, keepdims=True))


log_softmax_as_log_of_softmax = _f64(_log_softmax_as_log_of_softmax)

_GELU_C = math.sqrt(2.0 / math.pi)


def _gelu_tanh_sum(a):
    """0.5 a (1 + tanh(u)): the docs/OPS.md formula as written; far below 0, 1 + tanh(u) cancels
    (0 from a = -6.5 on in float64, where gelu is about a exp(2u))."""
    u = _GELU_C * (a + 0.044715 * a ** 3)
    return np.where(np.isneginf(a), -0.0, 0.5 * a * (1.0 + np.tanh(u)))


gelu_tanh_sum = _f64(_gelu_tanh_sum)


def mse_expanded(pred, target):
    """mean(p^2 - 2 p t + t^2) in float32: equal in real arithmetic, but near 0 (p ~ t) the three
    rounded terms cancel and leave errors of their size, u p^2 against (p - t)^2; the squares
    also overflow from |p| ~ 2^64 (inf - inf: NaN where the exact loss is finite or inf)."""
    with np.errstate(all="ignore"):
        terms = (pred * pred - F32(2) * pred * target + target * target).astype(F32)
        return np.asarray(np.mean(terms, dtype=F32) if pred.size else np.nan, dtype=F32)


# --- class 7: masks past the first tile, length-1 rows, the scale's rounding ---------------------

def last_partial_tile(rows: int) -> slice | None:
    """The rows of the last 64-row tile when it is partial and not the first (rows = 64k + r,
    k >= 1, r >= 1), else None."""
    if rows <= TILE or rows % TILE == 0:
        return None
    return slice(rows - rows % TILE, rows)


def _shift_one(mask_rows: np.ndarray) -> np.ndarray:
    """Each row's mask read one column early (column j takes column j - 1's entry, column 0 its
    own): a causal row i then admits key i + 1."""
    out = mask_rows.copy()
    out[..., 1:] = mask_rows[..., :-1]
    return out


def _sdpa_shifted(q, k, v, mask=None, scale=1.0):
    lq = q.shape[-2]
    tile = last_partial_tile(lq)
    if tile is not None and mask is not None:
        mask = np.array(mask, dtype=bool)
        mask[..., tile, :] = _shift_one(mask[..., tile, :])
    return REFERENCE[Op.scaled_dot_product_attention].forward(q, k, v, mask=mask, scale=scale)


def sdpa_mask_shifted_in_the_last_partial_tile(q, k, v, mask=None, scale=1.0):
    """The reference's attention, but the query rows of the last partial 64-row tile read their
    mask one column early: right for every case of at most 64 query rows or whole tiles."""
    return _sdpa_shifted(q, k, v, mask=mask, scale=scale)


def heads_causal_off_by_one_in_the_last_partial_tile(q, k, v, heads=1, causal=True, scale=1.0):
    """The reference's attention_heads, but in the last partial 64-row tile the causal triangle
    admits one key too many (key t + 1 for query t)."""
    b, t = q.shape[0], q.shape[1]
    mask = causal_mask(np, b * heads, t) if causal else None
    out = _sdpa_shifted(*(split_heads(x, heads) for x in (q, k, v)), mask=mask, scale=scale)
    return merge_heads(out, b, heads)


def masked_softmax_shifted_in_the_last_partial_tile(a, mask, axis=-1):
    """The reference's hard_masked_softmax, but the rows in the last partial 64-row tile of the
    leading axis (rows = the flattened other axes) read their mask one entry early."""
    mask = np.asarray(mask, dtype=bool)
    moved = np.moveaxis(mask, axis, -1)
    rows = moved.reshape(-1, moved.shape[-1]) if moved.size else moved.reshape(0, 0)
    tile = last_partial_tile(rows.shape[0])
    if tile is not None and rows.shape[1] > 1:
        rows = rows.copy()
        rows[tile] = _shift_one(rows[tile])
        mask = np.moveaxis(rows.reshape(moved.shape), -1, axis)
    return REFERENCE[Op.hard_masked_softmax].forward(a, mask, axis=axis)


def _softmax_length_one_fast_path(a, axis=-1):
    """A row of one entry is 1 without looking at it (NaN, +inf and -inf rows are NaN)."""
    if a.shape[axis] == 1:
        return np.ones_like(a)
    m = np.max(a, axis=axis, keepdims=True, initial=-np.inf)
    e = np.exp(a - m)
    return e / np.sum(e, axis=axis, keepdims=True)


softmax_length_one_fast_path = _f64(_softmax_length_one_fast_path)


def _sdpa_single_key_fast_path(q, k, v, mask=None, scale=1.0):
    """A query row with one participating key returns that key's v row without looking at its
    score (a NaN or infinite score makes the row NaN)."""
    out = REFERENCE[Op.scaled_dot_product_attention].forward(q, k, v, mask=mask, scale=scale)
    part = np.ones(q.shape[:-1] + (k.shape[-2],), bool) if mask is None else \
        np.asarray(mask, bool)
    single = part.sum(axis=-1) == 1
    if not np.any(single):
        return out
    picked = np.take_along_axis(v, np.argmax(part, axis=-1)[..., None], axis=-2)
    return np.where(single[..., None], picked, out).astype(F32)


sdpa_single_key_fast_path = _sdpa_single_key_fast_path


def heads_single_key_fast_path(q, k, v, heads=1, causal=True, scale=1.0):
    """attention_heads whose query rows with one participating key (the causal first row, every
    row when T = 1) return that key's v row without its score."""
    b, t = q.shape[0], q.shape[1]
    mask = causal_mask(np, b * heads, t) if causal else None
    out = sdpa_single_key_fast_path(*(split_heads(x, heads) for x in (q, k, v)), mask=mask,
                                    scale=scale)
    return merge_heads(out, b, heads)


def _sdpa_float64_scale(q, k, v, mask=None, scale=1.0):
    """The reference's float64 attention with the scale as passed, not rounded to float32 first
    (docs/OPS.md: float parameters are rounded to float32 before use)."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * float(scale)
    full = np.ones(s.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    p = _hard_masked_softmax64(s, full)
    if np.all(np.isfinite(v)):
        return np.matmul(p, v)
    terms = np.where(full[..., :, :, None], p[..., :, :, None] * v[..., None, :, :], 0.0)
    return terms.sum(axis=-2)


sdpa_float64_scale = _f64(_sdpa_float64_scale)


# --- honest alternatives: other valid evaluations of the same ops -------------------------------

def _xent_fsum(x, targets):
    """log1p(T) + (m - x_t) per row with T summed by math.fsum and the rows' mean by fsum too:
    another valid float64 order of the reference's formula."""
    n = x.shape[0]
    t = np.asarray(targets, np.int64).reshape(-1)
    losses = []
    for r in range(n):
        row = x[r]
        if np.isnan(row).any() or np.isposinf(row).any() or np.isneginf(row).all():
            losses.append(np.nan)
            continue
        m = row.max()
        e = np.exp(row - m)
        e[int(np.argmax(row))] = 0.0
        losses.append(math.log1p(math.fsum(e.tolist())) + (m - row[t[r]]))
    if any(math.isnan(v) for v in losses):
        return np.nan
    return math.fsum(losses) / n


xent_fsum = _f64(_xent_fsum)


def log_softmax_f32(a, axis=-1):
    """An honest float32 log_softmax: (a - max) - log(sum exp(a - max)), every step in float32
    (no log1p: the derived bound allows the dominating entry's rounded log(1 + T))."""
    if a.shape[axis] == 0:
        return a.copy()
    with np.errstate(all="ignore"):
        m = np.max(a, axis=axis, keepdims=True)
        d = (a - m).astype(F32)
        s = np.sum(np.exp(d), axis=axis, keepdims=True, dtype=F32)
        return (d - np.log(s)).astype(F32)


def sdpa_f32(q, k, v, mask=None, scale=1.0):
    """An honest float32 attention: float32 scores times the float32 scale, tests/mutants.py's
    float32 hard-masked softmax, and P v in float32 over participating keys only (a blocked
    key's v takes no part, even inf or NaN)."""
    with np.errstate(all="ignore"):
        s = (np.matmul(q, np.swapaxes(k, -1, -2)) * F32(scale)).astype(F32)
        part = np.ones(s.shape, bool) if mask is None else np.asarray(mask, bool)
        p = masked_softmax_f32(s, part)
        if np.all(np.isfinite(v)):
            return np.matmul(p, v).astype(F32)
        terms = np.where(part[..., :, :, None], p[..., :, :, None] * v[..., None, :, :], F32(0))
        return np.sum(terms, axis=-2, dtype=F32)


def heads_f32(q, k, v, heads=1, causal=True, scale=1.0):
    """sdpa_f32 per (batch entry, head) of the packed layout, causal triangle or no mask."""
    b, t = q.shape[0], q.shape[1]
    mask = causal_mask(np, b * heads, t) if causal else None
    out = sdpa_f32(*(split_heads(x, heads) for x in (q, k, v)), mask=mask, scale=scale)
    return merge_heads(out, b, heads)
