"""How CuPy hands the exact-size cache's blocks back (engine/runtime/allocator.py: cupy_allocator,
CacheBlock), on a fake driver and a stand-in for cupy.cuda.memory (no GPU): a dropped array's
block returns to the cache; so does one whose memory object sits in cyclic garbage, whatever the
collector clears first (issue 36: CuPy's PythonFunctionAllocatorMemory lost its free callback
there, "TypeError: 'NoneType' object is not callable", and the block stayed live for good); and
an interpreter that exits holding blocks, some in cycles, releases them with no ignored
exception. The GPU half (the same with the real CuPy types) is tests/test_cuda_allocator.py's."""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

from engine.runtime.allocator import CacheBlock, ExactSizeCache, cupy_allocator

REPO = Path(__file__).resolve().parent.parent


class FakeRuntime:
    class CUDARuntimeError(Exception):
        status = 2

    def __init__(self):
        self.next = 0x1000

    def malloc(self, size):
        self.next += 0x1000
        return self.next

    def free(self, ptr):
        pass

    def deviceSynchronize(self):
        pass


class UnownedMemory:
    """cupy.cuda.memory.UnownedMemory's constructor and its one object field, `_owner` (which
    the Cython type's tp_clear sets to None)."""

    def __init__(self, ptr, size, owner, device_id=-1):
        assert device_id >= 0 or ptr, "a null pointer needs its device id"
        self.ptr, self.size, self.device_id, self._owner = ptr, size, device_id, owner


class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset


FAKE_MEMORY = SimpleNamespace(UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer)


def _allocator():
    cache = ExactSizeCache(0, runtime=FakeRuntime())
    return cache, cupy_allocator(cache, FAKE_MEMORY, lambda: 0)


def test_a_dropped_pointer_gives_its_block_back_and_the_next_allocation_reuses_it():
    cache, allocate = _allocator()
    p = allocate(256)
    assert (cache.live_bytes, cache.alloc_count, cache.device_mallocs) == (256, 1, 1)
    assert type(p.mem._owner) is CacheBlock and p.mem._owner[:2] == (p.ptr, 0)
    first = p.ptr
    del p
    assert (cache.live_bytes, cache.cache_bytes, cache.free_count) == (0, 256, 1)
    q = allocate(256)
    assert q.ptr == first and (cache.cache_hits, cache.device_mallocs) == (1, 1)


def test_zero_bytes_take_no_block():
    cache, allocate = _allocator()
    p = allocate(0)
    assert (p.ptr, p.mem.size, p.mem._owner, p.mem.device_id) == (0, 0, None, 0)
    del p
    assert (cache.alloc_count, cache.free_count, cache.device_mallocs) == (0, 0, 0)


def test_the_memory_object_cleared_first_still_gives_the_block_back_once():
    """What the collector does to an unreachable cycle, in the order that broke
    PythonFunctionAllocatorMemory: the memory object's field cleared (tp_clear) while the array
    holding it is not yet freed. The owner's finalizer releases the block then, and the later
    drop of the rest releases nothing twice."""
    cache, allocate = _allocator()
    p = allocate(64)
    ptr = p.ptr
    p.mem._owner = None                     # Cython's tp_clear: the object field set to None
    assert (cache.live_bytes, cache.free_count, cache._free[64]) == (0, 1, [ptr])
    del p
    assert (cache.free_count, cache._free[64]) == (1, [ptr])


def test_blocks_held_by_cyclic_garbage_come_back_when_it_is_collected(monkeypatch):
    ignored = []
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)
    cache, allocate = _allocator()

    class Holder:
        pass
    gc.collect()
    gc.disable()       # the collection below is this test's (no automatic one sooner)
    try:
        for _ in range(3):
            frame_like = Holder()
            frame_like.self = frame_like                 # a cycle holding a pointer
            frame_like.pointer = allocate(128)
            frame_like.pointer.mem.back = frame_like     # the memory object inside the cycle
        del frame_like
        assert cache.live_bytes == 3 * 128       # only the collector can free them
        gc.collect()
    finally:
        gc.enable()
    assert ignored == []
    assert (cache.live_bytes, cache.free_count, cache.cache_bytes) == (0, 3, 3 * 128)


TEARDOWN_CHILD = textwrap.dedent('''
    import os, sys
    sys.path.insert(0, {tests!r})
    from test_allocator_release import FAKE_MEMORY, FakeRuntime
    from engine.runtime.allocator import ExactSizeCache, cupy_allocator

    cache = ExactSizeCache(0, runtime=FakeRuntime())
    free = cache.free

    def release(ptr, device_id, write=os.write, free=free):
        # no module global: this module's are gone when the last blocks go at teardown
        free(ptr, device_id)
        write(1, b"released %d\\n" % ptr)

    cache.free = release
    allocate = cupy_allocator(cache, FAKE_MEMORY, lambda: 0)

    class Holder:
        pass

    KEPT = [allocate(32), allocate(48)]           # module globals, freed as modules go
    cycle = Holder()
    cycle.self, cycle.pointer = cycle, allocate(64)
    cycle.pointer.mem.back = cycle
    print("made", *(p.ptr for p in KEPT), cycle.pointer.ptr, flush=True)
''')


def test_an_interpreter_exiting_with_live_blocks_releases_them_without_ignored_exceptions():
    child = TEARDOWN_CHILD.format(tests=str(REPO / "tests"))
    done = subprocess.run([sys.executable, "-c", child], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(REPO), "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.split("\n")
    made = lines[0].split()[1:]
    released = {line.split()[1] for line in lines[1:] if line.startswith("released")}
    assert len(made) == 3 and released == set(made), done.stdout
