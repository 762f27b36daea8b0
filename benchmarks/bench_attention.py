"""Attention and layer norm on a CUDA GPU against PyTorch, measured in the same run.

1. scaled_dot_product_attention forward, float32, at transformer sizes (batch*heads x tokens x
   head dim 64, causal boolean mask or none): torchlean.composed_attention (cuBLAS + native
   hard-masked softmax) and native_cuda.direct_attention (fused float64 reference kernel)
   against torch.nn.functional.scaled_dot_product_attention with the math backend
   (torch.nn.attention.sdpa_kernel(SDPBackend.MATH)) and with torch's default backend choice;
2. layer_norm forward [8192, 1024] (and the backward kernel) against torch.nn.functional.layer_norm
   (and torch autograd's backward).

Every time is the median over repeats of CUDA events around a loop of calls, after a warm-up;
every variant reads the same device buffers (DLPack, no copies). Each result is checked first:
relative L2 error against a float64 evaluation by torch on the GPU, printed beside the time.
Ratios are ours / torch's (below 1: ours is faster).

3. native_cuda.flash_attention (tiled float32 online softmax) forward and backward at gpt2's
   B8 H12 T1024 D64 causal against torch SDPA's efficient backend
   (torch.nn.attention.sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION), float32, TF32 off), given the
   same bool mask and, as torch's best case, is_causal=True (no mask tensor); backward = our VJP
   (row statistics, dk/dv and dq passes) against torch.autograd.grad of the same call.

4. native_cuda.attention_heads (the flash kernels on the packed [B, T, H*D] layout, implicit
   causal mask) forward and backward at the same size, against (a) the path it replaces: CuPy's
   permute copies of q, k, v (and of out, g, dq, dk, dv), native_cuda.flash_attention with the
   (B*H, T, T) bool mask and its tile summary, and (b) torch SDPA's efficient backend with
   is_causal=True on the strided [B, H, T, D] views of the same buffers (no copies, as PyTorch's
   gpt2 does).

Usage: python3 benchmarks/bench_attention.py [--json PATH] [--table PATH] [--quick] [--flash]
[--heads] (--flash: only part 3; --heads: only part 4)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import event_ms as _event_time, rel_err as _rel_err  # noqa: E402

ATTN_SIZES = [(32, 512, 64, True), (64, 1024, 64, True), (96, 1024, 64, True),
              (96, 1024, 64, False)]
LN_SHAPE = (8192, 1024)



def _float64_reference(torch, cp, qkv, tg, scale, layout):
    """Causal SDPA and its q, k, v gradients in float64 (torch's math backend) from the float32
    inputs qkv and cotangent tg, each put into our layout by `layout` (a torch tensor -> CuPy)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q64, k64, v64 = (x.detach().double().requires_grad_(True) for x in qkv)
    with sdpa_kernel(SDPBackend.MATH):
        ref = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=True,
                                                               scale=scale)
    grads = torch.autograd.grad(ref, (q64, k64, v64), tg.double())
    return layout(ref), [layout(x) for x in grads]

