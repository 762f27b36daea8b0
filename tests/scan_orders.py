"""The native selective_scan's parallel order (engine/csrc/cuda/scan.cu's chunked scan) in NumPy
float32, operation for operation: per chunk the map h -> P h + Q in time order, the carries chunk
by chunk, then the recurrence over each chunk from its carry. NumPy's float32 products and sums
round like the kernels' (--fmad=false, --ftz=false), so the GPU result must equal it bit for bit;
on the CPU it shows that the derived bound covers that order."""
from __future__ import annotations

import numpy as np

F32 = np.float32


def chunked_forward(A, B, X, h0, chunk: int) -> np.ndarray:
    seq, state = X.shape
    token = A.ndim == 2
    rows = seq if token else 1
    a_rows, b_rows = A.reshape(rows, state), B.reshape(rows, state)
    coef = (lambda m, t: m[t]) if token else (lambda m, t: m[0])
    chunks = -(-seq // chunk)
    out = np.empty((seq, state), F32)
    with np.errstate(all="ignore"):
        P, Q = np.empty((chunks, state), F32), np.empty((chunks, state), F32)
        for c in range(chunks):
            a, b = np.ones(state, F32), np.zeros(state, F32)
            for t in range(c * chunk, min(seq, (c + 1) * chunk)):
                at = coef(a_rows, t)
                a = at * a
                b = at * b + coef(b_rows, t) * X[t]
            P[c], Q[c] = a, b
        carry = np.empty((chunks, state), F32)
        h = h0.astype(F32, copy=True)
        for c in range(chunks):
            carry[c] = h
            h = P[c] * h + Q[c]
        for c in range(chunks):
            h = carry[c].copy()
            for t in range(c * chunk, min(seq, (c + 1) * chunk)):
                h = coef(a_rows, t) * h + coef(b_rows, t) * X[t]
                out[t] = h
    return out
