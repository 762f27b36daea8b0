"""Where a training step's device time goes, in three parts: GEMM (cuBLAS, CUTLASS), attention
(ours: flash and direct kernels; PyTorch's: its memory-efficient SDPA kernels) and the rest, from
torch.profiler (CUPTI sees every kernel of the process, CuPy's and NVRTC's included). Issue 40:
bench_gpt2.py prints the split of both sides, so that a gain is seen where it is made.

The parts are summed kernel times per step, not step times: profiling adds host overhead, and
kernels that overlap would count twice (a training step here runs on one stream). The step
times bench_gpt2.py reports come from its own unprofiled loops."""
from __future__ import annotations

import importlib
from collections import defaultdict

PARTS = ("GEMM", "attention", "the rest")
# Lower-case pieces of kernel names. Attention is looked for first: PyTorch's efficient-attention
# kernels are CUTLASS kernels (fmha_cutlassF_..., fmha_cutlassB_...).
ATTENTION_MARKERS = ("attn", "attention", "flash", "fmha")
GEMM_MARKERS = ("gemm", "gemv", "cublas", "cutlass", "xmma", "splitkreduce")
SPLIT_STEPS = 2      # profiled steps per side, after one warm step


def part_of(kernel: str) -> str:
    """The part a kernel (its name as the profiler reports it) belongs to."""
    name = kernel.lower()
    if any(m in name for m in ATTENTION_MARKERS):
        return "attention"
    if any(m in name for m in GEMM_MARKERS):
        return "GEMM"
    return "the rest"


def kernel_table(torch, run, steps: int, gaps: list | None = None) -> dict[str, tuple[float, int]]:
    """kernel name -> (summed device ms over `steps` calls of run, launches); `gaps`, when given,
    receives (idle us, kernel before, kernel after) for every stretch between consecutive device
    activities of the profiled steps where the device did nothing."""
    # the profiler of the torch module given (a stand-in without one fails here, as a torch whose
    # profiler cannot load does), not whichever torch this process could import
    profiler = importlib.import_module(f"{torch.__name__}.profiler")
    ProfilerActivity, profile = profiler.ProfilerActivity, profiler.profile
    run()   # warm: modules, plans, handles
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            run()
        torch.cuda.synchronize()
    out: dict[str, list] = defaultdict(lambda: [0.0, 0])
    if gaps is not None:
        spans = sorted((ev.time_range.start, ev.time_range.end, ev.name) for ev in prof.events()
                       if ev.device_type.name == "CUDA" and ev.device_time_total > 0)
        end, before = None, None
        for start, stop, name in spans:
            if end is not None and start > end:
                gaps.append((start - end, before, name))
            if end is None or stop > end:
                end, before = stop, name
    for ev in prof.events():
        if ev.device_type.name == "CUDA" and ev.device_time_total > 0:
            cell = out[ev.name]
            cell[0] += ev.device_time_total / 1e3 / steps
            cell[1] += 1
    return {k: (v[0], v[1] // steps) for k, v in out.items()}


def summarize(table: dict[str, tuple[float, int]]) -> dict:
    """{part: ms per step for each of PARTS, "kernels_ms": their sum, "launches": per step}."""
    split = {part: 0.0 for part in PARTS}
    for name, (ms, _) in table.items():
        split[part_of(name)] += ms
    split["kernels_ms"] = sum(ms for ms, _ in table.values())
    split["launches"] = sum(n for _, n in table.values())
    return split


def measure(torch, run, steps: int = SPLIT_STEPS) -> dict:
    """The split of `steps` profiled calls of `run` (a training step), or {"error": why}: a
    profiler that fails leaves the benchmark's timings standing."""
    try:
        return summarize(kernel_table(torch, run, steps))
    except Exception as exc:   # reported in the table instead of the split
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


def table_lines(presets: list[dict], sides: tuple[str, ...] = ("ours eager", "torch eager")
                ) -> list[str]:
    """The split of every preset's sides that carry one, with ours over PyTorch's per part."""
    head = (f"{'preset':<10} {'side':<14} " + " ".join(f"{p + ' ms':>12}" for p in PARTS)
            + f" {'kernels ms':>11} {'launches':>9}")
    lines = ["step split (torch.profiler: kernel time summed per step, ms; the profiler adds "
             "overhead, the step times above are unprofiled):", head, "-" * len(head)]
    shown = False
    for r in presets:
        got = {}
        for side in sides:
            split = r["sides"].get(side, {}).get("split")
            if split is None:
                continue
            shown = True
            label = f"{r['preset']:<10} {side:<14}"
            if "error" in split:
                lines.append(f"{label} FAILED: {split['error']}")
                continue
            got[side] = split
            lines.append(label + " " + " ".join(f"{split[p]:>12.3f}" for p in PARTS)
                         + f" {split['kernels_ms']:>11.3f} {split['launches']:>9d}")
        if len(got) == 2:
            ours, theirs = (got[s] for s in sides)
            lines.append(f"{r['preset']:<10} {'ours / torch':<14} "
                         + " ".join(_ratio(ours[p], theirs[p], 12) for p in PARTS)
                         + " " + _ratio(ours["kernels_ms"], theirs["kernels_ms"], 11))
    return lines if shown else []


def _ratio(a: float, b: float, width: int) -> str:
    return f"{a / b:>{width}.3f}" if b else f"{'-':>{width}}"
