"""The exact-size reuse cache on the real device: live bytes return to their start after buffers
drop, exact-size reuse, the cap in fresh subprocesses, upload/download, `torchlean memory`."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import cuda_helpers as H

pytestmark = pytest.mark.cuda


def _stats():
    from engine.runtime.allocator import allocator_stats
    H.cupy().cuda.Device().synchronize()
    return allocator_stats()


def test_live_bytes_return_to_start_after_buffers_drop():
    cp = H.cupy()
    from engine.runtime.allocator import install
    install()
    h = H.native_handler("add")
    x = cp.ones(1000, cp.float32)
    h.forward(x, x)                                   # compile and warm outside the window
    before = _stats()
    outs = [h.forward(x, x) for _ in range(10)]
    held = _stats()
    assert held.live_bytes - before.live_bytes == 10 * 4000
    assert held.alloc_count - before.alloc_count == 10
    assert held.peak_bytes >= held.live_bytes
    del outs
    after = _stats()
    assert after.live_bytes == before.live_bytes
    assert after.free_count - before.free_count == 10
    assert after.cache_bytes - held.cache_bytes == 10 * 4000 or after.cache_cap_bytes
    assert 0 < after.mem_free <= after.mem_total


def test_exact_size_reuse_hits_the_cache_and_never_rounds():
    cp = H.cupy()
    from engine.runtime.allocator import install
    cache = install()
    a = cp.empty(12345, cp.float32)
    ptr = a.data.ptr
    del a
    hits = cache.cache_hits
    b = cp.empty(12345, cp.float32)                  # the same size: the same block back
    assert b.data.ptr == ptr and cache.cache_hits == hits + 1
    c = cp.empty(12346, cp.float32)                  # 4 bytes more: never that block
    assert c.data.ptr != ptr
    assert cache._sizes[c.data.ptr] == 12346 * 4     # exact size, no bin rounding


def test_upload_download_and_wrapper_counts():
    from engine.runtime import device_buffer
    host = np.arange(1001, dtype=np.float32)
    before = device_buffer.wrapper_counts()
    buf = device_buffer.upload(host, "cuda")
    assert type(buf.data).__module__.startswith("cupy")
    assert np.array_equal(device_buffer.download(buf), host)
    mid = device_buffer.wrapper_counts()
    assert (mid.live - before.live, mid.alloc - before.alloc) == (1, 1)
    del buf
    after = device_buffer.wrapper_counts()
    assert after.live == before.live and after.finalize == before.finalize + 1


def test_torchlean_memory_prints_the_stats(capsys):
    from engine.cli_memory import run_memory
    assert run_memory(None) == 0
    out = capsys.readouterr().out
    assert "backend=cuda" in out and "cache_cap=" in out and "mem_total=" in out


_PROBE = r"""
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import cupy
    from engine.runtime.allocator import allocator_stats, install
    install()
    start = allocator_stats().live_bytes
    blocks = [cupy.empty(65536, cupy.float32) for _ in range(32)]
    del blocks
    cupy.cuda.Device().synchronize()
    s = allocator_stats()
print(json.dumps({"cap": s.cache_cap_bytes, "cache": s.cache_bytes, "live": s.live_bytes - start,
                  "frees": s.device_frees, "warnings": [str(w.message) for w in caught]}))
"""


@pytest.mark.parametrize("value, cap, cached, warns", [
    ("1048576", 1048576, 1048576, False),      # 4 blocks of 256 KiB fit, 28 are freed
    ("0", 0, 32 * 262144, False),              # explicit unbounded
    (None, 0, 32 * 262144, False),             # unset
    ("1MiB", 0, 32 * 262144, True),            # malformed: warned, ignored
    ("18446744073709551616", 0, 32 * 262144, True),   # 2^64: overflow, warned, ignored
])
def test_cap_in_a_fresh_process(value, cap, cached, warns):
    env = dict(os.environ)
    env.pop("TORCHLEAN_CUDA_CACHE_CAP_BYTES", None)
    if value is not None:
        env["TORCHLEAN_CUDA_CACHE_CAP_BYTES"] = value
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    obs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (obs["cap"], obs["cache"], obs["live"]) == (cap, cached, 0)
    named = [w for w in obs["warnings"] if "TORCHLEAN_CUDA_CACHE_CAP_BYTES" in w]
    assert bool(named) == warns, obs["warnings"]
    if cap:
        assert obs["frees"] == 32 - cached // 262144


def test_device_bytes_count_what_this_process_holds_from_the_driver():
    # Every block the cache got from cudaMalloc is live or cached until cudaFree: device_bytes
    # = live + cache at all times, and moves by exactly a block's size on a fresh malloc and on
    # a flush, whatever the device's free memory does.
    cp = H.cupy()
    from engine.runtime.allocator import install
    cache = install()
    cp.cuda.Device().synchronize()
    cache.flush()
    base = cache.device_bytes
    assert base == cache.live_bytes + cache.cache_bytes == cache.live_bytes
    mallocs = cache.device_mallocs
    a = cp.empty(777_777, cp.float32)                 # a size nothing else uses: a fresh block
    assert cache.device_mallocs == mallocs + 1
    assert cache.device_bytes == base + 777_777 * 4
    del a                                             # cached (or freed, over a cap): still exact
    assert cache.device_bytes == cache.live_bytes + cache.cache_bytes
    cache.flush()
    assert cache.device_bytes == base
    stats = _stats()
    assert stats.device_bytes == stats.live_bytes + stats.cache_bytes
    assert "device_bytes=" in stats.format()