def bench_attention(cp, torch, quick: bool) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from engine.registry import registry
    composed = registry().handler("torchlean.composed_attention").forward
    direct = registry().handler("native_cuda.direct_attention").forward
    rows = []
    sizes = ATTN_SIZES[:2] if quick else ATTN_SIZES
    for bh, tokens, dh, causal in sizes:
        rng = cp.random.RandomState(bh * tokens)
        q, k, v = (rng.standard_normal((bh, tokens, dh), dtype=cp.float32) for _ in range(3))
        mask = cp.broadcast_to(cp.tril(cp.ones((tokens, tokens), bool)), (bh, tokens, tokens))
        mask = cp.ascontiguousarray(mask) if causal else None
        scale = float(np.float32(dh ** -0.5))
        tq, tk, tv = (torch.from_dlpack(x) for x in (q, k, v))
        tm = torch.from_dlpack(mask.view(cp.uint8)).bool() if causal else None

        def torch_math():
            with sdpa_kernel(SDPBackend.MATH):
                return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm,
                                                                        scale=scale)

        def torch_default():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm,
                                                                    scale=scale)

        with sdpa_kernel(SDPBackend.MATH):
            ref = torch.nn.functional.scaled_dot_product_attention(
                tq.double(), tk.double(), tv.double(), attn_mask=tm, scale=scale)
        ref64 = cp.from_dlpack(ref)
        variants = {"composed": lambda: composed(q, k, v, mask=mask, scale=scale),
                    "direct": lambda: direct(q, k, v, mask=mask, scale=scale),
                    "torch math": torch_math, "torch default": torch_default}
        errs = {}
        for name, fn in variants.items():
            out = fn()
            errs[name] = _rel_err(cp, out if isinstance(out, cp.ndarray) else cp.from_dlpack(out),
                                  ref64)
        del ref, ref64
        iters, repeats = (3, 5) if quick else (10, 15)
        times = {name: _event_time(cp, fn, iters, repeats) for name, fn in variants.items()}
        for ours in ("composed", "direct"):
            rows.append({"case": f"sdpa {bh}x{tokens}x{dh} {'causal' if causal else 'no mask'}",
                         "ours": ours, "ms": times[ours], "rel_err": errs[ours],
                         "torch_math_ms": times["torch math"],
                         "torch_default_ms": times["torch default"],
                         "torch_math_err": errs["torch math"],
                         "torch_default_err": errs["torch default"],
                         "ratio_math": times[ours] / times["torch math"],
                         "ratio_default": times[ours] / times["torch default"]})
        del q, k, v, tq, tk, tv, mask, tm
        torch.cuda.empty_cache()
    return rows


FLASH_SHAPE = (8, 12, 1024, 64)   # gpt2: batch, heads, tokens, head dim; causal


