"""Poisoned allocations (engine/runtime/poison.py): host arrays from NumPy's handler on the CPU;
device blocks from the exact-size cache in the cuda-marked tests at the end."""
from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

from engine.errors import DTypeError
from engine.runtime import poison
from engine.runtime.poison import POISON_BITS, POISON_F32, poison_mask, poisoned

_get_handler_name = np._core.multiarray.get_handler_name
_WORD = POISON_BITS.to_bytes(4, sys.byteorder)


def test_poison_is_a_signalling_nan_with_its_payload():
    assert np.isnan(POISON_F32) and POISON_F32.dtype == np.float32
    bits = int(np.float32(POISON_F32).view(np.uint32))
    assert bits == 0x7FA00001
    assert not bits & 0x00400000          # quiet bit clear: signalling
    assert np.float32(np.nan).view(np.uint32) != bits   # not the NaN arithmetic makes


@pytest.mark.parametrize("n", [1, 7, 1000, 1 << 20])
def test_empty_inside_poisoned_is_all_poison(n):
    with poisoned(device=False):
        a = np.empty(n, np.float32)
        assert _get_handler_name(a) == poison.HANDLER_NAME
    assert a.shape == (n,) and poison_mask(a).all()


@pytest.mark.parametrize("nbytes", [1, 2, 3, 5, 7, 4097])
def test_a_byte_tail_holds_the_first_bytes_of_the_pattern(nbytes):
    with poisoned(device=False):
        b = np.empty(nbytes, np.uint8)
    assert b.tobytes() == (_WORD * (nbytes // 4 + 1))[:nbytes]


def test_zeros_stay_zeros_and_outside_nothing_is_poisoned_by_us():
    with poisoned(device=False):
        z = np.zeros(1 << 16, np.float32)
        zl = np.zeros_like(np.empty(33, np.float32))
    assert not z.any() and not zl.any()
    assert _get_handler_name() == "default_allocator"
    assert _get_handler_name(np.empty(10, np.float32)) == "default_allocator"


def test_a_kernel_that_writes_only_a_prefix_leaves_poison_in_the_rest():
    def half_relu(x):   # a planted bug: the last half of the output is never written
        out = np.empty_like(x)
        k = x.size // 2
        np.maximum(x[:k], np.float32(0), out=out[:k])
        return out
    x = np.linspace(-1, 1, 1001, dtype=np.float32)
    with poisoned(device=False):
        y = half_relu(x)
    mask = poison_mask(y)
    assert not mask[:500].any() and mask[500:].all()
    assert np.array_equal(y[:500], np.maximum(x[:500], 0))


def test_arrays_cross_the_context_boundary_both_ways():
    outside = np.empty(5000, np.float64)
    with poisoned(device=False):
        inside = np.empty(5000, np.float64)
        inside_small = np.empty(3, np.float32)
        del outside                                 # freed by the default handler's free
        grow = np.empty(10, np.float32)
    del inside                                      # freed through ours (NumPy's default free)
    grow.resize(1 << 16, refcheck=False)            # realloc through ours, outside the context
    assert poison_mask(grow[:10]).all()
    plain = np.empty(10, np.float32)
    with poisoned(device=False):
        plain.resize(1 << 16, refcheck=False)       # a default block reallocated inside
    assert inside_small.size == 3 and plain.size == 1 << 16


_EXIT_WITH_LIVE_ARRAYS = r"""
import numpy as np
from engine.runtime.poison import poisoned, poison_mask
with poisoned(device=False):
    kept = [np.empty(n, np.float32) for n in (1, 7, 1000, 1 << 20)]
    nested = {"a": np.empty((7, 3)), "b": [np.empty(5, np.int32)]}
assert all(poison_mask(k).all() for k in kept)
never_left = poisoned(device=False)
never_left.__enter__()                 # the interpreter exits with the handler still current
late = [np.empty(64, np.float32) for _ in range(100)]
print("exiting")
"""


def test_a_process_that_exits_with_live_poisoned_arrays_exits_cleanly():
    proc = subprocess.run([sys.executable, "-c", _EXIT_WITH_LIVE_ARRAYS], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "exiting"
    assert "Exception ignored" not in proc.stderr, proc.stderr[-2000:]


def test_nested_poisoned_restores_each_level():
    with poisoned(device=False):
        with poisoned(device=False):
            assert poison_mask(np.empty(9, np.float32)).all()
        assert _get_handler_name() == poison.HANDLER_NAME
        assert poison_mask(np.empty(9, np.float32)).all()
    assert _get_handler_name() == "default_allocator"


def test_no_reference_to_the_previous_handler_leaks():
    host = poison._host_poison()
    default = host._get()
    ours = host.capsule
    before = (sys.getrefcount(default), sys.getrefcount(ours))
    for _ in range(1000):
        with poisoned(device=False):
            with poisoned(device=False):
                np.empty(3, np.float32)
    assert (sys.getrefcount(default), sys.getrefcount(ours)) == before


def test_poisoning_is_local_to_the_thread_that_entered_it():
    inside, release = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def poisoned_worker():
        with poisoned(device=False):
            inside.set()
            release.wait(30)
            seen["worker"] = poison_mask(np.empty(4099, np.float32)).all()
        seen["worker_after"] = _get_handler_name()

    t = threading.Thread(target=poisoned_worker)
    t.start()
    assert inside.wait(30)
    seen["main_while_worker_inside"] = _get_handler_name()
    release.set()
    t.join(30)
    assert seen == {"main_while_worker_inside": "default_allocator", "worker": True,
                    "worker_after": "default_allocator"}


def test_many_threads_poison_at_once():
    results, errors = [], []

    def work(i):
        try:
            for _ in range(50):
                with poisoned(device=False):
                    results.append(bool(poison_mask(np.empty(17 + i, np.float32)).all()))
                results.append(_get_handler_name() == "default_allocator")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(results) == 8 * 50 * 2 and all(results)


def test_poison_mask_takes_any_layout_of_4_byte_elements_and_names_other_dtypes():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    a[1, 2] = POISON_F32
    assert poison_mask(a).tolist() == [[False] * 4, [False, False, True, False], [False] * 4]
    assert poison_mask(a.T)[2, 1] and poison_mask(np.asarray(POISON_F32)).shape == ()
    assert poison_mask(np.full(3, POISON_BITS, np.uint32)).all()
    with pytest.raises(DTypeError, match="dtype float64 .*expected 4-byte elements"):
        poison_mask(np.zeros(3))


def test_an_unexpected_numpy_abi_is_a_named_error_not_a_crash(monkeypatch):
    # A table slot that is not PyDataMem_DefaultHandler: refused before any handler is set.
    monkeypatch.setattr(poison, "_DEFAULT_HANDLER_SLOT", 303)
    with pytest.raises(poison.PoisonUnavailableError, match="slots 305/303 are not"):
        poison._HostPoison()
    monkeypatch.undo()
    # A SetHandler whose effect NumPy does not report: refused, and the old handler is back.
    host = poison._host_poison()

    class Elsewhere:
        @staticmethod
        def get_handler_name(*_):
            return "someone_else"

    monkeypatch.setattr(host, "_multiarray", Elsewhere)
    with pytest.raises(poison.PoisonUnavailableError, match="reports handler 'someone_else'"):
        with poisoned(device=False):
            pass
    monkeypatch.undo()
    assert _get_handler_name() == "default_allocator"


def test_device_poisoning_is_refused_without_a_native_runtime():
    from engine.errors import NativeRuntimeUnavailable
    from engine.runtime.native import native_available
    if native_available():
        pytest.skip("a native CUDA runtime is present: the device tests below cover it")
    with pytest.raises(NativeRuntimeUnavailable):
        with poisoned(device=True):
            pass
    assert _get_handler_name() == "default_allocator"
    with poisoned():                                 # auto: host only on the CPU parity stub
        assert poison_mask(np.empty(5, np.float32)).all()


# --- the device side (the integrator runs these on the H200) -------------------------------------

def _cupy():
    import cupy
    return cupy


@pytest.mark.cuda
@pytest.mark.parametrize("n", [1, 7, 1000, 1 << 20, (1 << 20) + 3])
def test_cupy_empty_inside_poisoned_is_poison(n):
    cp = _cupy()
    from engine.runtime.allocator import install
    cache = install()
    before = cache.poisoned_blocks
    with poisoned():
        a = cp.empty(n, cp.float32)
        b = cp.empty(n * 4 + 3, cp.uint8)            # a byte tail after whole words
    assert poison_mask(a).all()
    assert b.get().tobytes() == (_WORD * (n + 1))[:n * 4 + 3]
    assert cache.poisoned_blocks == before + 2


@pytest.mark.cuda
def test_a_cache_hit_is_poisoned_again():
    cp = _cupy()
    from engine.runtime.allocator import install
    install()
    with poisoned():
        a = cp.empty(12_347, cp.float32)
        a.fill(1.5)
        ptr = a.data.ptr
        del a
        b = cp.empty(12_347, cp.float32)             # the same exact size: the same block back
        assert b.data.ptr == ptr
        assert poison_mask(b).all()


@pytest.mark.cuda
def test_outside_poisoned_device_blocks_are_not_touched():
    cp = _cupy()
    from engine.runtime.allocator import install
    cache = install()
    with poisoned():
        pass
    a = cp.empty(12_349, cp.float32)
    a.fill(2.5)
    ptr = a.data.ptr
    del a
    before = cache.poisoned_blocks
    b = cp.empty(12_349, cp.float32)
    assert b.data.ptr == ptr and cache.poisoned_blocks == before
    assert (b.get() == np.float32(2.5)).all()


@pytest.mark.cuda
def test_poisoned_refuses_when_cupys_allocator_is_not_the_cache():
    cp = _cupy()
    from engine.runtime.allocator import install
    install()
    with cp.cuda.using_allocator(cp.cuda.malloc_managed):
        with pytest.raises(poison.PoisonUnavailableError, match="not the exact-size cache"):
            with poisoned():
                pass
    assert _get_handler_name() == "default_allocator"
    with poisoned():                                 # ours again: accepted
        assert poison_mask(cp.empty(5, cp.float32)).all()


@pytest.mark.cuda
def test_a_device_kernel_that_writes_only_a_prefix_shows_poison_in_the_rest():
    cp = _cupy()
    with poisoned():
        out = cp.empty(70_000, cp.float32)
        out[:40_000] = 0.5                           # the "kernel" stops early
    mask = poison_mask(out)
    assert not mask[:40_000].any() and mask[40_000:].all()


def test_a_cpu_kernels_poisoning_never_asks_for_cuda(monkeypatch):
    """The kernel process of a CPU capsule poisons host arrays only: asking whether CUDA is there
    would start a CUDA context (and the driver's descriptors) in it on a GPU machine, which
    tests/test_prefork.py's probe saw there as 33 descriptors more than on a CPU one."""
    from conformance.isolation import kernel_side
    from engine.runtime import native

    def no_cuda():
        raise AssertionError("a CPU kernel's poisoning asked whether CUDA is available")
    monkeypatch.setattr(native, "native_available", no_cuda)
    monkeypatch.setattr(native, "require_native_runtime", no_cuda)
    with kernel_side.poisoning(True, np):
        a = np.empty(8, np.float32)
    assert poison_mask(a).all()
