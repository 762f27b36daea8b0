"""The fused cross-entropy loss (engine/csrc/cuda/xent.cu, tl_xent_*): logits [N, C] and int64
targets -> the mean of -log_softmax(logits)[target] over the rows, and its VJP
(g / N) (softmax - onehot), each row in one warp, in float64, rounded once to float32.
(mse_loss, whose kernels are loss.cu's, is declared in reduce.py beside the sums it shares.)

Forward: two launches, tl_xent_rows (every row's loss in float64) and tl_xent_mean (one block
adds them in a fixed order and divides once). VJP: one launch, tl_xent_bwd, which recomputes
each row's max and sum from the logits (no saved state, so the tape keeps only the input)."""
from __future__ import annotations

import numpy as np

from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import F64, U32, contiguous, cupy, empty, kernel
from engine.tape_saves import saves
from engine.types import Reduction, RuntimeEntry as Entry

_rows = kernel("xent.cu", "tl_xent_rows")
_mean = kernel("xent.cu", "tl_xent_mean")
_bwd = kernel("xent.cu", "tl_xent_bwd")
ROWS_PER_BLOCK = 8       # warps of a 256-thread block: one row each
MAX_BLOCKS = 1 << 16     # the row loop strides past this many blocks


def _targets(targets):
    """The targets as a contiguous int64 device array (the wrapper checked their range)."""
    cp = cupy()
    t = targets if isinstance(targets, cp.ndarray) else cp.asarray(np.asarray(targets, np.int64))
    return contiguous(t if t.dtype == np.int64 else t.astype(np.int64))


def _blocks(rows: int) -> tuple:
    return (min(-(-rows // ROWS_PER_BLOCK), MAX_BLOCKS),)


def cross_entropy(logits, targets):
    rows, n = logits.shape
    t = _targets(targets)
    losses = cupy().empty(rows, np.float64)
    out = empty(1)
    _rows(_blocks(rows), (logits, t, losses, U32(rows), U32(n)))
    _mean((1,), (losses, out, U32(rows)))
    return out.reshape(())


@saves(0)
def cross_entropy_vjp(inputs, output, g, targets):
    """(g / N) (softmax(x) - onehot(targets)) in float64, rounded once (tl_xent_bwd)."""
    (x,) = inputs
    rows, n = x.shape
    gx = empty(x.shape)
    _bwd(_blocks(rows), (contiguous(x), _targets(targets), contiguous(g), gx, U32(rows), U32(n),
                         F64(rows)))
    return (gx,)


DECLS = (
    KernelDecl(Entry.cross_entropy, "xent.cu", ("tl_xent_rows", "tl_xent_mean"), ("tl_xent_bwd",),
               cross_entropy, cross_entropy_vjp, reduction=Reduction.fixed_tree, f64_rows=True,
               summary="per row log1p(sum_{j != k} exp(x_j - max)) + (max - x_target) in "
                       "float64 (a warp per row, libdevice exp and log1p), the rows' mean in a "
                       "fixed float64 order, rounded once to float32; VJP (g / N)(softmax - "
                       "onehot) in float64, rounded once: within the derived bound of "
                       "conformance/families/reduction.py"),
)