def bench_flash(cp, torch, quick: bool) -> list[dict]:
    """Part 3 of the module docstring: rows of (case, ours ms, torch ms with the mask, torch ms
    is_causal, ratios, errors against a float64 evaluation by torch)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from engine.registry import registry
    h = registry().handler("native_cuda.flash_attention")
    b, heads, t, dh = FLASH_SHAPE
    bh = b * heads
    rng = cp.random.RandomState(2026)
    q, k, v, g = (rng.standard_normal((bh, t, dh), dtype=cp.float32) for _ in range(4))
    mask = cp.ascontiguousarray(cp.broadcast_to(cp.tril(cp.ones((t, t), bool)), (bh, t, t)))
    scale = float(np.float32(dh ** -0.5))
    shape4 = (b, heads, t, dh)
    tq, tk, tv, tg = (torch.from_dlpack(x).view(shape4) for x in (q, k, v, g))
    tm = torch.from_dlpack(mask.view(cp.uint8)).bool().view(b, heads, t, t)
    tq, tk, tv = (x.detach().clone().requires_grad_(True) for x in (tq, tk, tv))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def torch_masked():
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return sdpa(tq, tk, tv, attn_mask=tm, scale=scale)

    def torch_causal():
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return sdpa(tq, tk, tv, is_causal=True, scale=scale)

    ref64, ref_g64 = _float64_reference(torch, cp, (tq, tk, tv), tg, scale,
                                        lambda x: cp.from_dlpack(x.detach()).reshape(bh, t, dh))
    ours_out = h.forward(q, k, v, mask=mask, scale=scale)
    ours_grads = h.vjp((q, k, v), ours_out, g, mask=mask, scale=scale)
    y_c = torch_causal()
    tg_c = torch.autograd.grad(y_c, (tq, tk, tv), tg, retain_graph=True)
    try:   # the efficient backend with a dense bool mask (a bias); a build may refuse it
        y_m = torch_masked()
        torch.autograd.grad(y_m, (tq, tk, tv), tg, retain_graph=True)
    except RuntimeError as exc:
        print(f"torch SDPA efficient with the bool mask is unavailable: {exc}", file=sys.stderr)
        y_m = None

    def err(got, want):
        return _rel_err(cp, got if isinstance(got, cp.ndarray) else cp.from_dlpack(got.detach()),
                        want)

    iters, repeats = (3, 5) if quick else (10, 15)
    fwd = {"ours": lambda: h.forward(q, k, v, mask=mask, scale=scale),
           "masked": torch_masked, "causal": torch_causal}
    bwd = {"ours": lambda: h.vjp((q, k, v), ours_out, g, mask=mask, scale=scale),
           "masked": lambda: torch.autograd.grad(y_m, (tq, tk, tv), tg, retain_graph=True),
           "causal": lambda: torch.autograd.grad(y_c, (tq, tk, tv), tg, retain_graph=True)}
    if y_m is None:
        del fwd["masked"], bwd["masked"]
    t_f = {n: _event_time(cp, fn, iters, repeats) for n, fn in fwd.items()}
    t_b = {n: _event_time(cp, fn, iters, repeats) for n, fn in bwd.items()}
    t_f.setdefault("masked", float("nan"))
    t_b.setdefault("masked", float("nan"))
    t_f["ours again"] = _event_time(cp, fwd["ours"], iters, repeats)   # the spread of one version
    t_b["ours again"] = _event_time(cp, bwd["ours"], iters, repeats)
    case = f"flash B{b} H{heads} T{t} D{dh} causal"
    rows = [{"case": case + " fwd", "ours_ms": t_f["ours"], "torch_mask_ms": t_f["masked"],
             "torch_causal_ms": t_f["causal"], "ratio_mask": t_f["ours"] / t_f["masked"],
             "ratio_causal": t_f["ours"] / t_f["causal"], "ours_err": err(ours_out, ref64),
             "torch_err": err(y_c.reshape(bh, t, dh), ref64)},
            {"case": case + " bwd", "ours_ms": t_b["ours"], "torch_mask_ms": t_b["masked"],
             "torch_causal_ms": t_b["causal"], "ratio_mask": t_b["ours"] / t_b["masked"],
             "ratio_causal": t_b["ours"] / t_b["causal"],
             "ours_err": max(err(a, r) for a, r in zip(ours_grads, ref_g64)),
             "torch_err": max(err(a.reshape(bh, t, dh), r) for a, r in zip(tg_c, ref_g64))}]
    rows[0]["ours_again_ms"], rows[1]["ours_again_ms"] = t_f["ours again"], t_b["ours again"]
    tot = {n: t_f[n] + t_b[n] for n in t_f}
    rows.append({"case": case + " fwd+bwd", "ours_ms": tot["ours"], "torch_mask_ms": tot["masked"],
                 "torch_causal_ms": tot["causal"], "ratio_mask": tot["ours"] / tot["masked"],
                 "ratio_causal": tot["ours"] / tot["causal"], "ours_err": float("nan"),
                 "torch_err": float("nan")})
    return rows


def bench_heads(cp, torch, quick: bool) -> list[dict]:
    """Part 4 of the module docstring: rows of (case, ours ms, the replaced path's ms, torch
    is_causal ms, ratios, errors against a float64 evaluation by torch)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from engine.heads_layout import causal_mask, merge_heads, split_heads
    from engine.registry import registry
    heads_h = registry().handler("native_cuda.attention_heads")
    flash_h = registry().handler("native_cuda.flash_attention")
    b, heads, t, dh = FLASH_SHAPE
    rng = cp.random.RandomState(2027)
    q, k, v, g = (rng.standard_normal((b, t, heads * dh), dtype=cp.float32) for _ in range(4))
    scale = float(np.float32(dh ** -0.5))
    mask = causal_mask(cp, b * heads, t)
    # torch's [B, H, T, D] views of the same [B, T, H*D] buffers: strided, no copies
    tq, tk, tv, tg = (torch.from_dlpack(x).view(b, t, heads, dh).transpose(1, 2)
                      for x in (q, k, v, g))
    tq, tk, tv = (x.detach().requires_grad_(True) for x in (tq, tk, tv))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def torch_causal():
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            return sdpa(tq, tk, tv, is_causal=True, scale=scale)

    def packed(x):   # torch's [B, H, T, D] -> our [B, T, H*D]
        return cp.from_dlpack(x.detach().transpose(1, 2).contiguous()).reshape(b, t, heads * dh)

    ref64, ref_g64 = _float64_reference(torch, cp, (tq, tk, tv), tg, scale, packed)

    def ours_fwd():
        return heads_h.forward(q, k, v, heads=heads, causal=True, scale=scale)

    ours_out = ours_fwd()
    ours_grads = heads_h.vjp((q, k, v), ours_out, g, heads=heads, causal=True, scale=scale)

    def before_fwd():   # the replaced path: permute copies, the mask's tile summary, flash
        out = flash_h.forward(*(split_heads(x, heads) for x in (q, k, v)), mask=mask,
                              scale=scale)
        return merge_heads(out, b, heads)

    # the replaced backward: the tape kept the forward's permuted q, k, v and its output (whose
    # row statistics the forward kept); g permuted in, the flash VJP, dq, dk, dv permuted back
    split_qkv = tuple(split_heads(x, heads) for x in (q, k, v))
    split_out = flash_h.forward(*split_qkv, mask=mask, scale=scale)

    def before_bwd():
        grads = flash_h.vjp(split_qkv, split_out, split_heads(g, heads), mask=mask, scale=scale)
        return [merge_heads(x, b, heads) for x in grads]

    y_c = torch_causal()
    tg_c = torch.autograd.grad(y_c, (tq, tk, tv), tg, retain_graph=True)

    def err(got, want):
        got = got if isinstance(got, cp.ndarray) else packed(got)
        return _rel_err(cp, got, want)

    iters, repeats = (3, 5) if quick else (10, 15)
    fwd = {"ours": ours_fwd, "before": before_fwd, "causal": torch_causal}
    bwd = {"ours": lambda: heads_h.vjp((q, k, v), ours_out, g, heads=heads, causal=True,
                                       scale=scale),
           "before": before_bwd,
           "causal": lambda: torch.autograd.grad(y_c, (tq, tk, tv), tg, retain_graph=True)}
    t_f = {n: _event_time(cp, fn, iters, repeats) for n, fn in fwd.items()}
    t_b = {n: _event_time(cp, fn, iters, repeats) for n, fn in bwd.items()}
    case = f"heads B{b} H{heads} T{t} D{dh} causal"
    rows = [{"case": case + " fwd", "ours_ms": t_f["ours"], "before_ms": t_f["before"],
             "torch_causal_ms": t_f["causal"], "ratio_before": t_f["ours"] / t_f["before"],
             "ratio_causal": t_f["ours"] / t_f["causal"], "ours_err": err(ours_out, ref64),
             "torch_err": err(y_c, ref64)},
            {"case": case + " bwd", "ours_ms": t_b["ours"], "before_ms": t_b["before"],
             "torch_causal_ms": t_b["causal"], "ratio_before": t_b["ours"] / t_b["before"],
             "ratio_causal": t_b["ours"] / t_b["causal"],
             "ours_err": max(err(a, r) for a, r in zip(ours_grads, ref_g64)),
             "torch_err": max(err(a, r) for a, r in zip(tg_c, ref_g64))}]
    tot = {n: t_f[n] + t_b[n] for n in t_f}
    rows.append({"case": case + " fwd+bwd", "ours_ms": tot["ours"], "before_ms": tot["before"],
                 "torch_causal_ms": tot["causal"], "ratio_before": tot["ours"] / tot["before"],
                 "ratio_causal": tot["ours"] / tot["causal"], "ours_err": float("nan"),
                 "torch_err": float("nan")})
    return rows


