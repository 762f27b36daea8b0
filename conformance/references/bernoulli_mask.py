"""Reference for bernoulli_mask: 1.0 where rand_uniform(shape, seed) < p (p rounded to float32 first, as
the float32 kernels receive it), else 0.0. Exact."""

import numpy as np

from conformance.references._common import Reference, ReferenceInputError, param_f32
from conformance.references.rand_uniform import uniform

OP = "bernoulli_mask"


def forward(inputs=(), *, shape, p, seed):
    if tuple(inputs):
        raise ReferenceInputError(f"bernoulli_mask takes no input arrays, got {len(tuple(inputs))}")
    p32 = param_f32(p)
    if not 0 <= p32 <= 1:
        raise ReferenceInputError(f"bernoulli_mask needs p in [0, 1], got {p!r}")
    mask = (uniform(shape, seed) < p32).astype(np.float32)
    return Reference(mask, mask.astype(np.float64), kind="exact")
