"""Reference for log_softmax along `axis`: y_i = a_i - max - log(sum_j exp(a_j - max)), evaluated exactly as
(a_i - max) - log1p(R) (R the sum without the max entry) and rounded once. Kind 'composite', magnitude
|a_i - max| + log(sum), terms n. VJP g_i - exp(y_i) sum_j g_j, magnitude |g_i| + s_i sum_j |g_j|.

Special rows as softmax: NaN or +inf entry, or all -inf, gives a NaN row; a -inf entry gives -inf (and
gradient g_i exactly). A row whose g holds inf or NaN is evaluated by the formula in float64.
"""

import numpy as np
from mpmath.libmp import from_float, fzero, mpf_add, mpf_neg, mpf_sub

from conformance import rounding
from conformance.references._common import Reference, f32_grad, f32_inputs, iv_add_exact, iv_log1p
from conformance.references.softmax import iv_softmax, row_is_nan, softmax_rows, to_rows

OP = "log_softmax"


def _forward_rows(rows):
    value, exact = np.full(rows.shape, -np.inf, np.float32), np.full(rows.shape, -np.inf)
    with np.errstate(all="ignore"):
        m = np.max(rows, axis=-1, keepdims=True) if rows.shape[-1] else np.zeros(rows.shape[:-1] + (1,))
        magnitude = np.abs(rows - m) + np.abs(np.log(np.sum(np.exp(rows - m), axis=-1, keepdims=True)))
    for r, x in enumerate(rows):
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
    return value, exact, magnitude


def forward(inputs, *, axis=-1):
    (a,) = f32_inputs(inputs, 1, OP)
    rows, back = to_rows(a, axis, OP)
    value, exact, magnitude = _forward_rows(rows)
    return Reference(back(value), back(exact), back(magnitude), rows.shape[-1], "composite")


def vjp(inputs, grad_out, *, axis=-1):
    (a,) = f32_inputs(inputs, 1, OP)
    g = f32_grad(grad_out, a.shape, OP)
    rows, back = to_rows(a, axis, OP)
    g_rows, _ = to_rows(g, axis, OP)
    _, s = softmax_rows(rows, np.ones(rows.shape, bool))
    with np.errstate(all="ignore"):
        ieee = g_rows - s * g_rows.sum(axis=-1, keepdims=True)
        magnitude = np.abs(g_rows) + s * np.abs(g_rows).sum(axis=-1, keepdims=True)
    value, exact = rounding.round_f64_to_f32(ieee), ieee.copy()
    for r, (x, gr) in enumerate(zip(rows, g_rows)):
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
    return (Reference(back(value), back(exact), back(magnitude), rows.shape[-1], "composite"),)