def heads_table(rows: list[dict]) -> str:
    lines = [f"{'case':<38} {'ours ms':>8} {'before ms':>10} {'sdpa-eff causal':>16} "
             f"{'ours/before':>12} {'ours/causal':>12} {'ours err':>9} {'torch err':>9}"]
    for r in rows:
        lines.append(f"{r['case']:<38} {r['ours_ms']:>8.3f} {r['before_ms']:>10.3f} "
                     f"{r['torch_causal_ms']:>16.3f} {r['ratio_before']:>12.2f} "
                     f"{r['ratio_causal']:>12.2f} {r['ours_err']:>9.1e} {r['torch_err']:>9.1e}")
    return "\n".join(lines)


def flash_table(rows: list[dict]) -> str:
    lines = [f"{'case':<38} {'ours ms':>8} {'again':>7} {'sdpa-eff mask':>14} "
             f"{'sdpa-eff causal':>16} {'ours/mask':>10} {'ours/causal':>12} {'ours err':>9} "
             f"{'torch err':>9}"]
    for r in rows:
        lines.append(f"{r['case']:<38} {r['ours_ms']:>8.3f} "
                     f"{r.get('ours_again_ms', float('nan')):>7.3f} {r['torch_mask_ms']:>14.3f} "
                     f"{r['torch_causal_ms']:>16.3f} {r['ratio_mask']:>10.2f} "
                     f"{r['ratio_causal']:>12.2f} {r['ours_err']:>9.1e} {r['torch_err']:>9.1e}")
    return "\n".join(lines)


