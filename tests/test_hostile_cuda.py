"""The hostile catalogue's CUDA kernels (tests/hostile/cuda_kernels.py) through the CLI on a GPU:
a device buffer kept from an earlier call, a half-written fresh allocation (the pool's stale bytes
showing through), an alias of the input, and an exit mid-run are each flagged; the honest CuPy
abs passes."""
from __future__ import annotations

import json

import pytest

from test_hostile_kernels import VALUE, cli

pytestmark = pytest.mark.cuda

EXPECTED = {
    "honest": ("passed", None),
    "stale_buffer": ("failed", VALUE),
    "half_written": ("failed", VALUE | {"poison-in-output"}),
    "alias_input": ("failed", {"input-mutated"}),
    "exit_mid": ("crashed", None),
}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    from engine.runtime.native import native_available
    if not native_available():
        pytest.skip("no native CUDA runtime here")
    out = tmp_path_factory.mktemp("hostile-cuda")
    proc = cli("run", "--device", "cuda", "--quick", "--cases", "1", "--no-progress",
               "--evidence-dir", str(out), "--plugin", "tests.hostile.cuda_kernels:ENTRIES")
    assert proc.returncode == 1, proc.stderr[-3000:]
    return {n: json.loads((out / f"hostile_cuda.{n}.json").read_text()) for n in EXPECTED}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_hostile_cuda_kernel_is_flagged(records, name):
    status, reasons = EXPECTED[name]
    rec = records[name]
    assert rec["status"] == status, (rec["status"], rec.get("message"))
    if reasons is not None:
        assert reasons & set(rec["failure_reasons"]), rec["failure_reasons"]
