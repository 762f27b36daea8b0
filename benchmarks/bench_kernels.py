"""Every native_cuda / cublas capsule against PyTorch's kernel of the same op, in one run.

Capsules are discovered in the registry at run time (variants such as `native_cuda.softmax.accurate`
included); the PyTorch counterpart of each op is the peer audited by `conformance/peers/torch_cuda.py`
(the same function, forward and torch.autograd VJP). For each capsule and case (a large,
memory-bound size and a small one): forward and VJP time (CUDA-event medians after a warm-up,
benchmarks/timing.py), GB/s (bytes read + written, counted per op: every input read once, the
output written once; the VJP reads the inputs and g and writes the gradients) or TFLOP/s for
matmul/linear, % of the device-to-device copy ceiling measured in the same run, the time ratio
ours/torch (below 1: ours is faster), and the worst error of each in ulps of the harness's
correctly rounded reference (conformance/references) on a subsample of the benchmark's own inputs
and outputs (rows or elements; `-` where the op has no subsample rule here).

Handlers are called directly (registry().handler(name).forward / .vjp on CuPy arrays): kernels,
not Python dispatch. PyTorch reads the same buffers through DLPack; TF32 is off. Where PyTorch's
VJP returns a strided view (sum: g expanded; permute: g permuted back) while ours writes the
contiguous gradient, PyTorch's VJP is timed with `.contiguous()` on its result, so both sides
produce the same dense bytes; its rate says "(its view made contiguous)".

Usage: python3 benchmarks/bench_kernels.py [--json PATH] [--table PATH] [--quick] [--capsule GLOB]
"""
from __future__ import annotations

import argparse
import fnmatch
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import emit, event_ms, output_arguments  # noqa: E402
from engine.types import BackendOp as Op, RuntimeEntry as Entry  # noqa: E402

MIB = 1 << 20
UNARY = (Op.abs, Op.sqrt, Op.relu, Op.gelu, Op.sigmoid, Op.tanh, Op.softplus, Op.exp, Op.log,
         Op.sin, Op.cos, Op.inv, Op.safe_log, Op.clamp, Op.scale)
BINARY = (Op.add, Op.sub, Op.mul, Op.max, Op.min)
POSITIVE = (Op.sqrt, Op.log, Op.inv)        # inputs in [0.1, 3): the ops' finite domain
ROWS = (Op.softmax, Op.log_softmax, Op.hard_masked_softmax, Op.layer_norm)
UNARY_PARAMS = {Op.clamp: {"lo": -0.5, "hi": 0.5}, Op.scale: {"alpha": 1.5},
                Op.safe_log: {"eps": 1e-12}}


@dataclass
class Case:
    """One benchmark input: arrays (CuPy), parameters, and how to subsample it for the error."""
    label: str
    arrays: tuple
    params: dict = field(default_factory=dict)
    sub: str = ""                    # "flat", "rows", "stacked", "cols", "mm", "linear" or ""
                                     # (no error)
    flops: float = 0.0               # forward flops (matmul/linear: TFLOP/s instead of GB/s)


def _normal(cp, rng, shape, positive=False):
    x = rng.standard_normal(shape, dtype=cp.float32)
    return cp.abs(x) + cp.float32(0.1) if positive else x


