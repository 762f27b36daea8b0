"""Issue 36 on the real device: blocks the exact-size cache handed to CuPy (cupy.empty through the
installed allocator, and launch.new_array's hot path) come back to the cache when only cyclic
garbage holds them, views kept after their base array went included, with no exception ignored
in a deallocator; and a process that exits holding such blocks exits without one. The CPU half
(the same logic on stand-ins) is tests/test_allocator_release.py."""
from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

import cuda_helpers as H

pytestmark = pytest.mark.cuda

REPO = Path(__file__).resolve().parent.parent


class Holder:
    pass


def _cycle_holding(view) -> None:
    holder = Holder()
    holder.self, holder.view = holder, view


def test_blocks_held_only_by_cyclic_garbage_come_back(monkeypatch):
    from engine.providers.native_cuda import launch
    from engine.runtime.allocator import install
    cp = H.cupy()
    cache = install()
    launch.cupy()
    assert type(cp.empty(4, cp.float32).data.mem) is cp.cuda.memory.UnownedMemory
    ignored = []
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)
    gc.collect()
    cp.cuda.Device().synchronize()
    live = cache.live_bytes
    gc.disable()              # the collection below is this test's
    try:
        for i in range(100):
            # a view younger than its memory object, kept in a cycle after its base went: the
            # order in which the collector cleared PythonFunctionAllocatorMemory while held
            base = cp.empty(256, cp.float32) if i % 2 else launch.new_array((16, 16), 256)
            _cycle_holding(base[1:] if i % 4 < 2 else base.reshape(16, 16).T)
            del base
        assert cache.live_bytes == live + 100 * 1024     # only the collector can free them
        gc.collect()
    finally:
        gc.enable()
    assert [repr(u.exc_value) for u in ignored] == []
    assert cache.live_bytes == live


EXITING_CHILD = """
import cupy as cp
from engine.providers.native_cuda import launch

class Holder:
    pass

launch.cupy()
KEPT = [cp.ones(1000, cp.float32), launch.new_array((8,), 8)]
for i in range(20):
    base = cp.empty(64, cp.float32)
    h = Holder()
    h.self, h.view = h, base[1:]
    del base, h
print("exiting")
"""


def test_a_process_exiting_with_blocks_in_cycles_ignores_no_exception():
    done = subprocess.run([sys.executable, "-c", EXITING_CHILD], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "exiting", done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
