"""The audit of an accumulating 16-bit kernel (sum, softmax, matmul, linear, log_softmax,
layer_norm, attention: accumulate.py): cases drawn from a run seed the kernel process never sees,
in classes that reach what such kernels get wrong (long rows, where a 16-bit accumulator loses the
sum; values past exp's range without the max shift; cancellation, of a sum, of a bias, of a
variance around a large mean; a variance below layer_norm's eps; special values; an empty row),
each judged element by element and called twice: bits that differ on the same inputs are
`not-repeatable`. A kernel's VJP, when it brings one, is audited after the forward
(audit_vjp.py) and recorded in the same record."""
from __future__ import annotations

import time

import numpy as np

from conformance.lowp import accumulate
from conformance.lowp.formats import Format
from conformance.formats import LOWP_FORMAT
from conformance.lowp.shrink import output_shape
from conformance.lowp.sweep import call_twice, mark_unrepeatable

CASES_PER_CLASS = 3
COUNTEREXAMPLES = 5


def _signed(rng, shape, lo, hi):
    return rng.choice([-1.0, 1.0], shape) * np.exp2(rng.uniform(lo, hi, shape))


def _specials(rng, x, values=(np.nan, np.inf, -np.inf, -0.0)):
    x = x.copy()
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, min(4, flat.size), replace=False)
    flat[picks] = rng.choice(list(values), picks.size)
    return x


def _cancel(rng, m, n):
    v = rng.standard_normal((m, n // 2))
    x = np.concatenate([v, -v, 1e-3 * rng.standard_normal((m, n - 2 * (n // 2)))], axis=1)
    return rng.permuted(x, axis=1)


def _draw_linear(fmt: Format, cls: str, rng) -> list[np.ndarray]:
    k = {"long": 2048, "empty": 0}.get(cls, 64)
    m, n = (4, 4) if cls == "long" else (6, 5)
    if cls == "wide":
        x, w, b = (_signed(rng, s, -12, 12) for s in ((m, k), (n, k), (n,)))
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
        v = _signed(rng, (n_k, d), -12, 12)
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
            a, b = _signed(rng, (m, k), -12, 12), _signed(rng, (k, n), -12, 12)
        else:
            a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        if cls == "special":
            a = _specials(rng, a)
        return [fmt.round(a), fmt.round(b)]
    shape = {"long": (4, 4096 if op == "sum" else 2048), "empty": (3, 0),
             "special": (4, 16)}.get(cls, (8, 64))
    x = {"wide": lambda: _signed(rng, shape, -20, 6),
         "cancellation": lambda: _cancel(rng, *shape),
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


def audit(kernel, seed: int, seed_source: str = "given") -> dict:
    """The audit's record. `kernel` has name, op, fmt, bound_ulps and call_bits(*bits)."""
    fmt = kernel.fmt
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    by_class, reasons, examples, elements = {}, {}, [], 0
    for cls in classes(kernel.op):
        run = failed = 0
        for i in range(CASES_PER_CLASS):
            xs = draw(kernel.op, fmt, cls, rng)
            bits = [fmt.encode(x) for x in xs]
            got_bits, again = call_twice(kernel, bits, output_shape(kernel.op, xs), f"{cls}[{i}]")
            got = fmt.decode(got_bits)
            reason, ref, _ = accumulate.judge(kernel.op, fmt, xs, got, kernel.accumulation)
            mark_unrepeatable(reason, got_bits, again)
            run += 1
            elements += got.size
            bad = reason != ""
            if bad.any():
                failed += 1
                for r, n in zip(*np.unique(reason[bad].astype(str), return_counts=True)):
                    r = str(r)
                    reasons[r] = reasons.get(r, 0) + int(n)
                    if len(examples) < COUNTEREXAMPLES and all(e["reason"] != r for e in examples):
                        at = tuple(int(j) for j in np.argwhere(reason == r)[0])
                        examples.append({"class": cls, "index": i, "element": list(at),
                                         "shapes": [list(x.shape) for x in xs], "reason": r,
                                         "expected": fmt.hex(ref[at]),
                                         "got": f"0x{int(got_bits[at]):04x}",
                                         "got_value": float(got[at]),
                                         "expected_value": float(ref[at]),
                                         "_inputs": xs})   # for the shrinker (replay.py)
        by_class[cls] = {"run": run, "failed": failed}
    failed_cases = sum(c["failed"] for c in by_class.values())
    rec = {"format": LOWP_FORMAT, "kernel": kernel.name, "op": kernel.op, "storage": fmt.name,
           "accumulation": kernel.accumulation, "bound_ulps": kernel.bound_ulps,
           "status": "failed" if failed_cases else "passed",
           "cases": {"total": sum(c["run"] for c in by_class.values()), "failed": failed_cases,
                     "by_class": by_class}, "elements": elements,
           "failure_reasons": reasons, "max_ulps_passing": None, "counterexamples": examples,
           "run": {"seed": seed, "seed_source": seed_source}}
    if getattr(kernel, "vjp", None) is not None:      # its VJP's part (audit_vjp.py)
        from conformance.lowp.audit_vjp import audit_vjp, merge
        merge(rec, audit_vjp(kernel, seed))
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec
