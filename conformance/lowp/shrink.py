"""Shrinking a failing case of an accumulating 16-bit kernel (accumulate.py's ops) to a small one
that fails for the same reason at the same output element, as the campaign's shrinker does for
float32 capsules: first only what that element reads (its row, its column of the second operand),
then the reduction's terms deleted in halves, quarters, ... while the failure stands (ddmin).
Every candidate is called twice through the kernel (its kernel process for a plugin's) and judged
by accumulate.judge: the shrunk case is a verdict of this harness, not of the kernel."""
from __future__ import annotations

import numpy as np

from conformance.lowp import accumulate
from conformance.lowp.sweep import call_twice, mark_unrepeatable

TRIES = 200       # candidate cases judged at most, per shrink

# Per op, the (input, axis) pairs that run along the reduced dimension: deleted together.
REDUCED = {"sum": [(0, 1)], "softmax": [(0, 1)], "log_softmax": [(0, 1)],
           "layer_norm": [(0, 1)], "matmul": [(0, 1), (1, 0)], "linear": [(0, 1), (1, 1)],
           "attention": [(1, 0), (2, 0)]}
ROW_WISE = ("softmax", "log_softmax", "layer_norm")     # the element's own column stays


def output_shape(op: str, xs: list[np.ndarray]) -> tuple:
    if op == "sum":
        return xs[0].shape[:-1]
    if op == "matmul":
        return (xs[0].shape[0], xs[1].shape[1])
    if op == "linear":
        return (xs[0].shape[0], xs[1].shape[0])
    if op == "attention":
        return (xs[0].shape[0], xs[2].shape[1])
    return xs[0].shape


def restrict(op: str, xs: list[np.ndarray], element: tuple) -> tuple[list[np.ndarray], tuple]:
    """Only the inputs output `element` reads, and its index in their result."""
    i = element[0]
    if op == "sum":
        return [xs[0][i:i + 1]], (0,)
    if op in ROW_WISE:
        return [xs[0][i:i + 1]], (0, element[1])
    j = element[1]
    if op == "matmul":
        return [xs[0][i:i + 1], xs[1][:, j:j + 1]], (0, 0)
    if op == "linear":
        return [xs[0][i:i + 1], xs[1][j:j + 1], xs[2][j:j + 1]], (0, 0)
    if op == "attention":
        return [xs[0][i:i + 1], xs[1], xs[2][:, j:j + 1]], (0, 0)
    raise ValueError(f"no shrinking for op {op!r}")


def _keep(op: str, xs: list[np.ndarray], keep: list[int]) -> list[np.ndarray]:
    out = list(xs)
    for which, axis in REDUCED[op]:
        out[which] = np.take(out[which], keep, axis=axis)
    return out


class _Judge:
    def __init__(self, kernel, op: str, reason: str) -> None:
        self.kernel, self.op, self.reason, self.tries = kernel, op, reason, 0

    def fails(self, xs: list[np.ndarray], element: tuple) -> bool:
        self.tries += 1
        fmt = self.kernel.fmt
        got_bits, again = call_twice(self.kernel, [fmt.encode(x) for x in xs],
                                     output_shape(self.op, xs), "a shrinking candidate")
        reason, _, _ = accumulate.judge(self.op, fmt, xs, fmt.decode(got_bits),
                                        self.kernel.accumulation)
        mark_unrepeatable(reason, got_bits, again)
        return reason[element] == self.reason


def shrink(kernel, xs: list[np.ndarray], element: tuple, reason: str
           ) -> tuple[list[np.ndarray], tuple, int]:
    """(the smallest case found, the element's index in it, candidates judged). `xs` are the
    failing case's inputs (float64 values of the format), `element` the failing output element
    and `reason` its failure; the case as given when even its restriction does not fail."""
    op = kernel.op
    judge = _Judge(kernel, op, reason)
    small, at = restrict(op, xs, tuple(element))
    if not judge.fails(small, at):
        return xs, tuple(element), judge.tries
    which, axis = REDUCED[op][0]
    keep = list(range(small[which].shape[axis]))
    col = at[1] if op in ROW_WISE else None
    chunk = max(len(keep) // 2, 1)
    while judge.tries < TRIES:
        for start in range(0, len(keep), chunk):
            cand = keep[:start] + keep[start + chunk:]
            if not cand or (col is not None and col not in cand):
                continue
            cand_at = at if col is None else (0, cand.index(col))
            if judge.fails(_keep(op, small, cand), cand_at):
                keep = cand
                break
            if judge.tries >= TRIES:
                break
        else:
            if chunk == 1:
                break
            chunk = max(chunk // 2, 1)
    final_at = at if col is None else (0, keep.index(col))
    return _keep(op, small, keep), final_at, judge.tries
