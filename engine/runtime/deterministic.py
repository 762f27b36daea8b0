"""Deterministic reduction mode: fixed-order kernels instead of atomics where both exist."""
from __future__ import annotations

import contextlib
import os
import warnings

ENV_VAR = "TORCHLEAN_CUDA_DETERMINISTIC_REDUCTIONS"
ON = ("1", "true", "yes", "on")
OFF = ("", "0", "false", "no", "off")


def parse_mode(value: str | None) -> tuple[bool, str | None]:
    """(on?, warning) for the variable's value, read once at start. 1/true/yes/on and
    0/false/no/off in any case, spaces stripped; unset or empty is off. Anything else keeps
    TorchLean's rule (non-empty and not "0" is on) and is warned about, naming the variable."""
    text = (value or "").strip().lower()
    if text in ON:
        return True, None
    if text in OFF:
        return False, None
    return True, (f"{ENV_VAR}={value!r} is not one of 1/true/yes/on or 0/false/no/off; "
                  "deterministic reductions are ON (TorchLean's rule: any other non-empty value "
                  "turns them on); set 0 or 1 to say which you mean")


def _from_environment() -> bool:
    on, warning = parse_mode(os.environ.get(ENV_VAR))
    if warning:
        warnings.warn(warning, RuntimeWarning, stacklevel=3)
    return on


# Read on first use, not at import: a command installs its warning display first, and a warning
# about the variable then reads as the command's own.
_enabled: bool | None = None


def set_deterministic_reductions(enabled: bool) -> bool:
    """Turn fixed-order reductions on or off; returns the previous setting."""
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"set_deterministic_reductions takes a bool, got {enabled!r}")
    previous, _enabled = get_deterministic_reductions(), enabled
    return previous


@contextlib.contextmanager
def deterministic_reductions(enabled: bool = True):
    """Fixed-order reductions on (or off) inside the block, the previous setting restored after
    it, also when the block raises."""
    previous = set_deterministic_reductions(enabled)
    try:
        yield
    finally:
        set_deterministic_reductions(previous)


def get_deterministic_reductions() -> bool:
    global _enabled
    if _enabled is None:
        _enabled = _from_environment()
    return _enabled
