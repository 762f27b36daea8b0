"""The prepared-parameter launch path (engine/runtime/driver_launch.py, Kernel.launch) and the
direct output allocation (launch.new_array) on the GPU: every elementwise forward and VJP handler
gives, bit for bit, what the same kernel gives launched through CuPy's Function on CuPy's
cupy.empty outputs (the path it replaced), at sizes that end inside a float4, a thread and a
block; under a CUDA graph capture too; a driver refusal raises KernelLaunchError; outputs come
from the exact-size cache (counted, reused, poisoned when poisoning is on)."""
from __future__ import annotations

import numpy as np
import pytest

from cuda_helpers import assert_bitwise, cupy
from engine.errors import KernelLaunchError

pytestmark = pytest.mark.cuda

_PARAMS = {"clamp": {"lo": -0.75, "hi": 1.5}, "safe_log": {"eps": 1e-7},
           "scale": {"alpha": -1.7}}
_BINARY = ("add", "sub", "mul", "max", "min")
_SIZES = (1, 7, 2049, 4099, 2**20 + 3)


def _data(n: int, seed: int):
    cp = cupy()
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    special = np.array([0.0, -0.0, 1e-45, -1e-40, np.inf, -np.inf, np.nan, 3e38, 80.0, -80.0],
                       np.float32)
    x[:min(n, special.size)] = special[:min(n, special.size)]
    return cp.asarray(x)


def _old_launch(symbol: str, signature: str, arrays, outs, n: int, floats=()):
    """The replaced path: CuPy's Function on cupy.empty outputs, numpy scalars for n and floats,
    with the grid the handler's own helper computes."""
    from engine.providers.native_cuda import elementwise as ew
    from engine.providers.native_cuda.launch import F32, U32, kernel
    blocks = ew._ew3_blocks(n) if signature == "pppppu" else ew._ew_blocks(n)
    kernel("elementwise.cu", symbol)((blocks,), (*arrays, *outs, U32(n),
                                                 *(F32(v) for v in floats)))


@pytest.mark.parametrize("n", _SIZES)
def test_every_elementwise_op_equals_the_cupy_launch_bit_for_bit(n):
    cp = cupy()
    from engine.providers.native_cuda import elementwise as ew
    a, b, g = _data(n, 1), _data(n, 2), _data(n, 3)
    for decl in ew.DECLS:
        op = decl.op.label
        p = _PARAMS.get(op, {})
        binary = op in _BINARY
        new = decl.forward(a, b, **p) if binary else decl.forward(a, **p)
        old = cp.empty(n, cp.float32)
        _old_launch(decl.forward_symbols[0], "", (a, b) if binary else (a,), (old,), n,
                    p.values())
        assert_bitwise(new.get(), old.get(), f"{op} forward n={n}")
        grads = decl.vjp((a, b) if binary else (a,), new, g, **p)
        if op == "add":
            assert grads[0] is g and grads[1] is g
            continue
        olds = [cp.empty(n, cp.float32) for _ in grads]
        sym = decl.vjp_symbols[0]
        if op == "sub":
            _old_launch(sym, "ppu", (g,), olds[1:], n)
            olds[0] = g
        elif op == "scale":
            _old_launch(sym, "ppuf", (g,), olds, n, p.values())
        elif binary:
            _old_launch(sym, "pppppu", (a, b, g), olds, n)
        else:
            _old_launch(sym, "pppu", (a, g), olds, n, p.values())
        for i, (x, y) in enumerate(zip(grads, olds)):
            assert_bitwise(x.get(), y.get(), f"{op} VJP {i} n={n}")


def test_the_ops_run_on_the_current_stream_and_inside_a_graph_capture():
    """A captured step of elementwise ops (forward and backward), replayed on new data, equals
    the same step run eagerly: the launches went to the capturing side stream (a launch on
    another stream inside a thread-local capture would invalidate it, and raise)."""
    from engine import graphs, ops
    from engine.runtime.deterministic import deterministic_reductions
    from engine.session import Session, use_session
    from engine.tensor import tensor
    rng = np.random.default_rng(7)
    x0, x1 = (rng.standard_normal((64, 33)).astype(np.float32) for _ in range(2))

    def step(x):
        x.requires_grad, x.grad = True, None
        y = ops.mul(ops.gelu(ops.add(x, x)), ops.sigmoid(ops.scale(x, 0.5)))
        z = ops.sub(ops.clamp(y, -1.0, 1.0), ops.tanh(x))
        ops.reduce_sum(z).backward()
        return z, x.grad

    with deterministic_reductions(), use_session(Session("cuda")):
        g = graphs.capture(step, (x0,))
        z, gx = g.replay(x1)
        got = (z.numpy().copy(), gx.numpy().copy())
        g.close()
        ez, egx = step(tensor(x1))
        assert_bitwise(got[0], ez.numpy(), "captured forward")
        assert_bitwise(got[1], egx.numpy(), "captured gradient")