def cases(cp, op: Op, quick: bool) -> list[Case]:
    """The large (memory-bound) and small cases of `op`; [] where this benchmark has none."""
    rng = cp.random.RandomState(1 + list(Op).index(op) if isinstance(op, Op) else 1000)
    n = lambda *s, pos=False: _normal(cp, rng, s, pos)  # noqa: E731
    big, small = (1 << 26, 1 << 16)
    if op in UNARY:
        p = UNARY_PARAMS.get(op, {})
        return [Case(f"2^{k}", (n(size, pos=op in POSITIVE),), p, "flat")
                for k, size in ((26, big), (16, small))]
    if op in BINARY:
        return [Case(f"2^{k}", (n(size), n(size)), {}, "flat") for k, size in ((26, big), (16, small))]
    if op in ROWS:
        # layer_norm: the gpt2 shapes (small: 4096 x 256, 124m: 8192 x 768, rows >> columns, the
        # dgamma / dbeta column sums of issue 17) besides the issue's 8192 x 1024
        shapes = [(8192, 1024), (65536, 1024), (8192, 768), (4096, 256), (64, 1024)] \
            if op is Op.layer_norm else [(65536, 1024), (8192, 8192), (64, 1024)]
        if quick:
            shapes = [shapes[0], shapes[-1]] if op is not Op.layer_norm else \
                [(8192, 1024), (8192, 768), (4096, 256), (64, 1024)]
        out = []
        for r, d in shapes:
            x = n(r, d)
            if op is Op.layer_norm:
                out.append(Case(f"{r}x{d}", (x, n(d), n(d)), {"eps": 1e-5}, "rows"))
            elif op is Op.hard_masked_softmax:
                out.append(Case(f"{r}x{d}", (x,), {"mask": rng.rand(r, d) < 0.8, "axis": -1},
                                "rows"))
            else:
                out.append(Case(f"{r}x{d}", (x,), {"axis": -1}, "rows"))
        return out
    if op in (Op.reduce_sum, Op.reduce_mean):
        # both axes at the issue's 65536 x 1024 and the gpt2 shapes (axis 0: the bias gradients of
        # 4096 x 256, 8192 x 768 and the MLP's 8192 x 3072)
        shapes = [(65536, 1024), (8192, 768), (4096, 256)] + ([] if quick else [(8192, 3072)])
        out = []
        for r, c in shapes:
            x = n(r, c)
            out += [Case(f"{r}x{c} axis -1", (x,), {"axes": (-1,)}, "rows"),
                    Case(f"{r}x{c} axis 0", (x,), {"axes": (0,)}, "cols")]
        return out + [Case("64x1024 axis -1", (n(64, 1024),), {"axes": (-1,)}, "rows")]
    if op is Entry.bias_gelu:
        # gpt2-124m's MLP (B8 T1024: 8192 x 3072), gpt2 small's (4096 x 1024), a small one
        shapes = [(8192, 3072), (4096, 1024), (64, 1024)]
        return [Case(f"{r}x{d}", (n(r, d), n(d)), {}, "rows") for r, d in shapes]
    if op is Entry.add_layer_norm:
        # gpt2-124m's residual stream (B8 T1024: 8192 x 768), gpt2 small's (4096 x 256), a small
        # one; the output is [s, y] stacked: rows of both halves are the subsample
        return [Case(f"{r}x{d}", (n(r, d), n(r, d), n(d), n(d)), {"eps": 1e-5}, "stacked")
                for r, d in ((8192, 768), (4096, 256), (64, 768))]
    if op is Op.mse_loss:
        return [Case(f"2^{k}", (n(size), n(size))) for k, size in ((26, big), (16, small))]
    if op is Op.batch_norm:
        return [Case(f"{s}", (n(*s), n(s[1]), n(s[1])), {"eps": 1e-5})
                for s in ((32, 64, 128, 128), (8, 16, 8, 8))]
    if op is Op.broadcast:
        return [Case(f"1x1024->{r}x1024", (n(1, 1024),), {"shape": (r, 1024)}) for r in (65536, 64)]
    if op is Op.permute:
        return [Case(f"{d}x{d}^T", (n(d, d),), {"perm": (1, 0)}) for d in (8192, 256)]
    if op is Op.reshape:
        return [Case(f"{r}x1024", (n(r, 1024),), {"shape": (1024, r)}) for r in (65536, 64)]
    if op is Op.concat:
        return [Case(f"2x{r}x1024 axis 0", (n(r, 1024), n(r, 1024)), {"axis": 0}) for r in (32768, 32)]
    if op is Op.slice:
        return [Case(f"{r}x2048[:, :1024]", (n(r, 2048),), {"axis": 1, "start": 0, "stop": 1024})
                for r in (32768, 32)]
    if op in (Op.gather, Op.scatter_add):
        out = []
        for r in (65536, 64):
            idx = cp.asarray(np.random.default_rng(r).integers(0, r, r).astype(np.int64))
            arrays = (n(r, 1024),) if op is Op.gather else (n(r, 1024), n(r, 1024))
            out.append(Case(f"{r}x1024 axis 0", arrays, {"axis": 0, "indices": idx}))
        return out
    if op is Op.matmul:
        return [Case(f"{m}^3", (n(m, m), n(m, m)), {}, "mm", 2.0 * m ** 3) for m in (4096, 1024)]
    if op is Op.linear:
        return [Case(f"{m}^3", (n(m, m), n(m, m), n(m)), {}, "linear", 2.0 * m ** 3)
                for m in (4096, 1024)]
    if op is Op.scaled_dot_product_attention:
        return [Case(f"{b}x{l}x64", (n(b, l, 64), n(b, l, 64), n(b, l, 64)),
                     {"scale": 0.125}) for b, l in ((16, 1024), (2, 128))]
    return []


