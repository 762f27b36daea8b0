"""Deterministic reduction mode: fixed-order kernels instead of atomics where both exist."""
from __future__ import annotations

import os

ENV_VAR = "TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS"


def _from_environment() -> bool:
    # Non-empty and not "0" turns it on, read once at start.
    value = os.environ.get(ENV_VAR, "")
    return value != "" and value != "0"


_enabled = _from_environment()


def set_deterministic_reductions(enabled: bool) -> bool:
    """Turn fixed-order reductions on or off; returns the previous setting."""
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"set_deterministic_reductions takes a bool, got {enabled!r}")
    previous, _enabled = _enabled, enabled
    return previous


def get_deterministic_reductions() -> bool:
    return _enabled
