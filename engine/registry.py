"""Every known capsule with its handler. Provider modules register themselves on import; the
registry imports them the first time anyone asks, so describing a capsule never needs its library."""
from __future__ import annotations

import importlib

from engine.capsule import KernelCapsule, KernelHandler
from engine.errors import TorchLeanError
from engine.types import BackendOp

# Catalogue order: planning tries providers in this order after the profile's preferences.
PROVIDER_MODULES = (
    "engine.providers.reference",
    "engine.providers.native_cuda",
    "engine.providers.cublas",
    "engine.providers.cufft",
    "engine.providers.composed",
    "engine.providers.libtorch",
)


class DuplicateCapsuleError(TorchLeanError):
    """Two registrations under one capsule name."""


class Registry:
    def __init__(self) -> None:
        self._entries: dict[str, tuple[KernelCapsule, KernelHandler]] = {}

    def register(self, capsule: KernelCapsule, handler: KernelHandler) -> None:
        if capsule.name in self._entries:
            raise DuplicateCapsuleError(
                f"capsule `{capsule.name}` is already registered; give the new one another name")
        self._entries[capsule.name] = (capsule, handler)

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    def capsules(self, op: BackendOp | None = None) -> list[KernelCapsule]:
        return [c for c, _ in self._entries.values() if op is None or c.op is op]

    def get(self, name: str) -> tuple[KernelCapsule, KernelHandler]:
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(f"no capsule named `{name}`; `torchlean capsules` lists them") from None

    def handler(self, name: str) -> KernelHandler:
        return self.get(name)[1]

    def __contains__(self, name: str) -> bool:
        return name in self._entries


_REGISTRY: Registry | None = None


def registry() -> Registry:
    """The process-wide registry, filled from every provider module that imports."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = Registry()
        for module in PROVIDER_MODULES:
            try:
                mod = importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name == module:  # the provider module itself is not written yet
                    continue
                raise
            mod.register_all(_REGISTRY)
    return _REGISTRY
