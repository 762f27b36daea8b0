"""Planted bugs of issue 35's classes 2 to 4, and correct kernels beside them (the mutation suite,
tests/test_mutations_history.py, runs them on the CPU):

- call history: a kernel that keeps part of an earlier call's result (its output cached by
  shape, a workspace partly rewritten, a VJP cached by shape); the campaign's repeat with
  identical inputs cannot see it, the sibling call (same shapes, new values) can;
- NaN payloads: a kernel that canonicalises the NaNs inside its input in place, one that skips
  NaNs (nansum, nanmax);
- alignment: a kernel that reads its input from the 16-byte boundary at or below its data pointer
  (float4 loads from a rounded-down pointer), right on every aligned copy.

Every kernel takes NumPy arrays; the ones whose bug acts on the memory it was handed (an in-place
rewrite, a read through the pointer) also take CuPy arrays, so the GPU suite runs the bug on
device memory rather than on a host copy. Each is wrong in its one way only: the arithmetic is the
reference provider's."""
from __future__ import annotations

import ctypes

import numpy as np

from engine.providers.reference import FORWARD
from engine.types import BackendOp as Op
from mutants import reduced, sum_vjp, tree_reduce   # noqa: F401 (re-exported for the tables)

F32 = np.float32
VECTOR_BYTES = 16          # a float4 load's alignment


def _key(arrays, params) -> tuple:
    """What a cache keyed by shape sees: the arrays' shapes and the params, an array param by its
    shape too (never by its values)."""
    shown = tuple(sorted((k, np.shape(v) if hasattr(v, "shape") else repr(v))
                         for k, v in params.items()))
    return tuple(np.shape(a) for a in arrays), shown


# --- call history -------------------------------------------------------------------------------

class _Stateful:
    """A kernel with a memory of its earlier calls, around the function that does its
    arithmetic."""

    def __init__(self, fn) -> None:
        self.fn, self.cache = fn, {}

    def fresh(self):
        """The same kernel with no calls behind it (a test that must not depend on which
        campaigns ran before it in its process takes one)."""
        return type(self)(self.fn)


class OutputCachedByShape(_Stateful):
    """Computes its first output for each shape, then returns a copy of it whenever the shape
    comes again, whatever the values (a memo keyed on the launch configuration alone)."""

    def __call__(self, *arrays, **params):
        key = _key(arrays, params)
        if key not in self.cache:
            self.cache[key] = np.array(self.fn(*arrays, **params), dtype=F32)
        return self.cache[key].copy()


class WorkspaceHalfRewritten(_Stateful):
    """Keeps one workspace per shape as its output buffer; when the shape comes again it rewrites
    only the first half of it (a grid sized for half the elements on the reuse path), so the rest
    still holds the previous call's values. A one-element output is rewritten whole."""

    def __call__(self, *arrays, **params):
        key = _key(arrays, params)
        fresh = np.array(self.fn(*arrays, **params), dtype=F32)
        ws = self.cache.get(key)
        if ws is None:
            self.cache[key] = ws = fresh
        else:
            half = (fresh.size + 1) // 2
            ws.reshape(-1)[:half] = fresh.reshape(-1)[:half]
        return ws.copy()


class WorkspaceRewrittenWhole(WorkspaceHalfRewritten):
    """Correct: the same per-shape workspace, rewritten whole on every call."""

    def __call__(self, *arrays, **params):
        key = _key(arrays, params)
        fresh = np.array(self.fn(*arrays, **params), dtype=F32)
        ws = self.cache.setdefault(key, np.empty_like(fresh))
        ws[...] = fresh
        return ws.copy()


class OutputCachedByValue(OutputCachedByShape):
    """Correct: a memo keyed on the inputs' bytes as well as their shapes (a repeat with identical
    inputs returns the cached output, new values are computed)."""

    def __call__(self, *arrays, **params):
        key = (_key(arrays, params), tuple(np.asarray(a).tobytes() for a in arrays),
               tuple(np.asarray(v).tobytes() for v in params.values() if hasattr(v, "shape")))
        if key not in self.cache:
            self.cache[key] = np.array(self.fn(*arrays, **params), dtype=F32)
        return self.cache[key].copy()


def mul_vjp(inputs, out, g):
    """d(a*b): g*b and g*a, each one float32 product (correctly rounded)."""
    a, b = inputs
    with np.errstate(all="ignore"):
        return np.multiply(g, b, dtype=F32), np.multiply(g, a, dtype=F32)


class VJPCachedByShape(_Stateful):
    """A VJP that computes its first gradients for each shape of (inputs, cotangent) and returns
    copies of them whenever that shape comes again."""

    def __call__(self, inputs, out, g, **params):
        key = _key(tuple(inputs) + (g,), params)
        if key not in self.cache:
            self.cache[key] = tuple(None if x is None else np.array(x, dtype=F32)
                                    for x in self.fn(inputs, out, g, **params))
        return tuple(None if x is None else x.copy() for x in self.cache[key])


# --- NaN payloads ---------------------------------------------------------------------------------

def canonicalise_nans_in_place(a) -> None:
    """Every NaN of `a` rewritten, in place, as the canonical quiet NaN 0x7fc00000 (NumPy or CuPy
    memory: the one the kernel was handed)."""
    if isinstance(a, np.ndarray):
        np.copyto(a, np.float32(np.nan), where=np.isnan(a))
    else:   # a CuPy array: the rewrite acts on device memory
        import cupy
        a[...] = cupy.where(cupy.isnan(a), cupy.float32(np.nan), a)


