"""Computes once per input identity (its id) and returns the cached answer whenever an input with
that identity comes again, whatever it holds now."""
import numpy as np

from tests.hostile._common import entry

CACHE = {}


def forward(a):
    key = (id(a), a.shape)
    if key not in CACHE:
        CACHE[key] = np.abs(a)
    return CACHE[key]


ENTRIES = entry("cache_by_identity", forward)
