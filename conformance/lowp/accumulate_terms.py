"""The constants and gamma(k) of the accumulating ops' float32 error models (accumulate.py and the
op groups it dispatches to, accumulate_norms.py and accumulate_attention.py), held once."""
from __future__ import annotations

import numpy as np

U32 = 2.0 ** -24         # float32's unit roundoff
T32 = 8 * U32            # float32 exp, log, rsqrt: 4 ulps (accumulate_norms.py says whose)
TINY32 = 2.0 ** -149     # float32's least subnormal
MARGIN = 2.0 ** -50
SLACK = 1 + 2.0 ** -30   # the newer ops' bounds, raised by their own float64 evaluation's error


def gamma(k) -> np.ndarray:
    """Higham's gamma(k) = k u / (1 - k u), u = 2^-24."""
    k = np.asarray(k, dtype=np.float64)
    return k * U32 / (1 - k * U32)
