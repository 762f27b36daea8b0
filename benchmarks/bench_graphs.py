"""CUDA graph replay (engine/graphs.py) against PyTorch on the same GPU, in one run:

1. per-op cost: a chain of 100 small (1024-element) adds, run eagerly through engine.ops and
   replayed from one engine graph, against torch.add eager and PyTorch's own graph replay
   (torch.cuda.graph) of the same chain; goal: our replayed op <= 0.25x torch.add eager;
2. a training step of the quickstart model (linear 2->8, relu, linear 8->1, MSE, Adam, the
   25-point grid): ours eager and graph-replayed, PyTorch eager (float32, TF32 off) and
   PyTorch's graph replay of its step (capturable
   Adam; its eager step uses the default Adam); goal: our replayed step <= 0.5x PyTorch eager;
3. the same for gpt2 `small` (B16 T256, profile graph_cuda: attention through the native kernel,
   eager and replayed) against benchmarks/torch_gpt.py's model (SDPA, fused AdamW; PyTorch's
   graph replays its capturable step); goal: ours replayed <= 0.5x its eager.

Times are medians of CUDA-event-timed loops after a warm-up (benchmarks/timing.py).
Usage: python3 benchmarks/bench_graphs.py [--json PATH] [--table PATH] [--quick]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.timing import emit, event_ms, output_arguments  # noqa: E402

CHAIN = 100


def _ms(cp, fn, quick):
    return event_ms(cp, fn, 5 if quick else 20, 5 if quick else 9)


def _torch_graph(torch, fn, warmups: int):
    """PyTorch's own CUDA graph of `fn`, captured after `warmups` runs on a side stream (the
    warm-up torch.cuda.graph's documentation asks for)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def bench_chain(cp, torch, quick: bool) -> dict:
    from engine import graphs, ops
    from engine.session import Session, use_session
    from engine.tensor import tensor
    host = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    res = {}
    with use_session(Session("cuda")):
        b = tensor(host)

        def chain(a):
            for _ in range(CHAIN):
                a = ops.add(a, b)
            return a
        a0 = tensor(host)
        res["engine eager"] = _ms(cp, lambda: chain(a0), quick) / CHAIN
        g = graphs.capture(chain, (host,))
        res["engine graph replay"] = _ms(cp, g.replay, quick) / CHAIN
        g.close()
    if torch is not None:
        ta, tb = torch.from_numpy(host).cuda(), torch.from_numpy(host).cuda()

        def tchain():
            a = ta
            for _ in range(CHAIN):
                a = torch.add(a, tb)
            return a
        res["torch eager"] = _ms(cp, tchain, quick) / CHAIN
        res["torch graph replay"] = _ms(cp, _torch_graph(torch, tchain, 1).replay, quick) / CHAIN
    return res


def bench_quickstart(cp, torch, quick: bool) -> dict:
    from engine import graphs, nn, ops
    from engine.models.quickstart_mlp import dataset
    from engine.optim import Adam
    from engine.session import Session, use_session
    from engine.tensor import tensor
    x_host, y_host = dataset()
    res = {}
    with use_session(Session("cuda")):
        model = nn.Sequential(nn.Linear(2, 8, 2026), nn.ReLU(), nn.Linear(8, 1, 2028))
        opt = Adam(model.parameters(), lr=0.03)

        def step(x, y):
            opt.zero_grad()
            loss = ops.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss
        x, y = tensor(x_host), tensor(y_host)
        res["engine eager"] = _ms(cp, lambda: step(x, y), quick)
        g = graphs.capture(step, (x_host, y_host))
        res["engine graph replay"] = _ms(cp, g.replay, quick)
        g.close()
    if torch is not None:
        tm = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(),
                                 torch.nn.Linear(8, 1)).cuda()
        tx, ty = torch.from_numpy(x_host).cuda(), torch.from_numpy(y_host).cuda()
        eager_opt = torch.optim.Adam(tm.parameters(), lr=0.03)
        graph_opt = torch.optim.Adam(tm.parameters(), lr=0.03, capturable=True)

        def tstep(topt=graph_opt):
            topt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.mse_loss(tm(tx), ty)
            loss.backward()
            topt.step()
            return loss
        res["torch eager"] = _ms(cp, lambda: tstep(eager_opt), quick)
        res["torch graph replay"] = _ms(cp, _torch_graph(torch, tstep, 3).replay, quick)
    return res


