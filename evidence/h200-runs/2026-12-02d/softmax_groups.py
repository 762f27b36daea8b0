"""softmax / log_softmax float32 forward at 65536x1024: the production warp-per-row float4 kernel
against group sizes of 64 and 128 threads a row and other register caps (same arithmetic)."""
import sys, numpy as np, cupy as cp, torch
sys.path.insert(0, "benchmarks")
from timing import event_ms
from engine.runtime.loader import source_text, compile_source
from cupy.cuda import function
V = [  # name, MODE, G, C, MINB (no or tiny spills at these caps: nvcc -Xptxas -v here)
    ("sm_h4_4", 0, 64, 4, 4), ("sm_q2_5", 0, 128, 2, 5), ("sm_q2_6", 0, 128, 2, 6), ("sm_b1_6", 0, 256, 1, 6),
    ("lsm_h4_4", 1, 64, 4, 4), ("lsm_q2_5", 1, 128, 2, 5), ("lsm_b1_6", 1, 256, 1, 6)]
text = source_text("softmax.cu") + "\n" + "\n".join(f"TL_SOFTMAX_F32V({n}, {m}, {g}, {c}, {b})" for n, m, g, c, b in V)
mod = function.Module(); mod.load(compile_source(text, "softmax_x.cu"))
R, N = 65536, 1024
x = cp.random.standard_normal((R, N), dtype=cp.float32) * 3
moved = 2 * x.nbytes
src = cp.random.standard_normal(64 << 20, dtype=cp.float32); dst = cp.empty_like(src); rt = cp.cuda.runtime
ceil = 2 * src.nbytes / event_ms(cp, lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, rt.memcpyDeviceToDevice, cp.cuda.get_current_stream().ptr), 20, 5) / 1e6
print(f"ceiling {ceil:.0f} GB/s")
tx = torch.from_dlpack(x)
ref = {0: tx.softmax(-1), 1: tx.log_softmax(-1)}
for mode, fn in ((0, lambda: tx.softmax(-1)), (1, lambda: tx.log_softmax(-1))):
    for it in (5, 20):
        ms = event_ms(cp, fn, it, 7); print(f"torch mode {mode} iters {it}: {ms*1e3:7.1f} us {moved/ms/1e6/ceil*100:5.1f}%")
out = cp.empty_like(x)
def run(name, G):
    k = mod.get_function(name)
    blocks = min((R + 256 // G - 1) // (256 // G), 1 << 20)
    return k, (lambda: k((blocks,), (256,), (x, out, np.uint32(R), np.uint32(N))))
for name in ("tl_softmax_f32_wv8", "tl_log_softmax_f32_wv8") + tuple(v[0] for v in V):
    G = next((v[2] for v in V if v[0] == name), 32)
    mode = 1 if "log" in name or name.startswith("lsm") else 0
    k, f = run(name, G)
    out[...] = np.nan; f(); cp.cuda.Device().synchronize()
    d = float(cp.max(cp.abs(out - cp.from_dlpack(ref[mode]))))
    regs = getattr(k, "num_regs", "?")
    res = [event_ms(cp, f, it, 7) for it in (5, 20)]
    print(f"{name:24s} G{G:<4d} regs {regs} maxdiff vs torch {d:.2e}  iters5 {res[0]*1e3:7.1f} us  iters20 {res[1]*1e3:7.1f} us {moved/res[1]/1e6/ceil*100:5.1f}%", flush=True)
