"""PyTorch's row rules of the softmax family (conformance/peers/contract.Convention rules, as
rules.py's): what `softmax(a.masked_fill(~mask, -inf))` and scaled_dot_product_attention return on
the rows where TorchLean's reference and PyTorch's formula part. Each is PyTorch's computation in
float32 NumPy, as far as it decides which elements are NaN or zero (no rounding enters that)."""
from __future__ import annotations

import numpy as np

F32 = np.float32


def masked_softmax_nan_row(case):
    """hard_masked_softmax as a PyTorch user writes it (torch_cuda.py: masked_fill(~mask, -inf),
    then torch.softmax, a row with no participant set to 0): a live row whose participants hold a
    NaN or a +inf, or only -inf, has a NaN max or a NaN sum, so each masked entry is
    exp(-inf - max) / sum = NaN too, where TorchLean's masked entries are exactly 0 whatever the
    row holds (docs/OPS.md). Governs those masked entries; PyTorch's value there is NaN."""
    a = np.asarray(case.inputs[0], dtype=F32)
    mask = np.asarray(case.params.get("mask"), dtype=bool)
    if mask.shape != a.shape or a.size == 0:
        return np.zeros(np.shape(case.out), dtype=bool), np.asarray(case.out, dtype=F32)
    axis = int(case.params.get("axis", -1)) % a.ndim
    m = np.moveaxis(mask, axis, -1)
    with np.errstate(invalid="ignore", over="ignore"):      # a signalling NaN's cast warns
        x = np.moveaxis(np.where(mask, a, F32(-np.inf)), axis, -1).astype(np.float64)
        top = np.max(x, axis=-1, keepdims=True)           # NaN-propagating, as torch's max
        e = np.exp(x - top)
        out = e / np.sum(e, axis=-1, keepdims=True)
    live = m.any(axis=-1, keepdims=True)
    governed = np.moveaxis(live & ~m & np.isnan(out), -1, axis)
    return governed, np.full(a.shape, np.nan, dtype=F32)


def _queries_keys(case):
    """(q, k in float64, the float32 scale PyTorch applies: 1/sqrt(d) unless given), or None
    for a case the attention rules cannot read."""
    q, k = (np.asarray(case.inputs[i], dtype=np.float64) for i in (0, 1))
    if q.ndim not in (2, 3) or k.ndim != q.ndim or q.shape[-1] != k.shape[-1]:
        return None
    scale = case.params.get("scale")
    d = q.shape[-1]
    return q, k, np.float64(F32(1.0 / np.sqrt(d) if d else 1.0) if scale is None else F32(scale))


def _scores(case) -> np.ndarray | None:
    """PyTorch's float32 scores q k^T scale with blocked entries at -inf ([B?, Lq, Lk]), or None
    for a case this rule cannot read."""
    found = _queries_keys(case)
    if found is None:
        return None
    q, k, scale = found
    with np.errstate(invalid="ignore", over="ignore"):
        s = (q @ np.swapaxes(k, -1, -2)) * scale
        s = s.astype(F32)                                  # overflow to -inf, as float32 does
    mask = case.params.get("mask")
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != s.shape:
            return None
        s = np.where(mask, s, F32(-np.inf))
    return s


def attention_neg_inf_row_zero(case):
    """A query row whose scores (after the mask) are all -inf: PyTorch's attention gives it zero
    output and a zero dq (at::_safe_softmax on the math path; the flash and efficient kernels skip
    such a row), where the softmax of only -inf scores is NaN (TorchLean: a fully *blocked* row
    gives zeros, but a row whose participating scores are all -inf has NaN probabilities). Governs
    every element of those rows of the output (case.grad None) and of dq (case.grad 0); either
    zero is PyTorch's (the sign of a sum of zero products is the kernel's)."""
    out = np.asarray(case.out, dtype=F32)
    none = np.zeros(out.shape if case.grad is None else np.shape(case.inputs[0]), dtype=bool)
    if case.grad not in (None, 0):
        return none, np.zeros(none.shape, F32)
    s = _scores(case)
    if s is None or s.shape[-1] == 0:
        return none, np.zeros(none.shape, F32)
    dead = np.all(np.isneginf(s), axis=-1, keepdims=True)  # [B?, Lq, 1]
    governed = np.broadcast_to(dead, none.shape)
    return governed, (np.zeros(none.shape, F32), np.full(none.shape, -0.0, F32))


