"""Reference for scaled_dot_product_attention: out = P v with P = hard_masked_softmax(q k^T * scale, mask)
over the keys; q [B?, Lq, d], k [B?, Lk, d], v [B?, Lk, dv] (all rank 2, or all rank 3 with equal B),
mask bool [B?, Lq, Lk] or None (all participate), scale rounded to float32 first (None: 1/sqrt(d), 1 for
d = 0). Kind 'composite' for every output.

Hard masks: a false entry has exactly zero weight and is ignored entirely (its score, and k, v, q or g
data used only by blocked entries, even inf or NaN, take no part); a fully blocked query row gives +0
outputs and +0 gradients for q; a key no query attends gets +0 gradients for k and v.

Big batch entries take the certified dd path of fast/attention.py first; an entry with an output it
cannot decide is evaluated exactly as below.

Exact evaluation. Scores s_ij = (q_i . k_j) scale are exact dyadic rationals (integer products), so
e_ij = exp(s_ij - max_i) are exponentials of exact points. mpmath.iv encloses every e_ij and
P_ij = e_ij / sum_l e_il; P is then held as fixed-point integer intervals (centre, radius) at 2^-bits
and every product with q, k, v, g (exact scaled integers) is an exact integer matrix product of centres
and radii. Each output's enclosure is rounded at both ends to float32 and float64; bits doubles (96,
192, ...) until they agree; past 3072 bits (rounding.ziv_many stops at 2560) the centre is rounded:
an exact zero reached by symmetry (duplicate query rows with opposite g, a constant column of k)
has an exactly zero centre, so it comes out as +0 after about 0.4 s at the harness's sizes. A limit of
this path: an output below the 3072-bit resolution (P can be e^-3000) rounds to a zero whose sign is its
centre's, which may be wrong; the certified path of fast/attention.py decides those signs when it can.
Cancellation only costs bits: the VJP writes dP_ij - sum_l P_il dP_il as sum_l P_il (dP_ij - dP_il), whose
centre dP_ij sum_l Pc_il - sum_l Pc_il dP_il and radius |dP_ij| sum_l Pr_il + sum_l Pr_il |dP_il| take
O(Lk) per query row, so 1 - P_max is never formed. Exact results are found exactly where they can be:
with t = exp(2^-L) transcendental (Lindemann), every e_ij is a power of t, so (grouping keys of equal
score) the forward value of a row is rational iff each group's sum of v over its key count is the same
(then it is that ratio, e.g. a single participant gives v exactly), and dS_ij is zero iff every group's
sum of (dP_ij - dP_il) vanishes (e.g. v rows all equal). Any other forward value is transcendental, so
its loop always ends.

Magnitudes (the sum of |terms| of each final expression, dP expanded as the dot product g . v):
- forward out_ik = sum_j P_ij v_jk: sum_j P_ij |v_jk|; terms = the row's participant count.
- dv_jk = sum_i P_ij g_ik: sum_i P_ij |g_ik|; terms = the number of queries attending key j.
- dS_ij = P_ij (dP_ij - sum_l P_il dP_il) has magnitude m_ij = P_ij (|g_i| . |v_j| + sum_l P_il |g_i| . |v_l|);
  dq_i = scale sum_j dS_ij k_j: |scale| sum_j m_ij |k_j|, terms = the row's participants;
  dk_j = scale sum_i dS_ij q_i: |scale| sum_i m_ij |q_i|, terms = the queries attending key j.

Signed zeros: an exact zero out_ik is -0 only when every participating v_jk is -0, dv_jk only when every
g_ik of an attending query is -0; other exact zeros are +0. Special values: a batch whose used data
(q, k, v, g entering some participating term) holds inf or NaN is evaluated by the formula in float64,
still with blocked entries ignored; a row with a NaN or +inf participating score, or only -inf ones,
has NaN probabilities (as hard_masked_softmax), and a -inf score has weight +0.
"""

from __future__ import annotations

import math

import numpy as np
from mpmath import iv
from mpmath.libmp import from_float, from_man_exp, fzero, mpf_lt

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references._common import (
    Reference, ReferenceInputError, f32_grad, f32_inputs, iv_exp, param_f32,
)
from conformance.references.fast import attention as fast_attention

OP = "scaled_dot_product_attention"

_START_BITS = 96
_MAX_BITS = 3072
_GUARD = 16  # extra iv bits: P's relative error stays far under one fixed-point unit


