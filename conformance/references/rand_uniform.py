"""Reference for rand_uniform: element i (row-major) is (w >> 8) * 2^-24, w the first output word of
Philox4x32-10 with key = seed and counter = i. Word layout (OPS.md leaves it open; this is cuRAND's and
Random123's convention): key = (seed mod 2^32, seed >> 32), counter = (i mod 2^32, i >> 32, 0, 0).
The scalar philox4x32_10 in plain Python ints is the definition; the NumPy version is checked against it."""

import math

import numpy as np

from conformance.references._common import Reference, ReferenceInputError

OP = "rand_uniform"
MASK32 = 0xFFFFFFFF
M0, M1 = 0xD2511F53, 0xCD9E8D57  # Random123 PHILOX_M4x32_0 / _1
W0, W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments PHILOX_W32_0 / _1


def philox4x32_10(counter: tuple[int, int, int, int], key: tuple[int, int]) -> tuple[int, int, int, int]:
    """Philox4x32 with 10 rounds on 32-bit words (Salmon et al., SC'11): the key is bumped between rounds."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
    return c0, c1, c2, c3


def philox_first_words(n: int, seed: int) -> np.ndarray:
    """Word 0 of philox4x32_10((i, i >> 32, 0, 0), (seed lo, seed hi)) for i in range(n), vectorised."""
    i = np.arange(n, dtype=np.uint64)
    m32 = np.uint64(MASK32)
    c0, c1 = i & m32, i >> np.uint64(32)
    c2, c3 = np.zeros_like(i), np.zeros_like(i)
    k0, k1 = seed & MASK32, seed >> 32
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0, p1 = np.uint64(M0) * c0, np.uint64(M1) * c2  # < 2^64: exact in uint64
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & m32,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & m32)
    return c0.astype(np.uint32)


def check_seed(seed) -> int:
    if not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2 ** 64:
        raise ReferenceInputError(f"seed must be an integer in [0, 2^64), got {seed!r}")
    return int(seed)


def uniform(shape, seed) -> np.ndarray:
    """The rand_uniform values as float32 of `shape`: multiples of 2^-24 in [0, 1), all exact."""
    shape = tuple(int(d) for d in shape)
    words = philox_first_words(math.prod(shape), check_seed(seed))
    return np.ldexp((words >> np.uint32(8)).astype(np.float64), -24).astype(np.float32).reshape(shape)


def forward(inputs=(), *, shape, seed):
    if tuple(inputs):
        raise ReferenceInputError(f"rand_uniform takes no input arrays, got {len(tuple(inputs))}")
    u = uniform(shape, seed)
    return Reference(u, u.astype(np.float64), kind="exact")
