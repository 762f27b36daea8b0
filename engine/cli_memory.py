"""`torchlean memory`: print the allocator telemetry (engine/cli.py wires the subcommand), and the
examples' `--cuda-mem-watch` that prints it during training."""
from __future__ import annotations

import sys


def run_memory(args=None) -> int:
    """Print `allocator_stats().format()`; on the CPU parity stub the cache and cap read zero."""
    from engine.runtime.allocator import allocator_stats
    from engine.runtime.native import probe
    state, detail = probe()
    print(f"runtime: {state.value} ({detail})")
    print(allocator_stats().format())
    return 0


class MemoryWatch:
    """`--cuda-mem-watch N`: print `allocator_stats().format()` every N steps, and warn when the
    device's free memory fell at each of the last FALLS watches (a leak or a cache that keeps
    growing, rather than the one-time rise of the first steps). On the CPU parity stub free
    memory reads 0 and never falls."""

    FALLS = 3

    def __init__(self, every: int, say=print) -> None:
        from engine.errors import TorchLeanError
        if every < 0:
            raise TorchLeanError(f"--cuda-mem-watch must be 0 (off) or a step count, got {every}")
        self.every, self.say = every, say
        self.free: list[int] = []

    def __call__(self, step: int) -> None:
        if not self.every or (step + 1) % self.every:
            return
        from engine.runtime.allocator import allocator_stats
        stats = allocator_stats()
        self.say(f"memory at step {step}: {stats.format()}")
        self.free = (self.free + [stats.mem_free])[-(self.FALLS + 1):]
        f = self.free
        if len(f) == self.FALLS + 1 and all(b < a for a, b in zip(f, f[1:])):
            print(f"torchlean: warning: free device memory fell at each of the last {self.FALLS} "
                  f"watches: {' -> '.join(str(v) for v in f)} bytes", file=sys.stderr)