def bench_layer_norm(cp, torch, quick: bool) -> list[dict]:
    from engine.registry import registry
    h = registry().handler("native_cuda.layer_norm")
    rng = cp.random.RandomState(5)
    x = rng.standard_normal(LN_SHAPE, dtype=cp.float32) * 3 + 1
    gamma = rng.uniform(0.5, 2.0, LN_SHAPE[-1], dtype=cp.float32)
    beta = rng.standard_normal(LN_SHAPE[-1], dtype=cp.float32)
    g = rng.standard_normal(LN_SHAPE, dtype=cp.float32)
    eps = float(np.float32(1e-5))
    tx, tg, tb, tgo = (torch.from_dlpack(a) for a in (x, gamma, beta, g))
    ref64 = cp.from_dlpack(torch.nn.functional.layer_norm(tx.double(), LN_SHAPE[-1:],
                                                          tg.double(), tb.double(), eps))
    ours_out = h.forward(x, gamma, beta, eps=eps)
    torch_out = torch.nn.functional.layer_norm(tx, LN_SHAPE[-1:], tg, tb, eps)
    err_ours, err_torch = _rel_err(cp, ours_out, ref64), _rel_err(cp, cp.from_dlpack(torch_out),
                                                                   ref64)
    iters, repeats = (5, 5) if quick else (20, 15)
    t_ours = _event_time(cp, lambda: h.forward(x, gamma, beta, eps=eps), iters, repeats)
    t_torch = _event_time(cp, lambda: torch.nn.functional.layer_norm(tx, LN_SHAPE[-1:], tg, tb,
                                                                     eps), iters, repeats)
    rows = [{"case": f"layer_norm fwd {LN_SHAPE[0]}x{LN_SHAPE[1]}", "ours": "native",
             "ms": t_ours, "rel_err": err_ours, "torch_ms": t_torch, "torch_err": err_torch,
             "ratio": t_ours / t_torch}]
    # Backward: ours is one kernel (dx, dgamma, dbeta); torch's is autograd's layer_norm backward.
    txr, tgr, tbr = (a.detach().clone().requires_grad_(True) for a in (tx, tg, tb))
    y = torch.nn.functional.layer_norm(txr, LN_SHAPE[-1:], tgr, tbr, eps)

    def torch_bwd():
        return torch.autograd.grad(y, (txr, tgr, tbr), tgo, retain_graph=True)

    x64, g64 = tx.double().requires_grad_(True), tg.double().requires_grad_(True)
    b64 = tb.double().requires_grad_(True)
    y64 = torch.nn.functional.layer_norm(x64, LN_SHAPE[-1:], g64, b64, eps)
    ref_dx = cp.from_dlpack(torch.autograd.grad(y64, (x64,), tgo.double())[0])
    dx = h.vjp((x, gamma, beta), ours_out, g, eps=eps)[0]
    err_bwd = _rel_err(cp, dx, ref_dx)
    err_tbwd = _rel_err(cp, cp.from_dlpack(torch_bwd()[0]), ref_dx)
    t_ours_b = _event_time(cp, lambda: h.vjp((x, gamma, beta), ours_out, g, eps=eps), iters,
                           repeats)
    t_torch_b = _event_time(cp, torch_bwd, iters, repeats)
    rows.append({"case": f"layer_norm bwd {LN_SHAPE[0]}x{LN_SHAPE[1]}", "ours": "native",
                 "ms": t_ours_b, "rel_err": err_bwd, "torch_ms": t_torch_b,
                 "torch_err": err_tbwd, "ratio": t_ours_b / t_torch_b})
    return rows


