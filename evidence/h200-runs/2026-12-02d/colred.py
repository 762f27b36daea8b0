"""Column-reduction experiment at 65536x1024 axis 0: torch, our path, raw kernel variants, host cost."""
import cProfile, pstats, io, statistics, time, sys
import numpy as np
import cupy as cp
import torch
sys.path.insert(0, "benchmarks")
from timing import event_ms
from engine.registry import registry
from engine.providers.native_cuda import reduce as red

R, C = 65536, 1024
x = cp.random.standard_normal((R, C), dtype=cp.float32)
ref = cp.sum(x.astype(cp.float64), axis=0)
moved = x.nbytes + C * 4
src = cp.random.standard_normal(64 << 20, dtype=cp.float32); dst = cp.empty_like(src)
rt = cp.cuda.runtime
ceil = 2 * src.nbytes / event_ms(cp, lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes,
                               rt.memcpyDeviceToDevice, cp.cuda.get_current_stream().ptr), 20, 5) / 1e6
print(f"ceiling {ceil:.0f} GB/s; floor {moved / ceil / 1e6 * 1e3:.1f} us")
rows = []
def row(name, fn, iters=20, reps=7):
    ms = event_ms(cp, fn, iters, reps)
    rows.append((name, ms))
    print(f"{name:44s} {ms*1e3:8.1f} us {moved/ms/1e6:6.0f} GB/s {moved/ms/1e6/ceil*100:5.1f}%", flush=True)
tx = torch.from_dlpack(x)
for it in (5, 20):
    row(f"torch sum(0) iters={it}", lambda: tx.sum(0), it)
    row(f"torch mean(0) iters={it}", lambda: tx.mean(0), it)
hs, hm = registry().handler("native_cuda.reduce_sum"), registry().handler("native_cuda.reduce_mean")
for it in (5, 20):
    row(f"ours sum iters={it}", lambda: hs.forward(x, axes=(0,)), it)
    row(f"ours mean iters={it}", lambda: hm.forward(x, axes=(0,)), it)
base = red.COL_TARGET
for t in (1 << 15, 1 << 17, 1 << 18):
    red.COL_TARGET = t
    print("  chunks", red.col_chunks(1, R, C))
    row(f"ours sum COL_TARGET=2^{t.bit_length()-1}", lambda: hs.forward(x, axes=(0,)))
red.COL_TARGET = base
out = red.negative_zeros(C)
row("fill only (negative_zeros 1024)", lambda: red.negative_zeros(C))
row("div only (1024)", lambda: red._divide_into(out, out, R))
src_cu = open(".gpu/colred.cu").read()
mod = cp.RawModule(code=src_cu, options=("--fmad=false",))
for kname in ("cols_blk", "cols_blk_il"):
    k = mod.get_function(kname)
    for chunks in (32, 64, 128, 132, 256, 512):
        if kname == "cols_blk_il" and (R // chunks) % 64:
            continue
        seg = -(-R // chunks); chunks2 = -(-R // seg)
        o = cp.full(C, -0.0, cp.float32)
        args = (x, o, np.uint32(R), np.uint32(C), np.uint32(seg), np.uint32(C // 128), np.int32(1))
        k((8 * chunks2,), (256,), args); cp.cuda.Device().synchronize()
        o[:] = -0.0; k((8 * chunks2,), (256,), args)
        err = float(cp.max(cp.abs(o - ref) / (cp.sum(cp.abs(x), 0)))) / 2**-24
        print(f"  {kname} chunks={chunks2} err/(u*sum|x|)={err:.1f}")
        row(f"{kname} chunks={chunks2} (kernel only)", lambda: k((8 * chunks2,), (256,), args))
# host cost of our path at a small size
xs = cp.random.standard_normal((64, 1024), dtype=cp.float32)
for name, h, ax in (("sum axis0", hs, (0,)), ("mean axis0", hm, (0,)), ("sum axis-1", hs, (-1,))):
    for _ in range(50): h.forward(xs, axes=ax)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(1000): h.forward(xs, axes=ax)
    t1 = time.perf_counter(); cp.cuda.Device().synchronize()
    print(f"host {name}: {(t1-t0)*1e3:.1f} us/call (1000 calls)")
for _ in range(50): torch.mean(tx[:64], 0)
torch.cuda.synchronize(); t0 = time.perf_counter()
for _ in range(1000): tx[:64].mean(0)
print(f"host torch mean: {(time.perf_counter()-t0)*1e3:.1f} us/call")
pr = cProfile.Profile(); pr.enable()
for _ in range(2000): hm.forward(xs, axes=(0,))
pr.disable(); s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18); print(s.getvalue()[-3500:])
