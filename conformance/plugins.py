"""`--plugin module:attr`: capsules from a user's module, audited against the same references.

An entry pairs a KernelCapsule with a forward function over arrays (NumPy for cpu, CuPy for cuda)
taking the inputs and parameters of `engine.ops.<op>`, and optionally a VJP function
`(inputs, output, grad_out, **params) -> tuple` (docs/OPS.md, docs/PLUGINS.md). `attr` names a
`PluginEntry`, a list of them, or a function returning either.

An entry's op is one of the engine's (BackendOp, RuntimeEntry) or a `UserOp`: an op the engine
does not have, whose contract (its record, an OpSpec with its reference, policy and bound) the
user brings in a module of its own, which the judge imports on the user's word
(`--op-contracts module:attr`, conformance/families/__init__.py) and never from the kernel's.
"""
from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass
from typing import Callable

from engine.capsule import KernelCapsule, KernelHandler
from engine.types import BackendOp, RuntimeEntry, VJPMode


class PluginError(Exception):
    """A `--plugin` spec that cannot be loaded or does not describe audit entries."""


@dataclass(frozen=True)
class UserOp:
    """An op the engine does not have (RMSNorm, SwiGLU, ...), named by a plugin's capsule and by
    the user's contract for it (an OpSpec whose `op` is the same UserOp). It reads as the engine's
    ops do: a `label` (a new name: lower-case letters, digits and underscores) and `needs_vjp`.
    Two UserOps are the same op when their fields are equal."""
    label: str
    needs_vjp: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", self.label):
            raise PluginError(f"user op label {self.label!r} is not a name of lower-case letters, "
                              "digits and underscores (at most 64, a letter first)")
        if self.label in _ENGINE_LABELS:
            raise PluginError(f"user op `{self.label}` takes the name of the engine's op "
                              f"`{self.label}`: declare the engine's op (engine.types) instead, or "
                              "give yours another name")
        if not isinstance(self.needs_vjp, bool):
            raise PluginError(f"user op `{self.label}`: needs_vjp must be True or False")


_ENGINE_LABELS = frozenset(op.label for op in (*BackendOp, *RuntimeEntry))


@dataclass(frozen=True)
class PluginEntry:
    """A capsule and its functions. `declines(inputs, params) -> None | str`, where given, is the
    kernel's declared support (engine.capsule.KernelHandler.declines): the harness skips a case
    it declines and records why, never as a pass (a peer whose documented semantics refuse a case,
    as CuPy's softmax raises on a zero-length axis, says so instead of failing it)."""
    capsule: KernelCapsule
    forward: Callable
    vjp: Callable | None = None
    declines: Callable | None = None

    def handler(self) -> KernelHandler:
        c = self.capsule
        return KernelHandler(c.name, c.op, c.provider, c.device, self.forward, self.vjp,
                             declines=self.declines)


_FORMAT = ("expected a conformance.plugins.PluginEntry(capsule=KernelCapsule, forward=callable, "
           "vjp=callable|None), a list of them, or a function returning either "
           "(docs/PLUGINS.md; fixtures/plugins/numpy_kernels.py is a complete example)")


def _entry(item, i: int, spec: str) -> PluginEntry:
    if isinstance(item, tuple) and 2 <= len(item) <= 3:
        item = PluginEntry(*item)
    if not isinstance(item, PluginEntry):
        raise PluginError(f"plugin `{spec}` entry {i} is a {type(item).__name__}; {_FORMAT}")
    wrong = [f"capsule is a {type(item.capsule).__name__}, not a KernelCapsule"
             ] if not isinstance(item.capsule, KernelCapsule) else []
    wrong += [f"forward is a {type(item.forward).__name__}, not callable"
              ] if not callable(item.forward) else []
    wrong += [f"vjp is a {type(item.vjp).__name__}, not callable or None"
              ] if item.vjp is not None and not callable(item.vjp) else []
    wrong += [f"declines is a {type(item.declines).__name__}, not callable or None"
              ] if item.declines is not None and not callable(item.declines) else []
    if wrong:
        raise PluginError(f"plugin `{spec}` entry {i}: {'; '.join(wrong)}; {_FORMAT}")
    name = item.capsule.name
    if item.capsule.vjp_mode is VJPMode.backend_vjp and item.vjp is None:
        raise PluginError(
            f"plugin `{spec}` entry `{name}` declares vjp=backend-vjp but gives no vjp "
            "function; pass vjp=... or declare vjp=torchlean-tape")
    if item.capsule.vjp_mode is not VJPMode.backend_vjp and item.vjp is not None:
        raise PluginError(
            f"plugin `{spec}` entry `{name}` gives a vjp function but declares "
            f"vjp={item.capsule.vjp_mode.label}: the harness would audit the engine's tape rule "
            "and never call yours; declare vjp=backend-vjp to audit it, or drop vjp=")
    return item