def bench_functions(torch) -> dict:
    """PyTorch counterparts of the fused entries that conformance's peers do not map (benchmark
    only): bias_gelu is gelu(x + b) in the tanh form, autograd giving dx and db; add_layer_norm
    is x + r and layer_norm of it, the two outputs as PyTorch's eager code makes them (no stack)."""
    F = torch.nn.functional

    def add_layer_norm(x, r, gamma, beta, eps=1e-5):
        s = x + r
        return s, F.layer_norm(s, (s.shape[-1],), gamma, beta, eps)
    return {Entry.bias_gelu: lambda x, b: F.gelu(x + b, approximate="tanh"),
            Entry.add_layer_norm: add_layer_norm}


def nbytes(arrays) -> int:
    return sum(int(a.nbytes) for a in arrays if a is not None)


def copy_ceiling(cp) -> float:
    """GB/s of a 256 MiB device-to-device copy (bytes read + written), this run's ceiling."""
    src = cp.random.standard_normal(64 * MIB, dtype=cp.float32)
    dst = cp.empty_like(src)
    rt = cp.cuda.runtime

    def copy():
        rt.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, rt.memcpyDeviceToDevice,
                       cp.cuda.get_current_stream().ptr)
    ms = event_ms(cp, copy, iters=20, repeats=5)
    return 2 * src.nbytes / ms / 1e6


# ---- the error of each output against the harness's reference, on a subsample ----

def _ulps(got, ref) -> float:
    """Worst |got - value| in ulps of the correctly rounded reference (conformance.error_models'
    measure): 0 where both are NaN or equal, inf where only one is NaN."""
    from conformance import rounding
    v = np.asarray(ref.value, dtype=np.float64).reshape(-1)
    y = np.asarray(got, dtype=np.float64).reshape(-1)
    if v.size == 0:
        return 0.0
    nan_v, nan_y = np.isnan(v), np.isnan(y)
    if np.any(nan_v != nan_y):
        return float("inf")
    live = ~nan_v & (y != v)
    if not live.any():
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        fin = lambda z: np.where(np.isinf(z), np.copysign(2.0 ** 128, z), z)  # noqa: E731
        return float(np.max(np.abs(fin(y[live]) - fin(v[live])) / rounding.ulp_array(fin(v[live]))))


def _pick(size: int, k: int) -> np.ndarray:
    """k indices spread over range(size), the first and the last included."""
    return np.unique(np.linspace(0, size - 1, min(k, size)).astype(np.int64))


