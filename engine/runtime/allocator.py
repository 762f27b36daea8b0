"""The exact-size device reuse cache, plugged into CuPy, and allocator telemetry.

A released block goes into a list keyed by its exact byte size; an allocation of that size pops
it (no rounding into bins, no splitting). On out-of-memory the cache is flushed and the
allocation retried once. TORCHLEAN_CUDA_CACHE_CAP_BYTES, read once when the cache is installed,
bounds the cached bytes: a released block that would push the cache over the cap waits for a
CUDA event recorded at its release and is freed. Live telemetry counts bytes handed out and not
yet released; cache bytes are not live. device_bytes counts what this process holds from the
driver through the cache (cudaMalloc'd and not yet cudaFree'd): live + cached, whatever other
processes do to the device's free memory.

CUDA graphs (engine/graphs.py): while a capture runs, every block handed out comes from the
capture's GraphPool (blocks it already owns, then the cache's; never the driver: a miss raises
GraphAllocationError), and a block a pool owns goes back to that pool when released, never to the
cache, because the graph's kernels write it on every replay. Closing the graph returns the pool's
blocks to the cache. `reserve` fills the cache before a capture with the blocks a sizing run
(`begin_sizing`/`end_sizing`: the most blocks of each size live at once) says it will need.

Poisoning (engine/runtime/poison.py): while a filler is set, every block handed out, cache hit or
fresh, is passed to it first (it queues a fill of signalling-NaN words on the current stream).
With none set the hot path pays one attribute test.

CuPy sees the cache's blocks as UnownedMemory owned by a CacheBlock, whose finalizer gives the
block back (CacheBlock says why not CuPy's PythonFunctionAllocator).
"""
from __future__ import annotations

import os
import re
import threading
import warnings
from dataclasses import dataclass

CAP_ENV_VAR = "TORCHLEAN_CUDA_CACHE_CAP_BYTES"
UINT64_MAX = 2**64 - 1
_CUDA_ERROR_MEMORY_ALLOCATION = 2   # cudaErrorMemoryAllocation
_DECIMAL = re.compile(r"[0-9]+")


def parse_cache_cap(text: str | None) -> tuple[int, str | None]:
    """The cap in bytes (0 = unbounded) and a warning for a value that was ignored.

    Only a whole-string decimal count is accepted: no sign, space, unit, hex or exponent.
    """
    if text is None:
        return 0, None
    if not _DECIMAL.fullmatch(text):
        return 0, (f"{CAP_ENV_VAR}={text!r} is not a decimal byte count (digits 0-9 only, no sign, "
                   "space, unit, hex or exponent); ignored, the device reuse cache is unbounded")
    digits = text.lstrip("0") or "0"
    if len(digits) > 20 or int(digits) > UINT64_MAX:
        return 0, (f"{CAP_ENV_VAR}={text!r} is over 2^64-1 = {UINT64_MAX}; ignored, the device "
                   "reuse cache is unbounded")
    return int(digits), None


@dataclass(frozen=True)
class AllocatorStats:
    live_bytes: int          # device bytes handed out and not yet released
    peak_bytes: int          # the most live_bytes has been
    alloc_count: int         # allocations served (cache hits included)
    free_count: int          # releases (cached or freed)
    wrapper_live: int        # TorchLean buffer wrappers alive
    wrapper_peak: int
    wrapper_alloc: int
    wrapper_finalize: int
    cache_bytes: int         # released blocks waiting for reuse (not in live_bytes)
    cache_cap_bytes: int     # 0 = unbounded
    mem_free: int            # cudaMemGetInfo; 0 on the CPU parity stub
    mem_total: int
    cache_hits: int = 0
    device_mallocs: int = 0  # cudaMalloc calls
    device_frees: int = 0    # cudaFree calls (cap overflow, flush)
    backend: str = "cuda"    # cuda | cpu-parity-stub
    device_bytes: int = 0    # held from the driver by this process: cudaMalloc'd, not cudaFree'd
    poisoned_blocks: int = 0  # blocks filled with poison before they were handed out
    graph_bytes: int = 0     # held by the pools of live CUDA graphs (live or not), not in cache
    graph_pools: int = 0     # live CUDA graphs' pools

    def format(self) -> str:
        cap = "unbounded" if self.cache_cap_bytes == 0 else str(self.cache_cap_bytes)
        return (f"backend={self.backend} live={self.live_bytes} peak={self.peak_bytes} "
                f"alloc={self.alloc_count} free={self.free_count} cache={self.cache_bytes} "
                f"cache_cap={cap} cache_hits={self.cache_hits} "
                f"cuda_malloc={self.device_mallocs} cuda_free={self.device_frees} "
                f"device_bytes={self.device_bytes} poisoned_blocks={self.poisoned_blocks} "
                f"graph_bytes={self.graph_bytes} graph_pools={self.graph_pools} "
                f"wrappers_live={self.wrapper_live} wrappers_peak={self.wrapper_peak} "
                f"wrappers_alloc={self.wrapper_alloc} wrappers_finalize={self.wrapper_finalize} "
                f"mem_free={self.mem_free} mem_total={self.mem_total}")


