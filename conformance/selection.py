"""Which capsules a command audits: the registry's of a device and the plugins' entries, picked
by glob patterns. `run` and `exhaustive` both select through this."""
from __future__ import annotations

import fnmatch
import sys


class NoCapsuleMatchError(Exception):
    """A selection that selects no capsule for the device: `--capsule` patterns that match none,
    plugins whose capsules are all for other devices, or no available capsule at all."""


def select_targets(device: str, patterns: list[str] | None, plugins: list[str],
                   plugins_only: bool = False, say_skipped: bool = True) -> list:
    """(Target, capsule, handler) for every registry capsule of the device (none when
    `plugins_only`) and every plugin entry, filtered by the glob patterns; unavailable registry
    capsules are left out, and named on stderr when `say_skipped`. A selection of nothing is a
    NoCapsuleMatchError saying why: a run that audits nothing must not pass. Plugins are
    described by a kernel process (conformance/isolation/describe.py), never imported here."""
    from conformance.isolation.describe import describe_plugin
    from conformance.plugins import builtin_names, check_name_taken
    from conformance.runner import Target
    from engine.registry import registry
    found, why_none = [], []
    reg = registry()
    taken = builtin_names()
    unavailable = 0
    for cap in ([] if plugins_only else reg.capsules()):
        handler = reg.handler(cap.name)
        missing = handler.unavailable() if handler.unavailable is not None else None
        if cap.device.label == device and missing is None:
            found.append((Target(cap.name), cap, handler))
        elif cap.device.label == device:
            unavailable += 1
            if say_skipped:
                print(f"skipping {cap.name}: {missing}", file=sys.stderr)
    if unavailable and not found:
        why_none.append(f"every built-in capsule of device {device} is unavailable here "
                        f"({unavailable} skipped)")
    for spec in plugins:
        table = describe_plugin(spec, device)
        for name in table:
            check_name_taken(name, spec, taken)
        ours = [(Target(name, spec), cap, handler) for name, (cap, handler) in table.items()
                if cap.device.label == device]
        if not ours:
            why_none.append(_elsewhere(spec, [cap for cap, _ in table.values()], device))
        found += ours
    if patterns:
        found = [t for t in found if any(fnmatch.fnmatchcase(t[1].name, p) for p in patterns)]
        if not found:
            raise NoCapsuleMatchError(
                f"--capsule {' '.join(patterns)} matches no capsule on device `{device}`; "
                f"`torchlean capsules` lists the names (globs like "
                f"'{'reference' if device == 'cpu' else 'native_cuda'}.*' work)" +
                "".join(f"; {why}" for why in why_none))
    if not found:
        raise NoCapsuleMatchError(
            f"nothing to audit on device `{device}`: {'; '.join(why_none) or 'no capsule'}; "
            "pick a plugin or --device whose capsules match")
    for why in why_none if say_skipped else ():   # the others audit: say what is left out
        print(f"skipping {why}", file=sys.stderr)
    return found


def _elsewhere(spec: str, capsules: list, device: str) -> str:
    """Why a plugin adds nothing to a run on `device`: its capsules are for other devices."""
    devices = ", ".join(sorted({cap.device.label for cap in capsules}))
    count = f"{len(capsules)} capsules, all" if len(capsules) != 1 else "1 capsule,"
    return f"plugin {spec} defines {count} for device {devices}; this run is --device {device}"
