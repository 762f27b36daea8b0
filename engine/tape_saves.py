"""What a VJP rule reads: `saves(...)` declares it, `Unsaved` stands in for the rest. A module of
its own (it imports only engine.errors) so the providers' rules can declare it without importing
the tape."""
from __future__ import annotations

import math
from typing import Callable

from engine.errors import UnsavedValueError


def saves(*inputs: int, output: bool = False):
    """Declare the values a VJP rule `rule(inputs, output, g, **params)` reads: the input
    positions listed and, with output=True, the forward output. Everything else reaches the rule
    as an `Unsaved` (its shape and dtype, which a rule may read). A rule without a declaration
    keeps all its inputs and its output. The conformance harness calls every declared rule with
    the same stand-ins (conformance/kernel_call.py), so a rule that reads more than it declares
    fails there with UnsavedValueError."""
    keep = frozenset(int(i) for i in inputs)

    def mark(rule: Callable) -> Callable:
        rule.tape_saves = (keep, bool(output))
        return rule
    return mark


class Unsaved:
    """An input or output a VJP rule declared it does not read: its shape and dtype, no values."""
    __slots__ = ("shape", "dtype", "what")

    def __init__(self, like, what: int | None) -> None:
        self.shape = tuple(like.shape)
        self.dtype = like.dtype
        self.what = what   # the input's position; None for the output (named only in errors)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def _refuse(self, attempt: str):
        what = "output" if self.what is None else f"input {self.what}"
        raise UnsavedValueError(
            f"a VJP rule {attempt} its {what} (shape {self.shape}), which its @saves declaration "
            "leaves off the tape; add that input (or output=True) to the rule's saves(...) "
            "declaration (engine/tape_saves.py)")

    def __getattr__(self, name: str):
        # NumPy and CuPy look for the array protocols first: that is a read of the values
        self._refuse("read the values of" if name.startswith("__array") or
                     name.startswith("__cuda_array") else f"read `.{name}` of")

    def __array__(self, dtype=None, copy=None):
        self._refuse("read the values of")

    def __getitem__(self, key):
        self._refuse("indexed")

    def reshape(self, *shape):
        self._refuse("reshaped")


def stand_ins(rule, arrays: tuple, out) -> tuple[tuple, object]:
    """(inputs, output) as `rule` receives them: its declared values, `Unsaved` for the rest."""
    spec = getattr(rule, "tape_saves", None)
    if spec is None:
        return tuple(arrays), out
    keep, keep_out = spec
    inputs = tuple(a if i in keep or a is None else Unsaved(a, i) for i, a in enumerate(arrays))
    return inputs, (out if keep_out or out is None else Unsaved(out, None))
