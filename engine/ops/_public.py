"""The public face of the op wrappers: a NumPy array, a list or a number where a Tensor goes is a
NotATensorError (a TypeError) that says what to do, instead of an AttributeError from deep in the
dispatch. The check runs only after a wrapper failed, so the hot path pays one call frame; a
wrapper marked `checks_tensors` (the elementwise ones, the per-op hot path) catches the same errors
itself with `named_not_a_tensor` and is exported unwrapped, paying none."""
from __future__ import annotations

import functools
import inspect

from engine.errors import NotATensorError
from engine.tensor import Tensor


def _tensor_slots(fn) -> list[tuple[int, str, bool]]:
    """(position, name, is a sequence of tensors) of the parameters annotated Tensor."""
    slots = []
    for i, p in enumerate(inspect.signature(fn).parameters.values()):
        ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation,
                                                                           "__name__", "")
        if ann == "Tensor":
            slots.append((i, p.name, False))
        elif p.name == "tensors":
            slots.append((i, p.name, True))
    return slots


def _not_a_tensor(op: str, slots, args, kwargs) -> NotATensorError | None:
    for i, name, many in slots:
        value = args[i] if i < len(args) else kwargs.get(name)
        values = (list(enumerate(value)) if many and isinstance(value, (list, tuple))
                  else [(None, value)])
        for j, v in values:
            if v is not None and not isinstance(v, Tensor):
                what = f"{type(v).__module__}.{type(v).__name__}".replace("builtins.", "")
                where = name if j is None else f"{name}[{j}]"
                return NotATensorError(
                    f"{op}: `{where}` is a {what}; ops take engine Tensors: wrap the data with "
                    f"engine.tensor(...) first (it checks the dtype and rounds to float32)")
    return None


def named_not_a_tensor(fn, args: tuple, kwargs: dict | None = None) -> NotATensorError | None:
    """For a wrapper that converts its own errors: the named error for its first non-Tensor
    argument, or None when every Tensor parameter holds a Tensor (then the error is re-raised)."""
    return _not_a_tensor(fn.__name__, _tensor_slots(fn), args, kwargs or {})


def tensor_checked(fn):
    """`fn` with a named error for non-Tensor arguments (module docstring)."""
    slots = _tensor_slots(fn)
    if not slots or getattr(fn, "checks_tensors", False):
        return fn

    @functools.wraps(fn)
    def op(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (AttributeError, TypeError):
            named = _not_a_tensor(fn.__name__, slots, args, kwargs)
            if named is None:
                raise
            raise named from None
    return op
