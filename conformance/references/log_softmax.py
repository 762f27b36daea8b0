"""Reference for log_softmax along `axis`: y_i = a_i - max - log(sum_j exp(a_j - max)), evaluated exactly as
(a_i - max) - log1p(R) (R the sum without the max entry) and rounded once. Kind 'composite', magnitude
|a_i - max| + log(sum), terms n. VJP g_i - exp(y_i) sum_j g_j, magnitude |g_i| + s_i sum_j |g_j|.

Big inputs take the certified dd path of fast/rows.py first, as softmax does.

Special rows as softmax: NaN or +inf entry, or all -inf, gives a NaN row; a -inf entry gives -inf (and
gradient g_i exactly). A row whose g holds inf or NaN is evaluated by the formula in float64.
"""

import numpy as np
from mpmath.libmp import from_float, fzero, mpf_add, mpf_neg, mpf_sub

from conformance import rounding
from conformance.references import fast as fast_paths
from conformance.references._common import Reference, f32_grad, f32_inputs, iv_add_exact, iv_log1p
from conformance.references.fast import rows as fast_rows
from conformance.references.softmax import iv_softmax, row_is_nan, softmax_rows_counted, to_rows

OP = "log_softmax"


_FAST_MIN = 256  # below this many entries the exact row loop is cheap


def _magnitude(rows):
    with np.errstate(all="ignore"):
        m = np.max(rows, axis=-1, keepdims=True) if rows.shape[-1] else np.zeros(rows.shape[:-1] + (1,))
        return np.abs(rows - m) + np.abs(np.log(np.sum(np.exp(rows - m), axis=-1, keepdims=True)))


def _forward_rows(rows):
    """(value32, exact64, magnitude64, slow): the certified dd path (fast/rows.py) for big inputs, then
    intervals with the row's dd enclosure of R per undecided element, then this module's exact row."""
    magnitude = _magnitude(rows)
    if not (fast_paths.enabled() and rows.size >= _FAST_MIN):
        return (*_exact_rows(rows, range(rows.shape[0])), magnitude, 0)
    st = fast_rows.Rows(rows, np.ones(rows.shape, bool))
    v32, v64, done = fast_rows.log_softmax(st)
    value, exact = np.full(rows.shape, -np.inf, np.float32), np.full(rows.shape, -np.inf)
    value[st.nan_row], exact[st.nan_row] = np.nan, np.nan
    value.reshape(-1)[st.idx], exact.reshape(-1)[st.idx] = v32, v64
    left, slow = set(), 0
    for j in np.flatnonzero(~done):
        slow += 1
        got = fast_rows.log_softmax_element(st, j)
        r, c = divmod(int(st.idx[j]), rows.shape[1])
        if got is None:
            left.add(r)
        else:
            value[r, c], exact[r, c] = got
    if left:
        lv, le = _exact_rows(rows, sorted(left))
        for r in left:
            value[r], exact[r] = lv[r], le[r]
            slow += rows.shape[1]
    return value, exact, magnitude, slow


def _exact_rows(rows, which):
    value, exact = np.full(rows.shape, -np.inf, np.float32), np.full(rows.shape, -np.inf)
    for r in which:
        x = rows[r]
        if not x.size:
            continue
        if row_is_nan(x):
            value[r], exact[r] = np.nan, np.nan
            continue
        live = np.flatnonzero(np.isfinite(x))
        k = int(np.argmax(x[live]))

        diffs = [mpf_sub(from_float(v), from_float(x[live][k]), 0) for v in x[live]]  # exact a_i - max

        def logs(ctx, *xs):
            log_sum = iv_log1p(ctx, iv_softmax(ctx, xs, k)[2])
            return [iv_add_exact(ctx, d, -log_sum) for d in diffs]

        value[r, live], exact[r, live] = rounding.ziv_many(logs, *x[live])
    return value, exact


def forward(inputs, *, axis=-1):
    (a,) = f32_inputs(inputs, 1, OP)
    rows, back = to_rows(a, axis, OP)
    value, exact, magnitude, slow = _forward_rows(rows)
    return Reference(back(value), back(exact), back(magnitude), rows.shape[-1], "composite", slow)


def vjp(inputs, grad_out, *, axis=-1):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    rows, back = to_rows(a, axis, OP)
    g_rows, _ = to_rows(g, axis, OP)
    _, s, _ = softmax_rows_counted(rows, np.ones(rows.shape, bool))
    with np.errstate(all="ignore"):
        ieee = g_rows - s * g_rows.sum(axis=-1, keepdims=True)
        magnitude = np.abs(g_rows) + s * np.abs(g_rows).sum(axis=-1, keepdims=True)
    value, exact = rounding.round_f64_to_f32(ieee), ieee.copy()
    which, slow = range(rows.shape[0]), 0
    if fast_paths.enabled() and rows.size >= _FAST_MIN:
        st = fast_rows.Rows(rows, np.ones(rows.shape, bool))
        normal = ~st.nan_row & np.all(np.isfinite(g_rows), axis=1) & (rows.shape[1] > 0)
        v32, v64, done, zero = fast_rows.log_softmax_vjp(st, rows, g_rows, normal)
        sign = np.signbit(ieee.reshape(-1)[st.idx])
        v32 = np.where(zero, np.where(sign, np.float32(-0.0), np.float32(0.0)), v32)
        v64 = np.where(zero, np.where(sign, -0.0, 0.0), v64)
        keep = normal[st.row]
        value.reshape(-1)[st.idx[keep]], exact.reshape(-1)[st.idx[keep]] = v32[keep], v64[keep]
        value[st.nan_row], exact[st.nan_row] = np.nan, np.nan
        which = sorted(set(st.row[keep & ~done & ~zero].tolist()))
        slow = len(which) * rows.shape[1]
    _exact_vjp_rows(rows, g_rows, ieee, value, exact, which)
    return (Reference(back(value), back(exact), back(magnitude), rows.shape[-1], "composite", slow),)


def _exact_vjp_rows(rows, g_rows, ieee, value, exact, which):
    for r in which:
        x, gr = rows[r], g_rows[r]
        if not x.size:
            continue
        if row_is_nan(x):
            value[r], exact[r] = np.nan, np.nan
            continue
        if not np.all(np.isfinite(gr)):
            continue  # the float64 formula already stands there
        live = np.flatnonzero(np.isfinite(x))  # -inf entries: s = 0, the formula gives g_i exactly
        n, k = len(live), int(np.argmax(x[live]))

        # exact dyadic parts: g_i for every entry, and G - g_max (the max entry's s is 1 - R/D)
        g_raw = [from_float(v) for v in gr]
        rest_k = fzero
        for j, v in enumerate(g_raw):
            rest_k = rest_k if j == live[k] else mpf_add(rest_k, v, 0)

        def grad(ctx, *args):
            # g_i - s_i G; for the max entry -(G - g_k) + (R / D) G, so 1 - s_k never cancels
            s, _, r, d = iv_softmax(ctx, args[:n], k)
            total = ctx.mpf(0)
            for gj in args[n:]:
                total += gj
            out = [iv_add_exact(ctx, g_raw[i], -(s[j] * total)) for j, i in enumerate(live)]
            out[k] = iv_add_exact(ctx, mpf_neg(rest_k), (r / d) * total)
            return out

        v32, v64 = rounding.ziv_many(grad, *x[live], *gr, negative_zero=list(np.signbit(ieee[r, live])))
        value[r, live], exact[r, live] = v32, v64