def subsample(cp, case: Case, arrays, out, grads=None, g=None):
    """(inputs, params, output, first gradient, g) restricted to a few rows/columns/elements,
    as NumPy arrays the reference can evaluate; None where the case has no rule."""
    h = lambda a: None if a is None else cp.asnumpy(a)  # noqa: E731
    p = dict(case.params)
    if case.sub == "flat":
        i = cp.asarray(_pick(arrays[0].size, 4096))
        take = lambda a: None if a is None else h(a.reshape(-1)[i])  # noqa: E731
        return [take(a) for a in arrays], p, take(out), take(grads[0] if grads else None), take(g)
    if case.sub == "rows":
        r = cp.asarray(_pick(arrays[0].shape[0], 3))
        if "mask" in p:
            p["mask"] = cp.asnumpy(p["mask"][r])
        ins = [h(arrays[0][r])] + [h(a) for a in arrays[1:]]
        return ins, p, h(out[r]), None if not grads else h(grads[0][r]), None if g is None else h(g[r])
    if case.sub == "stacked":   # add_layer_norm: rows of x and r; out and g are [2, rows, d]
        r = cp.asarray(_pick(arrays[0].shape[0], 3))
        ins = [h(arrays[0][r]), h(arrays[1][r])] + [h(a) for a in arrays[2:]]
        return (ins, p, h(out[:, r]), None if not grads else h(grads[0][r]),
                None if g is None else h(g[:, r]))
    if case.sub == "cols":
        c = cp.asarray(_pick(arrays[0].shape[1], 8))
        return ([h(arrays[0][:, c])], p, h(out[c]), None if not grads else h(grads[0][:, c]),
                None if g is None else h(g[c]))
    if case.sub in ("mm", "linear"):
        r, c = cp.asarray(_pick(out.shape[0], 4)), cp.asarray(_pick(out.shape[1], 4))
        a, b = arrays[0], arrays[1]
        ins = [h(a[r]), h(b[:, c]) if case.sub == "mm" else h(b[c])]
        if case.sub == "linear":
            ins.append(h(arrays[2][c]))
        return ins, p, h(out[r][:, c]), None, None
    return None


def errors(cp, op: Op, case: Case, arrays, out, grads, g) -> tuple[float | None, float | None]:
    """Worst forward and first-gradient error in ulps on the subsample (None: not measured)."""
    from conformance import references
    s = subsample(cp, case, arrays, out, grads, g)
    if s is None:
        return None, None
    ins, p, o, d0, g_sub = s
    ref = references.get(op.label)
    fwd = _ulps(o, ref.forward(ins, **p))
    bwd = None
    if d0 is not None and g_sub is not None and case.sub != "cols":
        bwd = _ulps(d0, ref.vjp(ins, g_sub, **p)[0])
    return fwd, bwd


# ---- timing ----

def time_ours(cp, handler, case: Case, iters: int, repeats: int):
    arrays, p = case.arrays, case.params
    out = handler.forward(*arrays, **p)
    fwd = event_ms(cp, lambda: handler.forward(*arrays, **p), iters, repeats)
    g = cp.random.RandomState(7).standard_normal(out.shape, dtype=cp.float32)
    grads, bwd = None, None
    if handler.vjp is not None:
        grads = handler.vjp(arrays, out, g, **p)
        bwd = event_ms(cp, lambda: handler.vjp(arrays, out, g, **p), iters, repeats)
    return out, g, grads, fwd, bwd


