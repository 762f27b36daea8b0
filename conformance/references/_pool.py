"""Window bookkeeping shared by the pooling references (max_pool, avg_pool, smooth_max_pool), written
apart from the engine's (engine/pool_windows.py) so that a shared mistake cannot pass unseen.

x is ([N,] C, *spatial) with r = len(kernel_size) spatial axes, viewed as [planes][in_size]. The
window of output o on axis j covers positions o*s + t*d - p for t in [0, k); the output extent is
the number of window starts o >= 0 with o*s + d(k-1) <= in + 2p - 1 (a window never reaches past the
padded input), and 0 when in == 0 or 2p > k. A position outside [0, in) is padding."""

from __future__ import annotations

import math

import numpy as np

from conformance.references._common import ReferenceInputError, f32_grad, f32_inputs


def extent(n: int, k: int, s: int, p: int, d: int) -> int:
    if n == 0 or 2 * p > k:
        return 0
    last_start = n + 2 * p - 1 - d * (k - 1)   # the largest o*s a window may start at
    return 0 if last_start < 0 else last_start // s + 1


class Windows:
    """The cells of every window: `cells` int64 [out_size, win], -1 for padding, row-major window
    order; and the inverse, per input offset, the windows that hold it in ascending order."""

    def __init__(self, x: np.ndarray, kernel_size, stride, padding, dilation, op: str) -> None:
        k, s, p, d = (tuple(int(v) for v in a) for a in (kernel_size, stride, padding, dilation))
        r = len(k)
        if not (1 <= r <= 8 and len(s) == len(p) == len(d) == r and x.ndim in (r + 1, r + 2)):
            raise ReferenceInputError(f"{op}: x {x.shape} does not fit kernel_size {k}, stride {s}, "
                                      f"padding {p}, dilation {d}")
        self.spatial = x.shape[x.ndim - r:]
        self.lead = x.shape[:x.ndim - r]
        self.out = tuple(extent(n, *a) for n, a in zip(self.spatial, zip(k, s, p, d)))
        self.planes = math.prod(self.lead)
        self.in_size = math.prod(self.spatial)
        self.win = math.prod(k)
        # per axis: position[o, t] and whether it is inside
        axes = []
        for j in range(r):
            o = np.arange(self.out[j])[:, None]
            t = np.arange(k[j])[None, :]
            axes.append(o * s[j] + t * d[j] - p[j])
        cells = np.zeros((math.prod(self.out), self.win), dtype=np.int64)
        inside = np.ones(cells.shape, dtype=bool)
        # out index and window index in row-major order, decomposed per axis
        o_idx = np.indices(self.out).reshape(r, -1)
        t_idx = np.indices(k).reshape(r, -1)
        for j in range(r):
            pos = axes[j][o_idx[j][:, None], t_idx[j][None, :]]
            inside &= (pos >= 0) & (pos < self.spatial[j])
            cells = cells * self.spatial[j] + pos
        self.cells = np.where(inside, cells, -1)
        self.shape = self.lead + self.out

    def plane_values(self, x: np.ndarray, pad) -> np.ndarray:
        """float64 [planes, out_size, win] window values, `pad` at padding."""
        flat = x.reshape(self.planes, self.in_size).astype(np.float64)
        safe = np.where(self.cells >= 0, self.cells, 0)
        return np.where(self.cells >= 0, flat[:, safe], pad)

    def gathered(self, selected: np.ndarray, terms: np.ndarray):
        """Per input element, its terms in ascending window order: (matrix [planes * in_size, m],
        valid mask, counts) where `selected` [planes, out_size, win] marks which (window, cell)
        pairs contribute the term terms[planes, out_size, win]."""
        sel = selected & (self.cells >= 0)[None]
        plane, o, t = np.nonzero(sel)
        target = plane * self.in_size + self.cells[o, t]
        order = np.lexsort((o, target))   # by target, then ascending window
        target, vals = target[order], terms[plane, o, t][order]
        n = self.planes * self.in_size
        counts = np.bincount(target, minlength=n) if n else np.zeros(0, np.int64)
        m = int(counts.max()) if counts.size else 0
        start = np.concatenate([[0], np.cumsum(counts)[:-1]]) if n else np.zeros(0, np.int64)
        col = np.arange(target.size) - np.repeat(start, counts)
        matrix = np.zeros((n, m), dtype=np.float64)
        valid = np.zeros((n, m), dtype=bool)
        matrix[target, col] = vals
        valid[target, col] = True
        return matrix, valid, counts


def checked(inputs, params: dict, op: str):
    (x,) = f32_inputs(inputs, 1, op)
    w = Windows(x, params["kernel_size"], params["stride"], params["padding"], params["dilation"],
                op)
    return x, w


def grad(grad_out, w: Windows, op: str) -> np.ndarray:
    return f32_grad(grad_out, w.shape, op)
