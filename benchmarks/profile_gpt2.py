"""Where a gpt2 training step spends its device time: the kernels of one eager step of ours and
of PyTorch's same model, grouped by kernel name, from torch.profiler (CUPTI sees every kernel in
the process, CuPy's and NVRTC's included). A diagnostic for bench_gpt2.py's ratios, not a timing
claim: profiling adds overhead, and the totals are summed kernel times, not step times.

    python benchmarks/profile_gpt2.py --preset gpt2-124m --top 25
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bench_gpt2  # noqa: E402
from benchmarks.step_split import kernel_table  # noqa: E402


def print_table(title: str, table: dict, top: int) -> None:
    total = sum(ms for ms, _ in table.values())
    print(f"\n{title}: {total:.2f} ms of kernels per step, {sum(n for _, n in table.values())} "
          f"launches")
    for name, (ms, n) in sorted(table.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"  {ms:8.3f} ms {100 * ms / total:5.1f}%  x{n:<4d} {name[:90]}")


def print_gaps(title: str, gaps: list, steps: int, top: int) -> None:
    """The device's idle time per step between kernels and the largest idle stretches: a host
    that waits (a synchronizing call) shows up as a long stretch before the next launch."""
    print(f"\n{title}: {sum(g for g, _, _ in gaps) / steps / 1e3:.3f} ms idle per step between "
          f"kernels, {len(gaps)} stretches over {steps} steps; the largest:")
    for us, before, after in sorted(gaps, reverse=True)[:top]:
        print(f"  {us:9.1f} us  after {before[:50]}  before {after[:50]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="gpt2-124m")
    parser.add_argument("--profile", default="flash_cuda")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--gaps", type=int, default=0,
                        help="also list this many of the largest device-idle stretches per side")
    args = parser.parse_args(argv)
    cp, torch = bench_gpt2.require_gpu()
    from engine.models import gpt2
    from engine.optim import AdamW
    from engine.profile import profile_named
    from engine.runtime.allocator import install
    from engine.session import Session, use_session
    from benchmarks import torch_gpt
    config = gpt2.preset(args.preset)
    batches = bench_gpt2.make_batches(config.seq_len, config.batch_size, 2)
    install()
    profile = profile_named(args.profile)
    with use_session(Session(profile.device, profile)):
        model = gpt2.GPT(config, bench_gpt2.SEED)
        params = {n: cp.asnumpy(p.buffer.data) for n, p in model.named_parameters()}
        opt = AdamW(model.parameters(), lr=bench_gpt2.LR, weight_decay=bench_gpt2.WEIGHT_DECAY,
                    decay=model.decays())
        x, y = batches[0]

        def ours():
            opt.zero_grad()
            loss = model.loss(x, y)
            loss.backward()
            opt.step()
        gaps: list = []
        print_table(f"ours ({args.profile}, {args.preset})",
                    kernel_table(torch, ours, args.steps, gaps), args.top)
        if args.gaps:
            print_gaps("ours", gaps, args.steps, args.gaps)
        decays = model.decays()
    del model, opt
    bench_gpt2.free_ours()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    tm, _ = torch_gpt.build(torch, config.layers, config.width, config.heads, config.context)
    torch_gpt.load_engine_parameters(torch, tm, params)
    topt = torch_gpt.adamw_like_engine(torch, tm, decays, lr=bench_gpt2.LR,
                                       weight_decay=bench_gpt2.WEIGHT_DECAY)
    tx, ty = (torch.from_numpy(a).cuda() for a in batches[0])
    step = torch_gpt.step_fn(tm, topt, tx, ty)
    gaps = []
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        print_table(f"torch eager ({args.preset})",
                    kernel_table(torch, lambda: step(tx, ty), args.steps, gaps), args.top)
    if args.gaps:
        print_gaps("torch eager", gaps, args.steps, args.gaps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
