"""The scale of the terms behind an element that is a difference of them, for accuracy.py's rule 2
("no correct digit") on a peer's finding.

A normalized value (x_i - mean) / sqrt(var + eps) of a nearly constant row, or a log-probability
a_i - logsumexp(a) of a dominating entry, is a difference of terms far larger than itself. Any
float32 evaluation of the peer's documented formula rounds those terms (u |x_i|, u |mean|,
u |logsumexp|) before they cancel, so its result can hold no digit of a tiny exact value with
no defect in the kernel: PyTorch's layer_norm returned 9.6e-6 where the exact value is
-5.5e-12 (H100, 2026-12-07), one rounding of a mean near 0.25 divided by sqrt(eps). TorchLean's
own bounds for these ops are derived for its algorithm and stay as they are; only the
classification of a peer's excess changes: for these ops "no correct digit" is measured against
the terms' scale (the error reaches the size of the terms themselves), not the result's. Every
other op (the elementwise functions above all: a flushed sigmoid, tanh-GELU's cancellation near
x = -9) keeps the result's own scale, as NVIDIA's ulp figures do.

scale(op, case) -> per output element, float64, or None for the other ops; computed
in float64 from the case's own inputs (never from what the kernel returned). An element whose
inputs are not finite gets +0 (its IEEE special value is rule 1's business)."""
from __future__ import annotations

import numpy as np


def _finite(s: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(s), s, 0.0)


def _normalized(x, gamma, beta, axes, eps) -> np.ndarray:
    mean = np.mean(x, axis=axes, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=axes, keepdims=True)
    return (np.abs(x) + np.abs(mean)) / np.sqrt(var + eps) * np.abs(gamma) + np.abs(beta)


def _layer_norm(inputs, params):
    x, gamma, beta = (np.asarray(a, dtype=np.float64) for a in inputs[:3])
    if x.ndim == 0 or x.shape[-1] == 0:
        return None
    return _normalized(x, gamma, beta, -1, float(np.float32(params.get("eps", 1e-5))))


def _batch_norm(inputs, params):
    x, gamma, beta = (np.asarray(a, dtype=np.float64) for a in inputs[:3])
    if x.ndim < 2 or x.size == 0:
        return None
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return _normalized(x, gamma.reshape(shape), beta.reshape(shape), axes,
                       float(np.float32(params.get("eps", 1e-5))))


def _log_softmax(inputs, params):
    a = np.asarray(inputs[0], dtype=np.float64)
    if a.ndim == 0 or a.size == 0:
        return None
    axis = int(params.get("axis", -1))
    top = np.max(a, axis=axis, keepdims=True)
    lse = top + np.log(np.sum(np.exp(a - top), axis=axis, keepdims=True))
    return np.abs(a) + np.abs(lse)


SCALES = {"layer_norm": _layer_norm, "batch_norm": _batch_norm, "log_softmax": _log_softmax}


def scale(op: str, case) -> np.ndarray | None:
    """The terms' scale of every element of op's forward output on the case's inputs (its
    `inputs` and `params`), or None (the result's own scale: every op not in SCALES, or a case
    this cannot read)."""
    fn = SCALES.get(op)
    if fn is None:
        return None
    try:
        with np.errstate(all="ignore"):
            s = fn(tuple(case.inputs), dict(case.params))
    except (ValueError, IndexError, TypeError):     # a shape the op itself refuses
        return None
    return None if s is None else _finite(np.asarray(s, dtype=np.float64))
