"""`--plugin module:attr`: capsules from a user's module, audited against the same references.

An entry pairs a KernelCapsule with a forward function over arrays (NumPy for cpu, CuPy for cuda)
taking the inputs and parameters of `engine.ops.<op>`, and optionally a VJP function
`(inputs, output, grad_out, **params) -> tuple` (docs/OPS.md, docs/PLUGINS.md). `attr` names a
`PluginEntry`, a list of them, or a function returning either.
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Callable

from engine.capsule import KernelCapsule, KernelHandler
from engine.types import VJPMode


class PluginError(Exception):
    """A `--plugin` spec that cannot be loaded or does not describe audit entries."""


@dataclass(frozen=True)
class PluginEntry:
    capsule: KernelCapsule
    forward: Callable
    vjp: Callable | None = None

    def handler(self) -> KernelHandler:
        c = self.capsule
        return KernelHandler(c.name, c.op, c.provider, c.device, self.forward, self.vjp)


def _entries(obj, spec: str) -> list[PluginEntry]:
    if callable(obj) and not isinstance(obj, PluginEntry):
        obj = obj()
    items = obj if isinstance(obj, (list, tuple)) and not isinstance(obj, PluginEntry) else [obj]
    out = []
    for i, item in enumerate(items):
        if isinstance(item, tuple) and 2 <= len(item) <= 3:
            item = PluginEntry(*item)
        if not isinstance(item, PluginEntry) or not isinstance(item.capsule, KernelCapsule) \
                or not callable(item.forward):
            raise PluginError(
                f"plugin `{spec}` entry {i} is {type(item).__name__}; expected a "
                "conformance.plugins.PluginEntry(capsule=KernelCapsule, forward=callable, "
                "vjp=callable|None) (docs/PLUGINS.md)")
        if item.capsule.vjp_mode is VJPMode.backend_vjp and item.vjp is None:
            raise PluginError(
                f"plugin `{spec}` entry `{item.capsule.name}` declares vjp=backend-vjp but gives "
                "no vjp function; pass vjp=... or declare vjp=torchlean-tape")
        out.append(item)
    return out


def load_plugin(spec: str) -> list[PluginEntry]:
    """Import `module:attr` (the current directory is importable) and return its entries."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise PluginError(f"--plugin `{spec}` is not of the form module:attr, e.g. "
                          "fixtures.plugins.numpy_add:ENTRIES")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"--plugin `{spec}`: cannot import module `{module_name}` ({exc}); "
                          "check the name and that it is importable from this directory") from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise PluginError(f"--plugin `{spec}`: module `{module_name}` has no attribute "
                          f"`{attr}`") from None
    return _entries(obj, spec)


def plugin_handlers(spec: str) -> dict[str, tuple[KernelCapsule, KernelHandler]]:
    """Capsule name -> (capsule, handler) for every entry of a plugin."""
    return {e.capsule.name: (e.capsule, e.handler()) for e in load_plugin(spec)}