def table(attn: list[dict], norm: list[dict], device: str) -> str:
    lines = [f"device: {device}", "",
             f"{'case':<30} {'ours':<9} {'ms':>8} {'torch math':>11} {'torch dflt':>11} "
             f"{'ours/math':>10} {'ours/dflt':>10} {'rel err':>9} {'math err':>9} {'dflt err':>9}"]
    for r in attn:
        lines.append(f"{r['case']:<30} {r['ours']:<9} {r['ms']:>8.3f} {r['torch_math_ms']:>11.3f} "
                     f"{r['torch_default_ms']:>11.3f} {r['ratio_math']:>10.2f} "
                     f"{r['ratio_default']:>10.2f} {r['rel_err']:>9.1e} "
                     f"{r['torch_math_err']:>9.1e} {r['torch_default_err']:>9.1e}")
    lines += ["", f"{'case':<30} {'ours':<9} {'ms':>8} {'torch':>11} {'ours/torch':>10} "
                  f"{'rel err':>9} {'torch err':>9}"]
    for r in norm:
        lines.append(f"{r['case']:<30} {r['ours']:<9} {r['ms']:>8.3f} {r['torch_ms']:>11.3f} "
                     f"{r['ratio']:>10.2f} {r['rel_err']:>9.1e} {r['torch_err']:>9.1e}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write every number here")
    parser.add_argument("--table", default=None, help="write the table here too")
    parser.add_argument("--quick", action="store_true", help="two sizes, fewer repeats")
    parser.add_argument("--flash", action="store_true", help="only the flash comparison")
    parser.add_argument("--heads", action="store_true",
                        help="only the attention_heads comparison")
    args = parser.parse_args()
    import cupy as cp
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False   # float32 products stay float32 (the default)
    device = f"{torch.cuda.get_device_name()} (torch {torch.__version__}, cupy {cp.__version__})"
    heads = bench_heads(cp, torch, args.quick)
    flash = [] if args.heads else bench_flash(cp, torch, args.quick)
    if args.heads:
        attn, norm = [], []
        text = f"device: {device}\n\n" + heads_table(heads)
    elif args.flash:
        attn, norm = [], []
        text = f"device: {device}\n\n" + flash_table(flash) + "\n\n" + heads_table(heads)
    else:
        attn = bench_attention(cp, torch, args.quick)
        norm = bench_layer_norm(cp, torch, args.quick)
        text = (table(attn, norm, device) + "\n\n" + flash_table(flash) + "\n\n"
                + heads_table(heads))
    print(text)
    if args.table:
        Path(args.table).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "attention": attn,
                                               "layer_norm": norm, "flash": flash,
                                               "heads": heads}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
