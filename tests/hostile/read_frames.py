"""Looks for the judge's expected values where an in-process judge would keep them: the callers'
frames (locals named ref, expected, fwd_ref ...), and every float32 array the garbage collector
knows of the same shape; returns the first it finds, else a wrong answer."""
import gc
import sys

import numpy as np

from tests.hostile._common import entry, wrong_abs

NAMES = ("ref", "expected", "fwd_ref", "reference", "rounded", "value")


def _from_frames(shape):
    f = sys._getframe(1)
    while f is not None:
        for name in NAMES:
            v = f.f_locals.get(name)
            v = getattr(v, "value", v)
            if isinstance(v, np.ndarray) and v.shape == shape and v.dtype == np.float32:
                return v
        f = f.f_back
    return None


def _from_heap(a):
    for obj in gc.get_objects():
        if isinstance(obj, np.ndarray) and obj is not a and obj.shape == a.shape \
                and obj.dtype == np.float32 and obj.size and np.all(obj >= 0) \
                and not np.array_equal(obj, a):
            return obj
    return None


def forward(a):
    got = _from_frames(a.shape)
    if got is None:
        got = _from_heap(a)
    return np.array(got) if got is not None else wrong_abs(a)


ENTRIES = entry("read_frames", forward)
