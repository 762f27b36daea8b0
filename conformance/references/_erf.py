"""Rigorous interval enclosures of erf and erfc for the Ziv loop (mpmath.iv has neither: its
`iv.erf` raises), used by the references of erf and gelu_erf.

- erf(x) = (2 / sqrt(pi)) x e^(-x^2) sum_{n >= 0} (2x^2)^n / (1 3 5 ... (2n + 1))   (DLMF 7.6.2)
  Every term is positive, so the sum has no cancellation. The ratio of term n + 1 to term n is
  2x^2 / (2n + 3), falling with n; once it is below 1 the tail after term n is at most
  t_n r / (1 - r) with r the next ratio (a geometric series dominates it). The sum stops when the
  term is below 2^-(prec + 8) of the partial sum and the tail bound is added as [0, tail].
- erfc(w), w > 0, from the asymptotic expansion (DLMF 7.12.1)
      erfc(w) = e^(-w^2) / (sqrt(pi) w) (sum_{m < N} (-1)^m (2m - 1)!! / (2w^2)^m + R_N),
  whose remainder, for real w > 0, is bounded in magnitude by the first neglected term (DLMF
  7.12(i)): R_N is enclosed as [-|t_N|, |t_N|]. Its terms shrink while (2m + 1) < 2w^2, to
  about e^(-w^2), so it is used where a term falls below the working precision first;
  elsewhere erfc(w) = 1 - erf(w), whose cancellation costs about 1.44 w^2 bits that the Ziv
  loop's doubling precision pays.
"""
from __future__ import annotations

from conformance.references._common import iv_exp


def iv_erf_series(ctx, x):
    """erf(x) for an interval x of one sign (a point in practice), by DLMF 7.6.2 (module
    docstring); the enclosure is rigorous at every precision, and tight for |x| <= 6."""
    x2 = x * x
    two_x2 = 2 * x2
    two_x2_hi = ctx.mpf(two_x2.b)
    term = ctx.mpf(1)
    total = ctx.mpf(1)
    eps = ctx.mpf(2) ** -(ctx.prec + 8)
    n = 0
    while True:
        n += 1
        term = term * two_x2 / (2 * n + 1)
        total = total + term
        ratio = two_x2_hi / (2 * n + 3)          # the next term over this one, at most
        if ratio.b < 1 and term.b <= (eps * total).a:
            tail = term * ratio / (1 - ratio)
            total = total + ctx.mpf([0, tail.b])
            break
    return 2 / ctx.sqrt(ctx.pi) * x * iv_exp(ctx, -x2) * total


def iv_erfc_asymptotic(ctx, w):
    """(erfc(w), converged) for an interval w >= 1 by DLMF 7.12.1 with its remainder enclosed
    (DLMF 7.12(i)). `converged`: the first neglected term is below 2^-(prec + 8), so the
    remainder adds nothing at this precision; otherwise the terms began to grow first and the
    enclosure is only as tight as the smallest term (about e^-w^2 relative)."""
    two_w2 = 2 * w * w
    term = ctx.mpf(1)
    total = ctx.mpf(1)
    eps = ctx.mpf(2) ** -(ctx.prec + 8)
    m = 0
    while True:
        m += 1
        nxt = -term * (2 * m - 1) / two_w2
        converged = abs(nxt).b <= eps.a
        # stop at the first neglected term once it is negligible or about to grow
        if converged or ((2 * m + 1) / two_w2).a >= 1:
            bound = abs(nxt).b
            total = total + ctx.mpf([-bound, bound])
            break
        term = nxt
        total = total + term
    return iv_exp(ctx, -w * w) / (ctx.sqrt(ctx.pi) * w) * total, converged


def iv_erfc(ctx, w):
    """erfc(w) for an interval w > 0: the asymptotic expansion where it converges at this
    precision, else 1 - erf(w) (whose cancellation the Ziv loop pays in precision)."""
    if w.a >= 4:
        asym, converged = iv_erfc_asymptotic(ctx, w)
        if converged:
            return asym
    return 1 - iv_erf_series(ctx, w)
