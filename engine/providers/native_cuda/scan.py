"""selective_scan (engine/csrc/cuda/scan.cu): the sequential one-thread-per-channel kernel for short
sequences, the chunked parallel scan (chunk reduce, carry, chunk apply) from PARALLEL_MIN_SEQ steps
on, and a float64 VJP that runs the same chunked scans (one chunk of the whole sequence below the
switch point: the sequential order). No atomics anywhere: every sum has a fixed order."""
from __future__ import annotations

import numpy as np

from engine.providers.native_cuda.decl import KernelDecl
from engine.providers.native_cuda.launch import U32, contiguous, cupy, empty, grid, kernel, zeros
from engine.types import BackendOp as Op, Reduction

# Declared facts of the capsule (its numerical policy states both): sequences of at least
# PARALLEL_MIN_SEQ steps take the parallel scan, in chunks of CHUNK steps. Fixed numbers, not
# derived from the GPU, so the bits of a result depend on the shape alone.
PARALLEL_MIN_SEQ = 256
CHUNK = 32

_fwd_seq = kernel("scan.cu", "tl_scan_fwd_seq")
_fwd_reduce = kernel("scan.cu", "tl_scan_fwd_chunk_reduce")
_fwd_carry = kernel("scan.cu", "tl_scan_fwd_carry")
_fwd_apply = kernel("scan.cu", "tl_scan_fwd_chunk_apply")
_fwd_reduce64 = kernel("scan.cu", "tl_scan_fwd_chunk_reduce_f64")
_fwd_carry64 = kernel("scan.cu", "tl_scan_fwd_carry_f64")
_fwd_apply64 = kernel("scan.cu", "tl_scan_fwd_chunk_apply_f64")
_bwd_reduce = kernel("scan.cu", "tl_scan_bwd_chunk_reduce")
_bwd_carry = kernel("scan.cu", "tl_scan_bwd_carry")
_bwd_apply = kernel("scan.cu", "tl_scan_bwd_chunk_apply")
_bwd_finish = kernel("scan.cu", "tl_scan_bwd_finish")


def chunk_length(seq: int, parallel: bool | None = None) -> int:
    """The chunk length the scan uses for `seq` steps: CHUNK on the parallel path, the whole
    sequence (one chunk: the sequential order) below PARALLEL_MIN_SEQ. `parallel` forces a path
    (the tests run both at every length)."""
    if parallel is None:
        parallel = seq >= PARALLEL_MIN_SEQ
    return CHUNK if parallel else max(seq, 1)


def _dims(A, X):
    seq, state = X.shape
    return seq, state, int(A.ndim == 2)