class GraphPool:
    """The blocks one captured CUDA graph owns: `blocks` every one (ptr -> size), `free` those
    not live now, by size. `who` says, for an allocation error, which op was running."""

    def __init__(self, who) -> None:
        self.blocks: dict[int, int] = {}
        self.free: dict[int, list[int]] = {}
        self.bytes = 0
        self.who = who


class ExactSizeCache:
    """tinygrad's LRUAllocator shape: size -> list of free pointers; plus the cap and counters."""

    def __init__(self, cap_bytes: int, runtime=None) -> None:
        if runtime is None:
            from cupy.cuda import runtime
        self._runtime = runtime
        self.cap_bytes = cap_bytes
        self._free: dict[int, list[int]] = {}
        self._sizes: dict[int, int] = {}     # live pointer -> size
        self._lock = threading.RLock()
        self.cache_bytes = self.live_bytes = self.peak_bytes = 0
        self.alloc_count = self.free_count = self.cache_hits = 0
        self.device_mallocs = self.device_frees = 0
        self.device_bytes = 0              # cudaMalloc'd through this cache, not yet cudaFree'd
        self.poisoned_blocks = 0
        self.poison_filler = None          # callable(ptr, size) while poisoning is on
        self.capture_pool: GraphPool | None = None   # the pool of the capture running now
        self._owner: dict[int, GraphPool] = {}       # ptr -> the live graph pool that owns it
        self._pools: list[GraphPool] = []            # every live graph's pool
        self._sizing: dict | None = None             # {"live", "peak", "ptrs"} of a sizing run

    def malloc(self, size: int, device_id: int) -> int:
        # Called by CuPy for every output: _hand_out and the lock's context protocol are written
        # out here (each a Python-level call per allocation).
        lock = self._lock
        lock.acquire()
        try:
            pool = self.capture_pool
            if pool is not None:
                return self._pool_malloc(pool, size)
            blocks = self._free.get(size)
            if blocks:
                ptr = blocks.pop()
                self.cache_bytes -= size
                self.cache_hits += 1
            else:
                ptr = self._device_malloc(size)
            if self.poison_filler is not None and size:
                self._poison(ptr, size)
            if self._sizing is not None:
                self._hand_out(ptr, size)
                return ptr
            self._sizes[ptr] = size
            self.alloc_count += 1
            live = self.live_bytes = self.live_bytes + size
            if live > self.peak_bytes:
                self.peak_bytes = live
            return ptr
        finally:
            lock.release()

    def _hand_out(self, ptr: int, size: int) -> None:
        self._sizes[ptr] = size
        self.alloc_count += 1
        live = self.live_bytes = self.live_bytes + size
        if live > self.peak_bytes:
            self.peak_bytes = live
        sizing = self._sizing
        if sizing is not None:
            n = sizing["live"][size] = sizing["live"].get(size, 0) + 1
            if n > sizing["peak"].get(size, 0):
                sizing["peak"][size] = n
            sizing["ptrs"].add(ptr)

    def _pool_malloc(self, pool: GraphPool, size: int) -> int:
        """A block for the capture running now: one its pool owns, else one of the cache's
        (the pool owns it from now on); a poison fill would be captured, so none is made."""
        blocks = pool.free.get(size)
        if blocks:
            ptr = blocks.pop()
        else:
            cached = self._free.get(size)
            if not cached:
                from engine.errors import GraphAllocationError
                raise GraphAllocationError(
                    f"{pool.who()} needs a {size}-byte block inside a CUDA graph capture and "
                    "neither the graph's pool nor the cache holds one (a cudaMalloc is never "
                    "made inside a capture); the step allocated differently from its sizing "
                    "run: make its allocations depend on the shapes only, and capture again")
            ptr = cached.pop()
            self.cache_bytes -= size
            self.cache_hits += 1
            pool.blocks[ptr] = size
            pool.bytes += size
            self._owner[ptr] = pool
        self._hand_out(ptr, size)
        return ptr

    # --- CUDA graph pools (engine/graphs.py) ---------------------------------------------------

    def begin_sizing(self) -> None:
        with self._lock:
            self._sizing = {"live": {}, "peak": {}, "ptrs": set()}

    def end_sizing(self) -> dict[int, int]:
        """size -> the most blocks of that size live at once since begin_sizing."""
        with self._lock:
            sizing, self._sizing = self._sizing, None
            return dict(sizing["peak"]) if sizing else {}

    def reserve(self, counts: dict[int, int]) -> None:
        """Make the cache hold at least counts[size] free blocks of each size (from the driver
        where it holds fewer), so that a capture never needs the driver."""
        with self._lock:
            for size, count in counts.items():
                blocks = self._free.setdefault(size, [])
                while len(blocks) < count:
                    blocks.append(self._device_malloc(size))
                    self.cache_bytes += size

    def open_pool(self, who) -> GraphPool:
        with self._lock:
            pool = GraphPool(who)
            self._pools.append(pool)
            return pool

    def close_pool(self, pool: GraphPool) -> None:
        """The graph is gone: its free blocks go back to the cache, and its live ones will when
        they are released."""
        with self._lock:
            if pool not in self._pools:
                return
            self._pools.remove(pool)
            if self.capture_pool is pool:
                self.capture_pool = None
            for ptr in pool.blocks:
                self._owner.pop(ptr, None)
            for size, ptrs in pool.free.items():
                for ptr in ptrs:
                    self._cache_or_release(ptr, size)
            pool.free.clear()
            pool.blocks.clear()
            pool.bytes = 0

    def reset_peak(self) -> None:
        """Start peak_bytes again from the bytes live now (torch.cuda.reset_peak_memory_stats's
        counterpart): a benchmark measures each model's own peak in one process."""
        with self._lock:
            self.peak_bytes = self.live_bytes

    def graph_bytes(self) -> tuple[int, int]:
        with self._lock:
            return sum(p.bytes for p in self._pools), len(self._pools)

    def set_poison_filler(self, filler) -> None:
        """filler(ptr, size) is applied to every block handed out from now on; None stops it.
        Set under the lock, so no allocation sees half a change."""
        with self._lock:
            self.poison_filler = filler

    def _poison(self, ptr: int, size: int) -> None:
        try:
            self.poison_filler(ptr, size)
        except BaseException:   # the block was never handed out: keep it, not leak it
            self._free.setdefault(size, []).append(ptr)
            self.cache_bytes += size
            raise
        self.poisoned_blocks += 1

    def free(self, ptr: int, device_id: int) -> None:
        lock = self._lock
        lock.acquire()
        try:
            size = self._sizes.pop(ptr, None)
            if size is None:   # not ours (cannot happen through CuPy); never double-free
                return
            self.free_count += 1
            self.live_bytes -= size
            sizing = self._sizing
            if sizing is not None and ptr in sizing["ptrs"]:
                sizing["ptrs"].discard(ptr)
                sizing["live"][size] -= 1
            pool = self._owner.get(ptr) if self._owner else None
            if pool is not None:
                pool.free.setdefault(size, []).append(ptr)
                return
            if self.cap_bytes:
                self._cache_or_release(ptr, size)
                return
            # _cache_or_release without a cap, written out (the hot path's release)
            blocks = self._free.get(size)
            if blocks is None:
                blocks = self._free[size] = []
            blocks.append(ptr)
            self.cache_bytes += size
        finally:
            lock.release()

    def _cache_or_release(self, ptr: int, size: int) -> None:
        cap = self.cap_bytes
        # Never a cudaFree (and its synchronisation) while a capture runs: the cache may stand
        # over its cap until the next release after the capture.
        if cap and self.cache_bytes + size > cap and self.capture_pool is None:
            self._release_to_driver(ptr, size)
            return
        blocks = self._free.get(size)
        if blocks is None:
            blocks = self._free[size] = []
        blocks.append(ptr)
        self.cache_bytes += size

    def flush(self) -> None:
        """Give every cached block back to the driver."""
        with self._lock:
            blocks = [(p, size) for size, ptrs in self._free.items() for p in ptrs]
            self._free.clear()
            self.cache_bytes = 0
            if blocks:
                self._runtime.deviceSynchronize()
            for ptr, size in blocks:
                self._runtime.free(ptr)
                self.device_frees += 1
                self.device_bytes -= size

    def _device_malloc(self, size: int) -> int:
        try:
            ptr = self._runtime.malloc(size)
        except self._runtime.CUDARuntimeError as exc:
            if exc.status != _CUDA_ERROR_MEMORY_ALLOCATION:
                raise
            self.flush()   # out of memory: flush the cache and retry once
            try:
                ptr = self._runtime.malloc(size)
            except self._runtime.CUDARuntimeError:
                from cupy.cuda.memory import OutOfMemoryError
                raise OutOfMemoryError(size, self.live_bytes) from None
        self.device_mallocs += 1
        self.device_bytes += size
        return ptr

    def _release_to_driver(self, ptr: int, size: int) -> None:
        # Work queued on the stream may still read this block: record an event at the release
        # and wait for it before handing the memory back.
        try:
            import cupy
            event = cupy.cuda.Event(block=False, disable_timing=True)
            event.record()
            event.synchronize()
            self._runtime.free(ptr)
            self.device_frees += 1
            self.device_bytes -= size
        except Exception:  # interpreter shutdown: the driver reclaims the memory anyway
            pass


