"""Inputs for the tape-rule tests (tests/test_tape_rules.py on the CPU, tests/test_tape_cuda.py on
the GPU): float32 arrays rich in the values where CuPy's -ftz=true kernels and ours part ways
(subnormals of both signs, the normal/subnormal boundary, signed zeros, infinities, NaN, values
near the overflow of exp), mixed with seeded random values over the whole exponent range."""
from __future__ import annotations

import numpy as np

F32 = np.float32
TINY = float(np.finfo(np.float32).smallest_subnormal)      # 2^-149
NORMAL_MIN = float(np.finfo(np.float32).tiny)               # 2^-126
BIG = float(np.finfo(np.float32).max)

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 3.0, -3.0, TINY, -TINY, 2 * TINY, -3 * TINY,
            2.0 ** -140, -(2.0 ** -140), 2.0 ** -130, -(2.0 ** -127), NORMAL_MIN, -NORMAL_MIN,
            NORMAL_MIN - TINY, -(NORMAL_MIN - TINY), BIG, -BIG, np.inf, -np.inf, np.nan,
            -np.nan, 1e-20, -1e-20, 1e-30, 88.0, 88.72, 89.0, -87.0, -103.0, -104.0, 1e30,
            -1e30, 1.5707964, -1.5707964, 3.1415927, 1e6, 65536.0, 0.044715, -5.0, 5.0, 10.0,
            -10.0, 20.0, -20.0]


def specials() -> np.ndarray:
    return np.array(_SPECIAL, dtype=F32)


def mixed(seed: int, n: int = 3000) -> np.ndarray:
    """The special values, then random ones: normal at several scales, random finite bit
    patterns (every exponent), and random subnormals of both signs."""
    rng = np.random.default_rng(seed)
    total = max(n, 4 * len(_SPECIAL))
    k = (total - len(_SPECIAL)) // 4
    normal = rng.standard_normal(k) * rng.choice([1e-3, 1.0, 10.0, 100.0], k)
    bits = rng.integers(0, 0xFF000000, k, dtype=np.uint64).astype(np.uint32)
    finite = bits.view(F32)
    finite = np.where(np.isfinite(finite), finite, F32(1.0))
    sub = (rng.integers(1, 1 << 23, k, dtype=np.uint32) | np.where(
        rng.random(k) < 0.5, np.uint32(0x80000000), np.uint32(0))).view(F32)
    rest = total - len(_SPECIAL) - 3 * k
    tail = rng.uniform(-4, 4, rest)
    out = np.concatenate([specials(), normal.astype(F32), finite, sub, tail.astype(F32)])
    return rng.permutation(out)[:n].astype(F32)


def pair(seed: int, n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) with ties, negated partners and neighbouring subnormals (which -ftz=true compares
    as equal zeros) among the random pairs."""
    a, b = mixed(seed, n), mixed(seed + 1, n)
    q = n // 6
    b[:q] = a[:q]                                               # ties, signed zeros included
    b[q:2 * q] = -a[q:2 * q]
    with np.errstate(over="ignore"):
        b[2 * q:3 * q] = np.nextafter(a[2 * q:3 * q], F32(np.inf))
    a[3 * q:3 * q + 50] = TINY * np.arange(1, 51, dtype=F32)    # distinct subnormals
    b[3 * q:3 * q + 50] = TINY * np.arange(2, 52, dtype=F32)
    return a, b


# op label -> keyword parameters of its rule (each case is run).
PARAMS: dict[str, list[dict]] = {
    "scale": [{"alpha": 0.5}, {"alpha": -3.25}, {"alpha": 1e-3}, {"alpha": 2.0 ** -140}],
    "clamp": [{"lo": -0.5, "hi": 0.75}, {"lo": -3 * TINY, "hi": 2.0 ** -140}, {"lo": 0.0,
                                                                                "hi": 0.0}],
    "safe_log": [{"eps": 1e-12}, {"eps": 1e-40}],
}

UNARY = ["abs", "sqrt", "clamp", "relu", "gelu", "sigmoid", "tanh", "softplus", "exp", "log",
         "sin", "cos", "inv", "safe_log", "scale"]
BINARY = ["add", "sub", "mul", "max", "min"]
# Rules whose formula uses the forward output rather than the input.
USES_OUTPUT = {"sqrt", "sigmoid", "tanh"}