def _host(x):
    return x.get() if hasattr(x, "get") else x


def _like(result, arrays):
    """The result on the device of the arrays it was computed from."""
    if arrays and not isinstance(arrays[0], np.ndarray):
        import cupy
        return cupy.asarray(result)
    return result


def abs_canonicalising_its_input(a):
    """The right abs, after rewriting the input's NaNs as 0x7fc00000 in place: abs(NaN) is NaN
    either way, but the caller's NaN payloads are lost."""
    canonicalise_nans_in_place(a)
    return _like(FORWARD[Op.abs](_host(a)), (a,))


def max_canonicalising_its_second_input(a, b):
    """The right elementwise max, after canonicalising the NaNs of its second operand in place."""
    canonicalise_nans_in_place(b)
    return _like(FORWARD[Op.max](_host(a), _host(b)), (a, b))


def sum_skipping_nans(a, axes=None, keepdims=False):
    """NumPy's pairwise float32 sum with the NaN terms left out (np.nansum): a row holding a NaN
    and no infinity sums to a number."""
    moved, shape = reduced(a, axes, keepdims)
    with np.errstate(all="ignore"):
        return np.nansum(moved, axis=-1, dtype=F32).reshape(shape)


def max_pool_skipping_nans(x, kernel_size, stride, padding, dilation):
    """The reference max pool with NaNs read as -inf (a max that ignores NaN, like fmaxf): a
    window with a NaN returns the largest number in it, an all-NaN window -inf."""
    with np.errstate(all="ignore"):
        x = np.where(np.isnan(x), F32(-np.inf), x).astype(F32)
    return FORWARD[Op.max_pool](x, kernel_size=kernel_size, stride=stride, padding=padding,
                                dilation=dilation)


def softmax_skipping_nans(a, axis=-1):
    """softmax in float64 with the row's max and sum taken over its numbers only (nanmax,
    nansum): a NaN entry stays NaN but the rest of its row comes out as numbers."""
    x = a.astype(np.float64)
    with np.errstate(all="ignore"):
        m = np.nanmax(np.where(np.isnan(x), -np.inf, x), axis=axis, keepdims=True,
                      initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(x - m)
        return (e / np.nansum(e, axis=axis, keepdims=True)).astype(F32)


def sum_propagating_nans(a, axes=None, keepdims=False):
    """Correct: the same pairwise float32 sum, NaNs propagating (np.sum)."""
    moved, shape = reduced(a, axes, keepdims)
    with np.errstate(all="ignore"):
        return np.sum(moved, axis=-1, dtype=F32).reshape(shape)


def max_canonicalising_a_copy(a, b):
    """Correct: the same rewrite of NaNs, on its own copy of the second operand."""
    own = np.array(b, dtype=F32)
    canonicalise_nans_in_place(own)
    return FORWARD[Op.max](a, own)


# --- alignment ------------------------------------------------------------------------------------

def read_from_aligned_base(a):
    """The a.size float32 values that start at the VECTOR_BYTES boundary at or below a's data
    pointer: a's own values when a starts on one, else the words before it and a's first values
    (float4 loads from the pointer rounded down). A CuPy array is read on the device."""
    if a.size == 0:
        return a.copy()
    if isinstance(a, np.ndarray):
        ptr = a.ctypes.data
        words = (ctypes.c_float * a.size).from_address(ptr - ptr % VECTOR_BYTES)
        return np.ctypeslib.as_array(words).view(F32).reshape(a.shape).copy()
    import cupy
    ptr = a.data.ptr
    base = cupy.cuda.MemoryPointer(a.data.mem, ptr - ptr % VECTOR_BYTES - a.data.mem.ptr)
    return cupy.ndarray(a.shape, dtype=a.dtype, memptr=base).copy()


def add_reading_from_aligned_bases(a, b):
    """float32 a + b (correctly rounded) over both operands read from their aligned bases."""
    x, y = (_host(read_from_aligned_base(v)) for v in (a, b))
    with np.errstate(all="ignore"):
        return _like(np.add(x, y, dtype=F32), (a,))


def concat_reading_its_last_input_from_its_aligned_base(*arrays, axis):
    """concat with its last input read from its aligned base (the others as given)."""
    last = _host(read_from_aligned_base(arrays[-1]))
    return _like(FORWARD[Op.concat](*(_host(a) for a in arrays[:-1]), last, axis=axis), arrays)


def add_at_its_pointer(a, b):
    """Correct: float32 a + b read where the arrays start."""
    with np.errstate(all="ignore"):
        return np.add(a, b, dtype=F32)


__all__ = ["OutputCachedByShape", "OutputCachedByValue", "VJPCachedByShape",
           "WorkspaceHalfRewritten", "WorkspaceRewrittenWhole", "abs_canonicalising_its_input",
           "add_at_its_pointer", "add_reading_from_aligned_bases", "canonicalise_nans_in_place",
           "concat_reading_its_last_input_from_its_aligned_base", "max_canonicalising_a_copy",
           "max_canonicalising_its_second_input", "max_pool_skipping_nans", "mul_vjp",
           "read_from_aligned_base", "softmax_skipping_nans", "sum_propagating_nans",
           "sum_skipping_nans", "sum_vjp", "tree_reduce"]