def time_torch(cp, torch, fn: Callable, case: Case, g, iters: int, repeats: int):
    ts = [torch.from_dlpack(a) for a in case.arrays]
    with torch.no_grad():
        fwd = event_ms(cp, lambda: fn(*ts, **case.params), iters, repeats)
        res = fn(*ts, **case.params)   # several outputs (add_layer_norm): stacked like ours
        out = cp.from_dlpack((torch.stack(res) if isinstance(res, tuple) else res).contiguous())
    leaves = [t.detach().requires_grad_(True) for t in ts]
    y = fn(*leaves, **case.params)
    tg = torch.from_dlpack(g)
    if isinstance(y, tuple):            # g is stacked like our output: one part per output
        tg = tuple(tg[i] for i in range(len(y)))
    grad = lambda: torch.autograd.grad(y, leaves, tg, retain_graph=True, allow_unused=True)  # noqa: E731
    # Every gradient our engine hands back is a contiguous array (a kernel's output, g itself or
    # a contiguous view of it). Where PyTorch's is a strided view instead (sum's expand,
    # permute's inverse permute), no kernel ran on its side yet: its time is taken with the view
    # made contiguous, the same bytes ours writes, and the row says so.
    strided = any(d is not None and not d.is_contiguous() for d in grad())
    dense = (lambda: [None if d is None else d.contiguous() for d in grad()]) if strided else grad
    bwd = event_ms(cp, dense, iters, repeats)
    grads = [None if d is None else cp.from_dlpack(d.contiguous()) for d in grad()]
    return out, grads, fwd, bwd, strided


