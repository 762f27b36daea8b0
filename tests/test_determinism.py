"""Determinism audits: fixed-order providers repeat bit for bit; a racy one is caught."""
import dataclasses

import numpy as np
import pytest

from conformance import determinism
from engine.capsule import ExecutableKernel
from engine.session import Session
from engine.types import BackendOp as Op


# The CPU reference capsules' audit (every one repeats bit for bit in both modes and stays within
# its bound) is tests/test_suites_cli.py::test_determinism_suite_writes_its_record, on the record
# the command writes: one audit of every capsule for both tests, which ran it twice.


def test_a_racy_sum_is_caught_in_deterministic_mode(monkeypatch):
    rng = np.random.default_rng()
    real = Session.kernel_for

    def racy_sum(a, axes=None, keepdims=False):
        # Accumulates in a random order each call, as unordered atomics do.
        flat = a.reshape(-1)[rng.permutation(a.size)]
        acc = np.float32(0)
        for chunk in np.array_split(flat, 64):
            acc = np.float32(acc + np.float32(chunk.sum(dtype=np.float32)))
        return np.asarray(acc, dtype=np.float32)

    def kernel_for(self, op):
        kernel = real(self, op)
        if op is Op.reduce_sum:
            return ExecutableKernel(kernel.capsule,
                                    dataclasses.replace(kernel.handler, forward=racy_sum))
        return kernel
    monkeypatch.setattr(Session, "kernel_for", kernel_for)
    capsule = real(Session("cpu"), Op.reduce_sum).capsule
    result = determinism.audit_capsule(capsule, runs=4)
    assert not result.passed
    assert not result.deterministic.bitwise_identical
    assert result.deterministic.max_spread > 0
    assert any("deterministic mode differed" in p for p in result.problems)


@pytest.mark.cuda
def test_cuda_deterministic_mode_is_bitwise_identical():
    report = determinism.run_determinism("cuda", runs=8)
    assert report.results
    for r in report.results:
        assert r.passed, (r.capsule, r.problems)
