"""Reference for erf, a function the engine has no op for (the ulp table's: docs/EXHAUSTIVE.md):
correctly rounded erf(a); erf(+-0) = +-0, erf(+-inf) = +-1, NaN for NaN. Forward only.

|a| >= 6 rounds to +-1 in float32 and in float64 alike: 0 < 1 - erf|a| = erfc|a| <
e^-a^2 / (|a| sqrt(pi)) <= e^-36 / 10.6 < 2.2e-17 < 2^-54, half the float64 spacing below 1
(Abramowitz and Stegun 7.1.13). Elsewhere the Ziv loop on _erf.iv_erf_series (rigorous)."""

import math

import numpy as np

from conformance.references._common import elementwise_ziv, f32_inputs, ieee64
from conformance.references._erf import iv_erf_series

OP = "erf"
SATURATES = 6.0
erf64 = np.vectorize(math.erf, otypes=[np.float64])   # the C library's erf (NumPy has none)


def _ieee(x):
    return np.where(np.abs(x) >= SATURATES, np.copysign(1.0, x), erf64(x))


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    route = (np.abs(a) >= SATURATES) | (a == 0)
    return elementwise_ziv(iv_erf_series, (a,), ieee64(_ieee, a), "transcendental", route=route)