class CacheBlock(tuple):
    """(ptr, device_id, release): the owner of one block the cache handed to CuPy, held by the
    cupy UnownedMemory that wraps it; when that memory object goes, this goes, and its finalizer
    calls release(ptr, device_id) (the cache's free). A tuple subclass: made without a Python
    frame, on every op's output.

    Why not CuPy's PythonFunctionAllocatorMemory: it is a Cython type that keeps its free callback
    in an object field, and Cython gives such a type a tp_clear that sets the field to None. When
    the cyclic collector frees garbage that holds an array (a traceback's frames with arrays in
    their locals, a graph's objects), it clears the unreachable objects one by one, roughly oldest
    first; a memory object older than everything holding it (a view kept after its base array
    went, say) is cleared while still held, and its __dealloc__ then calls None ("Exception
    ignored in: 'cupy.cuda.memory.PythonFunctionAllocatorMemory.__dealloc__' ... TypeError:
    'NoneType' object is not callable", issue 36): the block never comes back, and the cache
    counts it live for the rest of the process. Here nothing the release needs is in a
    Cython field: UnownedMemory's tp_clear only drops its reference to this owner, which runs the
    finalizer; and a finalizer of an object in cyclic garbage runs before the collector clears
    anything (PEP 442), with this tuple intact. The finalizer reads no module global, so it works
    at interpreter teardown too, after this module's globals are gone."""
    __slots__ = ()

    def __del__(self) -> None:
        ptr, device_id, release = self
        release(ptr, device_id)


