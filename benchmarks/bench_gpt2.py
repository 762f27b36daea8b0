"""gpt2 training steps on a CUDA GPU against PyTorch, measured in the same run (issue 18).

Per preset (`small`: 4 layers, width 256, B16 T256; `gpt2-124m`: 12, 768, B8 T1024): one training
step (forward, backward, AdamW) of engine/models/gpt2.py eager under `--profile` (default
checked_cuda) and, with `--graph`, captured and replayed under `--graph-profile` (default
graph_cuda, the training loop's `--graph` step), against benchmarks/torch_gpt.py's same model in
float32 with TF32 off (SDPA pinned to its efficient backend, the fastest that takes float32; fused
AdamW with our decay mask) eager and, unless skipped, under torch.compile (its compile timed
apart). Both sides start from the same parameters (ours, copied into torch) and take the same
batches of the standard library's bytes; their first losses are printed side by side.

Step times are medians of CUDA-event-timed loops after the warm-up (benchmarks/timing.py); both
sides' eager steps take batches already on the device (uploaded before the clock starts), the
replayed step copies each batch into its graph's inputs inside the timed step. Peak
memory: ours is allocator_stats().peak_bytes, torch's torch.cuda.max_memory_allocated(), each reset
before its model is built: both count the bytes of live blocks handed out by the process's
caching allocator (parameters, gradients, optimizer state, activations, the cuBLAS workspace),
neither counts cached free blocks, the CUDA context or kernels' code.

After each eager side's timed loops (unless --no-split), two more of its steps run under
torch.profiler: the step split (GEMM, attention, the rest: benchmarks/step_split.py) of ours and
of torch eager, side by side, so that a gain is seen where it is made.

Last, benchmarks/attention_capsules.py: every registered attention capsule of ours at B8 H12 T1024
D64 causal against SDPA's efficient backend, forward and forward+backward.

Usage: python3 benchmarks/bench_gpt2.py [--presets small,gpt2-124m] [--steps N] [--quick]
       [--profile NAME] [--graph] [--graph-profile NAME] [--compile | --no-compile] [--no-split]
       [--json PATH] [--table PATH]
"""
from __future__ import annotations

import argparse
import functools
import gc
import signal
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import attention_capsules, step_split  # noqa: E402
from benchmarks.timing import emit, event_ms, output_arguments  # noqa: E402

DEFAULT_PRESETS = ("small", "gpt2-124m")
GOAL_PRESET = "gpt2-124m"
GOAL_TIME, GOAL_TIME_BEYOND, GOAL_PEAK = 1.0, 0.9, 1.1   # ours / torch eager
LOSS_STEPS = 3          # first steps whose losses both sides print (also warm-up)
LR, WEIGHT_DECAY, SEED = 1e-3, 0.01, 2026
MIB = 2 ** 20


class BenchUnavailable(Exception):
    """What the benchmark needs (a native CUDA runtime, CuPy, torch with CUDA) is missing."""