def test_a_driver_refusal_raises_the_named_error():
    """Zero blocks is an invalid launch (CUDA_ERROR_INVALID_VALUE), refused before anything runs,
    and leaves the context usable."""
    cp = cupy()
    from engine.providers.native_cuda.launch import BLOCK, kernel
    from engine.runtime.driver_launch import PreparedLaunch, driver
    k = kernel("elementwise.cu", "tl_relu_fwd", "ppu")
    bad = PreparedLaunch(k.symbol, "ppu", k.function().ptr, BLOCK, driver())
    a = cp.ones(16, cp.float32)
    out = cp.zeros(16, cp.float32)
    with pytest.raises(KernelLaunchError) as err:
        bad(0, cp.cuda.get_current_stream().ptr, (a.data.ptr, out.data.ptr, 16))
    assert "tl_relu_fwd: cuLaunchKernel returned CUDA_ERROR_INVALID_VALUE (1)" in str(err.value)
    k.launch(1, a.data.ptr, out.data.ptr, 16)
    assert_bitwise(out.get(), np.ones(16, np.float32), "relu after the refused launch")


def test_outputs_come_from_the_exact_size_cache_and_go_back_to_it():
    cp = cupy()
    from engine.providers.native_cuda.launch import new_array
    from engine.runtime.allocator import install
    cache = install()
    n = 12345                     # a size no other test allocates: its own cache list
    first = new_array((5, 2469), n)
    assert first.shape == (5, 2469) and first.dtype == np.float32 and first.flags.c_contiguous
    ptr, live, allocs = first.data.ptr, cache.live_bytes, cache.alloc_count
    assert cache._sizes.get(ptr) == 4 * n
    del first
    assert cache.live_bytes == live - 4 * n and ptr in cache._free[4 * n]
    hits = cache.cache_hits
    again = new_array((n,), n)
    assert again.data.ptr == ptr and cache.cache_hits == hits + 1
    assert cache.alloc_count == allocs + 1
    empty = new_array((0, 4), 0)
    assert empty.shape == (0, 4) and empty.size == 0
    del again
    cp.cuda.get_current_stream().synchronize()


def test_outputs_are_poisoned_while_poisoning_is_on():
    from engine.providers.native_cuda.launch import new_array
    from engine.runtime import poison
    n = 4321
    with poison.poisoned():
        out = new_array((n,), n)
        bits = out.view(np.uint32).get()
    assert np.all(bits == bits[0]) and np.isnan(np.uint32(bits[0]).view(np.float32))


def test_a_float_parameter_beyond_float32_takes_the_ctypes_slot_and_becomes_infinity():
    """struct.pack_into refuses 1e39 for a float32 slot (driver_launch's fast path); the ctypes
    slot writes inf, as numpy.float32(1e39) is, and the kernel multiplies by it."""
    cp = cupy()
    from engine.providers.native_cuda import elementwise as ew
    scale = next(d for d in ew.DECLS if d.op.label == "scale")
    host = np.array([1.0, -2.0, 3e-39, 0.5], np.float32)   # no zero: inf * 0 is a NaN
    out = scale.forward(cp.asarray(host), alpha=1e39)
    with np.errstate(over="ignore"):
        want = np.float32(1e39) * host
    assert np.all(np.isinf(want))
    assert_bitwise(out.get(), want, "scale by 1e39")


def test_a_cuda_result_is_marked_checked_and_used_again_without_a_recheck():
    """apply marks a contiguous float32 output as checked (a CuPy array's strides read once);
    the next op takes it on that mark and computes the right values."""
    from engine import ops
    from engine.session import Session, use_session
    from engine.tensor import tensor
    with use_session(Session("cuda")):
        x = tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
        y = ops.add(x, x)
        assert y._checked is y.buffer.data and x._checked is x.buffer.data
        z = ops.add(y, y)
        assert_bitwise(z.numpy(), 4 * np.arange(6.0, dtype=np.float32).reshape(2, 3), "4x")


def test_output_arrays_are_what_cupy_ndarray_makes_on_the_same_block():
    """launch.new_array builds its arrays by cupy.ndarray's own two steps where base_constructor's
    probe accepted them (CuPy 13+); either way the array is a plain cupy.ndarray with the
    attributes the public constructor gives."""
    cp = cupy()
    from engine.providers.native_cuda import launch as L
    out = L.new_array((3, 5, 7), 105)
    ref = cp.ndarray((3, 5, 7), cp.float32, out.data)
    assert type(out) is cp.ndarray and out.base is None
    for attr in ("shape", "strides", "dtype", "size", "nbytes", "ndim"):
        assert getattr(out, attr) == getattr(ref, attr), attr
    assert out.flags.c_contiguous and out.data.ptr == ref.data.ptr
    assert out.data.device_id == cp.cuda.runtime.getDevice()
    out[...] = 2.5
    assert float(out.sum()) == 2.5 * 105
    assert L._base_new is not None, (
        f"CuPy {cp.__version__}: base_constructor's probe refused the two-step construction; "
        "output() works through cupy.ndarray, only slower")
