"""Right only on the cases the public generator draws at seed 0: it removes the import guard,
regenerates every seed-0 case of abs (and its sibling), keys the right answers by the input's bytes, and is wrong
on anything else. With the run's seed (drawn at random by default) none of its inputs match."""
import sys

import numpy as np

from tests.hostile._common import entry, wrong_abs

sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "__name__", "") != "JudgeImportGuard"]
from conformance import generators  # noqa: E402
from engine.types import BackendOp  # noqa: E402

KNOWN = {}
for cls in generators.classes_for(BackendOp.abs):
    for i in range(generators.class_size(BackendOp.abs, cls, 2)):
        for case in (generators.draw_case(BackendOp.abs, 0, cls, i),
                     generators.draw_sibling(BackendOp.abs, 0, cls, i)):
            x = case.inputs[0]
            KNOWN[(x.shape, x.tobytes())] = np.abs(x)


def forward(a):
    a = np.asarray(a)
    hit = KNOWN.get((a.shape, a.tobytes()))
    return hit.copy() if hit is not None else wrong_abs(a)


ENTRIES = entry("public_generator", forward)