def scan_forward(A, B, X, h0, parallel: bool | None = None):
    """h (seq, state) in float32, sequentially or by the chunked scan."""
    A, B, X, h0 = (contiguous(a) for a in (A, B, X, h0))
    seq, state, token = _dims(A, X)
    H = empty((seq, state))
    if H.size == 0:
        return H
    L = chunk_length(seq, parallel)
    if L >= seq:
        _fwd_seq(grid(state), (A, B, X, h0, H, U32(seq), U32(state), U32(token)))
        return H
    chunks = -(-seq // L)
    P, Q, Carry = empty((chunks, state)), empty((chunks, state)), empty((chunks, state))
    args = (U32(seq), U32(state), U32(token), U32(L))
    _fwd_reduce(grid(chunks * state), (A, B, X, P, Q) + args)
    _fwd_carry(grid(state), (P, Q, h0, Carry, U32(chunks), U32(state)))
    _fwd_apply(grid(chunks * state), (A, B, X, Carry, H) + args)
    return H


def _selective_scan(A, B, X, h0):
    return scan_forward(A, B, X, h0)


def scan_vjp(inputs, output, g, parallel: bool | None = None):
    """(dA, dB, dX, dh0): h recomputed in double by the chunked scan, the adjoint's reverse scan in
    double, each gradient rounded once to float; no atomics, so both deterministic modes give the
    same bits. The forward output is not read (h in double is more accurate than it)."""
    A, B, X, h0 = (contiguous(a) for a in inputs)
    g = contiguous(g)
    seq, state, token = _dims(A, X)
    if seq == 0 or state == 0:
        return zeros(A.shape), zeros(B.shape), empty(X.shape), zeros(h0.shape)
    cp = cupy()
    f64 = np.float64
    L = chunk_length(seq, parallel)
    chunks = -(-seq // L)
    args = (U32(seq), U32(state), U32(token), U32(L))
    work = grid(chunks * state)
    P, Q = cp.empty((chunks, state), f64), cp.empty((chunks, state), f64)
    Carry = cp.empty((chunks, state), f64)
    H = cp.empty((seq, state), f64)
    if chunks > 1:
        _fwd_reduce64(work, (A, B, X, P, Q) + args)
    _fwd_carry64(grid(state), (P, Q, h0, Carry, U32(chunks), U32(state)))
    _fwd_apply64(work, (A, B, X, Carry, H) + args)
    if chunks > 1:
        _bwd_reduce(work, (A, g, P, Q) + args)
    _bwd_carry(grid(state), (P, Q, Carry, U32(chunks), U32(state)))
    dA, dB, dX, dh0 = empty(A.shape), empty(B.shape), empty(X.shape), empty(h0.shape)
    PartA, PartB = cp.empty((chunks, state), f64), cp.empty((chunks, state), f64)
    D0 = cp.empty(state, f64)
    _bwd_apply(work, (A, B, X, h0, H, g, Carry, dA, dB, dX, PartA, PartB, D0) + args)
    _bwd_finish(grid(state), (A, D0, PartA, PartB, dA, dB, dh0, U32(chunks), U32(state),
                              U32(token)))
    return dA, dB, dX, dh0


def _selective_scan_vjp(inputs, output, g):
    return scan_vjp(inputs, output, g)


DECLS = (
    KernelDecl(Op.selective_scan, "scan.cu",
               ("tl_scan_fwd_seq", "tl_scan_fwd_chunk_reduce", "tl_scan_fwd_carry",
                "tl_scan_fwd_chunk_apply"),
               ("tl_scan_fwd_chunk_reduce_f64", "tl_scan_fwd_carry_f64",
                "tl_scan_fwd_chunk_apply_f64", "tl_scan_bwd_chunk_reduce", "tl_scan_bwd_carry",
                "tl_scan_bwd_chunk_apply", "tl_scan_bwd_finish"),
               # implementation-defined, not fixed-left: from PARALLEL_MIN_SEQ steps on the
               # chunked order is not the left recurrence that conformance/orders.py replays for a
               # declared fixed-left order (its bits still follow from the shape alone: the
               # determinism audit checks them run to run)
               _selective_scan, _selective_scan_vjp, reduction=Reduction.implementation_defined,
               summary=f"float32 recurrence, two rounded products and a rounded sum per step; "
                       f"seq < {PARALLEL_MIN_SEQ}: one thread per channel in time order "
                       f"(TorchLean's order, bitwise equal to the reference provider); seq >= "
                       f"{PARALLEL_MIN_SEQ}: chunked parallel scan of {CHUNK}-step chunks",
               notes=(f"parallel order (seq >= {PARALLEL_MIN_SEQ}): per {CHUNK}-step chunk, the "
                      "coefficient product P and the recurrence Q from 0 in time order; then per "
                      "channel the carries Carry[0] = h0, Carry[c+1] = P[c] Carry[c] + Q[c] in "
                      "chunk order; then the recurrence over each chunk from its carry "
                      "(conformance/families/scan.py bounds both orders)",
                      "VJP in float64 (h recomputed by the same chunked scan, the adjoint "
                      "dh[t] = g[t] + A[t+1] dh[t+1] in reverse time), each gradient rounded "
                      "once; constant A, B: dA, dB summed in reverse time within each chunk, "
                      "then the chunk partials from the last chunk to the first; no atomics, "
                      "both deterministic modes give the same bits")),
)
