"""The prepared-parameter launch path without a GPU: a fake driver records what cuLaunchKernel
would have been given and reads the parameter buffer back through its void* entries, so the slots
are checked as the kernel reads them (uint32, float32 and 64-bit pointer bits)."""
from __future__ import annotations

import ctypes
import itertools
import struct
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from engine.errors import KernelLaunchError
from engine.runtime.driver_launch import (CUDA_ERROR_INVALID_CONTEXT, Driver, PreparedLaunch,
                                          check_signature)

_READ = {"p": ctypes.c_uint64, "u": ctypes.c_uint32, "f": ctypes.c_uint32}


class FakeDriverError(Exception):
    """What CuPy's binding raises: the CUresult in `status`."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class FakeDriver(Driver):
    """Records each launch: the scalars, the stream, and each parameter's bytes as the kernel
    would read them (the parameter array at the address given, entry i dereferenced as the
    signature's type)."""

    def __init__(self, statuses=(), names=None) -> None:
        self.calls, self.contexts = [], 0
        self.statuses = list(statuses)
        self.names = names or {}
        super().__init__(self._launch, FakeDriverError,
                         lambda s: self.names.get(s, "an unknown CUresult"), self._context)
        self.signature = ""

    def _context(self) -> None:
        self.contexts += 1

    def _launch(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        entries = (ctypes.c_void_p * len(self.signature)).from_address(params)
        values = [ctypes.cast(entries[i], ctypes.POINTER(_READ[c])).contents.value
                  for i, c in enumerate(self.signature)]
        self.calls.append(dict(f=f, grid=(gx, gy, gz), block=(bx, by, bz), smem=smem,
                               stream=stream, extra=extra, values=values))
        status = self.statuses.pop(0) if self.statuses else 0
        if status:
            raise FakeDriverError(status)


def _prepared(signature: str, drv: FakeDriver | None = None, symbol="tl_test") -> tuple:
    drv = drv or FakeDriver()
    drv.signature = signature
    return PreparedLaunch(symbol, signature, 0x7F00_1234_5000, 256, drv), drv


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", np.float32(x).tobytes())[0]


def test_slots_hold_pointer_uint32_and_float32_bits_as_the_kernel_reads_them():
    launch, drv = _prepared("pppuff")
    a, b, out = 0x7F12_0000_0100, 0x7F12_0000_2200, 0xFFFF_FFFF_FFFF_F000
    launch(3, 0x55AA_0000_1000, (a, b, out, 4_294_967_295, 0.1, -2.5e-45))
    (call,) = drv.calls
    assert call["values"] == [a, b, out, 4_294_967_295, _f32_bits(0.1), _f32_bits(-2.5e-45)]
    assert call["f"] == 0x7F00_1234_5000
    assert call["grid"] == (3, 1, 1) and call["block"] == (256, 1, 1) and call["smem"] == 0
    assert call["stream"] == 0x55AA_0000_1000 and call["extra"] == 0


def test_float_slots_round_like_numpy_float32():
    """The handlers passed F32(param) before: the same rounding of a Python float (nearest
    even), checked at a halfway case, a subnormal, an overflow and infinity."""
    launch, drv = _prepared("f")
    cases = [1.0 + 2.0 ** -24, 1.0 + 3 * 2.0 ** -24, 1e-45, 3.5e38, float("inf"), -0.0]
    for x in cases:
        launch(1, 0, (x,))
    with np.errstate(over="ignore"):
        want = [_f32_bits(x) for x in cases]
    assert [c["values"][0] for c in drv.calls] == want


def test_each_launch_rewrites_every_slot_and_the_stream():
    launch, drv = _prepared("ppu")
    launch(1, 0, (0x1000, 0x2000, 7))
    launch(2, 0x3000, (0x4000, 0x5000, 9))
    assert [c["values"] for c in drv.calls] == [[0x1000, 0x2000, 7], [0x4000, 0x5000, 9]]
    assert [c["stream"] for c in drv.calls] == [0, 0x3000]
    assert [c["grid"][0] for c in drv.calls] == [1, 2]


def test_a_driver_error_raises_a_named_error_with_the_status_and_the_launch():
    drv = FakeDriver(statuses=[700], names={700: "CUDA_ERROR_ILLEGAL_ADDRESS"})
    launch, _ = _prepared("ppu", drv, symbol="tl_relu_fwd")
    with pytest.raises(KernelLaunchError) as err:
        launch(4, 0xABC0, (1, 2, 3))
    text = str(err.value)
    assert "tl_relu_fwd: cuLaunchKernel returned CUDA_ERROR_ILLEGAL_ADDRESS (700)" in text
    assert "4 blocks of 256 threads on stream 0xabc0" in text
    assert "CUDA_LAUNCH_BLOCKING=1" in text


def test_a_capture_error_names_capture_so_the_graph_path_reports_it_as_a_capture_error():
    from engine.graphs import _named
    from engine.errors import GraphCaptureError
    drv = FakeDriver(statuses=[901], names={901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"})
    launch, _ = _prepared("ppu", drv)
    with pytest.raises(KernelLaunchError) as err:
        launch(1, 0x10, (1, 2, 3))
    assert isinstance(_named(err.value), GraphCaptureError)


def test_no_current_context_is_made_current_once_then_the_launch_is_retried():
    drv = FakeDriver(statuses=[CUDA_ERROR_INVALID_CONTEXT, 0])
    launch, _ = _prepared("ppu", drv)
    launch(1, 0, (1, 2, 3))
    assert drv.contexts == 1 and len(drv.calls) == 2
    drv.statuses = [CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT]
    drv.names = {CUDA_ERROR_INVALID_CONTEXT: "CUDA_ERROR_INVALID_CONTEXT"}
    with pytest.raises(KernelLaunchError, match=r"CUDA_ERROR_INVALID_CONTEXT \(201\)"):
        launch(1, 0, (1, 2, 3))
    assert drv.contexts == 2


def test_a_wrong_argument_count_raises_before_the_driver_is_called():
    launch, drv = _prepared("pppu", symbol="tl_add_fwd")
    with pytest.raises(KernelLaunchError) as err:
        launch(1, 0, (1, 2, 3))
    assert str(err.value) == ("tl_add_fwd: launched with 3 arguments, its signature 'pppu' takes "
                              "4; the handler is wrong")
    assert drv.calls == []


@pytest.mark.parametrize("signature, what", [("", "no parameter"),
                                             ("ppx", "unknown letters ['x']")])
def test_a_bad_signature_is_named(signature, what):
    with pytest.raises(KernelLaunchError) as err:
        check_signature(signature, "tl_x")
    assert str(err.value) == (f"tl_x: launch signature {signature!r} has {what}; expected one "
                              "letter per kernel parameter: p (pointer), u (uint32), i (int32), "
                              "f (float32), d (float64)")


def test_concurrent_launches_of_one_kernel_never_mix_their_arguments():
    """The slots are shared: the kernel's lock covers write + launch, so each recorded launch
    holds one caller's values (a switch between two slot writes would mix them)."""
    launch, drv = _prepared("ppu")

    def worker(base: int) -> None:
        for i in range(300):
            launch(1, base, (base + i, base + i, i))

    threads = [threading.Thread(target=worker, args=(b << 20,)) for b in range(1, 5)]
    import sys
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # switch threads as often as the interpreter allows
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(drv.calls) == 1200
    for c in drv.calls:
        p0, p1, n = c["values"]
        assert p0 == p1 == c["stream"] + n


def test_kernel_signatures_must_agree_and_launch_needs_one():
    from engine.providers.native_cuda import launch as L
    k = L.kernel("elementwise.cu", "tl_add_fwd", "pppu")
    assert L.kernel("elementwise.cu", "tl_add_fwd") is k and k.signature == "pppu"
    with pytest.raises(KernelLaunchError) as err:
        L.kernel("elementwise.cu", "tl_add_fwd", "ppu")
    assert str(err.value) == ("elementwise.cu:tl_add_fwd: declared with launch signature 'ppu' "
                              "here and 'pppu' before; a kernel has one parameter list: correct "
                              "the declaration that differs")
    bare = L.Kernel("elementwise.cu", "tl_add_fwd")
    with pytest.raises(KernelLaunchError, match="has no declared launch signature"):
        bare.prepare()


class _Array(SimpleNamespace):
    """What a handler reads of a CuPy array: size, shape, data.ptr, flags."""

    def __init__(self, ptr: int, shape: tuple) -> None:
        super().__init__(size=int(np.prod(shape)), shape=shape,
                         data=SimpleNamespace(ptr=ptr),
                         flags=SimpleNamespace(c_contiguous=True))


def _wire_fakes(monkeypatch, ew):
    """Every elementwise kernel bound to one fake driver; outputs numbered from 0xD000."""
    from engine.providers.native_cuda import launch as L
    drv = FakeDriver()
    launched = []

    def fake_launch(self, blocks, *values):
        drv.signature = self.signature
        prepared = PreparedLaunch(self.symbol, self.signature, 0xF00, L.BLOCK, drv)
        prepared(blocks, 0x5EED, values)
        launched.append(self.symbol)

    counter = itertools.count(0xD000, 0x100)
    monkeypatch.setattr(L.Kernel, "launch", fake_launch)
    monkeypatch.setattr(ew, "new_array", lambda shape, n: _Array(next(counter), shape))
    return drv, launched


def test_every_elementwise_handler_passes_its_kernel_the_declared_arguments(monkeypatch):
    from engine.providers.native_cuda import elementwise as ew
    drv, launched = _wire_fakes(monkeypatch, ew)
    params = {"clamp": {"lo": -0.5, "hi": 2.0}, "safe_log": {"eps": 1e-7}, "scale": {"alpha": 3.0}}
    n = 1000   # two float4 per thread: ceil(1000/8) = 125 threads, one block
    a, b, g = _Array(0xA000, (10, 100)), _Array(0xB000, (10, 100)), _Array(0xC000, (10, 100))
    seen = 0
    for decl in ew.DECLS:
        op = decl.op.label
        p = params.get(op, {})
        floats = [_f32_bits(v) for v in p.values()]
        binary = len(decl.forward_symbols) == 1 and op in ("add", "sub", "mul", "max", "min")
        out = decl.forward(a, b, **p) if binary else decl.forward(a, **p)
        call = drv.calls[-1]
        assert launched[-1] == decl.forward_symbols[0]
        want = [0xA000, 0xB000, out.data.ptr, n] if binary else [0xA000, out.data.ptr, n, *floats]
        assert call["values"] == want, op
        assert call["grid"] == (1, 1, 1) and call["stream"] == 0x5EED
        before = len(drv.calls)
        grads = decl.vjp((a, b) if binary else (a,), out, g, **p)
        if op == "add":
            assert grads == (g, g) and len(drv.calls) == before   # no kernel
            continue
        call = drv.calls[-1]
        assert launched[-1] == decl.vjp_symbols[0], op
        ptrs = [x.data.ptr for x in grads]
        if op == "sub":
            assert grads[0] is g and call["values"] == [0xC000, ptrs[1], n]
        elif op == "scale":
            assert call["values"] == [0xC000, ptrs[0], n, _f32_bits(3.0)]
        elif binary:   # ew_3_2: one float4 of each array per thread
            assert call["values"] == [0xA000, 0xB000, 0xC000, *ptrs, n]
        else:
            assert call["values"] == [0xA000, 0xC000, ptrs[0], n, *floats], op
        seen += 1
    assert seen == len(ew.DECLS) - 1


def test_empty_elementwise_inputs_launch_nothing(monkeypatch):
    from engine.providers.native_cuda import elementwise as ew
    drv, _ = _wire_fakes(monkeypatch, ew)
    a = _Array(0xA000, (0, 3))
    for decl in ew.DECLS:
        if decl.op.label in ("add", "sub", "mul", "max", "min"):
            decl.forward(a, a)
        elif decl.op.label not in ("clamp", "safe_log", "scale"):
            decl.forward(a)
    assert drv.calls == []


@pytest.mark.parametrize("n, blocks", [(1, 1), (2048, 1), (2049, 2), (2**20, 512),
                                       (2**32 - 1, 2**21)])
def test_elementwise_grids_cover_two_float4_per_thread(n, blocks):
    from engine.providers.native_cuda.elementwise import _EW_ROUND, _EW_SHIFT, _ew3_blocks, \
        _ew_blocks
    assert _ew_blocks(n) == blocks
    assert (n + _EW_ROUND) >> _EW_SHIFT == blocks   # the forward handlers' inlined form
    assert _ew3_blocks(n) == max(1, -(-((n + 3) >> 2) // 256))


def _bound_kernel(monkeypatch, drv: FakeDriver, signature: str):
    """A Kernel whose prepared launch goes to `drv`, on a fake current stream 0x5EED."""
    from engine.providers.native_cuda import launch as L
    drv.signature = signature
    k = L.Kernel("elementwise.cu", "tl_fake", signature)
    k.prepared = PreparedLaunch("tl_fake", signature, 0xF00, L.BLOCK, drv)
    monkeypatch.setattr(L, "_current_stream", lambda: SimpleNamespace(ptr=0x5EED))
    return k


def test_kernel_launch_takes_the_written_out_common_case(monkeypatch):
    drv = FakeDriver()
    k = _bound_kernel(monkeypatch, drv, "ppuf")
    k.launch(3, 0xA000, 0xB000, 7, 0.5)
    (call,) = drv.calls
    assert call["values"] == [0xA000, 0xB000, 7, _f32_bits(0.5)]
    assert call["grid"] == (3, 1, 1) and call["block"] == (256, 1, 1)
    assert call["stream"] == 0x5EED and call["f"] == 0xF00


def test_kernel_launch_sends_everything_else_to_the_general_path(monkeypatch):
    drv = FakeDriver()
    k = _bound_kernel(monkeypatch, drv, "pf")
    k.launch(1, 0xA000, 3.5e38)              # pack_into refuses it: the ctypes slot makes inf
    with np.errstate(over="ignore"):
        assert drv.calls[-1]["values"] == [0xA000, _f32_bits(3.5e38)] and len(drv.calls) == 1
    with pytest.raises(KernelLaunchError, match="launched with 1 arguments, its signature 'pf' "
                                                "takes 2"):
        k.launch(1, 0xA000)
    assert len(drv.calls) == 1
    drv.statuses = [700, 700]
    drv.names = {700: "CUDA_ERROR_ILLEGAL_ADDRESS"}
    with pytest.raises(KernelLaunchError, match=r"tl_fake: cuLaunchKernel returned "
                                                r"CUDA_ERROR_ILLEGAL_ADDRESS \(700\) for 2 "
                                                r"blocks of 256 threads on stream 0x5eed"):
        k.launch(2, 0xA000, 1.0)
    assert len(drv.calls) == 3               # the refused attempt, then the general path's
    drv.statuses = [CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT, 0]
    k.launch(1, 0xC000, 2.0)                 # made current once by the general path, then run
    assert drv.contexts == 1 and drv.calls[-1]["values"] == [0xC000, _f32_bits(2.0)]


class _FakeBase:
    """CuPy's _ndarray_base in miniature: `_init(shape, dtype, memptr)` fills the array."""

    def _init(self, shape, dtype, memptr):
        self.shape, self.dtype, self.data = tuple(shape), np.dtype(dtype), memptr
        self.size = int(np.prod(shape))
        self.strides = tuple(int(np.prod(shape[i + 1:])) * 4 for i in range(len(shape)))
        self.flags = SimpleNamespace(c_contiguous=True)


class _FakeArray(_FakeBase):
    """cupy.ndarray in miniature: a Python __new__ that makes the base object and calls _init."""

    def __new__(cls, *args, **kwargs):
        x = super().__new__(cls)
        x._init(*args, **kwargs)
        return x


def _fake_cupy(array=_FakeArray, base=_FakeBase):
    core = SimpleNamespace(_ndarray_base=base)
    return SimpleNamespace(_core=SimpleNamespace(core=core), ndarray=array,
                           empty=lambda n, dtype: SimpleNamespace(data=SimpleNamespace(ptr=64)))


def test_base_constructor_takes_cupys_two_steps_only_where_they_match_the_constructor():
    from engine.providers.native_cuda.launch import base_constructor
    assert base_constructor(_fake_cupy()) is _FakeBase.__new__
    assert base_constructor(SimpleNamespace(ndarray=_FakeArray)) is None   # no such internals

    class Shifted(_FakeBase):          # a base whose _init disagrees with the public constructor
        def __new__(cls, *args, **kwargs):
            x = super().__new__(cls)
            x._init(*args, **kwargs)
            x.strides = (0, 0)
            return x
    assert base_constructor(_fake_cupy(array=Shifted)) is None

    class Unrelated:                   # cupy.ndarray not built on that base
        pass
    assert base_constructor(_fake_cupy(array=Unrelated)) is None


def test_output_builds_its_array_by_the_two_steps_on_the_cache_block(monkeypatch):
    from engine.providers.native_cuda import launch as L
    from engine.runtime.allocator import CacheBlock
    taken, released = [], []

    class Memory(SimpleNamespace):     # cupy.cuda.memory.UnownedMemory's signature
        def __init__(self, ptr, size, owner, device):
            super().__init__(ptr=ptr, size=size, owner=owner, device=device)

    def malloc(size, device):
        taken.append((size, device))
        return 0xD000

    wiring = {"_cp": object(), "_malloc": malloc, "_free": lambda *a: released.append(a),
              "_get_device": lambda: 3, "_Unowned": Memory,
              "_MemoryPointer": lambda mem, offset: (mem, offset),
              "_ndarray": _FakeArray, "_base_new": _FakeBase.__new__}
    for name, value in wiring.items():
        monkeypatch.setattr(L, name, value)
    out = L.new_array((2, 3), 6)
    assert type(out) is _FakeArray and out.shape == (2, 3) and out.dtype == np.float32
    mem, offset = out.data
    assert taken == [(24, 3)] and (mem.ptr, mem.size, mem.device, offset) == (0xD000, 24, 3, 0)
    # the block is owned by a CacheBlock that gives it back to the cache when the memory goes
    assert type(mem.owner) is CacheBlock and mem.owner[:2] == (0xD000, 3) and released == []
    del out, mem
    assert released == [(0xD000, 3)]
    monkeypatch.setattr(L, "_base_new", None)        # the public constructor otherwise
    again = L.new_array((6,), 6)
    assert type(again) is _FakeArray and again.shape == (6,) and len(taken) == 2