def bench_gpt2_small(cp, torch, quick: bool) -> dict:
    """One training step of gpt2 `small` (4 layers, width 256, 4 heads, B16 T256) on fixed random
    bytes: ours eager and graph-replayed, PyTorch eager and PyTorch's graph replay."""
    from engine.indices import CheckedIndices
    from engine.models import gpt2
    from engine.optim import AdamW
    from engine.session import Session, use_session
    from engine import graphs
    config = gpt2.preset("small")
    b, t = config.batch_size, config.seq_len
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(b, t))
    y = rng.integers(0, 256, size=(b, t))
    res = {}
    few = (2, 3) if quick else (5, 5)
    from engine.profile import GRAPH_CUDA
    with use_session(Session("cuda", GRAPH_CUDA)):   # attention: the native kernel (capturable)
        model = gpt2.GPT(config, 2026)
        opt = AdamW(model.parameters(), lr=1e-3, decay=model.decays())

        def step(tokens, targets):
            opt.zero_grad()
            loss = model.loss_on_device(tokens, targets, b, t)
            loss.backward()
            opt.step()
            return loss
        # the batch on the device before the clock starts, as the torch side's
        inputs = (CheckedIndices.upload(x, 256), CheckedIndices.upload(y, 256))
        res["engine eager"] = event_ms(cp, lambda: step(*inputs), *few)
        g = graphs.capture(step, inputs)
        res["engine graph replay"] = event_ms(cp, g.replay, *few)
        g.close()
    if torch is not None:
        from benchmarks import torch_gpt
        tm, topt = torch_gpt.build(torch, config.layers, config.width, config.heads,
                                   config.context)
        tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
        tstep = torch_gpt.step_fn(tm, topt, tx, ty)
        res["torch eager"] = event_ms(cp, tstep, *few)
        res["torch graph replay"] = event_ms(cp, _torch_graph(torch, tstep, 3).replay, *few)
    return res


def _lines(title, res, unit, goal_key, goal) -> list[str]:
    out = [title]
    for k, v in res.items():
        out.append(f"   {k:22s} {v * 1e3:9.2f} us" if unit == "us" else f"   {k:22s} {v:9.4f} ms")
    if "torch eager" in res:
        ratio = res[goal_key] / res["torch eager"]
        out.append(f"   {goal_key} / torch eager = {ratio:.3f}x (goal <= {goal}: "
                   f"{'met' if ratio <= goal else 'NOT met'})")
        if "torch graph replay" in res:
            out.append(f"   {goal_key} / torch graph replay = "
                       f"{res[goal_key] / res['torch graph replay']:.3f}x")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    output_arguments(parser, "fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    from engine.errors import NativeRuntimeUnavailable
    from engine.runtime.native import probe, require_native_runtime
    try:
        require_native_runtime()
    except NativeRuntimeUnavailable as exc:
        print(f"bench_graphs: {exc}", file=sys.stderr)
        return 2
    import cupy as cp
    try:
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch = torch if torch.cuda.is_available() else None
    except ImportError:
        torch = None
    chain = bench_chain(cp, torch, args.quick)
    quick = bench_quickstart(cp, torch, args.quick)
    small = bench_gpt2_small(cp, torch, args.quick)
    lines = [f"graph benchmark on {probe()[1]}; torch {'present' if torch else 'absent'}"]
    lines += _lines(f"-- (1) per op, a chain of {CHAIN} 1024-element adds", chain, "us",
                    "engine graph replay", 0.25)
    lines += _lines("-- (2) quickstart training step (ms)", quick, "ms", "engine graph replay",
                    0.5)
    lines += _lines("-- (3) gpt2 small training step, B16 T256 (ms)", small, "ms",
                    "engine graph replay", 0.5)
    emit(args, "\n".join(lines), {"chain_ms_per_op": chain, "quickstart_ms_per_step": quick,
                                   "gpt2_small_ms_per_step": small})
    return 0


if __name__ == "__main__":
    sys.exit(main())
