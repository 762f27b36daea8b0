"""What this checkout says about its own build, for the staleness and earned-trust columns: the
registered capsules, each capsule's current build fingerprint, and the trust a fresh record earns.

The builder takes any object with these three methods, so tests (and renders on machines that
cannot import the engine) pass a FixedBuild instead of the registry.
"""
from __future__ import annotations

from typing import Protocol


class BuildView(Protocol):
    def registered(self) -> list[dict]:
        """Every registered capsule, as conformance.evidence.capsule_record writes it."""

    def fingerprint(self, name: str, environment: dict) -> tuple[str | None, str]:
        """(current build fingerprint or None, where it came from / why none)."""

    def earned(self, record: dict) -> tuple[str | None, str]:
        """(earned trust label or None, why) for a record whose fingerprint is current."""


class RegistryBuild:
    """The registry and conformance.fingerprint.fingerprint of this checkout."""

    def __init__(self) -> None:
        from engine.registry import registry
        self._reg = registry()
        self._fingerprints: dict[str, str] = {}
        self._gpu: tuple[str | None] | None = None

    def registered(self) -> list[dict]:
        from conformance.evidence import capsule_record
        return [capsule_record(c) for c in self._reg.capsules()]

    def _gpu_here(self) -> str | None:
        if self._gpu is None:
            from engine.runtime.native import native_available
            name = None
            if native_available():
                from conformance.evidence import environment
                name = environment("cuda").get("gpu")
            self._gpu = (name,)
        return self._gpu[0]

    def fingerprint(self, name: str, environment: dict) -> tuple[str | None, str]:
        if name not in self._reg:
            return None, ("not a registered capsule of this checkout (a plugin capsule, or one "
                          "since removed), so no current fingerprint")
        capsule, handler = self._reg.get(name)
        if capsule.device.label == "cuda":
            # A CUDA build fingerprint covers the GPU architecture and NVRTC version: it can only
            # be recomputed on the kind of GPU the evidence was made on.
            here, there = self._gpu_here(), (environment or {}).get("gpu")
            if here is None:
                return None, ("a CUDA capsule's fingerprint covers the GPU architecture; this "
                              "machine has no native CUDA runtime to recompute it")
            if there != here:
                return None, (f"the record was made on {there}, this machine has {here}: its "
                              "fingerprint would cover another architecture")
        if name not in self._fingerprints:
            import conformance.fingerprint
            self._fingerprints[name] = conformance.fingerprint.fingerprint(capsule,
                                                                           handler)["value"]
        return self._fingerprints[name], "this checkout (conformance.fingerprint.fingerprint)"

    def earned(self, record: dict) -> tuple[str | None, str]:
        from conformance.trust import earned_for
        name = record["capsule"]["name"]
        if name not in self._reg:
            return None, "not a registered capsule of this checkout"
        capsule, handler = self._reg.get(name)
        # No test evidence and no guard verdict here: at most `fuzzed` (the builder says so).
        label, why = earned_for(record, capsule, handler)[:2]
        return label, why


class FixedBuild:
    """A build described by plain data: capsule records, name -> fingerprint, name -> earned."""

    def __init__(self, registered: list[dict], fingerprints: dict[str, str],
                 earned: dict[str, str | None] | None = None) -> None:
        self._registered = registered
        self._fingerprints = fingerprints
        self._earned = earned or {}

    @classmethod
    def from_file(cls, path) -> "FixedBuild":
        """{registered: [...], fingerprints: {...}, earned: {...}} as JSON."""
        import json
        from pathlib import Path
        doc = json.loads(Path(path).read_text())
        return cls(doc["registered"], doc["fingerprints"], doc.get("earned"))

    def registered(self) -> list[dict]:
        return list(self._registered)

    def fingerprint(self, name: str, environment: dict) -> tuple[str | None, str]:
        if name in self._fingerprints:
            return self._fingerprints[name], "the given build"
        return None, "no fingerprint given for this capsule"

    def earned(self, record: dict) -> tuple[str | None, str]:
        name = record["capsule"]["name"]
        return self._earned.get(name), "the given build"