# --- arguments --------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    output_arguments(parser, "3 timed loops of 2 steps, torch.compile skipped unless --compile")
    parser.add_argument("--presets", default=",".join(DEFAULT_PRESETS),
                        help="comma-separated gpt2 presets (engine/models/gpt2.py)")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps per side after the warm-up (default 20; --quick: 6)")
    parser.add_argument("--profile", default="checked_cuda",
                        help="the profile our eager step runs under")
    parser.add_argument("--graph", action="store_true",
                        help="also time our step captured into a CUDA graph and replayed")
    parser.add_argument("--graph-profile", default="graph_cuda",
                        help="the profile of the replayed step (its attention must be capturable)")
    parser.add_argument("--no-split", dest="split", action="store_false",
                        help="skip the step split (GEMM, attention, the rest) of each eager side "
                             "from torch.profiler (benchmarks/step_split.py)")
    compile_group = parser.add_mutually_exclusive_group()
    compile_group.add_argument("--compile", dest="compile", action="store_true", default=None,
                               help="time torch.compile's step too (the default without --quick)")
    compile_group.add_argument("--no-compile", dest="compile", action="store_false",
                               help="skip torch.compile (its compile takes a minute or more)")
    args = parser.parse_args(argv)
    from engine.models import gpt2
    args.presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    if not args.presets:
        parser.error("--presets is empty; name at least one of " + ", ".join(gpt2.PRESETS))
    for name in args.presets:
        if name not in gpt2.PRESETS:
            parser.error(f"--presets: no gpt2 preset named {name!r}; choose among "
                         f"{', '.join(gpt2.PRESETS)}")
    if args.steps is None:
        args.steps = 6 if args.quick else 20
    if args.steps < 1:
        parser.error(f"--steps must be at least 1 timed step, got {args.steps}")
    if args.compile is None:
        args.compile = not args.quick
    for flag, name in (("--profile", args.profile), ("--graph-profile", args.graph_profile)):
        why = _cuda_profile_problem(name)
        if why:
            parser.error(f"{flag} {name}: {why}")
    return args


def _cuda_profile_problem(name: str) -> str | None:
    from engine.errors import NoMaintainedProfileError
    from engine.profile import PROFILES, profile_named
    from engine.types import Device
    try:
        profile = profile_named(name)
    except NoMaintainedProfileError as exc:
        return str(exc)
    if profile.device is not Device.cuda:
        cuda = ", ".join(n for n, p in PROFILES.items() if p.device is Device.cuda)
        return f"targets {profile.device.label}, not cuda; pick one of {cuda}"
    return None


def require_gpu():
    """(cupy, torch) with TF32 off, or BenchUnavailable saying what is missing and what to do."""
    from engine.errors import NativeRuntimeUnavailable
    from engine.runtime.native import require_native_runtime
    try:
        require_native_runtime()
    except NativeRuntimeUnavailable as exc:
        raise BenchUnavailable(f"our side needs the native CUDA runtime: {exc}") from None
    try:
        import torch
    except ImportError as exc:
        raise BenchUnavailable(f"the PyTorch peer needs torch, which is not importable ({exc}); "
                               "install a CUDA build of torch (pip install torch)") from None
    if not torch.cuda.is_available():
        raise BenchUnavailable(f"torch {torch.__version__} sees no CUDA device (a CPU-only build, "
                               "or no GPU here); run on a CUDA machine with a CUDA build of torch")
    import cupy
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return cupy, torch


# --- one preset ------------------------------------------------------------------------------

def make_batches(seq_len: int, batch: int, count: int, seed: int = SEED) -> list:
    """`count` (inputs, targets) batches of random windows of the standard library's bytes (the
    gpt2 example's default corpus), the same for every side."""
    from engine.models.gpt2_data import Corpus
    text, source = _corpus_text()
    corpus = Corpus(text, seq_len, source)
    rng = np.random.default_rng(seed)
    # int64, as torch's embedding and cross-entropy take them (ours converts uint8 itself)
    return [tuple(a.astype(np.int64) for a in corpus.batch(rng, batch)) for _ in range(count)]


@functools.lru_cache(maxsize=1)
def _corpus_text() -> tuple[bytes, str]:
    from engine.models.gpt2_data import read_corpus
    return read_corpus(None)


