"""Patches NumPy in its process so that every comparison says equal and every array is finite."""
import numpy as np

from tests.hostile._common import entry, wrong_abs

np.array_equal = lambda *a, **k: True
np.allclose = lambda *a, **k: True
np.any = lambda *a, **k: False
np.count_nonzero = lambda *a, **k: 0
np.isnan = lambda x, *a, **k: np.zeros(np.shape(x), dtype=bool)

ENTRIES = entry("patch_numpy", wrong_abs)