def _entries(obj, spec: str) -> list[PluginEntry]:
    if callable(obj) and not isinstance(obj, PluginEntry):
        try:
            obj = obj()
        except PluginError:   # the factory's own diagnosis (e.g. a missing dependency) stands
            raise
        except Exception as exc:
            raise PluginError(f"--plugin `{spec}`: the factory raised {type(exc).__name__}: "
                              f"{exc}; fix the plugin module") from None
    items = obj if isinstance(obj, (list, tuple)) and not isinstance(obj, PluginEntry) else [obj]
    out = [_entry(item, i, spec) for i, item in enumerate(items)]
    if not out:
        raise PluginError(f"--plugin `{spec}` gives no entries; {_FORMAT}")
    return out


def check_names(entries: list[PluginEntry], spec: str, taken: dict[str, str]) -> None:
    """No entry may reuse a built-in capsule's name or another entry's (one record per name).
    `taken` maps names already in use to who uses them; it is extended."""
    for e in entries:
        check_name_taken(e.capsule.name, spec, taken)


def check_name_taken(name: str, spec: str, taken: dict[str, str]) -> None:
    """PluginError when `name` is in `taken` (name -> who uses it); else claim it for `spec`."""
    if name in taken:
        raise PluginError(
            f"--plugin `{spec}`: capsule name `{name}` is already used by {taken[name]}; "
            "give each plugin capsule its own name (e.g. `user.my_add`): evidence is kept "
            "per name")
    taken[name] = f"plugin `{spec}`"


def load_plugin(spec: str) -> list[PluginEntry]:
    """Import `module:attr` (the current directory is importable) and return its entries."""
    return _entries(import_attribute(spec), spec)


def import_attribute(spec: str):
    """The object `module:attr` names (the current directory is importable), or PluginError."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"--plugin `{spec}` is not of the form module:attr, e.g. "
                          "fixtures.plugins.numpy_kernels:ENTRIES")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"--plugin `{spec}`: cannot import module `{module_name}` ({exc}); "
                          "check the name and that it is importable from this directory") from None
    except SyntaxError as exc:
        raise PluginError(f"--plugin `{spec}`: module `{module_name}` has a syntax error "
                          f"({exc.msg}, {exc.filename} line {exc.lineno}); fix it") from None
    except Exception as exc:   # the module raised while importing: the plugin's defect
        raise PluginError(f"--plugin `{spec}`: importing `{module_name}` raised "
                          f"{type(exc).__name__}: {exc}; fix the plugin module") from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise PluginError(f"--plugin `{spec}`: module `{module_name}` has no attribute "
                          f"`{attr}`") from None
    return obj


def builtin_names() -> dict[str, str]:
    from engine.registry import registry
    return {c.name: "a built-in capsule" for c in registry().capsules()}


def plugin_handlers(spec: str, taken: dict[str, str] | None = None, device: str | None = None
                    ) -> dict[str, tuple[KernelCapsule, KernelHandler]]:
    """Capsule name -> (capsule, handler) for every entry of a plugin, or of its entries for
    `device` when it has any (else all of them, so that the caller can say where they are).
    Names must be new: not a built-in capsule's and not repeated (within this plugin's entries
    kept, or among `taken`). A plugin may give one name on several devices (JAX's peer gives
    `xla.<op>` on cpu and cuda): a run is on one device, and evidence is kept per device."""
    entries = load_plugin(spec)
    if device is not None:
        entries = [e for e in entries if e.capsule.device.label == device] or entries
    check_names(entries, spec, builtin_names() if taken is None else taken)
    return {e.capsule.name: (e.capsule, e.handler()) for e in entries}