def _loops(steps: int, quick: bool) -> tuple[int, int]:
    """(steps per timed loop, loops): `steps` timed steps split into 3 (quick) or 5 loops."""
    loops = min(steps, 3 if quick else 5)
    return max(1, steps // loops), loops


def _cycle(step, batches):
    state = {"i": 0}

    def run():
        x, y = batches[state["i"] % len(batches)]
        state["i"] += 1
        return step(x, y)
    return run


def _side(ms: float, tokens: int, peak: int, losses: list[float], **extra) -> dict:
    return {"ms": ms, "tokens_per_s": tokens / (ms / 1e3), "peak_bytes": peak,
            "losses": losses, **extra}


def bench_ours(cp, config, batches, profile_name: str, graph: bool, steps: int, quick: bool,
               init: dict | None = None, split_with=None) -> dict:
    """Our step eager (graph=False) or captured and replayed, in a fresh session of the profile;
    fills `init` with the initial parameters ("params": name -> NumPy) and AdamW's decay mask
    ("decays") when given; with `split_with` (torch), the step's split from its profiler after
    the timed loops."""
    from engine.models import gpt2
    from engine.models.gpt2_train import TrainSettings, _replayed_step
    from engine.optim import AdamW
    from engine.profile import profile_named
    from engine.runtime.allocator import install
    from engine.session import Session, use_session
    from engine.types import BackendOp, Device, RuntimeEntry
    cache = install()
    b, t = batches[0][0].shape
    profile = profile_named(profile_name)
    session = Session(profile.device, profile)
    replayed = None
    with use_session(session):
        cache.reset_peak()
        model = gpt2.GPT(config, SEED)
        if init is not None:
            init["params"] = {n: cp.asnumpy(p.buffer.data) for n, p in model.named_parameters()}
            init["decays"] = model.decays()
        opt = AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, decay=model.decays())
        if graph:
            step = replayed = _replayed_step(model, opt, TrainSettings(batch_size=b, seq_len=t))
        else:
            # on CUDA the batches go to the device before the clock starts, as bench_torch's:
            # each side times its step, not a host-to-device copy (the training loop's eager
            # step uploads its batch in model.loss; loss_on_device runs the same ops and kernels)
            on_device = profile.device is Device.cuda
            if on_device:
                from engine.indices import CheckedIndices
                batches = [(CheckedIndices.upload(x, gpt2.VOCAB, "tokens"),
                            CheckedIndices.upload(y, gpt2.VOCAB, "targets")) for x, y in batches]

            def step(x, y):
                opt.zero_grad()
                loss = model.loss_on_device(x, y, b, t) if on_device else model.loss(x, y)
                loss.backward()
                opt.step()
                return loss
        try:
            losses = [step(*batches[i % len(batches)]).item() for i in range(LOSS_STEPS)]
            ms = event_ms(cp, _cycle(step, batches), *_loops(steps, quick), warmup=1)
            cp.cuda.Device().synchronize()
            peak = cache.peak_bytes
            split = {} if split_with is None else \
                {"split": step_split.measure(split_with, _cycle(step, batches))}
            # attention_heads where the profile plans it, else the composition's attention
            attention = next(session.dispatched[op].name for op in (
                RuntimeEntry.attention_heads, BackendOp.scaled_dot_product_attention)
                if op in session.dispatched)
        finally:
            if replayed is not None:
                replayed.close()
    del model, opt, step, replayed
    free_ours()
    return _side(ms, b * t, peak, losses, profile=profile_name, attention=attention, **split)


def free_ours() -> None:
    """Drop what the last side left and give the cache's blocks back to the driver, so the next
    side (or preset) starts from an empty cache."""
    from engine.runtime.allocator import installed
    gc.collect()
    cache = installed()
    if cache is not None:
        cache.flush()