def aliases(result, given) -> bool:
    """Whether a result (an array or a tuple of them) is one of the given buffers: a view or g
    handed back, no kernel ran, so no rate is shown for it."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    ptrs = {int(a.data.ptr) for a in given if a is not None and a.size}
    return any(d is not None and d.size and int(d.data.ptr) in ptrs for d in items)


def rate(case: Case, ms: float | None, moved: int, vjp: bool, alias: bool = False) -> str:
    if ms is None:
        return "-"
    if alias:
        return "no kernel (a view or g returned)"
    if case.flops:
        return f"{case.flops * (2 if vjp else 1) / ms / 1e9:.1f} TF/s"
    return f"{moved / ms / 1e6:.0f} GB/s"


def bench_capsule(cp, torch, name, op, fn, quick, ceiling) -> list[dict]:
    from engine.registry import registry
    handler = registry().handler(name)
    rows = []
    op_cases = cases(cp, op, quick)
    for case in op_cases:
        big = case is not op_cases[-1]      # every op lists its small case last
        # 20 calls a timed window at the large sizes (was 5): the window opens while the host
        # is still in the first call, and that latency (our reductions' host path 45-52 us a
        # call against PyTorch's 15: evidence/h200-runs/2026-12-02d/x1-colred.txt) counted a
        # fifth per call; in a stream of calls it overlaps the previous kernels
        iters, repeats = (20, 5) if nbytes(case.arrays) >= 64 * MIB else (50, 7)
        row = {"capsule": name, "op": op.label, "case": case.label}
        try:
            out, g, grads, f_ours, b_ours = time_ours(cp, handler, case, iters, repeats)
            t_out, t_grads, f_torch, b_torch, t_view = time_torch(cp, torch, fn, case, g, iters,
                                                                  repeats)
            e_ours = errors(cp, op, case, case.arrays, out, grads, g)
            e_torch = errors(cp, op, case, case.arrays, t_out, t_grads, g)
        except Exception as exc:   # one failing case is reported, the others go on
            row["error"] = f"{type(exc).__name__}: {exc}"[:200]
            rows.append(row)
            continue
        fwd_bytes = nbytes(case.arrays) + int(out.nbytes)
        bwd_bytes = nbytes(case.arrays) + int(g.nbytes) + nbytes(grads or ())
        row.update(
            fwd_ms=f_ours, fwd_torch_ms=f_torch, vjp_ms=b_ours, vjp_torch_ms=b_torch,
            fwd_bytes=fwd_bytes, vjp_bytes=bwd_bytes, flops=case.flops,
            fwd_rate=rate(case, f_ours, fwd_bytes, False, aliases(out, case.arrays)),
            fwd_torch_rate=rate(case, f_torch, fwd_bytes, False),
            vjp_rate=rate(case, b_ours, bwd_bytes, True, aliases(grads or (), (g,))),
            vjp_torch_rate=rate(case, b_torch, bwd_bytes, True)
            + (" (its view made contiguous)" if t_view else ""),
            fwd_ceiling_pct=None if case.flops else 100 * fwd_bytes / f_ours / 1e6 / ceiling,
            fwd_ratio=f_ours / f_torch, vjp_ratio=None if b_ours is None else b_ours / b_torch,
            fwd_ulps=e_ours[0], fwd_torch_ulps=e_torch[0], vjp_ulps=e_ours[1],
            vjp_torch_ulps=e_torch[1], large=big)
        rows.append(row)
        del out, g, grads, t_out, t_grads
        cp.get_default_memory_pool().free_all_blocks()
    return rows


def _f(x, fmt) -> str:
    return "-" if x is None else format(x, fmt)


def table(rows: list[dict], ceiling: float) -> str:
    lines = [f"copy ceiling (device-to-device, read + written): {ceiling:.0f} GB/s", "",
             "| capsule | case | fwd ours | fwd torch | % ceil | ratio | vjp ours | vjp torch | "
             "ratio | ulp fwd ours/torch | ulp vjp ours/torch |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r or "skipped" in r:
            lines.append(f"| {r['capsule']} | {r.get('case', '-')} | "
                         f"{r.get('error') or r.get('skipped')} |||||||||")
            continue
        lines.append(
            f"| {r['capsule']} | {r['case']} | {r['fwd_ms']:.3f} ms {r['fwd_rate']} | "
            f"{r['fwd_torch_ms']:.3f} ms {r['fwd_torch_rate']} | {_f(r['fwd_ceiling_pct'], '.0f')} | "
            f"{r['fwd_ratio']:.2f} | {_f(r['vjp_ms'], '.3f')} ms {r['vjp_rate']} | "
            f"{r['vjp_torch_ms']:.3f} ms {r['vjp_torch_rate']} | {_f(r['vjp_ratio'], '.2f')} | "
            f"{_f(r['fwd_ulps'], '.3g')} / {_f(r['fwd_torch_ulps'], '.3g')} | "
            f"{_f(r['vjp_ulps'], '.3g')} / {_f(r['vjp_torch_ulps'], '.3g')} |")
    return "\n".join(lines)


def our_cuda_capsules(globs=None):
    from engine.registry import registry
    from conformance.peers.torch_cuda import OUR_PROVIDERS
    from engine.types import Device
    return [c for c in registry().capsules() if c.device is Device.cuda
            and c.provider in OUR_PROVIDERS
            and (not globs or any(fnmatch.fnmatchcase(c.name, g) for g in globs))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    output_arguments(parser, "the issue's large shapes only where they differ, fewer repeats")
    parser.add_argument("--capsule", action="append", default=None, metavar="GLOB",
                        help="only capsules matching (repeatable; default: every native one)")
    args = parser.parse_args(argv)
    from conformance.plugins import PluginError
    from conformance.peers.torch_cuda import peer_functions, require_torch_cuda
    try:
        torch = require_torch_cuda()
    except PluginError as exc:
        print(f"bench_kernels: {exc}", file=sys.stderr)
        return 2
    import cupy as cp
    fns = {**peer_functions(torch), **bench_functions(torch)}
    ceiling = copy_ceiling(cp)
    rows, interrupted = [], None
    # a time limit (SIGTERM) or ^C ends the run early: what was measured is still written
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        for c in our_cuda_capsules(args.capsule):
            fn = fns.get(c.op)
            done = [] if fn is None else bench_capsule(cp, torch, c.name, c.op, fn, args.quick,
                                                       ceiling)
            rows.extend(done or [{"capsule": c.name, "op": c.op.label,
                                  "skipped": "no PyTorch counterpart or no case here"}])
            print(f"  {c.name}: done", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        interrupted = f"interrupted after {len(rows)} rows"
    from conformance.formats import BENCH_FORMAT
    payload = {"format": BENCH_FORMAT, "copy_ceiling_gbs": ceiling,
               "torch": torch.__version__, "quick": args.quick, "interrupted": interrupted,
               "rows": rows}
    emit(args, table(rows, ceiling) + (f"\n\n{interrupted}" if interrupted else ""), payload)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
