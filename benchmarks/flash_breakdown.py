"""Per-kernel times of native_cuda.flash_attention at gpt2's size (B*H = 96, T = 1024, d = 64,
causal bool mask), the handlers' totals beside them: where the forward and the VJP spend their
time. CUDA-event medians (benchmarks/timing.py); TFLOP/s count the causal half's useful
multiply-adds (2 per fmaf; forward 2 products, VJP 5: S, dP, dV, dK, dQ; the recomputing dq pass
adds S and dP again).

Usage: python3 benchmarks/flash_breakdown.py [--quick]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import event_ms  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    import cupy as cp
    from engine.providers.native_cuda import flash_attention as flash
    from engine.registry import registry
    h = registry().handler("native_cuda.flash_attention")
    bh, t, d = 96, 1024, 64
    rng = cp.random.RandomState(7)
    q, k, v, g = (rng.standard_normal((bh, t, d), dtype=cp.float32) for _ in range(4))
    mask = cp.ascontiguousarray(cp.broadcast_to(cp.tril(cp.ones((t, t), bool)), (bh, t, t)))
    scale = float(np.float32(d ** -0.5))
    out = h.forward(q, k, v, mask=mask, scale=scale)
    kept = flash.saved_statistics(out, q, k, v, mask, scale)
    if kept is None:
        print("the forward kept no statistics (arrays without weak references?)")
        return 1
    stats, flags = kept
    m = flash.mask_bytes(mask)
    a = flash._args(bh, t, t, d, d, scale)
    rows, w = bh * t, flash.width(d, d)
    nq = bh * flash._tiles_of(t)
    nkb = bh * -(-t // getattr(flash, "DKDV_KEYS", {w: flash.TILE})[w])   # dk/dv blocks
    nf = bh * -(-t // getattr(flash, "FWD_ROWS", flash.TILE))   # the forward's query rows
    out2, stats2, dd = cp.empty_like(out), cp.empty_like(stats), cp.empty(rows, cp.float32)
    dq, dk, dv = (cp.empty_like(x) for x in (q, k, v))
    ds = cp.empty(flash.ds_scratch_floats(bh, t, t), cp.float32)
    flash._rowdot((-(-rows // 256),), (g, out, dd, np.uint32(rows), np.uint32(d), np.uint32(t),
                                        np.uint32(1)))
    flash._dkdv[w]((nkb,), (q, k, v, m, flags, g, stats, dd, dk, dv, ds) + a,
                   flash.shared_bytes("dkdv", w))   # the scratch tl_flash_dqs reads
    kernels = {
        "tl_flash_tiles": lambda: flash._flags(m, bh, t, t),
        "tl_flash_fwd_64 (forward)": lambda: flash._fwd[w](
            (nf,), (q, k, v, m, flags, out2, stats2) + a, flash.shared_bytes("fwd", w)),
        "tl_flash_fwd_64 (statistics only)": lambda: flash._fwd[w](
            (nf,), (q, k, v, m, flags, None, stats2) + a, flash.shared_bytes("fwd", w)),
        "tl_flash_rowdot": lambda: flash._rowdot((-(-rows // 256),),
                                                 (g, out, dd, np.uint32(rows), np.uint32(d),
                                                  np.uint32(t), np.uint32(1))),
        "tl_flash_dkdv_64 (dS to the scratch)": lambda: flash._dkdv[w](
            (nkb,), (q, k, v, m, flags, g, stats, dd, dk, dv, ds) + a,
            flash.shared_bytes("dkdv", w)),
        "tl_flash_dkdv_64 (no scratch)": lambda: flash._dkdv[w](
            (nkb,), (q, k, v, m, flags, g, stats, dd, dk, dv, None) + a,
            flash.shared_bytes("dkdv", w)),
        "tl_flash_dqs_64": lambda: flash._dqs[w](
            (nq,), (k, m, flags, ds, dq, np.uint32(bh), np.uint32(t), np.uint32(t),
                    np.uint32(d), np.float32(scale), np.uint32(1), np.uint32(0)),
            flash.shared_bytes("dqs", w)),
        "tl_flash_dq_64 (recomputing)": lambda: flash._dq[w](
            (nq,), (q, k, v, m, flags, g, stats, dd, dq) + a, flash.shared_bytes("dq", w)),
        "handler forward": lambda: h.forward(q, k, v, mask=mask, scale=scale),
        "handler vjp (kept statistics)": lambda: h.vjp((q, k, v), out, g, mask=mask,
                                                       scale=scale),
    }
    iters, repeats = (3, 5) if args.quick else (10, 15)
    half = bh * t * (t + 1) / 2 * d * 2          # flops of one causal product
    flops = {"tl_flash_fwd_64 (forward)": 2 * half, "tl_flash_fwd_64 (statistics only)": half,
             "tl_flash_dkdv_64 (dS to the scratch)": 4 * half,
             "tl_flash_dkdv_64 (no scratch)": 4 * half, "tl_flash_dqs_64": half,
             "tl_flash_dq_64 (recomputing)": 3 * half,
             "handler forward": 2 * half, "handler vjp (kept statistics)": 5 * half}
    print(f"{'kernel':<36} {'ms':>8} {'TFLOP/s':>8}")
    for name, fn in kernels.items():
        ms = event_ms(cp, fn, iters, repeats)
        tf = flops.get(name, float("nan")) / ms / 1e9
        print(f"{name:<36} {ms:>8.3f} {tf:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
