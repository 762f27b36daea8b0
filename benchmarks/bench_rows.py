"""Row kernels (softmax family, layer_norm, batch_norm) against PyTorch on one GPU: time per call
(CUDA-event median), GB/s of the fewest bytes (inputs read once, outputs written once), the share
of the same run's device-to-device copy ceiling, the time ratio ours / torch, and each side's
worst float32-ulp distance from a float64 evaluation of the same inputs (torch in float64).

Inputs smaller than 200 MB rotate among several random sets so the 50 MB L2 cannot hold them.
Usage: python benchmarks/bench_rows.py [--json PATH]"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import event_ms  # noqa: E402


def _event_ms(cp, fn, sets: int, iters: int = 10, repeats: int = 7) -> float:
    """benchmarks/timing.py's event median, the calls rotating among `sets` input sets."""
    turn = iter(range(1 << 62))
    return event_ms(cp, lambda: fn(next(turn) % sets), iters, repeats, warmup=3)


def _ulps(torch, got, ref64) -> float:
    """Worst |got - ref| in float32 ulps of ref (NaN anywhere: inf)."""
    got = got.double()
    ref32 = ref64.float()
    spacing = (torch.nextafter(ref32.abs(), torch.tensor(float("inf"), device=ref32.device))
               - ref32.abs()).double()
    d = (got - ref64).abs() / spacing
    if torch.isnan(d).any():
        return float("inf")
    return float(d.max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import cupy as cp
    import torch
    import torch.nn.functional as F

    from engine.registry import registry
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    h = {op: registry().handler(f"native_cuda.{op}")
         for op in ("softmax", "log_softmax", "layer_norm", "batch_norm")}
    rng = cp.random.default_rng(0)

    def randn(shape, scale=1.0, sets=1):
        return [rng.standard_normal(shape, dtype=cp.float32) * cp.float32(scale)
                for _ in range(sets)]

    big = cp.empty(1 << 28, cp.float32)   # 1 GiB
    big[...] = 1.5
    dst = cp.empty_like(big)
    copy_ms = _event_ms(cp, lambda i: dst.__setitem__(Ellipsis, big), 1)
    ceiling = 2 * big.nbytes / copy_ms / 1e6
    del big, dst
    rows = []

    def record(name, nbytes, ours, theirs, sets, err_ours="", err_torch=""):
        t_o = _event_ms(cp, ours, sets)
        t_t = _event_ms(cp, theirs, sets)
        gbs_o, gbs_t = nbytes / t_o / 1e6, nbytes / t_t / 1e6
        rows.append(dict(kernel=name, ours_us=1e3 * t_o, torch_us=1e3 * t_t, ours_gbs=gbs_o,
                         torch_gbs=gbs_t, ours_ceiling=gbs_o / ceiling, ratio=t_o / t_t,
                         ulp_ours=err_ours, ulp_torch=err_torch))
        print(f"{name}: ours {1e3 * t_o:.1f} us ({gbs_o:.0f} GB/s), torch {1e3 * t_t:.1f} us "
              f"({gbs_t:.0f} GB/s), ratio {t_o / t_t:.2f}, ulps {err_ours} / {err_torch}",
              flush=True)

    def sets_for(nbytes):
        return max(1, -(-200_000_000 // nbytes))

    for shape in ((65536, 1024), (8192, 8192), (4096, 50257), (16384, 768), (4096, 256)):
        n_el = shape[0] * shape[1]
        sets = sets_for(4 * n_el)
        xs = randn(shape, 4.0, sets)
        gs = randn(shape, 1.0, sets)
        tx = [torch.from_dlpack(a) for a in xs]
        tg = [torch.from_dlpack(a) for a in gs]
        for op, tf, tb in (("softmax", torch.softmax, torch._softmax_backward_data),
                           ("log_softmax", torch.log_softmax,
                            torch._log_softmax_backward_data)):
            ours_y = h[op].forward(xs[0], axis=-1)
            ref = tf(tx[0].double(), -1)
            e_o = _ulps(torch, torch.from_dlpack(ours_y), ref)
            e_t = _ulps(torch, tf(tx[0], -1), ref)
            record(f"{op} {shape[0]}x{shape[1]} fwd", 8 * n_el,
                   lambda i: h[op].forward(xs[i], axis=-1), lambda i: tf(tx[i], -1), sets,
                   f"{e_o:.2f}", f"{e_t:.2f}")
            ys = [h[op].forward(a, axis=-1) for a in xs]
            ty = [torch.from_dlpack(a) for a in ys]
            record(f"{op} {shape[0]}x{shape[1]} bwd", 12 * n_el,
                   lambda i: h[op].vjp((xs[i],), ys[i], gs[i], axis=-1),
                   lambda i: tb(tg[i], ty[i], -1, torch.float32), sets)
            del ys, ty
        del xs, gs, tx, tg
        cp.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()

    eps = float(np.float32(1e-5))
    for shape in ((8192, 1024), (16384, 768), (65536, 256)):
        n_el = shape[0] * shape[1]
        d = shape[1]
        sets = sets_for(4 * n_el)
        xs = randn(shape, 3.0, sets)
        gs = randn(shape, 1.0, sets)
        gamma = cp.asarray(np.random.default_rng(1).uniform(0.5, 2, d).astype(np.float32))
        beta = randn((d,))[0]
        tx = [torch.from_dlpack(a) for a in xs]
        tg = [torch.from_dlpack(a) for a in gs]
        tw, tb_ = torch.from_dlpack(gamma), torch.from_dlpack(beta)
        ref = F.layer_norm(tx[0].double(), (d,), tw.double(), tb_.double(), eps)
        e_o = _ulps(torch, torch.from_dlpack(h["layer_norm"].forward(xs[0], gamma, beta,
                                                                     eps=eps)), ref)
        e_t = _ulps(torch, F.layer_norm(tx[0], (d,), tw, tb_, eps), ref)
        record(f"layer_norm {shape[0]}x{d} fwd", 8 * n_el,
               lambda i: h["layer_norm"].forward(xs[i], gamma, beta, eps=eps),
               lambda i: F.layer_norm(tx[i], (d,), tw, tb_, eps), sets, f"{e_o:.2f}", f"{e_t:.2f}")
        txr = [a.detach().requires_grad_(True) for a in tx]
        twr, tbr = tw.detach().requires_grad_(True), tb_.detach().requires_grad_(True)
        tys = [F.layer_norm(a, (d,), twr, tbr, eps) for a in txr]
        ys = [h["layer_norm"].forward(a, gamma, beta, eps=eps) for a in xs]
        record(f"layer_norm {shape[0]}x{d} bwd", 12 * n_el,
               lambda i: h["layer_norm"].vjp((xs[i], gamma, beta), ys[i], gs[i], eps=eps),
               lambda i: torch.autograd.grad(tys[i], (txr[i], twr, tbr), tg[i],
                                             retain_graph=True), sets)
        del xs, gs, tx, tg, txr, tys, ys
        cp.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()

    shape = (64, 256, 28, 28)
    n_el = int(np.prod(shape))
    sets = sets_for(4 * n_el)
    xs = randn(shape, 2.0, sets)
    gs = randn(shape, 1.0, sets)
    gamma = cp.ones(256, cp.float32) * 1.25
    beta = cp.zeros(256, cp.float32) + 0.5
    tx = [torch.from_dlpack(a) for a in xs]
    tg = [torch.from_dlpack(a) for a in gs]
    tw, tb_ = torch.from_dlpack(gamma), torch.from_dlpack(beta)
    record("batch_norm 64x256x28x28 fwd", 8 * n_el,
           lambda i: h["batch_norm"].forward(xs[i], gamma, beta, eps=eps),
           lambda i: F.batch_norm(tx[i], None, None, tw, tb_, True, 0.0, eps), sets)
    txr = [a.detach().requires_grad_(True) for a in tx]
    twr, tbr = tw.detach().requires_grad_(True), tb_.detach().requires_grad_(True)
    tys = [F.batch_norm(a, None, None, twr, tbr, True, 0.0, eps) for a in txr]
    ys = [h["batch_norm"].forward(a, gamma, beta, eps=eps) for a in xs]
    record("batch_norm 64x256x28x28 bwd", 12 * n_el,
           lambda i: h["batch_norm"].vjp((xs[i], gamma, beta), ys[i], gs[i], eps=eps),
           lambda i: torch.autograd.grad(tys[i], (txr[i], twr, tbr), tg[i], retain_graph=True),
           sets)

    lines = [f"copy ceiling (1 GiB device-to-device, read + write): {ceiling:.0f} GB/s",
             "| kernel | ours us | torch us | ours GB/s | torch GB/s | ours/ceiling | ratio | "
             "ulp ours | ulp torch |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['ours_us']:.1f} | {r['torch_us']:.1f} | "
                     f"{r['ours_gbs']:.0f} | {r['torch_gbs']:.0f} | {r['ours_ceiling']:.0%} | "
                     f"{r['ratio']:.2f} | {r['ulp_ours']} | {r['ulp_torch']} |")
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ceiling_gbs": ceiling, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
