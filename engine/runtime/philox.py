"""Philox4x32-10 (Salmon et al., Random123): the counter-based generator behind rand_uniform and
bernoulli_mask on every provider (engine/csrc/cuda/random.cu computes the same words) and behind
seeded parameter initialisation (engine/nn/layers.py). Pure NumPy, so nothing that needs random
bits has to import a provider."""
from __future__ import annotations

import numpy as np

_M0, _M1, _W0, _W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
_MASK = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter0: np.ndarray, seed: int) -> np.ndarray:
    """Word 0 of Philox4x32-10 for counters (c, 0, 0, 0) and key (seed low, seed high)."""
    c0 = counter0.astype(np.uint64)
    c1 = np.zeros_like(c0)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    for r in range(10):
        if r:
            k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
        p0 = c0 * np.uint64(_M0)
        p1 = c2 * np.uint64(_M1)
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & _MASK,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & _MASK)
    return c0.astype(np.uint32)


def unit_uniform(n: int, seed: int) -> np.ndarray:
    """n float32 draws in [0, 1): the top 24 bits of word 0 for counters 0..n-1, times 2^-24
    (exact in float32 and in float64)."""
    words = philox4x32_10(np.arange(n, dtype=np.uint64), int(seed))
    return (words >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