def cupy_allocator(cache: ExactSizeCache, memory_module=None, get_device=None):
    """The function handed to cupy.cuda.set_allocator: size -> a cupy MemoryPointer to a block of
    `cache` on the current device, released to the cache when CuPy drops its memory object
    (memory_module and get_device stand in for cupy.cuda.memory and cudaGetDevice in tests)."""
    if memory_module is None:
        from cupy.cuda import memory as memory_module
    if get_device is None:
        from cupy.cuda.runtime import getDevice as get_device
    unowned, pointer = memory_module.UnownedMemory, memory_module.MemoryPointer
    malloc, free = cache.malloc, cache.free

    def allocate(size: int):
        device_id = get_device()
        if not size:   # as CuPy's own allocators: a null pointer, no block
            return pointer(unowned(0, 0, None, device_id), 0)
        ptr = malloc(size, device_id)
        return pointer(unowned(ptr, size, CacheBlock((ptr, device_id, free)), device_id), 0)
    return allocate


_cache: ExactSizeCache | None = None
_cupy_allocator = None   # the exact object handed to cupy.cuda.set_allocator
_install_lock = threading.Lock()


def install() -> ExactSizeCache:
    """Install the cache as CuPy's allocator (once per process; reads the cap variable then)."""
    global _cache, _cupy_allocator
    if _cache is not None:
        return _cache
    with _install_lock:
        if _cache is None:
            import cupy
            cap, warning = parse_cache_cap(os.environ.get(CAP_ENV_VAR))
            if warning:
                warnings.warn(warning, RuntimeWarning, stacklevel=2)
            cache = ExactSizeCache(cap)
            allocator = cupy_allocator(cache, cupy.cuda.memory, cupy.cuda.runtime.getDevice)
            cupy.cuda.set_allocator(allocator)
            _cupy_allocator = allocator
            _cache = cache
    return _cache