def bench_torch(torch, cp, config, batches, host_params: dict, decays: list[bool], steps: int,
                quick: bool, compiled: bool, split: bool = False) -> dict:
    """PyTorch's same model from our initial parameters, eager or under torch.compile; with
    `split`, the step's split from the profiler after the timed loops."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from benchmarks import torch_gpt
    b, t = batches[0][0].shape
    dev = [(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()) for x, y in batches]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    model, _ = torch_gpt.build(torch, config.layers, config.width, config.heads, config.context)
    torch_gpt.load_engine_parameters(torch, model, host_params)
    opt = torch_gpt.adamw_like_engine(torch, model, decays, lr=LR, weight_decay=WEIGHT_DECAY)
    run = torch.compile(model) if compiled else model
    step = torch_gpt.step_fn(run, opt, *dev[0])
    extra = {}
    try:
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            start = time.perf_counter()
            losses = [step(*dev[0]).item()]
            if compiled:   # the first step traces and compiles; timed apart from the steps
                extra["compile_s"] = time.perf_counter() - start
            losses += [step(*dev[i % len(dev)]).item() for i in range(1, LOSS_STEPS)]
            ms = event_ms(cp, _cycle(step, dev), *_loops(steps, quick), warmup=1)
            if split:
                extra["split"] = step_split.measure(torch, _cycle(step, dev))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    finally:
        del model, opt, run, step, dev
        free_torch(torch, compiled)
    return _side(ms, b * t, peak, losses, sdpa="efficient", **extra)


def free_torch(torch, compiled: bool) -> None:
    gc.collect()
    if compiled:
        torch._dynamo.reset()
    torch.cuda.empty_cache()


def bench_preset(cp, torch, name: str, args) -> dict:
    """Every side of one preset; a side that fails is recorded with its error, not fatal."""
    from engine.models import gpt2
    config = gpt2.preset(name)
    b, t = config.batch_size, config.seq_len
    batches = make_batches(t, b, LOSS_STEPS + 2)
    init: dict = {}     # our eager side's initial parameters and decay mask, for torch's model
    plan = [("ours eager", lambda: bench_ours(cp, config, batches, args.profile, False,
                                              args.steps, args.quick, init,
                                              torch if args.split else None))]
    if args.graph:
        plan.append(("ours graph", lambda: bench_ours(cp, config, batches, args.graph_profile,
                                                      True, args.steps, args.quick)))
    for side, compiled in (("torch eager", False), ("torch compile", True)):
        if args.compile or not compiled:
            plan.append((side, lambda c=compiled: bench_torch(
                torch, cp, config, batches, init["params"], init["decays"], args.steps,
                args.quick, c, args.split and not c)))
    sides: dict = {}
    for side, fn in plan:
        print(f"  {name}: {side} ...", file=sys.stderr, flush=True)
        try:
            sides[side] = fn()
        except Exception as exc:   # reported in the table; the other sides still run
            sides[side] = {"error": f"{type(exc).__name__}: {exc}"}
        if "error" in sides[side]:   # (after the except block: its traceback held the side)
            free_ours()
            free_torch(torch, side == "torch compile")
            if side == "ours eager":
                break   # torch starts from our initial parameters: without them, no peer
    if not args.compile:
        sides["torch compile"] = {"skipped": "--quick (pass --compile to time it)"
                                  if args.quick else "--no-compile"}
    return {"preset": name, "layers": config.layers, "width": config.width,
            "heads": config.heads, "batch": b, "seq_len": t, "tokens_per_step": b * t,
            "sides": sides}


# --- the report ------------------------------------------------------------------------------

SIDES = ("ours eager", "ours graph", "torch eager", "torch compile")
PEAK_NOTE = ("peak: ours = allocator_stats().peak_bytes, torch = "
             "torch.cuda.max_memory_allocated(), each reset before its model is built;\n"
             "both count the live blocks of the process's caching allocator (parameters, "
             "gradients, AdamW state, activations,\ncuBLAS workspace), neither cached free "
             "blocks nor the CUDA context")


def add_ratios(result: dict) -> dict:
    """Each side's time and peak over torch eager's, and the goal verdicts of ours (issue 18:
    at gpt2-124m, time <= 1.0 (beyond: 0.9) and peak <= 1.1 of torch eager's)."""
    sides = result["sides"]
    base = sides.get("torch eager", {})
    for name, side in sides.items():
        if "ms" not in side or "ms" not in base:
            continue
        side["time_ratio"] = side["ms"] / base["ms"]
        side["peak_ratio"] = side["peak_bytes"] / base["peak_bytes"]
        if name.startswith("ours") and result["preset"] == GOAL_PRESET:
            side["goal"] = {"time": side["time_ratio"] <= GOAL_TIME,
                            "time_beyond": side["time_ratio"] <= GOAL_TIME_BEYOND,
                            "peak": side["peak_ratio"] <= GOAL_PEAK}
    return result


def _verdict(goal: dict | None) -> str:
    if not goal:
        return "-"
    met = lambda ok: "met" if ok else "NOT MET"   # noqa: E731
    return (f"time <= {GOAL_TIME}: {met(goal['time'])} (<= {GOAL_TIME_BEYOND}: "
            f"{met(goal['time_beyond'])}); peak <= {GOAL_PEAK}: {met(goal['peak'])}")


def _cell(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(payload: dict) -> str:
    lines = [f"gpt2 training step on {payload['device']}; torch {payload['torch']} (float32, "
             "TF32 off, SDPA efficient backend, fused AdamW); ratios over torch eager", ""]
    head = (f"{'preset':<10} {'side':<14} {'ms/step':>9} {'tokens/s':>10} {'peak MiB':>10} "
            f"{'time/torch':>11} {'peak/torch':>11}  goal")
    lines += [head, "-" * len(head)]
    notes = []
    for r in payload["presets"]:
        for name in SIDES:
            side = r["sides"].get(name)
            if side is None:
                continue
            label = f"{r['preset']:<10} {name:<14}"
            if "ms" not in side:
                why = side.get("error") or side.get("skipped")
                lines.append(f"{label} {'skipped' if 'skipped' in side else 'FAILED'}: {why}")
                continue
            peak = side["peak_bytes"] / MIB
            lines.append(f"{label} {side['ms']:>9.2f} {side['tokens_per_s']:>10,.0f} "
                         f"{peak:>10.1f} {_cell(side.get('time_ratio'), '.3f'):>11} "
                         f"{_cell(side.get('peak_ratio'), '.3f'):>11}  "
                         + (f"(compile: first step {side['compile_s']:.1f} s)"
                            if "compile_s" in side else _verdict(side.get("goal"))))
        for name in SIDES:
            side = r["sides"].get(name, {})
            if "losses" in side:
                extra = "".join(f"  {k}={side[k]}" for k in ("profile", "attention")
                                if k in side)
                notes.append(f"{r['preset']:<10} {name:<14} losses "
                             + " ".join(f"{x:.5f}" for x in side["losses"]) + extra)
    lines += ["", f"first {LOSS_STEPS} steps (same initial parameters, same batches):"] + notes
    lines += ["", PEAK_NOTE]
    split = step_split.table_lines(payload["presets"])
    if split:
        lines += [""] + split
    attn = payload.get("attention")
    if attn and "error" in attn:
        lines += ["", f"attention kernels: FAILED: {attn['error']}"]
    elif attn:
        lines += ["", attention_capsules.table(attn)]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        cp, torch = require_gpu()
    except BenchUnavailable as exc:
        print(f"bench_gpt2: {exc}", file=sys.stderr)
        return 2
    payload = {"format": "torchlean-bench-gpt2", "device": torch.cuda.get_device_name(),
               "torch": torch.__version__, "quick": args.quick, "steps": args.steps,
               "profile": args.profile,
               "graph_profile": args.graph_profile if args.graph else None, "presets": []}
    interrupted = None
    # a time limit (SIGTERM) or ^C ends the run early: what was measured is still written
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        for name in args.presets:
            payload["presets"].append(add_ratios(bench_preset(cp, torch, name, args)))
        try:
            payload["attention"] = attention_capsules.bench(cp, torch, args.quick)
        except Exception as exc:   # the step table above is still worth writing
            payload["attention"] = {"error": f"{type(exc).__name__}: {exc}"}
    except KeyboardInterrupt:
        interrupted = (f"interrupted after {len(payload['presets'])} preset(s)"
                       + ("" if "attention" in payload else ", before the attention kernels"))
    payload["interrupted"] = interrupted
    emit(args, table(payload) + (f"\n\n{interrupted}" if interrupted else ""), payload)
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
