"""Right, but prints a megabyte on stdout and on stderr at every call."""
import sys

import numpy as np

from tests.hostile._common import entry

CHUNK = "x" * (1 << 20)


def forward(a):
    sys.stdout.write(CHUNK)
    sys.stderr.write(CHUNK)
    return np.abs(a)


ENTRIES = entry("unbounded_print", forward)
