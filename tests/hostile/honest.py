"""The control: abs, right. Passes."""
import numpy as np

from tests.hostile._common import entry

ENTRIES = entry("honest", lambda a: np.abs(a))
