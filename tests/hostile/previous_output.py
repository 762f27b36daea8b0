"""Returns its previous call's output buffer whenever the shape repeats (the stale-workspace
trick); computes only when the shape is new."""
import numpy as np

from tests.hostile._common import entry

LAST = {}


def forward(a):
    if a.shape in LAST:
        return LAST[a.shape]
    LAST[a.shape] = np.abs(a)
    return LAST[a.shape]


ENTRIES = entry("previous_output", forward)
