"""Hostile CUDA kernels (CuPy), for tests/test_hostile_cuda.py on a GPU machine: each capsule
`hostile_cuda.<class>` computes abs on the device and cheats in one way."""
import dataclasses
import os

import cupy

from engine.types import Device
from tests.hostile._common import entry

LAST = {}
calls = [0]


def _abs(a):
    """abs by clearing the sign bit: CuPy's own elementwise kernels flush subnormals (-ftz), a
    second, unplanted defect (docs/PLUGINS.md)."""
    return (a.view(cupy.uint32) & cupy.uint32(0x7FFFFFFF)).view(cupy.float32)


def honest(a):
    return _abs(a)


def stale_buffer(a):
    """The previous call's device output whenever the shape repeats (a workspace kept by shape)."""
    if a.shape not in LAST:
        LAST[a.shape] = _abs(a)
    return LAST[a.shape]


def half_written(a):
    """Writes only the first half of a fresh allocation: the rest is whatever the pool held
    (on a warm pool, often the previous call's correct answer)."""
    out = cupy.empty_like(a)
    n = a.size // 2
    if n:
        out.ravel()[:n] = _abs(a.ravel()[:n])
    return out


def alias_input(a):
    a[...] = _abs(a)
    return a


def exit_mid(a):
    calls[0] += 1
    if calls[0] == 4:
        os._exit(0)
    return _abs(a) + 1


def _entries():
    out = []
    for fn in (honest, stale_buffer, half_written, alias_input, exit_mid):
        (e,) = entry(fn.__name__, fn, Device.cuda)
        out.append(dataclasses.replace(
            e, capsule=dataclasses.replace(e.capsule, name=f"hostile_cuda.{fn.__name__}")))
    return out


ENTRIES = _entries()
