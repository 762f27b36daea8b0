"""The attention kernels against PyTorch at the gpt2-124m shape (issue 18): every registered
native_cuda/torchlean scaled_dot_product_attention capsule that accepts B8 H12 T1024 D64 with the
causal mask (one that declines or is unavailable is listed with its reason) forward and
forward+backward, against SDPA's efficient backend (is_causal: the fastest that takes float32)
in the same run, each side's relative L2 error against torch's float64 math evaluation beside its
time. benchmarks/bench_gpt2.py runs it after the training steps; goal: within 1.2x."""
from __future__ import annotations

import sys

import numpy as np

from benchmarks.timing import event_ms, rel_err

SHAPE = (8, 12, 1024, 64)   # B, H, T, D; causal
GOAL = 1.2                  # ours / SDPA efficient, forward and forward+backward


def bench(cp, torch, quick: bool) -> dict:
    """Every registered native_cuda/torchlean attention capsule at SHAPE (causal, the op's
    boolean mask) against SDPA's efficient backend (is_causal), forward and forward plus
    backward, each checked against torch's float64 math evaluation first."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import engine.ops  # noqa: F401  (registers the tape VJP rules vjp_function returns)
    from engine.capsule import ExecutableKernel
    from engine.ops._dispatch import vjp_function
    from engine.registry import registry
    from engine.types import BackendOp, Device, Provider
    sdpa = torch.nn.functional.scaled_dot_product_attention
    b, h, t, d = SHAPE
    rng = cp.random.RandomState(18)
    q, k, v, g = (rng.standard_normal((b * h, t, d), dtype=cp.float32) for _ in range(4))
    mask = cp.ascontiguousarray(cp.broadcast_to(cp.tril(cp.ones((t, t), bool)), (b * h, t, t)))
    params = {"mask": mask, "scale": float(np.float32(d ** -0.5))}
    tq, tk, tv, tg = (torch.from_dlpack(x).view(b, h, t, d) for x in (q, k, v, g))
    leaves = [x.detach().clone().requires_grad_(True) for x in (tq, tk, tv)]
    with sdpa_kernel(SDPBackend.MATH):   # the float64 reference of both sides
        ref = [x.double().requires_grad_(True) for x in (tq, tk, tv)]
        ref_out = sdpa(*ref, is_causal=True, scale=params["scale"])
        ref_grads = torch.autograd.grad(ref_out, ref, tg.double())
    refs = [cp.from_dlpack(x.detach().reshape(b * h, t, d)) for x in (ref_out, *ref_grads)]
    del ref, ref_out, ref_grads
    iters, loops = (2, 3) if quick else (10, 5)

    def torch_forward():
        return sdpa(tq, tk, tv, is_causal=True, scale=params["scale"])

    def torch_both():
        out = sdpa(*leaves, is_causal=True, scale=params["scale"])
        return (out,) + torch.autograd.grad(out, leaves, tg)

    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        peer = {"forward_ms": event_ms(cp, torch_forward, iters, loops),
                "both_ms": event_ms(cp, torch_both, iters, loops)}
        got = [cp.from_dlpack(x.detach().reshape(b * h, t, d)) for x in torch_both()]
    peer.update(_errors(cp, got, refs))
    rows = []
    reg = registry()
    for cap in reg.capsules(BackendOp.scaled_dot_product_attention):
        if cap.device is not Device.cuda or cap.provider not in (Provider.native_cuda,
                                                                  Provider.torchlean):
            continue
        handler = reg.handler(cap.name)
        why = (handler.unavailable() if handler.unavailable else None) or \
            (handler.declines((q, k, v), params) if handler.declines else None)
        if why:
            rows.append({"capsule": cap.name, "skipped": why})
            continue
        vjp = vjp_function(ExecutableKernel.bind(cap, handler))

        def forward(f=handler.forward):
            return f(q, k, v, **params)

        def both(f=handler.forward, vjp=vjp):
            out = f(q, k, v, **params)
            return (out,) + tuple(vjp((q, k, v), out, g, **params))

        try:
            row = {"capsule": cap.name, **_errors(cp, both(), refs)}
            row["forward_ms"] = event_ms(cp, forward, iters, loops)
            row["both_ms"] = event_ms(cp, both, iters, loops)
        except Exception as exc:   # a kernel that fails here is reported; the others still run
            row = {"capsule": cap.name, "error": f"{type(exc).__name__}: {exc}"}
        else:
            row["forward_ratio"] = row["forward_ms"] / peer["forward_ms"]
            row["both_ratio"] = row["both_ms"] / peer["both_ms"]
        rows.append(row)
        print(f"  attention: {cap.name} done", file=sys.stderr, flush=True)
    return {"shape": {"batch": b, "heads": h, "tokens": t, "head_dim": d, "causal": True},
            "sdpa_efficient": peer, "capsules": rows}


def _errors(cp, got, refs) -> dict:
    """Relative L2 errors of (out, dq, dk, dv) against the float64 ones; grad: the largest."""
    errs = [rel_err(cp, x, r) for x, r in zip(got, refs)]
    return {"forward_err": errs[0], "grad_err": max(errs[1:])}


def table(attn: dict) -> str:
    s, peer = attn["shape"], attn["sdpa_efficient"]
    lines = [f"attention B{s['batch']} H{s['heads']} T{s['tokens']} D{s['head_dim']} causal: "
             f"ours (boolean mask) vs SDPA efficient (is_causal); rel L2 err vs float64",
             f"{'kernel':<32} {'fwd ms':>8} {'ratio':>6} {'fwd+bwd ms':>10} {'ratio':>6} "
             f"{'fwd err':>8} {'grad err':>8}  goal (both <= {GOAL})",
             f"{'torch sdpa efficient':<32} {peer['forward_ms']:>8.3f} {'':>6} "
             f"{peer['both_ms']:>10.3f} {'':>6} {peer['forward_err']:>8.1e} "
             f"{peer['grad_err']:>8.1e}"]
    for r in attn["capsules"]:
        if "skipped" in r or "error" in r:
            why = f"skipped: {r['skipped']}" if "skipped" in r else f"FAILED: {r['error']}"
            lines.append(f"{r['capsule']:<32} {why}")
            continue
        ok = r["forward_ratio"] <= GOAL and r["both_ratio"] <= GOAL
        lines.append(f"{r['capsule']:<32} {r['forward_ms']:>8.3f} {r['forward_ratio']:>6.2f} "
                     f"{r['both_ms']:>10.3f} {r['both_ratio']:>6.2f} {r['forward_err']:>8.1e} "
                     f"{r['grad_err']:>8.1e}  {'met' if ok else 'NOT MET'}")
    return "\n".join(lines)
