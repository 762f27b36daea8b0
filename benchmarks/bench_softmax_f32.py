"""softmax / log_softmax on one GPU: the fast float32 plain capsules, their float64 accurate
variants and PyTorch (F.softmax / F.log_softmax, dim=-1; VJP through autograd), at 65536x1024,
8192x8192 and 4096x50257: time per call (CUDA-event median), GB/s of the fewest bytes (forward:
read + write, VJP: two reads + a write), the share of the same run's copy ceiling, the ratio to
PyTorch; then each forward's worst error in float32 ulps of the rounded float64 value (torch in
float64 on the same inputs) on wide-range rows (x - max down to -104 and beyond, x - max
inexact). Also times alternatives of the plain capsule's form for rows of 257..1024 at
65536x1024 (_ALTS: other launch bounds, a block per row, the scalar forms), compiled here from
the same header.

Usage: python benchmarks/bench_softmax_f32.py [--json PATH] [--table PATH]"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import emit, event_ms  # noqa: E402

SHAPES = ((65536, 1024), (8192, 8192), (4096, 50257))
OPS = ("softmax", "log_softmax")


def _ulps(torch, got, ref64) -> float:
    """Worst |got - ref| in float32 ulps of the rounded ref (NaN anywhere: inf)."""
    ref32 = ref64.float().abs()
    spacing = (torch.nextafter(ref32, torch.tensor(float("inf"), device=ref32.device))
               - ref32).double()
    d = (got.double() - ref64).abs() / spacing
    if torch.isnan(d).any():
        return float("inf")
    return float(d.max())


def _wide_rows(cp, rows: int, n: int):
    """Half the rows uniform in [-104, 0] plus an offset (exp down to the subnormal range), half
    of magnitudes 1e-4 .. 100 of either sign (x - max inexact in float32, down to -200)."""
    rng = cp.random.default_rng(5)
    a = rng.uniform(-104, 0, (rows // 2, n), dtype=cp.float64) + \
        rng.standard_normal((rows // 2, 1), dtype=cp.float64) * 10
    sign = cp.where(rng.random((rows - rows // 2, n)) < 0.5, -1.0, 1.0)
    b = sign * 10.0 ** rng.uniform(-4, 2, (rows - rows // 2, n))
    return cp.concatenate([a, b]).astype(cp.float32)


# Alternatives of the 257..1024 forms timed at 65536x1024 (name: threads per row, source line):
# the float4 warp form under other launch bounds (blocks per SM the register cap allows: the
# capsule's is 3 for softmax, 2 for log_softmax), a block per row with one float4 per thread,
# the scalar warp form (what a misaligned array takes) and the scalar block per row (K = 4).
_ALTS = {
    "wv8 minb1": (32, "TL_SOFTMAX_F32V({name}, {mode}, 32, 8, 1)"),
    "wv8 minb2": (32, "TL_SOFTMAX_F32V({name}, {mode}, 32, 8, 2)"),
    "wv8 minb3": (32, "TL_SOFTMAX_F32V({name}, {mode}, 32, 8, 3)"),
    "bv1 minb4": (256, "TL_SOFTMAX_F32V({name}, {mode}, TL_BLOCK, 1, 4)"),
    "w32 scalar": (32, "TL_SOFTMAX_F32({name}, {mode}, 32, 32)"),
    "b4 scalar": (256, "TL_SOFTMAX_F32({name}, {mode}, TL_BLOCK, 4)"),
}


def _alt_kernels(cp):
    """{(op, alternative): (kernel, threads per row)}, compiled from softmax.cu's inlined source
    up to the end of tl_softmax_f32.cuh (the same templates, more instances)."""
    from engine.runtime import loader
    src = loader.source_text("softmax.cu")
    end = src.index("#endif  // TL_SOFTMAX_F32_CUH") + len("#endif  // TL_SOFTMAX_F32_CUH")
    names, lines = {}, []
    for i, (alt, (threads, line)) in enumerate(_ALTS.items()):
        for mode, op in enumerate(OPS):
            name = f"alt{i}_{op}"
            names[(op, alt)] = (name, threads)
            lines.append(line.format(name=name, mode=mode))
    mod = cp.RawModule(code=src[:end] + "\n" + "\n".join(lines) + "\n",
                       options=tuple(loader.OPTIONS))
    return {key: (mod.get_function(name), threads) for key, (name, threads) in names.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    ap.add_argument("--table", default=None)
    ap.add_argument("--quick", action="store_true", help="unused; accepted for uniformity")
    args = ap.parse_args()
    import cupy as cp
    import numpy as np
    import torch
    import torch.nn.functional as F

    from engine.registry import registry
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    reg = registry()
    ours = {(op, v): reg.handler(f"native_cuda.{op}{v}") for op in OPS for v in ("", ".accurate")}
    tf = {"softmax": F.softmax, "log_softmax": F.log_softmax}

    def ms(fn):
        return event_ms(cp, fn, iters=10, repeats=7, warmup=3)

    big = cp.empty(1 << 28, cp.float32)   # 1 GiB
    big[...] = 1.5
    dst = cp.empty_like(big)
    ceiling = 2 * big.nbytes / ms(lambda: dst.__setitem__(Ellipsis, big)) / 1e6
    del big, dst
    rows, errs = [], []

    def record(name, nbytes, t_ours, t_torch, t_acc=None):
        r = dict(kernel=name, ours_us=1e3 * t_ours, torch_us=1e3 * t_torch,
                 ours_gbs=nbytes / t_ours / 1e6, torch_gbs=nbytes / t_torch / 1e6,
                 ratio=t_ours / t_torch,
                 accurate_us=None if t_acc is None else 1e3 * t_acc)
        r["ours_ceiling"] = r["ours_gbs"] / ceiling
        rows.append(r)
        print(f"{name}: ours {r['ours_us']:.1f} us ({r['ours_gbs']:.0f} GB/s, "
              f"{r['ours_ceiling']:.0%}), torch {r['torch_us']:.1f} us, ratio {r['ratio']:.2f}"
              + ("" if t_acc is None else f", accurate {1e3 * t_acc:.1f} us"), flush=True)

    rng = cp.random.default_rng(0)
    for shape in SHAPES:
        n_el = shape[0] * shape[1]
        x = rng.standard_normal(shape, dtype=cp.float32) * cp.float32(4)
        g = rng.standard_normal(shape, dtype=cp.float32)
        tx, tg = torch.from_dlpack(x), torch.from_dlpack(g)
        for op in OPS:
            fast, acc = ours[(op, "")], ours[(op, ".accurate")]
            t_f = ms(lambda: fast.forward(x, axis=-1))
            t_a = ms(lambda: acc.forward(x, axis=-1))
            t_t = ms(lambda: tf[op](tx, -1))
            record(f"{op} {shape[0]}x{shape[1]} fwd", 8 * n_el, t_f, t_t, t_a)
            y = fast.forward(x, axis=-1)
            txr = tx.detach().requires_grad_(True)
            ty = tf[op](txr, -1)
            t_b = ms(lambda: fast.vjp((x,), y, g, axis=-1))
            t_tb = ms(lambda: torch.autograd.grad(ty, txr, tg, retain_graph=True))
            record(f"{op} {shape[0]}x{shape[1]} VJP", 12 * n_el, t_b, t_tb)
            del y, ty, txr
        if shape == (65536, 1024):   # the alternatives of the 257..1024 forms (_ALTS)
            out = cp.empty_like(x)
            for (op, alt), (kern, threads) in _alt_kernels(cp).items():
                blocks = (shape[0] + 256 // threads - 1) // (256 // threads)
                launch = (lambda k, b: lambda: k((b,), (256,), (x, out, np.uint32(shape[0]),
                                                              np.uint32(shape[1]))))(kern, blocks)
                launch()
                err = _ulps(torch, torch.from_dlpack(out), tf[op](tx.double(), -1))
                t_w = ms(launch)
                print(f"{op} 65536x1024 fwd, {alt}: {1e3 * t_w:.1f} us "
                      f"({8 * n_el / t_w / 1e6:.0f} GB/s); worst {err:.2f} ulp", flush=True)
                rows.append(dict(kernel=f"{op} 65536x1024 fwd {alt} (alternative)",
                                 ours_us=1e3 * t_w, torch_us=float("nan"),
                                 ours_gbs=8 * n_el / t_w / 1e6, torch_gbs=float("nan"),
                                 ratio=float("nan"), accurate_us=None,
                                 ours_ceiling=8 * n_el / t_w / 1e6 / ceiling, ulp=err))
            del out
        # errors on wide-range rows of this width (a slice: float64 references on the GPU)
        xw = _wide_rows(cp, min(shape[0], 512), shape[1])
        txw = torch.from_dlpack(xw)
        for op in OPS:
            ref = tf[op](txw.double(), -1)
            e = [_ulps(torch, torch.from_dlpack(ours[(op, v)].forward(xw, axis=-1)), ref)
                 for v in ("", ".accurate")]
            e.append(_ulps(torch, tf[op](txw, -1), ref))
            errs.append(dict(kernel=f"{op} {xw.shape[0]}x{shape[1]} wide rows", fast=e[0],
                             accurate=e[1], torch=e[2]))
            print(f"{op} wide rows n={shape[1]}: worst ulps fast {e[0]:.2f}, accurate "
                  f"{e[1]:.2f}, torch {e[2]:.2f}", flush=True)
        del x, g, tx, tg, xw, txw
        cp.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()

    lines = [f"copy ceiling (1 GiB device-to-device, read + write): {ceiling:.0f} GB/s",
             "| kernel | ours us | accurate us | torch us | ours GB/s | torch GB/s | "
             "ours/ceiling | ratio |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        acc = "" if r["accurate_us"] is None else f"{r['accurate_us']:.1f}"
        lines.append(f"| {r['kernel']} | {r['ours_us']:.1f} | {acc} | {r['torch_us']:.1f} | "
                     f"{r['ours_gbs']:.0f} | {r['torch_gbs']:.0f} | {r['ours_ceiling']:.0%} | "
                     f"{r['ratio']:.2f} |")
    lines += ["", "| forward, wide-range rows | worst ulp fast | worst ulp accurate | "
                  "worst ulp torch |", "|---|---|---|---|"]
    for e in errs:
        lines.append(f"| {e['kernel']} | {e['fast']:.2f} | {e['accurate']:.2f} | "
                     f"{e['torch']:.2f} |")
    emit(args, "\n".join(lines), {"ceiling_gbs": ceiling, "rows": rows, "errors": errs})


if __name__ == "__main__":
    main()
