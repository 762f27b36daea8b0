"""A stand-in for CuPy as the exhaustive sweep sees it, on the CPU: NumPy arrays whose every
float32 operation flushes subnormal inputs and results to same-signed zeros, conversions to and
from float32 included, as CuPy's kernels do (it compiles them with -ftz=true). Bit views and data
movement (where, indexing, copies) keep bits, as on the GPU. `.get()` returns the host array.

The sweep run with this namespace must give the same verdicts and counts as with NumPy itself:
what it proves is that none of the sweep's device code relies on float32 arithmetic."""
from __future__ import annotations

import numpy as np

_TINY = np.float32(2.0 ** -126)


def _flush(a):
    a = np.asarray(a)
    if a.dtype != np.float32:
        return a
    with np.errstate(invalid="ignore"):
        sub = (a != 0) & (np.abs(a.view(np.ndarray)) < _TINY)
    return np.where(sub, np.copysign(np.float32(0), a), a).astype(np.float32)


def _plain(a):
    return a.view(np.ndarray) if isinstance(a, FtzArray) else a


class FtzArray(np.ndarray):
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        args = [_flush(_plain(a)) if isinstance(a, np.ndarray) else a for a in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(_plain(o) for o in kwargs["out"])
        out = getattr(ufunc, method)(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(_wrap(_flush(o)) for o in out)
        return _wrap(_flush(out))

    def astype(self, dtype, *args, **kwargs):
        base = _flush(self.view(np.ndarray))
        with np.errstate(all="ignore"):
            return _wrap(_flush(base.astype(dtype, *args, **kwargs)))

    def get(self):
        return np.array(self.view(np.ndarray))


def _wrap(a):
    if isinstance(a, np.ndarray) and not isinstance(a, FtzArray):
        return a.view(FtzArray)
    return a


class FtzNumPy:
    """The namespace: NumPy's functions, results wrapped; asarray with a dtype converts (and
    flushes) as CuPy's astype kernel does; a host array becomes a device one."""

    def asarray(self, a, dtype=None):
        if isinstance(a, FtzArray):
            return a if dtype is None or a.dtype == dtype else a.astype(dtype)
        arr = np.asarray(a)
        out = _wrap(np.array(arr))
        return out if dtype is None or out.dtype == dtype else out.astype(dtype)

    def ascontiguousarray(self, a):
        return _wrap(np.ascontiguousarray(a))

    def __getattr__(self, name):
        fn = getattr(np, name)
        if isinstance(fn, np.ufunc) or not callable(fn) or isinstance(fn, type):
            return fn

        def call(*args, **kwargs):
            out = fn(*args, **kwargs)
            if isinstance(out, tuple):
                return tuple(_wrap(o) for o in out)
            return _wrap(out)
        return call


def device_handler(handler):
    """A host handler as a gradual-underflow GPU kernel looks to the sweep: it computes on the
    exact bits (no flushing) and hands back a device array."""
    import dataclasses

    def forward(*xs, **kw):
        return _wrap(np.asarray(handler.forward(*[_plain(x) for x in xs], **kw)))

    return dataclasses.replace(handler, forward=forward)