# ---------------------------------------------------------------- arguments


def _checked(inputs, mask, scale):
    q, k, v = f32_inputs(inputs, 3, OP)
    if not (q.ndim == k.ndim == v.ndim and q.ndim in (2, 3)):
        raise ReferenceInputError(f"{OP}: q, k, v must all be rank 2 or all rank 3; got {q.shape}, {k.shape}, {v.shape}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or q.shape[:-2] != k.shape[:-2] \
            or k.shape[:-2] != v.shape[:-2]:
        raise ReferenceInputError(f"{OP}: q {q.shape}, k {k.shape}, v {v.shape} disagree; need equal batch, "
                                  "q[-1] == k[-1] and k[-2] == v[-2]")
    scores_shape = q.shape[:-1] + (k.shape[-2],)
    if mask is None:
        part = np.ones(scores_shape, bool)
    else:
        part = np.asarray(mask)
        if part.dtype != np.bool_ or part.shape != scores_shape:
            raise ReferenceInputError(f"{OP}: mask must be a bool array of shape {scores_shape}, "
                                      f"got {part.dtype} {part.shape}")
    d = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d) if d else 1.0
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not math.isfinite(float(scale)) or not np.isfinite(param_f32(scale)):
        raise ReferenceInputError(f"{OP}: scale must be a finite number (after rounding to float32), got {scale!r}")
    batched = q.ndim == 3
    if not batched:
        q, k, v, part = q[None], k[None], v[None], part[None]
    return q, k, v, part, param_f32(scale), batched


# ---------------------------------------------------------------- fixed-point interval helpers


def _floor(raw, bits: int) -> int:
    """floor(value * 2^bits) of a finite raw mpf."""
    sign, man, exp, _ = raw
    m = -man if sign else man
    sh = exp + bits
    return m << sh if sh >= 0 else m >> -sh


def _ceil(raw, bits: int) -> int:
    sign, man, exp, bc = raw
    return -_floor((1 - sign, man, exp, bc), bits) if man else 0