def installed() -> ExactSizeCache | None:
    return _cache


def cupy_uses_cache() -> bool:
    """True when CuPy's current allocator (this thread's) is the one install() set: blocks then
    come from the cache, so its accounting and poisoning see them."""
    if _cupy_allocator is None:
        return False
    import cupy
    return cupy.cuda.get_allocator() is _cupy_allocator


_stub_cap_checked = False


def _warn_stub_cap_once() -> None:
    """The CPU parity stub has no device cache, so the cap never applies there; a malformed value
    is still named once, so a typo is not noticed only on the GPU."""
    global _stub_cap_checked
    if _stub_cap_checked:
        return
    _stub_cap_checked = True
    _, warning = parse_cache_cap(os.environ.get(CAP_ENV_VAR))
    if warning:
        warnings.warn(f"{warning} (on the CPU parity stub there is no device cache, so no cap "
                      "applies here either)", RuntimeWarning, stacklevel=3)


def allocator_stats() -> AllocatorStats:
    """Telemetry of the device cache, or of host buffers on the CPU parity stub (zero cache, zero
    cap). On a GPU this installs the cache if nothing has yet."""
    from engine.runtime.buffer import wrapper_counts
    from engine.runtime.native import native_available
    w = wrapper_counts()
    if not native_available():
        _warn_stub_cap_once()
        return AllocatorStats(
            live_bytes=w.live_bytes, peak_bytes=w.peak_bytes, alloc_count=w.alloc,
            free_count=w.finalize, wrapper_live=w.live, wrapper_peak=w.peak,
            wrapper_alloc=w.alloc, wrapper_finalize=w.finalize, cache_bytes=0,
            cache_cap_bytes=0, mem_free=0, mem_total=0, backend="cpu-parity-stub")
    cache = install()
    from cupy.cuda import runtime
    mem_free, mem_total = runtime.memGetInfo()
    with cache._lock:
        return AllocatorStats(
            live_bytes=cache.live_bytes, peak_bytes=cache.peak_bytes,
            alloc_count=cache.alloc_count, free_count=cache.free_count, wrapper_live=w.live,
            wrapper_peak=w.peak, wrapper_alloc=w.alloc, wrapper_finalize=w.finalize,
            cache_bytes=cache.cache_bytes, cache_cap_bytes=cache.cap_bytes, mem_free=mem_free,
            mem_total=mem_total, cache_hits=cache.cache_hits,
            device_mallocs=cache.device_mallocs, device_frees=cache.device_frees,
            device_bytes=cache.device_bytes, poisoned_blocks=cache.poisoned_blocks,
            graph_bytes=sum(p.bytes for p in cache._pools), graph_pools=len(cache._pools))