def _ieee_matmul(a, b):
    """a @ b as IEEE sums of products, every product formed (einsum's own loops: a BLAS may skip
    zero factors, and 0 * inf must be NaN here)."""
    return np.einsum("...ik,...kj->...ij", a, b, optimize=False)


def _formula_probs(case):
    """The probabilities of PyTorch's documented formula (the reference implementation on
    scaled_dot_product_attention's page): the scores q k^T scale in float32, the mask as an
    additive -inf bias (a blocked NaN or +inf score stays NaN), a softmax that propagates NaN,
    and a row of only -inf scores zero (_safe_softmax). Evaluated in float64 and stored in
    float32 (an exp that underflows there is an exact 0). (P, scale, q, k, v), or None for a
    case this rule cannot read."""
    found = _queries_keys(case) if len(case.inputs) >= 3 else None
    if found is None:
        return None
    q, k, scale = found
    v = np.asarray(case.inputs[2], dtype=np.float64)
    if v.ndim != q.ndim or v.shape[:-1] != k.shape[:-1] or k.shape[-2] == 0:
        return None
    mask = case.params.get("mask")
    with np.errstate(all="ignore"):
        raw = (_ieee_matmul(q, np.swapaxes(k, -1, -2)) * scale).astype(F32).astype(np.float64)
        if mask is not None:
            if np.shape(mask) != raw.shape:
                return None
            raw = raw + np.where(np.asarray(mask, bool), 0.0, -np.inf)
        dead = np.all(np.isneginf(raw), axis=-1, keepdims=True)
        top = np.max(raw, axis=-1, keepdims=True)              # NaN-propagating, as torch's max
        e = np.exp(raw - np.where(dead, 0.0, top))
        p = (e / np.sum(e, axis=-1, keepdims=True)).astype(F32).astype(np.float64)
    return np.where(dead, 0.0, p), scale, q, k, v


def attention_blocked_key_nan(case):
    """PyTorch's documented formula multiplies every value row by its probability, a blocked
    key's exact 0 included, and adds the -inf bias to every score: a blocked key whose value holds
    an infinity or a NaN makes the output NaN (0 * inf), and a blocked key whose score is NaN or
    +inf makes the whole row NaN, where TorchLean never reads a blocked key's data (docs/OPS.md).
    A row whose keys are all blocked is no exception: its probabilities are the exact zeros of
    _safe_softmax, still multiplied by every value row (the H100 audit of 2026-12-07f: NaN there,
    where attention_neg_inf_row_zero's kernels that skip such a row give 0; either value is
    PyTorch's, each under its clause). The VJP follows the formula's autograd (dP = g v^T,
    c = sum P dP, dS = P (dP - c)), or the fused kernels' c = g . out from the kernel's own
    output: an element is governed where either gives NaN. Governs the elements where the
    formula, its probabilities in float32 and every product formed, is NaN; PyTorch's value there
    is NaN. (A NaN that only float32 sums overflowing to inf - inf would make is not governed: it
    stays a failure, and finite data in a fully blocked row governs nothing.)"""
    out = np.asarray(case.out, dtype=F32)
    shape = out.shape if case.grad is None else np.shape(case.inputs[case.grad])
    none = np.zeros(shape, dtype=bool), np.full(shape, np.nan, F32)
    found = _formula_probs(case)
    if found is None:
        return none
    p, scale, q, k, v = found
    t = lambda a: np.swapaxes(a, -1, -2)    # noqa: E731
    with np.errstate(all="ignore"):
        if case.grad is None:
            nan = np.isnan(_ieee_matmul(p, v))
        else:
            g = np.asarray(case.g, dtype=np.float64)
            if g.shape != out.shape:
                return none
            if case.grad == 2:                      # dv = P^T g: no c, one way
                nan = np.isnan(_ieee_matmul(t(p), g))
            else:
                dp = _ieee_matmul(g, t(v))
                nan = np.zeros(shape, dtype=bool)
                for c in (np.sum(p * dp, axis=-1, keepdims=True),
                          np.sum(g * np.asarray(out, np.float64), axis=-1, keepdims=True)):
                    ds = p * (dp - c)
                    nan |= np.isnan((_ieee_matmul(ds, k) if case.grad == 0 else
                                     _ieee_matmul(t(ds), q)) * scale)
    return nan.reshape(shape), none[1]
