"""Spectral and sequence ops on a CUDA GPU against PyTorch, measured in the same run.

1. packed rfft (cufft.rfft) against torch.fft.rfft, batch 2048 x n 4096 (and a prime n);
2. fft_fno forward and forward+backward (cufft.fft_fno: cuFFT transforms, our mode mixing) against
   the PyTorch composition torch.fft.rfft -> einsum over the kept modes -> torch.fft.irfft, with
   autograd's backward, at batch 32, grid 4096, width 64, 16 modes (and a smaller shape);
3. selective_scan (native_cuda.selective_scan) at seq 4096, state 1024, constant coefficients,
   against a PyTorch loop over time and a cumsum-style closed form
   h[t] = A^(t+1) (h0 + cumsum_s(B X[s] / A^(s+1))) (fast, but unstable for long sequences: its
   error column says how far off it is).

Times are CUDA-event medians over loops of calls after a warm-up (benchmarks/timing.py); all
variants read the same device buffers (DLPack). Errors are relative L2 against torch's float64
evaluation on the GPU. Ratios are ours / torch (below 1: ours is faster).

Usage: python3 benchmarks/bench_spectral.py [--json PATH] [--table PATH] [--quick]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import emit, event_ms, output_arguments, rel_err  # noqa: E402

RFFT_CASES = [(2048, 4096), (2048, 4099)]          # (batch, n); 4099 is prime
FNO_CASES = [(32, 4096, 64, 16), (8, 256, 32, 16)]  # (batch, grid, width, modes)
SCAN_CASES = [(4096, 1024), (256, 64)]              # (seq, state)


def _row(case, way, ours_ms, torch_ms, err, torch_err, peer="torch"):
    return {"case": case, "way": way, "peer": peer, "ms": ours_ms, "torch_ms": torch_ms,
            "ratio": ours_ms / torch_ms, "rel_err": err, "torch_err": torch_err}


def bench_rfft(cp, torch, quick: bool) -> list[dict]:
    from engine.registry import registry
    h = registry().handler("cufft.rfft")
    rows = []
    for batch, n in RFFT_CASES[:1] if quick else RFFT_CASES:
        x = cp.random.RandomState(n).standard_normal((batch, n), dtype=cp.float32)
        tx = torch.from_dlpack(x)
        ref = torch.view_as_real(torch.fft.rfft(tx.double(), dim=-1))
        err = rel_err(cp, h.forward(x), ref)
        terr = rel_err(cp, torch.view_as_real(torch.fft.rfft(tx, dim=-1)), ref)
        iters, repeats = (5, 5) if quick else (20, 11)
        rows.append(_row(f"rfft {batch}x{n}", "fwd",
                         event_ms(cp, lambda: h.forward(x), iters, repeats),
                         event_ms(cp, lambda: torch.fft.rfft(tx, dim=-1), iters, repeats),
                         err, terr))
    return rows


def _torch_fno(torch, x, w_re, w_im, grid: int):
    """The PyTorch composition of fft_fno's rule: y = irfft(Z) (normalised by 1/grid, as
    docs/OPS.md states for our op) with Z = X W on the kept modes, 0 above."""
    modes = w_re.shape[0]
    spec = torch.fft.rfft(x, dim=-2)                                  # (b, m, width)
    mixed = torch.einsum("bkc,kco->bko", spec[:, :modes], torch.complex(w_re, w_im))
    full = torch.zeros_like(spec)
    full[:, :modes] = mixed
    return torch.fft.irfft(full, n=grid, dim=-2)


def bench_fno(cp, torch, quick: bool) -> list[dict]:
    from engine.registry import registry
    h = registry().handler("cufft.fft_fno")
    rows = []
    for batch, grid, width, modes in FNO_CASES[:1] if quick else FNO_CASES:
        rng = cp.random.RandomState(grid + width)
        x = rng.standard_normal((batch, grid, width), dtype=cp.float32)
        # unit-variance mixing (an output mode has the size of an input mode): with FNO's usual
        # 1/width^2 uniform init the kept modes are so small that every float32 FFT's rounding
        # floor, relative to the whole input, dominates the relative error of both sides
        scale = np.float32(1.0 / np.sqrt(width))
        w_re = rng.standard_normal((modes, width, width), dtype=cp.float32) * scale
        w_im = rng.standard_normal((modes, width, width), dtype=cp.float32) * scale
        tx, tre, tim = (torch.from_dlpack(a) for a in (x, w_re, w_im))
        y = h.forward(x, w_re, w_im)
        g = rng.standard_normal(y.shape, dtype=cp.float32)
        tg = torch.from_dlpack(g)
        leaves64 = [t.double().requires_grad_(True) for t in (tx, tre, tim)]
        y64 = _torch_fno(torch, *leaves64, grid)
        grads64 = torch.autograd.grad(y64, leaves64, tg.double())
        leaves = [t.detach().clone().requires_grad_(True) for t in (tx, tre, tim)]

        def torch_fwd_bwd():
            out = _torch_fno(torch, *leaves, grid)
            return torch.autograd.grad(out, leaves, tg)

        def ours_fwd_bwd():
            out = h.forward(x, w_re, w_im)
            return h.vjp((x, w_re, w_im), out, g)

        err_f = rel_err(cp, y, y64.detach())
        terr_f = rel_err(cp, _torch_fno(torch, tx, tre, tim, grid), y64.detach())
        err_b = max(rel_err(cp, a, r) for a, r in zip(ours_fwd_bwd(), grads64))
        terr_b = max(rel_err(cp, a, r) for a, r in zip(torch_fwd_bwd(), grads64))
        del leaves64, y64, grads64
        iters, repeats = (3, 5) if quick else (10, 11)
        case = f"fft_fno {batch}x{grid}x{width} m{modes}"
        rows.append(_row(case, "fwd",
                         event_ms(cp, lambda: h.forward(x, w_re, w_im), iters, repeats),
                         event_ms(cp, lambda: _torch_fno(torch, tx, tre, tim, grid), iters,
                                  repeats), err_f, terr_f))
        rows.append(_row(case, "fwd+bwd", event_ms(cp, ours_fwd_bwd, iters, repeats),
                         event_ms(cp, torch_fwd_bwd, iters, repeats), err_b, terr_b))
        torch.cuda.empty_cache()
    return rows


def _torch_scan_loop(torch, A, B, X, h0):
    h, out = h0, []
    for t in range(X.shape[0]):
        h = A * h + B * X[t]
        out.append(h)
    return torch.stack(out)


def _torch_scan_cumsum(torch, A, B, X, h0):
    powers = torch.cumprod(A.expand(X.shape[0], -1), dim=0)          # A^(t+1)
    return powers * (h0 + torch.cumsum(B * X / powers, dim=0))


def bench_scan(cp, torch, quick: bool) -> list[dict]:
    from engine.registry import registry
    h = registry().handler("native_cuda.selective_scan")
    rows = []
    for seq, state in SCAN_CASES[:1] if quick else SCAN_CASES:
        rng = cp.random.RandomState(seq + state)
        A = rng.uniform(0.9, 0.999, (state,), dtype=cp.float32)
        B = rng.standard_normal((state,), dtype=cp.float32)
        X = rng.standard_normal((seq, state), dtype=cp.float32)
        h0 = rng.standard_normal((state,), dtype=cp.float32)
        tA, tB, tX, th0 = (torch.from_dlpack(a) for a in (A, B, X, h0))
        ref = _torch_scan_loop(torch, tA.double(), tB.double(), tX.double(), th0.double())
        err = rel_err(cp, h.forward(A, B, X, h0), ref)
        loop_err = rel_err(cp, _torch_scan_loop(torch, tA, tB, tX, th0), ref)
        cum_err = rel_err(cp, _torch_scan_cumsum(torch, tA, tB, tX, th0), ref)
        ours = event_ms(cp, lambda: h.forward(A, B, X, h0), 20 if not quick else 5, 11)
        loop = event_ms(cp, lambda: _torch_scan_loop(torch, tA, tB, tX, th0), 1, 3, warmup=1)
        cum = event_ms(cp, lambda: _torch_scan_cumsum(torch, tA, tB, tX, th0), 20, 11)
        case = f"selective_scan {seq}x{state}"
        rows.append(_row(case, "fwd", ours, loop, err, loop_err, peer="torch loop"))
        rows.append(_row(case, "fwd", ours, cum, err, cum_err, peer="torch cumsum"))
        out = h.forward(A, B, X, h0)
        g = rng.standard_normal(out.shape, dtype=cp.float32)
        tg = torch.from_dlpack(g)
        leaves64 = [t.double().requires_grad_(True) for t in (tA, tB, tX, th0)]
        ref_grads = torch.autograd.grad(_torch_scan_loop(torch, *leaves64), leaves64, tg.double())
        err_b = max(rel_err(cp, a, r) for a, r in zip(h.vjp((A, B, X, h0), out, g), ref_grads))
        leaves = [t.detach().clone().requires_grad_(True) for t in (tA, tB, tX, th0)]
        tout = _torch_scan_cumsum(torch, *leaves)
        terr_b = max(rel_err(cp, a, r) for a, r in
                     zip(torch.autograd.grad(tout, leaves, tg, retain_graph=True), ref_grads))
        del leaves64, ref_grads
        bwd = event_ms(cp, lambda: h.vjp((A, B, X, h0), out, g), 20 if not quick else 5, 11)
        tbwd = event_ms(cp, lambda: torch.autograd.grad(tout, leaves, tg, retain_graph=True),
                        20, 11)
        rows.append(_row(case, "bwd", bwd, tbwd, err_b, terr_b, peer="torch cumsum"))
        torch.cuda.empty_cache()
    return rows


def table(rows: list[dict], device: str) -> str:
    lines = [f"device: {device}", "",
             f"{'case':<32} {'way':<8} {'peer':<13} {'ours ms':>9} {'peer ms':>9} "
             f"{'ours/peer':>9} {'rel err':>8} {'peer err':>9}"]
    for r in rows:
        lines.append(f"{r['case']:<32} {r['way']:<8} {r['peer']:<13} {r['ms']:>9.4f} "
                     f"{r['torch_ms']:>9.4f} {r['ratio']:>9.2f} {r['rel_err']:>8.1e} "
                     f"{r['torch_err']:>9.1e}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    output_arguments(parser, "one shape each, fewer repeats")
    args = parser.parse_args()
    import cupy as cp
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    device = f"{torch.cuda.get_device_name()} (torch {torch.__version__}, cupy {cp.__version__})"
    rows = bench_rfft(cp, torch, args.quick) + bench_fno(cp, torch, args.quick) + \
        bench_scan(cp, torch, args.quick)
    emit(args, table(rows, device), {"device": device, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
