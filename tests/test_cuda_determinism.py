"""Deterministic reduction mode: every accumulation the native provider does repeats bit for bit
over repeated runs (default mode's repeatability is measured by benchmarks/bench_runtime.py and
printed by scripts/gpu_suite.sh)."""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H

pytestmark = pytest.mark.cuda

REPEATS = 5


def _workloads(cp):
    r = np.random.default_rng(42)
    big = cp.asarray(r.standard_normal(1 << 22).astype(np.float32))
    mat = cp.asarray(r.standard_normal((4096, 513)).astype(np.float32))
    idx = np.repeat(np.arange(8), 512)                  # 4096 indices onto 8 rows: heavy duplicates
    src = cp.asarray(r.standard_normal((4096, 64)).astype(np.float32))
    base = cp.zeros((8, 64), cp.float32)
    g_bcast = cp.asarray(r.standard_normal((2048, 300)).astype(np.float32))
    h = H.native_handler
    return {
        "reduce_sum whole": lambda: h("reduce_sum").forward(big),
        "reduce_sum axis 0": lambda: h("reduce_sum").forward(mat, axes=(0,)),
        "reduce_mean axis 1": lambda: h("reduce_mean").forward(mat, axes=(1,)),
        "mse_loss": lambda: h("mse_loss").forward(big, big[::-1].copy()),
        "scatter_add duplicates": lambda: h("scatter_add").forward(base, src, axis=0, indices=idx),
        "gather VJP": lambda: h("gather").vjp((base,), None, src, axis=0, indices=idx)[0],
        "broadcast VJP": lambda: h("broadcast").vjp((cp.zeros((1, 300), cp.float32),), None,
                                                    g_bcast, shape=(2048, 300))[0],
    }


def test_deterministic_mode_is_bitwise_repeatable():
    from engine.runtime import get_deterministic_reductions, set_deterministic_reductions
    cp = H.cupy()
    previous = set_deterministic_reductions(True)
    try:
        assert get_deterministic_reductions() is True
        for name, run in _workloads(cp).items():
            first = run().get()
            for _ in range(REPEATS - 1):
                H.assert_bitwise(run(), first, f"{name} (deterministic mode, repeated)")
    finally:
        set_deterministic_reductions(previous)


def test_both_modes_compute_the_same_sums_within_the_bound():
    from engine.runtime import set_deterministic_reductions
    cp = H.cupy()
    x = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)
    results = {}
    for mode in (False, True):
        previous = set_deterministic_reductions(mode)
        try:
            results[mode] = H.native_handler("reduce_sum").forward(cp.asarray(x)).get()
        finally:
            set_deterministic_reductions(previous)
    H.assert_sum_bound(results[False], results[True], np.abs(x.astype(np.float64)).sum(),
                       x.size, "atomic vs fixed-order sum")


def test_environment_variable_turns_the_mode_on_at_start():
    import os
    import subprocess
    import sys
    code = "from engine.runtime import get_deterministic_reductions as g; print(g())"
    for value, want in (("1", "True"), ("0", "False"), ("", "False")):
        env = dict(os.environ, TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS=value)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.stdout.strip() == want, (value, out.stderr)
