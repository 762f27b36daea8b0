"""Certified fast paths for the references: double-double evaluation with a running error bound per
element, a rounding certificate, and exact sums, so big inputs cost NumPy passes instead of one mpmath
Ziv loop per element. Every element a certificate cannot decide goes to the exact path, which stays
the fallback and the test oracle (`exact_only()` forces it everywhere).

Modules: dd (double-double arithmetic and its error bounds), certify (when one float32 and one float64
rounding are certain), ddmath (exp, log, sin/cos in dd), unary (the elementwise ops' formulas and
VJPs), elementwise (the glue the op modules call), sums (exact sums and dot products), rows (the softmax
family), norm (layer/batch norm), attention.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

_state = {"enabled": True}


def enabled() -> bool:
    """Whether references may take the certified fast paths (True unless inside exact_only())."""
    return _state["enabled"]


@contextlib.contextmanager
def exact_only() -> Iterator[None]:
    """Run the block with every fast path off: the references take their exact paths only."""
    saved = _state["enabled"]
    _state["enabled"] = False
    try:
        yield
    finally:
        _state["enabled"] = saved
