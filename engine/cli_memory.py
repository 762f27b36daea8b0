"""`torchlean memory`: print the allocator telemetry (engine/cli.py wires the subcommand)."""
from __future__ import annotations


def run_memory(args=None) -> int:
    """Print `allocator_stats().format()`; on the CPU parity stub the cache and cap read zero."""
    from engine.runtime.allocator import allocator_stats
    from engine.runtime.native import probe
    state, detail = probe()
    print(f"runtime: {state.value} ({detail})")
    print(allocator_stats().format())
    return 0