def _imatmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact product of object (int) matrices; an empty inner extent gives int zeros."""
    if a.shape[-1] == 0:
        return np.zeros(a.shape[:-1] + b.shape[-1:], dtype=object)
    return np.asarray(np.matmul(a, b), dtype=object)


def _iabs(a: np.ndarray) -> np.ndarray:
    return np.asarray(np.abs(a), dtype=object)


def _ints(x: np.ndarray) -> tuple[np.ndarray, int]:
    return rounding.f32_to_scaled_ints(x)


def _same(a: tuple, b: tuple) -> bool:
    return (bool(a[0].view(np.uint32) == b[0].view(np.uint32)) and a[1] == b[1]
            and math.copysign(1.0, a[1]) == math.copysign(1.0, b[1]))


def _round_dyadic(man: int, shift: int, neg_zero: bool) -> tuple:
    return (rounding.round_dyadic_to_f32(man, -shift, neg_zero), rounding.round_dyadic_to_f64(man, -shift, neg_zero))


class _Out:
    """One output under the Ziv loop: value/exact arrays, the indices still undecided, zero signs."""

    def __init__(self, shape, neg_zero=None, preset=None):
        self.value = np.zeros(shape, np.float32)
        self.exact = np.zeros(shape)
        self.neg_zero = np.zeros(shape, bool) if neg_zero is None else neg_zero
        done = np.zeros(shape, bool) if preset is None else preset
        self.todo = [idx for idx in np.ndindex(*shape) if not done[idx]]

    def decide(self, centre, radius, shift, last: bool) -> None:
        """Round [(c - r), (c + r)] 2^-shift at the undecided indices; at the last precision, c 2^-shift."""
        left = []
        for idx in self.todo:
            c, r, z = int(centre[idx]), int(radius[idx]), bool(self.neg_zero[idx])
            lo = _round_dyadic(c - r, shift, z)
            if r == 0 or _same(lo, _round_dyadic(c + r, shift, z)):
                self.value[idx], self.exact[idx] = lo
            elif last:
                self.value[idx], self.exact[idx] = _round_dyadic(c, shift, z)
            else:
                left.append(idx)
        self.todo = left


def _ziv(outs: list, compute) -> None:
    """compute(bits) -> one (centre, radius, shift) per output; doubles bits until every output decides."""
    bits = _START_BITS
    while any(o.todo for o in outs):
        last = bits >= _MAX_BITS
        for o, (c, r, sh) in zip(outs, compute(bits)):
            if o.todo:
                o.decide(c, r, sh, last)
        bits *= 2


# ---------------------------------------------------------------- one batch, exactly


class _Batch:
    """Exact scores and probability enclosures of one batch entry."""

    def __init__(self, q, k, v, part, sc, g=None):
        self.part = part
        self.rows_used, self.cols_used = part.any(axis=1), part.any(axis=0)
        r, c = self.rows_used[:, None], self.cols_used[:, None]
        self.q = np.where(r, q, np.float32(0))  # data no participating term uses is ignored entirely
        self.k = np.where(c, k, np.float32(0))
        self.v = np.where(c, v, np.float32(0))
        self.g = None if g is None else np.where(r, g, np.float32(0))
        self.sc = sc
        arrays = [self.q, self.k, self.v] + ([] if g is None else [self.g])
        self.finite = all(np.all(np.isfinite(a)) for a in arrays)
        self.exact_ready = False

    def prepare_exact(self) -> "_Batch":
        """The exact integers and score groups (costly: only when the certified path leaves something)."""
        if self.exact_ready:
            return self
        self.exact_ready = True
        part, sc, g = self.part, self.sc, self.g
        self.Q, self.sq = _ints(self.q)
        self.K, self.sk = _ints(self.k)
        self.V, self.sv = _ints(self.v)
        if g is not None:
            self.G, self.sg = _ints(self.g)
        sc_ints, self.ssc = _ints(np.array([sc], np.float32))
        self.sc_int = int(sc_ints[0])
        scores = _imatmul(self.Q, self.K.T) * self.sc_int
        self.s_shift = self.sq + self.sk + self.ssc
        # per used row: participants J and groups {score - max: [keys]}
        self.rows = []
        for i in np.flatnonzero(self.rows_used):
            js = np.flatnonzero(part[i])
            s = [int(scores[i, j]) for j in js]
            top = max(s)
            groups: dict[int, list[int]] = {}
            for j, sj in zip(js.tolist(), s):
                groups.setdefault(sj - top, []).append(j)
            self.rows.append((int(i), js, groups))
        self._cache: dict[int, tuple] = {}
        return self

    def probs(self, bits: int):
        """(Pc, Pr): P_ij in [(Pc - Pr), (Pc + Pr)] 2^-(bits+1), object ints, 0 where blocked."""
        if bits in self._cache:
            return self._cache[bits]
        shape = self.part.shape
        pc, pr = np.zeros(shape, dtype=object), np.zeros(shape, dtype=object)
        # e^d below 2^-(bits + _GUARD + 64) only ever widens a probability's floor/ceil at 2^-bits
        # by one unit, as its exact enclosure would: [0, that power] encloses it as well, and
        # mpmath's exp of a score difference of 10^30 costs seconds (the composite regimes draw them)
        floor_exp = from_man_exp(1, -(bits + _GUARD + 64))
        cut = from_float(-((bits + _GUARD + 64) * math.log(2) + 1))   # e^cut < that power
        with rounding.iv_precision(bits + _GUARD):
            for i, _, groups in self.rows:
                es = {}
                for dval in groups:
                    raw = from_man_exp(dval, -self.s_shift)
                    if dval == 0:
                        es[dval] = iv.mpf(1)
                    elif mpf_lt(raw, cut):
                        es[dval] = iv.make_mpf((fzero, floor_exp))
                    else:
                        es[dval] = iv_exp(iv, iv.make_mpf((raw, raw)))
                total = iv.mpf(0)
                for dval, js in groups.items():
                    total += len(js) * es[dval]
                for dval, js in groups.items():
                    lo, hi = (es[dval] / total)._mpi_
                    a, b = _floor(lo, bits), _ceil(hi, bits)
                    for j in js:
                        pc[i, j], pr[i, j] = a + b, b - a
        self._cache[bits] = (pc, pr)
        return pc, pr

    def probs64(self) -> np.ndarray:
        pc, _ = self.probs(_START_BITS)
        return np.array([[math.ldexp(int(x), -(_START_BITS + 1)) for x in row] for row in pc]).reshape(pc.shape)


# ---------------------------------------------------------------- IEEE formula for special batches


def _ieee_probs(q, k, part, sc):
    with np.errstate(all="ignore"):
        s = np.einsum("id,jd->ij", q.astype(np.float64), k.astype(np.float64)) * float(sc)
        if q.shape[-1] == 0:
            s = np.zeros(part.shape)
        p = np.zeros(part.shape)
        for i in range(part.shape[0]):
            js = part[i]
            if not js.any():
                continue
            x = s[i, js]
            if np.any(np.isnan(x)) or np.any(np.isposinf(x)) or np.all(np.isneginf(x)):
                p[i, js] = np.nan
                continue
            e = np.exp(x - x.max())
            p[i, js] = e / e.sum()
    return p


def _masked_sum(weights, data, part, axis_out):
    """sum over the masked axis of weights * data with blocked terms dropped (NaN data there too)."""
    with np.errstate(all="ignore"):
        if axis_out == "rows":  # sum_j w_ij data_jc -> [i, c]
            t = weights[:, :, None] * data[None, :, :]
            return np.where(part[:, :, None], t, 0.0).sum(axis=1)
        t = weights[:, :, None] * data[:, None, :]  # sum_i w_ij data_ic -> [j, c]
        return np.where(part[:, :, None], t, 0.0).sum(axis=0)


def _ieee_forward(q, k, v, part, sc):
    p = _ieee_probs(q, k, part, sc)
    v64 = v.astype(np.float64)
    return _masked_sum(p, v64, part, "rows"), _masked_sum(p, np.abs(v64), part, "rows")


def _ieee_vjp(q, k, v, part, sc, g):
    p = _ieee_probs(q, k, part, sc)
    q64, k64, v64, g64 = (a.astype(np.float64) for a in (q, k, v, g))
    with np.errstate(all="ignore"):
        dp = np.where(part, np.einsum("ic,jc->ij", g64, v64), 0.0)
        mdp = np.where(part, np.einsum("ic,jc->ij", np.abs(g64), np.abs(v64)), 0.0)
        ds = np.where(part, p * (dp - np.where(part, dp * p, 0.0).sum(axis=1, keepdims=True)), 0.0)
        mds = np.where(part, p * (mdp + np.where(part, mdp * p, 0.0).sum(axis=1, keepdims=True)), 0.0)
    sc = float(sc)
    dq, dk, dv = (sc * _masked_sum(ds, k64, part, "rows"), sc * _masked_sum(ds, q64, part, "cols"),
                  _masked_sum(p, g64, part, "cols"))
    mags = (abs(sc) * _masked_sum(mds, np.abs(k64), part, "rows"),
            abs(sc) * _masked_sum(mds, np.abs(q64), part, "cols"), _masked_sum(p, np.abs(g64), part, "cols"))
    return (dq, dk, dv), mags


def _fill_ieee(value, exact, b, x):
    exact[b] = x
    value[b] = rounding.round_f64_to_f32(x)


# ---------------------------------------------------------------- forward


def _forward_batch(bt: _Batch):
    lq, dv = bt.part.shape[0], bt.v.shape[1]
    neg_zero = np.zeros((lq, dv), bool)
    preset = np.ones((lq, dv), bool)  # fully blocked rows: +0
    value, exact = np.zeros((lq, dv), np.float32), np.zeros((lq, dv))
    v_neg0 = (bt.v == 0) & np.signbit(bt.v)
    for i, js, groups in bt.rows:
        neg_zero[i] = np.all(v_neg0[js], axis=0)
        preset[i] = False
        sums = [(len(members), np.sum(bt.V[members], axis=0)) for members in groups.values()]
        n0, c0 = sums[0]
        for col in range(dv):
            if all(c[col] * n0 == c0[col] * n for n, c in sums[1:]):  # rational: c0 / n0 exactly
                num, den = int(c0[col]), n0 << bt.sv
                value[i, col] = rounding.round_ratio_to_f32(num, den, bool(neg_zero[i, col]))
                exact[i, col] = rounding.round_ratio_to_f64(num, den, bool(neg_zero[i, col]))
                preset[i, col] = True
    out = _Out((lq, dv), neg_zero, preset)
    vabs = _iabs(bt.V)

    def compute(bits):
        pc, pr = bt.probs(bits)
        return [(_imatmul(pc, bt.V), _imatmul(pr, vabs), bits + 1 + bt.sv)]

    _ziv([out], compute)
    value = np.where(preset, value, out.value)
    exact = np.where(preset, exact, out.exact)
    magnitude = bt.probs64() @ np.abs(bt.v.astype(np.float64))
    return value, exact, magnitude


def forward(inputs, *, mask=None, scale=None):
    q, k, v, part, sc, batched = _checked(inputs, mask, scale)
    shape = q.shape[:-1] + (v.shape[-1],)
    value, exact, magnitude = np.zeros(shape, np.float32), np.zeros(shape), np.zeros(shape)
    slow = 0
    for b in range(q.shape[0]):
        bt = _Batch(q[b], k[b], v[b], part[b], sc)
        if bt.finite:
            got = _fast_forward(bt)
            if got is None:
                value[b], exact[b], magnitude[b] = _forward_batch(bt.prepare_exact())
                slow += value[b].size
            else:
                value[b], exact[b], magnitude[b] = got
        else:
            x, magnitude[b] = _ieee_forward(q[b], k[b], v[b], part[b], sc)
            _fill_ieee(value, exact, b, x)
    terms = np.broadcast_to(part.sum(axis=-1)[..., None], shape).astype(np.int64)
    if not batched:
        value, exact, magnitude, terms = value[0], exact[0], magnitude[0], terms[0]
    return Reference(value, exact, magnitude, terms, "composite", slow)


def _as64(bt: _Batch, *names):
    return [getattr(bt, n).astype(np.float64) for n in names]


def _fast_forward(bt: _Batch):
    """(value, exact, magnitude) by the certified dd path (fast/attention.py), or None when some output
    is left undecided (then the whole batch entry takes the exact path)."""
    if not fast_paths.enabled() or bt.part.size == 0:
        return None
    q, k, v = _as64(bt, "q", "k", "v")
    pr = fast_attention.Probs(q, k, bt.part, float(bt.sc))
    v32, v64, done = fast_attention.forward(q, k, v, bt.part, float(bt.sc), pr)
    if not done.all():
        return None
    return v32, v64, pr.p.hi @ np.abs(v)  # the magnitude from the dd probabilities


def _fast_vjp(bt: _Batch):
    """[(value, exact) of dq, dk, dv] and their magnitudes by the certified dd path, or None."""
    if not fast_paths.enabled() or bt.part.size == 0:
        return None
    q, k, v, g = _as64(bt, "q", "k", "v", "g")
    pr = fast_attention.Probs(q, k, bt.part, float(bt.sc))
    outs = fast_attention.vjp(q, k, v, g, bt.part, float(bt.sc), pr)
    if not all(ok.all() for _, _, ok in outs):
        return None
    return [(a, b) for a, b, _ in outs], _vjp_magnitudes(bt, pr.p.hi)


def _vjp_magnitudes(bt: _Batch, p64: np.ndarray):
    g64, v64, k64, q64 = (np.abs(a.astype(np.float64)) for a in (bt.g, bt.v, bt.k, bt.q))
    mdp = g64 @ v64.T
    mds = p64 * (mdp + (p64 * mdp).sum(axis=1, keepdims=True))
    s = abs(float(bt.sc))
    return (s * (mds @ k64), s * (mds.T @ q64), p64.T @ g64)


# ---------------------------------------------------------------- VJP


def _vjp_batch(bt: _Batch):
    part = bt.part
    lq, lk = part.shape
    d, dv = bt.q.shape[1], bt.v.shape[1]
    dp = _imatmul(bt.G, bt.V.T)  # exact g_i . v_j at 2^-(sg + sv)
    # dS_ij = P_ij B_ij, B_ij = sum_l P_il (dP_ij - dP_il): exactly zero iff each score group's sum of
    # (dP_ij - dP_il) is (module docstring); the enclosure below would only straddle it
    zero_b = np.ones(part.shape, bool)
    for i, js, groups in bt.rows:
        # B_ij = 0 iff dP_ij equals the mean of dP over every group: only where all group means agree
        sums = [(len(m), sum(int(dp[i, j]) for j in m)) for m in groups.values()]
        n0, s0 = sums[0]
        agree = all(s * n0 == s0 * n for n, s in sums[1:])
        for j in js:
            zero_b[i, j] = agree and int(dp[i, j]) * n0 == s0
    g_neg0 = (bt.g == 0) & np.signbit(bt.g)
    dv_neg0 = np.array([[bool(np.all(g_neg0[part[:, j], c])) if part[:, j].any() else False
                         for c in range(dv)] for j in range(lk)], dtype=bool).reshape(lk, dv)
    outs = [_Out((lq, d)), _Out((lk, d)), _Out((lk, dv), dv_neg0)]
    k_abs, q_abs, g_abs = _iabs(bt.K), _iabs(bt.Q), _iabs(bt.G)
    sc, sc_abs = bt.sc_int, abs(bt.sc_int)

    def compute(bits):
        pc, pr = bt.probs(bits)
        bc, br = np.zeros(part.shape, dtype=object), np.zeros(part.shape, dtype=object)
        for i, js, _ in bt.rows:
            # B_ij = sum_l P_il (dP_ij - dP_il): centre dP_ij sum_l Pc_il - sum_l Pc_il dP_il (the same
            # integer as summing the differences, so symmetric data still gives an exactly zero
            # centre), radius |dP_ij| sum_l Pr_il + sum_l Pr_il |dP_il| (>= sum_l Pr_il |dP_ij - dP_il|);
            # O(Lk) per row
            dpr = [int(b) for b in dp[i, js]]
            pcs, prs = [int(a) for a in pc[i, js]], [int(a) for a in pr[i, js]]
            p_sum, w_sum = sum(pcs), sum(a * b for a, b in zip(pcs, dpr))
            r_sum, v_sum = sum(prs), sum(a * abs(b) for a, b in zip(prs, dpr))
            for a, j in enumerate(js):
                if not zero_b[i, j]:
                    bc[i, j], br[i, j] = dpr[a] * p_sum - w_sum, abs(dpr[a]) * r_sum + v_sum
        sc_c = pc * bc
        sc_r = pc * br + pr * _iabs(bc) + pr * br
        shift = 2 * (bits + 1) + bt.sg + bt.sv
        return [(_imatmul(sc_c, bt.K) * sc, _imatmul(sc_r, k_abs) * sc_abs, shift + bt.sk + bt.ssc),
                (_imatmul(sc_c.T, bt.Q) * sc, _imatmul(sc_r.T, q_abs) * sc_abs, shift + bt.sq + bt.ssc),
                (_imatmul(pc.T, bt.G), _imatmul(pr.T, g_abs), bits + 1 + bt.sg)]

    _ziv(outs, compute)
    return [(o.value, o.exact) for o in outs], _vjp_magnitudes(bt, bt.probs64())


def vjp(inputs, grad_out, *, mask=None, scale=None):
    q, k, v, part, sc, batched = _checked(inputs, mask, scale)
    g = f32_grad(grad_out, (q if batched else q[0]).shape[:-1] + (v.shape[-1],), OP)
    g = g if batched else g[None]
    shapes = (q.shape, k.shape, v.shape)
    values = [np.zeros(s, np.float32) for s in shapes]
    exacts = [np.zeros(s) for s in shapes]
    mags = [np.zeros(s) for s in shapes]
    slow = 0
    for b in range(q.shape[0]):
        bt = _Batch(q[b], k[b], v[b], part[b], sc, g[b])
        if bt.finite:
            got = _fast_vjp(bt)
            if got is None:
                results, m = _vjp_batch(bt.prepare_exact())
                slow += sum(a.size for a, _ in results)
            else:
                results, m = got
            for n, (val, ex) in enumerate(results):
                values[n][b], exacts[n][b], mags[n][b] = val, ex, m[n]
        else:
            xs, m = _ieee_vjp(q[b], k[b], v[b], part[b], sc, g[b])
            for n in range(3):
                _fill_ieee(values[n], exacts[n], b, xs[n])
                mags[n][b] = m[n]
    rows = part.sum(axis=-1)  # participants per query
    cols = part.sum(axis=-2)  # queries per key
    terms = (np.broadcast_to(rows[..., None], q.shape), np.broadcast_to(cols[..., None], k.shape),
             np.broadcast_to(cols[..., None], v.shape))
    refs = []
    for n in range(3):
        t = terms[n].astype(np.int64)
        val, ex, mg = values[n], exacts[n], mags[n]
        if not batched:
            val, ex, mg, t = val[0], ex[0], mg[0], t[0]
        refs.append(Reference(val, ex, mg, t, "composite", slow if n == 0 else 0))
    return tuple(refs)
