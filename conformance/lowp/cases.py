"""The cases of the accumulating 16-bit ops' audits (audit.py, and audit_vjp.py for their VJPs):
the classes of each op and a case of each class, drawn from a generator of the run seed (the
kernel process never sees it)."""
from __future__ import annotations

import numpy as np

from conformance.lowp.formats import Format

CASES_PER_CLASS = 3
COUNTEREXAMPLES = 5


def signed(rng, shape, lo, hi):
    return rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(lo, hi, shape))


def _specials(rng, x, values=(np.nan, np.inf, -np.inf, -0.0)):
    x = x.copy()
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, min(4, flat.size), replace=False)
    flat[picks] = rng.choice(list(values), picks.size)
    return x


def cancel(rng, m, n):
    v = rng.standard_normal((m, n // 2))
    x = np.concatenate([v, -v, 1e-3 * rng.standard_normal((m, n - 2 * (n // 2)))], axis=1)
    return rng.permuted(x, axis=1)


def _draw_linear(fmt: Format, cls: str, rng) -> list[np.ndarray]:
    k = {"long": 2048, "empty": 0}.get(cls, 64)
    m, n = (4, 4) if cls == "long" else (6, 5)
    if cls == "wide":
        x, w, b = (signed(rng, s, -12, 12) for s in ((m, k), (n, k), (n,)))
    else:
        x, w, b = rng.standard_normal((m, k)), rng.standard_normal((n, k)), rng.standard_normal(n)
    if cls == "special":
        x = _specials(rng, x)
    x, w = fmt.round(x), fmt.round(w)
    if cls == "cancellation":
        # the bias cancels row 0's products to within their rounding: a kernel that rounds
        # x w^T to the format before adding the bias returns 0 where the exact result is not
        b = -(x[0] @ w.T)
    return [x, w, fmt.round(b)]


def _draw_attention(fmt: Format, cls: str, rng) -> list[np.ndarray]:
    """q (L, d), k (S, d), v (S, d): the value width equals d, as fused kernels require."""
    n_q, n_k, d = {"long": (4, 1024, 64), "large": (8, 64, 16)}.get(cls, (8, 64, 32))
    q, k, v = (rng.standard_normal(s) for s in ((n_q, d), (n_k, d), (n_k, d)))
    if cls == "large":
        # each query's own key among the keys: scores |q|^2 / 4 >= 144, past exp's float32 range
        q = rng.choice([-1.0, 1.0], (n_q, d)) * rng.uniform(6, 10, (n_q, d))
        k = rng.choice([-1.0, 1.0], (n_k, d)) * rng.uniform(6, 10, (n_k, d))
        k[rng.choice(n_k, n_q, replace=False)] = q
    elif cls == "wide":
        v = signed(rng, (n_k, d), -12, 12)
    elif cls == "special":
        # NaN poisons what it reaches; an infinity's result hangs on weights that underflow
        q, k, v = (_specials(rng, t, (np.nan, -0.0)) for t in (q, k, v))
    return [fmt.round(q), fmt.round(k), fmt.round(v)]


def draw(op: str, fmt: Format, cls: str, rng) -> list[np.ndarray]:
    """One case: the inputs as float64 values of the format."""
    if op == "linear":
        return _draw_linear(fmt, cls, rng)
    if op == "attention":
        return _draw_attention(fmt, cls, rng)
    big = 1000.0 if fmt.max_finite > 1000 else 8.0
    if op == "matmul":
        k = {"long": 2048, "empty": 0}.get(cls, 64)
        m, n = (4, 4) if cls == "long" else (6, 5)
        if cls == "wide":
            a, b = signed(rng, (m, k), -12, 12), signed(rng, (k, n), -12, 12)
        else:
            a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        if cls == "special":
            a = _specials(rng, a)
        return [fmt.round(a), fmt.round(b)]
    shape = {"long": (4, 4096 if op == "sum" else 2048), "empty": (3, 0),
             "special": (4, 16)}.get(cls, (8, 64))
    x = {"wide": lambda: signed(rng, shape, -20, 6),
         "cancellation": lambda: cancel(rng, *shape),
         "large": lambda: rng.uniform(-big, big, shape),
         # a mean of 32 to 128 and a spread of 4: E[x^2] - E[x]^2 cancels 6 to 10 bits
         "offset": lambda: (rng.choice([-1.0, 1.0], shape[:1] + (1,)) *
                            np.exp2(rng.uniform(5, 7, shape[:1] + (1,))) +
                            4 * rng.standard_normal(shape)),
         # a variance near 1e-6, below layer_norm's eps: the eps decides the scale
         "small": lambda: 1e-3 * rng.standard_normal(shape)}.get(
             cls, lambda: rng.standard_normal(shape))()
    if cls == "special":
        x = _specials(rng, x)
    return [fmt.round(x)]


def classes(op: str) -> tuple[str, ...]:
    return {"sum": ("normal", "long", "wide", "cancellation", "special", "empty"),
            "softmax": ("normal", "long", "wide", "large", "special"),
            "matmul": ("normal", "long", "wide", "special", "empty"),
            "linear": ("normal", "long", "wide", "cancellation", "special", "empty"),
            "log_softmax": ("normal", "long", "wide", "large", "special"),
            "layer_norm": ("normal", "long", "wide", "offset", "small", "special"),
            "attention": ("normal", "long", "wide", "large", "special")}[op]
