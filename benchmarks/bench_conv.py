"""Convolution and pooling on a CUDA GPU against PyTorch (cuDNN, TF32 off), measured in the same run.

1. conv2d forward and backward (dx, dw, db) at a ResNet-like shape (N=32, 64->64 channels, 56x56,
   k=3, p=1), a mid-size one and the small shapes of the cnn_digits example, where launch cost
   dominates: native_cuda.conv against torch.nn.functional.conv2d and torch autograd's backward;
   ours in the default mode and in deterministic mode (fixed-order dw/db);
2. max_pool, avg_pool (forward and backward) against torch.nn.functional.max_pool2d / avg_pool2d,
   and smooth_max_pool against the PyTorch composition pivot + logsumexp(beta (unfold - pivot)) / beta.

Times are CUDA-event medians over loops of calls after a warm-up (benchmarks/timing.py); every
variant reads the same device buffers (DLPack, no copies). Each result is checked first: relative
L2 error against torch's float64 evaluation on the GPU, printed beside the time. Ratios are
ours / torch (below 1: ours is faster). Rates: conv in TFLOP/s (2 N C_out C_in/g k^2 H_out W_out
per forward; twice that for dx + dw), pooling in GB/s (input read once, output written once).

Usage: python3 benchmarks/bench_conv.py [--json PATH] [--table PATH] [--quick]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import emit, event_ms, output_arguments, rel_err  # noqa: E402
from engine.runtime.deterministic import deterministic_reductions  # noqa: E402

# (label, N, C_in, C_out, H, W, k, stride, padding)
CONV_CASES = [
    ("resnet 32x64->64 56x56 k3", 32, 64, 64, 56, 56, 3, 1, 1),
    ("mid 8x128->128 28x28 k3", 8, 128, 128, 28, 28, 3, 1, 1),
    ("digits conv1 128x1->8 8x8", 128, 1, 8, 8, 8, 3, 1, 1),
    ("digits conv2 128x8->16 4x4", 128, 8, 16, 4, 4, 3, 1, 1),
    ("tiny 1x8->8 8x8 k3", 1, 8, 8, 8, 8, 3, 1, 1),
]
# (label, op, N, C, H, W, k, stride, padding)
POOL_CASES = [
    ("max 32x64 56x56 k2 s2", "max_pool", 32, 64, 56, 56, 2, 2, 0),
    ("max 32x64 56x56 k3 s2 p1", "max_pool", 32, 64, 56, 56, 3, 2, 1),
    ("avg 32x64 56x56 k2 s2", "avg_pool", 32, 64, 56, 56, 2, 2, 0),
    ("avg 1x8 8x8 k2 s2", "avg_pool", 1, 8, 8, 8, 2, 2, 0),
    ("max 128x8 8x8 k2 s2", "max_pool", 128, 8, 8, 8, 2, 2, 0),
    ("smooth 8x64 56x56 k3 s1 p1", "smooth_max_pool", 8, 64, 56, 56, 3, 1, 1),
]
BETA = 0.5


def bench_conv(cp, torch, quick: bool) -> list[dict]:
    from engine.registry import registry
    F = torch.nn.functional
    h = registry().handler("native_cuda.conv")
    rows = []
    for label, n, cin, cout, hh, ww, k, s, p in (CONV_CASES[:1] + CONV_CASES[2:3] if quick
                                                  else CONV_CASES):
        rng = cp.random.RandomState(n * cin + hh)
        x = rng.standard_normal((n, cin, hh, ww), dtype=cp.float32)
        w = rng.standard_normal((cout, cin, k, k), dtype=cp.float32) / np.float32(np.sqrt(cin * k * k))
        b = rng.standard_normal((cout,), dtype=cp.float32)
        params = {"stride": (s, s), "padding": (p, p), "dilation": (1, 1), "groups": 1}
        tx, tw, tb = (torch.from_dlpack(a) for a in (x, w, b))
        ours_y = h.forward(x, w, b, **params)
        g = rng.standard_normal(ours_y.shape, dtype=cp.float32)
        tg = torch.from_dlpack(g)
        x64, w64, b64 = (t.double().requires_grad_(True) for t in (tx, tw, tb))
        y64 = F.conv2d(x64, w64, b64, stride=s, padding=p)
        ref_grads = torch.autograd.grad(y64, (x64, w64, b64), tg.double())
        ty = F.conv2d(tx, tw, tb, stride=s, padding=p)
        errs = {"fwd": (rel_err(cp, ours_y, y64.detach()), rel_err(cp, ty, y64.detach()))}
        txr, twr, tbr = (t.detach().clone().requires_grad_(True) for t in (tx, tw, tb))
        tyr = F.conv2d(txr, twr, tbr, stride=s, padding=p)

        def torch_bwd():
            return torch.autograd.grad(tyr, (txr, twr, tbr), tg, retain_graph=True)

        ours_g = h.vjp((x, w, b), ours_y, g, **params)
        errs["bwd"] = (max(rel_err(cp, a, r) for a, r in zip(ours_g, ref_grads)),
                       max(rel_err(cp, a, r) for a, r in zip(torch_bwd(), ref_grads)))
        flops = 2.0 * n * cout * cin * k * k * ours_y.shape[2] * ours_y.shape[3]
        iters, repeats = (3, 5) if quick else (10, 11)
        if flops < 1e8:
            iters *= 20
        t = {"fwd": (event_ms(cp, lambda: h.forward(x, w, b, **params), iters, repeats),
                     event_ms(cp, lambda: F.conv2d(tx, tw, tb, stride=s, padding=p), iters,
                              repeats)),
             "bwd": (event_ms(cp, lambda: h.vjp((x, w, b), ours_y, g, **params), iters, repeats),
                     event_ms(cp, torch_bwd, iters, repeats))}
        with deterministic_reductions():
            det = event_ms(cp, lambda: h.vjp((x, w, b), ours_y, g, **params), iters, repeats)
            det_err = max(rel_err(cp, a, r) for a, r in zip(h.vjp((x, w, b), ours_y, g, **params),
                                                            ref_grads))
        del x64, w64, b64, y64, ref_grads
        for way, work in (("fwd", flops), ("bwd", 2 * flops)):
            ours_ms, torch_ms = t[way]
            rows.append({"case": f"conv {label}", "way": way, "ms": ours_ms, "torch_ms": torch_ms,
                         "ratio": ours_ms / torch_ms, "rate": work / ours_ms / 1e9,
                         "torch_rate": work / torch_ms / 1e9, "unit": "TFLOP/s",
                         "rel_err": errs[way][0], "torch_err": errs[way][1],
                         "det_ms": det if way == "bwd" else None,
                         "det_err": det_err if way == "bwd" else None})
        del x, w, b, g, ours_y, ours_g, tx, tw, tb, tg, ty, txr, twr, tbr, tyr
        torch.cuda.empty_cache()
    return rows


def _torch_smooth_max(torch, x, k, s, p, beta):
    """pivot + log(sum exp(beta (v - pivot))) / beta over each window, padded cells 0."""
    n, c, hh, ww = x.shape
    cols = torch.nn.functional.unfold(x, k, padding=p, stride=s).view(n, c, k * k, -1)
    pivot = cols.amax(dim=2, keepdim=True) if beta > 0 else cols.amin(dim=2, keepdim=True)
    val = pivot + torch.log(torch.exp(beta * (cols - pivot)).sum(dim=2, keepdim=True)) / beta
    ho, wo = (hh + 2 * p - k) // s + 1, (ww + 2 * p - k) // s + 1
    return val.view(n, c, ho, wo)


def bench_pool(cp, torch, quick: bool) -> list[dict]:
    from engine.registry import registry
    F = torch.nn.functional
    rows = []
    for label, op, n, c, hh, ww, k, s, p in (POOL_CASES[:1] + POOL_CASES[3:4] if quick
                                             else POOL_CASES):
        h = registry().handler(f"native_cuda.{op}")
        rng = cp.random.RandomState(n * c + hh + k)
        x = rng.standard_normal((n, c, hh, ww), dtype=cp.float32)
        params = {"kernel_size": (k, k), "stride": (s, s), "padding": (p, p), "dilation": (1, 1)}
        if op == "smooth_max_pool":
            params["beta"] = BETA

        def peer(t, _op=op):
            if _op == "max_pool":
                return F.max_pool2d(t, k, s, p)
            if _op == "avg_pool":
                return F.avg_pool2d(t, k, s, p, count_include_pad=True)
            return _torch_smooth_max(torch, t, k, s, p, BETA)

        tx = torch.from_dlpack(x)
        ours_y = h.forward(x, **params)
        g = rng.standard_normal(ours_y.shape, dtype=cp.float32)
        tg = torch.from_dlpack(g)
        x64 = tx.double().requires_grad_(True)
        y64 = peer(x64)
        ref_dx = torch.autograd.grad(y64, (x64,), tg.double())[0]
        txr = tx.detach().clone().requires_grad_(True)
        tyr = peer(txr)

        def torch_bwd():
            return torch.autograd.grad(tyr, (txr,), tg, retain_graph=True)[0]

        errs = {"fwd": (rel_err(cp, ours_y, y64.detach()), rel_err(cp, peer(tx), y64.detach())),
                "bwd": (rel_err(cp, h.vjp((x,), ours_y, g, **params)[0], ref_dx),
                        rel_err(cp, torch_bwd(), ref_dx))}
        del x64, y64, ref_dx
        iters, repeats = (3, 5) if quick else (10, 11)
        if x.size < 1 << 20:
            iters *= 20
        t = {"fwd": (event_ms(cp, lambda: h.forward(x, **params), iters, repeats),
                     event_ms(cp, lambda: peer(tx), iters, repeats)),
             "bwd": (event_ms(cp, lambda: h.vjp((x,), ours_y, g, **params), iters, repeats),
                     event_ms(cp, torch_bwd, iters, repeats))}
        with deterministic_reductions():
            det = event_ms(cp, lambda: h.vjp((x,), ours_y, g, **params), iters, repeats)
        moved = {"fwd": 4.0 * (x.size + ours_y.size), "bwd": 4.0 * (2 * x.size + 2 * ours_y.size)}
        for way in ("fwd", "bwd"):
            ours_ms, torch_ms = t[way]
            rows.append({"case": f"pool {label}", "way": way, "ms": ours_ms, "torch_ms": torch_ms,
                         "ratio": ours_ms / torch_ms, "rate": moved[way] / ours_ms / 1e6,
                         "torch_rate": moved[way] / torch_ms / 1e6, "unit": "GB/s",
                         "rel_err": errs[way][0], "torch_err": errs[way][1],
                         "det_ms": det if way == "bwd" else None, "det_err": None})
        del x, g, ours_y, tx, tg, txr, tyr
        torch.cuda.empty_cache()
    return rows


def table(rows: list[dict], device: str) -> str:
    lines = [f"device: {device}", "",
             f"{'case':<36} {'way':<4} {'ours ms':>9} {'torch ms':>9} {'ours/torch':>10} "
             f"{'det ms':>8} {'ours rate':>10} {'torch rate':>10} {'unit':<7} {'rel err':>8} "
             f"{'torch err':>9}"]
    for r in rows:
        det = f"{r['det_ms']:>8.3f}" if r["det_ms"] is not None else f"{'':>8}"
        lines.append(f"{r['case']:<36} {r['way']:<4} {r['ms']:>9.4f} {r['torch_ms']:>9.4f} "
                     f"{r['ratio']:>10.2f} {det} {r['rate']:>10.1f} {r['torch_rate']:>10.1f} "
                     f"{r['unit']:<7} {r['rel_err']:>8.1e} {r['torch_err']:>9.1e}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    output_arguments(parser, "two shapes each, fewer repeats")
    args = parser.parse_args()
    import cupy as cp
    import torch
    # float32 products stay float32 in cuDNN and cuBLAS (TF32 would round operands to 10 bits)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True   # cuDNN picks its fastest algorithm per shape
    device = (f"{torch.cuda.get_device_name()} (torch {torch.__version__}, cuDNN "
              f"{torch.backends.cudnn.version()}, cupy {cp.__version__})")
    rows = bench_conv(cp, torch, args.quick) + bench_pool(cp, torch, args.quick)
    emit(args, table(rows, device), {"device": device, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
