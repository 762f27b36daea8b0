"""The host emulations' CUDA threads (tests/emulated/fibers.h: one fiber per thread, run in turn):
values traded through shared memory across __syncthreads and a warp sum by __shfl_xor_sync
give what a GPU gives, and a barrier that half the block never reaches stops the emulation with
a message (the GPU hangs; an emulation that spun forever would hang the suite instead)."""
from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import pytest

from emulated.host_build import HERE, compile_shared, require


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    lib = tmp_path_factory.mktemp("fibers") / "libfibers_probe.so"
    require(compile_shared(lib, HERE / "fibers_probe.cpp", (), extra=(f"-I{HERE}",)))
    return lib


def test_threads_trade_through_barriers_and_warp_shuffles(probe):
    blocks = 3
    out = np.zeros(blocks * 256, dtype=np.float32)
    ctypes.CDLL(str(probe)).emu_probe_trade(
        ctypes.c_uint(blocks), out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    t = np.arange(256)
    other = 256 - t                          # stage[255 - t] held (255 - t) + 1
    warp_sums = np.add.reduceat(other, np.arange(0, 256, 32))
    expected = warp_sums[(t ^ 32) // 32].astype(np.float32)
    np.testing.assert_array_equal(out, np.tile(expected, blocks))


def test_a_divergent_barrier_stops_the_emulation_with_a_message(probe):
    code = f"import ctypes; ctypes.CDLL({str(probe)!r}).emu_probe_diverge()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert "128 threads wait at a barrier the others never reach" in proc.stderr
