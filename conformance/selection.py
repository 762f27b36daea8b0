"""Which capsules a command audits: the registry's of a device and the plugins' entries, picked
by glob patterns. `run` and `exhaustive` both select through this."""
from __future__ import annotations

import fnmatch
import sys


class NoCapsuleMatchError(Exception):
    """`--capsule` patterns that select no capsule for the device."""


def select_targets(device: str, patterns: list[str] | None, plugins: list[str],
                   plugins_only: bool = False, say_skipped: bool = True) -> list:
    """(Target, capsule, handler) for every registry capsule of the device (none when
    `plugins_only`) and every plugin entry, filtered by the glob patterns; unavailable registry
    capsules are left out, and named on stderr when `say_skipped`."""
    from conformance.isolation.describe import describe_plugin
    from conformance.plugins import builtin_names, check_name_taken
    from conformance.runner import Target
    from engine.registry import registry
    found = []
    reg = registry()
    taken = builtin_names()
    for cap in ([] if plugins_only else reg.capsules()):
        handler = reg.handler(cap.name)
        missing = handler.unavailable() if handler.unavailable is not None else None
        if cap.device.label == device and missing is None:
            found.append((Target(cap.name), cap, handler))
        elif cap.device.label == device and say_skipped:
            print(f"skipping {cap.name}: {missing}", file=sys.stderr)
    for spec in plugins:   # described by a kernel process: the plugin is never imported here
        for name, (cap, handler) in describe_plugin(spec, device).items():
            check_name_taken(name, spec, taken)
            if cap.device.label == device:
                found.append((Target(name, spec), cap, handler))
    if patterns:
        found = [t for t in found if any(fnmatch.fnmatchcase(t[1].name, p) for p in patterns)]
        if not found:
            raise NoCapsuleMatchError(
                f"--capsule {' '.join(patterns)} matches no capsule on device `{device}`; "
                f"`torchlean capsules` lists the names (globs like "
                f"'{'reference' if device == 'cpu' else 'native_cuda'}.*' work)")
    return found
