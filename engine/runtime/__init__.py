"""The runtime beneath the ops: the native probe, device buffers, the reuse cache and its
telemetry, the kernel loader, and deterministic reduction mode."""
from engine.runtime.allocator import AllocatorStats, allocator_stats, parse_cache_cap
from engine.runtime.deterministic import get_deterministic_reductions, set_deterministic_reductions
from engine.runtime.native import RuntimeState, native_available, probe, require_native_runtime

__all__ = ["AllocatorStats", "RuntimeState", "allocator_stats", "get_deterministic_reductions",
           "native_available", "parse_cache_cap", "probe", "require_native_runtime",
           "set_deterministic_reductions"]
