"""mpmath computes with Python integers or, where gmpy2 is installed, with GMP's (its `BACKEND`
"gmpy"); a user's environment decides which. The references must give the same bits under both:
on 2026-12-07 two raw mpf values built with a Python int mantissa (iv_add_exact's stand-in, the
row fast path's lower bound for log_softmax) failed mpmath's type assertion under gmpy2, so every
case reaching them became a harness error. Every op's reference, forward and VJP, on the first
case of each generator class (tests/mpmath_backend_probe.py; the softmax family's at six seeds),
with the fast paths on and with them off, runs in one process per backend; the digests must be
equal. The test extra installs gmpy2, so CI runs this and the whole suite under gmpy2 (the GPU
machine, without it, runs the suite under the Python backend); without gmpy2 this skips."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _probe_env(backend: str) -> dict:
    env = dict(os.environ)
    env.pop("MPMATH_NOGMPY", None)
    if backend == "python":
        env["MPMATH_NOGMPY"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    return env


def test_references_are_bit_for_bit_the_same_under_both_mpmath_backends():
    pytest.importorskip("gmpy2", reason="gmpy2 is not installed: only one mpmath backend here")
    from conformance.references import OPS
    from engine.types import BackendOp, RuntimeEntry
    labels = {op.label for op in (*BackendOp, *RuntimeEntry)}
    expected = [op for op in OPS if op in labels]
    procs = {backend: subprocess.Popen(
        [sys.executable, str(HERE / "mpmath_backend_probe.py")],
        env=_probe_env(backend), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for backend in ("gmpy", "python")}
    got = {}
    for backend, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{backend} backend: {err[-2000:]}"
        got[backend] = json.loads(out)
        assert got[backend]["backend"] == backend
    gmpy, python = got["gmpy"], got["python"]
    assert len(expected) > 50
    for probe in (gmpy, python):
        assert list(probe["ops"]) == list(probe["exact_only"]) == expected
    for part in ("ops", "exact_only"):
        differ = sorted(op for op in gmpy[part] if gmpy[part][op] != python[part].get(op))
        assert differ == [], f"{part}: references differ between backends for {differ}"
