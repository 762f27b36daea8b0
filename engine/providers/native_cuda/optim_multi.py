"""The multi-tensor Adam / AdamW step (engine/csrc/cuda/optim.cu, tl_adam_multi): every parameter
of an optimizer in one launch, with tl_adam_step's arithmetic per element (so its bits), plus
AdamW's decoupled decay folded in as the one rounding `p * shrink` that engine/optim.py's
per-parameter path applies before the step.

`MultiTensorTable` is built once per optimizer, outside any CUDA graph capture: the tensors'
sizes, their decay flags and the chunk list (one block per CHUNK elements of one tensor) are
uploaded then and never change. The (p, g, m, v) addresses live in a device table too; `step`
rewrites the windows of it whose addresses changed since the last step (eager mode makes new
gradients every backward) with tl_adam_set_ptrs, which takes the addresses as kernel arguments:
no upload from host memory and no allocation, so a capture records them and every replay
rewrites its own (while capturing, every window is rewritten, whatever the cache says)."""
from __future__ import annotations

import numpy as np

from engine.errors import ShapeError, UInt32OverflowError
from engine.providers.native_cuda.launch import F32, U32, contiguous, cupy, kernel
from engine.providers.native_cuda.optim import ADAM_STEP, BiasTable

CHUNK = 4096       # elements per block: TL_ADAM_CHUNK in optim.cu
WINDOW = 64        # addresses one tl_adam_set_ptrs launch writes (its a0 .. a63)
_multi = kernel(ADAM_STEP.file, "tl_adam_multi")
_multi_table = kernel(ADAM_STEP.file, "tl_adam_multi_table")
_set_ptrs = kernel(ADAM_STEP.file, "tl_adam_set_ptrs")
_U64 = np.uint64
_ZEROS = (_U64(0),) * WINDOW


def chunk_list(sizes: list[int]) -> np.ndarray:
    """(tensor, first element) of every CHUNK-element chunk of every tensor, flat, uint32."""
    rows = [(t, first) for t, n in enumerate(sizes) for first in range(0, n, CHUNK)]
    return np.array(rows, dtype=np.uint32).reshape(-1)


class MultiTensorTable:
    """The device table of one optimizer's tensors (see the module docstring)."""

    def __init__(self, params: list, m: list, v: list, decay: list[bool]) -> None:
        sizes = [int(p.size) for p in params]
        for i, n in enumerate(sizes):
            if n >= 1 << 32:
                raise UInt32OverflowError(
                    f"multi-tensor Adam: parameter {i} has {n} elements; the kernel indexes "
                    "with 32 bits: split the parameter below 2^32 elements, or pass "
                    "multi_tensor=False")
        cp = cupy()
        self.count = len(sizes)
        self.sizes = tuple(sizes)
        chunks = chunk_list(sizes)
        self.chunks_n = len(chunks) // 2
        self.d_sizes = cp.asarray(np.array(sizes or [0], dtype=np.uint32))
        self.d_decay = cp.asarray(np.array([1 if d else 0 for d in decay] or [0], np.uint32))
        self.d_chunks = cp.asarray(chunks if len(chunks) else np.zeros(2, np.uint32))
        self.d_ptrs = cp.zeros(max(4 * self.count, 1), dtype=np.uint64)
        self.m_v = [a.data.ptr for a in m] + [a.data.ptr for a in v]
        self.host = [0] * (4 * self.count)      # the addresses the device table holds
        self.launches = 0                       # tl_adam_set_ptrs launches so far (tests read it)

    def point(self, params: list, grads: list, force: bool) -> None:
        """Bring the device table to these addresses (a grad of None writes 0: skipped)."""
        want = ([p.data.ptr for p in params] +
                [0 if g is None else g.data.ptr for g in grads] + self.m_v)
        host = self.host
        for first in range(0, len(want), WINDOW):
            window = want[first:first + WINDOW]
            if force or window != host[first:first + WINDOW]:
                args = tuple(_U64(a) for a in window) + _ZEROS[len(window):]
                _set_ptrs((1,), (self.d_ptrs, U32(first), U32(len(window))) + args)
                host[first:first + len(window)] = window
                self.launches += 1
        if force:
            # A capture records the writes without running them: what the device table holds
            # after it is unknown here, so the next eager step rewrites every window.
            self.host = [-1] * len(want)

    def step(self, params: list, grads: list, lr: float, beta1: float, beta2: float, eps: float,
             t: int, table: BiasTable | None, shrink: float, use_decay: bool,
             force: bool) -> None:
        """One Adam step of every tensor that has a gradient; `table` (a BiasTable, already
        advanced) replaces the step count `t` where a CUDA graph replays the step."""
        if tuple(int(p.size) for p in params) != self.sizes:
            raise ShapeError(
                f"multi-tensor Adam: the parameters now have sizes "
                f"{tuple(int(p.size) for p in params)}, the optimizer was built for "
                f"{self.sizes}; build a new optimizer for parameters of new shapes")
        kept = []
        for i, (p, g) in enumerate(zip(params, grads)):
            if g is not None:
                if g.size != p.size:
                    raise ShapeError(f"multi-tensor Adam: parameter {i}'s grad has {g.size} "
                                     f"elements, the parameter has {p.size}")
                if not g.flags.c_contiguous:
                    g = grads[i] = contiguous(g)
                    kept.append(g)     # held until the launch is queued (stream-ordered reuse)
        self.point(params, grads, force)
        if not self.chunks_n:
            return
        head = (self.d_ptrs, U32(self.count), self.d_sizes, self.d_decay, self.d_chunks,
                U32(1 if use_decay else 0), F32(shrink), F32(lr), F32(beta1), F32(beta2),
                F32(1 - beta1), F32(1 - beta2))
        if table is not None:
            _multi_table((self.chunks_n,), head + (table.bc, table.step, U32(table.last),
                                                   F32(eps)))
        else:
            _multi((self.chunks_n,), head + (F32(1 - beta1 ** t), F32(1 - beta2 ** t), F32(eps)))
