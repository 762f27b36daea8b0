"""Reference for rsqrt, a function the engine has no op for (the ulp table's: docs/EXHAUSTIVE.md):
correctly rounded 1 / sqrt(a); rsqrt(+0) = +inf and rsqrt(-0) = -inf (IEEE 754's rSqrt, CUDA's
rsqrtf), rsqrt(+inf) = +0, NaN for a < 0 (-inf included) and for NaN. Forward only.

The exact value is never a float32 midpoint (m 2^k with m odd of 25 bits squares to 49 bits or
more, so a = 1 / that square is no float32) except where it is a float32 itself (a = 4^k: the
interval is a point), so the Ziv loop always ends on a decided rounding."""

import numpy as np

from conformance.references._common import elementwise_ziv, f32_inputs, ieee64

OP = "rsqrt"


def forward(inputs):
    (a,) = f32_inputs(inputs, 1, OP)
    ieee = ieee64(lambda x: 1.0 / np.sqrt(x), a)      # the special values above, exactly
    return elementwise_ziv(lambda ctx, x: 1 / ctx.sqrt(x), (a,), ieee, "transcendental",
                           route=a <= 0)
