"""Every known capsule with its handler. Provider modules register themselves on import; the
registry imports them the first time anyone asks, so describing a capsule never needs its library.

It also holds the device rules: functions a provider lends, when it registers, to engine code
that must not import it (layering: an op's local VJP rule and an optimizer reach our kernels
through the registry, never through engine/providers/). A local VJP rule's key is its op (a
BackendOp or RuntimeEntry); the optimizers' keys are the ADAM_* names below."""
from __future__ import annotations

import importlib
from typing import Callable, Hashable

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


# Device rules that are no op's VJP: Adam's native kernels (engine/optim.py).
ADAM_STEP = "optim.adam_step"                      # one parameter, the step count from Python
ADAM_STEP_TABLE = "optim.adam_step_table"          # one parameter, the step count on the device
ADAM_BIAS_TABLE = "optim.adam_bias_table"          # the device's bias corrections and step count
ADAM_MULTI_TENSOR = "optim.adam_multi_tensor_table"   # every parameter in one launch


class DuplicateCapsuleError(TorchLeanError):
    """Two registrations under one capsule name."""


class DuplicateDeviceRuleError(TorchLeanError):
    """Two providers lend different functions under one device-rule key."""


class MissingDeviceRuleError(TorchLeanError):
    """A rule asked for a device function no registered provider lends."""


def _key_label(key: Hashable) -> str:
    return getattr(key, "label", None) or str(key)


class Registry:
    def __init__(self) -> None:
        self._entries: dict[str, tuple[KernelCapsule, KernelHandler]] = {}
        self._device_rules: dict[Hashable, Callable] = {}

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

    def provide(self, key: Hashable, fn: Callable) -> None:
        """Lend `fn` under `key` (module docstring) to code that must not import its provider."""
        held = self._device_rules.get(key)
        if held is not None and held is not fn:
            raise DuplicateDeviceRuleError(
                f"device rule `{_key_label(key)}` is already lent ({held.__module__}."
                f"{held.__qualname__}); a second provider cannot lend {fn.__module__}."
                f"{fn.__qualname__} under the same key")
        self._device_rules[key] = fn

    def device_rule(self, key: Hashable) -> Callable:
        """The function a provider lent under `key`."""
        try:
            return self._device_rules[key]
        except KeyError:
            raise MissingDeviceRuleError(
                f"no registered provider lends a device rule for `{_key_label(key)}`; the CUDA "
                "providers (engine/providers/native_cuda, engine/providers/cufft.py) lend theirs "
                "when they register") from None

    def device_rules(self) -> dict[Hashable, Callable]:
        """Every lent device rule, by key (a copy)."""
        return dict(self._device_rules)


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


def device_rule(key: Hashable) -> Callable:
    """The process-wide registry's device rule for `key` (Registry.device_rule)."""
    return registry().device_rule(key)
