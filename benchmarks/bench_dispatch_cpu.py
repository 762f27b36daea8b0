"""Host cost of one eager op without a GPU (issue 19): engine.ops.add on 1024 elements in a CPU
session, and the host-side pieces of the CUDA path run against fakes.

The CPU session shares everything above the provider with the CUDA path (the public wrapper,
`apply` and its checks, the plan lookup, the result Tensor and AnyBuffer, the tape record), so
"ops.add, minimal handler" (the plan's handler swapped for one that only allocates its output) is
the part of a CUDA `engine.ops.add` that is Python dispatch. The prepared launch runs against a
fake `cupy.cuda.driver` whose launchKernel is a C builtin (the driver's own ~4 us on the H200 is
not Python and is the same before and after), and the exact-size cache's malloc/free pair runs
on a fake runtime (a cache hit, as every eager step after the first).

`--before REF` measures the same pieces on the engine of git revision REF (extracted with
`git archive` into a temporary folder) and prints both columns, each the fastest of `--rounds`
subprocess runs, the two trees alternating.
Each number is the fastest of `--repeats` short loops of `--calls` calls, in microseconds per
call: on a shared machine a long loop is interrupted by other work, a short one often is not,
and the fastest short loop is the least disturbed measure of the code itself.

Usage: python benchmarks/bench_dispatch_cpu.py [--before REF] [--calls N] [--repeats R] [--json P]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N = 1024


def _rate(fn, calls: int, repeats: int) -> float:
    """Fastest loop's seconds per call of `fn`."""
    for _ in range(max(calls, 1000)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best / 1e9


def _fake_cupy_driver():
    """A `cupy.cuda.driver` stand-in: launchKernel is the builtin max (eleven ints in, no frame)
    and CUDADriverError an exception with a status, as CuPy's binding raises."""
    class CUDADriverError(Exception):
        def __init__(self, status: int) -> None:
            super().__init__(f"CUDA_ERROR_{status}: fake")
            self.status = status
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    driver = types.ModuleType("cupy.cuda.driver")
    driver.launchKernel, driver.CUDADriverError = max, CUDADriverError
    cupy.cuda, cuda.driver = cuda, driver
    return {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.driver": driver}


def _fake_driver():
    from engine.runtime import driver_launch
    fakes = _fake_cupy_driver()
    saved = {k: sys.modules.get(k) for k in fakes}
    sys.modules.update(fakes)
    try:
        return driver_launch.load_driver()
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


class _FakeRuntime:
    """cudaMalloc hands out increasing addresses; nothing is ever freed to it in the loop."""
    class CUDARuntimeError(Exception):
        status = 2

    def __init__(self) -> None:
        self.next = 0x7000_0000_0000

    def malloc(self, size: int) -> int:
        self.next += max(size, 256)
        return self.next

    def free(self, ptr: int) -> None:
        pass

    def deviceSynchronize(self) -> None:
        pass


def measure(calls: int, repeats: int) -> dict:
    import dataclasses

    import numpy as np

    from engine import ops
    from engine.capsule import ExecutableKernel
    from engine.runtime.allocator import ExactSizeCache
    from engine.runtime.driver_launch import PreparedLaunch
    from engine.session import Session, use_session
    from engine.tensor import tensor
    from engine.types import BackendOp
    res = {}
    host = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    with use_session(Session("cpu")) as session:
        x, y = tensor(host), tensor(host[::-1].copy())
        res["engine.ops.add (reference handler)"] = _rate(lambda: ops.add(x, y), calls, repeats)
        forward = session.kernel_for(BackendOp.add).handler.forward
        xa, ya = x.view(), y.view()
        res["reference handler alone"] = _rate(lambda: forward(xa, ya), calls, repeats)
    res["dispatch (the difference)"] = (res["engine.ops.add (reference handler)"]
                                        - res["reference handler alone"])
    empty, f32 = np.empty, np.float32
    with use_session(Session("cpu")) as session:
        kernel = session.kernel_for(BackendOp.add)
        minimal = dataclasses.replace(kernel.handler, forward=lambda a, b: empty(N, f32))
        session._kernels[BackendOp.add] = ExecutableKernel(kernel.capsule, minimal)
        x, y = tensor(host), tensor(host)
        res["ops.add, minimal handler"] = _rate(lambda: ops.add(x, y), calls, repeats)
        res["  its handler alone (np.empty)"] = _rate(lambda: empty(N, f32), calls, repeats)
        x.requires_grad = True
        res["ops.add, minimal handler, grad on"] = _rate(lambda: ops.add(x, y), calls, repeats)
    res["shared dispatch (minimal - handler)"] = (res["ops.add, minimal handler"]
                                                  - res["  its handler alone (np.empty)"])
    from engine.providers.native_cuda import launch as L
    drv = _fake_driver()
    launch = PreparedLaunch("tl_add_fwd", "pppu", 0x7F00_0000_1000, 256, drv)
    args = (0x7F12_0000_0000, 0x7F12_0000_1000, 0x7F12_0000_2000, N)
    res["CUDA: prepared launch (fake driver)"] = _rate(lambda: launch(1, 0x5000, args), calls,
                                                       repeats)
    # What an elementwise handler calls: Kernel.launch, on a fake current stream (a Python
    # lambda here where CuPy's lookup is Cython: the same in both trees).
    kern = L.Kernel("elementwise.cu", "tl_bench_add", "pppu")
    kern.prepared = PreparedLaunch("tl_bench_add", "pppu", 0x7F00_0000_1000, 256, drv)
    stream = types.SimpleNamespace(ptr=0x5000)
    saved, L._current_stream = L._current_stream, lambda: stream
    try:
        res["CUDA: Kernel.launch (fake driver)"] = _rate(lambda: kern.launch(1, *args), calls,
                                                         repeats)
    finally:
        L._current_stream = saved
    cache = ExactSizeCache(0, runtime=_FakeRuntime())
    malloc, free = cache.malloc, cache.free
    res["CUDA: cache malloc + free (hit)"] = _rate(lambda: free(malloc(4 * N, 0), 0), calls,
                                                   repeats)
    return res


def _measure_in(root: str, calls: int, repeats: int) -> dict:
    """This script's measurements on the engine under `root`, in a fresh interpreter."""
    out = subprocess.run([sys.executable, __file__, "--root", root, "--calls", str(calls),
                          "--repeats", str(repeats), "--json", "-"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def _compare(ref: str, calls: int, repeats: int, rounds: int) -> tuple[dict, dict]:
    """(this tree, revision `ref`): each the per-entry fastest of `rounds` runs, the two trees
    alternating, so a change in the machine's load falls on both columns alike."""
    with tempfile.TemporaryDirectory(prefix="bench-dispatch-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "engine"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        this, before = {}, {}
        for _ in range(rounds):
            for res, root in ((before, tmp), (this, str(ROOT))):
                for k, v in _measure_in(root, calls, repeats).items():
                    res[k] = min(v, res.get(k, v))
    for res in (this, before):   # the differences from the fastest parts
        res["dispatch (the difference)"] = (res["engine.ops.add (reference handler)"]
                                            - res["reference handler alone"])
        res["shared dispatch (minimal - handler)"] = (res["ops.add, minimal handler"]
                                                      - res["  its handler alone (np.empty)"])
    return this, before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, help="git revision to measure beside this tree")
    parser.add_argument("--root", default=str(ROOT), help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3,
                        help="with --before: runs of each tree, alternating")
    parser.add_argument("--json", default=None, help="write the numbers here ('-': stdout only)")
    args = parser.parse_args()
    sys.path.insert(0, args.root)
    if args.before:
        res, before = _compare(args.before, args.calls, args.repeats, args.rounds)
    else:
        res, before = measure(args.calls, args.repeats), None
    if args.json == "-":
        print(json.dumps(res))
        return 0
    head = f"   {'':40s} {'this tree':>10s}"
    if before:
        head += f"   {args.before[:10]:>10s}   change"
    lines = [f"-- host cost per call, {N}-element add, CPU (us; fastest of {args.repeats} loops "
             f"of {args.calls})", head]
    for k, v in res.items():
        line = f"   {k:40s} {v * 1e6:10.3f}"
        if before and k in before:
            b = before[k]
            line += f"   {b * 1e6:10.3f}   {(v - b) * 1e6:+7.3f}"
        lines.append(line)
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"this": res, "before": before}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
