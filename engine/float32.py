"""float32's constants, defined once: the engine's parameter guards, the harness's error terms,
references and exhaustive sweep import them from here (engine/ is the layer every other imports).
Each is an exact power-of-two expression, a float64 that holds it exactly."""
from __future__ import annotations

FLT_MAX = (2.0 - 2.0 ** -23) * 2.0 ** 127       # the largest finite float32, 3.4028235e38
FLT_MIN = 2.0 ** -126                            # the smallest normal float32
FLT_TRUE_MIN = 2.0 ** -149                       # the smallest subnormal float32
UNIT_ROUNDOFF = 2.0 ** -24                       # u: the relative error bound of round to nearest
# Round to nearest sends exact values at or above this (FLT_MAX plus half its ulp) to inf.
OVERFLOW_THRESHOLD = 2.0 ** 128 * (1 - 2.0 ** -25)
FLT_MAX_BITS = 0x7F7FFFFF                        # FLT_MAX's bit pattern
